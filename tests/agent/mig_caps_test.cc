// MigCaps: the driver's list of MIG access devices (mig-minors) and the nvidia-caps major.
#include "agent/mig_caps.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

namespace gantry::agent {
namespace {

namespace fs = std::filesystem;

// As an 8-GPU driver writes it, cut to two GPUs and two GPU instances each.
constexpr const char* kMinors =
    "config 1\n"
    "monitor 2\n"
    "gpu0/gi0/access 3\n"
    "gpu0/gi0/ci0/access 4\n"
    "gpu0/gi0/ci1/access 5\n"
    "gpu0/gi1/access 12\n"
    "gpu0/gi1/ci0/access 13\n"
    "gpu1/gi0/access 138\n"
    "gpu1/gi0/ci0/access 139\n"
    "gpu10/gi0/access 1353\n";

TEST(MigCapsTest, FindsAnInstancesTwoDevicesAndEveryDeviceOfAGpu) {
  auto caps = MigCaps::Parse(kMinors, "mig-minors", 236);
  ASSERT_TRUE(caps.ok()) << caps.error().ToString();
  EXPECT_EQ(caps->major_number(), 236);
  EXPECT_EQ(caps->size(), 8u) << "config and monitor are not instances' access devices";
  const auto mine = caps->Instance(0, 1, 0);
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(mine->first, (CharDevice{236, 12}));
  EXPECT_EQ(mine->second, (CharDevice{236, 13}));
  EXPECT_FALSE(caps->Instance(0, 1, 1).has_value()) << "no such compute instance listed";
  EXPECT_FALSE(caps->Instance(0, 5, 0).has_value());
  EXPECT_FALSE(caps->Instance(0, 1, -1).has_value());
  const std::vector<CharDevice> gpu0 = caps->OnGpu(0);
  EXPECT_EQ(gpu0, (std::vector<CharDevice>{{236, 3}, {236, 4}, {236, 5}, {236, 12}, {236, 13}}));
  EXPECT_EQ(caps->OnGpu(1), (std::vector<CharDevice>{{236, 138}, {236, 139}})) << "not GPU 10's";
  EXPECT_TRUE(caps->OnGpu(2).empty());
  EXPECT_EQ(MigCaps::Path({236, 12}), "/dev/nvidia-caps/nvidia-cap12");
}

TEST(MigCapsTest, ABadLineIsNamedByFileAndLineAndUnknownNamesAreSkipped) {
  auto bad = MigCaps::Parse("config 1\ngpu0/gi0/access three\n",
                            "/proc/driver/nvidia-caps/mig-minors", 236);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      bad.error().ToString(),
      "/proc/driver/nvidia-caps/mig-minors:2: expected NAME MINOR (e.g. gpu0/gi1/access 12), got "
      "\"gpu0/gi0/access three\"");
  EXPECT_FALSE(MigCaps::Parse("gpu0/gi0/access 3 4\n", "f", 1).ok()) << "a third field";
  EXPECT_FALSE(MigCaps::Parse("gpu0/gi0/access -3\n", "f", 1).ok());
  EXPECT_FALSE(MigCaps::Parse("gpu0/gi0/access\n", "f", 1).ok());
  // Names of a later driver, or not quite ours, are not instances: skipped, not refused.
  auto odd = MigCaps::Parse(
      "\nfabric-imex-mgmt 7\ngpu0/gi0/xx/access 8\ngpux/gi0/access 9\ngpu0/gi0/ci0/access 10\n",
      "f", 1);
  ASSERT_TRUE(odd.ok()) << odd.error().ToString();
  EXPECT_EQ(odd->OnGpu(0), (std::vector<CharDevice>{{1, 10}}));
}

// A kernel file, but read by a root process: mangled copies of it (bytes changed, cut,
// doubled, junk put in) are either read or refused with the file and a line that exists,
// never more (run under ASan+UBSan in CI, as the unit tests are).
TEST(MigCapsTest, MangledListsAreReadOrRefusedByLine) {
  std::mt19937 rng(7);
  const std::string base = kMinors;
  const std::string junk[] = {" ",  "\t",     "\n", "/",           "gpu", "gi",
                              "ci", "access", "-",  "99999999999", "x"};
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = base;
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 4) {
        case 0:
          if (at < text.size()) text[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.resize(at);
          break;
        case 2:
          text.insert(at, junk[rng() % std::size(junk)]);
          break;
        default:
          text.insert(at, text.substr(at, rng() % 40));
          break;
      }
    }
    const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    auto caps = MigCaps::Parse(text, "f", 236);
    if (caps.ok()) {
      for (int gpu = 0; gpu < 12; ++gpu) {
        for (const CharDevice& d : caps->OnGpu(gpu)) EXPECT_EQ(d.major, 236);
      }
      continue;
    }
    ++refused;
    const std::string& where = caps.error().field;
    ASSERT_TRUE(where.starts_with("f:")) << caps.error().ToString();
    const int line = std::stoi(where.substr(2));
    EXPECT_GE(line, 1) << caps.error().ToString();
    EXPECT_LE(line, lines) << caps.error().ToString();
  }
  EXPECT_GT(refused, 100) << "the mangling should break some lines";
}

TEST(MigCapsTest, LoadReadsTheListAndTheMajorFromProc) {
  const fs::path proc =
      fs::temp_directory_path() / ("gantry-migcaps-" + std::to_string(::getpid()));
  fs::remove_all(proc);
  fs::create_directories(proc / "driver" / "nvidia-caps");
  auto missing = MigCaps::Load(proc.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().ToString().find("mig-minors: cannot read it"), std::string::npos)
      << missing.error().ToString();
  std::ofstream(proc / "driver" / "nvidia-caps" / "mig-minors") << kMinors;
  std::ofstream(proc / "devices")
      << "Character devices:\n  1 mem\n195 nvidia-frontend\n511 nvidia-uvm\n\n"
         "Block devices:\n237 nvidia-caps\n";
  auto no_major = MigCaps::Load(proc.string());
  ASSERT_FALSE(no_major.ok()) << "a block device of that name is not it";
  EXPECT_NE(no_major.error().ToString().find("no nvidia-caps character device"), std::string::npos)
      << no_major.error().ToString();
  std::ofstream(proc / "devices")
      << "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n"
         "511 nvidia-uvm\n\nBlock devices:\n  8 sd\n";
  auto caps = MigCaps::Load(proc.string());
  ASSERT_TRUE(caps.ok()) << caps.error().ToString();
  EXPECT_EQ(caps->major_number(), 236);
  EXPECT_EQ(caps->Instance(1, 0, 0)->second, (CharDevice{236, 139}));
  fs::remove_all(proc);
}

}  // namespace
}  // namespace gantry::agent
