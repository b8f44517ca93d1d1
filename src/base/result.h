// Result<T> and Error: failure as a value.
//
// Shaped like std::expected (which g++ 12 lacks). The core never throws; fallible
// calls return [[nodiscard]] Result<T>. An Error carries a field path and a message so
// boundaries can say "jobs.jsonl:12: gpus: must be at least 1, got 0".
// Thread-safety: plain values, no shared state.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace gantry {

struct Error {
  std::string field;    // dotted path of the offending field; empty when not about one
  std::string message;  // what is wrong, with the bad value

  std::string ToString() const { return field.empty() ? message : field + ": " + message; }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> spelled as a type: Status.
struct Ok {};
using Status = Result<Ok>;

}  // namespace gantry
