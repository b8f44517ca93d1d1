#include "server/controller.h"

#include "base/log.h"
#include "server/controller_internal.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/model/feasibility.h"
#include "core/placement.h"
#include "server/config_check.h"
#include "spec/job_reader.h"

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------- names

std::optional<std::string> BadJobName(const std::string& name) {
  // Names reach URLs, log paths and shells: a safe set, as Slurm's job names in practice.
  if (name.empty() || name.size() > 100)
    return "must be 1 to 100 characters, got " + std::to_string(name.size());
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return "\"" + name + "\" may hold only letters, digits, '-', '_' and '.'";
    }
  }
  if (name[0] == '.' || name[0] == '-') return "\"" + name + "\" may not start with '.' or '-'";
  // j<digits> and j<digits>_<digits> (array tasks) are the server's own names: a user's
  // name there would block every later submission without an id once the counter reached
  // it. Digits alone (and DIGITS_DIGITS) are job numbers (Slurm's ids, SLURM_JOB_ID): a
  // name of them would stand for another job.
  if (spec::NumberOfGivenId(name)) {
    return "\"" + name +
           "\" is reserved: j followed by digits is how the server names jobs without an id";
  }
  if (spec::IsJobNumber(name)) {
    return "\"" + name + "\" is reserved: digits are job numbers (12 stands for job j12)";
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- who may call

void Controller::SignIn(std::string token, Done done) {
  Post([this, token = std::move(token)] { return auth_.SignIn(token, WallMs(now_)); },
       std::move(done));
}

void Controller::SignOut(std::string session, Done done) {
  Post(
      [this, session = std::move(session)] {
        auth_.SignOut(session);
        return Reply{};
      },
      std::move(done));
}

void Controller::CallAsUser(std::string token, Done done, std::function<Reply(const Principal&)> fn,
                            Kind kind) {
  Post(
      [this, token = std::move(token), fn = std::move(fn)]() -> Reply {
        Reply err;
        auto user = auth_.AuthenticateUser(token, WallMs(now_), err);
        Reply r = user ? fn(*user) : err;
        Authenticator::LogRefusal(r, user ? user->Describe() : "unauthenticated");
        return r;
      },
      std::move(done), kind);
}

void Controller::CallAsAgent(std::string token, std::string node, Done done,
                             std::function<Reply(core::NodeId)> fn, Kind kind) {
  Post(
      [this, token = std::move(token), node = std::move(node), fn = std::move(fn)]() -> Reply {
        Reply err;
        auto p = Authenticate(token, err);
        Reply r = p ? AsAgent(*p, node, fn) : err;
        Authenticator::LogRefusal(r, (p ? p->Describe() : "unauthenticated") + " for node " + node);
        return r;
      },
      std::move(done), kind);
}

Reply Controller::AsAgent(const Principal& p, const std::string& node,
                          const std::function<Reply(core::NodeId)>& fn) {
  if (p.role != Role::kAgent && !p.admin()) {
    return Reply::Error(Code::kForbidden,
                        "agent endpoints need an agent or admin token, not " + p.Describe() + "'s");
  }
  if (!p.nodes.empty() && std::find(p.nodes.begin(), p.nodes.end(), node) == p.nodes.end()) {
    std::string own;
    for (const std::string& x : p.nodes) own += (own.empty() ? "" : ", ") + x;
    return Reply::Error(Code::kForbidden, "this agent token is bound to node " + own +
                                              "; it may not speak for " + node);
  }
  auto n = cluster_.FindNode(node);
  if (!n) {
    return Reply::Error(Code::kNotFound, "node " + node +
                                             " is not in the cluster config; pools name the nodes "
                                             "agents may register as");
  }
  return fn(*n);
}

bool Controller::MaySee(const Principal& p, const Job& job) const {
  return MaySubmitTo(p, config_.queues, job.queue);
}

bool Controller::MayManage(const Principal& p, const Job& job) const {
  return MaySubmitTo(p, config_.queues, job.queue) &&
         (p.job.empty() || job.name == p.job || job.user == p.user);
}

// ---------------------------------------------------------------- arrays and dependencies

namespace {

bool ParseInt(std::string_view v, int64_t max, int64_t& out) {
  if (v.empty() || v.size() > 9) return false;
  out = 0;
  for (char c : v) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    out = out * 10 + (c - '0');
  }
  return out <= max;
}

}  // namespace

struct ArraySpec {
  std::vector<int> indexes;
  int limit = 0;  // the throttle: at most this many tasks at once (0: none)
};

// Slurm's --array syntax: "0-999", "1,3,5-7", "0-15:4", each with an optional throttle
// "%N" (at most N tasks at once). The indexes, sorted and unique, and the throttle.
Result<ArraySpec> ParseArraySpec(const std::string& text, int max_tasks) {
  constexpr int64_t kMaxIndex = 4'000'000;
  ArraySpec parsed;
  const size_t pct = text.find('%');
  if (pct != std::string::npos) {
    int64_t limit = 0;
    if (!ParseInt(text.substr(pct + 1), max_tasks, limit) || limit < 1) {
      return Error{"array", "throttle \"%" + text.substr(pct + 1) +
                                "\": expected %N, N from 1 to " + std::to_string(max_tasks) +
                                " (at most N tasks at once)"};
    }
    parsed.limit = static_cast<int>(limit);
  }
  const std::string spec = text.substr(0, pct);
  std::set<int> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string part = spec.substr(start, end - start);
    start = end + 1;
    int64_t lo = 0, hi = 0, step = 1;
    const size_t dash = part.find('-'), colon = part.find(':');
    const std::string range = part.substr(0, colon);
    bool ok = colon == std::string::npos ||
              (dash != std::string::npos && ParseInt(part.substr(colon + 1), kMaxIndex, step) &&
               step > 0);
    if (ok && dash == std::string::npos) {
      ok = ParseInt(range, kMaxIndex, lo);
      hi = lo;
    } else if (ok) {
      ok = ParseInt(range.substr(0, dash), kMaxIndex, lo) &&
           ParseInt(range.substr(dash + 1), kMaxIndex, hi) && lo <= hi;
    }
    if (!ok) {
      return Error{"array", "\"" + part +
                                "\" is not an index, a range A-B (A <= B) or A-B:STEP, up to " +
                                std::to_string(kMaxIndex)};
    }
    for (int64_t i = lo; i <= hi; i += step) {
      out.insert(static_cast<int>(i));
      if (static_cast<int>(out.size()) > max_tasks) {
        return Error{"array", "more than " + std::to_string(max_tasks) + " tasks in one array"};
      }
    }
  }
  parsed.indexes.assign(out.begin(), out.end());
  return parsed;
}

// "j12", "j12:ok", "prep:any", "x:notok", "y:started", "a:corr", comma-separated (every
// one must be met), or '?'-separated (any one); "singleton" among comma-separated ones.
// "a:corr" is Slurm's aftercorr: an array task waits for the task of array `a` of its own
// index to finish with exit 0 (`corr`; kind kOk), for all of `a` when it is not an array.
struct AfterSpec {
  std::vector<Dependency> deps;
  std::vector<bool> corr;  // by dep
  bool any_of = false;
  bool singleton = false;
};
Result<AfterSpec> ParseAfterSpec(const std::string& spec) {
  AfterSpec out;
  out.any_of = spec.find('?') != std::string::npos;
  if (out.any_of && spec.find(',') != std::string::npos)
    return Error{"after", "give ',' (all of them) or '?' (any one of them), not both"};
  const char sep = out.any_of ? '?' : ',';
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(sep, start);
    if (end == std::string::npos) end = spec.size();
    std::string part = spec.substr(start, end - start);
    start = end + 1;
    if (part == "singleton" && !out.any_of) {
      out.singleton = true;
      continue;
    }
    Dependency d;
    const size_t colon = part.find(':');
    const std::string word = colon == std::string::npos ? "ok" : part.substr(colon + 1);
    const std::optional<Dependency::Kind> kind =
        word == "corr" ? Dependency::Kind::kOk : DependencyKindNamed(word);
    d.job = part.substr(0, colon);
    if (d.job.empty() || !kind) {
      return Error{"after", "\"" + part +
                                "\": expected JOB, JOB:ok (it must finish with exit 0), JOB:any "
                                "(any end), JOB:notok (an end other than exit 0), JOB:started "
                                "(its start), JOB:corr (an array task: JOB's task of its index "
                                "must finish with exit 0), or singleton"};
    }
    d.kind = *kind;
    out.deps.push_back(d);
    out.corr.push_back(word == "corr");
  }
  return out;
}

