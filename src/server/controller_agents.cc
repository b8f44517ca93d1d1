#include "server/controller.h"

#include "base/log.h"
#include "base/rlimits.h"
#include "server/controller_internal.h"
#include "spec/batch.h"

#include <algorithm>
#include <bit>
#include <csignal>
#include <fstream>
#include <map>

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Ports for a gang's rendezvous, spread by job and run so that two runs on one node
// rarely collide.
int MasterPort(int64_t seq, int run) {
  return 20000 + static_cast<int>((seq * 7919 + run) % 40000);
}

}  // namespace

Controller::SlurmNames Controller::SiteNames(const Job& job, core::PoolId pool,
                                             core::Tier tier) const {
  // The strings a JSON job spec (gantry sbatch's) gave for `queue` and `tier` (sbatch -A,
  // --qos), "" where none (or a YAML spec): read once, kept with the job.
  if (!job.given_names) {
    auto& given = job.given_names.emplace();
    const json j = job.spec_format == "json" ? json::parse(job.spec_text, nullptr, false) : json();
    for (auto [key, out] : {std::pair{"queue", &given.first}, {"tier", &given.second}}) {
      const auto it = j.is_object() ? j.find(key) : j.end();
      if (j.is_object() && it != j.end() && it->is_string()) *out = it->get<std::string>();
    }
  }
  SlurmNames n;
  // The partition: the site's name for the pool where it has one, as Slurm says it.
  if (pool.valid()) n.partition = PartitionsOf(pool).front();
  // The account and QoS by the site's names, as Slurm says them (a script may pass them on
  // to the jobs it submits): those given (sbatch -A, --qos), else the site's account for
  // the queue (its default account) and QoS for the tier (`normal` for standard), else
  // Gantry's queue and tier. A tier other than the one asked (a spent budget's
  // demotion) is named for itself.
  n.account = job.given_names->first;
  for (const auto& [name, id] : config_.site.accounts) {
    if (n.account.empty() && config_.queues.queue(id).spec.name == job.queue) n.account = name;
  }
  if (n.account.empty()) n.account = job.queue;
  if (tier == job.spec.tier) n.qos = job.given_names->second;
  auto qos_tier = [&](const std::string& name) -> std::optional<core::Tier> {
    for (const auto& [q, t] : config_.site.qos) {
      if (q == name) return t;
    }
    return name == "normal" ? std::optional{core::Tier::kStandard} : std::nullopt;
  };
  if (n.qos.empty() && qos_tier("normal") == tier) n.qos = "normal";
  for (const auto& [name, t] : config_.site.qos) {
    if (n.qos.empty() && t == tier) n.qos = name;
  }
  if (n.qos.empty()) n.qos = std::string(core::Name(tier));
  return n;
}

// ---------------------------------------------------------------- API: agents

std::vector<proto::DesiredWorker::Signal> Controller::AskedSignals(
    const Job& job, std::initializer_list<SignalTo> to) {
  std::vector<proto::DesiredWorker::Signal> out;
  for (size_t i = 0; i < job.signals.size(); ++i) {
    const Job::SignalAsk& k = job.signals[i];
    if (std::find(to.begin(), to.end(), k.to) != to.end())
      out.push_back({static_cast<int>(i + 1), k.signal, job.batch() && k.to == SignalTo::kBatch});
  }
  return out;
}

std::string Controller::GpuIndexes(const core::WorkerAlloc& a) {
  if (a.sharing != core::Sharing::kExclusive) return std::to_string(a.gpu);
  std::string out;
  for (uint64_t m = a.gpu_mask; m != 0; m &= m - 1)
    out += (out.empty() ? "" : ",") + std::to_string(std::countr_zero(m));
  return out;
}

