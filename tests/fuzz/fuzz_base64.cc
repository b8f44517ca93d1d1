// Fuzzes Base64Decode (base/base64.h), which reads a step's standard input from srun's
// request: any text either decodes to what encodes back to the same characters (less the
// skipped line breaks and blanks; the padding's spare bits aside), or is refused; and
// every byte string comes back from its encoding. Nothing may crash or throw.
#include <cstdint>
#include <string>
#include <string_view>

#include "base/base64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gantry::Base64Decode;
  using gantry::Base64Encode;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (Base64Decode(Base64Encode(text)) != std::string(text)) __builtin_trap();
  const std::optional<std::string> bytes = Base64Decode(text);
  if (!bytes) return 0;
  std::string clean;
  for (char c : text) {
    if (c != '\n' && c != '\r' && c != ' ') clean += c;
  }
  const std::string again = Base64Encode(*bytes);
  if (again.size() != clean.size()) __builtin_trap();  // padding read as padding only
  // The same characters but for the last one before the padding, whose spare low bits
  // the encoding leaves zero.
  const size_t pad = clean.size() - clean.find_last_not_of('=') - 1;
  const size_t same = clean.size() - (pad > 0 ? pad + 1 : 0);
  if (again.compare(0, same, clean, 0, same) != 0) __builtin_trap();
  return 0;
}
