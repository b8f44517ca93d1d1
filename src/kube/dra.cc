#include "kube/dra.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "kube/json_fields.h"
#include "kube/objects.h"

namespace gantry::kube {
namespace {

using nlohmann::json;
using namespace json_fields;  // NOLINT: Member, Str, StrMap, Obj, Arr

// A slice's attribute and capacity names: unqualified ones are the driver's.
std::string Qualified(const std::string& driver, const std::string& name) {
  return name.find('/') == std::string::npos ? driver + "/" + name : name;
}

std::string Show(const AttributeValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return "'" + std::get<std::string>(v) + "'";
}

// ------------------------------------------------------------------ CEL subset

struct Token {
  enum class Kind : uint8_t { kIdent, kString, kInt, kOp, kEnd } kind = Kind::kEnd;
  std::string text;
  int64_t number = 0;
  size_t column = 0;  // 1-based
};

Result<std::vector<Token>> Lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto fail = [&](const std::string& what) {
    return Error{"selector", "column " + std::to_string(i + 1) + ": " + what};
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.column = i + 1;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Token::Kind::kIdent;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_'))
        t.text += s[i++];
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '-' && i + 1 < s.size() &&
                std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      t.kind = Token::Kind::kInt;
      t.text += s[i++];
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) t.text += s[i++];
      if (t.text.size() > 18) return fail("number too long");
      t.number = std::stoll(t.text);
    } else if (c == '\'' || c == '"') {
      t.kind = Token::Kind::kString;
      ++i;
      while (i < s.size() && s[i] != c) {
        if (s[i] == '\\') return fail("escapes in strings are not supported");
        t.text += s[i++];
      }
      if (i == s.size()) return fail("unterminated string");
      ++i;
    } else {
      static const char* kOps[] = {"&&", "||", "==", "!=", "<=", ">=", "<", ">",
                                   "(",  ")",  "[",  "]",  ".",  ",",  "!"};
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (s.substr(i, o.size()) == o) {
          t.kind = Token::Kind::kOp;
          t.text = o;
          break;
        }
      }
      if (t.kind != Token::Kind::kOp) return fail(std::string("unexpected '") + c + "'");
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.column = s.size() + 1;
  out.push_back(end);
  return out;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<DeviceSelector::Expr> Parse() {
    auto e = Or();
    if (!e) return e.error();
    if (Peek().kind != Token::Kind::kEnd) return Expected("&&, || or the end");
    return e;
  }

 private:
  using Expr = DeviceSelector::Expr;
  const Token& Peek() const { return t_[pos_]; }
  bool IsOp(const char* op) const { return Peek().kind == Token::Kind::kOp && Peek().text == op; }
  bool IsIdent(const char* name) const {
    return Peek().kind == Token::Kind::kIdent && Peek().text == name;
  }
  Error Expected(const std::string& what) const {
    const Token& t = Peek();
    const std::string got = t.kind == Token::Kind::kEnd ? "the end" : "'" + t.text + "'";
    return Error{"selector",
                 "column " + std::to_string(t.column) + ": expected " + what + ", got " + got};
  }
  Status Take(const char* op) {
    if (!IsOp(op)) return Expected(std::string("'") + op + "'");
    ++pos_;
    return Ok{};
  }
  Result<std::string> TakeIdent() {
    if (Peek().kind != Token::Kind::kIdent) return Expected("a name");
    return t_[pos_++].text;
  }
  Result<std::string> TakeString() {
    if (Peek().kind != Token::Kind::kString) return Expected("a quoted string");
    return t_[pos_++].text;
  }

