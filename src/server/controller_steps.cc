// Batch jobs as Slurm runs them (docs/slurm.md, "Inside a job"): a `gantry sbatch` job's
// workers are an allocation of task slots; the batch script runs once, in rank 0's slot
// (with all the job's GPUs on that node), and `srun` inside it runs job steps: tasks on the
// job's nodes, launched by their agents inside the allocation. srun, scontrol, sbatch,
// squeue, scancel and sacct there present the run's own credential (GANTRY_TOKEN), which
// may run steps of this job only and ends with the run.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/image_reference.h"
#include "base/rlimits.h"
#include "server/controller.h"
#include "server/controller_internal.h"
#include "spec/batch.h"

namespace gantry::server {

using nlohmann::json;

namespace {

// Why a step's container (srun --container-image, pyxis' options) cannot run, or "": a
// plain registry image, and absolute paths without podman's separators (':' and ',').
std::string StepContainerProblem(const Step& s) {
  if (s.image.empty()) {
    return s.mounts.empty() && s.container_workdir.empty()
               ? ""
               : "container_mounts and container_workdir need an image";
  }
  if (std::string why = ImageReferenceProblem(s.image); !why.empty())
    return "image " + s.image + ": " + why;
  auto plain = proto::DesiredWorker::PlainMountPath;
  for (const proto::DesiredWorker::Mount& m : s.mounts) {
    if (!plain(m.source) || !plain(m.target))
      return "container_mounts: " + m.source + ":" + m.target +
             ": absolute paths without ':' or ',' expected";
  }
  if (!s.container_workdir.empty() && !plain(s.container_workdir))
    return "container_workdir: an absolute path without ':' or ',' expected, got " +
           s.container_workdir;
  return "";
}

// srun --gpu-bind=[verbose,]TYPE as Slurm 22.05 reads it: which of the step's GPUs on its
// node a task sees, by its local id. gantryd does not know which GPUs are near which CPUs
// (agents bind tasks to CPUs, srun --cpu-bind, but report no GPU's NUMA node), so every
// GPU is as close as any: `closest` (and `none`) leave each task all of them, as Slurm does
// where tasks have no CPU binding or one NUMA node holds them all (checked:
// bench/slurm_scripts/gpu_bind.sbatch).
struct GpuBinding {
  enum class Kind { kAll, kSingle, kPerTask, kMap } kind = Kind::kAll;
  int n = 0;  // single:N tasks to a GPU; per_task:N GPUs to a task
  // map_gpu (one GPU each) and mask_gpu: the node's GPUs local task i sees (i % size).
  std::vector<uint64_t> map;
};

// `text`'s binding, or why it is not one Gantry honours (the message srun prints).
std::optional<GpuBinding> ReadGpuBinding(std::string text, std::string& why) {
  if (text.rfind("verbose,", 0) == 0) text = text.substr(8);
  GpuBinding b;
  auto count = [](const std::string& s, int most) {  // 1..most, else 0
    char* end = nullptr;
    const long v = s.empty() ? 0 : std::strtol(s.c_str(), &end, 10);
    return !s.empty() && *end == '\0' && v >= 1 && v <= most ? static_cast<int>(v) : 0;
  };
  const size_t colon = text.find(':');
  const std::string type = text.substr(0, colon),
                    arg = colon == std::string::npos ? "" : text.substr(colon + 1);
  if ((type == "none" || type == "closest") && colon == std::string::npos) return b;
  if ((type == "single" || type == "per_task") && (b.n = count(arg, core::kMaxGpusPerNode)) > 0) {
    b.kind = type == "single" ? GpuBinding::Kind::kSingle : GpuBinding::Kind::kPerTask;
    return b;
  }
  // map_gpu: 0,1 or 0*4,1*4, ids decimal or 0x hex; mask_gpu: 0x3,0xc or 0x3*2. Slurm's
  // documentation makes the 0x optional, but Slurm 22.05 gave `mask_gpu:0x3,c`'s second
  // task GPU 0, not 2 and 3 (bench/slurm_scripts.py, 2026-12-01): a mask without 0x is
  // refused rather than read either way.
  if ((type == "map_gpu" || type == "mask_gpu") && !arg.empty()) {
    const bool masks = type == "mask_gpu";
    b.kind = GpuBinding::Kind::kMap;
    std::stringstream items(arg);
    for (std::string item; std::getline(items, item, ',');) {
      const size_t star = item.find('*');
      std::string id = item.substr(0, star);
      const int times = star == std::string::npos ? 1 : count(item.substr(star + 1), 4096);
      const bool hex = masks || id.rfind("0x", 0) == 0;
      if (id.rfind("0x", 0) == 0) id = id.substr(2);
      char* end = nullptr;
      errno = 0;
      const unsigned long long v =
          id.empty() || id[0] == '-' ? 0 : std::strtoull(id.c_str(), &end, hex ? 16 : 10);
      const bool ok = !id.empty() && id[0] != '-' && *end == '\0' && errno == 0 && times > 0 &&
                      (!masks || item.rfind("0x", 0) == 0) &&
                      (masks ? v != 0 : v < static_cast<unsigned long long>(core::kMaxGpusPerNode));
      if (!ok || b.map.size() + static_cast<size_t>(times) > 4096) {
        why = "--gpu-bind=" + text +
              (masks ? ": mask_gpu takes GPU masks in hex, each with 0x (0x3,0xc) and "
                       "optionally *COUNT"
                     : ": map_gpu takes GPU indexes (0x for hex), each optionally *COUNT");
        return std::nullopt;
      }
      b.map.insert(b.map.end(), static_cast<size_t>(times), masks ? v : uint64_t{1} << v);
    }
    return b;
  }
  why = "--gpu-bind=" + text +
        ": not honoured; give closest (every GPU of the step on the node: no GPU's NUMA node "
        "is known here), single:N, per_task:N, map_gpu:LIST, mask_gpu:LIST or none";
  return std::nullopt;
}

// The GPUs of `step_mask` (the step's on one node) that its local task `local` sees.
uint64_t BoundGpus(const GpuBinding& b, uint64_t step_mask, int local) {
  std::vector<int> gpus;
  for (uint64_t m = step_mask; m != 0; m &= m - 1) gpus.push_back(std::countr_zero(m));
  if (gpus.empty() || b.kind == GpuBinding::Kind::kAll) return step_mask;
  const size_t k = gpus.size(), i = static_cast<size_t>(std::max(0, local));
  switch (b.kind) {
    case GpuBinding::Kind::kSingle:
      return uint64_t{1} << gpus[i / static_cast<size_t>(b.n) % k];
    case GpuBinding::Kind::kPerTask: {
      uint64_t mask = 0;
      for (size_t j = 0; j < static_cast<size_t>(b.n); ++j)
        mask |= uint64_t{1} << gpus[(i * static_cast<size_t>(b.n) + j) % k];
      return mask;
    }
    case GpuBinding::Kind::kMap:
      return step_mask & b.map[i % b.map.size()];
    case GpuBinding::Kind::kAll:
      break;
  }
  return step_mask;
}

std::string_view StepStateWord(const Step& s) {
  switch (s.state) {
    case Step::State::kPending:
      return "pending";
    case Step::State::kRunning:
      return s.cancelled ? "cancelling" : "running";
    case Step::State::kEnded:
      return s.timed_out ? "timeout" : s.cancelled ? "cancelled" : "ended";
  }
  return "?";
}

}  // namespace

std::string Controller::NewRunToken(Job& job, bool another) {
  // The job's name after the random part says which job to check it against.
  const std::string token = kJobTokenPrefix + NewToken().substr(4) + "_" + job.name;
  if (!another) job.run_token_hashes.clear();
  // A run through many restarts keeps its first (the script's) and its latest ones.
  constexpr size_t kMostHashes = 16;
  if (job.run_token_hashes.size() >= kMostHashes)
    job.run_token_hashes.erase(job.run_token_hashes.begin() + 1);
  job.run_token_hashes.push_back(Sha256Hex(token));
  run_tokens_[job.seq] = token;
  return token;
}

std::optional<Principal> Controller::JobPrincipal(const std::string& token, Reply& error) {
  const size_t head = std::char_traits<char>::length(kJobTokenPrefix) + kJobTokenHex + 1;
  Job* job = token.size() > head ? book_.Find(token.substr(head)) : nullptr;
  if (job == nullptr || job->state == JobState::kDone || job->state == JobState::kPending ||
      std::find(job->run_token_hashes.begin(), job->run_token_hashes.end(), Sha256Hex(token)) ==
          job->run_token_hashes.end()) {
    error = Reply::Error(Code::kUnauthenticated,
                         "invalid token: a job's credential is valid only while its run is");
    return std::nullopt;
  }
  Principal p;
  p.role = Role::kTeam;
  p.team = job->team;
  p.queues = {job->queue};
  p.user = job->user;
  p.job = job->name;
  p.label = "job " + job->name;
  return p;
}

core::WorkerAlloc Controller::NodeAlloc(const Job& job, core::NodeId n, int rank) const {
  core::WorkerAlloc merged = job.workers[static_cast<size_t>(rank)].alloc;
  if (merged.sharing != core::Sharing::kExclusive) return merged;
  merged.gpu_mask = 0;
  merged.cpus_milli = merged.memory_bytes = 0;
  for (const Worker& w : job.workers) {
    if (w.alloc.node != n) continue;
    if (w.alloc.sharing != core::Sharing::kExclusive)
      return job.workers[static_cast<size_t>(rank)].alloc;
    merged.gpu_mask |= w.alloc.gpu_mask;
    merged.cpus_milli += w.alloc.cpus_milli;
    merged.memory_bytes += w.alloc.memory_bytes;
  }
  return merged;
}

proto::Limits Controller::NodeLimits(const Job& job, core::NodeId n) const {
  proto::Limits sum;
  int tasks = 0;
  for (const Worker& w : job.workers) {
    if (w.alloc.node != n) continue;
    const proto::Limits l = WorkerLimits(w.alloc, cluster_);
    sum.memory_bytes += l.memory_bytes;
    sum.cpus_milli += l.cpus_milli;
    tasks += job.spec.tasks_per_worker;
  }
  // Its whole CPUs there (SLURM_CPUS_ON_NODE): a batch job's at least one per task, as
  // Slurm allocates them.
  const int64_t milli =
      job.batch() ? std::max<int64_t>(sum.cpus_milli, int64_t{1000} * tasks) : sum.cpus_milli;
  sum.cpus = static_cast<int>((milli + 999) / 1000);
  return sum;
}

void Controller::TouchStep(const Job& job, const Step& s) {
  for (const StepTask& t : s.tasks)
    watches_.Bump(job.workers[static_cast<size_t>(t.slot)].alloc.node);
  if (!step_watches_.empty()) steps_changed_.insert(job.seq);
}

std::string Controller::OwnGpus(const Job& job, Step& s, int per_node, int total) const {
  const std::string asked = per_node > 0 ? "gpu:" + std::to_string(per_node) + " a node"
                                         : std::to_string(total) + " GPUs";
  auto refuse = [&](const std::string& why) {
    return "Invalid generic resource (gres) specification (a step of " + asked + ": " + why + ")";
  };
  std::map<uint32_t, int> gpus;  // the job's GPUs on each of its nodes
  for (const Worker& w : job.workers) {
    if (w.alloc.sharing != core::Sharing::kExclusive)
      return refuse("the job holds GPU shares or MIG instances, which a step does not part");
    gpus[w.alloc.node.v] += std::popcount(w.alloc.gpu_mask);
  }
  int g = per_node;
  if (g == 0) {  // --gpus: the total over the step's nodes, evenly, as Slurm 22.05 splits it
    int nodes = s.nodes;
    // Without -N, srun's default (PlaceStep's): the job's nodes (or -w's), at most a task each.
    if (nodes == 0) {
      const int64_t have = s.nodelist.empty() ? static_cast<int64_t>(gpus.size())
                                              : static_cast<int64_t>(s.nodelist.size());
      int64_t tasks = s.ntasks;
      if (auto it = s.env.find("SLURM_NTASKS"); tasks == 0 && it != s.env.end())
        tasks = std::max(0, std::atoi(it->second.c_str()));
      if (tasks == 0) tasks = s.per_node > 0 ? have * s.per_node : job.tasks();
      nodes =
          static_cast<int>(s.per_node > 0 ? std::min(have, (tasks + s.per_node - 1) / s.per_node)
                                          : std::min(have, tasks));
      s.nodes = gpus.size() == 1 ? 0 : nodes;  // placed on that many, as the split assumes
    }
    if (gpus.size() == 1) nodes = 1;
    if (nodes <= 0 || total % nodes != 0) {
      return refuse(std::to_string(total) + " GPUs do not split evenly over the step's " +
                    std::to_string(nodes) + " nodes: give -N, or --gres=gpu:N for N a node");
    }
    g = total / nodes;
  }
  const int least = std::min_element(gpus.begin(), gpus.end(), [](const auto& a, const auto& b) {
                      return a.second < b.second;
                    })->second;
  if (g > least)
    return refuse("the job holds " + std::to_string(least) + " GPU(s) on some of its nodes");
  s.own_gpus = g;
  return "";
}

std::string Controller::PlaceStep(const Job& job, Step& s, bool& wait, int* tasks) const {
  wait = false;
  if (tasks) *tasks = 0;
  // srun reads SLURM_NTASKS (the batch script's, set by sbatch's -n or --ntasks-per-node)
  // as -n when not given one; an explicit --ntasks-per-node that cannot hold that many on
  // the nodes is then ignored, as Slurm 22.05 does (bench/slurm_scripts.py, srun_shapes).
  int ntasks = s.ntasks, per_node = s.per_node;
  const int nodes = s.nodes;
  if (ntasks == 0) {
    if (auto it = s.env.find("SLURM_NTASKS"); it != s.env.end()) {
      ntasks = std::max(0, std::atoi(it->second.c_str()));
      const int over = nodes > 0 ? nodes : static_cast<int>(JobNodes(job).size());
      if (per_node > 0 && int64_t{per_node} * over < ntasks) per_node = 0;
    }
  }
  // The job's nodes in rank order, each with its slots (ranks), its CPUs there (as many as
  // its tasks there at least, Slurm's one a task) and which of them running steps hold.
  const int tpw = job.spec.tasks_per_worker;
  struct NodeSlots {
    core::NodeId id;
    std::vector<int> slots, free;
    int cpus = 0;
    std::vector<bool> taken;
    int Free() const { return static_cast<int>(std::count(taken.begin(), taken.end(), false)); }
  };
  std::vector<NodeSlots> all;
  std::map<uint32_t, size_t> at;  // node -> its place in `all`
  for (const std::string& name : s.nodelist) {
    const bool mine = std::any_of(job.workers.begin(), job.workers.end(), [&](const Worker& w) {
      return cluster_.node(w.alloc.node).name == name;
    });
    if (!mine)
      return "Requested node configuration is not available (-w " + name +
             ": not one of the job's nodes, " + spec::HostList(JobNodes(job)) + ")";
  }
  for (const Worker& w : job.workers) {
    if (!s.nodelist.empty() && std::find(s.nodelist.begin(), s.nodelist.end(),
                                         cluster_.node(w.alloc.node).name) == s.nodelist.end())
      continue;
    const auto [it, added] = at.try_emplace(w.alloc.node.v, all.size());
    if (added)
      all.push_back(NodeSlots{w.alloc.node, {}, {}, NodeLimits(job, w.alloc.node).cpus, {}});
    all[it->second].slots.push_back(w.rank);
  }
  for (NodeSlots& x : all) {
    x.cpus = std::max(x.cpus, static_cast<int>(x.slots.size()) * tpw);
    x.taken.assign(static_cast<size_t>(x.cpus), false);
  }
  // What running steps hold: on each node where a task of theirs runs, their CPUs there;
  // the GPUs of those of their own GPUs (until they end), which are then busy for a step
  // of the job's GPUs.
  std::vector<bool> busy(job.workers.size(), false);  // by slot: its GPUs are held
  std::map<uint32_t, uint64_t> held;  // node -> GPUs that steps of their own GPUs hold
  for (const Step& o : job.steps) {
    if (&o == &s || o.state != Step::State::kRunning || o.overlap) continue;
    for (const StepTask& t : o.tasks) {
      const core::WorkerAlloc& a = job.workers[static_cast<size_t>(t.slot)].alloc;
      if (o.own_gpus > 0 && static_cast<size_t>(t.node) < o.gpu_masks.size())
        held[a.node.v] |= o.gpu_masks[static_cast<size_t>(t.node)];
      const auto place = at.find(a.node.v);
      if (t.exited || place == at.end()) continue;
      NodeSlots* x = &all[place->second];
      if (static_cast<size_t>(t.node) < o.cpus.size()) {
        for (int c : o.cpus[static_cast<size_t>(t.node)])
          if (c >= 0 && c < x->cpus) x->taken[static_cast<size_t>(c)] = true;
      } else {  // (placed before steps held CPUs: all of them)
        x->taken.assign(x->taken.size(), true);
      }
    }
  }
  for (const Worker& w : job.workers) {
    if (s.own_gpus == 0 && (held[w.alloc.node.v] & w.alloc.gpu_mask) != 0)
      busy[static_cast<size_t>(w.rank)] = true;
  }
  std::map<uint32_t, uint64_t> free_gpus;  // node -> the job's GPUs a step of its own may take
  for (NodeSlots& x : all) {
    for (int r : x.slots) {
      const core::WorkerAlloc& a = job.workers[static_cast<size_t>(r)].alloc;
      if (s.overlap || !busy[static_cast<size_t>(r)]) {
        x.free.push_back(r);
        free_gpus[x.id.v] |= a.gpu_mask;
      }
    }
    if (!s.overlap) free_gpus[x.id.v] &= ~held[x.id.v];
  }
  // How many tasks a node may take: its CPUs over the tasks' (-c, as Slurm packs tasks onto
  // allocated CPUs without --overcommit); `now`, of those that running steps leave free: a
  // step that is not exact needs them all. A step of its own GPUs needs that many free
  // there, one of the job's GPUs a free slot.
  const int cpt = s.CpusPerTask();
  auto cap = [&](const NodeSlots& x, bool now) {
    int cpus = x.cpus;
    if (now && !s.overlap) {
      cpus = s.exact || x.Free() == x.cpus ? x.Free() : 0;
      if (s.own_gpus > 0 ? std::popcount(free_gpus[x.id.v]) < s.own_gpus : x.free.empty()) cpus = 0;
    }
    return cpus / cpt;
  };
  const int have = static_cast<int>(all.size());
  if (nodes > have) {
    return "Requested node configuration is not available (-N " + std::to_string(nodes) +
           ": the job has " + std::to_string(have) + " node" + (have == 1 ? "" : "s") +
           (s.nodelist.empty() ? "" : " of those -w names") + ")";
  }
  // -w names nodes the step must use (each gets a task), as Slurm.
  int n = nodes > 0 ? nodes : s.nodelist.empty() ? have : static_cast<int>(s.nodelist.size());
  // Slurm's defaults: every node of the allocation unless -N says, that many tasks per node
  // with --ntasks-per-node, else the job's own tasks per node (or one) with -N, else the
  // job's tasks; never more nodes than tasks.
  int k = ntasks;
  if (k == 0) {
    if (per_node > 0) {
      k = n * per_node;
    } else if (nodes > 0) {
      const size_t first = all.front().slots.size();
      const bool uniform = std::all_of(all.begin(), all.end(),
                                       [&](const NodeSlots& x) { return x.slots.size() == first; });
      k = n * (uniform ? static_cast<int>(first) * tpw : 1);
    } else {
      k = static_cast<int>(job.tasks());
    }
  }
  if (per_node > 0 && ntasks > 0 && nodes > 0 && ntasks > nodes * per_node) {
    return "More processors requested than permitted (" + std::to_string(ntasks) +
           " tasks do not fit " + std::to_string(nodes) + " nodes of " + std::to_string(per_node) +
           ", --ntasks-per-node)";
  }
  if (per_node > 0 && nodes == 0) n = std::min(have, (k + per_node - 1) / per_node);
  n = std::min(n, k);
  if (tasks) *tasks = k;
  // The nodes that may take a task now, in order; the step waits for busy ones to free up.
  std::vector<const NodeSlots*> use;
  for (const NodeSlots& x : all) {
    if (static_cast<int>(use.size()) < n && cap(x, true) > 0) use.push_back(&x);
  }
  // Could it ever fit (all slots free)? Else it is refused, not kept waiting.
  {
    int total = 0;
    std::vector<int> caps;
    for (const NodeSlots& x : all)
      caps.push_back(per_node > 0 ? std::min(per_node, cap(x, false)) : cap(x, false));
    std::sort(caps.rbegin(), caps.rend());
    for (int i = 0; i < n; ++i) total += caps[static_cast<size_t>(i)];
    if (total < k) {
      return "More processors requested than permitted (" + std::to_string(k) + " tasks of " +
             std::to_string(cpt) + " CPU" + (cpt == 1 ? "" : "s") + " on " + std::to_string(n) +
             " node" + (n == 1 ? "" : "s") + ": the job's CPUs there take " +
             std::to_string(total) + " such tasks)";
    }
  }
  if (static_cast<int>(use.size()) < n) {
    wait = true;
    return "waiting for running steps to end (" + std::to_string(use.size()) + " of " +
           std::to_string(n) + " nodes have free CPUs)";
  }
  // One task per node, then block: each node filled to what it takes, in order; cyclic:
  // one more on each node in turn while it has room (Slurm's -m).
  std::vector<int> counts(static_cast<size_t>(n), 1);
  std::vector<int> room(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const NodeSlots& x = *use[static_cast<size_t>(i)];
    room[static_cast<size_t>(i)] =
        std::max(0, (per_node > 0 ? std::min(per_node, cap(x, true)) : cap(x, true)) - 1);
  }
  int left = k - n;
  for (bool more = true; left > 0 && more;) {
    more = false;
    for (int i = 0; i < n && left > 0; ++i) {
      const int add = std::min(left, s.cyclic ? std::min(1, room[static_cast<size_t>(i)])
                                              : room[static_cast<size_t>(i)]);
      counts[static_cast<size_t>(i)] += add;
      room[static_cast<size_t>(i)] -= add;
      left -= add;
      more |= add > 0;
    }
  }
  if (left > 0) {
    wait = true;
    return "waiting for running steps to end (" + std::to_string(left) +
           " tasks have no free CPUs)";
  }
  s.tasks.clear();
  s.gpu_masks.clear();
  s.cpus.clear();
  for (int i = 0; i < n; ++i) {
    const NodeSlots& x = *use[static_cast<size_t>(i)];
    if (!s.overlap) {  // exact: the lowest free of its tasks' CPUs; else all of them
      std::vector<int>& mine = s.cpus.emplace_back();
      const int want = s.exact ? counts[static_cast<size_t>(i)] * cpt : x.cpus;
      for (int c = 0; c < x.cpus && static_cast<int>(mine.size()) < want; ++c)
        if (!s.exact || !x.taken[static_cast<size_t>(c)]) mine.push_back(c);
    }
    if (s.own_gpus > 0) {  // the node's lowest free GPUs, as Slurm takes them
      uint64_t mask = 0;
      for (uint64_t m = free_gpus[x.id.v]; m != 0 && std::popcount(mask) < s.own_gpus; m &= m - 1)
        mask |= uint64_t{1} << std::countr_zero(m);
      s.gpu_masks.push_back(mask);
    }
  }
  // Task ids node by node (block), or round-robin over the nodes (cyclic).
  const int most = *std::max_element(counts.begin(), counts.end());
  for (int a = 0; a < (s.cyclic ? most : n); ++a) {
    for (int b = 0; b < (s.cyclic ? n : most); ++b) {
      const int i = s.cyclic ? b : a, j = s.cyclic ? a : b;
      if (j >= counts[static_cast<size_t>(i)]) continue;
      const NodeSlots& x = *use[static_cast<size_t>(i)];
      const std::vector<int>& on = s.own_gpus > 0 ? x.slots : x.free;
      StepTask t;
      t.slot = on[static_cast<size_t>(j) % on.size()];
      t.local = j;
      t.node = i;
      s.tasks.push_back(t);
    }
  }
  return "";
}

void Controller::StartSteps(Job& job, Ticks now) {
  if (job.state != JobState::kRunning) return;
  bool changed = false;
  for (Step& s : job.steps) {
    if (s.state != Step::State::kPending) continue;
    bool wait = false;
    if (!PlaceStep(job, s, wait).empty()) {
      // It waits; a later one that fits starts before it, as Slurm's sruns each retry on
      // their own (bench/slurm_scripts/steps_overtake.sbatch).
      if (wait) continue;
      s.cancelled = true;  // (checked when it was made: cannot happen)
      s.End(now);
      changed = true;
      continue;
    }
    s.state = Step::State::kRunning;
    s.started = now;
    TouchStep(job, s);
    changed = true;
  }
  if (changed) Persist(job);
}

std::vector<std::pair<std::string, int>> Controller::StepNodes(const Job& job,
                                                               const Step& s) const {
  std::vector<std::pair<std::string, int>> out;
  for (const StepTask& t : s.tasks) {  // t.node: its node's index among the step's
    if (static_cast<size_t>(t.node) >= out.size()) out.resize(static_cast<size_t>(t.node) + 1);
    auto& [name, count] = out[static_cast<size_t>(t.node)];
    name = cluster_.node(job.workers[static_cast<size_t>(t.slot)].alloc.node).name;
    ++count;
  }
  return out;
}

std::vector<std::string> Controller::StepNodeNames(const Job& job, const Step& s) const {
  std::vector<std::string> names;
  for (auto& [name, tasks] : StepNodes(job, s)) names.push_back(std::move(name));
  return names;
}

json Controller::StepBody(const Job& job, const Step& s) const {
  json tasks = json::array();
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    const StepTask& t = s.tasks[i];
    tasks.push_back(
        {{"task", i},
         {"node", cluster_.node(job.workers[static_cast<size_t>(t.slot)].alloc.node).name},
         {"node_index", t.node},
         {"exited", t.exited},
         {"exit_code", t.exit_code},
         {"signal", t.signal},
         {"lost", t.lost},
         {"note", t.note},
         {"output_bytes", t.output_bytes},
         {"error_bytes", t.error_bytes}});
  }
  return {{"job", job.name},
          {"run", job.run},
          {"step", s.id},
          {"name", s.name},
          {"state", StepStateWord(s)},
          {"timed_out", s.timed_out},
          {"nodes", spec::HostList(StepNodeNames(job, s))},
          {"tasks", std::move(tasks)}};
}

