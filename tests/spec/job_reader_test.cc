// Job specs from JSON and YAML, traces and failure files: every validation error with
// its file, line and field.

#include "spec/job_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/model/feasibility.h"
#include "core/scheduler.h"

namespace gantry::spec {
namespace {

using core::kGB;
using core::Sharing;

const char* kConfig = R"(cluster: lab
pools:
  - name: h100
    count: 4
    gpus: 8
    gpu_model: H100-80GB
    leaf_size: 2
    cpus: 112
    memory_gb: 2048
    sharing: [mig, mps]
  - name: h200
    count: 2
    gpus: 8
    gpu_model: H200-141GB
    sharing: [mig]
  - name: l40s
    count: 2
    gpus: 4
    gpu_model: L40S-48GB
    sharing: [timeslice]
  - name: cpu
    count: 2
    gpus: 0
    cpus: 224
queues:
  - name: default
  - name: research
  - name: serving
)";

class JobReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Diagnostics d;
    auto c = ParseClusterConfig(kConfig, "lab.yaml", d);
    ASSERT_TRUE(c.has_value()) << d.ToString();
    config_.emplace(std::move(*c));
  }

  const ClusterConfig& config() const { return *config_; }
  core::ModelId Model(const char* name) const { return *config().cluster.catalog().Find(name); }
  core::ModelMask Mask(const char* name) const { return core::ModelMask{1} << Model(name).v; }

  // A trace line expected to parse.
  core::TraceJob Line(const std::string& json, int line = 1) {
    Diagnostics d;
    auto j = ParseTraceLine(json, "jobs.jsonl", line, config(), d);
    EXPECT_TRUE(j.has_value()) << d.ToString();
    EXPECT_TRUE(d.empty()) << d.ToString();
    return j.value_or(core::TraceJob{});
  }

  // A trace line expected to fail; its problems as "FILE:LINE: FIELD: MESSAGE".
  std::vector<std::string> Bad(const std::string& json, int line = 3) {
    Diagnostics d;
    auto j = ParseTraceLine(json, "jobs.jsonl", line, config(), d);
    EXPECT_FALSE(j.has_value());
    EXPECT_FALSE(d.empty());
    std::vector<std::string> out;
    for (const Diag& x : d.items()) out.push_back(x.ToString());
    return out;
  }

  std::string OneBad(const std::string& json, int line = 3) {
    std::vector<std::string> e = Bad(json, line);
    EXPECT_EQ(e.size(), 1u) << ::testing::PrintToString(e);
    return e.empty() ? "" : e.front();
  }

  // `fields` completed into a valid trace line prefix.
  static std::string T(const std::string& fields) {
    return R"({"id":"j","submit":0,"duration":60,)" + fields + "}";
  }

  std::string Path(const std::string& name) const {
    return ::testing::TempDir() + "/gantry_job_reader_test_" + name;
  }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = Path(name);
    std::ofstream(p) << text;
    return p;
  }

  std::optional<ClusterConfig> config_;
};

