// Workers are real processes: own process group, a clean environment, output in a log,
// signals reach the whole group.
#include "agent/launcher.h"

#include "agent/cgroup.h"
#include "device_nodes.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <map>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace gantry::agent {
namespace {

namespace fs = std::filesystem;

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-launch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  Exited Wait(pid_t pid) {
    for (int i = 0; i < 500; ++i) {
      for (const Exited& e : Reap()) {
        if (e.pid == pid) return e;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "process " << pid << " did not end";
    return {};
  }
  fs::path dir_;
};

TEST_F(LauncherTest, RunsInItsOwnGroupWithACleanEnvironment) {
  ::setenv("GANTRY_TOKEN", "secret", 1);
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", "/run/mps", 1);
  LaunchSpec spec;
  spec.argv = {"sh", "-c",
               "echo pgid=$(ps -o pgid= $$ | tr -d ' ') pid=$$; echo token=$GANTRY_TOKEN; "
               "echo mps=$CUDA_MPS_PIPE_DIRECTORY; echo job=$JOB_VAR; pwd; echo err >&2; exit 7"};
  spec.env = {{"JOB_VAR", "hello"}};
  spec.workdir = (dir_ / "work").string();
  spec.log_path = (dir_ / "out.log").string();
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  Exited e = Wait(*pid);
  ::unsetenv("GANTRY_TOKEN");
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  EXPECT_EQ(e.exit_code, 7);
  const std::string out = Read("out.log");
  EXPECT_NE(out.find("pgid=" + std::to_string(*pid) + " pid=" + std::to_string(*pid)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("token=\n"), std::string::npos) << out;  // the agent's token does not leak
  EXPECT_NE(out.find("mps=/run/mps\n"), std::string::npos) << out;  // where the MPS daemon listens
  EXPECT_NE(out.find("job=hello"), std::string::npos);
  EXPECT_NE(out.find((dir_ / "work").string()), std::string::npos);
  EXPECT_NE(out.find("err"), std::string::npos);
}

// A workdir a job names is made as its user, never by the agent and given away: else a
// root agent would make /root/.ssh or /etc/cron.d for a job and hand it to its user.
TEST_F(LauncherTest, AWorkdirTheJobNamesIsMadeAsItsUserAndNeverGivenAway) {
  if (::geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  fs::create_directories(dir_ / "closed");
  fs::permissions(dir_ / "closed", fs::perms::owner_all);  // 0700, root's
  fs::create_directories(dir_ / "open");
  fs::permissions(dir_ / "open", fs::perms::all);
  fs::create_directories(dir_ / "roots");
  LaunchSpec spec;
  spec.as_user = true;
  spec.uid = 65534;  // nobody
  spec.gid = 65534;
  auto owner = [](const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? static_cast<long>(st.st_uid) : -1L;
  };
  // Where the user may not write: refused, nothing made.
  spec.workdir = (dir_ / "closed" / "ssh").string();
  Status made = MakeWorkdir(spec);
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().ToString().find("cannot create it as uid 65534: Permission denied"),
            std::string::npos)
      << made.error().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "closed" / "ssh"));
  // A worker launched there fails the same way, before it runs anything.
  spec.argv = {"/bin/true"};
  spec.log_path = (dir_ / "log").string();
  EXPECT_FALSE(Launch(spec));
  // Where the user may: made, theirs, parents included.
  spec.workdir = (dir_ / "open" / "a" / "b").string();
  ASSERT_TRUE(MakeWorkdir(spec));
  EXPECT_EQ(owner(dir_ / "open" / "a"), 65534);
  EXPECT_EQ(owner(dir_ / "open" / "a" / "b"), 65534);
  // One that exists stays whose it is.
  spec.workdir = (dir_ / "roots").string();
  ASSERT_TRUE(MakeWorkdir(spec));
  EXPECT_EQ(owner(dir_ / "roots"), 0);
  // The agent's own is made by the agent and given to the user.
  spec.workdir = (dir_ / "closed" / "work" / "7").string();
  spec.own_workdir = true;
  ASSERT_TRUE(MakeWorkdir(spec));
  EXPECT_EQ(owner(dir_ / "closed" / "work" / "7"), 65534);
}

// What a root agent binds into a container for a job's user (Reachable): only what the
// user could reach on the node. A path below a directory it may not enter is refused,
// named, whatever the path's own mode (podman, as root, would mount it all the same).
TEST_F(LauncherTest, ReachableIsWhatTheUserCouldReachOnTheNode) {
  if (::geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  fs::create_directories(dir_ / "closed" / "public");
  fs::permissions(dir_ / "closed", fs::perms::owner_all);  // 0700, root's
  fs::permissions(dir_ / "closed" / "public", fs::perms::all);
  fs::create_directories(dir_ / "open" / "data");
  fs::permissions(dir_ / "open", fs::perms::all);
  LaunchSpec spec;
  spec.as_user = true;
  spec.uid = 65534;  // nobody
  spec.gid = 65534;
  EXPECT_TRUE(Reachable(spec, {}));
  EXPECT_TRUE(Reachable(spec, {(dir_ / "open" / "data").string(), (dir_ / "open").string()}));
  const std::string hidden = (dir_ / "closed" / "public").string();
  Status no = Reachable(spec, {(dir_ / "open" / "data").string(), hidden});
  ASSERT_FALSE(no);
  EXPECT_NE(no.error().ToString().find(hidden + ": not reachable as uid 65534: Permission denied"),
            std::string::npos)
      << no.error().ToString();
  Status missing = Reachable(spec, {(dir_ / "open" / "none").string()});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().ToString().find("No such file or directory"), std::string::npos)
      << missing.error().ToString();
  // Jobs run as the agent itself: its own reach (root's here).
  EXPECT_TRUE(Reachable(LaunchSpec{}, {hidden}));
}

// What the agent reads of a file a job named, it reads as the job's user; its own
// identity is back afterwards.
TEST_F(LauncherTest, OpenAsUserReadsOnlyWhatTheUserMayAndPutsTheAgentBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "taking another user's identity needs root";
  fs::create_directories(dir_);
  std::ofstream(dir_ / "secret") << "root only\n";
  fs::permissions(dir_ / "secret", fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(dir_ / "public") << "anyone\n";
  fs::permissions(dir_ / "public",
                  fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::vector<gid_t> groups = {65534};
  EXPECT_EQ(OpenAsUser((dir_ / "secret").string(), 65534, 65534, groups), -1);
  EXPECT_EQ(errno, EACCES);
  const int fd = OpenAsUser((dir_ / "public").string(), 65534, 65534, groups);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  const int mine = ::open((dir_ / "secret").c_str(), O_RDONLY);  // root again
  EXPECT_GE(mine, 0);
  if (mine >= 0) ::close(mine);
  // A worker whose podman runs as the agent opens its output file as its user.
  LaunchSpec spec;
  spec.files_as_user = true;
  spec.uid = 65534;
  spec.gid = 65534;
  spec.groups = groups;
  spec.argv = {"/bin/sh", "-c", "echo clobbered"};
  spec.log_path = (dir_ / "log").string();
  spec.stdout_path = (dir_ / "secret").string();
  const auto pid = Launch(spec);
  ASSERT_TRUE(pid);
  EXPECT_EQ(Wait(*pid).exit_code, 127);
  EXPECT_EQ(Read("secret"), "root only\n");
  EXPECT_NE(Read("log").find("cannot open the output file"), std::string::npos) << Read("log");
}

// Of a variable given twice the later value: the agent's CUDA_VISIBLE_DEVICES follows the
// job's own variables and must be what the job's programs read (getenv takes the first).
TEST_F(LauncherTest, OfAVariableGivenTwiceTheLaterIsTheOneSet) {
  LaunchSpec spec;
  spec.argv = {"env"};
  spec.env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
              {"JOB_VAR", "x"},
              {"CUDA_VISIBLE_DEVICES", "GPU-a"}};
  spec.log_path = (dir_ / "out.log").string();
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  EXPECT_EQ(Wait(*pid).exit_code, 0);
  const std::string out = Read("out.log");
  EXPECT_NE(out.find("CUDA_VISIBLE_DEVICES=GPU-a\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("CUDA_VISIBLE_DEVICES=0"), std::string::npos) << out;
  EXPECT_NE(out.find("JOB_VAR=x\n"), std::string::npos) << out;
}

TEST_F(LauncherTest, ASignalReachesTheWholeGroup) {
  LaunchSpec spec;
  // The worker starts a grandchild that records its pid, then waits.
  spec.argv = {"sh", "-c", "sleep 30 & echo $! > " + (dir_ / "child").string() + "; wait"};
  spec.log_path = (dir_ / "out.log").string();
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  pid_t child = 0;
  for (int i = 0; i < 200 && child == 0; ++i) {
    std::ifstream in(dir_ / "child");
    in >> child;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(child, 0);
  SignalGroup(*pid, SIGTERM);
  Exited e = Wait(*pid);
  EXPECT_EQ(e.signal, SIGTERM);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = ::kill(child, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the grandchild survived";
}

TEST_F(LauncherTest, AMissingProgramExitsWith127AndSaysWhy) {
  LaunchSpec spec;
  spec.argv = {"no-such-program-gantry"};
  spec.log_path = (dir_ / "out.log").string();
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(Wait(*pid).exit_code, 127);
  EXPECT_NE(Read("out.log").find("cannot run no-such-program-gantry"), std::string::npos);
}

TEST_F(LauncherTest, StartTimeTellsAProcessFromItsSuccessor) {
  EXPECT_GT(ProcessStartTime(::getpid()), 0);
  EXPECT_EQ(ProcessStartTime(999999999), -1);
}

// A GPU process is mapped to the worker whose session it is in (agent.h, GpuProcessOwners):
// the worker and what it starts are; a process that called setsid, and others, are not.
TEST_F(LauncherTest, SessionOfTellsAWorkersProcessesFromOthers) {
  LaunchSpec spec;
  spec.argv = {"sh", "-c",
               "sleep 30 & echo $! > " + (dir_ / "child.tmp").string() +
                   "; setsid sleep 30 & echo $! > " + (dir_ / "escaped.tmp").string() + "; mv " +
                   (dir_ / "child.tmp").string() + " " + (dir_ / "child").string() + "; mv " +
                   (dir_ / "escaped.tmp").string() + " " + (dir_ / "escaped").string() + "; wait"};
  spec.log_path = (dir_ / "out.log").string();
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  pid_t child = 0, escaped = 0;
  for (int i = 0; i < 300 && escaped == 0; ++i) {
    std::ifstream(dir_ / "child") >> child;
    std::ifstream(dir_ / "escaped") >> escaped;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(child, 0);
  ASSERT_GT(escaped, 0);
  // setsid may still be about to call setsid(2) when its pid is written: wait for it.
  for (int i = 0; i < 300 && SessionOf(escaped) == *pid; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(SessionOf(*pid), *pid);
  EXPECT_EQ(SessionOf(child), *pid);
  EXPECT_EQ(SessionOf(escaped), escaped)
      << "it left for a session of its own (cgroups still find it)";
  EXPECT_NE(SessionOf(::getpid()), *pid);
  ::kill(escaped, SIGKILL);
  SignalGroup(*pid, SIGKILL);
  Wait(*pid);
  EXPECT_EQ(SessionOf(999999999), -1);
}

// Issue 16, bug 4: a worker dies with the thread that launched it (the agent's main loop),
// and what it started can be found by its process group and start time.
TEST_F(LauncherTest, AWorkerDiesWithItsLauncherAndWhatItLeftIsFoundByGroup) {
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "sleep 30 & echo $! > " + (dir_ / "child").string() + "; wait"};
  spec.log_path = (dir_ / "out.log").string();
  pid_t pid = 0;
  long long started = -1;
  std::thread launcher([&] {
    auto r = Launch(spec);
    ASSERT_TRUE(r.ok());
    pid = *r;
    started = ProcessStartTime(pid);
    for (int i = 0; i < 200 && !fs::exists(dir_ / "child"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  launcher.join();  // the launching thread ends: the kernel kills the worker
  ASSERT_GT(pid, 0);
  Exited e = Wait(pid);
  EXPECT_EQ(e.signal, SIGKILL);
  pid_t child = 0;
  std::ifstream(dir_ / "child") >> child;
  ASSERT_GT(child, 0);
  const std::vector<pid_t> left = GroupMembersSince(pid, started);
  EXPECT_EQ(left, std::vector<pid_t>{child});
  EXPECT_TRUE(GroupMembersSince(pid, started + 1'000'000'000).empty())
      << "a later group must not match";
  for (pid_t p : left) ::kill(p, SIGKILL);
}

// Worker cgroups (issue 16 isolation): where the machine gives a writable cgroup with a
// memory controller (v2, or v1 as on hybrid hosts), a worker joins its own before exec,
// its memory limit is the kernel's to enforce (an OOM kill is seen as such), and every
// process it started, also one that left its process group, is found and killed.
// One Cgroups for the whole suite, as an agent has one: on cgroup v2 opening it may move
// this process into a leaf of its own, after which a second Open in the same process finds
// no cgroup to enable controllers in (each test then skipped on a v2 host).
class CgroupTest : public LauncherTest {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    auto cg = Cgroups::Open("auto", "test-" + std::to_string(::getpid()), &why);
    if (cg.ok()) cgroups_ = std::move(*cg);
  }
  static void TearDownTestSuite() { cgroups_.reset(); }
  Cgroups* Open() { return cgroups_.get(); }
  static inline std::unique_ptr<Cgroups> cgroups_;
};

TEST_F(CgroupTest, AWorkerOverItsMemoryLimitIsKilledByTheKernelAndSeenAsOom) {
  Cgroups* cg = Open();
  if (cg == nullptr) GTEST_SKIP() << "no writable cgroup with a memory controller on this machine";
  auto join = cg->Create("w1", {.memory_bytes = 64 << 20, .cpus_milli = 500, .denied_devices = {}});
  ASSERT_TRUE(join.ok()) << join.error().ToString();
  LaunchSpec spec;
  // tail keeps a line without newlines in memory: 300 MB against a 64 MB limit.
  spec.argv = {"/bin/sh", "-c", "head -c 300000000 /dev/zero | tail"};
  spec.log_path = (dir_ / "w1.log").string();
  spec.join = *join;
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  const Exited e = Wait(*pid);
  EXPECT_TRUE(cg->OomKilled("w1")) << Read("w1.log");
  // v1: the kernel kills tail and the shell tells of it; v2: memory.oom.group kills the
  // whole worker, the shell too.
  EXPECT_TRUE(e.exit_code == 128 + SIGKILL || e.signal == SIGKILL)
      << e.exit_code << " " << e.signal;
  cg->KillAndRemove("w1");
  EXPECT_TRUE(cg->Names().empty());

  // Without a limit the same worker is not touched.
  auto free = cg->Create("w2", {});
  ASSERT_TRUE(free.ok());
  spec.argv = {"/bin/sh", "-c", "head -c 100000000 /dev/zero | tail | wc -c"};
  spec.log_path = (dir_ / "w2.log").string();
  spec.join = *free;
  auto pid2 = Launch(spec);
  ASSERT_TRUE(pid2.ok());
  EXPECT_EQ(Wait(*pid2).exit_code, 0);
  EXPECT_FALSE(cg->OomKilled("w2"));
  EXPECT_NE(Read("w2.log").find("100000000"), std::string::npos) << Read("w2.log");
  cg->KillAndRemove("w2");
}

// A batch job's workers on a node (its script, its steps' tasks) share one group's limits,
// as Slurm's job cgroup: two tasks of 40 MB each fit in 64 MB apart, not together. The
// group goes with its last worker.
TEST_F(CgroupTest, WorkersOfAGroupShareItsMemoryLimit) {
  Cgroups* cg = Open();
  if (cg == nullptr) GTEST_SKIP() << "no writable cgroup with a memory controller on this machine";
  // Each holds 40 MB for 2 s: dd's buffer, read full from /dev/zero, while it waits to write.
  auto start = [&](const std::string& name, const std::string& group) {
    auto join =
        cg->Create(name, {.memory_bytes = 64 << 20, .cpus_milli = 0, .denied_devices = {}}, group);
    EXPECT_TRUE(join.ok()) << join.error().ToString();
    LaunchSpec spec;
    spec.argv = {"/bin/sh", "-c", "dd if=/dev/zero bs=40M count=1 2>/dev/null | sleep 2"};
    spec.log_path = (dir_ / (name + ".log")).string();
    spec.join = join.ok() ? *join : std::vector<std::string>{};
    auto pid = Launch(spec);
    EXPECT_TRUE(pid.ok());
    return pid.ok() ? *pid : -1;
  };
  // Both ends (Reap takes whichever ended first).
  auto wait_both = [&](pid_t x, pid_t y) {
    std::map<pid_t, Exited> ended;
    for (int i = 0; i < 1000 && ended.size() < 2; ++i) {
      for (const Exited& e : Reap()) ended[e.pid] = e;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(ended.count(x) && ended.count(y)) << "the two did not end";
    return std::pair(ended[x], ended[y]);
  };
  // Apart: each its own 64 MB.
  const pid_t a = start("a", ""), b = start("b", "");
  const auto [ea, eb] = wait_both(a, b);
  EXPECT_EQ(ea.exit_code, 0) << Read("a.log");
  EXPECT_EQ(eb.exit_code, 0) << Read("b.log");
  EXPECT_FALSE(cg->OomKilled("a") || cg->OomKilled("b"));
  cg->KillAndRemove("a");
  cg->KillAndRemove("b");
  // Together in one group: 80 MB against its 64 MB.
  const std::string group = std::string(Cgroups::kGroupPrefix) + "7-1";
  const pid_t c = start("c", group), d = start("d", group);
  wait_both(c, d);
  EXPECT_TRUE(cg->OomKilled(group + "/c") || cg->OomKilled(group + "/d"))
      << Read("c.log") << Read("d.log");
  const std::vector<std::string> names = cg->Names();
  EXPECT_EQ(std::count(names.begin(), names.end(), group + "/c"), 1);
  cg->KillAndRemove(group + "/c");
  EXPECT_EQ(cg->Names(), std::vector<std::string>{group + "/d"});
  cg->KillAndRemove(group + "/d");
  EXPECT_TRUE(cg->Names().empty()) << "the group outlived its last worker";
}

// A worker may open only its own GPUs' device files (Slurm's ConstrainDevices): the
// node's other /dev/nvidiaN (character devices 195:N) are refused by its cgroup (v1: the
// devices hierarchy; v2: a BPF device program), /dev/nvidiactl (195:255) and other devices
// are not. Device nodes made here (device_nodes.h).
TEST_F(CgroupTest, AWorkerMayOpenOnlyItsOwnGpusDeviceFiles) {
  Cgroups* cg = Open();
  if (cg == nullptr) GTEST_SKIP() << "no writable cgroup with a memory controller on this machine";
  if (!cg->constrains_devices()) GTEST_SKIP() << cg->Describe() << ": " << cg->devices_why();
  fs::create_directories(dir_);
  if (const std::string why =
          MakeGpuNodes(dir_, {{"nvidia0", 0}, {"nvidia1", 1}, {"nvidia2", 2}, {"nvidiactl", 255}});
      !why.empty()) {
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  }
  // MIG access devices, of another major (nvidia-caps'), two with the minors of nvidia1 and
  // nvidia2.
  constexpr int kCaps = 236;
  ASSERT_EQ(MakeGpuNodes(dir_, {{"cap1", 1}, {"cap2", 2}, {"cap12", 12}}, kCaps), "");
  auto opens = [&](const std::string& worker, const std::vector<int>& denied_gpus,
                   const std::vector<CharDevice>& more = {}) {
    std::vector<CharDevice> denied = more;
    for (int m : denied_gpus) denied.push_back({kNvidiaMajor, m});
    auto join = cg->Create(worker, {.memory_bytes = 0, .cpus_milli = 0, .denied_devices = denied});
    EXPECT_TRUE(join.ok()) << join.error().ToString();
    if (!join.ok()) return std::string();
    LaunchSpec spec;
    spec.argv = {
        "/bin/sh", "-c",
        OpenEachCommand({"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "cap1", "cap2", "cap12"})};
    spec.workdir = dir_.string();
    spec.log_path = (dir_ / (worker + ".log")).string();
    spec.join = *join;
    auto pid = Launch(spec);
    EXPECT_TRUE(pid.ok());
    if (pid.ok()) {
      EXPECT_EQ(Wait(*pid).exit_code, 0);
    }
    cg->KillAndRemove(worker);
    return Read(worker + ".log");
  };
  // GPU 1's worker: GPUs 0 and 2 are refused.
  const std::string one = opens("gpu1", {0, 2});
  EXPECT_TRUE(Refused(one, "nvidia0")) << one;
  EXPECT_FALSE(Refused(one, "nvidia1")) << one;
  EXPECT_NE(one.find("nvidia1 "), std::string::npos) << one;
  EXPECT_TRUE(Refused(one, "nvidia2")) << one;
  EXPECT_FALSE(Refused(one, "nvidiactl")) << one;
  // A CPU-only worker: every GPU refused; nothing denied: none.
  const std::string none = opens("cpu", {0, 1, 2});
  for (const char* d : {"nvidia0", "nvidia1", "nvidia2"}) EXPECT_TRUE(Refused(none, d)) << none;
  EXPECT_FALSE(Refused(none, "nvidiactl")) << none;
  for (const char* d : {"cap1", "cap2", "cap12"}) EXPECT_FALSE(Refused(one, d)) << one;
  // Devices of two majors: a MIG worker's rules (the other GPUs, its GPU's other
  // instances' access devices). Minor 12 of nvidia-caps only: not nvidia1, not cap1, and
  // minor 2 of NVIDIA's GPUs only: not cap2.
  const std::string mig = opens("mig", {0, 2}, {{kCaps, 12}});
  EXPECT_TRUE(Refused(mig, "cap12")) << mig;
  for (const char* d : {"cap1", "cap2", "nvidia1", "nvidiactl"})
    EXPECT_FALSE(Refused(mig, d)) << mig;
  for (const char* d : {"nvidia0", "nvidia2"}) EXPECT_TRUE(Refused(mig, d)) << mig;
  const std::string all = opens("all", {});
  for (const char* d : {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "cap1", "cap2", "cap12"}) {
    EXPECT_FALSE(Refused(all, d)) << all;
  }
  EXPECT_TRUE(cg->Names().empty());
}

TEST_F(CgroupTest, ProcessesThatLeftTheGroupAreFoundAndKilledByCgroup) {
  Cgroups* cg = Open();
  if (cg == nullptr) GTEST_SKIP() << "no writable cgroup with a memory controller on this machine";
  auto join = cg->Create("w3", {});
  ASSERT_TRUE(join.ok());
  LaunchSpec spec;
  // A daemon of its own session: out of reach of the worker's process group. It writes its
  // pid once in its session, and the worker waits for that: with `setsid sleep 300 &` and
  // `$!`, the group kill below could catch the child before it called setsid (the test
  // failed about once in 15 runs).
  const std::string file = (dir_ / "daemon").string();
  spec.argv = {"/bin/sh", "-c",
               "setsid /bin/sh -c 'echo $$ > " + file + ".tmp && mv " + file + ".tmp " + file +
                   " && exec sleep 300' > /dev/null 2>&1 & while [ ! -s " + file +
                   " ]; do sleep 0.01; done"};
  spec.log_path = (dir_ / "w3.log").string();
  spec.join = *join;
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(Wait(*pid).exit_code, 0);
  const pid_t daemon = std::stoi(Read("daemon"));
  SignalGroup(*pid, SIGKILL);
  EXPECT_EQ(::kill(daemon, 0), 0) << "the daemon left the group and lives on";
  const std::vector<pid_t> procs = cg->Procs("w3");
  EXPECT_NE(std::find(procs.begin(), procs.end(), daemon), procs.end());
  EXPECT_EQ(cg->KillAndRemove("w3"), 1);
  // The test is the daemon's reaper only if it is our child; it is init's: wait for it to
  // go (an init that reaps orphans about once a second, as one sandbox's does, took 1.1 s).
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {
    gone = ::kill(daemon, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  EXPECT_TRUE(cg->Names().empty());
}

// ---------------------------------------------------------------- the shim (ShimMain)
// A worker under a shim, as the agent launches it: the shim leads its group, mirrors its
// end, writes it to STATUS, and fences it when no agent supervises it past the lease.
class ShimTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    fs::create_directories(dir_);
  }
  // `supervisor`: the pid the AGENT file names (this test: alive; 0: a gone one).
  LaunchSpec Spec(const std::string& script, pid_t supervisor, int signal = SIGTERM,
                  int64_t grace_ms = 0) {
    LaunchSpec spec;
    spec.argv = {"sh", "-c", script};
    spec.workdir = dir_.string();
    spec.log_path = (dir_ / "out.log").string();
    spec.shim_program = GANTRY_AGENT_BINARY;
    spec.shim_status = (dir_ / "worker.exit").string();
    spec.shim_lease = (dir_ / "lease").string();
    spec.shim_agent = (dir_ / "agent.pid").string();
    spec.shim_signal = signal;
    spec.shim_grace_ms = grace_ms;
    std::ofstream(dir_ / "agent.pid")
        << (supervisor > 0 ? supervisor : 999999) << " "
        << (supervisor > 0 ? ProcessStartTime(supervisor) : 0) << "\n";
    return spec;
  }
};

TEST_F(ShimTest, AWorkersExitComesBackThroughItsShimAndIsWritten) {
  WriteLease((dir_ / "lease").string(), 60000, 100000);
  auto pid = Launch(Spec("exit 7", ::getpid()));
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  EXPECT_EQ(Wait(*pid).exit_code, 7);
  auto status = ReadShimStatus((dir_ / "worker.exit").string());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->exit_code, 7);
  EXPECT_FALSE(status->fenced);
  // A signal to the group (the agent's stop) reaches the worker, not the shim, which then
  // ends by the same signal.
  pid = Launch(Spec("echo $$ > " + (dir_ / "w.pid").string() + "; sleep 30", ::getpid()));
  ASSERT_TRUE(pid.ok());
  for (int i = 0; i < 200 && Read("w.pid").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t worker = std::stoi(Read("w.pid"));
  EXPECT_NE(worker, *pid) << "the worker is the shim's child, not the shim";
  EXPECT_EQ(SessionOf(worker), *pid) << "in the shim's session";
  SignalGroup(*pid, SIGTERM);
  const Exited e = Wait(*pid);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_EQ(ReadShimStatus((dir_ / "worker.exit").string())->signal, SIGTERM);
}

// A stop sent to the group the moment the worker is launched (a job cancelled as it
// started: salloc's `true` released its allocation within milliseconds) is not lost while
// the child sets itself up: before it leads its group (the group does not exist yet), nor
// while the shim, which ignores the stop signals, forks the worker (which inherits the
// ignoring until it resets it). It was: the worker ran on until its grace ran out.
TEST_F(ShimTest, AStopSentAsTheWorkerStartsIsNotLost) {
  WriteLease((dir_ / "lease").string(), 60000, 100000);
  for (bool shimmed : {true, false}) {
    for (int i = 0; i < 30; ++i) {
      LaunchSpec spec = Spec("exec sleep 20", ::getpid());
      if (!shimmed) spec.shim_program.clear();
      auto pid = Launch(spec);
      ASSERT_TRUE(pid.ok()) << pid.error().message;
      SignalGroup(*pid, SIGTERM);
      const auto t0 = std::chrono::steady_clock::now();
      const Exited e = Wait(*pid);
      EXPECT_EQ(e.signal, SIGTERM) << (shimmed ? "shimmed, " : "") << "launch " << i;
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
          << (shimmed ? "shimmed, " : "") << "launch " << i << ": the stop was lost";
    }
  }
}

// The shim is the agent's binary, exec'd anew: it must load where the agent loaded, also
// when the agent's libraries are found only through LD_LIBRARY_PATH (a bundle of them
// beside it; on a GPU machine every worker exited 127 before this, the shim unable to load
// libcpp-httplib). The worker still starts with its own environment only.
TEST_F(ShimTest, TheShimLoadsWithTheAgentsLibraryPathAndTheWorkerWithoutIt) {
  WriteLease((dir_ / "lease").string(), 60000, 100000);
  const char* before = std::getenv("LD_LIBRARY_PATH");
  const std::string saved = before ? before : "";
  ::setenv("LD_LIBRARY_PATH", "/opt/gantry/lib", 1);
  auto pid =
      Launch(Spec("while [ ! -e go ]; do sleep 0.01; done; env > worker.env; exit 3", ::getpid()));
  if (before)
    ::setenv("LD_LIBRARY_PATH", saved.c_str(), 1);
  else
    ::unsetenv("LD_LIBRARY_PATH");
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  // The shim's environment once it is the agent's binary (its command line says so).
  const fs::path proc = "/proc/" + std::to_string(*pid);
  auto slurp = [](const fs::path& file) {
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(text.begin(), text.end(), '\0', '\n');
    return text;
  };
  for (int i = 0; i < 500 && slurp(proc / "cmdline").find("--shim-worker") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(slurp(proc / "environ"), "LD_LIBRARY_PATH=/opt/gantry/lib\n")
      << "the agent's library path, nothing else";
  std::ofstream(dir_ / "go") << "";
  EXPECT_EQ(Wait(*pid).exit_code, 3) << "the worker's exit, through its shim";
  EXPECT_EQ(Read("worker.env").find("LD_LIBRARY_PATH"), std::string::npos) << Read("worker.env");
  ASSERT_TRUE(ReadShimStatus((dir_ / "worker.exit").string()));
  EXPECT_EQ(ReadShimStatus((dir_ / "worker.exit").string())->exit_code, 3);
}

TEST_F(ShimTest, WithoutAnAgentAShimStopsItsWorkerOnceTheLeaseRunsOut) {
  // A lease of 300 ms, last renewed now; node timeout 1,300 ms: the grace is cut to 500 ms.
  WriteLease((dir_ / "lease").string(), 300, 1300);
  const std::string log = (dir_ / "w.log").string();
  const auto started = std::chrono::steady_clock::now();
  auto pid =
      Launch(Spec("trap 'echo term >> " + log + "; exit 0' TERM; while true; do sleep 0.05; done",
                  0, SIGTERM, 10'000));
  ASSERT_TRUE(pid.ok());
  const Exited e = Wait(*pid);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(Read("w.log"), "term\n") << "its stop signal first";
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_GT(took, 0.25);
  EXPECT_LT(took, 1.3) << "past the node timeout";
  auto status = ReadShimStatus((dir_ / "worker.exit").string());
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->fenced);
  // One that ignores it is killed after the grace (cut to 500 ms), group and shim.
  WriteLease((dir_ / "lease").string(), 300, 1300);
  pid = Launch(Spec("trap '' TERM; while true; do sleep 0.05; done", 0, SIGTERM, 10'000));
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(Wait(*pid).signal, SIGKILL);
  status = ReadShimStatus((dir_ / "worker.exit").string());
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->fenced);
  EXPECT_EQ(status->signal, SIGKILL);
}

TEST_F(ShimTest, AJobsOwnStopSignalReachesItThroughItsShim) {
  // SIGALRM (a job's --signal) would end a shim that did not ignore it, and the worker with it.
  WriteLease((dir_ / "lease").string(), 60000, 100000);
  const std::string log = (dir_ / "w.log").string();
  auto pid = Launch(Spec("trap 'echo alarm >> " + log + "; exit 0' ALRM; echo ready >> " + log +
                             "; while true; do sleep 0.05; done",
                         ::getpid(), SIGALRM, 5000));
  ASSERT_TRUE(pid.ok());
  for (int i = 0; i < 200 && Read("w.log").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the shim has set itself up
  SignalGroup(*pid, SIGALRM);
  const Exited e = Wait(*pid);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Read("w.log"), "ready\nalarm\n");
}

TEST_F(ShimTest, UnderAnAgentThatCannotActAShimKillsItsWorkerBeforeTheNodeTimeout) {
  // The agent is there (this process) but has not fenced: frozen, say. Lease 200 ms, node
  // timeout 2,000 ms: its own fence would have killed by 1,100 ms; the shim does at 1,550.
  WriteLease((dir_ / "lease").string(), 200, 2000);
  const std::string log = (dir_ / "w.log").string();
  const auto started = std::chrono::steady_clock::now();
  auto pid = Launch(Spec("trap 'echo term >> " + log + "' TERM; while true; do sleep 0.05; done",
                         ::getpid(), SIGTERM, 10'000));
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(Wait(*pid).signal, SIGKILL);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GT(took, 1.2) << "before the agent's own fence would have acted";
  EXPECT_LT(took, 2.0) << "past the node timeout";
  EXPECT_EQ(Read("w.log"), "") << "the stop signal is the agent's to send";
  auto status = ReadShimStatus((dir_ / "worker.exit").string());
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->fenced);
}

TEST_F(ShimTest, AShimWhoseLeaseFileIsGoneStopsItsWorkerAtOnce) {
  // The agent's state directory removed (a test's teardown, a wiped node): nothing will
  // renew the lease, so no agent can come back for the worker.
  WriteLease((dir_ / "lease").string(), 60000, 100000);
  auto pid = Launch(Spec("sleep 30", 0, SIGTERM, 0));
  ASSERT_TRUE(pid.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(Reap().empty()) << "fenced within its lease";
  fs::remove(dir_ / "lease");
  const auto removed = std::chrono::steady_clock::now();
  EXPECT_EQ(Wait(*pid).signal, SIGKILL);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - removed).count(), 1.0);
}

TEST_F(ShimTest, ALiveAgentFencesItselfSoItsShimsLeaveTheLeaseToIt) {
  WriteLease((dir_ / "lease").string(), 200, 10000);
  auto pid = Launch(Spec("sleep 30", ::getpid()));  // supervised by this process
  ASSERT_TRUE(pid.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_TRUE(Reap().empty()) << "a supervised worker was fenced by its shim";
  SignalGroup(*pid, SIGKILL);
  EXPECT_EQ(Wait(*pid).signal, SIGKILL);
}

}  // namespace
}  // namespace gantry::agent
