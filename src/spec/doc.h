// Doc: a JSON or YAML value that remembers its line, so one decoder serves both.
//
// JSON (trace lines, API bodies) is read with nlohmann's SAX parser and YAML (cluster
// configs, job files) with yaml-cpp; both become the same small tree. YAML scalars are
// untyped text (`yaml` set, kind kString): a decoder may read "2" as a number or "yes"
// as a bool. JSON values keep their types, so a JSON "2" is a string, not a number.
// Maps keep their entries in document order, duplicates included (decoders report them).
// Parsing never throws: problems become diagnostics and the result is empty. Nesting
// and size are bounded (kMaxDepth, kMaxValues) so hostile input (deep nesting, YAML
// alias bombs) costs little.
// Thread-safety: plain values; the functions are stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/diagnostics.h"

namespace gantry::spec {

struct DocEntry;

struct Doc {
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kList, kMap };

  static constexpr int kMaxDepth = 64;
  static constexpr size_t kMaxValues = 200'000;  // after expanding YAML aliases

  Kind kind = Kind::kNull;
  bool yaml = false;              // a YAML scalar: untyped text in `text`
  bool boolean = false;           // kBool
  double number = 0;              // kNumber
  std::string text;               // kString: the string; kNumber: the number as written
  int line = 0;                   // 1-based line the value starts on
  std::vector<Doc> items;         // kList
  std::vector<DocEntry> entries;  // kMap, in document order

  bool is_map() const { return kind == Kind::kMap; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const {
    return kind != Kind::kList && kind != Kind::kMap && kind != Kind::kNull;
  }
};

struct DocEntry {
  std::string key;
  int line = 0;  // the key's line
  Doc value;
};

// Parses one JSON value; its first line is numbered `first_line` (a trace line's number).
// Problems ("not valid JSON: ...") go to diags labelled `file`.
std::optional<Doc> ParseJson(std::string_view text, const std::string& file, int first_line,
                             Diagnostics& diags);

// Parses a YAML stream holding at most one document (an empty stream is a null Doc).
std::optional<Doc> ParseYaml(std::string_view text, const std::string& file, Diagnostics& diags);

// The value as a message quotes it: "\"abc\"", "-2", "true", "null", "a list", "a mapping".
std::string Describe(const Doc& v);

// A string quoted for messages (escaped, long ones shortened).
std::string Quote(std::string_view s);

}  // namespace gantry::spec
