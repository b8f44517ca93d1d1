#include "server/state.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>

#include "base/cpus.h"

namespace gantry::server {

using nlohmann::json;

std::string_view Word(JobEnd e) {
  switch (e) {
    case JobEnd::kNone:
      return "";
    case JobEnd::kFinished:
      return "finished";
    case JobEnd::kFailed:
      return "failed";
    case JobEnd::kCancelled:
      return "cancelled";
    case JobEnd::kRejected:
      return "rejected";
    case JobEnd::kReclaimed:
      return "reclaimed";
  }
  return "?";
}

std::optional<JobEnd> JobEndNamed(std::string_view word) {
  for (JobEnd e : kJobEnds) {
    if (Word(e) == word) return e;
  }
  return std::nullopt;
}

std::string_view Word(SignalTo t) {
  switch (t) {
    case SignalTo::kSteps:
      return "steps";
    case SignalTo::kBatch:
      return "batch";
    case SignalTo::kFull:
      return "full";
  }
  return "?";
}

std::string_view DependencyWord(Dependency::Kind k) {
  switch (k) {
    case Dependency::Kind::kOk:
      return "ok";
    case Dependency::Kind::kAny:
      return "any";
    case Dependency::Kind::kNotOk:
      return "notok";
    case Dependency::Kind::kStarted:
      return "started";
  }
  return "ok";
}

std::optional<Dependency::Kind> DependencyKindNamed(std::string_view word) {
  using K = Dependency::Kind;
  for (K k : {K::kOk, K::kAny, K::kNotOk, K::kStarted}) {
    if (DependencyWord(k) == word) return k;
  }
  return std::nullopt;
}

std::optional<SignalTo> SignalToNamed(std::string_view word) {
  for (SignalTo t : {SignalTo::kSteps, SignalTo::kBatch, SignalTo::kFull}) {
    if (Word(t) == word) return t;
  }
  return std::nullopt;
}

std::string_view Name(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "pending";
    case JobState::kRunning:
      return "running";
    case JobState::kStopping:
      return "stopping";
    case JobState::kDone:
      return "done";
  }
  return "?";
}

std::string_view Name(StopKind k) {
  switch (k) {
    case StopKind::kNone:
      return "none";
    case StopKind::kPreempt:
      return "preempt";
    case StopKind::kCancel:
      return "cancel";
    case StopKind::kFail:
      return "fail";
    case StopKind::kLost:
      return "lost";
    case StopKind::kReclaim:
      return "reclaim";
    case StopKind::kResize:
      return "resize";
    case StopKind::kRelease:
      return "release";
  }
  return "?";
}

namespace {
template <typename E, size_t N>
std::optional<E> Parse(std::string_view s, const E (&values)[N]) {
  for (E v : values) {
    if (Name(v) == s) return v;
  }
  return std::nullopt;
}
constexpr JobState kStates[] = {JobState::kPending, JobState::kRunning, JobState::kStopping,
                                JobState::kDone};
constexpr core::Tier kTiers[] = {core::Tier::kCritical, core::Tier::kStandard,
                                 core::Tier::kBestEffort};
constexpr StopKind kStops[] = {StopKind::kNone,   StopKind::kPreempt, StopKind::kCancel,
                               StopKind::kFail,   StopKind::kLost,    StopKind::kReclaim,
                               StopKind::kResize, StopKind::kRelease};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

int Step::CpusPerTask() const {
  if (cpus_per_task > 0) return cpus_per_task;
  auto it = env.find("SLURM_CPUS_PER_TASK");
  return it == env.end() ? 1 : std::max(1, std::atoi(it->second.c_str()));
}

bool Step::AllExited() const {
  return std::all_of(tasks.begin(), tasks.end(), [](const StepTask& t) { return t.exited; });
}

std::string Step::ReadPrograms(int task_count) const {
  std::string why;
  auto read = spec::MultiProg::Parse(multi_prog, task_count, command.at(0), why);
  if (read) programs = std::make_shared<const spec::MultiProg>(std::move(*read));
  return why;
}

void Step::End(Ticks now) {
  state = State::kEnded;
  ended = now;
  env.clear();
  multi_prog.clear();
  programs.reset();
  cpus.clear();  // (held while it ran)
  input.clear();
}

bool Job::AllExited() const {
  if (batch() && !workers.empty()) {
    return workers.front().exited &&
           std::all_of(steps.begin(), steps.end(), [](const Step& s) { return s.AllExited(); });
  }
  return std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.exited; });
}

