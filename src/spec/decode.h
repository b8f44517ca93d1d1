// Decoding helpers shared by the config and job readers: typed fields out of a Doc map,
// every problem reported as "FILE:LINE: FIELD: MESSAGE" with the bad value.
//
// A Fields object walks one mapping. Typed getters return nullopt both when the field is
// absent (no report) and when it is wrong (reported, and bad(key) turns true so callers
// can skip checks that would only repeat the problem). Finish() reports unknown and
// duplicate keys. Text from YAML is untyped: "2" reads as a number, "yes" as a bool;
// JSON keeps its types.
// Thread-safety: not thread-safe; one per reader call.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/diagnostics.h"
#include "spec/doc.h"

namespace gantry::spec {

// The largest values the readers take (far beyond any machine or run).
inline constexpr double kMaxSeconds = 1e12;
inline constexpr double kMaxGb = 1e9;  // per node, GPU model or job
inline constexpr double kMaxCpus = 1e6;

// Bounds for a number field. `min_open`: the minimum itself is not allowed.
struct Range {
  double min = 0;
  bool min_open = false;
  double max = 1e15;
};

class Decoder {
 public:
  Decoder(std::string file, Diagnostics& diags) : file_(std::move(file)), diags_(diags) {}

  const std::string& file() const { return file_; }
  void Report(int line, std::string field, std::string message);
  size_t reported() const { return reported_; }

  // Typed reads of a value; a wrong type is reported as "expected a number, got \"abc\"".
  std::optional<std::string> String(const Doc& v, int line, const std::string& field);
  std::optional<double> Number(const Doc& v, int line, const std::string& field, Range range);
  std::optional<int64_t> Integer(const Doc& v, int line, const std::string& field, int64_t min,
                                 int64_t max);
  std::optional<bool> Bool(const Doc& v, int line, const std::string& field);

  // The number a value holds, without reporting: JSON numbers, YAML text that reads as a
  // finite decimal number.
  static std::optional<double> AsNumber(const Doc& v);

 private:
  std::string file_;
  Diagnostics& diags_;
  size_t reported_ = 0;
};

class Fields {
 public:
  // `prefix` is the path of the map ("" at the top, "pools[h100]", "window").
  Fields(Decoder& decoder, const Doc& map, std::string prefix,
         std::initializer_list<std::string_view> known);

  std::string Path(std::string_view key) const;
  int Line(std::string_view key) const;  // the key's line, or the map's when absent
  int map_line() const { return map_.line; }
  const Doc* Get(std::string_view key) const;  // first entry with `key`, or nullptr
  bool has(std::string_view key) const { return Get(key) != nullptr; }
  bool bad(std::string_view key) const;
  void MarkBad(std::string_view key) { bad_.emplace_back(key); }
  void Report(std::string_view key, std::string message);

  std::optional<std::string> String(std::string_view key);
  std::optional<double> Number(std::string_view key, Range range);
  std::optional<int64_t> Integer(std::string_view key, int64_t min, int64_t max);
  std::optional<bool> Bool(std::string_view key);
  // A list field: nullptr when absent or null; reported when not a list.
  const Doc* List(std::string_view key);
  // A string field with one of `choices`; reported as "must be one of a, b, got \"x\"".
  std::optional<std::string> Choice(std::string_view key,
                                    std::initializer_list<std::string_view> choices);

  // Marks a key outside `known` as dealt with by the caller, so Finish() skips it.
  void Handled(std::string_view key) { handled_.emplace_back(key); }

  // Reports keys not in `known` (with a suggestion) and repeated keys.
  void Finish();

 private:
  Decoder& d_;
  const Doc& map_;
  std::string prefix_;
  std::vector<std::string_view> known_;
  std::vector<std::string> bad_;
  std::vector<std::string> handled_;
};

// "name" when a list item is a mapping with a non-empty string `name`, else its index:
// how `pools[h100]` and `queues[2]` paths name items.
std::string ItemKey(const Doc& item, size_t index);

// Seconds (decimal) to milliseconds, rounded.
int64_t SecondsToTicks(double seconds);

}  // namespace gantry::spec
