#include "spec/read_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace gantry::spec {

std::optional<std::string> ReadWholeFile(const std::string& path, Diagnostics& diags) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.Add(path, 0, "",
              std::string("cannot open: ") + (errno != 0 ? std::strerror(errno) : "unknown error"));
    return std::nullopt;
  }
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSpecFileBytes) {
      diags.Add(path, 0, "",
                "file is larger than " + std::to_string(kMaxSpecFileBytes >> 20) +
                    " MB; this is not a config or job spec");
      return std::nullopt;
    }
  }
  if (in.bad()) {
    diags.Add(path, 0, "", "cannot read the file");
    return std::nullopt;
  }
  return text;
}

}  // namespace gantry::spec
