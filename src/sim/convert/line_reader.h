// LineReader: reads a text file line by line, gzip-compressed or plain, through zlib.
//
// zlib's gzopen/gzgets read plain files unchanged, so one reader serves `.csv` and
// `.csv.gz` alike. Memory is one line (a longer line grows the buffer), never the file.
// Lines come without their end-of-line characters ("\n" or "\r\n"). Also: field
// splitting for the simple CSV and TSV files of the public traces (no quoting).
// Thread-safety: a LineReader is single-threaded; the functions are stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gantry::convert {

class LineReader {
 public:
  LineReader() = default;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // Opens `path`; the error names the file.
  Status Open(const std::string& path);
  // The next line into `line`; false at the end of the file or on a read error
  // (then error() says which).
  bool Next(std::string& line);
  int line_number() const { return line_; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  void* file_ = nullptr;  // gzFile, kept opaque so users need not include zlib.h
  std::string path_;
  std::string error_;
  int line_ = 0;
};

// Splits on `delim`; empty fields are kept ("a,,b" -> {"a", "", "b"}).
std::vector<std::string_view> SplitFields(std::string_view line, char delim);

// Whole-field number parsing: nothing but the number (surrounding blanks allowed).
std::optional<double> ParseDouble(std::string_view s);
std::optional<int64_t> ParseInt(std::string_view s);

// Reads a whole (possibly gzip-compressed) file: only for small tables such as a
// throughput profile, never for a trace. Fails above `max_bytes`.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 64u << 20);

// "prefix: FILE:LINE: message" style location for problems in a source row.
std::string Where(const LineReader& in);

}  // namespace gantry::convert
