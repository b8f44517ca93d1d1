#include "spec/overrides.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <vector>

namespace gantry::spec {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t end = s.find(sep, at);
    out.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return out;
    at = end + 1;
  }
}

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// The item of list `seq` named `name` (its `name` key); an undefined node when none is.
YAML::Node Named(const YAML::Node& seq, const std::string& name) {
  for (const YAML::Node& item : seq) {
    if (item.IsMap() && item["name"] && item["name"].IsScalar() && item["name"].Scalar() == name)
      return item;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

}  // namespace

Result<std::string> ApplyOverrides(const std::string& yaml, const std::string& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return Error{"--set", std::string("the config is not YAML: ") + e.what()};
  }
  if (!root.IsMap()) return Error{"--set", "the config is not a YAML mapping"};
  for (const std::string& raw : Split(overrides, ';')) {
    const std::string pair = Trim(raw);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Error{"--set", "\"" + pair + "\": expected PATH=VALUE, e.g. pools.h100.count=12"};
    }
    const std::vector<std::string> path = Split(Trim(pair.substr(0, eq)), '.');
    YAML::Node value;
    try {
      value = YAML::Load(pair.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      return Error{"--set", "\"" + pair + "\": the value is not YAML: " + e.what()};
    }
    YAML::Node at = root;  // reset() rebinds; assignment would overwrite the node
    std::string walked;
    for (size_t i = 0; i < path.size(); ++i) {
      const std::string& seg = path[i];
      if (seg.empty()) return Error{"--set", "\"" + pair + "\": an empty path segment"};
      const bool last = i + 1 == path.size();
      if (at.IsSequence()) {
        YAML::Node item = Named(at, seg);
        if (!item)
          return Error{"--set",
                       "\"" + pair + "\": " + walked + " has no item named \"" + seg + "\""};
        if (last)
          return Error{"--set",
                       "\"" + pair + "\": the path ends at a list item; name one of its fields"};
        at.reset(item);
      } else if (at.IsMap()) {
        if (last) {
          at[seg] = value;
        } else {
          const YAML::Node& lookup = at;  // const: looking does not add the key
          if (!lookup[seg])
            at[seg] = YAML::Node(YAML::NodeType::Map);  // as yq does; the reader
                                                        // refuses a key it does not know
          at.reset(at[seg]);
        }
      } else {
        return Error{"--set", "\"" + pair + "\": " + walked + " is a value, not a mapping or list"};
      }
      walked += (walked.empty() ? "" : ".") + seg;
    }
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gantry::spec
