// The Store cases (store_cases.cc) on a real PostgreSQL server started by the test
// (pg_harness.h), and what only a shared database has: contention for the lease,
// takeover after expiry, and the fence against a deposed leader's in-flight writes.
#include <libpq-fe.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "pg_harness.h"
#include "server/auth.h"
#include "server/controller.h"
#include "server/pg_store.h"
#include "spec/config_reader.h"
#include "store_cases.h"

namespace gantry::server::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A fresh database on the process's shared server.
class PgHome final : public StoreHome {
 public:
  PgHome(PgServer* server, std::string db) : server_(server), db_(std::move(db)) {}
  Result<std::unique_ptr<Store>> Open() override {
    auto store = PgStore::Open(server_->ConnString(db_));
    if (!store) return store.error();
    return std::unique_ptr<Store>(std::move(*store));
  }
  PgServer* server() const { return server_; }
  const std::string& db() const { return db_; }

 private:
  PgServer* server_;
  std::string db_;
};

Result<std::unique_ptr<PgHome>> NewPgHome() {
  if (NoPostgres()) return Error{"skip", "GANTRY_NO_POSTGRES=1: no PostgreSQL tests"};
  auto server = PgServer::Shared();
  if (!server) return server.error();
  auto db = (*server)->NewDatabase();
  if (!db) return db.error();
  return std::make_unique<PgHome>(*server, *db);
}

INSTANTIATE_TEST_SUITE_P(Postgres, StoreCases,
                         ::testing::Values(StoreKind{"Postgres",
                                                     []() -> Result<std::unique_ptr<StoreHome>> {
                                                       auto home = NewPgHome();
                                                       if (!home) return home.error();
                                                       return std::unique_ptr<StoreHome>(
                                                           std::move(*home));
                                                     }}),
                         StoreKindName);

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto home = NewPgHome();
    if (!home && home.error().field == "skip") GTEST_SKIP() << home.error().message;
    ASSERT_TRUE(home.ok()) << home.error().ToString();
    home_ = std::move(*home);
  }
  std::unique_ptr<PgStore> Open() {
    auto store = PgStore::Open(home_->server()->ConnString(home_->db()));
    if (!store) {
      ADD_FAILURE() << store.error().ToString();
      return nullptr;
    }
    return std::move(*store);
  }
  // Runs `sql` on the database itself, as an older gantryd left it.
  void ExecRaw(const char* sql) {
    PGconn* conn = PQconnectdb(home_->server()->ConnString(home_->db()).c_str());
    ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    PGresult* r = PQexec(conn, sql);
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQresultErrorMessage(r);
    PQclear(r);
    PQfinish(conn);
  }
  std::unique_ptr<PgHome> home_;
};

TEST_F(PgStoreTest, TheServerRunsUnprivilegedAndOpenTakesUrlsAndKeywordStrings) {
  struct stat st {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(home_->server()->pid())).c_str(), &st), 0);
  if (::geteuid() == 0) {
    EXPECT_NE(st.st_uid, 0u);  // postgres refuses root; the harness drops to another user
  }

  auto by_url = PgStore::Open(home_->server()->Url(home_->db()));
  ASSERT_TRUE(by_url.ok()) << by_url.error().message;
  auto by_keywords = PgStore::Open(home_->server()->ConnString(home_->db()));
  ASSERT_TRUE(by_keywords.ok()) << by_keywords.error().message;
  ASSERT_TRUE((*by_url)->SetMeta("k", "v").ok());
  EXPECT_EQ(**(*by_keywords)->GetMeta("k"), "v");
}