spec::OutputNames Controller::OutputNamesOf(const Job& job, const Worker& w,
                                            const std::vector<std::string>& nodes) const {
  const std::string& node = cluster_.node(w.alloc.node).name;
  spec::OutputNames o;
  // Numbers, as Slurm's: `slurm-%j.out` is `slurm-12.out`, the file a script finds again
  // through $SLURM_JOB_ID (an array task's own number; %A its array's).
  o.job = std::to_string(job.Number());
  o.name = job.spec.name.empty() ? job.name : job.spec.name;
  o.array_job = job.array.empty() ? o.job : std::to_string(book_.ArrayNumber(job));
  o.array_task = job.array.empty() ? spec::kNoArrayTask : std::to_string(job.array_index);
  o.node = node;
  o.user = job.user;
  o.rank = w.rank;
  o.node_index = static_cast<int>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
  return o;
}

// The SLURM_* variables Slurm jobs read, for every job (a script moved from Slurm works
// whether it came through `gantry sbatch` or not), never over one the job set itself.
// Slurm's job-wide view in Gantry's terms: a task is a worker, SLURM_GPUS_ON_NODE is what
// this worker sees (CUDA_VISIBLE_DEVICES: `a`, what it holds; a batch script all the
// job's GPUs on its node), and the partition is the pool of its node.
void Controller::SlurmEnv(const Job& job, const Worker& w, const core::WorkerAlloc& a, int local,
                          const std::vector<std::string>& nodes, const spec::OutputNames& names,
                          std::map<std::string, std::string>& env) const {
  std::vector<int> per_node(nodes.size(), 0);
  for (const Worker& x : job.workers) {
    const std::string& n = cluster_.node(x.alloc.node).name;
    per_node[static_cast<size_t>(std::find(nodes.begin(), nodes.end(), n) - nodes.begin())] +=
        job.spec.tasks_per_worker;
  }
  const core::Node& node = cluster_.node(w.alloc.node);
  // A MIG instance or a share counts 1.
  const int gpus = a.sharing == core::Sharing::kExclusive ? std::popcount(a.gpu_mask) : 1;
  const std::string indexes = GpuIndexes(a);  // SLURM_JOB_GPUS
  // The job's CPUs on this node (NodeLimits: a batch job's at least one per task).
  const int64_t cpus = NodeLimits(job, w.alloc.node).cpus;
  // A batch job's tasks per node when sbatch was given no task count: Slurm counts the
  // node's CPUs over the CPUs per task (sbatch sets SLURM_NTASKS when it was given one).
  std::string tasks_per_node = spec::TasksPerNode(per_node);
  if (job.batch() && !env.contains("SLURM_NTASKS") && nodes.size() == 1) {
    const auto per_task = env.find("SLURM_CPUS_PER_TASK");  // sbatch's -c, else 1
    const int64_t c = per_task == env.end() ? 1 : std::max(1, std::atoi(per_task->second.c_str()));
    tasks_per_node = std::to_string(std::max<int64_t>(1, cpus / c));
  }
  const SlurmNames site = SiteNames(job, node.pool, job.spec.tier);
  // The job's CPUs on each of its nodes (SLURM_JOB_CPUS_PER_NODE, "16(x2)"), counted as
  // SLURM_CPUS_ON_NODE is on this one.
  std::vector<int> cpus_by_node(nodes.size(), 0);
  for (const Worker& x : job.workers) {
    const size_t i = static_cast<size_t>(
        std::find(nodes.begin(), nodes.end(), cluster_.node(x.alloc.node).name) - nodes.begin());
    if (i >= nodes.size() || cpus_by_node[i] != 0) continue;
    cpus_by_node[i] = NodeLimits(job, x.alloc.node).cpus;
  }
  // The job's task ids on this node (SLURM_GTIDS): the batch script is task 0.
  std::string gtids = job.batch() ? "0" : "";
  for (const Worker& x : job.workers) {
    if (!job.batch() && x.alloc.node == w.alloc.node)
      gtids += (gtids.empty() ? "" : ",") + std::to_string(x.rank);
  }
  std::vector<std::pair<std::string, std::string>> vars = {
      // Numbers, as Slurm's (scripts compute ports from them); every command takes them.
      {"SLURM_JOB_ID", std::to_string(job.Number())},
      {"SLURM_JOBID", std::to_string(job.Number())},
      {"SLURM_JOB_NAME", names.name},
      {"SLURM_PROCID", std::to_string(w.rank)},
      {"SLURM_LOCALID", std::to_string(local)},
      {"SLURM_NODEID", std::to_string(names.node_index)},
      {"SLURM_NNODES", std::to_string(nodes.size())},
      {"SLURM_JOB_NUM_NODES", std::to_string(nodes.size())},
      {"SLURM_TASKS_PER_NODE", tasks_per_node},
      {"SLURM_JOB_NODELIST", spec::HostList(nodes)},
      {"SLURM_NODELIST", spec::HostList(nodes)},
      {"SLURMD_NODENAME", node.name},
      {"SLURM_JOB_PARTITION", site.partition},
      {"SLURM_JOB_ACCOUNT", site.account},
      {"SLURM_JOB_QOS", site.qos},
      {"SLURM_CLUSTER_NAME", cluster_.name()},
      {"SLURM_GTIDS", gtids},
      {"SLURM_TOPOLOGY_ADDR", node.name},
      {"SLURM_TOPOLOGY_ADDR_PATTERN", "node"}};
  if (gpus > 0) vars.emplace_back("SLURM_GPUS_ON_NODE", std::to_string(gpus));
  if (job.run > 1) vars.emplace_back("SLURM_RESTART_COUNT", std::to_string(job.run - 1));
  // A batch job's task count, tasks per node, CPUs per task and memory per node are
  // sbatch's, set from its options as Slurm's sbatch sets them (absent when not given).
  if (!job.batch()) {
    vars.emplace_back("SLURM_NTASKS", std::to_string(job.workers.size()));
    vars.emplace_back("SLURM_NPROCS", std::to_string(job.workers.size()));
    if (std::all_of(per_node.begin(), per_node.end(),
                    [&](int c) { return c == per_node.front(); })) {
      vars.emplace_back("SLURM_NTASKS_PER_NODE", std::to_string(per_node.front()));
    }
  }
  if (!indexes.empty()) vars.emplace_back("SLURM_JOB_GPUS", indexes);
  if (cpus > 0) vars.emplace_back("SLURM_CPUS_ON_NODE", std::to_string(cpus));
  if (std::all_of(cpus_by_node.begin(), cpus_by_node.end(), [](int c) { return c > 0; }))
    vars.emplace_back("SLURM_JOB_CPUS_PER_NODE", spec::TasksPerNode(cpus_by_node));
  if (!job.array.empty()) {
    vars.emplace_back("SLURM_ARRAY_JOB_ID", std::to_string(book_.ArrayNumber(job)));
    vars.emplace_back("SLURM_ARRAY_TASK_ID", std::to_string(job.array_index));
    if (const Job::ArrayShape& shape = job.array_shape; shape.count > 0) {
      vars.emplace_back("SLURM_ARRAY_TASK_COUNT", std::to_string(shape.count));
      vars.emplace_back("SLURM_ARRAY_TASK_MIN", std::to_string(shape.min));
      vars.emplace_back("SLURM_ARRAY_TASK_MAX", std::to_string(shape.max));
      vars.emplace_back("SLURM_ARRAY_TASK_STEP", std::to_string(shape.step));
    }
  }
  if (job.spec.cpus_milli > 0 && !job.batch())
    vars.emplace_back("SLURM_CPUS_PER_TASK", std::to_string((job.spec.cpus_milli + 999) / 1000));
  if (job.spec.memory_bytes > 0 && !job.batch()) {
    vars.emplace_back("SLURM_MEM_PER_NODE",
                      std::to_string(int64_t{per_node[static_cast<size_t>(names.node_index)]} *
                                     ((job.spec.memory_bytes + (1 << 19)) >> 20)));  // nearest MiB
  }
  if (!job.user.empty()) vars.emplace_back("SLURM_JOB_USER", job.user);
  if (!job.spec.workdir.empty())
    vars.emplace_back("SLURM_SUBMIT_DIR", job.spec.workdir);  // sbatch sets its own
  for (const auto& [k, v] : vars) {
    if (!env.contains(k)) env[k] = v;
  }
  // An elastic batch job (-N MIN-MAX): sbatch's task count is its most; this run's is its size.
  if (job.batch() && job.spec.elastic() && env.contains("SLURM_NTASKS"))
    env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = std::to_string(job.tasks());
}

