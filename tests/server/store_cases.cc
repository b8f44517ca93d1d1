#include "store_cases.h"

#include <chrono>
#include <thread>

namespace gantry::server::testing {

void StoreCases::SetUp() {
  auto home = GetParam().make_home();
  if (!home && home.error().field == "skip") GTEST_SKIP() << home.error().message;
  ASSERT_TRUE(home.ok()) << home.error().ToString();
  home_ = std::move(*home);
}

std::unique_ptr<Store> StoreCases::Open() {
  auto store = home_->Open();
  if (!store) {
    ADD_FAILURE() << "open: " << store.error().ToString();
    return nullptr;
  }
  return std::move(*store);
}

namespace {

StoredJob Job(int64_t seq, bool active = true) {
  StoredJob j;
  j.seq = seq;
  j.name = "j" + std::to_string(seq);
  j.team = "a";
  j.queue = "q";
  j.active = active;
  j.doc = "{\"n\":" + std::to_string(seq) + "}";
  return j;
}

std::vector<std::string> Names(const std::vector<StoredJob>& jobs) {
  std::vector<std::string> names;
  for (const auto& j : jobs) names.push_back(j.name);
  return names;
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST_P(StoreCases, JobsSurviveReopeningAndLoadInOrder) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Begin().ok());
    for (int i = 1; i <= 5; ++i) {
      StoredJob j = Job(i, i % 2 == 1);
      if (i == 3) {
        j.idem_key = "k3";
        j.idem_hash = "h3";
      }
      ASSERT_TRUE(store->PutJob(j).ok());
    }
    ASSERT_TRUE(store->Commit().ok());
  }
  auto store = Open();
  ASSERT_TRUE(store);
  auto jobs = store->LoadJobs(1);  // active 1, 3, 5 and the last ended one (4)
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  EXPECT_EQ(Names(*jobs), (std::vector<std::string>{"j1", "j3", "j4", "j5"}));
  EXPECT_EQ((*jobs)[1].doc, "{\"n\":3}");
  EXPECT_TRUE((*jobs)[1].active);
  EXPECT_FALSE((*jobs)[2].active);
  EXPECT_EQ((*jobs)[0].idem_key, "");  // none stored as NULL, read back as ""
  EXPECT_EQ(Names(*store->LoadJobs(0)), (std::vector<std::string>{"j1", "j3", "j5"}));
  EXPECT_EQ(store->LoadJobs(10)->size(), 5u);
  auto idem = store->FindIdempotent("a", "k3");
  ASSERT_TRUE(idem.ok());
  ASSERT_TRUE(idem->has_value());
  EXPECT_EQ((**idem).name, "j3");
  EXPECT_EQ((**idem).idem_hash, "h3");
  EXPECT_FALSE((*store->FindIdempotent("b", "k3")).has_value());  // keys are per team
  EXPECT_EQ(*store->MaxJobSeq(), 5);
  auto j2 = store->FindJob("j2");
  ASSERT_TRUE(j2.ok() && j2->has_value());
  EXPECT_EQ((**j2).seq, 2);
  EXPECT_EQ((**j2).team, "a");
  EXPECT_EQ((**j2).queue, "q");
  EXPECT_FALSE((*store->FindJob("j9")).has_value());
}

TEST_P(StoreCases, PutJobReplacesBySeq) {
  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->MaxJobSeq(), 0);
  ASSERT_TRUE(store->PutJob(Job(1)).ok());
  StoredJob ended = Job(1, false);
  ended.doc = "{\"state\":\"done\"}";
  ASSERT_TRUE(store->PutJob(ended).ok());
  auto jobs = store->LoadJobs(10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_FALSE((*jobs)[0].active);
  EXPECT_EQ((*jobs)[0].doc, "{\"state\":\"done\"}");
}