TEST_F(PgStoreTest, ConnectionErrorsAreValuesWithoutThePassword) {
  auto bad = PgStore::Open("postgresql://gantry:s3cret@%2Fnonexistent-dir:5432/x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "db");
  EXPECT_NE(bad.error().message.find("cannot connect"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find("s3cret"), std::string::npos) << bad.error().message;
  auto garbage = PgStore::Open("postgresql://[not a url");
  EXPECT_FALSE(garbage.ok());
  auto no_db = PgStore::Open(home_->server()->ConnString("no_such_database"));
  ASSERT_FALSE(no_db.ok());
  EXPECT_NE(no_db.error().message.find("no_such_database"), std::string::npos);
}

// gantryds starting together on an empty database: the schema is made once.
TEST_F(PgStoreTest, ConcurrentOpensOfAnEmptyDatabase) {
  constexpr int kN = 6;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<std::string> errors(kN);
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      auto store = PgStore::Open(home_->server()->ConnString(home_->db()));
      if (store) {
        ++ok;
      } else {
        errors[static_cast<size_t>(i)] = store.error().message;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kN) << errors[0] << errors[1] << errors[2];
}

// A database of schema 2 (runs without usage columns) is upgraded when opened; its runs stay.
TEST_F(PgStoreTest, Schema2IsUpgradedAndKeepsItsRuns) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
  }
  ExecRaw(
      "ALTER TABLE runs DROP COLUMN busy_gpu_ms, DROP COLUMN reported_gpu_ms, "
      "DROP COLUMN vram_peak, DROP COLUMN fit_gpus;"
      "UPDATE meta SET value = '2' WHERE key = 'schema_version';"
      "INSERT INTO runs (job_seq, run, rank, queue, model, gpus, start_ms, end_ms, username) "
      "VALUES (7, 1, 0, 'nlp', 'H100-80GB', 8, 1000, 5000, 'ann')");

  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(**store->GetMeta("schema_version"), "8");
  auto runs = store->Runs(0, 10000);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].user, "ann");
  EXPECT_EQ((*runs)[0].fit_gpus, -1);
  StoredRun u = (*runs)[0];
  u.busy_gpu_ms = 42;
  ASSERT_TRUE(store->SetRunUsage(u).ok());
  EXPECT_EQ((*store->Runs(0, 10000))[0].busy_gpu_ms, 42);
}

// Schema 4 (jobs without ended_ms): jobs that had ended count as ended at the upgrade;
// active ones are untouched.
TEST_F(PgStoreTest, Schema4JobsGetAnEndTimeAtTheUpgrade) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
  }
  ExecRaw(
      "ALTER TABLE jobs DROP COLUMN ended_ms; DROP TABLE cluster_history;"
      "UPDATE meta SET value = '4' WHERE key = 'schema_version';"
      "INSERT INTO jobs (seq, name, team, queue, active, doc) VALUES (1, 'old', 'a', 'q', false, "
      "'{}');"
      "INSERT INTO jobs (seq, name, team, queue, active, doc) VALUES (2, 'live', 'a', 'q', true, "
      "'{}')");

  const int64_t before = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(**store->GetMeta("schema_version"), "8");
  auto jobs = store->LoadJobs(-1);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_GE((*jobs)[0].ended_ms, before - 1000);
  EXPECT_LE((*jobs)[0].ended_ms, before + 60'000);
  EXPECT_EQ((*jobs)[1].ended_ms, -1);
  EXPECT_TRUE(store->PurgeJobs(before - 1000, 10)->empty());
  EXPECT_EQ(*store->PurgeJobs(before + 3'600'000, 10), std::vector<int64_t>{1});
  EXPECT_TRUE(store->AddClusterSample(1000, "{}").ok());  // schema 6's table was made
  EXPECT_TRUE(store->AddSession("s", "t", 1).ok());       // and schema 8's
}

