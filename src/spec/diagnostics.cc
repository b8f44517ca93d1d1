#include "spec/diagnostics.h"

#include <algorithm>
#include <utility>

namespace gantry::spec {

std::string Diag::ToString() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line);
  out += ": ";
  if (!field.empty()) out += field + ": ";
  out += message;
  return out;
}

void Diagnostics::Add(std::string file, int line, std::string field, std::string message) {
  items_.push_back(Diag{std::move(file), line, std::move(field), std::move(message)});
}

std::string Diagnostics::ToString() const {
  std::string out;
  for (const Diag& d : items_) out += d.ToString() + "\n";
  return out;
}

void Diagnostics::SortByLine(size_t first) {
  if (first >= items_.size()) return;
  std::stable_sort(items_.begin() + static_cast<std::ptrdiff_t>(first), items_.end(),
                   [](const Diag& a, const Diag& b) { return a.line < b.line; });
}

}  // namespace gantry::spec
