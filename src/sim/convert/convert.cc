#include "sim/convert/convert.h"

namespace gantry::convert {

const char* const kHeliosUnavailable =
    "helios: the Helios job logs (HeliosData data.zip, 3.36M jobs) are not in the public "
    "snapshot; /work/shared/traces/helios-artifact-aggregates holds only per-cluster and "
    "per-VC aggregate time series, which carry no jobs to replay (see docs/traces.md)";

const std::vector<std::string>& Formats() {
  static const std::vector<std::string> kFormats = {"openb", "philly",   "gavel",      "pollux",
                                                    "sia",   "tiresias", "kubernetes", "helios"};
  return kFormats;
}

Result<ConvertSummary> Convert(const ConvertOptions& o) {
  if (o.out.empty())
    return Error{"--out", "required: the folder to write cluster.yaml and trace.jsonl to"};
  if (o.limit < 0) return Error{"--limit", "must be at least 0"};
  if (o.nodes < 0) return Error{"--nodes", "must be at least 0"};
  if (o.fill != 0 && o.format != "openb")
    return Error{"--fill", "only the openb format has a fill mode"};
  if (o.format == "openb") return ConvertOpenb(o);
  if (o.format == "philly") return ConvertPhilly(o);
  if (o.format == "gavel") return ConvertGavel(o);
  if (o.format == "pollux") return ConvertPollux(o, false);
  if (o.format == "sia") return ConvertPollux(o, true);
  if (o.format == "tiresias") return ConvertTiresias(o);
  if (o.format == "kubernetes") return ConvertKubernetes(o);
  if (o.format == "helios") return Error{"--format", kHeliosUnavailable};
  std::string known;
  for (const std::string& f : Formats()) {
    if (!known.empty()) known += ", ";
    known += f;
  }
  return Error{"--format", "unknown format \"" + o.format + "\" (known: " + known + ")"};
}

}  // namespace gantry::convert