// PostgreSQL aborts a transaction at its first failed statement; SQLite would go on.
TEST_F(PgStoreTest, AFailedStatementAbortsTheTransaction) {
  auto store = Open();
  ASSERT_TRUE(store);
  StoredJob j1;
  j1.seq = 1;
  j1.name = "j1";
  j1.doc = "{}";
  StoredJob clash = j1;
  clash.seq = 2;  // same name, another seq: unique violation
  ASSERT_TRUE(store->Begin().ok());
  ASSERT_TRUE(store->PutJob(j1).ok());
  Status put = store->PutJob(clash);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.error().message.find("jobs_name_key"), std::string::npos) << put.error().message;
  Status commit = store->Commit();
  ASSERT_FALSE(commit.ok());
  EXPECT_NE(commit.error().message.find("rolled back"), std::string::npos);
  EXPECT_TRUE(store->LoadJobs(10)->empty());
  // The store is usable again, and a clash outside a transaction leaves the first job.
  ASSERT_TRUE(store->PutJob(j1).ok());
  EXPECT_FALSE(store->PutJob(clash).ok());
  EXPECT_EQ(*store->MaxJobSeq(), 1);
}

TEST_F(PgStoreTest, ExactlyOneContenderWins) {
  constexpr int kN = 8;
  std::vector<std::unique_ptr<PgStore>> stores;
  for (int i = 0; i < kN; ++i) {
    stores.push_back(Open());
    ASSERT_TRUE(stores.back());
  }
  std::vector<std::optional<Result<int64_t>>> results(kN);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kN) std::this_thread::yield();  // start together
      results[static_cast<size_t>(i)] =
          stores[static_cast<size_t>(i)]->AcquireLease("http://g" + std::to_string(i), 60000);
    });
  }
  for (auto& t : threads) t.join();
  int winner = -1;
  for (int i = 0; i < kN; ++i) {
    const auto& r = *results[static_cast<size_t>(i)];
    if (r.ok()) {
      EXPECT_EQ(winner, -1) << "two winners: g" << winner << " and g" << i;
      winner = i;
      EXPECT_EQ(*r, 1);
    }
  }
  ASSERT_NE(winner, -1);
  const std::string holder = "http://g" + std::to_string(winner);
  for (int i = 0; i < kN; ++i) {
    const auto& r = *results[static_cast<size_t>(i)];
    if (i == winner) continue;
    EXPECT_EQ(r.error().field, "lease");
    EXPECT_NE(r.error().message.find("held by " + holder + " (epoch 1) until "), std::string::npos)
        << r.error().message;
  }
  auto leader = stores[0]->Leader();
  ASSERT_TRUE(leader.ok() && leader->has_value());
  EXPECT_EQ((**leader).holder, holder);
  // Only the winner writes under a lease; the losers hold none and are not fenced, but
  // neither may they renew.
  EXPECT_TRUE(stores[static_cast<size_t>(winner)]->RenewLease(holder, 1, 60000).ok());
  EXPECT_FALSE(
      stores[static_cast<size_t>((winner + 1) % kN)]->RenewLease("http://x", 1, 60000).ok());
}

