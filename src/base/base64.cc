#include "base/base64.h"

#include <openssl/evp.h>

#include <cctype>

namespace gantry {

std::string Base64Encode(std::string_view bytes) {
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  for (char c : text) {
    if (c != '\n' && c != '\r' && c != ' ') clean += c;
  }
  if (clean.size() % 4 != 0) return std::nullopt;
  // The alphabet, with '=' only as the last one or two, checked here: EVP_DecodeBlock
  // reads '=' anywhere as zero bits, and skips blanks and '-' (PEM's) at either end.
  size_t pad = 0;
  while (pad < clean.size() && clean[clean.size() - 1 - pad] == '=') ++pad;
  if (pad > 2) return std::nullopt;
  for (size_t i = 0; i + pad < clean.size(); ++i) {
    const char c = clean[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/') return std::nullopt;
  }
  std::string out(clean.size() / 4 * 3 + 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(clean.data()),
                                static_cast<int>(clean.size()));
  if (n < 0) return std::nullopt;
  out.resize(static_cast<size_t>(n) - pad);  // EVP_DecodeBlock counts the padding as zeros
  return out;
}

}  // namespace gantry
