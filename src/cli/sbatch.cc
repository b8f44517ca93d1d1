#include "cli/sbatch.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "base/image_reference.h"
#include "base/rlimits.h"
#include "spec/batch.h"

namespace gantry::cli {

namespace {

using nlohmann::json;

// An sbatch option Gantry reads: its long name, short letter (0: none), whether it takes
// a value.
struct OptionDef {
  const char* name;
  char letter;
  bool value;
};

constexpr OptionDef kOptions[] = {
    {"job-name", 'J', true},
    {"partition", 'p', true},
    {"qos", 'q', true},
    {"account", 'A', true},
    {"constraint", 'C', true},
    {"time", 't', true},
    {"nodes", 'N', true},
    {"ntasks", 'n', true},
    {"ntasks-per-node", 0, true},
    {"gres", 0, true},
    {"gpus", 'G', true},
    {"gpus-per-node", 0, true},
    {"gpus-per-task", 0, true},
    {"mem", 0, true},
    {"mem-per-cpu", 0, true},
    {"mem-per-gpu", 0, true},
    {"cpus-per-task", 'c', true},
    {"chdir", 'D', true},
    {"export", 0, true},
    {"signal", 0, true},
    {"output", 'o', true},
    {"error", 'e', true},
    {"array", 'a', true},
    {"dependency", 'd', true},
    {"parsable", 0, false},
    {"wait", 'W', false},     // the submitting command waits for the job's end (SbatchJob::wait)
    {"hold", 'H', false},     // held until scontrol release (SbatchJob::hold)
    {"nodelist", 'w', true},  // only these nodes, all of them (BuildShape: -N is their count)
    {"exclude", 'x', true},   // never these nodes
    {"begin", 'b', true},     // held until then (SbatchJob::begin_s; ParseSlurmBeginTime)
    {"container-image", 0, true},  // as NVIDIA's pyxis plugin for Slurm names it
    // Gantry's own: the job checkpoints this often (checkpoint_s), so a preemption loses
    // at most that, and a job given -N MIN-MAX resizes at its checkpoints (docs/slurm.md).
    {"gantry-checkpoint", 0, true},
    // Accepted with a note of what Gantry does instead (Notes below).
    {"mail-type", 0, true},
    {"mail-user", 0, true},
    {"requeue", 0, false},
    {"no-requeue", 0, false},
    {"hint", 0, true},
    {"reservation", 0, true},
    {"wait-all-nodes", 0, true},
    {"comment", 0, true},
    {"time-min", 0, true},
    // Hints about CPUs, memory binding, switches and accounting that Gantry has no use for,
    // seen in real scripts: accepted with a note (kNoted).
    {"gres-flags", 0, true},
    {"threads-per-core", 0, true},
    {"ntasks-per-socket", 0, true},
    {"sockets-per-node", 0, true},
    {"cores-per-socket", 0, true},
    {"mem-bind", 0, true},
    {"switches", 0, true},
    {"profile", 0, true},
    {"acctg-freq", 0, true},
    {"gpu-freq", 0, true},
    {"kill-on-invalid-dep", 0, true},
    {"no-kill", 'k', false},  // [=off] (kOptionalValue)
    {"overcommit", 'O', false},
    {"spread-job", 0, false},
    {"use-min-nodes", 0, false},
    {"contiguous", 0, false},
    {"tmp", 0, true},
    {"mincpus", 0, true},
    {"verbose", 'v', false},  // sbatch's own messages: taken, nothing to say
    {"quiet", 'Q', false},
    {"gpu-bind", 0, true},
    {"distribution", 'm', true},
    {"cpus-per-gpu", 0, true},
    {"exclusive", 0, false},  // gantryd checks it asks for whole nodes (job spec `exclusive`)
    // Their value optional, as getopt's optional_argument: --nice or --nice=N, never a value
    // apart (kOptionalValue); accepted with a note (kNoted).
    {"nice", 0, false},
    {"get-user-env", 0, false},
    {"propagate", 0, false},
    {"open-mode", 0, true},
    {"wrap", 0, true},  // the command line's only: the script is made of it (WrapScript)
};

// Options whose value is optional: `--name` alone or `--name=VALUE` (`-kVALUE` for a
// letter), as sbatch's getopt reads them; a word after `--name` is not its value.
constexpr const char* kOptionalValue[] = {"no-kill", "exclusive", "nice", "get-user-env",
                                          "propagate"};

bool TakesOptionalValue(const char* name) {
  return std::any_of(std::begin(kOptionalValue), std::end(kOptionalValue),
                     [&](const char* o) { return std::string_view(o) == name; });
}

// sbatch's input variables (SBATCH_*), for the options read here.
constexpr std::pair<const char*, const char*> kInputVariables[] = {
    {"SBATCH_ACCOUNT", "account"},
    {"SBATCH_ARRAY_INX", "array"},
    {"SBATCH_CONSTRAINT", "constraint"},
    {"SBATCH_ERROR", "error"},
    {"SBATCH_EXCLUSIVE", "exclusive"},
    {"SBATCH_EXPORT", "export"},
    {"SBATCH_GPUS", "gpus"},
    {"SBATCH_GPUS_PER_NODE", "gpus-per-node"},
    {"SBATCH_GPUS_PER_TASK", "gpus-per-task"},
    {"SBATCH_GRES", "gres"},
    {"SBATCH_JOB_NAME", "job-name"},
    {"SBATCH_MEM_PER_CPU", "mem-per-cpu"},
    {"SBATCH_MEM_PER_GPU", "mem-per-gpu"},
    {"SBATCH_MEM_PER_NODE", "mem"},
    {"SBATCH_OPEN_MODE", "open-mode"},
    {"SBATCH_OUTPUT", "output"},
    {"SBATCH_PARTITION", "partition"},
    {"SBATCH_QOS", "qos"},
    {"SBATCH_REQUEUE", "requeue"},
    {"SBATCH_SIGNAL", "signal"},
    {"SBATCH_TIMELIMIT", "time"},
};

// Options accepted though Gantry does nothing with them: why, said once at submit.
constexpr std::pair<const char*, const char*> kNoted[] = {
    {"mail-type", "Gantry sends no mail; gantry show and logs follow the job"},
    {"mail-user", "Gantry sends no mail; gantry show and logs follow the job"},
    {"requeue", "not needed: preempted and lost jobs are always requeued, from their checkpoint"},
    {"no-requeue",
     "not honoured: a preempted job, or one whose node failed, is requeued from its checkpoint"},
    {"hint", "CPU placement hints are not used: a task's cgroup holds its CPUs"},
    {"reservation", "Gantry has no reservations: the job waits for room like any other"},
    {"wait-all-nodes", "a job starts on nodes whose agents are up"},
    {"comment", "kept nowhere"},
    {"time-min",
     "the job runs with its whole --time (Slurm may cut it toward --time-min to start the job "
     "sooner; Gantry's backfill plans with --time)"},
    {"gres-flags", "GPUs are not bound to CPU sockets: a task's cgroup holds its CPUs"},
    {"threads-per-core", "the CPU layout within a node is not modelled: -c gives a task's CPUs"},
    {"ntasks-per-socket", "the CPU layout within a node is not modelled: -c gives a task's CPUs"},
    {"sockets-per-node", "the CPU layout within a node is not modelled: -c gives a task's CPUs"},
    {"cores-per-socket", "the CPU layout within a node is not modelled: -c gives a task's CPUs"},
    {"mem-bind", "memory is not bound to NUMA nodes"},
    {"switches",
     "not honoured: a job's nodes go where placement finds room, the fullest leaf first (a job "
     "spec's topology: leaf keeps them under one)"},
    {"profile", "gantryd samples every job's GPU use itself (gantry show --series)"},
    {"acctg-freq", "gantryd samples every job's GPU use at its own interval"},
    {"gpu-freq", "GPU clocks are left as the node has them"},
    {"no-kill", "not honoured: a job whose node fails is requeued from its checkpoint"},
    {"overcommit", "not honoured: every task has at least a CPU of its own"},
    {"spread-job", "placement packs nodes; a multi-node job's tasks follow -N"},
    {"use-min-nodes", "placement already uses as few nodes as it can"},
    {"contiguous", "nodes are not numbered contiguously for a job; placement keeps leaves full"},
    {"tmp", "node-local disk is not counted"},
    {"mincpus", "a node holds the job's tasks' CPUs (-c x tasks there), no minimum beside"},
    {"get-user-env",
     "the job's environment is the one sbatch exports (--export, ALL by default); login files "
     "are not read on the node"},
};

// Options people put in scripts that Gantry does not do, with why (a clearer refusal
// than "unknown").
constexpr std::pair<const char*, const char*> kRefused[] = {
    {"licenses", "licenses are not modelled"},
    {"deadline", "jobs are not cancelled for a deadline; --time limits each run"},
    {"clusters", "one gantryd schedules one cluster: submit to its gantryd"},
    {"cluster-constraint", "one gantryd schedules one cluster: submit to its gantryd"},
    {"ntasks-per-gpu", "give --gpus-per-task or --gres with -n instead"},
};

bool IsRefused(const std::string& name) {
  for (const auto& [n, why] : kRefused) {
    if (name == n) return true;
  }
  return false;
}

const OptionDef* FindLong(const std::string& name) {
  for (const OptionDef& o : kOptions) {
    if (name == o.name) return &o;
  }
  // A unique prefix (--err for --error), as getopt_long and so sbatch take it.
  const OptionDef* found = nullptr;
  for (const OptionDef& o : kOptions) {
    if (name.size() < 3 || std::string_view(o.name).rfind(name, 0) != 0) continue;
    if (found != nullptr) return nullptr;  // ambiguous
    found = &o;
  }
  return found;
}

const OptionDef* FindShort(char c) {
  for (const OptionDef& o : kOptions) {
    if (o.letter == c) return &o;
  }
  return nullptr;
}

// One option as given, with where it was given.
struct Given {
  std::string value;
  std::string where;  // "job.sh:3" or "command line"
};

class Parser {
 public:
  Parser(const std::string& script_name, const SbatchContext& ctx)
      : script_(script_name), ctx_(ctx) {}

