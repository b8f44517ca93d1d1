// Slurm habits end to end (issue 15 item 4, issue 47 A1): a Slurm batch script, unchanged,
// through `gantry sbatch` on the real gantryd and agents: its directives become the job,
// the script runs once, on the job's first node, with the SLURM_* variables it expects,
// and `srun` in it runs the tasks on the allocation; -o/-e files are written there, the
// time limit is enforced with the script's own --signal, and an array with a dependency
// runs in order; `gantry ls --format` and `gantry acct` show them as squeue and sacct
// would.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "base/cpus.h"
#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSlurmCluster = R"(cluster: slurm-it
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
  - name: spare
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
queues:
  - name: research
    guaranteed_gpus: 8
    burst_gpus: 24
)";

// What a Slurm user writes: nothing in it knows about Gantry.
// Whether the agent of `node` hides the node's other GPUs from each worker (its log says so
// at start): CUDA then counts a worker's GPUs from 0.
bool FencesGpus(Harness& h, const std::string& node) {
  const std::string log = h.Read("agent-" + node + ".log");
  return log.find("workers run in cgroups") != std::string::npos &&
         log.find("GPU devices are NOT constrained") == std::string::npos;
}

constexpr const char* kTrainScript = R"SH(#!/bin/bash
#SBATCH --job-name=train
#SBATCH --partition=h100
#SBATCH --qos=normal
#SBATCH --account=research
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --time=10:00          # the command line overrides this
#SBATCH --signal=B:USR1@1
#SBATCH --output=%x-%j-%t.out
#SBATCH --error=%x-%j-%t.err
#SBATCH --export=ALL,EXTRA=yes

trap 'echo "usr1 $(date +%s.%N)" >> sig-batch.txt' USR1
env | sort > env-batch.txt
echo "the batch script, args $*"
echo "a warning from the batch script" >&2
srun bash -c 'env | sort > "env-$SLURM_PROCID.txt"; echo "hello from task $SLURM_PROCID of $SLURM_NTASKS"'
echo "start $(date +%s.%N)" > times.txt
while true; do sleep 0.1; done   # runs until its time limit
)SH";

constexpr const char* kArrayScript = R"SH(#!/bin/sh
#SBATCH -J sweep
#SBATCH -A research
#SBATCH -G 1
#SBATCH -t 1
#SBATCH -o sweep-%A_%a.out
echo "start $(date +%s.%N)" > "task-$SLURM_ARRAY_TASK_ID.txt"
sleep 0.4
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID ($SLURM_ARRAY_TASK_COUNT, $SLURM_ARRAY_TASK_MIN-$SLURM_ARRAY_TASK_MAX)"
echo "end $(date +%s.%N)" >> "task-$SLURM_ARRAY_TASK_ID.txt"
)SH";

constexpr const char* kMergeScript = R"SH(#!/bin/sh
#SBATCH --job-name=merge
#SBATCH --account=research
echo "start $(date +%s.%N)" > merge.txt
cat task-*.txt | wc -l
)SH";

void StartSlurmCluster(Harness& h) {
  h.Setup(kSlurmCluster, {{"a", "research"}});
  h.AddToken("ann", {"--team", "a", "--queues", "research", "--user", "ann"});
  h.StartServer();
  for (const char* node : {"h100-0", "h100-1", "spare-0"}) h.StartAgent(node);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(3); }, 15)) << "agents did not come up";
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The job id behind sbatch's answer, which is the job's number as Slurm's ("Submitted
// batch job 12", or "12" with --parsable): j12.
std::string JobIdOf(const std::string& sbatch_out) {
  const std::string out = Trim(sbatch_out);
  const std::string number = out.substr(out.rfind(' ') + 1);
  EXPECT_FALSE(number.empty() || number.find_first_not_of("0123456789") != std::string::npos)
      << "sbatch said " << sbatch_out;
  return "j" + number;
}

// Slurm's command argv[0] (squeue, scontrol, sacct, scancel), as gantry installs it beside
// itself, run by `who` against h's gantryd.
RunResult SlurmAs(const Harness& h, const std::string& who, std::vector<std::string> argv) {
  argv[0] = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/" + argv[0];
  return it::Run(argv,
                 {{"GANTRY_SERVER", h.ServerUrl()}, {"GANTRY_TOKEN", h.token(who)}, {"USER", who}});
}

TEST(Slurm, ABatchScriptRunsUnchangedWithItsDirectivesEnvironmentOutputFilesAndTimeLimit) {
  Harness h("slurm-script");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("train.sh", kTrainScript);
  // Options on the command line override the script's: 5 s here, so the limit comes soon.
  RunResult r = h.Cli({"sbatch", "--time=0:05", "-D", work, h.Path("train.sh"), "--lr", "0.1"},
                      h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(r.out.rfind("Submitted batch job ", 0), 0u) << r.out;
  const std::string id = JobIdOf(r.out);

  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  json job = h.Job(id);
  // The time limit (5 s, less the signal's 1 s lead) was enforced: USR1 first, then the kill.
  EXPECT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job["reason"].get<std::string>().rfind("time limit reached", 0), 0u) << job.dump();
  EXPECT_EQ(job["name"], "train");
  EXPECT_EQ(job["pool"], "h100");
  EXPECT_EQ(job["tier"], "standard");
  EXPECT_EQ(job["queue"], "research");
  EXPECT_EQ(job["replicas"], 2);
  EXPECT_DOUBLE_EQ(job["time_limit_s"].get<double>(), 4.0);
  const double ran = job["end"].get<double>() - job["start"].get<double>();
  EXPECT_GE(ran, 4.0);
  EXPECT_LT(ran, 10.0) << "stopped long after its limit";

  // The batch script ran once, on the node, with the SLURM_* variables Slurm gives it, all
  // the job's GPUs there, and its own credential (not the submitter's token).
  ASSERT_TRUE(fs::exists(work + "/env-batch.txt")) << "the batch script did not run";
  auto batch = ReadEnvFile(work + "/env-batch.txt");
  const std::string number = std::to_string(job["seq"].get<int64_t>());  // as Slurm's ids
  EXPECT_EQ(batch["SLURM_JOB_ID"], number);
  EXPECT_EQ(batch["SLURM_JOB_NAME"], "train");
  EXPECT_EQ(batch["SLURM_PROCID"], "0");
  EXPECT_EQ(batch["SLURM_NODEID"], "0");
  EXPECT_EQ(batch["SLURM_NTASKS"], "2");
  EXPECT_EQ(batch["SLURM_NNODES"], "1");
  EXPECT_EQ(batch["SLURM_JOB_NUM_NODES"], "1");
  EXPECT_EQ(batch["SLURM_NTASKS_PER_NODE"], "2");
  EXPECT_EQ(batch["SLURM_TASKS_PER_NODE"], "2");
  EXPECT_EQ(batch["SLURM_GPUS_ON_NODE"], "4");
  EXPECT_EQ(batch["SLURM_CPUS_PER_TASK"], "2");
  EXPECT_EQ(batch["SLURM_CPUS_ON_NODE"], "4");
  EXPECT_EQ(batch["SLURM_MEM_PER_NODE"], "8192");  // --mem=8G, as Slurm says it
  EXPECT_EQ(std::count(batch["SLURM_JOB_GPUS"].begin(), batch["SLURM_JOB_GPUS"].end(), ','), 3)
      << batch["SLURM_JOB_GPUS"];
  EXPECT_EQ(batch["SLURM_JOB_PARTITION"], "h100");
  EXPECT_EQ(batch["SLURM_JOB_ACCOUNT"], "research");
  EXPECT_EQ(batch["SLURM_JOB_QOS"], "normal");  // Slurm's default QoS, as its name says
  EXPECT_EQ(batch["SLURM_JOB_CPUS_PER_NODE"], "4");
  EXPECT_EQ(batch["SLURM_CLUSTER_NAME"], "slurm-it");
  EXPECT_EQ(batch["SLURM_GTIDS"], "0");
  EXPECT_EQ(batch["SLURM_TOPOLOGY_ADDR"], batch["SLURMD_NODENAME"]);
  EXPECT_EQ(batch["SLURM_EXPORT_ENV"], "ALL,EXTRA=yes");
  EXPECT_EQ(batch["SLURM_JOB_UID"],
            std::to_string(::getuid()));  // these agents run jobs as themselves
  EXPECT_EQ(batch["SLURM_JOB_GID"], std::to_string(::getgid()));
  EXPECT_EQ(batch["SLURM_JOB_USER"], "ann");
  EXPECT_EQ(batch["SLURM_JOB_NODELIST"].rfind("h100-", 0), 0u) << batch["SLURM_JOB_NODELIST"];
  EXPECT_EQ(batch["SLURMD_NODENAME"], batch["SLURM_JOB_NODELIST"]);
  EXPECT_EQ(batch["SLURM_SUBMIT_DIR"], fs::current_path().string());
  EXPECT_EQ(batch["PWD"], work);     // -D
  EXPECT_EQ(batch["EXTRA"], "yes");  // --export=ALL,EXTRA=yes
  EXPECT_EQ(batch.count("RANK"), 0u) << "a batch script is not a task";
  EXPECT_EQ(batch["GANTRY_TOKEN"].rfind("gjt_", 0), 0u) << "the job's own credential";
  EXPECT_NE(batch["GANTRY_TOKEN"], h.token("ann")) << "the submitter's token reached the job";
  EXPECT_EQ(
      std::count(batch["CUDA_VISIBLE_DEVICES"].begin(), batch["CUDA_VISIBLE_DEVICES"].end(), ','),
      3);
  EXPECT_EQ(batch["GPU_DEVICE_ORDINAL"], batch["CUDA_VISIBLE_DEVICES"]);  // as Slurm's gres/gpu
  EXPECT_EQ(batch["ROCR_VISIBLE_DEVICES"], batch["CUDA_VISIBLE_DEVICES"]);
  // By index, as Slurm's gres sets it (a native job's names UUIDs): from 0 where the agent's
  // device rules hide the node's other GPUs (Slurm's ConstrainDevices), else the node's.
  EXPECT_EQ(batch["CUDA_VISIBLE_DEVICES"],
            FencesGpus(h, batch["SLURMD_NODENAME"]) ? "0,1,2,3" : batch["SLURM_JOB_GPUS"]);
  // srun ran the job's two tasks, each seeing the job's GPUs on its node.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r_s = std::to_string(rank);
    ASSERT_TRUE(fs::exists(work + "/env-" + r_s + ".txt")) << "task " << rank << " did not run";
    auto env = ReadEnvFile(work + "/env-" + r_s + ".txt");
    EXPECT_EQ(env["SLURM_JOB_ID"], number);
    EXPECT_EQ(env["SLURM_STEP_ID"], "0");
    EXPECT_EQ(env["SLURM_PROCID"], r_s);
    EXPECT_EQ(env["SLURM_LOCALID"], r_s);  // both on one node (-N 1)
    EXPECT_EQ(env["SLURM_NODEID"], "0");
    EXPECT_EQ(env["SLURM_NTASKS"], "2");
    EXPECT_EQ(env["SLURM_STEP_NUM_TASKS"], "2");
    EXPECT_EQ(env["SLURM_NNODES"], "1");
    EXPECT_EQ(env["SLURM_GPUS_ON_NODE"], "4");
    EXPECT_EQ(env["SLURMD_NODENAME"], batch["SLURMD_NODENAME"]);
    EXPECT_EQ(env["RANK"], r_s);
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["PWD"], work);
    EXPECT_EQ(env["EXTRA"], "yes");
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], batch["CUDA_VISIBLE_DEVICES"]);
    EXPECT_EQ(env["GPU_DEVICE_ORDINAL"], batch["CUDA_VISIBLE_DEVICES"]);
    EXPECT_EQ(env["SLURM_GTIDS"], "0,1");  // the step's tasks on this node
    EXPECT_EQ(env["SLURM_TOPOLOGY_ADDR"], batch["SLURMD_NODENAME"]);
    EXPECT_EQ(env["SLURM_JOB_CPUS_PER_NODE"], "4");
  }
  // -o and -e: real files where the batch script ran (%t: 0, its task id); srun's tasks
  // printed into it.
  const std::string out = h.Read("work/train-" + id.substr(1) + "-0.out");
  EXPECT_NE(out.find("the batch script, args --lr 0.1"), std::string::npos) << out;
  EXPECT_NE(out.find("hello from task 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("hello from task 1 of 2"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(work + "/train-" + id.substr(1) + "-1.out")) << "the script ran twice";
  const std::string err = h.Read("work/train-" + id.substr(1) + "-0.err");
  EXPECT_NE(err.find("a warning from the batch script"), std::string::npos) << err;
  // --signal=B:USR1@1: the script's own signal, a second before the kill.
  EXPECT_TRUE(fs::exists(work + "/sig-batch.txt")) << "the batch script got no USR1";
  // gantry logs still shows the output (the -o file, uploaded by the agent).
  RunResult logs = h.Cli({"logs", id}, h.token("ann"));
  EXPECT_NE(logs.out.find("hello from task 1 of 2"), std::string::npos) << logs.out << logs.err;

  // sacct's answer.
  RunResult acct = h.Cli(
      {"acct", "-j", id, "--parsable2", "--format", "JobID,JobName,Account,User,State,AllocTRES"},
      h.token("ann"));
  ASSERT_EQ(acct.rc, 0) << acct.err;
  // The job, its script (killed at the limit) and its step, as sacct shows them.
  // JobID the number, as Slurm's.
  const std::string n = id.substr(1);
  EXPECT_EQ(acct.out, "JobID|JobName|Account|User|State|AllocTRES\n" + n +
                          "|train|research|ann|TIMEOUT|cpu=4,gres/gpu=4,node=1\n" + n +
                          ".batch|batch|research|ann|CANCELLED|cpu=2,node=1\n" + n +
                          ".0|bash|research|ann|COMPLETED|cpu=4,node=1\n");
  RunResult timeouts =
      h.Cli({"acct", "-X", "-s", "TO", "-u", "ann", "-n", "-P", "-o", "JobID"}, h.token("ann"));
  EXPECT_EQ(timeouts.out, n + "\n") << timeouts.err;
  // A bad directive is refused with the script, line and directive, and nothing is submitted.
  h.Write("bad.sh", "#!/bin/sh\n#SBATCH -N 1\n#SBATCH --licenses=matlab:1\n");
  RunResult bad = h.Cli({"sbatch", h.Path("bad.sh")}, h.token("ann"));
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find(h.Path("bad.sh") + ":3: --licenses: not supported"), std::string::npos)
      << bad.err;
  // --exclusive: whole nodes; part of a node's GPUs is refused at the script's line.
  h.Write("part.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -p h100\n#SBATCH --gres=gpu:4\n"
          "#SBATCH --exclusive\n");
  RunResult part = h.Cli({"sbatch", h.Path("part.sh")}, h.token("ann"));
  EXPECT_EQ(part.rc, 2);
  EXPECT_NE(part.err.find(h.Path("part.sh") + ":5: --exclusive: a node is the job's alone only "
                                              "when it asks for all of its GPUs"),
            std::string::npos)
      << part.err;
  EXPECT_EQ(h.Jobs().size(), 1u);
}

// A pipeline's stage after one that failed waits, DependencyNeverSatisfied, as under
// Slurm 22.05's default (--kill-on-invalid-dep=yes cancels it), until scontrol update
// gives it a dependency that is met (bench/slurm_scripts/dependency_never.sbatch).
TEST(Slurm, AStageAfterAFailedOneWaitsDependencyNeverSatisfiedUntilMended) {
  Harness h("slurm-never");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("fail.sh", "#!/bin/bash\n#SBATCH -A research\n#SBATCH -t 1\nexit 3\n");
  h.Write("child.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -t 1\ntouch ran-$SLURM_JOB_NAME\n");
  auto sbatch = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"sbatch", "--parsable", "-D", work});
    RunResult r = SlurmAs(h, "ann", args);
    EXPECT_EQ(r.rc, 0) << r.err;
    return JobIdOf(r.out);
  };
  const std::string failing = sbatch({h.Path("fail.sh")});
  const std::string after = "--dependency=afterok:" + failing.substr(1);
  const std::string waiting = sbatch({"-J", "waiting", after, h.Path("child.sh")});
  const std::string killed =
      sbatch({"-J", "killed", "--kill-on-invalid-dep=yes", after, h.Path("child.sh")});
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {failing, killed}); }, 30));
  EXPECT_EQ(h.Job(failing)["state"], "failed");
  EXPECT_EQ(h.Job(killed)["state"], "cancelled");
  auto reason = [&] {
    return SlurmAs(h, "ann", {"squeue", "-h", "-j", waiting.substr(1), "-o", "%T %r"}).out;
  };
  ASSERT_TRUE(
      Harness::WaitFor([&] { return reason() == "PENDING DependencyNeverSatisfied\n"; }, 10))
      << reason();
  RunResult mend = SlurmAs(h, "ann",
                           {"scontrol", "update", "JobId=" + waiting.substr(1),
                            "Dependency=afternotok:" + failing.substr(1)});
  EXPECT_EQ(mend.rc, 0) << mend.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {waiting}); }, 30))
      << h.Job(waiting).dump();
  EXPECT_EQ(h.Job(waiting)["state"], "finished");
  EXPECT_TRUE(fs::exists(work + "/ran-waiting"));
  EXPECT_FALSE(fs::exists(work + "/ran-killed"));
}

