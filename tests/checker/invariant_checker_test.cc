// Unit tests of the invariant checker itself: a clean hand-written run passes, and for
// every invariant a run that breaks it is flagged under that invariant's name.
#include "checker/invariant_checker.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::checker {
namespace {

namespace fs = std::filesystem;

// Four 8-GPU H100 nodes (two NVLink domains each, leaves of two nodes), one spot L40S node
// named by name_prefix, one CPU-only node; a queue tree ml -> research, and serving.
constexpr std::string_view kConfig = R"(cluster: unit
pools:
  - name: gpu
    count: 4
    gpus: 8
    gpu_model: H100-80GB
    nvlink_domains: 2
    leaf_size: 2
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps, timeslice]
  - name: spot
    name_prefix: sp
    count: 1
    gpus: 4
    gpu_model: L40S-48GB
    leaf_size: 1
    cpus: 32
    memory_gb: 256
    spot: true
  - name: cpu
    count: 1
    gpus: 0
    cpus: 16
    memory_gb: 64
queues:
  - name: ml
    guaranteed_gpus: 8
    burst_gpus: 20
  - name: research
    parent: ml
    guaranteed_gpus: 4
    burst_gpus: 16
    weight: 2
  - name: serving
    guaranteed_gpus: 4
    burst_gpus: 8
policy:
  reclaim_idle_after_s: 900
)";

constexpr std::string_view kTrace =
    R"({"id":"w1","submit":0,"duration":1000,"queue":"research","tier":"standard","replicas":2,"gpus":2,"vram_gb":60,"cpus":8,"memory_gb":64,"topology":"nvlink","checkpoint_s":100,"grace_s":30}
{"id":"m1","submit":0,"duration":500,"queue":"serving","tier":"critical","mig":"1g.10gb","vram_gb":8}
{"id":"m2","submit":0,"duration":500,"queue":"serving","tier":"standard","mig":"1g.10gb","vram_gb":8}
{"id":"s1","submit":0,"duration":5000,"queue":"research","tier":"best-effort","gpus":0.25,"sharing":"mps","vram_gb":12,"idle_after_s":100}
{"id":"s2","submit":0,"duration":400,"queue":"research","tier":"standard","gpus":0.5,"sharing":"mps","vram_gb":40}
{"id":"t1","submit":0,"duration":400,"queue":"serving","tier":"best-effort","gpus":0.3,"sharing":"timeslice","vram_gb":10}
{"id":"c1","submit":0,"duration":300,"queue":"serving","tier":"standard","gpus":0,"vram_gb":0,"cpus":12,"memory_gb":40}
{"id":"c2","submit":0,"duration":300,"queue":"serving","tier":"standard","gpus":0,"vram_gb":0,"cpus":8,"memory_gb":30}
{"id":"crit","submit":0,"duration":100,"queue":"serving","tier":"critical","gpus":1,"vram_gb":10}
{"id":"win","submit":0,"duration":100,"queue":"research","tier":"standard","gpus":1,"vram_gb":10,"gpu_model":["H100-80GB","A100-80GB"],"window":{"start":"08:00","end":"10:00"}}
{"id":"night","submit":0,"duration":60,"queue":"research","tier":"standard","gpus":1,"vram_gb":10,"window":{"start":"22:00","end":"02:00"}}
{"id":"x1","submit":5,"duration":100,"queue":"research","tier":"standard","gpus":1,"vram_gb":500}
{"id":"r1","submit":1500,"duration":1000,"queue":"research","tier":"standard","gpus":1,"vram_gb":10,"checkpoint_s":300}
{"id":"lf","submit":3000,"duration":100,"queue":"research","tier":"standard","replicas":2,"gpus":8,"vram_gb":10,"topology":"leaf"}
)";

constexpr std::string_view kFailures = R"({"t":2000,"node":"gpu-3","down_s":500}
)";

// A run that keeps every invariant. Extra fields ("by", "reason", "extra") are ignored.
std::vector<std::string> CleanLog() {
  return {
      R"({"t":0,"type":"submit","job":"w1"})",
      R"({"t":0,"type":"submit","job":"m1"})",
      R"({"t":0,"type":"submit","job":"m2"})",
      R"({"t":0,"type":"submit","job":"s1"})",
      R"({"t":0,"type":"submit","job":"s2"})",
      R"({"t":0,"type":"submit","job":"t1"})",
      R"({"t":0,"type":"submit","job":"c1"})",
      R"({"t":0,"type":"submit","job":"c2"})",
      R"({"t":0,"type":"submit","job":"crit"})",
      R"({"t":0,"type":"submit","job":"win"})",
      R"({"t":0,"type":"submit","job":"night"})",
      R"({"t":0,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1]},{"node":"gpu-0","gpus":[2,3]}]})",
      R"({"t":0,"type":"start","job":"m1","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.10gb","start":0}]})",
      R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.10gb","start":1}]})",
      R"({"t":0,"type":"start","job":"s1","alloc":[{"node":"gpu-1","gpu":1,"share":0.25}]})",
      R"({"t":0,"type":"start","job":"s2","alloc":[{"node":"gpu-1","gpu":1,"share":0.5}]})",
      R"({"t":0,"type":"start","job":"t1","alloc":[{"node":"gpu-1","gpu":2,"share":0.3}]})",
      R"({"t":0,"type":"start","job":"c1","alloc":[{"node":"cpu-0","gpus":[]}]})",
      R"({"t":0,"type":"start","job":"c2","alloc":[{"node":"gpu-2"}],"extra":1})",
      R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"gpu-3","gpus":[0]}]})",
      R"({"t":0,"type":"wait","job":"win","reason":"outside its window"})",
      R"({"t":0,"type":"wait","job":"night","reason":"outside its window"})",
      R"({"t":5,"type":"submit","job":"x1"})",
      R"({"t":5,"type":"reject","job":"x1","error":"vram_gb 500 exceeds every GPU"})",
      R"({"t":100,"type":"finish","job":"crit"})",
      R"({"t":250,"type":"preempt","job":"w1","by":"m9","signaled":230,"reason":"test"})",
      R"({"t":260,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[4,5]},{"node":"gpu-0","gpus":[6,7]}]})",
      R"({"t":300,"type":"finish","job":"c1"})",
      R"({"t":300,"type":"finish","job":"c2"})",
      R"({"t":400,"type":"finish","job":"s2"})",
      R"({"t":400,"type":"finish","job":"t1"})",
      R"({"t":500,"type":"finish","job":"m1"})",
      R"({"t":500,"type":"finish","job":"m2"})",
      R"({"t":1000,"type":"reclaim","job":"s1","reason":"GPU idle for 900 s"})",
      R"({"t":1060,"type":"finish","job":"w1"})",
      R"({"t":1500,"type":"submit","job":"r1"})",
      R"({"t":1500,"type":"start","job":"r1","alloc":[{"node":"gpu-3","gpus":[4]}]})",
      R"({"t":2000,"type":"node_down","node":"gpu-3"})",
      R"({"t":2000,"type":"requeue","job":"r1","reason":"node gpu-3 failed"})",
      R"({"t":2000,"type":"start","job":"r1","alloc":[{"node":"gpu-2","gpus":[0]}]})",
      R"({"t":2500,"type":"node_up","node":"gpu-3"})",
      R"({"t":2700,"type":"finish","job":"r1"})",
      R"({"t":3000,"type":"submit","job":"lf"})",
      R"({"t":3000,"type":"start","job":"lf","alloc":[{"node":"gpu-0","gpus":[0,1,2,3,4,5,6,7]},{"node":"gpu-1","gpus":[0,1,2,3,4,5,6,7]}]})",
      R"({"t":3100,"type":"finish","job":"lf"})",
      R"({"t":28800,"type":"start","job":"win","alloc":[{"node":"gpu-3","gpus":[0]}]})",
      R"({"t":28900,"type":"finish","job":"win"})",
      R"({"t":90000,"type":"start","job":"night","alloc":[{"node":"gpu-3","gpus":[1]}]})",
      R"({"t":90060,"type":"finish","job":"night"})",
  };
}

