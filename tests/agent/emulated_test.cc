#include "agent/emulated.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "agent/agent.h"

namespace gantry::agent {
namespace {

TEST(Emulated, ParsesCountAndModel) {
  auto s = ParseEmulate("8xH100-80GB");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->count, 8);
  EXPECT_EQ(s->model, "H100-80GB");
  EXPECT_EQ(s->memory_bytes, 80'000'000'000);
  EXPECT_EQ(ParseEmulate("2xH200-141GB")->memory_bytes, 141'000'000'000);
  for (const char* bad :
       {"", "8", "x H100-80GB", "0xH100-80GB", "8xH100", "eightxH100-80GB", "99xH100-80GB"}) {
    EXPECT_FALSE(ParseEmulate(bad).ok()) << bad;
  }
}

TEST(Emulated, UuidsAreStablePerNodeAndDistinct) {
  EmulatedGpus a("h100-0", *ParseEmulate("8xH100-80GB"));
  EmulatedGpus again("h100-0", *ParseEmulate("8xH100-80GB"));
  EmulatedGpus b("h100-1", *ParseEmulate("8xH100-80GB"));
  auto ga = *a.Discover();
  auto gb = *b.Discover();
  ASSERT_EQ(ga.size(), 8u);
  EXPECT_EQ(ga[3].uuid, (*again.Discover())[3].uuid);
  std::set<std::string> all;
  for (const auto& g : ga) all.insert(g.uuid);
  for (const auto& g : gb) all.insert(g.uuid);
  EXPECT_EQ(all.size(), 16u);
  EXPECT_EQ(ga[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(ga[0].uuid.size(), 4u + 36u);
  EXPECT_EQ(ga[0].model, "H100-80GB");
  EXPECT_EQ(ga[0].nvlink_peers.size(), 7u);
  const std::string mig = a.MigUuid(ga[2], "1g.10gb", 3);
  EXPECT_EQ(mig.rfind("MIG-", 0), 0u);
  EXPECT_EQ(mig, a.MigUuid(ga[2], "1g.10gb", 3));
  EXPECT_NE(mig, a.MigUuid(ga[2], "1g.10gb", 4));
}

// 1,024 nodes that join at once (a swarm; every agent after gantryd restarts) come back
// spread over the whole interval, each at its own fixed point, not in one wave.
TEST(Heartbeats, NodesThatJoinTogetherBeatAgainOutOfStep) {
  const int64_t interval = 2000;
  std::vector<int> tenths(10, 0);
  std::set<int64_t> points;
  for (int i = 0; i < 1024; ++i) {
    const std::string node = "gpu-" + std::to_string(i);
    const int64_t next = FirstBeatAfterJoining(node, interval);
    ASSERT_GE(next, interval / 2) << node;
    ASSERT_LT(next, interval + interval / 2) << node;
    EXPECT_EQ(next, FirstBeatAfterJoining(node, interval)) << node;
    ++tenths[static_cast<size_t>((next - interval / 2) * 10 / interval)];
    points.insert(next);
  }
  for (size_t t = 0; t < tenths.size(); ++t) {
    EXPECT_GT(tenths[t], 60) << "tenth " << t << " of the interval";  // 102 if even
    EXPECT_LT(tenths[t], 150) << "tenth " << t << " of the interval";
  }
  EXPECT_GT(points.size(), 500u);
  EXPECT_EQ(FirstBeatAfterJoining("gpu-0", 10), FirstBeatAfterJoining("gpu-0", 10));
  EXPECT_GE(FirstBeatAfterJoining("gpu-0", 10), 5);
}

TEST(Emulated, LostGpusFromAFile) {
  const auto file =
      std::filesystem::temp_directory_path() / ("gantry-lost-" + std::to_string(::getpid()));
  std::ofstream(file) << "2\n5\n";
  EmulatedGpus a("n", *ParseEmulate("8xH100-80GB"), file.string());
  auto g = *a.Discover();
  EXPECT_TRUE(g[2].lost);
  EXPECT_TRUE(g[5].lost);
  EXPECT_FALSE(g[0].lost);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace gantry::agent