TEST(Slurm, AnArrayAndAJobDependingOnItRunInOrder) {
  Harness h("slurm-array");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("sweep.sh", kArrayScript);
  h.Write("merge.sh", kMergeScript);
  // Throttled (%2): two tasks at a time, though the cluster has room for all four.
  RunResult a = h.Cli({"sbatch", "--parsable", "--array=0-3%2", "-D", work, h.Path("sweep.sh")},
                      h.token("ann"));
  ASSERT_EQ(a.rc, 0) << a.err;
  const std::string array = JobIdOf(a.out);
  RunResult m = h.Cli(
      {"sbatch", "--parsable", "--dependency=afterok:" + array, "-D", work, h.Path("merge.sh")},
      h.token("ann"));
  ASSERT_EQ(m.rc, 0) << m.err;
  const std::string merge = JobIdOf(m.out);

  // While the merge waits: squeue's view of it.
  RunResult q = h.Cli({"ls", "--format", "%i|%j|%a|%u|%T"}, h.token("ann"));
  EXPECT_EQ(q.rc, 0) << q.err;
  EXPECT_NE(q.out.find(merge.substr(1) + "|merge|research|ann|PENDING"), std::string::npos)
      << q.out;

  std::set<std::string> ids = {merge};
  for (int i = 0; i < 4; ++i) ids.insert(array + "_" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 40))
      << h.Cli({"ls", "--all"}, h.token("ann")).out;
  double last_end = 0;
  std::vector<std::pair<double, int>> edges;  // (time, +1 at a start, -1 at an end)
  for (int i = 0; i < 4; ++i) {
    const std::string task = array + "_" + std::to_string(i);
    const std::vector<double> began = Times(work + "/task-" + std::to_string(i) + ".txt", "start");
    ASSERT_EQ(began.size(), 1u) << "task " << i;
    edges.emplace_back(began[0], 1);
    EXPECT_EQ(h.Job(task)["state"], "finished") << h.Job(task).dump();
    EXPECT_EQ(h.Job(task)["name"], "sweep");
    const std::vector<double> end = Times(work + "/task-" + std::to_string(i) + ".txt", "end");
    ASSERT_EQ(end.size(), 1u) << "task " << i;
    last_end = std::max(last_end, end[0]);
    edges.emplace_back(end[0], -1);
    // -o sweep-%A_%a.out, with what the task printed.
    EXPECT_EQ(
        h.Read("work/sweep-" + array.substr(1) + "_" + std::to_string(i) + ".out"),
        "task " + std::to_string(i) + " of " + array.substr(1) + " (4, 0-3)\n");  // its number
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same instant
  int at_once = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, at_once += d);
  EXPECT_EQ(most, 2) << "tasks running at once under --array=0-3%2";
  EXPECT_EQ(h.Job(merge)["state"], "finished") << h.Job(merge).dump();
  const std::vector<double> start = Times(work + "/merge.txt", "start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_GT(start[0], last_end) << "the dependent job started before the array ended";
  EXPECT_EQ(h.Read("work/slurm-" + merge.substr(1) + ".out"),
            "8\n");  // Slurm's default -o; every task's two lines

  RunResult acct =
      h.Cli({"acct", "-X", "-j", array + "," + merge, "-P", "-n", "-o", "JobID,State,ExitCode"},
            h.token("ann"));
  std::string want;
  for (int i = 0; i < 4; ++i)
    want += array.substr(1) + "_" + std::to_string(i) + "|COMPLETED|0:0\n";
  EXPECT_EQ(acct.out, want + merge.substr(1) + "|COMPLETED|0:0\n") << acct.err;
  // squeue -O over ended jobs too (--all).
  RunResult o =
      h.Cli({"ls", "--all", "-O", "JobID:12,Name:8,State:.10", "--noheader"}, h.token("ann"));
  EXPECT_NE(
      o.out.find(merge.substr(1) + std::string(13 - merge.size(), ' ') + "merge   " + " COMPLETED"),
      std::string::npos)
      << o.out;
}

// Issue 47 A2: a script written for another site's names (its QoS, account and GPU type,
// no partition) runs once the cluster config maps them, and sees them as Slurm's job would
// (SLURM_JOB_ACCOUNT, SLURM_JOB_QOS: a script passes them on to the jobs it submits); one
// that names none sees the site's default account and Slurm's default QoS; what the site
// does not map is refused at the script's own line, and nothing is submitted.
TEST(Slurm, TheSitesNamesResolveAndWhatItDoesNotMapIsRefusedAtTheScriptsLine) {
  Harness h("slurm-site");
  h.Setup(std::string(kSlurmCluster) + R"(site:
  qos: {regular: standard, high: critical}
  partitions: {gpu: h100}
  default_partition: gpu
  accounts: {proj-42: research, proj-43: research}
  default_account: proj-42
)",
          {{"a", "research"}});
  h.AddToken("ann", {"--team", "a", "--queues", "research", "--user", "ann"});
  h.StartServer();
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("site.sh",
          "#!/bin/bash\n#SBATCH --qos=high\n#SBATCH -A proj-43\n"
          "#SBATCH --gres=gpu:nvidia_h100_80gb_hbm3:2\n"
          "echo \"$SLURM_JOB_ACCOUNT $SLURM_JOB_QOS\" > site.txt\n");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("site.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  json job = h.Job(JobIdOf(r.out));
  EXPECT_EQ(job["tier"], "critical") << job.dump();
  EXPECT_EQ(job["queue"], "research");
  EXPECT_EQ(job["pool"], "h100") << "the default partition";
  EXPECT_EQ(job["request"], "1 x 2 GPU(s) of H100-80GB") << job.dump();
  h.Write("plain.sh",
          "#!/bin/bash\n#SBATCH -G 1\necho \"$SLURM_JOB_ACCOUNT $SLURM_JOB_QOS\" > plain.txt\n");
  RunResult p = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("plain.sh")}, h.token("ann"));
  ASSERT_EQ(p.rc, 0) << p.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {JobIdOf(r.out), JobIdOf(p.out)}); }, 30));
  EXPECT_EQ(h.Read("work/site.txt"), "proj-43 high\n");
  EXPECT_EQ(h.Read("work/plain.txt"), "proj-42 normal\n");

  h.Write("other.sh",
          "#!/bin/bash\n#SBATCH --qos=premium\n#SBATCH --account=nobody\n"
          "#SBATCH -p debug\n#SBATCH --gres=gpu:mi300:1\necho hi\n");
  RunResult bad = h.Cli({"sbatch", h.Path("other.sh")}, h.token("ann"));
  EXPECT_EQ(bad.rc, 2);
  const std::string at = h.Path("other.sh");
  for (const std::string& want : {at + ":2: --qos=premium: unknown tier or QoS \"premium\"",
                                  at + ":3: --account=nobody: unknown queue or account \"nobody\"",
                                  at + ":4: --partition=debug: unknown pool or partition \"debug\"",
                                  at + ":5: --gres=gpu:mi300:1: unknown GPU model \"mi300\""}) {
    EXPECT_NE(bad.err.find(want), std::string::npos) << want << " in\n" << bad.err;
  }
  EXPECT_EQ(h.Jobs().size(), 2u);

  // scontrol update of a held job's name, QoS, account and partition, in the site's names:
  // it then runs as updated; a name the site does not map changes nothing.
  RunResult held =
      h.Cli({"sbatch", "--parsable", "-H", "-D", work, h.Path("plain.sh")}, h.token("ann"));
  ASSERT_EQ(held.rc, 0) << held.err;
  const std::string number = JobIdOf(held.out).substr(1);
  RunResult wrong =
      SlurmAs(h, "ann", {"scontrol", "update", "JobId=" + number, "QOS=premium", "JobName=lost"});
  EXPECT_NE(wrong.rc, 0);
  EXPECT_NE(wrong.err.find("unknown tier or QoS \"premium\""), std::string::npos) << wrong.err;
  RunResult up = SlurmAs(h, "ann",
                         {"scontrol", "update", "JobId=" + number, "JobName=renamed", "QOS=high",
                          "Account=proj-43", "Partition=gpu"});
  EXPECT_EQ(up.rc, 0) << up.err;
  job = h.Job(JobIdOf(held.out));
  EXPECT_EQ(job["name"], "renamed") << job.dump();
  EXPECT_EQ(job["tier"], "critical");
  RunResult shown = SlurmAs(h, "ann", {"squeue", "-h", "-j", number, "-o", "%j %q %a %P"});
  EXPECT_EQ(shown.out, "renamed high proj-43 gpu\n") << shown.err;  // the site's names
  EXPECT_EQ(SlurmAs(h, "ann", {"scontrol", "release", number}).rc, 0);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {JobIdOf(held.out)}); }, 30));
  EXPECT_EQ(h.Read("work/plain.txt"), "proj-43 high\n");
}

// Issue 47 A3: -N 2 --ntasks-per-node=2 runs 2 tasks on each of 2 nodes, as Slurm does,
// where the free GPUs would let all 4 pack onto one node; the SLURM_* values say so.
TEST(Slurm, NodesAndTasksPerNodeAreHonouredExactly) {
  Harness h("slurm-nodes");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("two.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
          "#SBATCH --gres=gpu:2\n#SBATCH -t 1\n"
          "srun sh -c 'env | sort > \"env-$SLURM_PROCID.txt\"'\n"
          "srun -o 'out-%J-%t-%n-%N.txt' sh -c 'echo task $SLURM_PROCID; echo err >&2'\n"
          "srun --output=all-%j.txt -l echo hi\n");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("two.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  json job = h.Job(id);
  EXPECT_EQ(job["state"], "finished") << job.dump();
  EXPECT_EQ(job["nodes"].size(), 2u) << job.dump();
  std::map<std::string, int> per_node;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = ReadEnvFile(work + "/env-" + std::to_string(rank) + ".txt");
    EXPECT_EQ(env["SLURM_NNODES"], "2");
    EXPECT_EQ(env["SLURM_NTASKS_PER_NODE"], "2");
    EXPECT_EQ(env["SLURM_NTASKS"], "4");
    ++per_node[env["SLURMD_NODENAME"]];
  }
  EXPECT_EQ(per_node.size(), 2u);
  for (const auto& [node, n] : per_node) EXPECT_EQ(n, 2) << node;
  // srun -o: each task's output (stderr with it) in the file its pattern names, step 1.
  const std::string number = id.substr(1);
  for (int rank = 0; rank < 4; ++rank) {
    auto env = ReadEnvFile(work + "/env-" + std::to_string(rank) + ".txt");
    const std::string file = "work/out-" + number + ".1-" + std::to_string(rank) + "-" +
                             env["SLURM_NODEID"] + "-" + env["SLURMD_NODENAME"] + ".txt";
    EXPECT_EQ(h.Read(file), "task " + std::to_string(rank) + "\nerr\n") << file;
  }
  // One file for every task (no %t), labelled with -l.
  std::string all = h.Read("work/all-" + number + ".txt");
  std::vector<std::string> lines;
  for (std::istringstream in(all); std::getline(in, all);) lines.push_back(all);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"0: hi", "1: hi", "2: hi", "3: hi"}));
}

// Issue 47 A1: what real multi-node scripts do inside the job, in our own words: the head
// node from scontrol, one launcher per node, labelled output, a step's output captured in
// a variable, steps in the background on named nodes, failing steps' statuses, and
// squeue, sbatch and sacct on the job itself, all with the job's own credential.
constexpr const char* kMultiNodeScript = R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH -t 5
#SBATCH -o run-%j.out
nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
export MASTER_ADDR=${nodes[0]}
echo "nodes ${#nodes[@]} head $MASTER_ADDR"
srun --ntasks-per-node=1 bash -c 'echo "launcher $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME master $MASTER_ADDR gpus $CUDA_VISIBLE_DEVICES"' > launchers.txt
srun -l bash -c 'echo "node $SLURMD_NODENAME"'
first=$(srun -N1 -n1 bash -c 'echo $SLURMD_NODENAME')
echo "captured $first"
srun -N1 -n1 -w "${nodes[0]}" bash -c 'echo "start $(date +%s.%N)"; sleep 1; echo "end $(date +%s.%N)"; echo "on $SLURMD_NODENAME"' > bg0.txt &
srun -N1 -n1 -w "${nodes[1]}" bash -c 'echo "start $(date +%s.%N)"; sleep 1; echo "end $(date +%s.%N)"; echo "on $SLURMD_NODENAME"' > bg1.txt &
wait
srun -N1 -n1 bash -c 'exit 3'
echo "status $?"
srun -n2 bash -c 'exit $((SLURM_PROCID + 4))' 2> failed.txt
echo "status $?"
srun --mpi=cray_shasta true 2> mpi.txt
echo "mpi status $?"
srun --wait=1 --kill-on-bad-exit=0 bash -c '[ $SLURM_PROCID = 0 ] && exit 0; sleep 30' 2> /dev/null
echo "waited $?"
srun --gres=gpu:4 bash -c 'echo "gres $SLURM_PROCID $CUDA_VISIBLE_DEVICES"' > gres.txt
echo "gres status $?"
srun --time=0:02 bash -c 'trap "echo got TERM; exit 7" TERM; sleep 60 & wait' 2> timed.txt
echo "timed status $?"
srun -n 9 true 2> many.txt
echo "many status $?"
srun -N 3 -n 3 true 2> wide.txt
echo "wide status $?"
srun -n1 --gpus=1 bash -c 'echo "one $SLURM_GPUS_ON_NODE $SLURM_STEP_NUM_NODES $SLURM_STEP_GPUS"' > one.txt
echo "state $(squeue -j $SLURM_JOB_ID -h -o %T)"
printf '#!/bin/bash\n#SBATCH -A research\necho "follow-up of $1"\n' > follow.sh
next=$(sbatch --parsable --dependency=afterok:$SLURM_JOB_ID -o follow.out follow.sh $SLURM_JOB_ID)
echo "submitted $next"
echo "port $((20000 + SLURM_JOB_ID % 1000))"
scontrol show job $SLURM_JOB_ID | head -n1 > show.txt
echo "$GANTRY_TOKEN" > token.txt
)SH";

TEST(Slurm, SrunScontrolSqueueAndSbatchWorkInsideAMultiNodeJob) {
  Harness h("slurm-inside");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("multi.sh", kMultiNodeScript);
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("multi.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 60)) << h.Job(id).dump();
  const json job = h.Job(id);
  EXPECT_EQ(job["state"], "finished") << job.dump() << h.Read("work/run-" + id.substr(1) + ".out");
  const std::string out = h.Read("work/run-" + id.substr(1) + ".out");
  std::vector<std::string> nodes;
  for (const json& n : job["nodes"]) nodes.push_back(n.get<std::string>());
  ASSERT_EQ(nodes.size(), 2u) << job.dump();
  // The script ran once: one "nodes" line, naming the head node scontrol gave.
  EXPECT_EQ(out.find("nodes 2 head " + nodes[0] + "\n"), 0u) << out;
  EXPECT_EQ(out.find("nodes 2", 1), std::string::npos) << "the script ran twice:\n" << out;
  // One launcher per node, each with the node's 4 GPUs and the exported MASTER_ADDR.
  const std::string launchers = h.Read("work/launchers.txt");
  for (int t = 0; t < 2; ++t) {
    EXPECT_NE(launchers.find("launcher " + std::to_string(t) + " of 2 on " +
                             nodes[static_cast<size_t>(t)] + " master " + nodes[0] + " gpus "),
              std::string::npos)
        << launchers;
  }
  EXPECT_EQ(std::count(launchers.begin(), launchers.end(), ','), 6) << launchers;  // 4 GPUs each
  // -l labels each line with its task.
  EXPECT_NE(out.find("0: node " + nodes[0] + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("1: node " + nodes[1] + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("captured " + nodes[0] + "\n"), std::string::npos) << out;
  // Two background steps on the nodes -w named, at the same time.
  std::vector<double> starts, ends;
  for (int b = 0; b < 2; ++b) {
    const std::string bg = h.Read("work/bg" + std::to_string(b) + ".txt");
    EXPECT_NE(bg.find("on " + nodes[static_cast<size_t>(b)] + "\n"), std::string::npos) << bg;
    auto s = Times(work + "/bg" + std::to_string(b) + ".txt", "start");
    auto e = Times(work + "/bg" + std::to_string(b) + ".txt", "end");
    ASSERT_EQ(s.size(), 1u);
    ASSERT_EQ(e.size(), 1u);
    starts.push_back(s[0]);
    ends.push_back(e[0]);
  }
  EXPECT_LT(std::max(starts[0], starts[1]), std::min(ends[0], ends[1])) << "they did not overlap";
  // Statuses: a failing step's code, the highest of several, and a refusal.
  EXPECT_NE(out.find("status 3\nstatus 5\n"), std::string::npos) << out;
  const std::string failed = h.Read("work/failed.txt");
  EXPECT_NE(failed.find("task 0: Exited with exit code 4"), std::string::npos) << failed;
  EXPECT_NE(failed.find("task 1: Exited with exit code 5"), std::string::npos) << failed;
  EXPECT_NE(out.find("mpi status 2\n"), std::string::npos) << out;
  // --wait=1: the task still running a second after the first ended was ended (SIGTERM).
  EXPECT_NE(out.find("waited 143\n"), std::string::npos) << out;
  EXPECT_NE(h.Read("work/mpi.txt").find("--mpi=cray_shasta: Gantry serves PMI-1"),
            std::string::npos);
  // A step that repeats the job's GPUs (--gres=gpu:4) runs; shapes the job cannot hold are
  // refused in Slurm 22.05's words, with its status (1).
  EXPECT_NE(out.find("gres status 0\n"), std::string::npos) << out;
  const std::string gres = h.Read("work/gres.txt");
  EXPECT_EQ(std::count(gres.begin(), gres.end(), ','), 6) << gres;  // 4 GPUs on each node
  EXPECT_NE(out.find("many status 1\nwide status 1\n"), std::string::npos) << out;
  EXPECT_NE(h.Read("work/many.txt")
                .find("srun: error: Unable to create step for job " + id.substr(1) +
                      ": More processors requested than permitted"),
            std::string::npos)
      << h.Read("work/many.txt");
  EXPECT_EQ(h.Read("work/wide.txt"), "srun: error: Only allocated 2 nodes asked for 3\n");
  // srun --time: the step is cancelled at its limit (SIGTERM, which it traps), said as
  // Slurm's slurmstepd says it; srun's status is the task's, sacct says TIMEOUT.
  EXPECT_NE(out.find("got TERM\ngot TERM\ntimed status 7\n"), std::string::npos) << out;
  const std::string timed = h.Read("work/timed.txt");
  EXPECT_NE(timed.find(": error: *** STEP " + id.substr(1) + ".9 ON "), std::string::npos) << timed;
  EXPECT_NE(timed.find(" DUE TO TIME LIMIT ***\n"), std::string::npos) << timed;
  EXPECT_NE(timed.find("task 0: Exited with exit code 7"), std::string::npos) << timed;
  // squeue saw it running; sbatch inside it submitted as its user, to its queue, and the
  // follow-up ran once it had finished.
  EXPECT_NE(out.find("state RUNNING\n"), std::string::npos) << out;
  const size_t at = out.find("submitted ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string next = JobIdOf(out.substr(at + 10, out.find('\n', at) - at - 10));
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {next}); }, 30)) << h.Job(next).dump();
  EXPECT_EQ(h.Job(next)["state"], "finished") << h.Job(next).dump();
  EXPECT_EQ(h.Job(next)["user"], "ann");
  EXPECT_EQ(h.Job(next)["queue"], "research");
  const int64_t number = job["seq"].get<int64_t>();
  EXPECT_EQ(h.Read("work/follow.out"), "follow-up of " + std::to_string(number) + "\n");
  // Its number is a number (scripts compute ports from it), and every command takes it.
  EXPECT_NE(out.find("port " + std::to_string(20000 + number % 1000) + "\n"), std::string::npos)
      << out;
  EXPECT_EQ(h.Read("work/show.txt").rfind("JobId=" + id.substr(1) + " ", 0), 0u)
      << h.Read("work/show.txt");  // the number, as Slurm's
  // sacct's rows for the script and each step, with their statuses (JobID the number).
  const std::string n = id.substr(1);
  RunResult acct = h.Cli(
      {"acct", "-j", std::to_string(number), "-P", "-n", "-o", "JobID,JobName,State,ExitCode"},
      h.token("ann"));
  for (const std::string& row :
       {n + "|multi.sh|COMPLETED|0:0\n", n + ".batch|batch|COMPLETED|0:0\n",
        n + ".0|bash|COMPLETED|0:0\n", n + ".5|bash|FAILED|3:0\n", n + ".6|bash|FAILED|5:0\n",
        n + ".9|bash|TIMEOUT|7:0\n"}) {
    EXPECT_NE(acct.out.find(row), std::string::npos) << row << " in\n" << acct.out;
  }
  // One GPU, one task, in a job of two nodes: one node, one of its GPUs (--gpus, as Slurm).
  const std::string one = h.Read("work/one.txt");
  EXPECT_EQ(one.rfind("one 1 1 ", 0), 0u) << one;
  EXPECT_EQ(one.find(','), std::string::npos) << one;
  // The job's credential ended with its run.
  const std::string token = Trim(h.Read("work/token.txt"));
  int status = 0;
  h.Get("/v1/jobs/" + id, token, &status);
  EXPECT_EQ(status, 401);
}

