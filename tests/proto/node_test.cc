// The node protocol's codecs: round trips, the bytes the wire carries, errors that name
// their field, hostile numbers, and docs/api.yaml's schemas against what is encoded.
#include "proto/node.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>

namespace gantry::proto {
namespace {

using nlohmann::json;

GpuReport FullGpu() {
  GpuReport g;
  g.index = 3;
  g.uuid = "GPU-3";
  g.name = "NVIDIA A100-SXM4-80GB";
  g.model = "A100-80GB";
  g.memory_bytes = 85899345920;
  g.mig_mode = true;
  g.mig = {{"MIG-1", "3g.40gb", 4, 2}, {"MIG-2", "1g.10gb", 0, -1}};
  g.utilization = 0.25;
  g.memory_used_bytes = 1 << 30;
  g.idle_ms = 1500;
  g.lost = true;
  g.nvlink_peers = {0, 1, 2};
  return g;
}

Heartbeat FullHeartbeat() {
  Heartbeat h;
  h.agent_id = "a1b2";
  h.leaving = true;
  h.address = "10.0.0.7";
  h.gpus = {FullGpu()};
  h.running = {{"j-1", 2, 0, 4242, WorkerUsage{0.5, 1024}},
               {"j-2", 1, 3, 77, std::nullopt},
               {"j-4", 1, 2, 99, std::nullopt, 3}};  // task 2 of step 3 (srun)
  h.exits = {{"j-3", 1, 0, 137, 9, true, "OOM", "MIG instance could not be made"},
             {"j-4", 1, 1, 0, 0, false, "", "", 3}};
  h.isolation =
      std::map<std::string, bool>{{"cgroups", true}, {"gpu_devices", false}, {"mig", true}};
  return h;
}

DesiredWorker FullDesired() {
  DesiredWorker w;
  w.job = "train-7";
  w.seq = 7;
  w.run = 2;
  w.rank = 1;
  w.action = DesiredWorker::Action::kStop;
  w.grace_ms = 30000;
  w.command = {"python", "train.py", "--epochs=3"};
  w.env = {{"GANTRY_RANK", "1"}, {"MASTER_ADDR", "node-0"}};
  w.workdir = "/scratch/ann";
  w.user = "ann";
  w.alloc.node = "node-1";
  w.alloc.sharing = "mig";
  w.alloc.gpu = 2;
  w.alloc.mig = "3g.40gb";
  w.alloc.start = 4;
  w.alloc.cpus_milli = 8000;
  w.alloc.memory_bytes = int64_t{64} << 30;
  w.alloc.create = true;
  w.alloc.memory_slices = 4;
  w.alloc.compute_slices = 3;
  w.limits = {int64_t{64} << 30, 8000};
  w.script = "#!/bin/sh\nsrun true\n";
  w.image = "docker.io/library/python:3.12";
  w.signal = 10;
  w.stdout_path = "slurm-7.out";
  w.stderr_path = "slurm-7.err";
  w.emulate = Emulate{0.9, 1 << 20, 60000};
  return w;
}

WatchAnswer FullAnswer() {
  WatchAnswer a;
  a.instance = "i-9";
  a.epoch = 4;
  a.version = 12;
  DesiredWorker exclusive;
  exclusive.job = "j";
  exclusive.alloc.gpus = {0, 1};
  DesiredWorker mps;
  mps.job = "k";
  mps.alloc.sharing = "mps";
  mps.alloc.gpu = 0;
  mps.alloc.share_milli = 250;
  mps.alloc.vram_bytes = 1 << 30;
  exclusive.append_output = true;
  exclusive.signal_script_only = true;
  exclusive.gpus_by_index = true;  // an sbatch job's: "gpu_names": "index"
  DesiredWorker task = exclusive;  // task 1 of a job step
  task.rank = 1;
  task.step = 2;
  task.step_cpus = {0, 2, 3};                      // an exact step's positions among the job's CPUs
  task.input = "YQpiCg==";                         // srun's stdin, "a\nb\n"
  task.signals = {{1, 10, false}, {2, 12, true}};  // scancel --signal: to the steps, then -b
  a.workers = {std::make_shared<DesiredWorker>(FullDesired()),
               std::make_shared<DesiredWorker>(exclusive), std::make_shared<DesiredWorker>(mps),
               std::make_shared<DesiredWorker>(task)};
  return a;
}

bool SameWorkers(const WatchAnswer& a, const WatchAnswer& b) {
  if (a.workers.size() != b.workers.size()) return false;
  for (size_t i = 0; i < a.workers.size(); ++i) {
    if (!(*a.workers[i] == *b.workers[i])) return false;
  }
  return a.instance == b.instance && a.epoch == b.epoch && a.version == b.version;
}

TEST(NodeProtocol, EveryMessageSurvivesARoundTripThroughItsText) {
  const Heartbeat h = FullHeartbeat();
  auto h2 = ParseHeartbeat(Encode(h).dump());
  ASSERT_TRUE(h2) << h2.error().ToString();
  EXPECT_EQ(*h2, h);

  auto w2 = DecodeDesiredWorker(json::parse(Encode(FullDesired()).dump()));
  ASSERT_TRUE(w2) << w2.error().ToString();
  EXPECT_EQ(*w2, FullDesired());

  const WatchAnswer a = FullAnswer();
  auto a2 = ParseWatchAnswer(Encode(a).dump());
  ASSERT_TRUE(a2) << a2.error().ToString();
  EXPECT_TRUE(SameWorkers(*a2, a));

  HeartbeatReply r{a, 500, 6000, 9000};
  auto r2 = ParseHeartbeatReply(Encode(r).dump());
  ASSERT_TRUE(r2) << r2.error().ToString();
  EXPECT_TRUE(SameWorkers(r2->answer, a));
  EXPECT_EQ(r2->heartbeat_ms, 500);
  EXPECT_EQ(r2->lease_ms, 6000);
  EXPECT_EQ(r2->node_timeout_ms, 9000);

  auto g2 = DecodeGpus(Encode(std::vector<GpuReport>{FullGpu(), GpuReport{}}));
  ASSERT_TRUE(g2);
  EXPECT_EQ(*g2, (std::vector<GpuReport>{FullGpu(), GpuReport{}}));
}

// The bytes agents and servers exchanged before the library: keys sorted, optional keys
// absent when empty, integers as integers and fractions as numbers.
TEST(NodeProtocol, EncodingsAreTheWireFormat) {
  DesiredWorker w;
  w.job = "j";
  w.seq = 3;
  w.run = 1;
  w.grace_ms = 30000;
  w.command = {"sleep", "1"};
  w.env = {{"B", "2"}, {"A", "1"}};
  w.workdir = "/tmp";
  w.alloc.node = "n0";
  w.alloc.gpus = {0, 1};
  w.emulate = Emulate{0.9, 0, -1};
  EXPECT_EQ(Encode(w).dump(),
            R"({"action":"run","alloc":{"cpus_milli":0,"gpus":[0,1],"memory_bytes":0,"node":"n0",)"
            R"("sharing":"exclusive"},"command":["sleep","1"],"emulate":{"idle_after_ms":-1,)"
            R"("util":0.9,"vram_used_bytes":0},"env":{"A":"1","B":"2"},"grace_ms":30000,"job":"j",)"
            R"("limits":{"cpus_milli":0,"memory_bytes":0},"rank":0,"run":1,"seq":3,"user":"",)"
            R"("workdir":"/tmp"})");
  Alloc mps;
  mps.node = "n1";
  mps.sharing = "mps";
  mps.gpu = 0;
  mps.share_milli = 250;
  mps.vram_bytes = 1024;
  EXPECT_EQ(Encode(mps).dump(),
            R"({"cpus_milli":0,"gpu":0,"memory_bytes":0,"node":"n1","share_milli":250,)"
            R"("sharing":"mps","vram_bytes":1024})");
  Heartbeat swarm;  // the swarm says nothing of isolation
  swarm.agent_id = "s";
  swarm.running = {{"j", 1, 0, 0, std::nullopt}};
  EXPECT_EQ(
      Encode(swarm).dump(),
      R"({"agent_id":"s","exits":[],"gpus":[],"running":[{"job":"j","pid":0,"rank":0,"run":1}]})");
  HeartbeatReply r;
  r.answer.instance = "i";
  r.heartbeat_ms = 500;
  EXPECT_EQ(Encode(r).dump(),
            R"({"epoch":0,"heartbeat_ms":500,"instance":"i","lease_ms":0,"node_timeout_ms":0,)"
            R"("version":-1,"workers":[]})");
}

TEST(NodeProtocol, TargetsEscapeTheirNames) {
  EXPECT_EQ(HeartbeatTarget("gpu node"), "/v1/agents/gpu%20node/heartbeat");
  EXPECT_EQ(WatchTarget("n-1", "i/1", -1, 20000),
            "/v1/agents/n-1/watch?instance=i%2F1&version=-1&timeout_ms=20000");
  EXPECT_EQ(LogsTarget("n-1", "a&b", 2, 3, 65536),
            "/v1/agents/n-1/logs?job=a%26b&run=2&rank=3&offset=65536");
}

TEST(NodeProtocol, MissingKeysTakeTheirDefaultsAndUnknownKeysAreIgnored) {
  auto h = ParseHeartbeat(R"({"agent_id":"x","future_field":{"a":1}})");
  ASSERT_TRUE(h);
  EXPECT_FALSE(h->isolation.has_value());  // an agent that does not say
  EXPECT_TRUE(h->gpus.empty());
  auto w = DecodeDesiredWorker(json::parse(R"({"job":"j","run":1,"rank":0})"));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->action, DesiredWorker::Action::kRun);
  EXPECT_EQ(w->alloc.sharing, "exclusive");
  EXPECT_FALSE(w->emulate.has_value());
  auto e = DecodeEmulate(json::parse(R"({"util":0.5})"));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->vram_used_bytes, 0);
  EXPECT_EQ(e->idle_after_ms, -1);
}