json Controller::StepSummary(const Job& job, const Step& s) const {
  int code = 0, sig = 0;
  for (const StepTask& t : s.tasks) {
    code = std::max(code, t.exit_code);
    sig = std::max(sig, t.signal);
  }
  json j = {{"step", s.id},
            {"name", s.name},
            {"state", StepStateWord(s)},
            {"exit_code", code},
            {"ntasks", s.tasks.size()},
            {"nodes", StepNodeNames(job, s)},
            {"start", s.started >= 0 ? json(UnixSeconds(s.started)) : json(nullptr)},
            {"end", s.state == Step::State::kEnded && s.ended >= 0 ? json(UnixSeconds(s.ended))
                                                                   : json(nullptr)}};
  if (sig != 0) j["exit_signal"] = sig;
  return j;
}

void Controller::CreateStep(std::string token, std::string name, json body, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, name = std::move(name), body = std::move(body)](const Principal& p) -> Reply {
        Job* job = book_.Find(name);
        if (p.job.empty() || p.job != (job ? job->name : name)) {
          return Reply::Error(Code::kForbidden,
                              "job steps (srun) are run inside the job, with its own "
                              "credential (GANTRY_TOKEN there); " +
                                  p.Describe() + " may not run steps of job " + name);
        }
        if (job == nullptr || job->state != JobState::kRunning) {
          return Reply::Error(Code::kConflict, "job " + name + " is not running");
        }
        if (!job->batch()) {
          return Reply::Error(Code::kConflict, "job " + name +
                                                   " is not a batch job: its workers run its "
                                                   "command themselves");
        }
        Step s;
        s.id = static_cast<int>(job->steps.size());
        int gpus_per_task = 0, gpus_per_node = 0, gpus_total = 0;
        try {
          s.command = body.at("command").get<std::vector<std::string>>();
          s.env = body.value("env", std::map<std::string, std::string>());
          s.workdir = body.value("workdir", std::string());
          s.name = body.value("name", std::string());
          s.nodes = body.value("nodes", 0);
          s.ntasks = body.value("ntasks", 0);
          s.per_node = body.value("ntasks_per_node", 0);
          s.cpus_per_task = body.value("cpus_per_task", 0);
          // A node named twice is one node, as Slurm reads `-w a,a`.
          for (std::string& n : body.value("nodelist", std::vector<std::string>())) {
            if (std::find(s.nodelist.begin(), s.nodelist.end(), n) == s.nodelist.end())
              s.nodelist.push_back(std::move(n));
          }
          gpus_per_task = body.value("gpus_per_task", 0);
          s.bind_gpus = gpus_per_task > 0;
          gpus_per_node = body.value("gpus_per_node", 0);
          gpus_total = body.value("gpus", 0);
          s.overlap = body.value("overlap", false);
          s.held = body.value("held", false);
          s.exact =
              body.value("exact", false) || body.value("exclusive", false) || s.cpus_per_task > 0;
          s.cyclic = body.value("cyclic", false);
          s.image = body.value("image", std::string());
          s.mounts = MountsFromJson(body.value("container_mounts", json::array()));
          s.container_workdir = body.value("container_workdir", std::string());
          s.mount_home = body.value("container_mount_home", false);
          s.multi_prog = body.value("multi_prog", std::string());
          s.input = body.value("input", std::string());
          s.input_task = body.value("input_task", -1);
          if (!s.input.empty()) {  // (its base64 checked once here; the agent decodes it)
            const std::optional<std::string> bytes = Base64Decode(s.input);
            if (!bytes || bytes->size() > (size_t{4} << 20))
              return Reply::Error(Code::kBadRequest, "step: input: base64, at most 4 MiB decoded");
          }
          const double limit_s = body.value("time_limit_s", 0.0);
          if (!(limit_s >= 0 && limit_s <= 365.0 * 86400))
            return Reply::Error(Code::kBadRequest, "step: time_limit_s must be 0 to a year");
          s.time_limit = static_cast<Ticks>(limit_s * 1000);
        } catch (const json::exception& e) {
          return Reply::Error(Code::kBadRequest, std::string("step: ") + e.what());
        }
        if (s.command.empty() || s.command[0].empty())
          return Reply::Error(Code::kBadRequest, "step: command: give a program to run");
        // The file is kept in the step's record, written at each of its changes: a line a
        // task for 10,000 tasks is under 256 KiB.
        if (s.multi_prog.size() > (256 << 10))
          return Reply::Error(Code::kBadRequest,
                              "step: multi_prog: the --multi-prog file is over 256 KiB");
        if (s.nodes < 0 || s.ntasks < 0 || s.per_node < 0 || s.cpus_per_task < 0 ||
            s.ntasks > 100000 || s.nodes > 100000 || s.per_node > 100000)
          return Reply::Error(Code::kBadRequest, "step: counts must be 0 or more");
        if (!s.workdir.empty() && s.workdir.front() != '/')
          return Reply::Error(Code::kBadRequest, "step: workdir must be an absolute path");
        if (s.name.empty()) s.name = s.command[0].substr(s.command[0].rfind('/') + 1);
        if (std::string why = StepContainerProblem(s); !why.empty())
          return Reply::Error(Code::kBadRequest, "step: " + why);
        // --gpus-per-task: each task its slot's GPUs, which must be that many.
        if (gpus_per_task > 0) {
          const core::WorkerAlloc& a = job->workers.front().alloc;
          const int slot = a.sharing == core::Sharing::kExclusive ? std::popcount(a.gpu_mask) : 1;
          if (slot != gpus_per_task) {
            return Reply::Error(Code::kUnprocessable,
                                "Invalid generic resource (gres) specification (--gpus-per-task=" +
                                    std::to_string(gpus_per_task) + ": the job's tasks hold " +
                                    std::to_string(slot) +
                                    " GPU(s) each; a step's tasks get their task slots' GPUs: give "
                                    "--gpus-per-task=" +
                                    std::to_string(slot) +
                                    ", or none to see all the job's GPUs on the node)");
          }
        }
        if (gpus_per_node < 0 || gpus_total < 0)
          return Reply::Error(Code::kBadRequest, "step: GPU counts must be 0 or more");
        if (gpus_per_node > 0 || gpus_total > 0) {
          if (std::string why = OwnGpus(*job, s, gpus_per_node, gpus_total); !why.empty())
            return Reply::Error(Code::kUnprocessable, why);
        }
        s.gpu_bind = body.value("gpu_bind", std::string());
        if (!s.gpu_bind.empty()) {
          std::string why;
          const std::optional<GpuBinding> b = ReadGpuBinding(s.gpu_bind, why);
          if (b && b->kind != GpuBinding::Kind::kAll && s.bind_gpus)
            why = "--gpu-bind=" + s.gpu_bind + ": give it or --gpus-per-task, not both";
          if (b && b->kind == GpuBinding::Kind::kMap && s.own_gpus > 0)
            why = "--gpu-bind=" + s.gpu_bind +
                  ": map_gpu and mask_gpu name the job's GPUs; a step of fewer GPUs takes the "
                  "lowest free ones";
          if (b && b->kind == GpuBinding::Kind::kMap) {  // each one the job's on all its nodes
            std::set<uint32_t> seen;
            for (const Worker& w : job->workers) {
              if (!why.empty() || !seen.insert(w.alloc.node.v).second) continue;
              const core::WorkerAlloc held = NodeAlloc(*job, w.alloc.node, w.rank);
              auto lacks = std::find_if(b->map.begin(), b->map.end(),
                                        [&](uint64_t m) { return (m & ~held.gpu_mask) != 0; });
              if (lacks != b->map.end())
                why = "--gpu-bind=" + s.gpu_bind + ": GPU " +
                      std::to_string(std::countr_zero(*lacks & ~held.gpu_mask)) + " of node " +
                      cluster_.node(w.alloc.node).name + " is not the job's (it holds " +
                      GpuIndexes(held) + ")";
            }
          }
          if (!why.empty()) return Reply::Error(Code::kUnprocessable, why);
        }
        bool wait = false;
        int tasks = 0;
        const std::string why = PlaceStep(*job, s, wait, &tasks);
        if (!why.empty() && !wait) return Reply::Error(Code::kUnprocessable, why);
        // --multi-prog: a line for each of the step's tasks, or refused as Slurm's srun
        // refuses the file (named as srun was given it).
        if (!s.multi_prog.empty()) {
          if (std::string bad = s.ReadPrograms(tasks); !bad.empty())
            return Reply::Error(Code::kBadRequest, bad);
        }
        s.created = now_;
        if (why.empty()) {  // it fits now: it starts, whatever waits before it
          s.state = Step::State::kRunning;
          s.started = now_;
          TouchStep(*job, s);
        } else {
          s.tasks.clear();  // placed when running steps have ended and it fits
          wait = true;
        }
        job->steps.push_back(std::move(s));
        Persist(*job);
        Reply r;
        r.code = Code::kCreated;
        r.body = StepBody(*job, job->steps.back());
        if (wait) r.body["reason"] = why;
        return r;
      });
}

