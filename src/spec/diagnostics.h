// Diagnostics: every problem found in input files, with file, line and field.
//
// Readers keep going after a problem so a user sees all of them at once; the caller
// prints them and exits with status 2. Format: "FILE:LINE: FIELD: MESSAGE".
// Thread-safety: not thread-safe; one per reader call.
#pragma once

#include <string>
#include <vector>

namespace gantry::spec {

struct Diag {
  std::string file;
  int line = 0;       // 1-based; 0 when the problem is about the whole file
  std::string field;  // dotted path, e.g. "pools[h100].gpus"; may be empty
  std::string message;

  std::string ToString() const;
};

class Diagnostics {
 public:
  void Add(std::string file, int line, std::string field, std::string message);
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  const std::vector<Diag>& items() const { return items_; }
  std::string ToString() const;  // one line per problem
  // Orders the problems from index `first` on by line, keeping the order of equal lines
  // (readers collect by section; users read top to bottom).
  void SortByLine(size_t first = 0);

 private:
  std::vector<Diag> items_;
};

}  // namespace gantry::spec