// Index of the one line containing `needle`.
std::size_t Find(const std::vector<std::string>& log, std::string_view needle) {
  std::size_t found = log.size();
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i].find(needle) != std::string::npos) {
      EXPECT_EQ(found, log.size()) << "needle matches more than one line: " << needle;
      found = i;
    }
  }
  EXPECT_LT(found, log.size()) << "needle matches no line: " << needle;
  return found;
}

std::vector<std::string> Replace(std::vector<std::string> log, std::string_view needle,
                                 std::string line) {
  log[Find(log, needle)] = std::move(line);
  return log;
}

std::vector<std::string> Remove(std::vector<std::string> log, std::string_view needle) {
  log.erase(log.begin() + static_cast<std::ptrdiff_t>(Find(log, needle)));
  return log;
}

std::vector<std::string> InsertAfter(std::vector<std::string> log, std::string_view needle,
                                     std::string line) {
  log.insert(log.begin() + static_cast<std::ptrdiff_t>(Find(log, needle)) + 1, std::move(line));
  return log;
}

std::string ReplaceText(std::string text, std::string_view from, std::string_view to) {
  const std::size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

std::string Dump(const std::vector<Violation>& vs) {
  std::string s;
  for (const Violation& v : vs) s += "  " + FormatViolation(v) + "\n";
  return s.empty() ? "  (no violations)\n" : s;
}

bool Flagged(const std::vector<Violation>& vs, std::string_view invariant) {
  for (const Violation& v : vs) {
    if (v.invariant == invariant) return true;
  }
  return false;
}

// The input files of one check; the defaults are the clean scenario's.
struct Files {
  std::string config{kConfig};
  std::string trace{kTrace};
  std::string failures{kFailures};
  std::string report;  // empty: no report
};

class CheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("gantry_checker_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, std::string_view text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  CheckResult Run(const std::vector<std::string>& log, const Files& f) {
    std::string events;
    for (const std::string& l : log) events += l + "\n";
    return CheckRunDetailed(Write("c.yaml", f.config), Write("t.jsonl", f.trace),
                            Write("f.jsonl", f.failures), Write("e.jsonl", events),
                            f.report.empty() ? std::string() : Write("r.json", f.report));
  }
  std::vector<Violation> Check(const std::vector<std::string>& log, const Files& f = Files()) {
    return Run(log, f).violations;
  }

  // Expects `log` (with files `f`) to be flagged under `invariant`.
  void ExpectFlagged(std::string_view invariant, const std::vector<std::string>& log,
                     const Files& f = Files()) {
    const std::vector<Violation> vs = Check(log, f);
    EXPECT_TRUE(Flagged(vs, invariant)) << "expected [" << invariant << "], got:\n" << Dump(vs);
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------
// Clean runs.

TEST_F(CheckerTest, CleanLogPasses) {
  const CheckResult r = Run(CleanLog(), Files());
  EXPECT_TRUE(r.violations.empty()) << Dump(r.violations);
  EXPECT_TRUE(r.input_error.empty()) << r.input_error;
  EXPECT_EQ(r.stats.jobs, 14);
  EXPECT_EQ(r.stats.finished, 12);
  EXPECT_EQ(r.stats.rejected, 1);
  EXPECT_EQ(r.stats.reclaimed, 1);
  EXPECT_EQ(r.stats.unfinished, 0);
  EXPECT_EQ(r.stats.preemptions, 1);
}

// An elastic gang (min_replicas 2 of 4): starts with 2 workers, grows to 4 at its first
// checkpoint; 100 s at 2 of 4 workers did 50 s of its 1,000, so it ends 950 s later.
constexpr std::string_view kElasticTrace =
    R"({"id":"e","submit":0,"duration":1000,"queue":"research","tier":"standard","replicas":4,"min_replicas":2,"gpus":2,"vram_gb":10,"checkpoint_s":100}
{"id":"r","submit":0,"duration":100,"queue":"research","tier":"standard","replicas":2,"gpus":1,"vram_gb":10,"checkpoint_s":50}
)";

std::vector<std::string> ElasticLog() {
  return {
      R"({"t":0,"type":"submit","job":"e"})",
      R"({"t":0,"type":"submit","job":"r"})",
      R"({"t":0,"type":"start","job":"e","alloc":[{"node":"gpu-0","gpus":[0,1]},{"node":"gpu-0","gpus":[2,3]}]})",
      R"({"t":0,"type":"start","job":"r","alloc":[{"node":"gpu-1","gpus":[0]},{"node":"gpu-1","gpus":[1]}]})",
      R"({"t":100,"type":"finish","job":"r"})",
      R"({"t":100,"type":"resize","job":"e","from":2,"size":4,"alloc":[{"node":"gpu-0","gpus":[0,1]},{"node":"gpu-0","gpus":[2,3]},{"node":"gpu-0","gpus":[4,5]},{"node":"gpu-0","gpus":[6,7]}]})",
      R"({"t":1050,"type":"finish","job":"e"})"};
}

TEST_F(CheckerTest, ElasticGangsResizeAtCheckpointsWithinTheirSizes) {
  Files f;
  f.trace = kElasticTrace;
  f.failures = "";
  const CheckResult r = Run(ElasticLog(), f);
  EXPECT_TRUE(r.violations.empty()) << Dump(r.violations);
  EXPECT_EQ(r.stats.resizes, 1);
  EXPECT_EQ(r.stats.starts, 2) << "a resize is not a start";
  auto log = ElasticLog();
  // Not at a checkpoint: work since the last one is lost.
  log[5].replace(log[5].find("\"t\":100"), 7, "\"t\":150");
  log[4].replace(log[4].find("\"t\":100"), 7, "\"t\":150");
  ExpectFlagged(inv::kProgress, log, f);
  // Above its replicas.
  log = ElasticLog();
  log[5].replace(log[5].find("]}]}"), 4, R"(]},{"node":"gpu-1","gpus":[0]}]})");
  ExpectFlagged(inv::kGang, log, f);
  // Ends when a rigid run would have (the time at 2 of 4 workers counted as full speed).
  log = ElasticLog();
  log[6] = R"({"t":1000,"type":"finish","job":"e"})";
  ExpectFlagged(inv::kProgress, log, f);
  // A rigid gang is never resized, and never starts below its replicas.
  log = ElasticLog();
  log.insert(
      log.begin() + 4,
      R"({"t":50,"type":"resize","job":"r","from":2,"size":1,"alloc":[{"node":"gpu-1","gpus":[0]}]})");
  ExpectFlagged(inv::kGang, log, f);
}

TEST_F(CheckerTest, JobStillWaitingAtEndIsUnfinishedNotViolation) {
  auto log = Remove(Remove(CleanLog(), R"("start","job":"night")"), R"("finish","job":"night")");
  const CheckResult r = Run(log, Files());
  EXPECT_TRUE(r.violations.empty()) << Dump(r.violations);
  EXPECT_EQ(r.stats.unfinished, 1);
  ASSERT_EQ(r.stats.unfinished_jobs.size(), 1U);
  EXPECT_EQ(r.stats.unfinished_jobs[0], "night");
}

TEST_F(CheckerTest, OverlappingFailuresMayBeMerged) {
  // [2000, 2500) and [2200, 2800) on gpu-3: one outage until 2800; a second node_down while
  // the node is already down is tolerated.
  Files f;
  f.failures = R"({"t":2000,"node":"gpu-3","down_s":500}
{"t":2200,"node":"gpu-3","down_s":600}
)";
  auto log = Remove(CleanLog(), R"("node_up")");
  log = InsertAfter(log, R"("start","job":"r1","alloc":[{"node":"gpu-2")",
                    R"({"t":2200,"type":"node_down","node":"gpu-3"})");
  log = InsertAfter(log, R"("finish","job":"r1")", R"({"t":2800,"type":"node_up","node":"gpu-3"})");
  const std::vector<Violation> vs = Check(log, f);
  EXPECT_TRUE(vs.empty()) << Dump(vs);
}