Reply Controller::StepReply(int64_t seq, const std::string& name, int step) {
  auto it = book_.jobs().find(seq);
  if (it == book_.jobs().end()) return Reply::Error(Code::kNotFound, "no job " + name);
  const Job& job = it->second;
  if (step < 0 || step >= static_cast<int>(job.steps.size()))
    return Reply::Error(Code::kNotFound, "job " + name + " has no step " + std::to_string(step) +
                                             " in its current run");
  Reply r;
  r.body = StepBody(job, job.steps[static_cast<size_t>(step)]);
  char version[17];
  std::snprintf(version, sizeof version, "%016zx", std::hash<std::string>{}(r.body.dump()));
  r.body["version"] = version;
  return r;
}

void Controller::ShowStep(std::string token, std::string name, int step, std::string version,
                          int64_t wait_ms, Done done) {
  Done keep = done;  // a long poll holds its Done until the step changes
  CallAsUser(
      std::move(token), std::move(done),
      [this, name, step, version = std::move(version), wait_ms,
       keep = std::move(keep)](const Principal& p) -> Reply {
        Job* job = book_.Find(name);
        if (job == nullptr) return Reply::Error(Code::kNotFound, "no job " + name);
        if (!MaySee(p, *job) || (!p.job.empty() && p.job != job->name))
          return Reply::Error(Code::kForbidden,
                              p.Describe() + " may not read job " + name + "'s steps");
        Reply r = StepReply(job->seq, name, step);
        if (!r.ok() || version.empty() || wait_ms <= 0 || r.body["version"] != version) return r;
        step_watches_.push_back(StepWatch{job->seq, name, step, version,
                                          now_ + std::min<int64_t>(wait_ms, 60000), keep});
        Reply parked;
        parked.deferred = true;
        return parked;
      },
      Kind::kRead);
}

