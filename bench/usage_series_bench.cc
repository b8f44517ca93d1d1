// What the usage time series costs the store (issue 12): a day of samples for a cluster
// of N nodes x G GPUs, every GPU held by its own one-GPU job (the most rows), one sample
// per job per interval, written as gantryd writes them (one transaction per batch of a
// heartbeat round), into a real SQLite database; then the file size, the write rate,
// reading one job's series, and pruning half of it.
//   usage_series_bench [--nodes 1000] [--gpus 8] [--interval-s 300] [--days 1] [--db PATH]
// Prints one line of figures; docs/benchmarks.md has them.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server/sqlite_store.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  int64_t total = 0;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (::stat((path + suffix).c_str(), &st) == 0) total += st.st_size;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 1000, gpus = 8;
  double interval_s = 300, days = 1;
  std::string db = "/tmp/gantry-usage-series-bench.db";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--nodes")
      nodes = std::atoi(argv[i + 1]);
    else if (k == "--gpus")
      gpus = std::atoi(argv[i + 1]);
    else if (k == "--interval-s")
      interval_s = std::atof(argv[i + 1]);
    else if (k == "--days")
      days = std::atof(argv[i + 1]);
    else if (k == "--db")
      db = argv[i + 1];
    else {
      std::fprintf(stderr, "usage_series_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((db + suffix).c_str());
  auto store = gantry::server::SqliteStore::Open(db);
  if (!store) {
    std::fprintf(stderr, "usage_series_bench: %s\n", store.error().message.c_str());
    return 1;
  }
  const int64_t jobs = int64_t{nodes} * gpus;
  const auto interval_ms = static_cast<int64_t>(interval_s * 1000);
  const auto rounds = static_cast<int64_t>(days * 86'400'000 / static_cast<double>(interval_ms));
  const int64_t t0 = 1'790'000'000'000;
  // gantryd takes a heartbeat round's messages in one batch: here, each round's samples
  // (at most 2,000 per transaction, as one batch of heartbeats carries).
  constexpr int64_t kBatch = 2000;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t j0 = 0; j0 < jobs; j0 += kBatch) {
      if (auto s = (*store)->Begin(); !s)
        return std::fprintf(stderr, "%s\n", s.error().message.c_str()), 1;
      for (int64_t j = j0; j < std::min(jobs, j0 + kBatch); ++j) {
        const gantry::server::UsageSample u{j + 1,
                                            1,
                                            t0 + r * interval_ms + j % 1000,
                                            1,
                                            0.5 + 0.05 * static_cast<double>((j * 7 + r) % 10),
                                            int64_t{40} << 30};
        if (auto s = (*store)->AddUsageSample(u); !s)
          return std::fprintf(stderr, "%s\n", s.error().message.c_str()), 1;
      }
      if (auto s = (*store)->Commit(); !s)
        return std::fprintf(stderr, "%s\n", s.error().message.c_str()), 1;
    }
  }
  const double write_s = Seconds(start);
  const int64_t rows = rounds * jobs;
  const int64_t bytes = FileBytes(db);
  auto read_start = std::chrono::steady_clock::now();
  auto series = (*store)->UsageSamples(jobs / 2);
  const double read_ms = Seconds(read_start) * 1000;
  if (!series) return std::fprintf(stderr, "%s\n", series.error().message.c_str()), 1;
  auto prune_start = std::chrono::steady_clock::now();
  if (auto s = (*store)->Begin(); !s) return 1;
  auto pruned = (*store)->PruneUsageSamples(t0 + rounds / 2 * interval_ms);
  if (!pruned) return std::fprintf(stderr, "%s\n", pruned.error().message.c_str()), 1;
  if (auto s = (*store)->Commit(); !s) return 1;
  const double prune_s = Seconds(prune_start);
  std::printf(
      "nodes=%d gpus_per_node=%d jobs=%lld interval_s=%g days=%g rows=%lld db_bytes=%lld "
      "bytes_per_row=%.1f "
      "write_s=%.2f rows_per_s=%.0f one_job_series_rows=%zu read_ms=%.2f pruned_rows=%lld "
      "prune_s=%.2f\n",
      nodes, gpus, static_cast<long long>(jobs), interval_s, days, static_cast<long long>(rows),
      static_cast<long long>(bytes), static_cast<double>(bytes) / static_cast<double>(rows),
      write_s, static_cast<double>(rows) / write_s, series->size(), read_ms,
      static_cast<long long>(*pruned), prune_s);
  return 0;
}
