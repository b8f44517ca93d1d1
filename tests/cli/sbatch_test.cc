// gantry sbatch's directive parser and the squeue/sacct formats (cli/sbatch.h,
// cli/slurm_format.h), and Slurm's output patterns and host lists (spec/batch.h).
#include <gtest/gtest.h>

#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/sbatch.h"
#include "cli/slurm_format.h"
#include "core/model/feasibility.h"
#include "core/placement.h"
#include "spec/batch.h"
#include "spec/config_reader.h"
#include "spec/job_reader.h"

namespace gantry::cli {
namespace {

using nlohmann::json;

SbatchContext Ctx() {
  SbatchContext c;
  c.cwd = "/home/ann/run";
  c.host = "login1";
  c.env = {{"HOME", "/home/ann"},
           {"LR", "0.1"},
           {"GANTRY_TOKEN", "secret"},
           {"SLURM_JOB_ID", "7"},
           {"SLURMD_NODENAME", "h100-3"}};  // sbatch run inside another job
  return c;
}

SbatchJob Parse(const std::string& text, const std::vector<std::string>& options = {},
                const std::vector<std::string>& args = {}) {
  return ParseSbatch("job.sh", text, options, args, Ctx());
}

std::string Errors(const SbatchJob& j) {
  std::string out;
  for (const std::string& e : j.errors) out += e + "\n";
  return out;
}

TEST(Sbatch, EveryDirectiveMapsToItsField) {
  const std::string script =
      "#!/bin/bash\n"
      "# a comment\n"
      "\n"
      "#SBATCH --job-name=train\n"
      "#SBATCH -p h100\n"
      "#SBATCH --qos=critical\n"
      "#SBATCH -A nlp\n"
      "#SBATCH --time=1-02:03:04   # a day and a bit\n"
      "#SBATCH -N 2\n"
      "#SBATCH --ntasks-per-node=4\n"
      "#SBATCH --gres=gpu:H100-80GB:8\n"
      "#SBATCH --mem=64G\n"
      "#SBATCH --cpus-per-task=6\n"
      "#SBATCH -D /data/run\n"
      "#SBATCH --export=NONE\n"
      "#SBATCH --signal=B:USR1@120\n"
      "#SBATCH -o out-%j.txt\n"
      "#SBATCH -e err-%x-%t.txt\n"
      "#SBATCH --array=0-3\n"
      "#SBATCH --dependency=afterok:j1:j2,afterany:j3\n"
      "#SBATCH --parsable\n"
      "srun python train.py\n";
  SbatchJob j = Parse(script, {}, {"--epochs", "3"});
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  const json& s = j.spec;
  EXPECT_EQ(s["script"], script);
  EXPECT_EQ(s["command"], json({"--epochs", "3"}));
  EXPECT_EQ(s["name"], "train");
  EXPECT_EQ(s["pool"], "h100");
  EXPECT_EQ(s["tier"], "critical");
  EXPECT_EQ(s["queue"], "nlp");
  // --signal=B:USR1@120: the batch script signalled 120 s before the limit, killed at it.
  EXPECT_EQ(s["time_limit_s"], 93784 - 120);
  EXPECT_EQ(s["grace_s"], 120);
  EXPECT_EQ(s["signal"], "B:USR1");
  EXPECT_EQ(s["replicas"], 8);
  EXPECT_FALSE(s.contains("topology"));
  EXPECT_EQ(s["gpus"], 2);
  EXPECT_EQ(s["vram_gb"], 1);
  EXPECT_EQ(s["gpu_model"], "H100-80GB");
  EXPECT_DOUBLE_EQ(s["memory_gb"].get<double>(), 17.179869);  // 64 GiB over 4 tasks, in GB (1e9)
  EXPECT_EQ(s["cpus"], 6);
  EXPECT_EQ(s["workdir"], "/data/run");
  // What Slurm's sbatch sets from the options given (gantryd sets the rest).
  EXPECT_EQ(s["env"], json({{"SLURM_SUBMIT_DIR", "/home/ann/run"},
                            {"SLURM_SUBMIT_HOST", "login1"},
                            {"SLURM_EXPORT_ENV", "NONE"},
                            {"SLURM_GET_USER_ENV", "1"},
                            {"SLURM_JOB_DEPENDENCY", "afterok:j1:j2,afterany:j3"},
                            {"SLURM_NTASKS", "8"},
                            {"SLURM_NPROCS", "8"},
                            {"SLURM_NTASKS_PER_NODE", "4"},
                            {"SLURM_CPUS_PER_TASK", "6"},
                            {"SLURM_MEM_PER_NODE", "65536"}}));
  EXPECT_EQ(s["stdout"], "out-%j.txt");
  EXPECT_EQ(s["stderr"], "err-%x-%t.txt");
  EXPECT_EQ(j.array, "0-3");
  EXPECT_EQ(j.after, "j1:ok,j2:ok,j3:any");
  EXPECT_TRUE(j.parsable);
}

TEST(Sbatch, DefaultsAreSlurms) {
  SbatchJob j = Parse("#!/bin/sh\necho hi\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["replicas"], 1);
  EXPECT_FALSE(j.spec.contains("command"));       // no arguments
  EXPECT_EQ(j.spec["workdir"], "/home/ann/run");  // where sbatch ran
  EXPECT_EQ(j.spec["stdout"], "slurm-%j.out");
  EXPECT_FALSE(j.spec.contains("stderr"));
  EXPECT_FALSE(j.spec.contains("gpus"));
  EXPECT_FALSE(j.spec.contains("time_limit_s"));
  // --export=ALL: the submit environment, but never Gantry's credentials or Slurm's own.
  EXPECT_EQ(j.spec["env"]["LR"], "0.1");
  EXPECT_EQ(j.spec["env"]["HOME"], "/home/ann");
  EXPECT_FALSE(j.spec["env"].contains("GANTRY_TOKEN"));
  EXPECT_FALSE(j.spec["env"].contains("SLURM_JOB_ID"));
  EXPECT_FALSE(j.spec["env"].contains("SLURMD_NODENAME")) << "the submitting job's node";
  EXPECT_EQ(j.spec["env"]["SLURM_SUBMIT_DIR"], "/home/ann/run");
  // No -n, -c or --mem: sbatch sets no SLURM_NTASKS, _CPUS_PER_TASK or _MEM_PER_NODE.
  for (const char* unset : {"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
                            "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE"})
    EXPECT_FALSE(j.spec["env"].contains(unset)) << unset;
  EXPECT_FALSE(j.parsable);
  EXPECT_EQ(j.spec["name"], "job.sh");  // the script's file name
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH --array=1-4\n").spec["stdout"], "slurm-%A_%a.out");
  // Options Slurm takes that Gantry has nothing to do for: accepted, with a note.
  SbatchJob mail = Parse(
      "#!/bin/sh\n#SBATCH --mail-type=END,FAIL\n#SBATCH --mail-user=a@b\n"
      "#SBATCH --requeue\n#SBATCH -t 4:00:00 --time-min=1:00:00\n");
  ASSERT_TRUE(mail.errors.empty()) << Errors(mail);
  ASSERT_EQ(mail.notes.size(), 4u);
  EXPECT_EQ(mail.notes[0],
            "job.sh:2: --mail-type: accepted: Gantry sends no mail; gantry show and "
            "logs follow the job");
  EXPECT_EQ(mail.notes[3].rfind("job.sh:5: --time-min: accepted: the job runs with its whole "
                                "--time",
                                0),
            0u)
      << mail.notes[3];
  EXPECT_EQ(mail.spec["time_limit_s"], 4 * 3600);
  // Per-node amounts with -n and no -N: one node holds the tasks (Slurm's reading).
  SbatchJob one = Parse("#!/bin/sh\n#SBATCH -n 4\n#SBATCH --gres=gpu:4\n#SBATCH --mem=64G\n");
  ASSERT_TRUE(one.errors.empty()) << Errors(one);
  EXPECT_EQ(one.spec["replicas"], 4);
  EXPECT_EQ(one.spec["gpus"], 1);
  EXPECT_EQ(one.spec["topology"], "node");
  // --gpus-per-task as Slurm sets it (srun reads it too).
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -n 2\n#SBATCH --gpus-per-task=a100:2\n")
                .spec["env"]["SLURM_GPUS_PER_TASK"],
            "2");
}

// -m/--distribution and --gpu-bind are the steps' defaults, as Slurm's sbatch exports them
// (SLURM_DISTRIBUTION, SLURM_GPU_BIND); a layout Gantry does not do is refused with the line.
TEST(Sbatch, DistributionAndGpuBindAreTheStepsDefaults) {
  SbatchJob j = Parse("#!/bin/sh\n#SBATCH -m cyclic:cyclic\n#SBATCH --gpu-bind=closest\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["env"]["SLURM_DISTRIBUTION"], "cyclic:cyclic");
  EXPECT_EQ(j.spec["env"]["SLURM_GPU_BIND"], "closest");
  EXPECT_TRUE(j.notes.empty());
  SbatchJob plane = Parse("#!/bin/sh\n#SBATCH --distribution=plane=4\n");
  ASSERT_EQ(plane.errors.size(), 1u) << Errors(plane);
  EXPECT_NE(plane.errors[0].find("job.sh:2: --distribution: tasks are laid out over the nodes "
                                 "block by block or cyclic only (plane=4 is not done)"),
            std::string::npos)
      << plane.errors[0];
}

TEST(Sbatch, EveryTimeFormat) {
  struct Case {
    const char* text;
    long long seconds;
  } cases[] = {{"30", 1800},       {"30:15", 1815},       {"2:03:04", 7384}, {"1-02", 93600},
               {"1-02:03", 93780}, {"1-02:03:04", 93784}, {"0:45", 45},      {"120", 7200},
               {"UNLIMITED", 0},   {"INFINITE", 0}};
  for (const Case& c : cases) {
    std::string error;
    auto t = ParseSlurmTime(c.text, error);
    ASSERT_TRUE(t.has_value()) << c.text << ": " << error;
    EXPECT_EQ(*t, c.seconds) << c.text;
    SbatchJob j = Parse("#!/bin/sh\n#SBATCH --time=" + std::string(c.text) + "\n");
    ASSERT_TRUE(j.errors.empty()) << Errors(j);
    if (c.seconds > 0) {
      EXPECT_EQ(j.spec["time_limit_s"], c.seconds) << c.text;
    } else {
      EXPECT_FALSE(j.spec.contains("time_limit_s")) << c.text;
    }
  }
  for (const char* bad :
       {"", "1:2:3:4", "a", "1-", "-1", "1-2-3", "1:", ":5", "1.5", "1-02:03:04:05"}) {
    std::string error;
    EXPECT_FALSE(ParseSlurmTime(bad, error).has_value()) << bad;
    EXPECT_NE(error.find("D-HH:MM:SS"), std::string::npos) << bad;
  }
}

// Slurm 22.05's readings of --begin, observed with its sbatch (bench/slurm_scripts.py, a
// probe script) at 2026-12-01T13:05:27 UTC, as `scontrol show job`'s StartTime said them.
TEST(Sbatch, BeginTimesAreReadAsSlurmReadsThem) {
  ASSERT_EQ(setenv("TZ", "UTC", 1), 0);
  tzset();
  const int64_t now = 1796130327;  // 2026-12-01T13:05:27Z
  auto utc = [](const char* iso) {
    std::tm tm{};
    EXPECT_NE(strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm), nullptr) << iso;
    return static_cast<int64_t>(timegm(&tm));
  };
  struct Case {
    const char* text;
    int64_t at;
  };
  const Case cases[] = {
      {"now", now},
      {"now+60", now + 60},
      {"now+1minute", now + 60},
      {"now+2hours", now + 7200},
      {"now+1day", now + 86400},
      {"now+1week", now + 7 * 86400},
      {"now+1 hour", now + 3600},
      {"NOW+90seconds", now + 90},
      {"now-5", now - 5},  // accepted, and at once
      {"16:00", utc("2026-12-01T16:00:00")},
      {"16:00:30", utc("2026-12-01T16:00:30")},
      {"4:15PM", utc("2026-12-01T16:15:00")},
      {"4:15 pm", utc("2026-12-01T16:15:00")},
      {"12:30am", utc("2026-12-02T00:30:00")},  // gone by today: tomorrow's
      {"09:00", utc("2026-12-02T09:00:00")},
      {"midnight", utc("2026-12-02T00:00:00")},
      {"noon", utc("2026-12-02T12:00:00")},  // (it was 13:05)
      {"teatime", utc("2026-12-01T16:00:00")},
      {"fika", utc("2026-12-01T15:00:00")},
      {"today", utc("2026-12-01T00:00:00")},  // gone by: at once
      {"tomorrow", utc("2026-12-02T00:00:00")},
      {"2026-12-24", utc("2026-12-24T00:00:00")},
      {"2026-12-24T10:00", utc("2026-12-24T10:00:00")},
      {"2026-12-24T10:00:05", utc("2026-12-24T10:00:05")},
      {"12/24", utc("2026-12-24T00:00:00")},
      {"12/24/26", utc("2026-12-24T00:00:00")},
      {"122426", utc("2026-12-24T00:00:00")},
      {"12.24", utc("2026-12-24T00:00:00")},
      {"12.24.26", utc("2026-12-24T00:00:00")},
      {"2020-01-01", utc("2020-01-01T00:00:00")},  // gone by: at once
      {"01/15", utc("2027-01-15T00:00:00")},       // no year, gone by: next year's
      {"10:00 12/24", utc("2026-12-24T10:00:00")},
      {"12/24 4:15PM", utc("2026-12-24T16:15:00")},
  };
  for (const Case& c : cases) {
    std::string error;
    const std::optional<int64_t> t = ParseSlurmBeginTime(c.text, now, error);
    ASSERT_TRUE(t.has_value()) << c.text << ": " << error;
    EXPECT_EQ(*t, c.at) << c.text;
  }
  // Refused by Slurm's too ("Invalid --begin specification"), and what cannot be a date.
  for (const char* bad : {"", "4pm", "elevenses", "garbage", "now+5x", "25:00", "12:60", "13:00pm",
                          "2026-02-30", "13/01", "10:00 11:00", "12/24 12/25", "now+", "now 5"}) {
    std::string error;
    EXPECT_FALSE(ParseSlurmBeginTime(bad, now, error).has_value()) << bad;
    EXPECT_NE(error.find("now+N[seconds|minutes|hours|days|weeks]"), std::string::npos) << bad;
  }
  SbatchContext ctx = Ctx();
  ctx.now_s = now;
  SbatchJob held =
      ParseSbatch("job.sh", "#!/bin/sh\n#SBATCH -H\n#SBATCH --begin=now+1hour\n", {}, {}, ctx);
  ASSERT_TRUE(held.errors.empty()) << Errors(held);
  EXPECT_TRUE(held.hold);
  EXPECT_EQ(held.begin_s, now + 3600);
  SbatchJob past = ParseSbatch("job.sh", "#!/bin/sh\n", {"-b", "today"}, {}, ctx);
  ASSERT_TRUE(past.errors.empty()) << Errors(past);
  EXPECT_FALSE(past.hold);
  EXPECT_EQ(past.begin_s, 0) << "a time gone by starts at once";
  SbatchJob bad = ParseSbatch("job.sh", "#!/bin/sh\n#SBATCH --begin=4pm\n", {}, {}, ctx);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].rfind("job.sh:2: --begin: expected now+N", 0), 0u) << bad.errors[0];
}