void Controller::AnswerStepWatches(Ticks now, const Reply* all) {
  if (step_watches_.empty()) return;
  auto keep = step_watches_.begin();
  for (auto it = step_watches_.begin(); it != step_watches_.end(); ++it) {
    if (all != nullptr) {
      it->done(*all);
      continue;
    }
    if (now < it->deadline && !steps_changed_.count(it->seq)) {
      if (keep != it) *keep = std::move(*it);
      ++keep;
      continue;
    }
    Reply r = StepReply(it->seq, it->name, it->step);
    if (now < it->deadline && r.ok() && r.body["version"] == it->version) {
      if (keep != it) *keep = std::move(*it);
      ++keep;
      continue;
    }
    it->done(std::move(r));
  }
  step_watches_.erase(all != nullptr ? step_watches_.begin() : keep, step_watches_.end());
  steps_changed_.clear();
}

Reply Controller::AllocationUser(const Principal& p, const Job* job,
                                 const std::string& name) const {
  if (job == nullptr) return Reply::Error(Code::kNotFound, "no job " + name);
  // Its credential runs steps as its user: given to that user (or an admin) only.
  if (!MayManage(p, *job) || (!p.admin() && !job->user.empty() && p.user != job->user)) {
    return Reply::Error(Code::kForbidden, p.Describe() + " may not use job " + name +
                                              "'s allocation (its user's: " +
                                              (job->user.empty() ? "none" : job->user) + ")");
  }
  if (!job->batch()) {
    return Reply::Error(Code::kConflict, "job " + name +
                                             " is not a batch job: only salloc's and "
                                             "sbatch's allocations run steps");
  }
  if (job->state != JobState::kRunning) {
    return Reply::Error(Code::kConflict, "job " + name + " is " + std::string(Name(job->state)) +
                                             ": its allocation is usable while it runs");
  }
  return Reply{};
}

