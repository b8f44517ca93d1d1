#include "core/policy/victims.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <limits>
#include <span>

#include "core/policy/pools.h"

namespace gantry::core {

namespace {
constexpr size_t kMaxVictims = 64;                // bounds the what-if of one preemption
constexpr size_t kLazyVictims = 4 * kMaxVictims;  // read one at a time, then sorted in bulk
constexpr size_t kMaxNodeTries = 8;               // nodes the node-by-node what-if tries
}  // namespace

bool VictimSelector::Choose(const Scheduler& s, WhatIf& w, const JobRecord& job, Mode mode,
                            ModelMask models, double job_rank, Ticks now,
                            const std::function<bool(JobId)>& overdue, std::vector<JobId>& needed,
                            Allocation& fit) {
  assert(indexed_);  // Prepare
  const Ledger& ledger = w.ledger();
  fit.clear();
  wake_at_ = unprotect_;
  // The job as the what-if places it: on the models it may preempt on.
  const bool restricted = (job.spec.models & ~models) != 0;
  JobSpec narrowed;
  if (restricted) {
    narrowed = job.spec;
    narrowed.models &= models;
  }
  const JobSpec& spec = restricted ? narrowed : job.spec;
  const Ask ask{job, AcceptedPools(s, spec), mode, now, job_rank, overdue};
  next_checkpoint_ = kForever;
  Candidates(s, ask);
  wake_at_ = std::min(wake_at_, next_checkpoint_);
  // A job that waits for a victim's checkpoint is woken at the next one of any victim in
  // its pools (Group::next_window), not only of those its rule takes now.
  if (mode != Mode::kLessees && job.spec.tier != Tier::kCritical) {
    Ticks wake = kForever;
    for (Group& g : groups_) {
      if ((g.pools & ask.accepts) == 0) continue;
      Windows(s, g);
      wake = std::min(wake, g.next_window[mode == Mode::kRank ? 1 : 0]);
    }
    wake_at_ = std::min(wake_at_, wake);
  }
  if (mode == Mode::kRank) {  // the worst ranked first, then the cheapest
    std::vector<std::pair<double, size_t>> by_rank;
    for (size_t i = 0; i < candidates_.size(); ++i)
      by_rank.emplace_back(-ordering_.Rank(s, s.job(candidates_[i].id), now), i);
    std::sort(by_rank.begin(), by_rank.end());
    std::vector<Victim> sorted;
    for (const auto& [rank, i] : by_rank) sorted.push_back(candidates_[i]);
    candidates_ = std::move(sorted);
  }
  const std::vector<Victim>& candidates = candidates_;
  if (candidates.empty()) return false;
  // What-if: release the cheapest victims until the job fits. First all of them, with one
  // placement: where even that finds no room, fewer victims would not make it either (a
  // gang that fits with some capacity free fits with more: its workers are alike, and
  // each is placed where it fits), so the walk placing after each victim is saved. On
  // the 100k-job replay 427k of 430k what-ifs failed, after 63 placements each. (Checked
  // when this was written, by running the walk after every such failure: it never found
  // room on that replay, the gen and Tiresias workloads, 60 property seeds or the unit tests.)
  const GpuUnits need = s.MinUnits(spec);
  // Victims of its own queue also make room under the queue's burst limit (and its
  // ancestors'): they must free at least what the job would hold past it.
  const GpuUnits over_burst = mode == Mode::kRank ? s.BurstExcess(job.spec.queue, need) : 0;
  std::vector<JobId> chosen;
  GpuUnits freed = 0;
  Taken taken;                            // borrowed units reclaimed so far
  WhatIf::Mark what_if = w.Checkpoint();  // rolled back once the victims are known
  auto take = [&](const Victim& c) {
    // Standard work on borrowed capacity: all of it must be borrowed.
    if (!Take(s, c, mode, taken)) return false;
    w.Release(s.job(c.id).alloc);
    chosen.push_back(c.id);
    freed += s.job(c.id).units;
    return true;
  };
  auto room = [&] {
    return freed >= over_burst && ledger.up_units() - ledger.used_units() >= need &&
           w.Place(spec, Fit::kBest, fit);
  };
  auto restart = [&] {
    w.Rollback(what_if);
    what_if = w.Checkpoint();
    chosen.clear();
    freed = 0;
    taken.clear();
  };
  // Most what-ifs that find room need only the cheapest victim (three quarters at 100,000
  // GPUs): it is tried alone first where the job may fit on the GPUs it frees, and the
  // rest are not released. (Only a guess: where it is wrong, one placement is lost, and
  // the walk below finds the same victims.)
  if (candidates.size() > 1 &&
      MayMakeRoom(s, spec, ask.accepts, {candidates.data(), 1}, /*released_only=*/true)) {
    if (!take(candidates[0]) || !room()) restart();
  }
  if (fit.empty()) {
    // Where a bound on what all of them free says there is no room, they are not released
    // (the bound is checked against the what-if wherever asserts are on).
    const bool may = MayMakeRoom(s, spec, ask.accepts, candidates, /*released_only=*/false);
#ifdef NDEBUG
    if (may) {
      for (const Victim& c : candidates) take(c);
    }
    if (may && room()) {  // then the cheapest that make room, one by one
#else
    for (const Victim& c : candidates) take(c);
    if (room()) {
      assert(may);
#endif
      w.Release(fit);
      fit.clear();
      restart();
      for (const Victim& c : candidates) {
        if (take(c) && room()) break;
      }
    }
  }
  if (fit.empty()) {
    w.Rollback(what_if);
    chosen.clear();
    what_if = w.Checkpoint();
    if (!ByNode(job.spec.tier, mode) || !NodeByNode(s, w, ask, spec, chosen, fit)) {
      w.Rollback(what_if);
      return false;
    }
    freed = 0;  // the units of the victims node by node
    for (JobId v : chosen) freed += s.job(v).units;
  }
  w.Release(fit);
  // Fewest victims: give back, most expensive first, any victim the job can do without.
  Allocation found;
  found.swap(fit);
  needed.clear();
  for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) {
    w.Allocate(s.job(*it).alloc);
    Allocation probe;
    const GpuUnits units = s.job(*it).units;
    if (freed - units >= over_burst && w.Place(spec, Fit::kBest, probe)) {
      w.Release(probe);  // still fits without this victim
      freed -= units;
    } else {
      w.Release(s.job(*it).alloc);
      needed.push_back(*it);
    }
  }
  for (JobId v : needed) {  // the caller preempts them
    const uint32_t pos = s.running_place(v);
    info_[pos].signaled = true;
    signaled_.push_back(pos);
    Signaled(s, pos);
  }
  // Where the job will go once the needed victims are gone (held as its claim): where
  // none was given back, the ledger is as it was when `found` was placed.
  if (needed.size() == chosen.size()) {
    fit.swap(found);
#ifndef NDEBUG  // the placement is the ledger's to give: the same again (the sanitized tests)
    Allocation again;
    const bool placed = w.Place(spec, Fit::kBest, again);
    if (placed) w.Release(again);
    assert(placed && again == fit);
#endif
  } else if (w.Place(spec, Fit::kBest, fit)) {
    w.Release(fit);
  }
  // The victims keep their GPUs through their grace period.
  w.Rollback(what_if);
  return true;
}

// Most what-ifs that fail do so for want of the right GPUs, not of victims: at 100,000
// GPUs with 10,000 pending jobs, MIG instances, MPS shares and leaf gangs whose 64
// cheapest candidates are scattered over the cluster (2,500 of a run's 7,200 what-ifs),
// each what-if releasing them all, searching and rolling back. The bound counts, on the
// nodes the candidates hold, the GPUs as the releases would leave them (Ledger::ReleaseGpus
// on copies), and elsewhere reads the ledger's indexes; a placement needs more (CPUs,
// memory, VRAM but on the released shared GPUs, the model, the placer's choices), so
// where the bound finds no room the what-if would not either. O(the candidates' workers +
// the pools' index words, and the leaves for a leaf gang that the counts do not rule out).
bool VictimSelector::MayMakeRoom(const Scheduler& s, const JobSpec& spec, uint64_t accepts,
                                 std::span<const Victim> victims, bool released_only) {
  const Ledger& ledger = s.ledger();
  const Cluster& cluster = s.cluster();
  const bool whole = spec.sharing == Sharing::kExclusive;
  const int g = spec.gpus;
  const int workers = spec.replicas;
  if (whole ? g < 1 : workers != 1) return true;  // CPU-only jobs, gangs of shares: not bounded
  // The nodes the candidates hold.
  holds_.clear();
  for (const Victim& c : victims) {
    for (const WorkerAlloc& w : s.job(c.id).alloc) holds_.emplace_back(w.node.v, &w);
  }
  std::sort(holds_.begin(), holds_.end());
  after_.clear();
  std::array<GpuState, kMaxGpusPerNode> gpus;
  for (size_t i = 0; i < holds_.size();) {
    const NodeId id(holds_[i].first);
    const Node& node = cluster.node(id);
    uint64_t freed = 0;
    for (int k = 0; k < node.gpus; ++k) gpus[k] = ledger.gpu(GpuId(node.first_gpu.v + k));
    for (; i < holds_.size() && holds_[i].first == id.v; ++i) {
      freed |= Ledger::ReleaseGpus(gpus.data(), *holds_[i].second, cluster.catalog(), node.model);
    }
    if (!ledger.node(id).up || (PoolBit(node.pool) & accepts) == 0) continue;
    if (whole) {
      const int now = ledger.node(id).free_whole;
      const int free = now + std::popcount(freed);
      if (free >= g * workers) return true;
      after_.push_back(After{id.v, free, free - now});
      continue;
    }
    const int profile =
        spec.sharing == Sharing::kMig && node.model.valid() ? spec.mig_index[node.model.v] : -1;
    const int64_t vram = node.model.valid() ? cluster.catalog().model(node.model).memory_bytes : 0;
    for (int k = 0; k < node.gpus; ++k) {
      const GpuState& a = gpus[k];
      if (profile >= 0 &&
          Ledger::MigStartOn(a, cluster.catalog().model(node.model).mig_profiles[profile]) >= 0) {
        return true;  // (a free GPU included)
      }
      if (spec.sharing != Sharing::kMig &&
          (a.mode == GpuMode::kFree ? spec.vram_bytes <= vram
                                    : a.mode == GpuMode::kShared && a.share_mode == spec.sharing &&
                                          a.share_used + spec.share_milli <= kShareScale &&
                                          a.vram_used + spec.vram_bytes <= vram)) {
        return true;
      }
    }
  }
  if (released_only) return false;
  // Elsewhere the GPUs are as they are now.
  const std::vector<Pool>& pools = cluster.pools();
  auto accepted = [&](uint32_t p) { return (PoolBit(PoolId(p)) & accepts) != 0; };
  auto node_with_free = [&](uint32_t p,
                            int at_least) {  // an up node of pool p with that many free GPUs
    for (int k = at_least; k <= pools[p].spec.gpus; ++k) {
      if (ledger.nodes_with_free(PoolId(p), k).Any()) return true;
    }
    return false;
  };
  if (!whole) {
    for (uint32_t p = 0; p < pools.size(); ++p) {
      if (!accepted(p)) continue;
      const PoolId pool(p);
      if (node_with_free(p, 1)) return true;  // a free GPU
      if (spec.sharing == Sharing::kMig) {
        const ModelId model = pools[p].spec.model;
        if (model.valid() && spec.mig_index[model.v] >= 0 &&
            ledger.mig_fit(pool, spec.mig_index[model.v]).Any()) {
          return true;
        }
      } else {
        for (int level = Ledger::ShareLevel(spec.share_milli); level < Ledger::kShareLevels;
             ++level) {
          if (ledger.shared_level(pool, spec.sharing, level).Any()) return true;
        }
      }
    }
    return false;
  }
  if (spec.topology <= Topology::kNode) {  // all its workers on one node
    for (uint32_t p = 0; p < pools.size(); ++p) {
      if (accepted(p) && node_with_free(p, g * workers)) return true;
    }
    return false;
  }
  // Workers of g GPUs that the accepted pools' nodes could take, in all.
  int fits = 0;
  for (const After& a : after_) fits += a.free_whole / g - (a.free_whole - a.gained) / g;
  for (uint32_t p = 0; p < pools.size() && fits < workers; ++p) {
    for (int k = pools[p].spec.gpus; accepted(p) && k >= g && fits < workers; --k) {
      const DynBitset& nodes = ledger.nodes_with_free(PoolId(p), k);
      fits += workers == 1 ? nodes.Any() : static_cast<int>(nodes.Count()) * (k / g);
    }
  }
  if (fits < workers) return false;
  if (spec.topology == Topology::kSpine) return true;
  // A leaf gang: in one leaf. The GPUs the releases free, by leaf.
  leaf_gain_.clear();
  for (const After& a : after_)
    leaf_gain_.emplace_back(cluster.node(NodeId(a.node)).leaf.v, a.gained);
  std::sort(leaf_gain_.begin(), leaf_gain_.end());
  size_t leaves = 0;
  for (size_t i = 0; i < leaf_gain_.size(); ++i) {
    if (leaves > 0 && leaf_gain_[leaves - 1].first == leaf_gain_[i].first) {
      leaf_gain_[leaves - 1].second += leaf_gain_[i].second;
    } else {
      leaf_gain_[leaves++] = leaf_gain_[i];
    }
  }
  leaf_gain_.resize(leaves);
  for (uint32_t p = 0; p < pools.size(); ++p) {
    for (int l = 0; accepted(p) && l < pools[p].leaf_count; ++l) {
      const LeafId leaf(pools[p].first_leaf.v + static_cast<uint32_t>(l));
      // Its free GPUs with those freed there first (a bound on the workers it takes), then,
      // where that is enough, node by node.
      auto gained = std::lower_bound(leaf_gain_.begin(), leaf_gain_.end(), std::pair{leaf.v, 0});
      const int more = gained != leaf_gain_.end() && gained->first == leaf.v ? gained->second : 0;
      if ((ledger.leaf_free(leaf) + more) / g < workers) continue;
      int in_leaf = 0;
      for (NodeId n : cluster.leaf(leaf).nodes) {
        auto a = std::lower_bound(after_.begin(), after_.end(), n.v,
                                  [](const After& x, uint32_t node) { return x.node < node; });
        in_leaf += a != after_.end() && a->node == n.v ? a->free_whole / g
                   : ledger.node(n).up                 ? ledger.node(n).free_whole / g
                                                       : 0;
      }
      if (in_leaf >= workers) return true;
    }
  }
  return false;
}

void VictimSelector::Holdings(const Scheduler& s, const JobRecord& job) {
  holdings_.clear();
  if (s.queues().queue(job.spec.queue).spec.guaranteed_by_model.empty()) {
    holdings_.emplace_back(ModelId(), job.units);
    return;
  }
  for (const WorkerAlloc& w : job.alloc) {
    const ModelId model = s.cluster().node(w.node).model;
    if (!model.valid()) continue;
    const GpuUnits units = job.spec.WorkerUnits(s.cluster().catalog(), model);
    auto it = std::find_if(holdings_.begin(), holdings_.end(),
                           [&](const auto& h) { return h.first == model; });
    if (it == holdings_.end()) it = holdings_.insert(holdings_.end(), {model, 0});
    it->second += units;
  }
}

bool VictimSelector::AllBorrowed(const Scheduler& s, const JobRecord& job, const Taken& taken) {
  Holdings(s, job);
  for (const auto& [model, units] : holdings_) {
    GpuUnits before = 0;
    for (const auto& [q, m, u] : taken) {
      if (q == job.spec.queue && m == model) before += u;
    }
    if (!s.Borrowed(job.spec.queue, model, before + units)) return false;
  }
  return true;
}

void VictimSelector::Index(Scheduler& s, Ticks now) {
  now_ = now;
  for (Group& g : groups_) {
    g.prepared = g.all_made = g.windows_made = false;
    for (Bucket& b : g.buckets) b.skipped = 0;
  }
  for (uint32_t pos : signaled_) {
    if (pos < info_.size()) info_[pos].signaled = false;
  }
  signaled_.clear();
  group_of_.resize(s.queues().size() + 1);
  const std::vector<JobId>& running = s.running();
  const std::vector<uint64_t>& stamps = s.running_stamps();
  for (uint32_t pos = static_cast<uint32_t>(running.size()); pos < info_.size(); ++pos) Leave(pos);
  info_.resize(running.size());
  where_.resize(running.size());
  seen_.resize(running.size(), 0);
  resumed_.resize(running.size(), kNotResumed);
  member_.resize(running.size(), UINT32_MAX);
  unprotect_ = kForever;
  const Ticks min_run = s.params().min_run_before_repreempt;
  // The Info of a job whose place was not stamped since the last pass is not read again:
  // the places the scheduler stamped since, or where it did not keep them all, one pass
  // over a word per running job (seen_) beside its stamps.
  auto read = [&](uint32_t pos) {  // another job, run or phase here: read its record
    seen_[pos] = stamps[pos];
    Leave(pos);
    Info& info = info_[pos];
    const JobRecord& victim = s.job(running[pos]);
    info.tier = victim.spec.tier;
    info.queue = victim.spec.queue;
    info.preemptions = victim.preemptions;
    info.last_start = victim.last_start;
    info.id = running[pos];
    info.checkpoint = victim.spec.checkpoint;
    info.units = victim.units;
    info.grown = victim.spec.elastic() && victim.spec.checkpoint > 0 &&
                 victim.alloc.size() > static_cast<size_t>(victim.spec.min_replicas);
    info.mark = kForever;
    Where& where = where_[pos];
    where.pools = 0;
    where.nodes.clear();
    for (const WorkerAlloc& w : victim.alloc) {
      where.pools |= PoolBit(s.cluster().node(w.node).pool);
      if (std::find(where.nodes.begin(), where.nodes.end(), w.node.v) == where.nodes.end()) {
        where.nodes.push_back(w.node.v);
      }
    }
    // Not signaled (being stopped), nor critical, nor shielded by its driver.
    if (victim.phase == Phase::kRunning && info.tier != Tier::kCritical && !victim.shielded)
      Join(pos);
    resumed_[pos] =
        info.bucket != UINT32_MAX && info.preemptions > 0 ? info.last_start : kNotResumed;
    if (resumed_[pos] != kNotResumed) resumed_list_.push_back(pos);
  };
  if (s.TakeRunningChanges(this, stamped_)) {
    for (uint32_t pos : stamped_) {
      if (pos < running.size() && seen_[pos] != stamps[pos]) read(pos);
    }
  } else {
    for (uint32_t pos = 0; pos < running.size(); ++pos) {
      if (seen_[pos] != stamps[pos]) read(pos);
    }
  }
  // The members resumed within min_run_before_repreempt: a list of the places read as
  // resumed after a preemption (once each: a place read again is listed again), each
  // dropped once its guard is over or its place is gone.
  std::sort(resumed_list_.begin(), resumed_list_.end());
  resumed_list_.erase(std::unique(resumed_list_.begin(), resumed_list_.end()), resumed_list_.end());
  size_t kept = 0;
  for (uint32_t pos : resumed_list_) {
    if (pos >= running.size()) continue;  // gone
    const Ticks start = resumed_[pos];
    if (start == kNotResumed || now - start >= min_run) continue;
    unprotect_ = std::min(unprotect_, start + min_run);
    // Guarded this pass: a rule may take it only where its queue orders by rank.
    const Info& info = info_[pos];
    if (!ordering_.ByRank(info.queue)) ++groups_[info.group].buckets[info.bucket].skipped;
    resumed_list_[kept++] = pos;
  }
  resumed_list_.resize(kept);
  indexed_ = true;
  by_node_.made = false;
}

void VictimSelector::Join(uint32_t pos) {
  Info& info = info_[pos];
  // Its group: best-effort work by pools, standard work by pools and queue. (Groups are
  // never dropped.)
  const int category = Category(info);
  const QueueId queue = category == 0 ? QueueId() : info.queue;
  std::vector<uint32_t>& slot = group_of_[category == 0 ? 0 : queue.v + 1];
  const uint64_t pools = where_[pos].pools;
  auto at =
      std::find_if(slot.begin(), slot.end(), [&](uint32_t g) { return groups_[g].pools == pools; });
  if (at == slot.end()) {
    at = slot.insert(slot.end(), static_cast<uint32_t>(groups_.size()));
    Group& g = groups_.emplace_back();
    g.pools = pools;
    g.category = category;
    g.queue = queue;
  }
  info.group = *at;
  Group& g = groups_[info.group];
  auto bucket = std::find_if(g.buckets.begin(), g.buckets.end(), [&](const Bucket& b) {
    return b.units == info.units && b.checkpoint == info.checkpoint;
  });
  if (bucket == g.buckets.end()) {
    bucket = g.buckets.emplace(g.buckets.end());
    bucket->units = info.units;
    bucket->checkpoint = info.checkpoint;
  }
  info.bucket = static_cast<uint32_t>(bucket - g.buckets.begin());
  bucket->entries.insert(Entry{Phase(info.last_start, info.checkpoint), info.id.v, pos});
  member_[pos] = static_cast<uint32_t>(g.members.size());
  g.members.push_back(pos);
}

void VictimSelector::Leave(uint32_t pos) {
  Info& info = info_[pos];
  if (info.bucket == UINT32_MAX) return;
  Group& g = groups_[info.group];
  g.buckets[info.bucket].entries.erase(
      Entry{Phase(info.last_start, info.checkpoint), info.id.v, pos});
  info.bucket = UINT32_MAX;
  g.members[member_[pos]] = g.members.back();
  member_[g.members.back()] = member_[pos];
  g.members.pop_back();
}

std::optional<VictimSelector::Victim> VictimSelector::Read(const Scheduler& s, const Group& g,
                                                           uint32_t pos) {
  const Ticks now = now_;
  Info& info = info_[pos];
  info.guarded = Guarded(s, info);
  if (info.guarded && !ordering_.ByRank(info.queue)) return std::nullopt;
  const Ticks ck = info.checkpoint;
  Ticks since = now - info.last_start;  // without checkpoints: since it started
  if (ck > 0) {  // since its last checkpoint: the mark kept, unless one came since
    if (!(info.mark <= now && now - info.mark < ck)) info.mark = now - since % ck;
    since = now - info.mark;
  }
  info.cost = Victim::Cost(g.category, info.units * (since / kTicksPerSecond));
  // Within a pass running() only grows (starts); jobs leave it between passes (Finish,
  // Requeue), so a member's place still names the job Index read there.
  return Victim{info.cost, s.running()[pos], pos};
}

void VictimSelector::Prepare(const Scheduler& s, Group& g) {
  if (g.prepared) return;
  g.prepared = true;
  g.victims.clear();
  g.ready = 0;
  g.bulk = false;
  g.heap.clear();
  g.cursors.resize(g.buckets.size());
  g.min_units = std::numeric_limits<GpuUnits>::max();
  g.any = false;
  for (uint32_t k = 0; k < g.buckets.size(); ++k) {
    const Bucket& b = g.buckets[k];
    if (b.entries.size() == b.skipped) continue;
    g.any = true;
    g.min_units = std::min(g.min_units, b.units);
    Cursor& c = g.cursors[k];
    c.bucket = k;
    // The cheapest member's phase is the clock's or the nearest below it; then
    // downwards, and round from the top.
    c.start = c.at = b.entries.upper_bound(Entry{Phase(now_, b.checkpoint), 0, UINT32_MAX});
    c.round = false;
    c.subs.clear();
    if (Fill(s, g, c)) g.heap.push_back(k);
  }
  std::make_heap(g.heap.begin(), g.heap.end(),
                 [&](uint32_t x, uint32_t y) { return HeadAfter(g, x, y); });
}

bool VictimSelector::Settle(const Scheduler& s, const Group& g, Sub& x) {
  for (;;) {
    if (const std::optional<Victim> v = Read(s, g, x.at->pos)) {
      x.victim = *v;
      return true;
    }
    if (x.at == x.first) return false;
    --x.at;
  }
}

bool VictimSelector::Fill(const Scheduler& s, const Group& g, Cursor& c) {
  if (!c.subs.empty()) return true;
  const Bucket& b = g.buckets[c.bucket];
  const Entries& entries = b.entries;
  // The next phase down (round from the top once), if any is unread.
  auto next_phase = [&]() -> std::optional<Ticks> {
    if (c.at == entries.begin()) {
      if (c.round) return std::nullopt;
      c.round = true;
      c.at = entries.end();
    }
    if (c.round && c.at == c.start) return std::nullopt;
    return std::prev(c.at)->phase;
  };
  // What a member of that phase has lost (as Read works it out).
  auto cost = [&](Ticks phase) {
    const Ticks ck = b.checkpoint;
    const Ticks since = ck > 0 ? Phase(Phase(now_, ck) - phase, ck) : now_ - phase;
    return Victim::Cost(g.category, b.units * (since / kTicksPerSecond));
  };
  while (c.subs.empty()) {
    std::optional<Ticks> phase = next_phase();
    if (!phase) return false;
    const uint64_t run = cost(*phase);
    do {  // every phase of that cost
      const auto first = entries.lower_bound(Entry{*phase, UINT32_MAX, 0});
      Sub x{std::prev(c.at), first, {}};
      c.at = first;
      if (Settle(s, g, x)) {
        c.subs.push_back(x);
        std::push_heap(c.subs.begin(), c.subs.end(), IdAfter);
      }
      phase = next_phase();
    } while (phase && cost(*phase) == run);
  }
  return true;
}

bool VictimSelector::More(const Scheduler& s, Group& g) {
  if (!g.bulk && g.ready >= kLazyVictims) {
    // The victims given so far are the cheapest of all, in order: a sort keeps them first.
    g.bulk = true;
    g.victims = All(s, g);
    const auto read = g.victims.begin() + static_cast<std::ptrdiff_t>(g.ready);
    std::nth_element(g.victims.begin(), read, g.victims.end());
    std::sort(g.victims.begin(), read);
  }
  if (g.bulk) {
    if (g.ready == g.victims.size()) return false;
    SortChunk(g);
    return true;
  }
  if (g.heap.empty()) return false;
  auto later = [&](uint32_t x, uint32_t y) { return HeadAfter(g, x, y); };
  std::pop_heap(g.heap.begin(), g.heap.end(), later);
  Cursor& c = g.cursors[g.heap.back()];
  std::pop_heap(c.subs.begin(), c.subs.end(), IdAfter);
  Sub& x = c.subs.back();
  assert(g.victims.empty() || g.victims.back() < x.victim);  // the order a sort gives
  g.victims.push_back(x.victim);
  g.ready = g.victims.size();
  if (x.at != x.first && (--x.at, Settle(s, g, x))) {
    std::push_heap(c.subs.begin(), c.subs.end(), IdAfter);
  } else {
    c.subs.pop_back();
  }
  if (Fill(s, g, c)) {
    std::push_heap(g.heap.begin(), g.heap.end(), later);
  } else {
    g.heap.pop_back();
  }
  return true;
}

void VictimSelector::SortChunk(Group& g) {
  const auto first = g.victims.begin() + static_cast<std::ptrdiff_t>(g.ready);
  const auto last = first + static_cast<std::ptrdiff_t>(std::min(g.victims.size() - g.ready,
                                                                 std::max(kMaxVictims, g.ready)));
  std::nth_element(first, last, g.victims.end());
  std::sort(first, last);
  g.ready = static_cast<size_t>(last - g.victims.begin());
}

const std::vector<VictimSelector::Victim>& VictimSelector::All(const Scheduler& s, Group& g) {
  if (!g.all_made) {
    g.all_made = true;
    g.all.clear();
    // Members are in no order: their entries are fetched a few ahead (each read otherwise
    // waits on memory; at 100,000 GPUs that wait was two thirds of the time).
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < g.members.size(); ++i) {
      if (i + kAhead < g.members.size()) __builtin_prefetch(&info_[g.members[i + kAhead]]);
      if (const std::optional<Victim> v = Read(s, g, g.members[i])) g.all.push_back(*v);
    }
  }
  return g.all;
}

