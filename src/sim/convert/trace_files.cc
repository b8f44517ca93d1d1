#include "sim/convert/trace_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

namespace gantry::convert {

std::string Num(double x, int decimals) {
  std::string s = fmt::format("{:.{}f}", x, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string YamlString(const std::string& s) {
  // Only names starting with a letter stay plain: "103959" or "6214e9" (Philly VCs)
  // would read as numbers to a YAML reader that types its scalars.
  bool plain = !s.empty() &&
               ((s.front() >= 'a' && s.front() <= 'z') || (s.front() >= 'A' && s.front() <= 'Z'));
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    plain = plain && ok;
  }
  return plain ? s : JsonString(s);  // a JSON string is a valid double-quoted YAML scalar
}

int64_t ClusterOut::gpu_count() const {
  int64_t n = 0;
  for (const PoolOut& p : pools) n += int64_t{p.count} * p.gpus;
  return n;
}

Result<std::string> OutPath(const std::string& dir, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{"--out", "cannot create " + dir + ": " + ec.message()};
  return (std::filesystem::path(dir) / name).string();
}

Status WriteCluster(const std::string& path, const ClusterOut& c) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Error{"--out", "cannot write " + path};
  for (const std::string& line : c.comments) out << "# " << line << "\n";
  out << "cluster: " << YamlString(c.name) << "\n";
  if (!c.models.empty()) {
    out << "gpu_models:\n";
    for (const ModelOut& m : c.models) {
      out << "  - name: " << YamlString(m.name) << "\n    memory_gb: " << Num(m.memory_gb) << "\n";
    }
  }
  out << "pools:\n";
  for (const PoolOut& p : c.pools) {
    out << "  - name: " << YamlString(p.name) << "\n";
    out << "    count: " << p.count << "\n";
    out << "    gpus: " << p.gpus << "\n";
    if (p.gpus > 0) out << "    gpu_model: " << YamlString(p.gpu_model) << "\n";
    if (p.nvlink_domains > 0) out << "    nvlink_domains: " << p.nvlink_domains << "\n";
    if (p.leaf_size > 0) out << "    leaf_size: " << p.leaf_size << "\n";
    out << "    cpus: " << Num(p.cpus) << "\n";
    out << "    memory_gb: " << Num(p.memory_gb) << "\n";
    if (p.spot) out << "    spot: true\n";
    if (!p.sharing.empty()) {
      out << "    sharing: [";
      for (size_t i = 0; i < p.sharing.size(); ++i) out << (i ? ", " : "") << p.sharing[i];
      out << "]\n";
    }
  }
  out << "queues:\n";
  for (const QueueOut& q : c.queues) {
    out << "  - name: " << YamlString(q.name) << "\n";
    if (!q.parent.empty()) out << "    parent: " << YamlString(q.parent) << "\n";
    out << "    guaranteed_gpus: " << Num(q.guaranteed_gpus) << "\n";
    if (!q.guaranteed_by_model.empty()) {
      out << "    guaranteed_gpus_by_model:\n";
      for (const auto& [model, gpus] : q.guaranteed_by_model) {
        out << "      " << YamlString(model) << ": " << Num(gpus) << "\n";
      }
    }
    out << "    burst_gpus: " << Num(q.burst_gpus) << "\n";
    out << "    weight: " << Num(q.weight) << "\n";
  }
  if (c.reclaim_idle_after_s > 0) {
    out << "policy:\n  reclaim_idle_after_s: " << Num(c.reclaim_idle_after_s) << "\n";
  }
  if (!out.flush()) return Error{"--out", "write to " + path + " failed"};
  return Ok{};
}

double JobOut::total_gpus() const {
  double per_worker = gpus;
  if (!mig.empty()) {
    // "3g.40gb": 3 compute slices of 7.
    const int slices = mig[0] >= '1' && mig[0] <= '7' ? mig[0] - '0' : 1;
    per_worker = slices / 7.0;
  }
  return per_worker * replicas;
}

std::string JobJson(const JobOut& j) {
  std::string s = "{\"id\":" + JsonString(j.id);
  s += ",\"submit\":" + Num(j.submit) + ",\"duration\":" + Num(j.duration);
  s += ",\"queue\":" + JsonString(j.queue) + ",\"tier\":" + JsonString(j.tier);
  if (j.replicas != 1) s += ",\"replicas\":" + std::to_string(j.replicas);
  if (j.min_replicas > 0) s += ",\"min_replicas\":" + std::to_string(j.min_replicas);
  if (!j.speedup.empty()) {
    s += ",\"speedup\":[";
    for (size_t i = 0; i < j.speedup.size(); ++i)
      s += (i ? "," : "") + fmt::format("{:.6g}", j.speedup[i]);  // shares near 1: 6 digits
    s += "]";
  }
  if (!j.speed_by_model.empty()) {
    s += ",\"speed_by_model\":{";
    for (size_t i = 0; i < j.speed_by_model.size(); ++i) {
      s += (i ? "," : "") + JsonString(j.speed_by_model[i].first) + ":" +
           fmt::format("{:.4g}", j.speed_by_model[i].second);
    }
    s += "}";
  }
  if (!j.mig.empty()) {
    s += ",\"mig\":" + JsonString(j.mig);
  } else {
    s += ",\"gpus\":" + Num(j.gpus);
    if (!j.sharing.empty()) s += ",\"sharing\":" + JsonString(j.sharing);
  }
  if (j.gpu_models.size() == 1) {
    s += ",\"gpu_model\":" + JsonString(j.gpu_models[0]);
  } else if (!j.gpu_models.empty()) {
    s += ",\"gpu_model\":[";
    for (size_t i = 0; i < j.gpu_models.size(); ++i) {
      if (i > 0) s += ',';
      s += JsonString(j.gpu_models[i]);
    }
    s += "]";
  }
  if (j.uses_gpu()) s += ",\"vram_gb\":" + Num(j.vram_gb);
  if (j.cpus > 0) s += ",\"cpus\":" + Num(j.cpus);
  if (j.memory_gb > 0) s += ",\"memory_gb\":" + Num(j.memory_gb);
  if (!j.topology.empty()) s += ",\"topology\":" + JsonString(j.topology);
  if (j.checkpoint_s > 0) s += ",\"checkpoint_s\":" + Num(j.checkpoint_s);
  if (j.grace_s > 0) s += ",\"grace_s\":" + Num(j.grace_s);
  if (j.window) {
    s += ",\"window\":{\"start\":" + JsonString(j.window->start) +
         ",\"end\":" + JsonString(j.window->end) + "}";
  }
  if (j.idle_after_s) s += ",\"idle_after_s\":" + Num(*j.idle_after_s);
  if (j.util) s += ",\"util\":" + Num(*j.util);
  if (j.vram_used_gb) s += ",\"vram_used_gb\":" + Num(*j.vram_used_gb);
  return s + "}";
}

Status TraceWriter::Open(const std::string& path) {
  path_ = path;
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) return Error{"--out", "cannot write " + path};
  return Ok{};
}

