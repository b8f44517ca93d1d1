#include "kube/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "core/placement.h"
#include "core/scheduler.h"
#include "kube/objects.h"
#include "server/accounts.h"
#include "server/api_backend.h"
#include "server/authenticator.h"
#include "server/cluster_history.h"
#include "server/http_api.h"
#include "server/http_server.h"
#include "server/mailbox.h"
#include "server/metrics.h"
#include "server/state.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

// kResults: not a resource, the Writer's answers to bindings (obj: uid, ok, error);
// kCall: an API call (gantry ls, show, queues) run on the scheduling thread.
enum class Resource : uint8_t {
  kNodes,
  kPods,
  kGroups,
  kBudgets,
  kSlices,
  kClaims,
  kClasses,
  kNamespaces,
  kResults,
  kCall
};
constexpr int kWatched = static_cast<int>(Resource::kResults);
constexpr const char* kPaths[] = {"/api/v1/nodes",
                                  "/api/v1/pods",
                                  "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                                  "/apis/policy/v1/poddisruptionbudgets",
                                  "/apis/resource.k8s.io/v1/resourceslices",
                                  "/apis/resource.k8s.io/v1/resourceclaims",
                                  "/apis/resource.k8s.io/v1/deviceclasses",
                                  "/api/v1/namespaces"};
constexpr const char* kNames[] = {
    "nodes",          "pods",           "podgroups",     "poddisruptionbudgets",
    "resourceslices", "resourceclaims", "deviceclasses", "namespaces"};

class Driver;

struct Event {
  Resource res;
  enum class Type : uint8_t { kReset, kUpsert, kDelete } type;
  json obj;                                // kReset: the list's items
  std::function<void(Driver*)> call = {};  // kCall; nullptr: the scheduler is stopping
};

// The events the watch threads (and the API's calls) hand to the scheduling thread.
using Mailbox = server::Mailbox<Event>;

// What went wrong with a request, for the log: the status and the start of the body, or
// the transport error.
std::string Failure(const Result<Response>& r) {
  return r ? "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300)
           : r.error().ToString();
}