Controller::DepState Controller::DependencyState(const std::string& name, Dependency::Kind kind,
                                                 std::optional<JobEnd>& end) {
  using K = Dependency::Kind;
  end = EndStateOf(name);
  const JobEnd e = end.value_or(JobEnd::kFailed);
  if (e == JobEnd::kNone) {
    const Job* other = book_.Find(name);  // active: in memory
    return kind == K::kStarted && other && other->first_start >= 0 ? DepState::kMet
                                                                   : DepState::kWaiting;
  }
  switch (kind) {
    case K::kOk:
      return e == JobEnd::kFinished ? DepState::kMet : DepState::kNever;
    case K::kNotOk:
      return e != JobEnd::kFinished ? DepState::kMet : DepState::kNever;
    case K::kAny:
    case K::kStarted:
      return DepState::kMet;
  }
  return DepState::kWaiting;
}

std::optional<JobEnd> Controller::EndStateOf(const std::string& name) {
  if (const Job* j = book_.Find(name)) return j->active() ? JobEnd::kNone : j->end;
  auto stored = store_.FindJob(book_.Resolve(name));  // ended long ago: no longer in memory
  if (!stored) StoreFailed(stored.error());
  if (!*stored) return std::nullopt;
  if ((*stored)->active) return JobEnd::kNone;
  // (A stored end no word names would be a store from elsewhere: it ended, not well.)
  return JobEndNamed(json::parse((*stored)->doc, nullptr, false).value("end", std::string()))
      .value_or(JobEnd::kFailed);
}

int Controller::InScheduler(const std::string& array) const {
  int given = 0;
  if (const std::vector<int64_t>* tasks = book_.Array(array)) {
    for (int64_t seq : *tasks) {
      const Job& t = book_.jobs().at(seq);
      if (t.active() && t.core.valid()) ++given;
    }
  }
  return given;
}

bool Controller::ArrayHasRoom(const Job& job) const {
  return job.array_limit <= 0 || InScheduler(job.array) < job.array_limit;
}

void Controller::ReleaseThrottled(const std::string& array, int limit, Ticks now) {
  const std::vector<int64_t>* tasks = book_.Array(array);
  if (restoring_ || tasks == nullptr) return;
  std::vector<Job*> held;  // waiting for the throttle only, in index order (seq order)
  int given = 0;
  for (int64_t seq : *tasks) {
    Job& t = book_.jobs().at(seq);
    if (t.active() && t.core.valid()) ++given;
    if (t.state == JobState::kPending && !t.core.valid() && t.after.empty() && !HeldBack(t, now))
      held.push_back(&t);
  }
  for (size_t i = 0; i < held.size() && given < limit; ++i, ++given) {
    held[i]->Note(now, "released by its array's throttle (%" + std::to_string(limit) + ")");
    GiveToScheduler(*held[i], now);
    Touch(*held[i]);
    Persist(*held[i]);
  }
}

void Controller::Release(Job& job, Ticks now) {
  if (HeldBack(job, now)) {
    if (job.hold.empty()) begins_.emplace(job.begin_ms, job.seq);
    return;
  }
  if (ArrayHasRoom(job)) GiveToScheduler(job, now);
}

void Controller::BeginDue(Ticks now) {
  const int64_t wall = WallMs(now);
  while (!begins_.empty() && begins_.begin()->first <= wall) {
    const auto [begin_ms, seq] = *begins_.begin();
    begins_.erase(begins_.begin());
    auto it = book_.jobs().find(seq);
    if (it == book_.jobs().end()) continue;
    Job& job = it->second;
    if (job.state != JobState::kPending || job.core.valid() || job.begin_ms != begin_ms ||
        !job.after.empty() || !job.hold.empty())
      continue;  // started, changed, or held by something else (which releases it)
    job.Note(now, "its begin time came");
    Release(job, now);
    Touch(job);
    Persist(job);
  }
}

void Controller::GiveToScheduler(Job& job, Ticks now) {
  core::JobSpec spec = job.spec;
  // Eligible from now, as Slurm's EligibleTime.
  book_.SetCore(job, sched_->Submit(std::move(spec), now));
  sched_->SetPreemptions(job.core, job.preemptions);  // a held job requeued: its anti-thrash
  dirty_ = true;
}

namespace {

// Why dependency `d` of a job can never be met, its job having ended as `end` says.
std::string NeverMetWhy(const Dependency& d, const std::optional<JobEnd>& end) {
  return "dependency " + d.job + " ended " + (end ? std::string(Word(*end)) : "unknown") +
         ", so --after " + d.job + ":" + std::string(DependencyWord(d.kind)) + " can never be met";
}

}  // namespace

void Controller::Settle(Job& job, Ticks now) {
  if (job.state != JobState::kPending || job.core.valid() || !job.never_met.empty()) return;
  std::vector<Dependency> left;
  std::string never;  // why one can never be met
  bool met = false;
  for (const Dependency& d : job.after) {
    std::optional<JobEnd> end;
    switch (DependencyState(d.job, d.kind, end)) {
      case DepState::kWaiting:
        left.push_back(d);
        break;
      case DepState::kMet:
        met = true;
        break;
      case DepState::kNever:
        if (never.empty()) {
          never = NeverMetWhy(d, end);
        }
        break;
    }
  }
  // All of them: one never met settles the job. Any one of them: one met releases it, and
  // it is settled once none is left to wait for.
  if (job.after_or ? !met && left.empty() : !never.empty()) {
    NeverMet(job, never, now);
    return;
  }
  if (job.after_or && met) left.clear();
  const bool changed = left.size() != job.after.size();
  job.after = std::move(left);
  if (job.after.empty()) Release(job, now);
  if (changed) {
    Touch(job);
    Persist(job);
  }
}

void Controller::NeverMet(Job& job, const std::string& never, Ticks now) {
  if (KillsOnNeverMet(job)) {
    job.after.clear();
    log_.Cancel(now, job.name, never);
    EndJob(job, JobEnd::kCancelled, never, now);
    return;
  }
  job.never_met = never;  // out of the scheduler still (`after`), until cancelled
  job.Note(now, never + ": it waits until cancelled (sbatch --kill-on-invalid-dep=yes cancels)");
  Touch(job);
  Persist(job);
}