proto::WatchAnswer Controller::NodeAnswer(core::NodeId n, Ticks now) {
  proto::WatchAnswer a;
  a.instance = instance_;
  a.epoch = options_.epoch;
  a.version = watches_.version(n);
  for (int64_t seq : book_.OnNode(n)) {
    const Job& job = book_.jobs().at(seq);
    const bool stopping = job.state == JobState::kStopping;
    // Stopped after an sbatch --signal's lead: SIGTERM to the script and the steps, as Slurm;
    // likewise to the steps left running when the batch script ended.
    const bool term =
        stopping && (job.limit_signaled_run == job.run ||
                     (job.batch() && !job.workers.empty() && job.workers.front().exited));
    for (const Worker& w : job.workers) {
      if (w.alloc.node != n || w.exited) continue;
      if (job.batch() && w.rank != 0) continue;  // a slot for steps: nothing of its own runs
      if (!w.desired)
        w.desired = std::make_shared<const proto::DesiredWorker>(DesiredWorker(job, w));
      if (!stopping) {
        a.workers.push_back(w.desired);
        continue;
      }
      auto stop = std::make_shared<proto::DesiredWorker>(*w.desired);
      stop->action = proto::DesiredWorker::Action::kStop;
      stop->grace_ms = std::max<Ticks>(0, job.stop_deadline - now);
      if (term) {
        stop->signal = SIGTERM;
        stop->signal_script_only = false;
      }
      a.workers.push_back(std::move(stop));
    }
    // A batch job's steps: their tasks here that still run.
    for (const Step& s : job.steps) {
      if (s.state != Step::State::kRunning || s.held) continue;  // held: not launched yet
      for (size_t i = 0; i < s.tasks.size(); ++i) {
        const StepTask& t = s.tasks[i];
        if (t.exited || job.workers[static_cast<size_t>(t.slot)].alloc.node != n) continue;
        if (!t.desired)
          t.desired = std::make_shared<const proto::DesiredWorker>(
              StepDesired(job, s, static_cast<int>(i)));
        if (!stopping && !s.cancelled) {
          a.workers.push_back(t.desired);
          continue;
        }
        auto stop = std::make_shared<proto::DesiredWorker>(*t.desired);
        stop->action = proto::DesiredWorker::Action::kStop;
        if (stopping) {
          stop->grace_ms = std::max<Ticks>(0, job.stop_deadline - now);
          if (term) stop->signal = SIGTERM;
        } else if (s.killed) {  // a task called MPI_Abort
          stop->signal = SIGKILL;
          stop->grace_ms = 0;
        } else {  // srun was interrupted
          stop->signal = SIGTERM;
          stop->grace_ms = std::max<Ticks>(0, s.ended + kStepKillWaitMs - now);
        }
        a.workers.push_back(std::move(stop));
      }
    }
  }
  for (const UnreadStop& u : nodes_.unread_stops()) {
    if (u.node != n) continue;
    auto stop = std::make_shared<proto::DesiredWorker>(*u.stop);
    stop->grace_ms = std::max<Ticks>(0, u.deadline - now);
    a.workers.push_back(std::move(stop));
  }
  return a;
}

