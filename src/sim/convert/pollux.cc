#include "sim/convert/pollux.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <span>
#include <vector>

#include "sim/convert/convert.h"
#include "sim/convert/line_reader.h"
#include "sim/convert/rigid.h"

namespace gantry::convert {
namespace {

namespace fs = std::filesystem;

// sia-simulator's default heterogeneous cluster: aws 6 x 4 T4, rtx 3 x 8 RTX 2080 Ti,
// dgx-ext 2 x 8 A100. Each pool is named as the Sia artifact names its GPU type's profiles
// (placements-TYPE.csv, packed `gpus` to a node); aws's are the unsuffixed ones, whose run
// times are the jobs' durations (speed 1).
struct SiaPool {
  const char* name;
  int count, gpus;
  const char* model;
  double cpus, memory_gb;
};
constexpr SiaPool kSiaPools[] = {{"aws", 6, 4, "T4-16GB", 48, 192},
                                 {"rtx", 3, 8, "RTX2080Ti", 32, 256},
                                 {"dgx-ext", 2, 8, "A100-40GB", 128, 1024}};

// Pollux's applications.py caps the local batch of yolov3 at 8 (memory); the others
// take the largest local batch their placement table measured.
double MaxLocalBatch(const std::string& app) { return app == "yolov3" ? 8 : 0; }

// Reads a CSV with a header into rows of named numeric columns; rows with a non-numeric
// field in `numeric` are skipped.
Result<std::vector<std::map<std::string, double>>> ReadTable(
    const std::string& path, const std::vector<std::string>& numeric) {
  LineReader in;
  if (Status s = in.Open(path); !s.ok()) return s.error();
  std::string line;
  if (!in.Next(line)) return Error{"", path + ": empty file"};
  const auto header = SplitFields(line, ',');
  std::vector<size_t> at;
  for (const std::string& name : numeric) {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) return Error{"", path + ":1: no \"" + name + "\" column"};
    at.push_back(static_cast<size_t>(it - header.begin()));
  }
  std::vector<std::map<std::string, double>> rows;
  while (in.Next(line)) {
    const auto f = SplitFields(line, ',');
    std::map<std::string, double> row;
    bool ok = f.size() == header.size();
    for (size_t k = 0; k < numeric.size() && ok; ++k) {
      auto v = ParseDouble(f[at[k]]);
      ok = v.has_value();
      if (ok) row[numeric[k]] = *v;
    }
    if (ok) rows.push_back(std::move(row));
  }
  if (!in.error().empty()) return Error{"", in.error()};
  return rows;
}

// The placement id Pollux looks up: replicas packed `per_node` to a node (Pollux's
// profiles: AWS g4dn.12xlarge, 4 T4s a node), as digits, rotated to the lexicographically
// smallest form (6 -> "42" -> "24").
std::string PlacementId(int replicas, int per_node) {
  std::string digits;
  for (int left = replicas; left > 0; left -= per_node) {
    digits += static_cast<char>('0' + std::min(left, per_node));
  }
  std::string best = digits;
  for (size_t i = 1; i < digits.size(); ++i) {
    best = std::min(best, digits.substr(i) + digits.substr(0, i));
  }
  return best;
}

}  // namespace

std::optional<std::pair<double, double>> AppProfile::Interpolate(const std::vector<StepRow>& rows,
                                                                 double x) {
  if (rows.empty()) return std::nullopt;
  if (x <= rows.front().local_bsz) return std::pair{rows.front().step, rows.front().sync};
  if (x >= rows.back().local_bsz) return std::pair{rows.back().step, rows.back().sync};
  for (size_t i = 1; i < rows.size(); ++i) {
    if (x <= rows[i].local_bsz) {
      const StepRow& a = rows[i - 1];
      const StepRow& b = rows[i];
      const double w =
          b.local_bsz == a.local_bsz ? 0 : (x - a.local_bsz) / (b.local_bsz - a.local_bsz);
      return std::pair{a.step + w * (b.step - a.step), a.sync + w * (b.sync - a.sync)};
    }
  }
  return std::nullopt;
}