std::optional<Reply> Controller::ResolveAfter(const std::string& text, const core::JobSpec& spec,
                                              const Job& job, std::vector<Dependency>& after,
                                              bool& after_or, std::string& never_met) {
  after.clear();
  after_or = false;
  never_met.clear();
  if (text.empty()) return std::nullopt;
  auto parsed = ParseAfterSpec(text);
  if (!parsed)
    return Reply::Error(Code::kBadRequest, "after " + text + ": " + parsed.error().message);
  after_or = parsed->any_of;
  bool met = false;  // one of them is met already
  std::string never;
  std::vector<Dependency> nevers;
  for (size_t i = 0; i < parsed->deps.size(); ++i) {
    Dependency d = parsed->deps[i];
    d.job = book_.Resolve(d.job);              // a number as Slurm's ids are, too
    std::vector<std::string> names = {d.job};  // an array stands for all its tasks
    const bool array = book_.Array(d.job) != nullptr && !book_.HasName(d.job);
    // aftercorr of an array: its task of this job's index, as Slurm's; a job that is not an
    // array task, or an index the array lacks, waits for one that never comes
    // (DependencyNeverSatisfied).
    std::string corr_why;  // why there may be no such task
    if (parsed->corr[i] && array) {
      const std::string index = job.array_index >= 0 ? std::to_string(job.array_index) : "";
      names = {d.job + "_" + index};
      corr_why = index.empty() ? "the job is not an array task, so array " + d.job +
                                     " has no task of its index"
                               : "array " + d.job + " has no task " + index;
    } else if (const std::vector<int64_t>* tasks = book_.Array(d.job); array) {
      if (after_or) {
        return Reply::Error(Code::kBadRequest,
                            "after: array " + d.job +
                                " stands for all its tasks, which a '?' list cannot say: "
                                "give its tasks, or use ','");
      }
      names.clear();
      for (int64_t seq : *tasks) {
        if (auto t = book_.jobs().find(seq); t != book_.jobs().end())
          names.push_back(t->second.name);
      }
    }
    for (const std::string& name : names) {
      std::optional<JobEnd> end;
      const DepState state = DependencyState(name, d.kind, end);
      if (!end && !corr_why.empty()) {
        if (never.empty()) {
          never = "after: " + corr_why + ", so " + d.job + ":corr can never be met";
          never_met = "dependency " + d.job + ":corr can never be met: " + corr_why;
        }
        nevers.push_back(Dependency{name, d.kind});
        continue;
      }
      if (!end) return Reply::Error(Code::kNotFound, "after: no job " + name);
      switch (state) {
        case DepState::kWaiting:
          after.push_back(Dependency{name, d.kind});
          break;
        case DepState::kMet:
          met = true;
          break;
        case DepState::kNever:
          if (never.empty()) {
            never = "after: " + name + " ended " + std::string(Word(*end)) + ", so " + name + ":" +
                    std::string(DependencyWord(d.kind)) + " can never be met (use " + name +
                    ":any)";
            never_met = NeverMetWhy(Dependency{name, d.kind}, end);
          }
          nevers.push_back(Dependency{name, d.kind});
          break;
      }
    }
  }
  if (after_or ? !met && after.empty() && !never.empty() : !never.empty()) {
    // Slurm's sbatch takes the job, which then waits (DependencyNeverSatisfied) or is
    // cancelled (NeverMet); a native submit is refused, saying why.
    if (spec.script.empty()) return Reply::Error(Code::kUnprocessable, never);
    after.insert(after.end(), nevers.begin(), nevers.end());
  } else {
    never_met.clear();
  }
  if (after_or && met) after.clear();
  // singleton: after every earlier active job of the same name and user, as Slurm's.
  if (parsed->singleton) {
    const std::string& name = spec.name.empty() ? spec.id : spec.name;
    for (const auto& [seq, other] : book_.jobs()) {
      if (other.active() && !name.empty() && other.seq != job.seq &&
          (other.spec.name.empty() ? other.name : other.spec.name) == name &&
          other.user == job.user && other.team == job.team)
        after.push_back(Dependency{other.name, Dependency::Kind::kAny});
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- API: jobs

void Controller::Submit(std::string token, SubmitRequest req, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, req = std::move(req)](const Principal& user) -> Reply {
        const Ticks now = now_;
        if (auto limited = auth_.OverSubmitRate(user, clock_())) return *limited;
        if (static_cast<int64_t>(req.body.size()) > options_.max_spec_bytes) {
          return Reply::Error(Code::kTooLarge, "job spec is " + std::to_string(req.body.size()) +
                                                   " bytes; the limit is " +
                                                   std::to_string(options_.max_spec_bytes));
        }
        Job job;
        job.spec_format = req.format == "yaml" ? "yaml" : "json";
        job.spec_text = req.body;
        job.spec_file = req.file.empty() ? "request" : req.file;
        std::vector<std::string> problems;
        std::optional<core::JobSpec> spec = ReadSpec(job, &problems);
        if (spec && spec->command.empty() && spec->script.empty()) {
          problems.push_back(job.spec_file +
                             ": command: required: the agent needs something to run");
        }
        if (!problems.empty()) return Reply::Error(Code::kBadRequest, "invalid job spec", problems);
        job.queue = config_.queues.queue(spec->queue).spec.name;
        if (auto refused = MayNotSubmit(user, job.queue)) return *refused;
        if (spec->nice < 0 && !user.admin()) {  // a place ahead of others, as Slurm's --nice
          return Reply::Error(Code::kForbidden,
                              job.spec_file + ": nice: " + std::to_string(spec->nice) +
                                  ": only an admin may give a negative value (ahead of the "
                                  "queue's other jobs); " +
                                  user.Describe() + " may give 0 or more");
        }
        job.team = user.admin() ? "admin" : user.team;
        job.user = user.user;
        if (!req.idempotency_key.empty()) {
          if (req.idempotency_key.size() > 200) {
            return Reply::Error(Code::kBadRequest, "Idempotency-Key: at most 200 characters");
          }
          job.idem_key = req.idempotency_key;
          job.idem_hash = Sha256Hex(job.spec_format + "\n" + req.body +
                                    (req.array.empty() && req.after.empty()
                                         ? std::string()
                                         : "\narray=" + req.array + "\nafter=" + req.after));
          // A retry in the same batch as its first try finds it in the store too.
          if (std::any_of(unsaved_.begin(), unsaved_.end(), [&](int64_t seq) {
                auto u = book_.jobs().find(seq);
                return u != book_.jobs().end() && u->second.team == job.team &&
                       u->second.idem_key == job.idem_key;
              })) {
            SaveJobs();
          }
          auto prior = store_.FindIdempotent(job.team, job.idem_key);
          if (!prior) StoreFailed(prior.error());
          if (*prior) {
            if ((*prior)->idem_hash != job.idem_hash) {
              return Reply::Error(
                  Code::kConflict,
                  "Idempotency-Key " + job.idem_key + " was already used with a different request");
            }
            Reply r;
            const std::string array =
                json::parse((*prior)->doc, nullptr, false).value("array", std::string());
            r.body = {{"id", array.empty() ? (*prior)->name : array},
                      {"number", (*prior)->seq},
                      {"existing", true}};
            return r;
          }
        }
        if (!spec->id.empty()) {
          if (auto why = BadJobName(spec->id)) {
            return Reply::Error(Code::kBadRequest, "invalid job spec",
                                {job.spec_file + ": id: " + *why});
          }
        }
        std::vector<int> indexes;  // an array's, else empty
        int array_limit = 0;
        if (!req.array.empty()) {
          auto parsed = ParseArraySpec(req.array, options_.max_array_tasks);
          if (!parsed)
            return Reply::Error(Code::kBadRequest,
                                "array " + req.array + ": " + parsed.error().message);
          indexes = std::move(parsed->indexes);
          array_limit = parsed->limit;
        }
        // Its dependencies as they stand now: those not met yet, and for a batch job one
        // already never to be met, why. One answer for all its tasks, or with aftercorr
        // (":corr") one for each task's index.
        struct After {
          std::vector<Dependency> after;
          bool after_or = false;
          std::string never_met;
        };
        const bool per_task = !indexes.empty() && req.after.find(":corr") != std::string::npos;
        std::vector<After> afters(per_task ? indexes.size() : 1);
        for (size_t k = 0; k < afters.size(); ++k) {
          job.array_index = per_task ? indexes[k] : -1;
          After& a = afters[k];
          if (auto refused = ResolveAfter(req.after, *spec, job, a.after, a.after_or, a.never_met))
            return *refused;
        }
        job.array_index = -1;
        const std::string base =
            spec->id.empty() ? "j" + std::to_string(book_.next_seq()) : spec->id;
        std::vector<std::string> names;
        for (int i : indexes) names.push_back(base + "_" + std::to_string(i));
        if (indexes.empty()) names.push_back(base);
        if (auto why = BadJobName(names.back()); why && !spec->id.empty()) {
          return Reply::Error(Code::kBadRequest, "invalid job spec",
                              {job.spec_file + ": id: " + *why});
        }
        if (book_.Array(base) || (!indexes.empty() && book_.HasName(base))) {
          return Reply::Error(Code::kConflict, "job id " + base + " already exists");
        }
        for (const std::string& name : names) {
          if (book_.HasName(name))
            return Reply::Error(Code::kConflict, "job id " + name + " already exists");
          auto old = store_.FindJob(name);
          if (!old) StoreFailed(old.error());
          if (*old) return Reply::Error(Code::kConflict, "job id " + name + " already exists");
        }
        spec->id = names.front();
        if (auto refused = NeverRuns(*spec)) return *refused;
        // The site's cap on a team's active jobs (Slurm's MaxSubmitJobs): every task counts.
        if (const int64_t cap = config_.site.max_active_jobs_per_team; cap > 0 && !user.admin()) {
          const int64_t active = active_by_team_[job.team];
          if (active + static_cast<int64_t>(names.size()) > cap) {
            return Reply::Error(Code::kConflict,
                                "team " + job.team + " has " + std::to_string(active) +
                                    " active jobs and site.max_active_jobs_per_team is " +
                                    std::to_string(cap) + ": this request's " +
                                    std::to_string(names.size()) +
                                    " would pass it (cancel some, or wait for them to end)");
          }
        }
        job.submit = now;
        job.spec = *spec;
        job.kill_invalid_dep = req.kill_invalid_dep;
        if (req.hold) job.hold = "user";
        job.begin_ms = req.begin_ms > WallMs(now) ? req.begin_ms : 0;  // a past one: none
        if (!indexes.empty()) {                                        // indexes: sorted, unique
          int gcd = 0;
          for (int i : indexes) gcd = std::gcd(gcd, i - indexes.front());
          const int span = indexes.back() - indexes.front();
          const int count = static_cast<int>(indexes.size());
          job.array_shape = {count, indexes.front(), indexes.back(),
                             count > 1 && int64_t{gcd} * (count - 1) == span ? gcd : 1};
        }
        int given = 0;  // the array's tasks given to the scheduler (its throttle counts them)
        int64_t first_seq = 0;
        for (size_t k = 0; k < names.size(); ++k) {
          Job task = job;  // one job per array index, all in this request's transaction
          if (k > 0) task.idem_key = task.idem_hash = "";  // the array's key is on its first task
          task.seq = book_.TakeSeq();
          if (k == 0)
            first_seq = task.seq;  // the job's number; an array's (Slurm's: its last task's)
          task.name = names[k];
          task.spec.id = task.name;
          const After& a = afters[per_task ? k : 0];
          task.after = a.after;
          task.after_or = a.after_or && !a.after.empty();
          if (!indexes.empty()) {
            task.array = base;
            task.array_index = indexes[k];
            task.array_limit = array_limit;
            task.array_number = first_seq;
            task.number = k + 1 < names.size() ? task.seq + 1 : first_seq;  // (Job::number)
          }
          Job& j = book_.Add(std::move(task));
          ++active_by_team_[j.team];
          log_.Submit(now, j.name);
          j.Note(now, "submitted");
          if (k == 0) {  // who did what: one line per request, not per array task
            log::Info(indexes.empty() ? "job submitted" : "array submitted",
                      {{"job", indexes.empty() ? j.name : base},
                       {"tasks", std::to_string(names.size())},
                       {"queue", j.queue},
                       {"by", user.Describe()}});
          }
          if (HeldBack(j, now)) {
            if (j.hold.empty()) begins_.emplace(j.begin_ms, j.seq);
          } else if (j.after.empty()) {
            // (Release would count the array's tasks anew for each: a 10,000-task array.)
            if (array_limit == 0 || given < array_limit) GiveToScheduler(j, now);
            given += j.core.valid() ? 1 : 0;
          }
          if (!j.after.empty()) {
            for (const Dependency& d : j.after) book_.AddDependent(d.job, j.seq);
          }
          Persist(j);
          metrics_.Submitted();
          if (!a.never_met.empty()) NeverMet(j, a.never_met, now);
        }
        dirty_ = true;
        Reply r;
        r.code = Code::kCreated;
        r.body = {{"id", indexes.empty() ? names.front() : base}, {"number", first_seq}};
        if (!indexes.empty()) r.body["tasks"] = indexes.size();
        return r;
      });
}

std::vector<std::string> Controller::JobNodes(const Job& job) const {
  std::vector<std::string> nodes;
  for (const Worker& w : job.workers) {
    const std::string& n = cluster_.node(w.alloc.node).name;
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  return nodes;
}

json Controller::JobSummary(const Job& job, bool details, const Principal* viewer) {
  std::string state = job.state_word();
  std::string reason;
  switch (job.state) {
    case JobState::kPending:
      if (job.core.valid()) {
        // The core's text leaves out times that move (core::AtLabel): given here, as of now.
        const core::JobRecord& rec = sched_->job(job.core);
        reason = HumanTimes(rec.wait_reason, epoch_ms_, WallMs(now_));
        if (const std::string_view label = core::AtLabel(rec.wait.cause);
            rec.wait.at >= 0 && !label.empty()) {
          reason += "; " + std::string(label) + " " + HumanTime(WallMs(rec.wait.at), WallMs(now_));
        }
        if (rec.wait.cause == core::WaitCause::kQuota && rec.wait.queue.valid()) {
          reason += "; it holds " + GpusText(sched_->queue_usage(rec.wait.queue)) + " now";
        }
      }
      if (!job.hold.empty()) {
        reason = "held: by " + std::string(job.hold == "admin" ? "an admin" : "its user") +
                 " (gantry release " + job.name + ", or scontrol release)";
      } else if (!job.never_met.empty()) {
        reason = "dependency never satisfied: " + job.never_met + " (it waits until cancelled)";
      } else if (!job.after.empty()) {
        reason = "dependency: waiting for ";
        const size_t shown = std::min<size_t>(job.after.size(), 3);
        for (size_t i = 0; i < shown; ++i) {
          static constexpr const char* kTo[] = {" to finish", " to end", " to fail", " to start"};
          reason += (i == 0         ? ""
                     : job.after_or ? " or "
                                    : ", ") +
                    job.after[i].job + kTo[static_cast<int>(job.after[i].kind)];
        }
        if (job.after.size() > shown)
          reason += " and " + std::to_string(job.after.size() - shown) + " more";
      } else if (job.begin_ms > WallMs(now_)) {
        reason = "begin: not before " + HumanTime(job.begin_ms, WallMs(now_)) + " (--begin)";
      } else if (!job.core.valid() && job.array_limit > 0) {
        reason = "throttle: at most " + std::to_string(job.array_limit) + " of array " + job.array +
                 "'s tasks run at once (--array ...%" + std::to_string(job.array_limit) + ")";
      }
      if (reason.empty()) reason = "waiting for the next scheduling pass";
      break;
    case JobState::kRunning:
      break;
    case JobState::kStopping:
      reason = std::string(Name(job.stop)) + ": " + job.stop_reason;
      break;
    case JobState::kDone:
      reason = job.end_reason;
      break;
  }
  const std::vector<std::string> nodes = JobNodes(job);
  json j = {{"id", job.name},
            {"seq", job.seq},
            {"number", job.Number()},
            {"array", job.array.empty() ? json() : json(job.array)},
            {"array_index", job.array_index < 0 ? json() : json(job.array_index)},
            {"array_number", job.array.empty() ? json() : json(book_.ArrayNumber(job))},
            {"queue", job.queue},
            {"team", job.team},
            {"user", job.user},
            {"tier", std::string(core::Name(job.spec.tier))},
            {"state", state},
            {"reason", reason},
            {"request", core::Placer::DescribeSizes(job.spec, cluster_.catalog())},
            {"replicas", job.spec.replicas},
            {"submit", UnixSeconds(job.submit)},
            {"run", job.run},
            {"preemptions", job.preemptions},
            {"requeues", job.requeues},
            {"nodes", nodes},
            {"progress_s", static_cast<double>(job.progress) / 1000.0}};
  if (job.spec.tasks_per_worker > 1) j["tasks_per_worker"] = job.spec.tasks_per_worker;
  if (job.spec.nice != 0) j["nice"] = job.spec.nice;
  if (!job.hold.empty()) j["hold"] = job.hold;
  if (job.begin_ms > 0) j["begin"] = static_cast<double>(job.begin_ms) / 1000.0;
  j["start"] = job.first_start >= 0 ? json(UnixSeconds(job.first_start)) : json(nullptr);
  j["end"] = job.end_time >= 0 ? json(UnixSeconds(job.end_time)) : json(nullptr);
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    j["run_start"] = UnixSeconds(job.run_start);
  }
  if (job.spec.elastic()) {  // its size now (the scheduler's, ahead of a restart to it)
    j["min_replicas"] = job.spec.min_replicas;
    j["resizes"] = job.resizes;
    if (job.state == JobState::kRunning || job.state == JobState::kStopping) j["size"] = job.size;
  }
  // Why it waits, for programs: the reason's cause and, where known, the queue whose
  // limit holds it, the job the room is held for and when that may change.
  if (job.state == JobState::kPending && job.core.valid() && job.after.empty()) {
    const core::WaitReason& w = sched_->job(job.core).wait;
    json wait = {{"cause", std::string(core::Word(w.cause))}};
    if (w.queue.valid()) wait["queue"] = config_.queues.queue(w.queue).spec.name;
    if (const Job* holder = book_.HolderOf(w.holder)) wait["holder"] = holder->name;
    if (w.at >= 0) wait["at"] = UnixSeconds(w.at);
    j["wait"] = std::move(wait);
  }
  if (job.end == JobEnd::kFailed) {
    j["exit_code"] = job.exit_code;
    // A signal's end is stored as 128 + signal; the worker that ended the job says which.
    for (const Worker& w : job.workers) {
      if (w.signal != 0 && job.exit_code == 128 + w.signal) j["exit_signal"] = w.signal;
    }
  }
  // What sacct and squeue show besides (gantry acct, ls --format; docs/slurm.md).
  if (!job.spec.name.empty()) j["name"] = job.spec.name;
  if (std::string pool = PoolOf(job); !pool.empty()) j["pool"] = std::move(pool);
  if (job.spec.time_limit) {
    j["time_limit_s"] = static_cast<double>(*job.spec.time_limit) / 1000.0;
    // Slurm's limit, where sbatch --signal's lead came off it (gantry sbatch: the signal at
    // time_limit_s, the kill after the grace): squeue's, sacct's and scontrol's TimeLimit.
    if (job.LimitSignalFirst())
      j["slurm_time_limit_s"] =
          static_cast<double>(*job.spec.time_limit + job.SignalLead()) / 1000.0;
  }
  if (job.spec.cpus_milli > 0) j["cpus"] = static_cast<double>(job.spec.cpus_milli) / 1000.0;
  {
    int gpus = 0;  // GPUs it holds (a MIG instance or a share counts one), else asks for
    for (const Worker& w : job.workers) {
      gpus += w.alloc.sharing == core::Sharing::kExclusive ? std::popcount(w.alloc.gpu_mask) : 1;
    }
    if (job.workers.empty() && job.spec.uses_gpu()) {
      gpus =
          job.spec.replicas * (job.spec.sharing == core::Sharing::kExclusive ? job.spec.gpus : 1);
    }
    j["gpus"] = gpus;
  }
  {  // As Slurm names them (the site's names): squeue's, sacct's and scontrol's columns.
    core::PoolId pool = job.spec.pool;
    if (!pool.valid() && !job.workers.empty())
      pool = cluster_.node(job.workers.front().alloc.node).pool;
    const core::Tier tier = job.core.valid() && job.state != JobState::kDone
                                ? sched_->job(job.core).spec.tier
                                : job.spec.tier;
    const SlurmNames n = SiteNames(job, pool, tier);
    j["slurm"] = {{"partition", n.partition}, {"account", n.account}, {"qos", n.qos}};
  }
  if (job.core.valid() && job.state != JobState::kDone) {  // a spent budget demoted it
    const core::JobRecord& rec = sched_->job(job.core);
    if (rec.spec.tier != rec.asked_tier) {
      j["tier_now"] = std::string(core::Name(rec.spec.tier));
      if (auto b = sched_->BudgetDemotes(job.spec.queue)) {
        j["tier_reason"] = "budget: queue " + config_.queues.queue(*b).spec.name +
                           " spent its GPU-hours; new work runs as best-effort until " +
                           core::UtcMinute(sched_->budget_account(*b)->end_unix_ms);
      } else {
        j["tier_reason"] = "budget: started while its queue's GPU-hours were spent";
      }
    }
  }
  if (job.first_start >= 0) j["usage"] = UsageSummary(job, now_);
  if (job.batch()) {  // sacct's rows for its script and its steps (the run's last 100)
    j["batch"] = true;
    json steps = json::array();
    const size_t first = job.steps.size() > 100 ? job.steps.size() - 100 : 0;
    for (size_t i = first; i < job.steps.size(); ++i)
      steps.push_back(StepSummary(job, job.steps[i]));
    if (!steps.empty()) j["steps"] = std::move(steps);
  }
  if (!details) return j;
  json workers = json::array();
  for (const Worker& w : job.workers) {
    workers.push_back({{"rank", w.rank},
                       {"alloc", WorkerAllocToJson(w.alloc, cluster_)},
                       {"exited", w.exited},
                       {"exit_code", w.exit_code},
                       {"signal", w.signal},
                       {"lost", w.lost}});
  }
  j["workers"] = workers;
  json history = json::array();
  for (const Job::Happened& h : job.history)
    history.push_back({{"t", UnixSeconds(h.t)}, {"what", h.what}});
  j["history"] = std::move(history);
  if (viewer && MaySee(*viewer, job)) {
    j["command"] = job.spec.command;
    json env = json::object();
    for (const auto& [k, v] : job.spec.env) env[k] = v;
    j["env"] = env;
    j["workdir"] = job.spec.workdir;
    if (!job.spec.image.empty()) j["image"] = job.spec.image;
    j["spec"] = job.spec_text;
  }
  return j;
}

std::string Controller::PoolOf(const Job& job) const {
  if (job.spec.pool.valid()) return cluster_.pool(job.spec.pool).spec.name;
  if (!job.workers.empty())
    return cluster_.pool(cluster_.node(job.workers.front().alloc.node).pool).spec.name;
  return "";
}

std::string Controller::WaitWord(const Job& job) const {
  // As Slurm's reasons: a hold first, then dependencies, then the begin time.
  if (!job.hold.empty()) return "held";
  if (!job.after.empty()) return "dependency";
  if (job.begin_ms > WallMs(now_)) return "begin";
  if (!job.core.valid()) return job.array_limit > 0 ? "throttle" : "unscheduled";
  return std::string(core::Word(sched_->job(job.core).wait.cause));
}

namespace {

// An ended job read back from the store: its record and its spec, decoded. Reads nothing
// but the config (fixed while gantryd runs), so any thread may call it (Offload).
Job DecodeStored(const StoredJob& stored, const spec::ClusterConfig& config) {
  Job job;
  job.seq = stored.seq;
  job.name = stored.name;
  job.team = stored.team;
  job.queue = stored.queue;
  (void)JobFromDoc(json::parse(stored.doc, nullptr, false), config.cluster, job);
  if (auto spec = ReadJobSpec(job, config, nullptr)) job.spec = *spec;
  return job;
}

}  // namespace

Job Controller::FromStore(const StoredJob& stored) { return DecodeStored(stored, config_); }

void Controller::ListJobs(std::string token, JobQuery q, Done done) {
  Done keep = done;  // answered after the stored jobs are decoded (ListWithStored)
  CallAsUser(
      std::move(token), std::move(done),
      [this, q = std::move(q), keep = std::move(keep)](const Principal&) -> Reply {
        static const std::set<std::string> kActive = {"pending", "running", "stopping"};
        if (!q.state.empty() && !kActive.count(q.state) && !JobEndNamed(q.state)) {
          return Reply::Error(Code::kBadRequest,
                              "state: no state \"" + q.state +
                                  "\"; one of pending, running, stopping, finished, failed, "
                                  "cancelled, rejected, reclaimed");
        }
        // Asking for an ended state lists ended jobs (those still in memory) without --all.
        const bool with_ended = q.all || JobEndNamed(q.state).has_value();
        if (!with_ended || q.ended_since_ms < 0) return ListJobsReply(q, with_ended, {}, false);
        // sacct's window reaches back past memory: the store's ended jobs (at most
        // kStoredListed, said in `truncated`). Read here, decoded on the offload thread,
        // listed by a later message.
        constexpr int64_t kStoredListed = 20'000;
        auto ended = store_.EndedJobs(q.ended_since_ms, kStoredListed + 1);
        if (!ended) StoreFailed(ended.error());
        const bool truncated = static_cast<int64_t>(ended->size()) > kStoredListed;
        if (truncated) ended->pop_back();
        auto rows = std::make_shared<std::vector<StoredJob>>(std::move(*ended));
        const bool posted = offload_.Post([this, q, rows, truncated, keep] {
          auto stored = std::make_shared<std::vector<Job>>();
          stored->reserve(rows->size());
          for (const StoredJob& sj : *rows) stored->push_back(DecodeStored(sj, config_));
          Post([this, q, stored, truncated] { return ListJobsReply(q, true, *stored, truncated); },
               keep, Kind::kRead);
        });
        if (!posted) return Reply::Error(Code::kUnavailable, "gantryd is shutting down");
        Reply r;
        r.deferred = true;
        return r;
      },
      Kind::kRead);
}

Reply Controller::ListJobsReply(const JobQuery& q, bool with_ended, const std::vector<Job>& stored,
                                bool truncated) {
  // One walk counts and picks; only the jobs listed are written out (a site's 14,000
  // jobs took 0.2 s of this thread per console refresh when all were).
  std::set<std::string> queues, states, users;
  std::map<std::pair<std::string, std::string>, int64_t> waiting;  // (cause, pool) -> jobs
  std::vector<const Job*> matched;
  auto take = [&](const Job& job) {  // counts its values; true if it is listed
    const std::string state = job.state_word();
    queues.insert(job.queue);
    states.insert(state);
    if (!job.user.empty()) users.insert(job.user);
    if ((!q.state.empty() && state != q.state) || (!q.queue.empty() && job.queue != q.queue) ||
        (!q.user.empty() && job.user != q.user) || (!q.array.empty() && job.array != q.array)) {
      return false;
    }
    matched.push_back(&job);
    return true;
  };
  for (const auto& [seq, job] : book_.jobs()) {
    if (!with_ended && !job.active()) continue;
    if (!take(job)) continue;
    if (job.state == JobState::kPending) {
      const std::string cause = WaitWord(job);
      ++waiting[{cause, cause == "capacity" ? PoolOf(job) : ""}];
    }
  }
  if (q.ended_since_ms >= 0) {  // the stored ones, in submission order among the others
    for (const Job& job : stored) {
      if (!book_.jobs().contains(job.seq)) take(job);  // else in memory: taken above
    }
    std::stable_sort(matched.begin(), matched.end(),
                     [](const Job* a, const Job* b) { return a->seq < b->seq; });
  }
  size_t listed = matched.size();
  if (q.limit >= 0) {
    auto rank = [](const Job* j) {
      return j->state == JobState::kPending ? 0 : j->active() ? 1 : 2;
    };
    listed = std::min(listed, static_cast<size_t>(q.limit));
    std::partial_sort(matched.begin(), matched.begin() + static_cast<std::ptrdiff_t>(listed),
                      matched.end(), [&](const Job* a, const Job* b) {
                        if (rank(a) != rank(b)) return rank(a) < rank(b);
                        if (rank(a) == 2 && a->end_time != b->end_time)
                          return a->end_time > b->end_time;
                        return a->seq < b->seq;
                      });
  }
  json jobs = json::array();
  for (size_t i = 0; i < listed; ++i) jobs.push_back(JobSummary(*matched[i], false, nullptr));
  std::vector<std::pair<int64_t, json>> groups;
  for (const auto& [key, n] : waiting) {
    json g = {{"cause", key.first}, {"jobs", n}};
    if (!key.second.empty()) g["pool"] = key.second;
    groups.emplace_back(n, std::move(g));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  json by_cause = json::array();
  for (auto& [n, g] : groups) by_cause.push_back(std::move(g));
  Reply r;
  r.body = {{"jobs", std::move(jobs)},
            {"total", matched.size()},
            {"truncated", truncated},
            {"waiting", std::move(by_cause)},
            {"values", {{"queue", queues}, {"state", states}, {"user", users}}}};
  return r;
}

void Controller::ShowJob(std::string token, std::string name, Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, name](const Principal& user) -> Reply {
        if (Job* job = book_.Find(name)) {
          Reply r;
          r.body = JobSummary(*job, true, &user);
          return r;
        }
        auto stored = store_.FindJob(book_.Resolve(name));
        if (!stored) StoreFailed(stored.error());
        if (!*stored) return Reply::Error(Code::kNotFound, "no job " + name);
        Reply r;
        r.body = JobSummary(FromStore(**stored), true, &user);
        return r;
      },
      Kind::kRead);
}