  // Reads options from `tokens` (a directive line's or the command line's) into given_;
  // later ones override earlier ones.
  void Read(const std::vector<std::string>& tokens, const std::string& where) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      const OptionDef* def = nullptr;
      std::string value, shown;
      bool has_value = false;
      if (t.rfind("--", 0) == 0 && t.size() > 2) {
        const size_t eq = t.find('=');
        const std::string name = t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        shown = "--" + name;
        def = FindLong(name);
        if (def == nullptr) {
          Refuse(where, shown, name);
          if (eq == std::string::npos && IsRefused(name)) ++i;  // its value (all take one)
          continue;
        }
        if (eq != std::string::npos) {
          value = t.substr(eq + 1);
          has_value = true;
        }
      } else if (t.size() >= 2 && t[0] == '-' && t[1] != '-') {
        shown = t.substr(0, 2);
        def = FindShort(t[1]);
        if (def == nullptr) {
          Error(where, shown,
                "unknown or unsupported option (docs/slurm.md lists what gantry sbatch reads)");
          continue;
        }
        if (t.size() > 2) {
          value = t.substr(t[2] == '=' ? 3 : 2);
          has_value = true;
        }
      } else {
        Error(where, t, "expected an option such as --time=1:00:00");
        continue;
      }
      if (def->value && !has_value) {
        if (i + 1 >= tokens.size()) {
          Error(where, shown, "needs a value");
          continue;
        }
        value = tokens[++i];
      } else if (!def->value && has_value && !TakesOptionalValue(def->name)) {
        Error(where, shown, "takes no value");
        continue;
      }
      given_[def->name] = Given{value, where};
    }
  }

