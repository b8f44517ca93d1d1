#include "proto/node.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "base/url.h"

namespace gantry::proto {

using nlohmann::json;

namespace {

template <typename T>
constexpr bool kIsVector = false;
template <typename T>
constexpr bool kIsVector<std::vector<T>> = true;
template <typename T>
constexpr bool kIsMap = false;
template <typename T>
constexpr bool kIsMap<std::map<std::string, T>> = true;

// Reads one JSON object's fields into a value. The first problem wins and is named by
// its path ("running[2].rank: must be an integer"); after it, reads do nothing. A missing
// or null key leaves the default. nlohmann's own conversions are not used for numbers:
// they cast out-of-range doubles (undefined behaviour) and would throw on the rest.
class Reader {
 public:
  Reader(const json& j, std::string path, std::optional<Error>& error)
      : j_(j), path_(std::move(path)), error_(error) {
    if (!error_ && !j_.is_object()) error_ = Error{path_, "must be an object"};
  }

  template <typename T>
  Reader& Opt(const char* key, T& out) {
    if (const json* v = Find(key)) Read(*v, Field(key), out);
    return *this;
  }
  template <typename T>
  Reader& Req(const char* key, T& out) {
    if (const json* v = Find(key)) {
      Read(*v, Field(key), out);
    } else if (!error_) {
      error_ = Error{Field(key), "is required"};
    }
    return *this;
  }
  // An object or array field, read by `f(const json&, path)`.
  template <typename F>
  Reader& Nested(const char* key, F f) {
    if (const json* v = Find(key)) f(*v, Field(key));
    return *this;
  }
  const json* Find(const char* key) const {
    if (error_ || !j_.is_object()) return nullptr;
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string Field(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  void Fail(const std::string& path, const char* what) {
    if (!error_) error_ = Error{path, what};
  }
  void Read(const json& v, const std::string& path, std::string& out) {
    if (!v.is_string()) return Fail(path, "must be a string");
    out = v.get_ref<const std::string&>();
  }
  void Read(const json& v, const std::string& path, bool& out) {
    if (!v.is_boolean()) return Fail(path, "must be true or false");
    out = v.get<bool>();
  }
  void Read(const json& v, const std::string& path, double& out) {
    if (!v.is_number()) return Fail(path, "must be a number");
    out = v.get<double>();
  }
  template <typename T>
  requires std::is_integral_v<T> &&
      (!std::is_same_v<T, bool>)void Read(const json& v, const std::string& path, T& out) {
    using Lim = std::numeric_limits<T>;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(Lim::max())) return Fail(path, "is out of range");
      out = static_cast<T>(u);
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (i < static_cast<int64_t>(Lim::min()) || (i > 0 && static_cast<uint64_t>(i) > Lim::max()))
        return Fail(path, "is out of range");
      out = static_cast<T>(i);
    } else if (v.is_number_float()) {  // 3.0 as older writers might send; not 3.5
      const double d = v.get<double>();
      // Lim::min() is 0 or -2^digits and 2^digits is past the top: both exact as doubles.
      if (!std::isfinite(d) || d != std::trunc(d) || d < static_cast<double>(Lim::min()) ||
          d >= std::ldexp(1.0, Lim::digits))
        return Fail(path, "must be an integer");
      out = static_cast<T>(d);
    } else {
      Fail(path, "must be an integer");
    }
  }
  template <typename T>
  void Read(const json& v, const std::string& path, std::optional<T>& out) {
    Read(v, path, out.emplace());
  }
  template <typename T>
  requires kIsVector<T>
  void Read(const json& v, const std::string& path, T& out) {
    if (!v.is_array()) return Fail(path, "must be a list");
    out.clear();
    for (size_t i = 0; i < v.size() && !error_; ++i)
      Read(v[i], path + "[" + std::to_string(i) + "]", out.emplace_back());
  }
  template <typename T>
  requires kIsMap<T>
  void Read(const json& v, const std::string& path, T& out) {
    if (!v.is_object()) return Fail(path, "must be an object");
    out.clear();
    for (auto it = v.begin(); it != v.end() && !error_; ++it)
      Read(it.value(), path + "." + it.key(), out[it.key()]);
  }