// The console's cluster history: the latest samples oldest first, a sample rewritten at the
// same time replaced, older ones pruned; kept across a reopen.
TEST_P(StoreCases, ClusterHistoryKeepsTheLatestSamplesInOrder) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
    for (int64_t t : {3000, 1000, 2000, 4000}) {
      ASSERT_TRUE(store->AddClusterSample(t, "{\"t\":" + std::to_string(t) + "}").ok());
    }
    ASSERT_TRUE(store->AddClusterSample(4000, "{\"again\":true}").ok());
    auto latest = store->ClusterSamples(3);
    ASSERT_TRUE(latest.ok()) << latest.error().message;
    EXPECT_EQ(*latest,
              (std::vector<std::pair<int64_t, std::string>>{
                  {2000, "{\"t\":2000}"}, {3000, "{\"t\":3000}"}, {4000, "{\"again\":true}"}}));
    ASSERT_TRUE(store->PruneClusterSamples(3000).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store);
  auto all = store->ClusterSamples(100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].first, 3000);
  EXPECT_EQ((*all)[1].first, 4000);
}

// sacct's window past memory: the ended jobs that ended at or after a time, in seq order,
// at most a limit; active ones never.
TEST_P(StoreCases, EndedJobsAreReadBackByWhenTheyEnded) {
  auto store = Open();
  ASSERT_TRUE(store);
  StoredJob j1 = Job(1, false), j2 = Job(2, false), j3 = Job(3), j4 = Job(4, false);
  j1.ended_ms = 1000;
  j2.ended_ms = 3000;
  j4.ended_ms = 2000;
  for (const StoredJob& j : {j1, j2, j3, j4}) ASSERT_TRUE(store->PutJob(j).ok());
  auto seqs = [&](int64_t from, int64_t limit) {
    std::vector<int64_t> out;
    auto jobs = store->EndedJobs(from, limit);
    EXPECT_TRUE(jobs.ok()) << jobs.error().message;
    for (const StoredJob& j : *jobs) out.push_back(j.seq);
    return out;
  };
  EXPECT_EQ(seqs(0, 10), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(seqs(2000, 10), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(seqs(2000, 1), std::vector<int64_t>{2});
  EXPECT_TRUE(seqs(3001, 10).empty());
  auto jobs = store->EndedJobs(2500, 10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].name, j2.name);
  EXPECT_EQ((*jobs)[0].doc, j2.doc);
  EXPECT_FALSE((*jobs)[0].active);
}

// Retention: ended jobs go oldest first, in batches; active ones stay; a purged job's seq
// is never given again, its name and idempotency key are free again.
TEST_P(StoreCases, EndedJobsArePurgedByAgeAndTheirSeqsAreNeverGivenAgain) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
    StoredJob j1 = Job(1, false), j2 = Job(2, false), j3 = Job(3), j4 = Job(4, false);
    j1.ended_ms = 1000;
    j2.ended_ms = 3000;
    j4.ended_ms = 2000;
    j4.idem_key = "k4";
    j4.idem_hash = "h4";
    for (const StoredJob& j : {j1, j2, j3, j4}) ASSERT_TRUE(store->PutJob(j).ok());
    auto jobs = store->LoadJobs(-1);
    ASSERT_TRUE(jobs.ok()) << jobs.error().message;
    ASSERT_EQ(jobs->size(), 4u);
    EXPECT_EQ((*jobs)[0].ended_ms, 1000);
    EXPECT_EQ((*jobs)[2].ended_ms, -1);  // active: NULL
    EXPECT_EQ((*jobs)[3].ended_ms, 2000);

    auto purged = store->PurgeJobs(2500, 1);  // the oldest first, one per batch
    ASSERT_TRUE(purged.ok()) << purged.error().message;
    EXPECT_EQ(*purged, std::vector<int64_t>{1});
    EXPECT_EQ(*store->PurgeJobs(2500, 10), std::vector<int64_t>{4});
    EXPECT_TRUE(store->PurgeJobs(2500, 10)->empty());
    EXPECT_FALSE((*store->FindJob("j1")).has_value());
    EXPECT_FALSE((*store->FindIdempotent("a", "k4")).has_value());
    EXPECT_TRUE((*store->FindJob("j2")).has_value());
    EXPECT_EQ(*store->MaxJobSeq(), 4);  // j4 is gone, its seq is not given again

    // Everything ended goes; the active job stays, also once it has run again.
    EXPECT_EQ(*store->PurgeJobs(1'000'000, 10), std::vector<int64_t>{2});
    EXPECT_EQ(Names(*store->LoadJobs(-1)), std::vector<std::string>{"j3"});
    EXPECT_EQ(*store->MaxJobSeq(), 4);
  }
  auto store = Open();  // the highest seq purged outlives the process
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->MaxJobSeq(), 4);
}