proto::DesiredWorker Controller::DesiredWorker(const Job& job, const Worker& w) {
  const core::NodeId n = w.alloc.node;
  // A batch job's script holds every GPU of the job on its node (the slots' too), as
  // Slurm's batch step does.
  const core::WorkerAlloc alloc = job.batch() ? NodeAlloc(job, n, w.rank) : w.alloc;
  const std::vector<std::string> nodes = JobNodes(job);
  int local = 0;  // the workers of this job before it on its node
  for (const Worker& o : job.workers) {
    if (&o == &w) break;
    local += o.alloc.node == n;
  }
  const Worker& leader = job.workers.front();
  const NodeInfo& leader_node = nodes_[leader.alloc.node];
  const std::string master =
      leader_node.address.empty() ? cluster_.node(leader.alloc.node).name : leader_node.address;
  const int port = MasterPort(job.seq, job.run);
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : job.spec.env) env[k] = v;  // the last of a name wins
  env["GANTRY_JOB_ID"] = job.name;
  env["GANTRY_QUEUE"] = job.queue;
  env["GANTRY_TIER"] = std::string(core::Name(job.spec.tier));
  env["GANTRY_RUN"] = std::to_string(job.run);
  env["GANTRY_RANK"] = std::to_string(w.rank);
  env["GANTRY_LOCAL_RANK"] = std::to_string(local);
  env["GANTRY_WORLD_SIZE"] = std::to_string(job.workers.size());
  if (job.spec.elastic()) {  // what an elastic launcher is given (torchrun --nnodes MIN:MAX)
    env["GANTRY_MIN_WORLD_SIZE"] = std::to_string(job.spec.min_replicas);
    env["GANTRY_MAX_WORLD_SIZE"] = std::to_string(job.spec.replicas);
  }
  env["GANTRY_MASTER_ADDR"] = master;
  env["GANTRY_MASTER_PORT"] = std::to_string(port);
  env["GANTRY_PROGRESS_S"] = spec::FormatSeconds(job.progress);
  env["GANTRY_CHECKPOINT_S"] = spec::FormatSeconds(job.spec.checkpoint);
  env["GANTRY_GRACE_S"] = spec::FormatSeconds(job.spec.grace);
  if (!job.array.empty()) {  // an array task (gantry submit --array)
    env["GANTRY_ARRAY_JOB_ID"] = job.array;
    env["GANTRY_ARRAY_TASK_ID"] = std::to_string(job.array_index);
  }
  const spec::OutputNames names = OutputNamesOf(job, w, nodes);
  if (job.batch()) {
    // Its own credential, for srun and the other Slurm commands inside it (the agent adds
    // GANTRY_SERVER and puts them on PATH). A gantryd restarted during the run gives
    // another one (Restore), which a script its agent starts after that gets.
    if (auto t = run_tokens_.find(job.seq); t != run_tokens_.end()) env["GANTRY_TOKEN"] = t->second;
  }
  const proto::Limits limits = job.batch() ? NodeLimits(job, n) : WorkerLimits(w.alloc, cluster_);
  SlurmEnv(job, w, alloc, local, nodes, names, env);
  // The names PyTorch's launcher reads, unless the job set them itself (a batch script
  // is not a task: srun gives its tasks theirs).
  for (auto [k, v] : {std::pair<const char*, std::string>{"RANK", std::to_string(w.rank)},
                      {"LOCAL_RANK", std::to_string(local)},
                      {"WORLD_SIZE", std::to_string(job.workers.size())},
                      {"MASTER_ADDR", master},
                      {"MASTER_PORT", std::to_string(port)}}) {
    if (job.batch() && k[0] != 'M') continue;
    if (!env.contains(k)) env[k] = v;
  }
  DropExceptedRlimits(env, config_.site.propagate_resource_limits_except);
  proto::DesiredWorker wj;
  wj.job = job.name;
  wj.seq = job.seq;
  wj.run = job.run;
  wj.rank = w.rank;
  wj.grace_ms = job.spec.grace;
  wj.command = job.spec.command;
  wj.env = std::move(env);
  wj.workdir = job.spec.workdir;
  wj.user = job.user;
  wj.alloc = WireAlloc(alloc, cluster_);
  wj.limits = limits;
  wj.script = job.spec.script;
  wj.gpus_by_index = job.batch();  // CUDA_VISIBLE_DEVICES as Slurm's gres gives it
  wj.image = job.spec.image;
  wj.signal = std::max(0, job.spec.stop_signal);
  wj.append_output = job.spec.append_output;
  wj.signal_script_only = job.batch() && job.spec.signal_batch;
  if (job.batch() && wj.signal > 0 && !job.spec.signal_batch)
    wj.signal = SIGCONT;  // --signal without B: goes to the steps (StepDesired)
  // scancel --signal: a native job's workers all get them; a batch script -b's and -f's.
  wj.signals = job.batch()
                   ? AskedSignals(job, {SignalTo::kBatch, SignalTo::kFull})
                   : AskedSignals(job, {SignalTo::kSteps, SignalTo::kBatch, SignalTo::kFull});
  // `gantry sbatch`: the script the agent writes on the node and runs, the files the
  // worker's output goes to (only rank 0's unless the pattern names %t, as only Slurm's
  // batch step writes to -o), and the signal it gets first when stopped.
  for (auto [out, pattern] :
       {std::pair<std::string*, const std::string*>{&wj.stdout_path, &job.spec.stdout_path},
        {&wj.stderr_path, &job.spec.stderr_path}}) {
    if (pattern->empty() || (w.rank != 0 && !spec::PatternPerRank(*pattern))) continue;
    *out = spec::ExpandOutputPattern(*pattern, names);
  }
  // A mig_managed pool: the agent creates the instance at this placement (and destroys
  // it when the worker ends), so it needs the placement's size too.
  if (w.alloc.sharing == core::Sharing::kMig &&
      cluster_.pool(cluster_.node(n).pool).spec.mig_managed) {
    const core::MigProfile& p = cluster_.catalog()
                                    .model(cluster_.node(n).model)
                                    .mig_profiles[static_cast<size_t>(w.alloc.mig_profile)];
    wj.alloc.create = true;
    wj.alloc.memory_slices = p.memory_slices;
    wj.alloc.compute_slices = p.compute_slices;
  }
  // For emulated agents only (`emulate` in the spec, a test aid): how busy to look.
  // Without one a job looks busy at 90% using the VRAM it asked for.
  const core::JobSpec::Emulate em = job.spec.emulate.value_or(core::JobSpec::Emulate{});
  wj.emulate = proto::Emulate{
      .util = em.util,
      .vram_used_bytes =
          em.vram_used_bytes >= 0
              ? em.vram_used_bytes
              : job.spec.vram_bytes * std::max<int64_t>(1, std::popcount(w.alloc.gpu_mask)),
      .idle_after_ms = em.idle_after ? std::max<Ticks>(0, *em.idle_after - job.progress) : -1};
  return wj;
}

