#include "server/sqlite_store.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace gantry::server {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gantry-store-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

TEST_F(StoreTest, JobsSurviveReopeningAndLoadInOrder) {
  {
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.error().message;
    ASSERT_TRUE((*store)->Begin().ok());
    for (int i = 1; i <= 5; ++i) {
      StoredJob j;
      j.seq = i;
      j.name = "j" + std::to_string(i);
      j.team = "a";
      j.queue = "q";
      j.active = i % 2 == 1;
      j.doc = "{\"n\":" + std::to_string(i) + "}";
      if (i == 3) {
        j.idem_key = "k3";
        j.idem_hash = "h3";
      }
      ASSERT_TRUE((*store)->PutJob(j).ok());
    }
    ASSERT_TRUE((*store)->Commit().ok());
  }
  auto store = SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadJobs(1);  // active 1, 3, 5 and the last ended one (4)
  ASSERT_TRUE(jobs.ok());
  std::vector<std::string> names;
  for (const auto& j : *jobs) names.push_back(j.name);
  EXPECT_EQ(names, (std::vector<std::string>{"j1", "j3", "j4", "j5"}));
  auto idem = (*store)->FindIdempotent("a", "k3");
  ASSERT_TRUE(idem.ok());
  ASSERT_TRUE(idem->has_value());
  EXPECT_EQ((**idem).name, "j3");
  EXPECT_EQ((**idem).idem_hash, "h3");
  EXPECT_FALSE((*(*store)->FindIdempotent("b", "k3")).has_value());  // keys are per team
  EXPECT_EQ(*(*store)->MaxJobSeq(), 5);
  EXPECT_TRUE((*(*store)->FindJob("j2")).has_value());
}

TEST_F(StoreTest, UncommittedWorkIsLost) {
  {
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Begin().ok());
    StoredJob j;
    j.seq = 1;
    j.name = "j1";
    j.doc = "{}";
    ASSERT_TRUE((*store)->PutJob(j).ok());
    // No commit: the store is closed mid-transaction, as by a crash.
  }
  auto store = SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->LoadJobs(10)->empty());
}

TEST_F(StoreTest, TokensAreFoundByHashAndRevokedByPrefix) {
  auto store = SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok());
  StoredToken t;
  t.hash = "abcdef0123456789";
  t.role = "team";
  t.team = "nlp";
  t.queues = {"nlp", "nlp-dev"};
  ASSERT_TRUE((*store)->AddToken(t).ok());
  auto found = (*store)->FindToken("abcdef0123456789");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((**found).queues, t.queues);
  EXPECT_FALSE((*store)->DeleteToken("abc").ok());  // too short to be safe
  EXPECT_TRUE((*store)->DeleteToken("abcdef01").ok());
  EXPECT_FALSE((*(*store)->FindToken("abcdef0123456789")).has_value());
}

TEST_F(StoreTest, RunsOverlappingAPeriod) {
  auto store = SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok());
  StoredRun r;
  r.job_seq = 1;
  r.run = 1;
  r.queue = "q";
  r.model = "H100-80GB";
  r.gpus = 2;
  r.start_ms = 1000;
  ASSERT_TRUE((*store)->StartRun(r).ok());
  r.job_seq = 2;
  r.start_ms = 5000;
  ASSERT_TRUE((*store)->StartRun(r).ok());
  ASSERT_TRUE((*store)->EndRun(1, 1, 2000).ok());
  EXPECT_EQ((*store)->Runs(0, 10000)->size(), 2u);
  EXPECT_EQ((*store)->Runs(2500, 4000)->size(), 0u);  // run 1 ended at 2000, run 2 starts at 5000
  EXPECT_EQ((*store)->Runs(6000, 7000)->size(), 1u);  // run 2 still open
}

}  // namespace
}  // namespace gantry::server