TEST_F(PgStoreTest, TheLoserTakesOverAfterExpiry) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto ea = a->AcquireLease("http://a", 600);
  ASSERT_TRUE(ea.ok()) << ea.error().message;
  auto early = b->AcquireLease("http://b", 5000);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.error().message.find("held by http://a"), std::string::npos);
  // A renewal keeps it: still refused after the first ttl has passed (t = 1.1 s; the
  // first ttl ended at 0.6 s, the renewed one ends at 1.4 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_TRUE(a->RenewLease("http://a", *ea, 1000).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_FALSE(b->AcquireLease("http://b", 5000).ok());
  // No more renewals: b gets it once it expires, with a higher epoch.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  Result<int64_t> eb = Error{"", "never tried"};
  while (Clock::now() < deadline) {
    eb = b->AcquireLease("http://b", 5000);
    if (eb.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(eb.ok()) << eb.error().message;
  EXPECT_GT(*eb, *ea);
  EXPECT_FALSE(a->RenewLease("http://a", *ea, 400).ok());
  EXPECT_EQ(a->Begin().error().field, "lease");
}

// Keeps `store`'s open transaction busy (a statement every 50 ms) for `ms`: a leader
// that is slow, not frozen, so the server's idle-in-transaction limit does not end it.
void KeepBusy(Store& store, int ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    (void)store.GetMeta("k");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The race the fence exists for: the old leader is inside a transaction when its lease
// expires. The takeover waits for that transaction, so its writes land before the new
// epoch exists and the new leader reads them; after that the old leader writes nothing.
TEST_F(PgStoreTest, ATakeoverWaitsForTheOldLeadersTransaction) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto ea = a->AcquireLease("http://a", 500);
  ASSERT_TRUE(ea.ok());
  ASSERT_TRUE(a->Begin().ok());
  StoredJob j;
  j.seq = 1;
  j.name = "j1";
  j.doc = "{}";
  ASSERT_TRUE(a->PutJob(j).ok());
  KeepBusy(*a, 600);  // a's lease has expired; its transaction is still open

  std::atomic<bool> done{false};
  Result<int64_t> eb = Error{"", "not run"};
  std::thread takeover([&] {
    eb = b->AcquireLease("http://b", 5000);
    done = true;
  });
  KeepBusy(*a, 300);
  EXPECT_FALSE(done.load()) << "the takeover did not wait for the old leader's transaction";
  Status commit = a->Commit();  // by epoch, not by clock: the takeover has not happened yet
  takeover.join();
  ASSERT_TRUE(commit.ok()) << commit.error().message;
  ASSERT_TRUE(eb.ok()) << eb.error().message;
  EXPECT_GT(*eb, *ea);
  EXPECT_TRUE(b->FindJob("j1")->has_value());
  Status begin = a->Begin();
  ASSERT_FALSE(begin.ok());
  EXPECT_NE(begin.error().message.find("epoch " + std::to_string(*eb)), std::string::npos);
  j.active = false;
  EXPECT_FALSE(a->PutJob(j).ok());
  EXPECT_TRUE((**b->FindJob("j1")).active);
}

// A standby opening its store while the leader writes takes no table lock: the schema's
// DDL (CREATE INDEX, ALTER TABLE) ran at every open and deadlocked with a leader's
// transaction in the long chaos run. Now it runs only on a missing or older schema.
TEST_F(PgStoreTest, OpeningBesideALeadersOpenTransactionDoesNotWaitForIt) {
  auto a = Open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->AcquireLease("http://a", 5000).ok());
  ASSERT_TRUE(a->Begin().ok());
  StoredJob j;
  j.seq = 1;
  j.name = "j1";
  j.doc = "{}";
  ASSERT_TRUE(a->PutJob(j).ok());  // holds RowExclusiveLock on jobs until it commits

  std::atomic<bool> opened{false};
  std::thread standby([&] {
    auto b = PgStore::Open(home_->server()->ConnString(home_->db()));
    EXPECT_TRUE(b) << b.error().message;
    opened = true;
  });
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (!opened.load() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(opened.load()) << "opening the store waited for the leader's transaction";
  ASSERT_TRUE(a->Commit().ok());
  standby.join();
}

// The old leader keeps its transaction going longer than the takeover will wait: the
// takeover gives up (and is tried again later) rather than hang.
TEST_F(PgStoreTest, ATakeoverGivesUpOnATransactionThatDoesNotEnd) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto ea = a->AcquireLease("http://a", 500);
  ASSERT_TRUE(ea.ok());
  ASSERT_TRUE(a->Begin().ok());
  ASSERT_TRUE(a->SetMeta("k", "v").ok());
  KeepBusy(*a, 600);  // expired
  std::thread busy([&] { KeepBusy(*a, 500); });
  const auto start = Clock::now();
  auto eb = b->AcquireLease("http://b", 200);
  const auto waited = Clock::now() - start;
  busy.join();
  ASSERT_FALSE(eb.ok());
  EXPECT_EQ(eb.error().field, "lease");
  EXPECT_NE(eb.error().message.find("did not end within 200 ms"), std::string::npos)
      << eb.error().message;
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_TRUE(a->Commit().ok());
  EXPECT_EQ(**b->GetMeta("k"), "v");
  EXPECT_TRUE(b->AcquireLease("http://b", 5000).ok());  // nothing holds the row now
}

