// The live utilisation loop (issue 12): what running jobs really use, as their agents
// report it per worker (utilization and VRAM), kept per job over its runs; and idle
// reclamation, with the simulator's rule (core::ReclaimIdleAfter): a job whose workers
// all stayed under the policy's reclaim_idle_below for its queue's reclaim_idle_after_s
// gets its checkpoint signal and grace, then ends "reclaimed" and its GPUs go back.
#include "server/controller.h"

#include "base/log.h"
#include "core/advice.h"
#include "server/accounts.h"
#include "server/controller_internal.h"

namespace gantry::server {

using nlohmann::json;

namespace {
// A running job's usage is written at most this often (it changes at every heartbeat).
constexpr Ticks kUsageSaveEvery = 60'000;
}  // namespace

double Controller::JobGpus(const Job& job) const {
  double gpus = 0;
  for (const Worker& w : job.workers) gpus += WorkerGpus(w.alloc, cluster_);
  return gpus;
}

void Controller::RecordUsage(Job& job, Worker& w, const RunningReport& r, Ticks now) {
  const double gpus = WorkerGpus(w.alloc, cluster_);
  if (w.usage_at >= 0 && now > w.usage_at) {
    // The previous sample holds until this one.
    const double dt = static_cast<double>(now - w.usage_at);
    job.usage.busy_gpu_ms += w.util * gpus * dt;
    job.usage.reported_gpu_ms += gpus * dt;
    w.busy_gpu_ms += w.util * gpus * dt;
    w.reported_gpu_ms += gpus * dt;
    if (gpus > 0) metrics_.Busy(job.queue, w.alloc.node, w.util * gpus * dt);
    job.usage.vram_ms += static_cast<double>(w.vram_used) * dt;
    job.usage.reported_ms += dt;
  }
  w.usage_at = now;
  w.util = r.usage->util;
  w.vram_used = r.usage->vram_used_bytes;
  job.usage.vram_peak = std::max(job.usage.vram_peak, r.usage->vram_used_bytes);
  w.vram_peak = std::max(w.vram_peak, r.usage->vram_used_bytes);
  w.util_peak = std::max(w.util_peak, w.util);
  job.usage.util_peak = std::max(job.usage.util_peak, w.util);
  const core::ModelId model = cluster_.node(w.alloc.node).model;
  if (model.valid()) job.usage.model = cluster_.catalog().model(model).name;
  if (w.busy_at < 0 || w.util >= config_.policy.params.reclaim_idle_below) w.busy_at = now;
  // The time series: one sample per job and interval, the interval's mean utilization.
  job.sample_vram = std::max(job.sample_vram, r.usage->vram_used_bytes);
  if (job.sample_at < job.run_start) {  // the run's first report (sample_at starts at -1)
    job.sample_at = now;
    job.sample_busy = job.usage.busy_gpu_ms;
    job.sample_reported = job.usage.reported_gpu_ms;
  } else if (now - job.sample_at >= options_.usage_sample_ms) {
    const double reported = job.usage.reported_gpu_ms - job.sample_reported;
    if (reported > 0) {
      const UsageSample s{job.seq,
                          job.run,
                          WallMs(now),
                          JobGpus(job),
                          (job.usage.busy_gpu_ms - job.sample_busy) / reported,
                          job.sample_vram};
      if (Status st = store_.AddUsageSample(s); !st) StoreFailed(st.error());
    }
    job.sample_at = now;
    job.sample_busy = job.usage.busy_gpu_ms;
    job.sample_reported = job.usage.reported_gpu_ms;
    job.sample_vram = 0;
  }
  if (now - job.usage_saved >= kUsageSaveEvery) {
    job.usage_saved = now;
    Persist(job);
  }
}

void Controller::SaveRunUsage(const Job& job) {
  for (const Worker& w : job.workers) {
    if (w.usage_at < 0 && w.reported_gpu_ms <= 0) continue;  // never reported
    StoredRun r;
    r.job_seq = job.seq;
    r.run = job.run;
    r.rank = w.rank;
    r.busy_gpu_ms = w.busy_gpu_ms;
    r.reported_gpu_ms = w.reported_gpu_ms;
    r.vram_peak = w.vram_peak;
    r.fit_gpus = core::RightSize(cluster_, cluster_.node(w.alloc.node).model, job.spec,
                                 {w.vram_peak, w.util_peak})
                     .fit_gpus;
    if (Status s = store_.SetRunUsage(r); !s) StoreFailed(s.error());
  }
}

Status Controller::SeedFromRuns(Ticks now) {
  // Fair share and budgets go on from the stored runs (running jobs are adopted from
  // their runs' start, which counts what they spent so far).
  if (Status s = SeedAccounts(store_, config_.queues, cluster_.catalog(), config_.policy.params,
                              *sched_, now, WallMs(now), true);
      !s)
    return s;
  budget_out_.assign(config_.queues.size(), 0);
  for (uint32_t i = 0; i < config_.queues.size(); ++i) {
    const core::Queue& queue = config_.queues.queue(core::QueueId(i));
    if (!queue.spec.budget) continue;
    const auto [start, end] = core::BudgetPeriodAt(queue.spec.budget->period, WallMs(now));
    // Already said spent in this period (before the restart): not said again.
    auto said = store_.GetMeta(BudgetSaidKey(queue.spec.name));
    if (!said) return said.error();
    budget_out_[i] = *said && **said == std::to_string(start);
  }
  return Ok{};
}

std::string Controller::BudgetSaidKey(const std::string& queue) {
  return "budget_spent_period:" + queue;
}

void Controller::NoteBudgets(Ticks now) {
  for (uint32_t i = 0; i < config_.queues.size(); ++i) {
    const core::Scheduler::BudgetAccount* a = sched_->budget_account(core::QueueId(i));
    if (a == nullptr || a->out == (budget_out_[i] != 0)) continue;
    budget_out_[i] = a->out;
    const core::Queue& q = config_.queues.queue(core::QueueId(i));
    log_.Budget(now, q.spec.name, a->out ? "spent" : "renewed", a->spent, q.spec.budget->gpu_hours);
    // The period it was said spent in, so a restart within it does not say it again.
    if (Status st = store_.SetMeta(BudgetSaidKey(q.spec.name),
                                   a->out ? std::to_string(a->start_unix_ms) : std::string());
        !st) {
      log::Warn("budget state not stored", {{"queue", q.spec.name}, {"error", st.error().message}});
    }
    const std::string spent = FormatValue(a->spent), budget = FormatValue(q.spec.budget->gpu_hours),
                      until = core::UtcMinute(a->end_unix_ms);
    log::Info(a->out ? "budget spent" : "budget renewed",
              {{"queue", q.spec.name},
               {"spent_gpu_hours", spent},
               {"budget_gpu_hours", budget},
               {"period_end", until},
               {"new_work",
                a->out ? core::Name(q.spec.budget->when_spent) : std::string_view("as asked")}});
  }
}

void Controller::JobUsageSeries(std::string token, std::string name, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, name](const Principal& user) -> Reply {
        int64_t seq = -1;
        std::string queue;
        if (Job* job = book_.Find(name)) {
          seq = job->seq;
          queue = job->queue;
        } else {
          auto stored = store_.FindJob(name);
          if (!stored) StoreFailed(stored.error());
          if (!*stored) return Reply::Error(Code::kNotFound, "no job " + name);
          seq = (*stored)->seq;
          queue = (*stored)->queue;
        }
        if (!MaySubmitTo(user, config_.queues,
                         queue)) {  // MaySee's rule, for a job in memory or only stored
          return Reply::Error(
              Code::kForbidden,
              user.Describe() + " may not read the usage of job " + name + " in queue " + queue);
        }
        auto samples = store_.UsageSamples(seq);
        if (!samples) StoreFailed(samples.error());
        json out = json::array();
        for (const UsageSample& s : *samples) {
          out.push_back({{"t", static_cast<double>(s.t_ms) / 1000.0},
                         {"run", s.run},
                         {"gpus", s.gpus},
                         {"util", s.util},
                         {"vram_peak_gb", static_cast<double>(s.vram_peak) / 1e9}});
        }
        Reply r;
        r.body = {
            {"job", name},
            {"interval_s", static_cast<double>(options_.usage_sample_ms) / 1000.0},
            {"retention_days", static_cast<double>(options_.usage_retention_ms) / 86'400'000.0},
            {"samples", out}};
        return r;
      },
      Kind::kRead);
}