// A job's credential runs steps of its own job only, and srun outside a job says why not.
TEST(Slurm, AJobsCredentialRunsStepsOfThatJobOnly) {
  Harness h("slurm-credential");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("hold.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 1\n"
          "echo \"$GANTRY_TOKEN\" > token-$SLURM_JOB_ID.txt\nsleep 30\n");
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("hold.sh")}, h.token("ann"));
    ASSERT_EQ(r.rc, 0) << r.err;
    ids.push_back(JobIdOf(r.out));
  }
  auto number = [&](int i) {
    return std::to_string(h.Job(ids[static_cast<size_t>(i)])["seq"].get<int64_t>());
  };
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return fs::exists(work + "/token-" + number(0) + ".txt") &&
               fs::exists(work + "/token-" + number(1) + ".txt");
      },
      20));
  const std::string token = Trim(h.Read("work/token-" + number(0) + ".txt"));
  const json step = {{"command", {"true"}}};
  int status = 0;
  h.Post("/v1/jobs/" + ids[1] + "/steps", step.dump(), token, &status);
  EXPECT_EQ(status, 403) << "one job's credential ran a step of another";
  h.Post("/v1/jobs/" + ids[0] + "/steps", step.dump(), h.token("ann"), &status);
  EXPECT_EQ(status, 403) << "the submitter's token ran a step: steps run inside the job";
  json mine = h.Post("/v1/jobs/" + ids[0] + "/steps", step.dump(), token, &status);
  EXPECT_EQ(status, 201) << mine.dump();
  // By its number too, as srun names it (SLURM_JOB_ID).
  h.Post("/v1/jobs/" + number(0) + "/steps", step.dump(), token, &status);
  EXPECT_EQ(status, 201);
  // It may cancel its user's jobs, not another user's.
  RunResult other =
      h.Cli({"submit", "--queue", "research", "--gpus", "1", "--vram-gb", "1", "--", "sleep", "30"},
            h.token("admin"));
  ASSERT_EQ(other.rc, 0) << other.err;
  const std::string admins = Trim(other.out.substr(other.out.rfind(' ') + 1));
  h.Post("/v1/jobs/" + admins + "/cancel", "", token, &status);
  EXPECT_EQ(status, 403) << "a job's credential cancelled another user's job";
  h.Post("/v1/jobs/" + ids[1] + "/cancel", "", token, &status);
  EXPECT_EQ(status, 200);
  // Outside a job, srun says what it needs.
  RunResult outside = h.Cli({"srun", "hostname"}, h.token("ann"));
  EXPECT_EQ(outside.rc, 2);
  EXPECT_NE(outside.err.find("no job allocation"), std::string::npos) << outside.err;
}

// Writes `script` to `file` and submits it with sbatch as ann, in work/ (made here);
// returns the job's id, or "" with the failure added.
std::string Sbatch(Harness& h, const std::string& file, const std::string& script) {
  fs::create_directories(h.Path("work"));
  h.Write(file, script);
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", h.Path("work"), h.Path(file)}, h.token("ann"));
  if (r.rc != 0) {
    ADD_FAILURE() << r.err;
    return "";
  }
  return JobIdOf(r.out);
}

// --signal=USR1 (no B:) goes to the steps, not the batch script, as Slurm sends it.
TEST(Slurm, TheSignalWithoutBGoesToTheStepsOnly) {
  Harness h("slurm-signal");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  const std::string id =
      Sbatch(h, "sig.sh",
             "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --gpus-per-node=1\n"
             "#SBATCH --time=0:05\n#SBATCH --signal=USR1@2\n"
             "trap 'echo usr1 > sig-batch.txt' USR1\n"
             "srun bash -c 'trap \"echo usr1 > sig-$SLURM_PROCID.txt; exit 0\" USR1; "
             "while true; do sleep 0.1; done'\n"
             "echo \"srun ended $?\" > after.txt\nsleep 30\n");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  EXPECT_TRUE(fs::exists(work + "/sig-0.txt"));
  EXPECT_TRUE(fs::exists(work + "/sig-1.txt"));
  EXPECT_FALSE(fs::exists(work + "/sig-batch.txt")) << "the batch script got the steps' signal";
  EXPECT_EQ(h.Read("work/after.txt"), "srun ended 0\n");  // the tasks ended on USR1
}

// Steps across 8 nodes: a batch job of 8 nodes with 4 tasks each and 2 GPUs per task runs
// one step of 32 tasks (each SLURM_PROCID once, 4 per node with its own local ids and its
// own pair of its node's GPUs), then one task on each node (-N 8 -n 8), as Slurm places
// them (block distribution).
TEST(Slurm, AStepOf32TasksRunsAcrossEightNodes) {
  Harness h("slurm-wide");
  h.Setup(R"(cluster: slurm-wide
pools:
  - name: w
    count: 8
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
queues:
  - name: research
    guaranteed_gpus: 64
)",
          {{"a", "research"}});
  h.AddToken("ann", {"--team", "a", "--queues", "research", "--user", "ann"});
  h.StartServer();
  for (int i = 0; i < 8; ++i) h.StartAgent("w-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(8); }, 30)) << "agents did not come up";
  const std::string id =
      Sbatch(h, "wide.sh",
             "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 8\n#SBATCH --ntasks-per-node=4\n"
             "#SBATCH --gpus-per-task=2\n#SBATCH -t 2\n#SBATCH -o wide.out\n"
             "srun bash -c 'echo \"task $SLURM_PROCID node $SLURM_NODEID local $SLURM_LOCALID "
             "host $SLURMD_NODENAME gpus $SLURM_STEP_GPUS ntasks $SLURM_NTASKS "
             "sees $CUDA_VISIBLE_DEVICES\"' > tasks.txt\n"
             "echo \"srun $?\"\n"
             "srun -N 8 -n 8 bash -c 'echo $SLURMD_NODENAME' > hosts.txt\n"
             "echo \"srun $?\"\n");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 90)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(h.Read("work/wide.out"), "srun 0\nsrun 0\n");
  std::istringstream tasks(h.Read("work/tasks.txt"));
  std::map<int, std::string> by_task;                 // task -> its line
  std::map<std::string, std::set<int>> locals;        // host -> local ids
  std::map<std::string, std::set<std::string>> gpus;  // host -> GPU pairs
  for (std::string line; std::getline(tasks, line);) {
    std::istringstream f(line);
    std::string w[14];
    for (std::string& x : w) f >> x;
    ASSERT_EQ(w[0], "task") << line;
    const int task = std::stoi(w[1]);
    EXPECT_TRUE(by_task.emplace(task, line).second) << "task " << task << " ran twice";
    EXPECT_EQ(std::stoi(w[3]), task / 4) << line;  // block: tasks 0-3 on the first node
    EXPECT_EQ(std::stoi(w[5]), task % 4) << line;
    EXPECT_TRUE(locals[w[7]].insert(std::stoi(w[5])).second) << line;
    EXPECT_EQ(std::count(w[9].begin(), w[9].end(), ','), 1) << "two GPUs: " << line;
    EXPECT_TRUE(gpus[w[7]].insert(w[9]).second) << "a GPU pair given twice: " << line;
    EXPECT_EQ(w[11], "32") << line;
    // CUDA's names for them: from 0 where the agent's device rules hide the node's other
    // GPUs (as Slurm's under ConstrainDevices), else the node's indexes.
    EXPECT_EQ(w[13], FencesGpus(h, w[7]) ? "0,1" : w[9]) << line;
  }
  EXPECT_EQ(by_task.size(), 32u);
  EXPECT_EQ(locals.size(), 8u) << "8 nodes";
  for (const auto& [host, ids] : locals) EXPECT_EQ(ids.size(), 4u) << host;
  std::istringstream hosts(h.Read("work/hosts.txt"));
  std::set<std::string> distinct;
  int lines = 0;
  for (std::string line; std::getline(hosts, line); ++lines) distinct.insert(line);
  EXPECT_EQ(lines, 8);
  EXPECT_EQ(distinct.size(), 8u) << "one task on each node";
}

// srun follows its step by a long poll on a thread of its own: an interrupt is acted on
// at once (the step cancelled: its tasks get SIGTERM), not when the poll comes back, and
// a task's exit reaches srun without a poll interval.
TEST(Slurm, AnInterruptedSrunCancelsItsStepAtOnce) {
  Harness h("slurm-interrupt");
  StartSlurmCluster(h);
  const std::string id =
      Sbatch(h, "int.sh",
             "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 1\n#SBATCH --gpus-per-node=1\n"
             "#SBATCH -t 2\n#SBATCH -o int.out\n"
             "srun bash -c 'echo quick' > quick.txt\n"
             "srun bash -c 'trap \"echo term > term.txt; exit 3\" TERM; touch up; "
             "while true; do sleep 0.1; done' &\n"
             "pid=$!\n"
             "while [ ! -e up ]; do sleep 0.1; done\n"
             "sleep 1\n"
             "start=$(date +%s%N)\n"
             "kill -INT $pid\n"
             "wait $pid\n"
             "echo \"srun $? after $(( ($(date +%s%N) - start) / 1000000 )) ms\"\n");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Read("work/quick.txt"), "quick\n");
  EXPECT_EQ(h.Read("work/term.txt"), "term\n") << "the task got SIGTERM";
  const std::string out = h.Read("work/int.out");
  EXPECT_NE(out.find("srun: interrupted: cancelling step"), std::string::npos) << out;
  const size_t at = out.find("srun ");
  ASSERT_NE(out.find("after "), std::string::npos) << out;
  const int ms = std::atoi(out.c_str() + out.find("after ") + 6);
  // Within the kill wait (10 s) and well inside the poll's 20 s: the tasks' end, not a
  // poll's timeout, ended srun.
  EXPECT_LT(ms, 8000) << out;
  EXPECT_NE(at, std::string::npos);
}

// A 2-node batch job whose one step (a task per node: "begin N", `sleep_s`, "done N")
// has started on both nodes; output in work/long.out, the script's "srun STATUS" last.
// Its id, or "" (with the failure added) when it did not get that far.
std::string SubmitLongStep(Harness& h, int sleep_s) {
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("long.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --gpus-per-node=1\n"
          "#SBATCH -t 2\n#SBATCH -o long.out\n"
          "srun bash -c 'touch started-$SLURM_PROCID; echo \"begin $SLURM_PROCID\"; sleep " +
              std::to_string(sleep_s) +
              "; echo \"done $SLURM_PROCID\"'\n"
              "echo \"srun $?\"\n");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("long.sh")}, h.token("ann"));
  if (r.rc != 0) {
    ADD_FAILURE() << r.err;
    return "";
  }
  if (!Harness::WaitFor(
          [&] { return fs::exists(work + "/started-0") && fs::exists(work + "/started-1"); }, 20)) {
    ADD_FAILURE() << "the step did not start on both nodes";
    return "";
  }
  return JobIdOf(r.out);
}