void VictimSelector::Windows(const Scheduler& s, Group& g) {
  if (g.windows_made) return;
  g.windows_made = true;
  g.next_window[0] = g.next_window[1] = kForever;
  const Ticks now = now_;
  const Ticks windows[2] = {
      s.params().preempt_after_checkpoint,
      std::min(s.params().preempt_after_checkpoint, s.params().attained_quantum)};
  for (const Bucket& b : g.buckets) {
    const Ticks ck = b.checkpoint;
    if (ck <= 0 || b.entries.empty()) continue;
    // The member furthest from its last checkpoint, not guarded (the upward neighbour of
    // the clock's phase, round): its next checkpoint is the bucket's earliest.
    auto at = b.entries.upper_bound(Entry{Phase(now, ck), 0, UINT32_MAX});
    for (size_t left = b.entries.size(); left > 0; --left, ++at) {
      if (at == b.entries.end()) at = b.entries.begin();
      const Info& info = info_[at->pos];
      if (Guarded(s, info)) continue;
      const Ticks since = (now - info.last_start) % ck;
      for (int k = 0; k < 2; ++k) {
        if (windows[k] > 0 && since > windows[k]) {
          g.next_window[k] = std::min(g.next_window[k], WindowOpens(now + ck - since, windows[k]));
        }
      }
      break;
    }
  }
}

