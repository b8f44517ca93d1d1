#include "base/cpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace gantry {
namespace {

namespace fs = std::filesystem;

TEST(CpuList, ReadsAndWritesLinuxsListsAndSlurmsMasks) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList(""), std::vector<int>{});
  EXPECT_EQ(ParseCpuList("3,1,1"), (std::vector<int>{1, 3}));
  for (const char* bad : {"a", "1-", "3-1", "1,,2", "-1", "0-99999999"})
    EXPECT_FALSE(ParseCpuList(bad)) << bad;
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(CpuMask({0, 1}), "0x3");
  EXPECT_EQ(CpuMask({2, 3, 6, 7}), "0xCC");
  EXPECT_EQ(CpuMask({}), "0x0");
  EXPECT_EQ(ParseCpuMask("0xCC"), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(ParseCpuMask("c"), (std::vector<int>{2, 3}));
  EXPECT_EQ(ParseCpuMask("0x100"), std::vector<int>{8});
  EXPECT_FALSE(ParseCpuMask("0xg"));
  EXPECT_FALSE(ParseCpuMask("0x"));
}

TEST(CpuBind, ReadsSrunsOptionAsSlurmDoes) {
  std::string why;
  auto parse = [&](const char* text) { return CpuBind::Parse(text, why); };
  ASSERT_TRUE(parse("cores"));
  EXPECT_EQ(parse("cores")->kind, CpuBind::Kind::kCores);
  EXPECT_FALSE(parse("cores")->verbose);
  EXPECT_TRUE(parse("verbose,threads")->verbose);
  EXPECT_TRUE(parse("v,sockets")->verbose);
  EXPECT_FALSE(parse("quiet,ldoms")->verbose);
  EXPECT_EQ(parse("no")->kind, CpuBind::Kind::kNone);
  EXPECT_EQ(parse("rank_ldom")->kind, CpuBind::Kind::kRankLdom);
  // A list goes on over commas followed by a digit; ID*COUNT repeats.
  const std::optional<CpuBind> map = parse("v,map_cpu:0,2*2,0x3");
  ASSERT_TRUE(map) << why;
  EXPECT_TRUE(map->verbose);
  EXPECT_EQ(map->kind, CpuBind::Kind::kMapCpu);
  EXPECT_EQ(map->list, (std::vector<std::vector<int>>{{0}, {2}, {2}, {3}}));
  EXPECT_EQ(map->Type(), "map_cpu:");
  const std::optional<CpuBind> mask = parse("mask_cpu:0x3,0xC,verbose");
  ASSERT_TRUE(mask) << why;
  EXPECT_TRUE(mask->verbose);
  EXPECT_EQ(mask->list, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(parse("map_ldom:1,0")->list, (std::vector<std::vector<int>>{{1}, {0}}));
  for (const char* bad : {"bogus", "map_cpu:", "map_cpu", "cores:1", "cores,threads", "mask_cpu:zz",
                          "map_cpu:a", "map_cpu:1*0"}) {
    why.clear();
    EXPECT_FALSE(parse(bad)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  EXPECT_FALSE(parse("bogus"));
  EXPECT_EQ(why, "unrecognized --cpu-bind argument \"bogus\"");
}

// Two sockets of two cores of two threads, numbered as Linux numbers them (the first
// threads of every core, then their siblings); a NUMA node per socket.
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("cpus-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (int id = 0; id < 8; ++id) {
      const fs::path dir = root_ / "cpu" / ("cpu" + std::to_string(id)) / "topology";
      fs::create_directories(dir);
      std::ofstream(dir / "physical_package_id") << (id % 4) / 2 << "\n";
      std::ofstream(dir / "core_id") << id % 2 << "\n";
    }
    fs::create_directories(root_ / "node" / "node0");
    fs::create_directories(root_ / "node" / "node1");
    std::ofstream(root_ / "node" / "node0" / "cpulist") << "0-1,4-5\n";
    std::ofstream(root_ / "node" / "node1" / "cpulist") << "2-3,6-7\n";
    topology_ = CpuTopology::Read(root_.string(), {0, 1, 2, 3, 4, 5, 6, 7});
  }
  void TearDown() override { fs::remove_all(root_); }

  // Task `local`'s CPUs under `bind` of the job's `job`, as a Linux list ("error: ..."
  // when refused).
  std::string Task(const char* bind, int local, std::vector<int> job = {}, int per_task = 1,
                   const char* distribution = "") {
    std::string why;
    const std::optional<CpuBind> b = CpuBind::Parse(bind, why);
    if (!b) return "error: " + why;
    const std::optional<std::vector<int>> cpus =
        TaskCpus(*b, topology_, job, local, per_task, distribution, why);
    return cpus ? FormatCpuList(*cpus) : "error: " + why;
  }

  fs::path root_;
  CpuTopology topology_;
};

TEST_F(FakeSysfs, TopologyIsReadFromSysfs) {
  ASSERT_EQ(topology_.cpus.size(), 8u);
  const Cpu* six = topology_.Find(6);
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(six->socket, 1);
  EXPECT_EQ(six->numa, 1);
  EXPECT_EQ(six->core, topology_.Find(2)->core) << "2 and 6 are one core's threads";
  EXPECT_NE(six->core, topology_.Find(3)->core);
  EXPECT_NE(topology_.Find(0)->core, topology_.Find(2)->core) << "core ids repeat per socket";
  EXPECT_EQ(topology_.Find(8), nullptr);
  // A CPU sysfs does not describe is its own core on socket 0.
  const CpuTopology partial = CpuTopology::Read(root_.string(), {0, 99});
  ASSERT_NE(partial.Find(99), nullptr);
  EXPECT_EQ(partial.Find(99)->socket, 0);
  EXPECT_NE(partial.Find(99)->core, partial.Find(0)->core);
}

TEST_F(FakeSysfs, JobsGetWholeCoresFromTheLeastUsedCpus) {
  EXPECT_EQ(PickCpus(topology_, {}, 2, {}, 0), (std::vector<int>{0, 4})) << "one core's threads";
  EXPECT_EQ(PickCpus(topology_, {{0, 1}, {4, 1}}, 2, {}, 0), (std::vector<int>{1, 5}));
  EXPECT_EQ(PickCpus(topology_, {}, 4, {}, 0), (std::vector<int>{0, 1, 4, 5})) << "one socket";
  EXPECT_EQ(PickCpus(topology_, {}, 2, {1}, 0), (std::vector<int>{2, 6})) << "near its GPUs";
  EXPECT_EQ(PickCpus(topology_, {}, 20, {}, 0).size(), 8u);
  EXPECT_EQ(PickCpus(topology_, {}, 2, {}, 2), (std::vector<int>{1, 5})) << "rotated";
  // Every CPU used once: the least used again, shared.
  std::map<int, int> all;
  for (int c = 0; c < 8; ++c) all[c] = c == 3 ? 1 : 2;
  EXPECT_EQ(PickCpus(topology_, all, 1, {}, 0), std::vector<int>{3});
}

TEST_F(FakeSysfs, AutoMasksLayTasksOverSocketsAsTaskAffinityDoes) {
  // threads: one thread each; cyclic over the sockets by default.
  EXPECT_EQ(Task("threads", 0), "0");
  EXPECT_EQ(Task("threads", 1), "2");
  EXPECT_EQ(Task("threads", 2), "4");
  EXPECT_EQ(Task("threads", 1, {}, 1, "block:block"), "4");
  EXPECT_EQ(Task("threads", 1, {}, 2, "block:block"), "1,5");
  // cores: whole cores.
  EXPECT_EQ(Task("cores", 0), "0,4");
  EXPECT_EQ(Task("cores", 1), "2,6");
  EXPECT_EQ(Task("cores", 2), "1,5");
  EXPECT_EQ(Task("cores", 1, {}, 1, "block:block"), "1,5");
  EXPECT_EQ(Task("cores", 1, {}, 1, "cyclic:fcyclic"), "2,6");
  EXPECT_EQ(Task("cores", 0, {}, 4, "block:fcyclic"), "0,2,4,6") << "2 cores, one a socket";
  // sockets and ldoms: the tasks' sockets, NUMA nodes.
  EXPECT_EQ(Task("sockets", 0), "0-1,4-5");
  EXPECT_EQ(Task("sockets", 1), "2-3,6-7");
  EXPECT_EQ(Task("ldoms", 1), "2-3,6-7");
  // Within the job's CPUs only; tasks beyond them start over.
  EXPECT_EQ(Task("cores", 0, {1, 5, 3, 7}), "1,5");
  EXPECT_EQ(Task("cores", 1, {1, 5, 3, 7}), "3,7");
  EXPECT_EQ(Task("cores", 2, {1, 5, 3, 7}), "1,5");
  EXPECT_EQ(Task("threads", 5, {1, 5}), "5");
  EXPECT_EQ(Task("none", 3, {1, 5}), "1,5");
  EXPECT_EQ(Task("boards", 3, {1, 5}), "1,5");
  EXPECT_EQ(Task("rank", 3, {1, 5, 6}), "1");
  EXPECT_EQ(Task("rank_ldom", 1, {1, 5, 6}), "6");
}

TEST_F(FakeSysfs, MapsAndMasksNameTheNodesCpusWithinTheJobs) {
  EXPECT_EQ(Task("map_cpu:3,1", 0), "3");
  EXPECT_EQ(Task("map_cpu:3,1", 1), "1");
  EXPECT_EQ(Task("map_cpu:3,1", 2), "3");
  EXPECT_EQ(Task("mask_cpu:0x3,0xC0", 1), "6-7");
  EXPECT_EQ(Task("mask_cpu:0xF", 0, {2, 6}), "2") << "cut to the job's";
  EXPECT_EQ(Task("map_ldom:1", 0), "2-3,6-7");
  EXPECT_EQ(Task("mask_ldom:0x3", 0, {1, 2}), "1-2");
  EXPECT_EQ(Task("map_cpu:3", 0, {0, 4}),
            "error: --cpu-bind=map_cpu: task 0's CPU 3 is none of the job's CPUs on this node "
            "(0,4)");
  EXPECT_EQ(Task("mask_cpu:0x100", 0, {0, 4}),
            "error: --cpu-bind=mask_cpu: task 0's mask 0x100 is none of the job's CPUs on this "
            "node (0,4)");
  EXPECT_EQ(Task("map_ldom:1", 0, {0, 4}),
            "error: --cpu-bind=map_ldom: task 0's NUMA node(s) 1 hold none of the job's CPUs on "
            "this node (0,4)");
}

}  // namespace
}  // namespace gantry