  const json& j_;
  std::string path_;
  std::optional<Error>& error_;
};

// Reads a list of objects with `one(const json&, path, T&)`.
template <typename T, typename F>
void ReadList(const json& v, const std::string& path, std::optional<Error>& error,
              std::vector<T>& out, F one) {
  if (error) return;
  if (!v.is_array()) {
    error = Error{path, "must be a list"};
    return;
  }
  out.clear();
  for (size_t i = 0; i < v.size() && !error; ++i)
    one(v[i], path + "[" + std::to_string(i) + "]", out.emplace_back());
}

template <typename T>
Result<T> Done(T value, const std::optional<Error>& error) {
  if (error) return *error;
  return value;
}

void ReadGpu(const json& j, const std::string& path, std::optional<Error>& error, GpuReport& g) {
  Reader r(j, path, error);
  r.Req("index", g.index)
      .Req("uuid", g.uuid)
      .Opt("name", g.name)
      .Opt("model", g.model)
      .Opt("memory_bytes", g.memory_bytes)
      .Opt("mig_mode", g.mig_mode)
      .Opt("utilization", g.utilization)
      .Opt("memory_used_bytes", g.memory_used_bytes)
      .Opt("idle_ms", g.idle_ms)
      .Opt("lost", g.lost)
      .Opt("nvlink_peers", g.nvlink_peers)
      .Nested("mig", [&](const json& v, const std::string& p) {
        ReadList(v, p, error, g.mig,
                 [&](const json& m, const std::string& mp, GpuReport::Mig& out) {
                   Reader(m, mp, error)
                       .Opt("uuid", out.uuid)
                       .Opt("profile", out.profile)
                       .Opt("start", out.start)
                       .Opt("gi_id", out.gi_id);
                   out.gi_id = std::max(-1, out.gi_id);  // below 0: not said (not encoded)
                 });
      });
}

// Reads what Encode(Alloc) writes for the alloc's sharing mode and nothing else, so a
// decoded alloc encodes to what it was read from.
void ReadAlloc(const json& j, const std::string& path, std::optional<Error>& error, Alloc& a) {
  Reader r(j, path, error);
  r.Opt("node", a.node).Opt("sharing", a.sharing);
  if (a.sharing == "exclusive") {
    r.Opt("gpus", a.gpus);
  } else if (a.sharing == "mig") {
    r.Opt("gpu", a.gpu).Opt("mig", a.mig).Opt("start", a.start);
  } else {
    r.Opt("gpu", a.gpu).Opt("share_milli", a.share_milli).Opt("vram_bytes", a.vram_bytes);
  }
  r.Opt("cpus_milli", a.cpus_milli).Opt("memory_bytes", a.memory_bytes).Opt("create", a.create);
  if (a.create) r.Opt("memory_slices", a.memory_slices).Opt("compute_slices", a.compute_slices);
}

void ReadEmulate(const json& j, const std::string& path, std::optional<Error>& error, Emulate& e) {
  Reader(j, path, error)
      .Opt("util", e.util)
      .Opt("vram_used_bytes", e.vram_used_bytes)
      .Opt("idle_after_ms", e.idle_after_ms);
}

void ReadDesired(const json& j, const std::string& path, std::optional<Error>& error,
                 DesiredWorker& w) {
  std::string action = "run", open_mode, signal_to, gpu_names;
  Reader r(j, path, error);
  r.Req("job", w.job)
      .Opt("seq", w.seq)
      .Req("run", w.run)
      .Req("rank", w.rank)
      .Opt("action", action)
      .Opt("grace_ms", w.grace_ms)
      .Opt("command", w.command)
      .Opt("env", w.env)
      .Opt("workdir", w.workdir)
      .Opt("user", w.user)
      .Opt("script", w.script)
      .Opt("image", w.image)
      .Opt("container_workdir", w.container_workdir)
      .Opt("mount_home", w.mount_home)
      .Opt("signal", w.signal)
      .Opt("stdout", w.stdout_path)
      .Opt("stderr", w.stderr_path)
      .Opt("open_mode", open_mode)
      .Opt("signal_to", signal_to)
      .Opt("gpu_names", gpu_names)
      .Opt("step", w.step)
      .Opt("step_cpus", w.step_cpus)
      .Opt("input", w.input)
      .Nested("alloc",
              [&](const json& v, const std::string& p) { ReadAlloc(v, p, error, w.alloc); })
      .Nested("limits",
              [&](const json& v, const std::string& p) {
                Reader(v, p, error)
                    .Opt("memory_bytes", w.limits.memory_bytes)
                    .Opt("cpus_milli", w.limits.cpus_milli)
                    .Opt("cpus", w.limits.cpus);
              })
      .Nested("emulate",
              [&](const json& v, const std::string& p) {
                ReadEmulate(v, p, error, w.emulate.emplace());
              })
      .Nested("mounts",
              [&](const json& v, const std::string& p) {
                ReadList(v, p, error, w.mounts,
                         [&](const json& one, const std::string& q, DesiredWorker::Mount& m) {
                           Reader(one, q, error)
                               .Req("source", m.source)
                               .Req("target", m.target)
                               .Opt("read_only", m.read_only);
                         });
              })
      .Nested("signals", [&](const json& v, const std::string& p) {
        ReadList(v, p, error, w.signals,
                 [&](const json& one, const std::string& q, DesiredWorker::Signal& s) {
                   std::string to;
                   Reader(one, q, error).Req("n", s.n).Req("signal", s.signal).Opt("to", to);
                   s.script_only = to == "script";
                 });
      });
  if (error) return;
  w.signal = std::max(0, w.signal);  // 0 and below: none (not sent)
  w.step = std::max(-1, w.step);     // below 0: a worker, not a step's task
  w.append_output = open_mode == "append";
  w.signal_script_only = signal_to == "script";
  w.gpus_by_index = gpu_names == "index";
  if (action == "run") {
    w.action = DesiredWorker::Action::kRun;
  } else if (action == "stop") {
    w.action = DesiredWorker::Action::kStop;
  } else {
    error = Error{r.Field("action"), "must be run or stop, got " + action};
  }
}

void ReadAnswer(const json& j, std::optional<Error>& error, WatchAnswer& a) {
  Reader(j, "", error)
      .Opt("instance", a.instance)
      .Opt("epoch", a.epoch)
      .Opt("version", a.version)
      .Nested("workers", [&](const json& v, const std::string& p) {
        if (!v.is_array()) {
          if (!error) error = Error{p, "must be a list"};
          return;
        }
        for (size_t i = 0; i < v.size() && !error; ++i) {
          auto w = std::make_shared<DesiredWorker>();
          ReadDesired(v[i], p + "[" + std::to_string(i) + "]", error, *w);
          a.workers.push_back(std::move(w));
        }
      });
}

template <typename T, typename F>
Result<T> Parse(std::string_view text, F decode) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"", "not JSON"};
  return decode(j);
}

}  // namespace