void Controller::ReclaimIdle(Ticks now) {
  const core::PolicyParams& params = config_.policy.params;
  std::vector<std::pair<int64_t, std::string>> idle;
  for (int64_t seq : book_.running()) {
    const Job& job = book_.jobs().at(seq);
    if (job.state != JobState::kRunning) continue;
    const Ticks after = core::ReclaimIdleAfter(job.spec, config_.queues, params);
    if (after <= 0) continue;
    // Idle since the last time any worker was busy; every live worker must have reported.
    Ticks busy = -1;
    bool all = true;
    for (const Worker& w : job.workers) {
      if (w.exited) continue;
      all = all && w.busy_at >= 0;
      busy = std::max(busy, w.busy_at);
    }
    if (!all || busy < 0 || now - busy < after) continue;
    idle.emplace_back(seq, "GPU idle for " + spec::FormatSeconds((now - busy) / 1000 * 1000) +
                               " s: utilization under " +
                               FormatValue(params.reclaim_idle_below * 100) + "% since " +
                               // An absolute time: the reason is stored and read later
                               // ("(1 min ago)" was frozen into it).
                               core::UtcMinute(WallMs(busy)) + ", past reclaim_idle_after_s " +
                               spec::FormatSeconds(after));
  }
  for (auto& [seq, reason] : idle) {
    Job& job = book_.jobs().at(seq);
    // "job reclaimed" is EndJob's line, once the workers have gone.
    log::Info("reclaiming idle job", {{"job", job.name},
                                      {"queue", job.queue},
                                      {"user", job.user},
                                      {"grace_s", spec::FormatSeconds(job.spec.grace)},
                                      {"reason", reason}});
    BeginStop(job, StopKind::kReclaim, std::move(reason), job.spec.grace, now);
  }
}