bool VictimSelector::Reads(const Scheduler& s, const Ask& a, Group& g) {
  const JobRecord& job = a.job;
  if ((g.pools & a.accepts) == 0) return false;
  if (g.category != 0) {
    switch (a.mode) {
      case Mode::kTier:
        return false;
      case Mode::kRank:
        if (g.queue != job.spec.queue) return false;
        break;
      case Mode::kLessees:
        break;
      case Mode::kGuarantee:
        // Another queue's, of a tier the job may take (and below: borrowing enough).
        if (g.queue == job.spec.queue || Tier::kStandard < job.spec.tier) return false;
        break;
    }
  }
  Prepare(s, g);
  if (!g.any) return false;
  if (g.category != 0 && a.mode == Mode::kGuarantee) {
    // Borrowing enough that its smallest job may be wholly borrowed (per model: judged
    // job by job).
    return !s.queues().queue(g.queue).spec.guaranteed_by_model.empty() ||
           s.Borrowed(g.queue, ModelId(), g.min_units);
  }
  return true;
}

template <typename Visit>
void VictimSelector::Walk(const Scheduler& s, const Ask& a, Visit visit) {
  walk_.clear();
  for (Group& g : groups_) {
    if (Reads(s, a, g)) walk_.push_back(&g);
  }
  if (walk_.size() == 1) {  // without the merge
    Group& g = *walk_[0];
    for (size_t i = 0; i < g.ready || More(s, g); ++i) {
      if (!visit(g.victims[i])) return;
    }
    return;
  }
  // Merged: a min-heap of the groups' next victims.
  auto later = [&](const std::pair<uint32_t, size_t>& x, const std::pair<uint32_t, size_t>& y) {
    return walk_[y.first]->victims[y.second] < walk_[x.first]->victims[x.second];
  };
  auto push = [&](uint32_t k, size_t i) {
    Group& g = *walk_[k];
    if (i == g.ready && !More(s, g)) return;
    heads_.emplace_back(k, i);
    std::push_heap(heads_.begin(), heads_.end(), later);
  };
  heads_.clear();
  for (uint32_t k = 0; k < walk_.size(); ++k) push(k, 0);
  while (!heads_.empty()) {
    std::pop_heap(heads_.begin(), heads_.end(), later);
    const auto [k, i] = heads_.back();
    heads_.pop_back();
    if (!visit(walk_[k]->victims[i])) return;
    push(k, i + 1);
  }
}

