// The core is pure: no clocks, threads, files, sockets, logging or OS randomness, and it
// includes nothing from the layers that drive it. This test reads its sources to keep it so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

TEST(CorePurity, IncludesNothingImpure) {
  const std::filesystem::path core = std::filesystem::path(GANTRY_SOURCE_DIR) / "src" / "core";
  const char* forbidden[] = {"<chrono>", "<thread>",  "<mutex>",      "<fstream>", "<iostream>",
                             "<random>", "<ctime>",   "<filesystem>", "<cstdio>",  "<future>",
                             "\"sim/",   "\"server/", "\"agent/",     "\"spec/",   "\"cli/",
                             "<spdlog",  "<nlohmann", "<yaml-cpp",    "<sys/",     "<unistd.h>"};
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(core)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.rfind("#include", 0) != 0) continue;
      for (const char* f : forbidden) {
        EXPECT_EQ(line.find(f), std::string::npos) << entry.path() << ":" << n << ": " << line;
      }
    }
  }
  EXPECT_GT(files, 10);
}

}  // namespace
