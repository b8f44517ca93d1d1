#include "server/controller.h"

#include <ctime>
#include <regex>

#include "base/log.h"
#include "core/advice.h"
#include "server/accounts.h"
#include "server/controller_internal.h"

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------- API: nodes, queues, usage

void Controller::Nodes(std::string token, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this](const Principal&) -> Reply {
        const Ticks now = now_;
        // Who holds each GPU, and the holders' queues beside them (so a map colours a GPU by
        // queue without listing every job).
        std::vector<std::vector<std::string>> gpu_jobs(cluster_.gpu_count()),
            gpu_queues(cluster_.gpu_count());
        for (int64_t seq : book_.running()) {
          const Job& job = book_.jobs().at(seq);
          for (const Worker& w : job.workers) {
            const core::Node& node = cluster_.node(w.alloc.node);
            auto add = [&](int local) {
              gpu_jobs[node.first_gpu.v + static_cast<uint32_t>(local)].push_back(job.name);
              gpu_queues[node.first_gpu.v + static_cast<uint32_t>(local)].push_back(job.queue);
            };
            if (w.alloc.sharing == core::Sharing::kExclusive) {
              for (int i = 0; i < node.gpus; ++i) {
                if (w.alloc.gpu_mask >> i & 1u) add(i);
              }
            } else {
              add(w.alloc.gpu);
            }
          }
        }
        json nodes = json::array();
        for (uint32_t i = 0; i < nodes_.size(); ++i) {
          const core::Node& node = cluster_.node(core::NodeId(i));
          const NodeInfo& info = nodes_[core::NodeId(i)];
          const bool never =
              !info.up && info.agent_id.empty() && info.address.empty() && info.refused.empty();
          std::string state = !info.refused.empty() ? "refused"
                              : never               ? "unseen"
                              : !info.up            ? "down"
                              : info.drained        ? "drained"
                                                    : "up";
          std::string reason = !info.refused.empty() ? info.refused : info.drain_reason;
          if (never) {
            reason = "never seen: no agent has registered as this node";
          } else if (!info.up && reason.empty()) {
            reason = info.last_seen >= 0
                         ? "no heartbeat since " + HumanTime(WallMs(info.last_seen), WallMs(now))
                         : "no heartbeat since before gantryd's last restart";
          } else if (info.up && reason.empty() && nodes_.HeldByUnreadStop(core::NodeId(i))) {
            reason = "takes no new work until the workers of jobs failed at start have ended";
          }
          json gpus = json::array();
          int free = 0;
          for (int g = 0; g < node.gpus; ++g) {
            const core::GpuId gid(node.first_gpu.v + static_cast<uint32_t>(g));
            const core::GpuState& s = sched_->ledger().gpu(gid);
            double alloc = s.mode == core::GpuMode::kWhole    ? 1.0
                           : s.mode == core::GpuMode::kMig    ? s.mig_compute / 7.0
                           : s.mode == core::GpuMode::kShared ? s.share_used / 1000.0
                                                              : 0.0;
            if (s.mode == core::GpuMode::kFree) ++free;
            json gj = {{"index", g},
                       {"allocated", alloc},
                       {"jobs", gpu_jobs[gid.v]},
                       {"queues", gpu_queues[gid.v]}};
            if (static_cast<size_t>(g) < info.gpus.size()) {
              gj["uuid"] = info.gpus[static_cast<size_t>(g)].uuid;
              gj["utilization"] = info.gpus[static_cast<size_t>(g)].utilization;
              gj["idle_s"] =
                  static_cast<double>(info.gpus[static_cast<size_t>(g)].idle_ms) / 1000.0;
              // Its MIG layout as the agent last reported it (laid out beforehand, or made by the
              // agent on a mig_managed pool).
              json mig = json::array();
              for (const GpuReport::Mig& m : info.gpus[static_cast<size_t>(g)].mig) {
                mig.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
              }
              gj["mig"] = std::move(mig);
            }
            gpus.push_back(std::move(gj));
          }
          json nj = NodeBody(cluster_, node, free, state, reason, info.address);
          nj["partitions"] = PartitionsOf(node.pool);
          if (info.drained) {
            nj["drained_by"] = info.drained_by;
            nj["drained_at"] = info.drained_at_ms >= 0
                                   ? json(static_cast<double>(info.drained_at_ms) / 1000.0)
                                   : json(nullptr);
          }
          nj["isolation"] = info.isolation;
          nj["gpu_detail"] = std::move(gpus);
          nj["last_seen_s"] = info.last_seen >= 0
                                  ? json(static_cast<double>(now - info.last_seen) / 1000.0)
                                  : json(nullptr);
          nodes.push_back(std::move(nj));
        }
        Reply r;
        r.body = {{"nodes", std::move(nodes)}};
        if (const auto& d = config_.site.default_partition)
          r.body["default_partition"] = PartitionsOf(*d).front();
        return r;
      },
      Kind::kRead);
}

