#include "core/placement.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

namespace gantry::core {

namespace {
bool IsWhole(const JobSpec& job) { return job.sharing == Sharing::kExclusive && job.gpus > 0; }

// A single worker needs no gang domain, except NVLink for its own GPUs.
Topology Effective(const JobSpec& job) {
  if (job.replicas > 1) return job.topology;
  if (job.topology == Topology::kNvlink && IsWhole(job) && job.gpus > 1) return Topology::kNvlink;
  return Topology::kSpine;
}
}  // namespace

std::string Placer::Describe(const JobSpec& job, const Catalog& catalog) {
  std::string s = std::to_string(job.replicas) + " x ";
  switch (job.sharing) {
    case Sharing::kExclusive:
      s += job.gpus == 0 ? std::string("CPU-only worker") : std::to_string(job.gpus) + " GPU(s)";
      break;
    case Sharing::kMig:
      s += "MIG " + job.mig_profile;
      break;
    case Sharing::kMps:
    case Sharing::kTimeslice:
      s += std::to_string(job.share_milli / 1000.0).substr(0, 5) + " GPU " +
           std::string(Name(job.sharing)) + " share";
      break;
  }
  if (job.uses_gpu()) {
    int named = std::popcount(job.models);
    if (named < static_cast<int>(catalog.size())) {
      s += " of ";
      bool first = true;
      for (size_t m = 0; m < catalog.size(); ++m) {
        if (!(job.models >> m & 1u)) continue;
        s += (first ? "" : "|") + catalog.model(ModelId(static_cast<uint32_t>(m))).name;
        first = false;
      }
    }
  }
  if (job.replicas > 1 || job.topology == Topology::kNvlink) {
    s += std::string(" in one ") + std::string(Name(job.topology));
  }
  return s;
}

bool Placer::PoolAccepts(const JobSpec& job, PoolId pool) const {
  return core::PoolAccepts(ledger_.cluster(), job, pool);
}

bool Placer::NodeHasRoom(const JobSpec& job, NodeId n) const {
  const NodeState& s = ledger_.node(n);
  return s.up && s.free_cpus_milli >= job.cpus_milli && s.free_memory_bytes >= job.memory_bytes &&
         (avoid_.empty() || std::find(avoid_.begin(), avoid_.end(), n) == avoid_.end()) &&
         job.MayUseNode(n);
}

NodeId Placer::FindNode(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope,
                        int min_free) {
  const Pool& p = ledger_.cluster().pool(pool);
  const int max_k = p.spec.gpus;
  auto usable = [&](uint32_t local) {
    NodeId n(p.first_node.v + local);
    if (!NodeHasRoom(job, n)) return false;
    return scope.domain < 0 || ledger_.domain_free(n, scope.domain) >= min_free;
  };
  if (fit == Fit::kBest) {  // fullest node that fits: smallest k first
    for (int k = min_free; k <= max_k; ++k) {
      const DynBitset& b = ledger_.nodes_with_free(pool, k);
      for (uint32_t i = b.FindNext(scope.lo, scope.hi); i != DynBitset::kNone;
           i = b.FindNext(i + 1, scope.hi)) {
        if (usable(i)) return NodeId(p.first_node.v + i);
      }
    }
    return NodeId();
  }
  uint32_t best = DynBitset::kNone;  // lowest id over all buckets
  for (int k = min_free; k <= max_k; ++k) {
    const DynBitset& b = ledger_.nodes_with_free(pool, k);
    const uint32_t hi = std::min(scope.hi, best);
    for (uint32_t i = b.FindNext(scope.lo, hi); i != DynBitset::kNone; i = b.FindNext(i + 1, hi)) {
      if (usable(i)) {
        best = i;
        break;
      }
    }
  }
  return best == DynBitset::kNone ? NodeId() : NodeId(p.first_node.v + best);
}

int Placer::FreeGpuInScope(NodeId n, const Scope& scope) const {
  const Node& node = ledger_.cluster().node(n);
  for (int i = 0; i < node.gpus; ++i) {
    if (scope.domain >= 0 && i / node.gpus_per_domain != scope.domain) continue;
    if (ledger_.gpu(ledger_.gpu_id(n, i)).mode == GpuMode::kFree) return i;
  }
  return -1;
}

bool Placer::PlaceWhole(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope,
                        WorkerAlloc& w) {
  NodeId n = FindNode(job, fit, pool, scope, job.gpus);
  if (!n.valid()) return false;
  const uint64_t mask = WholeMask(n, scope, job.gpus);
  if (std::popcount(mask) < job.gpus) return false;
  w.node = n;
  w.gpu_mask = mask;
  return true;
}

uint64_t Placer::WholeMask(NodeId n, const Scope& scope, int gpus) const {
  const Node& node = ledger_.cluster().node(n);
  // Keep a worker inside one NVLink domain when one has room: the fullest such domain.
  int domain = scope.domain;
  if (domain < 0) {
    int best_free = INT32_MAX;
    for (int d = 0; d < node.gpus / node.gpus_per_domain; ++d) {
      int f = ledger_.domain_free(n, d);
      if (f >= gpus && f < best_free) {
        best_free = f;
        domain = d;
      }
    }
  }
  uint64_t mask = 0;
  int taken = 0;
  for (int i = 0; i < node.gpus && taken < gpus; ++i) {
    if (domain >= 0 && i / node.gpus_per_domain != domain) continue;
    if (ledger_.gpu(ledger_.gpu_id(n, i)).mode != GpuMode::kFree) continue;
    mask |= uint64_t{1} << i;
    ++taken;
  }
  return mask;
}

bool Placer::PlaceMig(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope,
                      WorkerAlloc& w) {
  const Pool& p = ledger_.cluster().pool(pool);
  const int profile = job.mig_index[p.spec.model.v];
  const auto gpn = static_cast<uint32_t>(p.spec.gpus);
  const DynBitset& fits = ledger_.mig_fit(pool, profile);
  // GPUs already split come first, so whole GPUs stay whole.
  for (uint32_t i = fits.FindNext(scope.lo * gpn, scope.hi * gpn); i != DynBitset::kNone;
       i = fits.FindNext(i + 1, scope.hi * gpn)) {
    NodeId n(p.first_node.v + i / gpn);
    int local = static_cast<int>(i % gpn);
    if (scope.domain >= 0 && local / ledger_.cluster().node(n).gpus_per_domain != scope.domain) {
      continue;
    }
    if (!NodeHasRoom(job, n)) continue;
    w.node = n;
    w.gpu = static_cast<int8_t>(local);
    w.mig_start = static_cast<int8_t>(ledger_.MigStart(ledger_.gpu_id(n, local), profile));
    w.mig_profile = static_cast<int8_t>(profile);
    return true;
  }
  NodeId n = FindNode(job, fit, pool, scope, 1);
  if (!n.valid()) return false;
  int local = FreeGpuInScope(n, scope);
  if (local < 0) return false;
  w.node = n;
  w.gpu = static_cast<int8_t>(local);
  w.mig_start = static_cast<int8_t>(ledger_.MigStart(ledger_.gpu_id(n, local), profile));
  w.mig_profile = static_cast<int8_t>(profile);
  return true;
}

bool Placer::PlaceShared(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope,
                         WorkerAlloc& w) {
  const Pool& p = ledger_.cluster().pool(pool);
  const auto gpn = static_cast<uint32_t>(p.spec.gpus);
  const int64_t memory = ledger_.cluster().catalog().model(p.spec.model).memory_bytes;
  uint32_t chosen = DynBitset::kNone;
  int chosen_left = INT32_MAX;
  // The shared GPU with least share left after the job (lowest id on ties), or with
  // kFirst the lowest id that fits. True when the search may stop.
  auto scan = [&](const DynBitset& gpus) {
    for (uint32_t i = gpus.FindNext(scope.lo * gpn, scope.hi * gpn); i != DynBitset::kNone;
         i = gpus.FindNext(i + 1, scope.hi * gpn)) {
      NodeId n(p.first_node.v + i / gpn);
      int local = static_cast<int>(i % gpn);
      if (scope.domain >= 0 && local / ledger_.cluster().node(n).gpus_per_domain != scope.domain) {
        continue;
      }
      const GpuState& s = ledger_.gpu(ledger_.gpu_id(n, local));
      int left = kShareScale - s.share_used - job.share_milli;
      if (left < 0 || s.vram_used + job.vram_bytes > memory || !NodeHasRoom(job, n)) continue;
      if (left < chosen_left) {
        chosen = i;
        chosen_left = left;
        if (fit == Fit::kFirst || left == 0) return true;
      }
    }
    return false;
  };
  if (fit == Fit::kFirst) {
    scan(ledger_.shared(pool, job.sharing));
  } else {
    // Tightest level of free share first: the least left is in the first level where
    // anything fits (GPUs of lower levels have less share free than any of higher ones),
    // so emptier GPUs are not read (at 100,000 GPUs this search read every shared GPU of
    // the pool for each worker the FGD search could not place).
    for (int l = Ledger::ShareLevel(job.share_milli); l < Ledger::kShareLevels; ++l) {
      if (scan(ledger_.shared_level(pool, job.sharing, l)) || chosen != DynBitset::kNone) break;
    }
  }
  if (chosen != DynBitset::kNone) {
    w.node = NodeId(p.first_node.v + chosen / gpn);
    w.gpu = static_cast<int8_t>(chosen % gpn);
  } else {
    NodeId n = FindNode(job, fit, pool, scope, 1);
    if (!n.valid()) return false;
    int local = FreeGpuInScope(n, scope);
    if (local < 0) return false;
    w.node = n;
    w.gpu = static_cast<int8_t>(local);
  }
  w.share_milli = static_cast<int16_t>(job.share_milli);
  w.vram_bytes = job.vram_bytes;
  return true;
}

bool Placer::PlaceWorker(const JobSpec& job, Fit fit, const Scope& scope, WorkerAlloc& w) {
  const Cluster& cluster = ledger_.cluster();
  w = WorkerAlloc{};
  w.sharing = job.sharing;
  w.cpus_milli = job.cpus_milli;
  w.memory_bytes = job.memory_bytes;
  // The FGD search covers every place the search below would try, except the nodes
  // beyond kLooksPerBucket in a bucket: only when it stopped there and found nothing
  // does the exhaustive search below decide.
  if (fit == Fit::kBest && frag_ != nullptr && frag_->active()) {
    if (PlaceWorkerFgd(job, scope, w)) return true;
    if (!fgd_truncated_) return false;
  }
  auto try_pool = [&](PoolId pool) -> bool {
    if (!PoolAccepts(job, pool)) return false;
    Scope s = scope;
    if (!s.pool.valid()) {
      s.lo = 0;
      s.hi = static_cast<uint32_t>(cluster.pool(pool).spec.count);
    }
    switch (job.sharing) {
      case Sharing::kExclusive:
        if (job.gpus > 0) return PlaceWhole(job, fit, pool, s, w);
        {
          NodeId n = FindNode(job, Fit::kBest, pool, s, 0);  // CPU-only: GPU-busy nodes first
          if (!n.valid()) return false;
          w.node = n;
          return true;
        }
      case Sharing::kMig:
        return PlaceMig(job, fit, pool, s, w);
      case Sharing::kMps:
      case Sharing::kTimeslice:
        return PlaceShared(job, fit, pool, s, w);
    }
    return false;
  };
  if (scope.pool.valid()) return try_pool(scope.pool);
  const auto pools = static_cast<uint32_t>(cluster.pools().size());
  if (!job.uses_gpu()) {  // CPU-only work goes to CPU-only pools first
    for (uint32_t p = 0; p < pools; ++p) {
      if (cluster.pool(PoolId(p)).spec.gpus == 0 && try_pool(PoolId(p))) return true;
    }
    for (uint32_t p = 0; p < pools; ++p) {
      if (cluster.pool(PoolId(p)).spec.gpus > 0 && try_pool(PoolId(p))) return true;
    }
    return false;
  }
  for (uint32_t p = 0; p < pools; ++p) {
    if (try_pool(PoolId(p))) return true;
  }
  return false;
}

// ---- FGD: least fragmentation growth over a bounded candidate set ----

int Placer::FgdScore(int64_t delta) const {
  const double gpus = static_cast<double>(delta) / static_cast<double>(frag_->placing_total()) /
                      static_cast<double>(kGpuUnits);
  return static_cast<int>(100.0 / (1.0 + std::exp(gpus)));
}

uint64_t Placer::TieKey(const WorkerAlloc& w, uint64_t salt) {
  uint64_t x = (uint64_t{w.node.v} << 24) ^ (w.gpu_mask << 8) ^
               (static_cast<uint64_t>(static_cast<uint8_t>(w.gpu)) << 4) ^
               static_cast<uint64_t>(static_cast<uint8_t>(w.mig_start)) ^
               (salt * 0x9E3779B97F4A7C15ull);
  x ^= x >> 30;  // splitmix64's finaliser
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void Placer::Consider(const WorkerAlloc& w, Best& best) const {
  const int64_t delta = frag_->Delta(w);
  const int score = FgdScore(delta);
  if (best.found && score < best.score) return;
  // Among equal scores in one pool, the fullest leaf first: small jobs pack leaves, so
  // whole leaves stay free for gangs that need one (FGD scores by node, not by leaf).
  // Where the change is the same to the unit (no class of the mix tells the places
  // apart: a mix of small jobs only), best fit's order: a node in use before an untouched
  // one, then the fullest node of the pool, so whole nodes stay free for the gangs the
  // mix has not seen yet; FGD's random pick only among near ties.
  const Node& node = ledger_.cluster().node(w.node);
  const int leaf = ledger_.leaf_free(node.leaf);
  const int free = ledger_.node(w.node).free_whole;
  const bool used = free < node.gpus;
  int order = 0;  // <0: w before best, >0: after, 0: alike
  if (best.found && score == best.score) {
    const bool same_pool = ledger_.cluster().node(best.w.node).pool == node.pool;
    if (same_pool && leaf != best.leaf_free) {
      order = leaf < best.leaf_free ? -1 : 1;
    } else if (const bool best_used = best.node_free < ledger_.cluster().node(best.w.node).gpus;
               delta == best.delta && used != best_used) {
      order = used ? -1 : 1;
    } else if (delta == best.delta && same_pool && free != best.node_free) {
      order = free < best.node_free ? -1 : 1;
    }
  }
  if (order > 0) return;
  const uint64_t tie = TieKey(w, best.salt);
  if (!best.found || score > best.score || order < 0 || tie < best.tie) {
    best.found = true;
    best.score = score;
    best.delta = delta;
    best.leaf_free = leaf;
    best.node_free = free;
    best.tie = tie;
    best.w = w;
  }
}

Placer::Take Placer::TakeSplit(int state) {
  auto level =
      std::find_if(levels_.begin(), levels_.end(), [&](const auto& l) { return l.first == state; });
  if (level == levels_.end()) {
    if (levels_.size() >= static_cast<size_t>(kSplitLevels)) return Take::kStop;
    levels_.emplace_back(state, 0);
    level = levels_.end() - 1;
  }
  if (level->second >= static_cast<uint32_t>(kPerSplitLevel)) return Take::kNo;
  ++level->second;
  return Take::kYes;
}

template <typename Add>
void Placer::ForBucketNodes(const JobSpec& job, PoolId pool, const Scope& scope, int min_free,
                            Add add) {
  const Pool& p = ledger_.cluster().pool(pool);
  for (int k = min_free; k <= p.spec.gpus; ++k) {  // fullest nodes first: the best-fit order
    const DynBitset& b = ledger_.nodes_with_free(pool, k);
    int taken = 0, looked = 0;
    for (uint32_t i = b.FindNext(scope.lo, scope.hi);
         i != DynBitset::kNone && taken < kNodesPerBucket && looked < kLooksPerBucket;
         i = b.FindNext(i + 1, scope.hi)) {
      const NodeId n(p.first_node.v + i);
      ++looked;
      if (!NodeHasRoom(job, n)) continue;
      if (scope.domain >= 0 && ledger_.domain_free(n, scope.domain) < min_free) continue;
      if (add(n)) ++taken;
    }
    fgd_truncated_ = fgd_truncated_ || (looked >= kLooksPerBucket && taken < kNodesPerBucket);
  }
}

void Placer::WholeCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                             Best& best) {
  ForBucketNodes(job, pool, scope, job.gpus, [&](NodeId n) {
    const uint64_t mask = job.gpus > 0 ? WholeMask(n, scope, job.gpus) : 0;
    if (std::popcount(mask) < job.gpus) return false;
    w.node = n;
    w.gpu_mask = mask;
    Consider(w, best);
    return true;
  });
}

void Placer::SharedCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                              Best& best) {
  const Pool& p = ledger_.cluster().pool(pool);
  const auto gpn = static_cast<uint32_t>(p.spec.gpus);
  const int64_t memory = ledger_.cluster().catalog().model(p.spec.model).memory_bytes;
  w.share_milli = static_cast<int16_t>(job.share_milli);
  w.vram_bytes = job.vram_bytes;
  levels_.clear();
  splits_.clear();
  // Tightest free-share level first; GPUs with less share left than asked are skipped
  // by the index, except within the first level.
  const uint32_t lo = scope.lo * gpn, hi = scope.hi * gpn;
  bool enough = false;
  for (int l = Ledger::ShareLevel(job.share_milli); l < Ledger::kShareLevels && !enough; ++l) {
    const DynBitset& shared = ledger_.shared_level(pool, job.sharing, l);
    int looked = 0;
    for (uint32_t i = shared.FindNext(lo, hi); i != DynBitset::kNone;
         i = shared.FindNext(i + 1, hi)) {
      if (++looked > kLooksPerBucket) {  // a level of many GPUs alike: on to the next
        fgd_truncated_ = true;
        break;
      }
      const NodeId n(p.first_node.v + i / gpn);
      const int local = static_cast<int>(i % gpn);
      if (scope.domain >= 0 && local / ledger_.cluster().node(n).gpus_per_domain != scope.domain) {
        continue;
      }
      const GpuState& s = ledger_.gpu(ledger_.gpu_id(n, local));
      const int left = kShareScale - s.share_used - job.share_milli;
      if (left < 0 || s.vram_used + job.vram_bytes > memory || !NodeHasRoom(job, n)) continue;
      const Take take = TakeSplit(s.share_used);
      if (take == Take::kStop) {
        enough = true;
        break;
      }
      if (take == Take::kYes) splits_.emplace_back(left, i);
    }
  }
  std::sort(splits_.begin(), splits_.end());  // the fullest shared GPU first, then by id
  for (const auto& [left, i] : splits_) {
    w.node = NodeId(p.first_node.v + i / gpn);
    w.gpu = static_cast<int8_t>(i % gpn);
    Consider(w, best);
  }
  ForBucketNodes(job, pool, scope, 1, [&](NodeId n) {
    const int local = FreeGpuInScope(n, scope);
    if (local < 0) return false;
    w.node = n;
    w.gpu = static_cast<int8_t>(local);
    Consider(w, best);
    return true;
  });
}

