// JSON (nlohmann SAX) and YAML (yaml-cpp) into Doc trees with line numbers.

#include "spec/doc.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstddef>
#include <exception>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace gantry::spec {
namespace {

// --- JSON -------------------------------------------------------------------------

// Where the JSON lexer is. nlohmann's SAX events carry no positions, so the parser
// reads through an iterator that counts lines; an event's line is the line of the last
// character read (a value's last character, or the one just after a number, which is on
// the same line even when it is the newline).
struct LineState {
  int next_line = 1;       // line of the next character
  int last_read_line = 1;  // line of the character read last
};

class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator() = default;
  CountingIterator(const char* p, LineState* state) : p_(p), state_(state) {}

  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    state_->last_read_line = state_->next_line;
    if (*p_ == '\n') ++state_->next_line;
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  LineState* state_ = nullptr;
};

// Builds a Doc from SAX events. Containers being filled are on `stack_`; a pointer to
// one stays valid because only the innermost container grows.
class JsonBuilder {
 public:
  using json = nlohmann::json;

  explicit JsonBuilder(const LineState* state) : state_(state) {}

  bool null() { return Add(Doc{}) != nullptr; }
  bool boolean(bool b) {
    Doc v;
    v.kind = Doc::Kind::kBool;
    v.boolean = b;
    return Add(std::move(v)) != nullptr;
  }
  bool number_integer(json::number_integer_t n) {
    return Number(static_cast<double>(n), std::to_string(n));
  }
  bool number_unsigned(json::number_unsigned_t n) {
    return Number(static_cast<double>(n), std::to_string(n));
  }
  bool number_float(json::number_float_t n, const std::string& text) { return Number(n, text); }
  bool string(std::string& s) {
    Doc v;
    v.kind = Doc::Kind::kString;
    v.text = std::move(s);
    return Add(std::move(v)) != nullptr;
  }
  bool binary(json::binary_t& /*unused*/) {
    error_ = "binary values are not JSON";
    return false;
  }
  bool start_object(std::size_t /*unused*/) { return Open(Doc::Kind::kMap); }
  bool key(std::string& k) {
    key_ = std::move(k);
    key_line_ = state_->last_read_line;
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*unused*/) { return Open(Doc::Kind::kList); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    error_ = CleanMessage(ex.what());
    return false;
  }

  Doc& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  bool Number(double n, std::string text) {
    if (!std::isfinite(n)) {
      error_ = "number " + text + " is out of range";
      return false;
    }
    Doc v;
    v.kind = Doc::Kind::kNumber;
    v.number = n;
    v.text = std::move(text);
    return Add(std::move(v)) != nullptr;
  }

  bool Open(Doc::Kind kind) {
    if (stack_.size() >= static_cast<size_t>(Doc::kMaxDepth)) {
      error_ = "nested deeper than " + std::to_string(Doc::kMaxDepth) + " levels";
      return false;
    }
    Doc v;
    v.kind = kind;
    Doc* added = Add(std::move(v));
    if (added == nullptr) return false;
    stack_.push_back(added);
    return true;
  }

  Doc* Add(Doc v) {
    v.line = state_->last_read_line;
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Doc* top = stack_.back();
    if (top->kind == Doc::Kind::kList) {
      top->items.push_back(std::move(v));
      return &top->items.back();
    }
    top->entries.push_back(DocEntry{std::move(key_), key_line_, std::move(v)});
    key_.clear();
    return &top->entries.back().value;
  }

  // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
  // -> "syntax error ... (column 5)": our own line numbers replace nlohmann's.
  static std::string CleanMessage(std::string what) {
    if (size_t close = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what.erase(0, close + 2);
    }
    const std::string at = "parse error at line ";
    if (what.rfind(at, 0) == 0) {
      size_t col = what.find(", column ");
      size_t colon = what.find(": ");
      if (col != std::string::npos && colon != std::string::npos && col < colon) {
        std::string column = what.substr(col + 9, colon - col - 9);
        return what.substr(colon + 2) + " (column " + column + ")";
      }
    }
    return what;
  }

  const LineState* state_;
  Doc root_;
  std::vector<Doc*> stack_;
  std::string key_;
  int key_line_ = 0;
  std::string error_;
};

// --- YAML -------------------------------------------------------------------------

// Builds a Doc straight from yaml-cpp's parser events rather than through YAML::Node:
// line numbers come with every event, anchors and aliases are expanded under the value
// limit (an alias bomb stops early), and a document is read one at a time (YAML::LoadAll
// never returns on a stray top-level ',' in yaml-cpp 0.7).
struct YamlAbort {
  int line;
  std::string message;
};