std::vector<std::string> Controller::PartitionsOf(core::PoolId pool) const {
  std::vector<std::string> out;
  for (const auto& [name, p] : config_.site.partitions) {
    if (p == pool) out.push_back(name);
  }
  if (out.empty()) out.push_back(cluster_.pool(pool).spec.name);
  return out;
}

void Controller::ClusterHistory(std::string token, double since_unix_s, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, since_unix_s](const Principal&) -> Reply {
        Reply r;
        r.body = history_.Body(since_unix_s);
        return r;
      },
      Kind::kRead);
}

void Controller::Drain(std::string token, std::string node, bool drain, std::string reason,
                       Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, node, drain, reason](const Principal& user) -> Reply {
        if (!user.admin()) {
          return Reply::Error(Code::kForbidden,
                              std::string(drain ? "drain" : "resume") +
                                  " is a cluster operation: it needs the admin token, not " +
                                  user.Describe() + "'s");
        }
        auto n = cluster_.FindNode(node);
        if (!n) return Reply::Error(Code::kNotFound, "no node " + node + " in the cluster config");
        NodeInfo& info = nodes_[*n];
        // A second drain adds its reason (two admins' reasons are both true; the
        // second used to replace the first); resume clears them.
        const std::string why = reason.empty() ? "drained by admin" : reason;
        if (!drain) {
          info.drain_reason.clear();
          info.drained_by.clear();
          info.drained_at_ms = -1;
        } else if (!info.drained || info.drain_reason.empty()) {
          info.Drain(why,
                     !user.user.empty() ? user.user
                     : user.admin()     ? "admin"
                                        : user.team,
                     WallMs(now_));
        } else if (("; " + info.drain_reason + "; ").find("; " + why + "; ") == std::string::npos) {
          info.drain_reason += "; " + why;
        }
        info.drained = drain;
        log::Info(drain ? "node drained" : "node resumed",
                  {{"node", node}, {"by", user.Describe()}, {"reason", info.drain_reason}});
        SetCoreNodeUp(*n);
        PersistNode(*n);
        Reply r;
        r.body = {{"node", node}, {"drained", drain}};
        return r;
      });
}

void Controller::WhoAmI(std::string token, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [](const Principal& p) -> Reply {
        Reply r;
        r.body = WhoAmIBody(p);
        return r;
      },
      Kind::kRead);
}

json NodeBody(const core::Cluster& cluster, const core::Node& node, int free_gpus,
              const std::string& state, const std::string& reason, const std::string& address) {
  return {{"name", node.name},
          {"pool", cluster.pool(node.pool).spec.name},
          {"model", node.gpus > 0 ? cluster.catalog().model(node.model).name : ""},
          {"gpus", node.gpus},
          {"free_gpus", free_gpus},
          {"state", state},
          {"reason", reason},
          {"address", address}};
}