// A step outlives a gantryd crash: its tasks run on under their agents, srun waits for
// gantryd to come back (the job's credential is in the job's record, so it still holds)
// and prints their output and status, and the job ends as it would have.
TEST(Slurm, AStepOutlivesAGantrydCrash) {
  Harness h("slurm-restart");
  StartSlurmCluster(h);
  const std::string id = SubmitLongStep(h, 4);
  ASSERT_FALSE(id.empty());
  h.KillServer(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  h.StartServer();
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  const std::string out = h.Read("work/long.out");
  EXPECT_NE(out.find("done 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("done 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("srun 0\n"), std::string::npos) << out;
  EXPECT_EQ(h.Job(id)["run"], 1) << "the job ran again";
}

// The agents of a job killed (-9) in the middle of a step, each started again within its
// lease: the step's tasks (and the script) run on under their shims and are taken back,
// their output is uploaded whole and their exits reported once, so srun ends as it would
// have and the job runs once. Both of the job's nodes: the script's and one with a task
// alone.
TEST(Slurm, AStepOutlivesItsAgentsBeingKilled) {
  Harness h("slurm-agent-kill");
  StartSlurmCluster(h);
  const std::string id = SubmitLongStep(h, 6);
  ASSERT_FALSE(id.empty());
  const std::map<std::string, int> index = {{"h100-0", 0}, {"h100-1", 1}, {"spare-0", 2}};
  const json nodes = h.Job(id)["nodes"];
  ASSERT_EQ(nodes.size(), 2u) << h.Job(id).dump();
  for (const json& node : nodes) {
    h.StopAgent(index.at(node.get<std::string>()), SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    h.StartAgent(node.get<std::string>());
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["run"], 1) << "the job ran again";
  const std::string out = h.Read("work/long.out");
  for (const char* line : {"begin 0\n", "begin 1\n", "done 0\n", "done 1\n", "srun 0\n"}) {
    const size_t at = out.find(line);
    EXPECT_NE(at, std::string::npos) << line << " missing from:\n" << out;
    EXPECT_EQ(out.find(line, at + 1), std::string::npos) << line << " twice in:\n" << out;
  }
  const RunResult acct =
      h.Cli({"acct", "-j", id, "--parsable2", "-n", "--format", "JobID,State"}, h.token("ann"));
  const std::string n = id.substr(1);  // sacct's JobID: the number, as Slurm's
  EXPECT_EQ(acct.out, n + "|COMPLETED\n" + n + ".batch|COMPLETED\n" + n + ".0|COMPLETED\n")
      << acct.err;
}

// Slurm's checkpoint-and-requeue idiom: the time limit's signal reaches the script, which
// saves its place and asks `scontrol requeue $SLURM_JOB_ID`; the job waits again instead of
// timing out, and the next run carries on from where it was.
TEST(Slurm, AScriptThatRequeuesItselfAtItsTimeLimitCarriesOn) {
  Harness h("slurm-requeue");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("ckpt.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -G 1
#SBATCH --time=0:03
#SBATCH --signal=B:USR1@1
#SBATCH -o ckpt.out
#SBATCH --open-mode=append
trap 'echo "requeue at $(cat step)" >> log.txt; scontrol requeue $SLURM_JOB_ID; exit 0' USR1
echo "output of run ${SLURM_RESTART_COUNT:-0}"   # unset on the first run, as Slurm's
n=$(cat step 2>/dev/null || echo 0)
echo "run ${SLURM_RESTART_COUNT:-0} from $n" >> log.txt
if [ "$n" -ge 2 ]; then echo done >> log.txt; exit 0; fi
echo $((n + 1)) > step
( trap 'echo "a child got USR1" >> log.txt' USR1; while true; do sleep 0.1; done ) &
while true; do sleep 0.1; done
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("ckpt.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  const json job = h.Job(id);
  EXPECT_EQ(job["state"], "finished") << job.dump();
  EXPECT_EQ(job["run"], 3);
  EXPECT_EQ(h.Read("work/log.txt"),
            "run 0 from 0\nrequeue at 1\nrun 1 from 1\nrequeue at 2\nrun 2 from 2\ndone\n");
  // --open-mode=append: every run's output is in the file.
  EXPECT_EQ(h.Read("work/ckpt.out"), "output of run 0\noutput of run 1\noutput of run 2\n");
  // An ended job is not requeued.
  int status = 0;
  h.Post("/v1/jobs/" + id + "/requeue", "", h.token("ann"), &status);
  EXPECT_EQ(status, 409);
}

// Issue 46 section 2: -N MIN-MAX with our --gantry-checkpoint is an elastic job. It starts
// on the one h100 node free, and at its first checkpoint after the other frees it grows:
// the script gets the stop signal, exits, and runs again on both nodes, with SLURM_NNODES,
// the node list, SLURM_NTASKS and its steps at the new size.
TEST(Slurm, ANodeRangeWithACheckpointGrowsAndTheScriptRunsAgainAtTheNewSize) {
  Harness h("slurm-elastic");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("hold.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -p h100\n#SBATCH --gres=gpu:8\n"
          "sleep 2\n");
  h.Write("elastic.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -p h100
#SBATCH -N 1-2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --gantry-checkpoint=0:03
#SBATCH -t 2
run=${SLURM_RESTART_COUNT:-0}
echo "run $run nodes $SLURM_NNODES tasks $SLURM_NTASKS list $SLURM_JOB_NODELIST" >> runs.txt
srun bash -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME"' | sort > "tasks-$run.txt"
if [ "$SLURM_NNODES" = 2 ]; then exit 0; fi
trap 'echo "checkpointed run $run" >> runs.txt; exit 0' TERM
while true; do sleep 0.1; done
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("hold.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string hold = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(hold)["state"] == "running"; }, 15));
  r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("elastic.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "running"; }, 15));
  json job = h.Job(id);
  EXPECT_EQ(job["size"], 1) << job.dump();
  EXPECT_EQ(job["request"].get<std::string>().rfind("1-2 x ", 0), 0u) << job.dump();
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {hold, id}); }, 40)) << h.Job(id).dump();
  job = h.Job(id);
  EXPECT_EQ(job["state"], "finished") << job.dump();
  EXPECT_EQ(job["resizes"], 1);
  EXPECT_EQ(job["run"], 2);
  const std::string first = Trim(h.Read("work/tasks-0.txt"));  // "task 0 of 1 on h100-N"
  ASSERT_EQ(first.rfind("task 0 of 1 on h100-", 0), 0u) << first;
  EXPECT_EQ(h.Read("work/runs.txt"), "run 0 nodes 1 tasks 1 list " + first.substr(15) +
                                         "\ncheckpointed run 0\nrun 1 nodes 2 tasks 2 list "
                                         "h100-[0-1]\n");
  EXPECT_EQ(h.Read("work/tasks-1.txt"), "task 0 of 2 on h100-0\ntask 1 of 2 on h100-1\n");
}

// salloc --no-shell and -I/--immediate, as Slurm 22.05's (checked on bench/slurm_scripts.py's
// cluster): --no-shell ends salloc once granted and leaves the allocation (named
// "no-shell", its command ignored), which srun --jobid reaches from outside and scancel
// ends; -I gives up at once ("Requested nodes are busy"), --immediate=S after S seconds
// ("Connection timed out"), the job revoked and salloc's status 1.
TEST(Slurm, SallocNoShellLeavesTheAllocationAndImmediateGivesUp) {
  Harness h("slurm-salloc-noshell");
  StartSlurmCluster(h);
  RunResult r = h.Cli({"salloc", "--no-shell", "-N", "2", "-p", "h100", "-A", "research",
                       "--gres=gpu:8", "-t", "5", "hostname"},
                      h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string granted = "salloc: Granted job allocation ";
  const size_t at = r.err.find(granted);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string number =
      r.err.substr(at + granted.size(), r.err.find('\n', at) - at - granted.size());
  EXPECT_EQ(r.err, granted + number + "\n");
  EXPECT_EQ(r.out, "") << "the command ran";
  json job = h.Job("j" + number);
  EXPECT_EQ(job.value("state", ""), "running") << job.dump();
  EXPECT_EQ(job.value("name", ""), "no-shell");
  // From outside the job (no SLURM_JOB_ID), with the user's own token: srun --jobid.
  RunResult step = h.Cli(
      {"srun", "--jobid=" + number, "--ntasks-per-node=1", "sh", "-c", "echo $SLURMD_NODENAME"},
      h.token("ann"));
  ASSERT_EQ(step.rc, 0) << step.err;
  std::vector<std::string> hosts;
  std::istringstream lines(step.out);
  for (std::string l; std::getline(lines, l);) hosts.push_back(l);
  std::sort(hosts.begin(), hosts.end());
  EXPECT_EQ(hosts, (std::vector<std::string>{"h100-0", "h100-1"})) << step.out;
  // h100 is held: -I gives up at once, --immediate=2 after 2 s; nothing is left pending.
  RunResult now =
      h.Cli({"salloc", "-I", "-N", "2", "-p", "h100", "-A", "research", "--gres=gpu:8", "true"},
            h.token("ann"));
  EXPECT_EQ(now.rc, 1) << now.err;
  EXPECT_NE(now.err.find("salloc: error: Unable to allocate resources: Requested nodes are busy\n"
                         "salloc: Job allocation "),
            std::string::npos)
      << now.err;
  EXPECT_EQ(now.err.find("Pending"), std::string::npos) << now.err;
  const auto t0 = std::chrono::steady_clock::now();
  RunResult later = h.Cli({"salloc", "--immediate=2", "-N", "2", "-p", "h100", "-A", "research",
                           "--gres=gpu:8", "true"},
                          h.token("ann"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(later.rc, 1) << later.err;
  EXPECT_NE(later.err.find("salloc: job "), std::string::npos) << later.err;  // queued first
  EXPECT_NE(later.err.find("Unable to allocate resources: Connection timed out"), std::string::npos)
      << later.err;
  for (const json& j : h.Jobs()) {
    if (j.value("id", "") != "j" + number) {
      EXPECT_EQ(j.value("state", ""), "cancelled") << j.dump();
    }
  }
  RunResult bad = h.Cli({"salloc", "--immediate=soon", "true"}, h.token("ann"));
  EXPECT_EQ(bad.rc, 2) << bad.err;
  // --bell rings the terminal's bell once granted, where stdout is a terminal (script(1)
  // gives it one); not where it is a pipe (above: no output at all).
  RunResult rung = it::Run({"script", "-qec",
                            std::string(GANTRY_BINARY) + " --server " + h.ServerUrl() +
                                " salloc --bell --no-shell -p spare -A research --gres=gpu:1 -t 1",
                            "/dev/null"},
                           {{"GANTRY_TOKEN", h.token("ann")}});
  EXPECT_EQ(rung.rc, 0) << rung.out << rung.err;
  EXPECT_NE(rung.out.find("salloc: Granted job allocation "), std::string::npos) << rung.out;
  EXPECT_NE(rung.out.find('\a'), std::string::npos) << rung.out;
  // It stays until scancel (or its time limit) ends it.
  RunResult cancel = h.Cli({"cancel", number}, h.token("ann"));
  EXPECT_EQ(cancel.rc, 0) << cancel.err;
  EXPECT_TRUE(
      Harness::WaitFor([&] { return h.Job("j" + number).value("state", "") == "cancelled"; }, 15));
}

// salloc: the allocation is granted, the command runs here (not on a node) with the
// allocation's variables and credential, srun in it runs on the allocated nodes, and the
// command's exit relinquishes the allocation and is salloc's exit. A scancel from elsewhere
// revokes it: the command gets SIGHUP. Another user's token gets no credential.
TEST(Slurm, SallocRunsItsCommandHereAndSrunOnTheAllocatedNodes) {
  Harness h("slurm-salloc");
  StartSlurmCluster(h);
  h.AddToken("bob", {"--team", "a", "--queues", "research", "--user", "bob"});
  fs::create_directories(h.Path("work"));
  // Slurm's names on PATH, as on a login node (docs/slurm.md).
  const std::string path = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm";
  const std::string body =
      "export PATH=" + path +
      ":$PATH; echo \"nodes=$SLURM_JOB_NODELIST n=$SLURM_NNODES id=$SLURM_JOB_ID "
      "procid=${SLURM_PROCID:-none} here=$(pwd)\"; "
      "srun --ntasks-per-node=1 sh -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME gpus "
      "$CUDA_VISIBLE_DEVICES\"' | sort; "
      "squeue -h -o '%i %T %D'; exit 3";
  RunResult r = h.Cli({"salloc", "-N", "2", "-p", "h100", "-A", "research", "--gres=gpu:8", "-t",
                       "5", "-D", h.Path("work"), "sh", "-c", "cd " + h.Path("work") + "; " + body},
                      h.token("ann"));
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  const std::string number = [&] {
    const std::string granted = "salloc: Granted job allocation ";
    const size_t at = r.err.find(granted);
    if (at == std::string::npos) return std::string();
    return r.err.substr(at + granted.size(), r.err.find('\n', at) - at - granted.size());
  }();
  ASSERT_FALSE(number.empty()) << r.err;
  // Granted at once: Slurm's salloc then says neither "Pending" nor "queued".
  EXPECT_EQ(r.err.find("Pending"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("salloc: Relinquishing job allocation " + number + "\n"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("nodes=h100-[0-1] n=2 id=" + number + " procid=none here=" + h.Path("work")),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("task 0 on h100-0 gpus 0,1,2,3,4,5,6,7\ntask 1 on h100-1 gpus "
                       "0,1,2,3,4,5,6,7\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(number + " RUNNING 2\n"), std::string::npos) << r.out;
  // Relinquished with the command's status: the job ends failed with it (exit 0: finished),
  // as Slurm's salloc ends it (FAILED, NonZeroExitCode), named "interactive".
  ASSERT_TRUE(
      Harness::WaitFor([&] { return h.Job("j" + number).value("state", "") == "failed"; }, 15))
      << h.Job("j" + number).dump();
  EXPECT_EQ(h.Job("j" + number).value("exit_code", 0), 3);
  EXPECT_EQ(h.Job("j" + number).value("name", ""), "interactive");
  RunResult ok = h.Cli({"salloc", "-N", "1", "-p", "h100", "-A", "research", "-G", "1", "true"},
                       h.token("ann"));
  EXPECT_EQ(ok.rc, 0) << ok.err;
  const std::string granted = "salloc: Granted job allocation ";
  const size_t at = ok.err.find(granted);
  ASSERT_NE(at, std::string::npos) << ok.err;
  const std::string second =
      "j" + ok.err.substr(at + granted.size(), ok.err.find('\n', at) - at - granted.size());
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(second).value("state", "") == "finished"; }, 15))
      << h.Job(second).dump();

  // Revoked under the command: it gets SIGHUP, and salloc says so.
  RunResult revoked;
  std::thread salloc([&] {
    revoked = h.Cli(
        {"salloc", "-N", "1", "-p", "h100", "-A", "research", "-G", "1", "-t", "5", "sleep", "60"},
        h.token("ann"));
  });
  std::string held;
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        for (const json& j : h.Jobs()) {
          if (j.value("state", "") == "running" && j.value("id", "") != "j" + number)
            held = j.value("id", "");
        }
        return !held.empty();
      },
      15));
  // Not bob's to use: its credential runs steps as ann.
  int status = 0;
  h.Get("/v1/jobs/" + held + "/allocation", h.token("bob"), &status);
  EXPECT_EQ(status, 403);
  json mine = h.Get("/v1/jobs/" + held + "/allocation", h.token("ann"), &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(mine.value("token", "").rfind("gjt_", 0), 0u) << mine.dump();
  EXPECT_FALSE(mine["env"].contains("SLURM_PROCID")) << mine.dump();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the command has started
  RunResult cancel = h.Cli({"cancel", held.substr(1)}, h.token("ann"));
  EXPECT_EQ(cancel.rc, 0) << cancel.err;
  salloc.join();
  EXPECT_EQ(revoked.rc, 128 + SIGHUP) << revoked.err;
  EXPECT_NE(revoked.err.find("has been revoked."), std::string::npos) << revoked.err;
  EXPECT_EQ(revoked.err.find("Relinquishing"), std::string::npos) << revoked.err;
}

// A step's stderr is kept apart, as Slurm's srun forwards it: to srun's stderr (the batch
// script's -e file here), not into $(srun ...); to -e's files with -e, to -o's with -o alone.
// With cgroups, the script and its steps' tasks on a node share the job's group.
TEST(Slurm, AStepsStderrIsKeptApartAndItsTasksShareTheJobsCgroup) {
  Harness h("slurm-stderr");
  StartSlurmCluster(h);
  const std::string id = Sbatch(h, "streams.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -p h100
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH -o out-%j.txt
#SBATCH -e err-%j.txt
x=$(srun sh -c 'echo "out $SLURM_PROCID"; echo "err $SLURM_PROCID" >&2' | sort)
echo "captured: $x"
srun -l -o 'o-%t.txt' -e 'e-%t.txt' sh -c 'echo "to o"; echo "to e" >&2'
srun -o 'both-%t.txt' sh -c 'echo "o1"; echo "e1" >&2'
grep -E ':memory:|^0::' /proc/self/cgroup > cg-batch.txt
srun -N1 -n1 -w "$SLURMD_NODENAME" sh -c "grep -E ':memory:|^0::' /proc/self/cgroup" > cg-step.txt
)SH");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id).value("state", "") == "finished"; }, 30))
      << h.Job(id).dump();
  const std::string number = id.substr(1);
  const std::string out = h.Read("work/out-" + number + ".txt");
  const std::string err = h.Read("work/err-" + number + ".txt");
  EXPECT_NE(out.find("captured: out 0\nout 1\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("err "), std::string::npos) << out;
  EXPECT_NE(err.find("err 0\n"), std::string::npos) << err;
  EXPECT_NE(err.find("err 1\n"), std::string::npos) << err;
  for (const char* t : {"0", "1"}) {
    EXPECT_EQ(h.Read(std::string("work/o-") + t + ".txt"), std::string(t) + ": to o\n");
    EXPECT_EQ(h.Read(std::string("work/e-") + t + ".txt"), std::string(t) + ": to e\n");
    const std::string both = h.Read(std::string("work/both-") + t + ".txt");
    EXPECT_NE(both.find("o1\n"), std::string::npos) << both;
    EXPECT_NE(both.find("e1\n"), std::string::npos) << both;
  }
  // With cgroups (root), the script and a step's task on its node share the job's group.
  const std::string batch_cg = h.Read("work/cg-batch.txt"), step_cg = h.Read("work/cg-step.txt");
  if (batch_cg.find("/gantry-") != std::string::npos) {
    const std::string group = "/job-" + number + "-1/";
    EXPECT_NE(batch_cg.find(group), std::string::npos) << batch_cg;
    EXPECT_NE(step_cg.find(group), std::string::npos) << step_cg;
  }
}

// scancel's filters, as Slurm users cancel: by name, by user (and --me), by state; another
// user's jobs are left alone.
TEST(Slurm, ScancelTakesNamesUsersAndStates) {
  Harness h("slurm-scancel");
  StartSlurmCluster(h);
  h.AddToken("bob", {"--team", "a", "--queues", "research", "--user", "bob"});
  fs::create_directories(h.Path("work"));
  h.Write("hold.sh", "#!/bin/sh\n#SBATCH -A research\n#SBATCH -G 8\n#SBATCH -t 5\nsleep 60\n");
  auto submit = [&](const std::string& who, const std::string& name) {
    RunResult r =
        h.Cli({"sbatch", "--parsable", "-J", name, "-D", h.Path("work"), h.Path("hold.sh")},
              h.token(who));
    EXPECT_EQ(r.rc, 0) << r.err;
    return JobIdOf(r.out);
  };
  // Three nodes of 8 GPUs: ann's two "train" and bob's "train" run, ann's "eval" waits.
  const std::string t1 = submit("ann", "train"), t2 = submit("ann", "train");
  const std::string b1 = submit("bob", "train");
  const std::string e1 = submit("ann", "eval");
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Job(t1).value("state", "") == "running" &&
               h.Job(t2).value("state", "") == "running" &&
               h.Job(b1).value("state", "") == "running" &&
               h.Job(e1).value("state", "") == "pending";
      },
      15));
  auto scancel = [&](const std::string& who, std::vector<std::string> args) {
    args.insert(args.begin(), "scancel");
    return SlurmAs(h, who, std::move(args));
  };
  // squeue's and scontrol's reason for the waiting one: Slurm's code (the queue, as an
  // account, is at its 24 GPUs of burst).
  RunResult squeue = SlurmAs(h, "ann", {"squeue", "-h", "-t", "PD", "-o", "%j %r %R"});
  EXPECT_EQ(squeue.out, "eval AssocGrpGRES (AssocGrpGRES)\n") << squeue.err;
  RunResult show = SlurmAs(h, "ann", {"scontrol", "show", "job", e1.substr(1)});
  EXPECT_NE(show.out.find(" Reason=AssocGrpGRES\n"), std::string::npos) << show.out << show.err;
  // ann's pending jobs only: eval.
  RunResult pending = scancel("ann", {"--me", "-t", "PD"});
  EXPECT_EQ(pending.rc, 0) << pending.err;
  EXPECT_TRUE(Harness::WaitFor([&] { return h.Job(e1).value("state", "") == "cancelled"; }, 10));
  EXPECT_EQ(h.Job(t1).value("state", ""), "running");
  // ann's "train" jobs by name; bob's of that name stay.
  RunResult named = scancel("ann", {"-u", "ann", "--name=train"});
  EXPECT_EQ(named.rc, 0) << named.err;
  EXPECT_TRUE(Harness::WaitFor(
      [&] {
        const std::string s1 = h.Job(t1).value("state", ""), s2 = h.Job(t2).value("state", "");
        return (s1 == "cancelled" || s1 == "stopping") && (s2 == "cancelled" || s2 == "stopping");
      },
      10));
  EXPECT_EQ(h.Job(b1).value("state", ""), "running");
  RunResult bad = scancel("ann", {"-t", "XX"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("give PENDING, RUNNING or COMPLETING"), std::string::npos) << bad.err;
}

// Steps of fewer GPUs than the job's, as Slurm's: srun -n1 --gres=gpu:1 in a job of four
// one-GPU tasks takes one task slot and sees its GPU only; four run side by side, a fifth
// waits for one of them; a two-task step of two GPUs shows both to each task; srun's
// default of the job's four tasks share one GPU; more GPUs than the job's are refused with
// Slurm's words and status.
TEST(Slurm, StepsOfFewerGpusThanTheJobsRunSideBySideOnTheirOwnGpus) {
  Harness h("slurm-packed");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("packed.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -n 4
#SBATCH --gres=gpu:4
#SBATCH -t 1
echo "$SLURM_JOB_GPUS" > job-gpus.txt
for i in 0 1 2 3 4; do
  srun -n1 --gres=gpu:1 --exclusive bash -c 'echo "$SLURM_STEP_GPUS $SLURM_GPUS_ON_NODE $SLURM_CPUS_ON_NODE $(date +%s.%N)" > "s-$SLURM_STEP_ID.start"; sleep 2; date +%s.%N > "s-$SLURM_STEP_ID.end"' &
  sleep 0.2
done
wait
srun -n2 --gres=gpu:2 bash -c 'echo "$SLURM_STEP_GPUS $SLURM_GPUS_ON_NODE $SLURM_NTASKS" > "pair-$SLURM_PROCID.txt"'
srun --gres=gpu:1 bash -c 'echo "$SLURM_STEP_GPUS $SLURM_GPUS_ON_NODE $SLURM_NTASKS"' > shared.txt
srun -n1 --gres=gpu:5 true 2> five.err; echo "$?" > five.rc
srun -n1 --gres=gpu:0 true 2> none.err; echo "$?" > none.rc
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("packed.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  const std::string job_gpus = Trim(h.Read("work/job-gpus.txt"));
  std::set<std::string> seen;
  std::vector<double> starts, ends;
  for (int step = 0; step < 5; ++step) {
    std::istringstream in(h.Read("work/s-" + std::to_string(step) + ".start"));
    std::string gpus, on_node, cpus;
    double start = 0;
    in >> gpus >> on_node >> cpus >> start;
    EXPECT_EQ(on_node, "1") << "step " << step;
    EXPECT_EQ(cpus, "1") << "step " << step << ": --exclusive, one task of one CPU";
    EXPECT_NE(("," + job_gpus + ",").find("," + gpus + ","), std::string::npos)
        << gpus << " not one of the job's " << job_gpus;
    if (step < 4) {
      EXPECT_TRUE(seen.insert(gpus).second) << "two running steps share GPU " << gpus;
    }
    starts.push_back(start);
    ends.push_back(std::stod(h.Read("work/s-" + std::to_string(step) + ".end")));
  }
  // The first four ran at once; the fifth started once one of them had ended.
  EXPECT_LT(*std::max_element(starts.begin(), starts.begin() + 4),
            *std::min_element(ends.begin(), ends.begin() + 4));
  EXPECT_GE(starts[4], *std::min_element(ends.begin(), ends.begin() + 4));
  const std::string pair = h.Read("work/pair-0.txt");
  EXPECT_EQ(pair, h.Read("work/pair-1.txt")) << "both tasks see the step's two GPUs";
  EXPECT_NE(pair.find(" 2 2\n"), std::string::npos) << pair;
  EXPECT_EQ(pair.find(','), pair.find_last_of(',')) << pair;  // two GPUs: "a,b 2 2"
  // srun's default of the job's four tasks, on one GPU: all four see it, as Slurm's.
  const std::string shared = h.Read("work/shared.txt");
  std::istringstream lines(shared);
  std::string line;
  int tasks = 0;
  while (std::getline(lines, line)) {
    ++tasks;
    EXPECT_EQ(line.substr(line.find(' ')), " 1 4") << shared;
    EXPECT_EQ(line, shared.substr(0, shared.find('\n'))) << shared;
  }
  EXPECT_EQ(tasks, 4) << shared;
  // More than the job's: Slurm's words and status; none: not honoured.
  EXPECT_EQ(Trim(h.Read("work/five.rc")), "1");
  EXPECT_NE(h.Read("work/five.err")
                .find("Unable to create step for job " + id.substr(1) +
                      ": Invalid generic resource (gres) specification"),
            std::string::npos)
      << h.Read("work/five.err");
  EXPECT_EQ(Trim(h.Read("work/none.rc")), "2") << h.Read("work/none.err");
}

// GPUs that do not divide over a node's tasks (MPI scripts: `-N 2 --ntasks-per-node=4
// --gres=gpu:2`, `-n 2 --gres=gpu:1`) were refused: the job is now one worker a node,
// holding the node's GPUs and standing for its tasks, and srun runs the tasks there, all of
// a node's seeing its GPUs, with Slurm's task counts (bench/slurm_scripts/gpus_shared.sbatch
// compares them with Slurm's). Steps of fewer tasks given --exact run side by side in the
// node's CPUs.
TEST(Slurm, GpusThatDoNotDivideOverANodesTasksAreSharedByThem) {
  Harness h("slurm-shared-gpus");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("mpi.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -p h100
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:2
#SBATCH -t 1
echo "$SLURM_NTASKS $SLURM_TASKS_PER_NODE $SLURM_NTASKS_PER_NODE $SLURM_GPUS_ON_NODE" > job.txt
srun bash -c 'echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_JOB_GPUS"' > tasks.txt
scontrol show job "$SLURM_JOB_ID" > show.txt
)SH");
  h.Write("pair.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -n 2
#SBATCH --gres=gpu:1
#SBATCH -t 1
for i in 0 1; do
  srun -n1 --exact bash -c 'echo "$SLURM_JOB_GPUS $(date +%s.%N)" > "p-$SLURM_STEP_ID.start"; sleep 2; date +%s.%N > "p-$SLURM_STEP_ID.end"' &
done
wait
srun bash -c 'echo "$SLURM_PROCID $SLURM_JOB_GPUS"' | sort > both.txt
)SH");
  RunResult a = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("mpi.sh")}, h.token("ann"));
  ASSERT_EQ(a.rc, 0) << a.err;
  const std::string mpi = JobIdOf(a.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {mpi}); }, 40)) << h.Job(mpi).dump();
  EXPECT_EQ(h.Job(mpi)["state"], "finished") << h.Job(mpi).dump();
  EXPECT_EQ(h.Job(mpi)["workers"].size(), 2u) << "one worker a node";
  EXPECT_EQ(Trim(h.Read("work/job.txt")), "8 4(x2) 4 2");
  EXPECT_NE(h.Read("work/show.txt").find("NumNodes=2 NumTasks=8"), std::string::npos)
      << h.Read("work/show.txt");
  // Eight tasks, four a node on two nodes, each node's tasks seeing its two GPUs.
  std::map<std::string, std::set<std::string>> gpus_seen;  // node -> SLURM_JOB_GPUS
  std::map<std::string, std::set<int>> locals;
  std::set<int> ranks;
  std::istringstream in(h.Read("work/tasks.txt"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    int rank = -1, local = -1, node_id = -1;
    std::string node, gpus;
    f >> rank >> local >> node_id >> node >> gpus;
    ranks.insert(rank);
    locals[node].insert(local);
    gpus_seen[node].insert(gpus);
    EXPECT_EQ(std::count(gpus.begin(), gpus.end(), ','), 1) << line;
    EXPECT_EQ(rank / 4, node_id) << line << ": block distribution";
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7})) << h.Read("work/tasks.txt");
  ASSERT_EQ(locals.size(), 2u) << h.Read("work/tasks.txt");
  for (const auto& [node, l] : locals) {
    EXPECT_EQ(l, (std::set<int>{0, 1, 2, 3})) << node;
    EXPECT_EQ(gpus_seen[node].size(), 1u) << node << ": its tasks see the same GPUs";
  }

  RunResult b = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("pair.sh")}, h.token("ann"));
  ASSERT_EQ(b.rc, 0) << b.err;
  const std::string pair = JobIdOf(b.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {pair}); }, 40)) << h.Job(pair).dump();
  EXPECT_EQ(h.Job(pair)["state"], "finished") << h.Job(pair).dump();
  // The two one-task steps ran at once, on the job's two CPUs, on its one GPU.
  std::vector<double> starts, ends;
  std::set<std::string> step_gpus;
  for (int step = 0; step < 2; ++step) {
    std::istringstream f(h.Read("work/p-" + std::to_string(step) + ".start"));
    std::string gpus;
    double start = 0;
    f >> gpus >> start;
    step_gpus.insert(gpus);
    starts.push_back(start);
    ends.push_back(std::stod(h.Read("work/p-" + std::to_string(step) + ".end")));
  }
  EXPECT_LT(std::max(starts[0], starts[1]), std::min(ends[0], ends[1])) << "side by side";
  ASSERT_EQ(step_gpus.size(), 1u);
  const std::string gpu = *step_gpus.begin();
  EXPECT_EQ(h.Read("work/both.txt"), "0 " + gpu + "\n1 " + gpu + "\n");
}

