// Reading fields of Kubernetes objects' JSON without throwing: a member missing, null or
// of another kind reads as empty (objects.cc, dra.cc).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace gantry::kube::json_fields {

using nlohmann::json;

// The member `key` of `obj`, if it is there and not null.
inline const json* Member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
inline std::string Str(const json& obj, const char* key) {
  const json* v = Member(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}
inline std::map<std::string, std::string> StrMap(const json& obj, const char* key) {
  std::map<std::string, std::string> out;
  const json* v = Member(obj, key);
  if (v == nullptr || !v->is_object()) return out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (it->is_string()) out[it.key()] = it->get<std::string>();
  }
  return out;
}
inline const json& Obj(const json& obj, const char* key) {
  static const json kEmpty = json::object();
  const json* v = Member(obj, key);
  return v != nullptr && v->is_object() ? *v : kEmpty;
}
inline const json& Arr(const json& obj, const char* key) {
  static const json kEmpty = json::array();
  const json* v = Member(obj, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

}  // namespace gantry::kube::json_fields