// -w/--nodelist and -x/--exclude: the spec's nodelist and exclude_nodes (the host lists as
// written, gantryd resolves them); the list's size is -N when -N is not given, and any other -N is
// refused (Slurm would add other nodes; Gantry runs on exactly the listed ones).
TEST(Sbatch, NodeListsAndExclusions) {
  SbatchJob two =
      Parse("#!/bin/sh\n#SBATCH -w h100-[0-1]\n#SBATCH --gres=gpu:8\n#SBATCH -x a100-1\n");
  ASSERT_TRUE(two.errors.empty()) << Errors(two);
  EXPECT_EQ(two.spec["nodelist"], "h100-[0-1]");
  EXPECT_EQ(two.spec["exclude_nodes"], "a100-1");
  EXPECT_EQ(two.spec["replicas"], 2);
  EXPECT_EQ(two.spec["workers_per_node"], 1);  // two distinct nodes: both of them
  EXPECT_EQ(two.origin["nodelist"], "job.sh:2: --nodelist=h100-[0-1]");
  SbatchJob one = Parse("#!/bin/sh\n#SBATCH --nodelist=h100-3 -n 4 --gres=gpu:4\n");
  ASSERT_TRUE(one.errors.empty()) << Errors(one);
  EXPECT_EQ(one.spec["replicas"], 4);
  EXPECT_EQ(one.spec["topology"], "node");
  EXPECT_FALSE(one.spec.contains("fewest_nodes"));
  SbatchJob same = Parse("#!/bin/sh\n#SBATCH -N 2 -w h100-0,h100-1\n");
  EXPECT_TRUE(same.errors.empty()) << Errors(same);
  auto error = [](const std::string& d) { return Errors(Parse("#!/bin/sh\n#SBATCH " + d + "\n")); };
  EXPECT_NE(error("-N 3 -w h100-[0-1]")
                .find("job.sh:2: --nodes: with --nodelist the job runs on exactly its 2 node(s): "
                      "give -N 2 or leave -N out"),
            std::string::npos);
  EXPECT_NE(error("-N 1-2 -w h100-[0-1]").find("with --nodelist"), std::string::npos);
  EXPECT_NE(error("-w ./hosts.txt").find("--nodelist: a file of node names is not read"),
            std::string::npos);
  EXPECT_NE(error("-x h100-[0-").find("--exclude: expected node names or a host list"),
            std::string::npos);
}