void Controller::Cancel(std::string token, std::string name, bool force, Done done) {
  CallAsUser(
      std::move(token), std::move(done), [this, name, force](const Principal& user) -> Reply {
        const std::string reason =
            (force ? "force-cancelled by " : "cancelled by ") + user.Describe();
        Job* job = book_.Find(name);
        if (std::vector<Job*> tasks = job ? std::vector<Job*>() : book_.ArrayTasks(name);
            !tasks.empty()) {
          // An array's id cancels every task still active, as scancel does (all or none).
          for (Job* t : tasks) {
            if (!MayManage(user, *t)) {
              return Reply::Error(Code::kForbidden, user.Describe() + " may not cancel array " +
                                                        name + " in queue " + t->queue + " (team " +
                                                        t->team + ")");
            }
          }
          // By seq, not pointer: a task's end may drop older ended tasks from memory
          // (recent_done). Those held by the throttle first, so none is released to the
          // scheduler by a running one's end only to be cancelled next.
          std::vector<int64_t> order;
          for (const Job* t : tasks) {
            if (t->active() && !t->core.valid()) order.push_back(t->seq);
          }
          for (const Job* t : tasks) {
            if (t->active() && t->core.valid()) order.push_back(t->seq);
          }
          int cancelled = 0;
          for (int64_t seq : order) {
            auto t = book_.jobs().find(seq);
            if (t == book_.jobs().end() || !t->second.active()) continue;
            CancelJob(t->second, reason, now_, force);
            ++cancelled;
          }
          Reply r;
          r.body = {{"id", name}, {"cancelled", cancelled}};
          return r;
        }
        if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
        if (!MayManage(user, *job)) {
          return Reply::Error(Code::kForbidden, user.Describe() + " may not cancel job " + name +
                                                    " in queue " + job->queue + " (team " +
                                                    job->team + ")");
        }
        if (job->state == JobState::kDone) {
          return Reply::Error(Code::kConflict, "job " + name + " already ended (" +
                                                   std::string(Word(job->end)) + ")");
        }
        CancelJob(*job, reason, now_, force);
        Reply r;
        r.body = {{"id", job->name}, {"state", job->state_word()}};
        return r;
      });
}