json QueuesBody(const core::QueueTree& queues_tree, const core::Scheduler& sched,
                const std::vector<int>& pending, const std::vector<int>& running) {
  json queues = json::array();
  for (uint32_t i = 0; i < queues_tree.size(); ++i) {
    const core::Queue& q = queues_tree.queue(core::QueueId(i));
    const auto gpus = [](core::GpuUnits u) {
      return static_cast<double>(u) / static_cast<double>(core::kGpuUnits);
    };
    json qj = {{"name", q.spec.name},
               {"parent", q.spec.parent},
               {"guaranteed_gpus", gpus(q.spec.guaranteed)},
               {"weight", q.spec.weight},
               {"used_gpus", gpus(sched.queue_usage(core::QueueId(i)))},
               // Fair share's memory: GPUs held, averaged with fairshare_half_life (kept
               // across restarts, server/accounts.h); Slurm's sshare shows it as usage.
               {"fair_share_gpus",
                sched.decayed_usage(core::QueueId(i)) / static_cast<double>(core::kGpuUnits)},
               {"pending", pending[i]},
               {"running", running[i]}};
    qj["burst_gpus"] = q.spec.burst >= 0 ? json(gpus(q.spec.burst)) : json(nullptr);
    if (!q.spec.guaranteed_by_model.empty()) {  // a guarantee per GPU model
      json guaranteed = json::object(), used = json::object();
      for (const core::ModelGuarantee& m : q.spec.guaranteed_by_model) {
        guaranteed[m.name] = gpus(m.units);
        used[m.name] = gpus(sched.queue_usage_on(core::QueueId(i), m.model));
      }
      qj["guaranteed_gpus_by_model"] = std::move(guaranteed);
      qj["used_gpus_by_model"] = std::move(used);
    }
    if (const core::Scheduler::BudgetAccount* a = sched.budget_account(core::QueueId(i))) {
      const core::BudgetSpec& b = *q.spec.budget;
      qj["budget"] = {{"gpu_hours", b.gpu_hours},
                      {"period", core::Name(b.period)},
                      {"when_spent", core::Name(b.when_spent)},
                      {"spent_gpu_hours", a->spent},
                      {"period_start", static_cast<double>(a->start_unix_ms) / 1000.0},
                      {"period_end", static_cast<double>(a->end_unix_ms) / 1000.0},
                      {"spent", a->out}};
    }
    queues.push_back(std::move(qj));
  }
  return queues;
}

void Controller::Queues(std::string token, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this](const Principal&) -> Reply {
        // A queue's counts include its descendants' jobs, as its used_gpus does: a parent shows
        // what its subtree runs and waits for.
        std::vector<int> pending(config_.queues.size(), 0), running(config_.queues.size(), 0);
        for (const auto& [seq, job] : book_.jobs()) {
          const bool waits = job.state == JobState::kPending;
          const bool runs = job.state == JobState::kRunning || job.state == JobState::kStopping;
          if (!waits && !runs) continue;
          for (core::QueueId q : config_.queues.queue(job.spec.queue).self_and_ancestors)
            ++(waits ? pending : running)[q.v];
        }
        Reply r;
        r.body = {{"queues", QueuesBody(config_.queues, *sched_, pending, running)}};
        return r;
      },
      Kind::kRead);
}

void Controller::Usage(std::string token, double from_s, double to_s, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, from_s, to_s](const Principal&) -> Reply {
        const int64_t now_ms = WallMs(now_);
        const int64_t from = static_cast<int64_t>(from_s * 1000);
        const int64_t to = std::min(now_ms, static_cast<int64_t>(to_s * 1000));
        if (to <= from)
          return Reply::Error(Code::kBadRequest, "the period is empty (--since after --until)");
        auto runs = store_.Runs(from, to);
        if (!runs) StoreFailed(runs.error());
        Reply reply;
        reply.body = UsageBody(
            std::move(*runs), from, to, now_ms, cluster_.catalog(), config_.policy.params,
            config_.policy.currency, [this](StoredRun& r) {
              // A running worker's usage so far is in memory.
              auto it = book_.jobs().find(r.job_seq);
              if (it == book_.jobs().end() || it->second.run != r.run ||
                  r.rank >= static_cast<int>(it->second.workers.size()))
                return;
              const Worker& w = it->second.workers[static_cast<size_t>(r.rank)];
              r.busy_gpu_ms = w.busy_gpu_ms;
              r.reported_gpu_ms = w.reported_gpu_ms;
              r.fit_gpus = w.reported_gpu_ms > 0
                               ? core::RightSize(cluster_, cluster_.node(w.alloc.node).model,
                                                 it->second.spec, {w.vram_peak, w.util_peak})
                                     .fit_gpus
                               : -1;
            });
        return reply;
      },
      Kind::kRead);
}