void Controller::ReleaseAllocation(std::string token, std::string name, int exit_code, Done done) {
  CallAsUser(std::move(token), std::move(done), [this, name, exit_code](const Principal& p) {
    Job* job = book_.Find(name);
    if (Reply why = AllocationUser(p, job, name); why.code != Code::kOk) return why;
    // Its steps and the script holding it get the job's grace, as a cancel's; then it ends
    // completed, or failed with the command's code (Slurm's NonZeroExitCode).
    const std::string reason = "salloc's command exited with code " + std::to_string(exit_code);
    if (exit_code != 0) job->exit_code = exit_code;
    BeginStop(*job, exit_code == 0 ? StopKind::kRelease : StopKind::kFail, reason, job->spec.grace,
              now_);
    Reply r;
    r.body = {{"job", job->name}, {"state", "stopping"}, {"exit_code", exit_code}};
    return r;
  });
}

void Controller::JobAllocation(std::string token, std::string name, Done done) {
  CallAsUser(std::move(token), std::move(done), [this, name](const Principal& p) -> Reply {
    Job* job = book_.Find(name);
    if (Reply why = AllocationUser(p, job, name); why.code != Code::kOk) return why;
    auto t = run_tokens_.find(job->seq);
    if (t == run_tokens_.end()) {  // a run from before its credentials were stored
      NewRunToken(*job, /*another=*/true);
      Persist(*job);
      t = run_tokens_.find(job->seq);
    }
    // The script's environment on its first node, less what is that node's own (salloc's
    // command runs on the submit host, as Slurm's does) and the task's rank.
    static const std::set<std::string> kNodeOwn = {
        "SLURM_PROCID",      "SLURM_LOCALID",      "SLURM_NODEID",       "SLURMD_NODENAME",
        "SLURM_JOB_GPUS",    "SLURM_GPUS_ON_NODE", "SLURM_CPUS_ON_NODE", "GANTRY_RANK",
        "GANTRY_LOCAL_RANK", "GANTRY_NODE",        "GANTRY_GPUS",        "CUDA_VISIBLE_DEVICES",
        "SLURM_GTIDS",       "SLURM_TOPOLOGY_ADDR"};
    json env = json::object();
    for (const auto& [k, v] : DesiredWorker(*job, job->workers.front()).env) {
      if (!kNodeOwn.contains(k)) env[k] = v;
    }
    Reply r;
    r.body = {{"job", job->name},
              {"number", job->Number()},
              {"env", std::move(env)},
              {"token", t->second}};
    return r;
  });
}