void Controller::Requeue(std::string token, std::string name, Done done) {
  CallAsUser(std::move(token), std::move(done), [this, name](const Principal& user) -> Reply {
    Job* job = book_.Find(name);
    if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
    if (!MayManage(user, *job)) {
      return Reply::Error(Code::kForbidden, user.Describe() + " may not requeue job " + name +
                                                " in queue " + job->queue);
    }
    const std::string reason = "requeued by " + user.Describe();
    switch (job->state) {
      case JobState::kPending:
      case JobState::kDone:
        return Reply::Error(Code::kConflict, "job " + name + " is " + job->state_word() +
                                                 ": only a running or stopping job is requeued");
      case JobState::kRunning:
        BeginStop(*job, StopKind::kLost, reason, job->spec.grace, now_);
        break;
      case JobState::kStopping:
        // Its time limit's signal, say, made the script ask: it waits again instead of
        // ending, as Slurm's checkpoint-and-requeue scripts expect.
        if (job->stop != StopKind::kPreempt && job->stop != StopKind::kLost) {
          job->stop = StopKind::kLost;
          job->stop_reason = reason;
          Persist(*job);
        }
        break;
    }
    Reply r;
    r.body = {{"id", job->name}, {"state", job->state_word()}};
    return r;
  });
}

void Controller::Hold(std::string token, std::string name, bool hold,
                      std::optional<bool> admin_hold, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    // An array's id: its pending tasks, as scontrol's.
    Job* named = book_.Find(name);
    std::vector<Job*> jobs = named ? std::vector<Job*>{named} : book_.ArrayTasks(name);
    if (jobs.empty()) return Reply::Error(Code::kNotFound, "no job " + name);
    const bool admin = admin_hold.value_or(user.admin());
    if (admin && !user.admin())
      return Reply::Error(Code::kForbidden, user.Describe() + " may not make an admin's hold");
    for (Job* job : jobs) {
      if (!MayManage(user, *job)) {
        return Reply::Error(Code::kForbidden, user.Describe() + " may not " +
                                                  (hold ? "hold" : "release") + " job " +
                                                  job->name + " in queue " + job->queue);
      }
      if (!hold && job->hold == "admin" && !user.admin()) {
        return Reply::Error(
            Code::kForbidden,
            "job " + job->name + " was held by an admin: only an admin releases it");
      }
    }
    if (named && !named->active()) {
      return Reply::Error(Code::kConflict,
                          "job " + name + " already ended (" + std::string(Word(named->end)) + ")");
    }
    // A running job's hold is kept, as Slurm keeps it: should the job be requeued, it
    // waits for a release (EndStop).
    int changed = 0;
    std::set<std::string> throttled;  // arrays whose throttle a held task made room in
    for (Job* job : jobs) {
      if (!job->active()) continue;
      if (hold) {
        const std::string by = admin ? "admin" : "user";
        if (job->hold == by) continue;
        // (A running one's hold waits for a requeue: EndStop.)
        if (job->state == JobState::kPending && Withdraw(*job, now_)) throttled.insert(job->array);
        job->hold = by;
        job->Note(now_, "held by " + user.Describe());
      } else {
        if (job->hold.empty()) continue;
        job->hold.clear();
        job->Note(now_, "released by " + user.Describe());
        if (job->state == JobState::kPending && job->after.empty()) Release(*job, now_);
      }
      Touch(*job);
      Persist(*job);
      ++changed;
    }
    ReleaseThrottledArrays(throttled, now_);
    Reply r;
    r.body = {{"id", name}, {hold ? "held" : "released", changed}};
    return r;
  });
}