Result<AppProfile> AppProfile::Load(const std::string& dir, const std::string& app,
                                    const std::string& gpu_type, int gpus_per_node) {
  AppProfile p;
  p.gpus_per_node_ = gpus_per_node;
  const std::string suffix = gpu_type.empty() ? "" : "-" + gpu_type;
  std::error_code ec;
  std::vector<fs::path> validation;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("validation-", 0) == 0 && n.size() > 15 && n.substr(n.size() - 4) == ".csv") {
      validation.push_back(e.path());
    }
  }
  if (ec) return Error{"--profiles", dir + ": " + ec.message()};
  for (const fs::path& v : validation) {
    const std::string n = v.filename().string();
    auto bsz = ParseInt(std::string_view(n).substr(11, n.size() - 15));
    if (!bsz || *bsz < 1) continue;
    auto rows = ReadTable(v.string(), {"iteration"});
    if (!rows.ok()) return Error{"--profiles", rows.error().message};
    if (rows->empty()) continue;
    p.iterations_[static_cast<int>(*bsz)] = rows->back().at("iteration");
  }
  if (p.iterations_.empty())
    return Error{"--profiles", dir + ": no validation-<batch>.csv for " + app};
  auto placements = ReadTable((fs::path(dir) / ("placements" + suffix + ".csv")).string(),
                              {"placement", "local_bsz", "step_time", "sync_time"});
  if (!placements.ok()) return Error{"--profiles", placements.error().message};
  for (const auto& r : *placements) {
    const std::string id = std::to_string(static_cast<int64_t>(r.at("placement")));
    p.placements_[id].push_back({r.at("local_bsz"), r.at("step_time"), r.at("sync_time")});
    p.max_local_bsz_ = std::max(p.max_local_bsz_, r.at("local_bsz"));
  }
  auto scal = ReadTable((fs::path(dir) / ("scalability" + suffix + ".csv")).string(),
                        {"num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"});
  if (scal.ok()) {  // optional: only jobs above 16 replicas need it
    for (const auto& r : *scal) {
      p.scalability_[static_cast<int>(r.at("num_replicas"))][static_cast<int>(r.at("num_nodes"))]
          .push_back({r.at("local_bsz"), r.at("step_time"), r.at("sync_time")});
    }
  }
  auto by_bsz = [](const StepRow& a, const StepRow& b) { return a.local_bsz < b.local_bsz; };
  for (auto& [id, rows] : p.placements_) std::stable_sort(rows.begin(), rows.end(), by_bsz);
  for (auto& [n, by_nodes] : p.scalability_) {
    for (auto& [nodes, rows] : by_nodes) std::stable_sort(rows.begin(), rows.end(), by_bsz);
  }
  if (double cap = MaxLocalBatch(app); cap > 0) p.max_local_bsz_ = cap;
  return p;
}

std::optional<double> AppProfile::RunTime(int replicas, double batch) const {
  if (replicas < 1 || !(batch > 0) || max_local_bsz_ <= 0) return std::nullopt;
  // Iterations to the final epoch, linear between the validated batch sizes around it.
  double iterations = 0;
  auto hi = iterations_.lower_bound(static_cast<int>(std::ceil(batch)));
  if (hi == iterations_.end()) {
    iterations = std::prev(hi)->second;
  } else if (hi == iterations_.begin() || hi->first == batch) {
    iterations = hi->second;
  } else {
    auto lo = std::prev(hi);
    const double w = (batch - lo->first) / (hi->first - lo->first);
    iterations = lo->second + w * (hi->second - lo->second);
  }
  // Local batch per replica; above what one GPU holds, gradient accumulation.
  const double local = std::ceil(batch / replicas - 1e-8);
  const double accum = std::max(0.0, std::ceil(local / max_local_bsz_ - 1e-8) - 1);
  const double atomic = std::ceil(local / (accum + 1) - 1e-8);
  std::optional<std::pair<double, double>> st;
  if (auto it = placements_.find(PlacementId(replicas, gpus_per_node_)); it != placements_.end()) {
    st = Interpolate(it->second, atomic);
  } else if (auto s = scalability_.find(replicas); s != scalability_.end() && !s->second.empty()) {
    const int nodes = (replicas + gpus_per_node_ - 1) / gpus_per_node_;
    auto n = s->second.lower_bound(nodes);
    if (n == s->second.end()) n = std::prev(n);
    st = Interpolate(n->second, atomic);
  }
  if (!st) return std::nullopt;
  const double step = st->first + accum * (st->first - st->second);
  return iterations * step;
}