std::string_view Word(DesiredWorker::Action a) {
  return a == DesiredWorker::Action::kStop ? "stop" : "run";
}

std::string HeartbeatTarget(const std::string& node) {
  return "/v1/agents/" + UrlEncode(node) + "/heartbeat";
}

std::string WatchTarget(const std::string& node, const std::string& instance, int64_t version,
                        int64_t timeout_ms) {
  return "/v1/agents/" + UrlEncode(node) + "/watch?instance=" + UrlEncode(instance) +
         "&version=" + std::to_string(version) + "&timeout_ms=" + std::to_string(timeout_ms);
}

std::string WorkerKey(const std::string& job, int run, int rank, int step) {
  std::string key = job + "\n" + std::to_string(run) + "\n" + std::to_string(rank);
  if (step >= 0) key += "\ns" + std::to_string(step);
  return key;
}

std::string LogsTarget(const std::string& node, const std::string& job, int run, int rank,
                       int64_t offset, int step, bool err) {
  return "/v1/agents/" + UrlEncode(node) + "/logs?job=" + UrlEncode(job) +
         "&run=" + std::to_string(run) + "&rank=" + std::to_string(rank) +
         "&offset=" + std::to_string(offset) + (step >= 0 ? "&step=" + std::to_string(step) : "") +
         (err ? "&stream=err" : "");
}

