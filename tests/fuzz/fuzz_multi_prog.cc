// Fuzzes srun --multi-prog files (spec::MultiProg): the first byte sets the step's task
// count (0-63), the rest is the file. Accepted files give every task a program and the
// refusals name the file; nothing may crash or throw.
#include <cstdint>
#include <string>
#include <string_view>

#include "spec/multi_prog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gantry::spec::MultiProg;
  if (size == 0) return 0;
  const int ntasks = data[0] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string error;
  const std::optional<MultiProg> m = MultiProg::Parse(text, ntasks, "f.conf", error);
  if (!m) {
    if (error.find("f.conf") == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!error.empty()) __builtin_trap();
  for (int t = 0; t < ntasks; ++t) {
    if (m->ArgvFor(t, {"x"}).size() < 2) __builtin_trap();  // a program, then srun's word
  }
  if (!m->ArgvFor(ntasks, {}).empty()) __builtin_trap();
  return 0;
}
