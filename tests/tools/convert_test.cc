// Each converter on a few lines of its source format, written here: the exact trace
// lines, the cluster it sizes, and that the project's readers accept the output.
#include "sim/convert/convert.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "sim/convert/line_reader.h"
#include "sim/convert/philly.h"
#include "sim/convert/pollux.h"
#include "sim/convert/trace_files.h"
#include "test_files.h"

namespace gantry::convert {
namespace {

using testing::TempDirTest;
namespace fs = std::filesystem;

class ConvertTest : public TempDirTest {
 protected:
  ConvertSummary Run(ConvertOptions o) {
    o.out = Path("out");
    Result<ConvertSummary> r = Convert(o);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
    return r.ok() ? *r : ConvertSummary{};
  }
  std::vector<std::string> Trace() const { return Lines(Path("out/trace.jsonl")); }
  // Guaranteed and burst GPUs of a queue in the written config.
  std::pair<double, double> Queue(const spec::ClusterConfig& c, const std::string& name) {
    auto id = c.queues.Find(name);
    EXPECT_TRUE(id.has_value()) << name;
    if (!id) return {-1, -1};
    const core::QueueSpec& q = c.queues.queue(*id).spec;
    return {static_cast<double>(q.guaranteed) / core::kGpuUnits,
            static_cast<double>(q.burst) / core::kGpuUnits};
  }
};

TEST_F(ConvertTest, LineReaderReadsGzipAndPlainAlike) {
  const std::string long_field(20000, 'x');
  const std::string text = "a,b\r\n1,2\n" + long_field + "\n\nlast";
  for (const std::string& path : {Write("t.csv", text), WriteGz("t.csv.gz", text)}) {
    LineReader in;
    ASSERT_TRUE(in.Open(path).ok());
    std::vector<std::string> got;
    for (std::string line; in.Next(line);) got.push_back(line);
    EXPECT_EQ(got, (std::vector<std::string>{"a,b", "1,2", long_field, "", "last"})) << path;
    EXPECT_EQ(in.line_number(), 5);
  }
  LineReader missing;
  EXPECT_FALSE(missing.Open(Path("nope.csv")).ok());
}

TEST_F(ConvertTest, HelpersSplitGangsAndGuarantees) {
  EXPECT_EQ(SplitGang(8, 8).replicas, 1);
  EXPECT_EQ(SplitGang(16, 8).replicas, 2);
  EXPECT_EQ(SplitGang(12, 8).gpus, 6);
  EXPECT_EQ(SplitGang(7, 4).replicas, 7);
  EXPECT_EQ(SplitGang(6, 4).gpus, 3);
  // 18 GPUs in proportion 5000 : 0 : 615: floors 16 and 1, the remainder to the larger
  // fraction; an idle queue gets nothing.
  EXPECT_EQ(ProportionalGuarantees({5000, 0, 615}, 18), (std::vector<double>{16, 0, 2}));
  EXPECT_EQ(ProportionalGuarantees({1, 1, 1}, 10, 2), (std::vector<double>{4, 3, 3}));
  EXPECT_EQ(Num(1.0 / 3), "0.333");
  EXPECT_EQ(Num(2.5000), "2.5");
  EXPECT_EQ(Num(-0.0001), "0");
  EXPECT_EQ(YamlString("g2-8gpu"), "g2-8gpu");
  EXPECT_EQ(YamlString("6214e9"), "\"6214e9\"");
  EXPECT_EQ(YamlString("a b"), "\"a b\"");
}

TEST_F(ConvertTest, OpenbReplay) {
  ConvertOptions o;
  o.format = "openb";
  o.node_list = Write("nodes.csv",
                      "sn,cpu_milli,memory_mib,gpu,model\n"
                      "n0,96000,393216,8,G2\n"
                      "n1,96000,393216,8,G2\n"
                      "n2,104000,524288,2,T4\n"
                      "n3,32000,262144,0,\n");
  // Out of order on purpose; p-d was never scheduled (Pending).
  o.inputs = {Write("pods.csv",
                    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    "p-b,6000,12288,1,500,T4,BE,Running,200,1200,210\n"
                    "p-a,12000,16384,1,1000,,LS,Running,100,5100,100\n"
                    "p-c,8000,30517,0,0,,Burstable,Succeeded,300,400,300\n"
                    "p-d,4000,8192,2,1000,G2|V100M32,BE,Pending,400,460,\n")};
  const ConvertSummary s = Run(o);
  EXPECT_EQ(s.rows, 4);
  EXPECT_EQ(s.cluster_gpus, 18);
  EXPECT_EQ(s.cluster_nodes, 4);
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"p-a","submit":100,"duration":5000,"queue":"ls","tier":"critical","gpus":1,"vram_gb":16,"cpus":12,"memory_gb":17.179})",
          R"({"id":"p-b","submit":200,"duration":990,"queue":"be","tier":"best-effort","gpus":0.5,"sharing":"mps","gpu_model":"T4-16GB","vram_gb":8,"cpus":6,"memory_gb":12.884})",
          R"({"id":"p-c","submit":300,"duration":100,"queue":"burstable","tier":"standard","gpus":0,"cpus":8,"memory_gb":31.999})",
          R"({"id":"p-d","submit":400,"duration":60,"queue":"be","tier":"best-effort","gpus":2,"gpu_model":["V100-32GB","G2"],"vram_gb":32,"cpus":4,"memory_gb":8.589})"}));
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 18u);
  ASSERT_EQ(config->cluster.pools().size(), 3u);
  EXPECT_EQ(config->cluster.pools()[0].spec.name, "g2-8gpu-96cpu-384gib");
  EXPECT_EQ(config->cluster.pools()[0].spec.count, 2);
  EXPECT_EQ(config->cluster.pools()[2].spec.name, "cpu-32cpu-256gib");
  // GPU-seconds: ls 5000, be 0.5 x 990 + 2 x 60 = 615; burst = the cluster.
  EXPECT_EQ(Queue(*config, "ls"), (std::pair<double, double>{16, 18}));
  EXPECT_EQ(Queue(*config, "be"), (std::pair<double, double>{2, 18}));
  EXPECT_EQ(Queue(*config, "burstable"), (std::pair<double, double>{0, 18}));
}

