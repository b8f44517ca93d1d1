#include "sim/convert/philly.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "sim/convert/line_reader.h"
#include "sim/convert/rigid.h"

namespace gantry::convert {
namespace {

// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

std::optional<int64_t> ParseTimestamp(std::string_view s) {
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto num = [&](size_t at, size_t len) -> std::optional<int64_t> {
    return ParseInt(s.substr(at, len));
  };
  auto y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
       se = num(17, 2);
  if (!y || !mo || !d || !h || !mi || !se) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60) {
    return std::nullopt;
  }
  return DaysFromCivil(*y, *mo, *d) * 86400 + *h * 3600 + *mi * 60 + *se;
}

int64_t MondayOnOrBefore(int64_t t) {
  int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
  // 1970-01-01 was a Thursday: weekday (Monday = 0) is (days + 3) mod 7.
  const int64_t weekday = ((days + 3) % 7 + 7) % 7;
  return (days - weekday) * 86400;
}

Result<ConvertSummary> ConvertPhilly(const ConvertOptions& o) {
  if (o.inputs.size() != 1) {
    return Error{"--input", "philly takes one file (philly.csv or philly.csv.gz), got " +
                                std::to_string(o.inputs.size())};
  }
  LineReader in;
  if (Status s = in.Open(o.inputs[0]); !s.ok()) return Error{"--input", s.error().message};
  std::string line;
  if (!in.Next(line)) return Error{"--input", o.inputs[0] + ": empty file"};
  const std::vector<std::string_view> header = SplitFields(line, ',');
  const std::vector<std::string_view> expected = {"timestamp", "duration", "num_gpus", "gpu_time",
                                                  "cluster"};
  if (header != expected) {
    return Error{"--input", Where(in) +
                                ": expected the header timestamp,duration,num_gpus,"
                                "gpu_time,cluster, got \"" +
                                line + "\""};
  }
  ConvertSummary summary;
  std::vector<RigidJob> jobs;
  std::vector<int64_t> stamps;  // absolute submit times, converted once the origin is known
  std::map<std::string, uint32_t> queue_index;
  std::vector<std::string> queues;
  while (in.Next(line)) {
    if (line.empty()) continue;
    ++summary.rows;
    const std::vector<std::string_view> f = SplitFields(line, ',');
    if (f.size() != 5) {
      ++summary.dropped["malformed row"];
      continue;
    }
    std::optional<int64_t> t = ParseTimestamp(f[0]);
    std::optional<double> dur = ParseDouble(f[1]);
    std::optional<int64_t> gpus = ParseInt(f[2]);
    if (!t || !dur || !gpus || *dur < 0 || *gpus < 0 || f[4].empty()) {
      ++summary.dropped["malformed row"];
      continue;
    }
    if (*gpus == 0) {
      ++summary.dropped["no GPUs"];
      continue;
    }
    RigidJob j;
    j.id = "philly-" + std::to_string(in.line_number() - 1);  // data row number
    j.duration = *dur;
    if (j.duration < 1) {
      j.duration = 1;
      ++summary.adjusted["duration raised to 1 s"];
    }
    j.gpus = static_cast<int>(*gpus);
    auto [it, fresh] = queue_index.emplace(std::string(f[4]), static_cast<uint32_t>(queues.size()));
    if (fresh) queues.emplace_back(f[4]);
    j.queue = it->second;
    stamps.push_back(*t);
    jobs.push_back(std::move(j));
  }
  if (!in.error().empty()) return Error{"--input", in.error()};
  int64_t first = INT64_MAX;
  for (int64_t t : stamps) first = std::min(first, t);
  const int64_t origin = jobs.empty() ? 0 : MondayOnOrBefore(first);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].submit = static_cast<double>(stamps[i] - origin);
  stamps = {};
  // Queues in name order, so the config does not depend on row order.
  std::vector<std::string> sorted_names = queues;
  std::sort(sorted_names.begin(), sorted_names.end());
  std::vector<uint32_t> remap(queues.size());
  for (size_t i = 0; i < queues.size(); ++i) {
    remap[i] = static_cast<uint32_t>(
        std::lower_bound(sorted_names.begin(), sorted_names.end(), queues[i]) -
        sorted_names.begin());
  }
  for (RigidJob& j : jobs) j.queue = remap[j.queue];

  RigidPlan plan;
  plan.cluster.name = o.name.empty() ? "philly" : o.name;
  plan.cluster.comments = {
      "Converted by `gantry trace convert --format philly` from " + o.inputs[0] + ".",
      "Simulated time 0 = the Monday 00:00 UTC before the first submit; one queue per VC;",
      "8-GPU V100-32GB nodes (the Philly hardware is not in the list); see docs/traces.md."};
  plan.node_shape.name = "v100";
  plan.node_shape.gpus = 8;
  plan.node_shape.gpu_model = "V100-32GB";
  plan.node_shape.cpus = 40;
  plan.node_shape.memory_gb = 512;
  plan.nodes = o.nodes;
  plan.queues = std::move(sorted_names);
  plan.vram_gb = 16;
  plan.limit = o.limit;
  plan.out = o.out;
  return WriteRigid(std::move(plan), std::move(jobs), std::move(summary));
}

}  // namespace gantry::convert