  // CEL's precedence: ! binds tightest, then &&, then ||. Nesting is bounded (a hostile
  // selector must not exhaust the stack).
  Result<Expr> Or() { return Joined("||", Expr::Kind::kOr); }
  Result<Expr> And() { return Joined("&&", Expr::Kind::kAnd); }
  Result<Expr> Joined(const char* op, Expr::Kind kind) {
    Expr joined;
    joined.kind = kind;
    while (true) {
      auto e = kind == Expr::Kind::kOr ? And() : Unary();
      if (!e) return e.error();
      joined.kids.push_back(std::move(*e));
      if (!IsOp(op)) break;
      ++pos_;
    }
    if (joined.kids.size() == 1) return std::move(joined.kids.front());
    return joined;
  }
  Result<Expr> Unary() {
    if (++depth_ > 64) return Expected("fewer nested parentheses and !");
    Result<Expr> e = Expr{};
    if (IsOp("!")) {
      ++pos_;
      auto inner = Unary();
      if (!inner) return inner.error();
      Expr n;
      n.kind = Expr::Kind::kNot;
      n.kids.push_back(std::move(*inner));
      e = std::move(n);
    } else if (IsOp("(")) {
      ++pos_;
      e = Or();
      if (e) {
        if (auto s = Take(")"); !s) e = s.error();
      }
    } else {
      auto term = Comparison();
      if (term) {
        Expr n;
        n.term = std::move(*term);
        e = std::move(n);
      } else {
        e = term.error();
      }
    }
    --depth_;
    return e;
  }

  Result<AttributeValue> Literal() {
    const Token& t = Peek();
    if (t.kind == Token::Kind::kString) {
      ++pos_;
      return AttributeValue(t.text);
    }
    if (t.kind == Token::Kind::kInt) {
      ++pos_;
      return AttributeValue(t.number);
    }
    if (IsIdent("true") || IsIdent("false")) {
      ++pos_;
      return AttributeValue(t.text == "true");
    }
    return Expected("a string, number, true or false");
  }

