// Helpers shared by the integration tests: the job script they run (job.sh), reading
// its logs and environment files, the event log, and CLI submits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace gantry::it {

// job.sh OUT_DIR MILLISECONDS [SECONDS_TO_CLEAN_UP_AFTER_SIGTERM]
inline constexpr const char* kJobScript = R"SH(#!/bin/sh
out="$1/$GANTRY_JOB_ID.$GANTRY_RUN.$GANTRY_RANK"
now() { date +%s.%N; }
trap 'echo "term $(now)" >> "$out.log"; sleep ${3:-0.3}; echo "graceful $(now)" >> "$out.log"; exit 0' TERM
env > "$out.env.tmp" && mv "$out.env.tmp" "$out.env"
echo "start $(now)" >> "$out.log"
end=$(( $(date +%s%3N) + $2 ))
while [ "$(date +%s%3N)" -lt "$end" ]; do echo "alive $(now)" >> "$out.log"; sleep 0.1; done
echo "end $(now)" >> "$out.log"
)SH";

// Timestamps of one kind of line in a run's log ("start", "alive", "term", ...).
inline std::vector<double> Times(const std::string& path, const std::string& kind) {
  std::vector<double> out;
  // Line by line: the group-wide SIGTERM may kill a `date` mid-line, leaving "alive "
  // with no time, which must not end the parse.
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string k;
    double t = 0;
    if (fields >> k >> t && k == kind) out.push_back(t);
  }
  return out;
}

inline std::vector<json> Events(const Harness& h) {
  std::vector<json> out;
  std::ifstream in(h.Path("events.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    json e = json::parse(line, nullptr, false);
    EXPECT_TRUE(e.is_object()) << "event log line is not JSON: " << line;
    if (e.is_object()) out.push_back(e);
  }
  return out;
}

inline int CountEvents(const std::vector<json>& events, const std::string& type,
                       const std::string& job) {
  return static_cast<int>(std::count_if(events.begin(), events.end(), [&](const json& e) {
    return e.value("type", "") == type && e.value("job", "") == job;
  }));
}

// How often `needle` occurs in `text` (overlapping occurrences count).
inline size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

inline std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

inline std::string Submit(const Harness& h, const std::string& team,
                          std::vector<std::string> args) {
  args.insert(args.begin(), "submit");
  RunResult r = h.Cli(args, h.token(team));
  EXPECT_EQ(r.rc, 0) << r.err;
  std::string id = r.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

inline std::vector<std::string> Job(const Harness& h, int ms, double cleanup_s = 0.3) {
  return {h.Path("job.sh"), h.Path("out"), std::to_string(ms), std::to_string(cleanup_s)};
}

inline size_t CountEnded(const Harness& h, const std::set<std::string>& ids) {
  json jobs = h.Jobs();
  size_t ended = 0;
  for (const json& j : jobs) {
    const std::string state = j.value("state", "");
    if (ids.count(j.value("id", "")) && state != "pending" && state != "running" &&
        state != "stopping")
      ++ended;
  }
  return ended;
}

inline bool AllEnded(const Harness& h, const std::set<std::string>& ids) {
  return CountEnded(h, ids) == ids.size();
}

// Waits until every job of `ids` ended, for as long as jobs keep ending: false when none
// ended for `stall_s` (a backlog that drains slowly is fine; a stuck one is not).
inline bool AllEndWhileProgressing(const Harness& h, const std::set<std::string>& ids,
                                   double stall_s) {
  size_t ended = 0;
  for (;;) {
    size_t now = ended;
    const bool moved = Harness::WaitFor(
        [&] {
          now = CountEnded(h, ids);
          return now == ids.size() || now > ended;
        },
        stall_s);
    if (now == ids.size()) return true;
    if (!moved) return false;
    ended = now;
  }
}

inline std::map<std::string, std::string> States(const Harness& h) {
  std::map<std::string, std::string> out;
  for (const json& j : h.Jobs()) out[j.value("id", "")] = j.value("state", "");
  return out;
}

// Every worker of every run of `id` that wrote an env file: run -> rank -> env.
inline std::map<int, std::map<int, std::map<std::string, std::string>>> Envs(
    const Harness& h, const std::string& id) {
  std::map<int, std::map<int, std::map<std::string, std::string>>> out;
  for (const auto& e : std::filesystem::directory_iterator(h.Path("out"))) {
    const std::string name = e.path().filename().string();
    if (name.rfind(id + ".", 0) != 0 || e.path().extension() != ".env") continue;
    auto parts = Split(name.substr(id.size() + 1), '.');  // RUN.RANK.env
    if (parts.size() != 3) continue;
    out[std::stoi(parts[0])][std::stoi(parts[1])] = ReadEnvFile(e.path().string());
  }
  return out;
}

}  // namespace gantry::it