// A ResourceClaim's status subresource, where its allocation is written.
std::string ClaimStatusPath(const std::string& ns, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name + "/status";
}

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
      if (list && (list->status == 404 || list->status == 403) && res != Resource::kNodes &&
          res != Resource::kPods) {
        // No PodGroup CRD installed, or no resource.k8s.io/v1 (Kubernetes before 1.34), or
        // a role without it (an install from before DRA): groups, or claims, are unknown
        // until they are (namespaces: their labels, which namespaceSelectors read).
        if (!absent_logged) {
          log::Warn(list->status == 404
                        ? "kubernetes: resource not served; pods that need it wait until it is"
                        : "kubernetes: resource not allowed to this scheduler (RBAC); pods "
                          "that need it wait until it is",
                    {{"resource", name}});
          // Known to be empty: the first pass needs every kind listed (Driver::synced).
          box.Push(Event{res, Event::Type::kReset, json::array()});
        }
        absent_logged = true;
        backoff_ms = 5'000;
      } else {
        log::Warn("kubernetes: list failed", {{"resource", name}, {"error", Failure(list)}});
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

// Now as an RFC 3339 time in whole seconds (conditions' and events' timestamps).
std::string Now3339() {
  const int64_t ms = WallMs();
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What the HTTP threads read without the scheduling thread (/healthz's role).
struct Published {
  std::atomic<bool> leading{false};
};

// The API writes that need no answer before the next pass, off the scheduling thread, on
// a few connections of their own: bindings first (a pass binds a whole gang; one request
// each, ~5-10 ms on loopback, so one connection bound ~120 pods/s), then PodScheduled
// conditions with their FailedScheduling events, the latest message per pod only (a pod
// whose reason changed twice before its first write is written once), then other events
// (a queue's budget spent or renewed). Each binding's
// answer comes back through the mailbox (Resource::kResults).
class Writer {
 public:
  struct BindOp {
    std::string ns, name, uid, node;
    // Resource claims' allocations, written first (path, merge patch), as kube-scheduler
    // does before binding a pod with claims.
    std::vector<std::pair<std::string, std::string>> claims;
  };
  struct StatusOp {
    std::string ns, name, uid, text;
  };
  // A Kubernetes Event about an object (`kubectl get events`, `kubectl describe`).
  struct EventOp {
    std::string ns, kind, name, uid, reason, message;
    bool warning = false;
  };

  Writer(const Credentials& creds, int threads, Mailbox& box, std::string component)
      : box_(box), component_(std::move(component)) {
    for (int i = 0; i < threads; ++i) {
      clients_.push_back(std::make_unique<Client>(creds));
      Client* c = clients_.back().get();
      threads_.emplace_back([this, c] { Loop(*c); });
    }
  }
  ~Writer() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& c : clients_) c->Interrupt();
    for (auto& t : threads_) t.join();
  }
  void Bind(BindOp op) {
    {
      std::lock_guard lock(mu_);
      binds_.push_back(std::move(op));
    }
    cv_.notify_one();
  }
  void Status(StatusOp op) {
    {
      std::lock_guard lock(mu_);
      auto [it, fresh] = statuses_.insert_or_assign(op.uid, op);
      if (fresh) status_order_.push_back(op.uid);
    }
    cv_.notify_one();
  }
  void Post(EventOp op) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(op));
    }
    cv_.notify_one();
  }
  // The status write of a pod that went away is dropped.
  void Drop(const std::string& uid) {
    std::lock_guard lock(mu_);
    statuses_.erase(uid);
  }

 private:
  void Loop(Client& c) {
    std::unique_lock lock(mu_);
    while (true) {
      // A pod's status waits while an earlier one of the same pod is being written on
      // another connection: the two PATCHes could land in either order, and the pod keep
      // the older message while the driver believes it said the newer (seen: a pod left
      // saying its claim was not made yet, long after the reason had changed).
      auto next_status = [&] {
        return std::find_if(status_order_.begin(), status_order_.end(),
                            [&](const std::string& uid) { return !writing_.contains(uid); });
      };
      // A binding waits, too, while a status of its pod is being written (it would land
      // after the binding and say the bound pod is unschedulable).
      auto next_bind = [&] {
        return std::find_if(binds_.begin(), binds_.end(),
                            [&](const BindOp& b) { return !writing_.contains(b.uid); });
      };
      cv_.wait(lock, [&] {
        return stop_ || next_bind() != binds_.end() || next_status() != status_order_.end() ||
               !events_.empty();
      });
      if (stop_) return;
      if (auto b = next_bind(); b != binds_.end()) {
        BindOp op = std::move(*b);
        binds_.erase(b);
        lock.unlock();
        DoBind(c, op);
        lock.lock();
        continue;
      }
      // Statuses and events take turns (a stream of statuses must not hold a budget's
      // event back); binds go first.
      const auto ready = next_status();
      if (!events_.empty() && (ready == status_order_.end() || event_turn_)) {
        event_turn_ = false;
        EventOp op = std::move(events_.front());
        events_.pop_front();
        lock.unlock();
        DoEvent(c, op);
        lock.lock();
        continue;
      }
      event_turn_ = true;
      const std::string uid = *ready;
      status_order_.erase(ready);
      auto it = statuses_.find(uid);
      if (it == statuses_.end()) continue;
      StatusOp op = std::move(it->second);
      statuses_.erase(it);
      writing_.insert(uid);
      lock.unlock();
      DoStatus(c, op);
      lock.lock();
      writing_.erase(uid);
      cv_.notify_all();  // a newer status of the pod may wait for this one
    }
  }

  void DoBind(Client& c, const BindOp& op) {
    for (const auto& [path, patch] : op.claims) {
      auto r = c.Request("PATCH", path, patch, "application/merge-patch+json");
      if (!r || r->status != 200) {
        const std::string error = "claim allocation: " + Failure(r);
        log::Warn("kubernetes: binding failed",
                  {{"pod", op.ns + "/" + op.name}, {"node", op.node}, {"error", error}});
        box_.Push(Event{Resource::kResults, Event::Type::kUpsert,
                        json{{"uid", op.uid}, {"ok", false}, {"error", error}}});
        return;
      }
    }
    json b = {{"apiVersion", "v1"},
              {"kind", "Binding"},
              {"metadata", {{"name", op.name}, {"namespace", op.ns}, {"uid", op.uid}}},
              {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", op.node}}}};
    auto r = c.Request("POST", "/api/v1/namespaces/" + op.ns + "/pods/" + op.name + "/binding",
                       b.dump());
    const bool ok = r && r->status == 201;
    std::string error;
    if (!ok) {
      error = Failure(r);
      log::Warn("kubernetes: binding failed",
                {{"pod", op.ns + "/" + op.name}, {"node", op.node}, {"error", error}});
    }
    box_.Push(Event{Resource::kResults, Event::Type::kUpsert,
                    json{{"uid", op.uid}, {"ok", ok}, {"error", error}}});
  }

  void DoStatus(Client& c, const StatusOp& op) {
    const std::string now = Now3339();
    json patch = {{"status",
                   {{"conditions", json::array({{{"type", "PodScheduled"},
                                                 {"status", "False"},
                                                 {"reason", "Unschedulable"},
                                                 {"message", op.text},
                                                 {"lastTransitionTime", now}}})}}}};
    auto r = c.Request("PATCH", "/api/v1/namespaces/" + op.ns + "/pods/" + op.name + "/status",
                       patch.dump(), "application/strategic-merge-patch+json");
    if (!r || (r->status != 200 && r->status != 404)) {
      log::Warn("kubernetes: cannot set PodScheduled",
                {{"pod", op.ns + "/" + op.name}, {"error", Failure(r)}});
      return;
    }
    if (r->status == 404) return;
    // An Event too, so `kubectl describe pod` lists it, as kube-scheduler's FailedScheduling.
    DoEvent(c, EventOp{op.ns, "Pod", op.name, op.uid, "FailedScheduling", op.text, true});
  }

  void DoEvent(Client& c, const EventOp& op) {
    const std::string now = Now3339();
    // (The API wants the object's namespace to be the event's, a Namespace's too.)
    json involved = {
        {"kind", op.kind}, {"name", op.name}, {"namespace", op.ns}, {"apiVersion", "v1"}};
    if (!op.uid.empty()) involved["uid"] = op.uid;
    json ev = {{"apiVersion", "v1"},
               {"kind", "Event"},
               {"metadata", {{"generateName", op.name + "."}, {"namespace", op.ns}}},
               {"involvedObject", std::move(involved)},
               {"reason", op.reason},
               {"message", op.message},
               {"type", op.warning ? "Warning" : "Normal"},
               {"source", {{"component", component_}}},
               {"firstTimestamp", now},
               {"lastTimestamp", now},
               {"count", 1}};
    auto r = c.Request("POST", "/api/v1/namespaces/" + op.ns + "/events", ev.dump());
    if (op.kind != "Pod" && (!r || r->status != 201)) {
      log::Warn("kubernetes: cannot post an event",
                {{"namespace", op.ns}, {"reason", op.reason}, {"error", Failure(r)}});
    }
  }

  Mailbox& box_;
  std::string component_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool event_turn_ = false;  // an event goes next, if one waits
  bool stop_ = false;
  std::deque<BindOp> binds_;
  std::deque<EventOp> events_;
  std::map<std::string, StatusOp> statuses_;  // by pod uid
  std::deque<std::string> status_order_;
  std::set<std::string> writing_;  // pods whose status a connection is writing now
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::thread> threads_;
};

class Driver {
 public:
  Driver(const spec::ClusterConfig& config, const Credentials& creds,
         const SchedulerOptions& options, Writer& writer)
      : config_(config), options_(options), api_(creds), writer_(writer) {
    const size_t queues = config_.queues.size();
    preemptions_.assign(queues, 0);
    starts_.assign(queues, 0);
    for (size_t i = 0; i < queues * core::kTierCount; ++i) wait_.emplace_back(kWaitBounds);
  }

  void Apply(Event& e);
  void Pass();
  // The API's answers in this mode (KubeApi): GET /v1/jobs, /v1/jobs/NAME, /v1/queues.
  server::Reply JobsReply(const server::JobQuery& q);
  server::Reply ShowReply(const std::string& name);
  server::Reply QueuesReply();
  server::Reply NodesReply();
  server::Reply UsageReply(double from_s, double to_s);  // GET /v1/usage
  server::Reply HistoryReply(double since_unix_s) {      // GET /v1/cluster/history
    server::Reply r;
    r.body = history_.Body(since_unix_s);
    return r;
  }
  std::string Metrics() const;  // GET /metrics
  // Logs a queue's budget spent or renewed once, as it happens (after each pass).
  void NoteBudgets();
  std::vector<uint8_t> budget_out_;  // by queue: its budget was spent at the last pass
  // Every watched kind listed once (or known not served): before that a pass would miss
  // what holds capacity (a gang's bound pods wait for their PodGroup to be adopted, a
  // claim's pods for their claims) and could bind other pods onto it.
  bool synced() const {
    return std::all_of(std::begin(synced_), std::end(synced_), [](bool b) { return b; });
  }

 private:
  struct Job {
    std::string key;
    core::JobId id;                 // in the core (valid) or not yet
    std::vector<std::string> pods;  // uids: the pending pods it was submitted with, then
                                    // the pods bound, worker i on alloc[i]
    bool lone = true;
    int preemptions = 0;
    core::Ticks first_seen = 0;
    core::Ticks evict_asked = 0;                   // when its pods' eviction was last asked
    core::Ticks first_start = -1, run_start = -1;  // when bound first, and this run
    // An elastic gang shrunk: the pods evicted above its size, whose GPUs the core holds
    // until they are gone (Scheduler::RunBegan then).
    std::vector<std::string> shrunk;
    // Where it may go beyond its pods' specs when it was submitted (ClaimShape, and the
    // nodes pod anti-affinity keeps it off): a waiting job whose claims change (one
    // allocated meanwhile for a pod that shares it), or whose anti-affinity domains do,
    // is submitted anew.
    std::string shape;
    // The pass (Driver::decides_) it was first offered to: submitted to the core, or
    // refused for a reason of its own (not behind another pod). A pod that only prefers
    // where this one goes waits for it to be placed first until then, not after
    // (kube-scheduler moves past a pod it could not place).
    uint64_t offered = UINT64_MAX;
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
  static const std::string& KeyOf(const PodInfo& p) { return p.job; }

  void Rebuild();
  void SyncJobs();
  void Decide();
  int SelectionIndex(const NodeSelection& sel);
  bool PlaceShare(const core::Allocation& alloc, const core::JobSpec& spec, const core::Node& n,
                  core::WorkerAlloc& w) const;
  std::vector<core::GpuState> GpusLeft(const core::Allocation& alloc, const core::Node& n,
                                       core::NodeId id) const;
  bool PlaceMigInstance(const core::Allocation& alloc, const core::JobSpec& spec,
                        const core::Node& n, core::WorkerAlloc& w) const;
  Result<core::Allocation> AllocOf(const std::vector<const PodInfo*>& bound,
                                   const core::JobSpec& spec);
  void SetWaiting(const PodInfo& pod, const std::string& message);
  void Evict(const PodInfo& pod, core::Ticks grace_ms, const std::string& why);
  void Bind(const PodInfo& pod, const std::string& node,
            std::vector<std::pair<std::string, std::string>> claims = {});
  void Forget(Job& job);
  void Resized(Job& job, const core::JobRecord& rec, core::Ticks now);
  void JoinLaterPods(Job& job, const std::vector<const PodInfo*>& group_pods);
  // A pod of the running gang's group not bound with it: one that waits to join it.
  bool WaitsToJoin(const Job& job, const PodInfo& p) const {
    return Live(p) && p.node_name.empty() &&
           std::find(job.pods.begin(), job.pods.end(), p.uid) == job.pods.end();
  }
  // What an elastic gang's pods that wait to join it say.
  static std::string ElasticWait(const core::JobRecord& rec);
  std::string JobName(const Job& job) const;
  std::map<std::string, std::vector<const PodInfo*>> PodsByJob() const;
  json JobJson(const Job& job, std::vector<const PodInfo*> pods, bool details) const;
  void ResolveClaims(PodInfo& p);
  NodeGpus GpusFor(const std::string& node) const;
  void RefreshNodeGpus(const std::string& node);
  bool ClearStaleClaims(const PodInfo& p);
  std::vector<std::string> DevicesOf(const core::WorkerAlloc& w) const;
  bool AdoptDevices(const PodInfo& p, const core::JobSpec& spec, core::WorkerAlloc& w) const;
  std::string SharedClaimWait(
      const PodInfo& p, bool lone,
      const std::map<std::string, std::vector<const PodInfo*>>& claim_users) const;
  static std::string ClaimShape(const std::vector<const PodInfo*>& pods);
  // Required pod affinity, anti-affinity and topology spread for a waiting job's pods
  // (docs/kubernetes.md): the nodes they must keep off and, with affinity or spread, the
  // only ones they may use (each ascending), with their names; or why they wait (for a pod
  // of ours created before them that they must be kept apart from, placed beside or
  // counted with, for a pod their affinity selects, or a constraint Gantry cannot keep).
  // `repellers`: the live pods with anti-affinity terms of their own.
  struct KeepOff {
    std::vector<core::NodeId> nodes, only;
    bool restricted = false;        // `only` applies
    std::string names, only_names;  // of `nodes` and `only`
    std::string wait;
    bool behind = false;  // `wait`: behind a pod of ours that must be placed first
    // It waits behind pod `q` of ours, placed first, for `why`.
    void Behind(const PodInfo& q, const std::string& why) {
      wait = "waiting for pod " + q.name + " to be placed first (" + why + ")";
      behind = true;
    }
    std::string Shape() const {
      return names + (restricted ? "|" + only_names : "") +
             (preferred_names.empty() ? "" : "~" + preferred_names);
    }
    bool one_per_node = false;  // the gang's own pods keep apart, one per node
    bool one_node = false;      // the gang's own pods keep together, on one node
    // Preferred (soft) terms: the nodes' scores other than 0, by node, with their names.
    std::vector<std::pair<core::NodeId, int32_t>> preferred;
    std::string preferred_names;
  };
  KeepOff PodConstraints(const std::vector<const PodInfo*>& pods,
                         const std::vector<const PodInfo*>& repellers) const;
  // The domains of pod `p`'s spread constraint `k` (each eligible node's) and the bound
  // pods it counts in each; and a pod of ours with spread constraints of its own that it
  // counts and that waits to be placed before it (nullptr: none).
  struct SpreadCount {
    std::map<std::string, std::string> domain_of;  // eligible node -> its domain
    std::map<std::string, int64_t> count;          // domain -> pods matched there
    int64_t fewest = 0;  // in any domain (0 while fewer domains than minDomains)
    const PodInfo* first = nullptr;
  };
  // `own`: pods left out (a gang's own), if given.
  // `soft` (a ScheduleAnyway spread): a pod of ours offered to a pass already does not go
  // first (Tried).
  SpreadCount CountSpread(const PodInfo& p, const SpreadConstraint& k,
                          const std::set<std::string>* own = nullptr, bool soft = false) const;
  // Whether pod `q` of ours waits to be placed before `p` (created first): pods that
  // constrain each other are placed one at a time, so two never land together in a pass.
  bool PlacedFirst(const PodInfo& q, const PodInfo& p) const {
    return q.node_name.empty() && Ours(q) && Live(q) && q.problem.empty() &&
           std::tie(q.created_ms, q.name) < std::tie(p.created_ms, p.name);
  }
  // The value of node `name`'s domain of pod term topology key `key`: its own name for
  // kubernetes.io/hostname (every node is a domain of its own), else its label's value;
  // nullptr where it has no such label.
  static const std::string* DomainOf(const std::string& name, const NodeInfo& node,
                                     const std::string& key) {
    if (key == kHostnameLabel) return &name;
    auto v = node.labels.find(key);
    return v == node.labels.end() ? nullptr : &v->second;
  }
  // Whether pod `p`'s spread constraint `k` counts pod `q` (of its namespace, selected).
  static bool Counts(const PodInfo& p, const SpreadConstraint& k, const PodInfo& q) {
    return q.uid != p.uid && q.ns == p.ns && Selects(k.selector, q.labels);
  }
  // The preferred terms of `pods` (`own`: their uids) into `out.preferred`; false where
  // they wait (out.wait) behind a pod of ours their preferred pod terms select.
  bool PreferredScores(const std::vector<const PodInfo*>& pods, const std::set<std::string>& own,
                       KeepOff& out) const;
  // Whether pod `q` of ours has been offered to a pass (Job::offered): pods that merely
  // prefer where it goes no longer wait for it.
  bool Tried(const PodInfo& q) const {
    auto j = jobs_.find(KeyOf(q));
    return j != jobs_.end() && j->second.offered < decides_;
  }
  // Whether pod `q`'s required pod affinity or preferred pod terms select pod `p`: where
  // `q` runs weighs where `p` goes (kube-scheduler's InterPodAffinity scores both sides).
  bool WeighsOn(const PodInfo& q, const PodInfo& p) const {
    auto selects = [&](const PodAffinityTerm& t) { return q.TermSelects(t, p, namespaces_); };
    auto weighted = [&](const WeightedPodAffinityTerm& w) { return selects(w.term); };
    return std::any_of(q.affinity.begin(), q.affinity.end(), selects) ||
           std::any_of(q.preferred_affinity.begin(), q.preferred_affinity.end(), weighted) ||
           std::any_of(q.preferred_anti_affinity.begin(), q.preferred_anti_affinity.end(),
                       weighted);
  }
  std::vector<std::pair<std::string, std::string>> ClaimWrites(const PodInfo& p,
                                                               const core::WorkerAlloc& w) const;
  void UpdateGroups();
  void Shield();
  void RecordRuns();
  // Set by SyncJobs: a job waits behind a pod of ours to be placed first (pods that
  // constrain each other are placed one at a time, a pass each).
  bool behind_ = false;
  // Our live pods not placed yet (no problem of their own), oldest first (SyncJobs): a
  // waiting pod behind one of them is found among these before any walk of every pod.
  std::vector<const PodInfo*> unplaced_;
  // The live bound pods (any scheduler's) with required pod affinity or preferred pod terms
  // of their own (SyncJobs): their terms that select a waiting pod weigh where it goes.
  std::vector<const PodInfo*> weighers_;
  uint64_t decides_ = 0;  // Decide() calls so far
  // The nodes with PreferNoSchedule taints, with those taints (Rebuild): a pod that does
  // not tolerate them goes elsewhere while elsewhere has room.
  std::vector<std::pair<size_t, std::vector<Taint>>> soft_tainted_;  // by place in nodes_

  const spec::ClusterConfig& config_;
  SchedulerOptions options_;
  Client api_;
  mutable core::Ticks last_now_ = 0;
  bool synced_[kWatched] = {};

  std::map<std::string, NodeInfo> nodes_;
  std::unordered_map<std::string, PodInfo> pods_;  // by uid
  std::map<std::string, GroupInfo> groups_;        // by namespace/name
  std::map<std::string, BudgetInfo> budgets_;      // by namespace/name
  NamespaceLabels namespaces_;                     // for pod affinity terms' namespaceSelector
  // Dynamic Resource Allocation (kube/dra.h).
  std::map<std::string, SliceInfo> slices_;                   // by name
  std::map<std::string, std::set<std::string>> node_slices_;  // node -> slice names
  std::map<std::string, ClaimInfo> claims_;                   // by namespace/name
  std::map<std::string, ClassInfo> classes_;                  // by name
  std::map<std::string, DeviceAsk> asks_;                     // pod uid -> what its claims ask
  std::set<std::string> claim_pods_;                          // uids of our pods with claims
  std::set<std::string> reserved_;                            // pod uids some claim is reserved for
  std::set<std::string> foreign_claims_;  // claims whose devices the view counts as held
  // Our bound pods on their way out (evicted, deleted) when the view was built: they hold
  // their GPUs, as their kubelet holds the devices, until they are gone (then a rebuild).
  std::set<std::string> leaving_;
  // A preemptor's key -> the pods evicted for it that may still be leaving: after a
  // rebuild (which forgets it asked) it waits for them instead of asking for more.
  std::map<std::string, std::set<std::string>> victims_of_;
  bool claims_changed_ = false;
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
  Writer& writer_;
  std::unordered_map<std::string, std::string> asked_message_;  // uid -> PodScheduled text queued
  std::set<std::string> bind_failed_;                           // uids whose binding failed
  // Bindings sent and not yet seen in the watch: uid -> node. A pod event older than the
  // binding must not make the pod look unbound again.
  std::unordered_map<std::string, std::string> binding_;
  // For /metrics: since this gantryd started leading.
  static inline const std::vector<double> kWaitBounds = {
      0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400};
  // Gantry's own accounting (with --db, server/accounts.h): a run row per bound pod of
  // ours, opened when it is bound or adopted and ended once it no longer holds its GPUs,
  // for gantry usage, and fair share and budgets that outlive a restart.
  struct RunRow {
    server::StoredRun row;
    bool stored = false;  // StartRun succeeded (a failed write is tried again next pass)
    uint64_t held = 0;    // the last pass (runs_pass_) whose running jobs held its pod
  };
  uint64_t runs_pass_ = 0;
  std::unordered_map<std::string, RunRow> runs_;  // by pod uid
  std::map<int64_t, server::StoredRun> stale_;    // open rows read at start, not yet matched
  bool runs_read_ = false;
  bool ledger_failing_ = false;
  // The console's cluster history, as agent mode keeps it (in the store with --db).
  server::ClusterHistory history_{config_.queues, 60'000, 1440};
  bool history_read_ = false;
  std::vector<server::Histogram> wait_;  // by queue x tier: first seen to bound
  server::Histogram pass_latency_{
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::vector<uint64_t> preemptions_, starts_;  // by queue
  uint64_t grown_ = 0, shrunk_ = 0;             // elastic gangs' resizes
  uint64_t binds_ = 0, bind_failures_ = 0, evictions_ = 0, rebuilds_ = 0;
};

void Driver::Apply(Event& e) {
  if (e.res == Resource::kCall) return e.call(this);
  const int r = static_cast<int>(e.res);
  auto upsert = [&](const json& obj) {
    switch (e.res) {
      case Resource::kNodes: {
        NodeInfo n = ParseNode(obj);
        if (n.name.empty()) return;
        auto it = nodes_.find(n.name);
        n.dra = GpusFor(n.name);
        rebuild_ |= it == nodes_.end() || !(it->second == n);
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
        } else if (p.terminal() && leaving_.erase(p.uid) > 0) {
          rebuild_ = true;  // its GPUs are free now
        }
        if (!p.node_name.empty()) {
          writer_.Drop(p.uid);
          binding_.erase(p.uid);
        } else if (auto b = binding_.find(p.uid); b != binding_.end()) {
          p.node_name = b->second;
        }
        if (!p.claims.empty() && Ours(p)) {
          claim_pods_.insert(p.uid);
          ResolveClaims(p);
        }
        pods_[p.uid] = std::move(p);
        break;
      }
      case Resource::kSlices: {
        SliceInfo sl = ParseSlice(obj);
        if (sl.name.empty()) return;
        if (auto old = slices_.find(sl.name); old != slices_.end() && old->second.node != sl.node) {
          node_slices_[old->second.node].erase(sl.name);
          RefreshNodeGpus(old->second.node);
        }
        node_slices_[sl.node].insert(sl.name);
        const std::string node = sl.node;
        slices_[sl.name] = std::move(sl);
        RefreshNodeGpus(node);
        break;
      }
      case Resource::kClaims: {
        ClaimInfo c = ParseClaim(obj);
        const std::string key = c.ns + "/" + c.name;
        auto it = claims_.find(key);
        // Devices held by claims that are not our running pods' change the nodes the core
        // sees (ours are adopted: they need no rebuild).
        const bool moved = it == claims_.end() || it->second.allocated != c.allocated;
        const bool ours =
            std::any_of(c.reserved_for.begin(), c.reserved_for.end(), [&](const std::string& uid) {
              auto p = pods_.find(uid);
              return p != pods_.end() && Ours(p->second);
            });
        // A shared claim's first pod gone: the next one holds its devices from a rebuild on.
        const bool handed = it != claims_.end() && c.allocated && !c.reserved_for.empty() &&
                            !it->second.reserved_for.empty() &&
                            it->second.reserved_for.front() != c.reserved_for.front();
        if (foreign_claims_.contains(key) || (moved && c.allocated && !ours) || handed)
          rebuild_ = true;
        claims_[key] = std::move(c);
        claims_changed_ = true;
        break;
      }
      case Resource::kClasses: {
        ClassInfo c = ParseClass(obj);
        classes_[c.name] = std::move(c);
        claims_changed_ = true;
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
      case Resource::kNamespaces: {
        auto [name, labels] = ParseNamespace(obj);
        namespaces_[name] = std::move(labels);
        break;
      }
      case Resource::kCall:
        break;  // Apply ran it
      case Resource::kResults: {
        // A binding that succeeded stays noted until the watch shows it: an event of the
        // pod from before it (a status written just before) still says no node, and the
        // pod bound meanwhile would seem to have ended, its GPUs given to another.
        if (obj.value("ok", false)) break;
        const std::string uid = obj.value("uid", "");
        ++bind_failures_;
        bind_failed_.insert(uid);
        if (auto b = binding_.find(uid); b != binding_.end()) {
          if (auto p = pods_.find(uid); p != pods_.end() && p->second.node_name == b->second)
            p->second.node_name.clear();
          binding_.erase(b);
        }
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
      if (e.res == Resource::kClaims) claims_.clear();
      if (e.res == Resource::kClasses) classes_.clear();
      if (e.res == Resource::kNamespaces) namespaces_.clear();
      if (e.res == Resource::kSlices) {
        slices_.clear();
        for (auto& [name, slices] : node_slices_) slices.clear();
        for (const json& item : e.obj) {
          SliceInfo sl = ParseSlice(item);
          node_slices_[sl.node].insert(sl.name);
          slices_[sl.name] = std::move(sl);
        }
        for (auto& [name, n] : nodes_) RefreshNodeGpus(name);
        break;
      }
      for (const json& item : e.obj) upsert(item);
      if (e.res == Resource::kPods)  // bindings of pods gone while the watch was down
        std::erase_if(binding_, [&](const auto& b) { return !pods_.contains(b.first); });
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
        if (leaving_.erase(p.uid) > 0) rebuild_ = true;  // a leaving pod of ours is gone
        pods_.erase(p.uid);
        claim_pods_.erase(p.uid);
        asks_.erase(p.uid);
        evicting_.erase(p.uid);
        asked_message_.erase(p.uid);
        binding_.erase(p.uid);
        bind_failed_.erase(p.uid);
        writer_.Drop(p.uid);
      } else if (e.res == Resource::kGroups) {
        GroupInfo g = ParseGroup(e.obj);
        groups_.erase(g.ns + "/" + g.name);
      } else if (e.res == Resource::kSlices) {
        SliceInfo sl = ParseSlice(e.obj);
        slices_.erase(sl.name);
        node_slices_[sl.node].erase(sl.name);
        RefreshNodeGpus(sl.node);
      } else if (e.res == Resource::kClaims) {
        ClaimInfo c = ParseClaim(e.obj);
        const std::string key = c.ns + "/" + c.name;
        if (foreign_claims_.contains(key)) rebuild_ = true;
        claims_.erase(key);
        claims_changed_ = true;
      } else if (e.res == Resource::kClasses) {
        classes_.erase(ParseClass(e.obj).name);
        claims_changed_ = true;
      } else if (e.res == Resource::kNamespaces) {
        namespaces_.erase(ParseNamespace(e.obj).first);
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
    w.sharing = spec.sharing;
    w.cpus_milli = spec.cpus_milli;
    w.memory_bytes = spec.memory_bytes;
    const core::Node& n = view_.cluster.node(*node);
    if (!p->claims.empty()) {
      if (!AdoptDevices(*p, spec, w))
        return Error{"claims", "the devices of pod " + p->name + "'s claims are not all on node " +
                                   p->node_name + "'s free GPUs"};
      alloc.push_back(w);
      continue;
    }
    if (spec.sharing == core::Sharing::kTimeslice || spec.sharing == core::Sharing::kMps) {
      if (!PlaceShare(alloc, spec, n, w))
        return Error{"share",
                     "node " + p->node_name + " has fewer free replicas than its pods hold"};
      alloc.push_back(w);
      continue;
    }
    if (spec.sharing == core::Sharing::kMig) {
      if (!PlaceMigInstance(alloc, spec, n, w))
        return Error{"mig", "node " + p->node_name + " has fewer free " + spec.mig_profile +
                                " instances than its pods hold"};
      alloc.push_back(w);
      continue;
    }
    const uint64_t all = n.gpus >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.gpus) - 1;
    // Held: by jobs adopted before (the ledger) and by this gang's earlier workers.
    uint64_t held = 0;
    for (int g = 0; g < n.gpus; ++g) {
      if (sched_->ledger().gpu(core::GpuId(n.first_gpu.v + static_cast<uint32_t>(g))).mode !=
          core::GpuMode::kFree)
        held |= uint64_t{1} << g;
    }
    for (const core::WorkerAlloc& other : alloc) {
      if (other.node == *node) held |= other.gpu_mask;
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

// Node `n`'s GPUs (`id`) as the ledger holds them, with what `alloc`'s workers there take
// as well (a gang adopted worker by worker, before any of it is in the ledger).
std::vector<core::GpuState> Driver::GpusLeft(const core::Allocation& alloc, const core::Node& n,
                                             core::NodeId id) const {
  std::vector<core::GpuState> gpus(static_cast<size_t>(n.gpus));
  for (int g = 0; g < n.gpus; ++g)
    gpus[static_cast<size_t>(g)] =
        sched_->ledger().gpu(core::GpuId(n.first_gpu.v + static_cast<uint32_t>(g)));
  for (const core::WorkerAlloc& other : alloc) {
    if (other.node == id)
      core::Ledger::TakeGpus(gpus.data(), other, view_.cluster.catalog(), n.model);
  }
  return gpus;
}

// A MIG worker's instance on node `n` for adoption: the first GPU and start where the
// profile fits, beside what the ledger holds and the instances `alloc` took already.
bool Driver::PlaceMigInstance(const core::Allocation& alloc, const core::JobSpec& spec,
                              const core::Node& n, core::WorkerAlloc& w) const {
  const core::Catalog& catalog = view_.cluster.catalog();
  const int idx = spec.mig_index[n.model.v];
  if (idx < 0) return false;
  const std::vector<core::GpuState> gpus = GpusLeft(alloc, n, w.node);
  const core::MigProfile& profile = catalog.model(n.model).mig_profiles[static_cast<size_t>(idx)];
  for (int g = 0; g < n.gpus; ++g) {
    const int start = core::Ledger::MigStartOn(gpus[static_cast<size_t>(g)], profile);
    if (start < 0) continue;
    w.gpu = static_cast<int8_t>(g);
    w.mig_profile = static_cast<int8_t>(idx);
    w.mig_start = static_cast<int8_t>(start);
    return true;
  }
  return false;
}

// A shared worker's replica on node `n` for adoption: the first GPU with the share (and
// VRAM) left beside what the ledger holds and the replicas `alloc` took already (which
// GPU the device plugin gave it is not known; the count per node is what matters).
bool Driver::PlaceShare(const core::Allocation& alloc, const core::JobSpec& spec,
                        const core::Node& n, core::WorkerAlloc& w) const {
  const std::vector<core::GpuState> gpus = GpusLeft(alloc, n, w.node);
  const int64_t memory = view_.cluster.catalog().model(n.model).memory_bytes;
  for (int g = 0; g < n.gpus; ++g) {
    if (!core::Ledger::ShareFitsOn(gpus[static_cast<size_t>(g)], spec.sharing, spec.share_milli,
                                   spec.vram_bytes, memory))
      continue;
    w.gpu = static_cast<int8_t>(g);
    w.share_milli = static_cast<int16_t>(spec.share_milli);
    w.vram_bytes = spec.vram_bytes;
    return true;
  }
  return false;
}

void Driver::Forget(Job& job) {
  if (job.id.valid()) {
    by_id_.erase(job.id.v);
    sched_->Forget(job.id);
  }
  job.id = core::JobId();
  job.shrunk.clear();
}

// A new core over the current nodes: the jobs that run are adopted, the pending ones
// submitted again in their first-seen order.
void Driver::Rebuild() {
  refused_.clear();
  leaving_.clear();
  soft_tainted_.clear();
  size_t place = 0;
  for (const auto& [name, node] : nodes_) {
    std::vector<Taint> soft;
    for (const Taint& t : node.taints) {
      if (t.effect == "PreferNoSchedule") soft.push_back(t);
    }
    if (!soft.empty()) soft_tainted_.emplace_back(place, std::move(soft));
    ++place;
  }
  std::map<std::string, Usage> foreign;
  for (auto& [uid, p] : pods_) {
    // Other schedulers' pods, and ours that are leaving: a new core adopts only the live
    // pods of ours, and a victim in its grace (a preemption's, a shrink's) still runs.
    const bool leaving = Ours(p) && p.deleting && !p.terminal() && !p.node_name.empty();
    if (leaving) leaving_.insert(uid);
    if ((!Ours(p) && !p.node_name.empty() && Live(p)) || leaving) {
      Usage& u = foreign[p.node_name];
      u.gpus += p.gpus;
      u.cpus_milli += p.cpus_milli;
      u.memory_bytes += p.memory_bytes;
      if (!p.mig_profile.empty()) ++u.mig[p.mig_profile];
    }
    if (Ours(p) && Live(p) && p.problem.empty()) SelectionIndex(p.selection);
  }
  // Devices of claims that are not our bound pods' (those are adopted) are held.
  foreign_claims_.clear();
  std::map<std::string, std::string> pool_node;  // the driver's pool -> its node
  for (const auto& [name, sl] : slices_) pool_node[sl.pool] = sl.node;
  for (const auto& [key, c] : claims_) {
    if (!c.allocated) continue;
    // With the first pod it is reserved for (pods that share it hold none of its devices).
    auto first = c.reserved_for.empty() ? pods_.end() : pods_.find(c.reserved_for.front());
    const bool adopted = first != pods_.end() && Ours(first->second) && Live(first->second) &&
                         !first->second.node_name.empty();
    if (adopted) continue;
    foreign_claims_.insert(key);
    for (const AllocatedDevice& d : c.devices) {
      if (auto node = pool_node.find(d.pool); d.driver == kGpuDriver && node != pool_node.end())
        foreign[node->second].devices.insert(d.device);
    }
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
  // A MIG split's model is priced as its GPU model.
  const core::Catalog& models = view_.cluster.catalog();
  for (size_t m = config_.cluster.catalog().size(); m < models.size(); ++m) {
    auto base = config_.cluster.catalog().Find(
        BaseModelName(models.model(core::ModelId(static_cast<uint32_t>(m))).name));
    if (base && base->v < params.gpu_hour_price.size()) {
      params.gpu_hour_price.resize(m + 1, 1.0);
      params.gpu_hour_price[m] = params.gpu_hour_price[base->v];
    }
  }
  // Elastic gangs (a PodGroup with more pods than its minMember): a pass comes up to an
  // idle pass late after a checkpoint's wakeup; bound pods never move, so a gang grows by
  // binding more of its pods beside the others, and the pods a shrink evicts keep their
  // GPUs until they are gone (docs/kubernetes.md, "Elastic gangs").
  params.checkpoint_slack = static_cast<core::Ticks>(options_.idle_pass_s * 1000) + 1000;
  params.resize_waits_for_run = true;
  params.resize_in_place = true;
  auto sched = std::make_unique<core::Scheduler>(view_.cluster, config_.queues,
                                                 core::MakePolicy(options_.policy), params);
  // Fair share and budgets go on: from the scheduler this one replaces, or at start from
  // the store's runs (pods are adopted at now, so open runs are counted up to now there).
  const core::Ticks now = Now();
  if (sched_ != nullptr) {
    server::CarryAccounts(*sched_, *sched, config_.queues, now);
  } else if (options_.ledger != nullptr) {
    if (Status st =
            server::SeedAccounts(*options_.ledger, config_.queues, config_.cluster.catalog(),
                                 params, *sched, now, WallMs(), false);
        !st) {
      log::Warn(
          "kubernetes: fair share and budgets start from zero: the store's runs cannot be read",
          {{"error", st.error().ToString()}});
    }
  }
  sched_ = std::move(sched);
  by_id_.clear();
  for (auto& [key, job] : jobs_) {
    job.id = core::JobId();
    job.shrunk.clear();  // the new core holds what is bound now
  }
}

void Driver::SetWaiting(const PodInfo& pod, const std::string& message) {
  const std::string text = "gantry: " + message;
  auto& asked = asked_message_[pod.uid];
  if (asked == text || (asked.empty() && pod.scheduled_message == text)) return;
  asked = text;
  writer_.Status(Writer::StatusOp{pod.ns, pod.name, pod.uid, text});
}

void Driver::Bind(const PodInfo& pod, const std::string& node,
                  std::vector<std::pair<std::string, std::string>> claims) {
  ++binds_;
  pods_[pod.uid].node_name =
      node;  // the watch will say so too; a pass before it must not bind again
  binding_[pod.uid] = node;
  // A wait message still queued for it would land after the binding and leave the bound
  // pod saying PodScheduled=False: it is dropped (one being written goes first).
  writer_.Drop(pod.uid);
  asked_message_.erase(pod.uid);
  writer_.Bind(Writer::BindOp{pod.ns, pod.name, pod.uid, node, std::move(claims)});
}

// ------------------------------------------------------------------ DRA (kube/dra.h)

// What a pod's claims ask, from the claims and their classes; until they are all there and
// supported, why it waits. A pod with claims goes only to nodes whose GPUs come through
// DRA, whatever its claims say.
//
// A claim allocated for another pod (the first in its reservedFor) is shared: the pod goes
// to the node of its devices and holds none of them (the first pod's job does, until the
// claim is released or a rebuild finds another pod first).
void Driver::ResolveClaims(PodInfo& p) {
  p.selection.dra = true;
  p.selection.node.clear();
  p.claims_wait.clear();
  asks_.erase(p.uid);
  std::vector<const ClaimInfo*> claims;
  for (PodInfo::ClaimRef& ref : p.claims) {
    ref.shared = false;
    if (ref.claim.empty()) {
      p.claims_wait =
          "waiting for the ResourceClaim of " + ref.name + " to be made from its template";
      return;
    }
    auto c = claims_.find(p.ns + "/" + ref.claim);
    if (c == claims_.end()) {
      p.claims_wait = "waiting for ResourceClaim " + ref.claim;
      return;
    }
    const ClaimInfo& claim = c->second;
    if (!claim.allocated || claim.reserved_for.empty() || claim.reserved_for.front() == p.uid) {
      claims.push_back(&claim);
      continue;
    }
    ref.shared = true;
    std::string node = claim.node;
    for (const AllocatedDevice& d : claim.devices) {
      if (d.driver != kGpuDriver) {
        p.claims_wait = "ResourceClaim " + ref.claim + " holds devices of driver " + d.driver +
                        ", which Gantry does not share";
        return;
      }
      for (const auto& [name, sl] : slices_) {
        if (node.empty() && sl.driver == kGpuDriver && sl.pool == d.pool) node = sl.node;
      }
    }
    if (node.empty()) {
      p.claims_wait = "ResourceClaim " + ref.claim + " is allocated on no node Gantry knows";
      return;
    }
    if (!p.selection.node.empty() && p.selection.node != node) {
      p.claims_wait = "its ResourceClaims are allocated on different nodes (" + p.selection.node +
                      ", " + node + ")";
      return;
    }
    p.selection.node = node;
  }
  auto ask = AskOf(claims, classes_);
  if (!ask) {
    p.claims_wait = ask.error().ToString();
    return;
  }
  p.gpus = ask->gpus;
  p.mig_profile = ask->mig_profile;
  p.selection.dra_mig = ask->mig_profile;
  p.selection.dra_selectors = ask->selectors;
  // matchAttribute on the NVLink domain: the pod's GPUs in one domain.
  if (ask->one_domain) p.annotations.emplace(kTopologyAnnotation, "nvlink");
  asks_[p.uid] = std::move(*ask);
}

NodeGpus Driver::GpusFor(const std::string& node) const {
  std::vector<const SliceInfo*> slices;
  if (auto names = node_slices_.find(node); names != node_slices_.end()) {
    for (const std::string& name : names->second) {
      if (auto sl = slices_.find(name); sl != slices_.end()) slices.push_back(&sl->second);
    }
  }
  return GpusOf(slices);
}

void Driver::RefreshNodeGpus(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeGpus g = GpusFor(node);
  if (g == it->second.dra) return;
  it->second.dra = std::move(g);
  rebuild_ = true;
}

// A claim of a pending pod of ours that is allocated (a crash between its allocation and
// the binding, or a binding that failed after it) is cleared, as kube-scheduler's
// unreserve does, so the pod is placed anew. True while one is.
bool Driver::ClearStaleClaims(const PodInfo& p) {
  bool any = false;
  for (const PodInfo::ClaimRef& ref : p.claims) {
    auto c = claims_.find(p.ns + "/" + ref.claim);
    if (ref.claim.empty() || c == claims_.end() || !c->second.allocated) continue;
    const ClaimInfo& claim = c->second;
    if (claim.reserved_for.size() > 1 ||
        (claim.reserved_for.size() == 1 && claim.reserved_for[0] != p.uid))
      continue;  // in use by another pod: AskOf's caller says so
    any = true;
    json patch = {{"metadata", {{"uid", claim.uid}, {"resourceVersion", claim.resource_version}}},
                  {"status", {{"allocation", nullptr}, {"reservedFor", nullptr}}}};
    auto r = api_.Request("PATCH", ClaimStatusPath(p.ns, claim.name), patch.dump(),
                          "application/merge-patch+json");
    log::Info("kubernetes: stale claim allocation cleared",
              {{"claim", p.ns + "/" + claim.name},
               {"pod", p.name},
               {"result", r && r->status == 200 ? "ok" : Failure(r)}});
  }
  return any;
}

// Why pending pod `p` waits on a claim it shares, if it does: a claim that several pods
// name is allocated for the first of them (bound, or created first), and the others wait
// for that, then share it; pods of a PodGroup do not share claims. "" otherwise.
std::string Driver::SharedClaimWait(
    const PodInfo& p, bool lone,
    const std::map<std::string, std::vector<const PodInfo*>>& claim_users) const {
  if (!p.node_name.empty()) return "";
  for (const PodInfo::ClaimRef& ref : p.claims) {
    const std::string key = p.ns + "/" + ref.claim;
    auto users = claim_users.find(key);
    const bool several = users != claim_users.end() && users->second.size() > 1;
    if (!lone && (several || ref.shared)) {
      return "ResourceClaim " + ref.claim +
             " is shared with another pod: Gantry shares a claim between lone pods, not the pods "
             "of a PodGroup (give each pod its own, from a ResourceClaimTemplate)";
    }
    if (ref.shared || !several) continue;
    if (auto c = claims_.find(key); c != claims_.end() && c->second.allocated) continue;
    for (const PodInfo* q : users->second) {
      const bool first = q != &p && q->problem.empty() && q->claims_wait.empty() &&
                         (!q->node_name.empty() ||
                          std::tie(q->created_ms, q->name) < std::tie(p.created_ms, p.name));
      if (first) {
        return "waiting for ResourceClaim " + ref.claim + " to be allocated for pod " + q->name +
               ", which shares it";
      }
    }
  }
  return "";
}

// What the claims of `pods` made of them (the node selections and devices ResolveClaims
// wrote): "" for pods without claims, whose shape never changes.
std::string Driver::ClaimShape(const std::vector<const PodInfo*>& pods) {
  std::string out;
  for (const PodInfo* p : pods) {
    if (p->claims.empty()) continue;
    out += p->selection.Key() + "/" + std::to_string(p->gpus) + "/" + p->mig_profile + ";";
  }
  return out;
}

Driver::KeepOff Driver::PodConstraints(const std::vector<const PodInfo*>& pods,
                                       const std::vector<const PodInfo*>& repellers) const {
  KeepOff out;
  std::set<std::string> own;
  for (const PodInfo* p : pods) own.insert(p->uid);
  // Adds the nodes of node `at`'s domain of `key` (the nodes with its value of that label).
  auto add_domain = [&](std::set<std::string>& into, const std::string& at,
                        const std::string& key) {
    auto n = nodes_.find(at);
    if (n == nodes_.end()) return;
    const std::string* value = DomainOf(n->first, n->second, key);
    if (value == nullptr) return;  // a node without the label: no domain
    if (key == kHostnameLabel) {
      into.insert(at);  // a domain of its own
      return;
    }
    for (const auto& [name, node] : nodes_) {
      if (const std::string* v = DomainOf(name, node, key); v != nullptr && *v == *value)
        into.insert(name);
    }
  };
  // The topology keys of the anti-affinity terms that keep pods `a` and `b` apart, the
  // terms of either selecting the other.
  auto apart_keys = [&](const PodInfo& a, const PodInfo& b) {
    std::vector<std::string> keys;
    for (const PodAffinityTerm& t : a.anti_affinity) {
      if (a.TermSelects(t, b, namespaces_)) keys.push_back(t.topology_key);
    }
    for (const PodAffinityTerm& t : b.anti_affinity) {
      if (b.TermSelects(t, a, namespaces_)) keys.push_back(t.topology_key);
    }
    return keys;
  };
  // A lone pod behind an unplaced pod of ours that it keeps apart from, or whose spread
  // counts it, waits for it: found among the unplaced pods (a few) before the walks of
  // every live pod below would find it (what a Deployment's replicas mostly meet). So does
  // one that pod's pod affinity terms select, until that pod has been offered to a pass.
  if (pods.size() == 1) {
    const PodInfo& p = *pods.front();
    for (const PodInfo* q : unplaced_) {
      if (!PlacedFirst(*q, p)) break;  // the rest were created after it
      if (!apart_keys(p, *q).empty()) {
        out.Behind(*q, "their pod anti-affinity keeps them apart");
        return out;
      }
      if (!q->spread.empty() &&
          std::any_of(p.spread.begin(), p.spread.end(),
                      [&](const SpreadConstraint& k) { return Counts(p, k, *q); })) {
        out.Behind(*q, "their topology spread counts each other");
        return out;
      }
      if (WeighsOn(*q, p) && !Tried(*q)) {
        out.Behind(*q, "its pod affinity terms weigh where this one goes");
        return out;
      }
    }
  }
  std::set<std::string> off;
  for (const PodInfo* p : pods) {
    for (const PodAffinityTerm& t : p->anti_affinity) {
      for (const PodInfo* q : pods) {
        if (q == p || !p->TermSelects(t, *q, namespaces_)) continue;
        if (t.topology_key != kHostnameLabel) {
          out.wait = "pod anti-affinity between the pods of one gang by " + t.topology_key +
                     " is not supported (by " + kHostnameLabel + ": one pod per node)";
          return out;
        }
        out.one_per_node = true;
      }
    }
    // Others: every live pod where its own terms may select them, else those with terms.
    // False: it waits (out.wait).
    auto keep_apart = [&](const PodInfo& q) {
      if (own.contains(q.uid)) return true;
      const std::vector<std::string> keys = apart_keys(*p, q);
      if (keys.empty()) return true;
      if (PlacedFirst(q, *p)) {
        out.Behind(q, "their pod anti-affinity keeps them apart");
        return false;
      }
      for (const std::string& key : keys) {
        if (!q.node_name.empty()) add_domain(off, q.node_name, key);
      }
      return true;
    };
    if (!p->anti_affinity.empty()) {
      for (const auto& [uid, q] : pods_) {
        if (!q.terminal() && !keep_apart(q)) return out;
      }
    } else {
      for (const PodInfo* q : repellers) {
        if (!keep_apart(*q)) return out;
      }
    }
  }
  // Affinity: each term asks for a domain holding a pod it selects (other than the job's
  // own); with none yet, a pod its term selects itself may go anywhere (the first of its
  // kind), as kube-scheduler has it.
  std::optional<std::set<std::string>> only;
  auto narrow = [&](std::set<std::string> allowed) {
    if (!only) {
      only = std::move(allowed);
    } else {
      std::erase_if(*only, [&](const std::string& n) { return !allowed.contains(n); });
    }
  };
  for (const PodInfo* p : pods) {
    for (const PodAffinityTerm& t : p->affinity) {
      bool with_own = false;
      for (const PodInfo* q : pods) with_own |= q != p && p->TermSelects(t, *q, namespaces_);
      if (with_own) {
        if (t.topology_key != kHostnameLabel) {
          out.wait = "pod affinity between the pods of one gang by " + t.topology_key +
                     " is not supported (by " + kHostnameLabel + ": all on one node)";
          return out;
        }
        out.one_node = true;
        continue;
      }
      std::set<std::string> domain;
      const PodInfo* first = nullptr;  // a pod of ours it selects, waiting before it
      for (const auto& [uid, q] : pods_) {
        if (q.terminal() || own.contains(uid) || !p->TermSelects(t, q, namespaces_)) continue;
        if (!q.node_name.empty()) {
          add_domain(domain, q.node_name, t.topology_key);
        } else if (PlacedFirst(q, *p)) {
          first = &q;
        }
      }
      if (domain.empty()) {
        if (first != nullptr) {
          out.Behind(*first, "its pod affinity asks for its domain");
          return out;
        }
        if (p->TermSelects(t, *p, namespaces_)) continue;  // the first of its kind: anywhere
        out.wait = "waiting for a pod its pod affinity selects to run (none does)";
        return out;
      }
      narrow(std::move(domain));
    }
  }
  // Topology spread (DoNotSchedule): the domains where it keeps the skew within maxSkew. A
  // gang's pods (one template) have one set of constraints.
  const PodInfo& model = *pods.front();
  for (const PodInfo* p : pods) {
    if (p->spread != model.spread) {
      out.wait = "the pods of one gang have different topology spread constraints";
      return out;
    }
  }
  for (const SpreadConstraint& k : model.spread) {
    SpreadCount c = CountSpread(model, k, &own);
    if (c.first != nullptr) {
      out.Behind(*c.first, "their topology spread counts each other");
      return out;
    }
    int64_t self = 0;  // the pods of its own it counts
    for (const PodInfo* p : pods) self += Selects(k.selector, p->labels) ? 1 : 0;
    std::set<std::string> allowed;
    if (self <= 1) {
      for (const auto& [name, d] : c.domain_of) {
        if (c.count[d] + self - c.fewest <= k.max_skew) allowed.insert(name);
      }
    } else {
      // A gang whose pods it counts: kube-scheduler places them one by one, each where the
      // skew then allows. Kept where that is one pod per node: by hostname with maxSkew 1,
      // on the nodes holding the fewest, while there are as many as the gang's pods.
      if (k.topology_key != kHostnameLabel || k.max_skew != 1) {
        out.wait = "topology spread by " + k.topology_key + " with maxSkew " +
                   std::to_string(k.max_skew) +
                   " between the pods of one gang is not supported (by " + kHostnameLabel +
                   " with maxSkew 1: one pod per node)";
        return out;
      }
      for (const auto& [name, d] : c.domain_of) {
        if (c.count[d] == c.fewest) allowed.insert(name);
      }
      if (static_cast<int64_t>(allowed.size()) < self) {
        out.wait = "its topology spread (maxSkew 1 by " + std::string(kHostnameLabel) +
                   ") leaves " + std::to_string(allowed.size()) + " node(s) holding the fewest (" +
                   std::to_string(c.fewest) + ") of the pods it counts for its " +
                   std::to_string(self) + " pods, one each (Gantry places a gang whole)";
        return out;
      }
      out.one_per_node = true;
    }
    narrow(std::move(allowed));
  }
  if (!PreferredScores(pods, own, out)) return out;
  for (const std::string& name : off) {
    if (auto id = view_.cluster.FindNode(name)) out.nodes.push_back(*id);
    out.names += name + ",";
  }
  std::sort(out.nodes.begin(), out.nodes.end());
  if (only) {
    out.restricted = true;
    for (const std::string& name : *only) {
      if (auto id = view_.cluster.FindNode(name)) out.only.push_back(*id);
      out.only_names += name + ",";
    }
    std::sort(out.only.begin(), out.only.end());
  }
  return out;
}

Driver::SpreadCount Driver::CountSpread(const PodInfo& p, const SpreadConstraint& k,
                                        const std::set<std::string>* own, bool soft) const {
  SpreadCount out;
  // The nodes whose domains count: those the pod's selection allows (nodeAffinityPolicy
  // Honor) and whose taints it tolerates (nodeTaintsPolicy Honor), each as asked.
  NodeSelection sel;
  if (k.honour_node_selection) sel = p.selection;
  sel.tolerations =
      k.honour_taints ? p.selection.tolerations : std::vector{Toleration{"", "Exists", "", ""}};
  const bool filter = k.honour_node_selection || k.honour_taints;
  for (const auto& [name, node] : nodes_) {
    auto v = node.labels.find(k.topology_key);
    if (v == node.labels.end() || (filter && !Allows(sel, node))) continue;
    out.domain_of[name] = v->second;
    out.count.emplace(v->second, 0);
  }
  for (const auto& [uid, q] : pods_) {
    if (q.terminal() || !Counts(p, k, q) || (own != nullptr && own->contains(uid))) continue;
    if ((!q.spread.empty() || !q.preferred_spread.empty()) && PlacedFirst(q, p) &&
        !(soft && Tried(q))) {
      out.first = &q;
      return out;
    }
    if (auto d = out.domain_of.find(q.node_name); d != out.domain_of.end()) ++out.count[d->second];
  }
  if (static_cast<int>(out.count.size()) >= k.min_domains && !out.count.empty()) {
    out.fewest = INT64_MAX;
    for (const auto& [d, n] : out.count) out.fewest = std::min(out.fewest, n);
  }
  return out;
}

bool Driver::PreferredScores(const std::vector<const PodInfo*>& pods,
                             const std::set<std::string>& own, KeepOff& out) const {
  // The raw scores of kube-scheduler's plugins that weigh preferences, by node (a node not
  // named scores 0): NodeAffinity (the weights of the preferred node terms a node's labels
  // match), TaintToleration (its PreferNoSchedule taints not tolerated), InterPodAffinity
  // (pod terms' weights by topology key, then by its value, kubernetes.io/hostname's being
  // the node's name: a term's weight once for each pod it selects there, either pod's
  // term) and PodTopologySpread (ScheduleAnyway: the pods counted in the node's domains).
  // Per node, in nodes_' order (vectors: a pass weighs every waiting pod over every node).
  const size_t count = nodes_.size();
  std::vector<int64_t> node_terms, taints;  // sized when first needed: most pods weigh nothing
  std::map<std::string, std::map<std::string, int64_t>> by_domain;
  auto weigh = [&](const std::string& host, const std::string& key, int64_t weight) {
    auto n = nodes_.find(host);
    if (n == nodes_.end()) return;
    if (const std::string* v = DomainOf(n->first, n->second, key)) by_domain[key][*v] += weight;
  };
  for (const PodInfo* p : pods) {
    for (const PreferredNodeTerm& t : p->preferred_nodes) {
      node_terms.resize(count);
      size_t i = 0;
      for (const auto& [name, node] : nodes_) {
        if (MatchesAll(t.match, node.labels)) node_terms[i] += t.weight;
        ++i;
      }
    }
    for (const auto& [i, soft] : soft_tainted_) {
      if (i >= count) continue;
      taints.resize(count);
      for (const Taint& t : soft) taints[i] += !Tolerates(p->selection.tolerations, t);
    }
    for (const bool anti : {false, true}) {
      for (const WeightedPodAffinityTerm& w :
           anti ? p->preferred_anti_affinity : p->preferred_affinity) {
        // Placed one at a time, as for required terms: a pod of ours it selects, created
        // before it and not offered to a pass yet, goes first, so a burst of replicas is
        // weighed one by one (one that waits for room does not hold it back).
        for (const PodInfo* q : unplaced_) {
          if (!PlacedFirst(*q, *p)) break;  // the rest were created after it
          if (!own.contains(q->uid) && p->TermSelects(w.term, *q, namespaces_) && !Tried(*q)) {
            out.Behind(*q, std::string("its preferred pod ") + (anti ? "anti-" : "") +
                               "affinity weighs where that one goes");
            return false;
          }
        }
        for (const auto& [uid, q] : pods_) {
          if (!q.terminal() && !q.node_name.empty() && !own.contains(uid) &&
              p->TermSelects(w.term, q, namespaces_))
            weigh(q.node_name, w.term.topology_key, anti ? -w.weight : w.weight);
        }
      }
    }
    // Bound pods' terms that select it: their preferred affinity adds its weight to their
    // domain, their anti-affinity takes it off, and their required affinity adds 1
    // (kube-scheduler's hardPodAffinityWeight).
    for (const PodInfo* e : weighers_) {
      if (own.contains(e->uid)) continue;
      for (const PodAffinityTerm& t : e->affinity) {
        if (e->TermSelects(t, *p, namespaces_)) weigh(e->node_name, t.topology_key, 1);
      }
      for (const bool anti : {false, true}) {
        for (const WeightedPodAffinityTerm& w :
             anti ? e->preferred_anti_affinity : e->preferred_affinity) {
          if (e->TermSelects(w.term, *p, namespaces_))
            weigh(e->node_name, w.term.topology_key, anti ? -w.weight : w.weight);
        }
      }
    }
  }
  std::vector<int64_t> pod_terms(by_domain.empty() ? 0 : count);
  for (const auto& [key, values] : by_domain) {
    size_t i = 0;
    for (const auto& [name, node] : nodes_) {
      if (const std::string* value = DomainOf(name, node, key)) {
        if (auto w = values.find(*value); w != values.end()) pod_terms[i] += w->second;
      }
      ++i;
    }
  }
  // ScheduleAnyway spreads, as kube-scheduler's PodTopologySpread scores them: a node
  // with every constraint's key scores, per constraint, the pods counted in its domain plus
  // maxSkew - 1, times log(domains + 2); a node without one of the keys is left out.
  std::vector<double> spread;  // sized at the first constraint
  std::vector<uint8_t> spread_out;
  for (const PodInfo* p : pods) {
    for (const SpreadConstraint& k : p->preferred_spread) {
      SpreadCount c = CountSpread(*p, k, &own, /*soft=*/true);
      if (c.first != nullptr) {
        out.Behind(*c.first, "their topology spread counts each other");
        return false;
      }
      spread.resize(count);
      spread_out.resize(count);
      const double weight = std::log(static_cast<double>(c.count.size()) + 2);
      size_t i = 0;
      for (const auto& [name, node] : nodes_) {
        auto d = c.domain_of.find(name);
        if (d == c.domain_of.end()) {
          spread_out[i] = 1;
        } else {
          spread[i] += static_cast<double>(c.count[d->second] + k.max_skew - 1) * weight;
        }
        ++i;
      }
    }
  }
  const bool spreads = !spread.empty();
  if (count == 0 || (node_terms.empty() && taints.empty() && pod_terms.empty() && !spreads))
    return true;  // nothing weighed: every node alike
  // Each normalised to 0-100 as its plugin normalises it, then weighed as kube-scheduler's
  // default profile weighs them (NodeAffinity 2, TaintToleration 3, InterPodAffinity 2,
  // PodTopologySpread 2).
  std::vector<int64_t> score(count);
  node_terms.resize(count);
  taints.resize(count);
  pod_terms.resize(count);
  const int64_t most_terms = *std::max_element(node_terms.begin(), node_terms.end());
  const int64_t most_taints = *std::max_element(taints.begin(), taints.end());
  const auto [lo_terms, hi_terms] = std::minmax_element(pod_terms.begin(), pod_terms.end());
  const int64_t pod_range = *hi_terms - *lo_terms;
  int64_t lo_spread = INT64_MAX, hi_spread = 0;
  std::vector<int64_t> rounded(count);
  for (size_t i = 0; spreads && i < count; ++i) {
    if (spread_out[i] != 0) continue;
    rounded[i] = std::llround(spread[i]);
    lo_spread = std::min(lo_spread, rounded[i]);
    hi_spread = std::max(hi_spread, rounded[i]);
  }
  for (size_t i = 0; i < count; ++i) {
    if (most_terms > 0) score[i] += 2 * (100 * node_terms[i] / most_terms);
    if (most_taints > 0) score[i] += 3 * (100 - 100 * taints[i] / most_taints);
    if (pod_range > 0) score[i] += 2 * (100 * (pod_terms[i] - *lo_terms) / pod_range);
    if (spreads && spread_out[i] == 0) {
      score[i] +=
          2 * (hi_spread == 0 ? 100 : 100 * (hi_spread + lo_spread - rounded[i]) / hi_spread);
    }
  }
  // Only the order counts: the score most nodes have becomes 0, so only the others are
  // named (to the core, and in the job's shape, which a pass compares).
  std::map<int64_t, size_t> how_many;
  for (const int64_t v : score) ++how_many[v];
  int64_t common = 0;
  size_t most = 0;
  for (const auto& [v, n] : how_many) {
    if (n > most) {
      most = n;
      common = v;
    }
  }
  size_t i = 0;
  for (const auto& [name, node] : nodes_) {
    const int64_t total = score[i++] - common;
    if (total == 0) continue;
    if (auto id = view_.cluster.FindNode(name))
      out.preferred.emplace_back(
          *id, static_cast<int32_t>(std::clamp<int64_t>(total, -1 << 30, 1 << 30)));
    out.preferred_names += name + "=" + std::to_string(total) + ",";
  }
  std::sort(out.preferred.begin(), out.preferred.end());
  return true;
}

// The DRA devices of worker `w`: its whole GPUs, or its MIG device at its placement.
std::vector<std::string> Driver::DevicesOf(const core::WorkerAlloc& w) const {
  std::vector<std::string> out;
  const core::Node& node = view_.cluster.node(w.node);
  auto n = nodes_.find(node.name);
  auto local = view_.dra_gpus.find(node.name);
  if (n == nodes_.end() || local == view_.dra_gpus.end()) return out;
  const NodeGpus& g = n->second.dra;
  if (w.sharing == core::Sharing::kExclusive) {
    for (int i = 0; i < node.gpus; ++i) {
      if (w.gpu_mask >> i & 1u)
        out.push_back(g.gpus[static_cast<size_t>(local->second[static_cast<size_t>(i)])].name);
    }
    return out;
  }
  const int parent = local->second[static_cast<size_t>(w.gpu)];
  const std::string& profile = view_.cluster.catalog()
                                   .model(node.model)
                                   .mig_profiles[static_cast<size_t>(w.mig_profile)]
                                   .name;
  for (size_t m = 0; m < g.migs.size(); ++m) {
    if (g.mig_parent[m] == parent && g.migs[m].memory_slices.front() == w.mig_start &&
        std::get<std::string>(g.migs[m].attributes.at(std::string(kGpuDriver) + "/profile")) ==
            profile)
      out.push_back(g.migs[m].name);
  }
  return out;
}

// The claims' allocations a binding of pod `p` for worker `w` writes first.
std::vector<std::pair<std::string, std::string>> Driver::ClaimWrites(
    const PodInfo& p, const core::WorkerAlloc& w) const {
  std::vector<std::pair<std::string, std::string>> out;
  auto ask = asks_.find(p.uid);
  if (ask == asks_.end()) return out;
  const std::vector<std::string> devices = DevicesOf(w);
  const std::string& node = view_.cluster.node(w.node).name;
  size_t next = 0;
  for (const DeviceAsk::Part& part : ask->second.parts) {
    int64_t n = 0;
    for (const auto& [request, count] : part.requests) n += count;
    const size_t end = std::min(devices.size(), next + static_cast<size_t>(n));
    std::vector<std::string> mine(devices.begin() + static_cast<std::ptrdiff_t>(next),
                                  devices.begin() + static_cast<std::ptrdiff_t>(end));
    next = end;
    out.emplace_back(
        ClaimStatusPath(p.ns, part.claim),
        AllocationPatch(part, mine, nodes_.at(node).dra.pool, node, p.name, p.uid).dump());
  }
  for (const PodInfo::ClaimRef& ref : p.claims) {
    auto c = claims_.find(p.ns + "/" + ref.claim);
    if (!ref.shared || c == claims_.end()) continue;
    const auto& reserved = c->second.reserved_for;
    if (std::find(reserved.begin(), reserved.end(), p.uid) == reserved.end())
      out.emplace_back(ClaimStatusPath(p.ns, ref.claim),
                       ReservationPatch(c->second, p.name, p.uid).dump());
  }
  return out;
}

// A bound pod's devices, read back from its claims' allocations (a restart, a rebuild):
// worker `w` then holds exactly those. False if they are not all on its node's view.
bool Driver::AdoptDevices(const PodInfo& p, const core::JobSpec& spec, core::WorkerAlloc& w) const {
  const core::Node& node = view_.cluster.node(w.node);
  auto n = nodes_.find(node.name);
  auto local = view_.dra_gpus.find(node.name);
  if (n == nodes_.end() || local == view_.dra_gpus.end()) return false;
  const NodeGpus& g = n->second.dra;
  auto local_of = [&](int position) {
    auto it = std::find(local->second.begin(), local->second.end(), position);
    return it == local->second.end() ? -1 : static_cast<int>(it - local->second.begin());
  };
  int found = 0;
  for (const PodInfo::ClaimRef& ref : p.claims) {
    auto c = claims_.find(p.ns + "/" + ref.claim);
    if (c == claims_.end()) return false;
    if (ref.shared) continue;  // the devices of the pod it was allocated for
    for (const AllocatedDevice& d : c->second.devices) {
      if (d.driver != kGpuDriver) continue;
      for (size_t i = 0; i < g.gpus.size(); ++i) {
        const int l = g.gpus[i].name == d.device ? local_of(static_cast<int>(i)) : -1;
        if (l >= 0 && spec.sharing == core::Sharing::kExclusive) {
          w.gpu_mask |= uint64_t{1} << l;
          ++found;
        }
      }
      for (size_t m = 0; m < g.migs.size(); ++m) {
        const int l = g.migs[m].name == d.device ? local_of(g.mig_parent[m]) : -1;
        if (l >= 0 && spec.sharing == core::Sharing::kMig && node.model.valid()) {
          w.gpu = static_cast<int8_t>(l);
          w.mig_profile = spec.mig_index[node.model.v];
          w.mig_start = static_cast<int8_t>(g.migs[m].memory_slices.front());
          ++found;
        }
      }
    }
  }
  return spec.sharing == core::Sharing::kMig ? found == 1 : found == spec.gpus;
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
    ++evictions_;
    evicting_.insert(pod.uid);
    log::Info("kubernetes: pod evicted", {{"pod", pod.ns + "/" + pod.name}, {"why", why}});
    return;
  }
  // 429: a PodDisruptionBudget forbids it now; the next pass asks again.
  log::Warn("kubernetes: eviction refused",
            {{"pod", pod.ns + "/" + pod.name}, {"error", Failure(r)}});
}

// Brings the core's jobs in line with the pods: new gangs submitted, ended ones
// finished, running ones adopted after a rebuild.
void Driver::SyncJobs() {
  const core::Ticks now = Now();
  behind_ = false;
  if (claims_changed_) {
    claims_changed_ = false;
    for (const std::string& uid : claim_pods_) {
      if (auto p = pods_.find(uid); p != pods_.end()) ResolveClaims(p->second);
    }
    reserved_.clear();
    for (const auto& [key, c] : claims_)
      reserved_.insert(c.reserved_for.begin(), c.reserved_for.end());
  }
  // The live pods of ours, by job.
  std::map<std::string_view, std::vector<const PodInfo*>> by_key;
  for (const auto& [uid, p] : pods_) {
    if (!Ours(p) || p.terminal()) continue;
    by_key[KeyOf(p)].push_back(&p);
  }
  for (auto& [key, pods] : by_key) {
    std::sort(pods.begin(), pods.end(),
              [](const PodInfo* a, const PodInfo* b) { return a->name < b->name; });
  }
  // The live pods with required pod anti-affinity terms (any scheduler's).
  std::vector<const PodInfo*> repellers;
  unplaced_.clear();
  weighers_.clear();
  for (const auto& [uid, p] : pods_) {
    if (!p.anti_affinity.empty() && !p.terminal()) repellers.push_back(&p);
    if (p.node_name.empty() && Ours(p) && Live(p) && p.problem.empty()) unplaced_.push_back(&p);
    if (!p.node_name.empty() && !p.terminal() &&
        (!p.affinity.empty() || !p.preferred_affinity.empty() ||
         !p.preferred_anti_affinity.empty()))
      weighers_.push_back(&p);
  }
  std::sort(unplaced_.begin(), unplaced_.end(), [](const PodInfo* a, const PodInfo* b) {
    return std::tie(a->created_ms, a->name) < std::tie(b->created_ms, b->name);
  });
  // Each claim's live pods of ours: a claim that several name is allocated for one of
  // them, then shared by the others.
  std::map<std::string, std::vector<const PodInfo*>> claim_users;
  for (const auto& [key, pods] : by_key) {
    for (const PodInfo* p : pods) {
      for (const PodInfo::ClaimRef& ref : p->claims) {
        if (Live(*p) && !ref.claim.empty()) claim_users[p->ns + "/" + ref.claim].push_back(p);
      }
    }
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
        // A pod that ended holds its claims' devices until they are released.
        bound_alive |= reserved_.contains(uid) && (p == pods_.end() || p->second.terminal());
      }
      if (running) {
        // A gang one of whose bindings failed: all or nothing, so its bound pods go.
        bool failed = false;
        for (const std::string& uid : job.pods) failed |= bind_failed_.erase(uid) > 0;
        if (failed) {
          for (const std::string& uid : job.pods) {
            auto p = pods_.find(uid);
            if (p != pods_.end() && !p->second.node_name.empty())
              Evict(p->second, 0, "its gang could not be bound whole");
          }
        }
      }
      if (!job.shrunk.empty() && rec.phase == core::Phase::kRunning) {
        // The pods a shrink evicted are gone: their GPUs are free (the core held them).
        const bool gone =
            std::all_of(job.shrunk.begin(), job.shrunk.end(), [&](const std::string& u) {
              auto p = pods_.find(u);
              return (p == pods_.end() || p->second.terminal()) && !reserved_.contains(u);
            });
        if (gone) {
          sched_->RunBegan(job.id, now);
          job.shrunk.clear();
        }
      }
      if (running && bound_alive && rec.phase == core::Phase::kRunning && !job.lone) {
        if (pods != by_key.end()) JoinLaterPods(job, pods->second);
        // A pod of the gang that ended (succeeded, failed, deleted) while the others run on
        // frees its GPUs, as its kubelet frees them; one whose claims still hold devices
        // waits until they are released.
        std::vector<size_t> gone;
        for (size_t i = 0; i < job.pods.size() && i < rec.alloc.size(); ++i) {
          auto p = pods_.find(job.pods[i]);
          const bool ended = p == pods_.end() || p->second.terminal();
          if (ended && !reserved_.contains(job.pods[i])) gone.push_back(i);
        }
        if (!gone.empty() && gone.size() < rec.alloc.size() &&
            job.pods.size() == rec.alloc.size()) {
          sched_->ReleaseWorkers(job.id, gone, now);
          for (size_t k = gone.size(); k-- > 0;) job.pods.erase(job.pods.begin() + gone[k]);
        }
      }
      if (running && !bound_alive) {
        if (rec.phase == core::Phase::kSignaled && !job.lone) {
          sched_->Requeue(job.id, now);  // the gang waits for its pods to come back
          job.preemptions = rec.preemptions;
          job.pods.clear();
          job.shrunk.clear();
        } else {
          log::Info("kubernetes: job ended", {{"job", JobName(job)}});
          sched_->Finish(job.id, now, true);
          Forget(job);
        }
      } else if (rec.phase == core::Phase::kPending) {
        // A waiting gang whose pods changed (one deleted, one added) is submitted anew.
        std::vector<std::string> now_pods;
        std::vector<const PodInfo*> waiting;
        if (pods != by_key.end()) {
          for (const PodInfo* p : pods->second) {
            if (Live(*p) && p->node_name.empty()) {
              now_pods.push_back(p->uid);
              waiting.push_back(p);
            }
          }
        }
        if (static_cast<int>(now_pods.size()) != rec.spec.replicas ||
            ClaimShape(waiting) + PodConstraints(waiting, repellers).Shape() != job.shape) {
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
      victims_of_.erase(job.key);
      it = jobs_.erase(it);
      continue;
    }
    ++it;
  }
  // Gangs and lone pods not in the core yet.
  for (const auto& [key_view, pods] : by_key) {
    const std::string key(key_view);
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
    auto refuse = [&](const std::string& why, bool behind = false) {
      if (!behind) job.offered = std::min(job.offered, decides_);
      for (const PodInfo* p : pending) SetWaiting(*p, why);
    };
    // Malformed or unsupported pods wait with the reason; they never block others.
    std::string problem;
    for (const PodInfo* p : live) {
      if (!p->problem.empty())
        problem = "pod " + p->name + " is malformed: " + p->problem;
      else if (!p->claims_wait.empty())
        problem = p->claims_wait;
      else if (std::string why = SharedClaimWait(*p, job.lone, claim_users); !why.empty())
        problem = why;
      else if (p->node_name.empty() && ClearStaleClaims(*p))
        problem = "waiting for its ResourceClaims' earlier allocation to be cleared";
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
    // An elastic gang (more pods than minMember) runs with some of its pods bound and the
    // rest waiting to join it: adopted as it runs.
    const bool elastic = !job.lone && want < static_cast<int>(live.size());
    if (elastic && static_cast<int>(bound.size()) >= want) pending.clear();
    if (!bound.empty() && !pending.empty()) {
      // Partly bound: a crash between a gang's bindings. Its bound pods go, so the
      // controller recreates them and the gang is placed whole.
      for (const PodInfo* p : bound) Evict(*p, 0, "its gang was found partly bound");
      continue;
    }
    // A running gang some of whose pods already ended is adopted as it runs now.
    if (bound.empty() && static_cast<int>(live.size()) < want) {
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
    // Required pod (anti-)affinity and topology spread: the nodes it may not and may use.
    KeepOff keep_off;
    if (bound.empty()) {
      keep_off = PodConstraints(live, repellers);
      if (!keep_off.wait.empty()) {
        behind_ |= keep_off.behind;
        refuse(keep_off.wait, keep_off.behind);
        continue;
      }
      if (keep_off.one_per_node) spec->workers_per_node = 1;
      if (keep_off.one_node) spec->topology = core::Topology::kNode;
      spec->not_nodes = keep_off.nodes;
      spec->preferred_nodes = keep_off.preferred;
      if (keep_off.restricted) spec->only_nodes = keep_off.only;
    }
    // Elastic: minMember to all its pods, where its workers are whole GPUs (MIG, shared
    // GPUs and device claims run at one size).
    if (elastic && spec->sharing == core::Sharing::kExclusive && spec->workers_per_node == 0 &&
        live.front()->claims.empty())
      spec->min_replicas = want;
    const auto selection = static_cast<size_t>(SelectionIndex(live.front()->selection));
    if (rebuild_ || selection >= view_.pools_of.size()) return;  // a new selection: rebuild first
    spec->pools = view_.pools_of[selection];
    if (spec->pools.empty()) {
      refused_[key] = live.front()->claims.empty()
                          ? "no node matches its node selection, taints and tolerations"
                          : "no node's devices pass its resource claims' selectors (nor its node "
                            "selection, taints and tolerations)";
      refuse(refused_[key]);
      continue;
    }
    if (auto why = FitDevices(*live.front(), view_, view_.cluster.catalog(), *spec)) {
      refused_[key] = *why;
      refuse(*why);
      continue;
    }
    // Anti-affinity that leaves it no node now waits with why (not refused for good, as
    // the core would: the pods it keeps apart from may go).
    if (!keep_off.nodes.empty() || keep_off.restricted) {
      auto in_pools = [&](core::NodeId n) {
        const core::PoolId p = view_.cluster.node(n).pool;
        return std::find(spec->pools.begin(), spec->pools.end(), p) != spec->pools.end();
      };
      int64_t left = 0;
      if (keep_off.restricted) {
        left = std::count_if(keep_off.only.begin(), keep_off.only.end(), [&](core::NodeId n) {
          return in_pools(n) &&
                 !std::binary_search(keep_off.nodes.begin(), keep_off.nodes.end(), n);
        });
      } else {
        for (core::PoolId p : spec->pools) left += view_.cluster.pool(p).spec.count;
        left -= std::count_if(keep_off.nodes.begin(), keep_off.nodes.end(), in_pools);
      }
      if (left <= 0) {
        refuse(keep_off.restricted
                   ? "its pod affinity or topology spread asks for nodes (" + keep_off.only_names +
                         ") it may not use: not of its selection, or kept off by anti-affinity"
                   : "its pod anti-affinity keeps it off every node it may use (" +
                         std::to_string(keep_off.nodes.size()) +
                         " hold pods it must be kept apart from); it waits for one of them "
                         "to go");
        continue;
      }
    }
    if (auto v = victims_of_.find(key); v != victims_of_.end() && bound.empty()) {
      std::erase_if(v->second, [&](const std::string& uid) {
        auto p = pods_.find(uid);
        return p == pods_.end() || p->second.terminal();
      });
      if (!v->second.empty()) {
        refuse("waiting for the " + std::to_string(v->second.size()) +
               " pod(s) preempted for it to stop");
        continue;
      }
      victims_of_.erase(v);
    }
    job.shape = ClaimShape(live) + keep_off.Shape();
    job.id = sched_->Submit(std::move(*spec), std::min(job.first_seen, now));
    job.offered = std::min(job.offered, decides_);
    by_id_[job.id.v] = key;
    sched_->SetPreemptions(job.id, job.preemptions);
    job.pods.clear();
    if (!bound.empty()) {
      std::string why;
      auto alloc = AllocOf(bound, sched_->job(job.id).spec);
      if (!alloc || !sched_->Adopt(job.id, *alloc, now, &why)) {
        // Tried again after the next rebuild, not every pass.
        refused_[key] = alloc ? why : alloc.error().ToString();
        log::Warn("kubernetes: cannot adopt running pods", {{"job", key}, {"why", refused_[key]}});
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
  ++decides_;
  const core::Ticks now = Now();
  const std::vector<core::Decision>& decisions = sched_->Schedule(now);
  NoteBudgets();
  std::vector<core::Decision> copy(decisions.begin(), decisions.end());
  for (const core::Decision& d : copy) {
    auto k = by_id_.find(d.job.v);
    if (k == by_id_.end()) continue;
    Job& job = jobs_[k->second];
    const core::JobRecord& rec = sched_->job(d.job);
    switch (d.kind) {
      case core::Decision::Kind::kStart: {
        // A gang's pods bound in one pass, worker i to its node (the Writer sends them;
        // a binding that fails comes back as a result, and the gang's other pods go).
        std::vector<std::string> bound;
        std::string nodes;
        for (size_t i = 0; i < rec.alloc.size() && i < job.pods.size(); ++i) {
          auto p = pods_.find(job.pods[i]);
          if (p == pods_.end()) continue;
          const std::string& node = view_.cluster.node(rec.alloc[i].node).name;
          Bind(p->second, node, ClaimWrites(p->second, rec.alloc[i]));
          bound.push_back(job.pods[i]);
          nodes += (nodes.empty() ? "" : ",") + node;
        }
        if (rec.preemptions == 0 && rec.run_total == 0) {  // its first start: how long it waited
          wait_[rec.spec.queue.v * core::kTierCount + static_cast<size_t>(rec.asked_tier)].Observe(
              static_cast<double>(now - job.first_seen) / 1000.0);
        }
        ++starts_[rec.spec.queue.v];
        victims_of_.erase(job.key);
        if (job.first_start < 0) job.first_start = now;
        job.run_start = now;
        // An elastic gang started below its size: its other pods wait to join it.
        for (size_t i = rec.alloc.size(); i < job.pods.size(); ++i) {
          if (auto p = pods_.find(job.pods[i]); p != pods_.end())
            SetWaiting(p->second, ElasticWait(rec));
        }
        job.pods = bound;
        log::Info(
            "kubernetes: bound",
            {{"job", JobName(job)}, {"pods", std::to_string(bound.size())}, {"nodes", nodes}});
        break;
      }
      case core::Decision::Kind::kPreempt: {
        job.evict_asked = now;
        ++preemptions_[rec.spec.queue.v];
        const auto by = by_id_.find(d.by.v);
        for (const std::string& uid : job.pods) {
          if (by != by_id_.end()) victims_of_[by->second].insert(uid);
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
      case core::Decision::Kind::kResize:
        Resized(job, rec, now);
        break;
    }
  }
}

// Pods of a running gang's group that came after it was bound (a Job controller creating
// its pods over several passes, minMember below them): the gang becomes elastic up to all
// of them, and they join it at its checkpoints as an elastic gang's waiting pods do.
void Driver::JoinLaterPods(Job& job, const std::vector<const PodInfo*>& group_pods) {
  const core::JobRecord& rec = sched_->job(job.id);
  std::vector<const PodInfo*> later;
  for (const PodInfo* p : group_pods) {
    if (WaitsToJoin(job, *p)) later.push_back(p);
  }
  const int size = static_cast<int>(rec.alloc.size());
  const int most = size + static_cast<int>(later.size());
  if (later.empty()) return;
  if (most <= rec.spec.replicas) {  // already among its sizes (recreated after a shrink, say)
    if (rec.spec.elastic())
      for (const PodInfo* p : later) SetWaiting(*p, ElasticWait(rec));
    return;
  }
  if (rec.spec.sharing != core::Sharing::kExclusive || rec.spec.workers_per_node > 0 ||
      !later.front()->claims.empty() || size == 0) {
    for (const PodInfo* p : later)
      SetWaiting(*p,
                 "its gang runs at the size it was bound with (MIG, shared GPUs and device "
                 "claims are not elastic): it joins the gang's next run");
    return;
  }
  const auto g = groups_.find(job.key.substr(job.key.find(':') + 1));
  const int least = std::clamp(g != groups_.end() ? g->second.min_member : size, 1, size);
  sched_->SetSizes(job.id, least, most);
  for (const PodInfo* p : later) SetWaiting(*p, ElasticWait(rec));
}

std::string Driver::ElasticWait(const core::JobRecord& rec) {
  return "elastic gang running with " + std::to_string(rec.alloc.size()) + " of its " +
         std::to_string(rec.spec.replicas) + " pods (minMember " +
         std::to_string(rec.spec.min_replicas) +
         "): this one joins at a checkpoint when GPUs are free that no waiting job could use";
}

// An elastic gang resized at a checkpoint: grown, more of its waiting pods are bound
// beside the others (worker i to alloc[i]); shrunk, the pods above its size are evicted
// with its grace, and the core holds their GPUs until they are gone (SyncJobs). The
// workload's elastic launcher (torchrun --nnodes MIN:MAX) sees its members change.
void Driver::Resized(Job& job, const core::JobRecord& rec, core::Ticks now) {
  const size_t had = job.pods.size(), size = rec.alloc.size();
  if (size > had) {
    std::vector<PodInfo*> waiting;  // its pods not bound yet, by name
    for (auto& [uid, p] : pods_) {
      if (KeyOf(p) == job.key && Ours(p) && WaitsToJoin(job, p)) waiting.push_back(&p);
    }
    std::sort(waiting.begin(), waiting.end(),
              [](const PodInfo* a, const PodInfo* b) { return a->name < b->name; });
    std::string nodes;
    std::vector<size_t> unmatched;  // workers whose pod went meanwhile: let go
    for (size_t i = had; i < size; ++i) {
      if (i - had >= waiting.size()) {
        unmatched.push_back(i);
        continue;
      }
      PodInfo& p = *waiting[i - had];
      const std::string& node = view_.cluster.node(rec.alloc[i].node).name;
      Bind(p, node, ClaimWrites(p, rec.alloc[i]));
      job.pods.push_back(p.uid);
      nodes += (nodes.empty() ? "" : ",") + node;
    }
    if (!unmatched.empty()) sched_->ReleaseWorkers(job.id, unmatched, now);
    for (size_t k = size - had; k < waiting.size(); ++k) SetWaiting(*waiting[k], ElasticWait(rec));
    log::Info("kubernetes: elastic gang grown", {{"job", JobName(job)},
                                                 {"from", std::to_string(had)},
                                                 {"pods", std::to_string(job.pods.size())},
                                                 {"nodes", nodes}});
  } else {
    for (size_t i = size; i < had; ++i) {
      if (auto p = pods_.find(job.pods[i]); p != pods_.end()) {
        Evict(p->second, rec.spec.grace,
              "elastic gang shrunk to " + std::to_string(size) + " pods (minMember " +
                  std::to_string(rec.spec.min_replicas) + ") at a checkpoint: work waits for room");
        job.shrunk.push_back(job.pods[i]);
      }
    }
    job.pods.resize(size);
    if (job.shrunk.empty()) sched_->RunBegan(job.id, now);  // nothing to wait for
    log::Info(
        "kubernetes: elastic gang shrunk",
        {{"job", JobName(job)}, {"from", std::to_string(had)}, {"pods", std::to_string(size)}});
  }
  ++(size > had ? grown_ : shrunk_);
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

// A pod's run row: negative ids, so they never meet the job numbers of agent mode.
static int64_t RowId(const std::string& uid) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (unsigned char c : uid) h = (h ^ c) * 1099511628211ULL;
  return -1 - static_cast<int64_t>(h >> 2);
}

void Driver::RecordRuns() {
  server::Store* store = options_.ledger;
  const int64_t now_ms = WallMs();
  bool failed = false;
  if (store != nullptr && !history_read_)
    history_read_ = static_cast<bool>(history_.Restore(*store));
  failed |= (store != nullptr && !history_read_) || !history_.Sample(*sched_, now_ms, store);
  if (store == nullptr) return;  // the history in memory only; no run rows
  if (!runs_read_) {             // the rows left open by the last leader
    auto open = store->Runs(now_ms, std::numeric_limits<int64_t>::max());
    if (!open) {
      failed = true;
    } else {
      runs_read_ = true;
      for (const server::StoredRun& r : *open) {
        if (r.end_ms < 0 && r.job_seq < 0) stale_[r.job_seq] = r;
      }
    }
  }
  // What holds GPUs now: the workers of our running (or evicting) jobs, each row stamped
  // with this pass (one lookup a running pod: a set of them built each pass was a fifth of
  // the passes at 1,000 running pods).
  const uint64_t pass = ++runs_pass_;
  for (const auto& [key, job] : jobs_) {
    if (!job.id.valid()) continue;
    const core::JobRecord& rec = sched_->job(job.id);
    if (rec.phase != core::Phase::kRunning && rec.phase != core::Phase::kSignaled) continue;
    for (size_t i = 0; i < job.pods.size() && i < rec.alloc.size(); ++i) {
      const std::string& uid = job.pods[i];
      auto [it, added] = runs_.try_emplace(uid);
      RunRow& rr = it->second;
      rr.held = pass;
      if (!added) continue;
      rr.row.job_seq = RowId(uid);
      if (auto st = stale_.find(rr.row.job_seq); st != stale_.end()) {  // adopted after a restart
        rr.row = st->second;
        rr.stored = true;
        stale_.erase(st);
        continue;
      }
      const core::Node& node = view_.cluster.node(rec.alloc[i].node);
      rr.row.queue = config_.queues.queue(rec.spec.queue).spec.name;
      if (node.model.valid())  // a MIG split's model (MODEL/SPLIT) is its GPU model's
        rr.row.model = BaseModelName(view_.cluster.catalog().model(node.model).name);
      rr.row.gpus = server::WorkerGpus(rec.alloc[i], view_.cluster);
      rr.row.start_ms = now_ms;
      if (auto p = pods_.find(uid); p != pods_.end()) rr.row.user = p->second.ns;
    }
  }
  // A row ends when its pod no longer holds its node's GPUs (gone or ended), not when the
  // core lets go of it for a while (a pod it could not adopt at once after a restart or a
  // rebuild runs on): a pod has one row (job_seq from its uid, run 0) and a second would
  // replace the first, losing the time before it from usage and fair share.
  auto bound = [&](const std::string& uid) {  // a bound pod of ours that has not ended
    auto p = pods_.find(uid);
    return p != pods_.end() && Ours(p->second) && !p->second.node_name.empty() &&
           !p->second.terminal();
  };
  // The rows to open and to end (those no longer holding GPUs, and those the last leader
  // left open whose pods ended), written in one transaction a pass (a burst of bindings is
  // one commit, not one per pod) and taken into memory only once committed: a failure is
  // tried again whole.
  std::vector<std::string> start, end;
  for (const auto& [uid, rr] : runs_) {
    if (rr.held != pass && !bound(uid))
      end.push_back(uid);
    else if (!rr.stored)
      start.push_back(uid);
  }
  std::vector<int64_t> stale_ended;
  if (runs_read_ && !stale_.empty()) {  // after a restart, until each is matched or ended
    std::unordered_set<int64_t> still;  // the rows (RowId) of bound pods
    for (const auto& [uid, p] : pods_) {
      if (bound(uid)) still.insert(RowId(uid));
    }
    for (const auto& [seq, row] : stale_) {
      if (!still.contains(seq)) stale_ended.push_back(seq);
    }
  }
  if (!start.empty() || !end.empty() || !stale_ended.empty()) {
    bool ok = static_cast<bool>(store->Begin());
    for (int64_t seq : stale_ended) ok = ok && static_cast<bool>(store->EndRun(seq, 0, now_ms));
    for (const std::string& uid : start)
      ok = ok && static_cast<bool>(store->StartRun(runs_[uid].row));
    for (const std::string& uid : end) {
      const RunRow& rr = runs_[uid];
      ok = ok && (!rr.stored || static_cast<bool>(store->EndRun(rr.row.job_seq, 0, now_ms)));
    }
    if (ok && store->Commit()) {
      for (int64_t seq : stale_ended) stale_.erase(seq);
      for (const std::string& uid : start) runs_[uid].stored = true;
      for (const std::string& uid : end) runs_.erase(uid);
    } else {
      store->Rollback();
      failed = true;
    }
  }
  if (failed != ledger_failing_) {
    ledger_failing_ = failed;
    if (failed)
      log::Warn(
          "kubernetes: the store does not take the runs' usage or the cluster history; trying "
          "again each pass");
    else
      log::Info("kubernetes: the store takes the runs' usage and the cluster history again");
  }
}

server::Reply Driver::UsageReply(double from_s, double to_s) {
  if (options_.ledger == nullptr)
    return server::Reply::Error(server::Code::kUnavailable, "usage is kept with --db");
  const int64_t now_ms = WallMs();
  const auto from = static_cast<int64_t>(from_s * 1000);
  const int64_t to = std::min(now_ms, static_cast<int64_t>(to_s * 1000));
  if (to <= from)
    return server::Reply::Error(server::Code::kBadRequest,
                                "the period is empty (--since after --until)");
  auto runs = options_.ledger->Runs(from, to);
  if (!runs)
    return server::Reply::Error(server::Code::kUnavailable,
                                "store unavailable: " + runs.error().ToString());
  server::Reply r;
  r.body = server::UsageBody(std::move(*runs), from, to, now_ms, config_.cluster.catalog(),
                             config_.policy.params, config_.policy.currency, {});
  return r;
}

void Driver::Pass() {
  if (!synced()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const bool rebuilt = rebuild_ || sched_ == nullptr;
  if (rebuilt) Rebuild();
  if (sched_ == nullptr) return;
  SyncJobs();
  for (int again = 0; rebuild_ && again < 3; ++again) {  // a pod selected nodes in a new way
    Rebuild();
    SyncJobs();
  }
  // Still a selection to learn: running pods may be left to adopt, so nothing is decided
  // before the next pass has them all.
  const bool whole = !rebuild_;
  if (rebuilt) ++rebuilds_;
  if (rebuilt) {  // what a node joining, leaving or changing costs (docs/kubernetes.md)
    const auto ms =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    log::Info("kubernetes: nodes and running jobs re-read",
              {{"ms", std::to_string(static_cast<double>(ms) / 1000.0)},
               {"jobs", std::to_string(sched_->job_records())},
               {"nodes", std::to_string(view_.cluster.nodes().size())},
               {"pools", std::to_string(view_.cluster.pools().size())},
               {"gpus", std::to_string(view_.cluster.gpu_count())}});
  }
  if (whole) {
    uint64_t binds = binds_;
    Decide();
    // Pods placed one at a time wait a pass each: while a pass binds one and others wait
    // behind it, the next pass runs now, not after the binding's echo from the watch (tens
    // of milliseconds each), within a tenth of a second.
    while (behind_ && binds != binds_ && !rebuild_ &&
           std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(100)) {
      binds = binds_;
      SyncJobs();
      if (!rebuild_) Decide();
    }
    UpdateGroups();
  }
  RecordRuns();
  pass_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// ------------------------------------------------------------------ the API's answers

// A job's name as gantry ls shows it: NAMESPACE/GROUP for a gang, NAMESPACE/POD for a lone pod.
std::string Driver::JobName(const Job& job) const {
  if (job.key.rfind("group:", 0) == 0) return job.key.substr(6);
  auto p = pods_.find(job.key.substr(4));
  return p == pods_.end() ? job.key : p->second.ns + "/" + p->second.name;
}

// Our pods by job key, in one walk (a listing must not walk every pod per job).
std::map<std::string, std::vector<const PodInfo*>> Driver::PodsByJob() const {
  std::map<std::string, std::vector<const PodInfo*>> out;
  for (const auto& [uid, p] : pods_) {
    if (Ours(p)) out[KeyOf(p)].push_back(&p);
  }
  return out;
}

// A job as agent mode's GET /v1/jobs writes one (the fields gantry ls and show read), from
// the core's record and its pods.
json Driver::JobJson(const Job& job, std::vector<const PodInfo*> pods, bool details) const {
  const auto unix_s = [](core::Ticks t) {
    return t < 0 ? json(nullptr) : json(static_cast<double>(t + kEpochMs) / 1000.0);
  };
  const core::JobRecord* rec = job.id.valid() ? &sched_->job(job.id) : nullptr;
  std::sort(pods.begin(), pods.end(),
            [](const PodInfo* a, const PodInfo* b) { return a->name < b->name; });
  std::string state = "pending", reason;
  if (rec != nullptr && rec->phase == core::Phase::kRunning) state = "running";
  if (rec != nullptr && rec->phase == core::Phase::kSignaled) state = "stopping";
  json nodes = json::array();
  for (const PodInfo* p : pods) {
    if (!p->node_name.empty() && !p->terminal()) nodes.push_back(p->node_name);
  }
  if (state == "pending") {
    for (const PodInfo* p : pods) {  // what its pods' PodScheduled condition says
      auto m = asked_message_.find(p->uid);
      if (reason.empty() && m != asked_message_.end()) reason = m->second.substr(8);  // "gantry: "
    }
    if (reason.empty() && rec != nullptr) reason = rec->wait_reason;
    if (reason.empty()) reason = "waiting for the next scheduling pass";
  } else if (state == "stopping") {
    reason = "preempted: its pods are being evicted";
  }
  // Not in the core (it waits for its group, or can never run): what its pods ask.
  std::optional<core::JobSpec> spec;
  if (rec != nullptr) {
    spec = rec->spec;
  } else if (!pods.empty()) {
    if (auto s = JobOf(pods, config_)) spec = std::move(*s);
  }
  std::string queue, tier, request;
  if (spec) {
    queue = config_.queues.queue(spec->queue).spec.name;
    tier = std::string(core::Name(spec->tier));
    request = core::Placer::DescribeSizes(*spec, view_.cluster.catalog());
  } else if (!pods.empty()) {
    if (auto q = QueueOf(pods.front()->ns, config_)) queue = config_.queues.queue(*q).spec.name;
  }
  json j = {{"id", JobName(job)},
            {"queue", queue},
            {"user", ""},  // Kubernetes does not say who made a pod
            {"tier", tier},
            {"state", state},
            {"reason", reason},
            {"request", request},
            {"replicas", spec ? spec->replicas : static_cast<int>(pods.size())},
            {"submit", unix_s(job.first_seen)},
            {"run", rec != nullptr ? rec->run_total : 0},
            {"preemptions", rec != nullptr ? rec->preemptions : job.preemptions},
            {"requeues", 0},
            {"nodes", nodes},
            {"start", unix_s(job.first_start)},
            {"end", nullptr}};
  if (state != "pending") j["run_start"] = unix_s(job.run_start);
  if (spec && spec->elastic()) {  // as agent mode says it (gantry ls: "2 of 1-3 x ...")
    j["min_replicas"] = spec->min_replicas;
    if (state != "pending" && rec != nullptr) j["size"] = rec->alloc.size();
  }
  if (state == "pending" && rec != nullptr)
    j["wait"] = {{"cause", std::string(core::Word(rec->wait.cause))}};
  if (!details) return j;
  json workers = json::array();  // its pods, as gantry show lists workers
  for (const PodInfo* p : pods) {
    workers.push_back({{"rank", workers.size()},
                       {"alloc", {{"pod", p->name}, {"node", p->node_name}, {"phase", p->phase}}}});
  }
  j["workers"] = std::move(workers);
  j["history"] = json::array();
  return j;
}

server::Reply Driver::JobsReply(const server::JobQuery& q) {
  server::Reply r;
  if (sched_ == nullptr)
    return server::Reply::Error(server::Code::kUnavailable, "the scheduler has not synced yet");
  if (!q.state.empty() && q.state != "pending" && q.state != "running" && q.state != "stopping") {
    return server::Reply::Error(server::Code::kBadRequest,
                                "state: one of pending, running, stopping (ended pods are "
                                "Kubernetes': kubectl get pods)");
  }
  json jobs = json::array();
  std::set<std::string> queues, states;
  std::map<std::string, int64_t> waiting;
  int64_t total = 0;
  const auto by_job = PodsByJob();
  for (const auto& [key, job] : jobs_) {
    auto p = by_job.find(key);
    json j = JobJson(job, p == by_job.end() ? std::vector<const PodInfo*>() : p->second, false);
    queues.insert(j["queue"].get<std::string>());
    states.insert(j["state"].get<std::string>());
    if ((!q.state.empty() && j["state"] != q.state) ||
        (!q.queue.empty() && j["queue"] != q.queue) || !q.array.empty())  // (pods make no arrays)
      continue;
    ++total;
    if (j.contains("wait")) ++waiting[j["wait"]["cause"].get<std::string>()];
    if (q.limit < 0 || static_cast<int64_t>(jobs.size()) < q.limit) jobs.push_back(std::move(j));
  }
  json by_cause = json::array();
  for (const auto& [cause, n] : waiting) by_cause.push_back({{"cause", cause}, {"jobs", n}});
  r.body = {{"jobs", std::move(jobs)},
            {"total", total},
            {"waiting", std::move(by_cause)},
            {"values", {{"queue", queues}, {"state", states}, {"user", json::array()}}}};
  return r;
}

server::Reply Driver::ShowReply(const std::string& name) {
  for (const auto& [key, job] : jobs_) {
    if (sched_ != nullptr && JobName(job) == name) {
      server::Reply r;
      const auto by_job = PodsByJob();
      auto p = by_job.find(key);
      r.body = JobJson(job, p == by_job.end() ? std::vector<const PodInfo*>() : p->second, true);
      return r;
    }
  }
  return server::Reply::Error(server::Code::kNotFound,
                              "no job " + name +
                                  " (a job is NAMESPACE/GROUP for a PodGroup's pods, "
                                  "NAMESPACE/POD for a lone pod; ended ones are gone)");
}

// GET /v1/nodes as agent mode writes it (gantry nodes): the nodes the core places on, their
// pool (a shape), GPUs free, and why one is down; then the nodes (or their GPUs) left out.
server::Reply Driver::NodesReply() {
  if (sched_ == nullptr)
    return server::Reply::Error(server::Code::kUnavailable, "the scheduler has not synced yet");
  const core::Cluster& cluster = view_.cluster;
  json nodes = json::array();
  for (const core::Node& node : cluster.nodes()) {
    int free = 0;
    for (int g = 0; g < node.gpus; ++g) {
      free += sched_->ledger().gpu(core::GpuId(node.first_gpu.v + static_cast<uint32_t>(g))).mode ==
              core::GpuMode::kFree;
    }
    std::string state = "up", reason;
    if (auto n = nodes_.find(node.name); n != nodes_.end()) {
      if (!n->second.ready) {
        state = "down";
        reason = "NotReady";
      } else if (n->second.unschedulable) {
        state = "down";
        reason = "cordoned";
      }
    }
    nodes.push_back(server::NodeBody(cluster, node, free, state, reason, ""));
  }
  for (const std::string& why : view_.skipped) {  // "NAME: why"
    const size_t colon = why.find(": ");
    nodes.push_back({{"name", why.substr(0, colon)},
                     {"pool", ""},
                     {"model", ""},
                     {"gpus", 0},
                     {"free_gpus", 0},
                     {"state", "left-out"},
                     {"reason", colon == std::string::npos ? why : why.substr(colon + 2)},
                     {"address", ""}});
  }
  server::Reply r;
  r.body = {{"nodes", std::move(nodes)}};
  return r;
}

server::Reply Driver::QueuesReply() {
  if (sched_ == nullptr)
    return server::Reply::Error(server::Code::kUnavailable, "the scheduler has not synced yet");
  std::vector<int> pending(config_.queues.size(), 0), running(config_.queues.size(), 0);
  for (const auto& [key, job] : jobs_) {
    if (!job.id.valid()) continue;
    const core::JobRecord& rec = sched_->job(job.id);
    const bool waits = rec.phase == core::Phase::kPending;
    for (core::QueueId q : config_.queues.queue(rec.spec.queue).self_and_ancestors)
      ++(waits ? pending : running)[q.v];
  }
  server::Reply r;
  r.body = {{"queues", server::QueuesBody(config_.queues, *sched_, pending, running)}};
  return r;
}

// The metrics, under the names gantryd's agent mode uses where they mean the same
// (docs/kubernetes.md lists them).
void Driver::NoteBudgets() {
  // A queue's budget spent or renewed, said once as it happens (as gantryd's event log
  // does in agent mode; here the log and gantry_queue_budget_used_gpu_seconds).
  budget_out_.resize(config_.queues.size(), 0);
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    const core::Scheduler::BudgetAccount* a = sched_->budget_account(core::QueueId(q));
    if (a == nullptr || a->out == (budget_out_[q] != 0)) continue;
    budget_out_[q] = a->out;
    const core::QueueSpec& s = config_.queues.queue(core::QueueId(q)).spec;
    const std::string spent = server::FormatValue(a->spent),
                      budget = server::FormatValue(s.budget->gpu_hours);
    (a->out ? log::Warn : log::Info)(
        a->out ? "kubernetes: queue budget spent" : "kubernetes: queue budget renewed",
        {{"queue", s.name},
         {"spent_gpu_hours", spent},
         {"budget_gpu_hours", budget},
         {"when_spent", core::Name(s.budget->when_spent)}});
    // And an Event on each namespace whose pods the queue holds (`kubectl get events -n NS`):
    // those the config maps to it and those of its pods Gantry sees.
    std::set<std::string> namespaces;
    for (const auto& [ns, queue] : config_.kubernetes.namespaces) {
      if (queue == core::QueueId(q)) namespaces.insert(ns);
    }
    for (const auto& [uid, p] : pods_) {
      if (Ours(p) && !namespaces.contains(p.ns) && QueueOf(p.ns, config_) == core::QueueId(q))
        namespaces.insert(p.ns);
    }
    char used[32];  // for people: three figures (the log line keeps them all)
    std::snprintf(used, sizeof used, "%.3g", a->spent);
    const std::string message =
        a->out ? "queue " + s.name + " spent its budget of " + budget + " GPU-hours (" + used +
                     " used); new work " +
                     (s.budget->when_spent == core::WhenSpent::kWait ? "waits"
                                                                     : "runs as best-effort") +
                     " until it renews"
               : "queue " + s.name + "'s budget of " + budget + " GPU-hours renewed";
    for (const std::string& ns : namespaces) {
      writer_.Post(Writer::EventOp{ns, "Namespace", ns, "",
                                   a->out ? "BudgetSpent" : "BudgetRenewed", message, a->out});
    }
  }
}

std::string Driver::Metrics() const {
  using server::Labels;
  using server::MetricHeader;
  std::string out;
  if (sched_ == nullptr) return out;  // not synced yet
  auto queue_name = [&](uint32_t q) { return config_.queues.queue(core::QueueId(q)).spec.name; };
  const core::Cluster& cluster = view_.cluster;
  MetricHeader(out, "gantry_nodes", "gauge", "Nodes Gantry places pods on, by state");
  out += "gantry_nodes{state=\"up\"} " +
         std::to_string(cluster.nodes().size() - view_.down.size()) + "\n";
  out += "gantry_nodes{state=\"down\"} " + std::to_string(view_.down.size()) + "\n";
  MetricHeader(
      out, "gantry_gpus", "gauge",
      "GPUs of the nodes, less what other schedulers' pods hold; allocated: held by Gantry's pods");
  double held = 0;
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    if (!config_.queues.queue(core::QueueId(q)).parent.valid()) {
      held += static_cast<double>(sched_->queue_usage(core::QueueId(q))) / core::kGpuUnits;
    }
  }
  out += "gantry_gpus{state=\"total\"} " + std::to_string(cluster.gpu_count()) + "\n";
  out += "gantry_gpus{state=\"allocated\"} " + server::FormatValue(held) + "\n";
  std::vector<uint64_t> pending(config_.queues.size(), 0);
  for (const auto& key : sched_->pending()) ++pending[sched_->job(key.id).spec.queue.v];
  MetricHeader(out, "gantry_queue_used_gpus", "gauge", "GPUs held by a queue and its descendants");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    out += "gantry_queue_used_gpus{" + Labels({{"queue", queue_name(q)}}) + "} " +
           server::FormatValue(static_cast<double>(sched_->queue_usage(core::QueueId(q))) /
                               core::kGpuUnits) +
           "\n";
  }
  server::BudgetMetrics(out, config_.queues, *sched_);
  MetricHeader(out, "gantry_queue_pending_jobs", "gauge", "Gangs and lone pods waiting, by queue");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    out += "gantry_queue_pending_jobs{" + Labels({{"queue", queue_name(q)}}) + "} " +
           std::to_string(pending[q]) + "\n";
  }
  MetricHeader(
      out, "gantry_queue_wait_seconds", "histogram",
      "Time from the oldest pod's creation to the gang's first binding, by queue and tier");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    for (int t = 0; t < core::kTierCount; ++t) {
      wait_[q * core::kTierCount + static_cast<size_t>(t)].Render(
          out, "gantry_queue_wait_seconds",
          Labels({{"queue", queue_name(q)}, {"tier", core::Name(static_cast<core::Tier>(t))}}));
    }
  }
  MetricHeader(out, "gantry_preemptions_total", "counter", "Jobs preempted, by queue");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    out += "gantry_preemptions_total{" + Labels({{"queue", queue_name(q)}}) + "} " +
           std::to_string(preemptions_[q]) + "\n";
  }
  MetricHeader(out, "gantry_resizes_total", "counter",
               "Elastic gangs grown (more of their pods bound) or shrunk (pods evicted)");
  out += "gantry_resizes_total{direction=\"grow\"} " + std::to_string(grown_) + "\n";
  out += "gantry_resizes_total{direction=\"shrink\"} " + std::to_string(shrunk_) + "\n";
  MetricHeader(out, "gantry_jobs_started_total", "counter", "Gangs and lone pods bound, by queue");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    out += "gantry_jobs_started_total{" + Labels({{"queue", queue_name(q)}}) + "} " +
           std::to_string(starts_[q]) + "\n";
  }
  MetricHeader(out, "gantry_scheduling_latency_seconds", "histogram",
               "Wall-clock time of one scheduling pass");
  pass_latency_.Render(out, "gantry_scheduling_latency_seconds");
  MetricHeader(out, "gantry_kubernetes_requests_total", "counter",
               "Writes to the API server, by what they did");
  out += "gantry_kubernetes_requests_total{what=\"bind\"} " + std::to_string(binds_) + "\n";
  out += "gantry_kubernetes_requests_total{what=\"bind_failed\"} " +
         std::to_string(bind_failures_) + "\n";
  out += "gantry_kubernetes_requests_total{what=\"evict\"} " + std::to_string(evictions_) + "\n";
  MetricHeader(out, "gantry_kubernetes_rebuilds_total", "counter",
               "Times the nodes and running jobs were read again (a node joined, left or changed)");
  out += "gantry_kubernetes_rebuilds_total " + std::to_string(rebuilds_) + "\n";
  return out;
}

// gantryd's HTTP API in this mode (server/api_backend.h): what a Kubernetes cluster has
// (jobs, queues) is read on the scheduling thread, with the tokens of gantryd's store
// (--db); what changes something is kubectl's, and is refused with where to do it.
class KubeApi : public server::ApiBackend {
 public:
  KubeApi(Published& published, server::Store* store) : published_(published) {
    if (store != nullptr) auth_.emplace(*store);
  }

  // While leading, calls go to the scheduling thread through `box`; nullptr: they cannot.
  void Attach(Mailbox* box) {
    std::lock_guard lock(mu_);
    box_ = box;
  }

  void ListJobs(std::string token, server::JobQuery q, server::Done done) override {
    Call(token, std::move(done), [q](Driver& d) { return d.JobsReply(q); });
  }
  void ShowJob(std::string token, std::string name, server::Done done) override {
    Call(token, std::move(done), [name](Driver& d) { return d.ShowReply(name); });
  }
  void Queues(std::string token, server::Done done) override {
    Call(token, std::move(done), [](Driver& d) { return d.QueuesReply(); });
  }
  void WhoAmI(std::string token, server::Done done) override {
    auto p = Who(token, done);
    if (!p) return;
    server::Reply r;
    r.body = server::WhoAmIBody(*p);
    done(std::move(r));
  }
  // Console sessions as the Controller's: the cookie holds a secret the store maps to the
  // token, never the token.
  void SignIn(std::string token, server::Done done) override {
    if (!Ready(done)) return;
    done(Guarded([&] { return auth_->SignIn(token, WallMs()); }));
  }
  void SignOut(std::string session, server::Done done) override {
    if (!Ready(done)) return;
    done(Guarded([&] {
      auth_->SignOut(session);
      return server::Reply{};
    }));
  }
  // Rendered on the scheduling thread when asked (a standby has none to give).
  void Metrics(std::string, server::Done done) override {
    auto text = [](std::string body) {
      server::Reply r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.text = std::move(body);
      return r;
    };
    Post(
        std::move(done), [text](Driver& d) { return text(d.Metrics()); }, text(""), text(""));
  }
  void Health(server::Done done) override {
    server::Reply r;
    r.body = {{"status", "ok"}, {"role", published_.leading ? "leader" : "standby"}};
    done(std::move(r));
  }
  // Kubernetes' own tools do these.
  void Submit(std::string, server::SubmitRequest, server::Done done) override {
    done(Elsewhere("submits", "create pods, Jobs and PodGroups (kubectl apply)"));
  }
  void Cancel(std::string, std::string, bool, server::Done done) override {
    done(Elsewhere("cancels", "delete the pods or their Job (kubectl delete)"));
  }
  void Requeue(std::string, std::string, server::Done done) override {
    done(Elsewhere("requeues nothing", "delete the pods: their controller recreates them"));
  }
  void SetBegin(std::string, std::string, int64_t, server::Done done) override {
    done(Elsewhere("defers nothing", "create the pods when they should start"));
  }
  void SetAfter(std::string, std::string, std::string, server::Done done) override {
    done(Elsewhere("orders no pods after others", "create the pods when they should start"));
  }
  void SetThrottle(std::string, std::string, int, server::Done done) override {
    done(Elsewhere("throttles no arrays", "set the Job's spec.parallelism"));
  }
  void UpdateSpec(std::string, std::string, nlohmann::json, server::Done done) override {
    done(Elsewhere("changes no pod's spec", "edit the pods' owner (its pod template)"));
  }
  void SetTimeLimit(std::string, std::string, int64_t, bool, server::Done done) override {
    done(Elsewhere("limits no run time", "set the Job's spec.activeDeadlineSeconds"));
  }
  void Hold(std::string, std::string, bool, std::optional<bool>, server::Done done) override {
    done(Elsewhere("holds nothing",
                   "suspend the Job: kubectl patch job NAME -p '{\"spec\":{\"suspend\":true}}'"));
  }
  void Signal(std::string, std::string, int, std::string, server::Done done) override {
    done(Elsewhere("signals nothing", "kubectl exec POD -- kill -s SIGNAL 1"));
  }
  void LogPath(std::string, std::string, int, int, int, bool, server::Done done) override {
    done(Elsewhere("keeps no logs", "kubectl logs"));
  }
  void CreateStep(std::string, std::string, json, server::Done done) override {
    done(Elsewhere("runs no job steps", "kubectl exec, or a pod per task"));
  }
  void ShowStep(std::string, std::string, int, std::string, int64_t, server::Done done) override {
    done(Elsewhere("runs no job steps", "kubectl get pods"));
  }
  void CancelStep(std::string, std::string, int, bool, server::Done done) override {
    done(Elsewhere("runs no job steps", "kubectl delete"));
  }
  void LaunchStep(std::string, std::string, int, json, server::Done done) override {
    done(Elsewhere("runs no job steps", "kubectl exec, or a pod per task"));
  }
  void JobUsageSeries(std::string, std::string, server::Done done) override {
    done(Elsewhere("keeps no usage series yet", "the metrics (GET /metrics)"));
  }
  void JobAllocation(std::string, std::string, server::Done done) override {
    done(Elsewhere("makes no interactive allocations", "kubectl exec into a pod"));
  }
  void ReleaseAllocation(std::string, std::string, int, server::Done done) override {
    done(Elsewhere("makes no interactive allocations", "kubectl exec into a pod"));
  }
  void Nodes(std::string token, server::Done done) override {
    Call(token, std::move(done), [](Driver& d) { return d.NodesReply(); });
  }
  void Drain(std::string, std::string, bool, std::string, server::Done done) override {
    done(Elsewhere("drains no nodes", "kubectl cordon or kubectl drain"));
  }
  void Usage(std::string token, double from_s, double to_s, server::Done done) override {
    Call(token, std::move(done), [from_s, to_s](Driver& d) { return d.UsageReply(from_s, to_s); });
  }
  void ClusterHistory(std::string token, double since_unix_s, server::Done done) override {
    Call(token, std::move(done),
         [since_unix_s](Driver& d) { return d.HistoryReply(since_unix_s); });
  }
  void Heartbeat(std::string, std::string, json, std::string, server::Done done) override {
    done(Elsewhere("has no agents", "the kubelets"));
  }
  void Watch(std::string, std::string, std::string, int64_t, int64_t, server::Done done) override {
    done(Elsewhere("has no agents", "the kubelets"));
  }
  void UploadLog(std::string, std::string, std::string, int, int, int, bool, int64_t, std::string,
                 server::Done done) override {
    done(Elsewhere("has no agents", "the kubelets"));
  }

 private:
  static server::Reply Elsewhere(const std::string& what, const std::string& instead) {
    return server::Reply::Error(server::Code::kNotFound,
                                "gantryd --kubernetes " + what + ": " + instead);
  }

  // Whether /v1 is served here (with --db); else `done` is answered.
  bool Ready(server::Done& done) {
    if (auth_) return true;
    done(server::Reply::Error(server::Code::kUnavailable,
                              "gantryd --kubernetes answers /v1 with --db: its tokens (gantryd "
                              "init, gantryd token create)"));
    return false;
  }

  // fn's reply, under the lock (the store and the authenticator are not thread-safe); a
  // store that fails gives a 503.
  server::Reply Guarded(const std::function<server::Reply()>& fn) {
    std::lock_guard lock(mu_);
    try {
      auth_->Flush(WallMs());  // a revoked token works at most 10 s more
      return fn();
    } catch (const server::StoreDown& e) {
      return server::Reply::Error(server::Code::kUnavailable,
                                  std::string("store unavailable: ") + e.what());
    }
  }

  std::optional<server::Principal> Who(const std::string& token, server::Done& done) {
    if (!Ready(done)) return std::nullopt;
    std::optional<server::Principal> p;
    server::Reply r = Guarded([&] {
      server::Reply err;
      p = auth_->Authenticate(token, WallMs(), err);
      return err;
    });
    if (!p) {
      server::Authenticator::LogRefusal(r, "unauthenticated");
      done(std::move(r));
      return std::nullopt;
    }
    if (p->role == server::Role::kAgent) {
      done(server::Reply::Error(server::Code::kForbidden, "an agent token reads no jobs"));
      return std::nullopt;
    }
    return *p;
  }

  // Runs `fn` on the scheduling thread and answers with its reply; `standby` when no
  // scheduling thread runs here, `stopping` when it ended before running `fn`.
  void Post(server::Done done, std::function<server::Reply(Driver&)> fn, server::Reply standby,
            server::Reply stopping) {
    std::lock_guard lock(mu_);
    if (box_ == nullptr) return done(std::move(standby));
    box_->Push(Event{Resource::kCall, Event::Type::kUpsert, json(),
                     [fn = std::move(fn), done = std::move(done), stopping = std::move(stopping)](
                         Driver* d) { done(d != nullptr ? fn(*d) : stopping); }});
  }

  // Post for a caller whose token may read.
  void Call(const std::string& token, server::Done done, std::function<server::Reply(Driver&)> fn) {
    if (!Who(token, done)) return;
    Post(std::move(done), std::move(fn),
         server::Reply::Error(server::Code::kUnavailable,
                              "this gantryd is a standby: the leader answers (its Lease names it)"),
         server::Reply::Error(server::Code::kUnavailable, "gantryd is stopping"));
  }

  Published& published_;
  std::optional<server::Authenticator> auth_;  // with a store
  std::mutex mu_;
  Mailbox* box_ = nullptr;
};

}  // namespace

int RunScheduler(const spec::ClusterConfig& config, const Credentials& creds,
                 const SchedulerOptions& options, const std::atomic<bool>& stop) {
  {
    Client probe(creds);
    auto v = probe.Request("GET", "/version");
    if (!v || v->status != 200) {
      log::Error("kubernetes: the API server does not answer",
                 {{"server", creds.host + ":" + creds.port}, {"error", Failure(v)}});
      return 1;
    }
    json ver = json::parse(v->body, nullptr, false);
    log::Info("kubernetes: connected",
              {{"server", creds.host + ":" + creds.port},
               {"credentials", creds.source},
               {"version", ver.is_object() ? ver.value("gitVersion", "?") : "?"},
               {"scheduler_name", config.kubernetes.scheduler_name}});
  }
  // gantryd's HTTP API (server/http_api.h) over this mode's answers: /healthz and /metrics
  // from standbys too (a standby's /healthz says so), /v1's reads from the leader.
  Published published;
  KubeApi api(published, options.store);
  std::unique_ptr<server::HttpApi> http;
  std::thread http_thread;
  if (!options.listen.empty()) {
    http = std::make_unique<server::HttpApi>(api, server::HttpOptions{});
    const size_t colon = options.listen.rfind(':');
    const int port =
        colon == std::string::npos ? -1 : std::atoi(options.listen.c_str() + colon + 1);
    auto bound = http->Bind(options.listen.substr(0, colon), port);
    if (!bound) {
      log::Error("kubernetes: cannot listen",
                 {{"listen", options.listen}, {"error", bound.error().ToString()}});
      return 1;
    }
    log::Info("kubernetes: serving /healthz, /metrics and /v1", {{"port", std::to_string(*bound)}});
    http_thread = std::thread([&] { http->Serve(); });
  }
  struct StopHttp {
    std::unique_ptr<server::HttpApi>& http;
    std::thread& thread;
    ~StopHttp() {
      if (http) http->Stop();
      if (thread.joinable()) thread.join();
    }
  } stop_http{http, http_thread};
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
  for (int i = 0; i < kWatched; ++i) {
    const auto r = static_cast<Resource>(i);
    clients.push_back(std::make_unique<Client>(creds, 300));
    Client* c = clients.back().get();
    threads.emplace_back([r, &box, &stop, c] { WatchLoop(r, box, stop, *c); });
  }
  published.leading = true;
  Writer writer(creds, 4, box, config.kubernetes.scheduler_name);
  Driver driver(config, creds, options, writer);
  const auto idle = std::chrono::milliseconds(static_cast<int64_t>(options.idle_pass_s * 1000));
  api.Attach(&box);
  while (!stop && !lost) {
    std::deque<Event> events = box.Take(std::chrono::steady_clock::now() + idle);
    for (Event& e : events) driver.Apply(e);
    // Events come in bursts (a Job's pods, a gang's bindings echoed back): a pass per
    // burst, not per event.
    driver.Pass();
  }
  api.Attach(nullptr);
  for (Event& e : box.Take(std::chrono::steady_clock::now())) {
    if (e.res == Resource::kCall) e.call(nullptr);  // answered: stopping
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