  // The job spec from what was given.
  SbatchJob Build(const std::string& text, const std::vector<std::string>& args) {
    SbatchJob out;
    json& s = out.spec;
    s["script"] = text;
    if (!args.empty()) s["command"] = args;
    out.parsable = given_.count("parsable") > 0;
    out.wait = given_.count("wait") > 0;
    out.hold = given_.count("hold") > 0;
    // yes: cancelled when its dependency can never be met; no: it waits until cancelled
    // (DependencyNeverSatisfied); not given: the site's (kill_invalid_depend, no by default).
    if (auto v = Get("kill-on-invalid-dep")) {
      if (v->value == "yes" || v->value == "no")
        out.kill_invalid_dep = v->value == "yes" ? 1 : 0;
      else
        Error(v->where, "--kill-on-invalid-dep", "expected yes or no, got \"" + v->value + "\"");
    }
    if (auto v = Get("begin")) {
      std::string why;
      if (auto t = ParseSlurmBeginTime(v->value, ctx_.now_s, why))
        out.begin_s = *t > ctx_.now_s ? *t : 0;  // a time gone by: at once, as Slurm's
      else
        Error(v->where, "--begin", why);
    }
    CheckOptionalValues();
    for (const auto& [name, why] : kNoted) {
      auto v = Get(name);
      if (v == nullptr) continue;
      out.notes.push_back(v->where + ": --" + name + ": accepted: " + why);
    }
    // The steps' GPU binding (srun's default, which gantryd checks), as Slurm's sbatch.
    if (auto v = Get("gpu-bind")) given_env_["SLURM_GPU_BIND"] = v->value;
    if (auto v = Get("distribution")) {  // the steps' layout over the nodes (srun's default)
      if (std::string why = spec::DistributionProblem(v->value); !why.empty())
        Error(v->where, "--distribution", why);
      else
        given_env_["SLURM_DISTRIBUTION"] = v->value;
    }
    if (auto v = Get("job-name")) {
      if (v->value.empty()) {
        Error(v->where, "--job-name", "must not be empty");
      } else {
        s["name"] = v->value;
      }
    } else if (!ctx_.default_name.empty()) {
      s["name"] = ctx_.default_name;
    } else if (const std::string base = script_.substr(script_.rfind('/') + 1); !base.empty()) {
      s["name"] = base;  // Slurm's default: the script's file name
    }
    if (auto v = Get("wrap"); v != nullptr && v->where != "command line")
      Error(v->where, "--wrap", "only on sbatch's command line (it makes the script)");
    if (auto v = Get("partition")) {
      if (v->value.empty() || v->value.find(',') != std::string::npos) {
        Error(
            v->where, "--partition",
            "give one pool (Gantry restricts a job to one pool or none), got \"" + v->value + "\"");
      } else {
        s["pool"] = v->value;
        origin_["pool"] = v->where + ": --partition=" + v->value;
      }
    }
    // A tier or a QoS of the site's mapping, a queue or an account: gantryd resolves them
    // (site in the cluster config), and its errors are shown at the directive's line.
    if (auto v = Get("qos")) {
      if (v->value.empty()) {
        Error(v->where, "--qos", "must name a tier or a QoS");
      } else {
        s["tier"] = v->value;
        origin_["tier"] = v->where + ": --qos=" + v->value;
      }
    }
    if (auto v = Get("constraint")) {  // over the site's node features (site.features)
      s["constraint"] = v->value;
      origin_["constraint"] = v->where + ": --constraint=" + v->value;
    }
    if (auto v = Get("account")) {
      if (v->value.empty()) {
        Error(v->where, "--account", "must name a queue or an account");
      } else {
        s["queue"] = v->value;
        origin_["queue"] = v->where + ": --account=" + v->value;
      }
    }
    BuildTime(s);
    BuildShape(s);
    if (auto v = Get("chdir")) {
      if (v->value.empty()) {
        Error(v->where, "--chdir", "must not be empty");
      } else {
        s["workdir"] = v->value[0] == '/' ? v->value : ctx_.cwd + "/" + v->value;
      }
    } else {
      s["workdir"] = ctx_.cwd;  // Slurm runs the script where sbatch was run
    }
    BuildEnv(s);
    if (auto v = Get("container-image")) {  // pyxis' names too; the job reader checks it
      std::string why;
      const std::string image = PyxisImage(v->value, &why);
      if (image.empty()) {
        Error(v->where, "--container-image", why);
      } else {
        s["image"] = image;
      }
    }
    if (auto v = Get("open-mode")) {
      if (v->value != "append" && v->value != "truncate")
        Error(v->where, "--open-mode", "expected append or truncate, got \"" + v->value + "\"");
      else
        s["open_mode"] = v->value;
    }
    if (auto v = Get("exclusive"); v != nullptr && !v->value.empty()) {
      Error(v->where, "--exclusive",
            v->value == "user" || v->value == "mcs"
                ? "=" + v->value +
                      " is not supported: Gantry keeps no nodes to one user's jobs; "
                      "give --exclusive (the nodes are the job's alone) or leave it out"
                : "expected user, mcs or no value, got \"" + v->value + "\"");
    } else if (v != nullptr) {
      s["exclusive"] = true;
      origin_["exclusive"] = v->where + ": --exclusive";
    }
    // --nice[=N] (100 without a value, as Slurm's): behind the queue's other jobs (its
    // value checked in CheckOptionalValues; a negative one is an admin's, checked by gantryd).
    if (auto v = Get("nice")) {
      if (const std::optional<int> n = ParseSlurmNice(v->value)) s["nice"] = *n;
    }
    if (auto v = Get("array")) {
      if (v->value.empty()) {
        Error(v->where, "--array", "must not be empty");
      } else {
        out.array = v->value;
      }
    }
    for (const char* key : {"output", "error"}) {
      std::string pattern;
      if (auto v = Get(key)) {
        pattern = v->value;
        if (auto why = spec::CheckOutputPattern(pattern))
          Error(v->where, std::string("--") + key, *why);
      } else if (std::string(key) == "output") {
        pattern = out.array.empty() ? "slurm-%j.out" : "slurm-%A_%a.out";  // Slurm's default
      }
      if (!pattern.empty()) s[std::string(key) == "output" ? "stdout" : "stderr"] = pattern;
    }
    if (auto v = Get("dependency")) out.after = Dependency(*v);
    out.errors = std::move(errors_);
    out.origin = std::move(origin_);
    return out;
  }

  std::map<std::string, std::string> origin_;  // SbatchJob::origin
  // What Slurm's sbatch sets from its options in the job's environment, only where they
  // were given (gantryd sets the rest): SLURM_NTASKS, SLURM_CPUS_PER_TASK, ...
  std::map<std::string, std::string> given_env_;
  // Slurm tasks each worker stands for: 1, or a node's tasks (WholeNodes).
  long long tasks_per_worker_ = 1;

  // A node's GPUs that do not divide over its tasks (-n 2 --gres=gpu:1, 4 tasks a node
  // sharing 2 GPUs): one worker on each node, holding the node's GPUs and standing for its
  // tasks (the spec's tasks_per_worker); srun runs the tasks, each seeing the node's GPUs
  // as under Slurm. The shape written so far becomes one of nodes. Returns GPUs a worker.
  long long WholeNodes(json& s, long long gpus_per_node, long long nodes, long long per_node) {
    tasks_per_worker_ = per_node;
    s["replicas"] = nodes;
    if (per_node > 1) s["tasks_per_worker"] = per_node;
    s.erase("fewest_nodes");
    s.erase("topology");
    s.erase("workers_per_node");
    if (nodes > 1) s["workers_per_node"] = 1;  // distinct nodes
    if (s.contains("min_replicas"))
      s["min_replicas"] = s["min_replicas"].get<long long>() / per_node;
    return gpus_per_node;
  }

  void Error(const std::string& where, const std::string& option, const std::string& message) {
    errors_.push_back(where + ": " + option + ": " + message);
  }

 private:
  const Given* Get(const std::string& name) const {
    auto it = given_.find(name);
    return it == given_.end() ? nullptr : &it->second;
  }

  void Refuse(const std::string& where, const std::string& shown, const std::string& name) {
    for (const auto& [n, why] : kRefused) {
      if (name == n) {
        Error(where, shown, std::string("not supported: ") + why);
        return;
      }
    }
    Error(where, shown,
          "unknown or unsupported option (docs/slurm.md lists what gantry sbatch reads)");
  }

