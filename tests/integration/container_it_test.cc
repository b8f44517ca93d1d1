// Containers (issue 15 item 5): a job that names an image runs in it through the node's
// podman, on the real gantryd and agent, with an image the test builds from Debian's
// busybox-static (no registry): the command runs inside (the host's files are not there),
// with the job's environment and working directory; its exit status is the job's; a
// cancel stops it within its grace and leaves no container; a container whose agent died
// is removed by the agent that replaces it.
// Skips, saying why, where podman is missing or cannot run a container on this machine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "harness.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImage = "localhost/gantry-it:busybox";

constexpr const char* kContainerCluster = R"(cluster: containers
pools:
  - name: podman
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
queues:
  - name: research
)";

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The `--container-run` that runs a container here: podman's defaults, else what a
// sandbox without CAP_SYS_RESOURCE and with hybrid cgroups needs (runc, ulimits no higher
// than the machine's). Empty with *why when none does.
std::string PodmanRun(std::string* why) {
  if (Run({"podman", "--version"}).rc != 0) {
    *why = "podman is not installed (scripts/setup.sh installs it)";
    return "";
  }
  if (Run({"podman", "image", "exists", kImage}).rc != 0) {
    if (!fs::exists("/bin/busybox")) {
      *why = "no /bin/busybox to build the test image from (Debian's busybox-static)";
      return "";
    }
    RunResult built =
        Run({"sh", "-c",
             "set -e; d=$(mktemp -d); mkdir -p $d/bin $d/tmp; cp /bin/busybox $d/bin/; "
             "for a in sh sleep echo cat env pwd test ls id; do ln -s busybox $d/bin/$a; done; "
             "tar -C $d -c . | podman import - " +
                 std::string(kImage) + "; rm -rf $d"},
            {}, 120);
    if (built.rc != 0) {
      *why = "cannot build the test image: " + built.err;
      return "";
    }
  }
  for (const std::string run :
       {"podman run",
        "podman --runtime runc run --ulimit nofile=1024:1024 --ulimit nproc=1000:1000"}) {
    std::vector<std::string> argv = Words(run);
    argv.insert(argv.end(), {"--rm", kImage, "sh", "-c", "exit 0"});
    RunResult r = Run(argv, {}, 120);
    if (r.rc == 0) return run;
    *why = "podman cannot run a container here (" + run + "): " + r.err;
  }
  return "";
}

int ContainersOf(const std::string& label) {
  RunResult r = Run({"podman", "ps", "--all", "--quiet", "--filter", "label=" + label});
  return static_cast<int>(Words(r.out).size());
}