// Every dependency type Slurm 22.05 has but afterburstbuffer, as gantryd's --after: ok,
// any, notok, started, corr; ',' all of them, '?' any one; singleton.
TEST(Sbatch, DependencyTypesBecomeAfterKinds) {
  auto after = [](const std::string& d) {
    SbatchJob j = Parse("#!/bin/sh\n#SBATCH --dependency=" + d + "\n");
    EXPECT_TRUE(j.errors.empty()) << Errors(j);
    return j.after;
  };
  EXPECT_EQ(after("afterok:12:13"), "12:ok,13:ok");
  EXPECT_EQ(after("afterany:12,afternotok:14"), "12:any,14:notok");
  EXPECT_EQ(after("after:15"), "15:started");
  EXPECT_EQ(after("aftercorr:16:17"), "16:corr,17:corr");
  EXPECT_EQ(after("afterok:12?afternotok:12"), "12:ok?12:notok");
  EXPECT_EQ(after("singleton"), "singleton");
  EXPECT_EQ(after("afterok:12,singleton"), "12:ok,singleton");
  // --kill-on-invalid-dep: yes cancels a job whose dependency can never be met, no leaves it
  // waiting; not given, the site decides (-1).
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -d afterok:12\n").kill_invalid_dep, -1);
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH --kill-on-invalid-dep=yes\n").kill_invalid_dep, 1);
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH --kill-on-invalid-dep=no\n").kill_invalid_dep, 0);
  EXPECT_EQ(Errors(Parse("#!/bin/sh\n#SBATCH --kill-on-invalid-dep=maybe\n")),
            "job.sh:2: --kill-on-invalid-dep: expected yes or no, got \"maybe\"\n");
}

// Options real scripts carry that Gantry has no use for (CPU layout, binding, switches,
// accounting): accepted with a note that says why; sbatch's own -v and -Q silently; a few
// that would change what the job is refused with what to do instead.
// `option` on a directive line is accepted, with one note that names it.
void ExpectAcceptedWithANote(const std::string& option) {
  SbatchJob j = Parse("#!/bin/sh\n#SBATCH " + option + "\n#SBATCH -G 1\n");
  ASSERT_TRUE(j.errors.empty()) << option << ": " << Errors(j);
  ASSERT_EQ(j.notes.size(), 1u) << option;
  const std::string name = option.substr(0, option.find('='));
  EXPECT_EQ(j.notes[0].rfind("job.sh:2: " + name + ": accepted: ", 0), 0u) << j.notes[0];
}

TEST(Sbatch, HintsAreAcceptedWithANoteAndTheRestRefusedWithWhy) {
  for (const char* hint :
       {"--gres-flags=enforce-binding", "--threads-per-core=1", "--ntasks-per-socket=1",
        "--sockets-per-node=2", "--cores-per-socket=8", "--mem-bind=local", "--switches=1@1:00:00",
        "--profile=task", "--acctg-freq=30", "--gpu-freq=high", "--no-kill", "--overcommit",
        "--spread-job", "--use-min-nodes", "--contiguous", "--tmp=10G", "--mincpus=4"}) {
    ExpectAcceptedWithANote(hint);
  }
  SbatchJob quiet = Parse("#!/bin/sh\n#SBATCH -v -Q -k -O\n");
  EXPECT_TRUE(quiet.errors.empty()) << Errors(quiet);
  EXPECT_EQ(quiet.notes.size(), 2u);  // -k and -O; -v and -Q are sbatch's own
  for (const char* refused : {"--deadline=now+1hour", "--clusters=b", "--ntasks-per-gpu=1"}) {
    const std::string e = Errors(Parse("#!/bin/sh\n#SBATCH " + std::string(refused) + "\n"));
    EXPECT_NE(e.find(": not supported: "), std::string::npos) << refused << ": " << e;
  }
}

// The submitter's soft limits travel as Slurm's sbatch sends them (SLURM_RLIMIT_*, for the
// node to set): all of them without --propagate (Slurm's default PropagateResourceLimits=ALL),
// marked U for those --propagate names, none with NONE.
TEST(Sbatch, ResourceLimitsTravelAsSlurmsSbatchSendsThem) {
  SbatchContext c = Ctx();
  c.rlimits = {{"NOFILE", 512}, {"STACK", 18446744073709551615ULL}, {"CORE", 0}};
  auto limits = [&](const std::string& directive) {
    SbatchJob j = ParseSbatch("job.sh", "#!/bin/sh\n" + directive + "\n", {}, {}, c);
    EXPECT_TRUE(j.errors.empty()) << Errors(j);
    json out = json::object();
    for (const auto& [k, v] : j.spec["env"].items()) {
      if (k.rfind("SLURM_RLIMIT_", 0) == 0) out[k] = v;
    }
    return out;
  };
  EXPECT_EQ(limits(""), json({{"SLURM_RLIMIT_CORE", "0"},
                              {"SLURM_RLIMIT_NOFILE", "512"},
                              {"SLURM_RLIMIT_STACK", "18446744073709551615"}}));
  EXPECT_EQ(limits("#SBATCH --propagate"), json({{"SLURM_RLIMIT_CORE", "U0"},
                                                 {"SLURM_RLIMIT_NOFILE", "U512"},
                                                 {"SLURM_RLIMIT_STACK", "U18446744073709551615"}}));
  EXPECT_EQ(
      limits("#SBATCH --propagate=NOFILE,STACK"),
      json({{"SLURM_RLIMIT_NOFILE", "U512"}, {"SLURM_RLIMIT_STACK", "U18446744073709551615"}}));
  EXPECT_EQ(limits("#SBATCH --propagate=NONE"), json::object());
}

// Options whose value is optional, as sbatch's getopt reads them (only --name=VALUE; a
// word after --name is not its value): accepted with a note, their values checked;
// --no-kill=off is as if not given; --exclusive=user|mcs refused with what to write.
TEST(Sbatch, OptionalValuesAreReadAsGetoptReadsThem) {
  for (const char* given :
       {"--get-user-env", "--get-user-env=L", "--get-user-env=10S", "--get-user-env=20"}) {
    ExpectAcceptedWithANote(given);
  }
  // --nice: honoured (the job spec's nice), 100 without a value, as Slurm's.
  for (const auto& [given, nice] :
       std::vector<std::pair<std::string, int>>{{"--nice", 100},
                                                {"--nice=10", 10},
                                                {"--nice=+7", 7},
                                                {"--nice=-5", -5},
                                                {"--nice=2147483645", 2147483645}}) {
    SbatchJob j = Parse("#!/bin/sh\n#SBATCH " + given + "\n#SBATCH -G 1\n");
    EXPECT_TRUE(j.errors.empty() && j.notes.empty()) << given << ": " << Errors(j);
    EXPECT_EQ(j.spec["nice"], nice) << given;
  }
  EXPECT_FALSE(Parse("#!/bin/sh\n#SBATCH -G 1\n").spec.contains("nice"));
  for (const char* given : {"--propagate", "--propagate=STACK,NOFILE", "--propagate=NONE"}) {
    SbatchJob j = Parse("#!/bin/sh\n#SBATCH " + std::string(given) + "\n#SBATCH -G 1\n");
    EXPECT_TRUE(j.errors.empty() && j.notes.empty()) << given << ": honoured, no note";
  }
  SbatchJob off = Parse("#!/bin/sh\n#SBATCH --no-kill=off -G 1\n");
  EXPECT_TRUE(off.errors.empty()) << Errors(off);
  EXPECT_TRUE(off.notes.empty()) << "off: as if not given";
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -k -G 1\n").notes.size(), 1u);
  for (const auto& [given, said] : std::vector<std::pair<std::string, std::string>>{
           {"--nice=ten", "job.sh:2: --nice: expected an adjustment from -2147483645 to"},
           {"--nice=2147483646", "job.sh:2: --nice: expected an adjustment from -2147483645"},
           {"--nice=99999999999999999999", "job.sh:2: --nice: expected an adjustment"},
           {"--nice=+", "job.sh:2: --nice: expected an adjustment"},
           {"--get-user-env=10X", "job.sh:2: --get-user-env: expected [TIMEOUT][S|L]"},
           {"--propagate=STACKS", "job.sh:2: --propagate: unknown limit \"STACKS\""},
           {"--no-kill=on", "job.sh:2: --no-kill: expected off or no value"},
           {"--exclusive=user", "job.sh:2: --exclusive: =user is not supported"},
           {"--exclusive=node", "job.sh:2: --exclusive: expected user, mcs or no value"},
           {"--nice 10", "job.sh:2: 10: expected an option"},  // not --nice's value
           {"--mail-user", "job.sh:2: --mail-user: needs a value"}}) {
    const std::string e = Errors(Parse("#!/bin/sh\n#SBATCH " + given + "\n"));
    EXPECT_NE(e.find(said), std::string::npos) << given << ": " << e;
  }
  // SLURM_GET_USER_ENV as Slurm's job sees it: set by --get-user-env, inherited by a job
  // submitted from such a job's environment.
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH --get-user-env=L\n").spec["env"]["SLURM_GET_USER_ENV"], "1");
  SbatchContext inside = Ctx();  // sbatch run inside another job (SLURM_JOB_ID=7)
  inside.env["SLURM_GET_USER_ENV"] = "1";
  SbatchJob child = ParseSbatch("child.sh", "#!/bin/sh\n", {}, {}, inside);
  EXPECT_EQ(child.spec["env"]["SLURM_GET_USER_ENV"], "1");
  EXPECT_FALSE(child.spec["env"].contains("SLURM_JOB_ID"));
  SbatchJob whole = Parse("#!/bin/sh\n#SBATCH --exclusive --gres=gpu:8\n");
  EXPECT_TRUE(whole.errors.empty()) << Errors(whole);
  EXPECT_EQ(whole.spec["exclusive"], true);
}

