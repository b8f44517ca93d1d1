// UrlEncode: percent-encodes a string for a URL path segment or query value (RFC 3986
// unreserved characters pass through). Shared by the agent and the CLI's HTTP clients.
// Thread-safety: pure function.
#pragma once

#include <cctype>
#include <string>

namespace gantry {

inline std::string UrlEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace gantry