// ---------------------------------------------------------------- health and metrics

void Controller::Health(Done done) {
  Post(
      [this]() -> Reply {
        const int up = nodes_.Up();
        Reply ok;
        if (outage_.since >= 0)  // up, but unable to save anything: not healthy
          return OutageReply("the store is unavailable: " + outage_.why, now_);
        ok.body = {{"status", "ok"},
                   {"instance", instance_},
                   {"role", "leader"},
                   {"leader", options_.leader},
                   {"epoch", options_.epoch},
                   {"nodes_up", up},
                   {"jobs_running", book_.running().size()},
                   {"jobs_pending", sched_->pending().size()}};
        return ok;
      },
      std::move(done), Kind::kRead);
}

void Controller::RunExclusive(const std::function<void()>& fn) {
  (void)Wait([this, &fn](Done done) {
    Post(
        [&fn]() -> Reply {
          fn();
          return Reply{};
        },
        std::move(done));
  });
}

void Controller::Poke() {
  (void)Wait([this](Done done) {
    Post(
        [this]() -> Reply {
          dirty_ = true;
          return Reply{};
        },
        std::move(done));
  });
}

// ---------------------------------------------------------------- waiting forms

Reply Controller::Submit(const std::string& token, SubmitRequest req) {
  return Wait([&](Done d) { Submit(token, std::move(req), std::move(d)); });
}
Reply Controller::ListJobs(const std::string& token, JobQuery query) {
  return Wait([&](Done d) { ListJobs(token, std::move(query), std::move(d)); });
}
Reply Controller::ShowJob(const std::string& token, const std::string& name) {
  return Wait([&](Done d) { ShowJob(token, name, std::move(d)); });
}
Reply Controller::Cancel(const std::string& token, const std::string& name, bool force) {
  return Wait([&](Done d) { Cancel(token, name, force, std::move(d)); });
}
Reply Controller::LogPath(const std::string& token, const std::string& name, int run, int rank,
                          int step, bool err) {
  return Wait([&](Done d) { LogPath(token, name, run, rank, step, err, std::move(d)); });
}

Reply Controller::CreateStep(const std::string& token, const std::string& job,
                             const nlohmann::json& body) {
  return Wait([&](Done d) { CreateStep(token, job, body, std::move(d)); });
}

Reply Controller::LaunchStep(const std::string& token, const std::string& job, int step,
                             const nlohmann::json& body) {
  return Wait([&](Done d) { LaunchStep(token, job, step, body, std::move(d)); });
}

Reply Controller::Requeue(const std::string& token, const std::string& name) {
  return Wait([&](Done d) { Requeue(token, name, std::move(d)); });
}

Reply Controller::Hold(const std::string& token, const std::string& name, bool hold,
                       std::optional<bool> admin_hold) {
  return Wait([&](Done d) { Hold(token, name, hold, admin_hold, std::move(d)); });
}

Reply Controller::SetBegin(const std::string& token, const std::string& name, int64_t begin_ms) {
  return Wait([&](Done d) { SetBegin(token, name, begin_ms, std::move(d)); });
}

Reply Controller::SetAfter(const std::string& token, const std::string& name,
                           const std::string& after) {
  return Wait([&](Done d) { SetAfter(token, name, after, std::move(d)); });
}

Reply Controller::UpdateSpec(const std::string& token, const std::string& name,
                             const json& fields) {
  return Wait([&](Done d) { UpdateSpec(token, name, fields, std::move(d)); });
}