  // A positive whole number, or nullopt with an error.
  std::optional<long long> Count(const Given& v, const std::string& option, long long min = 1) {
    const std::string& t = v.value;
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(t) < min) {
      Error(v.where, option,
            "expected a whole number of at least " + std::to_string(min) + ", got \"" + t + "\"");
      return std::nullopt;
    }
    return std::stoll(t);
  }

  // --time, and --signal's lead time: Slurm signals TIME seconds before the limit and
  // kills at it; Gantry signals at its limit and kills after grace_s. So the limit
  // becomes time - lead and the grace the lead: the same two instants.
  void BuildTime(json& s) {
    long long limit = 0;  // 0: none
    if (auto v = Get("time")) {
      std::string error;
      auto t = ParseSlurmTime(v->value, error);
      if (!t) Error(v->where, "--time", error);
      limit = t.value_or(0);
    }
    auto v = Get("signal");
    if (v == nullptr) {
      if (limit > 0) s["time_limit_s"] = limit;
      return;
    }
    std::string sig = v->value;
    bool batch = false;
    if (sig.size() > 2 && (sig.rfind("B:", 0) == 0 || sig.rfind("R:", 0) == 0)) {
      if (sig[0] == 'R') {
        Error(v->where, "--signal", "R: (reservations) is not supported");
        return;
      }
      batch = true;  // B: the batch script only; without it, the steps (srun) only
      sig = sig.substr(2);
    }
    long long lead = 60;  // Slurm's default
    if (const size_t at = sig.find('@'); at != std::string::npos) {
      const std::string t = sig.substr(at + 1);
      sig = sig.substr(0, at);
      if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) {
        Error(v->where, "--signal", "expected [B:]SIG[@SECONDS], got \"" + v->value + "\"");
        return;
      }
      lead = std::stoll(t);
    }
    if (spec::SignalNumber(sig) <= 0) {
      Error(v->where, "--signal", "unknown signal \"" + sig + "\" (e.g. USR1, TERM, 10)");
      return;
    }
    s["signal"] = batch ? "B:" + sig : sig;
    s["grace_s"] = lead;
    if (limit > 0) {
      if (limit <= lead) {
        Error(v->where, "--signal",
              "the signal comes " + std::to_string(lead) + " s before the limit, but --time is " +
                  std::to_string(limit) + " s");
        return;
      }
      s["time_limit_s"] = limit - lead;
    }
  }

  // [MODEL:]N as --gpus and --gpus-per-node give it, or gpu[:MODEL]:N as --gres.
  bool Gpus(const Given& v, const std::string& option, bool gres, std::string& model,
            long long& n) {
    std::string t = v.value;
    if (gres) {
      if (t.find(',') != std::string::npos) {
        Error(v.where, option, "give one GPU request, gpu:N or gpu:MODEL:N, got \"" + t + "\"");
        return false;
      }
      if (t.rfind("gpu", 0) != 0 || (t.size() > 3 && t[3] != ':')) {
        Error(v.where, option,
              "only GPUs are generic resources here (gpu:N or gpu:MODEL:N), got \"" + t + "\"");
        return false;
      }
      t = t.size() > 4 ? t.substr(4) : "1";  // gres "gpu" alone is one
    }
    const size_t colon = t.rfind(':');
    if (colon != std::string::npos) {
      model = t.substr(0, colon);
      t = t.substr(colon + 1);
      if (model.empty() || model.find(':') != std::string::npos) {
        Error(v.where, option,
              "expected " + std::string(gres ? "gpu:MODEL:N" : "MODEL:N") + ", got \"" + v.value +
                  "\"");
        return false;
      }
    }
    auto c = Count(Given{t, v.where}, option, gres ? 0 : 1);  // gpu:0 asks for none, as Slurm
    if (!c) return false;
    n = *c;
    return true;
  }

  // Nodes x tasks per node = workers; GPUs, CPUs and memory per worker.
  void BuildShape(json& s) {
    std::optional<long long> nodes, per_node, tasks;
    long long least_nodes = 0;  // -N MIN-MAX: MIN (0: one count)
    // -w/--nodelist: the job runs on exactly these nodes (Slurm's: all of them, and more
    // where -N asks for more, which Gantry refuses), so -N is their count when not given.
    std::optional<long long> listed;
    for (const char* key : {"nodelist", "exclude"}) {
      const Given* v = Get(key);
      if (v == nullptr) continue;
      const std::string option = std::string("--") + key;
      const std::string field = std::string(key) == "nodelist" ? "nodelist" : "exclude_nodes";
      if (v->value.find('/') != std::string::npos) {
        Error(v->where, option,
              "a file of node names is not read: give the names (a host list such as "
              "h100-[0-1])");
        return;
      }
      const std::optional<std::vector<std::string>> names = spec::ExpandHostList(v->value);
      if (!names || names->empty()) {
        Error(v->where, option,
              "expected node names or a host list such as h100-[0-3],a100-0, got \"" + v->value +
                  "\"");
        return;
      }
      s[field] = v->value;  // the host list as written (gantryd's refusals cite this line)
      origin_[field] = v->where + ": " + option + "=" + v->value;
      if (field == "nodelist")
        listed = static_cast<long long>(std::set<std::string>(names->begin(), names->end()).size());
    }
    if (auto v = Get("nodes")) {
      std::string t = v->value;
      // MIN-MAX: an elastic job (min_replicas), started at the most nodes that fit, at
      // least MIN, as Slurm's; with --gantry-checkpoint it also resizes at checkpoints.
      if (const size_t dash = t.find('-'); dash != std::string::npos) {
        auto least = Count(Given{t.substr(0, dash), v->where}, "--nodes");
        if (!least) return;
        least_nodes = *least;
        t = t.substr(dash + 1);
      }
      nodes = Count(Given{t, v->where}, "--nodes");
      if (!nodes) return;
      if (least_nodes > *nodes) {
        Error(v->where, "--nodes",
              "the least node count is above the most, got \"" + v->value + "\"");
        return;
      }
      if (least_nodes == *nodes) least_nodes = 0;
      if (listed && (least_nodes > 0 || *nodes != *listed)) {
        Error(v->where, "--nodes",
              "with --nodelist the job runs on exactly its " + std::to_string(*listed) +
                  " node(s): give -N " + std::to_string(*listed) +
                  " or leave -N out (Slurm would add other nodes to them; Gantry does not)");
        return;
      }
      for (const char* fixed : {"ntasks", "gpus"}) {  // totals, which a size would split
        if (least_nodes > 0 && Get(fixed)) {
          Error(v->where, "--nodes",
                std::string("a range of nodes with --") + fixed +
                    " is not supported: give per-node amounts (--ntasks-per-node, "
                    "--gpus-per-node or --gres), which follow the nodes");
          return;
        }
      }
    }
    if (listed && !nodes) nodes = listed;  // -w a,b: -N 2, as Slurm sets it
    const bool nodes_given = Get("nodes") != nullptr || listed.has_value();
    if (auto v = Get("ntasks-per-node")) {
      per_node = Count(*v, "--ntasks-per-node");
      if (!per_node) return;
    }
    if (auto v = Get("ntasks")) {
      tasks = Count(*v, "--ntasks");
      if (!tasks) return;
      const long long n = nodes.value_or(1);
      if (per_node && nodes && *tasks != n * *per_node) {
        Error(v->where, "--ntasks",
              std::to_string(*tasks) + " tasks is not --nodes x --ntasks-per-node (" +
                  std::to_string(n * *per_node) + ")");
        return;
      }
      if (per_node && !nodes) {
        if (*tasks % *per_node != 0) {
          Error(v->where, "--ntasks",
                std::to_string(*tasks) + " tasks do not fill nodes of " +
                    std::to_string(*per_node) + " (--ntasks-per-node)");
          return;
        }
        nodes = *tasks / *per_node;
      }
      if (!per_node && nodes) {
        if (*tasks % *nodes != 0) {
          Error(v->where, "--ntasks",
                std::to_string(*tasks) + " tasks cannot be spread evenly over " +
                    std::to_string(*nodes) +
                    " nodes: Gantry's workers are identical, so give a multiple");
          return;
        }
        per_node = *tasks / *nodes;
      }
    }
    if (!tasks) {
      if (!nodes) nodes = 1;
      if (!per_node) per_node = 1;
    }
    const long long replicas = tasks ? *tasks : *nodes * *per_node;
    if (replicas > 100000) {
      Error(Where({"nodes", "ntasks", "ntasks-per-node"}), "--nodes",
            "at most 100000 tasks, got " + std::to_string(replicas));
      return;
    }
    s["replicas"] = replicas;
    if (least_nodes > 0) s["min_replicas"] = least_nodes * per_node.value_or(1);
    // -n without -N or --ntasks-per-node: Slurm takes as few nodes as it can.
    if (tasks && !nodes_given && !Get("ntasks-per-node") && replicas > 1) s["fewest_nodes"] = true;
    if (Get("ntasks") || Get("ntasks-per-node")) {  // Slurm: -n, or a count from it
      given_env_["SLURM_NTASKS"] = given_env_["SLURM_NPROCS"] = std::to_string(replicas);
    }
    if (Get("ntasks-per-node")) given_env_["SLURM_NTASKS_PER_NODE"] = std::to_string(*per_node);
    if (replicas > 1 && nodes && *nodes == 1)
      s["topology"] = "node";  // all on one node, as -N 1 asks
    // -N above 1: that many distinct nodes, each with its tasks, as Slurm places them.
    if (nodes && *nodes > 1 && per_node) s["workers_per_node"] = *per_node;
    if (auto v = Get("gantry-checkpoint")) {
      std::string error;
      auto t = ParseSlurmTime(v->value, error);
      if (!t || *t <= 0) {
        Error(v->where, "--gantry-checkpoint", t ? "expected a time above 0" : error);
      } else {
        s["checkpoint_s"] = *t;
      }
    }
    // Per-node amounts (--gres, --gpus-per-node, --mem) with -n and neither -N nor
    // --ntasks-per-node: the tasks on one node, whose amounts they are.
    if (!per_node && tasks && !nodes && (Get("gres") || Get("gpus-per-node") || Get("mem"))) {
      nodes = 1;
      per_node = *tasks;
      if (replicas > 1) s["topology"] = "node";
    }

    // GPUs per worker, from exactly one way of asking.
    std::vector<const char*> ways;
    for (const char* k : {"gres", "gpus-per-node", "gpus", "gpus-per-task"}) {
      if (Get(k)) ways.push_back(k);
    }
    // --gres=gpu:N and --gpus-per-node=N say the same thing: accepted when they agree.
    if (ways.size() == 2 && std::string(ways[0]) == "gres" &&
        std::string(ways[1]) == "gpus-per-node") {
      std::string m1, m2;
      long long n1 = -1, n2 = -2;
      std::vector<std::string> kept = std::move(errors_);
      errors_.clear();
      const bool same = Gpus(*Get("gres"), "--gres", true, m1, n1) &&
                        Gpus(*Get("gpus-per-node"), "--gpus-per-node", false, m2, n2) && n1 == n2 &&
                        m1 == m2;
      errors_ = std::move(kept);
      if (same) ways.pop_back();
    }
    if (ways.size() > 1) {
      Error(Get(ways[1])->where, std::string("--") + ways[1],
            std::string("give the GPUs one way: --") + ways[0] + " was given too");
      return;
    }
    long long gpus = 0;
    if (!ways.empty()) {
      const std::string way = ways[0];
      const Given& v = *Get(way);
      std::string model;
      long long n = 0;
      if (!Gpus(v, "--" + way, way == "gres", model, n)) return;
      if (way == "gpus-per-task") {
        gpus = n;
      } else if (way == "gpus") {  // the job's total
        if (n % replicas == 0) {
          gpus = n / replicas;
        } else {  // over the nodes (-N, else one), the node's tasks sharing its GPUs
          if (!nodes) nodes = 1, per_node = replicas;
          if (n % *nodes != 0) {
            Error(v.where, "--gpus",
                  std::to_string(n) + " GPUs cannot be split evenly over " +
                      std::to_string(*nodes) + " nodes (use --gpus-per-node or --gres)");
            return;
          }
          gpus = WholeNodes(s, n / *nodes, *nodes, *per_node);
        }
      } else {  // per node
        if (!per_node) {
          Error(v.where, "--" + way,
                "GPUs per node need --ntasks-per-node or --nodes (what a worker gets)");
          return;
        }
        gpus = n % *per_node == 0 ? n / *per_node : WholeNodes(s, n, nodes.value_or(1), *per_node);
      }
      if (gpus > 0) {
        s["gpus"] = gpus;
        s["vram_gb"] = 1;  // Slurm asks for GPUs, not their memory: any GPU (of the model) will do
      }
      if (!model.empty()) {
        s["gpu_model"] = model;
        origin_["gpu_model"] = v.where + ": --" + way + "=" + v.value;
      }
    }
    std::optional<long long> cpus;
    if (auto v = Get("cpus-per-task")) {
      cpus = Count(*v, "--cpus-per-task");
      if (cpus) {
        given_env_["SLURM_CPUS_PER_TASK"] = std::to_string(*cpus);
        *cpus *= tasks_per_worker_;  // a worker's: its tasks'
        s["cpus"] = *cpus;
      }
    }
    if (auto v = Get("cpus-per-gpu")) {  // per GPU: a task's are its GPUs' CPUs
      if (cpus) {
        Error(v->where, "--cpus-per-gpu", "give the CPUs one way: --cpus-per-task was given too");
      } else if (gpus == 0) {
        Error(v->where, "--cpus-per-gpu", "the job asks for no GPUs");
      } else if (auto n = Count(*v, "--cpus-per-gpu")) {
        cpus = *n * gpus;
        s["cpus"] = *cpus;
      }
    }
    // Memory per worker, in decimal GB as job specs count it.
    std::vector<const char*> mems;
    for (const char* k : {"mem", "mem-per-cpu", "mem-per-gpu"}) {
      if (Get(k)) mems.push_back(k);
    }
    if (mems.size() > 1) {
      Error(Get(mems[1])->where, std::string("--") + mems[1],
            std::string("give the memory one way: --") + mems[0] + " was given too");
      return;
    }
    if (mems.empty()) return;
    const std::string way = mems[0];
    const Given& v = *Get(way);
    std::string error;
    auto mib = ParseSlurmMemory(v.value, error);
    if (!mib) {
      Error(v.where, "--" + way, error);
      return;
    }
    double per_worker = 0;
    given_env_[way == "mem"           ? "SLURM_MEM_PER_NODE"
               : way == "mem-per-cpu" ? "SLURM_MEM_PER_CPU"
                                      : "SLURM_MEM_PER_GPU"] = std::to_string(*mib);
    if (way == "mem") {
      if (*mib == 0) return;  // Slurm: all of the node's memory; Gantry: no limit
      if (!per_node) {
        Error(v.where, "--mem",
              "memory per node needs --ntasks-per-node or --nodes (what a worker gets)");
        return;
      }
      per_worker = static_cast<double>(*mib) / static_cast<double>(*per_node / tasks_per_worker_);
    } else if (way == "mem-per-cpu") {
      if (!cpus) {
        Error(v.where, "--mem-per-cpu", "needs --cpus-per-task (what a worker gets)");
        return;
      }
      per_worker = static_cast<double>(*mib * *cpus);
    } else {
      if (gpus == 0) {
        Error(v.where, "--mem-per-gpu", "the job asks for no GPUs");
        return;
      }
      per_worker = static_cast<double>(*mib * gpus);
    }
    s["memory_gb"] = std::round(per_worker * 1048576.0 / 1e9 * 1e6) / 1e6;
  }

  // Where the first of `keys` that was given was given.
  std::string Where(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) {
      if (auto v = Get(k)) return v->where;
    }
    return "command line";
  }

  // The values of the options whose value is optional (kOptionalValue), as sbatch reads
  // them; --no-kill=off is as if not given.
  void CheckOptionalValues() {
    auto all_of = [](const std::string& s, const char* chars) {
      return s.find_first_not_of(chars) == std::string::npos;
    };
    if (auto v = Get("no-kill"); v != nullptr && !v->value.empty()) {
      if (v->value != "off")
        Error(v->where, "--no-kill", "expected off or no value, got \"" + v->value + "\"");
      given_.erase("no-kill");
    }
    if (auto v = Get("nice"); v != nullptr && !ParseSlurmNice(v->value)) {
      Error(v->where, "--nice",
            "expected an adjustment from -2147483645 to 2147483645 such as 100, got \"" + v->value +
                "\"");
    }
    if (auto v = Get("get-user-env"); v != nullptr && !v->value.empty()) {
      std::string t = v->value;
      if (t.back() == 'S' || t.back() == 'L') t.pop_back();
      if (t.size() > 6 || !all_of(t, "0123456789"))
        Error(v->where, "--get-user-env",
              "expected [TIMEOUT][S|L] (10L, S, 20), got \"" + v->value + "\"");
    }
    if (auto v = Get("propagate"); v != nullptr && !v->value.empty()) {
      std::stringstream in(v->value);
      for (std::string limit; std::getline(in, limit, ',');) {
        if (limit != "ALL" && limit != "NONE" && !IsSlurmRlimit(limit))
          Error(v->where, "--propagate",
                "unknown limit \"" + limit + "\" (ALL, NONE, " + SlurmRlimitNames() + ")");
      }
    }
  }

  // --export: ALL (Slurm's default: the submit environment), NONE, or a list of names
  // and NAME=VALUE (with ALL in it: the environment and those). Gantry's own credentials
  // never travel. SLURM_SUBMIT_DIR and SLURM_SUBMIT_HOST are set whatever it says.
  void BuildEnv(json& s) {
    json env = json::object();
    bool all = true;
    std::vector<std::string> names;
    if (auto v = Get("export")) {
      all = false;
      std::string item;
      const std::string& t = v->value;
      for (size_t pos = 0; pos <= t.size();) {
        const size_t comma = std::min(t.find(',', pos), t.size());
        item = t.substr(pos, comma - pos);
        pos = comma + 1;
        if (item == "ALL") {
          all = true;
        } else if (item == "NONE") {
          if (t != "NONE") Error(v->where, "--export", "NONE cannot be combined with names");
        } else if (item.empty()) {
          Error(v->where, "--export", "empty name in \"" + t + "\"");
        } else {
          names.push_back(item);
        }
      }
    }
    if (all) {
      for (const auto& [k, val] : ctx_.env) {
        if (!Exportable(k)) continue;
        env[k] = val;
      }
    }
    for (const std::string& item : names) {
      const size_t eq = item.find('=');
      const std::string k = item.substr(0, eq);
      if (k.empty() || !Exportable(k)) {
        Error(Get("export")->where, "--export", "cannot export \"" + k + "\"");
        continue;
      }
      if (eq != std::string::npos) {
        env[k] = item.substr(eq + 1);
      } else if (auto it = ctx_.env.find(k); it != ctx_.env.end()) {
        env[k] = it->second;
      }
    }
    for (const auto& [k, v] : given_env_) env[k] = v;
    env["SLURM_SUBMIT_DIR"] = ctx_.cwd;
    if (!ctx_.host.empty()) env["SLURM_SUBMIT_HOST"] = ctx_.host;
    if (!ctx_.umask.empty()) env["SLURM_UMASK"] = ctx_.umask;  // the job runs with it
    // Said, not applied: Slurm's default PropagatePrioProcess=0 runs tasks at the node
    // daemon's priority.
    if (!ctx_.nice.empty()) env["SLURM_PRIO_PROCESS"] = ctx_.nice;
    // The submitter's resource limits, which the node sets on the job (base/rlimits.h):
    // all of them, as Slurm's default, or those --propagate names.
    std::optional<std::string> propagate;
    if (auto v = Get("propagate")) propagate = v->value;
    for (auto& [k, v] : SlurmRlimitEnv(ctx_.rlimits, propagate)) env[k] = v;
    // The GPU options as given, as Slurm sets them (srun reads them too).
    for (const auto& [opt, var] :
         {std::pair<const char*, const char*>{"gpus-per-task", "SLURM_GPUS_PER_TASK"},
          {"gpus-per-node", "SLURM_GPUS_PER_NODE"},
          {"gpus", "SLURM_GPUS"}}) {
      if (auto v = Get(opt)) env[var] = v->value.substr(v->value.rfind(':') + 1);
    }
    // Other options Slurm's sbatch passes on as given.
    if (auto v = Get("cpus-per-gpu")) env["SLURM_CPUS_PER_GPU"] = v->value;
    if (auto v = Get("export")) {
      env["SLURM_EXPORT_ENV"] = v->value;
      env["SLURM_GET_USER_ENV"] = "1";
    }
    // --get-user-env says so too; a job submitted from such a job's environment inherits it,
    // as Slurm's sbatch passes on the SLURM_* variables that are not the job's own.
    if (Get("get-user-env") != nullptr) {
      env["SLURM_GET_USER_ENV"] = "1";
    } else if (auto it = ctx_.env.find("SLURM_GET_USER_ENV"); all && it != ctx_.env.end()) {
      env["SLURM_GET_USER_ENV"] = it->second;
    }
    if (auto v = Get("dependency")) env["SLURM_JOB_DEPENDENCY"] = v->value;
    if (auto v = Get("open-mode")) env["SLURM_OPEN_MODE"] = v->value == "append" ? "a" : "t";
    s["env"] = env;
  }

  // Not the token or server of the submitter, not Slurm's (gantryd sets its own), not
  // the shell's bookkeeping, not exported bash functions.
  static bool Exportable(const std::string& k) {
    // (SLURMD_NODENAME too: a job submitted from inside another carried its node's name.)
    if (k.rfind("GANTRY_", 0) == 0 || k.rfind("SLURM", 0) == 0 || k.rfind("SBATCH_", 0) == 0)
      return false;
    if (k.rfind("BASH_FUNC_", 0) == 0) return false;
    for (const char* skip : {"PWD", "OLDPWD", "SHLVL", "_"}) {
      if (k == skip) return false;
    }
    return std::all_of(
               k.begin(), k.end(),
               [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
           !std::isdigit(static_cast<unsigned char>(k[0]));
  }

  // afterok:ID[:ID...] and afterany:ID..., comma-separated, as gantry submit --after.
  // Slurm's --dependency: TYPE:ID[:ID...] items, ',' all of them or '?' any one of them
  // (not both), and singleton; as gantryd's --after: ID:ok|any|notok|started|corr, joined
  // the same way.
  std::string Dependency(const Given& v) {
    static constexpr std::pair<const char*, const char*> kKinds[] = {{"afterok", "ok"},
                                                                     {"afterany", "any"},
                                                                     {"afternotok", "notok"},
                                                                     {"aftercorr", "corr"},
                                                                     {"after", "started"}};
    std::string after;
    const std::string& t = v.value;
    const bool any_of = t.find('?') != std::string::npos;
    if (any_of && t.find(',') != std::string::npos) {
      Error(v.where, "--dependency", "give ',' (all of them) or '?' (any one of them), not both");
      return "";
    }
    const char sep = any_of ? '?' : ',';
    for (size_t pos = 0; pos <= t.size();) {
      const size_t cut = std::min(t.find(sep, pos), t.size());
      const std::string item = t.substr(pos, cut - pos);
      pos = cut + 1;
      if (item == "singleton") {
        if (any_of) {
          Error(v.where, "--dependency", "singleton in a '?' list is not supported");
          return "";
        }
        after += std::string(after.empty() ? "" : ",") + "singleton";
        continue;
      }
      const size_t colon = item.find(':');
      const std::string kind = item.substr(0, colon);
      if (kind == "afterburstbuffer") {
        Error(v.where, "--dependency",
              kind +
                  " is not supported (no burst buffers; Gantry has after, afterok, afternotok, "
                  "afterany, aftercorr and singleton)");
        return "";
      }
      const char* word = nullptr;
      for (const auto& [name, w] : kKinds) {
        if (kind == name) word = w;
      }
      if (word == nullptr) {
        Error(v.where, "--dependency",
              "expected after, afterok, afternotok, afterany or aftercorr:ID[:ID...], or "
              "singleton, got \"" +
                  item + "\"");
        return "";
      }
      if (colon == std::string::npos || colon + 1 == item.size()) {
        Error(v.where, "--dependency", kind + " needs job ids, e.g. " + kind + ":12");
        return "";
      }
      for (size_t p = colon + 1; p <= item.size();) {
        const size_t c = std::min(item.find(':', p), item.size());
        const std::string id = item.substr(p, c - p);
        p = c + 1;
        if (id.empty() || id.find('+') != std::string::npos) {
          Error(v.where, "--dependency",
                "expected a job id in \"" + item + "\"" +
                    (id.find('+') != std::string::npos ? " (+TIME is not supported)" : ""));
          return "";
        }
        after += (after.empty() ? "" : std::string(1, sep)) + id + ":" + word;
      }
    }
    return after;
  }

  std::string script_;
  const SbatchContext& ctx_;
  std::map<std::string, Given> given_;
  std::vector<std::string> errors_;
};

// A directive's words: blanks split them, quotes group them, and a # after a blank ends
// the line (a comment). False when a quote is left open.
bool Words(const std::string& line, std::vector<std::string>& out) {
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) return false;
  if (in_word) out.push_back(word);
  return true;
}

}  // namespace

