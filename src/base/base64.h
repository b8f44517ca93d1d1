// Base64 (RFC 4648, with padding), through OpenSSL's EVP encoder and decoder: a step's
// standard input crosses JSON this way (srun, gantryd, gantry-agent), and a kubeconfig's
// *-data fields are written so.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gantry {

std::string Base64Encode(std::string_view bytes);
// nullopt when `text` is not base64 (line breaks and blanks are skipped, as in PEM).
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace gantry