// sbatch --wait (-W), refused before: sbatch returns when the job has ended, with its exit
// code (an array's highest; 1 for a job a signal ended), as Slurm's; pipelines chain on it.
TEST(Slurm, SbatchWaitReturnsWhenTheJobEndsWithItsExitCode) {
  Harness h("slurm-wait");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("three.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 1\n"
          "sleep 1\ntouch done\nexit 3\n");
  h.Write("array.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 1\n"
          "#SBATCH --array=0-2\nexit $SLURM_ARRAY_TASK_ID\n");
  h.Write("killed.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 0:02\n"
          "sleep 60\n");
  RunResult r = h.Cli({"sbatch", "--wait", "-D", work, h.Path("three.sh")}, h.token("ann"));
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("Submitted batch job ", 0), 0u) << r.out;
  EXPECT_TRUE(fs::exists(work + "/done")) << "sbatch returned before the job ended";
  RunResult a =
      h.Cli({"sbatch", "-W", "--parsable", "-D", work, h.Path("array.sh")}, h.token("ann"));
  EXPECT_EQ(a.rc, 2) << a.out << a.err;  // the highest of 0, 1, 2
  RunResult k = h.Cli({"sbatch", "--wait", "-D", work, h.Path("killed.sh")}, h.token("ann"));
  EXPECT_EQ(k.rc, 1) << k.out << k.err;  // its time limit's signal ended it
}

// sbatch -H and --begin, and scontrol hold and release, through the real commands: the
// reasons squeue and scontrol show (JobHeldUser, BeginTime), a job held until released, one
// that starts once its time has come and not before.
TEST(Slurm, HeldAndDeferredJobsRunOnceReleasedOrTheirTimeComes) {
  Harness h("slurm-hold");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("job.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 1\n"
          "date +%s > ran-$SLURM_JOB_ID\n");
  auto sbatch = [&](std::vector<std::string> options) {
    options.insert(options.begin(), {"sbatch", "--parsable", "-D", work});
    options.push_back(h.Path("job.sh"));
    RunResult r = h.Cli(options, h.token("ann"));
    EXPECT_EQ(r.rc, 0) << r.err;
    return JobIdOf(r.out);
  };
  auto reason = [&](const std::string& id) {
    RunResult r = SlurmAs(h, "ann", {"squeue", "-h", "-j", id, "-o", "%r"});
    return r.out;
  };
  const int64_t t0 = static_cast<int64_t>(std::time(nullptr));
  const std::string held = sbatch({"-H"});
  const std::string late = sbatch({"--begin=now+4"});
  const std::string later = sbatch({"-b", "now+1hour"});
  EXPECT_EQ(reason(held), "JobHeldUser\n");
  EXPECT_EQ(reason(late), "BeginTime\n");
  RunResult show = SlurmAs(h, "ann", {"scontrol", "show", "job", later});
  EXPECT_NE(show.out.find(" Reason=BeginTime\n"), std::string::npos) << show.out << show.err;
  EXPECT_NE(show.out.find(" StartTime=20"), std::string::npos) << show.out;
  RunResult hold = SlurmAs(h, "ann", {"scontrol", "hold", later});
  EXPECT_EQ(hold.rc, 0) << hold.err;
  EXPECT_EQ(reason(later), "JobHeldUser\n");  // ann is no admin: her own hold

  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {late}); }, 30)) << h.Job(late).dump();
  EXPECT_EQ(h.Job(late)["state"], "finished");
  EXPECT_GE(std::stoll(h.Read("work/ran-" + late.substr(1))), t0 + 4)
      << "it ran before its begin time";
  // squeue -j lists an ended job no more, as Slurm's (scripts poll it until it is empty);
  // -t CD does.
  EXPECT_EQ(SlurmAs(h, "ann", {"squeue", "-h", "-j", late, "-o", "%i"}).out, "");
  EXPECT_EQ(SlurmAs(h, "ann", {"squeue", "-h", "-j", late, "-t", "CD", "-o", "%i"}).out,
            late.substr(1) + "\n");
  EXPECT_EQ(h.Job(held)["state"], "pending");
  EXPECT_FALSE(fs::exists(work + "/ran-" + held.substr(1)));
  RunResult release = SlurmAs(h, "ann", {"scontrol", "release", held + "," + later});
  EXPECT_EQ(release.rc, 0) << release.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {held}); }, 30)) << h.Job(held).dump();
  EXPECT_EQ(h.Job(held)["state"], "finished");
  EXPECT_EQ(reason(later), "BeginTime\n");  // released, still before its time
  // scontrol update StartTime=now: it runs now; another field is refused with why.
  RunResult other = SlurmAs(h, "ann", {"scontrol", "update", "JobId=" + later, "NumNodes=2"});
  EXPECT_NE(other.rc, 0);
  EXPECT_NE(other.err.find("ArrayTaskThrottle, JobName, Partition, QOS, Account and Nice only"),
            std::string::npos)
      << other.err;
  RunResult now = SlurmAs(h, "ann", {"scontrol", "update", "jobid=" + later, "StartTime=now"});
  EXPECT_EQ(now.rc, 0) << now.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {later}); }, 30)) << h.Job(later).dump();
  EXPECT_EQ(h.Job(later)["state"], "finished");
  RunResult running = SlurmAs(h, "ann", {"scontrol", "release", held});
  EXPECT_NE(running.rc, 0) << "an ended job is not released";
}

// scontrol update TimeLimit on a running sbatch job: squeue and scontrol show the limit as
// Slurm's (the --signal lead included), its user may lower it but not raise it, and the
// lowered limit ends the job: its batch script gets the signal first, SIGTERM at the limit,
// and the job ends TIMEOUT.
TEST(Slurm, ScontrolUpdateTimeLimitLowersARunningJobsLimit) {
  Harness h("slurm-timelimit");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("long.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 10\n"
          "#SBATCH --signal=B:USR1@2\n"
          "trap 'echo usr1 >> sig.txt' USR1\n"
          "while true; do sleep 0.1; done\n");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("long.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out), number = id.substr(1);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "running"; }, 15));
  auto limit = [&] { return SlurmAs(h, "ann", {"squeue", "-h", "-j", number, "-o", "%l"}).out; };
  EXPECT_EQ(limit(), "10:00\n");
  RunResult show = SlurmAs(h, "ann", {"scontrol", "show", "job", number});
  EXPECT_NE(show.out.find(" TimeLimit=00:10:00 "), std::string::npos) << show.out;
  RunResult raise = SlurmAs(h, "ann", {"scontrol", "update", "JobId=" + number, "TimeLimit=+5"});
  EXPECT_NE(raise.rc, 0);
  EXPECT_NE(raise.err.find("only an admin raises a time limit"), std::string::npos) << raise.err;
  EXPECT_EQ(limit(), "10:00\n");
  RunResult lower = SlurmAs(h, "ann", {"scontrol", "update", "jobid=" + number, "TimeLimit=0:08"});
  ASSERT_EQ(lower.rc, 0) << lower.err;
  EXPECT_EQ(limit(), "0:08\n");
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  const json job = h.Job(id);
  EXPECT_EQ(job["state"], "failed");
  EXPECT_NE(job.value("reason", "").find("time limit reached"), std::string::npos) << job.dump();
  EXPECT_EQ(h.Read("work/sig.txt"), "usr1\n") << "the batch script got its signal first";
  // At the limit SIGTERM ended the script (its USR1 trap had let it run on), as Slurm's: the
  // allocation's row 0:0, the batch step's 0:15.
  EXPECT_EQ(
      SlurmAs(h, "ann", {"sacct", "-n", "-P", "-j", number, "-o", "JobID,State,ExitCode"}).out,
      number + "|TIMEOUT|0:0\n" + number + ".batch|CANCELLED|0:15\n");
}

// A held array of a thousand tasks, at the size users hold them: every task stays held
// through a SIGKILLed gantryd, and one `scontrol release` of the array's id, with gantryd
// killed again the moment it answered, runs each task once.
TEST(Slurm, AThousandHeldTasksOutliveKilledGantrydsAndRunOnceWhenReleased) {
  Harness h("slurm-held-array");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("task.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -G 1\n#SBATCH -t 1\n#SBATCH -o /dev/null\n"
          "echo \"$SLURM_JOB_ID\" >> \"ran-$SLURM_ARRAY_TASK_ID\"\n");
  RunResult r =
      h.Cli({"sbatch", "--parsable", "-H", "--array=0-999", "-D", work, h.Path("task.sh")},
            h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string array = Trim(r.out);
  // Pending tasks by reason, as squeue shows them.
  auto reasons = [&] {
    std::map<std::string, int> n;
    RunResult q = SlurmAs(h, "ann", {"squeue", "-h", "-t", "PD", "-o", "%r"});
    EXPECT_EQ(q.rc, 0) << q.err;
    std::stringstream lines(q.out);
    for (std::string line; std::getline(lines, line);) ++n[line];
    return n;
  };
  EXPECT_EQ(reasons(), (std::map<std::string, int>{{"JobHeldUser", 1000}}));
  h.KillServer(SIGKILL);
  h.StartServer();
  EXPECT_EQ(reasons(), (std::map<std::string, int>{{"JobHeldUser", 1000}}))
      << "a hold did not outlive gantryd";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // passes go by: none starts
  EXPECT_EQ(std::distance(fs::directory_iterator(work), fs::directory_iterator()), 0);

  RunResult release = SlurmAs(h, "ann", {"scontrol", "release", array});
  ASSERT_EQ(release.rc, 0) << release.err;
  h.KillServer(SIGKILL);  // the release was answered: it must hold
  h.StartServer();
  std::set<std::string> ids;
  for (int t = 0; t < 1000; ++t) ids.insert("j" + array + "_" + std::to_string(t));
  ASSERT_TRUE(AllEndWhileProgressing(h, ids, 30)) << h.Cli({"ls"}, h.token("ann")).out;
  int ran = 0;
  for (int t = 0; t < 1000; ++t) {
    const std::string file = "work/ran-" + std::to_string(t);
    if (!fs::exists(h.Path(file))) {
      ADD_FAILURE() << "task " << t << " never ran";
      continue;
    }
    const std::string lines = h.Read(file);
    EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << "task " << t << " ran: " << lines;
    ++ran;
  }
  EXPECT_EQ(ran, 1000);
  EXPECT_TRUE(reasons().empty());
}

// -x/--exclude keeps a job off the nodes it names, and -w/--nodelist puts it on exactly
// those: it waits for them while other nodes are free, then runs there, with Slurm's
// variables saying so.
TEST(Slurm, NodeListsAndExclusionsChooseTheNodes) {
  Harness h("slurm-nodes");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("where.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH --gres=gpu:8\n#SBATCH -t 1\n"
          "echo \"$SLURM_JOB_NODELIST\" > where-$SLURM_JOB_ID\nsleep \"${HOLD:-0}\"\n");
  auto sbatch = [&](std::vector<std::string> options) {
    options.insert(options.begin(), {"sbatch", "--parsable", "-D", work});
    options.push_back(h.Path("where.sh"));
    RunResult r = h.Cli(options, h.token("ann"));
    EXPECT_EQ(r.rc, 0) << r.err;
    return JobIdOf(r.out);
  };
  auto where = [&](const std::string& id) { return Trim(h.Read("work/where-" + id.substr(1))); };
  const std::string off = sbatch({"-x", "h100-[0-1]"});
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {off}); }, 30)) << h.Job(off).dump();
  EXPECT_EQ(where(off), "spare-0");
  // h100-1 busy for a while: a job that may run only there waits, though h100-0 and
  // spare-0 are free; a 2-node job on both h100s waits with it.
  ::setenv("HOLD", "4", 1);
  const std::string busy = sbatch({"-w", "h100-1", "--export=ALL"});
  ::unsetenv("HOLD");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(busy).value("state", "") == "running"; }, 15));
  const std::string pinned = sbatch({"--nodelist=h100-1"});
  const std::string both = sbatch({"-w", "h100-[0-1]"});
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(h.Job(pinned).value("state", ""), "pending") << h.Job(pinned).dump();
  EXPECT_EQ(h.Job(both).value("state", ""), "pending") << h.Job(both).dump();
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return AllEnded(h, {busy, pinned, both});
      },
      40))
      << h.Job(pinned).dump() << h.Job(both).dump();
  EXPECT_EQ(where(busy), "h100-1");
  EXPECT_EQ(where(pinned), "h100-1");
  EXPECT_EQ(where(both), "h100-[0-1]");
  // A job without GPUs submitted from a GPU job's environment: the GPU names it would pass
  // on are unset, as Slurm's gres/gpu leaves them (CUDA's: empty where GPUs are not fenced).
  h.Write("cpu.sh",
          "#!/bin/sh\n#SBATCH -A research\n#SBATCH -c 1\n#SBATCH -t 1\n"
          "echo \"${GPU_DEVICE_ORDINAL-unset} ${ROCR_VISIBLE_DEVICES-unset} "
          "${CUDA_VISIBLE_DEVICES-unset}\" > gpuvars\n");
  for (const char* k : {"GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
    ::setenv(k, "3", 1);
  RunResult cpu = h.Cli({"sbatch", "--parsable", "-w", "spare-0", "-D", work, h.Path("cpu.sh")},
                        h.token("ann"));
  for (const char* k : {"GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
    ::unsetenv(k);
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {JobIdOf(cpu.out)}); }, 30));
  EXPECT_EQ(Trim(h.Read("work/gpuvars")),
            FencesGpus(h, "spare-0") ? "unset unset unset" : "unset unset");
  // Names the cluster lacks are refused at the script's line; so is a -N the list is not.
  h.Write("bad.sh", "#!/bin/sh\n#SBATCH -A research\n#SBATCH -x h100-7\n");
  RunResult bad = h.Cli({"sbatch", h.Path("bad.sh")}, h.token("ann"));
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find(h.Path("bad.sh") + ":3: --exclude=h100-7: unknown node \"h100-7\""),
            std::string::npos)
      << bad.err;
}