TEST(NodeProtocol, BadInputIsAnErrorNamingItsField) {
  auto error = [](std::string_view text) {
    auto h = ParseHeartbeat(text);
    return h ? std::string("accepted") : h.error().ToString();
  };
  EXPECT_EQ(error(R"({"running":[{"job":"a","run":1,"rank":0},{"job":"b","run":"x","rank":0}]})"),
            "running[1].run: must be an integer");
  EXPECT_EQ(error(R"({"exits":[{"run":1,"rank":0}]})"), "exits[0].job: is required");
  EXPECT_EQ(error(R"({"gpus":[{"index":0,"uuid":"u","mig":[{"start":"4"}]}]})"),
            "gpus[0].mig[0].start: must be an integer");
  EXPECT_EQ(error(R"({"isolation":{"cgroups":1}})"), "isolation.cgroups: must be true or false");
  EXPECT_EQ(error("[1,2]"), "must be an object");
  EXPECT_EQ(error("{"), "not JSON");
  // Hostile numbers: out of range, fractional, huge; a whole float is an integer.
  EXPECT_EQ(error(R"({"running":[{"job":"a","run":4294967296,"rank":0}]})"),
            "running[0].run: is out of range");
  EXPECT_EQ(error(R"({"running":[{"job":"a","run":1e300,"rank":0}]})"),
            "running[0].run: must be an integer");
  EXPECT_EQ(error(R"({"running":[{"job":"a","run":1.5,"rank":0}]})"),
            "running[0].run: must be an integer");
  EXPECT_EQ(error(R"({"running":[{"job":"a","run":2.0,"rank":0,"pid":18446744073709551615}]})"),
            "running[0].pid: is out of range");
  auto h = ParseHeartbeat(
      R"({"running":[{"job":"a","run":2.0,"rank":0,"util":7,"vram_used_bytes":-5}]})");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->running[0].run, 2);
  EXPECT_EQ(h->running[0].usage->util, 1.0);  // clamped to 0..1
  EXPECT_EQ(h->running[0].usage->vram_used_bytes, 0);
  auto w = DecodeDesiredWorker(json::parse(R"({"job":"j","run":1,"rank":0,"action":"pause"})"));
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().ToString(), "action: must be run or stop, got pause");
  EXPECT_EQ(DecodeRefusal(R"({"error":"standby","role":"standby","leader":"http://b:1"})").leader,
            "http://b:1");
  EXPECT_EQ(DecodeRefusal("plain text").error, "plain text");
  const Refusal held = DecodeRefusal(R"({"error":"no store","store":"unavailable","hold":true})");
  EXPECT_EQ(held.store, "unavailable");
  EXPECT_TRUE(held.hold);
  EXPECT_FALSE(DecodeRefusal(R"({"error":"no store","store":"unavailable"})").hold);
}