json Controller::UsageSummary(const Job& job, Ticks now) const {
  server::Usage u = job.usage;
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    u.gpu_ms += static_cast<double>(std::max<Ticks>(0, now - job.run_start)) * JobGpus(job);
  }
  // vram_gb is asked per GPU; what agents report (now, peak) is per worker, all its GPUs.
  const int64_t per_worker =
      job.spec.vram_bytes *
      (job.spec.sharing == core::Sharing::kExclusive && job.spec.gpus > 1 ? job.spec.gpus : 1);
  json j = {{"gpu_hours", u.gpu_ms / 3.6e6},
            {"vram_asked_gb", static_cast<double>(job.spec.vram_bytes) / 1e9},
            {"vram_asked_worker_gb", static_cast<double>(per_worker) / 1e9}};
  if (u.reported_ms > 0) {
    j["busy_gpu_hours"] = u.busy_gpu_ms / 3.6e6;
    j["utilization"] = u.reported_gpu_ms > 0 ? u.busy_gpu_ms / u.reported_gpu_ms : 0.0;
    j["vram_peak_gb"] = static_cast<double>(u.vram_peak) / 1e9;
    j["vram_mean_gb"] = u.vram_ms / u.reported_ms / 1e9;
    j["reported_hours"] = u.reported_gpu_ms / 3.6e6;
    j["util_peak"] = u.util_peak;
    // Right-sizing: what would have held it, from what it was seen to use.
    if (auto model = cluster_.catalog().Find(u.model)) {
      const core::Advice a =
          core::RightSize(cluster_, *model, job.spec, {u.vram_peak, u.util_peak});
      if (!a.shape.empty()) {
        j["advice"] = {{"shape", a.shape},
                       {"text", a.text},
                       {"gpus_per_worker", a.gpus},
                       {"fit_gpus_per_worker", a.fit_gpus},
                       {"free_gpu_hours", u.gpu_ms / 3.6e6 * (1 - a.fit_gpus / a.gpus)}};
      }
    }
  }
  if (job.state == JobState::kRunning) {
    Ticks busy = -1;
    double util = 0;
    int64_t vram = 0;
    for (const Worker& w : job.workers) {
      busy = std::max(busy, w.busy_at);
      util += w.util;
      vram = std::max(vram, w.vram_used);
    }
    if (busy >= 0 && !job.workers.empty()) {
      j["util_now"] = util / static_cast<double>(job.workers.size());
      j["vram_now_gb"] = static_cast<double>(vram) / 1e9;  // the fullest worker's
      j["idle_s"] = static_cast<double>(now - busy) / 1000.0;
    }
    const Ticks after = core::ReclaimIdleAfter(job.spec, config_.queues, config_.policy.params);
    j["reclaim_idle_after_s"] = static_cast<double>(after) / 1000.0;
    if (!job.spec.keep_when_idle.empty()) j["keep_when_idle"] = job.spec.keep_when_idle;
  }
  return j;
}

}  // namespace gantry::server