void Controller::CancelStep(std::string token, std::string name, int step, bool kill, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& p) -> Reply {
    Job* job = book_.Find(name);
    if (job == nullptr) return Reply::Error(Code::kNotFound, "no job " + name);
    if (p.job != job->name &&
        !(p.admin() || (p.job.empty() && MaySubmitTo(p, config_.queues, job->queue))))
      return Reply::Error(Code::kForbidden,
                          p.Describe() + " may not cancel job " + name + "'s steps");
    if (step < 0 || step >= static_cast<int>(job->steps.size()))
      return Reply::Error(Code::kNotFound, "job " + name + " has no step " + std::to_string(step));
    Step& s = job->steps[static_cast<size_t>(step)];
    StopStep(*job, s, now_, kill);
    Reply r;
    r.body = StepBody(*job, s);
    return r;
  });
}

void Controller::LaunchStep(std::string token, std::string name, int step, json body, Done done) {
  CallAsUser(std::move(token), std::move(done),
             [=, this, body = std::move(body)](const Principal& p) -> Reply {
               Job* job = book_.Find(name);
               if (job == nullptr) return Reply::Error(Code::kNotFound, "no job " + name);
               if (p.job != job->name)
                 return Reply::Error(Code::kForbidden, p.Describe() + " may not launch job " +
                                                           name + "'s steps (its srun does)");
               if (step < 0 || step >= static_cast<int>(job->steps.size()))
                 return Reply::Error(Code::kNotFound,
                                     "job " + name + " has no step " + std::to_string(step));
               Step& s = job->steps[static_cast<size_t>(step)];
               if (!s.held || s.state != Step::State::kRunning || s.cancelled)
                 return Reply::Error(Code::kConflict,
                                     "step " + std::to_string(step) + " is not placed and held");
               std::map<std::string, std::string> env;
               try {
                 env = body.value("env", std::map<std::string, std::string>());
               } catch (const json::exception& e) {
                 return Reply::Error(Code::kBadRequest, std::string("launch: env: ") + e.what());
               }
               for (auto& [k, v] : env) s.env[k] = std::move(v);
               s.held = false;  // its tasks' entries are built from here on (NodeAnswer)
               TouchStep(*job, s);
               Persist(*job);
               Reply r;
               r.body = StepBody(*job, s);
               return r;
             });
}