bool VictimSelector::Eligible(const Scheduler& s, const Ask& a, const Victim& c) {
  const JobRecord& job = a.job;
  const Mode mode = a.mode;
  const Ticks now = a.now;
  const Info& v = info_[c.info];
  if (v.signaled) return false;  // preempted earlier in this pass
  // Growth is the first to go, at the job's next checkpoint, while work waits; only
  // critical work, which never waits, takes a grown elastic job whole.
  if (v.grown && job.spec.tier != Tier::kCritical) return false;
  if (v.guarded && (mode != Mode::kRank || now - v.last_start < s.params().attained_quantum)) {
    return false;
  }
  // Whom the rule takes. Best-effort work gives way to any higher tier; work of another
  // queue running above its guarantee gives way to a job inside its own guarantee; a
  // backfilled job past its lease to a starving reservation of its tier or higher.
  // Borrowing is judged now, as starts earlier in this pass moved it.
  switch (mode) {
    case Mode::kLessees:
      if (v.tier < job.spec.tier || !a.overdue(c.id)) return false;
      break;
    case Mode::kRank:
      if (v.queue != job.spec.queue || v.tier < job.spec.tier ||
          !(ordering_.Rank(s, s.job(c.id), now) > a.rank)) {
        return false;
      }
      break;
    case Mode::kTier:
      if (c.category() != 0) return false;
      // Standard work takes only best-effort work that would lose little (the limit in
      // seconds of its own run, so the loss in units x seconds against units x limit).
      if (const Ticks within = s.params().best_effort_yields_within;
          job.spec.tier != Tier::kCritical && within > 0 &&
          c.lost() > v.units * (within / kTicksPerSecond)) {
        return false;
      }
      break;
    default:
      if (c.category() == 0 && job.spec.tier != Tier::kBestEffort) break;
      if (v.queue == job.spec.queue || v.tier < job.spec.tier) return false;
      // All borrowed: where the guarantee counts every model, from the index's own copy
      // (no job record read: a walk past many victims of queues near their guarantee).
      if (s.queues().queue(v.queue).spec.guaranteed_by_model.empty()
              ? !s.Borrowed(v.queue, ModelId(), v.units)
              : !AllBorrowed(s, s.job(c.id), {})) {
        return false;
      }
  }
  // When: a job that can wait takes back its guarantee from a checkpointing victim only
  // just after a checkpoint (next_checkpoint() then says when the next comes, for the
  // victims the rule takes). Rank preemption goes on all the time, so it takes a victim
  // only within a quantum of a checkpoint: each costs a victim at most a quantum of work.
  const Ticks window = mode == Mode::kRank ? std::min(s.params().preempt_after_checkpoint,
                                                      s.params().attained_quantum)
                                           : s.params().preempt_after_checkpoint;
  if (window <= 0 || job.spec.tier == Tier::kCritical) return true;
  if (v.checkpoint == 0) {
    // Standard work that never checkpoints loses its whole run: its start is its only
    // checkpoint, so it is taken only within the window of it (it loses at most that),
    // and past it only by critical work. Taken at any time, such jobs were preempted
    // and started again from zero over and over (the policy grid's seed 1: 12,591
    // preemptions of 17,670 jobs, 44% of the busy GPU-hours lost).
    return c.category() == 0 || now - v.last_start <= window;
  }
  if (const Ticks since = Since(v); since > window) {
    next_checkpoint_ = std::min(next_checkpoint_, WindowOpens(now + v.checkpoint - since, window));
    return false;
  }
  return true;
}