bool SplitSbatchArgs(const std::vector<std::string>& words, std::vector<std::string>& options,
                     std::string& script, std::vector<std::string>& args) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 2 || w[0] != '-') {
      script = w;
      args.assign(words.begin() + static_cast<std::ptrdiff_t>(i) + 1, words.end());
      return true;
    }
    options.push_back(w);
    // A value in the next word: "--time 10" and "-t 10", not "--time=10" or "-t10".
    const OptionDef* def = nullptr;
    if (w.rfind("--", 0) == 0) {
      if (w.find('=') == std::string::npos) def = FindLong(w.substr(2));
    } else if (w.size() == 2) {
      def = FindShort(w[1]);
    }
    bool value = def != nullptr && def->value;
    if (def == nullptr && w.rfind("--", 0) == 0 && w.find('=') == std::string::npos) {
      // A refused option that takes a value: keep its value with it, so the refusal is
      // what the user reads (not "cannot read ALL").
      value = IsRefused(w.substr(2));
    }
    if (value && i + 1 < words.size()) options.push_back(words[++i]);
  }
  return false;
}

std::optional<int> ParseSlurmNice(const std::string& text) {
  if (text.empty()) return 100;
  long long n = 0;
  const char* first = text.data() + (text[0] == '+');
  const auto [end, ec] = std::from_chars(first, text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || first == end || n < -2147483645LL ||
      n > 2147483645LL)
    return std::nullopt;
  return static_cast<int>(n);
}