bool Controller::Withdraw(Job& job, Ticks now) {
  if (!job.core.valid()) return false;
  sched_->Finish(job.core, now);
  LetGoOfCore(job);
  dirty_ = true;
  return job.array_limit > 0;
}

void Controller::ReleaseThrottledArrays(const std::set<std::string>& arrays, Ticks now) {
  for (const std::string& array : arrays) {
    if (const std::vector<int64_t>* tasks = book_.Array(array); tasks && !tasks->empty())
      ReleaseThrottled(array, book_.jobs().at(tasks->front()).array_limit, now);
  }
}

std::optional<Reply> Controller::MayNotUpdate(const Principal& user, const Job& job) const {
  if (MayManage(user, job)) return std::nullopt;
  return Reply::Error(Code::kForbidden, user.Describe() + " may not update job " + job.name +
                                            " in queue " + job.queue);
}

std::optional<Reply> Controller::MayNotSubmit(const Principal& user,
                                              const std::string& queue) const {
  if (MaySubmitTo(user, config_.queues, queue)) return std::nullopt;
  std::string own;
  for (const std::string& q : user.queues) own += (own.empty() ? "" : ", ") + q;
  return Reply::Error(Code::kForbidden, user.Describe() + " may not submit to queue " + queue +
                                            " (its queues: " + (own.empty() ? "none" : own) + ")");
}