class YamlBuilder : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& /*mark*/) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Doc v;
    v.line = Line(mark);
    Place(std::move(v), anchor, mark);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      throw YamlAbort{Line(mark), "an alias refers to an anchor that is not complete yet"};
    }
    Count(mark, it->second.second);
    Doc copy = it->second.first;
    Place(std::move(copy), 0, mark, /*counted=*/true);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                const std::string& value) override {
    Frame* top = stack_.empty() ? nullptr : &stack_.back();
    if (top != nullptr && top->doc->is_map() && !top->have_key) {
      top->key = value;
      top->key_line = Line(mark);
      top->have_key = true;
      if (anchor != 0) anchors_[anchor] = {ScalarDoc(mark, value), 1};
      return;
    }
    Place(ScalarDoc(mark, value), anchor, mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor, Doc::Kind::kList);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor, Doc::Kind::kMap);
  }
  void OnMapEnd() override { Close(); }

  bool has_root() const { return has_root_; }
  Doc& root() { return root_; }

 private:
  struct Frame {
    Doc* doc;
    YAML::anchor_t anchor;
    size_t values_before;  // values_ when the container opened, for its anchor's size
    std::string key;
    int key_line = 0;
    bool have_key = false;
  };

  static int Line(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

  static Doc ScalarDoc(const YAML::Mark& mark, const std::string& value) {
    Doc v;
    v.kind = Doc::Kind::kString;
    v.yaml = true;
    v.text = value;
    v.line = Line(mark);
    return v;
  }

  void Count(const YAML::Mark& mark, size_t n) {
    values_ += n;
    if (values_ > Doc::kMaxValues) {
      throw YamlAbort{Line(mark), "more than " + std::to_string(Doc::kMaxValues) +
                                      " values (after expanding aliases)"};
    }
  }

  // Puts a finished value where the parser is: the root, a list item or a map value.
  Doc* Place(Doc v, YAML::anchor_t anchor, const YAML::Mark& mark, bool counted = false) {
    if (!counted) Count(mark, 1);
    if (anchor != 0 && !v.is_map() && !v.is_list()) anchors_[anchor] = {v, 1};
    if (stack_.empty()) {
      root_ = std::move(v);
      has_root_ = true;
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.doc->is_list()) {
      top.doc->items.push_back(std::move(v));
      return &top.doc->items.back();
    }
    if (!top.have_key) {
      // A null, alias, list or mapping in key position.
      throw YamlAbort{v.line, "a mapping key must be a plain string"};
    }
    top.have_key = false;
    top.doc->entries.push_back(DocEntry{std::move(top.key), top.key_line, std::move(v)});
    return &top.doc->entries.back().value;
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, Doc::Kind kind) {
    if (stack_.size() >= static_cast<size_t>(Doc::kMaxDepth)) {
      throw YamlAbort{Line(mark),
                      "nested deeper than " + std::to_string(Doc::kMaxDepth) + " levels"};
    }
    Doc v;
    v.kind = kind;
    v.line = Line(mark);
    const size_t before = values_;
    Doc* placed = Place(std::move(v), 0, mark);
    stack_.push_back(Frame{placed, anchor, before, {}, 0, false});
  }

  void Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    if (frame.anchor != 0) anchors_[frame.anchor] = {*frame.doc, values_ - frame.values_before};
  }

  Doc root_;
  bool has_root_ = false;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, std::pair<Doc, size_t>> anchors_;  // value and its size in values
  size_t values_ = 0;
};

}  // namespace

std::optional<Doc> ParseJson(std::string_view text, const std::string& file, int first_line,
                             Diagnostics& diags) {
  LineState state{first_line, first_line};
  JsonBuilder builder(&state);
  bool ok = false;
  std::string error;
  try {
    ok = nlohmann::json::sax_parse(CountingIterator(text.data(), &state),
                                   CountingIterator(text.data() + text.size(), &state), &builder);
    error = builder.error();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown error";
  }
  if (!ok) {
    diags.Add(file, state.last_read_line, "",
              "not valid JSON: " + (error.empty() ? std::string("parse failed") : error));
    return std::nullopt;
  }
  return std::move(builder.root());
}

std::optional<Doc> ParseYaml(std::string_view text, const std::string& file, Diagnostics& diags) {
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    YamlBuilder builder;
    if (!parser.HandleNextDocument(builder)) {
      Doc empty;  // nothing but comments and blank lines
      empty.line = 1;
      return empty;
    }
    YamlBuilder rest;
    if (parser.HandleNextDocument(rest)) {
      const int line = rest.has_root() ? rest.root().line : 0;
      diags.Add(file, line, "",
                "unexpected content after the YAML document (a second document, or a "
                "stray ',' or ']'); a file holds one document");
      return std::nullopt;
    }
    if (!builder.has_root()) {
      Doc empty;
      empty.line = 1;
      return empty;
    }
    return std::move(builder.root());
  } catch (const YamlAbort& e) {
    diags.Add(file, e.line, "", e.message);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    std::string message = "not valid YAML: " + e.msg;
    if (e.mark.column >= 0) message += " (column " + std::to_string(e.mark.column + 1) + ")";
    diags.Add(file, line, "", std::move(message));
  } catch (const std::exception& e) {
    diags.Add(file, 0, "", std::string("not valid YAML: ") + e.what());
  } catch (...) {
    diags.Add(file, 0, "", "not valid YAML");
  }
  return std::nullopt;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 60;
  std::string out = "\"";
  size_t shown = 0;
  for (char c : s) {
    if (shown++ == kMaxShown) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Describe(const Doc& v) {
  switch (v.kind) {
    case Doc::Kind::kNull:
      return "null";
    case Doc::Kind::kBool:
      return v.boolean ? "true" : "false";
    case Doc::Kind::kNumber:
      return v.text;
    case Doc::Kind::kString:
      return Quote(v.text);
    case Doc::Kind::kList:
      return "a list";
    case Doc::Kind::kMap:
      return "a mapping";
  }
  return "?";
}

}  // namespace gantry::spec