void Controller::Heartbeat(std::string token, std::string node_name, json body,
                           std::string remote_addr, Done done) {
  // Decoded here, on the caller's (HTTP) thread, where the JSON is let go too: at 1,024
  // nodes this was a third of the controller thread's time (issue 49). A body that does
  // not decode is refused after authentication, as before.
  auto shared = std::make_shared<Result<AgentReport>>(proto::DecodeHeartbeat(body));
  CallAsAgent(
      std::move(token), std::move(node_name), std::move(done),
      [this, shared, remote_addr = std::move(remote_addr)](core::NodeId n) -> Reply {
        const std::string& node = cluster_.node(n).name;
        Result<AgentReport>& decoded = *shared;
        if (!decoded) {  // nothing changed yet
          return Reply::Error(Code::kBadRequest, "heartbeat: " + decoded.error().ToString());
        }
        AgentReport& report = *decoded;
        const Ticks now = now_;
        NodeInfo& info = nodes_[n];
        const core::Node& cn = cluster_.node(n);
        // One live agent per node: a second process for the same node (a mistyped --node, a
        // copied config) is refused until the first has been silent for its lease, by which
        // time that one has stopped its workers itself; the newest wins only then.
        if (info.up && !info.agent_id.empty() && report.agent_id != info.agent_id &&
            now - info.last_seen < options_.lease_ms) {
          metrics_.DuplicateAgent();
          log::Warn("second agent for a live node refused", {{"node", node},
                                                             {"agent", report.agent_id},
                                                             {"live_agent", info.agent_id},
                                                             {"from", remote_addr}});
          return Reply::Error(
              Code::kConflict,
              "node " + node + " is held by another live agent (instance " + info.agent_id +
                  ", heard " + FormatValue(static_cast<double>(now - info.last_seen) / 1000.0) +
                  " s ago): a second agent for one node is refused until the first has been silent "
                  "for "
                  "its lease (" +
                  FormatValue(static_cast<double>(options_.lease_ms) / 1000.0) + " s)");
        }
        // The agent's GPUs must be what the config says this node has.
        std::string refused;
        if (static_cast<int>(report.gpus.size()) != cn.gpus) {
          refused = "agent reports " + std::to_string(report.gpus.size()) +
                    " GPUs; the cluster config gives " + node + " " + std::to_string(cn.gpus);
        } else if (cn.gpus > 0) {
          const core::GpuModel& model = cluster_.catalog().model(cn.model);
          for (const GpuReport& g : report.gpus) {
            if (!GpuMatchesModel(g, model)) {
              refused = "GPU " + std::to_string(g.index) + " is " +
                        (g.model.empty() ? g.name : g.model) + "; the cluster config gives " +
                        node + " " + model.name;
              break;
            }
          }
        }
        if (!refused.empty()) {
          const bool changed = info.refused != refused;
          info.refused = refused;
          if (info.up) NodeDown(n, now, "its agent's GPUs do not match the config", "was refused");
          if (changed) PersistNode(n);
          return Reply::Error(Code::kConflict, "node " + node + " refused: " + refused);
        }
        info.refused.clear();
        info.last_seen = now;
        const std::string address = report.address.empty() ? remote_addr : report.address;
        // Utilization changes at every heartbeat; only the inventory is worth a write.
        auto inventory = [](std::vector<GpuReport> gpus) {
          for (GpuReport& g : gpus) {
            g.utilization = 0;
            g.memory_used_bytes = 0;
            g.idle_ms = 0;
          }
          return gpus;
        };
        std::map<std::string, bool> isolation =
            report.isolation.value_or(std::map<std::string, bool>());
        bool changed = info.address != address || info.agent_id != report.agent_id ||
                       inventory(info.gpus) != inventory(report.gpus) ||
                       info.isolation != isolation;
        info.address = address;
        info.agent_id = report.agent_id;
        if (info.isolation != isolation) {  // said once per change, not per heartbeat
          std::string missing;
          for (const auto& [what, on] : isolation) {
            if (!on) missing += (missing.empty() ? "" : ", ") + what;
          }
          if (!missing.empty())
            log::Warn("node's workers not isolated", {{"node", node}, {"missing", missing}});
        }
        info.isolation = std::move(isolation);
        info.gpus = std::move(report.gpus);
        if (!info.up) {
          info.up = true;
          log_.NodeUp(now, node);
          log::Info("node up", {{"node", node}, {"agent", report.agent_id}, {"address", address}});
          changed = true;
        }
        for (const GpuReport& g : info.gpus) {
          if (g.lost && !info.drained) {
            info.Drain("GPU " + std::to_string(g.index) + " (" + g.uuid + ") lost", "gantryd",
                       WallMs(now_));
            changed = true;
          }
        }
        SetCoreNodeUp(n);
        if (changed) PersistNode(n);
        for (const ExitReport& e : report.exits) {
          if (!nodes_.unread_stops().empty()) {
            const std::string key = proto::WorkerKey(e.job, e.run, e.rank, e.step);
            EndUnreadStops(n, [&](const UnreadStop& u) { return u.key == key; });
          }
          Job* job = book_.Find(e.job);
          if (job && job->active() && job->run == e.run && e.step >= 0) {
            StepTaskExited(*job, e, n, now);
            continue;
          }
          if (!job || !job->active() || job->run != e.run || e.rank < 0 ||
              e.rank >= static_cast<int>(job->workers.size()) || e.step >= 0) {
            continue;  // an old run, or already settled
          }
          Worker& w = job->workers[static_cast<size_t>(e.rank)];
          if (w.alloc.node != n) continue;
          // The agent could not give the worker its GPU share (a MIG instance it could not
          // create): the worker comes back lost, so the job is requeued, and the node is drained
          // with the agent's reason, as Slurm drains a node whose prolog failed, so the job does
          // not land on that GPU again at once. `gantry nodes resume` puts it back.
          if (!e.drain.empty() && !w.exited && !info.drained) {
            info.Drain(e.drain + " (job " + job->name + " requeued)", "gantryd", WallMs(now_));
            log::Warn("node drained: a worker could not start",
                      {{"node", node}, {"job", job->name}, {"reason", e.drain}});
            SetCoreNodeUp(n);
            PersistNode(n);
          }
          WorkerExited(*job, w, e, now);
        }
        for (const RunningReport& r : report.running) {
          if (!r.usage) continue;
          Job* job = book_.Find(r.job);
          if (job && job->state == JobState::kRunning && job->run == r.run && job->batch()) {
            RecordBatchUsage(*job, r, n, now);
            continue;
          }
          if (!job || job->state != JobState::kRunning || job->run != r.run || r.rank < 0 ||
              r.rank >= static_cast<int>(job->workers.size()) || r.step >= 0) {
            continue;
          }
          Worker& w = job->workers[static_cast<size_t>(r.rank)];
          if (w.alloc.node == n && !w.exited) RecordUsage(*job, w, r, now);
        }
        if (report.leaving && info.up) {  // a clean agent shutdown: its workers are stopped
          NodeDown(n, now, "its agent stopped (a clean shutdown)", "stopped: its agent shut down");
        }
        Reply r;
        r.encode = [reply = proto::HeartbeatReply{.answer = NodeAnswer(n, now),
                                                  .heartbeat_ms = options_.heartbeat_ms,
                                                  .lease_ms = options_.lease_ms,
                                                  .node_timeout_ms = options_.node_timeout_ms}] {
          return proto::Encode(reply);
        };
        return r;
      },
      Kind::kHeartbeat);
}