// docs/api.yaml describes exactly what the library writes: every key a fully filled
// message encodes is documented, and every documented property is encoded.
class ApiSchema {
 public:
  ApiSchema() : doc_(YAML::LoadFile(std::string(GANTRY_SOURCE_DIR) + "/docs/api.yaml")) {}

  YAML::Node Schema(const std::string& name) const { return doc_["components"]["schemas"][name]; }
  YAML::Node Response(const std::string& path, const std::string& verb) const {
    return doc_["paths"][path][verb]["responses"]["200"]["content"]["application/json"]["schema"];
  }
  // Records the keys `j` encodes against the schema they fall under, recursively.
  void Add(const json& j, const YAML::Node& at, const std::string& where) {
    // (Never assign a YAML::Node that is in the tree: yaml-cpp would rewrite the tree.)
    const std::string ref = at["$ref"] ? at["$ref"].as<std::string>() : "";
    const std::string name = ref.empty() ? where : ref.substr(ref.rfind('/') + 1);
    const YAML::Node schema = ref.empty() ? at : Schema(name);
    if (j.is_array()) {
      for (const json& e : j) Add(e, schema["items"], where + "[]");
      return;
    }
    if (!j.is_object()) return;
    Seen& seen = seen_[name];
    for (const auto& p : schema["properties"]) seen.documented.insert(p.first.as<std::string>());
    for (const auto& [k, v] : j.items()) {
      seen.encoded.insert(k);
      if (seen.documented.count(k) && !schema["properties"][k]["additionalProperties"])
        Add(v, schema["properties"][k], name + "." + k);
    }
  }
  // "schema: key ..." for each key encoded and not documented, or documented and never
  // encoded by any message added.
  std::vector<std::string> Differences() const {
    std::vector<std::string> out;
    for (const auto& [name, seen] : seen_) {
      for (const std::string& k : seen.encoded) {
        if (!seen.documented.count(k))
          out.push_back(name + ": " + k + " is encoded, not documented");
      }
      for (const std::string& k : seen.documented) {
        if (!seen.encoded.count(k))
          out.push_back(name + ": " + k + " is documented, never encoded");
      }
    }
    return out;
  }

 private:
  YAML::Node doc_;
  struct Seen {
    std::set<std::string> documented, encoded;
  };
  std::map<std::string, Seen> seen_;
};

TEST(NodeProtocol, DocsApiYamlDescribesExactlyWhatIsEncoded) {
  ApiSchema api;
  api.Add(Encode(FullHeartbeat()), api.Schema("Heartbeat"), "Heartbeat");
  api.Add(Encode(HeartbeatReply{FullAnswer(), 500, 6000, 9000}),
          api.Response("/v1/agents/{node}/heartbeat", "post"), "heartbeat answer");
  api.Add(Encode(FullAnswer()), api.Response("/v1/agents/{node}/watch", "get"), "watch answer");
  std::string all;
  for (const std::string& d : api.Differences()) all += d + "\n";
  EXPECT_EQ(all, "");
}

}  // namespace
}  // namespace gantry::proto