std::optional<Reply> Controller::NeverRuns(const core::JobSpec& spec) const {
  if (auto why = core::WhyInfeasible(spec, cluster_))
    return Reply::Error(Code::kUnprocessable, "job can never run on this cluster: " + *why);
  if (auto why = core::WhyNeverStarts(spec, cluster_, config_.queues))  // above a burst limit
    return Reply::Error(Code::kUnprocessable, "job can never run: it " + *why);
  return std::nullopt;
}

void Controller::Updated(Job& job) {
  if (!job.core.valid() && job.after.empty()) Release(job, now_);
  Touch(job);
  Persist(job);
}

std::optional<Reply> Controller::PendingJobsToUpdate(const Principal& user, const std::string& name,
                                                     const std::string& field,
                                                     std::vector<Job*>& jobs, bool running_too) {
  Job* named = book_.Find(name);
  jobs = named ? std::vector<Job*>{named} : book_.ArrayTasks(name);
  if (jobs.empty()) return Reply::Error(Code::kNotFound, "no job " + name);
  for (Job* job : jobs) {
    if (auto refused = MayNotUpdate(user, *job)) return *refused;
  }
  if (named && running_too && !named->active()) {  // as Slurm's "Job has already finished"
    return Reply::Error(Code::kConflict, "job " + name + " is " + named->state_word() +
                                             ": an ended job's " + field + " is not changed");
  }
  if (named && !running_too && named->state != JobState::kPending) {  // "no longer pending"
    return Reply::Error(Code::kConflict, "job " + name + " is " + named->state_word() +
                                             ": only a pending job's " + field + " is changed");
  }
  return std::nullopt;
}

void Controller::SetBegin(std::string token, std::string name, int64_t begin_ms, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    std::vector<Job*> jobs;
    if (auto refused = PendingJobsToUpdate(user, name, "start time", jobs)) return *refused;
    const int64_t at = begin_ms > WallMs(now_) ? begin_ms : 0;
    int changed = 0;
    std::set<std::string> throttled;
    for (Job* job : jobs) {
      if (job->state != JobState::kPending || job->begin_ms == at) continue;
      job->begin_ms = at;
      job->Note(now_, at > 0 ? "its begin time set by " + user.Describe()
                             : "its begin time cleared by " + user.Describe());
      // Out of the scheduler until then; Release notes the time, or hands it back now.
      if (HeldBack(*job, now_) && Withdraw(*job, now_)) throttled.insert(job->array);
      Updated(*job);
      ++changed;
    }
    ReleaseThrottledArrays(throttled, now_);
    Reply r;
    r.body = {{"id", name}, {"updated", changed}};
    return r;
  });
}

void Controller::UpdateSpec(std::string token, std::string name, json fields, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    static constexpr const char* kFields[] = {"name", "pool", "tier", "queue", "nice"};
    for (const auto& [key, value] : fields.items()) {
      if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
        return Reply::Error(Code::kBadRequest, key + ": expected name, pool, tier, queue or nice");
      if (key == "nice") {  // its range is the job reader's
        if (!value.is_number_integer())
          return Reply::Error(Code::kBadRequest, "nice: expected an integer");
        if (value.get<int64_t>() < 0 && !user.admin())
          return Reply::Error(Code::kForbidden, "nice: " + value.dump() +
                                                    ": only an admin may give a negative value");
      } else if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
        return Reply::Error(Code::kBadRequest, key + ": expected a non-empty string");
      }
    }
    if (fields.empty()) return Reply::Error(Code::kBadRequest, "no field to change");
    // A running job's name changes too (squeue, sacct; its SLURM_JOB_NAME stays), as Slurm's.
    const bool rename = fields.size() == 1 && fields.contains("name");
    std::vector<Job*> jobs;
    if (auto refused = PendingJobsToUpdate(user, name, rename ? "name" : "spec", jobs, rename))
      return *refused;
    // Each task's spec with the fields written in, read again as at submission; all
    // checked before any is changed.
    struct Resolved {
      Job* job;
      std::string text;
      core::JobSpec spec;
      std::string queue;
    };
    std::vector<Resolved> resolved;
    for (Job* job : jobs) {
      if (rename ? !job->active() : job->state != JobState::kPending) continue;
      if (job->spec_format != "json") {
        return Reply::Error(Code::kConflict, "job " + job->name +
                                                 ": its spec is YAML, which is not rewritten: "
                                                 "cancel it and submit it again as it should be");
      }
      json doc = json::parse(job->spec_text, nullptr, false);
      if (!doc.is_object())
        return Reply::Error(Code::kConflict, "job " + job->name + ": its spec does not read");
      for (const auto& [key, value] : fields.items()) doc[key] = value;
      Job probe;
      probe.spec_format = job->spec_format;
      probe.spec_file = "update";
      probe.spec_text = doc.dump();
      probe.time_limit_set = job->time_limit_set;
      std::vector<std::string> problems;
      std::optional<core::JobSpec> spec = ReadSpec(probe, &problems);
      if (!spec) return Reply::Error(Code::kBadRequest, "invalid job spec", problems);
      const std::string queue = config_.queues.queue(spec->queue).spec.name;
      if (auto refused = MayNotSubmit(user, queue)) return *refused;
      spec->id = job->name;
      if (auto refused = NeverRuns(*spec)) return *refused;
      resolved.push_back({job, std::move(probe.spec_text), std::move(*spec), queue});
    }
    std::set<std::string> throttled;
    for (Resolved& r : resolved) {
      Job& job = *r.job;
      if (job.state != JobState::kPending) {  // running: its name only, the rest as it runs
        job.spec_text = std::move(r.text);
        job.given_names.reset();
        job.spec.name = r.spec.name;
        job.Note(now_, "renamed by " + user.Describe() + ": " + r.spec.name);
        Updated(job);
        continue;
      }
      // A new name or nice value leaves it where it is in the scheduler (the core reads
      // neither, or is told the new value).
      const bool moves =
          r.spec.pool != job.spec.pool || r.spec.tier != job.spec.tier || r.queue != job.queue;
      if (moves && Withdraw(job, now_)) throttled.insert(job.array);
      if (!moves && r.spec.nice != job.spec.nice && job.core.valid())
        sched_->SetNice(job.core, r.spec.nice);
      job.spec_text = std::move(r.text);
      job.given_names.reset();
      job.spec = std::move(r.spec);
      job.queue = r.queue;
      job.Note(now_, "its spec updated by " + user.Describe() + ": " + fields.dump());
      Updated(job);
    }
    ReleaseThrottledArrays(throttled, now_);
    Reply r;
    r.body = {{"id", name}, {"updated", resolved.size()}};
    return r;
  });
}

void Controller::SetAfter(std::string token, std::string name, std::string text, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    std::vector<Job*> jobs;
    if (auto refused = PendingJobsToUpdate(user, name, "dependency", jobs)) return *refused;
    // Each task's as it stands now (singleton differs from one to the next); all checked
    // before any is changed.
    struct Resolved {
      Job* job;
      std::vector<Dependency> after;
      bool after_or = false;
      std::string never_met;
    };
    std::vector<Resolved> resolved;
    for (Job* job : jobs) {
      if (job->state != JobState::kPending) continue;
      Resolved r{job, {}, false, ""};
      if (auto refused = ResolveAfter(text, job->spec, *job, r.after, r.after_or, r.never_met))
        return *refused;
      resolved.push_back(std::move(r));
    }
    std::set<std::string> throttled;
    for (Resolved& r : resolved) {
      Job& job = *r.job;
      job.after = std::move(r.after);
      job.after_or = r.after_or && !job.after.empty();
      job.never_met.clear();
      for (const Dependency& d : job.after) book_.AddDependent(d.job, job.seq);
      job.Note(now_, text.empty() ? "its dependency cleared by " + user.Describe()
                                  : "its dependency set to " + text + " by " + user.Describe());
      // Out of the scheduler while it waits; handed back when nothing holds it.
      if (!job.after.empty() && Withdraw(job, now_)) throttled.insert(job.array);
      if (!r.never_met.empty()) {
        NeverMet(job, r.never_met, now_);  // cancels it, or marks it to wait
        continue;
      }
      Updated(job);
    }
    ReleaseThrottledArrays(throttled, now_);
    Reply r;
    r.body = {{"id", name}, {"updated", resolved.size()}};
    return r;
  });
}