TEST(Containers, AJobRunsInItsImageAndLeavesNoContainerBehind) {
  std::string why;
  const std::string run = PodmanRun(&why);
  if (run.empty()) GTEST_SKIP() << why;
  Harness h("containers");
  h.Setup(kContainerCluster, {{"a", "research"}});
  h.StartServer();
  const int agent = h.StartAgent("podman-0", "", {"--container-run", run});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  const std::string work = h.Path("work");
  fs::create_directories(work);
  auto submit = [&](const std::string& id, const std::vector<std::string>& command,
                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--id", id, "--queue", "research", "--gpus", "1", "--vram-gb", "10",
                             "--image", kImage, "--workdir", work, "--grace-s", "5"});
    args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
    RunResult r = h.Cli(args, h.token("a"));
    ASSERT_EQ(r.rc, 0) << r.err;
  };
  auto state = [&](const std::string& id) { return h.Job(id).value("state", ""); };

  // Inside the image: no host files, the job's variables, its working directory shared.
  submit("inside",
         {"sh", "-c",
          "test -e /etc/debian_version && echo host || echo isolated; "
          "echo node=$GANTRY_NODE job=$GANTRY_JOB_ID extra=$EXTRA; pwd; echo written > out.txt"},
         {"--env", "EXTRA=yes"});
  submit("exit3", {"sh", "-c", "exit 3"});
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return state("inside") == "finished" && state("exit3") == "failed"; }, 60))
      << h.Job("inside").dump() << "\n"
      << h.Job("exit3").dump();
  RunResult logs = h.Cli({"logs", "inside"}, h.token("a"));
  EXPECT_NE(logs.out.find("isolated"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("node=podman-0 job=inside extra=yes"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find(work), std::string::npos) << logs.out;
  EXPECT_EQ(h.Read("work/out.txt"), "written\n");
  EXPECT_EQ(h.Job("exit3").value("exit_code", -1), 3);
  RunResult show = h.Cli({"show", "inside"}, h.token("a"));
  EXPECT_NE(show.out.find(std::string("image         ") + kImage), std::string::npos) << show.out;

  // A cancel stops it (SIGTERM reaches sleep through podman and --init) and the
  // container goes.
  submit("long", {"sleep", "300"});
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return ContainersOf("gantry.job=long") == 1 && state("long") == "running"; }, 60));
  // Another cluster's agent on this machine, of the same node name, starting up: it leaves
  // the container alone (it removed it before the gantry.agent label).
  {
    Harness other("containers-other");
    other.Setup(kContainerCluster, {{"a", "research"}});
    other.StartServer();
    other.StartAgent("podman-0", "", {"--container-run", run});
    ASSERT_TRUE(Harness::WaitFor([&] { return other.NodesUp(1); }, 15));
    EXPECT_EQ(ContainersOf("gantry.job=long"), 1) << "another cluster's agent removed it";
  }
  ASSERT_EQ(h.Cli({"cancel", "long"}, h.token("a")).rc, 0);
  EXPECT_TRUE(Harness::WaitFor([&] { return state("long") == "cancelled"; }, 15))
      << h.Job("long").dump();
  EXPECT_TRUE(Harness::WaitFor([&] { return ContainersOf("gantry.job=long") == 0; }, 15));

  // An agent killed outright and started again: its successor takes the running
  // container over (its `podman run` runs on under its shim); a cancel then removes it.
  submit("orphan", {"sleep", "300"});
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return ContainersOf("gantry.job=orphan") == 1 && state("orphan") == "running"; }, 60));
  h.StopAgent(agent, SIGKILL);
  EXPECT_EQ(ContainersOf("gantry.job=orphan"), 1) << "podman's conmon keeps it";
  h.StartAgent("podman-0", "", {"--container-run", run});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(ContainersOf("gantry.job=orphan"), 1)
      << "the successor removed the container it re-adopted";
  EXPECT_EQ(state("orphan"), "running");
  EXPECT_EQ(h.Job("orphan").value("run", 0), 1) << "it was requeued";
  ASSERT_EQ(h.Cli({"cancel", "orphan"}, h.token("a")).rc, 0);
  EXPECT_TRUE(Harness::WaitFor([&] { return state("orphan") == "cancelled"; }, 15))
      << h.Job("orphan").dump();
  EXPECT_TRUE(Harness::WaitFor([&] { return ContainersOf("gantry.job=orphan") == 0; }, 30));
  EXPECT_EQ(ContainersOf("gantry.node=podman-0"), 0);
}

