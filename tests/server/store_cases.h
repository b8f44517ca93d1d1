// StoreCases: the behaviour every Store must have, written once and run against each
// implementation (store_test.cc: SQLite; pg_store_test.cc: PostgreSQL).
//
// A StoreKind makes a StoreHome per test: one database, empty at first, that Open()
// reaches again and again, so a test can close a store and reopen it (a restart) or hold
// two stores on it at once (a leader and a standby). Thread-safety: gtest's, one thread.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "server/store.h"

namespace gantry::server::testing {

class StoreHome {
 public:
  virtual ~StoreHome() = default;
  virtual Result<std::unique_ptr<Store>> Open() = 0;
};

struct StoreKind {
  std::string name;  // the instantiation's suffix: Sqlite, Postgres
  // A fresh home; an Error with field "skip" skips the test (GANTRY_NO_POSTGRES=1), any
  // other error fails it.
  std::function<Result<std::unique_ptr<StoreHome>>()> make_home;
};

// gtest prints a failing case's parameter with this.
inline void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

inline std::string StoreKindName(const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param.name;
}

class StoreCases : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override;
  // A new connection to this test's database; nullptr (and a test failure) on error.
  std::unique_ptr<Store> Open();

  std::unique_ptr<StoreHome> home_;
};

}  // namespace gantry::server::testing