TEST_F(CheckerTest, FailuresAfterTheEndOfTheLogAreNotRequired) {
  Files f;
  f.failures = std::string(kFailures) + R"({"t":500000,"node":"gpu-1","down_s":100}
)";
  const std::vector<Violation> vs = Check(CleanLog(), f);
  EXPECT_TRUE(vs.empty()) << Dump(vs);
}

TEST_F(CheckerTest, MigCountsAsSevenths) {
  // serving holds crit (1) + m1 + m2 (1/7 each) + t1 (0.3) = 1.5857 GPUs at t=0.
  Files f;
  f.config = ReplaceText(std::string(kConfig), "burst_gpus: 8", "burst_gpus: 1.586");
  EXPECT_TRUE(Check(CleanLog(), f).empty()) << Dump(Check(CleanLog(), f));
  f.config = ReplaceText(std::string(kConfig), "burst_gpus: 8", "burst_gpus: 1.585");
  ExpectFlagged(inv::kBurst, CleanLog(), f);
}

// ---------------------------------------------------------------------------------------
// One failing case (or more) per invariant.

TEST_F(CheckerTest, InputUnreadable) {
  const CheckResult r = CheckRunDetailed((dir_ / "missing.yaml").string(), Write("t.jsonl", kTrace),
                                         "", Write("e.jsonl", ""), "");
  EXPECT_FALSE(r.input_error.empty());
  EXPECT_TRUE(Flagged(r.violations, inv::kInput)) << Dump(r.violations);
  Files f;
  f.config = ReplaceText(std::string(kConfig), "H100-80GB", "H999-1GB");
  ExpectFlagged(inv::kInput, CleanLog(), f);
}

TEST_F(CheckerTest, EventFormat) {
  ExpectFlagged(inv::kEventFormat, InsertAfter(CleanLog(), R"("finish","job":"crit")", "{oops"));
  ExpectFlagged(inv::kEventFormat, InsertAfter(CleanLog(), R"("finish","job":"crit")",
                                               R"({"t":100,"type":"explode","job":"crit"})"));
  ExpectFlagged(inv::kEventFormat,
                InsertAfter(CleanLog(), R"("finish","job":"crit")", R"({"type":"finish"})"));
}

TEST_F(CheckerTest, TimeOrder) {
  ExpectFlagged(inv::kTimeOrder, Replace(CleanLog(), R"("finish","job":"c2")",
                                         R"({"t":299,"type":"finish","job":"c2"})"));
}

TEST_F(CheckerTest, UnknownJob) {
  ExpectFlagged(inv::kUnknownJob, InsertAfter(CleanLog(), R"("finish","job":"crit")",
                                              R"({"t":100,"type":"submit","job":"ghost"})"));
}

TEST_F(CheckerTest, LifecycleStartBeforeSubmit) {
  auto log = Remove(CleanLog(), R"("submit","job":"r1")");
  ExpectFlagged(inv::kLifecycle, log);
}

TEST_F(CheckerTest, LifecycleDoubleSubmit) {
  ExpectFlagged(inv::kLifecycle, InsertAfter(CleanLog(), R"("submit","job":"r1")",
                                             R"({"t":1500,"type":"submit","job":"r1"})"));
}

TEST_F(CheckerTest, LifecycleFinishWhilePending) {
  ExpectFlagged(inv::kLifecycle, InsertAfter(CleanLog(), R"("submit","job":"r1")",
                                             R"({"t":1500,"type":"finish","job":"r1"})"));
}

TEST_F(CheckerTest, LifecycleEventAfterFinish) {
  ExpectFlagged(inv::kLifecycle, InsertAfter(CleanLog(), R"("finish","job":"lf")",
                                             R"({"t":3100,"type":"cancel","job":"lf"})"));
}

TEST_F(CheckerTest, LifecycleRejectAfterStart) {
  auto log = InsertAfter(CleanLog(), R"("requeue","job":"r1")",
                         R"({"t":2000,"type":"reject","job":"r1","error":"late"})");
  ExpectFlagged(inv::kLifecycle, log);
}