void Controller::SetThrottle(std::string token, std::string name, int limit, Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    std::vector<Job*> tasks = book_.HasName(name) ? std::vector<Job*>{} : book_.ArrayTasks(name);
    if (tasks.empty()) {
      return Reply::Error(book_.HasName(name) ? Code::kBadRequest : Code::kNotFound,
                          book_.HasName(name) ? "job " + name +
                                                    " is not an array: a throttle "
                                                    "limits an array's tasks"
                                              : "no array " + name);
    }
    for (Job* t : tasks) {
      if (auto refused = MayNotUpdate(user, *t)) return *refused;
    }
    for (Job* t : tasks) {
      if (t->array_limit == limit) continue;
      t->array_limit = limit;
      Touch(*t);
      Persist(*t);
    }
    // Lowered: tasks pending in the scheduler above it come out, the last by index first.
    int given = InScheduler(name);
    for (auto t = tasks.rbegin(); t != tasks.rend() && limit > 0 && given > limit; ++t) {
      Job& task = **t;
      if (task.state != JobState::kPending || !task.core.valid()) continue;
      Withdraw(task, now_);
      task.Note(now_, "back to its array's throttle (%" + std::to_string(limit) + ")");
      Touch(task);
      Persist(task);
      --given;
    }
    // Raised (or taken away): held tasks handed over while there is room.
    ReleaseThrottled(name, limit > 0 ? limit : std::numeric_limits<int>::max(), now_);
    log::Info("array throttle set",
              {{"job", name}, {"limit", std::to_string(limit)}, {"by", user.Describe()}});
    Reply r;
    r.body = {{"id", name}, {"limit", limit}};
    return r;
  });
}

void Controller::SetTimeLimit(std::string token, std::string name, int64_t limit_ms, bool add,
                              Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    if (!add && limit_ms < 0)
      return Reply::Error(Code::kBadRequest, "time limit: 0 (none) or more");
    Job* named = book_.Find(name);
    std::vector<Job*> jobs = named ? std::vector<Job*>{named} : book_.ArrayTasks(name);
    if (jobs.empty()) return Reply::Error(Code::kNotFound, "no job " + name);
    if (named && !named->active()) {
      return Reply::Error(Code::kConflict,
                          "job " + name + " already ended (" + std::string(Word(named->end)) + ")");
    }
    // Each job's new limit in Gantry's terms (the signal at it, the kill a grace later): an
    // sbatch job's --signal lead comes off the --time its user gives, as at submission.
    std::vector<std::pair<Job*, std::optional<Ticks>>> changes;
    for (Job* job : jobs) {
      if (!job->active()) continue;
      if (auto refused = MayNotUpdate(user, *job)) return *refused;
      const std::optional<Ticks>& now_limit = job->spec.time_limit;
      const Ticks lead = job->SignalLead();
      if (add && !now_limit)
        return Reply::Error(Code::kConflict, "job " + job->name + " has no time limit to add to");
      const Ticks written = add ? *now_limit + lead + limit_ms : limit_ms;
      if (written != 0 && written <= lead) {
        return Reply::Error(Code::kBadRequest,
                            "job " + job->name + ": its signal comes " + spec::FormatSeconds(lead) +
                                " s before its limit, so the limit must be longer than that");
      }
      const std::optional<Ticks> limit =
          written > 0 ? std::optional<Ticks>(written - lead) : std::nullopt;
      if (!user.admin() && now_limit && (!limit || *limit > *now_limit)) {
        return Reply::Error(Code::kForbidden, "job " + job->name +
                                                  ": only an admin raises a time limit or takes it "
                                                  "away, as in Slurm");
      }
      changes.emplace_back(job, limit);
    }
    int changed = 0;
    for (auto& [job, limit] : changes) {
      if (job->spec.time_limit == limit) continue;
      job->time_limit_set = limit.value_or(0);
      ApplyTimeLimit(job->spec, job->time_limit_set);
      if (job->core.valid()) sched_->SetRuntimeEstimate(job->core, job->spec.runtime_estimate);
      job->Note(now_, (limit ? "time limit set to " + spec::FormatSeconds(*limit) + " s"
                             : std::string("time limit taken away")) +
                          " by " + user.Describe());
      Touch(*job);
      Persist(*job);
      ++changed;
    }
    Reply r;
    r.body = {{"id", name}, {"updated", changed}};
    return r;
  });
}

void Controller::AskSignal(Job& job, int signal, SignalTo to) {
  job.signals.push_back({signal, to});
  for (const Worker& w : job.workers) w.desired.reset();  // they carry the asks
  for (const Step& s : job.steps) {
    for (const StepTask& t : s.tasks) t.desired.reset();
  }
  Touch(job);
}

void Controller::Signal(std::string token, std::string name, int signal, std::string to,
                        Done done) {
  CallAsUser(std::move(token), std::move(done), [=, this](const Principal& user) -> Reply {
    const std::optional<SignalTo> where = SignalToNamed(to);
    if (!where)
      return Reply::Error(Code::kBadRequest, "to: expected steps, batch or full, got " + to);
    if (signal <= 0 || signal >= 65)
      return Reply::Error(Code::kBadRequest, "signal: expected 1..64");
    // An array's id: its tasks (those running are signalled).
    Job* named = book_.Find(name);
    const std::vector<Job*> jobs = named ? std::vector<Job*>{named} : book_.ArrayTasks(name);
    if (jobs.empty()) return Reply::Error(Code::kNotFound, "no job " + name);
    int signalled = 0;
    for (Job* job : jobs) {
      if (!MayManage(user, *job)) {
        return Reply::Error(Code::kForbidden, user.Describe() + " may not signal job " + job->name +
                                                  " in queue " + job->queue);
      }
    }
    for (Job* job : jobs) {
      if (job->state != JobState::kRunning) continue;
      AskSignal(*job, signal, *where);
      job->Note(now_, "signal " + std::to_string(signal) + " sent to its " +
                          (*where == SignalTo::kBatch  ? "batch script"
                           : *where == SignalTo::kFull ? "script and steps"
                           : job->batch()              ? "steps"
                                                       : "workers") +
                          " by " + user.Describe());
      Touch(*job);
      Persist(*job);
      ++signalled;
    }
    if (signalled == 0) {  // as Slurm's "Job is pending execution" / "already completed"
      return Reply::Error(Code::kConflict, "job " + name + " is " + jobs.front()->state_word() +
                                               ": only a running job is signalled");
    }
    Reply r;
    r.body = {{"id", name}, {"signalled", signalled}};
    return r;
  });
}

void Controller::CancelJob(Job& job, const std::string& reason, Ticks now, bool force) {
  switch (job.state) {
    case JobState::kDone:
      break;
    case JobState::kPending:
      if (job.core.valid()) sched_->Finish(job.core, now);
      log_.Cancel(now, job.name, reason);
      EndJob(job, JobEnd::kCancelled, reason, now);
      dirty_ = true;
      break;
    case JobState::kRunning:
      BeginStop(job, StopKind::kCancel, reason, force ? 0 : job.spec.grace, now);
      break;
    case JobState::kStopping:
      job.stop = StopKind::kCancel;
      job.stop_reason = reason;
      if (force && job.stop_deadline > now) {
        job.stop_deadline = now;  // the agents kill at once; kill_slack later it is over
        Touch(job);
      }
      Persist(job);
      break;
  }
}

void Controller::LogPath(std::string token, std::string name, int run, int rank, int step, bool err,
                         Done done) {
  CallAsUser(
      std::move(token), std::move(done),
      [this, name, run, rank, step, err](const Principal& user) mutable -> Reply {
        Job* job = book_.Find(name);
        if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
        if (!MaySee(user, *job)) {
          return Reply::Error(Code::kForbidden, user.Describe() +
                                                    " may not read the output of job " + name +
                                                    " in queue " + job->queue);
        }
        if (run <= 0) run = job->run;
        if (run <= 0) return Reply::Error(Code::kNotFound, "job " + name + " has not started yet");
        if (run > job->run) {  // (it answered 200 with nothing: `logs --run 9` exited 0)
          return Reply::Error(
              Code::kNotFound,
              "job " + name + " has no run " + std::to_string(run) +
                  " (its runs: " + (job->run == 1 ? "1" : "1-" + std::to_string(job->run)) + ")");
        }
        if (step >= 0) {
          if (run != job->run || step >= static_cast<int>(job->steps.size())) {
            return Reply::Error(Code::kNotFound, "job " + name + " run " + std::to_string(run) +
                                                     " has no step " + std::to_string(step));
          }
          const int tasks = static_cast<int>(job->steps[static_cast<size_t>(step)].tasks.size());
          if (rank < 0 || rank >= tasks)
            return Reply::Error(Code::kBadRequest,
                                "rank: the step's tasks are 0.." + std::to_string(tasks - 1));
        } else if (rank < 0 || rank >= job->spec.replicas) {
          return Reply::Error(Code::kBadRequest,
                              "rank: must be 0.." + std::to_string(job->spec.replicas - 1));
        }
        const fs::path path = fs::path(options_.log_dir) / std::to_string(job->seq) /
                              LogFileName(run, rank, step, err);
        Reply r;
        r.body = {{"path", path.string()}, {"run", run}, {"rank", rank}};
        return r;
      },
      Kind::kRead);
}

}  // namespace gantry::server
