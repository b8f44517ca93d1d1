#include "cli/client.h"
#include "base/clock.h"
#include "base/rlimits.h"
#include "base/server_list.h"
#include "base/url.h"
#include "cli/client_http.h"
#include "cli/sbatch.h"
#include "cli/slurm_format.h"
#include "cli/srun.h"
#include "spec/batch.h"

#include <httplib.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace gantry::cli {

namespace {

using nlohmann::json;

// A cell of width w: padded, or cut with a "+" and still a space before the next column.
std::string Pad(std::string s, size_t w) {
  if (s.size() >= w) return s.substr(0, w - 2) + "+ ";
  s.resize(w, ' ');
  return s;
}

// Columns as wide as their widest cell, two spaces apart, as kubectl prints them: nothing
// is cut and nothing runs into the next column. The last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> heads) { rows_.push_back(std::move(heads)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "1-02:03:04" like squeue's TIME.
std::string Elapsed(double seconds) { return SlurmDuration(seconds); }

std::string Num(double v) {
  std::ostringstream o;
  o << std::round(v * 100) / 100;
  return o.str();
}

std::string NewKey() {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) {
    return std::to_string(::getpid()) + "-" + std::to_string(WallSeconds());
  }
  std::string s;
  char h[3];
  for (unsigned char c : b) {
    std::snprintf(h, sizeof h, "%02x", c);
    s += h;
  }
  return s;
}

// ------------------------------------------------------------------ submit

struct SubmitArgs {
  std::vector<std::string> args;  // a spec file, or the command after --
  std::string id, queue, tier, sharing, mig, topology, workdir, image, idempotency_key, array,
      after, begin;
  bool hold = false;
  std::vector<std::string> gpu_model, env;
  // Unset unless given: every given value goes to the server as given, so the CLI rejects
  // what the job reader rejects (`--gpus -1` is an error, not "no GPUs").
  std::optional<double> gpus, vram_gb, cpus, memory_gb, checkpoint_s, grace_s, time_limit_s;
  std::optional<int> replicas, min_replicas;
  bool json_out = false;
};

bool UsesFlags(const SubmitArgs& a) {
  return !a.queue.empty() || !a.tier.empty() || !a.sharing.empty() || !a.mig.empty() ||
         !a.topology.empty() || !a.workdir.empty() || !a.image.empty() || !a.gpu_model.empty() ||
         !a.env.empty() || !a.id.empty() || a.gpus || a.vram_gb || a.cpus || a.memory_gb ||
         a.checkpoint_s || a.grace_s || a.time_limit_s || a.replicas || a.min_replicas;
}

// What a submission asks beside its spec (POST /v1/jobs's parameters).
struct PostParams {
  std::string array, after;
  int64_t begin_s = 0;  // held until then (Unix seconds); 0: none
  bool hold = false;
  int kill_invalid_dep = -1;  // sbatch --kill-on-invalid-dep: 1 yes, 0 no, -1 not given
};

// POST /v1/jobs, retried while gantryd cannot be reached or is a standby.
Response PostJob(const Globals& g, const std::string& body, const std::string& type,
                 const std::string& file, const PostParams& p, const std::string& idempotency_key) {
  Client c(g);
  // The key makes a retry after a lost answer safe: the server returns the same job.
  httplib::Headers headers = {
      {"Idempotency-Key", idempotency_key.empty() ? NewKey() : idempotency_key},
      {"X-Gantry-File", std::filesystem::path(file).filename().string()}};
  std::string query;
  if (!p.array.empty()) query += "&array=" + UrlEncode(p.array);
  if (!p.after.empty()) query += "&after=" + UrlEncode(p.after);
  if (p.begin_s > 0) query += "&begin=" + std::to_string(p.begin_s);
  if (p.hold) query += "&hold=true";
  if (p.kill_invalid_dep >= 0)
    query += p.kill_invalid_dep == 1 ? "&kill_invalid_dep=true" : "&kill_invalid_dep=false";
  const std::string path = "/v1/jobs" + (query.empty() ? "" : "?" + query.substr(1));
  // Retried for up to 30 s (GANTRY_SUBMIT_RETRY_S): a gantryd restarting, or a standby
  // taking over, answers within that; it gave up after 3.85 s, before a restart was done.
  const char* retry_env = std::getenv("GANTRY_SUBMIT_RETRY_S");
  const double retry_s = retry_env ? std::max(0.0, std::atof(retry_env)) : 30.0;
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(retry_s * 1000));
  Response r;
  for (int attempt = 0;; ++attempt) {
    r = c.Post(path, body, type, headers);
    if (r.status != 0 && r.status != 503) break;
    const auto pause = std::chrono::milliseconds(std::min(250 << std::min(attempt, 3), 2000));
    if (std::chrono::steady_clock::now() + pause >= give_up) break;
    if (attempt == 0) {
      std::cerr << "gantry: " << (r.status == 0 ? r.error : "gantryd is not ready (503)")
                << ": retrying for up to " << retry_s << " s\n";
    }
    std::this_thread::sleep_for(pause);
  }
  return r;
}

// A spec file's name: one that exists and ends in .yaml, .yml or .json.
bool IsSpecFile(const std::string& arg) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(arg, ec)) return false;
  const std::string ext = std::filesystem::path(arg).extension().string();
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

int Submit(const Globals& g, const SubmitArgs& a) {
  std::string body, type, file;
  if (UsesFlags(a) && a.args.size() == 1 && IsSpecFile(a.args[0])) {
    // `gantry submit --id x job.yaml` ran job.yaml as the command, the file's spec unread.
    std::cerr
        << "gantry submit: " << a.args[0]
        << " is a job spec file, and spec flags (--id, --queue, --gpus, ...) do not mix with one: "
           "write them in the file (e.g. `id: x`), or give a command after -- to submit by flags\n";
    return kExitBadInput;
  }
  if (UsesFlags(a)) {
    if (a.args.empty()) {
      std::cerr
          << "gantry submit: give the command after --, e.g. gantry submit --gpus 1 --vram-gb 20 "
             "--queue q -- python train.py\n";
      return kExitBadInput;
    }
    json j = json::object();
    if (!a.id.empty()) j["id"] = a.id;
    if (!a.queue.empty()) j["queue"] = a.queue;
    if (!a.tier.empty()) j["tier"] = a.tier;
    if (a.replicas) j["replicas"] = *a.replicas;
    if (a.min_replicas) j["min_replicas"] = *a.min_replicas;
    if (a.gpus) {
      if (*a.gpus == std::floor(*a.gpus)) {
        j["gpus"] = static_cast<int64_t>(*a.gpus);
      } else {
        j["gpus"] = *a.gpus;
      }
    }
    if (!a.mig.empty()) j["mig"] = a.mig;
    if (!a.sharing.empty()) j["sharing"] = a.sharing;
    if (a.gpu_model.size() == 1) j["gpu_model"] = a.gpu_model[0];
    if (a.gpu_model.size() > 1) j["gpu_model"] = a.gpu_model;
    if (a.vram_gb) j["vram_gb"] = *a.vram_gb;
    if (a.cpus) j["cpus"] = *a.cpus;
    if (a.memory_gb) j["memory_gb"] = *a.memory_gb;
    if (!a.topology.empty()) j["topology"] = a.topology;
    if (a.checkpoint_s) j["checkpoint_s"] = *a.checkpoint_s;
    if (a.grace_s) j["grace_s"] = *a.grace_s;
    if (a.time_limit_s) j["time_limit_s"] = *a.time_limit_s;
    if (!a.workdir.empty()) j["workdir"] = a.workdir;
    if (!a.image.empty()) j["image"] = a.image;
    if (!a.env.empty()) {
      json env = json::object();
      for (const std::string& kv : a.env) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
          std::cerr << "gantry submit: --env: expected NAME=VALUE, got " << kv << "\n";
          return kExitBadInput;
        }
        env[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
      j["env"] = env;
    }
    j["command"] = a.args;
    body = j.dump();
    type = "application/json";
    file = "flags";
  } else {
    if (a.args.size() != 1) {
      std::cerr
          << "gantry submit: give one job spec file (YAML or JSON), or flags and -- COMMAND\n";
      return kExitBadInput;
    }
    file = a.args[0];
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "gantry submit: cannot read " << file << "\n";
      return kExitBadInput;
    }
    std::ostringstream text;
    text << in.rdbuf();
    body = text.str();
    const bool is_json = file.size() > 5 && file.substr(file.size() - 5) == ".json";
    type = is_json ? "application/json" : "application/yaml";
  }
  PostParams params;
  params.array = a.array;
  params.after = a.after;
  params.hold = a.hold;
  if (!a.begin.empty()) {
    std::string why;
    const int64_t now_s = static_cast<int64_t>(std::time(nullptr));
    const std::optional<int64_t> begin = ParseSlurmBeginTime(a.begin, now_s, why);
    if (!begin) {
      std::cerr << "gantry submit: --begin: " << why << "\n";
      return kExitBadInput;
    }
    params.begin_s = *begin > now_s ? *begin : 0;
  }
  Response r = PostJob(g, body, type, file, params, a.idempotency_key);
  if (int rc = Check(r, "submit")) return rc;
  json j = r.Json();
  if (a.json_out) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << j.value("id", std::string()) << "\n";
  }
  return 0;
}

// ------------------------------------------------------------------ sbatch

