#include "spec/decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

namespace gantry::spec {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Edit distance, for "did you mean" on unknown fields.
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string Bound(double x) { return fmt::format("{}", x); }

}  // namespace

void Decoder::Report(int line, std::string field, std::string message) {
  ++reported_;
  diags_.Add(file_, line, std::move(field), std::move(message));
}

std::optional<double> Decoder::AsNumber(const Doc& v) {
  if (v.kind == Doc::Kind::kNumber) return v.number;
  if (!v.yaml || v.text.empty()) return std::nullopt;
  std::string_view t = v.text;
  if (t.front() == '+') t.remove_prefix(1);
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t.front())) || t.front() == '-' ||
                     t.front() == '.')) {
    return std::nullopt;  // from_chars would take "inf" and "nan"
  }
  double x = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}

std::optional<std::string> Decoder::String(const Doc& v, int line, const std::string& field) {
  if (v.kind == Doc::Kind::kString) return v.text;
  Report(line, field, "expected a string, got " + Describe(v));
  return std::nullopt;
}

std::optional<double> Decoder::Number(const Doc& v, int line, const std::string& field,
                                      Range range) {
  std::optional<double> x = AsNumber(v);
  if (!x) {
    Report(line, field, "expected a number, got " + Describe(v));
    return std::nullopt;
  }
  if (range.min_open ? !(*x > range.min) : !(*x >= range.min)) {
    Report(line, field,
           std::string(range.min_open ? "must be above " : "must be at least ") + Bound(range.min) +
               ", got " + v.text);
    return std::nullopt;
  }
  if (*x > range.max) {
    Report(line, field, "must be at most " + Bound(range.max) + ", got " + v.text);
    return std::nullopt;
  }
  return x;
}

std::optional<int64_t> Decoder::Integer(const Doc& v, int line, const std::string& field,
                                        int64_t min, int64_t max) {
  std::optional<double> x = AsNumber(v);
  if (!x) {
    Report(line, field, "expected a whole number, got " + Describe(v));
    return std::nullopt;
  }
  if (std::floor(*x) != *x) {
    Report(line, field, "must be a whole number, got " + v.text);
    return std::nullopt;
  }
  if (*x < static_cast<double>(min)) {
    Report(line, field, "must be at least " + std::to_string(min) + ", got " + v.text);
    return std::nullopt;
  }
  if (*x > static_cast<double>(max)) {
    Report(line, field, "must be at most " + std::to_string(max) + ", got " + v.text);
    return std::nullopt;
  }
  return static_cast<int64_t>(*x);
}

std::optional<bool> Decoder::Bool(const Doc& v, int line, const std::string& field) {
  if (v.kind == Doc::Kind::kBool) return v.boolean;
  if (v.yaml) {
    const std::string t = Lower(v.text);
    if (t == "true" || t == "yes" || t == "on") return true;
    if (t == "false" || t == "no" || t == "off") return false;
  }
  Report(line, field, "expected true or false, got " + Describe(v));
  return std::nullopt;
}

Fields::Fields(Decoder& decoder, const Doc& map, std::string prefix,
               std::initializer_list<std::string_view> known)
    : d_(decoder), map_(map), prefix_(std::move(prefix)), known_(known) {}

std::string Fields::Path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