// On a root agent running jobs as their users, a container runs as the job's user, and
// the workdir it mounts is made as that user: one where the user may not write is
// neither made nor given to it (before, the agent made it and gave it away, /etc or
// /root/.ssh included), and one that exists stays whose it is.
TEST(Containers, AContainerRunsAsItsUserAndItsWorkdirIsNeverGivenAway) {
  if (::geteuid() != 0) GTEST_SKIP() << "running jobs as another user needs a root agent";
  std::string why;
  const std::string run = PodmanRun(&why);
  if (run.empty()) GTEST_SKIP() << why;
  Harness h("containers-user");
  h.Setup(kContainerCluster, {{"a", "research"}});
  h.AddToken("nobody", {"--team", "a", "--queues", "research", "--user", "nobody"});
  h.StartServer();
  h.StartAgent("podman-0", "", {"--container-run", run, "--run-as", "user"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  fs::create_directories(h.Path("rootonly"));
  fs::permissions(h.Path("rootonly"), fs::perms::owner_all);
  fs::create_directories(h.Path("shared"));
  fs::permissions(h.Path("shared"), fs::perms::all);
  auto submit = [&](const std::string& id, const std::string& workdir, const std::string& command) {
    RunResult r = h.Cli({"submit", "--id", id, "--queue", "research", "--gpus", "1", "--vram-gb",
                         "10", "--image", kImage, "--workdir", workdir, "--", "sh", "-c", command},
                        h.token("nobody"));
    ASSERT_EQ(r.rc, 0) << r.err;
  };
  auto state = [&](const std::string& id) { return h.Job(id).value("state", ""); };
  submit("escape", h.Path("rootonly/ssh"), "true");
  // One that exists below a directory only root may enter: podman's mount would show it.
  fs::create_directories(h.Path("rootonly/public"));
  h.Write("rootonly/public/secret.txt", "root's secret\n");
  submit("peek", h.Path("rootonly/public"), "cat secret.txt");
  // The job's variables go into the container, not to podman (which runs as root): a
  // CONTAINERS_CONF naming the user's own conmon must not have root run it.
  fs::create_directories(h.Path("shared/bin"));
  h.Write("shared/bin/conmon",
          "#!/bin/sh\nid -u > " + h.Path("shared/fake-conmon-ran") + "\nexit 1\n", true);
  h.Write("shared/containers.conf",
          "[engine]\nconmon_path = [\"" + h.Path("shared/bin/conmon") + "\"]\n");
  {
    RunResult r =
        h.Cli({"submit", "--env", "CONTAINERS_CONF=" + h.Path("shared/containers.conf"), "--id",
               "conf", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--image", kImage,
               "--workdir", h.Path("shared"), "--", "/bin/sh", "-c", "echo ran > conf.txt"},
              h.token("nobody"));
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  // sbatch -o naming root's file: podman runs as the agent, but the output file is opened
  // as the job's user, so it is neither truncated nor read back as the job's log.
  h.Write("shared/roots.txt", "root's own\n");
  fs::permissions(h.Path("shared/roots.txt"), fs::perms::owner_read | fs::perms::owner_write);
  h.Write("shared/clobber.sh", "#!/bin/sh\necho clobbered\n", true);
  const RunResult clobber =
      h.Cli({"sbatch", "-A", "research", "-G", "1", "--container-image", kImage, "-D",
             h.Path("shared"), "-o", h.Path("shared/roots.txt"), h.Path("shared/clobber.sh")},
            h.token("nobody"));
  ASSERT_EQ(clobber.rc, 0) << clobber.err;
  ASSERT_EQ(clobber.out.rfind("Submitted batch job ", 0), 0u) << clobber.out;
  std::string clobber_id = "j" + clobber.out.substr(20);  // sbatch prints the number
  while (!clobber_id.empty() && (clobber_id.back() == '\n' || clobber_id.back() == ' '))
    clobber_id.pop_back();
  submit("mine", h.Path("shared"), "id -u > uid.txt");
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return state("escape") == "failed" && state("mine") == "finished"; }, 60))
      << h.Job("escape").dump() << "\n"
      << h.Job("mine").dump();
  EXPECT_NE(
      h.Job("escape").value("reason", "").find("cannot create it as uid 65534: Permission denied"),
      std::string::npos)
      << h.Job("escape").dump();
  EXPECT_FALSE(fs::exists(h.Path("rootonly/ssh")));
  ASSERT_TRUE(Harness::WaitFor([&] { return state("peek") == "failed"; }, 30))
      << h.Job("peek").dump();
  EXPECT_NE(h.Job("peek").value("reason", "").find("not reachable as uid 65534"), std::string::npos)
      << h.Job("peek").dump();
  EXPECT_EQ(h.Cli({"logs", "peek"}, h.token("nobody")).out.find("secret"), std::string::npos);
  EXPECT_EQ(h.Read("shared/uid.txt"), "65534\n");
  ASSERT_TRUE(Harness::WaitFor([&] { return state("conf") == "finished"; }, 60))
      << h.Job("conf").dump();
  EXPECT_EQ(h.Read("shared/conf.txt"), "ran\n");
  EXPECT_FALSE(fs::exists(h.Path("shared/fake-conmon-ran")))
      << "podman, as root, ran the job's conmon: uid " << h.Read("shared/fake-conmon-ran");
  struct stat st {};
  ASSERT_EQ(::stat(h.Path("shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the agent gave an existing workdir to the job's user";
  ASSERT_TRUE(Harness::WaitFor([&] { return state(clobber_id) == "failed"; }, 60))
      << h.Job(clobber_id).dump();
  EXPECT_EQ(h.Read("shared/roots.txt"), "root's own\n");
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Cli({"logs", clobber_id}, h.token("nobody"))
                   .out.find("cannot open the output file") != std::string::npos;
      },
      10))
      << h.Cli({"logs", clobber_id}, h.token("nobody")).out;
  EXPECT_EQ(h.Cli({"logs", clobber_id}, h.token("nobody")).out.find("root's own"),
            std::string::npos);
}