bool VictimSelector::Take(const Scheduler& s, const Victim& c, Mode mode, Taken& taken) {
  if (c.category() != 1 || mode != Mode::kGuarantee) return true;
  const JobRecord& victim = s.job(c.id);
  if (!AllBorrowed(s, victim, taken)) return false;
  for (const auto& [model, units] : holdings_) taken.emplace_back(victim.spec.queue, model, units);
  return true;
}

void VictimSelector::Candidates(const Scheduler& s, const Ask& a) {
  // The cheapest first, in the groups the rule reads: each group is read in order as far
  // as walks reach (its buckets merged), so a walk stops at kMaxVictims, and a pass whose
  // walks find their victims early never costs the whole index (at 100,000 GPUs the full
  // sort was a fifth of a pass, costing every member another fifth). The order is the
  // full sort's (it is total), merged across groups.
  candidates_.clear();
  Walk(s, a, [&](const Victim& c) {
    if (Eligible(s, a, c)) candidates_.push_back(c);
    return candidates_.size() < kMaxVictims;
  });
#ifndef NDEBUG  // what each group gave so far is the start of a sort of all its victims (the
                // sanitized tests)
  for (Group& g : groups_) {
    if (!g.prepared) continue;
    std::vector<Victim> sorted = All(s, g);
    assert(g.any == !sorted.empty());
    if (sorted.size() > 512) continue;
    std::sort(sorted.begin(), sorted.end());
    assert(g.ready <= sorted.size());
    for (size_t i = 0; i < g.ready; ++i) {
      assert(sorted[i].id == g.victims[i].id && sorted[i].cost == g.victims[i].cost);
    }
  }
#endif
}