TEST(Sbatch, MemorySizes) {
  std::string error;
  EXPECT_EQ(ParseSlurmMemory("4096", error), 4096);
  EXPECT_EQ(ParseSlurmMemory("500M", error), 500);
  EXPECT_EQ(ParseSlurmMemory("16G", error), 16384);
  EXPECT_EQ(ParseSlurmMemory("1T", error), 1048576);
  EXPECT_EQ(ParseSlurmMemory("2048K", error), 2);
  EXPECT_FALSE(ParseSlurmMemory("16Q", error));
  EXPECT_FALSE(ParseSlurmMemory("G", error));
  SbatchJob cpu = Parse("#!/bin/sh\n#SBATCH -c 4 --mem-per-cpu=1G\n");
  ASSERT_TRUE(cpu.errors.empty()) << Errors(cpu);
  EXPECT_DOUBLE_EQ(cpu.spec["memory_gb"].get<double>(), 4.294967);
  SbatchJob gpu = Parse("#!/bin/sh\n#SBATCH --gpus-per-task=2 --mem-per-gpu=1000M\n");
  ASSERT_TRUE(gpu.errors.empty()) << Errors(gpu);
  EXPECT_DOUBLE_EQ(gpu.spec["memory_gb"].get<double>(), 2.097152);
  EXPECT_FALSE(
      Parse("#!/bin/sh\n#SBATCH --mem=0\n").spec.contains("memory_gb"));  // all of it: no limit
}

TEST(Sbatch, GpuRequestsInEveryForm) {
  auto gpus = [](const std::string& directives) {
    SbatchJob j = Parse("#!/bin/sh\n" + directives + "\n");
    EXPECT_TRUE(j.errors.empty()) << directives << ": " << Errors(j);
    return std::make_pair(j.spec.value("replicas", 0), j.spec.value("gpus", 0));
  };
  EXPECT_EQ(gpus("#SBATCH --gres=gpu:4"), std::make_pair(1, 4));
  EXPECT_EQ(gpus("#SBATCH --gres=gpu"), std::make_pair(1, 1));
  EXPECT_EQ(gpus("#SBATCH -G 8 -N 2"), std::make_pair(2, 4));  // total over the tasks
  EXPECT_EQ(gpus("#SBATCH --gpus=8 --ntasks=4"), std::make_pair(4, 2));
  EXPECT_EQ(gpus("#SBATCH --gpus-per-node=8 --ntasks-per-node=8 -N 2"), std::make_pair(16, 1));
  EXPECT_EQ(gpus("#SBATCH --gpus-per-task=2 -n 3"), std::make_pair(3, 2));
  EXPECT_EQ(gpus("#SBATCH -n 8 -N 2 --gres=gpu:8"), std::make_pair(8, 2));
  EXPECT_EQ(gpus("#SBATCH -n 6 --ntasks-per-node=3 --gres=gpu:3"), std::make_pair(6, 1));
  EXPECT_EQ(gpus("#SBATCH -N 3-3"), std::make_pair(3, 0));
  SbatchJob model = Parse("#!/bin/sh\n#SBATCH --gpus=A100-80GB:2\n");
  EXPECT_EQ(model.spec["gpu_model"], "A100-80GB");
  // One node, several tasks: all on one node.
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -N 1 --ntasks-per-node=4\n").spec["topology"], "node");
}

TEST(Sbatch, CommandLineOverridesDirectives) {
  SbatchJob j = Parse(
      "#!/bin/sh\n#SBATCH --time=10\n#SBATCH -J script\n#SBATCH -p a100\n#SBATCH --gres=gpu:1\n",
      {"--time", "5:00", "-Jcli", "--partition=h100", "--parsable"});
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["time_limit_s"], 300);
  EXPECT_EQ(j.spec["name"], "cli");
  EXPECT_EQ(j.spec["pool"], "h100");
  EXPECT_EQ(j.spec["gpus"], 1);  // kept from the script
  EXPECT_TRUE(j.parsable);
  // A later directive overrides an earlier one, as in Slurm.
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -t 1\n#SBATCH -t 2\n").spec["time_limit_s"], 120);
}

// SBATCH_* from the submitter's environment: over the script, under the command line; a
// bad value names the variable.
TEST(Sbatch, InputVariablesOverrideTheScript) {
  SbatchContext c = Ctx();
  c.env["SBATCH_TIMELIMIT"] = "10";
  c.env["SBATCH_PARTITION"] = "a100";
  c.env["SBATCH_GRES"] = "gpu:4";
  c.env["SBATCH_EXCLUSIVE"] = "1";
  SbatchJob j = ParseSbatch("job.sh", "#!/bin/sh\n#SBATCH -t 5\n#SBATCH -p h100\n#SBATCH -N 1\n",
                            {"-p", "l40"}, {}, c);
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["time_limit_s"], 600);
  EXPECT_EQ(j.spec["pool"], "l40");
  EXPECT_EQ(j.spec["gpus"], 4);
  EXPECT_EQ(j.spec["exclusive"], true);
  c.env["SBATCH_TIMELIMIT"] = "soon";
  SbatchJob bad = ParseSbatch("job.sh", "#!/bin/sh\n", {}, {}, c);
  EXPECT_NE(Errors(bad).find("SBATCH_TIMELIMIT: --time: expected"), std::string::npos)
      << Errors(bad);
}