// A crash mid-transaction: the connection closes without Commit; a new one sees nothing.
TEST_P(StoreCases, UncommittedWorkIsLostAfterReconnecting) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Begin().ok());
    ASSERT_TRUE(store->PutJob(Job(1)).ok());
    ASSERT_TRUE(store->SetMeta("epoch_ms", "123").ok());
  }
  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->LoadJobs(10)->empty());
  EXPECT_FALSE(store->GetMeta("epoch_ms")->has_value());
}

TEST_P(StoreCases, RollbackDiscardsAndCommitIsSeenByOthers) {
  auto store = Open();
  auto other = Open();
  ASSERT_TRUE(store && other);
  ASSERT_TRUE(store->Begin().ok());
  ASSERT_TRUE(store->PutJob(Job(1)).ok());
  store->Rollback();
  EXPECT_TRUE(store->LoadJobs(10)->empty());
  ASSERT_TRUE(store->Begin().ok());
  ASSERT_TRUE(store->PutJob(Job(2)).ok());
  ASSERT_TRUE(store->Commit().ok());
  EXPECT_EQ(Names(*other->LoadJobs(10)), (std::vector<std::string>{"j2"}));
}

TEST_P(StoreCases, MetaAndNodesReplaceByKey) {
  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->GetMeta("epoch_ms")->has_value());
  ASSERT_TRUE(store->SetMeta("epoch_ms", "1").ok());
  ASSERT_TRUE(store->SetMeta("epoch_ms", "2").ok());
  EXPECT_EQ(**store->GetMeta("epoch_ms"), "2");
  ASSERT_TRUE(store->PutNode({"n2", "{\"up\":true}"}).ok());
  ASSERT_TRUE(store->PutNode({"n10", "{}"}).ok());
  ASSERT_TRUE(store->PutNode({"N1", "{}"}).ok());
  ASSERT_TRUE(store->PutNode({"n2", "{\"up\":false}"}).ok());
  auto nodes = store->LoadNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 3u);
  // Byte order, whatever the database's locale.
  EXPECT_EQ((*nodes)[0].name, "N1");
  EXPECT_EQ((*nodes)[1].name, "n10");
  EXPECT_EQ((*nodes)[2].name, "n2");
  EXPECT_EQ((*nodes)[2].doc, "{\"up\":false}");
}

TEST_P(StoreCases, SessionsAreFoundByHashEndedAndPrunedWhenExpired) {
  auto store = Open();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->AddSession("s1", "tokenhash", 5000).ok());
  ASSERT_TRUE(store->AddSession("s2", "tokenhash", 9000).ok());
  EXPECT_FALSE(store->AddSession("s1", "other", 1).ok());  // the hash is the key
  auto found = store->FindSession("s1");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((**found).first, "tokenhash");
  EXPECT_EQ((**found).second, 5000);
  EXPECT_FALSE(store->FindSession("s3")->has_value());
  ASSERT_TRUE(store->PruneSessions(5000).ok());  // expired at 5000: gone
  EXPECT_FALSE(store->FindSession("s1")->has_value());
  EXPECT_TRUE(store->FindSession("s2")->has_value());
  ASSERT_TRUE(store->DeleteSession("s2").ok());  // signed out
  EXPECT_FALSE(store->FindSession("s2")->has_value());
  EXPECT_TRUE(store->DeleteSession("s2").ok());  // twice: nothing to do
}