bool VictimSelector::NodeByNode(const Scheduler& s, WhatIf& w, const Ask& a, const JobSpec& spec,
                                std::vector<JobId>& chosen, Allocation& fit) {
  // The cheapest nodes to empty of their eligible victims: from the pass's node index
  // where nodes of best-effort victims only are enough, else from every eligible victim.
  if (!by_node_.made) IndexNodes(s);
  std::vector<NodeCost>& nodes = nodes_;
  std::vector<std::vector<Victim>> runs;
  if (!by_node_.single_pool || !CheapestNodes(s, a, nodes, runs)) {
    AllNodes(s, a, nodes, runs);
  } else {
#ifndef NDEBUG  // the index's answer is the walk's: checked wherever asserts are on (the sanitized
                // tests)
    std::vector<NodeCost> walked;
    std::vector<std::vector<Victim>> walked_runs;
    AllNodes(s, a, walked, walked_runs);
    assert(walked_runs.size() == runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
      assert(walked[k].node == nodes[k].node && walked[k].lost == nodes[k].lost &&
             walked[k].category == 0);
      std::sort(walked_runs[k].begin(), walked_runs[k].end());
      std::vector<Victim> mine = runs[k];
      std::sort(mine.begin(), mine.end());
      assert(std::equal(mine.begin(), mine.end(), walked_runs[k].begin(), walked_runs[k].end(),
                        [](const Victim& x, const Victim& y) { return x.id == y.id; }));
    }
#endif
  }
  for (size_t k = 0; k < runs.size(); ++k) {
    std::vector<Victim>& run = runs[k];
    std::sort(run.begin(), run.end());
    Taken taken;
    const WhatIf::Mark node_try = w.Checkpoint();
    for (const Victim& c : run) {
      if (!Take(s, c, a.mode, taken)) continue;
      w.Release(s.job(c.id).alloc);
      chosen.push_back(c.id);
    }
    if (w.Place(spec, Fit::kBest, fit)) {
      w.Commit(node_try);  // the caller's what-if rolls it back
      return true;
    }
    w.Rollback(node_try);
    chosen.clear();
  }
  return false;
}