  Result<std::string> Operator() {
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (IsOp(op)) {
        ++pos_;
        return std::string(op);
      }
    }
    if (IsIdent("in")) {
      ++pos_;
      return std::string("in");
    }
    return Expected("==, !=, <, <=, >, >= or in");
  }

  Result<DeviceSelector::Term> Comparison() {
    DeviceSelector::Term term;
    if (!IsIdent("device")) return Expected("device.driver, device.attributes or device.capacity");
    ++pos_;
    if (auto s = Take("."); !s) return s.error();
    auto field = TakeIdent();
    if (!field) return field.error();
    if (*field == "driver") {
      term.lhs = DeviceSelector::Term::Lhs::kDriver;
    } else if (*field == "attributes" || *field == "capacity") {
      term.lhs = *field == "attributes" ? DeviceSelector::Term::Lhs::kAttribute
                                        : DeviceSelector::Term::Lhs::kCapacity;
      if (auto s = Take("["); !s) return s.error();
      auto domain = TakeString();
      if (!domain) return domain.error();
      if (auto s = Take("]"); !s) return s.error();
      if (auto s = Take("."); !s) return s.error();
      auto name = TakeIdent();
      if (!name) return name.error();
      term.key = *domain + "/" + *name;
    } else {
      --pos_;
      return Expected("driver, attributes or capacity");
    }
    if (term.lhs == DeviceSelector::Term::Lhs::kCapacity) return Capacity(std::move(term));
    auto op = Operator();
    if (!op) return op.error();
    term.op = *op;
    if (term.op == "in") {
      if (auto s = Take("["); !s) return s.error();
      while (true) {
        auto v = Literal();
        if (!v) return v.error();
        term.values.push_back(std::move(*v));
        if (IsOp("]")) break;
        if (auto s = Take(","); !s) return s.error();
      }
      ++pos_;
      return term;
    }
    const size_t column = Peek().column;
    auto v = Literal();
    if (!v) return v.error();
    if (term.op != "==" && term.op != "!=" && !std::holds_alternative<int64_t>(*v)) {
      return Error{"selector", "column " + std::to_string(column) + ": " + term.key + " " +
                                   term.op + " " + Show(*v) + ": only numbers are ordered"};
    }
    term.values.push_back(std::move(*v));
    return term;
  }

  // device.capacity['d'].name.compareTo(quantity('40Gi')) OP 0, .isGreaterThan(q), .isLessThan(q)
  Result<DeviceSelector::Term> Capacity(DeviceSelector::Term term) {
    if (auto s = Take("."); !s) return s.error();
    auto method = TakeIdent();
    if (!method) return method.error();
    if (*method != "compareTo" && *method != "isGreaterThan" && *method != "isLessThan") {
      --pos_;
      return Expected("compareTo, isGreaterThan or isLessThan");
    }
    if (auto s = Take("("); !s) return s.error();
    if (!IsIdent("quantity")) return Expected("quantity('...')");
    ++pos_;
    if (auto s = Take("("); !s) return s.error();
    auto text = TakeString();
    if (!text) return text.error();
    auto q = ParseQuantity(*text);
    if (!q) return Expected("a quantity such as '40Gi' (got '" + *text + "')");
    if (auto s = Take(")"); !s) return s.error();
    if (auto s = Take(")"); !s) return s.error();
    term.values.push_back(AttributeValue(*q));
    if (*method == "isGreaterThan") {
      term.op = ">";
    } else if (*method == "isLessThan") {
      term.op = "<";
    } else {
      auto op = Operator();
      if (!op) return op.error();
      if (*op == "in" || Peek().kind != Token::Kind::kInt || Peek().number != 0)
        return Expected("a comparison of compareTo(...) with 0");
      ++pos_;
      term.op = *op;
    }
    return term;
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

bool Compare(const AttributeValue& have, const std::string& op, const AttributeValue& want) {
  if (have.index() != want.index()) return op == "!=";
  if (op == "==") return have == want;
  if (op == "!=") return have != want;
  const auto* a = std::get_if<int64_t>(&have);
  const auto* b = std::get_if<int64_t>(&want);
  if (a == nullptr || b == nullptr) return false;
  if (op == "<") return *a < *b;
  if (op == "<=") return *a <= *b;
  if (op == ">") return *a > *b;
  return *a >= *b;
}

AttributeValue ValueOf(const json& v) {
  if (const json* i = Member(v, "int"); i != nullptr && i->is_number_integer())
    return AttributeValue(i->get<int64_t>());
  if (const json* b = Member(v, "bool"); b != nullptr && b->is_boolean())
    return AttributeValue(b->get<bool>());
  if (const json* s = Member(v, "string"); s != nullptr && s->is_string())
    return AttributeValue(s->get<std::string>());
  return AttributeValue(Str(v, "version"));
}

int64_t IntAttribute(const DraDevice& d, const std::string& key, int64_t otherwise) {
  auto it = d.attributes.find(key);
  if (it == d.attributes.end()) return otherwise;
  const auto* i = std::get_if<int64_t>(&it->second);
  return i != nullptr ? *i : otherwise;
}

std::string StrAttribute(const DraDevice& d, const std::string& key) {
  auto it = d.attributes.find(key);
  if (it == d.attributes.end()) return "";
  const auto* s = std::get_if<std::string>(&it->second);
  return s != nullptr ? *s : "";
}

const std::string kType = std::string(kGpuDriver) + "/type";
const std::string kIndex = std::string(kGpuDriver) + "/index";
const std::string kParentIndex = std::string(kGpuDriver) + "/parentIndex";
const std::string kProfile = std::string(kGpuDriver) + "/profile";
const std::string kProduct = std::string(kGpuDriver) + "/productName";

}  // namespace

Result<DeviceSelector> DeviceSelector::Compile(std::string_view expression) {
  auto tokens = Lex(expression);
  if (!tokens) return tokens.error();
  auto root = Parser(std::move(*tokens)).Parse();
  if (!root) return root.error();
  DeviceSelector s;
  s.root_ = std::move(*root);
  return s;
}