std::optional<double> DefaultRunTime(const std::string& application) {
  // The median of the profile-derived run times of the application over every Pollux
  // and Sia workload file, rounded (docs/traces.md); used only where no profile applies.
  static const std::map<std::string, double> kDefaults = {
      {"bert", 2500},      {"cifar10", 830}, {"deepspeech2", 3500},
      {"imagenet", 50000}, {"ncf", 33},      {"yolov3", 12900}};
  auto it = kDefaults.find(application);
  if (it == kDefaults.end() || it->second <= 0) return std::nullopt;
  return it->second;
}

Result<ConvertSummary> ConvertPollux(const ConvertOptions& o, bool sia) {
  const std::string format = sia ? "sia" : "pollux";
  if (o.inputs.empty()) return Error{"--input", format + " takes one or more workload CSVs"};
  if (sia && o.nodes > 0) {
    return Error{"--nodes", "sia's cluster has three pools; scale it with --cluster-scale"};
  }
  // Loaded on first use, by application and GPU type ("": Pollux's T4 profile, Sia's aws).
  std::map<std::pair<std::string, std::string>, std::optional<AppProfile>> profiles;
  auto profile_of = [&](const std::string& app, const std::string& type = "",
                        int per_node = 4) -> const AppProfile* {
    if (o.profiles.empty()) return nullptr;
    auto [it, fresh] = profiles.try_emplace({app, type});
    if (fresh) {
      const fs::path dir = fs::path(o.profiles) / app;
      std::error_code ec;
      if (fs::is_directory(dir, ec)) {
        Result<AppProfile> p = AppProfile::Load(dir.string(), app, type, per_node);
        if (p.ok()) it->second = std::move(p).value();
      }
    }
    return it->second ? &*it->second : nullptr;
  };
  if (!o.profiles.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.profiles, ec))
      return Error{"--profiles", o.profiles + ": not a folder"};
  }

  ConvertSummary summary;
  std::vector<RigidJob> jobs;
  std::map<std::string, int> seen;
  for (const std::string& file : o.inputs) {
    LineReader in;
    if (Status s = in.Open(file); !s.ok()) return Error{"--input", s.error().message};
    std::string line;
    if (!in.Next(line)) continue;
    const auto header = SplitFields(line, ',');
    const std::vector<std::string_view> expected = {"name", "time", "application", "num_replicas",
                                                    "batch_size"};
    if (header != expected) {
      return Error{"--input", Where(in) +
                                  ": expected the header name,time,application,"
                                  "num_replicas,batch_size, got \"" +
                                  line + "\""};
    }
    const std::string prefix = o.inputs.size() > 1 ? fs::path(file).stem().string() + "/" : "";
    while (in.Next(line)) {
      if (line.empty()) continue;
      ++summary.rows;
      const auto f = SplitFields(line, ',');
      std::optional<double> time, batch;
      std::optional<int64_t> replicas;
      if (f.size() == 5) {
        time = ParseDouble(f[1]);
        replicas = ParseInt(f[3]);
        batch = ParseDouble(f[4]);
      }
      if (!time || !replicas || !batch || *time < 0 || *replicas < 1 || *replicas > 1024 ||
          *batch <= 0 || f[0].empty()) {
        ++summary.dropped["malformed row"];
        continue;
      }
      const std::string app(f[2]);
      std::optional<double> run;
      if (const AppProfile* p = profile_of(app))
        run = p->RunTime(static_cast<int>(*replicas), *batch);
      const bool run_from_profile = run.has_value();
      if (!run) {
        run = DefaultRunTime(app);
        if (!run) {
          ++summary.dropped["application without a profile or default"];
          continue;
        }
        ++summary.adjusted["run time from the per-application default"];
      }
      RigidJob j;
      // Sia: the other GPU types' speeds against the aws (T4) run time, from their own
      // profiles (speed_by_model).
      if (sia && run_from_profile) {
        j.speed_by_model.emplace_back(kSiaPools[0].model, 1.0);
        for (const SiaPool& t : std::span(kSiaPools).subspan(1)) {
          const AppProfile* p = profile_of(app, t.name, t.gpus);
          const std::optional<double> there =
              p ? p->RunTime(static_cast<int>(*replicas), *batch) : std::nullopt;
          if (!there || !(*there > 0)) {
            j.speed_by_model.clear();
            ++summary.adjusted["no speed by GPU type: a type's profile lacks the placement"];
            break;
          }
          j.speed_by_model.emplace_back(t.model, *run / *there);
        }
      }
      const std::string base = prefix + std::string(f[0]);
      const int n = ++seen[base];
      j.id = n == 1 ? base : base + "-" + std::to_string(n);
      if (n > 1) ++summary.adjusted["repeated name renamed"];
      j.submit = *time;
      j.duration = std::max(1.0, std::round(*run * 1000) / 1000);
      j.gpus = static_cast<int>(*replicas);
      // --elastic: its run time at each GPU count from the profile (the same batch size;
      // Pollux would also adapt the batch, which is not modelled).
      if (o.elastic_checkpoint_s > 0 && j.gpus > 1) {
        const AppProfile* p = profile_of(app);
        for (int g = 1; p != nullptr && g <= j.gpus; ++g) {
          const std::optional<double> t = p->RunTime(g, *batch);
          if (!t || !(*t > 0)) {
            j.run_time_by_gpus.clear();
            break;
          }
          j.run_time_by_gpus.push_back(*t);
        }
        if (j.run_time_by_gpus.empty()) ++summary.adjusted["not elastic: no profile at every size"];
      }
      jobs.push_back(std::move(j));
    }
    if (!in.error().empty()) return Error{"--input", in.error()};
  }

  RigidPlan plan;
  plan.elastic_checkpoint_s = o.elastic_checkpoint_s;
  plan.cluster.name = o.name.empty() ? format : o.name;
  plan.cluster.comments = {"Converted by `gantry trace convert --format " + format +
                               "`; run times from the " +
                               (o.profiles.empty() ? std::string("per-application defaults")
                                                   : "profiles in " + o.profiles) +
                               ".",
                           "See docs/traces.md \"pollux and sia\"."};
  const int scale = std::max(1, o.cluster_scale);
  auto pool = [](std::string name, int count, int gpus, std::string model, double cpus,
                 double mem) {
    PoolOut p;
    p.name = std::move(name);
    p.count = count;
    p.gpus = gpus;
    p.gpu_model = std::move(model);
    p.cpus = cpus;
    p.memory_gb = mem;
    return p;
  };
  if (sia) {
    plan.cluster.models.push_back({"RTX2080Ti", 11});
    for (const SiaPool& p : kSiaPools)
      plan.cluster.pools.push_back(
          pool(p.name, p.count * scale, p.gpus, p.model, p.cpus, p.memory_gb));
    plan.vram_gb = 11;
  } else {
    // Pollux's default: 16 g4dn.12xlarge nodes, 4 T4 each.
    const int nodes = o.nodes > 0 ? o.nodes : 16 * scale;
    plan.cluster.pools.push_back(pool("t4", nodes, 4, "T4-16GB", 48, 192));
    plan.vram_gb = 16;
  }
  plan.queues = {"default"};
  plan.limit = o.limit;
  plan.out = o.out;
  return WriteRigid(std::move(plan), std::move(jobs), std::move(summary));
}

}  // namespace gantry::convert