void VictimSelector::AllNodes(const Scheduler& s, const Ask& a, std::vector<NodeCost>& nodes,
                              std::vector<std::vector<Victim>>& runs) {
  // Per node holding eligible victims, the cost of emptying it of them, summed in one
  // walk of the index (sorting every (node, victim) pair instead took half of a replay's
  // time at 100,000 GPUs).
  std::vector<NodeCost>& cost = node_cost_;
  if (cost.size() != s.cluster().nodes().size())
    cost.assign(s.cluster().nodes().size(), NodeCost{});
  eligible_.clear();
  nodes.clear();
  std::vector<uint32_t>& touched = touched_;
  touched.clear();
  for (Group& g : groups_) {
    if (!Reads(s, a, g)) continue;
    for (const Victim& c : All(s, g)) {
      if (Eligible(s, a, c)) eligible_.push_back(c);
    }
  }
  for (const Victim& c : eligible_) {
    for (uint32_t node : where_[c.info].nodes) {
      NodeCost& n = cost[node];
      if (!n.seen) touched.push_back(node);
      n.seen = true;
      n.node = node;
      n.category = std::max(n.category, c.category());
      n.lost += c.lost();
    }
  }
  for (uint32_t n : touched) {
    nodes.push_back(cost[n]);
    cost[n] = NodeCost{};
  }
  const size_t tries = std::min(nodes.size(), kMaxNodeTries);
  std::partial_sort(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(tries), nodes.end());
  // The eligible victims on each node tried.
  runs.assign(tries, {});
  for (const Victim& c : eligible_) {
    for (uint32_t node : where_[c.info].nodes) {
      for (size_t k = 0; k < tries; ++k) {
        if (nodes[k].node == node) runs[k].push_back(c);
      }
    }
  }
}