TEST_F(CheckerTest, LifecycleStartWhileRunning) {
  ExpectFlagged(
      inv::kLifecycle,
      InsertAfter(
          CleanLog(), R"("finish","job":"crit")",
          R"({"t":100,"type":"start","job":"m1","alloc":[{"node":"gpu-2","gpu":1,"mig":"1g.10gb","start":0}]})"));
}

TEST_F(CheckerTest, LifecycleWaitWhileRunning) {
  ExpectFlagged(inv::kLifecycle, InsertAfter(CleanLog(), R"("finish","job":"crit")",
                                             R"({"t":100,"type":"wait","job":"m1","reason":"x"})"));
}

TEST_F(CheckerTest, SubmitTime) {
  auto log = Replace(CleanLog(), R"("submit","job":"x1")", R"({"t":6,"type":"submit","job":"x1"})");
  log = Replace(log, R"("reject","job":"x1")", R"({"t":6,"type":"reject","job":"x1"})");
  ExpectFlagged(inv::kSubmitTime, log);
}

TEST_F(CheckerTest, UnknownNode) {
  ExpectFlagged(
      inv::kUnknownNode,
      Replace(CleanLog(), R"("start","job":"crit")",
              R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"gpu-4","gpus":[0]}]})"));
  ExpectFlagged(
      inv::kUnknownNode,  // the spot pool's nodes are named by name_prefix
      Replace(
          CleanLog(), R"("start","job":"night")",
          R"({"t":90000,"type":"start","job":"night","alloc":[{"node":"spot-0","gpus":[1]}]})"));
  ExpectFlagged(inv::kUnknownNode, InsertAfter(CleanLog(), R"("finish","job":"crit")",
                                               R"({"t":100,"type":"node_down","node":"nope-1"})"));
}

TEST_F(CheckerTest, GpuIndex) {
  ExpectFlagged(
      inv::kGpuIndex,
      Replace(CleanLog(), R"("start","job":"crit")",
              R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"gpu-3","gpus":[8]}]})"));
  ExpectFlagged(
      inv::kGpuIndex,
      Replace(CleanLog(), R"("start","job":"night")",
              R"({"t":90000,"type":"start","job":"night","alloc":[{"node":"sp-0","gpus":[4]}]})"));
}

TEST_F(CheckerTest, GangIncomplete) {
  ExpectFlagged(
      inv::kGang,
      Replace(CleanLog(), R"("start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1]})",
              R"({"t":0,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1]}]})"));
}

TEST_F(CheckerTest, AllocShapeWholeGpuCount) {
  ExpectFlagged(
      inv::kAllocShape,
      Replace(
          CleanLog(), R"("start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1]})",
          R"({"t":0,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1,2]},{"node":"gpu-0","gpus":[3]}]})"));
}

TEST_F(CheckerTest, AllocShapeMigProfile) {
  ExpectFlagged(
      inv::kAllocShape,
      Replace(
          CleanLog(), R"("start","job":"m2")",
          R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.20gb","start":2}]})"));
}

TEST_F(CheckerTest, AllocShapeShareFraction) {
  ExpectFlagged(
      inv::kAllocShape,
      Replace(
          CleanLog(), R"("start","job":"t1")",
          R"({"t":0,"type":"start","job":"t1","alloc":[{"node":"gpu-1","gpu":2,"share":0.5}]})"));
}

TEST_F(CheckerTest, AllocShapeCpuJobWithGpus) {
  ExpectFlagged(
      inv::kAllocShape,
      Replace(CleanLog(), R"("start","job":"c2")",
              R"({"t":0,"type":"start","job":"c2","alloc":[{"node":"gpu-2","gpus":[3]}]})"));
}

TEST_F(CheckerTest, AllocShapeMissingAlloc) {
  ExpectFlagged(inv::kAllocShape, Replace(CleanLog(), R"("start","job":"crit")",
                                          R"({"t":0,"type":"start","job":"crit"})"));
}

TEST_F(CheckerTest, GpuModelNotAccepted) {
  ExpectFlagged(
      inv::kGpuModel,
      Replace(CleanLog(), R"("start","job":"win")",
              R"({"t":28800,"type":"start","job":"win","alloc":[{"node":"sp-0","gpus":[0]}]})"));
}

TEST_F(CheckerTest, VramWholeGpu) {
  // w1 needs 60 GB per GPU; the spot node's L40S has 48.
  ExpectFlagged(
      inv::kVram,
      Replace(
          CleanLog(), R"("start","job":"w1","alloc":[{"node":"gpu-0","gpus":[4,5]})",
          R"({"t":260,"type":"start","job":"w1","alloc":[{"node":"sp-0","gpus":[0,1]},{"node":"sp-0","gpus":[2,3]}]})"));
}

TEST_F(CheckerTest, VramMigInstance) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("mig":"1g.10gb","vram_gb":8})",
                        R"("mig":"1g.10gb","vram_gb":12})");
  ExpectFlagged(inv::kVram, CleanLog(), f);
}

TEST_F(CheckerTest, SharingModeNotAllowedOnPool) {
  ExpectFlagged(
      inv::kSharingMode,
      Replace(
          CleanLog(), R"("start","job":"t1")",
          R"({"t":0,"type":"start","job":"t1","alloc":[{"node":"sp-0","gpu":2,"share":0.3}]})"));
  Files f;
  f.config = ReplaceText(std::string(kConfig), "sharing: [mig, mps, timeslice]",
                         "sharing: [mps, timeslice]");
  ExpectFlagged(inv::kSharingMode, CleanLog(), f);
}

TEST_F(CheckerTest, MigPlacementStart) {
  // 1g.10gb may start at memory slices 0..6 only.
  ExpectFlagged(
      inv::kMigPlacement,
      Replace(
          CleanLog(), R"("start","job":"m2")",
          R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.10gb","start":7}]})"));
}

TEST_F(CheckerTest, MigPlacementLargerProfileStarts) {
  // 1g.20gb (two memory slices) starts at 0, 2, 4 or 6 only; 3g.40gb at 0 or 4.
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("tier":"standard","mig":"1g.10gb")",
                        R"("tier":"standard","mig":"1g.20gb")");
  auto ok = Replace(
      CleanLog(), R"("start","job":"m2")",
      R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.20gb","start":2}]})");
  EXPECT_TRUE(Check(ok, f).empty()) << Dump(Check(ok, f));
  ExpectFlagged(
      inv::kMigPlacement,
      Replace(
          CleanLog(), R"("start","job":"m2")",
          R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.20gb","start":3}]})"),
      f);
}

TEST_F(CheckerTest, MigProfileUnknownToModel) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("tier":"standard","mig":"1g.10gb")",
                        R"("tier":"standard","mig":"1g.5gb")");
  ExpectFlagged(
      inv::kMigPlacement,
      Replace(
          CleanLog(), R"("start","job":"m2")",
          R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.5gb","start":1}]})"),
      f);
}