// ---------------------------------------------------------------- encoders

json Encode(const GpuReport& g) {
  json mig = json::array();
  for (const GpuReport::Mig& m : g.mig) {
    mig.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
    if (m.gi_id >= 0) mig.back()["gi_id"] = m.gi_id;
  }
  json j = {{"index", g.index},
            {"uuid", g.uuid},
            {"name", g.name},
            {"memory_bytes", g.memory_bytes},
            {"memory_used_bytes", g.memory_used_bytes},
            {"mig_mode", g.mig_mode},
            {"mig", std::move(mig)},
            {"utilization", g.utilization},
            {"idle_ms", g.idle_ms},
            {"lost", g.lost},
            {"nvlink_peers", g.nvlink_peers}};
  if (!g.model.empty()) j["model"] = g.model;
  return j;
}

json Encode(const std::vector<GpuReport>& gpus) {
  json out = json::array();
  for (const GpuReport& g : gpus) out.push_back(Encode(g));
  return out;
}

json Encode(const RunningReport& r) {
  json j = {{"job", r.job}, {"run", r.run}, {"rank", r.rank}, {"pid", r.pid}};
  if (r.step >= 0) j["step"] = r.step;
  if (r.usage) {
    j["util"] = r.usage->util;
    j["vram_used_bytes"] = r.usage->vram_used_bytes;
  }
  return j;
}

json Encode(const ExitReport& e) {
  json j = {{"job", e.job},       {"run", e.run},   {"rank", e.rank}, {"exit_code", e.exit_code},
            {"signal", e.signal}, {"lost", e.lost}, {"note", e.note}};
  if (!e.drain.empty()) j["drain"] = e.drain;
  if (e.step >= 0) j["step"] = e.step;
  return j;
}

json Encode(const Heartbeat& h) {
  json running = json::array(), exits = json::array();
  for (const RunningReport& r : h.running) running.push_back(Encode(r));
  for (const ExitReport& e : h.exits) exits.push_back(Encode(e));
  json j = {{"agent_id", h.agent_id},
            {"gpus", Encode(h.gpus)},
            {"running", std::move(running)},
            {"exits", std::move(exits)}};
  if (h.isolation) j["isolation"] = *h.isolation;
  if (!h.address.empty()) j["address"] = h.address;
  if (h.leaving) j["leaving"] = true;
  return j;
}

json Encode(const Alloc& a) {
  json j = {{"node", a.node}, {"sharing", a.sharing}};
  if (a.sharing == "exclusive") {
    j["gpus"] = a.gpus;
  } else if (a.sharing == "mig") {
    j["gpu"] = a.gpu;
    j["mig"] = a.mig;
    j["start"] = a.start;
  } else {
    j["gpu"] = a.gpu;
    j["share_milli"] = a.share_milli;
    j["vram_bytes"] = a.vram_bytes;
  }
  j["cpus_milli"] = a.cpus_milli;
  j["memory_bytes"] = a.memory_bytes;
  if (a.create) {
    j["create"] = true;
    j["memory_slices"] = a.memory_slices;
    j["compute_slices"] = a.compute_slices;
  }
  return j;
}