std::optional<long long> ParseSlurmTime(const std::string& text, std::string& error) {
  if (text == "UNLIMITED" || text == "INFINITE" || text == "unlimited" || text == "infinite")
    return 0;
  auto fail = [&] {
    error = "expected MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, got \"" + text + "\"";
    return std::nullopt;
  };
  long long days = -1;
  std::string rest = text;
  if (const size_t dash = text.find('-'); dash != std::string::npos) {
    const std::string d = text.substr(0, dash);
    if (d.empty() || d.size() > 5 || d.find_first_not_of("0123456789") != std::string::npos)
      return fail();
    days = std::stoll(d);
    rest = text.substr(dash + 1);
  }
  std::vector<long long> parts;
  for (size_t pos = 0; pos <= rest.size();) {
    const size_t colon = std::min(rest.find(':', pos), rest.size());
    const std::string p = rest.substr(pos, colon - pos);
    if (p.empty() || p.size() > 7 || p.find_first_not_of("0123456789") != std::string::npos)
      return fail();
    parts.push_back(std::stoll(p));
    pos = colon + 1;
  }
  if (parts.empty() || parts.size() > 3) return fail();
  long long s = 0;
  if (days >= 0) {  // D-HH, D-HH:MM, D-HH:MM:SS
    s = days * 86400 + parts[0] * 3600;
    if (parts.size() > 1) s += parts[1] * 60;
    if (parts.size() > 2) s += parts[2];
  } else if (parts.size() == 1) {  // MM
    s = parts[0] * 60;
  } else if (parts.size() == 2) {  // MM:SS
    s = parts[0] * 60 + parts[1];
  } else {  // HH:MM:SS
    s = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  return s;
}

std::optional<int64_t> ParseSlurmBeginTime(const std::string& text, int64_t now_s,
                                           std::string& error) {
  auto fail = [&] {
    error =
        "expected now+N[seconds|minutes|hours|days|weeks], HH:MM[:SS][AM|PM], midnight, noon, "
        "fika, teatime, today, tomorrow, YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], MM.DD[.YY] or "
        "MMDDYY, got \"" +
        text + "\"";
    return std::nullopt;
  };
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::smatch m;
  static const std::regex kNow(
      R"(\s*now(?:\s*([+-])\s*([0-9]{1,9})\s*(seconds?|minutes?|hours?|days?|weeks?)?)?\s*)");
  if (std::regex_match(t, m, kNow)) {
    if (!m[1].matched) return now_s;
    const int64_t n = std::stoll(m[2].str());
    const char unit = m[3].matched ? m[3].str()[0] : 's';
    const int64_t mult = unit == 'w'   ? 604800
                         : unit == 'd' ? 86400
                         : unit == 'h' ? 3600
                         : unit == 'm' ? 60
                                       : 1;
    return now_s + (m[1] == "-" ? -n : n) * mult;
  }
  const std::time_t now_t = static_cast<std::time_t>(now_s);
  std::tm today{};
  localtime_r(&now_t, &today);
  int year = -1, month = -1, day = -1, hour = -1, minute = 0, second = 0;
  bool had_year = false;
  static const std::regex kClock(R"(([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?(am|pm)?)");
  static const std::regex kIso(
      R"(([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:t([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?)?)");
  static const std::regex kSlashed(R"(([0-9]{1,2})([/.])([0-9]{1,2})(?:\2([0-9]{2}))?)");
  static const std::regex kPacked(R"(([0-9]{2})([0-9]{2})([0-9]{2})?)");
  auto set_date = [&](int y, int mo, int d) {
    if (month >= 0) return false;  // two dates
    year = y, month = mo, day = d;
    return true;
  };
  auto set_clock = [&](int h, int mi, int se) {
    if (hour >= 0) return false;  // two times
    hour = h, minute = mi, second = se;
    return true;
  };
  std::istringstream words(t);
  std::vector<std::string> list;
  for (std::string w; words >> w;) list.push_back(w);
  if (list.empty()) return fail();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& w = list[i];
    bool ok = false;
    auto num = [&](int k) { return m[k].matched ? std::stoi(m[k].str()) : 0; };
    if (std::regex_match(w, m, kClock)) {
      int h = num(1);
      std::string half = m[4].str();
      if (half.empty() && i + 1 < list.size() && (list[i + 1] == "am" || list[i + 1] == "pm"))
        half = list[++i];  // "4:15 PM"
      if (!half.empty()) {
        if (h < 1 || h > 12) return fail();
        h = h % 12 + (half == "pm" ? 12 : 0);
      }
      ok = set_clock(h, num(2), num(3));
    } else if (w == "midnight" || w == "noon" || w == "fika" || w == "teatime") {
      ok = set_clock(w == "midnight" ? 0 : w == "noon" ? 12 : w == "fika" ? 15 : 16, 0, 0);
    } else if (w == "today" || w == "tomorrow") {
      std::tm d = today;
      d.tm_mday += w == "tomorrow";
      d.tm_hour = 12;  // (normalised by mktime, away from any DST change)
      d.tm_isdst = -1;
      std::mktime(&d);
      ok = set_date(d.tm_year + 1900, d.tm_mon + 1, d.tm_mday);
      had_year = true;
    } else if (std::regex_match(w, m, kIso)) {
      ok = set_date(num(1), num(2), num(3)) && (!m[4].matched || set_clock(num(4), num(5), num(6)));
      had_year = true;
    } else if (std::regex_match(w, m, kSlashed)) {
      ok = set_date(m[4].matched ? 2000 + num(4) : today.tm_year + 1900, num(1), num(3));
      had_year = m[4].matched;
    } else if (std::regex_match(w, m, kPacked)) {
      ok = set_date(m[3].matched ? 2000 + num(3) : today.tm_year + 1900, num(1), num(2));
      had_year = m[3].matched;
    }
    if (!ok) return fail();
  }
  if (hour > 23 || minute > 59 || second > 59 || (month >= 0 && (month < 1 || month > 12)) ||
      (month >= 0 && (day < 1 || day > 31)))
    return fail();
  const bool had_date = month >= 0, had_clock = hour >= 0;
  if (!had_date) year = today.tm_year + 1900, month = today.tm_mon + 1, day = today.tm_mday;
  if (!had_clock) hour = 0;
  auto at = [&](int add_days, int add_years) -> std::optional<int64_t> {
    std::tm tm{};
    tm.tm_year = year + add_years - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day + add_days;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    tm.tm_isdst = -1;
    const std::time_t r = std::mktime(&tm);
    if (add_days == 0 && (tm.tm_mday != day || tm.tm_mon != month - 1))
      return std::nullopt;  // 02-30
    return static_cast<int64_t>(r);
  };
  std::optional<int64_t> when = at(0, 0);
  if (!when) return fail();
  if (*when < now_s && !had_date) when = at(1, 0);              // that time tomorrow
  if (*when < now_s && had_date && !had_year) when = at(0, 1);  // that date next year
  if (!when) return fail();
  return when;
}

