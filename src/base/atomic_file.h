// WriteFileAtomically: writes a small file through PATH.tmp and a rename, so a reader (a
// restarted agent, a shim, a test waiting for a port file) sees the old content or the
// new, never half of it. Not synced to disk: a crash may lose the write, not tear it.
// Thread-safety: as the file system's; one writer per path.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

namespace gantry {

// False when the file could not be written or renamed (the old content stays).
inline bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << text) || !out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace gantry