void Controller::StopStep(Job& job, Step& s, Ticks now, bool kill) {
  if (s.state == Step::State::kEnded || (s.cancelled && (s.killed || !kill))) return;
  s.killed = kill;
  if (s.cancelled) {  // SIGTERMed already: SIGKILL now
    TouchStep(job, s);
    Persist(job);
    return;
  }
  s.cancelled = true;
  if (s.state == Step::State::kPending || s.held) {  // no task of it started
    s.End(now);
    s.tasks.clear();
  } else {
    s.started = std::min(s.started, now);
    s.ended = now;  // the stop's start: SIGKILL kStepKillWaitMs later
    TouchStep(job, s);
  }
  Persist(job);
}

void Controller::TimeOutSteps(Job& job, Ticks now) {
  for (Step& s : job.steps) {
    if (s.held && s.state == Step::State::kRunning && !s.cancelled &&
        now - s.started >= kStepHoldMs) {
      job.Note(now, "step " + std::to_string(s.id) + " cancelled: its srun did not launch it " +
                        spec::FormatSeconds(kStepHoldMs) + " s after it was placed");
      StopStep(job, s, now);
      continue;
    }
    if (s.time_limit <= 0 || s.state != Step::State::kRunning || s.cancelled ||
        now - s.started < s.time_limit)
      continue;
    s.timed_out = true;
    job.Note(now, "step " + std::to_string(s.id) + " cancelled at its time limit (srun --time " +
                      spec::FormatSeconds(s.time_limit) + " s)");
    StopStep(job, s, now);
  }
}

proto::DesiredWorker Controller::StepDesired(const Job& job, const Step& s, int task) const {
  const StepTask& t = s.tasks[static_cast<size_t>(task)];
  const Worker& slot = job.workers[static_cast<size_t>(t.slot)];
  const core::NodeId n = slot.alloc.node;
  // The job's GPUs on the node (SLURM_GPUS_ON_NODE, as Slurm says it also where the task
  // is bound to its own with --gpus-per-task), or the step's where it holds fewer; the
  // task's own to see.
  core::WorkerAlloc on_node = NodeAlloc(job, n, t.slot);
  if (s.own_gpus > 0 && static_cast<size_t>(t.node) < s.gpu_masks.size())
    on_node.gpu_mask = s.gpu_masks[static_cast<size_t>(t.node)];
  core::WorkerAlloc alloc = s.bind_gpus ? slot.alloc : on_node;
  if (!s.gpu_bind.empty() && alloc.sharing == core::Sharing::kExclusive) {
    std::string why;  // (read when the step was made)
    if (const std::optional<GpuBinding> b = ReadGpuBinding(s.gpu_bind, why))
      alloc.gpu_mask = BoundGpus(*b, on_node.gpu_mask, t.local);
  }
  std::vector<std::string> nodes;
  std::vector<int> per_node;
  for (auto& [name, count] : StepNodes(job, s)) {
    nodes.push_back(std::move(name));
    per_node.push_back(count);
  }
  std::map<std::string, std::string> env = s.env;
  const int gpus =
      on_node.sharing == core::Sharing::kExclusive ? std::popcount(on_node.gpu_mask) : 1;
  const std::string tasks = std::to_string(s.tasks.size());
  std::string gtids;  // the step's task ids on this node
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    if (s.tasks[i].node == t.node) gtids += (gtids.empty() ? "" : ",") + std::to_string(i);
  }
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
           {"SLURM_STEP_ID", std::to_string(s.id)},
           {"SLURM_STEPID", std::to_string(s.id)},
           {"SLURM_PROCID", std::to_string(task)},
           {"SLURM_LOCALID", std::to_string(t.local)},
           {"SLURM_NODEID", std::to_string(t.node)},
           {"SLURM_NTASKS", tasks},
           {"SLURM_NPROCS", tasks},
           {"SLURM_STEP_NUM_TASKS", tasks},
           {"SLURM_NNODES", std::to_string(nodes.size())},
           {"SLURM_STEP_NUM_NODES", std::to_string(nodes.size())},
           {"SLURM_STEP_NODELIST", spec::HostList(nodes)},
           {"SLURM_TASKS_PER_NODE", spec::TasksPerNode(per_node)},
           {"SLURM_STEP_TASKS_PER_NODE", spec::TasksPerNode(per_node)},
           {"SLURMD_NODENAME", cluster_.node(n).name},
           {"SLURM_TOPOLOGY_ADDR", cluster_.node(n).name},
           {"SLURM_GTIDS", gtids},
           {"GANTRY_STEP", std::to_string(s.id)},
           {"GANTRY_RANK", std::to_string(task)},
           {"GANTRY_LOCAL_RANK", std::to_string(t.local)},
           {"GANTRY_WORLD_SIZE", tasks}}) {
    env[k] = v;
  }
  // srun --mpi=pmi2: the task's PMI rank and size, for the PMI server srun runs at
  // PMI_PORT (cli/pmi_server.h), as Slurm's mpi/pmi2 plugin gives them.
  if (env.contains("PMI_PORT") && env.contains("SLURM_MPI_TYPE")) {
    env["PMI_RANK"] = std::to_string(task);
    env["PMI_SIZE"] = tasks;
    env["PMI_JOBID"] = std::to_string(job.Number()) + "." + std::to_string(s.id);
  }
  // srun --mpi=pmix: the task's rank in the namespace srun's PMIx server registered, and its
  // node's name as registered there (cli/pmix_server.h).
  if (auto type = env.find("SLURM_MPI_TYPE");
      env.contains("PMIX_NAMESPACE") && type != env.end() && type->second == "pmix") {
    env["PMIX_RANK"] = std::to_string(task);
    env["PMIX_HOSTNAME"] = cluster_.node(n).name;
  }
  env.erase("SLURM_GPUS_ON_NODE");  // unset for a job of no GPUs, as Slurm's
  if (gpus > 0) env["SLURM_GPUS_ON_NODE"] = std::to_string(gpus);
  // SLURM_NODELIST stays the job's (Slurm's); SLURM_NTASKS_PER_NODE is srun's
  // --ntasks-per-node where the layout honours it, else what srun's environment had (the
  // batch script's, from sbatch), as Slurm 22.05's srun (also for a layout of 2,1).
  if (s.per_node > 0 &&
      std::all_of(per_node.begin(), per_node.end(), [&](int c) { return c <= s.per_node; }))
    env["SLURM_NTASKS_PER_NODE"] = std::to_string(s.per_node);
  if (!env.contains("SLURM_NODELIST")) env["SLURM_NODELIST"] = spec::HostList(JobNodes(job));
  // Slurm's default layout when none was asked: cyclic where no node has two tasks.
  if (!env.contains("SLURM_DISTRIBUTION"))
    env["SLURM_DISTRIBUTION"] = s.tasks.size() <= nodes.size() ? "cyclic" : "block";
  // srun -c: the step's own, as Slurm says it (else the batch script's, from srun's
  // environment); exact (--exact, --exclusive, -c): the step's own CPUs on the node (its
  // tasks there, -c each), else the job's there.
  if (s.cpus_per_task > 0) env["SLURM_CPUS_PER_TASK"] = std::to_string(s.cpus_per_task);
  if (s.exact) {
    env["SLURM_CPUS_ON_NODE"] =
        std::to_string(per_node[static_cast<size_t>(t.node)] * s.CpusPerTask());
  }
  // PyTorch's names, unless the script set them before srun.
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
           {"RANK", std::to_string(task)},
           {"LOCAL_RANK", std::to_string(t.local)},
           {"WORLD_SIZE", tasks}}) {
    if (!env.contains(k)) env[k] = v;
  }
  for (const char* k :
       {"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_TASK_PID"})
    env.erase(k);  // the agent sets the task's own
  // The GPUs the task sees, by the node's indexes (CUDA_VISIBLE_DEVICES may count them from
  // 0), as Slurm says them.
  env.erase("SLURM_STEP_GPUS");
  if (std::string held = GpuIndexes(alloc); !held.empty()) env["SLURM_STEP_GPUS"] = held;
  DropExceptedRlimits(env, config_.site.propagate_resource_limits_except);
  proto::DesiredWorker d;
  d.job = job.name;
  d.seq = job.seq;
  d.run = job.run;
  d.rank = task;
  d.step = s.id;
  d.gpus_by_index = true;  // a batch job's: CUDA_VISIBLE_DEVICES as Slurm's gres gives it
  d.grace_ms = job.spec.grace;
  d.command = s.command;
  if (!s.multi_prog.empty()) {  // its line of the file, then srun's words after the file
    // Read back after a restart (checked when the step was made).
    if (!s.programs) s.ReadPrograms(static_cast<int>(s.tasks.size()));
    if (s.programs) d.command = s.programs->ArgvFor(task, {s.command.begin() + 1, s.command.end()});
  }
  d.env = std::move(env);
  d.workdir = s.workdir.empty() ? job.spec.workdir : s.workdir;
  d.user = job.user;
  d.alloc = WireAlloc(alloc, cluster_);
  d.limits = NodeLimits(job, n);
  if (s.input_task < 0 || s.input_task == task) d.input = s.input;
  if (static_cast<size_t>(t.node) < s.cpus.size() &&
      static_cast<int>(s.cpus[static_cast<size_t>(t.node)].size()) < d.limits.cpus)
    d.step_cpus = s.cpus[static_cast<size_t>(t.node)];
  d.image = s.image.empty() ? job.spec.image : s.image;
  d.mounts = s.mounts;
  d.container_workdir = s.container_workdir;
  d.mount_home = s.mount_home;
  // --signal=B:SIG goes to the batch script only; without B: to the steps only. The one
  // left out gets SIGCONT (harmless) when the stop begins, SIGKILL at its end, as Slurm.
  d.signal = job.spec.stop_signal > 0 && job.spec.signal_batch ? SIGCONT : job.spec.stop_signal;
  d.signals =
      AskedSignals(job, {SignalTo::kSteps, SignalTo::kFull});  // scancel --signal without -b
  return d;
}

