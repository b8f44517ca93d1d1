// The Store cases (store_cases.cc) on SQLite, and what only SQLite does.
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "server/sqlite_store.h"
#include "store_cases.h"

namespace gantry::server::testing {
namespace {

namespace fs = std::filesystem;

// One database file in a directory of its own, deleted with the home.
class SqliteHome final : public StoreHome {
 public:
  SqliteHome() {
    static std::atomic<int> next{0};
    dir_ = fs::temp_directory_path() /
           ("gantry-store-" + std::to_string(::getpid()) + "-" + std::to_string(next++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~SqliteHome() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Result<std::unique_ptr<Store>> Open() override {
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    if (!store) return store.error();
    return std::unique_ptr<Store>(std::move(*store));
  }

 private:
  fs::path dir_;
};

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreCases,
                         ::testing::Values(StoreKind{"Sqlite",
                                                     []() -> Result<std::unique_ptr<StoreHome>> {
                                                       return std::unique_ptr<StoreHome>(
                                                           new SqliteHome());
                                                     }}),
                         StoreKindName);

// One machine, no election: a second gantryd on the same file takes the lease at once,
// unexpired or not, and the first can no longer write.
TEST(SqliteStoreLease, ASecondStoreTakesOverAtOnce) {
  SqliteHome home;
  auto first = home.Open();
  auto second = home.Open();
  ASSERT_TRUE(first.ok() && second.ok());
  auto e1 = (*first)->AcquireLease("a", 60000);
  ASSERT_TRUE(e1.ok());
  auto e2 = (*second)->AcquireLease("b", 60000);
  ASSERT_TRUE(e2.ok()) << e2.error().message;
  EXPECT_EQ(*e2, *e1 + 1);
  Status begin = (*first)->Begin();
  ASSERT_FALSE(begin.ok());
  EXPECT_EQ(begin.error().field, "lease");
  EXPECT_TRUE((*second)->Begin().ok());
  EXPECT_TRUE((*second)->Commit().ok());
}

}  // namespace
}  // namespace gantry::server::testing