// A job runs with its submitter's umask (SLURM_UMASK, as Slurm's slurmd applies it), so a
// user whose files are private gets private files from the job too, its output file
// included; each task is told its own pid (SLURM_TASK_PID).
TEST(Slurm, AJobRunsWithItsSubmittersUmask) {
  Harness h("slurm-umask");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("private.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -G 1
#SBATCH -t 1
#SBATCH -o private.out
echo "${SLURM_UMASK:-unset} $SLURM_TASK_PID $$" > ids.txt
srun bash -c 'echo "$SLURM_TASK_PID $$ $SLURM_UMASK" > task.txt'
)SH");
  const mode_t before = ::umask(077);
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("private.sh")}, h.token("ann"));
  ::umask(before);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  for (const char* file : {"ids.txt", "task.txt", "private.out"}) {
    const fs::perms p = fs::status(work + "/" + file).permissions();
    EXPECT_EQ(p & (fs::perms::group_all | fs::perms::others_all), fs::perms::none)
        << file << " is readable by others";
  }
  std::istringstream ids(h.Read("work/ids.txt"));
  std::string mask, task_pid, pid;
  ids >> mask >> task_pid >> pid;
  EXPECT_EQ(mask, "unset") << "Slurm's batch script does not see SLURM_UMASK";
  EXPECT_EQ(task_pid, pid) << "the batch script's SLURM_TASK_PID";
  std::istringstream task(h.Read("work/task.txt"));
  task >> task_pid >> pid >> mask;
  EXPECT_EQ(task_pid, pid) << "the step's task's SLURM_TASK_PID";
  EXPECT_EQ(mask, "0077") << "srun's umask, the batch script's";
}

// srun --multi-prog: each task runs its line of the file (%t its id, %o its offset on the
// line, srun's words after the file appended), as Slurm 22.05's srun
// (bench/slurm_scripts/multi_prog.sbatch compares them). Here the step waits for a running
// one through a gantryd crash, so its lines are read again from the stored step when it
// starts. A file that does not give every task exactly one line is refused naming its
// line, as Slurm's srun refuses it (exit 1).
TEST(Slurm, SrunMultiProgRunsEachTaskItsLine) {
  Harness h("slurm-multi-prog");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("work/mpmd.conf",
          "# a coordinator and three workers\n"
          "0      bash -c 'echo \"coord $SLURM_PROCID $1\" >> coord.txt' _\n"
          "1-2,3  bash -c 'echo \"worker $1 $2 $SLURM_PROCID $3\" >> w-$1.txt' _ %t %o\n");
  h.Write("work/bad.conf", "* echo rest\n0 echo zero\n");
  h.Write("work/short.conf", "0-2 echo a\n");
  h.Write("mpmd.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=1
#SBATCH -t 1
srun bash -c 'touch "hold-$SLURM_PROCID"; sleep 4' &
while [ ! -e hold-3 ]; do sleep 0.1; done
srun --multi-prog mpmd.conf EXTRA 2> mpmd.err
echo "mpmd $?" > rc.txt
wait
srun --multi-prog bad.conf 2> bad.err
echo "bad $?" >> rc.txt
srun --multi-prog short.conf 2> short.err
echo "short $?" >> rc.txt
srun --multi-prog missing.conf 2> missing.err
echo "missing $?" >> rc.txt
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("mpmd.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return fs::exists(work + "/hold-3"); }, 20))
      << h.Job(id).dump();
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return h.Read("work/mpmd.err").find("temporarily disabled") != std::string::npos; },
      10))
      << "the --multi-prog step did not wait for the first";
  h.KillServer(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h.StartServer();
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["run"], 1);
  EXPECT_EQ(h.Read("work/coord.txt"), "coord 0 EXTRA\n") << h.Read("work/mpmd.err");
  for (int t = 1; t <= 3; ++t) {
    EXPECT_EQ(h.Read("work/w-" + std::to_string(t) + ".txt"), "worker " + std::to_string(t) + " " +
                                                                  std::to_string(t - 1) + " " +
                                                                  std::to_string(t) + " EXTRA\n");
  }
  EXPECT_EQ(h.Read("work/rc.txt"), "mpmd 0\nbad 1\nshort 1\nmissing 1\n");
  EXPECT_NE(h.Read("work/bad.err")
                .find("Line 2 of configuration file bad.conf invalid: Task range specification "
                      "with asterisk must be last"),
            std::string::npos)
      << h.Read("work/bad.err");
  EXPECT_NE(h.Read("work/short.err")
                .find("Configuration file short.conf invalid, no record for task id 3"),
            std::string::npos)
      << h.Read("work/short.err");
  EXPECT_NE(h.Read("work/missing.err").find("Could not open multi_prog config file missing.conf"),
            std::string::npos)
      << h.Read("work/missing.err");
  const RunResult acct = h.Cli(
      {"acct", "-j", id, "--parsable2", "-n", "--format", "JobID,JobName,State"}, h.token("ann"));
  const std::string n = id.substr(1);
  EXPECT_EQ(acct.out, n + "|mpmd.sh|COMPLETED\n" + n + ".batch|batch|COMPLETED\n" + n +
                          ".0|bash|COMPLETED\n" + n + ".1|mpmd.conf|COMPLETED\n")
      << acct.err;
}

