// Fuzzes the node protocol's decoders (proto/node.h) with any bytes: each gives a value or
// an error that names a field, never a crash or a throw; a value encodes and decodes back
// to itself, so what a server accepts it would also write.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "proto/node.h"

namespace {

bool SameWorkers(const gantry::proto::WatchAnswer& a, const gantry::proto::WatchAnswer& b) {
  if (a.instance != b.instance || a.epoch != b.epoch || a.version != b.version ||
      a.workers.size() != b.workers.size())
    return false;
  for (size_t i = 0; i < a.workers.size(); ++i) {
    if (!(*a.workers[i] == *b.workers[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto h = proto::ParseHeartbeat(text)) {
    auto again = proto::ParseHeartbeat(proto::Encode(*h).dump());
    if (!again || !(*again == *h)) __builtin_trap();
  } else if (h.error().message.empty()) {
    __builtin_trap();
  }
  if (auto r = proto::ParseHeartbeatReply(text)) {
    auto again = proto::ParseHeartbeatReply(proto::Encode(*r).dump());
    if (!again || !SameWorkers(again->answer, r->answer) ||
        again->heartbeat_ms != r->heartbeat_ms || again->lease_ms != r->lease_ms ||
        again->node_timeout_ms != r->node_timeout_ms)
      __builtin_trap();
  }
  if (auto a = proto::ParseWatchAnswer(text)) {
    auto again = proto::ParseWatchAnswer(proto::Encode(*a).dump());
    if (!again || !SameWorkers(*again, *a)) __builtin_trap();
  }
  (void)proto::DecodeRefusal(std::string(text));
  return 0;
}
