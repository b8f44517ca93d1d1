#include "sim/convert/line_reader.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace gantry::convert {

LineReader::~LineReader() {
  if (file_ != nullptr) gzclose(static_cast<gzFile>(file_));
}

Status LineReader::Open(const std::string& path) {
  path_ = path;
  file_ = gzopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    return Error{"", path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "zlib error")};
  }
  gzbuffer(static_cast<gzFile>(file_), 256 * 1024);
  return Ok{};
}

bool LineReader::Next(std::string& line) {
  line.clear();
  if (file_ == nullptr) return false;
  char buf[8192];
  bool any = false;
  while (gzgets(static_cast<gzFile>(file_), buf, sizeof buf) != nullptr) {
    any = true;
    const size_t n = std::strlen(buf);
    if (n > 0 && buf[n - 1] == '\n') {
      line.append(buf, n - 1);
      break;
    }
    line.append(buf, n);  // a long line: keep reading it
  }
  if (!any) {
    int code = 0;
    const char* msg = gzerror(static_cast<gzFile>(file_), &code);
    if (code != Z_OK && code != Z_STREAM_END) error_ = path_ + ": read error: " + msg;
    return false;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_;
  return true;
}

std::vector<std::string_view> SplitFields(std::string_view line, char delim) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = line.find(delim, start);
    if (at == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, at - start));
    start = at + 1;
  }
}

namespace {
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  // strtod wants a terminated string; fields are short.
  std::string text(s);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || v != v) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Error{"", path + ": cannot open: " + std::strerror(errno)};
  std::string out;
  char buf[65536];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      gzclose(f);
      return Error{"", path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB"};
    }
  }
  int code = 0;
  std::string msg = n < 0 ? gzerror(f, &code) : "";
  gzclose(f);
  if (n < 0) return Error{"", path + ": read error: " + msg};
  return out;
}

std::string Where(const LineReader& in) {
  return in.path() + ":" + std::to_string(in.line_number());
}

}  // namespace gantry::convert
