#include "kube/scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "core/scheduler.h"
#include "kube/objects.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

enum class Resource : uint8_t { kNodes, kPods, kGroups, kBudgets };
constexpr const char* kPaths[] = {"/api/v1/nodes", "/api/v1/pods",
                                  "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                                  "/apis/policy/v1/poddisruptionbudgets"};
constexpr const char* kNames[] = {"nodes", "pods", "podgroups", "poddisruptionbudgets"};

struct Event {
  Resource res;
  enum class Type : uint8_t { kReset, kUpsert, kDelete } type;
  json obj;  // kReset: the list's items
};

// The events the watch threads hand to the scheduling thread.
class Mailbox {
 public:
  void Push(Event e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Waits up to `wait` for an event; takes them all.
  std::deque<Event> Take(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !events_.empty(); });
    std::deque<Event> out;
    out.swap(events_);
    return out;
  }
  void Wake() { cv_.notify_all(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

std::string ResourceVersion(const json& obj) {
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return "";
  auto rv = meta->find("resourceVersion");
  return rv != meta->end() && rv->is_string() ? rv->get<std::string>() : "";
}

// One resource's list-then-watch loop, as client-go's reflector: a list gives the whole
// state (kReset) and a resourceVersion; the watch from there gives changes; bookmarks
// move the resourceVersion; 410 Gone (the version was compacted away) means list again.
void WatchLoop(Resource res, Mailbox& box, const std::atomic<bool>& stop, Client& client) {
  const std::string path = kPaths[static_cast<int>(res)];
  const std::string name = kNames[static_cast<int>(res)];
  int backoff_ms = 200;
  bool absent_logged = false;
  auto sleep_backoff = [&] {
    for (int slept = 0; slept < backoff_ms && !stop; slept += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff_ms = std::min(backoff_ms * 2, 10'000);
  };
  while (!stop) {
    auto list = client.Request("GET", path);
    if (!list || list->status != 200) {
      if (list && list->status == 404 && res == Resource::kGroups) {
        // No PodGroup CRD installed: groups are unknown until it is.
        if (!absent_logged)
          log::Warn(
              "kubernetes: no PodGroup resource (scheduling.x-k8s.io/v1alpha1); pods naming a "
              "group wait until it exists",
              {});
        absent_logged = true;
        backoff_ms = 5'000;
      } else {
        log::Warn("kubernetes: list failed",
                  {{"resource", name},
                   {"error",
                    list ? "HTTP " + std::to_string(list->status) + ": " + list->body.substr(0, 300)
                         : list.error().ToString()}});
      }
      sleep_backoff();
      continue;
    }
    json doc = json::parse(list->body, nullptr, false);
    if (!doc.is_object()) {
      log::Warn("kubernetes: list answer is not JSON", {{"resource", name}});
      sleep_backoff();
      continue;
    }
    std::string rv = ResourceVersion(doc);
    json items = doc.contains("items") && doc["items"].is_array() ? doc["items"] : json::array();
    box.Push(Event{res, Event::Type::kReset, std::move(items)});
    backoff_ms = 200;
    bool relist = false;
    while (!stop && !relist) {
      const std::string target =
          path + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=240&resourceVersion=" + rv;
      int status = 0;
      Status s = client.Watch(
          target,
          [&](std::string_view line) {
            json ev = json::parse(line, nullptr, false);
            if (!ev.is_object() || !ev.contains("type") || !ev.contains("object")) return true;
            const std::string type = ev["type"].is_string() ? ev["type"].get<std::string>() : "";
            json& obj = ev["object"];
            if (type == "ERROR") {
              const int code = obj.is_object() && obj.contains("code") && obj["code"].is_number()
                                   ? obj["code"].get<int>()
                                   : 0;
              if (code == 410)
                relist = true;
              else
                log::Warn("kubernetes: watch error",
                          {{"resource", name}, {"error", obj.dump().substr(0, 300)}});
              return false;
            }
            if (std::string v = ResourceVersion(obj); !v.empty()) rv = v;
            if (type == "BOOKMARK") return true;
            box.Push(Event{res, type == "DELETED" ? Event::Type::kDelete : Event::Type::kUpsert,
                           std::move(obj)});
            return !stop;
          },
          &status);
      if (status == 410) relist = true;
      if (!s) {
        if (stop) return;
        log::Warn("kubernetes: watch ended",
                  {{"resource", name}, {"error", s.error().ToString().substr(0, 300)}});
        sleep_backoff();
        if (status != 200) relist = true;
      }
    }
  }
}

// Where one pod's scheduling stands, as written to its PodScheduled condition.
std::string Now3339() {
  const int64_t ms = WallMs();
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

class Driver {
 public:
  Driver(const spec::ClusterConfig& config, const Credentials& creds,
         const SchedulerOptions& options)
      : config_(config), options_(options), api_(creds) {}

  void Apply(Event& e);
  void Pass();
  bool synced() const { return synced_[0] && synced_[1]; }

 private:
  struct Job {
    std::string key;
    core::JobId id;                 // in the core (valid) or not yet
    std::vector<std::string> pods;  // uids: the pending pods it was submitted with, then
                                    // the pods bound, worker i on alloc[i]
    bool lone = true;
    int preemptions = 0;
    core::Ticks first_seen = 0;
    core::Ticks evict_asked = 0;  // when its pods' eviction was last asked
  };

  // The core's time: Unix ms since kEpochMs, so pods' creation times (which order the
  // queue, across restarts too) are core times as well.
  static constexpr int64_t kEpochMs = 1'577'836'800'000;  // 2020-01-01T00:00:00Z
  static core::Ticks TicksOf(int64_t unix_ms) { return std::max<int64_t>(0, unix_ms - kEpochMs); }
  core::Ticks Now() const {
    const core::Ticks now = TicksOf(WallMs());
    last_now_ = std::max(last_now_, now);  // never backwards, whatever the wall clock does
    return last_now_;
  }
  bool Ours(const PodInfo& p) const {
    return p.scheduler_name == config_.kubernetes.scheduler_name;
  }
  bool Live(const PodInfo& p) const { return !p.terminal() && !p.deleting; }
  static std::string KeyOf(const PodInfo& p) {
    return p.group.empty() ? "pod:" + p.uid : "group:" + p.ns + "/" + p.group;
  }

  void Rebuild();
  void SyncJobs();
  void Decide();
  int SelectionIndex(const NodeSelection& sel);
  Result<core::Allocation> AllocOf(const std::vector<const PodInfo*>& bound,
                                   const core::JobSpec& spec);
  void SetWaiting(const PodInfo& pod, const std::string& message);
  void Evict(const PodInfo& pod, core::Ticks grace_ms, const std::string& why);
  bool Bind(const PodInfo& pod, const std::string& node);
  void Forget(Job& job);
  void UpdateGroups();
  void Shield();

  const spec::ClusterConfig& config_;
  SchedulerOptions options_;
  Client api_;
  mutable core::Ticks last_now_ = 0;
  bool synced_[4] = {false, false, false, false};

  std::map<std::string, NodeInfo> nodes_;
  std::unordered_map<std::string, PodInfo> pods_;    // by uid
  std::map<std::string, GroupInfo> groups_;          // by namespace/name
  std::map<std::string, BudgetInfo> budgets_;        // by namespace/name
  std::map<std::string, Job> jobs_;                  // by key
  std::unordered_map<uint32_t, std::string> by_id_;  // core job id -> key

  std::vector<NodeSelection> selections_;
  std::map<std::string, int> selection_index_;
  ClusterView view_;
  std::unique_ptr<core::Scheduler> sched_;
  bool rebuild_ = true;
  std::map<std::string, std::string> refused_;  // job key -> why it never runs (until nodes change)
  std::set<std::string> evicting_;              // pod uids asked to go
  std::map<std::string, std::string> group_status_;  // PodGroup key -> the status last written
};

void Driver::Apply(Event& e) {
  const int r = static_cast<int>(e.res);
  auto upsert = [&](const json& obj) {
    switch (e.res) {
      case Resource::kNodes: {
        NodeInfo n = ParseNode(obj);
        if (n.name.empty()) return;
        auto it = nodes_.find(n.name);
        const bool changed =
            it == nodes_.end() || it->second.gpus != n.gpus ||
            it->second.cpus_milli != n.cpus_milli || it->second.memory_bytes != n.memory_bytes ||
            it->second.labels != n.labels || it->second.ready != n.ready ||
            it->second.unschedulable != n.unschedulable || it->second.problem != n.problem ||
            it->second.taints.size() != n.taints.size() || it->second.mig != n.mig;
        rebuild_ |= changed;
        nodes_[n.name] = std::move(n);
        break;
      }
      case Resource::kPods: {
        PodInfo p = ParsePod(obj);
        if (p.uid.empty()) return;
        auto it = pods_.find(p.uid);
        // Capacity held by other schedulers' pods changes the nodes the core sees.
        if (!Ours(p)) {
          const bool was = it != pods_.end() && !it->second.node_name.empty() && Live(it->second);
          const bool is = !p.node_name.empty() && Live(p);
          if (was != is) rebuild_ = true;
        }
        pods_[p.uid] = std::move(p);
        break;
      }
      case Resource::kGroups: {
        GroupInfo g = ParseGroup(obj);
        groups_[g.ns + "/" + g.name] = g;
        break;
      }
      case Resource::kBudgets: {
        BudgetInfo b = ParseBudget(obj);
        budgets_[b.ns + "/" + b.name] = std::move(b);
        break;
      }
    }
  };
  switch (e.type) {
    case Event::Type::kReset:
      synced_[r] = true;
      rebuild_ = true;
      if (e.res == Resource::kNodes) nodes_.clear();
      if (e.res == Resource::kPods) pods_.clear();
      if (e.res == Resource::kGroups) groups_.clear();
      if (e.res == Resource::kBudgets) budgets_.clear();
      for (const json& item : e.obj) upsert(item);
      break;
    case Event::Type::kUpsert:
      upsert(e.obj);
      break;
    case Event::Type::kDelete: {
      if (e.res == Resource::kNodes) {
        nodes_.erase(ParseNode(e.obj).name);
        rebuild_ = true;
      } else if (e.res == Resource::kPods) {
        PodInfo p = ParsePod(e.obj);
        auto it = pods_.find(p.uid);
        if (it != pods_.end() && !Ours(it->second) && !it->second.node_name.empty())
          rebuild_ = true;
        pods_.erase(p.uid);
        evicting_.erase(p.uid);
      } else if (e.res == Resource::kGroups) {
        GroupInfo g = ParseGroup(e.obj);
        groups_.erase(g.ns + "/" + g.name);
      } else {
        BudgetInfo b = ParseBudget(e.obj);
        budgets_.erase(b.ns + "/" + b.name);
      }
      break;
    }
  }
}

int Driver::SelectionIndex(const NodeSelection& sel) {
  const std::string key = sel.Key();
  auto it = selection_index_.find(key);
  if (it != selection_index_.end()) return it->second;
  const int i = static_cast<int>(selections_.size());
  selections_.push_back(sel);
  selection_index_.emplace(key, i);
  rebuild_ = true;  // no pool tells this selection's nodes apart yet
  return i;
}

// The core's allocation for pods already bound (a restart, a rebuild): worker i on the
// node of bound[i], holding that node's lowest GPUs not yet held. With the device plugin
// the kubelet chose the devices; the core only needs the counts right.
Result<core::Allocation> Driver::AllocOf(const std::vector<const PodInfo*>& bound,
                                         const core::JobSpec& spec) {
  core::Allocation alloc;
  for (const PodInfo* p : bound) {
    auto node = view_.cluster.FindNode(p->node_name);
    if (!node)
      return Error{"node", "node " + p->node_name + " of pod " + p->name + " is not usable"};
    core::WorkerAlloc w;
    w.node = *node;
    w.sharing = core::Sharing::kExclusive;
    w.cpus_milli = spec.cpus_milli;
    w.memory_bytes = spec.memory_bytes;
    const core::Node& n = view_.cluster.node(*node);
    const uint64_t all = n.gpus >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.gpus) - 1;
    uint64_t held = 0;
    for (const core::WorkerAlloc& other : alloc) {
      if (other.node == *node) held |= other.gpu_mask;
    }
    for (const core::JobId r : sched_->running()) {
      for (const core::WorkerAlloc& other : sched_->job(r).alloc) {
        if (other.node == *node) held |= other.gpu_mask;
      }
    }
    uint64_t free = all & ~held;
    for (int g = 0; g < spec.gpus; ++g) {
      if (free == 0)
        return Error{"gpus", "node " + p->node_name + " has fewer free GPUs than its pods hold"};
      const uint64_t bit = free & (~free + 1);
      w.gpu_mask |= bit;
      free &= ~bit;
    }
    alloc.push_back(w);
  }
  return alloc;
}

void Driver::Forget(Job& job) {
  if (job.id.valid()) {
    by_id_.erase(job.id.v);
    sched_->Forget(job.id);
  }
  job.id = core::JobId();
}

// A new core over the current nodes: the jobs that run are adopted, the pending ones
// submitted again in their first-seen order.
void Driver::Rebuild() {
  rebuild_ = false;
  refused_.clear();
  std::map<std::string, Usage> foreign;
  for (auto& [uid, p] : pods_) {
    if (!Ours(p) && !p.node_name.empty() && Live(p)) {
      Usage& u = foreign[p.node_name];
      u.gpus += p.gpus;
      u.cpus_milli += p.cpus_milli;
      u.memory_bytes += p.memory_bytes;
    }
    if (Ours(p) && Live(p) && p.problem.empty()) SelectionIndex(p.selection);
  }
  rebuild_ = false;
  std::vector<const NodeInfo*> nodes;
  for (const auto& [name, n] : nodes_) nodes.push_back(&n);
  auto view = BuildCluster(nodes, selections_, config_, foreign);
  if (!view) {
    log::Error("kubernetes: cannot build the cluster from the nodes",
               {{"error", view.error().ToString()}});
    return;
  }
  for (const std::string& s : view->skipped) log::Warn("kubernetes: node left out", {{"why", s}});
  view_ = std::move(view).value();
  core::PolicyParams params = config_.policy.params;
  params.epoch_unix_ms = kEpochMs;
  sched_ = std::make_unique<core::Scheduler>(view_.cluster, config_.queues,
                                             core::MakePolicy(options_.policy), params);
  by_id_.clear();
  for (auto& [key, job] : jobs_) job.id = core::JobId();
  log::Info("kubernetes: cluster rebuilt", {{"nodes", std::to_string(view_.cluster.nodes().size())},
                                            {"pools", std::to_string(view_.cluster.pools().size())},
                                            {"gpus", std::to_string(view_.cluster.gpu_count())}});
}

void Driver::SetWaiting(const PodInfo& pod, const std::string& message) {
  const std::string text = "gantry: " + message;
  if (pod.scheduled_message == text) return;
  json patch = {{"status",
                 {{"conditions", json::array({{{"type", "PodScheduled"},
                                               {"status", "False"},
                                               {"reason", "Unschedulable"},
                                               {"message", text},
                                               {"lastTransitionTime", Now3339()}}})}}}};
  auto r = api_.Request("PATCH", "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/status",
                        patch.dump(), "application/strategic-merge-patch+json");
  if (!r || (r->status != 200 && r->status != 404)) {
    log::Warn("kubernetes: cannot set PodScheduled",
              {{"pod", pod.ns + "/" + pod.name},
               {"error", r ? std::to_string(r->status) + " " + r->body.substr(0, 200)
                           : r.error().ToString()}});
    return;
  }
  pods_[pod.uid].scheduled_message = text;
  // An Event too, so `kubectl describe pod` lists it, as kube-scheduler's FailedScheduling.
  json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"generateName", pod.name + "."}, {"namespace", pod.ns}}},
             {"involvedObject",
              {{"kind", "Pod"},
               {"namespace", pod.ns},
               {"name", pod.name},
               {"uid", pod.uid},
               {"apiVersion", "v1"}}},
             {"reason", "FailedScheduling"},
             {"message", text},
             {"type", "Warning"},
             {"source", {{"component", config_.kubernetes.scheduler_name}}},
             {"firstTimestamp", Now3339()},
             {"lastTimestamp", Now3339()},
             {"count", 1}};
  (void)api_.Request("POST", "/api/v1/namespaces/" + pod.ns + "/events", ev.dump());
}

bool Driver::Bind(const PodInfo& pod, const std::string& node) {
  json b = {{"apiVersion", "v1"},
            {"kind", "Binding"},
            {"metadata", {{"name", pod.name}, {"namespace", pod.ns}, {"uid", pod.uid}}},
            {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  auto r = api_.Request("POST", "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/binding",
                        b.dump());
  if (r && r->status == 201) {
    pods_[pod.uid].node_name =
        node;  // the watch will say so too; a pass before it must not bind again
    return true;
  }
  log::Warn("kubernetes: binding failed",
            {{"pod", pod.ns + "/" + pod.name},
             {"node", node},
             {"error", r ? std::to_string(r->status) + " " + r->body.substr(0, 200)
                         : r.error().ToString()}});
  return false;
}

void Driver::Evict(const PodInfo& pod, core::Ticks grace_ms, const std::string& why) {
  if (evicting_.contains(pod.uid)) return;
  json ev = {
      {"apiVersion", "policy/v1"},
      {"kind", "Eviction"},
      {"metadata", {{"name", pod.name}, {"namespace", pod.ns}}},
      {"deleteOptions",
       {{"gracePeriodSeconds", (grace_ms + 999) / 1000}, {"preconditions", {{"uid", pod.uid}}}}}};
  auto r = api_.Request("POST", "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/eviction",
                        ev.dump());
  if (r && (r->status == 201 || r->status == 200 || r->status == 404)) {
    evicting_.insert(pod.uid);
    log::Info("kubernetes: pod evicted", {{"pod", pod.ns + "/" + pod.name}, {"why", why}});
    return;
  }
  // 429: a PodDisruptionBudget forbids it now; the next pass asks again.
  log::Warn("kubernetes: eviction refused",
            {{"pod", pod.ns + "/" + pod.name},
             {"error", r ? std::to_string(r->status) + " " + r->body.substr(0, 200)
                         : r.error().ToString()}});
}

// Brings the core's jobs in line with the pods: new gangs submitted, ended ones
// finished, running ones adopted after a rebuild.
void Driver::SyncJobs() {
  const core::Ticks now = Now();
  // The live pods of ours, by job.
  std::map<std::string, std::vector<const PodInfo*>> by_key;
  for (const auto& [uid, p] : pods_) {
    if (!Ours(p) || p.terminal()) continue;
    by_key[KeyOf(p)].push_back(&p);
  }
  for (auto& [key, pods] : by_key) {
    std::sort(pods.begin(), pods.end(),
              [](const PodInfo* a, const PodInfo* b) { return a->name < b->name; });
  }
  // Jobs whose pods are all gone end; a preempted gang's pods come back, recreated by
  // their controller, as the same job's next run.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    auto pods = by_key.find(job.key);
    const bool any =
        pods != by_key.end() && std::any_of(pods->second.begin(), pods->second.end(),
                                            [&](const PodInfo* p) { return Live(*p); });
    if (job.id.valid()) {
      const core::JobRecord& rec = sched_->job(job.id);
      const bool running =
          rec.phase == core::Phase::kRunning || rec.phase == core::Phase::kSignaled;
      bool bound_alive = false;
      for (const std::string& uid : job.pods) {
        auto p = pods_.find(uid);
        bound_alive |= p != pods_.end() && !p->second.terminal() && !p->second.node_name.empty();
      }
      if (running && !bound_alive) {
        if (rec.phase == core::Phase::kSignaled && !job.lone) {
          sched_->Requeue(job.id, now);  // the gang waits for its pods to come back
          job.preemptions = rec.preemptions;
          job.pods.clear();
        } else {
          sched_->Finish(job.id, now, true);
          Forget(job);
        }
      } else if (rec.phase == core::Phase::kPending) {
        // A waiting gang whose pods changed (one deleted, one added) is submitted anew.
        std::vector<std::string> now_pods;
        if (pods != by_key.end()) {
          for (const PodInfo* p : pods->second) {
            if (Live(*p) && p->node_name.empty()) now_pods.push_back(p->uid);
          }
        }
        if (static_cast<int>(now_pods.size()) != rec.spec.replicas) {
          job.preemptions = rec.preemptions;
          sched_->Finish(job.id, now);
          Forget(job);
        } else {
          job.pods = now_pods;
        }
      }
    }
    // A gang whose pods are gone but whose PodGroup stays (its pods evicted, to be
    // recreated) keeps its place and preemption count for its next run.
    const bool group_left = job.lone || !groups_.contains(job.key.substr(job.key.find(':') + 1));
    if (!job.id.valid() && !any && group_left) {
      it = jobs_.erase(it);
      continue;
    }
    ++it;
  }
  // Gangs and lone pods not in the core yet.
  for (auto& [key, pods] : by_key) {
    Job& job = jobs_[key];
    if (job.key.empty()) {
      job.key = key;
      job.first_seen = now;
      for (const PodInfo* p : pods) {
        if (p->created_ms > 0) job.first_seen = std::min(job.first_seen, TicksOf(p->created_ms));
      }
      job.lone = pods.front()->group.empty();
    }
    if (job.id.valid()) continue;
    std::vector<const PodInfo*> live;
    for (const PodInfo* p : pods) {
      if (Live(*p)) live.push_back(p);
    }
    if (live.empty()) continue;
    std::vector<const PodInfo*> bound, pending;
    for (const PodInfo* p : live) (p->node_name.empty() ? pending : bound).push_back(p);
    auto refuse = [&](const std::string& why) {
      for (const PodInfo* p : pending) SetWaiting(*p, why);
    };
    // Malformed or unsupported pods wait with the reason; they never block others.
    std::string problem;
    for (const PodInfo* p : live) {
      if (!p->problem.empty())
        problem = "pod " + p->name + " is malformed: " + p->problem;
      else if (!p->unsupported.empty()) {
        problem = p->unsupported.front();
        for (size_t i = 1; i < p->unsupported.size(); ++i) problem += "; " + p->unsupported[i];
      }
      if (!problem.empty()) break;
    }
    if (problem.empty()) {
      if (auto why = WhyNotAlike(live)) problem = *why;
    }
    if (!problem.empty()) {
      refuse(problem);
      continue;
    }
    int want = 1;
    if (!job.lone) {
      auto g = groups_.find(live.front()->ns + "/" + live.front()->group);
      if (g == groups_.end()) {
        refuse("waiting for PodGroup " + live.front()->ns + "/" + live.front()->group +
               " (its minMember says the gang's size)");
        continue;
      }
      want = g->second.min_member;
    }
    if (!bound.empty() && !pending.empty()) {
      // Partly bound: a crash between a gang's bindings. Its bound pods go, so the
      // controller recreates them and the gang is placed whole.
      for (const PodInfo* p : bound) Evict(*p, 0, "its gang was found partly bound");
      continue;
    }
    if (static_cast<int>(live.size()) < want) {
      refuse("gang of " + std::to_string(want) + " pods: " + std::to_string(live.size()) +
             " exist so far");
      continue;
    }
    if (auto r = refused_.find(key); r != refused_.end()) continue;
    auto spec = JobOf(live, config_);
    if (!spec) {
      refuse(spec.error().ToString());
      continue;
    }
    const auto selection = static_cast<size_t>(SelectionIndex(live.front()->selection));
    if (rebuild_ || selection >= view_.pools_of.size()) return;  // a new selection: rebuild first
    spec->pools = view_.pools_of[selection];
    if (spec->pools.empty()) {
      refused_[key] = "no node matches its node selection, taints and tolerations";
      refuse(refused_[key]);
      continue;
    }
    job.id = sched_->Submit(std::move(*spec), std::min(job.first_seen, now));
    by_id_[job.id.v] = key;
    sched_->SetPreemptions(job.id, job.preemptions);
    job.pods.clear();
    if (!bound.empty()) {
      std::string why;
      auto alloc = AllocOf(bound, sched_->job(job.id).spec);
      if (!alloc || !sched_->Adopt(job.id, *alloc, now, &why)) {
        log::Warn("kubernetes: cannot adopt running pods",
                  {{"job", key}, {"why", alloc ? why : alloc.error().ToString()}});
        sched_->Finish(job.id, now);
        Forget(job);
        continue;
      }
      for (const PodInfo* p : bound) job.pods.push_back(p->uid);
    } else {
      for (const PodInfo* p : pending) job.pods.push_back(p->uid);
    }
  }
  for (core::NodeId n : view_.down) {
    if (sched_->ledger().node(n).up) (void)sched_->SetNodeUp(n, false);
  }
  Shield();
}

// Running jobs whose eviction a PodDisruptionBudget would refuse now are shielded, so
// the core chooses other victims; a signaled job whose eviction was refused (a budget
// changed meanwhile) is asked again, at most once a second.
void Driver::Shield() {
  const core::Ticks now = Now();
  for (auto& [key, job] : jobs_) {
    if (!job.id.valid()) continue;
    const core::JobRecord& rec = sched_->job(job.id);
    if (rec.phase == core::Phase::kRunning) {
      bool shielded = false;
      for (const auto& [bkey, b] : budgets_) {
        int64_t covered = 0;
        for (const std::string& uid : job.pods) {
          auto p = pods_.find(uid);
          covered += p != pods_.end() && Covers(b, p->second);
        }
        shielded |= covered > 0 && covered > b.disruptions_allowed;
      }
      sched_->SetShielded(job.id, shielded);
    } else if (rec.phase == core::Phase::kSignaled && now - job.evict_asked >= 1000) {
      for (const std::string& uid : job.pods) {
        auto p = pods_.find(uid);
        if (p != pods_.end() && !evicting_.contains(uid))
          Evict(p->second, rec.spec.grace, "preempted (asked again)");
      }
      job.evict_asked = now;
    }
  }
}

void Driver::Decide() {
  const core::Ticks now = Now();
  const std::vector<core::Decision>& decisions = sched_->Schedule(now);
  std::vector<core::Decision> copy(decisions.begin(), decisions.end());
  for (const core::Decision& d : copy) {
    auto k = by_id_.find(d.job.v);
    if (k == by_id_.end()) continue;
    Job& job = jobs_[k->second];
    const core::JobRecord& rec = sched_->job(d.job);
    switch (d.kind) {
      case core::Decision::Kind::kStart: {
        // A gang's pods bound in one pass, worker i to its node.
        std::vector<std::string> bound;
        for (size_t i = 0; i < rec.alloc.size() && i < job.pods.size(); ++i) {
          auto p = pods_.find(job.pods[i]);
          if (p == pods_.end()) continue;
          const std::string& node = view_.cluster.node(rec.alloc[i].node).name;
          if (Bind(p->second, node)) bound.push_back(job.pods[i]);
        }
        if (bound.size() != job.pods.size()) {
          // Some binding failed: the bound ones go (the gang is all or nothing) and the
          // job is placed again once its pods are back.
          for (const std::string& uid : bound)
            Evict(pods_[uid], 0, "its gang could not be bound whole");
        }
        job.pods = bound;
        log::Info("kubernetes: bound", {{"job", job.key}, {"pods", std::to_string(bound.size())}});
        break;
      }
      case core::Decision::Kind::kPreempt: {
        job.evict_asked = now;
        const auto by = by_id_.find(d.by.v);
        for (const std::string& uid : job.pods) {
          auto p = pods_.find(uid);
          if (p != pods_.end())
            Evict(p->second, rec.spec.grace,
                  "preempted for " + (by != by_id_.end() ? by->second : "another job") + ": " +
                      d.reason);
        }
        break;
      }
      case core::Decision::Kind::kReject:
        refused_[job.key] = d.reason;
        for (const std::string& uid : job.pods) {
          if (auto p = pods_.find(uid); p != pods_.end())
            SetWaiting(p->second, "can never run on these nodes: " + d.reason);
        }
        Forget(job);  // the core ended it already
        break;
      case core::Decision::Kind::kWait:
        for (const std::string& uid : job.pods) {
          if (auto p = pods_.find(uid); p != pods_.end() && p->second.node_name.empty())
            SetWaiting(p->second, d.reason);
        }
        break;
    }
  }
}

// Each PodGroup's status, as scheduler-plugins' coscheduling keeps it: Pending while its
// gang waits, Scheduled once bound, Running when minMember pods run, Finished when its
// pods ended; with the pods' counts. Written only when it changed.
void Driver::UpdateGroups() {
  struct Counts {
    int pods = 0, bound = 0, running = 0, succeeded = 0, failed = 0;
  };
  std::map<std::string, Counts> counts;
  for (const auto& [uid, p] : pods_) {
    if (p.group.empty() || !Ours(p)) continue;
    Counts& c = counts[p.ns + "/" + p.group];
    ++c.pods;
    c.bound += !p.node_name.empty() && !p.terminal();
    c.running += p.phase == "Running";
    c.succeeded += p.phase == "Succeeded";
    c.failed += p.phase == "Failed";
  }
  for (const auto& [key, g] : groups_) {
    const Counts c = counts[key];
    std::string phase = "Pending";
    if (c.pods > 0 && c.succeeded + c.failed == c.pods)
      phase = c.failed > 0 ? "Failed" : "Finished";
    else if (c.running >= g.min_member)
      phase = "Running";
    else if (c.bound >= g.min_member)
      phase = "Scheduled";
    json status = {
        {"phase", phase}, {"running", c.running}, {"succeeded", c.succeeded}, {"failed", c.failed}};
    if (phase != "Pending") status["occupiedBy"] = config_.kubernetes.scheduler_name;
    const std::string text = status.dump();
    auto& last = group_status_[key];
    if (last == text) continue;
    auto r = api_.Request("PATCH",
                          "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/" + g.ns + "/podgroups/" +
                              g.name + "/status",
                          json{{"status", status}}.dump(), "application/merge-patch+json");
    if (r && r->status == 200) last = text;
  }
  for (auto it = group_status_.begin(); it != group_status_.end();) {
    it = groups_.contains(it->first) ? std::next(it) : group_status_.erase(it);
  }
}

void Driver::Pass() {
  if (!synced()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const bool rebuilt = rebuild_ || sched_ == nullptr;
  if (rebuilt) Rebuild();
  if (sched_ == nullptr) return;
  SyncJobs();
  if (rebuild_) {  // a pod selected nodes in a new way
    Rebuild();
    SyncJobs();
  }
  if (rebuilt) {  // what a node joining, leaving or changing costs (docs/kubernetes.md)
    const auto ms =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    log::Info("kubernetes: nodes and running jobs re-read",
              {{"ms", std::to_string(static_cast<double>(ms) / 1000.0)},
               {"jobs", std::to_string(sched_->job_records())}});
  }
  Decide();
  UpdateGroups();
}

}  // namespace

int RunScheduler(const spec::ClusterConfig& config, const Credentials& creds,
                 const SchedulerOptions& options, const std::atomic<bool>& stop) {
  {
    Client probe(creds);
    auto v = probe.Request("GET", "/version");
    if (!v || v->status != 200) {
      log::Error("kubernetes: the API server does not answer",
                 {{"server", creds.host + ":" + creds.port},
                  {"error", v ? "HTTP " + std::to_string(v->status) + ": " + v->body.substr(0, 300)
                              : v.error().ToString()}});
      return 1;
    }
    json ver = json::parse(v->body, nullptr, false);
    log::Info("kubernetes: connected",
              {{"server", creds.host + ":" + creds.port},
               {"version", ver.is_object() ? ver.value("gitVersion", "?") : "?"},
               {"scheduler_name", config.kubernetes.scheduler_name}});
  }
  // Only the leader watches and schedules: a standby holds no state to go stale.
  Client lease_client(creds);
  LeaseElector elector(lease_client, options.lease);
  if (options.elect && !elector.Acquire(stop)) return 0;
  std::atomic<bool> lost{false};
  std::thread renewer;
  if (options.elect) {
    log::Info("kubernetes: leading", {{"lease", options.lease.ns + "/" + options.lease.name},
                                      {"identity", options.lease.identity}});
    renewer = std::thread([&] { lost = !elector.KeepRenewing(stop); });
  }
  Mailbox box;
  // Watches block in reads: each has its own client, interrupted at stop.
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::thread> threads;
  for (Resource r : {Resource::kNodes, Resource::kPods, Resource::kGroups, Resource::kBudgets}) {
    clients.push_back(std::make_unique<Client>(creds, 300));
    Client* c = clients.back().get();
    threads.emplace_back([r, &box, &stop, c] { WatchLoop(r, box, stop, *c); });
  }
  Driver driver(config, creds, options);
  const auto idle = std::chrono::milliseconds(static_cast<int64_t>(options.idle_pass_s * 1000));
  while (!stop && !lost) {
    std::deque<Event> events = box.Take(idle);
    for (Event& e : events) driver.Apply(e);
    // Events come in bursts (a Job's pods, a gang's bindings echoed back): a pass per
    // burst, not per event.
    driver.Pass();
  }
  // A watch may be between two reads when interrupted: interrupt until all have ended.
  std::atomic<int> ended{0};
  std::thread joiner([&] {
    for (auto& t : threads) t.join();
    ended = 1;
  });
  while (ended == 0) {
    for (auto& c : clients) c->Interrupt();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  joiner.join();
  if (renewer.joinable()) {
    if (lost) {
      renewer.join();
      return 1;
    }
    renewer.join();  // stop: it gives the Lease up
  }
  return 0;
}

}  // namespace gantry::kube