// What sbatch and salloc read of the submitting machine.
SbatchContext SubmitContext() {
  SbatchContext ctx;
  std::error_code ec;
  ctx.cwd = std::filesystem::current_path(ec).string();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) ctx.host = host;
  ctx.umask = UmaskText();
  errno = 0;  // getpriority may return -1 as a nice value
  if (const int nice = ::getpriority(PRIO_PROCESS, 0); errno == 0) ctx.nice = std::to_string(nice);
  ctx.rlimits = SoftRlimits();
  ctx.now_s = static_cast<int64_t>(std::time(nullptr));
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) ctx.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return ctx;
}

// Submits a parsed sbatch or salloc job; gantryd's refusals of what it resolves (a QoS,
// account, partition or GPU type the site does not map) shown at the directive that gave
// it, not the spec's field. Prints the errors; the job's number (or id) in `number`.
int SubmitBatch(const Globals& g, const SbatchJob& job, const std::string& file, const char* what,
                std::string& number, std::string& id) {
  if (!job.errors.empty()) {
    for (const std::string& e : job.errors) std::cerr << e << "\n";
    return kExitBadInput;
  }
  for (const std::string& n : job.notes) std::cerr << what << ": note: " << n << "\n";
  PostParams params;
  params.array = job.array;
  params.after = job.after;
  params.begin_s = job.begin_s;
  params.hold = job.hold;
  params.kill_invalid_dep = job.kill_invalid_dep;
  Response r = PostJob(g, job.spec.dump(), "application/json", file, params, "");
  if (r.status >= 400 && r.status < 500) {
    json j = r.Json();
    if (j.is_object() && j.contains("problems") && j["problems"].is_array()) {
      for (json& p : j["problems"]) {
        if (!p.is_string()) continue;
        std::string problem = p.get<std::string>();
        for (const auto& [field, where] : job.origin) {
          const size_t at = problem.find(": " + field + ": ");
          if (at != std::string::npos)
            problem = where + ": " + problem.substr(at + field.size() + 4);
        }
        p = problem;
      }
      r.body = j.dump();
    }
  }
  if (int rc = Check(r, what)) return rc;
  // The job's number, as Slurm prints it (SLURM_JOB_ID, %j; an array's number is its first
  // task's): both it and Gantry's id work in every command.
  const json answer = r.Json();
  id = answer.value("id", std::string());
  number = answer.contains("number") && answer["number"].is_number_integer()
               ? std::to_string(answer["number"].get<int64_t>())
               : id;
  return 0;
}

// sbatch --wait: polls until job `id` (an array: each of its tasks) has ended, and gives
// its exit code as Slurm's sbatch does: the job's (an array's highest), 1 where a signal
// or anything but its own exit ended it (cancelled, a time limit, a node lost).
int WaitForBatchJob(const Globals& g, const std::string& id, bool array) {
  std::cout.flush();
  Client c(g);
  auto code_of = [](const json& j) {
    const std::string state = j.value("state", "");
    if (state == "finished") return 0;
    if (state == "failed" && !j.contains("exit_signal"))
      return std::max(1, j.value("exit_code", 1));
    return 1;
  };
  for (int polls = 0;; ++polls) {
    // A task's id is ID_INDEX: the array's are the ended and active jobs whose array is it
    // (filtered here too: a gantryd from before the list's `array` filter gives them all).
    Response r =
        c.Get(array ? "/v1/jobs?all=1&array=" + UrlEncode(id) : "/v1/jobs/" + UrlEncode(id));
    if (r.status == 200) {
      const json now = r.Json();
      std::vector<json> jobs;
      if (!array) {
        jobs.push_back(now);
      } else {
        for (const json& j : now.value("jobs", json::array())) {
          if (j.value("array", json()) == id) jobs.push_back(j);
        }
      }
      const bool ended = !jobs.empty() && std::all_of(jobs.begin(), jobs.end(), [](const json& j) {
        const std::string state = j.value("state", "");
        return state != "pending" && state != "running" && state != "stopping";
      });
      if (ended) {
        int code = 0;
        for (const json& j : jobs) code = std::max(code, code_of(j));
        return code;
      }
    } else if (r.status == 404 || r.status == 401 || r.status == 403) {
      return Check(r, "sbatch");
    }
    // Every second at first, then less often (at most every 10 s), as a long wait goes.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10'000, 1'000 + 250 * polls)));
  }
}

// `gantry sbatch [options] script.sh [args...]`: the script and its #SBATCH directives
// as a job spec (cli/sbatch.h), submitted as `submit` does.
int Sbatch(const Globals& g, const std::vector<std::string>& words) {
  std::vector<std::string> options, args;
  std::string script;
  const bool named = SplitSbatchArgs(words, options, script, args);
  const std::optional<std::string> wrap = WrapScript(options);
  SbatchContext ctx = SubmitContext();
  std::ostringstream text;
  if (named && wrap) {
    std::cerr << "gantry sbatch: --wrap makes the script: give no script file (" << script
              << ") and no script arguments\n";
    return kExitBadInput;
  } else if (named) {
    std::ifstream in(script, std::ios::binary);
    if (!in) {
      std::cerr << "gantry sbatch: cannot read " << script << "\n";
      return kExitBadInput;
    }
    text << in.rdbuf();
  } else if (wrap) {  // as Slurm's: a /bin/sh script of the command, its job named "wrap"
    script = "--wrap";
    ctx.default_name = "wrap";
    text << *wrap;
  } else if (!::isatty(STDIN_FILENO)) {  // the script on stdin (sbatch <<EOF ... EOF)
    script = "(stdin)";
    ctx.default_name = "sbatch";  // Slurm's name for it
    text << std::cin.rdbuf();
    if (text.str().empty()) {
      std::cerr << "gantry sbatch: the batch script on stdin is empty\n";
      return kExitBadInput;
    }
  } else {
    std::cerr << "gantry sbatch: give a batch script: gantry sbatch [options] script.sh "
                 "[args...], --wrap=COMMAND, or the script on stdin\n";
    return kExitBadInput;
  }
  SbatchJob job = ParseSbatch(script, text.str(), options, args, ctx);
  std::string number, id;
  if (int rc = SubmitBatch(g, job, script, "sbatch", number, id)) return rc;
  if (job.parsable) {
    std::cout << number << "\n";
  } else {
    std::cout << "Submitted batch job " << number << "\n";
  }
  return job.wait ? WaitForBatchJob(g, id, !job.array.empty()) : 0;
}

// ------------------------------------------------------------------ salloc

namespace {

std::atomic<int> g_salloc_signal{0};
void OnSallocSignal(int sig) { g_salloc_signal = sig; }

}  // namespace