TEST_F(CheckerTest, TopologyNvlinkDomains) {
  // GPUs 0-3 and 4-7 are the two NVLink domains of a node.
  ExpectFlagged(
      inv::kTopology,
      Replace(
          CleanLog(), R"("start","job":"w1","alloc":[{"node":"gpu-0","gpus":[0,1]})",
          R"({"t":0,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[2,3]},{"node":"gpu-0","gpus":[4,5]}]})"));
}

TEST_F(CheckerTest, TopologyNvlinkOneNode) {
  ExpectFlagged(
      inv::kTopology,
      Replace(
          CleanLog(), R"("start","job":"w1","alloc":[{"node":"gpu-0","gpus":[4,5]})",
          R"({"t":260,"type":"start","job":"w1","alloc":[{"node":"gpu-0","gpus":[4,5]},{"node":"gpu-2","gpus":[6,7]}]})"));
}

TEST_F(CheckerTest, TopologyLeaf) {
  // Leaves hold gpu-0,gpu-1 and gpu-2,gpu-3.
  ExpectFlagged(
      inv::kTopology,
      Replace(
          CleanLog(), R"("start","job":"lf")",
          R"({"t":3000,"type":"start","job":"lf","alloc":[{"node":"gpu-1","gpus":[0,1,2,3,4,5,6,7]},{"node":"gpu-2","gpus":[0,1,2,3,4,5,6,7]}]})"));
}

TEST_F(CheckerTest, TopologyNode) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("topology":"leaf")", R"("topology":"node")");
  ExpectFlagged(inv::kTopology, CleanLog(), f);
}

TEST_F(CheckerTest, WholeGpuHeldTwice) {
  ExpectFlagged(
      inv::kGpuExclusive,
      Replace(CleanLog(), R"("start","job":"crit")",
              R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"gpu-0","gpus":[1]}]})"));
}

TEST_F(CheckerTest, WholeGpuOnMigSplitGpu) {
  ExpectFlagged(
      inv::kGpuExclusive,
      Replace(CleanLog(), R"("start","job":"crit")",
              R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"gpu-1","gpus":[0]}]})"));
}

TEST_F(CheckerTest, ShareOnMigSplitGpu) {
  ExpectFlagged(
      inv::kGpuExclusive,
      Replace(
          CleanLog(), R"("start","job":"t1")",
          R"({"t":0,"type":"start","job":"t1","alloc":[{"node":"gpu-1","gpu":0,"share":0.3}]})"));
}

TEST_F(CheckerTest, MigOverlap) {
  ExpectFlagged(
      inv::kMigOverlap,
      Replace(
          CleanLog(), R"("start","job":"m2")",
          R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.10gb","start":0}]})"));
}

TEST_F(CheckerTest, MigComputeOverSeven) {
  // A declared model whose 4g profile may also start at slice 4: two of them overlap in no
  // memory slice but need 8 compute slices.
  Files f;
  f.config = ReplaceText(std::string(kConfig), "pools:\n", R"(gpu_models:
  - name: X-80
    memory_gb: 80
    mig_profiles:
      - {name: 4g.40gb, compute_slices: 4, memory_slices: 4, starts: [0, 4]}
pools:
  - name: x
    count: 1
    gpus: 1
    gpu_model: X-80
    sharing: [mig]
)");
  f.trace = ReplaceText(std::string(kTrace), R"("tier":"standard","mig":"1g.10gb")",
                        R"("tier":"standard","mig":"4g.40gb")");
  f.trace = ReplaceText(f.trace, R"("tier":"critical","mig":"1g.10gb")",
                        R"("tier":"critical","mig":"4g.40gb")");
  auto log = Replace(
      CleanLog(), R"("start","job":"m1")",
      R"({"t":0,"type":"start","job":"m1","alloc":[{"node":"x-0","gpu":0,"mig":"4g.40gb","start":0}]})");
  log = Replace(
      log, R"("start","job":"m2")",
      R"({"t":0,"type":"start","job":"m2","alloc":[{"node":"x-0","gpu":0,"mig":"4g.40gb","start":4}]})");
  const std::vector<Violation> vs = Check(log, f);
  ASSERT_TRUE(Flagged(vs, inv::kMigOverlap)) << Dump(vs);
  for (const Violation& v : vs) EXPECT_EQ(v.invariant, inv::kMigOverlap) << Dump(vs);
}

TEST_F(CheckerTest, SharesAboveOne) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("gpus":0.5,"sharing":"mps")",
                        R"("gpus":0.8,"sharing":"mps")");
  ExpectFlagged(
      inv::kShareCapacity,
      Replace(
          CleanLog(), R"("start","job":"s2")",
          R"({"t":0,"type":"start","job":"s2","alloc":[{"node":"gpu-1","gpu":1,"share":0.8}]})"),
      f);
}

TEST_F(CheckerTest, SharesExactlyOneIsFine) {
  // 0.25 + 0.75 in thousandths is exactly 1000, whatever the float rounding.
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("gpus":0.5,"sharing":"mps","vram_gb":40)",
                        R"("gpus":0.75,"sharing":"mps","vram_gb":40)");
  auto log = Replace(
      CleanLog(), R"("start","job":"s2")",
      R"({"t":0,"type":"start","job":"s2","alloc":[{"node":"gpu-1","gpu":1,"share":0.75}]})");
  const std::vector<Violation> vs = Check(log, f);
  EXPECT_TRUE(vs.empty()) << Dump(vs);
}

TEST_F(CheckerTest, SharesVramAboveGpuMemory) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("sharing":"mps","vram_gb":40)",
                        R"("sharing":"mps","vram_gb":70)");
  ExpectFlagged(inv::kShareCapacity, CleanLog(), f);
}

TEST_F(CheckerTest, SharesMpsAndTimesliceMixed) {
  ExpectFlagged(
      inv::kShareCapacity,
      Replace(
          CleanLog(), R"("start","job":"t1")",
          R"({"t":0,"type":"start","job":"t1","alloc":[{"node":"gpu-1","gpu":1,"share":0.25}]})"),
      [] {
        Files f;
        f.trace = ReplaceText(std::string(kTrace), R"("gpus":0.3,"sharing":"timeslice")",
                              R"("gpus":0.25,"sharing":"timeslice")");
        return f;
      }());
}

TEST_F(CheckerTest, NodeCpusExceeded) {
  // c1 (12 cpus, 40 GB) and c2 (8 cpus, 30 GB) on the 16-cpu, 64 GB CPU node.
  ExpectFlagged(
      inv::kNodeCapacity,
      Replace(CleanLog(), R"("start","job":"c2")",
              R"({"t":0,"type":"start","job":"c2","alloc":[{"node":"cpu-0","gpus":[]}]})"));
}