// A node's CPUs shared by steps (tasks_per_worker) through gantryd and the node's agent
// both killed (-9) while two one-task --exact steps hold the job's two CPUs: after the
// restarts the steps run on and end once each, and a third one-task step asked for then
// waits for a CPU of the two to free (the held CPUs are counted from the steps read back,
// not from memory), as Slurm's "Step creation temporarily disabled".
TEST(Slurm, StepsSharingANodesTasksOutliveGantrydAndTheirAgentBeingKilled) {
  Harness h("slurm-shared-kill");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("pair.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -n 2
#SBATCH --gres=gpu:1
#SBATCH -t 2
for i in 0 1; do
  ( srun -n1 --exact bash -c 'date +%s.%N > "s-$SLURM_STEP_ID.start"; touch "up-$SLURM_STEP_ID"; sleep 7; date +%s.%N > "s-$SLURM_STEP_ID.end"; echo "end $SLURM_STEP_ID"'
    echo "step $i rc $?" >> rc.txt ) >> steps.out &
done
while [ ! -e go ]; do sleep 0.1; done
srun -n1 --exact bash -c 'date +%s.%N > "s-$SLURM_STEP_ID.start"; echo "third $SLURM_STEP_ID"' >> steps.out
echo "step 2 rc $?" >> rc.txt
wait
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("pair.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return fs::exists(work + "/up-0") && fs::exists(work + "/up-1"); }, 20))
      << h.Job(id).dump();
  const json nodes = h.Job(id)["nodes"];
  ASSERT_EQ(nodes.size(), 1u) << h.Job(id).dump();
  const std::map<std::string, int> index = {{"h100-0", 0}, {"h100-1", 1}, {"spare-0", 2}};
  const std::string node = nodes[0].get<std::string>();

  h.KillServer(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h.StartServer();
  h.StopAgent(index.at(node), SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h.StartAgent(node);
  // Both steps still run (they sleep 7 s): the third must wait for one of them.
  EXPECT_FALSE(fs::exists(work + "/s-0.end")) << "too slow a restart for this test";
  h.Write("work/go", "");

  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 60)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["run"], 1) << "the job ran again";
  const std::string out = h.Read("work/steps.out");
  for (const char* line : {"end 0\n", "end 1\n", "third 2\n"}) {
    const size_t at = out.find(line);
    EXPECT_NE(at, std::string::npos) << line << " missing from:\n" << out;
    EXPECT_EQ(out.find(line, at + 1), std::string::npos) << line << " twice in:\n" << out;
  }
  std::istringstream rcs(h.Read("work/rc.txt"));
  std::set<std::string> lines;
  for (std::string line; std::getline(rcs, line);) lines.insert(line);
  EXPECT_EQ(lines, (std::set<std::string>{"step 0 rc 0", "step 1 rc 0", "step 2 rc 0"}))
      << h.Read("work/rc.txt");
  const double first_end =
      std::min(std::stod(h.Read("work/s-0.end")), std::stod(h.Read("work/s-1.end")));
  EXPECT_GE(std::stod(h.Read("work/s-2.start")), first_end)
      << "the third step ran in a task a running step held";
  const RunResult acct =
      h.Cli({"acct", "-j", id, "--parsable2", "-n", "--format", "JobID,State"}, h.token("ann"));
  const std::string n = id.substr(1);
  EXPECT_EQ(acct.out, n + "|COMPLETED\n" + n + ".batch|COMPLETED\n" + n + ".0|COMPLETED\n" + n +
                          ".1|COMPLETED\n" + n + ".2|COMPLETED\n")
      << acct.err;
}

// A batch job runs on CPUs of its own on each node (SLURM_CPUS_ON_NODE of them, what
// `nproc` and sched_getaffinity say), and `srun --cpu-bind` binds each task to its part of
// them, as Slurm's task/affinity: threads, a map or a mask of the node's CPU ids, verbose
// reports on the task's stderr; a CPU the job does not hold or an unknown type is refused.
// Two jobs of a CPU each on one node get different CPUs. (Needs 2 CPUs to tell them apart.)
TEST(Slurm, JobsRunOnCpusOfTheirOwnAndSrunCpuBindBindsEachTask) {
  if (CpuTopology::Allowed().size() < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  Harness h("slurm-cpu-bind");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("bind.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -w h100-0
#SBATCH --ntasks-per-node=2
#SBATCH -c 1
#SBATCH -t 1
mine() { grep Cpus_allowed_list /proc/self/status | cut -f2; }
echo "$SLURM_CPUS_ON_NODE $(nproc) $(mine)" > batch.txt
task='echo "$SLURM_LOCALID $(grep Cpus_allowed_list /proc/self/status | cut -f2) $SLURM_CPU_BIND_TYPE"'
srun bash -c "$task" | sort > none.txt
srun --cpu-bind=threads bash -c "$task" | sort > threads.txt
IFS=, read -r a b <<< "$(mine | sed 's/-/,/')"
srun --cpu-bind=verbose,map_cpu:$b,$a bash -c "$task" 2> map.err | sort > map.txt
srun --cpu-bind=mask_cpu:$(printf '0x%x' $((1 << b))) bash -c "$task" | sort > mask.txt
SLURM_CPU_BIND=cores srun bash -c "$task" | sort > env.txt
srun --cpu-bind=map_cpu:1023 true 2> foreign.err; echo "$?" > foreign.rc
srun --cpu-bind=bogus true 2> bogus.err; echo "$?" > bogus.rc
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("bind.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  // Two CPUs of the job's own: 2 tasks of a CPU each.
  std::istringstream batch(h.Read("work/batch.txt"));
  std::string on_node, nproc, list;
  batch >> on_node >> nproc >> list;
  EXPECT_EQ(on_node, "2");
  EXPECT_EQ(nproc, "2");
  const std::optional<std::vector<int>> job = ParseCpuList(list);
  ASSERT_TRUE(job && job->size() == 2) << list;
  const std::string a = std::to_string((*job)[0]), b = std::to_string((*job)[1]);
  EXPECT_EQ(h.Read("work/none.txt"), "0 " + list + " \n1 " + list + " \n") << "the job's, unbound";
  EXPECT_EQ(h.Read("work/threads.txt"), "0 " + a + " threads\n1 " + b + " threads\n");
  EXPECT_EQ(h.Read("work/map.txt"), "0 " + b + " map_cpu:\n1 " + a + " map_cpu:\n");
  const std::string map_err = h.Read("work/map.err");
  for (const std::string& line : std::initializer_list<std::string>{
           "cpu-bind=MASK - h100-0, task  0  0 [", "]: mask " + CpuMask({(*job)[1]}) + " set",
           "cpu-bind=MASK - h100-0, task  1  1 [", "]: mask " + CpuMask({(*job)[0]}) + " set"})
    EXPECT_NE(map_err.find(line), std::string::npos) << line << " in " << map_err;
  EXPECT_EQ(h.Read("work/mask.txt"), "0 " + b + " mask_cpu:\n1 " + b + " mask_cpu:\n");
  EXPECT_EQ(h.Read("work/env.txt").substr(0, 2), "0 ") << "SLURM_CPU_BIND is srun's input";
  EXPECT_NE(h.Read("work/env.txt").find(" cores\n"), std::string::npos) << h.Read("work/env.txt");
  EXPECT_NE(Trim(h.Read("work/foreign.rc")), "0");
  EXPECT_NE(h.Read("work/foreign.err")
                .find("CPU 1023 is none of the job's CPUs on this node (" + list + ")"),
            std::string::npos)
      << h.Read("work/foreign.err");
  EXPECT_EQ(Trim(h.Read("work/bogus.rc")), "2") << "srun's status for bad options (nothing ran)";
  EXPECT_NE(h.Read("work/bogus.err").find("unrecognized --cpu-bind argument \"bogus\""),
            std::string::npos)
      << h.Read("work/bogus.err");

  // Two jobs of a CPU each on one node, side by side: a CPU each.
  h.Write("one.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -w h100-1
#SBATCH -t 1
grep Cpus_allowed_list /proc/self/status | cut -f2 > "cpus-$SLURM_JOB_ID.txt"
touch "up-$SLURM_JOB_ID"
while [ "$(ls up-* | wc -l)" -lt 2 ]; do sleep 0.1; done
)SH");
  std::set<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("one.sh")}, h.token("ann"));
    ASSERT_EQ(r.rc, 0) << r.err;
    ids.insert(JobIdOf(r.out));
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 40));
  std::set<std::string> seen;
  for (const std::string& j : ids) {
    EXPECT_EQ(h.Job(j)["state"], "finished") << h.Job(j).dump();
    seen.insert(Trim(h.Read("work/cpus-" + j.substr(1) + ".txt")));
  }
  EXPECT_EQ(seen.size(), 2u) << "each its own CPU";
  for (const std::string& c : seen)
    EXPECT_EQ(ParseCpuList(c).value_or(std::vector<int>{}).size(), 1u) << c;
}

// A task farm in one job (`for ...; do srun -n1 -c1 --exclusive work & done; wait`, the
// idiom of parameter sweeps): each step runs on a CPU of the job's of its own, as many at
// once as the job has CPUs, the rest waiting; a step without --exact runs on all of them;
// --cpu-bind binds within the step's CPUs. (Needs 2 CPUs to tell them apart.)
TEST(Slurm, TaskFarmStepsRunSideBySideOnCpusOfTheirOwn) {
  if (CpuTopology::Allowed().size() < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  Harness h("slurm-task-farm");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("farm.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -w h100-0
#SBATCH -n 1
#SBATCH -c 2
#SBATCH -t 1
mine() { grep Cpus_allowed_list /proc/self/status | cut -f2; }
mine > batch.txt
for i in 0 1 2 3; do
  srun -n1 -c1 --exclusive bash -c 'c=$(grep Cpus_allowed_list /proc/self/status | cut -f2); touch "run-$SLURM_STEP_ID"; sleep 1.5; echo "$c $(ls run-* | wc -l) $SLURM_CPUS_ON_NODE" > "farm-$SLURM_STEP_ID.txt"; rm -f "run-$SLURM_STEP_ID"' &
  sleep 0.2
done
wait
srun -n1 bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' > plain.txt
srun -n1 -c1 --cpu-bind=threads bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' > bound.txt
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("farm.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 60)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  const std::string list = Trim(h.Read("work/batch.txt"));
  const std::optional<std::vector<int>> job = ParseCpuList(list);
  ASSERT_TRUE(job && job->size() == 2) << list;
  int most = 0;
  std::vector<std::string> cpus;
  for (int step = 0; step < 4; ++step) {
    std::istringstream f(h.Read("work/farm-" + std::to_string(step) + ".txt"));
    std::string cpu, on_node;
    int running = 0;
    f >> cpu >> running >> on_node;
    EXPECT_EQ(on_node, "1") << step;
    const std::optional<std::vector<int>> one = ParseCpuList(cpu);
    ASSERT_TRUE(one && one->size() == 1) << step << ": " << cpu;
    EXPECT_NE(std::find(job->begin(), job->end(), one->front()), job->end()) << cpu << " " << list;
    cpus.push_back(cpu);
    most = std::max(most, running);
  }
  EXPECT_EQ(most, 2) << "two at a time: the job's CPUs";
  EXPECT_NE(cpus[0], cpus[1]) << "the first two ran side by side, each on its own CPU";
  EXPECT_EQ(Trim(h.Read("work/plain.txt")), list) << "not exact: all the job's CPUs";
  const std::string bound = Trim(h.Read("work/bound.txt"));
  EXPECT_EQ(bound, std::to_string(job->front())) << "bound within its step's CPU";
}

// srun's standard input reaches its tasks, as Slurm's srun gives it: a file or a pipe to
// every task, --input=N to task N alone, --input=FILE the file, -i none nothing, and a
// batch script's own (none) nothing (bench/slurm_scripts/srun_stdin.sbatch: the same as
// Slurm). Each task reads it as its user, in a file removed with its record.
TEST(Slurm, SrunGivesItsStandardInputToItsTasks) {
  Harness h("slurm-stdin");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("work/in.txt", "a\nb\n");
  h.Write("stdin.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -n 2
#SBATCH -t 1
read_as() { srun -n2 "${@:2}" bash -c "cat > $1-\$SLURM_PROCID.txt"; }
read_as file < in.txt
printf 'x\0y' | read_as pipe
read_as second --input=1 < in.txt
read_as named --input=in.txt
read_as none -i none < in.txt
read_as default
srun -n1 --input=missing.txt true 2> missing.err; echo $? > missing.rc
head -c 5000000 /dev/zero | srun -n1 true 2> big.err; echo $? > big.rc
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("stdin.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  const std::map<std::string, std::pair<std::string, std::string>> want = {
      {"file", {"a\nb\n", "a\nb\n"}},
      {"pipe", {std::string("x\0y", 3), std::string("x\0y", 3)}},
      {"second", {"", "a\nb\n"}},
      {"named", {"a\nb\n", "a\nb\n"}},
      {"none", {"", ""}},
      {"default", {"", ""}}};
  for (const auto& [stage, tasks] : want) {
    EXPECT_EQ(h.Read("work/" + stage + "-0.txt"), tasks.first) << stage;
    EXPECT_EQ(h.Read("work/" + stage + "-1.txt"), tasks.second) << stage;
  }
  EXPECT_NE(Trim(h.Read("work/missing.rc")), "0");
  EXPECT_NE(h.Read("work/missing.err").find("--input=missing.txt: No such file"), std::string::npos)
      << h.Read("work/missing.err");
  EXPECT_NE(Trim(h.Read("work/big.rc")), "0");
  EXPECT_NE(h.Read("work/big.err").find("the step's input is over 4 MiB"), std::string::npos)
      << h.Read("work/big.err");
}

// srun --gpu-bind (found in many HPC scripts as `srun --gpu-bind=closest`): single:N,
// per_task:N and map_gpu:LIST give each task its GPUs by its local id, as Slurm 22.05;
// closest leaves each task all the step's GPUs on its node (tasks are not bound to CPUs,
// as Slurm without CPU binding); what is not honoured, or names a GPU the job does not
// hold, is refused saying why (bench/slurm_scripts/gpu_bind.sbatch: the same as Slurm).
TEST(Slurm, SrunGpuBindGivesEachTaskItsGpusAsSlurmDoes) {
  Harness h("slurm-gpu-bind");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  h.Write("bind.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH -t 1
echo "$SLURM_JOB_GPUS" > job-gpus.txt
task='echo "$SLURM_LOCALID $SLURM_STEP_GPUS"'
srun --gpu-bind=closest bash -c "$task" | sort > closest.txt
srun --gpu-bind=single:2 bash -c "$task" | sort > single.txt
srun --gpu-bind=verbose,per_task:2 bash -c "$task" | sort > per_task.txt
srun --gpu-bind=map_gpu:"$(echo "$SLURM_JOB_GPUS" | awk -F, '{print $4","$3"*2,"$1}')" bash -c "$task" | sort > map.txt
IFS=, read -r g0 g1 g2 g3 <<< "$SLURM_JOB_GPUS"
srun --gpu-bind=mask_gpu:"$(printf '0x%x,0x%x' $(( (1 << g0) | (1 << g1) )) $(( (1 << g2) | (1 << g3) )))" bash -c "$task" | sort > mask.txt
srun --gpu-bind=mask_gpu:0x3,c true 2> badmask.err; echo "$?" > badmask.rc
srun --gpu-bind=mask_gpu:0x8000000000000000 true 2> foreignmask.err; echo "$?" > foreignmask.rc
srun --gpu-bind=map_gpu:63 true 2> foreign.err; echo "$?" > foreign.rc
srun -n1 -i none true; echo "$?" > input.rc
)SH");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("bind.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  std::vector<std::string> g;  // the job's four GPUs, by the node's indexes
  std::istringstream gpus(Trim(h.Read("work/job-gpus.txt")));
  for (std::string x; std::getline(gpus, x, ',');) g.push_back(x);
  ASSERT_EQ(g.size(), 4u);
  const std::string all = g[0] + "," + g[1] + "," + g[2] + "," + g[3];
  auto each = [&](const std::vector<std::string>& seen) {
    std::string out;
    for (size_t i = 0; i < seen.size(); ++i) out += std::to_string(i) + " " + seen[i] + "\n";
    return out;
  };
  EXPECT_EQ(h.Read("work/closest.txt"), each({all, all, all, all}));
  EXPECT_EQ(h.Read("work/single.txt"), each({g[0], g[0], g[1], g[1]}));
  EXPECT_EQ(h.Read("work/per_task.txt"),
            each({g[0] + "," + g[1], g[2] + "," + g[3], g[0] + "," + g[1], g[2] + "," + g[3]}));
  EXPECT_EQ(h.Read("work/map.txt"), each({g[3], g[2], g[2], g[0]}));
  // mask_gpu: hex masks of the node's GPUs, task i the mask i % count; one without 0x is
  // refused (Slurm 22.05 did not read `c` as 0xc).
  EXPECT_EQ(h.Read("work/mask.txt"),
            each({g[0] + "," + g[1], g[2] + "," + g[3], g[0] + "," + g[1], g[2] + "," + g[3]}));
  EXPECT_EQ(Trim(h.Read("work/badmask.rc")), "1");
  EXPECT_NE(h.Read("work/badmask.err").find("mask_gpu takes GPU masks in hex, each with 0x"),
            std::string::npos)
      << h.Read("work/badmask.err");
  EXPECT_EQ(Trim(h.Read("work/foreignmask.rc")), "1");
  EXPECT_NE(h.Read("work/foreignmask.err").find("GPU 63 of node"), std::string::npos)
      << h.Read("work/foreignmask.err");
  EXPECT_EQ(Trim(h.Read("work/foreign.rc")), "1");
  EXPECT_NE(h.Read("work/foreign.err").find("GPU 63 of node"), std::string::npos)
      << h.Read("work/foreign.err");
  EXPECT_EQ(Trim(h.Read("work/input.rc")), "0") << "-i none: what a task's stdin is here";
  // sbatch's --gpu-bind is its steps' default (SLURM_GPU_BIND), as Slurm's.
  h.Write("batch.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --gpu-bind=single:1
#SBATCH -t 1
echo "$SLURM_JOB_GPUS" > batch-gpus.txt
srun bash -c 'echo "$SLURM_LOCALID $SLURM_STEP_GPUS $SLURM_GPU_BIND"' | sort > bare.txt
)SH");
  r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("batch.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string batch = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {batch}); }, 40)) << h.Job(batch).dump();
  const std::string two = Trim(h.Read("work/batch-gpus.txt"));
  EXPECT_EQ(h.Read("work/bare.txt"), "0 " + two.substr(0, two.find(',')) + " single:1\n1 " +
                                         two.substr(two.find(',') + 1) + " single:1\n");
}

// -m/--distribution as Slurm 22.05's: cyclic lays a step's tasks round-robin over its
// nodes (sbatch's is its steps' default, SLURM_DISTRIBUTION), srun's own wins; without
// either a step says Slurm's default (cyclic where no node has two tasks, else block);
// plane is refused saying why (bench/slurm_scripts/distribution.sbatch: the same as Slurm).
TEST(Slurm, DistributionCyclicLaysTasksRoundRobinAsSlurmDoes) {
  Harness h("slurm-distribution");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  const std::string task =
      "echo \"$SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $SLURM_DISTRIBUTION "
      "$SLURM_STEP_TASKS_PER_NODE\"";
  h.Write("dist.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
          "#SBATCH --gres=gpu:2\n#SBATCH -m cyclic\n#SBATCH -t 1\n"
          "echo \"$SLURM_DISTRIBUTION\" > batch.txt\n"
          "srun bash -c '" +
              task +
              "' | sort -n > cyclic.txt\n"
              "srun -n 3 bash -c '" +
              task +
              "' | sort -n > three.txt\n"
              "srun -m block bash -c '" +
              task +
              "' | sort -n > block.txt\n"
              "srun -m plane=2 true 2> plane.err; echo \"$?\" > plane.rc\n");
  h.Write("plain.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
          "#SBATCH --gres=gpu:2\n#SBATCH -t 1\n"
          "srun -N 2 -n 2 bash -c '" +
              task +
              "' | sort -n > two.txt\n"
              "srun bash -c '" +
              task + "' | sort -n > four.txt\n");
  std::vector<std::string> ids;
  for (const char* script : {"dist.sh", "plain.sh"}) {
    RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path(script)}, h.token("ann"));
    ASSERT_EQ(r.rc, 0) << r.err;
    ids.push_back(JobIdOf(r.out));
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {ids[0], ids[1]}); }, 40));
  EXPECT_EQ(Trim(h.Read("work/batch.txt")), "cyclic");
  EXPECT_EQ(h.Read("work/cyclic.txt"),
            "0 0 0 cyclic 2(x2)\n1 1 0 cyclic 2(x2)\n2 0 1 cyclic 2(x2)\n3 1 1 cyclic 2(x2)\n");
  EXPECT_EQ(h.Read("work/three.txt"), "0 0 0 cyclic 2,1\n1 1 0 cyclic 2,1\n2 0 1 cyclic 2,1\n");
  EXPECT_EQ(h.Read("work/block.txt"),
            "0 0 0 block 2(x2)\n1 0 1 block 2(x2)\n2 1 0 block 2(x2)\n3 1 1 block 2(x2)\n");
  EXPECT_EQ(Trim(h.Read("work/plane.rc")), "2");
  EXPECT_NE(h.Read("work/plane.err").find("plane=2 is not done"), std::string::npos)
      << h.Read("work/plane.err");
  EXPECT_EQ(h.Read("work/two.txt"), "0 0 0 cyclic 1(x2)\n1 1 0 cyclic 1(x2)\n");
  EXPECT_EQ(h.Read("work/four.txt"),
            "0 0 0 block 2(x2)\n1 0 1 block 2(x2)\n2 1 0 block 2(x2)\n3 1 1 block 2(x2)\n");
}

// srun --gpus=N (a total) without -N in a multi-node job: split evenly over the step's
// nodes, which are srun's default (the job's nodes, at most one a task), as Slurm 22.05
// (bench/slurm_scripts/step_gpus_total.sbatch); it asked for -N before. A total that does
// not split is refused saying so.
TEST(Slurm, SrunGpusTotalSplitsOverTheStepsNodesAsSlurmDoes) {
  Harness h("slurm-step-gpus");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  const std::string task = "echo \"$SLURM_PROCID $SLURM_NODEID $SLURM_GPUS_ON_NODE\"";
  h.Write("total.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
          "#SBATCH --gres=gpu:2\n#SBATCH -t 1\n"
          "srun -n 2 --gpus=2 bash -c '" +
              task +
              "' | sort -n > two.txt\n"
              "srun --gpus=2 bash -c '" +
              task +
              "' | sort -n > half.txt\n"
              "srun --gpus=3 true 2> three.err; echo \"$?\" > three.rc\n");
  RunResult r = h.Cli({"sbatch", "--parsable", "-D", work, h.Path("total.sh")}, h.token("ann"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = JobIdOf(r.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 40));
  EXPECT_EQ(h.Read("work/two.txt"), "0 0 1\n1 1 1\n");
  EXPECT_EQ(h.Read("work/half.txt"), "0 0 1\n1 0 1\n2 1 1\n3 1 1\n");
  EXPECT_EQ(Trim(h.Read("work/three.rc")), "1");
  EXPECT_NE(h.Read("work/three.err").find("3 GPUs do not split evenly over the step's 2 nodes"),
            std::string::npos)
      << h.Read("work/three.err");
}

// sbatch without a script file, as Slurm's: --wrap makes a /bin/sh script of the command
// (the job named "wrap"), or the script comes on stdin (named "sbatch" without -J).
TEST(Slurm, SbatchTakesItsScriptFromWrapOrStdin) {
  Harness h("slurm-wrap");
  StartSlurmCluster(h);
  const std::string work = h.Path("work");
  fs::create_directories(work);
  const std::string sbatch = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/sbatch";
  const std::map<std::string, std::string> env = {
      {"GANTRY_SERVER", h.ServerUrl()}, {"GANTRY_TOKEN", h.token("ann")}, {"USER", "ann"}};
  RunResult wrap = it::Run({sbatch, "--parsable", "-A", "research", "-D", work, "-o", "wrap-%j.out",
                            "--wrap", "echo hi; cat $0; echo name=$SLURM_JOB_NAME"},
                           env);
  ASSERT_EQ(wrap.rc, 0) << wrap.err;
  auto from_stdin = [&](const std::string& out, const std::string& script) {
    return it::Run({"bash", "-c",
                    sbatch + " --parsable -A research -D " + work + " -o " + out + " <<'EOF'\n" +
                        script + "EOF\n"},
                   env);
  };
  RunResult named =
      from_stdin("named-%j.out", "#!/bin/bash\n#SBATCH -J fromstdin\necho name=$SLURM_JOB_NAME\n");
  ASSERT_EQ(named.rc, 0) << named.err;
  RunResult unnamed = from_stdin("unnamed-%j.out", "#!/bin/bash\necho name=$SLURM_JOB_NAME\n");
  ASSERT_EQ(unnamed.rc, 0) << unnamed.err;
  const std::vector<std::string> ids = {JobIdOf(wrap.out), JobIdOf(named.out),
                                        JobIdOf(unnamed.out)};
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {ids.begin(), ids.end()}); }, 30));
  for (const std::string& id : ids) EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  // The script Slurm writes for --wrap, byte for byte ($0 is it).
  EXPECT_EQ(h.Read("work/wrap-" + ids[0].substr(1) + ".out"),
            "hi\n#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
            "echo hi; cat $0; echo name=$SLURM_JOB_NAME\nname=wrap\n");
  EXPECT_EQ(h.Read("work/named-" + ids[1].substr(1) + ".out"), "name=fromstdin\n");
  EXPECT_EQ(h.Job(ids[2])["name"], "sbatch");
  // Refused as Slurm refuses them: --wrap with a script, an empty stdin.
  RunResult both = it::Run({sbatch, "-A", "research", "--wrap", "true", "extra.sh"}, env);
  EXPECT_EQ(both.rc, 2);
  EXPECT_NE(both.err.find("--wrap makes the script"), std::string::npos) << both.err;
  RunResult empty = it::Run({"bash", "-c", sbatch + " -A research < /dev/null"}, env);
  EXPECT_EQ(empty.rc, 2);
  EXPECT_NE(empty.err.find("the batch script on stdin is empty"), std::string::npos) << empty.err;
}

// sacct's window reaches past the ended jobs gantryd keeps in memory (--recent-done): the
// older ones are read from its store, with their states, exit codes and steps.
TEST(Slurm, AcctShowsEndedJobsNoLongerInMemoryFromTheStore) {
  Harness h("slurm-acct-store");
  h.Setup(kSlurmCluster, {{"a", "research"}});
  h.AddToken("ann", {"--team", "a", "--queues", "research", "--user", "ann"});
  h.StartServer({"--recent-done", "1"});
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  fs::create_directories(h.Path("work"));
  h.Write("step.sh", "#!/bin/sh\n#SBATCH -A research\n#SBATCH -G 1\nsrun true\nexit \"$1\"\n");
  std::vector<std::string> ids;
  for (const char* code : {"0", "3", "0"}) {  // one after another: each ends before the next
    RunResult r = h.Cli({"sbatch", "--parsable", "-D", h.Path("work"), h.Path("step.sh"), code},
                        h.token("ann"));
    ASSERT_EQ(r.rc, 0) << r.err;
    ids.push_back(JobIdOf(r.out));
    ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {ids.back()}); }, 30));
  }
  // gantryd lists the last one only from memory: the others are in its store alone.
  const json listed = h.Get("/v1/jobs?all=1", h.token("ann"));
  ASSERT_EQ(listed["jobs"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["jobs"][0]["id"], ids[2]);
  const std::string n0 = ids[0].substr(1), n1 = ids[1].substr(1), n2 = ids[2].substr(1);
  RunResult acct =
      h.Cli({"acct", "-S", "1h", "-X", "-P", "-n", "-o", "JobID,State,ExitCode"}, h.token("ann"));
  ASSERT_EQ(acct.rc, 0) << acct.err;
  EXPECT_EQ(acct.out, n0 + "|COMPLETED|0:0\n" + n1 + "|FAILED|3:0\n" + n2 + "|COMPLETED|0:0\n");
  // With -j, by its number, with its script's and its step's rows; filters apply to them.
  RunResult one = h.Cli({"acct", "-j", n1, "-P", "-n", "-o", "JobID,State"}, h.token("ann"));
  EXPECT_EQ(one.out, n1 + "|FAILED\n" + n1 + ".batch|FAILED\n" + n1 + ".0|COMPLETED\n") << one.err;
  RunResult failed =
      h.Cli({"acct", "-S", "1h", "-X", "-s", "F", "-P", "-n", "-o", "JobID"}, h.token("ann"));
  EXPECT_EQ(failed.out, n1 + "\n") << failed.err;
  // A window that starts after they ended shows none of them.
  RunResult later = h.Cli({"acct", "-S", "now", "-X", "-P", "-n", "-o", "JobID"}, h.token("ann"));
  EXPECT_EQ(later.out, "") << later.err;
}