// What the 54 public scripts of docs/slurm.md write that Slurm takes: long options by a
// unique prefix, options Gantry has nothing to do for (noted), --cpus-per-gpu, gres gpu:0,
// and --gres with an agreeing --gpus-per-node.
TEST(Sbatch, WhatPublicScriptsWriteIsRead) {
  SbatchJob j = Parse(
      "#!/bin/bash\n#SBATCH --err=e-%j.txt\n#SBATCH --hint=nomultithread\n"
      "#SBATCH --reservation=hug\n#SBATCH --no-requeue\n#SBATCH --gpu-bind=none\n"
      "#SBATCH -N 2\n#SBATCH --gres=gpu:8\n#SBATCH --gpus-per-node=8\n"
      "#SBATCH --cpus-per-gpu=4\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["stderr"], "e-%j.txt");
  EXPECT_EQ(j.spec["gpus"], 8);
  EXPECT_EQ(j.spec["cpus"], 32);
  ASSERT_EQ(j.notes.size(), 3u);  // --gpu-bind=none is the default: nothing to say
  EXPECT_EQ(j.notes[0].rfind("job.sh:5: --no-requeue: accepted: not honoured", 0), 0u)
      << j.notes[0];
  SbatchJob none = Parse("#!/bin/sh\n#SBATCH --gres=gpu:0\n");
  ASSERT_TRUE(none.errors.empty()) << Errors(none);
  EXPECT_FALSE(none.spec.contains("gpus"));
  EXPECT_NE(
      Errors(Parse("#!/bin/sh\n#SBATCH -N 1\n#SBATCH --gres=gpu:4\n#SBATCH --gpus-per-node=8\n"))
          .find("give the GPUs one way"),
      std::string::npos);
}

TEST(Sbatch, DirectivesEndAtTheFirstCommand) {
  SbatchJob j =
      Parse("#!/bin/bash\n#SBATCH -t 5\nmodule load cuda\n#SBATCH -t 50\n#SBATCH --bogus\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["time_limit_s"], 300);
  // Not directives: another case, a word glued on, a commented-out one, an indented one counts.
  SbatchJob k =
      Parse("#!/bin/bash\n#sbatch --bogus\n#SBATCHX --bogus\n##SBATCH --bogus\n  #SBATCH -t 7\n");
  ASSERT_TRUE(k.errors.empty()) << Errors(k);
  EXPECT_EQ(k.spec["time_limit_s"], 420);
  // Quoted values keep their blanks.
  EXPECT_EQ(Parse("#!/bin/sh\n#SBATCH -J \"my job\"\n").spec["name"], "my job");
}

TEST(Sbatch, ErrorsNameTheScriptLineAndDirective) {
  SbatchJob j = Parse(
      "#!/bin/bash\n"
      "#SBATCH --frobnicate=1\n"
      "#SBATCH --licenses=matlab:1\n"
      "#SBATCH --time=1:2:3:4\n"
      "#SBATCH --gres=nic:1\n"
      "#SBATCH --qos=urgent\n"
      "#SBATCH --dependency=afterburstbuffer:j4\n"
      "#SBATCH -o out-%Z.txt\n"
      "#SBATCH --signal=FOO@10\n"
      "#SBATCH -J \"open\n"
      "#SBATCH -Y\n",
      {"--partition=a,b"});
  const std::string e = Errors(j);
  for (const char* want :
       {"job.sh:2: --frobnicate: unknown", "job.sh:3: --licenses: not supported",
        "job.sh:4: --time: expected MM", "job.sh:5: --gres: only GPUs",
        "job.sh:7: --dependency: afterburstbuffer is not supported",
        "job.sh:8: --output: unknown field %Z", "job.sh:9: --signal: unknown signal \"FOO\"",
        "job.sh:10: #SBATCH: a quote is not closed", "job.sh:11: -Y: unknown",
        "command line: --partition: give one pool"}) {
    EXPECT_NE(e.find(want), std::string::npos) << "missing \"" << want << "\" in:\n" << e;
  }
  EXPECT_EQ(j.errors.size(), 10u) << e;
  // A QoS is the site's name for a tier: gantryd resolves it (the config's site.qos), and
  // its refusal is shown at this line.
  EXPECT_EQ(j.spec["tier"], "urgent");
  EXPECT_EQ(j.origin["tier"], "job.sh:6: --qos=urgent");
  EXPECT_NE(Errors(Parse("echo no shebang\n"))
                .find("job.sh:1: script: this does not look like a batch script"),
            std::string::npos);
}

// --constraint goes to gantryd, which resolves it over the site's node features.
TEST(Sbatch, AConstraintIsPassedOnWithItsLine) {
  SbatchJob j = Parse("#!/bin/sh\n#SBATCH -C \"[a100|h100]\"\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["constraint"], "[a100|h100]");
  EXPECT_EQ(j.origin["constraint"], "job.sh:2: --constraint=[a100|h100]");
}

// -N above 1 with tasks per node: exactly that many distinct nodes (issue 47 A3).
TEST(Sbatch, NodesAboveOneAreDistinctNodesWithTheirTasks) {
  SbatchJob j =
      Parse("#!/bin/sh\n#SBATCH -N 4\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:4\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["replicas"], 8);
  EXPECT_EQ(j.spec["workers_per_node"], 2);
  EXPECT_EQ(j.spec["gpus"], 2);
  SbatchJob one = Parse("#!/bin/sh\n#SBATCH -N 1\n#SBATCH -n 4\n");
  EXPECT_FALSE(one.spec.contains("workers_per_node"));
  EXPECT_EQ(one.spec["topology"], "node");
  SbatchJob spread = Parse("#!/bin/sh\n#SBATCH --nodes=3\n");
  EXPECT_EQ(spread.spec["workers_per_node"], 1);
}

// -N MIN-MAX: an elastic job (issue 46 section 2). As Slurm's, it starts at the most
// nodes that fit (at least MIN) and keeps that size; with our --gantry-checkpoint it also
// grows and shrinks at its checkpoints.
TEST(Sbatch, ANodeRangeIsAnElasticJob) {
  SbatchJob j =
      Parse("#!/bin/sh\n#SBATCH -N 2-4\n#SBATCH --ntasks-per-node=8\n#SBATCH --gres=gpu:8\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  EXPECT_EQ(j.spec["replicas"], 32);
  EXPECT_EQ(j.spec["min_replicas"], 16);
  EXPECT_EQ(j.spec["workers_per_node"], 8);
  EXPECT_EQ(j.spec["gpus"], 1);
  EXPECT_FALSE(j.spec.contains("checkpoint_s")) << "Slurm's -N MIN-MAX never resizes";
  SbatchJob nodes = Parse("#!/bin/sh\n#SBATCH --nodes=1-3\n#SBATCH --gantry-checkpoint=10:00\n");
  ASSERT_TRUE(nodes.errors.empty()) << Errors(nodes);
  EXPECT_EQ(nodes.spec["replicas"], 3);
  EXPECT_EQ(nodes.spec["min_replicas"], 1);
  EXPECT_EQ(nodes.spec["workers_per_node"], 1);
  EXPECT_EQ(nodes.spec["checkpoint_s"], 600);
  SbatchJob same = Parse("#!/bin/sh\n#SBATCH -N 2-2\n");
  EXPECT_FALSE(same.spec.contains("min_replicas"));
  EXPECT_EQ(same.spec["replicas"], 2);
}

// GPUs that do not divide over a node's tasks: one worker a node holds the node's GPUs,
// CPUs and memory, standing for its tasks, which srun runs (all seeing those GPUs, as
// under Slurm).
TEST(Sbatch, GpusThatDoNotDivideOverTheTasksAreTheNodesTasksToShare) {
  SbatchJob one = Parse(
      "#!/bin/sh\n#SBATCH -n 2\n#SBATCH --gres=gpu:1\n#SBATCH -c 3\n"
      "#SBATCH --mem-per-cpu=1G\n");
  ASSERT_TRUE(one.errors.empty()) << Errors(one);
  EXPECT_EQ(one.spec["replicas"], 1);
  EXPECT_EQ(one.spec["tasks_per_worker"], 2);
  EXPECT_EQ(one.spec["gpus"], 1);
  EXPECT_EQ(one.spec["cpus"], 6);
  EXPECT_NEAR(one.spec["memory_gb"].get<double>(), 6 * 1.073741824, 1e-6);  // 6 GiB
  EXPECT_FALSE(one.spec.contains("fewest_nodes"));
  EXPECT_FALSE(one.spec.contains("workers_per_node"));
  EXPECT_EQ(one.spec["env"]["SLURM_NTASKS"], "2");
  EXPECT_EQ(one.spec["env"]["SLURM_CPUS_PER_TASK"], "3");

  SbatchJob two = Parse(
      "#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=4\n#SBATCH --gres=gpu:2\n"
      "#SBATCH --mem=64G\n");
  ASSERT_TRUE(two.errors.empty()) << Errors(two);
  EXPECT_EQ(two.spec["replicas"], 2);
  EXPECT_EQ(two.spec["tasks_per_worker"], 4);
  EXPECT_EQ(two.spec["workers_per_node"], 1);
  EXPECT_EQ(two.spec["gpus"], 2);
  EXPECT_NEAR(two.spec["memory_gb"].get<double>(), 64 * 1.073741824, 1e-6);
  EXPECT_EQ(two.spec["env"]["SLURM_NTASKS"], "8");
  EXPECT_EQ(two.spec["env"]["SLURM_NTASKS_PER_NODE"], "4");

  SbatchJob total = Parse("#!/bin/sh\n#SBATCH -n 4\n#SBATCH --gpus=3\n");  // -n alone: one node
  ASSERT_TRUE(total.errors.empty()) << Errors(total);
  EXPECT_EQ(total.spec["replicas"], 1);
  EXPECT_EQ(total.spec["tasks_per_worker"], 4);
  EXPECT_EQ(total.spec["gpus"], 3);

  SbatchJob range = Parse("#!/bin/sh\n#SBATCH -N 1-3 --ntasks-per-node=3\n#SBATCH --gres=gpu:2\n");
  ASSERT_TRUE(range.errors.empty()) << Errors(range);
  EXPECT_EQ(range.spec["replicas"], 3);
  EXPECT_EQ(range.spec["min_replicas"], 1);
  EXPECT_EQ(range.spec["tasks_per_worker"], 3);
}

// --container-image as pyxis names images (REGISTRY#IMAGE, docker://) is podman's
// reference; an enroot squashfs file or credentials in the name are refused at the line.
TEST(Sbatch, PyxisImageNamesArePodmans) {
  auto image = [](const std::string& v) {
    return Parse("#!/bin/sh\n#SBATCH --container-image=" + v + "\n");
  };
  EXPECT_EQ(image("nvcr.io#nvidia/pytorch:24.01-py3").spec["image"],
            "nvcr.io/nvidia/pytorch:24.01-py3");
  EXPECT_EQ(image("docker://nvcr.io#nvidia/nemo:24.05").spec["image"], "nvcr.io/nvidia/nemo:24.05");
  EXPECT_EQ(image("docker.io/library/ubuntu:22.04").spec["image"],
            "docker.io/library/ubuntu:22.04");
  EXPECT_EQ(image("ubuntu:22.04").spec["image"], "ubuntu:22.04");
  EXPECT_NE(Errors(image("/images/pytorch.sqsh")).find("an enroot squashfs file"),
            std::string::npos);
  EXPECT_NE(Errors(image("docker://")).find("--container-image: give an image"), std::string::npos);
  EXPECT_NE(Errors(image("ann@nvcr.io#nvidia/pytorch:24.01-py3")).find("USER@REGISTRY"),
            std::string::npos);
}

TEST(Sbatch, CombinationsGantryCannotExpressAreRefused) {
  auto error = [](const std::string& d) { return Errors(Parse("#!/bin/sh\n#SBATCH " + d + "\n")); };
  EXPECT_NE(error("-N 2-4 -n 8").find("--nodes: a range of nodes with --ntasks is not supported"),
            std::string::npos);
  EXPECT_NE(error("-N 2-4 -G 8").find("--nodes: a range of nodes with --gpus is not supported"),
            std::string::npos);
  EXPECT_NE(error("-N 4-2").find("--nodes: the least node count is above the most"),
            std::string::npos);
  EXPECT_NE(error("-G 3 -N 2").find("--gpus: 3 GPUs cannot be split evenly over 2 nodes"),
            std::string::npos);
  EXPECT_NE(error("--gres=gpu:2 -G 2").find("--gpus: give the GPUs one way"), std::string::npos);
  EXPECT_NE(error("-n 5 -N 2").find("--ntasks: 5 tasks cannot be spread evenly over 2 nodes"),
            std::string::npos);
  EXPECT_NE(error("-n 6 -N 2 --ntasks-per-node=2").find("is not --nodes x --ntasks-per-node"),
            std::string::npos);
  EXPECT_NE(
      error("--time=1 --signal=USR1@60").find("--signal: the signal comes 60 s before the limit"),
      std::string::npos);
  EXPECT_NE(error("--mem=1G --mem-per-cpu=1G").find("give the memory one way"), std::string::npos);
  EXPECT_NE(error("--mem-per-cpu=1G").find("needs --cpus-per-task"), std::string::npos);
  EXPECT_NE(error("--dependency=afterok:1?afterok:2,afterany:3").find("not both"),
            std::string::npos);
  EXPECT_NE(error("--dependency=singleton?afterok:2").find("singleton in a '?' list"),
            std::string::npos);
  EXPECT_NE(error("--dependency=afterok:j1+5").find("+TIME is not supported"), std::string::npos);
  EXPECT_NE(error("--export=NONE,LR").find("NONE cannot be combined"), std::string::npos);
  EXPECT_NE(error("--parsable=1").find("--parsable: takes no value"), std::string::npos);
  EXPECT_NE(error("--time").find("--time: needs a value"), std::string::npos);
  EXPECT_NE(error("-N 0").find("--nodes: expected a whole number of at least 1"),
            std::string::npos);
}

// The submitter's nice value, as Slurm's sbatch says it (SLURM_PRIO_PROCESS); not applied.
TEST(Sbatch, TheSubmittersNiceValueIsSaid) {
  SbatchContext c = Ctx();
  c.nice = "5";
  EXPECT_EQ(ParseSbatch("job.sh", "#!/bin/sh\n", {}, {}, c).spec["env"]["SLURM_PRIO_PROCESS"], "5");
  EXPECT_FALSE(Parse("#!/bin/sh\n").spec["env"].contains("SLURM_PRIO_PROCESS")) << "not known";
}

TEST(Sbatch, ExportListsAndSignals) {
  SbatchJob j = Parse("#!/bin/sh\n#SBATCH --export=LR,EXTRA=1 --signal=TERM\n");
  ASSERT_TRUE(j.errors.empty()) << Errors(j);
  // As Slurm's: the list as given, which srun in the job takes as its --export.
  EXPECT_EQ(j.spec["env"], json({{"LR", "0.1"},
                                 {"EXTRA", "1"},
                                 {"SLURM_EXPORT_ENV", "LR,EXTRA=1"},
                                 {"SLURM_GET_USER_ENV", "1"},
                                 {"SLURM_SUBMIT_DIR", "/home/ann/run"},
                                 {"SLURM_SUBMIT_HOST", "login1"}}));
  EXPECT_EQ(j.spec["grace_s"], 60);  // Slurm's default lead time
  EXPECT_FALSE(j.spec.contains("time_limit_s"));
  SbatchJob all = Parse("#!/bin/sh\n#SBATCH --export=ALL,EXTRA=2\n");
  EXPECT_EQ(all.spec["env"]["HOME"], "/home/ann");
  EXPECT_EQ(all.spec["env"]["EXTRA"], "2");
  EXPECT_NE(Errors(Parse("#!/bin/sh\n#SBATCH --export=GANTRY_TOKEN\n"))
                .find("cannot export \"GANTRY_TOKEN\""),
            std::string::npos);
}

TEST(Sbatch, SplitsTheCommandLine) {
  std::vector<std::string> options, args;
  std::string script;
  ASSERT_TRUE(SplitSbatchArgs({"-N", "2", "--time=5", "-t", "7", "--parsable", "--mail-user", "x",
                               "run.sh", "-N", "--lr", "0.1"},
                              options, script, args));
  EXPECT_EQ(options, (std::vector<std::string>{"-N", "2", "--time=5", "-t", "7", "--parsable",
                                               "--mail-user", "x"}));
  EXPECT_EQ(script, "run.sh");
  EXPECT_EQ(args, (std::vector<std::string>{"-N", "--lr", "0.1"}));
  options.clear();
  EXPECT_FALSE(SplitSbatchArgs({"--parsable"}, options, script, args));
}

// Random lines and random directives give errors or a spec, never a crash.
TEST(Sbatch, RandomScriptsNeverCrash) {
  std::mt19937 rng(20260115);
  const std::vector<std::string> words = {"#SBATCH",   "--time=",
                                          "-t",        "1-",
                                          ":",         "--gres=gpu:",
                                          "-N",        "--nodes=",
                                          "-n",        "--ntasks-per-node=",
                                          "-G",        "--mem=",
                                          "G",         "--signal=",
                                          "B:",        "@",
                                          "--array=",  "--dependency=afterok:",
                                          "-o",        "%j",
                                          "%",         "\"",
                                          "'",         "#",
                                          "=",         "-",
                                          "--",        "0",
                                          "1",         "99999999999",
                                          "--export=", "ALL",
                                          "NONE",      ",",
                                          "-J",        " ",
                                          "\t",        "\r",
                                          "x"};
  for (int n = 0; n < 3000; ++n) {
    std::string text = rng() % 8 == 0 ? "" : "#!/bin/sh\n";
    const int lines = static_cast<int>(rng() % 6);
    for (int l = 0; l < lines; ++l) {
      std::string line = rng() % 2 ? "#SBATCH " : "";
      const int parts = static_cast<int>(rng() % 7);
      for (int p = 0; p < parts; ++p) line += words[rng() % words.size()];
      text += line + "\n";
    }
    std::vector<std::string> options;
    for (int p = static_cast<int>(rng() % 3); p > 0; --p)
      options.push_back(words[rng() % words.size()]);
    SbatchJob j = Parse(text, options);
    if (j.errors.empty()) {
      EXPECT_TRUE(j.spec.contains("replicas")) << text;
      EXPECT_EQ(j.spec["script"], text);
    }
    std::string error;
    (void)ParseSlurmTime(words[rng() % words.size()] + words[rng() % words.size()], error);
    static const std::vector<std::string> clock = {
        "now", "+",  "-",  "1",    "12",    ":",           "/",    ".", "T",
        " ",   "pm", "am", "hour", "2026-", "99999999999", "noon", "x", "-12-24"};
    std::string when;
    for (int p = static_cast<int>(rng() % 6); p > 0; --p) when += clock[rng() % clock.size()];
    (void)ParseSlurmBeginTime(when, 1796130327, error);
  }
}

TEST(OutputPatterns, ExpandForEachWorker) {
  spec::OutputNames n{"j41_3", "train", "j41", "3", "h100-2", "ann", 5, 1, ""};
  EXPECT_EQ(spec::ExpandOutputPattern("%x-%j-%A_%a-%N-%n-%u-%t-100%%.out", n),
            "train-j41_3-j41_3-h100-2-1-ann-5-100%.out");
  EXPECT_EQ(spec::ExpandOutputPattern("%J-%s.out", n), "j41_3-batch.out") << "a batch script";
  spec::OutputNames step = n;  // srun -o
  step.step = "2";
  EXPECT_EQ(spec::ExpandOutputPattern("%J-%s-%3t.out", step), "j41_3.2-2-005.out");
  EXPECT_FALSE(spec::CheckOutputPattern("slurm-%j.out"));
  EXPECT_TRUE(spec::CheckOutputPattern("a%"));
  EXPECT_TRUE(spec::CheckOutputPattern("%5q"));
  EXPECT_TRUE(spec::CheckOutputPattern("out-%3"));
  // A width pads numbers with zeros (at most 10), as Slurm's; names stay as they are.
  EXPECT_EQ(spec::ExpandOutputPattern("%3a-%2t-%5j-%J-%12n", n), "003-05-j41_3-j41_3-0000000001");
  EXPECT_FALSE(spec::CheckOutputPattern("%3a_%J.out"));
  EXPECT_TRUE(spec::PatternPerRank("o-%3t"));
  EXPECT_TRUE(spec::PatternPerRank("o-%t"));
  EXPECT_FALSE(spec::PatternPerRank("o-%%t"));
  EXPECT_EQ(spec::SignalNumber("SIGUSR1"), spec::SignalNumber("USR1"));
  EXPECT_EQ(spec::SignalNumber("10"), 10);
  EXPECT_EQ(spec::SignalNumber("99"), -1);
  EXPECT_EQ(spec::SignalNumber("USR3"), -1);
}

TEST(OutputPatterns, HostListsAndTasksPerNode) {
  EXPECT_EQ(spec::HostList({"h100-0", "h100-1", "h100-2", "h100-5", "cpu-0"}),
            "h100-[0-2,5],cpu-0");
  EXPECT_EQ(spec::HostList({"node07", "node08", "node10"}), "node[07-08,10]");
  EXPECT_EQ(spec::HostList({"login"}), "login");
  EXPECT_EQ(spec::HostList({"a-3"}), "a-3");
  EXPECT_EQ(spec::TasksPerNode({2, 2, 2, 1}), "2(x3),1");
  EXPECT_EQ(spec::TasksPerNode({4}), "4");
}

TEST(OutputPatterns, HostListsExpandBackToTheirNames) {
  using V = std::vector<std::string>;
  EXPECT_EQ(spec::ExpandHostList("h100-[0-2,5],cpu-0"),
            V({"h100-0", "h100-1", "h100-2", "h100-5", "cpu-0"}));
  EXPECT_EQ(spec::ExpandHostList("node[08-10]x"), V({"node08x", "node09x", "node10x"}));
  EXPECT_EQ(spec::ExpandHostList("login"), V({"login"}));
  EXPECT_EQ(spec::ExpandHostList(""), V());
  for (const char* bad :
       {"n[", "n]", "n[1-", "n[3-1]", "n[a]", "n[[1]]", "n[1]x[2]", "n[0-999999]"})
    EXPECT_FALSE(spec::ExpandHostList(bad)) << bad;
  // Compressing and expanding give the names back, whatever they are.
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    V names;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) {
      const std::string prefix =
          std::string(1, static_cast<char>('a' + rng() % 3)) + (rng() % 2 ? "-" : "");
      std::string num = std::to_string(rng() % 12);
      if (rng() % 4 == 0) num = "0" + num;
      std::string name = prefix + num;
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    auto back = spec::ExpandHostList(spec::HostList(names));
    ASSERT_TRUE(back) << spec::HostList(names);
    V sorted = names, got = *back;
    std::sort(sorted.begin(), sorted.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, sorted) << spec::HostList(names);
    // Random bytes: an answer or nullopt, never a crash.
    std::string junk;
    for (int k = 0; k < 12; ++k) junk += "ab0123-[],"[rng() % 10];
    (void)spec::ExpandHostList(junk);
  }
}

// --partition as a pool: the job reader resolves it, the placer and WhyInfeasible keep
// to it, and the batch fields are read and checked.
TEST(SbatchSpec, APoolRestrictsPlacementAndTheBatchFieldsAreChecked) {
  spec::Diagnostics diags;
  auto config = spec::ParseClusterConfig(
      "cluster: t\npools:\n  - {name: h100, count: 1, gpus: 8, gpu_model: H100-80GB}\n"
      "  - {name: small, count: 1, gpus: 2, gpu_model: H100-80GB}\n  - {name: empty, count: 0, "
      "gpus: 8, gpu_model: "
      "H100-80GB}\nqueues:\n  - {name: default}\n",
      "cluster.yaml", diags);
  ASSERT_TRUE(config) << diags.ToString();
  const core::Cluster& cluster = config->cluster;
  auto job = spec::ParseJobJson(
      R"({"pool": "small", "gpus": 1, "vram_gb": 1, "name": "t", "signal": "USR1",
                                    "script": "#!/bin/sh\ntrue\n", "stdout": "o-%j", "stderr": "e-%t"})",
      "job.json", *config, diags);
  ASSERT_TRUE(job) << diags.ToString();
  EXPECT_EQ(job->name, "t");
  EXPECT_EQ(job->stop_signal, spec::SignalNumber("USR1"));
  EXPECT_EQ(job->stdout_path, "o-%j");
  EXPECT_EQ(job->stderr_path, "e-%t");
  EXPECT_FALSE(core::PoolAccepts(cluster, *job, core::PoolId(0)));
  EXPECT_TRUE(core::PoolAccepts(cluster, *job, core::PoolId(1)));
  EXPECT_FALSE(core::WhyInfeasible(*job, cluster)) << *core::WhyInfeasible(*job, cluster);
  job->gpus = 4;  // more than a node of the pool has, though the other pool has 8
  auto why = core::WhyInfeasible(*job, cluster);
  ASSERT_TRUE(why);
  job->pool = core::PoolId(2);
  EXPECT_EQ(core::WhyInfeasible(*job, cluster), "pool empty has no nodes");

  spec::Diagnostics bad;
  EXPECT_FALSE(
      spec::ParseJobJson(R"({"pool": "nope", "script": "echo", "stdout": "%Q", "signal": "USR9",
                                      "command": ["x"]})",
                         "job.json", *config, bad));
  const std::string text = bad.ToString();
  for (const char* want :
       {"pool: unknown pool \"nope\" (known: h100, small, empty)", "script: must start with #!",
        "stdout: unknown field %Q", "signal: unknown signal \"USR9\""}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << " not in:\n" << text;
  }
  spec::Diagnostics tasks;
  EXPECT_FALSE(spec::ParseJobJson(R"({"tasks_per_worker": 2, "command": ["x"]})", "job.json",
                                  *config, tasks));
  EXPECT_NE(tasks.ToString().find("tasks_per_worker: is a batch job's (srun runs the tasks): "
                                  "needs a script"),
            std::string::npos)
      << tasks.ToString();
  spec::Diagnostics many;
  EXPECT_FALSE(spec::ParseJobJson(
      R"({"replicas": 1000, "tasks_per_worker": 1000, "script": "#!/bin/sh\n", "command": ["x"]})",
      "job.json", *config, many));
  EXPECT_NE(many.ToString().find("tasks_per_worker: times replicas is above 100000 tasks, got "
                                 "1000000"),
            std::string::npos)
      << many.ToString();
}