namespace {

// One comparison on device `d`: nullopt (CEL's error) when it lacks the attribute.
std::optional<bool> Evaluate(const DeviceSelector::Term& t, const std::string& driver,
                             const DraDevice& d) {
  using Lhs = DeviceSelector::Term::Lhs;
  AttributeValue have;
  if (t.lhs == Lhs::kDriver) {
    have = driver;
  } else if (t.lhs == Lhs::kAttribute) {
    auto it = d.attributes.find(t.key);
    if (it == d.attributes.end()) return std::nullopt;
    have = it->second;
  } else {
    auto it = d.capacity.find(t.key);
    if (it == d.capacity.end()) return std::nullopt;
    have = it->second;
  }
  if (t.op == "in") {
    return std::any_of(t.values.begin(), t.values.end(),
                       [&](const AttributeValue& v) { return Compare(have, "==", v); });
  }
  return Compare(have, t.op, t.values.front());
}

// CEL's logic with errors: && is false if a side is, || true if a side is, else an error
// if a side is one.
std::optional<bool> Evaluate(const DeviceSelector::Expr& e, const std::string& driver,
                             const DraDevice& d) {
  using Kind = DeviceSelector::Expr::Kind;
  if (e.kind == Kind::kTerm) return Evaluate(e.term, driver, d);
  if (e.kind == Kind::kNot) {
    const std::optional<bool> v = Evaluate(e.kids.front(), driver, d);
    return v ? std::optional<bool>(!*v) : std::nullopt;
  }
  const bool decides = e.kind == Kind::kOr;  // the value that settles it
  bool error = false;
  for (const DeviceSelector::Expr& k : e.kids) {
    const std::optional<bool> v = Evaluate(k, driver, d);
    if (v == decides) return decides;
    error |= !v;
  }
  return error ? std::nullopt : std::optional<bool>(!decides);
}

}  // namespace

bool DeviceSelector::Matches(const std::string& driver, const DraDevice& d) const {
  return Evaluate(root_, driver, d) == true;
}

std::optional<AttributeValue> DeviceSelector::Pinned(const std::string& attribute) const {
  auto pins = [&](const Term& t) {
    const bool lhs = attribute.empty() ? t.lhs == Term::Lhs::kDriver
                                       : t.lhs == Term::Lhs::kAttribute && t.key == attribute;
    return lhs && (t.op == "==" || (t.op == "in" && t.values.size() == 1));
  };
  // Top level: the expression itself, or a side of its && (nested ones too).
  std::function<const Term*(const Expr&)> find = [&](const Expr& e) -> const Term* {
    if (e.kind == Expr::Kind::kTerm) return pins(e.term) ? &e.term : nullptr;
    if (e.kind != Expr::Kind::kAnd) return nullptr;
    for (const Expr& k : e.kids) {
      if (const Term* t = find(k)) return t;
    }
    return nullptr;
  };
  const Term* t = find(root_);
  return t != nullptr ? std::optional<AttributeValue>(t->values.front()) : std::nullopt;
}