// scancel --signal, as Slurm's: by default to the job's steps (the batch script is spared),
// with -b to the batch script's shell alone; a job that does not run is refused.
TEST(Slurm, ScancelSignalsTheStepsOrWithBTheBatchScriptAlone) {
  Harness h("slurm-signal");
  StartSlurmCluster(h);
  fs::create_directories(h.Path("work"));
  h.Write("work/task.sh",
          "#!/bin/bash\ntrap 'echo \"task $SLURM_PROCID USR1\" >> sig.txt; exit 0' USR1\n"
          "echo up >> up.txt\nwhile :; do sleep 0.1; done\n");
  h.Write("sig.sh",
          "#!/bin/bash\n#SBATCH -A research\n#SBATCH -N 1\n#SBATCH -n 2\n#SBATCH -t 5\n"
          "trap 'echo \"batch USR2\" >> sig.txt' USR2\n"
          "srun bash task.sh &\npid=$!\n"
          "while kill -0 $pid 2>/dev/null; do wait $pid; done\necho \"srun ended\" >> sig.txt\n");
  RunResult sb =
      h.Cli({"sbatch", "--parsable", "-D", h.Path("work"), h.Path("sig.sh")}, h.token("ann"));
  ASSERT_EQ(sb.rc, 0) << sb.err;
  const std::string id = JobIdOf(sb.out);
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return fs::exists(h.Path("work/up.txt")) && h.Read("work/up.txt") == "up\nup\n"; }, 20))
      << h.Job(id).dump();
  const std::string slurm = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/";
  auto scancel = [&](std::vector<std::string> args) {
    args.insert(args.begin(), slurm + "scancel");
    return it::Run(args, {{"GANTRY_SERVER", h.ServerUrl()}, {"GANTRY_TOKEN", h.token("ann")}});
  };
  const std::string number = std::to_string(h.Job(id)["number"].get<int64_t>());
  RunResult batch = scancel({"-b", "--signal=USR2", number});
  ASSERT_EQ(batch.rc, 0) << batch.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return fs::exists(h.Path("work/sig.txt")); }, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the steps would say so by now
  EXPECT_EQ(h.Read("work/sig.txt"), "batch USR2\n") << "the steps got the script's signal";
  EXPECT_EQ(h.Job(id).value("state", ""), "running");
  RunResult steps = scancel({"-s", "USR1", number});
  ASSERT_EQ(steps.rc, 0) << steps.err;
  EXPECT_EQ(batch.out + steps.out, "") << "Slurm's scancel says nothing when all went well";
  EXPECT_EQ(batch.err + steps.err, "");
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 20)) << h.Job(id).dump();
  // Both tasks trapped it and ended; the script, spared (USR1 would have killed its shell),
  // saw srun end and finished.
  EXPECT_EQ(h.Job(id).value("state", ""), "finished") << h.Job(id).dump();
  const std::string said = h.Read("work/sig.txt");
  EXPECT_NE(said.find("task 0 USR1\n"), std::string::npos) << said;
  EXPECT_NE(said.find("task 1 USR1\n"), std::string::npos) << said;
  EXPECT_EQ(said.rfind("srun ended\n"), said.size() - 11) << said;
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 4) << said;
  RunResult ended = scancel({"--signal", "USR1", number});
  EXPECT_NE(ended.rc, 0);
  EXPECT_NE(ended.err.find("only a running job is signalled"), std::string::npos) << ended.err;
  RunResult bad = scancel({"-s", "NOPE", number});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("not a signal name or number"), std::string::npos) << bad.err;
}

// sinfo: the nodes by partition and state in Slurm's words and layout.
TEST(Slurm, SinfoShowsPartitionsAndNodeStatesAsSlurms) {
  Harness h("slurm-sinfo");
  StartSlurmCluster(h);
  h.Write("hold.sh", "#!/bin/sh\n#SBATCH -A research\n#SBATCH -p h100\n#SBATCH -G 8\nsleep 60\n");
  fs::create_directories(h.Path("work"));
  RunResult sb =
      h.Cli({"sbatch", "--parsable", "-D", h.Path("work"), h.Path("hold.sh")}, h.token("ann"));
  ASSERT_EQ(sb.rc, 0) << sb.err;
  const std::string id = JobIdOf(sb.out);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id).value("state", "") == "running"; }, 15));
  int status = 0;
  h.Post("/v1/nodes/spare-0/drain", R"({"reason":"DIMM replacement"})", h.token("admin"), &status);
  ASSERT_EQ(status, 200);
  const std::string slurm = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/";
  auto sinfo = [&](std::vector<std::string> args) {
    args.insert(args.begin(), slurm + "sinfo");
    RunResult r =
        it::Run(args, {{"GANTRY_SERVER", h.ServerUrl()}, {"GANTRY_TOKEN", h.token("ann")}});
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.out;
  };
  // Laid out as Slurm 22.05's sinfo lays them out (checked against it: bench/slurm_scripts.py's
  // cluster, 2026-11-30); states by GPUs (Slurm's "mix" for a node whose GPUs one job holds).
  const std::string held = h.Job(id)["nodes"][0];
  const bool first = held == "h100-0";
  const std::string alloc = "h100         up   infinite      1  alloc " + held + "\n";
  const std::string idle = std::string("h100         up   infinite      1   idle ") +
                           (first ? "h100-1" : "h100-0") + "\n";
  EXPECT_EQ(sinfo({}), "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n" +
                           (first ? alloc + idle : idle + alloc) +
                           "spare        up   infinite      1  drain spare-0\n");
  EXPECT_EQ(sinfo({"-N"}), std::string("NODELIST   NODES PARTITION STATE \n") +
                               "h100-0         1      h100 " + (first ? "alloc " : "idle  ") +
                               "\nh100-1         1      h100 " + (first ? "idle  " : "alloc ") +
                               "\nspare-0        1     spare drain \n");
  EXPECT_EQ(sinfo({"-s", "-h", "-p", "h100"}),
            "h100         up   infinite          1/1/0/2 h100-[0-1]\n");
  EXPECT_EQ(sinfo({"-s"}),
            "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n"
            "h100         up   infinite          1/1/0/2 h100-[0-1]\n"
            "spare        up   infinite          0/0/1/1 spare-0\n");
  // A drained idle node is idle too, as Slurm's -t idle shows it.
  EXPECT_EQ(sinfo({"-t", "idle", "-h"}),
            idle + "spare        up   infinite      1  drain spare-0\n");
  // Who drained it (the admin token names no person) and when, in local time.
  const std::string reasons = sinfo({"-R"});
  EXPECT_EQ(reasons.substr(0, reasons.find('\n') + 1),
            "REASON               USER      TIMESTAMP           NODELIST\n");
  EXPECT_NE(reasons.find("\nDIMM replacement     admin     20"), std::string::npos) << reasons;
  EXPECT_EQ(reasons.substr(reasons.size() - 9), " spare-0\n") << reasons;
}

// srun --mpi=pmi2 serves an MPICH program's PMI-1 client and Slurm's libpmi2 (PMI-2)
// (cli/pmi_server.h): an MPICH program's ranks,
// built with Debian's mpicc in the job, find each other across two nodes and reduce;
// SLURM_MPI_TYPE gives the default; a rank's MPI_Abort ends the step by SIGKILL, as
// slurmstepd ends it; MPICH's own mpiexec starts its proxies with srun, Open MPI's mpirun
// its daemons. srun --mpi=pmix (cli/pmix_server.h) starts an Open MPI program's ranks itself,
// on both nodes, block by block, and ends the step at a rank's MPI_Abort.
TEST(Slurm, MpiProgramsRunUnderSrunMpiPmi2AndPmix) {
  Harness h("slurm-mpi");
  StartSlurmCluster(h);
  fs::create_directories(h.Path("work"));
  h.Write("work/hello.c", R"C(#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static const char* e(const char* name) { return getenv(name) ? getenv(name) : "-"; }
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, sum;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (argv[1][0] == 'a') {
    if (rank == 1) MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Comm node;  // the ranks MPI was told share this one's node
  int local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  char name[64];
  snprintf(name, sizeof name, "%s-%d.txt", argv[1], rank);
  FILE* f = fopen(name, "w");
  fprintf(f, "rank %d of %d sum %d procid %s node %s local %s %d\n", rank, size, sum,
          e("SLURM_PROCID"), e("SLURMD_NODENAME"), e("SLURM_LOCALID"), local);
  fclose(f);
  MPI_Finalize();
  return 0;
}
)C");
  // On Slurm's own PMI-2 client library (as MVAPICH2 and Intel MPI load it): addresses,
  // a fence, a neighbour's address, the process mapping, a node attribute.
  h.Write("work/p2.c", R"C(#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int spawned, size, rank, appnum, len, found = 0;
  if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) return 2;
  char jobid[256] = "", key[64], value[64], peer[64] = "", map[256] = "", leader[64] = "";
  PMI2_Job_GetId(jobid, sizeof jobid);
  snprintf(key, sizeof key, "card-%d", rank);
  snprintf(value, sizeof value, "addr-%d", rank);
  if (PMI2_KVS_Put(key, value) != PMI2_SUCCESS) return 3;
  snprintf(value, sizeof value, "%d", rank);
  if (atoi(getenv("SLURM_LOCALID")) == 0) PMI2_Info_PutNodeAttr("leader", value);
  if (PMI2_KVS_Fence() != PMI2_SUCCESS) return 4;
  snprintf(key, sizeof key, "card-%d", (rank + 1) % size);
  PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, peer, sizeof peer, &len);
  PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found);
  PMI2_Info_GetNodeAttr("leader", leader, sizeof leader, &found, 1);
  snprintf(key, sizeof key, "p2-%d.txt", rank);
  FILE* f = fopen(key, "w");
  fprintf(f, "%d %d %s %s %s\n", rank, size, peer, map, leader);
  fclose(f);
  return PMI2_Finalize();
}
)C");
  const std::string id = Sbatch(h, "mpi.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH -t 2
#SBATCH -o mpi.out
mpicc.mpich -o hello hello.c || exit 3
cc -o p2 p2.c -lpmi2 || exit 3
srun --mpi=pmi2 ./p2
echo "p2 $?"
srun --mpi=pmi2 ./hello pmi2
echo "pmi2 $?"
srun --mpi=pmi2 -n 3 -m block ./hello three
echo "three $?"
SLURM_MPI_TYPE=pmi2 srun -n 2 ./hello type
echo "type $?"
srun --mpi=pmi2 ./hello abort
echo "abort $?"
mpiexec.mpich -n 4 ./hello mpiexec
echo "mpiexec $?"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp
export OMPI_MCA_oob_tcp_if_include=127.0.0.0/8 OMPI_MCA_btl_tcp_if_include=127.0.0.0/8
mpicc.openmpi -o ohello hello.c && mpirun.openmpi ./ohello ompi
echo "ompi $?"
srun --mpi=pmix ./ohello pmix
echo "pmix $?"
srun --mpi=pmix_v4 -n 3 ./ohello pmix3
echo "pmix3 $?"
SLURM_MPI_TYPE=pmix srun ./ohello apmix
echo "apmix $?"
curl -s -o /dev/null -w 'launch unheld %{http_code}\n' -X POST -d '{}' \
  -H "Authorization: Bearer $GANTRY_TOKEN" "$GANTRY_SERVER/v1/jobs/$SLURM_JOB_ID/steps/0/launch"
)SH");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 90)) << h.Job(id).dump();
  const std::string out = h.Read("work/mpi.out");
  for (const char* line :
       {"p2 0\n", "pmi2 0\n", "three 0\n", "type 0\n", "abort 137\n", "mpiexec 0\n", "ompi 0\n",
        "pmix 0\n", "pmix3 0\n", "apmix 137\n", "launch unheld 409\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << " in\n" << out;
  EXPECT_NE(out.find("srun: Job step aborted: a task called MPI_Abort (exit code 7)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("srun: Job step aborted: a task called MPI_Abort (exit code 7)"),
            out.rfind("srun: Job step aborted: a task called MPI_Abort (exit code 7)"))
      << "pmi2's and pmix's aborts are not both said\n"
      << out;
  // Each rank: all ranks summed; under srun MPI's rank is the task's SLURM_PROCID, and the
  // nodes it ran on (SLURMD_NODENAME) are returned. Under mpiexec each rank has its Hydra
  // proxy's environment over the batch script's: the proxies' SLURM_PROCIDs are returned.
  auto ranks = [&](const std::string& run, int n) {
    std::set<std::string> where;
    for (int r = 0; r < n; ++r) {
      std::istringstream f(h.Read("work/" + run + "-" + std::to_string(r) + ".txt"));
      std::string w[13];
      for (std::string& x : w) f >> x;
      // The rank among those MPI puts on its node (PMIx's layout) is its SLURM_LOCALID.
      if (run.starts_with("pmix")) {
        EXPECT_EQ(w[12], w[11]) << run << " rank " << r;
      }
      EXPECT_EQ(w[1], std::to_string(r)) << run;
      EXPECT_EQ(w[3], std::to_string(n)) << run;
      EXPECT_EQ(w[5], std::to_string(n * (n - 1) / 2)) << run;
      if (run == "mpiexec" || run == "ompi") {
        where.insert(w[7]);
      } else {
        EXPECT_EQ(w[7], std::to_string(r)) << run << ": MPI's rank";
        where.insert(w[9]);
      }
    }
    return where;
  };
  EXPECT_EQ(ranks("pmi2", 4), (std::set<std::string>{"h100-0", "h100-1"}));
  EXPECT_EQ(ranks("three", 3), (std::set<std::string>{"h100-0", "h100-1"}));
  EXPECT_EQ(ranks("type", 2), (std::set<std::string>{"h100-0", "h100-1"}));
  EXPECT_EQ(ranks("mpiexec", 4), (std::set<std::string>{"0", "1"})) << "a proxy on each node";
  EXPECT_EQ(ranks("pmix", 4), (std::set<std::string>{"h100-0", "h100-1"}));
  EXPECT_EQ(ranks("pmix3", 3), (std::set<std::string>{"h100-0", "h100-1"}));
  EXPECT_FALSE(fs::exists(h.Path("work/apmix-0.txt"))) << "a rank outlived MPI_Abort";
  // Open MPI's mpirun starts its daemons on the job's nodes with srun (a step of one task
  // a node), each daemon its node's ranks.
  EXPECT_EQ(ranks("ompi", 4), (std::set<std::string>{"0", "1"})) << "a daemon on each node";
  EXPECT_FALSE(fs::exists(h.Path("work/abort-0.txt"))) << "a rank outlived MPI_Abort";
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(h.Read("work/p2-" + std::to_string(r) + ".txt"),
              std::to_string(r) + " 4 addr-" + std::to_string((r + 1) % 4) + " (vector,(0,2,2)) " +
                  (r < 2 ? "0" : "2") + "\n");
  }
}

// Steps still running when the batch script ends get SIGTERM, and KillWait (30 s) before
// SIGKILL, as Slurm's slurmd ends a job's steps: a monitor cleans up, a server that ignores
// SIGTERM finishes its work; both steps end COMPLETED, and so does the job, once they have.
TEST(Slurm, StepsLeftRunningWhenTheScriptEndsGetSigtermAndTime) {
  Harness h("slurm-leftover");
  StartSlurmCluster(h);
  const std::string id = Sbatch(h, "bg.sh", R"SH(#!/bin/bash
#SBATCH -A research
#SBATCH -N 1
#SBATCH -t 1
srun --overlap -n 1 bash -c 'trap "echo cleaned > cleanup.txt; exit 0" TERM; while true; do sleep 0.1; done' &
srun --overlap -n 1 bash -c 'trap "" TERM; sleep 3; echo finished > slow.txt' &
sleep 1
)SH");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "stopping"; }, 20))
      << h.Job(id).dump();
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, {id}); }, 30)) << h.Job(id).dump();
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(h.Read("work/cleanup.txt"), "cleaned\n");
  EXPECT_EQ(h.Read("work/slow.txt"), "finished\n");
  const std::string number = id.substr(1);
  EXPECT_EQ(
      SlurmAs(h, "ann", {"sacct", "-n", "-P", "-j", number, "-o", "JobID,State,ExitCode"}).out,
      number + "|COMPLETED|0:0\n" + number + ".batch|COMPLETED|0:0\n" + number +
          ".0|COMPLETED|0:0\n" + number + ".1|COMPLETED|0:0\n");
}

// The submitter's resource limits are the job's, as Slurm's default PropagateResourceLimits
// makes them (sbatch and srun send them, the agent sets them and takes the variables out):
// a shell with 777 open files, a core size of 1 MiB and 64 KiB of locked memory submits;
// its script and its step see the first two. MEMLOCK, the site's exception by default
// (site.propagate_resource_limits_except), only where --propagate names it; with
// --propagate=NONE the job keeps the node's.
TEST(Slurm, TheSubmittersResourceLimitsAreTheJobsAsSlurmPropagatesThem) {
  Harness h("slurm-rlimits");
  StartSlurmCluster(h);
  fs::create_directories(h.Path("work"));
  const std::string body =
      "echo \"batch $(ulimit -n) $(ulimit -c) $(ulimit -l) ${SLURM_RLIMIT_NOFILE:-unset}\"\n"
      "srun bash -c 'echo \"step $(ulimit -n) $(ulimit -c) $(ulimit -l) "
      "${SLURM_RLIMIT_NOFILE:-unset}\"'\n";
  const std::string head = "#!/bin/bash\n#SBATCH -A research\n#SBATCH -t 1\n";
  h.Write("lim.sh", head + "#SBATCH -o lim.out\n" + body);
  h.Write("none.sh", head + "#SBATCH -o none.out\n#SBATCH --propagate=NONE\n" + body);
  h.Write("memlock.sh",
          head + "#SBATCH -o memlock.out\n#SBATCH --propagate=MEMLOCK,NOFILE\n" + body);
  const std::string sbatch = fs::path(GANTRY_BINARY).parent_path().string() + "/slurm/sbatch";
  std::set<std::string> ids;
  for (const char* file : {"lim.sh", "none.sh", "memlock.sh"}) {
    RunResult r = it::Run(
        {"prlimit", "--nofile=777:4096", "--core=1048576:", "--memlock=65536:", sbatch,
         "--parsable", "-D", h.Path("work"), h.Path(file)},
        {{"GANTRY_SERVER", h.ServerUrl()}, {"GANTRY_TOKEN", h.token("ann")}, {"USER", "ann"}});
    ASSERT_EQ(r.rc, 0) << r.err;
    ids.insert(JobIdOf(r.out));
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 30));
  // The node's: what a process the agents' parent starts has (this test's).
  const std::string core = Trim(it::Run({"bash", "-c", "ulimit -c"}, {}).out);
  const std::string memlock = Trim(it::Run({"bash", "-c", "ulimit -l"}, {}).out);
  ASSERT_NE(memlock, "64");
  ASSERT_NE(core, "1024");
  EXPECT_EQ(h.Read("work/lim.out"),
            "batch 777 1024 " + memlock + " unset\nstep 777 1024 " + memlock + " unset\n");
  EXPECT_EQ(h.Read("work/memlock.out"),
            "batch 777 " + core + " 64 unset\nstep 777 " + core + " 64 unset\n")
      << "--propagate=MEMLOCK,NOFILE: those two, the node's core size";
  const std::string none = h.Read("work/none.out");
  EXPECT_EQ(none.find("777"), std::string::npos) << none;
  EXPECT_NE(none.find("batch "), std::string::npos) << none;
  EXPECT_EQ(none.find("SLURM_RLIMIT"), std::string::npos) << none;
}

}  // namespace
}  // namespace gantry::it