double WorkerGpus(const core::WorkerAlloc& w, const core::Cluster& cluster) {
  switch (w.sharing) {
    case core::Sharing::kExclusive:
      return std::popcount(w.gpu_mask);
    case core::Sharing::kMig:
      return cluster.catalog()
                 .model(cluster.node(w.node).model)
                 .mig_profiles[w.mig_profile]
                 .compute_slices /
             7.0;
    case core::Sharing::kMps:
    case core::Sharing::kTimeslice:
      return w.share_milli / 1000.0;
  }
  return 0;
}

json UsageToJson(const Usage& u) {
  return {{"gpu_ms", u.gpu_ms},
          {"busy_gpu_ms", u.busy_gpu_ms},
          {"reported_gpu_ms", u.reported_gpu_ms},
          {"vram_ms", u.vram_ms},
          {"reported_ms", u.reported_ms},
          {"vram_peak", u.vram_peak},
          {"util_peak", u.util_peak},
          {"model", u.model}};
}

Usage UsageFromJson(const json& j) {
  Usage u;
  if (!j.is_object()) return u;
  u.gpu_ms = j.value("gpu_ms", 0.0);
  u.busy_gpu_ms = j.value("busy_gpu_ms", 0.0);
  u.reported_gpu_ms = j.value("reported_gpu_ms", 0.0);
  u.vram_ms = j.value("vram_ms", 0.0);
  u.reported_ms = j.value("reported_ms", 0.0);
  u.vram_peak = j.value("vram_peak", int64_t{0});
  u.util_peak = j.value("util_peak", 0.0);
  u.model = j.value("model", std::string());
  return u;
}

proto::Limits WorkerLimits(const core::WorkerAlloc& w, const core::Cluster& cluster) {
  const core::Node& node = cluster.node(w.node);
  const core::PoolSpec& pool = cluster.pool(node.pool).spec;
  const double gpus = WorkerGpus(w, cluster);
  auto limit = [&](int64_t asked, int64_t per_gpu) {
    return asked > 0 ? asked
                     : static_cast<int64_t>(std::llround(static_cast<double>(per_gpu) * gpus));
  };
  return {.memory_bytes = limit(w.memory_bytes, pool.default_memory_per_gpu_bytes),
          .cpus_milli = limit(w.cpus_milli, pool.default_cpus_per_gpu_milli)};
}

proto::Alloc WireAlloc(const core::WorkerAlloc& w, const core::Cluster& cluster) {
  const core::Node& node = cluster.node(w.node);
  proto::Alloc a;
  a.node = node.name;
  a.sharing = core::Name(w.sharing);
  switch (w.sharing) {
    case core::Sharing::kExclusive:
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) a.gpus.push_back(std::countr_zero(m));
      break;
    case core::Sharing::kMig:
      a.gpu = w.gpu;
      a.mig = cluster.catalog().model(node.model).mig_profiles[w.mig_profile].name;
      a.start = w.mig_start;
      break;
    case core::Sharing::kMps:
    case core::Sharing::kTimeslice:
      a.gpu = w.gpu;
      a.share_milli = w.share_milli;
      a.vram_bytes = w.vram_bytes;
      break;
  }
  a.cpus_milli = w.cpus_milli;
  a.memory_bytes = w.memory_bytes;
  return a;
}

Result<core::WorkerAlloc> CoreAlloc(const proto::Alloc& a, const core::Cluster& cluster) {
  core::WorkerAlloc w;
  auto n = cluster.FindNode(a.node);
  if (!n) return Error{"alloc.node", "node " + a.node + " is no longer in the cluster config"};
  w.node = *n;
  const core::Node& info = cluster.node(*n);
  if (a.sharing == "exclusive") {
    for (int g : a.gpus) {
      if (g < 0 || g >= info.gpus)
        return Error{"alloc.gpus", "GPU index out of range on " + a.node};
      w.gpu_mask |= uint64_t{1} << g;
    }
  } else {
    if (a.gpu < 0 || a.gpu >= info.gpus)
      return Error{"alloc.gpu", "GPU index out of range on " + a.node};
    w.gpu = static_cast<int8_t>(a.gpu);
    if (a.sharing == "mig") {
      w.sharing = core::Sharing::kMig;
      const int p = cluster.catalog().FindProfile(info.model, a.mig);
      if (p < 0) return Error{"alloc.mig", "MIG profile unknown on " + a.node};
      w.mig_profile = static_cast<int8_t>(p);
      w.mig_start = static_cast<int8_t>(a.start);
    } else if (a.sharing == "mps" || a.sharing == "timeslice") {
      w.sharing = a.sharing == "mps" ? core::Sharing::kMps : core::Sharing::kTimeslice;
      w.share_milli = static_cast<int16_t>(a.share_milli);
      w.vram_bytes = a.vram_bytes;
    } else {
      return Error{"alloc.sharing", "unknown sharing mode " + a.sharing};
    }
  }
  w.cpus_milli = a.cpus_milli;
  w.memory_bytes = a.memory_bytes;
  return w;
}