// A leader frozen inside its transaction longer than its ttl is cut off by the server
// (idle_in_transaction_session_timeout), so the takeover does not wait forever; what the
// frozen leader wrote is lost with its transaction.
TEST_F(PgStoreTest, AFrozenLeadersTransactionIsEndedByTheServer) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto ea = a->AcquireLease("http://a", 300);
  ASSERT_TRUE(ea.ok());
  ASSERT_TRUE(a->Begin().ok());
  ASSERT_TRUE(a->SetMeta("k", "v").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle, past the ttl
  auto eb = b->AcquireLease("http://b", 2000);
  ASSERT_TRUE(eb.ok()) << eb.error().message;
  EXPECT_FALSE(a->Commit().ok());
  EXPECT_FALSE(b->GetMeta("k")->has_value());
}

// A database restart (issue 47, B5): each store connects again by itself, the leader that
// held the lease keeps it (a restarted database gives it one ttl to renew before anyone
// else may take it, though the lease ran out while the database was down), and the
// fence still holds.
TEST(PgStoreOutage, AStoreConnectsAgainAfterARestartAndItsLeaderRenewsFirst) {
  if (NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL tests";
  auto server = PgServer::Start();  // its own: this test stops it
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto db = (*server)->NewDatabase();
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto a = PgStore::Open((*server)->ConnString(*db));
  auto b = PgStore::Open((*server)->ConnString(*db));
  ASSERT_TRUE(a.ok() && b.ok());
  auto ea = (*a)->AcquireLease("http://a", 3000);
  ASSERT_TRUE(ea.ok()) << ea.error().message;
  ASSERT_TRUE((*a)->Begin().ok());
  ASSERT_TRUE((*a)->SetMeta("k", "before").ok());
  ASSERT_TRUE((*a)->Commit().ok());

  ASSERT_TRUE((*server)->Stop().ok());
  // Down: calls fail as the store's, not as a lost lease.
  Status down = (*a)->Begin();
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error().field, "store") << down.error().message;
  Status renew = (*a)->RenewLease("http://a", *ea, 3000);
  ASSERT_FALSE(renew.ok());
  EXPECT_EQ(renew.error().field, "store") << renew.error().message;
  auto taken = (*b)->AcquireLease("http://b", 3000);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.error().field, "store") << taken.error().message;
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));  // the lease runs out meanwhile

  ASSERT_TRUE((*server)->Resume().ok());
  auto early = (*b)->AcquireLease("http://b", 3000);
  ASSERT_FALSE(early.ok()) << "a standby took the lease its leader could still renew";
  EXPECT_EQ(early.error().field, "lease");
  EXPECT_NE(early.error().message.find("may renew: the database started"), std::string::npos)
      << early.error().message;
  ASSERT_TRUE((*a)->RenewLease("http://a", *ea, 3000).ok());
  ASSERT_TRUE((*a)->Begin().ok());
  auto k = (*a)->GetMeta("k");
  ASSERT_TRUE(k.ok() && k->has_value());
  EXPECT_EQ(**k, "before");
  ASSERT_TRUE((*a)->SetMeta("k", "after").ok());
  ASSERT_TRUE((*a)->Commit().ok());
  // Renewed: b still finds it held once the database has been up a ttl.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE((*a)->RenewLease("http://a", *ea, 3000).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  auto later = (*b)->AcquireLease("http://b", 3000);
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.error().message.find("held by http://a"), std::string::npos)
      << later.error().message;
}