Status TraceWriter::Add(const JobOut& job) {
  // Compare what the reader will see: milliseconds.
  const double submit = std::round(job.submit * 1000) / 1000;
  if (stats_.jobs > 0 && submit < stats_.last_submit) {
    return Error{"", "job " + job.id + ": submit " + Num(submit) + " before the previous job's " +
                         Num(stats_.last_submit) + " (converter bug: traces are sorted)"};
  }
  if (!ids_.insert(job.id).second) return Error{"", "duplicate job id " + job.id};
  if (!(job.duration >= 0.001)) {
    return Error{"", "job " + job.id + ": duration " + Num(job.duration) + " below 1 ms"};
  }
  out_ << JobJson(job) << '\n';
  if (stats_.jobs == 0) stats_.first_submit = submit;
  stats_.last_submit = submit;
  ++stats_.jobs;
  const double g = job.total_gpus();
  stats_.gpu_hours += g * job.duration / 3600.0;
  stats_.max_job_gpus = std::max(stats_.max_job_gpus, g);
  ++stats_.by_queue[job.queue];
  ++stats_.by_tier[job.tier];
  return Ok{};
}

Status TraceWriter::Close() {
  out_.flush();
  if (!out_) return Error{"--out", "write to " + path_ + " failed"};
  out_.close();
  return Ok{};
}

Status WriteFailures(const std::string& path, std::vector<FailureOut> failures) {
  std::stable_sort(failures.begin(), failures.end(), [](const FailureOut& a, const FailureOut& b) {
    return a.t != b.t ? a.t < b.t : a.node < b.node;
  });
  std::ofstream out(path, std::ios::binary);
  if (!out) return Error{"--out", "cannot write " + path};
  for (const FailureOut& f : failures) {
    out << "{\"t\":" << Num(f.t) << ",\"node\":" << JsonString(f.node)
        << ",\"down_s\":" << Num(f.down_s) << "}\n";
  }
  if (!out.flush()) return Error{"--out", "write to " + path + " failed"};
  return Ok{};
}

std::vector<double> ProportionalGuarantees(const std::vector<double>& demand, int64_t capacity,
                                           int64_t floor_gpus) {
  const size_t n = demand.size();
  std::vector<double> out(n, 0);
  if (n == 0 || capacity <= 0) return out;
  int64_t base = static_cast<int64_t>(n) * floor_gpus <= capacity ? floor_gpus : 0;
  int64_t left = capacity - base * static_cast<int64_t>(n);
  const double total = std::accumulate(demand.begin(), demand.end(), 0.0);
  std::vector<int64_t> whole(n, base);
  std::vector<double> frac(n, 0);
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double share = total > 0 ? demand[i] / total * static_cast<double>(left) : 0;
    const auto w = static_cast<int64_t>(std::floor(share));
    whole[i] += w;
    given += w;
    frac[i] = share - static_cast<double>(w);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  // Hand out the rounding remainder only to queues with demand, so an idle queue keeps
  // just its floor.
  for (size_t k = 0; k < n && given < left && total > 0; ++k) {
    if (demand[order[k]] <= 0) continue;
    ++whole[order[k]];
    ++given;
  }
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(whole[i]);
  return out;
}

Gang SplitGang(int gpus, int per_node) {
  if (gpus <= per_node || per_node <= 0) return Gang{1, gpus};
  for (int r = (gpus + per_node - 1) / per_node; r <= gpus; ++r) {
    if (gpus % r == 0 && gpus / r <= per_node) return Gang{r, gpus / r};
  }
  return Gang{gpus, 1};
}

}  // namespace gantry::convert