json WorkerAllocToJson(const core::WorkerAlloc& w, const core::Cluster& cluster) {
  return proto::Encode(WireAlloc(w, cluster));
}

Result<core::WorkerAlloc> WorkerAllocFromJson(const json& j, const core::Cluster& cluster) {
  Result<proto::Alloc> a = proto::DecodeAlloc(j);
  if (!a) return a.error();
  return CoreAlloc(*a, cluster);
}

void Job::Note(Ticks t, std::string what) {
  if (history.size() >= kHistory) history.erase(history.begin() + 1);  // keep the submit
  history.push_back({t, std::move(what)});
}

json MountsToJson(const std::vector<proto::DesiredWorker::Mount>& mounts) {
  json out = json::array();
  for (const proto::DesiredWorker::Mount& m : mounts)
    out.push_back({{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
  return out;
}

std::vector<proto::DesiredWorker::Mount> MountsFromJson(const json& list) {
  std::vector<proto::DesiredWorker::Mount> out;
  for (const json& m : list) {
    out.push_back({m.at("source").get<std::string>(), m.at("target").get<std::string>(),
                   m.value("read_only", false)});
  }
  return out;
}

namespace {

// A step's container (srun --container-image), or null.
json StepContainerJson(const Step& s) {
  if (s.image.empty()) return nullptr;
  return {{"image", s.image},
          {"mounts", MountsToJson(s.mounts)},
          {"workdir", s.container_workdir},
          {"mount_home", s.mount_home}};
}

}  // namespace

json JobToDoc(const Job& job, const core::Cluster& cluster) {
  json workers = json::array();
  for (const Worker& w : job.workers) {
    workers.push_back({{"rank", w.rank},
                       {"alloc", WorkerAllocToJson(w.alloc, cluster)},
                       {"exited", w.exited},
                       {"exit_code", w.exit_code},
                       {"signal", w.signal},
                       {"lost", w.lost},
                       {"usage",
                        {{"busy_gpu_ms", w.busy_gpu_ms},
                         {"reported_gpu_ms", w.reported_gpu_ms},
                         {"vram_peak", w.vram_peak},
                         {"util_peak", w.util_peak}}}});
  }
  json after = json::array();
  for (const Dependency& d : job.after) {
    after.push_back({{"job", d.job},
                     {"any", d.kind == Dependency::Kind::kAny},  // as before kinds were kept
                     {"kind", DependencyWord(d.kind)}});
  }
  json doc = {
      {"user", job.user},
      {"spec_format", job.spec_format},
      {"spec_text", job.spec_text},
      {"array", job.array},
      {"array_index", job.array_index},
      {"array_limit", job.array_limit},
      {"array_shape",
       {job.array_shape.count, job.array_shape.min, job.array_shape.max, job.array_shape.step}},
      {"number", job.number},
      {"signals",
       [&] {
         json a = json::array();
         for (const Job::SignalAsk& k : job.signals)
           a.push_back({{"signal", k.signal}, {"to", Word(k.to)}});
         return a;
       }()},
      {"array_number", job.array_number},
      {"after", after},
      {"after_or", job.after_or},
      {"never_met", job.never_met},
      {"kill_invalid_dep", job.kill_invalid_dep},
      {"hold", job.hold},
      {"begin_ms", job.begin_ms},
      {"time_limit_set", job.time_limit_set},
      {"limit_signaled_run", job.limit_signaled_run},
      {"spec_file", job.spec_file},
      {"state", std::string(Name(job.state))},
      {"submit", job.submit},
      {"run", job.run},
      {"run_start", job.run_start},
      {"first_start", job.first_start},
      {"workers", workers},
      {"stop", std::string(Name(job.stop))},
      {"signaled_at", job.signaled_at},
      {"stop_deadline", job.stop_deadline},
      {"stop_reason", job.stop_reason},
      {"preempted_by", job.preempted_by},
      {"progress", job.progress},
      {"preemptions", job.preemptions},
      {"requeues", job.requeues},
      {"resizes", job.resizes},
      {"end", Word(job.end)},
      {"end_reason", job.end_reason},
      {"exit_code", job.exit_code},
      {"end_time", job.end_time},
      {"usage", UsageToJson(job.usage)}};
  if (job.run_tier) doc["run_tier"] = std::string(core::Name(*job.run_tier));
  if (!job.run_token_hashes.empty()) {
    doc["run_token_hash"] = job.run_token_hashes.front();  // as stores before a second one
    if (job.run_token_hashes.size() > 1) doc["run_token_hashes"] = job.run_token_hashes;
  }
  if (!job.steps.empty()) {
    json steps = json::array();
    for (const Step& s : job.steps) {
      json tasks = json::array();
      for (const StepTask& t : s.tasks) {
        tasks.push_back({{"slot", t.slot},
                         {"local", t.local},
                         {"node", t.node},
                         {"exited", t.exited},
                         {"lost", t.lost},
                         {"exit_code", t.exit_code},
                         {"signal", t.signal},
                         {"note", t.note}});
      }
      steps.push_back({{"id", s.id},
                       {"name", s.name},
                       {"command", s.command},
                       {"env", s.env},
                       {"workdir", s.workdir},
                       {"nodes", s.nodes},
                       {"ntasks", s.ntasks},
                       {"per_node", s.per_node},
                       {"cpus_per_task", s.cpus_per_task},
                       {"nodelist", s.nodelist},
                       {"bind_gpus", s.bind_gpus},
                       {"gpu_bind", s.gpu_bind},
                       {"cyclic", s.cyclic},
                       {"own_gpus", s.own_gpus},
                       {"gpu_masks", s.gpu_masks},
                       {"exact", s.exact},
                       {"container", StepContainerJson(s)},
                       {"overlap", s.overlap},
                       {"cancelled", s.cancelled},
                       {"killed", s.killed},
                       {"time_limit", s.time_limit},
                       {"timed_out", s.timed_out},
                       {"state", static_cast<int>(s.state)},
                       {"created", s.created},
                       {"started", s.started},
                       {"ended", s.ended},
                       {"tasks", std::move(tasks)}});
      if (!s.multi_prog.empty()) steps.back()["multi_prog"] = s.multi_prog;
      if (s.held) steps.back()["held"] = true;
      if (!s.input.empty()) {
        steps.back()["input"] = s.input;
        steps.back()["input_task"] = s.input_task;
      }
      if (!s.cpus.empty()) {
        json& cpus = steps.back()["cpus"] = json::array();
        for (const std::vector<int>& on_node : s.cpus) cpus.push_back(FormatCpuList(on_node));
      }
    }
    doc["steps"] = std::move(steps);
  }
  json history = json::array();
  for (const Job::Happened& h : job.history) history.push_back({{"t", h.t}, {"what", h.what}});
  doc["history"] = std::move(history);
  return doc;
}

Result<Ok> JobFromDoc(const json& d, const core::Cluster& cluster, Job& job) {
  try {
    job.spec_format = d.at("spec_format").get<std::string>();
    job.spec_text = d.at("spec_text").get<std::string>();
    job.spec_file = d.value("spec_file", std::string());
    job.user = d.value("user", std::string());
    job.array = d.value("array", std::string());
    job.array_index = d.value("array_index", -1);
    job.array_limit = d.value("array_limit", 0);
    if (const json shape = d.value("array_shape", json()); shape.is_array() && shape.size() == 4)
      job.array_shape = {shape[0].get<int>(), shape[1].get<int>(), shape[2].get<int>(),
                         shape[3].get<int>()};
    job.number = d.value("number", int64_t{0});
    job.array_number = d.value("array_number", int64_t{0});
    job.signals.clear();
    for (const json& k : d.value("signals", json::array()))
      job.signals.push_back(
          {k.value("signal", 0), SignalToNamed(k.value("to", "")).value_or(SignalTo::kSteps)});
    job.after.clear();
    for (const json& a : d.value("after", json::array())) {
      const std::optional<Dependency::Kind> kind =
          DependencyKindNamed(a.value("kind", a.value("any", false) ? "any" : "ok"));
      if (!kind) return Error{"doc", "unknown dependency kind"};
      job.after.push_back(Dependency{a.at("job").get<std::string>(), *kind});
    }
    job.hold = d.value("hold", std::string());
    job.after_or = d.value("after_or", false);
    job.never_met = d.value("never_met", std::string());
    job.kill_invalid_dep = d.value("kill_invalid_dep", -1);
    job.begin_ms = d.value("begin_ms", int64_t{0});
    job.time_limit_set = d.value("time_limit_set", Ticks{-1});
    job.limit_signaled_run = d.value("limit_signaled_run", 0);
    auto state = Parse(d.at("state").get<std::string>(), kStates);
    auto stop = Parse(d.value("stop", std::string("none")), kStops);
    if (!state || !stop) return Error{"doc", "unknown state"};
    job.state = *state;
    job.stop = *stop;
    job.submit = d.at("submit").get<Ticks>();
    job.history.clear();
    for (const json& h : d.value("history", json::array())) {
      job.history.push_back({h.at("t").get<Ticks>(), h.at("what").get<std::string>()});
    }
    job.run = d.value("run", 0);
    job.run_start = d.value("run_start", Ticks{-1});
    job.first_start = d.value("first_start", Ticks{-1});
    if (d.contains("run_tier")) {
      job.run_tier = Parse(d["run_tier"].get<std::string>(), kTiers);
      if (!job.run_tier) return Error{"doc", "unknown run_tier"};
    }
    job.signaled_at = d.value("signaled_at", Ticks{-1});
    job.stop_deadline = d.value("stop_deadline", Ticks{-1});
    job.stop_reason = d.value("stop_reason", std::string());
    job.preempted_by = d.value("preempted_by", std::string());
    job.progress = d.value("progress", Ticks{0});
    job.preemptions = d.value("preemptions", 0);
    job.requeues = d.value("requeues", 0);
    job.resizes = d.value("resizes", 0);
    job.end = JobEndNamed(d.value("end", std::string())).value_or(JobEnd::kNone);
    job.end_reason = d.value("end_reason", std::string());
    job.exit_code = d.value("exit_code", 0);
    job.end_time = d.value("end_time", Ticks{-1});
    job.usage = UsageFromJson(d.value("usage", json()));
    job.workers.clear();
    for (const json& w : d.value("workers", json::array())) {
      Worker worker;
      worker.rank = w.at("rank").get<int>();
      auto alloc = WorkerAllocFromJson(w.at("alloc"), cluster);
      if (!alloc) return alloc.error();
      worker.alloc = *alloc;
      worker.exited = w.value("exited", false);
      worker.exit_code = w.value("exit_code", 0);
      worker.signal = w.value("signal", 0);
      worker.lost = w.value("lost", false);
      const json u = w.value("usage", json::object());
      worker.busy_gpu_ms = u.value("busy_gpu_ms", 0.0);
      worker.reported_gpu_ms = u.value("reported_gpu_ms", 0.0);
      worker.vram_peak = u.value("vram_peak", int64_t{0});
      worker.util_peak = u.value("util_peak", 0.0);
      job.workers.push_back(worker);
    }
    job.run_token_hashes.clear();
    if (auto all = d.find("run_token_hashes"); all != d.end() && all->is_array()) {
      for (const json& h : *all) {
        if (h.is_string()) job.run_token_hashes.push_back(h.get<std::string>());
      }
    } else if (std::string first = d.value("run_token_hash", std::string()); !first.empty()) {
      job.run_token_hashes.push_back(std::move(first));
    }
    job.steps.clear();
    for (const json& s : d.value("steps", json::array())) {
      Step step;
      step.id = s.at("id").get<int>();
      step.name = s.value("name", std::string());
      step.command = s.at("command").get<std::vector<std::string>>();
      step.env = s.value("env", std::map<std::string, std::string>());
      step.workdir = s.value("workdir", std::string());
      step.nodes = s.value("nodes", 0);
      step.ntasks = s.value("ntasks", 0);
      step.per_node = s.value("per_node", 0);
      step.cpus_per_task = s.value("cpus_per_task", 0);
      step.nodelist = s.value("nodelist", std::vector<std::string>());
      step.bind_gpus = s.value("bind_gpus", false);
      step.gpu_bind = s.value("gpu_bind", std::string());
      step.cyclic = s.value("cyclic", false);
      step.own_gpus = s.value("own_gpus", 0);
      step.gpu_masks = s.value("gpu_masks", std::vector<uint64_t>());
      step.exact = s.value("exact", s.value("exclusive", false));  // (the older key)
      std::vector<std::string> cpus = s.value("cpus", std::vector<std::string>());
      for (const std::string& list : cpus) {
        std::optional<std::vector<int>> one = ParseCpuList(list);
        if (!one) return Error{"doc", "a step's cpus: not a CPU list: " + list};
        step.cpus.push_back(std::move(*one));
      }
      if (const json c = s.value("container", json()); c.is_object()) {
        step.image = c.value("image", std::string());
        step.mounts = MountsFromJson(c.value("mounts", json::array()));
        step.container_workdir = c.value("workdir", std::string());
        step.mount_home = c.value("mount_home", false);
      }
      step.multi_prog = s.value("multi_prog", std::string());
      step.input = s.value("input", std::string());
      step.input_task = s.value("input_task", -1);
      step.overlap = s.value("overlap", false);
      step.held = s.value("held", false);
      step.cancelled = s.value("cancelled", false);
      step.killed = s.value("killed", false);
      step.time_limit = s.value("time_limit", Ticks{0});
      step.timed_out = s.value("timed_out", false);
      const int step_state = s.value("state", 0);
      if (step_state < 0 || step_state > static_cast<int>(Step::State::kEnded))
        return Error{"doc", "unknown step state"};
      step.state = static_cast<Step::State>(step_state);
      step.created = s.value("created", Ticks{0});
      step.started = s.value("started", Ticks{-1});
      step.ended = s.value("ended", Ticks{-1});
      for (const json& t : s.value("tasks", json::array())) {
        StepTask task;
        task.slot = t.at("slot").get<int>();
        if (task.slot < 0 || task.slot >= static_cast<int>(job.workers.size()))
          return Error{"doc", "step task slot out of range"};
        task.local = t.value("local", 0);
        task.node = t.value("node", 0);
        task.exited = t.value("exited", false);
        task.lost = t.value("lost", false);
        task.exit_code = t.value("exit_code", 0);
        task.signal = t.value("signal", 0);
        task.note = t.value("note", std::string());
        step.tasks.push_back(std::move(task));
      }
      job.steps.push_back(std::move(step));
    }
  } catch (const json::exception& e) {
    return Error{"doc", e.what()};
  }
  return Ok{};
}

json NodeToDoc(const NodeInfo& n) {
  return {{"up", n.up},
          {"drained", n.drained},
          {"drain_reason", n.drain_reason},
          {"drained_by", n.drained_by},
          {"drained_at_ms", n.drained_at_ms},
          {"address", n.address},
          {"agent_id", n.agent_id},
          {"gpus", proto::Encode(n.gpus)},
          {"isolation", n.isolation}};
}

void NodeFromDoc(const json& d, NodeInfo& n) {
  n.up = d.value("up", false);
  n.drained = d.value("drained", false);
  n.drain_reason = d.value("drain_reason", std::string());
  n.drained_by = d.value("drained_by", std::string());
  n.drained_at_ms = d.value("drained_at_ms", int64_t{-1});
  n.address = d.value("address", std::string());
  n.agent_id = d.value("agent_id", std::string());
  Result<std::vector<GpuReport>> gpus = proto::DecodeGpus(d.value("gpus", json::array()));
  n.gpus = gpus ? std::move(*gpus) : std::vector<GpuReport>();
  try {
    n.isolation = d.value("isolation", std::map<std::string, bool>());
  } catch (const json::exception&) {
    n.isolation.clear();
  }
}

bool GpuMatchesModel(const GpuReport& gpu, const core::GpuModel& model) {
  if (!gpu.model.empty()) return gpu.model == model.name;
  const std::string family = Lower(model.name.substr(0, model.name.find('-')));
  if (Lower(gpu.name).find(family) == std::string::npos) return false;
  const double ratio =
      static_cast<double>(gpu.memory_bytes) / static_cast<double>(model.memory_bytes);
  return std::fabs(ratio - 1.0) <= 0.12;
}

}  // namespace gantry::server