TEST_F(ConvertTest, OpenbFillStopsAtTheMultipleOfCapacity) {
  ConvertOptions o;
  o.format = "openb";
  o.node_list = Write("nodes.csv",
                      "sn,cpu_milli,memory_mib,gpu,model\n"
                      "n0,96000,393216,8,G2\n"
                      "n1,104000,524288,2,T4\n");
  o.inputs = {Write("pods.csv",
                    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    "a,1000,1024,1,250,,LS,Running,0,10,0\n"
                    "b,1000,1024,2,1000,,BE,Running,0,10,0\n"
                    "c,1000,1024,0,0,,BE,Running,0,10,0\n"
                    "d,1000,1024,1,1000,,LS,Running,0,10,0\n")};
  o.fill = 1.3;
  o.seed = 42;
  const std::map<std::string, double> request = {{"a", 0.25}, {"b", 2}, {"c", 0}, {"d", 1}};
  const ConvertSummary s = Run(o);
  const double target = 1.3 * 10;
  size_t n = 0;
  ASSERT_TRUE(ReadOutput(Path("out"), &n));
  const std::vector<std::string> lines = Trace();
  ASSERT_EQ(lines.size(), n);
  ASSERT_GT(n, 4u);
  double asked = 0, before_last = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const std::string id = l.substr(7, l.find('-') - 7);  // {"id":"a-12" -> a
    before_last = asked;
    asked += request.at(id);
    EXPECT_NE(l.find("\"submit\":" + std::to_string(i) + ","), std::string::npos) << l;
    EXPECT_NE(l.find("\"duration\":" + std::to_string(n + 86400) + ","), std::string::npos) << l;
  }
  EXPECT_LT(before_last, target);
  EXPECT_GE(asked, target);
  EXPECT_EQ(s.trace.jobs, static_cast<int64_t>(n));
  // Same seed, same trace; another seed, another sample.
  const std::string first = Read(Path("out/trace.jsonl"));
  Run(o);
  EXPECT_EQ(Read(Path("out/trace.jsonl")), first);
  o.seed = 43;
  Run(o);
  EXPECT_NE(Read(Path("out/trace.jsonl")), first);
}