TEST_F(CheckerTest, NodeMemoryExceeded) {
  Files f;
  f.trace =
      ReplaceText(std::string(kTrace), R"("cpus":8,"memory_gb":30)", R"("cpus":1,"memory_gb":30)");
  const std::vector<Violation> vs =
      Check(Replace(CleanLog(), R"("start","job":"c2")",
                    R"({"t":0,"type":"start","job":"c2","alloc":[{"node":"cpu-0","gpus":[]}]})"),
            f);
  ASSERT_TRUE(Flagged(vs, inv::kNodeCapacity)) << Dump(vs);
  EXPECT_NE(Dump(vs).find("memory"), std::string::npos) << Dump(vs);
}

TEST_F(CheckerTest, CriticalPreempted) {
  auto log = InsertAfter(CleanLog(), R"("finish","job":"t1")",
                         R"({"t":400,"type":"preempt","job":"m1","by":"x"})");
  log = Replace(
      log, R"("finish","job":"m1")",
      R"({"t":400,"type":"start","job":"m1","alloc":[{"node":"gpu-1","gpu":0,"mig":"1g.10gb","start":0}]})");
  ExpectFlagged(inv::kCriticalPreempted, log);
}

TEST_F(CheckerTest, CriticalOnSpot) {
  ExpectFlagged(
      inv::kCriticalOnSpot,
      Replace(CleanLog(), R"("start","job":"crit")",
              R"({"t":0,"type":"start","job":"crit","alloc":[{"node":"sp-0","gpus":[0]}]})"));
}

TEST_F(CheckerTest, UnknownQueue) {
  Files f;
  f.trace =
      ReplaceText(std::string(kTrace), R"("id":"crit","submit":0,"duration":100,"queue":"serving")",
                  R"("id":"crit","submit":0,"duration":100,"queue":"nope")");
  ExpectFlagged(inv::kUnknownQueue, CleanLog(), f);
}

TEST_F(CheckerTest, BurstOfQueue) {
  Files f;
  f.config = ReplaceText(std::string(kConfig), "burst_gpus: 16", "burst_gpus: 4.5");
  ExpectFlagged(inv::kBurst, CleanLog(), f);  // w1 (4) + s1 (0.25) + s2 (0.5) = 4.75
}

TEST_F(CheckerTest, BurstOfParentBoundsChildren) {
  Files f;
  f.config = ReplaceText(std::string(kConfig), "burst_gpus: 20", "burst_gpus: 15");
  ExpectFlagged(inv::kBurst, CleanLog(), f);  // lf holds 16 GPUs in research, a child of ml
}

// Budgets: while a `budget` event says serving's budget is spent, and serving waits when
// spent, no standard job of serving may start (critical ones may); best-effort mode lets
// them start.
TEST_F(CheckerTest, StartWhileAWaitBudgetIsSpent) {
  auto spent = CleanLog();
  spent.insert(
      spent.begin(),
      R"({"t":0,"type":"budget","queue":"serving","state":"spent","spent_gpu_hours":5,"budget_gpu_hours":5})");
  Files waits;
  waits.config = ReplaceText(std::string(kConfig), "burst_gpus: 8",
                             "burst_gpus: 8\n    budget: {gpu_hours: 5, when_spent: wait}");
  const std::vector<Violation> vs = Check(spent, waits);
  EXPECT_TRUE(Flagged(vs, inv::kBudget)) << Dump(vs);
  for (const Violation& v : vs) {
    if (v.invariant == inv::kBudget) {
      EXPECT_NE(v.subject, "crit") << "critical jobs are exempt";
      EXPECT_NE(v.subject, "m1") << "critical jobs are exempt";
    }
  }
  Files demotes;
  demotes.config = ReplaceText(std::string(kConfig), "burst_gpus: 8",
                               "burst_gpus: 8\n    budget: {gpu_hours: 5}");
  EXPECT_FALSE(Flagged(Check(spent, demotes), inv::kBudget));
  // Renewed before the starts: clean.
  auto renewed = spent;
  renewed.insert(
      renewed.begin() + 1,
      R"({"t":0,"type":"budget","queue":"serving","state":"renewed","spent_gpu_hours":0,"budget_gpu_hours":5})");
  EXPECT_FALSE(Flagged(Check(renewed, waits), inv::kBudget));
  auto bad = spent;
  bad[0] = R"({"t":0,"type":"budget","queue":"nope","state":"spent"})";
  EXPECT_TRUE(Flagged(Check(bad, waits), inv::kEventFormat));
}

TEST_F(CheckerTest, WindowOutside) {
  auto log =
      Replace(CleanLog(), R"("start","job":"win")",
              R"({"t":36000,"type":"start","job":"win","alloc":[{"node":"gpu-3","gpus":[0]}]})");
  log = Replace(log, R"("finish","job":"win")", R"({"t":36100,"type":"finish","job":"win"})");
  ExpectFlagged(inv::kWindow, log);  // 10:00 is the end of [08:00, 10:00)
}

TEST_F(CheckerTest, WindowWrappingPastMidnight) {
  // [22:00, 02:00): Tuesday 02:00 is outside, Monday 23:00 inside.
  auto log =
      Replace(CleanLog(), R"("start","job":"night")",
              R"({"t":93600,"type":"start","job":"night","alloc":[{"node":"gpu-3","gpus":[1]}]})");
  log = Replace(log, R"("finish","job":"night")", R"({"t":93660,"type":"finish","job":"night"})");
  ExpectFlagged(inv::kWindow, log);
  auto ok =
      Replace(CleanLog(), R"("start","job":"night")",
              R"({"t":82800,"type":"start","job":"night","alloc":[{"node":"gpu-3","gpus":[1]}]})");
  ok = Replace(ok, R"("finish","job":"night")", R"({"t":82860,"type":"finish","job":"night"})");
  EXPECT_TRUE(Check(ok).empty()) << Dump(Check(ok));
}

TEST_F(CheckerTest, StartOnDownNode) {
  ExpectFlagged(
      inv::kNodeDownStart,
      Replace(CleanLog(), R"("start","job":"r1","alloc":[{"node":"gpu-2")",
              R"({"t":2000,"type":"start","job":"r1","alloc":[{"node":"gpu-3","gpus":[5]}]})"));
}

TEST_F(CheckerTest, NotReleasedAtNodeDown) {
  auto log = Remove(CleanLog(), R"("requeue","job":"r1")");
  log = Remove(log, R"("start","job":"r1","alloc":[{"node":"gpu-2")");
  log = Replace(log, R"("finish","job":"r1")", R"({"t":2500,"type":"finish","job":"r1"})");
  ExpectFlagged(inv::kNodeDownRelease, log);
}