void Placer::MigCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                           Best& best) {
  const Pool& p = ledger_.cluster().pool(pool);
  const int profile = job.mig_index[p.spec.model.v];
  const MigProfile& prof = ledger_.cluster().catalog().model(p.spec.model).mig_profiles[profile];
  const auto gpn = static_cast<uint32_t>(p.spec.gpus);
  const DynBitset& fits = ledger_.mig_fit(pool, profile);
  w.mig_profile = static_cast<int8_t>(profile);
  // Every start slice where the profile fits: where an instance goes decides which
  // profiles still fit beside it.
  auto each_start = [&](NodeId n, int local) {
    const GpuState& s = ledger_.gpu(ledger_.gpu_id(n, local));
    w.node = n;
    w.gpu = static_cast<int8_t>(local);
    for (int start : prof.starts) {
      if ((s.mig_memory & Ledger::SliceMask(start, prof.memory_slices)) != 0) continue;
      w.mig_start = static_cast<int8_t>(start);
      Consider(w, best);
    }
  };
  levels_.clear();
  splits_.clear();
  for (uint32_t i = fits.FindNext(scope.lo * gpn, scope.hi * gpn); i != DynBitset::kNone;
       i = fits.FindNext(i + 1, scope.hi * gpn)) {
    const NodeId n(p.first_node.v + i / gpn);
    const int local = static_cast<int>(i % gpn);
    if (scope.domain >= 0 && local / ledger_.cluster().node(n).gpus_per_domain != scope.domain) {
      continue;
    }
    if (!NodeHasRoom(job, n)) continue;
    const GpuState& s = ledger_.gpu(ledger_.gpu_id(n, local));
    const Take take = TakeSplit(s.mig_memory | s.mig_compute << 8);
    if (take == Take::kStop) break;
    if (take == Take::kYes) splits_.emplace_back(0, i);
  }
  // Split GPUs before whole ones (lowest id first), as plain best fit does.
  for (const auto& [unused, i] : splits_) {
    each_start(NodeId(p.first_node.v + i / gpn), static_cast<int>(i % gpn));
  }
  ForBucketNodes(job, pool, scope, 1, [&](NodeId n) {
    const int local = FreeGpuInScope(n, scope);
    if (local < 0) return false;
    each_start(n, local);
    return true;
  });
}

