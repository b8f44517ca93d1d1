// Helpers shared by the integration tests: the job script they run (job.sh), reading
// its logs and environment files, the event log, and CLI submits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// elastic.sh OUT_DIR WORK_MS [SECONDS_TO_CLEAN_UP_AFTER_SIGTERM]: WORK_MS of work at the
// job's full size, resumed from its checkpointed progress and done at the pace of the
// workers it has now, as an elastic trainer would (job.sh does the logging).
inline constexpr const char* kElasticScript = R"SH(#!/bin/sh
left=$(awk -v w="$2" -v p="${GANTRY_PROGRESS_S:-0}" -v n="$GANTRY_WORLD_SIZE" \
  -v m="$GANTRY_MAX_WORLD_SIZE" 'BEGIN { l = w - p * 1000; if (l < 0) l = 0; printf "%d", l * m / n }')
exec "$(dirname "$0")/job.sh" "$1" "$left" "${3:-0.3}"
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

// A worker's time on its node, from its log: first line to last (from 1e300 and to 0 when
// it was killed before its first line).
struct Interval {
  double from = 0, to = 0;
  std::string job;
  int run = 0;
};

inline Interval RunInterval(const Harness& h, const std::string& id, int run, int rank) {
  const std::string log =
      h.Path("out/" + id + "." + std::to_string(run) + "." + std::to_string(rank) + ".log");
  Interval iv{1e300, 0, id, run};
  for (const char* kind : {"start", "alive", "term", "graceful", "end"}) {
    for (double t : Times(log, kind)) {
      iv.from = std::min(iv.from, t);
      iv.to = std::max(iv.to, t);
    }
  }
  return iv;
}

inline bool Overlap(const Interval& a, const Interval& b) { return a.from < b.to && b.from < a.to; }

// One worker's use of one GPU, from its environment.
struct Use {
  Interval iv;
  std::string mode;      // exclusive, mig, mps or time-sliced
  std::string instance;  // the MIG instance (CUDA_VISIBLE_DEVICES)
  double share = 1;      // MPS: GANTRY_GPU_SHARE
};

// Whether two uses of one GPU at overlapping times break its sharing.
inline bool Clash(const Use& a, const Use& b) {
  if (a.iv.job == b.iv.job && a.iv.run == b.iv.run) return false;
  if (!Overlap(a.iv, b.iv)) return false;
  if (a.mode == "exclusive" || b.mode == "exclusive" || a.mode != b.mode) return true;
  return a.mode == "mig" && a.instance == b.instance;  // MPS shares are summed separately
}

struct RunAudit {
  int runs = 0;                 // runs that wrote an environment
  size_t gpus = 0;              // GPUs some run used
  std::set<std::string> modes;  // the sharing modes seen
};

// What the jobs' own logs say, not gantryd's word: no job ran two runs at once (every
// worker of a run wrote its last line before any worker of another run of that job wrote
// its first), and no GPU was used by two runs at once beyond what its sharing allows (a
// whole GPU: one run; MIG: one run per instance, no MPS beside it; MPS: shares adding up
// to at most the GPU).
inline RunAudit AuditRuns(const Harness& h, const std::set<std::string>& ids) {
  RunAudit audit;
  std::map<std::string, std::vector<Use>> by_gpu;  // node/GPU index -> its uses
  for (const std::string& id : ids) {
    std::map<int, Interval> runs;  // run -> from its first worker's first line to the last's last
    for (const auto& [run, ranks] : Envs(h, id)) {
      ++audit.runs;
      for (const auto& [rank, env] : ranks) {
        Use use{RunInterval(h, id, run, rank), "exclusive", "", 1};
        if (use.iv.to == 0) continue;  // killed before its first line
        auto [it, first] = runs.try_emplace(run, use.iv);
        if (!first) {
          it->second.from = std::min(it->second.from, use.iv.from);
          it->second.to = std::max(it->second.to, use.iv.to);
        }
        if (env.count("GANTRY_MIG_PROFILE")) {
          use.mode = "mig";
          use.instance = env.at("CUDA_VISIBLE_DEVICES");
        } else if (env.count("GANTRY_GPU_SHARE")) {
          use.mode = env.count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ? "mps" : "time-sliced";
          use.share = std::stod(env.at("GANTRY_GPU_SHARE"));
        }
        audit.modes.insert(use.mode);
        for (const std::string& g : Split(env.at("GANTRY_GPUS"), ',')) {
          by_gpu[env.at("GANTRY_NODE") + "/" + g].push_back(use);
        }
      }
    }
    for (auto x = runs.begin(); x != runs.end(); ++x) {
      for (auto y = std::next(x); y != runs.end(); ++y) {
        EXPECT_FALSE(Overlap(x->second, y->second))
            << id << " runs " << x->first << " and " << y->first << " ran at the same time";
      }
    }
  }
  for (const auto& [gpu, uses] : by_gpu) {
    for (size_t x = 0; x < uses.size(); ++x) {
      double shares = 0;  // MPS shares running when this use started
      for (size_t y = 0; y < uses.size(); ++y) {
        const Use &a = uses[x], &b = uses[y];
        if (a.mode == "mps" && b.mode == "mps" && b.iv.from <= a.iv.from && a.iv.from < b.iv.to)
          shares += b.share;
        if (y <= x) continue;
        EXPECT_FALSE(Clash(a, b)) << gpu << " ran " << a.iv.job << "." << a.iv.run << " (" << a.mode
                                  << ") and " << b.iv.job << "." << b.iv.run << " (" << b.mode
                                  << ") at the same time";
      }
      EXPECT_LE(shares, 1.001) << gpu << ": MPS shares past the whole GPU when " << uses[x].iv.job
                               << " started";
    }
  }
  audit.gpus = by_gpu.size();
  return audit;
}

}  // namespace gantry::it
