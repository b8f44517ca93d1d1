// Running the built gantry binary from tests, as a user runs it: its exit status and
// what it printed, and a fixture with a private temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace gantry::testing {

struct Outcome {
  int status;
  std::string output;  // stdout and stderr
};

// Runs a shell command; its stdout (a pipe) is the output.
inline Outcome Shell(const std::string& cmd) {
  Outcome r{-1, {}};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// Runs `gantry ARGS` (stdout and stderr are pipes, not a terminal).
inline Outcome Gantry(const std::string& args) {
  return Shell(std::string(GANTRY_BINARY) + " " + args + " 2>&1");
}

inline std::string Examples() { return GANTRY_SOURCE_DIR "/examples"; }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gantry-cli-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
    // Submits to an address nothing listens on fail after one retry, not after 30 s.
    ::setenv("GANTRY_SUBMIT_RETRY_S", "0.3", 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace gantry::testing