// NVIDIA's pyxis options on srun (`srun --container-image=nvcr.io#nvidia/pytorch:24.01-py3
// --container-mounts=/data:/data:ro ...` in DGX-style batch scripts): the batch script
// runs on the node, each step's tasks in the image through podman, as the job's user, with
// the mounts (read-only where asked) and the working directory inside; a mount the user
// could not reach on the node (below a directory only root may enter) is refused, and an
// enroot squashfs file is refused saying what to give.
TEST(Containers, SrunsPyxisOptionsRunAStepInItsImageWithItsMounts) {
  if (::geteuid() != 0) GTEST_SKIP() << "running jobs as another user needs a root agent";
  std::string why;
  const std::string run = PodmanRun(&why);
  if (run.empty()) GTEST_SKIP() << why;
  Harness h("containers-pyxis");
  h.Setup(kContainerCluster, {{"a", "research"}});
  h.AddToken("nobody", {"--team", "a", "--queues", "research", "--user", "nobody"});
  h.StartServer();
  h.StartAgent("podman-0", "", {"--container-run", run, "--run-as", "user"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  for (const char* d : {"shared", "shared/data", "shared/out"}) {
    fs::create_directories(h.Path(d));
    fs::permissions(h.Path(d), fs::perms::all);
  }
  h.Write("shared/data/in.txt", "input data\n");
  fs::create_directories(h.Path("rootonly/public"));
  fs::permissions(h.Path("rootonly"), fs::perms::owner_all);
  h.Write("rootonly/public/secret.txt", "root's secret\n");
  const std::string shared = h.Path("shared");
  h.Write("shared/steps.sh",
          std::string("#!/bin/sh\n#SBATCH -A research\n#SBATCH -G 1\n") +
              "srun --container-image=" + kImage + " --container-mounts=" + shared +
              "/data:/data:ro," + shared +
              "/out:/out --container-workdir=/out sh -c '"
              "test -e /etc/debian_version && echo host || echo isolated; "
              "cat /data/in.txt; pwd; id -u; echo task $SLURM_PROCID; "
              "echo made > made.txt; echo x > /data/x || echo read-only' "
              "> step.txt 2> step.err\n"
              "test -e /etc/debian_version && echo host > batch.txt\n"
              "srun --container-image=localhost#gantry-it:busybox "
              "--no-container-mount-home sh -c 'echo pyxis name' > pyxis.txt\n"
              "echo piped | srun --container-image=" +
              kImage +
              " cat > stdin.txt\n"
              "srun --container-image=" +
              kImage + " --container-mounts=" + h.Path("rootonly/public") +
              ":/p cat /p/secret.txt > escape.txt 2> escape.err; "
              "echo $? > escape.rc\n"
              "srun --container-image=/images/pytorch.sqsh true 2> sqsh.err; "
              "echo $? > sqsh.rc\n",
          true);
  const RunResult r =
      h.Cli({"sbatch", "--parsable", "-D", shared, h.Path("shared/steps.sh")}, h.token("nobody"));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string id = "j" + r.out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        const std::string st = h.Job(id).value("state", "");
        return st == "finished" || st == "failed";
      },
      90))
      << h.Job(id).dump();
  EXPECT_EQ(h.Read("shared/batch.txt"), "host\n") << "the batch script runs on the node";
  EXPECT_EQ(h.Read("shared/stdin.txt"), "piped\n") << "srun's stdin reaches a task in an image";
  EXPECT_EQ(h.Read("shared/step.txt"), "isolated\ninput data\n/out\n65534\ntask 0\nread-only\n")
      << h.Read("shared/step.err");
  EXPECT_EQ(h.Read("shared/out/made.txt"), "made\n") << "the writable mount, where it was asked";
  EXPECT_FALSE(fs::exists(h.Path("shared/data/x")));
  EXPECT_EQ(h.Read("shared/pyxis.txt"), "pyxis name\n");
  EXPECT_NE(h.Read("shared/escape.rc"), "0\n");
  EXPECT_EQ(h.Read("shared/escape.txt").find("secret"), std::string::npos)
      << "a path the user cannot reach was bound";
  EXPECT_NE(h.Read("shared/escape.err").find("not reachable as uid 65534"), std::string::npos)
      << "why, on the task's stderr: " << h.Read("shared/escape.err");
  EXPECT_NE(h.Read("shared/escape.err").find("task 0: Exited with exit code 127"),
            std::string::npos)
      << h.Read("shared/escape.err");
  EXPECT_EQ(h.Read("shared/sqsh.rc"), "2\n");
  EXPECT_NE(h.Read("shared/sqsh.err").find("an enroot squashfs file"), std::string::npos)
      << h.Read("shared/sqsh.err");
  EXPECT_TRUE(Harness::WaitFor([&] { return ContainersOf("gantry.node=podman-0") == 0; }, 30));
}

}  // namespace
}  // namespace gantry::it