// The multigpu* lists have only the first five columns: fill mode only.
TEST_F(ConvertTest, OpenbShortPodListServesTheFillModeOnly) {
  ConvertOptions o;
  o.format = "openb";
  o.node_list = Write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\n");
  o.inputs = {
      Write("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1000,1024,8,1000\n")};
  o.out = Path("out");
  Result<ConvertSummary> replay = Convert(o);
  ASSERT_FALSE(replay.ok());
  EXPECT_NE(replay.error().message.find("fill mode only"), std::string::npos);
  o.fill = 2;
  const ConvertSummary s = Run(o);
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"x-0","submit":0,"duration":86402,"queue":"burstable","tier":"standard","gpus":8,"vram_gb":32,"cpus":1,"memory_gb":1.073})",
          R"({"id":"x-1","submit":1,"duration":86402,"queue":"burstable","tier":"standard","gpus":8,"vram_gb":32,"cpus":1,"memory_gb":1.073})"}));
  EXPECT_EQ(s.adjusted.at("no qos column: every pod taken as Burstable"), 1);
  ASSERT_TRUE(ReadOutput(Path("out")));
}

TEST_F(ConvertTest, PhillyGzipGangsQueuesAndOrigin) {
  EXPECT_EQ(ParseTimestamp("2017-10-04 00:00:10"), 1507075210);
  EXPECT_EQ(MondayOnOrBefore(1507075210), 1506902400);  // 2017-10-02 00:00 UTC
  EXPECT_FALSE(ParseTimestamp("2017-13-04 00:00:10"));
  ConvertOptions o;
  o.format = "philly";
  o.inputs = {WriteGz("philly.csv.gz",
                      "timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "2017-10-04 00:00:10,100.0,1,100.0,vcb\n"
                      "2017-10-03 12:00:00,0.0,16,0.0,vca\n"
                      "2017-10-05 00:00:00,50.5,12,606,vca\n"
                      "\n")};
  const ConvertSummary s = Run(o);
  EXPECT_EQ(s.rows, 3);
  EXPECT_TRUE(s.dropped.empty());
  EXPECT_EQ(s.adjusted.at("duration raised to 1 s"), 1);
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"philly-2","submit":129600,"duration":1,"queue":"vca","tier":"standard","replicas":2,"gpus":8,"vram_gb":16})",
          R"({"id":"philly-1","submit":172810,"duration":100,"queue":"vcb","tier":"standard","gpus":1,"vram_gb":16})",
          R"({"id":"philly-3","submit":259200,"duration":50.5,"queue":"vca","tier":"standard","replicas":2,"gpus":6,"vram_gb":16})"}));
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 16u);  // the peak: the 16-GPU job
  EXPECT_EQ(Queue(*config, "vca"), (std::pair<double, double>{14, 16}));
  EXPECT_EQ(Queue(*config, "vcb"), (std::pair<double, double>{2, 16}));

  o.nodes = 4;
  o.limit = 2;
  const ConvertSummary limited = Run(o);
  EXPECT_EQ(limited.trace.jobs, 2);
  EXPECT_EQ(limited.dropped.at("beyond --limit"), 1);
  EXPECT_EQ(limited.cluster_gpus, 32);
}