std::optional<long long> ParseSlurmMemory(const std::string& text, std::string& error) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  long long mult = -1;
  if (unit.empty() || unit == "M" || unit == "m" || unit == "MB") mult = 1;
  if (unit == "K" || unit == "k" || unit == "KB") mult = 0;  // rounded up to MiB below
  if (unit == "G" || unit == "g" || unit == "GB") mult = 1024;
  if (unit == "T" || unit == "t" || unit == "TB") mult = 1024 * 1024;
  if (digits == 0 || digits > 10 || mult < 0) {
    error = "expected a size such as 4096 (MB), 500M, 16G or 1T, got \"" + text + "\"";
    return std::nullopt;
  }
  const long long n = std::stoll(text.substr(0, digits));
  return mult == 0 ? (n + 1023) / 1024 : n * mult;
}

std::string UmaskText() {
  const mode_t mask = ::umask(0);  // read by setting it: put back at once
  ::umask(mask);
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mask & 0777));
  return octal;
}

std::optional<std::string> WrapScript(const std::vector<std::string>& options) {
  std::optional<std::string> command;
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& o = options[i];
    if (o.rfind("--", 0) != 0) continue;
    const size_t eq = o.find('=');
    const OptionDef* def =
        FindLong(o.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
    if (def == nullptr || std::string_view(def->name) != "wrap") continue;
    if (eq != std::string::npos) {
      command = o.substr(eq + 1);
    } else if (i + 1 < options.size()) {
      command = options[++i];
    }
  }
  if (!command) return std::nullopt;
  return "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n" + *command + "\n";
}