TEST_F(JobReaderTest, SpecExampleLines) {
  core::TraceJob j1 = Line(
      R"({"id":"j1","submit":0,"duration":3600,"queue":"research","tier":"standard","replicas":2,"gpus":8,"gpu_model":"H100-80GB","vram_gb":60,"topology":"leaf","checkpoint_s":900,"grace_s":60})",
      1);
  EXPECT_EQ(j1.spec.id, "j1");
  EXPECT_EQ(j1.submit, 0);
  EXPECT_EQ(j1.duration, 3'600'000);
  EXPECT_EQ(j1.line, 1);
  EXPECT_EQ(j1.spec.queue, *config().queues.Find("research"));
  EXPECT_EQ(j1.spec.tier, core::Tier::kStandard);
  EXPECT_EQ(j1.spec.replicas, 2);
  EXPECT_EQ(j1.spec.sharing, Sharing::kExclusive);
  EXPECT_EQ(j1.spec.gpus, 8);
  EXPECT_EQ(j1.spec.models, Mask("H100-80GB"));
  EXPECT_EQ(j1.spec.vram_bytes, 60 * kGB);
  EXPECT_EQ(j1.spec.topology, core::Topology::kLeaf);
  EXPECT_EQ(j1.spec.checkpoint, 900'000);
  EXPECT_EQ(j1.spec.grace, 60'000);
  EXPECT_FALSE(j1.idle_after.has_value());

  core::TraceJob j2 = Line(
      R"({"id":"j2","submit":5,"duration":600,"queue":"serving","tier":"critical","mig":"1g.10gb","vram_gb":8})",
      2);
  EXPECT_EQ(j2.spec.sharing, Sharing::kMig);
  EXPECT_EQ(j2.spec.mig_profile, "1g.10gb");
  EXPECT_EQ(j2.spec.tier, core::Tier::kCritical);
  EXPECT_EQ(j2.submit, 5000);
  const core::Catalog& cat = config().cluster.catalog();
  ASSERT_EQ(j2.spec.mig_index.size(), cat.size());
  for (size_t m = 0; m < cat.size(); ++m) {
    const core::ModelId id(static_cast<uint32_t>(m));
    EXPECT_EQ(j2.spec.mig_index[m], cat.FindProfile(id, "1g.10gb")) << cat.model(id).name;
    // Only models with the profile are accepted.
    EXPECT_EQ((j2.spec.models >> m) & 1u, cat.FindProfile(id, "1g.10gb") >= 0 ? 1u : 0u);
  }
  EXPECT_EQ(j2.spec.mig_index[Model("L40S-48GB").v], -1);
  EXPECT_GE(j2.spec.mig_index[Model("H100-80GB").v], 0);

  core::TraceJob j3 = Line(
      R"({"id":"j3","submit":7,"duration":7200,"queue":"research","tier":"best-effort","gpus":0.25,"sharing":"mps","vram_gb":12,"idle_after_s":1200})",
      3);
  EXPECT_EQ(j3.spec.sharing, Sharing::kMps);
  EXPECT_EQ(j3.spec.share_milli, 250);
  EXPECT_EQ(j3.spec.gpus, 0);
  EXPECT_EQ(j3.spec.tier, core::Tier::kBestEffort);
  EXPECT_EQ(j3.idle_after, 1'200'000);
  EXPECT_EQ(j3.spec.models, (core::ModelMask{1} << cat.size()) - 1);  // absent = any model
}

TEST_F(JobReaderTest, ElasticGangsInTracesAndJobSpecs) {
  core::TraceJob e = Line(T(R"("replicas":4,"min_replicas":2,"gpus":8,"vram_gb":10)"));
  EXPECT_EQ(e.spec.min_replicas, 2);
  EXPECT_TRUE(e.spec.elastic());
  EXPECT_EQ(Line(T(R"("replicas":4,"min_replicas":4,"gpus":8,"vram_gb":10)")).spec.min_replicas, 0)
      << "min_replicas = replicas is a rigid gang";
  EXPECT_NE(OneBad(T(R"("replicas":2,"min_replicas":3,"gpus":8,"vram_gb":10)"))
                .find("jobs.jsonl:3: min_replicas: must be at most replicas (2)"),
            std::string::npos);
  EXPECT_NE(
      OneBad(T(R"("replicas":2,"min_replicas":1,"mig":"1g.10gb","vram_gb":5)")).find("not elastic"),
      std::string::npos);
  // Whole groups of workers_per_node (Slurm's -N 2-4 with --ntasks-per-node 8).
  EXPECT_EQ(Line(T(R"("replicas":32,"min_replicas":16,"workers_per_node":8,"gpus":1,"vram_gb":10)"))
                .spec.min_replicas,
            16);
  EXPECT_NE(
      OneBad(T(R"("replicas":32,"min_replicas":12,"workers_per_node":8,"gpus":1,"vram_gb":10)"))
          .find("min_replicas: 12 is not a whole number of nodes' workers (workers_per_node 8)"),
      std::string::npos);
  // A measured profile: a throughput per size, 1 to replicas.
  core::TraceJob sp =
      Line(T(R"("replicas":3,"min_replicas":1,"speedup":[0.5,0.9,1.2],"gpus":8,"vram_gb":10)"));
  ASSERT_TRUE(sp.spec.speedup);
  EXPECT_DOUBLE_EQ(sp.spec.SpeedInWorkers(1), 3 * 0.5 / 1.2);
  EXPECT_DOUBLE_EQ(sp.spec.SpeedInWorkers(3), 3.0);
  EXPECT_DOUBLE_EQ(
      Line(T(R"("replicas":3,"min_replicas":1,"gpus":8,"vram_gb":10)")).spec.SpeedInWorkers(2), 2.0)
      << "linear without one";
  EXPECT_NE(OneBad(T(R"("replicas":3,"min_replicas":1,"speedup":[1,2],"gpus":8,"vram_gb":10)"))
                .find("speedup: needs one throughput per size, 1 to replicas (3), got 2"),
            std::string::npos);
  EXPECT_NE(OneBad(T(R"("replicas":2,"min_replicas":1,"speedup":[0,1],"gpus":8,"vram_gb":10)"))
                .find("speedup: throughputs must be numbers above 0"),
            std::string::npos);
  EXPECT_NE(OneBad(T(R"("replicas":2,"speedup":[1,2],"gpus":8,"vram_gb":10)"))
                .find("speedup: only for an elastic job"),
            std::string::npos);
  // speed_by_model: a speed per model as gpu_model names it (any case, product names),
  // 1 for the models it leaves out.
  core::TraceJob fast =
      Line(T(R"("gpus":8,"vram_gb":10,"speed_by_model":{"H200-141GB":1.8,"h100-80gb":1.25})"));
  ASSERT_TRUE(fast.spec.model_speed);
  EXPECT_DOUBLE_EQ(fast.spec.ModelSpeed(Model("H200-141GB")), 1.8);
  EXPECT_DOUBLE_EQ(fast.spec.ModelSpeed(Model("H100-80GB")), 1.25);
  EXPECT_DOUBLE_EQ(fast.spec.ModelSpeed(Model("L40S-48GB")), 1.0);
  EXPECT_DOUBLE_EQ(fast.spec.SlowestSpeed(), 1.0) << "it may run on the L40S at 1";
  EXPECT_FALSE(Line(T(R"("gpus":8,"vram_gb":10)")).spec.model_speed) << "none: 1 everywhere";
  EXPECT_NE(OneBad(T(R"("gpus":8,"vram_gb":10,"speed_by_model":{"Z9":2})"))
                .find("speed_by_model.Z9: unknown GPU model \"Z9\""),
            std::string::npos);
  EXPECT_NE(OneBad(T(R"("gpus":8,"vram_gb":10,"speed_by_model":{"H100-80GB":0})"))
                .find("speed_by_model.H100-80GB: a speed is a number above 0, got \"0\""),
            std::string::npos);
  EXPECT_NE(OneBad(T(R"("gpus":8,"vram_gb":10,"speed_by_model":[2])"))
                .find("speed_by_model: expected a mapping of GPU models to speeds above 0"),
            std::string::npos);
  // gantryd runs them too.
  Diagnostics d;
  auto spec =
      ParseJobJson(R"({"replicas":4,"min_replicas":2,"gpus":8,"vram_gb":10,"command":["true"]})",
                   "job.json", config(), d);
  ASSERT_TRUE(spec.has_value()) << d.ToString();
  EXPECT_EQ(spec->min_replicas, 2);
  EXPECT_TRUE(spec->elastic());
}

TEST_F(JobReaderTest, Defaults) {
  core::TraceJob j = Line(R"({"submit":1.5,"duration":0.25,"cpus":2.5,"memory_gb":1.5})", 7);
  EXPECT_EQ(j.spec.id, "line-7");
  EXPECT_EQ(j.spec.queue, *config().queues.Find("default"));
  EXPECT_EQ(j.spec.tier, core::Tier::kStandard);
  EXPECT_EQ(j.spec.replicas, 1);
  EXPECT_EQ(j.spec.gpus, 0);
  EXPECT_FALSE(j.spec.uses_gpu());
  EXPECT_EQ(j.spec.topology, core::Topology::kSpine);
  EXPECT_EQ(j.spec.cpus_milli, 2500);
  EXPECT_EQ(j.spec.memory_bytes, 1'500'000'000);
  EXPECT_EQ(j.submit, 1500);
  EXPECT_EQ(j.duration, 250);
  EXPECT_EQ(j.spec.mig_index.size(), config().cluster.catalog().size());
}

TEST_F(JobReaderTest, NegativeGpusNamesLineAndField) {
  EXPECT_EQ(OneBad(T(R"("gpus":-2,"vram_gb":10)")),
            "jobs.jsonl:3: gpus: must be at least 0, got -2");
}

TEST_F(JobReaderTest, JsonKeepsTypes) {
  // In JSON a string is not a number, unlike in YAML.
  EXPECT_EQ(OneBad(T(R"("gpus":"2","vram_gb":10)")),
            "jobs.jsonl:3: gpus: expected a number, got \"2\"");
  EXPECT_EQ(OneBad(T(R"("gpus":1,"vram_gb":"abc")")),
            "jobs.jsonl:3: vram_gb: expected a number, got \"abc\"");
  EXPECT_EQ(OneBad(T(R"("id2":1)")).rfind("jobs.jsonl:3: id2: unknown field", 0), 0u);
  EXPECT_EQ(OneBad(R"({"id":5,"submit":0,"duration":1})"),
            "jobs.jsonl:3: id: expected a string, got 5");
  EXPECT_EQ(OneBad(T(R"("replicas":true)")),
            "jobs.jsonl:3: replicas: expected a whole number, got true");
  EXPECT_EQ(OneBad(T(R"("env":{"A":1})")), "jobs.jsonl:3: env.A: expected a string, got 1");
}

TEST_F(JobReaderTest, GpuShapes) {
  EXPECT_EQ(OneBad(T(R"("gpus":0.5,"vram_gb":10)")),
            "jobs.jsonl:3: gpus: fraction without a sharing mode: 0.5 of a GPU needs sharing mps "
            "or timeslice");
  EXPECT_EQ(OneBad(T(R"("gpus":0.5,"sharing":"exclusive","vram_gb":10)")),
            "jobs.jsonl:3: gpus: fraction without a sharing mode: 0.5 of a GPU needs sharing mps "
            "or timeslice");
  EXPECT_EQ(OneBad(T(R"("gpus":1.5,"vram_gb":10)")),
            "jobs.jsonl:3: gpus: must be a whole number, or a fraction below 1 with sharing mps or "
            "timeslice, got 1.5");
  EXPECT_EQ(OneBad(T(R"("gpus":2,"sharing":"mps","vram_gb":10)")),
            "jobs.jsonl:3: gpus: with sharing mps, must be a fraction of one GPU above 0 and below "
            "1, got 2");
  EXPECT_EQ(OneBad(T(R"("sharing":"timeslice","vram_gb":10)")),
            "jobs.jsonl:3: gpus: required with sharing timeslice: the share of one GPU each worker "
            "takes, e.g. 0.25");
  EXPECT_EQ(OneBad(T(R"("gpus":0.0004,"sharing":"mps","vram_gb":10)")),
            "jobs.jsonl:3: gpus: shares are thousandths of a GPU (0.001 to 0.999), got 0.0004");
  EXPECT_EQ(OneBad(T(R"("gpus":0.9996,"sharing":"mps","vram_gb":10)")),
            "jobs.jsonl:3: gpus: shares are thousandths of a GPU (0.001 to 0.999), got 0.9996");
  EXPECT_EQ(Line(T(R"("gpus":0.3333,"sharing":"timeslice","vram_gb":10)")).spec.share_milli, 333);
  EXPECT_EQ(OneBad(T(R"("gpus":2000,"vram_gb":10)")),
            "jobs.jsonl:3: gpus: must be at most 1024, got 2000");
  EXPECT_EQ(OneBad(T(R"("sharing":"vgpu")")),
            "jobs.jsonl:3: sharing: must be one of exclusive, mig, mps, timeslice, got \"vgpu\"");
}

TEST_F(JobReaderTest, Mig) {
  EXPECT_EQ(OneBad(T(R"("mig":"1g.10gb","gpus":1,"vram_gb":8)")),
            "jobs.jsonl:3: gpus: excludes mig: a MIG job takes one instance per worker; give one "
            "of them");
  EXPECT_EQ(OneBad(T(R"("mig":"1g.10gb","sharing":"mps","vram_gb":8)")),
            "jobs.jsonl:3: sharing: must be mig or absent when mig is given, got \"mps\"");
  EXPECT_EQ(Line(T(R"("mig":"1g.10gb","sharing":"mig","vram_gb":8)")).spec.sharing, Sharing::kMig);
  EXPECT_EQ(
      OneBad(T(R"("sharing":"mig","vram_gb":8)")),
      "jobs.jsonl:3: mig: required with sharing mig: the MIG profile of each worker, e.g. 1g.10gb");
  const std::string unknown = OneBad(T(R"("mig":"9g.99gb","vram_gb":8)"));
  EXPECT_EQ(unknown.rfind("jobs.jsonl:3: mig: unknown MIG profile \"9g.99gb\" (known: ", 0), 0u)
      << unknown;
  EXPECT_NE(unknown.find("1g.10gb"), std::string::npos);
  // What offers it instead: the cluster's own models (its GPU pools are H100s), not the
  // A100s of the catalog it does not have (issue 47: MIG errors listed absent models).
  EXPECT_EQ(
      OneBad(T(R"("mig":"1g.10gb","gpu_model":["L40S-48GB","H200-141GB"],"vram_gb":8)")),
      "jobs.jsonl:3: mig: MIG profile \"1g.10gb\" is offered by none of H200-141GB, L40S-48GB "
      "(it is offered by H100-80GB)");
  EXPECT_EQ(
      OneBad(T(R"("mig":"1g.10gb","gpu_model":"T4-16GB","vram_gb":8)")),
      "jobs.jsonl:3: mig: MIG profile \"1g.10gb\" is offered by none of T4-16GB (it is offered "
      "by H100-80GB)");
  EXPECT_EQ(OneBad(T(R"("mig":"1g.10gb","gpu_model":"H100-80GB","vram_gb":12)")),
            "jobs.jsonl:3: vram_gb: 12 does not fit MIG profile 1g.10gb (10 GB on H100-80GB)");
  // The list narrows to the models that have the profile.
  core::TraceJob j =
      Line(T(R"("mig":"1g.18gb","gpu_model":["H100-80GB","H200-141GB"],"vram_gb":12)"));
  EXPECT_EQ(j.spec.models, Mask("H200-141GB"));
}

TEST_F(JobReaderTest, GpuModels) {
  core::TraceJob j = Line(T(R"("gpus":1,"gpu_model":["H100-80GB","L40S-48GB"],"vram_gb":10)"));
  EXPECT_EQ(j.spec.models, Mask("H100-80GB") | Mask("L40S-48GB"));
  const std::string e = OneBad(T(R"("gpus":1,"gpu_model":["H100-80GB","X1"],"vram_gb":10)"));
  EXPECT_EQ(e.rfind("jobs.jsonl:3: gpu_model[1]: unknown GPU model \"X1\" (known: A100-40GB, ", 0),
            0u)
      << e;
  EXPECT_EQ(OneBad(T(R"("gpus":1,"gpu_model":[],"vram_gb":10)")),
            "jobs.jsonl:3: gpu_model: must name at least one GPU model");
  EXPECT_EQ(OneBad(T(R"("gpus":0,"gpu_model":"H100-80GB")")),
            "jobs.jsonl:3: gpu_model: a job without GPUs (gpus 0) takes no gpu_model");
  EXPECT_EQ(OneBad(T(R"("gpus":1,"gpu_model":7,"vram_gb":10)")),
            "jobs.jsonl:3: gpu_model: expected a string, got 7");
}

TEST_F(JobReaderTest, Vram) {
  EXPECT_EQ(
      OneBad(T(R"("gpus":1)")),
      "jobs.jsonl:3: vram_gb: required for a job that uses GPUs: the memory each worker needs "
      "on each of its GPUs, in GB");
  EXPECT_EQ(OneBad(T(R"("gpus":1,"vram_gb":0)")), "jobs.jsonl:3: vram_gb: must be above 0, got 0");
  EXPECT_EQ(OneBad(T(R"("gpus":1,"vram_gb":-4)")),
            "jobs.jsonl:3: vram_gb: must be above 0, got -4");
  EXPECT_EQ(OneBad(T(R"("mig":"1g.10gb")")).rfind("jobs.jsonl:3: vram_gb: required", 0), 0u);
  // CPU-only jobs need none, and may say 0.
  EXPECT_EQ(Line(T(R"("cpus":4)")).spec.vram_bytes, 0);
  EXPECT_EQ(Line(T(R"("gpus":0,"vram_gb":0)")).spec.vram_bytes, 0);
  EXPECT_EQ(OneBad(T(R"("vram_gb":-1)")), "jobs.jsonl:3: vram_gb: must be at least 0, got -1");
  EXPECT_EQ(OneBad(T(R"("gpus":1,"vram_gb":1e-12)")),
            "jobs.jsonl:3: vram_gb: must be above 0, got 1e-12");
  EXPECT_EQ(Line(T(R"("gpus":1,"vram_gb":0.5)")).spec.vram_bytes, kGB / 2);
}

TEST_F(JobReaderTest, OtherFields) {
  EXPECT_EQ(OneBad(T(R"("cpus":-1)")), "jobs.jsonl:3: cpus: must be at least 0, got -1");
  EXPECT_EQ(OneBad(T(R"("memory_gb":-0.5)")),
            "jobs.jsonl:3: memory_gb: must be at least 0, got -0.5");
  EXPECT_EQ(OneBad(T(R"("replicas":0)")), "jobs.jsonl:3: replicas: must be at least 1, got 0");
  EXPECT_EQ(OneBad(T(R"("replicas":1.5)")),
            "jobs.jsonl:3: replicas: must be a whole number, got 1.5");
  EXPECT_EQ(OneBad(T(R"("tier":"urgent")")),
            "jobs.jsonl:3: tier: must be one of critical, standard, best-effort, got \"urgent\"");
  EXPECT_EQ(OneBad(T(R"("topology":"rack")")),
            "jobs.jsonl:3: topology: must be one of nvlink, node, leaf, spine, got \"rack\"");
  EXPECT_EQ(OneBad(T(R"("checkpoint_s":-1)")),
            "jobs.jsonl:3: checkpoint_s: must be at least 0, got -1");
  EXPECT_EQ(OneBad(T(R"("grace_s":-30)")), "jobs.jsonl:3: grace_s: must be at least 0, got -30");
  EXPECT_EQ(OneBad(T(R"("queue":"nlp")")),
            "jobs.jsonl:3: queue: unknown queue \"nlp\" (known: default, research, serving)");
  EXPECT_EQ(OneBad(T(R"("runtime_estimate_s":0)")),
            "jobs.jsonl:3: runtime_estimate_s: must be above 0, got 0");
  EXPECT_EQ(Line(T(R"("runtime_estimate_s":90.5)")).spec.runtime_estimate, 90'500);
  EXPECT_EQ(Line(T(R"("checkpoint_s":0.0004)")).spec.checkpoint, 0);  // rounds to the ms
  EXPECT_EQ(Line(T(R"("grace_s":1.0005)")).spec.grace, 1001);
  EXPECT_EQ(OneBad(T(R"("workdir":"")")), "jobs.jsonl:3: workdir: must not be empty");
  EXPECT_EQ(Line(T(R"("workdir":"/data")")).spec.workdir, "/data");
}

TEST_F(JobReaderTest, Window) {
  core::TraceJob j = Line(T(R"("window":{"start":"20:00","end":"08:30"})"));
  ASSERT_TRUE(j.spec.window.has_value());
  EXPECT_EQ(j.spec.window->start_min, 20 * 60);
  EXPECT_EQ(j.spec.window->end_min, 8 * 60 + 30);
  EXPECT_EQ(
      OneBad(T(R"("window":{"start":"25:00","end":"08:00"})")),
      "jobs.jsonl:3: window.start: must be a time of day HH:MM (00:00 to 23:59), got \"25:00\"");
  EXPECT_EQ(OneBad(T(R"("window":{"start":"8:00"})")), "jobs.jsonl:3: window.end: required");
  EXPECT_EQ(OneBad(T(R"("window":{"start":"08:00","end":"08:00"})")),
            "jobs.jsonl:3: window: start and end are both 08:00; the window would be empty (leave "
            "window out to allow any time)");
  EXPECT_EQ(OneBad(T(R"("window":"nights")")),
            "jobs.jsonl:3: window: expected a mapping {start: \"HH:MM\", end: \"HH:MM\"}, got "
            "\"nights\"");
  EXPECT_EQ(OneBad(T(R"("window":{"start":"08:00","end":"09:00","tz":"CET"})")),
            "jobs.jsonl:3: window.tz: unknown field (known: start, end)");
}

TEST_F(JobReaderTest, CommandAndEnv) {
  core::TraceJob j = Line(T(R"("command":["python","train.py"],"env":{"A":"1","B_2":"x"})"));
  EXPECT_EQ(j.spec.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(j.spec.env,
            (std::vector<std::pair<std::string, std::string>>{{"A", "1"}, {"B_2", "x"}}));
  EXPECT_EQ(Line(T(R"("command":"echo hi | wc")")).spec.command,
            (std::vector<std::string>{"/bin/sh", "-c", "echo hi | wc"}));
  EXPECT_EQ(OneBad(T(R"("command":[])")), "jobs.jsonl:3: command: must not be empty");
  EXPECT_EQ(OneBad(T(R"("command":["a",2])")),
            "jobs.jsonl:3: command[1]: expected a string, got 2");
  EXPECT_EQ(OneBad(T(R"("env":{"1A":"x"})")),
            "jobs.jsonl:3: env: variable names are letters, digits and _, not starting with a "
            "digit; got \"1A\"");
  EXPECT_EQ(OneBad(T(R"("env":["A=1"])")),
            "jobs.jsonl:3: env: expected a mapping of variable names to strings, got a list");
}

TEST_F(JobReaderTest, TraceFields) {
  EXPECT_EQ(OneBad(R"({"id":"j","duration":5})"),
            "jobs.jsonl:3: submit: required in a trace: the arrival time in seconds");
  EXPECT_EQ(OneBad(R"({"id":"j","submit":0})"),
            "jobs.jsonl:3: duration: required in a trace: the run time in seconds");
  EXPECT_EQ(OneBad(R"({"id":"j","submit":-1,"duration":5})"),
            "jobs.jsonl:3: submit: must be at least 0, got -1");
  EXPECT_EQ(OneBad(R"({"id":"j","submit":0,"duration":0})"),
            "jobs.jsonl:3: duration: must be above 0, got 0");
  EXPECT_EQ(OneBad(R"({"id":"j","submit":0,"duration":0.0001})"),
            "jobs.jsonl:3: duration: must be at least 0.001 (1 ms), got 0.0001");
  EXPECT_EQ(OneBad(T(R"("idle_after_s":-1)")),
            "jobs.jsonl:3: idle_after_s: must be at least 0, got -1");
  EXPECT_EQ(OneBad(R"({"id":"","submit":0,"duration":1})"), "jobs.jsonl:3: id: must not be empty");
}

TEST_F(JobReaderTest, BrokenJson) {
  const std::string e = OneBad(R"({"id":"j","submit":0,)", 9);
  EXPECT_EQ(e.rfind("jobs.jsonl:9: not valid JSON: ", 0), 0u) << e;
  EXPECT_EQ(OneBad("[1,2]", 4),
            "jobs.jsonl:4: expected a JSON object holding a job spec, got a list");
  EXPECT_EQ(OneBad(R"({"id":"j"} x)", 5).rfind("jobs.jsonl:5: not valid JSON: ", 0), 0u);
  EXPECT_EQ(OneBad(std::string(100, '[') + std::string(100, ']'), 6),
            "jobs.jsonl:6: not valid JSON: nested deeper than 64 levels");
  EXPECT_EQ(
      OneBad(R"({"id":"j","submit":1e999,"duration":1})").rfind("jobs.jsonl:3: not valid JSON", 0),
      0u);
}

TEST_F(JobReaderTest, EveryProblemOfALineAtOnce) {
  std::vector<std::string> e = Bad(
      R"({"id":"j","submit":-1,"duration":0,"gpus":-2,"tier":"x","gpu_modle":"H100-80GB","submit":3})");
  EXPECT_EQ(e, (std::vector<std::string>{
                   "jobs.jsonl:3: tier: must be one of critical, standard, best-effort, got \"x\"",
                   "jobs.jsonl:3: gpus: must be at least 0, got -2",
                   "jobs.jsonl:3: submit: must be at least 0, got -1",
                   "jobs.jsonl:3: duration: must be above 0, got 0",
                   "jobs.jsonl:3: gpu_modle: unknown field; did you mean gpu_model?",
                   "jobs.jsonl:3: submit: given twice (first on line 3)"}));
}

TEST_F(JobReaderTest, ParseJobJsonHasNoTraceFields) {
  Diagnostics d;
  auto j = ParseJobJson("{\n  \"queue\": \"research\",\n  \"gpus\": 2,\n  \"vram_gb\": 300\n}\n",
                        "api", config(), d);
  ASSERT_TRUE(j.has_value()) << d.ToString();
  EXPECT_EQ(j->gpus, 2);
  EXPECT_EQ(j->id, "");  // the server assigns one
  // Feasibility is the core's business, not the reader's.
  EXPECT_EQ(core::WhyInfeasible(*j, config().cluster).value_or(""),
            "vram_gb 300 exceeds every GPU in the cluster (largest: H200-141GB, 141 GB)");

  Diagnostics bad;
  EXPECT_FALSE(ParseJobJson("{\n  \"gpus\": 1,\n  \"vram_gb\": 10,\n  \"submit\": 4\n}", "api",
                            config(), bad));
  ASSERT_EQ(bad.size(), 1u);
  // Multi-line JSON bodies name the line of the field.
  EXPECT_EQ(bad.items()[0].ToString().rfind("api:4: submit: only trace lines have this field", 0),
            0u)
      << bad.ToString();
  Diagnostics last;
  EXPECT_FALSE(ParseJobJson("{\n  \"gpus\": 1,\n  \"vram_gb\": -1\n}", "api", config(), last));
  EXPECT_EQ(last.ToString(), "api:3: vram_gb: must be above 0, got -1\n");
}

// Issue 16, bug 10: a job spec without grace_s was killed at once on cancel or preempt.
// It now gets the cluster's policy.default_grace_s (30 s unless set); an explicit 0 stays
// 0; trace lines keep what they record.
TEST_F(JobReaderTest, AJobSpecWithoutGraceGetsTheClustersDefault) {
  Diagnostics d;
  auto j = ParseJobJson(R"({"queue": "research", "gpus": 1, "vram_gb": 10})", "api", config(), d);
  ASSERT_TRUE(j.has_value()) << d.ToString();
  EXPECT_EQ(j->grace, 30'000);
  auto zero = ParseJobJson(R"({"queue": "research", "gpus": 1, "vram_gb": 10, "grace_s": 0})",
                           "api", config(), d);
  ASSERT_TRUE(zero.has_value()) << d.ToString();
  EXPECT_EQ(zero->grace, 0);
  ClusterConfig site = config();
  site.policy.default_grace = 90'000;
  auto j90 = ParseJobJson(R"({"queue": "research", "gpus": 1, "vram_gb": 10})", "api", site, d);
  ASSERT_TRUE(j90.has_value()) << d.ToString();
  EXPECT_EQ(j90->grace, 90'000);
  auto line = ParseTraceLine(R"({"submit": 0, "duration": 10, "gpus": 1, "vram_gb": 10})",
                             "jobs.jsonl", 1, config(), d);
  ASSERT_TRUE(line.has_value()) << d.ToString();
  EXPECT_EQ(line->spec.grace, 0);
}

// Issue 47 B1: a best-effort job asked grace_s 1e9 and, preempted, kept its GPUs for
// 30 years. A job spec asking more than its tier's cap (policy.max_grace_s) is refused,
// naming the field; a trace line's grace, and the default, are cut to the cap.
TEST_F(JobReaderTest, GraceAboveItsTiersCapIsRefusedInSpecsAndCutInTraces) {
  Diagnostics d;
  auto hog = ParseJobJson(R"({"queue": "research", "tier": "best-effort", "gpus": 1, "vram_gb": 10,
"grace_s": 1e9})",
                          "api", config(), d);
  EXPECT_FALSE(hog.has_value());
  EXPECT_EQ(d.ToString(),
            "api:2: grace_s: 1000000000 s is above this cluster's limit for best-effort jobs "
            "(policy.max_grace_s: 60 s)\n");
  Diagnostics ok;
  auto std600 = ParseJobJson(R"({"queue": "research", "gpus": 1, "vram_gb": 10, "grace_s": 600})",
                             "api", config(), ok);
  ASSERT_TRUE(std600.has_value()) << ok.ToString();
  EXPECT_EQ(std600->grace, 600'000);
  ClusterConfig site = config();
  site.policy.default_grace = 90'000;  // above best-effort's cap: cut to it
  auto be = ParseJobJson(
      R"({"queue": "research", "tier": "best-effort", "gpus": 1, "vram_gb": 10})", "api", site, ok);
  ASSERT_TRUE(be.has_value()) << ok.ToString();
  EXPECT_EQ(be->grace, 60'000);
  auto line = ParseTraceLine(
      R"({"submit": 0, "duration": 10, "tier": "best-effort", "gpus": 1, "vram_gb": 10,
"grace_s": 1e9})",
      "jobs.jsonl", 1, config(), ok);
  ASSERT_TRUE(line.has_value()) << ok.ToString();
  EXPECT_EQ(line->spec.grace, 60'000);
  EXPECT_TRUE(ok.empty()) << ok.ToString();
}

// Issue 47 B4: a relative workdir resolved against the agent's own directory (`../..`
// ran in /), and /etc was accepted. Job specs name absolute paths, outside the system's
// directories, under the site's workdir_roots when it sets them; trace lines are not run.
TEST_F(JobReaderTest, AWorkdirIsAnAbsolutePathUnderTheSitesRoots) {
  const auto problem = [&](const std::string& workdir, const ClusterConfig& site) {
    Diagnostics d;
    ParseJobJson(
        R"({"queue": "research", "gpus": 1, "vram_gb": 10, "workdir": ")" + workdir + R"("})",
        "api", site, d);
    return d.ToString();
  };
  EXPECT_EQ(problem("../..", config()),
            "api:1: workdir: must be an absolute path (a relative one would resolve against the "
            "agent's own "
            "directory), got \"../..\"\n");
  EXPECT_EQ(problem("/home/a/../../etc", config()),
            "api:1: workdir: must not go up with `..`, got \"/home/a/../../etc\"\n");
  EXPECT_EQ(problem("/etc", config()),
            "api:1: workdir: \"/etc\" is a system directory; a job's workdir belongs under the "
            "users' own (set "
            "site.workdir_roots to name them)\n");
  EXPECT_EQ(problem("/usr/local/x", config()).find("is a system directory") != std::string::npos,
            true);
  EXPECT_EQ(problem("/home/alice/run", config()), "");
  EXPECT_EQ(problem("/etcetera/run", config()), "");  // a prefix of a name is not a parent
  ClusterConfig site = config();
  site.site.workdir_roots = std::vector<std::string>{"/home", "/scratch/"};
  EXPECT_EQ(problem("/scratch/x", site), "");
  EXPECT_EQ(problem("/homework", site),
            "api:1: workdir: \"/homework\" is not under this cluster's workdir roots "
            "(site.workdir_roots: /home, "
            "/scratch/)\n");
  EXPECT_EQ(problem("/tmp/x", site).find("is not under this cluster's workdir roots") !=
                std::string::npos,
            true);
  Diagnostics d;
  auto line =
      ParseTraceLine(R"({"submit": 0, "duration": 10, "gpus": 1, "vram_gb": 10, "workdir": "rel"})",
                     "t", 1, config(), d);
  EXPECT_TRUE(line.has_value()) << d.ToString();
}

TEST_F(JobReaderTest, YamlJobs) {
  const char* yaml = R"(# a training job
id: train-1
queue: research
replicas: "2"
gpus: 8
gpu_model: [H100-80GB]
vram_gb: 60
topology: leaf
window: {start: 20:00, end: 08:00}
command: [python, train.py, --epochs, "3"]
env:
  SEED: 7
)";
  Diagnostics d;
  auto j = ParseJobYaml(yaml, "train.yaml", config(), d);
  ASSERT_TRUE(j.has_value()) << d.ToString();
  EXPECT_EQ(j->replicas, 2);  // YAML scalars are untyped
  EXPECT_EQ(j->window->start_min, 20 * 60);
  EXPECT_EQ(j->command.back(), "3");
  EXPECT_EQ(j->env, (std::vector<std::pair<std::string, std::string>>{{"SEED", "7"}}));

  Diagnostics bad;
  EXPECT_FALSE(ParseJobYaml(R"(id: train-2
queue: research
gpus: -2
gpu_model:
  - H100-80GB
  - B300
vram_gb: 60
submit: 5
window:
  start: 20:00
  end: 20:00
)",
                            "train.yaml", config(), bad));
  std::vector<std::string> e;
  for (const Diag& x : bad.items()) e.push_back(x.ToString());
  EXPECT_EQ(e.size(), 4u) << bad.ToString();
  ASSERT_GE(e.size(), 4u);
  EXPECT_EQ(e[0], "train.yaml:3: gpus: must be at least 0, got -2");
  EXPECT_EQ(e[1].rfind("train.yaml:6: gpu_model[1]: unknown GPU model \"B300\"", 0), 0u) << e[1];
  EXPECT_EQ(e[2],
            "train.yaml:8: submit: only trace lines have this field; a job spec is submitted "
            "when it is sent and runs until it ends");
  EXPECT_EQ(e[3].rfind("train.yaml:9: window: start and end are both 20:00", 0), 0u) << e[3];
}

TEST_F(JobReaderTest, ImageNamesAContainerImageInJobSpecsOnly) {
  Diagnostics d;
  auto j = ParseJobYaml(
      "gpus: 1\nvram_gb: 10\nimage: docker.io/pytorch/pytorch:2.5.1\ncommand: [python]\n",
      "job.yaml", config(), d);
  ASSERT_TRUE(j.has_value()) << d.ToString();
  EXPECT_EQ(j->image, "docker.io/pytorch/pytorch:2.5.1");
  for (const char* good :
       {"localhost/gantry-it:busybox", "busybox", "nvcr.io/nvidia/pytorch:24.10-py3",
        "registry.example.com:5000/team/app_v2:1.0",
        "docker://docker.io/library/"
        "ubuntu@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    Diagnostics e;
    EXPECT_TRUE(
        ParseJobYaml(std::string("gpus: 1\nvram_gb: 10\nimage: ") + good + "\ncommand: [x]\n",
                     "job.yaml", config(), e))
        << good << ": " << e.ToString();
  }
  // Not a name, an option, and podman's transports that read the node's files (as root).
  for (const char* bad :
       {"\"\"", "\"--privileged\"", "\"two words\"", "oci-archive:x.tar", "dir:/root",
        "docker-archive:/root/backup.tar", "containers-storage:app", "Upper/Case", "a/../b"}) {
    Diagnostics e;
    EXPECT_FALSE(ParseJobYaml(std::string("gpus: 1\nvram_gb: 10\nimage: ") + bad + "\n", "job.yaml",
                              config(), e));
    EXPECT_EQ(e.ToString().rfind("job.yaml:3: image: expected a container image name", 0), 0u)
        << e.ToString();
  }
  Diagnostics long_name;  // refused before the regex sees it
  EXPECT_FALSE(ParseJobYaml("gpus: 1\nvram_gb: 10\nimage: " + std::string(1'000'000, 'a') + "\n",
                            "job.yaml", config(), long_name));
  EXPECT_NE(long_name.ToString().find("(this one is longer than 512 characters)"),
            std::string::npos);
  Diagnostics transport;
  ParseJobYaml("gpus: 1\nvram_gb: 10\nimage: oci-archive:x.tar\n", "job.yaml", config(), transport);
  EXPECT_NE(transport.ToString().find(
                "(this one names podman's oci-archive transport, which reads files on the node"),
            std::string::npos)
      << transport.ToString();
  EXPECT_EQ(OneBad(T(R"("image":"busybox")")).rfind("jobs.jsonl:3: image: unknown field", 0), 0u)
      << OneBad(T(R"("image":"busybox")"));
}

// nodelist / exclude_nodes (sbatch --nodelist, --exclude): names or Slurm host lists, a
// string or a list of them, into the nodes' ids; unknown names and bad lists named.
TEST_F(JobReaderTest, NodeListsNameNodesOfTheCluster) {
  Diagnostics d;
  auto j = ParseJobYaml(
      "gpus: 1\nvram_gb: 10\ncommand: [x]\nnodelist: h100-[1-2],h200-0\n"
      "exclude_nodes: [h100-2, \"l40s-[0-1]\", h100-2]\n",
      "job.yaml", config(), d);
  ASSERT_TRUE(j.has_value()) << d.ToString();
  const core::Cluster& c = config().cluster;
  auto id = [&](const char* name) { return *c.FindNode(name); };
  EXPECT_EQ(j->only_nodes, (std::vector<core::NodeId>{id("h100-1"), id("h100-2"), id("h200-0")}));
  EXPECT_EQ(j->not_nodes, (std::vector<core::NodeId>{id("h100-2"), id("l40s-0"), id("l40s-1")}));
  EXPECT_TRUE(j->MayUseNode(id("h100-1")));
  EXPECT_FALSE(j->MayUseNode(id("h100-2")));
  EXPECT_FALSE(j->MayUseNode(id("h100-0")));
  Diagnostics unknown;
  EXPECT_FALSE(ParseJobYaml("gpus: 1\nvram_gb: 10\ncommand: [x]\nexclude_nodes: [h100-0, gpu-9]\n",
                            "job.yaml", config(), unknown));
  EXPECT_EQ(unknown.ToString(),
            "job.yaml:4: exclude_nodes[1]: unknown node \"gpu-9\" (this cluster's nodes are named "
            "like h100-0)\n");
  for (const char* bad : {"\"h100-[1-\"", "\"\"", "[]"}) {
    Diagnostics e;
    EXPECT_FALSE(
        ParseJobYaml(std::string("gpus: 1\nvram_gb: 10\ncommand: [x]\nnodelist: ") + bad + "\n",
                     "job.yaml", config(), e))
        << bad;
    EXPECT_EQ(e.ToString().rfind("job.yaml:4: nodelist: ", 0), 0u) << e.ToString();
  }
  EXPECT_EQ(OneBad(T(R"("nodelist":"h100-0")")).rfind("jobs.jsonl:3: nodelist: unknown field", 0),
            0u);
}

TEST_F(JobReaderTest, ReadJobYamlFile) {
  const std::string p = Write("job.yaml", "gpus: 1\nvram_gb: 10\nqueue: nope\n");
  Diagnostics d;
  EXPECT_FALSE(ReadJobYaml(p, config(), d).has_value());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.items()[0].ToString(),
            p + ":3: queue: unknown queue \"nope\" (known: default, research, serving)");
  std::remove(p.c_str());
  Diagnostics missing;
  EXPECT_FALSE(ReadJobYaml(p, config(), missing).has_value());
  EXPECT_NE(missing.ToString().find("cannot open"), std::string::npos);
  Diagnostics empty;
  EXPECT_FALSE(ParseJobYaml("", "e.yaml", config(), empty).has_value());
  EXPECT_EQ(empty.ToString(), "e.yaml: the file is empty; expected a job spec\n");
}

TEST_F(JobReaderTest, TraceReaderReportsBadLinesAndGoesOn) {
  const std::string p = Write("trace.jsonl",
                              R"({"id":"j1","submit":0,"duration":10}
{"id":"j2","submit":4,"duration":10,"gpus":1,"vram_gb":10}
{"id":"j3","submit":5,"duration":10,"gpus":-2,"vram_gb":10}

{"id":"j1","submit":6,"duration":10}
not json
{"id":"j4","submit":3,"duration":10}
{"submit":9,"duration":10,"gpus":1,"vram_gb":500}
   
{"id":"j3","submit":9,"duration":10}
{"id":"j5","submit":9,"duration":10,"cpus":1}
)");
  core::TraceJob job;
  Diagnostics d;
  TraceReader r(p, config());
  ASSERT_TRUE(r.ok());
  std::vector<std::string> ids;
  std::vector<int> lines;
  while (r.Next(job, d)) {
    ids.push_back(job.spec.id);
    lines.push_back(job.line);
  }
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(ids, (std::vector<std::string>{"j1", "j2", "line-8", "j5"}));
  EXPECT_EQ(lines, (std::vector<int>{1, 2, 8, 11}));
  std::vector<std::string> e;
  for (const Diag& x : d.items()) e.push_back(x.ToString());
  ASSERT_EQ(e.size(), 5u) << d.ToString();
  EXPECT_EQ(e[0], p + ":3: gpus: must be at least 0, got -2");
  EXPECT_EQ(e[1], p + ":5: id: duplicate id \"j1\", first on line 1");
  EXPECT_EQ(e[2].rfind(p + ":6: not valid JSON: ", 0), 0u) << e[2];
  EXPECT_EQ(
      e[3],
      p + ":7: submit: submit 3 is before the previous line's 4; traces must be sorted by submit");
  // j3's first line was bad, but its id still counts.
  EXPECT_EQ(e[4], p + ":10: id: duplicate id \"j3\", first on line 3");
  std::remove(p.c_str());
}

TEST_F(JobReaderTest, TraceReaderMissingFile) {
  TraceReader r(Path("no-such-trace.jsonl"), config());
  EXPECT_FALSE(r.ok());
  core::TraceJob job;
  Diagnostics d;
  EXPECT_FALSE(r.Next(job, d));
  EXPECT_FALSE(r.Next(job, d));
  EXPECT_EQ(d.size(), 1u);
}

TEST_F(JobReaderTest, Failures) {
  const std::string p = Write("failures.jsonl", R"({"t": 5000, "node": "h100-3", "down_s": 1800}
{"t": 100.5, "node": "cpu-0", "down_s": 0.5}

{"t": 100.5, "node": "h200-1", "down_s": 60}
)");
  Diagnostics d;
  auto f = ReadFailures(p, config().cluster, d);
  ASSERT_TRUE(f.has_value()) << d.ToString();
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[0].t, 100'500);
  EXPECT_EQ((*f)[0].node, *config().cluster.FindNode("cpu-0"));
  EXPECT_EQ((*f)[0].down, 500);
  EXPECT_EQ((*f)[0].line, 2);
  EXPECT_EQ((*f)[1].line, 4);  // stable for equal t
  EXPECT_EQ((*f)[2].node, *config().cluster.FindNode("h100-3"));

  const std::string q = Write("failures-bad.jsonl", R"({"t": -1, "node": "h100-3", "down_s": 1800}
{"t": 1, "node": "h100-9", "down_s": 0}
{"t": 1, "node": "h100-1", "down_s": 5, "why": "x"}
{"t": 1}
)");
  Diagnostics bad;
  EXPECT_FALSE(ReadFailures(q, config().cluster, bad).has_value());
  std::vector<std::string> e;
  for (const Diag& x : bad.items()) e.push_back(x.ToString());
  EXPECT_EQ(e,
            (std::vector<std::string>{
                q + ":1: t: must be at least 0, got -1",
                q + ":2: node: unknown node \"h100-9\" (nodes: h100-0 .. h100-3, h200-0 .. h200-1, "
                    "l40s-0 .. l40s-1, cpu-0 .. cpu-1)",
                q + ":2: down_s: must be above 0, got 0",
                q + ":3: why: unknown field (known: t, node, down_s)", q + ":4: node: required",
                q + ":4: down_s: required: how long the node stays down, in seconds"}));
  std::remove(p.c_str());
  std::remove(q.c_str());
}

}  // namespace
}  // namespace gantry::spec

namespace gantry::spec {
namespace {

// Idle reclamation (issue 12): the queue tree's settings, critical jobs, and opting out.
TEST(ReclaimIdle, QueueSettingsCriticalJobsAndKeepWhenIdle) {
  Diagnostics d;
  auto config = ParseClusterConfig(R"(cluster: r
pools:
  - {name: h100, count: 1, gpus: 8, gpu_model: H100-80GB, sharing: [mps]}
queues:
  - {name: org, reclaim_idle_after_s: 600}
  - {name: team, parent: org}
  - {name: notebooks, parent: team, reclaim_idle_after_s: 0}
  - {name: serving, allow_keep_when_idle: true}
policy:
  reclaim_idle_after_s: 900
  reclaim_idle_below: 0.1
)",
                                   "r.yaml", d);
  ASSERT_TRUE(config) << d.ToString();
  EXPECT_DOUBLE_EQ(config->policy.params.reclaim_idle_below, 0.1);
  auto after = [&](const std::string& yaml) -> core::Ticks {
    Diagnostics jd;
    auto spec = ParseJobYaml(yaml + "gpus: 1\nvram_gb: 10\n", "j.yaml", *config, jd);
    EXPECT_TRUE(spec) << jd.ToString();
    return spec ? core::ReclaimIdleAfter(*spec, config->queues, config->policy.params) : -1;
  };
  EXPECT_EQ(after("queue: team\n"), 600'000);     // inherited from org
  EXPECT_EQ(after("queue: notebooks\n"), 0);      // its own: never
  EXPECT_EQ(after("queue: serving\n"), 900'000);  // the policy's
  EXPECT_EQ(after("queue: serving\ntier: critical\n"), 0);
  EXPECT_EQ(after("queue: serving\nkeep_when_idle: \"serving: idles at night\"\n"), 0);

  // Per tier, under the queues' own settings; 15 minutes when nothing is set.
  Diagnostics td;
  auto tiers = ParseClusterConfig(R"(cluster: t
pools:
  - {name: p, count: 1, gpus: 8, gpu_model: H100-80GB}
queues:
  - {name: plain}
  - {name: own, reclaim_idle_after_s: 120}
policy:
  reclaim_idle_after_s_by_tier: {best-effort: 300, critical: 3600}
  reclaim_critical: true
)",
                                  "t.yaml", td);
  ASSERT_TRUE(tiers) << td.ToString();
  auto tier_after = [&](const std::string& yaml) -> core::Ticks {
    Diagnostics jd;
    auto spec = ParseJobYaml(yaml + "gpus: 1\nvram_gb: 10\n", "j.yaml", *tiers, jd);
    EXPECT_TRUE(spec) << jd.ToString();
    return spec ? core::ReclaimIdleAfter(*spec, tiers->queues, tiers->policy.params) : -1;
  };
  EXPECT_EQ(tier_after("queue: plain\ntier: best-effort\n"), 300'000);
  EXPECT_EQ(tier_after("queue: plain\ntier: critical\n"), 3'600'000);
  EXPECT_EQ(tier_after("queue: plain\n"), 900'000);  // standard: the default
  EXPECT_EQ(tier_after("queue: own\ntier: best-effort\n"), 120'000);
  Diagnostics badtier;
  EXPECT_FALSE(ParseClusterConfig(
      "cluster: t\npools:\n  - {name: p, count: 1, gpus: 8, gpu_model: H100-80GB}\n"
      "policy:\n  reclaim_idle_after_s_by_tier: {urgent: 5}\n",
      "b.yaml", badtier));
  EXPECT_NE(badtier.ToString().find("b.yaml:5: policy.reclaim_idle_after_s_by_tier.urgent"),
            std::string::npos)
      << badtier.ToString();

  Diagnostics bad;
  EXPECT_FALSE(ParseJobYaml("queue: team\ngpus: 1\nvram_gb: 10\nkeep_when_idle: mine\n", "k.yaml",
                            *config, bad));
  EXPECT_NE(bad.ToString().find("k.yaml:4: keep_when_idle: queue \"team\" does not allow"),
            std::string::npos)
      << bad.ToString();

  Diagnostics em;
  auto spec = ParseJobYaml(
      "queue: team\ngpus: 1\nvram_gb: 10\nemulate: {util: 0.3, vram_used_gb: 9, idle_after_s: "
      "60}\n",
      "e.yaml", *config, em);
  ASSERT_TRUE(spec) << em.ToString();
  ASSERT_TRUE(spec->emulate);
  EXPECT_DOUBLE_EQ(spec->emulate->util, 0.3);
  EXPECT_EQ(spec->emulate->vram_used_bytes, 9'000'000'000);
  EXPECT_EQ(spec->emulate->idle_after, core::Ticks{60'000});
  Diagnostics em_bad;
  EXPECT_FALSE(ParseJobYaml("queue: team\ngpus: 1\nvram_gb: 10\nemulate: {util: 1.5}\n", "e.yaml",
                            *config, em_bad));
  EXPECT_NE(em_bad.ToString().find("emulate.util"), std::string::npos) << em_bad.ToString();
}

// Issue 47 A2: Slurm's names as a site uses them (site in the config), resolved where a
// job names a tier, queue, pool or GPU model; errors list what the site maps.
TEST(SiteNames, QosAccountsPartitionsAndGpuTypes) {
  Diagnostics d;
  auto config = ParseClusterConfig(R"(cluster: s
pools:
  - {name: a100s, count: 1, gpus: 8, gpu_model: A100-80GB}
  - {name: h100s, count: 1, gpus: 8, gpu_model: H100-80GB}
queues:
  - name: default
  - name: nlp
site:
  qos: {regular: standard, high: critical}
  gpu_types: {volta: [V100-16GB, V100-32GB]}
  partitions: {gpu: a100s, hopper: h100s}
  default_partition: gpu
  accounts: {proj-nlp: nlp}
  features: {a100s: [a100, ib], h100s: [h100, ib, nvswitch]}
)",
                                   "s.yaml", d);
  ASSERT_TRUE(config) << d.ToString();
  const core::Catalog& catalog = config->cluster.catalog();
  auto models = [&](const std::string& name) {
    std::vector<std::string> out;
    const core::ModelMask m = GpuModelsNamed(name, catalog, config->site);
    for (size_t i = 0; i < catalog.size(); ++i) {
      if (m >> i & 1u) out.push_back(catalog.model(core::ModelId(static_cast<uint32_t>(i))).name);
    }
    return out;
  };
  EXPECT_EQ(models("nvidia_h100_80gb_hbm3"), std::vector<std::string>{"H100-80GB"});
  EXPECT_EQ(models("NVIDIA A100-SXM4-40GB"), std::vector<std::string>{"A100-40GB"});
  EXPECT_EQ(models("a100"), (std::vector<std::string>{"A100-40GB", "A100-80GB"}));
  EXPECT_EQ(models("h100-80gb"), std::vector<std::string>{"H100-80GB"});
  EXPECT_EQ(models("VOLTA"), (std::vector<std::string>{"V100-16GB", "V100-32GB"}));
  EXPECT_TRUE(models("mi300").empty());

  auto read = [&](const std::string& yaml, Diagnostics& jd) {
    return ParseJobYaml(yaml + "gpus: 1\nvram_gb: 10\n", "j.yaml", *config, jd);
  };
  Diagnostics jd;
  auto job =
      read("tier: high\nqueue: proj-nlp\npool: hopper\ngpu_model: nvidia_h100_80gb_hbm3\n", jd);
  ASSERT_TRUE(job) << jd.ToString();
  EXPECT_EQ(job->tier, core::Tier::kCritical);
  EXPECT_EQ(config->queues.queue(job->queue).spec.name, "nlp");
  EXPECT_EQ(config->cluster.pool(job->pool).spec.name, "h100s");
  job = read("tier: normal\n", jd);
  ASSERT_TRUE(job) << jd.ToString();
  EXPECT_EQ(job->tier, core::Tier::kStandard) << "Slurm's default QoS";
  EXPECT_FALSE(job->pool.valid()) << "the default partition is for sbatch jobs";
  job = read("script: \"#!/bin/sh\\necho\\n\"\ncommand: [\"x\"]\n", jd);
  ASSERT_TRUE(job) << jd.ToString();
  EXPECT_EQ(config->cluster.pool(job->pool).spec.name, "a100s") << "sbatch without -p";

  // --constraint over the pools' features: one, all of (&), any of (| or [..|..]).
  auto pools_of = [&](const std::string& constraint) {
    Diagnostics cd;
    auto j = read("constraint: \"" + constraint + "\"\n", cd);
    std::vector<std::string> out;
    if (!j) return std::vector<std::string>{cd.ToString()};
    for (core::PoolId p : j->pools) out.push_back(config->cluster.pool(p).spec.name);
    return out;
  };
  EXPECT_EQ(pools_of("h100"), std::vector<std::string>{"h100s"});
  EXPECT_EQ(pools_of("ib"), (std::vector<std::string>{"a100s", "h100s"}));
  EXPECT_EQ(pools_of("ib&nvswitch"), std::vector<std::string>{"h100s"});
  EXPECT_EQ(pools_of("[a100|h100]"), (std::vector<std::string>{"a100s", "h100s"}));
  EXPECT_NE(pools_of("a100&nvswitch")[0].find("no pool has the features \"a100&nvswitch\""),
            std::string::npos);
  EXPECT_NE(pools_of("tpu")[0].find("unknown feature \"tpu\" (known: a100, h100, ib, nvswitch)"),
            std::string::npos);
  EXPECT_NE(pools_of("a100&ib|h100")[0].find("supported: NAME, A&B (all), A|B or [A|B] (any)"),
            std::string::npos);

  Diagnostics bad;
  EXPECT_FALSE(read("tier: premium\nqueue: nobody\npool: cpu\n", bad));
  const std::string e = bad.ToString();
  for (const char* want :
       {"tier: unknown tier or QoS \"premium\" (known: critical, standard, best-effort, regular, "
        "high)",
        "queue: unknown queue or account \"nobody\" (known: default, nlp, proj-nlp)",
        "pool: unknown pool or partition \"cpu\" (known: a100s, h100s, gpu, hopper)"}) {
    EXPECT_NE(e.find(want), std::string::npos) << want << " in\n" << e;
  }

  // The mapping's own errors name the config's line and field.
  Diagnostics cd;
  EXPECT_FALSE(ParseClusterConfig(R"(cluster: s
pools:
  - {name: a100s, count: 1, gpus: 8, gpu_model: A100-80GB}
queues:
  - name: default
site:
  qos: {regular: urgent}
  gpu_types: {x: [Z100]}
  partitions: {gpu: nowhere}
  default_partition: cpu
  accounts: {p: nobody}
  default_account: q
)",
                                  "s.yaml", cd));
  const std::string ce = cd.ToString();
  for (const char* want : {"s.yaml:7: site.qos.regular: must be one of critical, standard, "
                           "best-effort, got \"urgent\"",
                           "s.yaml:8: site.gpu_types.x[0]: no GPU model named \"Z100\"",
                           "s.yaml:9: site.partitions.gpu: no pool named \"nowhere\"",
                           "s.yaml:10: site.default_partition: no partition or pool named \"cpu\"",
                           "s.yaml:11: site.accounts.p: no queue named \"nobody\"",
                           "s.yaml:12: site.default_account: no account or queue named \"q\""}) {
    EXPECT_NE(ce.find(want), std::string::npos) << want << " in\n" << ce;
  }
}

// Slurm's default account: a job that names no queue goes to site.default_account (an
// account or a queue), else to the queue named default, else it is refused saying both.
TEST(SiteNames, AJobThatNamesNoQueueGoesToTheDefaultAccount) {
  auto queue_of = [](const std::string& site) {
    Diagnostics d;
    auto config = ParseClusterConfig(
        "cluster: s\npools:\n  - {name: p, count: 1, gpus: 8, "
        "gpu_model: A100-80GB}\nqueues:\n  - name: research\n  - "
        "name: nlp\n" +
            site,
        "s.yaml", d);
    if (!config) return d.ToString();
    Diagnostics jd;
    auto job = ParseJobYaml("gpus: 1\nvram_gb: 10\n", "j.yaml", *config, jd);
    return job ? config->queues.queue(job->queue).spec.name : jd.ToString();
  };
  EXPECT_EQ(queue_of("site:\n  accounts: {proj: nlp}\n  default_account: proj\n"), "nlp");
  EXPECT_EQ(queue_of("site:\n  default_account: research\n"), "research");
  EXPECT_NE(queue_of("").find("queue: required: this cluster has no site.default_account and no "
                              "queue named \"default\" (known: research, nlp)"),
            std::string::npos)
      << queue_of("");
}

}  // namespace
}  // namespace gantry::spec