TEST_F(ConvertTest, GavelDurationsFromThroughputs) {
  ConvertOptions o;
  o.format = "gavel";
  o.throughputs = Write("tp.json", R"json({"v100": {
      "('A', 1)": {"null": 2.0, "('B', 1)": [1.0, 1.0]},
      "('A', 2)": {"null": 3.0},
      "('B', 1)": {"null": 0.5}},
    "k80": {"('A', 1)": {"null": 1.0}}})json");
  Write("seed=0/vc1.trace", "A\tcmd\t-n\t1\t100\t0.000000\t1\nA\tcmd\t-n\t1\t300\t10.5\t2\n");
  WriteGz("seed=0/vc2.trace.gz", "B\tcmd\t-n\t0\t50\t5\t16\nC\tcmd\t-n\t0\t10\t7\t1\n");
  o.inputs = {Path("seed=0")};
  const ConvertSummary s = Run(o);
  EXPECT_EQ(s.rows, 4);
  EXPECT_EQ(s.dropped.at("job type without a throughput"), 1);
  EXPECT_EQ(s.adjusted.at("throughput scaled from a smaller scale factor"), 1);
  // B at 16 GPUs: only B x 1 was measured, 0.5 steps/s x 16 = 8 steps/s.
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"vc1-1","submit":0,"duration":50,"queue":"vc1","tier":"standard","gpus":1,"vram_gb":16})",
          R"({"id":"vc2-1","submit":5,"duration":6.25,"queue":"vc2","tier":"standard","replicas":2,"gpus":8,"vram_gb":16})",
          R"({"id":"vc1-2","submit":10.5,"duration":100,"queue":"vc1","tier":"standard","gpus":2,"vram_gb":16})"}));
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 24u);  // peak 1 + 16 + 2 at t = 10.5 -> 3 nodes
  o.out = Path("out2");
  o.worker_type = "tpu";
  Result<ConvertSummary> tpu = Convert(o);
  ASSERT_FALSE(tpu.ok());
  EXPECT_EQ(tpu.error().field, "--worker-type");
  EXPECT_NE(tpu.error().message.find("(known: k80, v100)"), std::string::npos);
  o.worker_type = "v100";
  o.throughputs.clear();
  EXPECT_EQ(Convert(o).error().field, "--throughputs");
}

TEST_F(ConvertTest, PolluxRunTimesFromProfiles) {
  Write("profiles/toy/validation-64.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n1,10,0,0,0\n2,100,0,0,0\n");
  Write("profiles/toy/validation-128.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n1,5,0,0,0\n2,60,0,0,0\n");
  Write("profiles/toy/placements.csv",
        "placement,local_bsz,step_time,sync_time\n"
        "1,32,1.0,0.1\n1,64,2.0,0.2\n2,32,1.5,0.3\n2,64,2.5,0.5\n");
  Write("profiles/toy/scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n5,20,8,4.0,1.0\n5,20,16,6.0,2.0\n");
  ConvertOptions o;
  o.format = "pollux";
  o.profiles = Path("profiles");
  o.inputs = {Write("workload-1.csv",
                    "name,time,application,num_replicas,batch_size\n"
                    "toy-0,0,toy,1,64\n"
                    "toy-1,10,toy,2,96\n"
                    "toy-2,20,toy,1,128\n"
                    "toy-3,30.0,toy,20,320\n"
                    "cifar10-4,40,cifar10,1,128\n"
                    "mystery-5,50,mystery,1,1\n")};
  const ConvertSummary s = Run(o);
  // toy-0: 100 iterations x 2.0 s. toy-1: iterations halfway between 64 and 128 (80),
  // local batch 48 on placement "2": 2.0 s. toy-2: local 128 above the measured 64:
  // one accumulation step, 2.0 + (2.0 - 0.2) s x 60. toy-3: 20 replicas from the
  // scalability table at local batch 16: 6.0 s x 60. cifar10: no profile, the default.
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"toy-0","submit":0,"duration":200,"queue":"default","tier":"standard","gpus":1,"vram_gb":16})",
          R"({"id":"toy-1","submit":10,"duration":160,"queue":"default","tier":"standard","gpus":2,"vram_gb":16})",
          R"({"id":"toy-2","submit":20,"duration":228,"queue":"default","tier":"standard","gpus":1,"vram_gb":16})",
          R"({"id":"toy-3","submit":30,"duration":360,"queue":"default","tier":"standard","replicas":5,"gpus":4,"vram_gb":16})",
          R"({"id":"cifar10-4","submit":40,"duration":830,"queue":"default","tier":"standard","gpus":1,"vram_gb":16})"}));
  EXPECT_EQ(s.dropped.at("application without a profile or default"), 1);
  EXPECT_EQ(s.adjusted.at("run time from the per-application default"), 1);
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 64u);

  // Sia: each job's speed on the RTX and A100 pools from their own profiles (8 GPUs a node)
  // against its T4 run time; toy-0 runs 100 iterations of 1.0 s and 0.5 s there.
  Write("profiles/toy/placements-rtx.csv",
        "local_bsz,step_time,sync_time,placement\n32,0.5,0.1,1\n64,1.0,0.1,1\n");
  Write("profiles/toy/placements-dgx-ext.csv",
        "local_bsz,step_time,sync_time,placement\n32,0.25,0.1,1\n64,0.5,0.1,1\n");
  o.format = "sia";
  o.cluster_scale = 2;
  const ConvertSummary sia = Run(o);
  EXPECT_EQ(sia.cluster_gpus, 2 * (6 * 4 + 3 * 8 + 2 * 8));
  auto sia_config = ReadOutput(Path("out"));
  ASSERT_TRUE(sia_config);
  const std::vector<std::string> lines = Trace();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find(R"("speed_by_model":{"T4-16GB":1,"RTX2080Ti":2,"A100-40GB":4})"),
            std::string::npos)
      << lines[0];
  // toy-1 (2 replicas) has no "2" placement in those profiles; cifar10 has no profile.
  EXPECT_EQ(lines[1].find("speed_by_model"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[4].find("speed_by_model"), std::string::npos) << lines[4];
  EXPECT_GE(sia.adjusted.at("no speed by GPU type: a type's profile lacks the placement"), 1);
  // The trace reads back with the speeds on the models of the converted cluster.
  spec::Diagnostics d;
  spec::TraceReader reader(Path("out") + "/trace.jsonl", *sia_config);
  core::TraceJob first;
  ASSERT_TRUE(reader.Next(first, d)) << d.ToString();
  const core::Catalog& catalog = sia_config->cluster.catalog();
  EXPECT_DOUBLE_EQ(first.spec.ModelSpeed(*catalog.Find("A100-40GB")), 4.0);
  EXPECT_DOUBLE_EQ(first.spec.ModelSpeed(*catalog.Find("T4-16GB")), 1.0);
}