TEST_P(StoreCases, TokensAreFoundByHashAndRevokedByPrefix) {
  auto store = Open();
  ASSERT_TRUE(store);
  StoredToken t;
  t.hash = "abcdef0123456789";
  t.role = "team";
  t.team = "nlp";
  t.queues = {"nlp", "nlp-dev"};
  t.label = "ci";
  t.user = "alice";
  t.created_ms = 1700000000000;
  ASSERT_TRUE(store->AddToken(t).ok());
  EXPECT_FALSE(store->AddToken(t).ok());  // the hash is the key
  StoredToken u = t;
  u.hash = "abcdef01ffffffff";
  u.created_ms = t.created_ms + 1;
  ASSERT_TRUE(store->AddToken(u).ok());
  auto found = store->FindToken("abcdef0123456789");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((**found).queues, t.queues);
  EXPECT_EQ((**found).role, "team");
  EXPECT_EQ((**found).team, "nlp");
  EXPECT_EQ((**found).label, "ci");
  EXPECT_EQ((**found).user, "alice");
  EXPECT_EQ((**found).created_ms, 1700000000000);
  EXPECT_EQ(store->ListTokens()->size(), 2u);
  EXPECT_FALSE(store->DeleteToken("abc").ok());       // too short to be safe
  EXPECT_FALSE(store->DeleteToken("abcdef01").ok());  // two tokens start so
  EXPECT_FALSE(store->DeleteToken("00000000").ok());  // none does
  EXPECT_TRUE(store->DeleteToken("abcdef012").ok());
  EXPECT_FALSE((*store->FindToken("abcdef0123456789")).has_value());
  auto left = store->ListTokens();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].hash, u.hash);
}

TEST_P(StoreCases, RunsOverlappingAPeriod) {
  auto store = Open();
  ASSERT_TRUE(store);
  StoredRun r;
  r.job_seq = 1;
  r.run = 1;
  r.queue = "q";
  r.model = "H100-80GB";
  r.gpus = 0.25;
  r.start_ms = 1000;
  r.user = "alice";
  ASSERT_TRUE(store->StartRun(r).ok());
  r.user.clear();
  r.job_seq = 2;
  r.gpus = 2;
  r.start_ms = 5000;
  ASSERT_TRUE(store->StartRun(r).ok());
  ASSERT_TRUE(store->EndRun(1, 1, 2000).ok());
  ASSERT_TRUE(store->EndRun(1, 1, 9000).ok());  // only an open run ends
  auto all = store->Runs(0, 10000);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].end_ms, 2000);
  EXPECT_EQ((*all)[0].gpus, 0.25);
  EXPECT_EQ((*all)[0].model, "H100-80GB");
  EXPECT_EQ((*all)[0].user, "alice");
  EXPECT_EQ((*all)[1].user, "");
  EXPECT_EQ((*all)[1].end_ms, -1);
  EXPECT_EQ(store->Runs(2500, 4000)->size(), 0u);  // run 1 ended at 2000, run 2 starts at 5000
  EXPECT_EQ(store->Runs(6000, 7000)->size(), 1u);  // run 2 still open
  EXPECT_EQ((*all)[0].fit_gpus, -1);               // nothing reported yet

  StoredRun u;  // what run 1's worker used, set when it ended
  u.job_seq = 1;
  u.run = 1;
  u.rank = 0;
  u.busy_gpu_ms = 123.5;
  u.reported_gpu_ms = 250;
  u.vram_peak = int64_t{30} << 30;
  u.fit_gpus = 1.0 / 7;
  ASSERT_TRUE(store->SetRunUsage(u).ok());
  auto used = store->Runs(0, 3000);
  ASSERT_TRUE(used.ok());
  ASSERT_EQ(used->size(), 1u);
  EXPECT_EQ((*used)[0].busy_gpu_ms, 123.5);
  EXPECT_EQ((*used)[0].reported_gpu_ms, 250);
  EXPECT_EQ((*used)[0].vram_peak, int64_t{30} << 30);
  EXPECT_DOUBLE_EQ((*used)[0].fit_gpus, 1.0 / 7);
  EXPECT_EQ((*used)[0].user, "alice");                      // the rest stays
  EXPECT_EQ((*store->Runs(6000, 7000))[0].busy_gpu_ms, 0);  // other runs untouched
}