SliceInfo ParseSlice(const json& obj) {
  SliceInfo s;
  s.name = Str(Obj(obj, "metadata"), "name");
  const json& spec = Obj(obj, "spec");
  s.driver = Str(spec, "driver");
  s.node = Str(spec, "nodeName");
  const json& pool = Obj(spec, "pool");
  s.pool = Str(pool, "name");
  if (const json* g = Member(pool, "generation"); g != nullptr && g->is_number_integer())
    s.generation = g->get<int64_t>();
  if (s.name.empty() || s.driver.empty()) s.problem = "no metadata.name or spec.driver";
  for (const json& d : Arr(spec, "devices")) {
    DraDevice dev;
    dev.name = Str(d, "name");
    const json& attrs = Obj(d, "attributes");
    for (auto it = attrs.begin(); it != attrs.end(); ++it)
      dev.attributes[Qualified(s.driver, it.key())] = ValueOf(*it);
    const json& cap = Obj(d, "capacity");
    for (auto it = cap.begin(); it != cap.end(); ++it) {
      auto q = ParseQuantity(Str(*it, "value"));
      if (q) dev.capacity[Qualified(s.driver, it.key())] = *q;
    }
    for (const json& use : Arr(d, "consumesCounters")) {
      const json& counters = Obj(use, "counters");
      for (auto it = counters.begin(); it != counters.end(); ++it) {
        // memory-slice-<k> (counter names are DNS labels); memorySlice<k> read alike
        std::string k;
        for (char ch : it.key()) {
          if (ch != '-') k += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        if (k.size() == 12 && k.rfind("memoryslice", 0) == 0 && k[11] >= '0' && k[11] <= '7')
          dev.memory_slices.push_back(k[11] - '0');
      }
    }
    std::sort(dev.memory_slices.begin(), dev.memory_slices.end());
    if (!dev.name.empty()) s.devices.push_back(std::move(dev));
  }
  return s;
}

ClassInfo ParseClass(const json& obj) {
  ClassInfo c;
  c.name = Str(Obj(obj, "metadata"), "name");
  for (const json& sel : Arr(Obj(obj, "spec"), "selectors"))
    c.selectors.push_back(Str(Obj(sel, "cel"), "expression"));
  return c;
}

ClaimInfo ParseClaim(const json& obj) {
  ClaimInfo c;
  const json& meta = Obj(obj, "metadata");
  c.ns = Str(meta, "namespace");
  c.name = Str(meta, "name");
  c.uid = Str(meta, "uid");
  c.resource_version = Str(meta, "resourceVersion");
  if (c.name.empty() || c.uid.empty()) c.problem = "no metadata.name or metadata.uid";
  const json& devices = Obj(Obj(obj, "spec"), "devices");
  for (const json& r : Arr(devices, "requests")) {
    ClaimRequest req;
    req.name = Str(r, "name");
    if (!Arr(r, "firstAvailable").empty()) req.unsupported = "firstAvailable (a list of choices)";
    const json& exactly = Obj(r, "exactly");
    req.device_class = Str(exactly, "deviceClassName");
    for (const json& sel : Arr(exactly, "selectors"))
      req.selectors.push_back(Str(Obj(sel, "cel"), "expression"));
    const std::string mode = Str(exactly, "allocationMode");
    if (mode == "All") req.unsupported = "allocationMode All";
    if (const json* n = Member(exactly, "count"); n != nullptr && n->is_number_integer())
      req.count = std::clamp<int64_t>(n->get<int64_t>(), 0, 1 << 20);
    if (const json* a = Member(exactly, "adminAccess");
        a != nullptr && a->is_boolean() && a->get<bool>())
      req.unsupported = "adminAccess";
    if (Member(exactly, "capacity") != nullptr) req.unsupported = "capacity requests";
    c.requests.push_back(std::move(req));
  }
  for (const json& k : Arr(devices, "constraints")) {
    const std::string match = Str(k, "matchAttribute");
    if (!match.empty())
      c.match_attributes.push_back(match);
    else
      c.unsupported = "constraints other than matchAttribute";
  }
  for (const json& cfg : Arr(devices, "config")) {
    const std::string driver = Str(Obj(cfg, "opaque"), "driver");
    if (!driver.empty() && driver != kGpuDriver)
      c.unsupported = "configuration for driver " + driver;
  }
  const json& status = Obj(obj, "status");
  if (const json* alloc = Member(status, "allocation"); alloc != nullptr && alloc->is_object()) {
    c.allocated = true;
    for (const json& r : Arr(Obj(*alloc, "devices"), "results"))
      c.devices.push_back({Str(r, "request"), Str(r, "driver"), Str(r, "pool"), Str(r, "device")});
    for (const json& term : Arr(Obj(*alloc, "nodeSelector"), "nodeSelectorTerms")) {
      for (const json& f : Arr(term, "matchFields")) {
        const json* values = Member(f, "values");
        if (Str(f, "key") == "metadata.name" && Str(f, "operator") == "In" && values != nullptr &&
            values->is_array() && values->size() == 1 && values->front().is_string())
          c.node = values->front().get<std::string>();
      }
    }
  }
  for (const json& r : Arr(status, "reservedFor")) {
    if (Str(r, "resource") != "pods") continue;
    c.reserved_for.push_back(Str(r, "uid"));
    c.reserved_names.push_back(Str(r, "name"));
  }
  return c;
}

Result<DeviceAsk> AskOf(const std::vector<const ClaimInfo*>& claims,
                        const std::map<std::string, ClassInfo>& classes) {
  DeviceAsk ask;
  int mig_requests = 0;
  for (const ClaimInfo* c : claims) {
    const std::string where = "ResourceClaim " + c->name;
    if (!c->problem.empty()) return Error{where, c->problem};
    if (!c->unsupported.empty()) return Error{where, c->unsupported + " is not supported"};
    for (const std::string& m : c->match_attributes) {
      if (m != kNvlinkDomainAttribute) {
        return Error{where, "constraint matchAttribute " + m + " is not supported (only " +
                                kNvlinkDomainAttribute + ")"};
      }
      ask.one_domain = true;
    }
    DeviceAsk::Part part{c->name, c->uid, c->resource_version, {}};
    for (const ClaimRequest& r : c->requests) {
      const std::string at = where + " request " + r.name;
      if (!r.unsupported.empty()) return Error{at, r.unsupported + " is not supported"};
      auto cls = classes.find(r.device_class);
      if (cls == classes.end()) return Error{at, "DeviceClass " + r.device_class + " not found"};
      std::vector<std::string> exprs = cls->second.selectors;
      exprs.insert(exprs.end(), r.selectors.begin(), r.selectors.end());
      std::optional<AttributeValue> driver, type, profile;
      for (const std::string& e : exprs) {
        auto sel = DeviceSelector::Compile(e);
        if (!sel) return Error{at, "selector \"" + e + "\": " + sel.error().message};
        if (!driver) driver = sel->Pinned("");
        if (!type) type = sel->Pinned(kType);
        if (!profile) profile = sel->Pinned(kProfile);
      }
      if (!driver || *driver != AttributeValue(std::string(kGpuDriver))) {
        return Error{at, std::string("Gantry allocates devices of driver ") + kGpuDriver +
                             " only (DeviceClass " + r.device_class + " must select it)"};
      }
      if (type == AttributeValue(std::string("gpu"))) {
        ask.gpus += r.count;
      } else if (type == AttributeValue(std::string("mig"))) {
        const auto* p = profile ? std::get_if<std::string>(&*profile) : nullptr;
        if (p == nullptr)
          return Error{at, "a MIG request must name its profile (" + kProfile + ")"};
        if (r.count != 1 || ++mig_requests > 1)
          return Error{at, "Gantry places one MIG device per pod"};
        ask.mig_profile = *p;
      } else {
        return Error{at, "the device type must be selected: " + kType + " == 'gpu' or 'mig'" +
                             (type ? " (got " + Show(*type) + ")" : std::string())};
      }
      for (std::string& e : exprs) {
        if (std::find(ask.selectors.begin(), ask.selectors.end(), e) == ask.selectors.end())
          ask.selectors.push_back(std::move(e));
      }
      part.requests.emplace_back(r.name, r.count);
    }
    ask.parts.push_back(std::move(part));
  }
  if (ask.gpus > 0 && !ask.mig_profile.empty())
    return Error{"ResourceClaim", "whole GPUs and a MIG device at once are not supported"};
  return ask;
}

NodeGpus GpusOf(const std::vector<const SliceInfo*>& slices) {
  NodeGpus n;
  std::map<std::string, int64_t> newest;  // pool -> generation
  for (const SliceInfo* s : slices) {
    if (s->driver == kGpuDriver && s->problem.empty())
      newest[s->pool] = std::max(newest[s->pool], s->generation);
  }
  if (newest.size() > 1) {
    n.problem = "its GPUs are in more than one pool of " + std::string(kGpuDriver);
    return n;
  }
  if (newest.empty()) return n;
  n.pool = newest.begin()->first;
  for (const SliceInfo* s : slices) {
    if (s->driver != kGpuDriver || s->generation != newest[s->pool] || !s->problem.empty())
      continue;
    for (const DraDevice& d : s->devices) {
      const std::string type = StrAttribute(d, kType);
      if (type == "gpu") n.gpus.push_back(d);
      if (type == "mig") n.migs.push_back(d);
    }
  }
  std::sort(n.gpus.begin(), n.gpus.end(), [](const DraDevice& a, const DraDevice& b) {
    return std::make_pair(IntAttribute(a, kIndex, 0), a.name) <
           std::make_pair(IntAttribute(b, kIndex, 0), b.name);
  });
  if (!n.gpus.empty()) n.product = StrAttribute(n.gpus.front(), kProduct);
  // NVLink domains: the GPUs' nvlinkDomain values, if they split them evenly and in order.
  std::vector<int64_t> domains;
  for (const DraDevice& d : n.gpus) domains.push_back(IntAttribute(d, kNvlinkDomainAttribute, -1));
  const std::set<int64_t> distinct(domains.begin(), domains.end());
  if (distinct.size() > 1 && !distinct.contains(-1) && n.gpus.size() % distinct.size() == 0) {
    const size_t per = n.gpus.size() / distinct.size();
    bool even = true;
    for (size_t i = 0; i < domains.size(); ++i) even = even && domains[i] == domains[i / per * per];
    if (even) n.nvlink_domains = static_cast<int>(distinct.size());
  }
  // MIG devices: offered where each is one placement of a GPU the node has (partitionable
  // devices, whose memory-slice counters say where), so the core's placement is theirs.
  for (const DraDevice& m : n.migs) {
    const int64_t parent = IntAttribute(m, kParentIndex, -1);
    int at = -1;
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      if (IntAttribute(n.gpus[i], kIndex, -2) == parent) at = static_cast<int>(i);
    }
    if (at < 0 || m.memory_slices.empty() || StrAttribute(m, kProfile).empty()) {
      n.problem = "MIG device " + m.name +
                  " is not a placement on one of its GPUs (parentIndex, profile and memory-slice "
                  "counters); its MIG devices are not offered";
      n.migs.clear();
      n.mig_parent.clear();
      break;
    }
    n.mig_parent.push_back(at);
  }
  return n;
}