Reply Controller::SetThrottle(const std::string& token, const std::string& name, int limit) {
  return Wait([&](Done d) { SetThrottle(token, name, limit, std::move(d)); });
}

Reply Controller::SetTimeLimit(const std::string& token, const std::string& name, int64_t limit_ms,
                               bool add) {
  return Wait([&](Done d) { SetTimeLimit(token, name, limit_ms, add, std::move(d)); });
}

Reply Controller::Signal(const std::string& token, const std::string& name, int signal,
                         const std::string& to) {
  return Wait([&](Done d) { Signal(token, name, signal, to, std::move(d)); });
}

Reply Controller::ShowStep(const std::string& token, const std::string& job, int step) {
  return Wait([&](Done d) { ShowStep(token, job, step, "", 0, std::move(d)); });
}
Reply Controller::Nodes(const std::string& token) {
  return Wait([&](Done d) { Nodes(token, std::move(d)); });
}
Reply Controller::Drain(const std::string& token, const std::string& node, bool drain,
                        std::string reason) {
  return Wait([&](Done d) { Drain(token, node, drain, std::move(reason), std::move(d)); });
}
Reply Controller::Queues(const std::string& token) {
  return Wait([&](Done d) { Queues(token, std::move(d)); });
}
Reply Controller::Usage(const std::string& token, double from_s, double to_s) {
  return Wait([&](Done d) { Usage(token, from_s, to_s, std::move(d)); });
}
Reply Controller::Heartbeat(const std::string& token, const std::string& node,
                            const nlohmann::json& body, const std::string& remote_addr) {
  return Wait([&](Done d) { Heartbeat(token, node, body, remote_addr, std::move(d)); });
}
Reply Controller::UploadLog(const std::string& token, const std::string& node,
                            const std::string& job, int run, int rank, int64_t offset,
                            const std::string& data, int step, bool err) {
  return Wait([&](Done d) {
    UploadLog(token, node, job, run, rank, step, err, offset, data, std::move(d));
  });
}
std::string Controller::Metrics(const std::string& token) {
  return Wait([&](Done d) { Metrics(token, std::move(d)); }).text;
}
nlohmann::json Controller::Health() {
  return Wait([&](Done d) { Health(std::move(d)); }).body;
}

// ---------------------------------------------------------------- human times

std::string HumanTime(int64_t at_ms, int64_t now_ms) {
  auto date = [](int64_t ms, const char* fmt) {
    const std::time_t t = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, fmt, &tm);
    return std::string(buf);
  };
  const bool today = date(at_ms, "%F") == date(now_ms, "%F");
  const int64_t d = (at_ms - now_ms) / 1000;
  const int64_t a = d < 0 ? -d : d;
  std::string span;
  if (a < 60) {
    span = std::to_string(a) + " s";
  } else if (a < 3600) {
    span = std::to_string(a / 60) + " min";
  } else if (a < 86400) {
    span = std::to_string(a / 3600) + " h " + std::to_string(a % 3600 / 60) + " min";
  } else {
    span = std::to_string(a / 86400) + " d " + std::to_string(a % 86400 / 3600) + " h";
  }
  return date(at_ms, today ? "%H:%M UTC" : "%F %H:%M UTC") +
         (d >= 0 ? " (in " + span + ")" : " (" + span + " ago)");
}

std::string HumanTimes(const std::string& text, int64_t epoch_ms, int64_t now_ms) {
  if (text.find("t=") == std::string::npos) return text;  // most reasons: no regex run
  static const std::regex kCoreTime(R"(t=([0-9]+(\.[0-9]+)?) s)");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), kCoreTime), end; it != end; ++it) {
    out.append(last, text.cbegin() + it->position());
    const double seconds = std::stod((*it)[1].str());
    out += HumanTime(epoch_ms + static_cast<int64_t>(seconds * 1000), now_ms);
    last = text.cbegin() + it->position() + it->length();
  }
  out.append(last, text.cend());
  return out;
}

}  // namespace gantry::server
