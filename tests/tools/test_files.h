// Helpers for the converter and generator tests: a private temporary folder, writing
// plain and gzip files, reading lines back, and running the project's readers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "spec/config_reader.h"
#include "spec/job_reader.h"

namespace gantry::testing {

namespace fs = std::filesystem;

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("gantry-tools-") + info->test_suite_name() +
                                        "-" + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string Write(const std::string& name, const std::string& text) const {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return Path(name);
  }

  std::string WriteGz(const std::string& name, const std::string& text) const {
    fs::create_directories((dir_ / name).parent_path());
    gzFile f = gzopen(Path(name).c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
    gzclose(f);
    return Path(name);
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static std::vector<std::string> Lines(const std::string& path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

  // Reads DIR/cluster.yaml, DIR/trace.jsonl (and DIR/failures.jsonl when present) with
  // the project's readers; every diagnostic fails the test. Returns the config.
  static std::optional<spec::ClusterConfig> ReadOutput(const std::string& dir,
                                                       size_t* jobs = nullptr) {
    spec::Diagnostics diags;
    auto config = spec::ReadClusterConfig(dir + "/cluster.yaml", diags);
    EXPECT_TRUE(config.has_value()) << diags.ToString();
    if (!config) return config;
    spec::TraceReader reader(dir + "/trace.jsonl", *config);
    core::TraceJob job;
    size_t n = 0;
    while (reader.Next(job, diags)) ++n;
    if (fs::exists(dir + "/failures.jsonl")) {
      auto failures = spec::ReadFailures(dir + "/failures.jsonl", config->cluster, diags);
      EXPECT_TRUE(failures.has_value());
    }
    EXPECT_TRUE(diags.empty()) << diags.ToString();
    if (jobs != nullptr) *jobs = n;
    return config;
  }

  fs::path dir_;
};

}  // namespace gantry::testing