// sbatch --exclusive: a job that asks for all of a node's GPUs takes its CPUs and memory
// too, so the node is its alone; one that asks for part of them is refused, with why.
TEST(SbatchSpec, AnExclusiveJobTakesWholeNodes) {
  spec::Diagnostics diags;
  auto config = spec::ParseClusterConfig(
      "cluster: t\npools:\n  - {name: h100, count: 2, gpus: 8, gpu_model: H100-80GB, cpus: 96, "
      "memory_gb: 1000}\n  - {name: a100, count: 1, gpus: 8, gpu_model: A100-80GB, cpus: 64, "
      "memory_gb: 512}\nqueues:\n  - {name: default}\n",
      "cluster.yaml", diags);
  ASSERT_TRUE(config) << diags.ToString();
  SbatchJob whole = Parse(
      "#!/bin/sh\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
      "#SBATCH --gres=gpu:8\n#SBATCH -p h100\n#SBATCH --exclusive\n");
  ASSERT_TRUE(whole.errors.empty()) << Errors(whole);
  EXPECT_EQ(whole.spec["exclusive"], true);
  auto job = spec::ParseJobJson(whole.spec.dump(), "job.json", *config, diags);
  ASSERT_TRUE(job) << diags.ToString();
  EXPECT_EQ(job->cpus_milli, 48000);  // half of a node's 96 CPUs for each of its 2 tasks
  EXPECT_EQ(job->memory_bytes, 500'000'000'000);
  spec::Diagnostics part;
  EXPECT_FALSE(spec::ParseJobJson(
      R"({"pool": "h100", "gpus": 4, "vram_gb": 1, "exclusive": true, "script": "#!/bin/sh"})",
      "job.json", *config, part));
  EXPECT_NE(part.ToString().find("pool h100's nodes have 8 and the job asks 4 per node"),
            std::string::npos)
      << part.ToString();
  spec::Diagnostics shapes;  // no -p: two pools of 8 GPUs, different CPUs
  EXPECT_FALSE(
      spec::ParseJobJson(R"({"gpus": 8, "vram_gb": 1, "exclusive": true, "script": "#!/bin/sh"})",
                         "job.json", *config, shapes));
  EXPECT_NE(shapes.ToString().find("different CPUs or memory: give one (-p)"), std::string::npos)
      << shapes.ToString();
}

json Job(const std::string& state, const std::string& reason = "") {
  return json{{"id", "j7"},
              {"queue", "nlp"},
              {"user", "ann"},
              {"tier", "standard"},
              {"state", state},
              {"reason", reason},
              {"replicas", 2},
              {"gpus", 4},
              {"nodes", {"h100-0", "h100-1"}},
              {"pool", "h100"},
              {"submit", 1000.0},
              {"start", 1100.0},
              {"end", state == "running" ? json() : json(4700.0)},
              {"run_start", 1100.0},
              {"time_limit_s", 7200.0},
              {"name", "train"},
              {"cpus", 2.5},
              {"usage", {{"gpu_hours", 4.0}}},
              {"preemptions", 0},
              {"requeues", 0}};
}

TEST(SlurmFormat, SqueueLettersAndNames) {
  std::string error;
  auto cols = ParseSqueueFormat("%.6i %9P %j %u %q %T %t %M %l %D %R %b %a %%", error);
  ASSERT_TRUE(cols) << error;
  std::vector<std::string> heads, values;
  for (const Column& c : *cols) {
    heads.push_back(ColumnHeader(c, false));
    values.push_back(c.field.empty() ? c.literal : FieldValue(Job("running"), c.field, 1160));
  }
  EXPECT_EQ(RenderRow(*cols, heads, "", true, false),
            " JOBID PARTITION NAME USER QOS STATE ST TIME TIME_LIMIT NODES NODELIST(REASON) "
            "TRES_PER_NODE ACCOUNT %");
  EXPECT_EQ(
      RenderRow(*cols, values, "", true, false),
      "     7 h100      train ann standard RUNNING R 1:00 2:00:00 2 h100-[0-1] gres/gpu:2 nlp %");
  // gantryd's "slurm" names (the site mapping's) where it gives them.
  json named = Job("running");
  named["slurm"] = {{"partition", "gpu"}, {"account", "proj-42"}, {"qos", "normal"}};
  EXPECT_EQ(FieldValue(named, "partition", 0), "gpu");
  EXPECT_EQ(FieldValue(named, "account", 0), "proj-42");
  EXPECT_EQ(FieldValue(named, "qos", 0), "normal");
  EXPECT_FALSE(ParseSqueueFormat("%.5Z", error));
  EXPECT_NE(error.find("unknown field %Z"), std::string::npos);
  auto names = ParseSqueueNames(
      "JobID:.4,Name,UserName:5,State,TimeUsed,TimeLimit,NumNodes,ReasonList,Partition", error);
  ASSERT_TRUE(names) << error;
  EXPECT_EQ((*names)[0].width, 4);
  EXPECT_TRUE((*names)[0].right);
  EXPECT_EQ((*names)[1].width, 20);
  // squeue's %R and %r: Slurm's codes, from the wait's cause.
  auto waiting = [](const std::string& cause, const std::string& reason) {
    json j = Job("pending", reason);
    if (!cause.empty()) j["wait"] = {{"cause", cause}};
    return j;
  };
  EXPECT_EQ(FieldValue(waiting("quota", "queue nlp is at its burst"), "reasonlist", 0),
            "(AssocGrpGRES)");
  for (const auto& [cause, reason, code] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"capacity", "capacity: no room", "Resources"},
           {"preemption", "preemption under way", "Resources"},
           {"reservation", "reservation: held for j3", "Priority"},
           {"budget", "budget: spent", "AssocGrpBillingMinutes"},
           {"window", "window: opens at 22:00", "BeginTime"},
           {"not yet placed", "waiting for the next scheduling pass", "None"},
           {"", "dependency: waiting for j3 to finish", "Dependency"},
           {"", "dependency never satisfied: dependency j3 ended failed, so ...",
            "DependencyNeverSatisfied"},
           {"", "throttle: at most 2 of array j4's tasks run at once", "JobArrayTaskLimit"}}) {
    EXPECT_EQ(FieldValue(waiting(cause, reason), "reason", 0), code) << cause << " " << reason;
  }
  EXPECT_EQ(FieldValue(Job("failed", "time limit reached (1:00)"), "reason", 0), "TimeLimit");
  EXPECT_EQ(FieldValue(Job("failed", "exited 3"), "reason", 0), "NonZeroExitCode");
  EXPECT_EQ(FieldValue(Job("running", "x"), "reason", 0), "None");
  // sacct -o Reason: why it waits or how it ended, None while it runs and once it finished.
  EXPECT_EQ(FieldValue(Job("reclaimed", "GPU idle for 1800 s"), "reasontext", 0),
            "GPU idle for 1800 s");
  EXPECT_EQ(FieldValue(Job("cancelled", "cancelled by ann"), "reasontext", 0), "cancelled by ann");
  EXPECT_EQ(FieldValue(Job("running", "x"), "reasontext", 0), "None");
  EXPECT_EQ(FieldValue(Job("finished", "exited 0"), "reasontext", 0), "None");
  EXPECT_FALSE(ParseSqueueNames("JobID,Bogus", error));
  EXPECT_NE(error.find("unknown field \"Bogus\""), std::string::npos);
}