TEST_F(CheckerTest, ReleasedLaterThanNodeDown) {
  auto log =
      Replace(CleanLog(), R"("requeue","job":"r1")", R"({"t":2000.5,"type":"requeue","job":"r1"})");
  log = Replace(log, R"("start","job":"r1","alloc":[{"node":"gpu-2")",
                R"({"t":2000.5,"type":"start","job":"r1","alloc":[{"node":"gpu-2","gpus":[0]}]})");
  log = Replace(log, R"("finish","job":"r1")", R"({"t":2700.5,"type":"finish","job":"r1"})");
  ExpectFlagged(inv::kNodeDownRelease, log);
}

TEST_F(CheckerTest, FailuresUpTimeDisagrees) {
  Files f;
  f.failures = R"({"t":2000,"node":"gpu-3","down_s":600}
)";
  ExpectFlagged(inv::kFailures, CleanLog(), f);
}

TEST_F(CheckerTest, FailuresMissingFromLog) {
  Files f;
  f.failures = std::string(kFailures) + R"({"t":2100,"node":"gpu-1","down_s":100}
)";
  ExpectFlagged(inv::kFailures, CleanLog(), f);
}

TEST_F(CheckerTest, FailuresNoFileButNodeDown) {
  Files f;
  f.failures = "";
  ExpectFlagged(inv::kFailures, CleanLog(), f);
}

TEST_F(CheckerTest, FailuresNodeUpWhileUp) {
  ExpectFlagged(inv::kFailures, InsertAfter(CleanLog(), R"("finish","job":"crit")",
                                            R"({"t":100,"type":"node_up","node":"gpu-2"})"));
}

TEST_F(CheckerTest, ProgressFinishTooLate) {
  ExpectFlagged(inv::kProgress, Replace(CleanLog(), R"("finish","job":"w1")",
                                        R"({"t":1061,"type":"finish","job":"w1"})"));
}

TEST_F(CheckerTest, ProgressCheckpointNotCredited) {
  // Without the 200 s kept at the preemption, w1 would end at 1260, not 1060.
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"("checkpoint_s":100,)", R"("checkpoint_s":0,)");
  ExpectFlagged(inv::kProgress, CleanLog(), f);
}

TEST_F(CheckerTest, ProgressRequeueKeepsOnlyCheckpoint) {
  // r1 ran 500 s with checkpoint_s 300: it keeps 300, so it ends at 2000 + 700.
  ExpectFlagged(inv::kProgress, Replace(CleanLog(), R"("finish","job":"r1")",
                                        R"({"t":2500,"type":"finish","job":"r1"})"));
}

TEST_F(CheckerTest, ProgressRunPastItsEnd) {
  auto log = Replace(CleanLog(), R"("finish","job":"crit")",
                     R"({"t":100,"type":"wait","job":"night","reason":"x"})");
  log = InsertAfter(log, R"("preempt","job":"w1")", R"({"t":250,"type":"requeue","job":"crit"})");
  log =
      InsertAfter(log, R"("finish","job":"c2")",
                  R"({"t":300,"type":"start","job":"crit","alloc":[{"node":"gpu-3","gpus":[0]}]})");
  log = InsertAfter(log, R"("finish","job":"t1")", R"({"t":400,"type":"finish","job":"crit"})");
  ExpectFlagged(inv::kProgress, log);  // crit needed 100 s but was requeued after 250
}

TEST_F(CheckerTest, GraceExceeded) {
  ExpectFlagged(inv::kGrace, Replace(CleanLog(), R"("preempt","job":"w1")",
                                     R"({"t":250,"type":"preempt","job":"w1","signaled":200})"));
}

TEST_F(CheckerTest, ReclaimTooEarly) {
  auto log =
      Replace(CleanLog(), R"("reclaim","job":"s1")", R"({"t":999,"type":"reclaim","job":"s1"})");
  ExpectFlagged(inv::kReclaim, log);
}

TEST_F(CheckerTest, ReclaimOfJobThatNeverIdles) {
  Files f;
  f.trace = ReplaceText(std::string(kTrace), R"(,"idle_after_s":100)", "");
  ExpectFlagged(inv::kReclaim, CleanLog(), f);
}

TEST_F(CheckerTest, ReclaimDisabledByPolicy) {
  Files f;
  f.config =
      ReplaceText(std::string(kConfig), "reclaim_idle_after_s: 900", "reclaim_idle_after_s: 0");
  ExpectFlagged(inv::kReclaim, CleanLog(), f);
}

TEST_F(CheckerTest, FinalStateStillRunning) {
  ExpectFlagged(inv::kFinalState, Remove(CleanLog(), R"("finish","job":"night")"));
}

TEST_F(CheckerTest, FinalStateNeverSubmitted) {
  auto log = Remove(CleanLog(), R"("submit","job":"x1")");
  ExpectFlagged(inv::kFinalState, Remove(log, R"("reject","job":"x1")"));
}

// ---------------------------------------------------------------------------------------
// Report agreement, on a two-job run whose numbers are worked out by hand.

constexpr std::string_view kSmallTrace =
    R"({"id":"a","submit":0,"duration":100,"queue":"research","tier":"standard","gpus":1,"vram_gb":10}
{"id":"b","submit":10,"duration":50,"queue":"serving","tier":"standard","gpus":2,"vram_gb":10,"checkpoint_s":20}
)";

std::vector<std::string> SmallLog() {
  return {
      R"({"t":0,"type":"submit","job":"a"})",
      R"({"t":0,"type":"start","job":"a","alloc":[{"node":"gpu-0","gpus":[0]}]})",
      R"({"t":10,"type":"submit","job":"b"})",
      R"({"t":10,"type":"start","job":"b","alloc":[{"node":"gpu-0","gpus":[1,2]}]})",
      R"({"t":35,"type":"preempt","job":"b"})",
      R"({"t":40,"type":"start","job":"b","alloc":[{"node":"gpu-0","gpus":[1,2]}]})",
      R"({"t":70,"type":"finish","job":"b"})",
      R"({"t":100,"type":"finish","job":"a"})",
  };
}