TEST_P(StoreCases, UsageSamplesByJobAndPrunedByAge) {
  auto store = Open();
  ASSERT_TRUE(store);
  for (int64_t t : {3000, 1000, 2000}) {
    ASSERT_TRUE(store->AddUsageSample(UsageSample{7, 1, t, 2, 0.5, int64_t{9} << 30}).ok());
  }
  ASSERT_TRUE(store->AddUsageSample(UsageSample{8, 2, 1500, 0.25, 0.1, 1}).ok());
  ASSERT_TRUE(store->AddUsageSample(UsageSample{7, 1, 2000, 2, 0.75, 5})
                  .ok());  // the same point again: replaced
  auto seven = store->UsageSamples(7);
  ASSERT_TRUE(seven.ok()) << seven.error().message;
  ASSERT_EQ(seven->size(), 3u);
  EXPECT_EQ((*seven)[0].t_ms, 1000);
  EXPECT_EQ((*seven)[1], (UsageSample{7, 1, 2000, 2, 0.75, 5}));
  EXPECT_EQ((*seven)[2].vram_peak, int64_t{9} << 30);
  auto pruned = store->PruneUsageSamples(2000);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, 2);  // job 7 at 1000, job 8 at 1500
  EXPECT_EQ(store->UsageSamples(7)->size(), 2u);
  EXPECT_TRUE(store->UsageSamples(8)->empty());
}

TEST_P(StoreCases, ANewerSchemaIsRefused) {
  {
    auto store = Open();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->SetMeta("schema_version", "99").ok());
  }
  auto again = home_->Open();
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("newer"), std::string::npos) << again.error().message;
}

// ---------------------------------------------------------------- leader lease

TEST_P(StoreCases, LeaseEpochsRenewalAndLeader) {
  auto store = Open();
  ASSERT_TRUE(store);
  auto none = store->Leader();
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_FALSE(none->has_value());

  auto e1 = store->AcquireLease("http://a:8080", 10000);
  ASSERT_TRUE(e1.ok()) << e1.error().message;
  EXPECT_GE(*e1, 1);
  auto leader = store->Leader();
  ASSERT_TRUE(leader.ok() && leader->has_value());
  EXPECT_EQ((**leader).holder, "http://a:8080");
  EXPECT_EQ((**leader).epoch, *e1);
  EXPECT_GT((**leader).expires_in_ms, 5000);
  EXPECT_LE((**leader).expires_in_ms, 10000);

  EXPECT_TRUE(store->RenewLease("http://a:8080", *e1, 20000).ok());
  EXPECT_GT((**store->Leader()).expires_in_ms, 10000);
  Status wrong_epoch = store->RenewLease("http://a:8080", *e1 + 1, 20000);
  ASSERT_FALSE(wrong_epoch.ok());
  EXPECT_EQ(wrong_epoch.error().field, "lease");
  EXPECT_NE(wrong_epoch.error().message.find("deposed"), std::string::npos);
  EXPECT_FALSE(store->RenewLease("http://b:8080", *e1, 20000).ok());

  // Every acquisition is a new term, also for the same holder, and writes follow it.
  auto e2 = store->AcquireLease("http://a:8080", 10000);
  ASSERT_TRUE(e2.ok()) << e2.error().message;
  EXPECT_EQ(*e2, *e1 + 1);
  ASSERT_TRUE(store->Begin().ok());
  ASSERT_TRUE(store->PutJob(Job(1)).ok());
  ASSERT_TRUE(store->Commit().ok());
  EXPECT_TRUE(store->PutJob(Job(2)).ok());  // outside a transaction: fenced on its own
  EXPECT_EQ(store->LoadJobs(10)->size(), 2u);
}