TEST_F(ConvertTest, TiresiasJobsOnItsClusterSpec) {
  ConvertOptions o;
  o.format = "tiresias";
  o.cluster_spec = Write("n4g4.csv",
                         "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                         "2,2,4,32,128\n");
  o.inputs = {Write("jobs.csv",
                    "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    "0,1,0,10,vgg19,100,5\n"
                    "1,8,5,10,vgg19,50,5\n"
                    "1,2,7,1,x,0,1\n")};
  const ConvertSummary s = Run(o);
  EXPECT_EQ(s.adjusted.at("repeated job_id renamed"), 1);
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"t0","submit":0,"duration":100,"queue":"default","tier":"standard","gpus":1,"vram_gb":16})",
          R"({"id":"t1","submit":5,"duration":50,"queue":"default","tier":"standard","replicas":2,"gpus":4,"vram_gb":16})",
          R"({"id":"t1-2","submit":7,"duration":1,"queue":"default","tier":"standard","gpus":2,"vram_gb":16})"}));
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 16u);
  EXPECT_EQ(config->cluster.leaves().size(), 2u);
  // A yarn-gput file has durations only.
  o.inputs = {Write("yarn.csv", "duration\n10\n20\n")};
  o.out = Path("out2");
  Result<ConvertSummary> yarn = Convert(o);
  ASSERT_FALSE(yarn.ok());
  EXPECT_NE(yarn.error().message.find("durations only"), std::string::npos);
}