std::optional<std::vector<DeviceSelector>> CompileAll(const std::vector<std::string>& selectors) {
  std::vector<DeviceSelector> compiled;
  for (const std::string& e : selectors) {
    auto s = DeviceSelector::Compile(e);
    if (!s) return std::nullopt;
    compiled.push_back(std::move(*s));
  }
  return compiled;
}

bool DevicesPass(const NodeGpus& node, const std::vector<std::string>& selectors,
                 const std::string& mig_profile) {
  auto compiled = CompileAll(selectors);
  return compiled && DevicesPassCompiled(node, *compiled, mig_profile);
}

bool DevicesPassCompiled(const NodeGpus& node, const std::vector<DeviceSelector>& compiled,
                         const std::string& mig_profile) {
  bool any = false;
  auto pass = [&](const DraDevice& d) {
    any = true;
    return std::all_of(compiled.begin(), compiled.end(),
                       [&](const DeviceSelector& s) { return s.Matches(kGpuDriver, d); });
  };
  if (mig_profile.empty()) return std::all_of(node.gpus.begin(), node.gpus.end(), pass) && any;
  for (const DraDevice& m : node.migs) {
    if (StrAttribute(m, kProfile) == mig_profile && !pass(m)) return false;
  }
  return any;
}

json AllocationPatch(const DeviceAsk::Part& part, const std::vector<std::string>& devices,
                     const std::string& pool, const std::string& node, const std::string& pod_name,
                     const std::string& pod_uid) {
  json results = json::array();
  size_t next = 0;
  for (const auto& [request, count] : part.requests) {
    for (int64_t i = 0; i < count && next < devices.size(); ++i) {
      results.push_back({{"request", request},
                         {"driver", kGpuDriver},
                         {"pool", pool},
                         {"device", devices[next++]}});
    }
  }
  json selector = {
      {"nodeSelectorTerms",
       json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                   {"operator", "In"},
                                                   {"values", json::array({node})}}})}}})}};
  return {{"metadata", {{"uid", part.uid}, {"resourceVersion", part.resource_version}}},
          {"status",
           {{"allocation", {{"devices", {{"results", results}}}, {"nodeSelector", selector}}},
            {"reservedFor",
             json::array({{{"resource", "pods"}, {"name", pod_name}, {"uid", pod_uid}}})}}}};
}

json ReservationPatch(const ClaimInfo& claim, const std::string& pod_name,
                      const std::string& pod_uid) {
  json reserved = json::array();
  for (size_t i = 0; i < claim.reserved_for.size(); ++i) {
    reserved.push_back(
        {{"resource", "pods"}, {"name", claim.reserved_names[i]}, {"uid", claim.reserved_for[i]}});
  }
  reserved.push_back({{"resource", "pods"}, {"name", pod_name}, {"uid", pod_uid}});
  return {{"metadata", {{"uid", claim.uid}, {"resourceVersion", claim.resource_version}}},
          {"status", {{"reservedFor", reserved}}}};
}

}  // namespace gantry::kube