// `gantry salloc [options] [command [args...]]`, as Slurm's salloc: an allocation (sbatch's
// options) whose batch step only holds it; once granted, the command (default $SHELL) runs
// here, on the submit host, with the allocation's SLURM_* environment and its credential,
// so srun in it runs steps on the allocated nodes; when the command exits the allocation
// is given back with its status (the job ends finished, or failed with it), and the exit
// status is the command's. --no-shell: salloc ends once it is granted and the allocation
// stays (srun --jobid reaches it, scancel or its time limit ends it); -I/--immediate[=S]:
// given up unless granted within S seconds (none: at once), as Slurm's. The terminal bell
// rings when it is granted after more than 10 s of waiting, or always with --bell, never
// with --no-bell (only where stdout is a terminal), as Slurm's.
int Salloc(const Globals& g, const std::vector<std::string>& words) {
  std::vector<std::string> options, command;
  std::string first;
  if (SplitSbatchArgs(words, options, first, command)) command.insert(command.begin(), first);
  bool no_shell = false;
  std::optional<bool> bell;      // --bell, --no-bell; none: after 10 s of waiting
  std::optional<int> immediate;  // seconds
  for (auto o = options.begin(); o != options.end();) {
    std::string secs;
    if (*o == "--no-shell") {
      no_shell = true;
    } else if (*o == "--bell" || *o == "--no-bell") {
      bell = *o == "--bell";
    } else if (*o == "-I" || *o == "--immediate") {
      immediate = 0;
    } else if (o->rfind("--immediate=", 0) == 0 || (o->rfind("-I", 0) == 0 && o->size() > 2)) {
      secs = o->substr(o->find('=') != std::string::npos ? o->find('=') + 1 : 2);
      if (secs.empty() || secs.size() > 6 ||
          secs.find_first_not_of("0123456789") != std::string::npos) {
        std::cerr << "salloc: error: " << *o << ": expected --immediate=SECONDS\n";
        return kExitBadInput;
      }
      immediate = std::stoi(secs);
    } else {
      ++o;
      continue;
    }
    o = options.erase(o);
  }
  for (const std::string& o : options) {
    for (const char* refused : {"--array", "-a", "--output", "-o", "--error", "-e", "--parsable",
                                "--wrap", "--open-mode"}) {
      if (o == refused || o.rfind(std::string(refused) + "=", 0) == 0 ||
          (refused[1] != '-' && o.rfind(refused, 0) == 0)) {
        std::cerr << "salloc: error: " << o
                  << ": not an salloc option (the command's output is the terminal's; "
                     "arrays and --wrap are sbatch's)\n";
        return kExitBadInput;
      }
    }
  }
  if (command.empty()) {
    const char* shell = std::getenv("SHELL");
    command = {shell && *shell ? shell : "/bin/sh"};
  }
  // Slurm's salloc's job name, unless -J gives one (with --no-shell the command is ignored).
  const std::string name = no_shell ? "no-shell" : "interactive";
  // The batch step holds the allocation and does nothing else; TERM (the relinquish, a
  // cancel or the time limit) ends it.
  const std::string holder =
      "#!/bin/sh\n"
      "# gantry salloc: holds the allocation while salloc's command runs on the submit host\n"
      "exec sleep 2147483647\n";
  const SbatchContext ctx = SubmitContext();
  SbatchJob job = ParseSbatch(name, holder, options, {}, ctx);
  std::string number, id;
  if (int rc = SubmitBatch(g, job, "salloc", "salloc", number, id)) return rc;
  Client c(g);
  auto cancel = [&] { c.Post("/v1/jobs/" + UrlEncode(id) + "/cancel", "", "application/json"); };
  // Waiting: Ctrl-C (or TERM, HUP) gives the pending allocation up, as Slurm's salloc does.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, OnSallocSignal);
  bool said_queued = false;
  const auto asked = std::chrono::steady_clock::now();
  json j;
  const auto give_up_at = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(immediate ? std::max(1, *immediate) * 1000 : 0);
  for (;;) {
    Response r = c.Get("/v1/jobs/" + UrlEncode(id));
    if (r.status == 200) j = r.Json();
    const std::string state = j.is_object() ? j.value("state", "") : "";
    if (state == "running") break;
    if (!state.empty() && state != "pending") {
      std::cerr << "salloc: error: Job allocation " << number
                << " has been revoked: " << j.value("reason", state) << "\n";
      return kExitRunFailure;
    }
    if (g_salloc_signal != 0) {
      cancel();
      std::cerr << "salloc: Job allocation " << number << " has been revoked.\n";
      return kExitRunFailure;
    }
    if (immediate && std::chrono::steady_clock::now() >= give_up_at) {
      cancel();
      std::cerr << "salloc: error: Unable to allocate resources: "
                << (*immediate == 0 ? "Requested nodes are busy" : "Connection timed out")
                << "\nsalloc: Job allocation " << number << " has been revoked.\n";
      return kExitRunFailure;
    }
    if (state == "pending" && !said_queued && !(immediate && *immediate == 0)) {
      std::cerr << "salloc: Pending job allocation " << number << "\nsalloc: job " << number
                << " queued and waiting for resources\n";
      said_queued = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  if (said_queued) std::cerr << "salloc: job " << number << " has been allocated resources\n";
  std::cerr << "salloc: Granted job allocation " << number << "\n";
  if (bell.value_or(std::chrono::steady_clock::now() - asked > std::chrono::seconds(10)) &&
      ::isatty(STDOUT_FILENO)) {
    std::cout << '\a' << std::flush;
  }
  if (no_shell) return 0;  // it stays, as Slurm's: srun --jobid, scancel, its time limit
  Response a = c.Get("/v1/jobs/" + UrlEncode(id) + "/allocation");
  if (int rc = Check(a, "salloc")) {
    cancel();
    return rc;
  }
  const json alloc = a.Json();
  // The command's environment: this one, the allocation's over it, its credential, and
  // where gantryd is (srun, squeue, scancel and sacct in it speak for the job).
  std::map<std::string, std::string> env = ctx.env;
  const json given = alloc.value("env", json::object());  // (items() of a temporary dangles)
  for (const auto& [k, v] : given.items()) {
    if (v.is_string()) env[k] = v.get<std::string>();
  }
  env["GANTRY_TOKEN"] = alloc.value("token", "");
  env["GANTRY_SERVER"] = c.server();
  env["SLURM_SUBMIT_HOST"] = ctx.host;
  std::vector<std::string> kv;
  for (const auto& [k, v] : env) kv.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (std::string& e : kv) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (std::string& w : command) argv.push_back(w.data());
  argv.push_back(nullptr);
  // While the command runs, it has the terminal's signals (Ctrl-C is the shell's), as with
  // Slurm's salloc.
  for (int sig : {SIGINT, SIGQUIT}) std::signal(sig, SIG_IGN);
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) std::signal(sig, SIG_DFL);
    ::execvpe(argv[0], argv.data(), envp.data());
    std::cerr << "salloc: error: " << command.front() << ": " << std::strerror(errno) << "\n";
    ::_exit(127);
  }
  if (pid < 0) {
    std::cerr << "salloc: error: fork: " << std::strerror(errno) << "\n";
    cancel();
    return kExitRunFailure;
  }
  int status = 0;
  bool revoked = false;
  auto next_check = std::chrono::steady_clock::now();
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (g_salloc_signal == SIGTERM || g_salloc_signal == SIGHUP) {
      ::kill(pid, g_salloc_signal.exchange(0));  // passed on: the command ends, then salloc
    }
    // The allocation ended under it (scancel, its time limit, a node lost): the command is
    // told with SIGHUP, as a terminal's end tells a shell.
    if (!revoked && std::chrono::steady_clock::now() >= next_check) {
      next_check += std::chrono::seconds(2);
      Response r = c.Get("/v1/jobs/" + UrlEncode(id));
      const json now = r.Json();
      if (r.status == 200 && now.is_object() && now.value("state", "") != "running") {
        std::cerr << "salloc: Job allocation " << number << " has been revoked.\n";
        revoked = true;
        ::kill(pid, SIGHUP);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : kExitRunFailure;
  if (!revoked) {
    // Given back with the command's status: the job ends completed, or failed with it.
    std::cerr << "salloc: Relinquishing job allocation " << number << "\n";
    Response r = c.Post("/v1/jobs/" + UrlEncode(id) + "/release?exit_code=" + std::to_string(code),
                        "", "application/json");
    if (r.status != 200) cancel();
  }
  return code;
}

// ------------------------------------------------------------------ ls, show, cancel, logs

// "a,b,,c" -> a, b, c (squeue's and sacct's lists).
std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct LsArgs {
  bool json_out = false, all = false, noheader = false;
  std::string state, format, names;  // squeue's -o/--format and -O/--Format
  std::string user, queue;           // squeue's -u and -A: one name, or comma-separated
  std::string jobs;                  // squeue's -j: job or array ids, comma-separated
};

int Ls(const Globals& g, const LsArgs& a) {
  std::optional<std::vector<Column>> cols;
  std::string error;
  if (!a.format.empty() && !a.names.empty()) {
    std::cerr << "gantry ls: give --format or --Format, not both\n";
    return kExitBadInput;
  }
  if (!a.format.empty() && !(cols = ParseSqueueFormat(a.format, error))) {
    std::cerr << "gantry ls: --format: " << error << "\n";
    return kExitBadInput;
  }
  if (!a.names.empty() && !(cols = ParseSqueueNames(a.names, error))) {
    std::cerr << "gantry ls: --Format: " << error << "\n";
    return kExitBadInput;
  }
  Client c(g);
  std::string path = "/v1/jobs?all=" + std::string(a.all ? "1" : "0");
  if (!a.state.empty()) path += "&state=" + UrlEncode(a.state);
  // One name is filtered by gantryd; a list here, from every job.
  const std::vector<std::string> users = SplitList(a.user), queues = SplitList(a.queue);
  if (users.size() == 1) path += "&user=" + UrlEncode(users[0]);
  if (queues.size() == 1) path += "&queue=" + UrlEncode(queues[0]);
  Response r = c.Get(path);
  if (int rc = Check(r, "ls")) return rc;
  json j = r.Json();
  auto listed = [](const std::vector<std::string>& names, const json& v) {
    return names.size() < 2 || std::find(names.begin(), names.end(),
                                         v.is_string() ? v.get<std::string>() : "") != names.end();
  };
  json kept = json::array();
  const std::vector<std::string> ids = SplitList(a.jobs);
  for (json& job : j["jobs"]) {
    if (listed(users, job["user"]) && listed(queues, job["queue"]) && JobIsOneOf(job, ids))
      kept.push_back(std::move(job));
  }
  j["jobs"] = std::move(kept);
  if (a.json_out) {
    std::cout << j["jobs"].dump() << "\n";
    return 0;
  }
  if (cols) {  // squeue's formats
    const double at = WallSeconds();
    if (!a.noheader) {
      std::vector<std::string> heads;
      for (const Column& col : *cols) heads.push_back(ColumnHeader(col, false));
      std::cout << RenderRow(*cols, heads, "", true, false) << "\n";
    }
    for (const json& job : j["jobs"]) {
      std::vector<std::string> values;
      for (const Column& col : *cols)
        values.push_back(col.field.empty() ? col.literal : FieldValue(job, col.field, at));
      std::cout << RenderRow(*cols, values, "", true, false) << "\n";
    }
    return 0;
  }
  const double now = WallSeconds();
  Table table(
      {"JOBID", "QUEUE", "USER", "TIER", "STATE", "TIME", "NODES", "REQUEST", "NODELIST(REASON)"});
  for (const json& job : j["jobs"]) {
    const std::string state_s = job.value("state", "");
    double t = 0;
    if (job.contains("run_start")) t = now - job["run_start"].get<double>();
    if (!job["end"].is_null() && !job["start"].is_null())
      t = job["end"].get<double>() - job["start"].get<double>();
    std::string where;
    for (const auto& n : job["nodes"]) where += (where.empty() ? "" : ",") + n.get<std::string>();
    const std::string reason = job.value("reason", "");
    const std::string last = state_s == "running" ? where : "(" + reason + ")";
    const std::string user = job.value("user", "");
    table.Add({job.value("id", ""), job.value("queue", ""), user.empty() ? "-" : user,
               job.contains("tier_now") ? job.value("tier_now", "") + "*" : job.value("tier", ""),
               state_s, Elapsed(t), std::to_string(job["nodes"].size()),
               // an elastic job running: "3 of 2-4 x 8 GPU(s) ..."
               (job.contains("size") ? std::to_string(job.value("size", 0)) + " of " : "") +
                   job.value("request", ""),
               reason.empty() && state_s != "running" ? "" : last});
  }
  table.Print(std::cout);
  return 0;
}

// Running jobs with what their GPUs do now, busiest holders first: squeue meets
// nvidia-smi. NOW: utilization the agents last reported (mean over workers); VRAM: the
// fullest worker's now and peak against what it asked; BUSY: utilization-weighted share
// of its reported GPU-time so far; IDLE: since a worker was last busy.
int Top(const Globals& g, bool json_out) {
  Client c(g);
  Response r = c.Get("/v1/jobs?all=0&state=running");
  if (int rc = Check(r, "top")) return rc;
  json j = r.Json();
  std::vector<json> jobs(j["jobs"].begin(), j["jobs"].end());
  std::stable_sort(jobs.begin(), jobs.end(), [&](const json& a, const json& b) {
    const json &ua = a.value("usage", json::object()), &ub = b.value("usage", json::object());
    return ua.value("util_now", 2.0) < ub.value("util_now", 2.0);  // idlest first: what to look at
  });
  if (json_out) {
    std::cout << json(jobs).dump() << "\n";
    return 0;
  }
  // VRAM per worker (all its GPUs together), as agents report it: what it holds now, its
  // peak, and what it asked (vram_gb on each of its GPUs).
  Table table({"JOBID", "QUEUE", "USER", "REQUEST", "NOW", "VRAM/WORKER NOW/PEAK/ASKED GB", "BUSY",
               "IDLE", "NODES"});
  for (const json& job : jobs) {
    const json& u = job.value("usage", json::object());
    std::string where;
    for (const auto& n : job["nodes"]) where += (where.empty() ? "" : ",") + n.get<std::string>();
    const std::string user = job.value("user", "");
    const bool seen = u.contains("util_now");
    const double asked = u.value("vram_asked_worker_gb", u.value("vram_asked_gb", 0.0));
    table.Add({job.value("id", ""), job.value("queue", ""), user.empty() ? "-" : user,
               job.value("request", ""),
               seen ? std::to_string(std::lround(100 * u.value("util_now", 0.0))) + "%" : "-",
               seen ? Num(std::round(u.value("vram_now_gb", 0.0) * 10) / 10) + "/" +
                          Num(std::round(u.value("vram_peak_gb", 0.0) * 10) / 10) + "/" + Num(asked)
                    : "-",
               u.contains("utilization")
                   ? std::to_string(std::lround(100 * u.value("utilization", 0.0))) + "%"
                   : "-",
               seen ? Elapsed(u.value("idle_s", 0.0)) : "-", where});
  }
  table.Print(std::cout);
  return 0;
}

// A job's usage time series: one line per sample (UTC time, run, GPUs, utilization, VRAM).
int Series(const Globals& g, const std::string& id, bool json_out) {
  Client c(g);
  Response r = c.Get("/v1/jobs/" + UrlEncode(id) + "/usage");
  if (int rc = Check(r, "show")) return rc;
  json j = r.Json();
  if (json_out) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << Pad("TIME (UTC)", 21) << Pad("RUN", 5) << Pad("GPUS", 7) << Pad("UTIL", 6)
            << "VRAM PEAK GB\n";
  for (const json& s : j["samples"]) {
    const std::time_t t = static_cast<std::time_t>(s.value("t", 0.0));
    std::tm tm{};
    gmtime_r(&t, &tm);
    char when[32];
    std::strftime(when, sizeof when, "%F %T", &tm);
    std::cout << Pad(when, 21) << Pad(std::to_string(s.value("run", 0)), 5)
              << Pad(Num(s.value("gpus", 0.0)), 7)
              << Pad(std::to_string(std::lround(100 * s.value("util", 0.0))) + "%", 6)
              << Num(std::round(s.value("vram_peak_gb", 0.0) * 10) / 10) << "\n";
  }
  if (j["samples"].empty()) {
    std::cout << "(no samples yet: one per " << Num(j.value("interval_s", 0.0))
              << " s of reported usage, kept " << Num(j.value("retention_days", 0.0)) << " days)\n";
  }
  return 0;
}

int Show(const Globals& g, const std::string& id, bool json_out) {
  Client c(g);
  Response r = c.Get("/v1/jobs/" + UrlEncode(id));
  if (int rc = Check(r, "show")) return rc;
  json j = r.Json();
  if (json_out) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  for (const char* k : {"id", "array", "queue", "team", "user", "tier", "tier_now", "tier_reason",
                        "state", "reason", "request", "size", "resizes", "run", "preemptions",
                        "requeues", "progress_s", "exit_code"}) {
    if (!j.contains(k) || j[k].is_null()) continue;
    const json& v = j[k];
    std::cout << Pad(k, 14) << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  }
  // Times as a person reads them, with how long each step took.
  auto when = [](double unix_s) {
    const std::time_t t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%F %T UTC", &tm);
    return std::string(buf);
  };
  const double now = WallSeconds();
  const double submit = j.value("submit", 0.0);
  if (submit > 0) std::cout << Pad("submitted", 14) << when(submit) << "\n";
  if (j.contains("start") && j["start"].is_number()) {
    const double start = j["start"].get<double>();
    std::cout << Pad("started", 14) << when(start) << "  (waited " << Elapsed(start - submit)
              << ")\n";
    if (j.contains("end") && j["end"].is_number()) {
      const double end = j["end"].get<double>();
      std::cout << Pad("ended", 14) << when(end) << "  (ran " << Elapsed(end - start) << ")\n";
    } else if (j.contains("run_start") && j["run_start"].is_number()) {
      std::cout << Pad("running for", 14) << Elapsed(now - j["run_start"].get<double>()) << "\n";
    } else {  // preempted or requeued: pending again (no run of it is on now)
      std::cout << Pad("waiting", 14) << "again, after run " << j.value("run", 0) << " ("
                << Elapsed(now - submit) << " since submitted)\n";
    }
  } else if (j.contains("end") && j["end"].is_number()) {
    std::cout << Pad("ended", 14) << when(j["end"].get<double>()) << "  (never started)\n";
  } else {
    std::cout << Pad("waiting for", 14) << Elapsed(now - submit) << "\n";
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    // What it used: GPU-hours held and busy, VRAM against what it asked.
    const json& u = j["usage"];
    auto num = [](double v, int digits) {
      std::ostringstream s;
      s << std::fixed << std::setprecision(digits) << v;
      return s.str();
    };
    std::string line = num(u.value("gpu_hours", 0.0), 3) + " GPU-h held";
    if (u.contains("busy_gpu_hours")) {
      line += ", " + num(u.value("busy_gpu_hours", 0.0), 3) + " GPU-h busy (" +
              num(100 * u.value("utilization", 0.0), 0) + "% of what agents reported)";
    }
    std::cout << Pad("usage", 14) << line << "\n";
    if (u.contains("vram_peak_gb")) {
      std::cout << Pad("vram", 14) << "peak " << num(u.value("vram_peak_gb", 0.0), 1)
                << " GB, mean " << num(u.value("vram_mean_gb", 0.0), 1) << " GB per worker; asked "
                << num(u.value("vram_asked_gb", 0.0), 1) << " GB per GPU\n";
    }
    if (u.contains("advice"))
      std::cout << Pad("advice", 14) << u["advice"].value("text", "") << "\n";
    if (u.contains("idle_s")) {
      const double after = u.value("reclaim_idle_after_s", 0.0);
      std::cout << Pad("now", 14) << num(100 * u.value("util_now", 0.0), 0) << "% busy";
      if (u.value("idle_s", 0.0) >= 1)
        std::cout << ", idle for " << Elapsed(u.value("idle_s", 0.0));
      if (u.contains("keep_when_idle")) {
        std::cout << "; kept when idle: " << u["keep_when_idle"].get<std::string>();
      } else if (after > 0) {
        std::cout << "; reclaimed after " << Elapsed(after) << " idle";
      }
      std::cout << "\n";
    }
  }
  if (j.contains("image")) std::cout << Pad("image", 14) << j["image"].get<std::string>() << "\n";
  if (j.contains("command")) std::cout << Pad("command", 14) << j["command"].dump() << "\n";
  for (const auto& w : j.value("workers", json::array())) {
    // A worker a signal ended (the kernel's OOM killer sends SIGKILL) says so, not "exited 0".
    std::string ended;
    if (w.value("exited", false)) {
      const int sig = w.value("signal", 0);
      const char* name = sig > 0 ? sigabbrev_np(sig) : nullptr;
      ended = sig > 0 ? "  killed by " + (name ? "SIG" + std::string(name) : std::to_string(sig))
                      : "  exited " + std::to_string(w.value("exit_code", 0));
      if (w.value("lost", false)) ended += " (lost: ended by its agent or node)";
    }
    std::cout << Pad("worker " + std::to_string(w.value("rank", 0)), 14) << w["alloc"].dump()
              << ended << "\n";
  }
  return 0;
}

// Which active jobs `cancel` with filters takes (scancel -u, -n, -t, -A), all given
// filters holding; with ids too, only those of them.
struct CancelFilter {
  std::string user, name, state, queue;
  bool any() const { return !user.empty() || !name.empty() || !state.empty() || !queue.empty(); }
};

// With `signal` (scancel --signal): sent to the jobs instead of ending them, to `to`:
// steps, batch or full (POST /v1/jobs/ID/signal).
int Cancel(const Globals& g, std::vector<std::string> ids, bool force,
           const CancelFilter& filter = {}, const std::string& signal = "",
           const std::string& to = "steps", bool quiet = false) {
  Client c(g);
  int worst = 0;
  if (filter.any()) {
    Response r =
        c.Get("/v1/jobs?all=0" + (filter.user.empty() ? "" : "&user=" + UrlEncode(filter.user)) +
              (filter.queue.empty() ? "" : "&queue=" + UrlEncode(filter.queue)));
    if (int rc = Check(r, "cancel")) return rc;
    const std::vector<std::string> given = std::move(ids);
    ids.clear();
    const json listed = r.Json();
    for (const json& j : listed.value("jobs", json::array())) {
      const std::string id = j.value("id", "");
      if (!JobIsOneOf(j, given)) continue;
      // (user and queue: gantryd's listing filtered them)
      if (!filter.name.empty() && j.value("name", "") != filter.name) continue;
      if (!filter.state.empty() && j.value("state", "") != filter.state) continue;
      if (!signal.empty() && j.value("state", "") != "running") continue;  // only those run
      ids.push_back(id);
    }
  }
  for (const std::string& id : ids) {
    Response r =
        signal.empty()
            ? c.Post("/v1/jobs/" + UrlEncode(id) + "/cancel" + (force ? "?force=true" : ""), "",
                     "application/json")
            : c.Post(
                  "/v1/jobs/" + UrlEncode(id) + "/signal?signal=" + UrlEncode(signal) + "&to=" + to,
                  "", "application/json");
    if (int rc = Check(r, "cancel")) {
      worst = std::max(worst, rc);
      continue;
    }
    json j = r.Json();
    if (quiet) continue;
    if (!signal.empty()) {
      std::cout << id << ": signal " << signal << " sent to " << j.value("signalled", 0)
                << " running job(s)\n";
    } else if (j.contains("cancelled")) {  // an array
      std::cout << id << ": " << j["cancelled"].get<int>() << " task(s) cancelled\n";
    } else {
      std::cout << id << ": " << j.value("state", "") << "\n";
    }
  }
  return worst;
}

int Logs(const Globals& g, const std::string& id, int rank, int run, bool follow) {
  Client c(g);
  int64_t offset = -1;
  while (true) {
    std::string path = "/v1/jobs/" + UrlEncode(id) + "/logs?rank=" + std::to_string(rank);
    if (run > 0) path += "&run=" + std::to_string(run);
    if (offset >= 0) path += "&offset=" + std::to_string(offset);
    Response r = c.Get(path);
    if (int rc = Check(r, "logs")) return rc;
    std::cout << r.body << std::flush;
    if (!follow) return 0;
    auto it = r.headers.find("X-Gantry-Log-Size");
    const int64_t size = it != r.headers.end() ? std::stoll(it->second) : 0;
    if (offset < 0)
      offset = size;
    else
      offset += static_cast<int64_t>(r.body.size());
    Response s = c.Get("/v1/jobs/" + UrlEncode(id));
    if (s.status == 200) {
      const std::string state = s.Json().value("state", "");
      if (state != "running" && state != "stopping" && state != "pending" && r.body.empty())
        return 0;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// ------------------------------------------------------------------ nodes, queues, usage, drain

int Nodes(const Globals& g, bool json_out) {
  Client c(g);
  Response r = c.Get("/v1/nodes");
  if (int rc = Check(r, "nodes")) return rc;
  json j = r.Json();
  if (json_out) {
    std::cout << j["nodes"].dump() << "\n";
    return 0;
  }
  // What keeps the node's workers apart, as its agent says: "cgroups,devices,mig" when
  // all is (mig only with a MIG-capable driver), a "no-" before what is not, "-" when the
  // agent does not say (an older agent, or none yet).
  auto isolation = [](const json& n) {
    const json i = n.value("isolation", json::object());
    std::string out;
    for (const auto& [key, name] :
         {std::pair{"cgroups", "cgroups"}, {"gpu_devices", "devices"}, {"mig", "mig"}}) {
      if (!i.contains(key)) continue;
      out += (out.empty() ? "" : ",") + std::string(i.value(key, false) ? "" : "no-") + name;
    }
    return out.empty() ? std::string("-") : out;
  };
  Table table({"NODE", "POOL", "MODEL", "STATE", "GPUS", "FREE", "ADDRESS", "ISOLATION", "REASON"});
  for (const json& n : j["nodes"]) {
    table.Add({n.value("name", ""), n.value("pool", ""), n.value("model", ""), n.value("state", ""),
               std::to_string(n.value("gpus", 0)), std::to_string(n.value("free_gpus", 0)),
               n.value("address", ""), isolation(n), n.value("reason", "")});
  }
  table.Print(std::cout);
  return 0;
}

int Queues(const Globals& g, bool json_out) {
  Client c(g);
  Response r = c.Get("/v1/queues");
  if (int rc = Check(r, "queues")) return rc;
  json j = r.Json();
  if (json_out) {
    std::cout << j["queues"].dump() << "\n";
    return 0;
  }
  Table table({"QUEUE", "PARENT", "USED", "GUARANTEE", "BURST", "USED/GUAR", "FAIR-SHARE USE",
               "PENDING", "RUNNING", "BUDGET (GPU-HOURS SPENT/PER PERIOD)"});
  for (const json& q : j["queues"]) {
    const double used = q.value("used_gpus", 0.0), guar = q.value("guaranteed_gpus", 0.0);
    std::string budget = "-";
    if (q.contains("budget")) {
      const json& b = q["budget"];
      budget = Num(std::round(b.value("spent_gpu_hours", 0.0) * 10) / 10) + "/" +
               Num(b.value("gpu_hours", 0.0)) + " per " + b.value("period", "") +
               (b.value("spent", false) ? ", spent: new work " + b.value("when_spent", "") : "");
    }
    table.Add({q.value("name", ""), q.value("parent", ""), Num(used), Num(guar),
               q["burst_gpus"].is_null() ? "-" : Num(q["burst_gpus"].get<double>()),
               guar > 0 ? std::to_string(std::lround(100 * used / guar)) + "%" : "-",
               Num(std::round(q.value("fair_share_gpus", 0.0) * 100) / 100),
               std::to_string(q.value("pending", 0)), std::to_string(q.value("running", 0)),
               budget});
  }
  table.Print(std::cout);
  return 0;
}

// "24h", "7d", "90m", "3600s" (ago), a UTC date "2026-11-01" or time "2026-11-01T12:30"
// (seconds optional), or seconds since the Unix epoch.
bool ParseWhen(const std::string& s, double now, double& out) {
  if (s.empty()) return false;
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &used) == 3 && used == 10) {
    if (s.size() > 10) {
      int more = 0;
      if ((s[10] != 'T' && s[10] != ' ') ||
          std::sscanf(s.c_str() + 11, "%2d:%2d%n", &h, &mi, &more) != 2 ||
          (s.size() > 11 + static_cast<size_t>(more) &&
           (std::sscanf(s.c_str() + 11 + more, ":%2d", &sec) != 1 ||
            s.size() != 11 + static_cast<size_t>(more) + 3))) {
        return false;
      }
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return false;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    const std::time_t t = timegm(&tm);
    if (tm.tm_mday != d) return false;  // 2026-02-30 rolled over
    out = static_cast<double>(t);
    return true;
  }
  try {
    size_t n = 0;
    const double v = std::stod(s, &n);
    const std::string unit = s.substr(n);
    if (unit.empty()) {
      out = v;
      return true;
    }
    const double mult = unit == "s"   ? 1
                        : unit == "m" ? 60
                        : unit == "h" ? 3600
                        : unit == "d" ? 86400
                                      : -1;
    if (mult < 0) return false;
    out = now - v * mult;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// GPU-hours over a period, grouped by `by` (any of queue, user, model, comma-separated):
// held, busy (utilization-weighted where agents reported; UTIL is busy over reported),
// cost (held x the model's price), and what right-sizing would have freed.
// A CSV field (RFC 4180): quoted when it holds a comma, quote or line break.
std::string CsvField(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char ch : v) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// usage --advice: the jobs that ran in [from, to] and could have been smaller, the most
// GPU-hours to free first, then per queue what right-sizing would free of what it held.
int Advice(const Globals& g, double from, double to) {
  Client c(g);
  Response r = c.Get("/v1/jobs?all=1");
  if (int rc = Check(r, "jobs")) return rc;
  struct Row {
    double frees;
    std::string line;
  };
  std::vector<Row> rows;
  struct Sums {
    double held = 0, frees = 0;
    int jobs = 0;
  };
  std::map<std::string, Sums> by_queue;
  const json all = r.Json();
  for (const json& job : all["jobs"]) {
    const double start =
        job.contains("start") && job["start"].is_number() ? job["start"].get<double>() : -1;
    const double end =
        job.contains("end") && job["end"].is_number() ? job["end"].get<double>() : to;
    if (!job.contains("usage") || start < 0 || start > to || end < from) continue;
    const json& u = job["usage"];
    Sums& q = by_queue[job.value("queue", "")];
    q.held += u.value("gpu_hours", 0.0);
    if (!u.contains("advice")) continue;
    const json& a = u["advice"];
    const double frees = a.value("free_gpu_hours", 0.0);
    q.frees += frees;
    ++q.jobs;
    char num[32];
    std::snprintf(num, sizeof num, "%.3f", frees);
    rows.push_back(
        {frees, Pad(job.value("id", ""), 14) + Pad(job.value("queue", ""), 12) +
                    Pad(job.value("user", "").empty() ? "-" : job.value("user", ""), 10) +
                    Pad(job.value("request", ""), 28) + Pad(a.value("shape", ""), 22) +
                    Pad(num, 10) + a.value("text", "")});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.frees > b.frees; });
  std::cout << Pad("JOBID", 14) << Pad("QUEUE", 12) << Pad("USER", 10) << Pad("REQUEST", 28)
            << Pad("WOULD FIT", 22) << Pad("FREES", 10) << "WHY\n";
  for (const Row& row : rows) std::cout << row.line << "\n";
  std::cout << "\n"
            << Pad("QUEUE", 14) << Pad("JOBS", 6) << Pad("GPU-HOURS", 11) << "RIGHT-SIZING FREES\n";
  for (const auto& [queue, s] : by_queue) {
    char line[96];
    std::snprintf(line, sizeof line, "%-11.3f%.3f (%.0f%%)", s.held, s.frees,
                  s.held > 0 ? 100 * s.frees / s.held : 0.0);
    std::cout << Pad(queue, 14) << Pad(std::to_string(s.jobs), 6) << line << "\n";
  }
  return 0;
}

int Usage(const Globals& g, const std::string& since, const std::string& until,
          const std::string& by, bool csv, bool json_out, bool advice) {
  const double now = WallSeconds();
  double from = now - 86400, to = now;
  if (!since.empty() && !ParseWhen(since, now, from)) {
    std::cerr << "gantry usage: --since: expected e.g. 24h, 7d, 2026-11-01, 2026-11-01T08:00 (UTC) "
                 "or Unix seconds, got "
              << since << "\n";
    return kExitBadInput;
  }
  if (!until.empty() && !ParseWhen(until, now, to)) {
    std::cerr << "gantry usage: --until: expected e.g. 1h, 2026-12-01 (UTC) or Unix seconds, got "
              << until << "\n";
    return kExitBadInput;
  }
  std::vector<std::string> keys;
  for (size_t pos = 0; pos <= by.size();) {
    const size_t comma = std::min(by.find(',', pos), by.size());
    const std::string k = by.substr(pos, comma - pos);
    if (k != "queue" && k != "user" && k != "model") {
      std::cerr << "gantry usage: --by: expected queue, user or model (comma-separated), got " << by
                << "\n";
      return kExitBadInput;
    }
    keys.push_back(k);
    pos = comma + 1;
  }
  if (advice) return Advice(g, from, to);
  Client c(g);
  char q[96];
  std::snprintf(q, sizeof q, "/v1/usage?since=%.3f&until=%.3f", from, to);
  Response r = c.Get(q);
  if (int rc = Check(r, "usage")) return rc;
  json j = r.Json();
  if (json_out) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  struct Sums {
    double held = 0, busy = 0, reported = 0, cost = 0, frees = 0;
  };
  std::map<std::vector<std::string>, Sums> groups;
  for (const json& row : j["usage"]) {
    std::vector<std::string> key;
    for (const std::string& k : keys) key.push_back(row.value(k, ""));
    Sums& s = groups[key];
    s.held += row.value("gpu_hours", 0.0);
    s.busy += row.value("busy_gpu_hours", 0.0);
    s.reported += row.value("reported_gpu_hours", 0.0);
    s.cost += row.value("cost", 0.0);
    s.frees += row.value("right_sizing_frees_gpu_hours", 0.0);
  }
  const std::string currency = j.value("currency", "");
  auto fixed = [](double v, int digits) {
    char h[48];
    std::snprintf(h, sizeof h, "%.*f", digits, v);
    return std::string(h);
  };
  if (csv) {
    for (const std::string& k : keys) std::cout << k << ",";
    std::cout << "gpu_hours,busy_gpu_hours,reported_gpu_hours,cost,currency,right_sizing_frees_gpu_"
                 "hours\n";
    for (const auto& [key, s] : groups) {
      for (const std::string& v : key) std::cout << CsvField(v) << ",";
      std::cout << fixed(s.held, 6) << "," << fixed(s.busy, 6) << "," << fixed(s.reported, 6) << ","
                << fixed(s.cost, 6) << "," << CsvField(currency) << "," << fixed(s.frees, 6)
                << "\n";
    }
    return 0;
  }
  for (const std::string& k : keys)
    std::cout << Pad(k == "queue" ? "QUEUE" : k == "user" ? "USER" : "MODEL", 14);
  std::cout << Pad("GPU-HOURS", 11) << Pad("BUSY", 11) << Pad("UTIL", 6)
            << Pad("COST" + (currency.empty() ? "" : " " + currency), 12) << "RIGHT-SIZING FREES\n";
  for (const auto& [key, s] : groups) {
    for (const std::string& v : key) std::cout << Pad(v.empty() ? "-" : v, 14);
    const bool seen = s.reported > 0;
    std::cout << Pad(fixed(s.held, 3), 11) << Pad(seen ? fixed(s.busy, 3) : "-", 11)
              << Pad(seen ? std::to_string(std::lround(100 * s.busy / s.reported)) + "%" : "-", 6)
              << Pad(fixed(s.cost, 2), 12) << (seen ? fixed(s.frees, 3) : "-") << "\n";
  }
  return 0;
}

// ------------------------------------------------------------------ acct

struct AcctArgs {
  std::string start, end, users, accounts, states, jobs, format;
  bool parsable = false, parsable2 = false, noheader = false, json_out = false;
  bool allocations = false;  // -X: no step rows
};

// What sacct answers, from the jobs gantryd has (GET /v1/jobs?all=1: the active ones, the
// ended ones it keeps in memory, and with ended_since those its store has from the
// window's start): a line per job (and, without -X, per batch job's
// script and step), sacct's fields and filters.
int Acct(const Globals& g, const AcctArgs& a) {
  const double now = WallSeconds();
  AcctFilter f;
  // sacct's default window: since midnight today (UTC here), unless -j names jobs.
  f.start = std::floor(now / 86400) * 86400;
  f.end = now;
  f.any_time = !a.jobs.empty() && a.start.empty();
  if (!a.start.empty() &&
      !(a.start == "now" ? (f.start = now, true) : ParseWhen(a.start, now, f.start))) {
    std::cerr << "gantry acct: --starttime: expected e.g. 2026-11-01, 2026-11-01T08:00 (UTC), 24h, "
                 "7d (ago), now "
                 "or Unix seconds, got "
              << a.start << "\n";
    return kExitBadInput;
  }
  if (!a.end.empty() && !(a.end == "now" ? (f.end = now, true) : ParseWhen(a.end, now, f.end))) {
    std::cerr << "gantry acct: --endtime: expected the same forms as --starttime, got " << a.end
              << "\n";
    return kExitBadInput;
  }
  f.users = SplitList(a.users);
  f.accounts = SplitList(a.accounts);
  f.jobs = SplitList(a.jobs);
  for (const std::string& s : SplitList(a.states)) {
    const std::string st = NormalizeState(s);
    if (st.empty()) {
      std::cerr << "gantry acct: --state: unknown state " << s
                << " (known: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, "
                   "PREEMPTED, "
                   "REQUEUED, OUT_OF_MEMORY, or their codes PD R CG CD F CA TO PR RQ OOM)\n";
      return kExitBadInput;
    }
    f.states.push_back(st);
  }
  std::string error;
  auto cols = ParseSacctFormat(a.format.empty()
                                   ? "JobID,JobName,Account,User,State,ExitCode,Start,End,Elapsed,"
                                     "AllocGPUs,GPUHours"
                                   : a.format,
                               error);
  if (!cols) {
    std::cerr << "gantry acct: --format: " << error << "\n";
    return kExitBadInput;
  }
  Client c(g);
  // The window reaches past the jobs gantryd keeps in memory: its store's ended jobs.
  Response r = c.Get(f.any_time ? std::string("/v1/jobs?all=1")
                                : "/v1/jobs?all=1&ended_since=" +
                                      std::to_string(static_cast<int64_t>(f.start)));
  if (int rc = Check(r, "acct")) return rc;
  json j = r.Json();
  if (j.value("truncated", false)) {
    std::cerr << "gantry acct: only the first 20,000 stored jobs of the window are shown; "
                 "give a later --starttime\n";
  }
  // -j of a job no longer in memory: asked for by name (gantryd reads it from its store).
  for (const std::string& id : f.jobs) {
    const bool listed = std::any_of(j["jobs"].begin(), j["jobs"].end(),
                                    [&](const json& job) { return JobIsOneOf(job, {id}); });
    if (listed) continue;
    Response one = c.Get("/v1/jobs/" + UrlEncode(id));
    if (one.status == 200) j["jobs"].push_back(one.Json());
  }
  std::vector<json> rows;
  for (const json& job : j["jobs"]) {
    if (!AcctMatches(job, f)) continue;
    if (a.allocations || a.json_out) {
      rows.push_back(job);
      continue;
    }
    for (json& row : AcctRows(job)) rows.push_back(std::move(row));
  }
  if (a.json_out) {
    std::cout << json(rows).dump() << "\n";
    return 0;
  }
  const bool parsable = a.parsable || a.parsable2;
  const std::string sep = parsable ? "|" : " ";
  if (!a.noheader) {
    std::vector<std::string> heads, rule;
    for (const Column& col : *cols) {
      heads.push_back(ColumnHeader(col, true));
      rule.push_back(std::string(static_cast<size_t>(col.width), '-'));
    }
    std::cout << RenderRow(*cols, heads, sep, !parsable, a.parsable) << "\n";
    if (!parsable) std::cout << RenderRow(*cols, rule, sep, true, false) << "\n";  // sacct's rule
  }
  for (const json& job : rows) {
    std::vector<std::string> values;
    for (const Column& col : *cols) values.push_back(FieldValue(job, col.field, now));
    std::cout << RenderRow(*cols, values, sep, !parsable, a.parsable) << "\n";
  }
  return 0;
}

int Drain(const Globals& g, const std::string& node, bool drain, const std::string& reason) {
  Client c(g);
  json body = json::object();
  if (!reason.empty()) body["reason"] = reason;
  Response r = c.Post("/v1/nodes/" + UrlEncode(node) + (drain ? "/drain" : "/resume"), body.dump(),
                      "application/json");
  if (int rc = Check(r, drain ? "drain" : "resume")) return rc;
  std::cout << node << ": " << (drain ? "drained" : "resumed") << "\n";
  return 0;
}

}  // namespace

void AddClientCommands(CLI::App& app, int& exit_code) {
  // Owned for the life of the process: the parsed values must outlive parse().
  static Globals g;
  app.add_option("--server", g.server,
                 "gantryd URL, or several comma-separated (a leader and its standbys; default: "
                 "$GANTRY_SERVER, else http://127.0.0.1:8080)");
  app.add_option("--token", g.token, "API token (default: $GANTRY_TOKEN)");
  app.add_option("--ca-cert", g.ca_cert,
                 "For https:// servers: trust this PEM CA certificate (default: $GANTRY_CA_CERT, "
                 "else the system's)");

  static SubmitArgs s;
  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job: a YAML/JSON spec file, or flags and -- COMMAND");
  submit->add_option("args", s.args, "JOB.yaml, or the command after --");
  submit->add_option("--id", s.id, "Job id (default: assigned)");
  submit->add_option("--queue", s.queue, "Queue");
  submit->add_option("--tier", s.tier, "critical, standard or best-effort");
  submit->add_option("--replicas", s.replicas, "Workers in the gang");
  submit->add_option("--min-replicas", s.min_replicas,
                     "Elastic: the least workers it runs with (--replicas its most); it grows and "
                     "shrinks at its checkpoints (--checkpoint-s)");
  submit->add_option("--gpus", s.gpus, "GPUs per worker (a fraction with --sharing mps|timeslice)");
  submit->add_option("--mig", s.mig, "One MIG instance per worker, e.g. 1g.10gb");
  submit->add_option("--sharing", s.sharing, "exclusive, mps or timeslice");
  submit->add_option("--gpu-model", s.gpu_model, "Acceptable GPU model (repeatable)")
      ->allow_extra_args(false);
  submit->add_option("--vram-gb", s.vram_gb, "GPU memory per worker");
  submit->add_option("--cpus", s.cpus, "CPUs per worker");
  submit->add_option("--memory-gb", s.memory_gb, "Memory per worker");
  submit->add_option("--topology", s.topology, "nvlink, node, leaf or spine");
  submit->add_option("--checkpoint-s", s.checkpoint_s, "Checkpoint interval");
  submit->add_option("--grace-s", s.grace_s, "Grace after the preemption signal");
  submit->add_option(
      "--time-limit-s", s.time_limit_s,
      "Stop each run after this long (signal, grace, kill) and fail the job, as sbatch --time");
  // One value per flag (else a vector option takes every word up to the next flag, and
  // `--env A=1 -- cmd -c x` lost its command to it).
  submit->add_option("--env", s.env, "NAME=VALUE (repeatable)")->allow_extra_args(false);
  submit->add_option("--workdir", s.workdir, "Working directory on the node");
  submit->add_option("--image", s.image,
                     "Run the command in this container image (podman on the node)");
  submit->add_option("--idempotency-key", s.idempotency_key,
                     "Reuse to make a resubmission a no-op");
  submit->add_option(
      "--array", s.array,
      "One job per index, in one request: 0-999, 1,3,5-7 or 0-15:4, with %N to run at most N "
      "at once (tasks are ID_INDEX; "
      "GANTRY_ARRAY_TASK_ID tells each its index; `cancel ID` cancels the array)");
  submit->add_option(
      "--after", s.after,
      "Hold until these jobs end: JOB or JOB:ok (finished with exit 0), JOB:any (any end), "
      "JOB:notok (any other end), JOB:started (its start), singleton (after the earlier jobs of "
      "its name); comma-separated all of them, ?-separated any one; an array's id stands for "
      "all its tasks");
  submit->add_option("--begin", s.begin,
                     "Hold until then: now+1hour, 16:00, tomorrow, 2026-12-24T10:00, ... "
                     "(sbatch --begin's forms, local time)");
  submit->add_flag("--hold", s.hold, "Submit held, until `gantry release ID` (sbatch -H)");
  submit->add_flag("--json", s.json_out, "Print the server's answer as JSON");
  submit->callback([&exit_code] { exit_code = Submit(g, s); });

  static LsArgs la;
  CLI::App* ls = app.add_subcommand("ls", "List jobs, squeue-like, with the reason a job waits");
  ls->add_flag("--json", la.json_out, "JSON output");
  ls->add_flag("-a,--all", la.all, "Include ended jobs");
  ls->add_option("--state", la.state, "Only jobs in this state");
  ls->add_option("-u,--user", la.user,
                 "Only these submitters' jobs (comma-separated), as squeue -u");
  ls->add_option("-A,--queue", la.queue, "Only these queues' jobs (comma-separated), as squeue -A");
  ls->add_option(
      "-o,--format", la.format,
      "squeue's -o format: %i %j %u %P %q %T %t %M %l %D %R %b %a ... with optional widths, "
      "e.g. \"%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R\" (docs/slurm.md)");
  ls->add_option("-O,--Format", la.names,
                 "squeue's -O field names, e.g. JobID,Name:30,State,TimeUsed,ReasonList");
  ls->add_flag("--noheader", la.noheader, "With --format/--Format: no header line");
  ls->add_option("-j,--jobs", la.jobs, "Only these jobs or arrays (comma-separated), as squeue -j");
  ls->callback([&exit_code] { exit_code = Ls(g, la); });

  CLI::App* sbatch = app.add_subcommand("sbatch",
                                        "Submit a Slurm batch script: [options] script.sh "
                                        "[args...]; its #SBATCH directives, overridden by "
                                        "options given here (docs/slurm.md)");
  // Every word, in order, is read by cli/sbatch.cc: sbatch's options, the script, and
  // from there on the script's arguments (prefix_command passes them through untouched).
  sbatch->prefix_command();
  sbatch->callback([&exit_code, sbatch] { exit_code = Sbatch(g, sbatch->remaining()); });

  CLI::App* salloc = app.add_subcommand(
      "salloc",
      "An allocation, as Slurm's salloc: [sbatch's options] [command [args...]]; the "
      "command (default $SHELL) runs here once it is granted, srun in it runs steps on "
      "its nodes, and its exit relinquishes it (docs/slurm.md)");
  salloc->prefix_command();
  salloc->callback([&exit_code, salloc] { exit_code = Salloc(g, salloc->remaining()); });

  CLI::App* srun = app.add_subcommand(
      "srun", "Inside a batch job: run a job step on its nodes, as Slurm's srun (docs/slurm.md)");
  srun->prefix_command();
  srun->callback([&exit_code, srun] { exit_code = Srun(g, srun->remaining()); });
  CLI::App* sinfo = app.add_subcommand(
      "sinfo", "The nodes by partition and state, as Slurm's sinfo: -p, -t, -N, -R, -s, -h");
  sinfo->prefix_command();
  sinfo->set_help_flag("--help", "Print this help message and exit");  // -h is --noheader
  sinfo->callback([&exit_code, sinfo] { exit_code = Sinfo(g, sinfo->remaining()); });
  CLI::App* scontrol = app.add_subcommand(
      "scontrol", "scontrol show hostnames [LIST] | hostlist LIST | job [ID], as Slurm's");
  scontrol->prefix_command();
  scontrol->callback([&exit_code, scontrol] { exit_code = Scontrol(g, scontrol->remaining()); });

  static AcctArgs aa;
  CLI::App* acct =
      app.add_subcommand("acct", "Ended and running jobs, as sacct shows them (docs/slurm.md)");
  acct->add_option("-S,--starttime", aa.start,
                   "Jobs active at or after: 2026-11-01, 2026-11-01T08:00 (UTC), 7d (ago), "
                   "now or Unix seconds (default: midnight UTC today)");
  acct->add_option("-E,--endtime", aa.end,
                   "Jobs active at or before, the same forms (default: now)");
  acct->add_option("-u,--user", aa.users, "Only these users (comma-separated)");
  acct->add_option("-A,--account", aa.accounts, "Only these queues (comma-separated)");
  acct->add_option("-s,--state", aa.states,
                   "Only these states: COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, "
                   "REQUEUED, RUNNING, PENDING, ... or CD, F, CA, TO, PR, RQ, R, PD");
  acct->add_option("-j,--jobs", aa.jobs,
                   "Only these jobs or arrays (comma-separated); without -S, at any time");
  acct->add_option("-o,--format", aa.format,
                   "sacct fields, e.g. JobID,JobName%30,State,ExitCode,Elapsed,AllocTRES,GPUHours");
  acct->add_flag("-p,--parsable", aa.parsable, "'|' after every field");
  acct->add_flag("-P,--parsable2", aa.parsable2, "'|' between fields");
  acct->add_flag("-n,--noheader", aa.noheader, "No header");
  acct->add_flag("-X,--allocations", aa.allocations,
                 "Jobs only, without a batch job's rows for its script (ID.batch) and its steps "
                 "(ID.0, ...)");
  static bool acct_ignored = false;
  acct->add_flag("-a,--allusers", acct_ignored,
                 "Accepted for sacct's sake: the jobs shown are those the token may list");
  acct->add_flag("--json", aa.json_out, "The matching jobs as JSON");
  acct->callback([&exit_code] { exit_code = Acct(g, aa); });

  static bool top_json = false;
  CLI::App* top = app.add_subcommand(
      "top", "Running jobs with their GPUs' utilization and VRAM now, idlest first");
  top->add_flag("--json", top_json, "JSON output");
  top->callback([&exit_code] { exit_code = Top(g, top_json); });

  static std::string show_id;
  static bool show_json = false, show_series = false;
  CLI::App* show = app.add_subcommand("show", "Show one job");
  show->add_option("id", show_id, "Job id")->required();
  show->add_flag("--json", show_json, "JSON output");
  show->add_flag("--series", show_series,
                 "The job's usage time series (a sample per --usage-sample-s of gantryd)");
  show->callback([&exit_code] {
    exit_code = show_series ? Series(g, show_id, show_json) : Show(g, show_id, show_json);
  });

  static std::vector<std::string> cancel_ids;
  static bool cancel_force = false;
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel jobs");
  static CancelFilter cancel_filter;
  cancel->add_option("ids", cancel_ids, "Job ids (or numbers); with a filter, only those of them");
  cancel->add_option("-u,--user", cancel_filter.user, "Every active job of this user (scancel -u)");
  cancel->add_option("-n,--name", cancel_filter.name, "Every active job of this name (scancel -n)");
  cancel->add_option("-A,--account", cancel_filter.queue,
                     "Every active job of this queue (scancel -A)");
  cancel->add_option("-t,--state", cancel_filter.state,
                     "Only jobs in this state: pending, running or stopping (scancel -t)");
  cancel->add_flag(
      "--force", cancel_force,
      "End the grace now: SIGKILL the workers' process groups without waiting for a checkpoint "
      "(also for a job already stopping)");
  static std::string cancel_signal;
  static bool cancel_batch = false, cancel_full = false, cancel_quiet = false;
  cancel->add_flag("-q,--quiet", cancel_quiet,
                   "Say nothing when all went well (scancel's way; errors are still said)");
  cancel->add_option("--signal", cancel_signal,
                     "Send this signal (USR1, SIGTERM, 10, ...) to running jobs instead of "
                     "ending them: a batch job's steps, a native job's workers (scancel -s)");
  cancel->add_flag("--batch", cancel_batch,
                   "With --signal: to the batch script's shell alone, not its steps (scancel -b)");
  cancel->add_flag("--full", cancel_full,
                   "With --signal: to the batch script, its children and its steps (scancel -f)");
  cancel->callback([&exit_code] {
    if ((cancel_batch || cancel_full) && cancel_signal.empty()) {
      std::cerr << "gantry cancel: --batch and --full go with --signal\n";
      exit_code = kExitBadInput;
      return;
    }
    if (!cancel_signal.empty() && (cancel_force || (cancel_batch && cancel_full))) {
      std::cerr << "gantry cancel: --signal takes --batch or --full, not both, and not --force\n";
      exit_code = kExitBadInput;
      return;
    }
    if (!cancel_signal.empty() && spec::SignalNumber(cancel_signal) <= 0) {
      std::cerr << "gantry cancel: --signal " << cancel_signal << ": not a signal name or number\n";
      exit_code = kExitBadInput;
      return;
    }
    if (cancel_ids.empty() && !cancel_filter.any()) {
      std::cerr << "gantry cancel: give job ids, or a filter (--user, --name, --account, "
                   "--state)\n";
      exit_code = kExitBadInput;
      return;
    }
    exit_code = Cancel(g, cancel_ids, cancel_force, cancel_filter, cancel_signal,
                       cancel_batch  ? "batch"
                       : cancel_full ? "full"
                                     : "steps",
                       cancel_quiet);
  });

  static std::vector<std::string> requeue_ids;
  CLI::App* requeue = app.add_subcommand(
      "requeue",
      "Requeue running jobs: the run ends after its grace and the job waits again, "
      "keeping its checkpointed progress (Slurm's scontrol requeue)");
  requeue->add_option("ids", requeue_ids, "Job ids")->required();
  requeue->callback([&exit_code] {
    std::vector<std::string> words = {"requeue"};
    std::string list;
    for (const std::string& id : requeue_ids) list += (list.empty() ? "" : ",") + id;
    words.push_back(list);
    exit_code = Scontrol(g, words);
  });

  static std::vector<std::string> hold_ids, release_ids;
  CLI::App* hold = app.add_subcommand(
      "hold",
      "Hold pending jobs out of scheduling until released (scontrol hold: an admin's hold is "
      "released by an admin only); a running job's hold applies if it is requeued");
  hold->add_option("ids", hold_ids, "Job ids (or numbers; an array's: its tasks)")->required();
  hold->callback([&exit_code] {
    std::vector<std::string> words = {"hold"};
    words.insert(words.end(), hold_ids.begin(), hold_ids.end());
    exit_code = Scontrol(g, words);
  });
  CLI::App* release = app.add_subcommand("release", "Release held jobs (scontrol release)");
  release->add_option("ids", release_ids, "Job ids (or numbers; an array's: its tasks)")
      ->required();
  release->callback([&exit_code] {
    std::vector<std::string> words = {"release"};
    words.insert(words.end(), release_ids.begin(), release_ids.end());
    exit_code = Scontrol(g, words);
  });

  static std::string logs_id;
  static int logs_rank = 0, logs_run = 0;
  static bool logs_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a worker's output");
  logs->add_option("id", logs_id, "Job id")->required();
  logs->add_option("--rank", logs_rank, "Worker rank")->capture_default_str();
  logs->add_option("--run", logs_run, "Run (default: the latest)");
  logs->add_flag("-f,--follow", logs_follow, "Keep printing new output");
  logs->callback([&exit_code] { exit_code = Logs(g, logs_id, logs_rank, logs_run, logs_follow); });

  static bool nodes_json = false;
  CLI::App* nodes = app.add_subcommand("nodes", "List nodes");
  nodes->add_flag("--json", nodes_json, "JSON output");
  nodes->callback([&exit_code] { exit_code = Nodes(g, nodes_json); });

  static bool queues_json = false;
  CLI::App* queues = app.add_subcommand("queues", "Queue usage against guarantee and burst");
  queues->add_flag("--json", queues_json, "JSON output");
  queues->callback([&exit_code] { exit_code = Queues(g, queues_json); });

  static std::string usage_since, usage_until, usage_by = "queue,user,model";
  static bool usage_json = false, usage_csv = false, usage_advice = false;
  CLI::App* usage =
      app.add_subcommand("usage", "GPU-hours per queue, user and GPU model over a period");
  usage->add_option("--since", usage_since,
                    "Start: 24h, 7d (ago), a UTC date 2026-11-01 or time 2026-11-01T08:00, or Unix "
                    "seconds (default: 24h)");
  usage->add_option("--until", usage_until, "End, the same forms (default: now)");
  usage->add_option("--by", usage_by,
                    "Group by queue, user, model, or several comma-separated (default: all three)");
  usage->add_flag("--csv", usage_csv, "CSV output (for chargeback)");
  usage->add_flag("--json", usage_json, "JSON output (the server's rows)");
  usage->add_flag("--advice", usage_advice,
                  "Jobs of the period (still in gantryd's memory) that could have been smaller: "
                  "what would have "
                  "held them and the GPU-hours it would free, then per queue");
  usage->callback([&exit_code] {
    exit_code = Usage(g, usage_since, usage_until, usage_by, usage_csv, usage_json, usage_advice);
  });

  static std::string drain_node, drain_reason, resume_node;
  CLI::App* drain = app.add_subcommand("drain", "Stop placing jobs on a node (admin)");
  drain->add_option("node", drain_node, "Node name")->required();
  drain->add_option("--reason", drain_reason, "Why");
  drain->callback([&exit_code] { exit_code = Drain(g, drain_node, true, drain_reason); });
  CLI::App* resume = app.add_subcommand("resume", "Place jobs on a drained node again (admin)");
  resume->add_option("node", resume_node, "Node name")->required();
  resume->callback([&exit_code] { exit_code = Drain(g, resume_node, false, ""); });

  for (CLI::App* sub :
       {submit, ls, top, show, cancel, requeue, logs, nodes, queues, usage, drain, resume, acct})
    sub->fallthrough();
}

}  // namespace gantry::cli