json Encode(const Limits& l) {
  json j = {{"memory_bytes", l.memory_bytes}, {"cpus_milli", l.cpus_milli}};
  if (l.cpus > 0) j["cpus"] = l.cpus;
  return j;
}

json Encode(const Emulate& e) {
  return {
      {"util", e.util}, {"vram_used_bytes", e.vram_used_bytes}, {"idle_after_ms", e.idle_after_ms}};
}

json Encode(const DesiredWorker& w) {
  json j = {{"job", w.job},
            {"seq", w.seq},
            {"run", w.run},
            {"rank", w.rank},
            {"action", Word(w.action)},
            {"grace_ms", w.grace_ms},
            {"command", w.command},
            {"env", w.env},
            {"workdir", w.workdir},
            {"user", w.user},
            {"alloc", Encode(w.alloc)},
            {"limits", Encode(w.limits)}};
  if (!w.script.empty()) j["script"] = w.script;
  if (!w.image.empty()) j["image"] = w.image;
  if (!w.mounts.empty()) {
    json mounts = json::array();
    for (const DesiredWorker::Mount& m : w.mounts)
      mounts.push_back({{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
    j["mounts"] = std::move(mounts);
  }
  if (!w.container_workdir.empty()) j["container_workdir"] = w.container_workdir;
  if (w.mount_home) j["mount_home"] = true;
  if (w.signal > 0) j["signal"] = w.signal;
  if (!w.stdout_path.empty()) j["stdout"] = w.stdout_path;
  if (!w.stderr_path.empty()) j["stderr"] = w.stderr_path;
  if (w.append_output) j["open_mode"] = "append";
  if (w.signal_script_only) j["signal_to"] = "script";
  if (w.gpus_by_index) j["gpu_names"] = "index";
  if (w.emulate) j["emulate"] = Encode(*w.emulate);
  if (w.step >= 0) j["step"] = w.step;
  if (!w.step_cpus.empty()) j["step_cpus"] = w.step_cpus;
  if (!w.input.empty()) j["input"] = w.input;
  if (!w.signals.empty()) {
    json signals = json::array();
    for (const DesiredWorker::Signal& s : w.signals) {
      json one = {{"n", s.n}, {"signal", s.signal}};
      if (s.script_only) one["to"] = "script";
      signals.push_back(std::move(one));
    }
    j["signals"] = std::move(signals);
  }
  return j;
}

json Encode(const WatchAnswer& a) {
  json workers = json::array();
  for (const auto& w : a.workers) workers.push_back(Encode(*w));
  return {{"instance", a.instance},
          {"epoch", a.epoch},
          {"version", a.version},
          {"workers", std::move(workers)}};
}

json Encode(const HeartbeatReply& r) {
  json j = Encode(r.answer);
  j["heartbeat_ms"] = r.heartbeat_ms;
  j["lease_ms"] = r.lease_ms;
  j["node_timeout_ms"] = r.node_timeout_ms;
  return j;
}

json Encode(const LogUploadReply& r) { return {{"size", r.size}}; }

// ---------------------------------------------------------------- decoders

Result<std::vector<GpuReport>> DecodeGpus(const json& j) {
  std::optional<Error> error;
  std::vector<GpuReport> gpus;
  ReadList(j, "gpus", error, gpus,
           [&](const json& v, const std::string& p, GpuReport& g) { ReadGpu(v, p, error, g); });
  return Done(std::move(gpus), error);
}

Result<Heartbeat> DecodeHeartbeat(const json& j) {
  std::optional<Error> error;
  Heartbeat h;
  Reader r(j, "", error);
  r.Opt("agent_id", h.agent_id)
      .Opt("leaving", h.leaving)
      .Opt("address", h.address)
      .Opt("isolation", h.isolation)
      .Nested("gpus",
              [&](const json& v, const std::string& p) {
                ReadList(v, p, error, h.gpus,
                         [&](const json& g, const std::string& gp, GpuReport& out) {
                           ReadGpu(g, gp, error, out);
                         });
              })
      .Nested("running",
              [&](const json& v, const std::string& p) {
                ReadList(v, p, error, h.running,
                         [&](const json& e, const std::string& ep, RunningReport& out) {
                           Reader rr(e, ep, error);
                           rr.Req("job", out.job)
                               .Req("run", out.run)
                               .Req("rank", out.rank)
                               .Opt("pid", out.pid)
                               .Opt("step", out.step);
                           out.step = std::max(-1, out.step);
                           if (rr.Find("util")) {
                             WorkerUsage& u = out.usage.emplace();
                             rr.Opt("util", u.util).Opt("vram_used_bytes", u.vram_used_bytes);
                             u.util = std::clamp(u.util, 0.0, 1.0);
                             u.vram_used_bytes = std::max<int64_t>(0, u.vram_used_bytes);
                           }
                         });
              })
      .Nested("exits", [&](const json& v, const std::string& p) {
        ReadList(v, p, error, h.exits, [&](const json& e, const std::string& ep, ExitReport& out) {
          Reader(e, ep, error)
              .Req("job", out.job)
              .Req("run", out.run)
              .Req("rank", out.rank)
              .Opt("exit_code", out.exit_code)
              .Opt("signal", out.signal)
              .Opt("lost", out.lost)
              .Opt("note", out.note)
              .Opt("drain", out.drain)
              .Opt("step", out.step);
          out.step = std::max(-1, out.step);
        });
      });
  return Done(std::move(h), error);
}

Result<Alloc> DecodeAlloc(const json& j) {
  std::optional<Error> error;
  Alloc a;
  ReadAlloc(j, "alloc", error, a);
  return Done(std::move(a), error);
}

Result<Emulate> DecodeEmulate(const json& j) {
  std::optional<Error> error;
  Emulate e;
  ReadEmulate(j, "emulate", error, e);
  return Done(e, error);
}

Result<DesiredWorker> DecodeDesiredWorker(const json& j) {
  std::optional<Error> error;
  DesiredWorker w;
  ReadDesired(j, "", error, w);
  return Done(std::move(w), error);
}

Result<WatchAnswer> DecodeWatchAnswer(const json& j) {
  std::optional<Error> error;
  WatchAnswer a;
  ReadAnswer(j, error, a);
  return Done(std::move(a), error);
}

Result<HeartbeatReply> DecodeHeartbeatReply(const json& j) {
  std::optional<Error> error;
  HeartbeatReply r;
  ReadAnswer(j, error, r.answer);
  Reader(j, "", error)
      .Opt("heartbeat_ms", r.heartbeat_ms)
      .Opt("lease_ms", r.lease_ms)
      .Opt("node_timeout_ms", r.node_timeout_ms);
  return Done(std::move(r), error);
}

Result<LogUploadReply> DecodeLogUploadReply(const json& j) {
  std::optional<Error> error;
  LogUploadReply r;
  Reader(j, "", error).Req("size", r.size);
  return Done(r, error);
}

Refusal DecodeRefusal(const std::string& body) {
  Refusal r;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::optional<Error> error;
  if (j.is_object()) {
    Reader(j, "", error)
        .Opt("error", r.error)
        .Opt("role", r.role)
        .Opt("leader", r.leader)
        .Opt("store", r.store)
        .Opt("hold", r.hold);
  }
  if (!j.is_object() || error || r.error.empty()) r.error = body;
  return r;
}

Result<Heartbeat> ParseHeartbeat(std::string_view text) {
  return Parse<Heartbeat>(text, [](const json& j) { return DecodeHeartbeat(j); });
}
Result<HeartbeatReply> ParseHeartbeatReply(std::string_view text) {
  return Parse<HeartbeatReply>(text, [](const json& j) { return DecodeHeartbeatReply(j); });
}
Result<WatchAnswer> ParseWatchAnswer(std::string_view text) {
  return Parse<WatchAnswer>(text, [](const json& j) { return DecodeWatchAnswer(j); });
}

}  // namespace gantry::proto
