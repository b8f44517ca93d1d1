// The gantry command as a user runs it: exit codes and messages of sim and validate.
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli_util.h"

namespace {

namespace fs = std::filesystem;
using gantry::testing::CliTest;
using gantry::testing::Examples;
using gantry::testing::Gantry;
using gantry::testing::Outcome;
using gantry::testing::Shell;

TEST_F(CliTest, BadTraceLineExitsTwoNamingLineAndField) {
  std::ofstream(Path("bad.jsonl"))
      << R"({"id":"a","submit":0,"duration":10,"queue":"research","gpus":1,"vram_gb":8})"
         "\n"
      << R"({"id":"b","submit":1,"duration":10,"queue":"research","gpus":1,"vram_gb":8})"
         "\n"
      << R"({"id":"c","submit":2,"duration":10,"queue":"research","gpus":-2,"vram_gb":8})"
         "\n";
  Outcome r = Gantry("sim --config " + Examples() + "/cluster.yaml --trace " + Path("bad.jsonl") +
                     " --events " + Path("e.jsonl") + " --report " + Path("r.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:3: gpus:"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(Path("r.json")));  // nothing ran
}

TEST_F(CliTest, EveryProblemIsReportedAtOnce) {
  std::ofstream(Path("bad.jsonl"))
      << R"({"id":"a","submit":0,"duration":10,"queue":"nope","gpus":1,"vram_gb":8})"
         "\n"
      << R"({"id":"b","submit":1,"duration":10,"queue":"research","gpus":1,"vram_gb":8,"vram":3})"
         "\n"
      << R"({"id":"c","submit":2,"duration":10,"queue":"research","gpus":0.5,"vram_gb":8})"
         "\n";
  Outcome r = Gantry("validate " + Examples() + "/cluster.yaml " + Path("bad.jsonl"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:1: queue"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:2: vram"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:3: gpus"), std::string::npos) << r.output;
}

TEST_F(CliTest, ExamplesValidateAndTheBundledExampleRuns) {
  Outcome v = Gantry("validate " + Examples() + "/cluster.yaml " + Examples() + "/trace.jsonl " +
                     Examples() + "/failures.jsonl");
  EXPECT_EQ(v.status, 0) << v.output;
  EXPECT_EQ(v.output.find("no cluster config"), std::string::npos) << v.output;
  // Without a cluster config it still checks, and says how little.
  Outcome alone = Gantry("validate " + Examples() + "/trace.jsonl");
  EXPECT_EQ(alone.status, 0) << alone.output;
  EXPECT_NE(alone.output.find("note: no cluster config among the files"), std::string::npos)
      << alone.output;
  Outcome s = Gantry("sim --events " + Path("e.jsonl") + " --report " + Path("r.json"));
  EXPECT_EQ(s.status, 0) << s.output;
  EXPECT_NE(s.output.find("GPU utilization"), std::string::npos) << s.output;
  EXPECT_TRUE(fs::exists(Path("r.json")));
}

// Repeatable flags take one value each: `--env A=1 -- sh -c x` keeps its command (the
// flag once took every word after it, `--` included, and `-c` was refused).
TEST_F(CliTest, ARepeatableFlagBeforeTheCommandTakesOneValue) {
  for (const char* flags : {"--env A=1", "--gpu-model H100-80GB --env A=1 --env B=2"}) {
    const Outcome o =
        Gantry(std::string("--server http://127.0.0.1:9 submit ") + flags + " -- /bin/sh -c true");
    EXPECT_EQ(o.output.find("not expected"), std::string::npos) << flags << ": " << o.output;
    EXPECT_NE(o.output.find("cannot reach gantryd"), std::string::npos)
        << flags << ": " << o.output;
  }
}

// Issue 47 B3: `gantry submit --id x job.yaml` ran job.yaml as the command, its spec
// unread. Flags and a spec file are refused together, before anything is sent; `--`
// still makes the file the command.
TEST_F(CliTest, SpecFlagsBesideASpecFileAreRefusedNotRunAsTheCommand) {
  const std::string spec = Path("job.yaml");
  std::ofstream(spec) << "queue: q\ngpus: 1\nvram_gb: 10\ncommand: [\"true\"]\n";
  const Outcome o = Gantry("--server http://127.0.0.1:9 submit --id x " + spec);
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_NE(
      o.output.find(
          "is a job spec file, and spec flags (--id, --queue, --gpus, ...) do not mix with one"),
      std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("cannot reach gantryd"), std::string::npos) << o.output;
  const Outcome dashed = Gantry("--server http://127.0.0.1:9 submit --id x -- " + spec + " arg");
  EXPECT_NE(dashed.output.find("cannot reach gantryd"), std::string::npos) << dashed.output;
}

TEST_F(CliTest, UnknownPolicyIsBadInput) {
  Outcome r = Gantry("sim --config " + Examples() + "/cluster.yaml --trace " + Examples() +
                     "/trace.jsonl --policy nope --events " + Path("e.jsonl"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown policy"), std::string::npos) << r.output;
}

TEST_F(CliTest, BadConfigNamesFileLineAndField) {
  std::ofstream(Path("cluster.yaml")) << "cluster: x\npools:\n  - name: p\n    count: 2\n"
                                         "    gpus: 8\n    gpu_model: H100-80GB\n"
                                         "queues:\n  - name: q\n    guaranteed_gpus: 8\n"
                                         "    burst_gpus: 4\n";
  Outcome r = Gantry("validate " + Path("cluster.yaml"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("cluster.yaml:10: queues[q].burst_gpus"), std::string::npos) << r.output;
}

TEST_F(CliTest, ValidateNamesJobsThatCanNeverStartAndWaitsMaxWaitCannotBound) {
  std::ofstream(Path("cluster.yaml"))
      << "cluster: x\npools:\n  - name: p\n    count: 4\n"
         "    gpus: 8\n    gpu_model: H100-80GB\n    sharing: [mps, mig]\n"
         "queues:\n  - name: small\n    burst_gpus: 8\n"
         "  - name: bounded\n    max_wait_s: 3600\n";
  std::ofstream(Path("t.jsonl"))
      << R"({"id":"fits","submit":0,"duration":10,"queue":"small","gpus":8,"vram_gb":8})"
         "\n"
      << R"({"id":"wide","submit":1,"duration":10,"queue":"small","replicas":2,"gpus":8,"vram_gb":8})"
         "\n"
      << R"({"id":"share","submit":2,"duration":10,"queue":"bounded","gpus":0.5,"sharing":"mps","vram_gb":8})"
         "\n"
      << R"({"id":"slice","submit":2,"duration":10,"queue":"bounded","mig":"1g.10gb","vram_gb":8})"
         "\n"
      << R"({"id":"night","submit":3,"duration":10,"queue":"bounded","gpus":1,"vram_gb":8,"window":{"start":"20:00","end":"06:00"}})"
         "\n"
      << R"({"id":"gang","submit":4,"duration":10,"queue":"bounded","replicas":2,"gpus":8,"vram_gb":8})"
         "\n";
  Outcome t = Gantry("validate " + Path("cluster.yaml") + " " + Path("t.jsonl"));
  EXPECT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("t.jsonl: trace, 6 jobs\n"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("1 can never start under their queues' burst_gpus (the simulator rejects "
                          "them): wide needs "
                          "16 GPUs, above the burst_gpus 8 of queue small"),
            std::string::npos)
      << t.output;
  // The share is bounded (a drain holds the free share of a GPU others still use).
  EXPECT_NE(t.output.find("2 in queues with max_wait_s ask MIG instances, or have a window"),
            std::string::npos)
      << t.output;
  // A job spec: the same rejection is an error, an unbounded wait a note.
  std::ofstream(Path("wide.yaml"))
      << "queue: small\nreplicas: 2\ngpus: 8\nvram_gb: 8\ncommand: [x]\n";
  std::ofstream(Path("share.yaml"))
      << "queue: bounded\ngpus: 0.5\nsharing: mps\nvram_gb: 8\ncommand: [x]\n";
  std::ofstream(Path("slice.yaml")) << "queue: bounded\nmig: 1g.10gb\nvram_gb: 8\ncommand: [x]\n";
  Outcome w = Gantry("validate " + Path("cluster.yaml") + " " + Path("wide.yaml"));
  EXPECT_EQ(w.status, 2) << w.output;
  EXPECT_NE(
      w.output.find("wide.yaml: this job can never start (gantryd rejects it): needs 16 GPUs"),
      std::string::npos)
      << w.output;
  Outcome sh = Gantry("validate " + Path("cluster.yaml") + " " + Path("share.yaml"));
  EXPECT_EQ(sh.status, 0) << sh.output;
  EXPECT_EQ(sh.output.find("cannot bound"), std::string::npos) << sh.output;
  Outcome sl = Gantry("validate " + Path("cluster.yaml") + " " + Path("slice.yaml"));
  EXPECT_EQ(sl.status, 0) << sl.output;
  EXPECT_NE(sl.output.find(
                "slice.yaml: ok, but max_wait_s cannot bound its wait: it asks a MIG instance"),
            std::string::npos)
      << sl.output;
}

// Called by Slurm's names (the links gantry-agent puts first on a batch job's PATH), the
// CLI is those commands: scontrol expands host lists without a server; what has no Gantry
// equivalent is refused naming it; srun outside a batch job says what it needs.
TEST_F(CliTest, SlurmsCommandNamesAreTheirCommands) {
  const std::string dir = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/";
  Outcome names = Shell(dir + "scontrol show hostnames 'h100-[0-2,09-10],cpu-1'");
  EXPECT_EQ(names.status, 0) << names.output;
  EXPECT_EQ(names.output, "h100-0\nh100-1\nh100-2\nh100-09\nh100-10\ncpu-1\n");
  Outcome list = Shell("SLURM_JOB_NODELIST='n[1-2]' " + dir + "scontrol show hostnames");
  EXPECT_EQ(list.output, "n1\nn2\n");
  Outcome compress = Shell(dir + "scontrol show hostlist a1,a2,a3,b");
  EXPECT_EQ(compress.output, "a[1-3],b\n");
  // Refused with why (status 2): what each says.
  for (const auto& [command, said] : std::vector<std::pair<std::string, std::string>>{
           {"scontrol update JobId=1 NumNodes=5",
            "update NumNodes=5: under Gantry, scontrol update sets a job's StartTime, TimeLimit, "
            "Dependency, ArrayTaskThrottle, JobName, Partition, QOS, Account and Nice only"},
           {"scontrol update JobId=1 Partition=", "update Partition=: give a value"},
           {"scontrol update JobId=1 Nice=lots", "Nice=lots: expected an adjustment from"},
           {"scontrol update JobId=1 ArrayTaskThrottle=-1", "ArrayTaskThrottle=-1: expected a"},
           {"scontrol update JobId=1 Dependency=afterburstbuffer:2",
            "afterburstbuffer is not supported"},
           {"scontrol update JobId=1 TimeLimit=+UNLIMITED", "TimeLimit: UNLIMITED cannot be added"},
           {"scontrol update JobId=1 TimeLimit=1:2:3:4", "TimeLimit: expected MM, MM:SS"},
           {"scontrol suspend 1", "show hostnames"},
           {"scontrol update JobId=1 StartTime=4pm", "StartTime: expected now+N"},
           {"squeue --partition=x", "squeue --partition=x: not supported"}}) {
    Outcome refused = Shell(dir + command + " 2>&1");
    EXPECT_EQ(refused.status, 2) << command;
    EXPECT_NE(refused.output.find(said), std::string::npos) << command << ": " << refused.output;
  }
  Outcome state = Shell(dir + "squeue -t XX 2>&1");
  EXPECT_NE(state.output.find("give one of PD, R"), std::string::npos) << state.output;
  Outcome scancel = Shell(dir + "scancel --interactive j1 2>&1");
  EXPECT_EQ(scancel.status, 2);
  EXPECT_NE(scancel.output.find("gantry cancel --force"), std::string::npos) << scancel.output;
  Outcome srun = Shell("env -u SLURM_JOB_ID " + dir + "srun -N1 hostname 2>&1");
  EXPECT_EQ(srun.status, 2);
  EXPECT_NE(srun.output.find("no job allocation"), std::string::npos) << srun.output;
  for (const char* refused : {"--mpi=cray_shasta", "--cpu-bind=bogus", "--mem-bind=local", "-i x",
                              "-o out-%Q", "-e err-%Q", "--time=xyz", "--bogus"}) {
    Outcome r =
        Shell("SLURM_JOB_ID=j1 GANTRY_TOKEN=t " + dir + "srun " + refused + " hostname 2>&1");
    EXPECT_EQ(r.status, 2) << refused << ": " << r.output;
    EXPECT_NE(r.output.find("srun: error:"), std::string::npos) << r.output;
  }
  // Steps the job cannot hold, refused before anything is asked of a server, as Slurm
  // 22.05's srun refuses them (its words, status 1); no GPUs of a GPU job: not honoured
  // (fewer than the job's go to gantryd, Slurm.StepsOfFewerGpusThanTheJobs...).
  const std::string job =
      "SLURM_JOB_ID=12 GANTRY_TOKEN=t SLURM_GPUS_ON_NODE=4 "
      "SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=2 SLURM_MEM_PER_NODE=8000 " +
      dir + "srun ";
  for (const auto& [args, status, said] : std::vector<std::tuple<std::string, int, std::string>>{
           {"--gres=gpu:8", 1,
            "srun: error: Step requested gres_per_node=gpu:8 is more than the job's "
            "gres_per_node=gpu:4\nsrun: error: Unable to create step for job 12: Invalid generic "
            "resource (gres) specification\n"},
           {"--gpus=9", 1,
            "srun: error: Unable to create step for job 12: Invalid generic resource (gres) "
            "specification\n"},
           {"--gpus-per-node=a100:0", 2, "a step of no GPUs is not honoured"},
           {"-N 3 -n 3", 1, "srun: error: Only allocated 2 nodes asked for 3\n"},
           {"--mem=9G", 1,
            "srun: error: Unable to create step for job 12: Memory required by task is not "
            "available\n"},
           {"--mem-per-cpu=3G -c 3", 1, "Memory required by task is not available"}}) {
    Outcome r = Shell(job + args + " hostname 2>&1");
    EXPECT_EQ(r.status, status) << args << ": " << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << args << ": " << r.output;
  }
}

}  // namespace