// a holds 1 GPU for 100 s; b holds 2 GPUs for 25 s (keeps 20, loses 5) and 30 s. The
// cluster has 4*8 + 4 = 36 GPUs, up all the time from 0 to 100.
nlohmann::json SmallReport() {
  nlohmann::json r;
  r["jobs"] = {{"submitted", 2}, {"finished", 2}, {"rejected", 0}, {"reclaimed", 0}};
  r["gpu_utilization_pct"] = 210.0 / 3600.0 * 100.0;
  r["queue_wait_time_ms"] = {{"all", {{"mean", 0}, {"p50", 0}, {"p95", 0}, {"p99", 0}}},
                             {"critical", nlohmann::json::object()},
                             {"standard", nlohmann::json::object()},
                             {"best-effort", nlohmann::json::object()}};
  r["jct_s"] = {{"mean", 80}, {"p50", 80}, {"p99", 100}};
  r["preemption_rate_pct"] = 100.0 / 3.0;
  r["preemptions"] = 1;
  r["lost_gpu_hours"] = 10.0 / 3600.0;
  r["makespan_s"] = 100;
  r["scheduling_latency_ms"] = {{"p50", 0}, {"p99", 0}, {"max", 0}};
  r["by_queue"] = {{"research", {{"gpu_hours", 100.0 / 3600.0}, {"share_pct", 47.6}}},
                   {"serving", {{"gpu_hours", 110.0 / 3600.0}, {"share_pct", 52.4}}}};
  return r;
}

const std::vector<std::string>& ReportFields() {
  static const std::vector<std::string> fields = {"/jobs/submitted",
                                                  "/jobs/finished",
                                                  "/jobs/rejected",
                                                  "/jobs/reclaimed",
                                                  "/gpu_utilization_pct",
                                                  "/preemption_rate_pct",
                                                  "/preemptions",
                                                  "/lost_gpu_hours",
                                                  "/makespan_s",
                                                  "/queue_wait_time_ms/all/mean",
                                                  "/jct_s/mean",
                                                  "/by_queue/research/gpu_hours",
                                                  "/by_queue/serving/gpu_hours"};
  return fields;
}

class ReportTest : public CheckerTest {
 protected:
  std::vector<Violation> CheckReport(const nlohmann::json& report,
                                     std::vector<std::string> log = SmallLog(),
                                     std::string failures = "") {
    Files f;
    f.trace = std::string(kSmallTrace);
    f.failures = std::move(failures);
    f.report = report.dump();
    return Check(log, f);
  }
};

TEST_F(ReportTest, CorrectReportPasses) {
  const std::vector<Violation> vs = CheckReport(SmallReport());
  EXPECT_TRUE(vs.empty()) << Dump(vs) << SmallReport().dump();
}

TEST_F(ReportTest, EachWrongFieldIsFlagged) {
  for (const std::string& field : ReportFields()) {
    nlohmann::json r = SmallReport();
    const nlohmann::json::json_pointer ptr(field);
    r[ptr] = r[ptr].get<double>() * 1.01 + 0.001;
    const std::vector<Violation> vs = CheckReport(r);
    EXPECT_TRUE(Flagged(vs, inv::kReport)) << field << " = " << r[ptr] << "\n" << Dump(vs);
  }
}

TEST_F(ReportTest, EachMissingFieldIsFlagged) {
  for (const std::string& field : ReportFields()) {
    nlohmann::json r = SmallReport();
    const nlohmann::json::json_pointer ptr(field);
    r[ptr.parent_pointer()].erase(ptr.back());
    const std::vector<Violation> vs = CheckReport(r);
    EXPECT_TRUE(Flagged(vs, inv::kReport)) << "without " << field << "\n" << Dump(vs);
  }
}

// Per-model and subtree figures: research (a child of ml) used 100 GPU-seconds of H100,
// serving 110; ml has no jobs of its own.
TEST_F(ReportTest, UsageByModelAndWithChildren) {
  nlohmann::json r = SmallReport();
  const double a = 100.0 / 3600.0, b = 110.0 / 3600.0;
  r["by_queue"]["ml"] = {{"gpu_hours", 0.0},
                         {"gpu_hours_with_children", a},
                         {"gpu_hours_by_model", nlohmann::json::object()},
                         {"gpu_hours_by_model_with_children", {{"H100-80GB", a}}}};
  r["by_queue"]["research"]["gpu_hours_with_children"] = a;
  r["by_queue"]["research"]["gpu_hours_by_model"] = {{"H100-80GB", a}};
  r["by_queue"]["serving"]["gpu_hours_with_children"] = b;
  r["by_queue"]["serving"]["gpu_hours_by_model_with_children"] = {{"H100-80GB", b}};
  EXPECT_TRUE(CheckReport(r).empty()) << Dump(CheckReport(r));
  for (const char* field :
       {"/by_queue/ml/gpu_hours_with_children", "/by_queue/research/gpu_hours_by_model/H100-80GB",
        "/by_queue/ml/gpu_hours_by_model_with_children/H100-80GB"}) {
    nlohmann::json bad = r;
    const nlohmann::json::json_pointer ptr(field);
    bad[ptr] = bad[ptr].get<double>() * 1.01 + 0.001;
    EXPECT_TRUE(Flagged(CheckReport(bad), inv::kReport)) << field;
  }
  nlohmann::json extra = r;  // a model the log never used
  extra["by_queue"]["serving"]["gpu_hours_by_model_with_children"]["L40S-48GB"] = 0.5;
  EXPECT_TRUE(Flagged(CheckReport(extra), inv::kReport));
}

// Queue names may hold dots: report fields are found by their keys.
TEST_F(ReportTest, QueueNamesWithDots) {
  Files f;
  f.config = ReplaceText(std::string(kConfig), "- name: research", "- name: team.research");
  f.trace = ReplaceText(std::string(kSmallTrace), "\"queue\":\"research\"",
                        "\"queue\":\"team.research\"");
  nlohmann::json r = SmallReport();
  r["by_queue"]["team.research"] = r["by_queue"]["research"];
  r["by_queue"].erase("research");
  f.report = r.dump();
  EXPECT_TRUE(Check(SmallLog(), f).empty()) << Dump(Check(SmallLog(), f));
  r["by_queue"]["team.research"]["gpu_hours"] = 1.0;
  f.report = r.dump();
  EXPECT_TRUE(Flagged(Check(SmallLog(), f), inv::kReport));
}

TEST_F(ReportTest, UtilizationDiscountsDownCapacity) {
  // gpu-3 (8 GPUs) down for [20, 70): capacity 3600 - 400 = 3200 GPU-seconds.
  auto log = InsertAfter(SmallLog(), R"({"t":10,"type":"start")",
                         R"({"t":20,"type":"node_down","node":"gpu-3"})");
  log = InsertAfter(log, R"("finish","job":"b")", R"({"t":70,"type":"node_up","node":"gpu-3"})");
  const std::string failures = R"({"t":20,"node":"gpu-3","down_s":50})"
                               "\n";
  nlohmann::json r = SmallReport();
  r["gpu_utilization_pct"] = 210.0 / 3200.0 * 100.0;
  const std::vector<Violation> vs = CheckReport(r, log, failures);
  EXPECT_TRUE(vs.empty()) << Dump(vs);
  EXPECT_TRUE(Flagged(CheckReport(SmallReport(), log, failures), inv::kReport));
}

}  // namespace
}  // namespace gantry::checker