TEST(SlurmFormat, SacctStatesExitCodesAndFilters) {
  EXPECT_EQ(SlurmState(Job("finished")), "COMPLETED");
  EXPECT_EQ(SlurmState(Job("failed", "time limit reached: ran 7200 s of its time_limit_s 7200")),
            "TIMEOUT");
  EXPECT_EQ(SlurmState(Job("failed", "worker 0 exited with code 137: out of memory: ...")),
            "OUT_OF_MEMORY");
  EXPECT_EQ(SlurmState(Job("failed", "worker 0 exited with code 1")), "FAILED");
  EXPECT_EQ(SlurmState(Job("cancelled")), "CANCELLED");
  EXPECT_EQ(SlurmState(Job("stopping", "preempt: by j9")), "PREEMPTED");
  json requeued = Job("pending");
  requeued["preemptions"] = 1;
  EXPECT_EQ(SlurmState(requeued), "REQUEUED");
  EXPECT_EQ(SlurmState(Job("pending")), "PENDING");
  json failed = Job("failed", "worker 0 killed by signal 9");
  failed["exit_code"] = 137;
  failed["exit_signal"] = 9;
  EXPECT_EQ(FieldValue(failed, "exitcode", 0), "0:9");
  failed.erase("exit_signal");
  failed["exit_code"] = 3;
  EXPECT_EQ(FieldValue(failed, "exitcode", 0), "3:0");
  EXPECT_EQ(FieldValue(Job("finished"), "timeused", 0), "1:00:00");
  EXPECT_EQ(FieldValue(Job("finished"), "alloctres", 0), "cpu=6,gres/gpu=4,node=2");
  EXPECT_EQ(FieldValue(Job("finished"), "gpuhours", 0), "4.000");
  EXPECT_EQ(FieldValue(Job("finished"), "starttime", 0), "1970-01-01T00:18:20");
  EXPECT_EQ(NormalizeState("cd"), "COMPLETED");
  EXPECT_EQ(NormalizeState("TO"), "TIMEOUT");
  EXPECT_EQ(NormalizeState("bogus"), "");

  std::string error;
  auto cols = ParseSacctFormat("JobID,JobName%5,State,ExitCode", error);
  ASSERT_TRUE(cols) << error;
  std::vector<std::string> v;
  for (const Column& c : *cols) v.push_back(FieldValue(Job("finished"), c.field, 0));
  // JobID the number, as Slurm's (j7 is job 7).
  EXPECT_EQ(RenderRow(*cols, v, "|", false, false), "7|train|COMPLETED|0:0");
  EXPECT_EQ(RenderRow(*cols, v, "|", false, true), "7|train|COMPLETED|0:0|");
  EXPECT_EQ(RenderRow(*cols, v, " ", true, false), "             7 train   COMPLETED      0:0");
  json named = Job("finished");
  named["id"] = "train";
  named["seq"] = 9;
  EXPECT_EQ(FieldValue(named, "jobarrayid", 0), "9");  // a job its user named: its number
  EXPECT_EQ(FieldValue(named, "jobid", 0), "9");
  // An array task: sacct's JobID (squeue's %i) its array's number and its index, JobIDRaw
  // (squeue's %A, -O JobID) its own number, as Slurm 22.05's.
  named["id"] = "j41_3";
  named["array"] = "j41";
  named["array_index"] = 3;
  named["number"] = 45;
  EXPECT_EQ(FieldValue(named, "jobarrayid", 0), "41_3");
  EXPECT_EQ(FieldValue(named, "jobid", 0), "45");
  EXPECT_EQ(FieldValue(named, "arrayjobid", 0), "41");
  EXPECT_TRUE(JobIsOneOf(named, {"41_3"}));  // squeue -j 41_3, as Slurm's
  EXPECT_TRUE(JobIsOneOf(named, {"j41_3"}));
  EXPECT_TRUE(JobIsOneOf(named, {"45"}));  // its own number
  EXPECT_TRUE(JobIsOneOf(named, {"41"}));  // its array's, which stands for every task
  EXPECT_FALSE(JobIsOneOf(named, {"41_4"}));
  EXPECT_FALSE(JobIsOneOf(named, {"44"}));
  named["id"] = "j41_3.batch";
  EXPECT_EQ(FieldValue(named, "jobarrayid", 0), "41_3.batch");
  EXPECT_EQ(FieldValue(named, "jobid", 0), "45.batch");
  named["array"] = "sweep";  // an array its user named: its number from gantryd
  named["array_number"] = 41;
  EXPECT_EQ(FieldValue(named, "jobarrayid", 0), "41_3.batch");
  auto raw = ParseSacctFormat("JobID,JobIDRaw", error);
  ASSERT_TRUE(raw) << error;
  EXPECT_EQ(ColumnHeader((*raw)[0], true) + " " + ColumnHeader((*raw)[1], true), "JobID JobIDRaw");
  EXPECT_FALSE(ParseSacctFormat("JobID,Nope", error));

  AcctFilter f;
  f.start = 2000;
  f.end = 3000;
  EXPECT_TRUE(AcctMatches(Job("finished"), f));  // ran over the window
  f.start = 5000;
  f.end = 6000;
  EXPECT_FALSE(AcctMatches(Job("finished"), f));  // ended before it
  EXPECT_TRUE(AcctMatches(Job("running"), f));
  f.states = {"RUNNING"};
  f.users = {"bob"};
  EXPECT_FALSE(AcctMatches(Job("running"), f));
  f.users = {"ann"};
  f.accounts = {"nlp"};
  EXPECT_TRUE(AcctMatches(Job("running"), f));
  json by_site = Job("running");  // -A by the site's account name, or Gantry's queue
  by_site["slurm"] = {{"account", "proj-42"}};
  f.accounts = {"proj-42"};
  EXPECT_TRUE(AcctMatches(by_site, f));
  EXPECT_FALSE(AcctMatches(Job("running"), f));
  f.accounts = {"nlp"};
  EXPECT_TRUE(AcctMatches(by_site, f));
  f.jobs = {"j8"};
  EXPECT_FALSE(AcctMatches(Job("running"), f));
}

}  // namespace
}  // namespace gantry::cli