// Issue 47 B5: reads ride through a store outage. While memory is what the store last
// committed (the outage began at a batch's start), ls, show, nodes, queues and the console's
// session answer from memory; what would change something gets 503; once the database is
// back, submits are taken again.
TEST(PgStoreOutage, ReadsAnswerFromMemoryWhileTheStoreIsDown) {
  if (NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL tests";
  auto server = PgServer::Start();  // its own: this test stops it
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto db = (*server)->NewDatabase();
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto store = PgStore::Open((*server)->ConnString(*db));
  ASSERT_TRUE(store.ok()) << store.error().message;
  StoredToken t;
  t.hash = Sha256Hex("team-token");
  t.role = "team";
  t.team = "a";
  t.queues = {"research"};
  ASSERT_TRUE((*store)->AddToken(t).ok());
  spec::Diagnostics diags;
  auto config = spec::ParseClusterConfig(
      "cluster: test\npools:\n  - name: h100\n    count: 1\n    gpus: 8\n"
      "    gpu_model: H100-80GB\nqueues:\n  - name: research\n    guaranteed_gpus: 8\n",
      "test.yaml", diags);
  ASSERT_TRUE(config) << diags.ToString();
  std::atomic<int64_t> clock{1'700'000'000'000};
  ControllerOptions o;
  o.pass_interval_ms = 50;
  o.log_dir = (*server)->dir() + "/logs";
  Controller ctl(*config, **store, o, nullptr, [&clock] { return clock.load(); });
  ASSERT_TRUE(ctl.Start().ok());
  SubmitRequest req;
  req.body = R"({"queue": "research", "gpus": 1, "vram_gb": 10, "command": ["true"]})";
  Reply submitted = ctl.Submit("team-token", req);
  ASSERT_TRUE(submitted.ok()) << submitted.body.dump();
  const std::string id = submitted.body["id"];
  // Principals are cached for 10 s: the reader's token was seen in the last 10 s.
  ASSERT_EQ(ctl.ListJobs("team-token", "", false).code, Code::kOk);

  ASSERT_TRUE((*server)->Stop().ok());
  ctl.Poke();  // a batch finds the store gone at its start: nothing changed
  EXPECT_EQ(ctl.Health()["status"], "store unavailable");
  Reply ls = ctl.ListJobs("team-token", "", false);
  ASSERT_EQ(ls.code, Code::kOk) << ls.body.dump();
  ASSERT_EQ(ls.body["jobs"].size(), 1u) << ls.body.dump();
  EXPECT_EQ(ls.body["jobs"][0]["id"], id);
  Reply show = ctl.ShowJob("team-token", id);
  EXPECT_EQ(show.code, Code::kOk) << show.body.dump();
  EXPECT_EQ(ctl.Queues("team-token").code, Code::kOk);
  EXPECT_EQ(ctl.Nodes("team-token").code, Code::kOk);
  Reply refused = ctl.Submit("team-token", req);
  EXPECT_EQ(refused.code, Code::kUnavailable) << refused.body.dump();
  EXPECT_EQ(refused.body.value("retry_after_s", 0), 1);
  // A token not seen before needs the store: refused, not let in.
  EXPECT_EQ(ctl.ListJobs("gty_unknown", "", false).code, Code::kUnavailable);

  ASSERT_TRUE((*server)->Resume().ok());
  Reply again = Reply::Error(Code::kUnavailable, "not tried yet");
  for (int i = 0; i < 100 && !again.ok(); ++i) {
    clock += 1000;  // past the next try
    again = ctl.Submit("team-token", req);
    if (!again.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(again.ok()) << again.body.dump();
  const nlohmann::json listed = ctl.ListJobs("team-token", "", false).body;
  EXPECT_EQ(listed["jobs"].size(), 2u) << listed.dump();
  ctl.Stop();
}

}  // namespace
}  // namespace gantry::server::testing