void VictimSelector::IndexNodes(const Scheduler& s) {
  ByNodeIndex& x = by_node_;
  x.made = true;
  x.single_pool = true;
  for (Group& g : groups_) {  // a group's members all hold GPUs in the same pools
    if (std::popcount(g.pools) <= 1) continue;
    Prepare(s, g);
    if (g.any) x.single_pool = false;
  }
  const size_t count = s.cluster().nodes().size();
  x.first.resize(count);
  x.count.resize(count);
  x.best_effort.resize(count);
  x.lost.resize(count);
  x.on.clear();
  x.by_pool.resize(s.cluster().pools().size());
  x.pool_made.assign(s.cluster().pools().size(), false);
}

void VictimSelector::IndexPool(const Scheduler& s, PoolId p) {
  ByNodeIndex& x = by_node_;
  x.pool_made[p.v] = true;
  const Pool& pool = s.cluster().pool(p);
  const uint32_t begin = pool.first_node.v, end = begin + static_cast<uint32_t>(pool.spec.count);
  std::fill(x.count.begin() + begin, x.count.begin() + end, 0);
  std::fill(x.best_effort.begin() + begin, x.best_effort.begin() + end, 0);
  std::fill(x.lost.begin() + begin, x.lost.begin() + end, 0);
  // With no victim in two pools, those of the pool's nodes are in its own groups.
  const uint64_t bit = PoolBit(p);
  for (Group& g : groups_) {
    if (g.pools != bit) continue;
    for (const Victim& c : All(s, g)) {
      for (uint32_t n : where_[c.info].nodes) ++x.count[n];
    }
  }
  uint32_t at = static_cast<uint32_t>(x.on.size());
  for (uint32_t n = begin; n < end; ++n) {
    x.first[n] = at;
    at += x.count[n];
    x.count[n] = 0;  // counted again as the victims are laid out
  }
  x.on.resize(at);
  for (Group& g : groups_) {
    if (g.pools != bit) continue;
    for (const Victim& c : All(s, g)) {
      const Info& v = info_[c.info];
      for (uint32_t n : where_[c.info].nodes) {
        x.on[x.first[n] + x.count[n]++] = c;
        if (c.category() == 0 && !v.signaled && !v.guarded) {  // eligible for critical work
          ++x.best_effort[n];
          x.lost[n] += c.lost();
        }
      }
    }
  }
  auto& nodes = x.by_pool[p.v];
  nodes.clear();
  for (uint32_t n = begin; n < end; ++n) {
    if (x.best_effort[n] > 0) nodes.emplace_back(x.lost[n], n);
  }
  std::sort(nodes.begin(), nodes.end());
}

void VictimSelector::Signaled(const Scheduler& s, uint32_t pos) {
  ByNodeIndex& x = by_node_;
  const Info& v = info_[pos];
  if (!x.made || !x.single_pool || Category(v) != 0 || v.guarded) return;
  const std::vector<uint32_t>& nodes = where_[pos].nodes;
  if (nodes.empty() || !x.pool_made[s.cluster().node(NodeId(nodes[0])).pool.v]) return;
  const GpuUnits lost = Victim{v.cost, JobId(), pos}.lost();
  for (uint32_t n : nodes) {
    auto& pool = x.by_pool[s.cluster().node(NodeId(n)).pool.v];
    pool.erase(std::lower_bound(pool.begin(), pool.end(), std::pair{x.lost[n], n}));
    x.lost[n] -= lost;
    if (--x.best_effort[n] > 0) {
      const std::pair entry{x.lost[n], n};
      pool.insert(std::lower_bound(pool.begin(), pool.end(), entry), entry);
    }
  }
}

bool VictimSelector::CheapestNodes(const Scheduler& s, const Ask& a, std::vector<NodeCost>& nodes,
                                   std::vector<std::vector<Victim>>& runs) {
  const ByNodeIndex& x = by_node_;
  nodes.clear();
  auto victims = [&](uint32_t n) {
    return std::span(x.on.begin() + x.first[n], x.on.begin() + x.first[n] + x.count[n]);
  };
  for (uint32_t p = 0; p < x.by_pool.size(); ++p) {
    if ((PoolBit(PoolId(p)) & a.accepts) == 0) continue;
    if (!x.pool_made[p]) IndexPool(s, PoolId(p));
    size_t found = 0;
    for (const auto& [lost, n] : x.by_pool[p]) {
      if (found == kMaxNodeTries) break;
      const auto on = victims(n);
      if (std::any_of(on.begin(), on.end(),
                      [&](const Victim& c) { return c.category() == 1 && Eligible(s, a, c); })) {
        continue;  // an eligible standard victim: after every node of best-effort ones
      }
      nodes.push_back(NodeCost{0, lost, n, true});
      ++found;
    }
  }
  if (nodes.size() < kMaxNodeTries) return false;
  std::partial_sort(nodes.begin(), nodes.begin() + kMaxNodeTries, nodes.end());
  nodes.resize(kMaxNodeTries);
  runs.assign(kMaxNodeTries, {});
  for (size_t k = 0; k < kMaxNodeTries; ++k) {
    for (const Victim& c : victims(nodes[k].node)) {
      if (c.category() == 0 && Eligible(s, a, c)) runs[k].push_back(c);
    }
  }
  return true;
}

}  // namespace gantry::core