SbatchJob ParseSbatch(const std::string& script_name, const std::string& text,
                      const std::vector<std::string>& options, const std::vector<std::string>& args,
                      const SbatchContext& ctx) {
  Parser p(script_name, ctx);
  if (text.rfind("#!", 0) != 0) {
    p.Error(script_name + ":1", "script",
            "this does not look like a batch script: the first line must start with #! and the "
            "interpreter, e.g. "
            "#!/bin/bash");
  }
  // Directives: "#SBATCH" lines from the top, up to the first command line.
  int line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line_no == 1 && line.rfind("#!", 0) == 0) continue;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;  // blank
    if (line[first] != '#') break;             // a command: directives end here, as in Slurm
    if (line.compare(first, 7, "#SBATCH") != 0) continue;
    const std::string rest = line.substr(first + 7);
    if (!rest.empty() && rest[0] != ' ' && rest[0] != '\t') continue;  // "#SBATCHX" is a comment
    std::vector<std::string> words;
    const std::string where = script_name + ":" + std::to_string(line_no);
    if (!Words(rest, words)) {
      p.Error(where, "#SBATCH", "a quote is not closed");
      continue;
    }
    p.Read(words, where);
  }
  // Slurm's input variables override the script and are overridden by the command line.
  for (const auto& [var, option] : kInputVariables) {
    auto it = ctx.env.find(var);
    if (it == ctx.env.end()) continue;
    const OptionDef* def = FindLong(option);
    if (def != nullptr && !def->value) {
      if (it->second != "0" && it->second != "no") p.Read({std::string("--") + option}, var);
    } else {
      p.Read({std::string("--") + option + "=" + it->second}, var);
    }
  }
  p.Read(options, "command line");
  return p.Build(text, args);
}

}  // namespace gantry::cli