TEST_F(ConvertTest, KubernetesSnapshotGivesPoolsGangsAndQueues) {
  // What `kubectl get nodes,pods -A -o json` gives: a List of nodes and pods.
  auto node = [](const std::string& name, const std::string& product, int gpus) {
    return R"({"kind":"Node","metadata":{"name":")" + name +
           R"(","labels":{"nvidia.com/gpu.product":")" + product +
           R"("}},"status":{"allocatable":{"cpu":"64","memory":"512Gi","nvidia.com/gpu":")" +
           std::to_string(gpus) + R"("},"conditions":[{"type":"Ready","status":"True"}]}})";
  };
  auto pod = [](const std::string& ns, const std::string& name, const std::string& group, int gpus,
                const std::string& on, const std::string& phase, const std::string& created,
                const std::string& annotations) {
    return R"({"kind":"Pod","metadata":{"namespace":")" + ns + R"(","name":")" + name +
           R"(","uid":"u-)" + name + R"(","creationTimestamp":")" + created + R"(","labels":{)" +
           (group.empty() ? "" : R"("scheduling.x-k8s.io/pod-group":")" + group + R"(")") +
           R"(},"annotations":{)" + annotations + R"(}},"spec":{"nodeName":")" + on +
           R"(","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":")" +
           std::to_string(gpus) +
           R"("},"requests":{"cpu":"4","memory":"16Gi"}}}]},"status":{"phase":")" + phase +
           R"("}})";
  };
  ConvertOptions o;
  o.format = "kubernetes";
  o.duration_s = 600;
  o.inputs = {Write(
      "snap.json",
      R"({"apiVersion":"v1","kind":"List","items":[)" + node("h1", "NVIDIA-H100-80GB-HBM3", 8) +
          "," + node("h2", "NVIDIA-H100-80GB-HBM3", 8) + "," +
          node("a1", "NVIDIA-A100-SXM4-40GB", 4) + "," + node("x1", "Mystery-GPU", 8) + "," +
          pod("ml", "w-0", "train", 8, "", "Pending", "2026-11-29T08:00:05Z", "") + "," +
          pod("ml", "w-1", "train", 8, "", "Pending", "2026-11-29T08:00:05Z", "") + "," +
          pod("infer", "srv", "", 2, "h1", "Running", "2026-11-29T07:00:00Z",
              R"("gantry.dev/runtime-estimate-s":"86400","gantry.dev/vram-gb":"40")") +
          "," + pod("ml", "done", "", 1, "h2", "Succeeded", "2026-11-29T06:00:00Z", "") + "]}")};
  const ConvertSummary s = Run(o);
  EXPECT_EQ(s.cluster_nodes, 3);
  EXPECT_EQ(s.cluster_gpus, 20);
  EXPECT_EQ(s.dropped.at("node of an unknown GPU model (nvidia.com/gpu.product)"), 1);
  EXPECT_EQ(s.dropped.at("ended or ending pod"), 1);
  EXPECT_EQ(s.adjusted.at("run time unknown: --duration-s"), 1);
  // The running pod arrives first; the gang is one job of 2 workers.
  EXPECT_EQ(
      Trace(),
      (std::vector<std::string>{
          R"({"id":"infer/srv","submit":0,"duration":86400,"queue":"infer","tier":"standard","gpus":2,"vram_gb":40,"cpus":4,"memory_gb":17.18})",
          R"({"id":"ml/train","submit":0,"duration":600,"queue":"ml","tier":"standard","replicas":2,"gpus":8,"vram_gb":1,"cpus":4,"memory_gb":17.18})"}));
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.pools().size(), 2u);
  EXPECT_TRUE(config->queues.Find("ml").has_value());
  EXPECT_TRUE(config->queues.Find("infer").has_value());
}

TEST_F(ConvertTest, RefusalsNameTheOption) {
  ConvertOptions o;
  o.out = Path("out");
  o.format = "helios";
  Result<ConvertSummary> r = Convert(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--format");
  EXPECT_NE(r.error().message.find("not in the public snapshot"), std::string::npos);
  o.format = "nope";
  EXPECT_EQ(Convert(o).error().field, "--format");
  o.format = "philly";
  o.inputs = {Path("missing.csv.gz")};
  EXPECT_EQ(Convert(o).error().field, "--input");
  o.inputs = {Write("bad.csv", "a,b,c\n1,2,3\n")};
  EXPECT_EQ(Convert(o).error().field, "--input");
  o.fill = 1.3;
  EXPECT_EQ(Convert(o).error().field, "--fill");
}

// The command line: exit status 0 on success, 2 on bad input (skipped when the gantry
// binary was not built next to the tests).
TEST_F(ConvertTest, CommandLineExitStatus) {
  const std::string bin = GANTRY_BINARY;
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " not built";
  const std::string jobs = Write("jobs.csv", "job_id,num_gpu,submit_time,duration\n0,1,0,10\n");
  const std::string ok =
      bin + " trace convert --format tiresias " + jobs + " --out " + Path("o") + " -q";
  EXPECT_EQ(std::system(ok.c_str()), 0);
  ASSERT_TRUE(ReadOutput(Path("o")));
  const std::string bad =
      bin + " trace convert --format helios --out " + Path("h") + " 2>/dev/null";
  const int status = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
}

}  // namespace
}  // namespace gantry::convert
