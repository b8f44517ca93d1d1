// Overrides of a cluster config for what-if runs (`gantry compare --set`): "path=value"
// pairs separated by ';', where a path walks the YAML by keys and picks list items by
// their `name` (`pools.h100.count=12`, `queues.nlp.guaranteed_gpus=16`,
// `policy.backfill_depth=20`, `pools.a100.sharing=[mig, mps]`). A value is YAML (a number,
// a string, a flow list or map). The result is YAML text for the config reader, which
// checks it as any config.
// Thread-safety: stateless function.
#pragma once

#include <string>

#include "base/result.h"

namespace gantry::spec {

// `yaml` with `overrides` applied. A missing mapping key on the way is added (`policy.`
// on a config without a policy section; a mistyped key then fails in the config reader,
// which names it); a list item that no `name` matches is an error naming the pair and the
// segment (Error::field is "--set").
Result<std::string> ApplyOverrides(const std::string& yaml, const std::string& overrides);

}  // namespace gantry::spec