TEST_P(StoreCases, LeaseArgumentsAndPreconditions) {
  auto store = Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->AcquireLease("", 1000).error().field, "holder");
  EXPECT_EQ(store->AcquireLease("a", 0).error().field, "ttl_ms");
  EXPECT_EQ(store->RenewLease("a", 1, -5).error().field, "ttl_ms");
  ASSERT_TRUE(store->Begin().ok());
  EXPECT_FALSE(store->AcquireLease("a", 1000).ok());  // not inside a transaction
  store->Rollback();
  EXPECT_TRUE(store->AcquireLease("a", 1000).ok());
}

// After a takeover the old leader can change nothing, and a store without a lease
// (`gantryd token create`) is not fenced.
TEST_P(StoreCases, ADeposedLeaderChangesNothing) {
  auto old_leader = Open();
  auto new_leader = Open();
  auto tool = Open();
  ASSERT_TRUE(old_leader && new_leader && tool);
  auto e1 = old_leader->AcquireLease("http://a:8080", 300);
  ASSERT_TRUE(e1.ok()) << e1.error().message;
  ASSERT_TRUE(old_leader->PutJob(Job(1)).ok());
  SleepMs(500);  // past the ttl: PostgreSQL lets another holder in only then
  auto e2 = new_leader->AcquireLease("http://b:8080", 10000);
  ASSERT_TRUE(e2.ok()) << e2.error().message;
  EXPECT_GT(*e2, *e1);

  Status begin = old_leader->Begin();
  ASSERT_FALSE(begin.ok());
  EXPECT_EQ(begin.error().field, "lease");
  EXPECT_NE(begin.error().message.find("epoch " + std::to_string(*e2)), std::string::npos)
      << begin.error().message;
  EXPECT_NE(begin.error().message.find("http://b:8080"), std::string::npos);
  StoredJob changed = Job(1, false);
  EXPECT_FALSE(old_leader->PutJob(changed).ok());
  EXPECT_FALSE(old_leader->PutJob(Job(7)).ok());
  EXPECT_FALSE(old_leader->SetMeta("epoch_ms", "5").ok());
  EXPECT_FALSE(old_leader->Commit().ok());
  Status renew = old_leader->RenewLease("http://a:8080", *e1, 10000);
  ASSERT_FALSE(renew.ok());
  EXPECT_NE(renew.error().message.find("deposed"), std::string::npos);

  auto jobs = new_leader->LoadJobs(10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(Names(*jobs), (std::vector<std::string>{"j1"}));
  EXPECT_TRUE((*jobs)[0].active);
  EXPECT_FALSE(new_leader->GetMeta("epoch_ms")->has_value());
  ASSERT_TRUE(new_leader->Begin().ok());
  ASSERT_TRUE(new_leader->PutJob(changed).ok());
  ASSERT_TRUE(new_leader->Commit().ok());
  EXPECT_TRUE(new_leader->RenewLease("http://b:8080", *e2, 10000).ok());
  EXPECT_EQ((**new_leader->Leader()).holder, "http://b:8080");

  StoredToken t;
  t.hash = "0123456789abcdef";
  t.role = "admin";
  EXPECT_TRUE(tool->AddToken(t).ok());
  EXPECT_TRUE((*new_leader->FindToken(t.hash)).has_value());
}

}  // namespace
}  // namespace gantry::server::testing