const Doc* Fields::Get(std::string_view key) const {
  for (const DocEntry& e : map_.entries) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

int Fields::Line(std::string_view key) const {
  for (const DocEntry& e : map_.entries) {
    if (e.key == key) return e.line;
  }
  return map_.line;
}

bool Fields::bad(std::string_view key) const {
  return std::find(bad_.begin(), bad_.end(), key) != bad_.end();
}

void Fields::Report(std::string_view key, std::string message) {
  MarkBad(key);
  d_.Report(Line(key), Path(key), std::move(message));
}

std::optional<std::string> Fields::String(std::string_view key) {
  const Doc* v = Get(key);
  if (v == nullptr) return std::nullopt;
  auto r = d_.String(*v, Line(key), Path(key));
  if (!r) MarkBad(key);
  return r;
}

std::optional<double> Fields::Number(std::string_view key, Range range) {
  const Doc* v = Get(key);
  if (v == nullptr) return std::nullopt;
  auto r = d_.Number(*v, Line(key), Path(key), range);
  if (!r) MarkBad(key);
  return r;
}

std::optional<int64_t> Fields::Integer(std::string_view key, int64_t min, int64_t max) {
  const Doc* v = Get(key);
  if (v == nullptr) return std::nullopt;
  auto r = d_.Integer(*v, Line(key), Path(key), min, max);
  if (!r) MarkBad(key);
  return r;
}

std::optional<bool> Fields::Bool(std::string_view key) {
  const Doc* v = Get(key);
  if (v == nullptr) return std::nullopt;
  auto r = d_.Bool(*v, Line(key), Path(key));
  if (!r) MarkBad(key);
  return r;
}

const Doc* Fields::List(std::string_view key) {
  const Doc* v = Get(key);
  if (v == nullptr || v->is_null()) return nullptr;
  if (!v->is_list()) {
    Report(key, "expected a list, got " + Describe(*v));
    return nullptr;
  }
  return v;
}

std::optional<std::string> Fields::Choice(std::string_view key,
                                          std::initializer_list<std::string_view> choices) {
  std::optional<std::string> s = String(key);
  if (!s) return std::nullopt;
  for (std::string_view c : choices) {
    if (*s == c) return s;
  }
  std::string list;
  for (std::string_view c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  Report(key, "must be one of " + list + ", got " + Quote(*s));
  return std::nullopt;
}

void Fields::Finish() {
  constexpr int kMaxUnknownReported = 10;  // per mapping; a garbage line says enough with 10
  int unknown = 0;
  std::vector<int> first_line(known_.size(), 0);  // of each known key, 0 = not seen yet
  for (const DocEntry& e : map_.entries) {
    auto it = std::find(known_.begin(), known_.end(), e.key);
    if (it != known_.end()) {
      int& first = first_line[static_cast<size_t>(it - known_.begin())];
      if (first != 0) {
        d_.Report(e.line, Path(e.key), "given twice (first on line " + std::to_string(first) + ")");
      } else {
        first = std::max(e.line, 1);
      }
      continue;
    }
    if (std::find(handled_.begin(), handled_.end(), e.key) != handled_.end()) continue;
    if (++unknown > kMaxUnknownReported) continue;
    std::string_view best;
    if (e.key.size() <= 40) {
      size_t best_distance = 3;  // suggest only close misspellings
      const std::string lower = Lower(e.key);
      for (std::string_view k : known_) {
        const size_t dist = Distance(lower, k);
        if (dist < best_distance && dist < k.size()) {
          best = k;
          best_distance = dist;
        }
      }
    }
    std::string message = "unknown field";
    if (!best.empty()) {
      message += "; did you mean " + std::string(best) + "?";
    } else {
      std::string list;
      for (std::string_view k : known_) list += (list.empty() ? "" : ", ") + std::string(k);
      message += " (known: " + list + ")";
    }
    d_.Report(e.line, Path(e.key.size() > 60 ? e.key.substr(0, 60) + "..." : e.key), message);
  }
  if (unknown > kMaxUnknownReported) {
    d_.Report(map_.line, prefix_,
              "and " + std::to_string(unknown - kMaxUnknownReported) + " more unknown fields");
  }
}

std::string ItemKey(const Doc& item, size_t index) {
  if (item.is_map()) {
    for (const DocEntry& e : item.entries) {
      if (e.key == "name" && e.value.kind == Doc::Kind::kString && !e.value.text.empty()) {
        return e.value.text;
      }
    }
  }
  return std::to_string(index);
}

int64_t SecondsToTicks(double seconds) { return std::llround(seconds * 1000.0); }

}  // namespace gantry::spec
