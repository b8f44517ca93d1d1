// Gantry's own accounting read back from the store's runs (server/accounts.h): a restarted
// server's fair share and budgets are those the running one had, and a scheduler built anew
// (a Kubernetes node joined) carries them over.
#include "server/accounts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../core/test_util.h"
#include "server/sqlite_store.h"

namespace gantry::server {
namespace {

namespace fs = std::filesystem;
using core::testing::MakeCluster;
using core::testing::MakeQueues;
using core::testing::Pool;
using core::testing::Whole;

constexpr core::Ticks kHour = 3'600'000;
constexpr int64_t kEpoch = 1795996800000;  // Monday 2026-11-30 00:00 UTC: core time 0

class AccountsTest : public ::testing::Test {
 protected:
  AccountsTest()
      : catalog_(core::Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB")})),
        queues_(MakeQueues({
            {"org",
             "",
             0,
             -1,
             1,
             {},
             {},
             false,
             core::BudgetSpec{100, core::BudgetPeriod::kMonth, core::WhenSpent::kWait,
                              core::BudgetSpec{}.applies_to},
             {},
             {},
             {}},
            {"team", "org", 0, -1, 1, {}, {}, false, std::nullopt, {}, {}, {}},
            {"other", "", 0, -1, 1, {}, {}, false, std::nullopt, {}, {}, {}},
        })) {
    params_.epoch_unix_ms = kEpoch;
    params_.fairshare_half_life = kHour;
    dir_ = fs::temp_directory_path() / ("gantry-accounts-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    EXPECT_TRUE(store.ok());
    store_ = std::move(*store);
  }
  ~AccountsTest() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<core::Scheduler> NewScheduler() {
    return std::make_unique<core::Scheduler>(cluster_, queues_, core::MakePolicy("gantry"),
                                             params_);
  }
  core::JobId Start(core::Scheduler& s, const char* id, int gpus, core::Ticks at) {
    core::JobSpec spec = Whole(catalog_, id, 1, gpus);
    spec.queue = *queues_.Find("team");
    const core::JobId j = s.Submit(spec, at);
    s.Schedule(at);
    EXPECT_EQ(s.job(j).phase, core::Phase::kRunning);
    return j;
  }
  static constexpr core::Ticks kOpen = INT64_MIN;  // a row still open
  void Row(int64_t seq, double gpus, core::Ticks start, core::Ticks end) {
    StoredRun r;
    r.job_seq = seq;
    r.queue = "team";
    r.model = "H100-80GB";
    r.gpus = gpus;
    r.start_ms = kEpoch + start;
    r.end_ms = end == kOpen ? -1 : kEpoch + end;
    ASSERT_TRUE(store_->StartRun(r).ok());
  }
  core::QueueId Q(const char* name) const { return *queues_.Find(name); }

  core::Catalog catalog_;
  core::Cluster cluster_;
  core::QueueTree queues_;
  core::PolicyParams params_;
  fs::path dir_;
  std::unique_ptr<SqliteStore> store_;
};

// A server that ran a 4-GPU job for an hour and has a 2-GPU one running, restarted half an
// hour later: its fair share is the one it had, to the rounding, in the queue and its parent.
TEST_F(AccountsTest, ARestartedServerRemembersTheFairShareItHad) {
  auto live = NewScheduler();
  const core::JobId a = Start(*live, "a", 4, 0);
  live->Finish(a, kHour);
  live->Schedule(kHour);
  Start(*live, "b", 2, 3 * kHour / 2);
  const core::Ticks now = 2 * kHour;
  const std::vector<double> want = live->DecayedUsageAt(now);
  // 4 GPUs (2^-1 - 2^-2) + 2 GPUs (1 - 2^-0.5), in GPU units.
  EXPECT_NEAR(want[Q("team").v], (1 + 2 * (1 - std::exp2(-0.5))) * core::kGpuUnits, 1e-6);

  Row(1, 4, 0, kHour);
  Row(2, 2, 3 * kHour / 2, kOpen);
  auto restarted = NewScheduler();
  ASSERT_TRUE(
      SeedAccounts(*store_, queues_, catalog_, params_, *restarted, now, kEpoch + now, true).ok());
  for (const char* q : {"team", "org"})
    EXPECT_NEAR(restarted->decayed_usage(Q(q)), want[Q(q).v], 1e-6 * want[Q(q).v]) << q;
  EXPECT_EQ(restarted->decayed_usage(Q("other")), 0);
  // Running jobs adopted from their start count their own spending: only ended runs here.
  EXPECT_NEAR(restarted->budget_account(Q("org"))->spent, 4.0, 1e-9);
  // A caller that adopts them at now (Kubernetes) has them counted up to now.
  auto at_now = NewScheduler();
  ASSERT_TRUE(
      SeedAccounts(*store_, queues_, catalog_, params_, *at_now, now, kEpoch + now, false).ok());
  EXPECT_NEAR(at_now->budget_account(Q("org"))->spent, 5.0, 1e-9);
}

// Runs older than the budget's period count for fair share only, faded by their age.
TEST_F(AccountsTest, LastMonthsRunsFadeAndSpendNothingThisMonth) {
  params_.fairshare_half_life = 24 * kHour;
  Row(1, 8, -3 * kHour, -kHour);       // Sunday 21:00-23:00, November
  const core::Ticks now = 26 * kHour;  // Tuesday 2026-12-01 02:00: a new month
  auto s = NewScheduler();
  ASSERT_TRUE(SeedAccounts(*store_, queues_, catalog_, params_, *s, now, kEpoch + now, true).ok());
  const double units = 8.0 * core::kGpuUnits;
  EXPECT_NEAR(s->decayed_usage(Q("team")), units * (std::exp2(-27.0 / 24) - std::exp2(-29.0 / 24)),
              1e-6);
  EXPECT_EQ(s->budget_account(Q("org"))->spent, 0);
  // Ten half-lives back and more: forgotten.
  params_.fairshare_half_life = 2 * kHour;
  auto later = NewScheduler();
  ASSERT_TRUE(
      SeedAccounts(*store_, queues_, catalog_, params_, *later, now, kEpoch + now, true).ok());
  EXPECT_EQ(later->decayed_usage(Q("team")), 0);
}

// A scheduler built anew over other nodes goes on with the accounts of the one it replaces.
TEST_F(AccountsTest, ASchedulerBuiltAnewCarriesTheAccountsOver) {
  auto old = NewScheduler();
  Start(*old, "a", 8, 0);
  const core::Ticks now = kHour / 2;
  auto fresh = NewScheduler();
  CarryAccounts(*old, *fresh, queues_, now);
  EXPECT_EQ(fresh->decayed_usage(Q("team")), old->DecayedUsageAt(now)[Q("team").v]);
  EXPECT_GT(fresh->decayed_usage(Q("team")), 0);
  EXPECT_NEAR(fresh->budget_account(Q("org"))->spent, 4.0, 1e-9);  // 8 GPUs for half an hour
}

// GET /v1/usage's rows: a run's GPU-hours inside the period, by queue, user and model.
TEST_F(AccountsTest, UsageCountsTheOverlapOfEachRunWithThePeriod) {
  StoredRun r;
  r.queue = "team";
  r.user = "ana";
  r.model = "H100-80GB";
  r.gpus = 2;
  r.start_ms = kEpoch;
  r.end_ms = kEpoch + 2 * kHour;
  StoredRun open = r;
  open.job_seq = 2;
  open.start_ms = kEpoch + kHour;
  open.end_ms = -1;
  const nlohmann::json body =
      UsageBody({r, open}, kEpoch + kHour, kEpoch + 3 * kHour, kEpoch + 3 * kHour, catalog_,
                params_, "EUR", [](StoredRun& s) { s.busy_gpu_ms = 2 * kHour; });
  ASSERT_EQ(body["usage"].size(), 1u) << body.dump();
  const nlohmann::json& row = body["usage"][0];
  EXPECT_DOUBLE_EQ(row["gpu_hours"].get<double>(), 2.0 + 4.0);
  EXPECT_DOUBLE_EQ(row["busy_gpu_hours"].get<double>(), 2.0);
  EXPECT_EQ(row["user"], "ana");
  EXPECT_EQ(body["currency"], "EUR");
}

}  // namespace
}  // namespace gantry::server