bool Placer::PlaceWorkerFgd(const JobSpec& job, const Scope& scope, WorkerAlloc& w) {
  const Cluster& cluster = ledger_.cluster();
  // The job's own order of tied places (FNV-1a of its id): the same job on the same
  // ledger goes to the same place, as what-ifs rely on (VictimSelector::Choose).
  Best best;
  best.salt = 14695981039346656037ull;
  for (const char ch : job.id)
    best.salt = (best.salt ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  fgd_truncated_ = false;
  auto score_pool = [&](PoolId pool) {
    if (!PoolAccepts(job, pool)) return;
    Scope s = scope;
    if (!s.pool.valid()) {
      s.lo = 0;
      s.hi = static_cast<uint32_t>(cluster.pool(pool).spec.count);
    }
    switch (job.sharing) {
      case Sharing::kExclusive:
        WholeCandidates(job, pool, s, w, best);
        break;
      case Sharing::kMig:
        MigCandidates(job, pool, s, w, best);
        break;
      case Sharing::kMps:
      case Sharing::kTimeslice:
        SharedCandidates(job, pool, s, w, best);
        break;
    }
  };
  if (scope.pool.valid()) {
    score_pool(scope.pool);
  } else {
    const auto pools = static_cast<uint32_t>(cluster.pools().size());
    if (!job.uses_gpu()) {  // CPU-only work goes to CPU-only pools first: no GPU to fragment
      for (uint32_t p = 0; p < pools; ++p) {
        const Pool& pool = cluster.pool(PoolId(p));
        if (pool.spec.gpus != 0 || !PoolAccepts(job, PoolId(p))) continue;
        NodeId n = FindNode(job, Fit::kBest, PoolId(p),
                            Scope{PoolId(), 0, static_cast<uint32_t>(pool.spec.count)}, 0);
        if (n.valid()) {
          w.node = n;
          return true;
        }
      }
    }
    // Every pool that accepts the worker, in pool order: a tie keeps the earlier pool.
    for (uint32_t p = 0; p < pools; ++p) {
      if (cluster.pool(PoolId(p)).spec.gpus > 0) score_pool(PoolId(p));
    }
  }
  if (!best.found) return false;
  w = best.w;
  return true;
}

void Placer::Rollback(Allocation& out) {
  ledger_.Release(out);
  out.clear();
}

// Each group of workers_per_node workers on one node, no two groups on one node: a
// group's first worker goes where PlaceWorker would put it, the rest on its node; a node
// that cannot hold the whole group is left for the next try. O(groups x nodes tried).
bool Placer::PlaceGroups(const JobSpec& job, Fit fit, const Scope& scope, Allocation& out) {
  out.clear();
  avoid_.clear();
  const Cluster& cluster = ledger_.cluster();
  const int per = job.workers_per_node;
  for (int g = 0; g < job.replicas / per; ++g) {
    bool placed = false;
    WorkerAlloc first;
    while (!placed && PlaceWorker(job, fit, scope, first)) {
      const NodeId n = first.node;
      const PoolId pool = cluster.node(n).pool;
      const uint32_t i = n.v - cluster.pool(pool).first_node.v;
      ledger_.Allocate(first);
      Allocation group{first};
      for (int r = 1; r < per; ++r) {
        WorkerAlloc w;
        if (!PlaceWorker(job, fit, Scope{pool, i, i + 1, scope.domain}, w)) break;
        ledger_.Allocate(w);
        group.push_back(w);
      }
      avoid_.push_back(n);
      placed = static_cast<int>(group.size()) == per;
      if (placed) {
        out.insert(out.end(), group.begin(), group.end());
      } else {
        ledger_.Release(group);
      }
    }
    if (!placed) {
      avoid_.clear();
      Rollback(out);
      return false;
    }
  }
  avoid_.clear();
  return true;
}

bool Placer::PlaceWorkers(const JobSpec& job, Fit fit, const Scope& scope, Allocation& out) {
  if (job.workers_per_node > 0) return PlaceGroups(job, fit, scope, out);
  out.clear();
  for (int r = 0; r < job.replicas; ++r) {
    WorkerAlloc w;
    if (!PlaceWorker(job, fit, scope, w)) {
      Rollback(out);
      return false;
    }
    ledger_.Allocate(w);
    out.push_back(w);
  }
  return true;
}

bool Placer::PlaceOn(const JobSpec& job, Fit fit, NodeId n, Allocation& out) {
  const Cluster& cluster = ledger_.cluster();
  const PoolId pool = cluster.node(n).pool;
  if (!PoolAccepts(job, pool) || !ledger_.node(n).up) return false;
  const uint32_t i = n.v - cluster.pool(pool).first_node.v;
  return PlaceWorkers(job, fit, Scope{pool, i, i + 1}, out);
}

Placer::Scope Placer::LeafScope(LeafId leaf) const {
  const Cluster& cluster = ledger_.cluster();
  const Leaf& l = cluster.leaf(leaf);
  const uint32_t first = cluster.pool(l.pool).first_node.v;
  return Scope{l.pool, l.nodes.front().v - first, l.nodes.back().v - first + 1};
}

bool Placer::PlaceBeside(const JobSpec& job, Fit fit, const Allocation& held, Allocation& out) {
  out.clear();
  if (held.empty() || job.workers_per_node > 0) return false;
  const Cluster& cluster = ledger_.cluster();
  const Node& first = cluster.node(held.front().node);
  const Pool& pool = cluster.pool(first.pool);
  // The gang's own topology: with the workers it holds it is more than one (Effective
  // would read a single new worker as needing no domain).
  switch (job.topology) {
    case Topology::kNvlink:
      return false;
    case Topology::kNode:
      return PlaceOn(job, fit, held.front().node, out);
    case Topology::kLeaf:
      return PlaceWorkers(job, fit, LeafScope(first.leaf), out);
    case Topology::kSpine: {
      JobSpec one = job;
      if (job.uses_gpu() && pool.spec.gpus > 0) one.models = ModelMask{1} << pool.spec.model.v;
      return PlaceWorkers(one, fit, Scope{}, out);
    }
  }
  return false;
}

bool Placer::PlaceOneModel(const JobSpec& job, Fit fit, Allocation& out) {
  const Cluster& cluster = ledger_.cluster();
  ModelMask left = job.models & cluster.present_models();
  if (!job.uses_gpu() || job.replicas < 2 || std::popcount(left) < 2)
    return PlaceWorkers(job, fit, Scope{}, out);
  JobSpec one = job;
  for (const Pool& pool : cluster.pools()) {
    const ModelMask m = pool.spec.gpus > 0 ? ModelMask{1} << pool.spec.model.v : 0;
    if ((left & m) == 0) continue;
    left &= ~m;
    one.models = m;
    if (PlaceWorkers(one, fit, Scope{}, out)) return true;
  }
  return false;
}

bool Placer::Place(const JobSpec& job, Fit fit, Allocation& out) {
  if (!job.preferred_nodes.empty()) {
    // The nodes scoring at least s, for each score s from the highest down (0: every node
    // not listed too); the lowest is the job's own placement. A gang's workers all go to
    // one such set or to the next.
    std::vector<int32_t> scores{0};
    for (const auto& [n, score] : job.preferred_nodes) scores.push_back(score);
    std::sort(scores.begin(), scores.end(), std::greater<>());
    scores.erase(std::unique(scores.begin(), scores.end()), scores.end());
    JobSpec tier = job;
    tier.preferred_nodes.clear();
    for (size_t i = 0; i + 1 < scores.size(); ++i) {
      tier.only_nodes = job.only_nodes;
      tier.not_nodes = job.not_nodes;
      if (scores[i] > 0) {
        tier.only_nodes.clear();
        for (const auto& [n, score] : job.preferred_nodes) {
          if (score >= scores[i] && job.MayUseNode(n)) tier.only_nodes.push_back(n);
        }
        if (tier.only_nodes.empty()) continue;
      } else {
        for (const auto& [n, score] : job.preferred_nodes) {
          if (score < scores[i]) tier.not_nodes.push_back(n);
        }
        std::sort(tier.not_nodes.begin(), tier.not_nodes.end());
      }
      if (Place(tier, fit, out)) return true;
    }
    tier.only_nodes = job.only_nodes;
    tier.not_nodes = job.not_nodes;
    return Place(tier, fit, out);
  }
  // A job that goes faster on some models (model_speed): the fastest model it fits on now,
  // one model at a time (ties by model id). Whether to wait for a faster one is not weighed.
  if (job.model_speed && job.uses_gpu()) {
    const ModelMask left = job.models & ledger_.cluster().present_models();
    if (std::popcount(left) > 1) {
      std::vector<ModelId> order;
      for (ModelMask m = left; m != 0; m &= m - 1)
        order.emplace_back(static_cast<uint32_t>(std::countr_zero(m)));
      std::stable_sort(order.begin(), order.end(),
                       [&](ModelId a, ModelId b) { return job.ModelSpeed(a) > job.ModelSpeed(b); });
      JobSpec one = job;
      for (ModelId m : order) {
        one.models = ModelMask{1} << m.v;
        if (Place(one, fit, out)) return true;
      }
      return false;
    }
  }
  if (job.fewest_nodes && job.replicas > 1 && job.topology > Topology::kNode &&
      job.workers_per_node == 0) {
    JobSpec one = job;  // one node first, then the job's own topology
    one.topology = Topology::kNode;
    one.fewest_nodes = false;
    if (Place(one, fit, out)) return true;
  }
  const Cluster& cluster = ledger_.cluster();
  const Topology topology = Effective(job);
  if (topology == Topology::kSpine) return PlaceOneModel(job, fit, out);
  const int whole_need = IsWhole(job) ? job.gpus * job.replicas : 0;
  const auto pools = static_cast<uint32_t>(cluster.pools().size());
  if (topology == Topology::kLeaf) {
    // Candidate leaves, fullest first when packing.
    std::vector<LeafId> leaves;
    for (uint32_t p = 0; p < pools; ++p) {
      const Pool& pool = cluster.pool(PoolId(p));
      if (!PoolAccepts(job, PoolId(p))) continue;
      for (int l = 0; l < pool.leaf_count; ++l) {
        LeafId leaf(pool.first_leaf.v + static_cast<uint32_t>(l));
        if (ledger_.leaf_free(leaf) >= whole_need) leaves.push_back(leaf);
      }
    }
    if (fit == Fit::kBest) {
      std::stable_sort(leaves.begin(), leaves.end(), [&](LeafId a, LeafId b) {
        return ledger_.leaf_free(a) < ledger_.leaf_free(b);
      });
    }
    for (LeafId leaf : leaves) {
      if (PlaceWorkers(job, fit, LeafScope(leaf), out)) return true;
    }
    return false;
  }
  // kNode or kNvlink: every worker on one node (and one NVLink domain).
  for (uint32_t p = 0; p < pools; ++p) {
    const Pool& pool = cluster.pool(PoolId(p));
    if (!PoolAccepts(job, PoolId(p))) continue;
    const auto count = static_cast<uint32_t>(pool.spec.count);
    const int domains = pool.spec.gpus > 0 ? pool.spec.nvlink_domains : 1;
    for (uint32_t i = 0; i < count; ++i) {
      NodeId n(pool.first_node.v + i);
      if (!ledger_.node(n).up || ledger_.node(n).free_whole < (whole_need > 0 ? whole_need : 0)) {
        continue;
      }
      if (topology == Topology::kNode) {
        if (PlaceWorkers(job, fit, Scope{PoolId(p), i, i + 1}, out)) return true;
        continue;
      }
      for (int d = 0; d < domains; ++d) {
        if (whole_need > 0 && ledger_.domain_free(n, d) < whole_need) continue;
        if (PlaceWorkers(job, fit, Scope{PoolId(p), i, i + 1, d}, out)) return true;
      }
    }
  }
  return false;
}

}  // namespace gantry::core