void Controller::Watch(std::string token, std::string node, std::string instance, int64_t version,
                       int64_t timeout_ms, Done done) {
  Done keep = done;  // the watch holds its Done until the node's version moves
  CallAsAgent(std::move(token), std::move(node), std::move(done),
              [this, instance = std::move(instance), version, timeout_ms,
               keep = std::move(keep)](core::NodeId n) -> Reply {
                const Ticks now = now_;
                if (instance != instance_ || version != watches_.version(n) || timeout_ms <= 0) {
                  return WatchReply(n, now);
                }
                watches_.Park(n, keep, version, now + std::min<int64_t>(timeout_ms, 120000));
                Reply r;
                r.deferred = true;
                return r;
              });
}

void Controller::UploadLog(std::string token, std::string node, std::string name, int run, int rank,
                           int step, bool err, int64_t offset, std::string data, Done done) {
  CallAsAgent(
      std::move(token), std::move(node), std::move(done),
      [this, name = std::move(name), run, rank, step, err, offset,
       data = std::move(data)](core::NodeId) -> Reply {
        Job* job = book_.Find(name);
        if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
        const int ranks = step < 0 ? job->spec.replicas
                          : run == job->run && step < static_cast<int>(job->steps.size())
                              ? static_cast<int>(job->steps[static_cast<size_t>(step)].tasks.size())
                              : 0;
        if (run <= 0 || run > job->run || rank < 0 || rank >= ranks || offset < 0) {
          return Reply::Error(Code::kBadRequest, "run, step, rank or offset out of range");
        }
        const fs::path dir = fs::path(options_.log_dir) / std::to_string(job->seq);
        const fs::path path = dir / LogFileName(run, rank, step, err);
        std::error_code ec;
        fs::create_directories(dir, ec);
        int64_t size = fs::exists(path, ec) ? static_cast<int64_t>(fs::file_size(path, ec)) : 0;
        if (offset <= size && offset + static_cast<int64_t>(data.size()) > size) {
          std::ofstream out(path, std::ios::binary | std::ios::app);
          const size_t skip = static_cast<size_t>(size - offset);
          out.write(data.data() + skip, static_cast<std::streamsize>(data.size() - skip));
          out.flush();
          if (out) size += static_cast<int64_t>(data.size() - skip);
        }
        if (step >= 0 && run == job->run) {  // srun reads what it has not printed yet
          StepTask& t = job->steps[static_cast<size_t>(step)].tasks[static_cast<size_t>(rank)];
          (err ? t.error_bytes : t.output_bytes) = size;
          if (!step_watches_.empty()) steps_changed_.insert(job->seq);
        }
        Reply r;
        r.body = proto::Encode(proto::LogUploadReply{size});
        return r;
      });
}

}  // namespace gantry::server