void Controller::StepTaskExited(Job& job, const ExitReport& e, core::NodeId n, Ticks now) {
  if (e.step < 0 || e.step >= static_cast<int>(job.steps.size())) return;
  Step& s = job.steps[static_cast<size_t>(e.step)];
  if (e.rank < 0 || e.rank >= static_cast<int>(s.tasks.size())) return;
  StepTask& t = s.tasks[static_cast<size_t>(e.rank)];
  if (t.exited || job.workers[static_cast<size_t>(t.slot)].alloc.node != n) return;
  t.exited = true;
  t.exit_code = e.exit_code;
  t.signal = e.signal;
  t.lost = e.lost;
  t.note = e.note;
  if (s.AllExited() && s.state == Step::State::kRunning) {
    s.End(now);
    TouchStep(job, s);
    StartSteps(job, now);
  }
  if (job.state == JobState::kStopping && job.AllExited()) {
    EndStop(job, now);
    return;
  }
  Persist(job);
}

void Controller::RecordBatchUsage(Job& job, const RunningReport& r, core::NodeId n, Ticks now) {
  const Step* step = r.step >= 0 && r.step < static_cast<int>(job.steps.size())
                         ? &job.steps[static_cast<size_t>(r.step)]
                         : nullptr;
  if (r.step >= 0 &&
      (step == nullptr || r.rank < 0 || r.rank >= static_cast<int>(step->tasks.size()))) {
    return;
  }
  std::vector<Worker*> covered;
  if (step != nullptr && step->bind_gpus) {
    covered.push_back(
        &job.workers[static_cast<size_t>(step->tasks[static_cast<size_t>(r.rank)].slot)]);
  } else if (step != nullptr && step->own_gpus > 0) {  // the workers whose GPUs it holds
    const StepTask& t = step->tasks[static_cast<size_t>(r.rank)];
    const uint64_t mask = static_cast<size_t>(t.node) < step->gpu_masks.size()
                              ? step->gpu_masks[static_cast<size_t>(t.node)]
                              : 0;
    for (Worker& w : job.workers) {
      if (w.alloc.node == n && (w.alloc.gpu_mask & mask) != 0) covered.push_back(&w);
    }
  } else {
    for (Worker& w : job.workers) {
      if (w.alloc.node == n && !w.exited) covered.push_back(&w);
    }
  }
  if (covered.empty()) return;
  RunningReport share = r;
  share.usage->vram_used_bytes /= static_cast<int64_t>(covered.size());
  for (Worker* w : covered) RecordUsage(job, *w, share, now);
  if (r.step >= 0) return;
  // The script's report: the nodes with no step task running have nothing of the job on them.
  std::set<uint32_t> busy;  // nodes where a step task runs
  for (const Step& s : job.steps) {
    if (s.state != Step::State::kRunning) continue;
    for (const StepTask& t : s.tasks) {
      if (!t.exited) busy.insert(job.workers[static_cast<size_t>(t.slot)].alloc.node.v);
    }
  }
  RunningReport idle = r;
  idle.usage = proto::WorkerUsage{};
  for (Worker& w : job.workers) {
    if (!w.exited && w.alloc.node != n && !busy.contains(w.alloc.node.v))
      RecordUsage(job, w, idle, now);
  }
}

void Controller::EndAllocation(Job& job, const std::string& why) {
  for (Worker& w : job.workers) w.exited = true;
  for (Step& s : job.steps) {
    if (s.state == Step::State::kEnded) continue;
    for (StepTask& t : s.tasks) {
      if (t.exited) continue;
      t.exited = true;
      t.signal = SIGKILL;
      t.note = why;
    }
    TouchStep(job, s);
    s.End(now_);
  }
}

}  // namespace gantry::server
