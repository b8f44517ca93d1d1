#include "cli/srun.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "base/base64.h"
#include "base/cpus.h"
#include "base/image_reference.h"
#include "base/rlimits.h"
#include "cli/client_http.h"
#include "cli/pmi_server.h"
#include "cli/pmix_server.h"
#include "cli/sbatch.h"
#include "cli/slurm_format.h"
#include "spec/batch.h"

extern char** environ;

namespace gantry::cli {

namespace {

std::atomic<int> g_interrupted{0};

void OnInterrupt(int) { g_interrupted.fetch_add(1); }

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// An option as srun's: --name=value, --name value, -Xvalue, -X value; flags alone.
struct Opt {
  const char* name;
  char letter;
  bool value;
};

constexpr Opt kSrunOptions[] = {
    {"nodes", 'N', true},
    {"ntasks", 'n', true},
    {"ntasks-per-node", 0, true},
    {"cpus-per-task", 'c', true},
    {"gpus-per-task", 0, true},
    {"job-name", 'J', true},
    {"chdir", 'D', true},
    {"export", 0, true},
    {"mpi", 0, true},
    {"cpu-bind", 0, true},
    {"gpu-bind", 0, true},
    {"jobid", 0, true},
    {"nodelist", 'w', true},
    {"output", 'o', true},
    {"error", 'e', true},
    {"input", 'i', true},
    {"time", 't', true},
    {"mem", 0, true},
    {"mem-per-cpu", 0, true},
    {"mem-per-gpu", 0, true},
    {"gres", 0, true},
    {"gpus", 'G', true},
    {"gpus-per-node", 0, true},
    {"distribution", 'm', true},
    {"container-image", 0, true},  // NVIDIA's pyxis plugin's options: the step in an image
    {"container-mounts", 0, true},
    {"container-workdir", 0, true},
    {"container-mount-home", 0, false},
    {"no-container-mount-home", 0, false},
    {"container-writable", 0, false},
    {"container-readonly", 0, false},
    {"container-name", 0, true},
    {"container-save", 0, true},
    {"container-remap-root", 0, false},
    {"no-container-remap-root", 0, false},
    {"container-env", 0, true},
    {"label", 'l', false},
    {"unbuffered", 'u', false},
    {"kill-on-bad-exit", 'K', false},
    {"overlap", 0, false},
    {"exclusive", 0, false},
    {"quiet", 'Q', false},
    {"verbose", 'v', false},
    {"wait", 'W', true},
    {"exact", 0, false},
    {"multi-prog", 0, false},
    {"cpu_bind", 0, true},  // the old spelling: given as --cpu-bind
    {"mem-bind", 0, true},
};

constexpr const char* kCpuBindHelp =
    "CPU bind options (gantry-agent binds each task of the step, as Slurm's task/affinity):\n"
    "    --cpu-bind=         Bind tasks to CPUs\n"
    "        q[uiet]         quietly bind before task runs (default)\n"
    "        v[erbose]       report the binding on the task's stderr before it runs\n"
    "        no[ne]          no binding beyond the job's CPUs on the node (default)\n"
    "        rank            bind by task rank\n"
    "        map_cpu:<list>  a CPU id for each task: <cpu id1>,<cpu id2>,...\n"
    "        mask_cpu:<list> a CPU mask for each task: <mask1>,<mask2>,...\n"
    "        rank_ldom       bind by task rank to the CPUs of a NUMA locality domain\n"
    "        map_ldom:<list> a NUMA locality domain id for each task\n"
    "        mask_ldom:<list> a NUMA locality domain mask for each task\n"
    "        sockets         auto-generated masks bind to sockets\n"
    "        cores           auto-generated masks bind to cores\n"
    "        threads         auto-generated masks bind to threads\n"
    "        ldoms           auto-generated masks bind to NUMA locality domains\n"
    "        boards          auto-generated masks bind to boards\n"
    "        help            show this help message\n";

// The step's standard input (-i, --input=MODE), as Slurm's srun gives it: srun's own stdin,
// or the file MODE names, to every task (`all`, the default) or to task N only (`N`); none
// with `none`. Read whole before the step starts (Slurm's srun streams it): a regular file
// or a pipe, to its end, at most 4 MiB; a terminal or a socket is not read. Into `body`
// ("input", base64; "input_task"); 0 or srun's exit status.
int StepInput(const std::string& mode, nlohmann::json& body) {
  if (mode == "none") return 0;
  constexpr size_t kMost = size_t{4} << 20;
  const bool task = !mode.empty() && mode.find_first_not_of("0123456789") == std::string::npos;
  std::string data;
  auto read_all = [&](int fd) {
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      data.append(buf, static_cast<size_t>(n));
      if (data.size() > kMost) return true;
    }
    return true;
  };
  bool ok = true;
  if (mode != "all" && !task) {  // a file
    const int fd = ::open(mode.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::cerr << "srun: error: --input=" << mode << ": " << std::strerror(errno) << "\n";
      return kExitBadInput;
    }
    ok = read_all(fd);
    ::close(fd);
  } else if (struct stat st{};
             ::fstat(0, &st) == 0 && (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
    ok = read_all(0);
  }
  if (!ok) {
    std::cerr << "srun: error: reading the step's input: " << std::strerror(errno) << "\n";
    return kExitBadInput;
  }
  if (data.size() > kMost) {
    std::cerr << "srun: error: the step's input is over 4 MiB: Gantry passes a step's input "
                 "whole, not as a stream (let the tasks read the file, or give -i none)\n";
    return kExitBadInput;
  }
  if (data.empty()) return 0;
  body["input"] = Base64Encode(data);
  if (task) body["input_task"] = std::atoi(mode.c_str());
  return 0;
}

// srun --mpi=pmix and its versioned names (Slurm's pmix_v3, pmix_v4, ...): one server here.
bool IsPmix(const std::string& mpi) { return mpi == "pmix" || mpi.starts_with("pmix_v"); }

// Why srun cannot honour an option as given, or "" when it can (or harmlessly ignores it).
std::string Unhonoured(const std::string& name, const std::string& value) {
  if (name == "mpi" && value != "none" && value != "pmi2" && value != "list" && !IsPmix(value)) {
    return "--mpi=" + value +
           ": Gantry serves PMI-1 and PMI-2 (--mpi=pmi2: MPICH, MVAPICH, Intel MPI) and PMIx "
           "(--mpi=pmix: Open MPI); give one of those or none";
  }
  if (name == "mem-bind" && value != "none") return "--mem-bind=" + value + ": not honoured";
  if (name == "input" && value.find('%') != std::string::npos)
    return "--input=" + value + ": a file name pattern is not supported (give the file's name)";
  if (name == "distribution") {
    const std::string why = spec::DistributionProblem(value);
    return why.empty() ? "" : "--distribution=" + value + ": " + why;
  }
  if (name == "container-name" || name == "container-save")
    return "--" + name + ": each step's container starts from its image and goes when it ends";
  if (name == "container-readonly")
    return "--container-readonly: a step's container is writable (its changes go with it)";
  if (name == "container-remap-root")
    return "--container-remap-root: a step's tasks run as the job's user inside the image";
  return "";
}

// Pyxis' --container-image, --container-mounts, --container-workdir and
// --[no-]container-mount-home: the step's tasks run in the image through the node's podman
// (as a job of sbatch --container-image runs), the mounts and the home (pyxis' default)
// bound in, as the job's user; gantry-agent checks that the user may reach what is bound.
// --container-env: every variable of the task is the container's already. 0, or a status.
int StepContainer(const std::map<std::string, std::string>& given, json& body) {
  auto refuse = [](const std::string& what) {
    std::cerr << "srun: error: " << what << "\n";
    return kExitBadInput;
  };
  if (!given.count("container-image")) {
    for (const char* o : {"container-mounts", "container-workdir", "container-mount-home",
                          "no-container-mount-home", "container-writable", "container-env"}) {
      if (given.count(o)) return refuse(std::string("--") + o + " needs --container-image");
    }
    return 0;
  }
  std::string why;
  const std::string image = PyxisImage(given.at("container-image"), &why);
  if (image.empty()) return refuse("--container-image=" + given.at("container-image") + ": " + why);
  body["image"] = image;
  if (auto it = given.find("container-mounts"); it != given.end()) {
    json mounts = json::array();
    std::stringstream in(it->second);
    for (std::string m; std::getline(in, m, ',');) {  // SRC[:DST[:FLAGS]], DST as SRC by default
      std::vector<std::string> parts;
      std::stringstream p(m);
      for (std::string part; std::getline(p, part, ':');) parts.push_back(part);
      if (parts.empty() || parts.size() > 3 || parts[0].empty() || parts[0][0] != '/' ||
          (parts.size() > 1 && (parts[1].empty() || parts[1][0] != '/')))
        return refuse("--container-mounts: " + m + ": expected /SRC[:/DST[:ro|rw]]");
      const std::string flags = parts.size() > 2 ? parts[2] : "rw";
      if (flags != "ro" && flags != "rw")
        return refuse("--container-mounts: " + m + ": the flags honoured are ro and rw, got " +
                      flags);
      mounts.push_back({{"source", parts[0]},
                        {"target", parts.size() > 1 ? parts[1] : parts[0]},
                        {"read_only", flags == "ro"}});
    }
    body["container_mounts"] = std::move(mounts);
  }
  if (auto it = given.find("container-workdir"); it != given.end()) {
    if (it->second.empty() || it->second[0] != '/')
      return refuse("--container-workdir: expected an absolute path, got " + it->second);
    body["container_workdir"] = it->second;
  }
  body["container_mount_home"] = !given.count("no-container-mount-home");
  return 0;
}

std::string UnableToCreate(const std::string& job) {
  return "Unable to create step for job " + job + ": ";
}

// --gres=gpu[:TYPE]:N, --gpus-per-node=[TYPE:]N, --gpus=[TYPE:]N on a step: the job's count
// (SLURM_GPUS_ON_NODE a node) is the default; more is refused as Slurm refuses it; fewer
// goes to gantryd in `body` (gpus_per_node, gpus), which gives the step that many of the
// job's GPUs on each of its nodes, or says why it cannot. 0: a status to exit with.
int CheckStepGpus(const std::map<std::string, std::string>& given, const std::string& job,
                  int step_nodes, json& body) {
  const int per_node = std::atoi(Env("SLURM_GPUS_ON_NODE").c_str());
  const int job_nodes = std::max(1, std::atoi(Env("SLURM_JOB_NUM_NODES").c_str()));
  for (const char* opt : {"gres", "gpus-per-node", "gpus"}) {
    auto it = given.find(opt);
    if (it == given.end()) continue;
    std::string v = it->second;
    if (std::string(opt) == "gres") {
      if (v == "none") continue;
      if (v.rfind("gpu", 0) != 0 || v.find(',') != std::string::npos) {
        std::cerr << "srun: error: --gres=" << v << ": only gpu[:TYPE][:N] is known here\n";
        return kExitBadInput;
      }
      v = v == "gpu" ? "1" : v.substr(v.rfind(':') + 1);
    } else if (v.find(':') != std::string::npos) {
      v = v.substr(v.rfind(':') + 1);
    }
    if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos) {
      std::cerr << "srun: error: --" << opt << "=" << it->second << ": expected a GPU count\n";
      return kExitBadInput;
    }
    const int n = std::stoi(v);
    const bool total = std::string(opt) == "gpus";
    const int holds = per_node * (total ? (step_nodes > 0 ? step_nodes : job_nodes) : 1);
    if (n > holds) {
      if (!total) {
        std::cerr << "srun: error: Step requested gres_per_node=gpu:" << n
                  << " is more than the job's gres_per_node=gpu:" << per_node << "\n";
      }
      std::cerr << "srun: error: " << UnableToCreate(job)
                << "Invalid generic resource (gres) specification\n";
      return kExitRunFailure;
    }
    if (n == 0 && holds > 0) {
      std::cerr << "srun: error: --" << opt << "=" << it->second
                << ": a step of no GPUs is not honoured here: its tasks would see the job's GPUs "
                   "on their nodes\n";
      return kExitBadInput;
    }
    if (n < holds) body[total ? "gpus" : "gpus_per_node"] = n;
  }
  return 0;
}

// --mem=SIZE (a node) and --mem-per-cpu=SIZE on a step: more than the job holds on a node
// (SLURM_MEM_PER_NODE, or per CPU or GPU times those on the node) is refused as Slurm
// refuses it; within it, taken (a step's memory is not limited apart from the job's).
int CheckStepMemory(const std::map<std::string, std::string>& given, const std::string& job) {
  auto mib_of = [](const char* var) { return std::atoll(Env(var).c_str()); };
  long long holds = mib_of("SLURM_MEM_PER_NODE");
  if (holds <= 0) holds = mib_of("SLURM_MEM_PER_CPU") * mib_of("SLURM_CPUS_ON_NODE");
  if (holds <= 0) holds = mib_of("SLURM_MEM_PER_GPU") * mib_of("SLURM_GPUS_ON_NODE");
  for (const char* opt : {"mem", "mem-per-cpu"}) {
    auto it = given.find(opt);
    if (it == given.end()) continue;
    std::string error;
    const std::optional<long long> mib = ParseSlurmMemory(it->second, error);
    if (!mib) {
      std::cerr << "srun: error: --" << opt << "=" << it->second << ": " << error << "\n";
      return kExitBadInput;
    }
    long long cpus = 1;
    if (auto c = given.find("cpus-per-task"); c != given.end())
      cpus = std::atoll(c->second.c_str());
    const long long need = std::string(opt) == "mem" ? *mib : *mib * std::max(1LL, cpus);
    if (holds > 0 && need > holds) {
      std::cerr << "srun: error: " << UnableToCreate(job)
                << "Memory required by task is not available\n";
      return kExitRunFailure;
    }
  }
  return 0;
}

int Count(const std::string& option, const std::string& v, int& out) {
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(v) < 1) {
    std::cerr << "srun: error: --" << option << ": expected a whole number of at least 1, got \""
              << v << "\"\n";
    return kExitBadInput;
  }
  out = std::stoi(v);
  return 0;
}

// The step's environment: srun's (--export=ALL, Slurm's default), only Slurm's and Gantry's
// variables (NONE), or those and a list.
json StepEnv(const std::string& exp) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const char* skip : {"PWD", "OLDPWD", "SHLVL", "_"}) env.erase(skip);
  if (exp.empty() || exp == "ALL") return env;
  std::map<std::string, std::string> kept;
  bool all = false;
  std::stringstream in(exp);
  std::vector<std::string> items;
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "ALL")
      all = true;
    else if (item != "NONE" && !item.empty())
      items.push_back(item);
  }
  for (const auto& [k, v] : env) {
    if (all || k.rfind("SLURM_", 0) == 0 || k.rfind("GANTRY_", 0) == 0 || k == "PATH") kept[k] = v;
  }
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      kept[item.substr(0, eq)] = item.substr(eq + 1);
    } else if (auto it = env.find(item); it != env.end()) {
      kept[item] = it->second;
    }
  }
  return kept;
}

}  // namespace

int Srun(const Globals& g, const std::vector<std::string>& words) {
  std::map<std::string, std::string> given;
  std::vector<std::string> command;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") {
      command.assign(words.begin() + static_cast<long>(i) + 1, words.end());
      break;
    }
    if (w.size() < 2 || w[0] != '-') {
      command.assign(words.begin() + static_cast<long>(i), words.end());
      break;
    }
    const Opt* def = nullptr;
    std::string value;
    bool has_value = false;
    if (w.rfind("--", 0) == 0) {
      const size_t eq = w.find('=');
      const std::string name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      for (const Opt& o : kSrunOptions) {
        if (name == o.name) def = &o;
      }
      if (def == nullptr) {
        std::cerr << "srun: error: unrecognized option '" << w
                  << "' (docs/slurm.md lists what srun does under Gantry)\n";
        return kExitBadInput;
      }
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        has_value = true;
      }
    } else {
      for (const Opt& o : kSrunOptions) {
        if (o.letter == w[1]) def = &o;
      }
      if (def == nullptr) {
        std::cerr << "srun: error: invalid option -- '" << w[1] << "'\n";
        return kExitBadInput;
      }
      if (def->value && w.size() > 2) {
        value = w.substr(2);
        has_value = true;
      } else if (!def->value && w.size() > 2) {  // grouped flags: -lK
        for (char c : w.substr(1)) {
          const Opt* f = nullptr;
          for (const Opt& o : kSrunOptions) {
            if (o.letter == c && !o.value) f = &o;
          }
          if (f == nullptr) {
            std::cerr << "srun: error: invalid option -- '" << c << "'\n";
            return kExitBadInput;
          }
          given[f->name] = "1";
        }
        continue;
      }
    }
    if (def->value && !has_value) {
      if (i + 1 >= words.size()) {
        std::cerr << "srun: error: option --" << def->name << " requires an argument\n";
        return kExitBadInput;
      }
      value = words[++i];
    }
    if (!def->value) value = has_value ? value : "1";
    if (!def->value && (value == "0" || value == "no")) continue;  // --kill-on-bad-exit=0
    if (const std::string why = Unhonoured(def->name, value); !why.empty()) {
      std::cerr << "srun: error: " << why << "\n";
      return kExitBadInput;
    }
    given[std::string(def->name) == "cpu_bind" ? "cpu-bind" : def->name] = value;
  }
  // --cpu-bind, else $SLURM_CPU_BIND (an input of Slurm's srun), checked here where it was
  // typed; gantry-agent binds each task (base/cpus.h).
  std::optional<CpuBind> cpu_bind;
  if (const std::string bind = given.count("cpu-bind") ? given["cpu-bind"] : Env("SLURM_CPU_BIND");
      !bind.empty()) {
    if (bind == "help") {
      std::cout << kCpuBindHelp;
      return 0;
    }
    std::string why;
    cpu_bind = CpuBind::Parse(bind, why);
    if (!cpu_bind) {
      std::cerr << "srun: error: " << why << (given.count("cpu-bind") ? "" : " (SLURM_CPU_BIND)")
                << "\n";
      return kExitBadInput;
    }
  }
  // --mpi, else $SLURM_MPI_TYPE (an input of Slurm's srun): pmi2 serves the step's MPI tasks
  // PMI-1 and PMI-2 from here (cli/pmi_server.h).
  const std::string mpi = given.count("mpi") ? given["mpi"] : Env("SLURM_MPI_TYPE");
  if (mpi == "list") {
    std::cout << "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n"
                 "specific pmix plugin versions available: pmix_v4\n";
    return 0;
  }
  if (!given.count("mpi") && !mpi.empty()) {
    if (const std::string why = Unhonoured("mpi", mpi); !why.empty()) {
      std::cerr << "srun: error: " << why << " (SLURM_MPI_TYPE)\n";
      return kExitBadInput;
    }
  }
  if (command.empty()) {
    std::cerr << "srun: error: give a program to run: srun [options] COMMAND [ARGS...]\n";
    return kExitBadInput;
  }
  std::string job = Env("SLURM_JOB_ID");
  if (auto it = given.find("jobid"); it != given.end()) {
    if (!job.empty() && it->second != job) {
      std::cerr << "srun: error: --jobid=" << it->second << ": a job's credential runs steps of "
                << "its own job (" << job << ") only\n";
      return kExitBadInput;
    }
    job = it->second;
  }
  if (job.empty()) {
    std::cerr << "srun: error: no job allocation: under Gantry, srun runs inside a batch job "
                 "(gantry sbatch) or an allocation (gantry salloc; srun --jobid=N elsewhere)\n";
    return kExitBadInput;
  }
  // Inside the job its limits are the job's already (the site's exceptions applied to the
  // script's): they go as asked for. From elsewhere (--jobid), as sbatch's do.
  const bool inside_job = !Env("SLURM_JOB_ID").empty();
  Globals jg = g;  // who speaks: the job's credential
  if (!inside_job) {
    // srun --jobid=N outside the job (an salloc --no-shell allocation, one's own running
    // batch job): its allocation's environment and credential, as salloc's command has
    // them (GET /v1/jobs/N/allocation: the job's own user or an admin).
    Client c(g);
    Response a = c.Get("/v1/jobs/" + UrlEncode(job) + "/allocation");
    if (int rc = Check(a, "srun")) return rc;
    const json alloc = a.Json();
    const json env = alloc.value("env", json::object());
    for (const auto& [k, v] : env.items()) {
      if (v.is_string()) ::setenv(k.c_str(), v.get_ref<const std::string&>().c_str(), 1);
    }
    jg.token = alloc.value("token", "");
    ::setenv("GANTRY_TOKEN", jg.token.c_str(), 1);
    job = Env("SLURM_JOB_ID").empty() ? job : Env("SLURM_JOB_ID");
  }
  if (Env("GANTRY_TOKEN").empty() && g.token.empty()) {
    std::cerr << "srun: error: job " << job << " gave this shell no credential (GANTRY_TOKEN): "
              << "srun works in the batch script and its steps, started by gantry-agent\n";
    return kExitBadInput;
  }
  // --export, else sbatch's (SLURM_EXPORT_ENV in the job's environment), as Slurm's srun.
  json body = {{"command", command},
               {"env", StepEnv(given.count("export") ? given["export"] : Env("SLURM_EXPORT_ENV"))}};
  // Its umask, which the step's tasks run with (gantry-agent applies it), as Slurm's srun.
  body["env"]["SLURM_UMASK"] = UmaskText();
  // And its resource limits, which the nodes set on the step's tasks, as Slurm's srun
  // propagates them (base/rlimits.h).
  for (auto& [k, v] :
       SlurmRlimitEnv(SoftRlimits(), inside_job ? std::optional<std::string>("ALL") : std::nullopt))
    body["env"][k] = v;
  // --multi-prog FILE [ARGS]: the file (read here, as Slurm's srun reads it) gives each task
  // its program; gantryd checks it against the step's tasks (spec/multi_prog.h).
  if (given.count("multi-prog")) {
    std::ifstream in(command[0], std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in.is_open() || in.bad()) {
      std::cerr << "srun: error: Could not open multi_prog config file " << command[0] << "\n";
      return kExitRunFailure;
    }
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      std::cerr << "srun: error: Configuration file " << command[0]
                << " invalid, no record for task id 0\n";
      return kExitRunFailure;
    }
    body["multi_prog"] = text;
  }
  std::error_code ec;
  std::string cwd = std::filesystem::current_path(ec).string();
  if (given.count("chdir")) {
    const std::filesystem::path d = given["chdir"];
    cwd = d.is_absolute() ? d.string() : (std::filesystem::path(cwd) / d).string();
  }
  body["workdir"] = cwd;
  // -o PATTERN: each task's output to the file its pattern names (%t its task id, %n and %N
  // its node, %j, %J, %s, %x, %A, %a, %u), in the step's directory, as Slurm's slurmstepd
  // writes them; srun itself, on the batch script's node, writes them here.
  // -e PATTERN the same for their stderr, which is srun's own stderr without it (with -o
  // alone, -o's files), as Slurm's.
  std::string out_pattern, err_pattern;
  for (auto [opt, pattern] :
       {std::pair<const char*, std::string*>{"output", &out_pattern}, {"error", &err_pattern}}) {
    if (!given.count(opt)) continue;
    *pattern = given[opt];
    if (auto why = spec::CheckOutputPattern(*pattern)) {
      std::cerr << "srun: error: --" << opt << "=" << *pattern << ": " << *why << "\n";
      return kExitBadInput;
    }
  }
  if (err_pattern.empty()) err_pattern = out_pattern;
  if (given.count("job-name")) body["name"] = given["job-name"];
  for (const auto& [opt, key] : std::initializer_list<std::pair<const char*, const char*>>{
           {"nodes", "nodes"},
           {"ntasks", "ntasks"},
           {"ntasks-per-node", "ntasks_per_node"},
           {"cpus-per-task", "cpus_per_task"},
           {"gpus-per-task", "gpus_per_task"}}) {
    if (!given.count(opt)) continue;
    std::string v = given[opt];
    if (std::string(opt) == "nodes") {  // N-M: as many as asked at most; one number here
      const size_t dash = v.find('-');
      if (dash != std::string::npos && v.substr(0, dash) != v.substr(dash + 1))
        v = v.substr(dash + 1);
      else if (dash != std::string::npos)
        v = v.substr(0, dash);
    }
    if (std::string(opt) == "gpus-per-task" && v.find(':') != std::string::npos)
      v = v.substr(v.rfind(':') + 1);
    int n = 0;
    if (int rc = Count(opt, v, n)) return rc;
    body[key] = n;
  }
  // -n from $SLURM_NTASKS and a --ntasks-per-node (or the batch script's
  // $SLURM_NTASKS_PER_NODE, another input of Slurm's srun) that cannot hold that many on the
  // nodes: ignored, as Slurm 22.05 does, and said as its srun says it.
  const int per_node = body.contains("ntasks_per_node")
                           ? body["ntasks_per_node"].get<int>()
                           : std::atoi(Env("SLURM_NTASKS_PER_NODE").c_str());
  if (per_node > 0 && !body.contains("ntasks")) {
    const int tasks = std::atoi(Env("SLURM_NTASKS").c_str());
    const int nodes = body.contains("nodes") ? body["nodes"].get<int>()
                                             : std::atoi(Env("SLURM_JOB_NUM_NODES").c_str());
    if (tasks > 0 && nodes > 0 && int64_t{per_node} * nodes < tasks) {
      std::cerr << "srun: Warning: can't honor --ntasks-per-node set to " << per_node
                << " which doesn't match the requested tasks " << tasks
                << " with the number of requested nodes " << nodes
                << ". Ignoring --ntasks-per-node.\n";
    }
  }
  // -N above the tasks: as many nodes as tasks; above the job's nodes: refused (Slurm 22.05's
  // words and status).
  if (body.contains("nodes")) {
    const int nodes = body["nodes"].get<int>();
    const int tasks = body.contains("ntasks") ? body["ntasks"].get<int>()
                                              : std::atoi(Env("SLURM_NTASKS").c_str());
    if (tasks > 0 && nodes > tasks) {
      std::cerr << "srun: Warning: can't run " << tasks << " processes on " << nodes
                << " nodes, setting nnodes to " << tasks << "\n";
      body["nodes"] = tasks;
    }
    const int have = std::atoi(Env("SLURM_JOB_NUM_NODES").c_str());
    if (!given.count("nodelist") && have > 0 && body["nodes"].get<int>() > have) {
      std::cerr << "srun: error: Only allocated " << have << " nodes asked for "
                << body["nodes"].get<int>() << "\n";
      return kExitRunFailure;
    }
  }
  if (int rc = CheckStepGpus(given, job, body.value("nodes", 0), body)) return rc;
  if (int rc = CheckStepMemory(given, job)) return rc;
  if (given.count("nodelist")) {
    auto names = spec::ExpandHostList(given["nodelist"]);
    if (!names || names->empty()) {
      std::cerr << "srun: error: --nodelist: not a host list: " << given["nodelist"] << "\n";
      return kExitBadInput;
    }
    body["nodelist"] = *names;
  }
  if (given.count("overlap")) body["overlap"] = true;
  // -m, else sbatch's (SLURM_DISTRIBUTION in the job's environment), as Slurm's srun; the
  // step's SLURM_DISTRIBUTION says it (without either, gantryd says Slurm's default).
  const std::string dist =
      given.count("distribution") ? given["distribution"] : Env("SLURM_DISTRIBUTION");
  if (const std::string why = spec::DistributionProblem(dist); !dist.empty() && !why.empty()) {
    std::cerr << "srun: error: --distribution=" << dist << ": " << why << " (SLURM_DISTRIBUTION)\n";
    return kExitBadInput;
  }
  if (!dist.empty()) body["env"]["SLURM_DISTRIBUTION"] = dist;
  if (spec::DistributionCyclic(dist)) body["cyclic"] = true;
  // closest, single:N, per_task:N, map_gpu:LIST (gantryd says why it refuses others).
  // srun's own, else sbatch's (SLURM_GPU_BIND in the job's environment), as Slurm's srun.
  if (given.count("gpu-bind")) {
    body["gpu_bind"] = given["gpu-bind"];
  } else if (!Env("SLURM_GPU_BIND").empty()) {
    body["gpu_bind"] = Env("SLURM_GPU_BIND");
  }
  if (int rc = StepContainer(given, body)) return rc;
  // The binding in the step's environment, as Slurm's srun exports it; each task's agent
  // binds it there.
  if (cpu_bind) {
    const std::string verbose = cpu_bind->verbose ? "verbose" : "quiet";
    const bool masks =
        cpu_bind->kind == CpuBind::Kind::kMaskCpu || cpu_bind->kind == CpuBind::Kind::kMaskLdom;
    std::string list;
    for (const std::vector<int>& e : cpu_bind->list)
      list += (list.empty() ? "" : ",") + (masks ? CpuMask(e) : std::to_string(e.front()));
    body["env"]["SLURM_CPU_BIND"] = verbose + "," + cpu_bind->Type() + list;
    body["env"]["SLURM_CPU_BIND_VERBOSE"] = verbose;
    body["env"]["SLURM_CPU_BIND_TYPE"] = cpu_bind->Type();
    body["env"]["SLURM_CPU_BIND_LIST"] = list;
  }
  // Its tasks' CPUs only, not all the job's on its nodes (gantryd counts -c as asking so).
  if (given.count("exclusive")) body["exclusive"] = true;
  if (given.count("exact")) body["exact"] = true;
  // -t, --time: the step's own limit (gantryd cancels it there), in Slurm's forms.
  if (given.count("time")) {
    std::string error;
    const std::optional<long long> limit = ParseSlurmTime(given["time"], error);
    if (!limit) {
      std::cerr << "srun: error: Invalid --time specification\n";
      return kExitBadInput;
    }
    if (*limit > 0) body["time_limit_s"] = *limit;
  }
  // sbatch --gpus-per-task (SLURM_GPUS_PER_TASK, an input of srun's as of Slurm's): each
  // task its own slot's GPUs.
  if (!given.count("gpus-per-task") && !Env("SLURM_GPUS_PER_TASK").empty()) {
    int n = 0;
    if (Count("gpus-per-task", Env("SLURM_GPUS_PER_TASK"), n) == 0) body["gpus_per_task"] = n;
  }
  if (int rc = StepInput(given.count("input") ? given["input"] : "all", body)) return rc;
  const bool label = given.count("label") > 0;
  const bool kill_on_bad_exit = given.count("kill-on-bad-exit") > 0;
  // -W, --wait=S: once a task has ended, the rest get S seconds before the step is ended
  // (0, the default: no limit), as Slurm's.
  int wait_s = 0;
  if (given.count("wait") && given["wait"] != "0") {
    if (int rc = Count("wait", given["wait"], wait_s)) return rc;
  }
  double first_end = -1;  // when a task was first seen ended (monotonic seconds)

  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  Client c(jg);
  const std::string base = "/v1/jobs/" + UrlEncode(job) + "/steps";
  std::unique_ptr<PmiServer> pmi;
  bool pmi_placed = false;  // its tasks' layout given (once: a step's tasks stay where placed)
  if (mpi == "pmi2") {
    std::string error;
    pmi = PmiServer::Start(&error);
    if (!pmi) {
      std::cerr << "srun: error: --mpi=pmi2: " << error << "\n";
      return kExitRunFailure;
    }
    // gantryd gives each task its PMI_RANK and PMI_SIZE (SLURM_MPI_TYPE=pmi2 says so).
    body["env"]["PMI_PORT"] = AddressToward(c.server()) + ":" + std::to_string(pmi->port());
    body["env"]["SLURM_MPI_TYPE"] = "pmi2";
  }
  // --mpi=pmix: a PMIx server here for all the step's ranks (cli/pmix_server.h). It needs
  // the tasks' layout before they connect, so the step is held once placed and launched
  // when the server knows it, with the variables that reach it.
  std::unique_ptr<PmixServer> pmix;
  bool pmix_launched = false;
  if (IsPmix(mpi)) {
    std::string error;
    pmix = PmixServer::Start(InterfaceOf(AddressToward(c.server())), &error);
    if (!pmix) {
      std::cerr << "srun: error: --mpi=" << mpi << ": " << error << "\n";
      return kExitRunFailure;
    }
    body["held"] = true;
    body["env"]["SLURM_MPI_TYPE"] = "pmix";
  }
  Response r = c.Post(base, body.dump(), "application/json");
  if (r.status < 200 || r.status >= 300) {
    json j = r.Json();
    // A shape the allocation cannot hold: as Slurm's srun says it (its reason first).
    std::cerr << "srun: error: " << (r.status == 422 ? UnableToCreate(job) : "")
              << (r.status == 0   ? r.error
                  : j.is_object() ? j.value("error", r.body)
                                  : r.body)
              << "\n";
    return kExitRunFailure;  // a step that cannot be made: 1, as Slurm's srun
  }
  json step = r.Json();
  const int id = step.value("step", 0);
  const int run = step.value("run", 0);
  if (step.value("state", "") == "pending") {
    std::cerr << "srun: Job " << job << " step creation temporarily disabled, retrying ("
              << step.value("reason", "") << ")\n";
  }
  const std::string path = base + "/" + std::to_string(id);
  // Each task's two streams: [0] stdout, [1] stderr.
  std::vector<std::array<int64_t, 2>> printed;      // bytes printed
  std::vector<std::array<std::string, 2>> partial;  // -l: a task's unfinished last line
  std::vector<spec::OutputNames> task_names;        // -o, -e: each task's fields
  std::map<std::string, std::ofstream> files;       // -o, -e: by path, truncated when first opened
  spec::OutputNames names;
  names.job = Env("SLURM_JOB_ID");
  names.name = Env("SLURM_JOB_NAME");
  names.array_job = Env("SLURM_ARRAY_JOB_ID").empty() ? names.job : Env("SLURM_ARRAY_JOB_ID");
  names.array_task =
      Env("SLURM_ARRAY_TASK_ID").empty() ? spec::kNoArrayTask : Env("SLURM_ARRAY_TASK_ID");
  names.user = Env("SLURM_JOB_USER").empty() ? Env("USER") : Env("SLURM_JOB_USER");
  names.step = std::to_string(id);
  auto sink = [&](size_t task, int stream) -> std::ostream& {
    const std::string& pattern = stream == 0 ? out_pattern : err_pattern;
    if (pattern.empty()) return stream == 0 ? std::cout : std::cerr;
    const std::filesystem::path name = spec::ExpandOutputPattern(pattern, task_names[task]);
    const std::string file =
        name.is_absolute() ? name.string() : (std::filesystem::path(cwd) / name).string();
    auto it = files.find(file);
    if (it == files.end()) {
      it = files.emplace(file, std::ofstream(file, std::ios::trunc | std::ios::binary)).first;
      if (!it->second) std::cerr << "srun: error: cannot write " << file << "\n";
    }
    return it->second;
  };
  auto print = [&](size_t task, int stream, const std::string& data, bool last) {
    std::ostream& out = sink(task, stream);
    if (!label) {
      out << data << std::flush;
      return;
    }
    std::string& rest = partial[task][static_cast<size_t>(stream)];
    rest += data;
    size_t start = 0;
    for (size_t nl; (nl = rest.find('\n', start)) != std::string::npos; start = nl + 1)
      out << task << ": " << rest.substr(start, nl + 1 - start);
    rest.erase(0, start);
    if (last && !rest.empty()) {
      out << task << ": " << rest << "\n";
      rest.clear();
    }
    out << std::flush;
  };
  // Stream `stream` of `task` from what was printed up to `upto` bytes (all of it: -1).
  auto fetch = [&](size_t task, int stream, int64_t upto, bool last) {
    int64_t& done = printed[task][static_cast<size_t>(stream)];
    for (int rounds = 0; rounds < 64 && (upto < 0 || done < upto); ++rounds) {
      Response lr = c.Get("/v1/jobs/" + UrlEncode(job) + "/logs?run=" + std::to_string(run) +
                          "&step=" + std::to_string(id) + "&rank=" + std::to_string(task) +
                          "&offset=" + std::to_string(done) + (stream == 1 ? "&stream=err" : ""));
      if (lr.status != 200 || lr.body.empty()) break;
      done += static_cast<int64_t>(lr.body.size());
      print(task, stream, lr.body, false);
    }
    if (last) print(task, stream, "", true);
  };
  bool cancel_sent = false;
  int failures = 0;
  bool started_said = step.value("state", "") != "pending";
  bool timeout_said = false;
  const auto cancel_if_interrupted = [&] {
    if (g_interrupted.load() > 0 && !cancel_sent) {
      std::cerr << "srun: interrupted: cancelling step " << job << "." << id << "\n";
      c.Delete(path);
      cancel_sent = true;
    }
  };
  // The step is read by a long poll: gantryd answers once the step's body differs from
  // the version last seen (a task started, wrote output, exited) or after the wait. It
  // runs on a connection and a thread of its own, so an interrupt is acted on at once
  // (the cancel changes the step, which answers the poll). With -W, once a task has
  // ended, the wait is a second, to end the others on time.
  Client poller(g);
  std::string version;
  for (int tick = 0;; ++tick) {
    cancel_if_interrupted();
    const int poll_s = wait_s > 0 && first_end >= 0 ? 1 : 20;
    const std::string ask =
        version.empty() ? path : path + "?version=" + version + "&wait_s=" + std::to_string(poll_s);
    auto answer = std::async(std::launch::async, [&poller, ask] { return poller.Get(ask); });
    while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
      cancel_if_interrupted();
    Response sr = answer.get();
    if (sr.status != 200) {
      // gantryd restarting, a standby taking over, or its store out (503): keep asking
      // for a minute.
      if (++failures > (sr.status == 0 || sr.status == 503 ? 240 : 20)) {
        std::cerr << "srun: error: lost the step: "
                  << (sr.status == 0 ? sr.error : sr.Json().value("error", sr.body)) << "\n";
        return kExitRunFailure;
      }
      usleep(250000);
      continue;
    }
    failures = 0;
    step = sr.Json();
    version = step.value("version", "");
    const json& tasks = step["tasks"];
    printed.resize(tasks.size(), {0, 0});
    partial.resize(tasks.size());
    task_names.resize(tasks.size(), names);
    for (size_t t = 0; t < tasks.size(); ++t) {
      task_names[t].rank = static_cast<int>(t);
      task_names[t].node = tasks[t].value("node", "");
      task_names[t].node_index = tasks[t].value("node_index", 0);
    }
    if (pmi && !pmi_placed && !tasks.empty()) {
      std::vector<int> layout;
      for (const spec::OutputNames& n : task_names) layout.push_back(n.node_index);
      pmi->SetLayout(std::move(layout), Env("SLURM_JOB_ID") + "." + std::to_string(id));
      pmi_placed = true;
    }
    if (pmix && !pmix_launched && !tasks.empty() && step.value("state", "") == "running") {
      std::vector<int> node_of_rank;
      std::vector<std::string> hosts;
      for (const spec::OutputNames& n : task_names) {
        node_of_rank.push_back(n.node_index);
        if (static_cast<int>(hosts.size()) <= n.node_index)
          hosts.resize(static_cast<size_t>(n.node_index) + 1);
        hosts[static_cast<size_t>(n.node_index)] = n.node;
      }
      std::string error;
      const std::string nspace = "gantry.pmix." + job + "." + std::to_string(id);
      Response lr;
      if (pmix->Register(nspace, node_of_rank, hosts, ::getuid(), ::getgid(), &error)) {
        lr = c.Post(path + "/launch", json{{"env", pmix->Env()}}.dump(), "application/json");
        if (lr.status != 200) error = lr.status == 0 ? lr.error : lr.Json().value("error", lr.body);
      }
      if (!error.empty()) {
        std::cerr << "srun: error: --mpi=" << mpi << ": " << error << "\n";
        c.Delete(path + "?kill=true");
        return kExitRunFailure;
      }
      pmix_launched = true;
    }
    const std::optional<int> aborted = pmi ? pmi->Aborted() : pmix ? pmix->Aborted() : std::nullopt;
    if (aborted && !cancel_sent) {  // MPI_Abort: its tasks SIGKILLed, as Slurm's
      const int code = *aborted;
      std::cerr << "srun: Job step aborted: a task called MPI_Abort"
                << (code >= 0 ? " (exit code " + std::to_string(code) + ")" : "") << "\n";
      c.Delete(path + "?kill=true");
      cancel_sent = true;
    }
    const std::string state = step.value("state", "");
    if (!started_said && state != "pending") {
      std::cerr << "srun: Step created for StepId=" << job << "." << id << "\n";
      started_said = true;
    }
    const bool over = state == "ended" || state == "cancelled" || state == "timeout";
    if (step.value("timed_out", false) && !timeout_said) {
      // As Slurm's slurmstepd says it on each of the step's nodes.
      std::set<std::string> nodes;
      for (const json& t : tasks) nodes.insert(t.value("node", ""));
      const std::time_t at = std::time(nullptr);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", std::localtime(&at));
      for (const std::string& node : nodes) {
        std::cerr << "slurmstepd-" << node << ": error: *** STEP " << job << "." << id << " ON "
                  << node << " CANCELLED AT " << when << " DUE TO TIME LIMIT ***\n";
      }
      timeout_said = true;
    }
    for (size_t t = 0; t < tasks.size(); ++t) {
      for (int stream : {0, 1}) {
        const int64_t bytes =
            tasks[t].value(stream == 0 ? "output_bytes" : "error_bytes", int64_t{0});
        if (over && (stream == 0 || bytes > 0)) {  // (all uploaded before a task ends)
          fetch(t, stream, -1, true);
        } else if (bytes > printed[t][static_cast<size_t>(stream)]) {
          fetch(t, stream, bytes, false);
        }
      }
      if (kill_on_bad_exit && !cancel_sent && tasks[t].value("exited", false) &&
          (tasks[t].value("exit_code", 0) != 0 || tasks[t].value("signal", 0) != 0)) {
        std::cerr << "srun: error: task " << t << " failed: terminating the step (-K)\n";
        c.Delete(path);
        cancel_sent = true;
      }
      if (tasks[t].value("exited", false) && first_end < 0) first_end = Seconds();
    }
    if (wait_s > 0 && !over && !cancel_sent && first_end >= 0 && Seconds() - first_end >= wait_s) {
      std::cerr << "srun: error: a task ended " << wait_s
                << " s ago (--wait): terminating the step's other tasks\n";
      c.Delete(path);
      cancel_sent = true;
    }
    if (over) break;
    // A gantryd without long polls answers at once: ask again quickly at first (short
    // steps, `$(srun hostname)`), then once a second.
    if (version.empty()) usleep(tick < 20 ? 100000 : tick < 60 ? 250000 : 1000000);
  }
  // Slurm's summary of tasks that failed, and the highest status.
  int status = 0;
  const json& tasks = step["tasks"];
  if (step.value("state", "") == "cancelled" && tasks.empty()) {
    std::cerr << "srun: error: step " << job << "." << id << " was cancelled before it started\n";
    return kExitRunFailure;
  }
  for (size_t t = 0; t < tasks.size(); ++t) {
    const json& x = tasks[t];
    const int code = x.value("exit_code", 0), sig = x.value("signal", 0);
    const std::string node = x.value("node", "");
    if (sig != 0) {
      std::cerr << "srun: error: " << node << ": task " << t << ": "
                << (sig == SIGKILL   ? "Killed"
                    : sig == SIGTERM ? "Terminated"
                                     : "Signal " + std::to_string(sig))
                << (x.value("note", "").empty() ? "" : " (" + x.value("note", "") + ")") << "\n";
      status = std::max(status, 128 + sig);
    } else if (code != 0) {
      std::cerr << "srun: error: " << node << ": task " << t << ": Exited with exit code " << code
                << "\n";
      status = std::max(status, code);
    }
  }
  return status;
}

namespace {

// squeue's duration `field` of `job` as scontrol writes durations: [D-]HH:MM:SS.
std::string ScontrolDuration(const json& job, const std::string& field) {
  const std::string d = FieldValue(job, field, static_cast<double>(std::time(nullptr)));
  if (d == "UNLIMITED" || d.find('-') != std::string::npos) return d;
  return std::count(d.begin(), d.end(), ':') == 1 ? "00:" + std::string(d.size() < 5 ? "0" : "") + d
                                                  : std::string(d.size() < 8 ? "0" : "") + d;
}

}  // namespace

int Scontrol(const Globals& g, const std::vector<std::string>& words) {
  // scontrol requeue|hold|uhold|release JOBID[,JOBID...] [JOBID...]
  static constexpr std::pair<const char*, const char*> kActions[] = {{"requeue", "/requeue"},
                                                                     {"hold", "/hold"},
                                                                     {"uhold", "/hold?by=user"},
                                                                     {"release", "/unhold"}};
  for (const auto& [verb, path] : kActions) {
    if (words.empty() || words[0] != verb) continue;
    if (words.size() < 2) {
      std::cerr << "scontrol: error: " << verb << " needs a job id\n";
      return kExitBadInput;
    }
    Client c(g);
    const std::string what = "scontrol " + std::string(verb);
    int rc = 0;
    for (size_t w = 1; w < words.size(); ++w) {
      std::stringstream ids(words[w]);
      for (std::string id; std::getline(ids, id, ',');) {
        if (id.empty()) continue;
        Response r = c.Post("/v1/jobs/" + UrlEncode(id) + path, "", "application/json");
        if (int failed = Check(r, what.c_str())) rc = failed;
      }
    }
    return rc;
  }
  if (!words.empty() && words[0] == "update") {
    // scontrol update JobId=ID[,ID...] [StartTime=TIME] [TimeLimit=[+-]TIME]
    //   [Dependency=SPEC] (sbatch's syntax; empty: none) [ArrayTaskThrottle=N] (0: none)
    //   [JobName=NAME] [Partition=P] [QOS=Q] [Account=A] [Nice[=N]] (a pending job's spec)
    std::string id;
    std::optional<std::string> start, limit, dependency, throttle;
    nlohmann::json spec_fields = nlohmann::json::object();  // POST /v1/jobs/ID/spec
    static constexpr std::pair<const char*, const char*> kSpecFields[] = {{"jobname", "name"},
                                                                          {"name", "name"},
                                                                          {"partition", "pool"},
                                                                          {"qos", "tier"},
                                                                          {"account", "queue"}};
    for (size_t w = 1; w < words.size(); ++w) {
      const size_t eq = words[w].find('=');
      std::string key = words[w].substr(0, eq);
      for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const std::string value = eq == std::string::npos ? "" : words[w].substr(eq + 1);
      if (key == "jobid") {
        id = value;
      } else if (key == "starttime") {
        start = value;
      } else if (key == "timelimit") {
        limit = value;
      } else if (key == "dependency") {
        dependency = value;
      } else if (key == "arraytaskthrottle") {
        throttle = value;
      } else if (key == "nice") {  // Nice[=N]: 100 without a value, as Slurm's
        const std::optional<int> n = ParseSlurmNice(value);
        if (!n) {
          std::cerr << "scontrol: error: Nice=" << value
                    << ": expected an adjustment from -2147483645 to 2147483645\n";
          return kExitBadInput;
        }
        spec_fields["nice"] = *n;
      } else if (auto f = std::find_if(std::begin(kSpecFields), std::end(kSpecFields),
                                       [&](const auto& p) { return key == p.first; });
                 f != std::end(kSpecFields)) {
        if (value.empty()) {
          std::cerr << "scontrol: error: update " << words[w] << ": give a value\n";
          return kExitBadInput;
        }
        spec_fields[f->second] = value;
      } else {
        std::cerr << "scontrol: error: update " << words[w]
                  << ": under Gantry, scontrol update sets a job's StartTime, TimeLimit, "
                     "Dependency, ArrayTaskThrottle, JobName, Partition, QOS, Account and Nice "
                     "only (JobId=ID StartTime=TIME TimeLimit=TIME Dependency=SPEC "
                     "ArrayTaskThrottle=N JobName=NAME Partition=P QOS=Q Account=A Nice=N)\n";
        return kExitBadInput;
      }
    }
    if (id.empty() || (!start && !limit && !dependency && !throttle && spec_fields.empty())) {
      std::cerr << "scontrol: error: update needs JobId=ID and StartTime=TIME, TimeLimit=TIME, "
                   "Dependency=SPEC, ArrayTaskThrottle=N, JobName=NAME, Partition=P, QOS=Q, "
                   "Account=A or Nice=N\n";
      return kExitBadInput;
    }
    std::vector<std::string> paths;  // what to ask of each job, after its id
    const int64_t now_s = static_cast<int64_t>(std::time(nullptr));
    if (start) {
      std::string why;
      const std::optional<int64_t> at = ParseSlurmBeginTime(*start, now_s, why);
      if (!at) {
        std::cerr << "scontrol: error: StartTime: " << why << "\n";
        return kExitBadInput;
      }
      paths.push_back("/begin?at=" + std::to_string(*at > now_s ? *at : 0));
    }
    if (limit) {  // TIME, UNLIMITED, or +TIME / -TIME: added to the job's limit
      const bool add = !limit->empty() && (limit->front() == '+' || limit->front() == '-');
      std::string why;
      const std::optional<long long> t = ParseSlurmTime(add ? limit->substr(1) : *limit, why);
      if (!t || (add && *t == 0)) {
        std::cerr << "scontrol: error: TimeLimit: "
                  << (t ? "UNLIMITED cannot be added to a limit" : why) << "\n";
        return kExitBadInput;
      }
      paths.push_back(add ? "/time-limit?add=" + std::to_string(limit->front() == '-' ? -*t : *t)
                          : "/time-limit?s=" + std::to_string(*t));
    }
    if (dependency) {  // read as sbatch --dependency reads it (afterok:12, ...); "": none
      std::string after;
      if (!dependency->empty()) {
        const SbatchJob parsed =
            ParseSbatch("scontrol", "#!/bin/sh\n", {"--dependency=" + *dependency}, {}, {});
        if (!parsed.errors.empty()) {
          std::cerr << "scontrol: error: Dependency=" << *dependency << ": "
                    << parsed.errors.front().substr(parsed.errors.front().find("--dependency"))
                    << "\n";
          return kExitBadInput;
        }
        after = parsed.after;
      }
      paths.push_back("/after?after=" + UrlEncode(after));
    }
    if (throttle) {  // an array's: at most N of its tasks at once; 0: no limit
      if (throttle->empty() || throttle->size() > 7 ||
          throttle->find_first_not_of("0123456789") != std::string::npos) {
        std::cerr << "scontrol: error: ArrayTaskThrottle=" << *throttle
                  << ": expected a number of tasks, 0 for no limit\n";
        return kExitBadInput;
      }
      paths.push_back("/throttle?limit=" + *throttle);
    }
    Client c(g);
    int rc = 0;
    std::stringstream ids(id);
    for (std::string one; std::getline(ids, one, ',');) {
      if (one.empty()) continue;
      for (const std::string& path : paths) {
        Response r = c.Post("/v1/jobs/" + UrlEncode(one) + path, "", "application/json");
        if (int failed = Check(r, "scontrol update")) rc = failed;
      }
      if (!spec_fields.empty()) {
        Response r =
            c.Post("/v1/jobs/" + UrlEncode(one) + "/spec", spec_fields.dump(), "application/json");
        if (int failed = Check(r, "scontrol update")) rc = failed;
      }
    }
    return rc;
  }
  const std::string what = words.size() > 1 ? words[1] : "";
  if (words.empty() || words[0] != "show" ||
      (what != "hostnames" && what != "hostname" && what != "hostlist" && what != "job" &&
       what != "jobid")) {
    std::cerr
        << "scontrol: error: under Gantry, scontrol does show hostnames [LIST], show "
           "hostlist LIST, show job [ID], requeue ID, hold ID, uhold ID, release ID and "
           "update JobId=ID StartTime=TIME TimeLimit=TIME Dependency=SPEC ArrayTaskThrottle=N "
           "JobName=NAME Partition=P QOS=Q Account=A Nice=N "
           "(gantry show, cancel and drain do the rest)\n";
    return kExitBadInput;
  }
  if (what == "hostnames" || what == "hostname") {
    const std::string list = words.size() > 2 ? words[2] : Env("SLURM_JOB_NODELIST");
    if (list.empty()) {
      std::cerr << "scontrol: error: no host list given and SLURM_JOB_NODELIST is not set\n";
      return kExitBadInput;
    }
    auto names = spec::ExpandHostList(list);
    if (!names) {
      std::cerr << "scontrol: error: not a host list: " << list << "\n";
      return kExitBadInput;
    }
    for (const std::string& n : *names) std::cout << n << "\n";
    return 0;
  }
  if (what == "hostlist") {
    if (words.size() < 3) {
      std::cerr << "scontrol: error: show hostlist needs a list of names\n";
      return kExitBadInput;
    }
    std::vector<std::string> names;
    std::stringstream in(words[2]);
    for (std::string n; std::getline(in, n, ',');) {
      if (!n.empty()) names.push_back(n);
    }
    std::cout << spec::HostList(names) << "\n";
    return 0;
  }
  const std::string id = words.size() > 2 ? words[2] : Env("SLURM_JOB_ID");
  if (id.empty()) {
    std::cerr << "scontrol: error: show job needs a job id\n";
    return kExitBadInput;
  }
  Client c(g);
  Response r = c.Get("/v1/jobs/" + UrlEncode(id));
  if (int rc = Check(r, "scontrol")) return rc;
  const json j = r.Json();
  std::string state = j.value("state", "");
  for (char& ch : state) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::vector<std::string> nodes;
  for (const json& w : j.value("workers", json::array())) {
    const std::string n = w.value("alloc", json::object()).value("node", "");
    if (!n.empty() && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  // JobId= the number, as Slurm's (and sbatch's answer, SLURM_JOB_ID); an array task's
  // array and index beside it.
  const std::string number = NumberOf(j).empty() ? j.value("id", id) : NumberOf(j);
  std::cout << "JobId=" << number;
  if (!ArrayNumberOf(j).empty() && j.contains("array_index"))
    std::cout << " ArrayJobId=" << ArrayNumberOf(j) << " ArrayTaskId=" << j["array_index"].dump();
  std::cout << " JobName=" << j.value("name", j.value("id", id))
            << "\n   UserId=" << j.value("user", "") << " Nice=" << FieldValue(j, "nice", 0)
            << " Account=" << FieldValue(j, "account", 0) << " QOS=" << FieldValue(j, "qos", 0)
            << "\n   JobState=" << state << " Reason=" << SlurmReason(j)
            << "\n   Restarts=" << std::max(0, j.value("run", 0) - 1)
            << " ExitCode=" << FieldValue(j, "exitcode", 0)
            << "\n   RunTime=" << ScontrolDuration(j, "timeused")
            << " TimeLimit=" << ScontrolDuration(j, "timelimit") << " TimeMin=N/A"
            << "\n   SubmitTime=" << FieldValue(j, "submittime", 0)
            << " StartTime=" << FieldValue(j, "starttime", 0)
            << " EndTime=" << FieldValue(j, "endtime", 0)
            << "\n   Partition=" << FieldValue(j, "partition", 0)
            << "\n   NodeList=" << (nodes.empty() ? "(null)" : spec::HostList(nodes))
            << "\n   NumNodes=" << nodes.size() << " NumTasks="
            << j.value("workers", json::array()).size() * j.value("tasks_per_worker", 1)
            << "\n   WorkDir=" << j.value("workdir", "") << "\n";
  return 0;
}

namespace {

// A Slurm job state, long or short, any case (PD, PENDING, R, CG, CD, F, CA, ...), as
// Gantry's state word; "" for any other.
std::string GantryState(const std::string& slurm) {
  static const std::map<std::string, std::string> kStates = {
      {"PD", "pending"},      {"PENDING", "pending"},    {"R", "running"},
      {"RUNNING", "running"}, {"CG", "stopping"},        {"COMPLETING", "stopping"},
      {"CD", "finished"},     {"COMPLETED", "finished"}, {"F", "failed"},
      {"FAILED", "failed"},   {"CA", "cancelled"},       {"CANCELLED", "cancelled"}};
  std::string up = slurm;
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  auto it = kStates.find(up);
  return it == kStates.end() ? "" : it->second;
}

}  // namespace

int Sinfo(const Globals& g, const std::vector<std::string>& words) {
  bool header = true, by_node = false, reasons = false, summary = false;
  std::set<std::string> parts, states;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    auto list = [&](size_t cut, std::set<std::string>& into) {
      std::string v = w.size() > cut         ? w.substr(cut + (w[cut] == '=' ? 1 : 0))
                      : i + 1 < words.size() ? words[++i]
                                             : "";
      std::stringstream in(v);
      for (std::string item; std::getline(in, item, ',');) {
        if (!item.empty()) into.insert(item);
      }
      return !v.empty();
    };
    bool ok = true;
    if (w == "-h" || w == "--noheader") {
      header = false;
    } else if (w == "-N" || w == "--Node") {
      by_node = true;
    } else if (w == "-R" || w == "--list-reasons") {
      reasons = true;
    } else if (w == "-s" || w == "--summarize") {
      summary = true;
    } else if (w == "-l" || w == "--long" || w == "-a" || w == "--all" || w == "-e" ||
               w == "--exact" || w == "-r" || w == "--responding") {
      continue;
    } else if (w.rfind("-p", 0) == 0 || w.rfind("--partition", 0) == 0) {
      ok = list(w[1] == 'p' ? 2 : 11, parts);
    } else if (w.rfind("-t", 0) == 0 || w.rfind("--states", 0) == 0) {
      ok = list(w[1] == 't' ? 2 : 8, states);
    } else {
      std::cerr << "sinfo: error: " << w
                << ": not supported under Gantry (sinfo takes -p, -t, -N, -R, -s, -h, -l)\n";
      return kExitBadInput;
    }
    if (!ok) {
      std::cerr << "sinfo: error: " << w << " needs a value\n";
      return kExitBadInput;
    }
  }
  Client c(g);
  Response r = c.Get("/v1/nodes");
  if (int rc = Check(r, "sinfo")) return rc;
  const json body = r.Json();
  const std::string def = body.value("default_partition", json()).is_string()
                              ? body["default_partition"].get<std::string>()
                              : "";
  // Each node's state in Slurm's words: idle, mix, alloc; drain (idle) or drng; down* where
  // its agent is not heard from, down where it was refused.
  struct Row {
    std::string part, state, node, reason;
    std::string by, when;  // -R: who drained it (or took it down) and when, local time
  };
  std::vector<Row> rows;
  std::vector<std::string> order;  // partitions in the order first seen
  for (const json& n : body.value("nodes", json::array())) {
    const int gpus = n.value("gpus", 0), free = n.value("free_gpus", 0);
    const std::string st = n.value("state", "");
    // Its base state, by GPUs (Slurm's counts CPUs: a node whose GPUs are all held by a job
    // of one CPU is "mix" there), and the drain flag over it.
    const std::string base = st == "refused" || st == "down" || st == "unseen" ? "down"
                             : gpus > 0 && free == 0                           ? "alloc"
                             : free < gpus                                     ? "mix"
                                                                               : "idle";
    const bool drain = st == "drained";
    const std::string state = drain                            ? (base == "idle" ? "drain" : "drng")
                              : st == "down" || st == "unseen" ? "down*"
                                                               : base;
    // -t: a base state (idle, mix/mixed, alloc/allocated, down) or the flag (drain/drained,
    // draining), as Slurm's (a drained idle node is idle too).
    auto wanted = [&] {
      for (const std::string& t : states) {
        if (t == base || t == state || (t == "mixed" && base == "mix") ||
            (t == "allocated" && base == "alloc") || ((t == "drain" || t == "drained") && drain) ||
            (t == "draining" && state == "drng"))
          return true;
      }
      return states.empty();
    };
    if (!wanted()) continue;
    // -R: a drained node's drainer and time; a down one's is gantryd's, when last heard from.
    std::string by = drain ? n.value("drained_by", "") : base == "down" ? "gantryd" : "";
    double at = -1;
    if (drain && n.value("drained_at", json()).is_number()) {
      at = n["drained_at"].get<double>();
    } else if (!drain && n.value("last_seen_s", json()).is_number()) {
      at = static_cast<double>(std::time(nullptr)) - n["last_seen_s"].get<double>();
    }
    std::string when = "Unknown";
    if (at >= 0) {
      const std::time_t t = static_cast<std::time_t>(at);
      std::tm tm{};
      char text[32];
      if (::localtime_r(&t, &tm) && std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm))
        when = text;
    }
    if (by.empty()) by = "Unknown";
    for (const json& p : n.value("partitions", json::array())) {
      const std::string part = p.get<std::string>();
      if (!parts.empty() && !parts.count(part)) continue;
      if (std::find(order.begin(), order.end(), part) == order.end()) order.push_back(part);
      rows.push_back({part, state, n.value("name", ""), n.value("reason", ""), by, when});
    }
  }
  auto label = [&](const std::string& part) { return part == def ? part + "*" : part; };
  size_t part_w = 9;
  for (const std::string& p : order) part_w = std::max(part_w, label(p).size());
  auto pad = [](const std::string& s, size_t w, bool right) {
    const std::string fill(w > s.size() ? w - s.size() : 0, ' ');
    return right ? fill + s : s + fill;
  };
  if (reasons) {  // down and drained nodes, by reason
    std::vector<std::pair<std::array<std::string, 3>, std::vector<std::string>>> by_reason;
    std::set<std::string> seen;
    for (const Row& row : rows) {
      if (row.state.rfind("down", 0) != 0 && row.state != "drain" && row.state != "drng") continue;
      if (!seen.insert(row.node).second) continue;
      const std::array<std::string, 3> key = {row.reason, row.by, row.when};
      auto it = std::find_if(by_reason.begin(), by_reason.end(),
                             [&](const auto& x) { return x.first == key; });
      if (it == by_reason.end()) it = by_reason.insert(by_reason.end(), {key, {}});
      it->second.push_back(row.node);
    }
    if (header)
      std::cout << pad("REASON", 20, false) << " " << pad("USER", 9, false) << " "
                << pad("TIMESTAMP", 19, false) << " NODELIST\n";
    for (const auto& [key, nodes] : by_reason) {
      std::cout << pad(key[0].substr(0, 20), 20, false) << " " << pad(key[1].substr(0, 9), 9, false)
                << " " << pad(key[2], 19, false) << " " << spec::HostList(nodes) << "\n";
    }
    return 0;
  }
  if (by_node) {  // by node name, numbers as numbers (h100-2 before h100-10), as Slurm's
    auto key = [](const std::string& n) {
      const size_t digits = n.find_last_not_of("0123456789") + 1;
      return std::pair(n.substr(0, digits),
                       digits < n.size() ? std::stoll(n.substr(digits, 18)) : -1LL);
    };
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const Row& x, const Row& y) { return key(x.node) < key(y.node); });
    size_t node_w = 9;
    for (const Row& row : rows) node_w = std::max(node_w, row.node.size());
    if (header)
      std::cout << pad("NODELIST", node_w, false) << " " << pad("NODES", 6, true) << " "
                << pad("PARTITION", part_w, true) << " " << pad("STATE", 6, false) << "\n";
    for (const Row& row : rows) {
      std::cout << pad(row.node, node_w, false) << " " << pad("1", 6, true) << " "
                << pad(label(row.part), part_w, true) << " " << pad(row.state, 6, false) << "\n";
    }
    return 0;
  }
  if (header) {
    std::cout << pad("PARTITION", part_w, false) << " " << pad("AVAIL", 5, true) << " "
              << pad("TIMELIMIT", 10, true) << " "
              << (summary ? pad("NODES(A/I/O/T)", 16, true)
                          : pad("NODES", 6, true) + " " + pad("STATE", 6, true))
              << " NODELIST\n";
  }
  for (const std::string& part : order) {
    if (summary) {  // allocated (alloc, mix), idle, other, total
      int a = 0, idle = 0, other = 0;
      std::vector<std::string> nodes;
      for (const Row& row : rows) {
        if (row.part != part) continue;
        nodes.push_back(row.node);
        (row.state == "alloc" || row.state == "mix" ? a : row.state == "idle" ? idle : other)++;
      }
      const std::string counts = std::to_string(a) + "/" + std::to_string(idle) + "/" +
                                 std::to_string(other) + "/" + std::to_string(nodes.size());
      std::cout << pad(label(part), part_w, false) << " " << pad("up", 5, true) << " "
                << pad("infinite", 10, true) << " " << pad(counts, 16, true) << " "
                << spec::HostList(nodes) << "\n";
      continue;
    }
    std::vector<std::string> seen_states;
    for (const Row& row : rows) {
      if (row.part == part &&
          std::find(seen_states.begin(), seen_states.end(), row.state) == seen_states.end())
        seen_states.push_back(row.state);
    }
    for (const std::string& state : seen_states) {
      std::vector<std::string> nodes;
      for (const Row& row : rows) {
        if (row.part == part && row.state == state) nodes.push_back(row.node);
      }
      std::cout << pad(label(part), part_w, false) << " " << pad("up", 5, true) << " "
                << pad("infinite", 10, true) << " " << pad(std::to_string(nodes.size()), 6, true)
                << " " << pad(state, 6, true) << " " << spec::HostList(nodes) << "\n";
    }
  }
  return 0;
}

std::optional<std::vector<std::string>> SlurmCommandLine(std::string_view program,
                                                         const std::vector<std::string>& args,
                                                         std::string& error) {
  std::vector<std::string> out;
  if (program == "sbatch" || program == "salloc" || program == "srun" || program == "scontrol" ||
      program == "sinfo") {
    out.emplace_back(program);
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  if (program == "sacct") {
    out.emplace_back("acct");
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  // An option's value, from "--opt=v", "-Xv" or the next word.
  auto value = [&](size_t& i, const std::string& w, size_t cut) -> std::optional<std::string> {
    if (w.size() > cut) return w.substr(cut + (w[cut] == '=' ? 1 : 0));
    if (i + 1 < args.size()) return args[++i];
    error = w + ": needs a value";
    return std::nullopt;
  };
  if (program == "scancel") {
    out.emplace_back("cancel");
    bool verbose = false;  // Slurm's scancel says nothing when all went well
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& w = args[i];
      auto starts = [&](const char* s) { return w == s || w.rfind(std::string(s) + "=", 0) == 0; };
      std::optional<std::string> v;
      if (w == "-v" || w == "--verbose") verbose = true;
      if (w == "-q" || w == "--quiet" || w == "-v" || w == "--verbose") continue;
      if (w == "--me") {
        out.insert(out.end(), {"--user", Env("USER")});
      } else if (w.rfind("-u", 0) == 0 || starts("--user")) {
        if (!(v = value(i, w, w[1] == 'u' ? 2 : 6))) return std::vector<std::string>{};
        out.insert(out.end(), {"--user", *v});
      } else if (w.rfind("-n", 0) == 0 || starts("--name") || starts("--jobname")) {
        if (!(v = value(i, w, w[1] == 'n' ? 2 : w.rfind("--name", 0) == 0 ? 6 : 9)))
          return std::vector<std::string>{};
        out.insert(out.end(), {"--name", *v});
      } else if (w.rfind("-A", 0) == 0 || starts("--account")) {
        if (!(v = value(i, w, w[1] == 'A' ? 2 : 9))) return std::vector<std::string>{};
        out.insert(out.end(), {"--account", *v});
      } else if (w.rfind("-t", 0) == 0 || starts("--state")) {
        if (!(v = value(i, w, w[1] == 't' ? 2 : 7))) return std::vector<std::string>{};
        const std::string state = GantryState(*v);
        if (state != "pending" && state != "running" && state != "stopping") {
          error = "scancel -t " + *v + ": give PENDING, RUNNING or COMPLETING (PD, R, CG)";
          return std::vector<std::string>{};
        }
        out.insert(out.end(), {"--state", state});
      } else if (w.rfind("-s", 0) == 0 || starts("--signal")) {
        if (!(v = value(i, w, w[1] == 's' ? 2 : 8))) return std::vector<std::string>{};
        out.insert(out.end(), {"--signal", *v});
      } else if (w == "-b" || w == "--batch") {
        out.emplace_back("--batch");
      } else if (w == "-f" || w == "--full") {
        out.emplace_back("--full");
      } else if (!w.empty() && w[0] == '-') {
        error = "scancel " + w +
                ": not supported under Gantry (scancel takes job ids and -u, --me, -n, -A, -t, "
                "-s, -b, -f; gantry cancel --force ends the grace)";
        return std::vector<std::string>{};
      } else {
        out.push_back(w);
      }
    }
    if (!verbose) out.emplace_back("--quiet");
    return out;
  }
  if (program == "squeue") {
    out.emplace_back("ls");
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& w = args[i];
      auto starts = [&](const char* s) { return w == s || w.rfind(std::string(s) + "=", 0) == 0; };
      std::optional<std::string> v;
      if (w == "-h" || w == "--noheader") {
        out.emplace_back("--noheader");
      } else if (w == "--me") {
        out.insert(out.end(), {"-u", Env("USER")});
      } else if (w == "-a" || w == "--all" || w == "-l" || w == "--long" || w == "-r" ||
                 w == "--array" || w == "--noconvert") {
        continue;
      } else if (w.rfind("-j", 0) == 0 || starts("--jobs")) {
        if (!(v = value(i, w, w[1] == 'j' ? 2 : 6))) return std::vector<std::string>{};
        // Active jobs only, as Slurm's squeue lists them (an ended one needs -t): scripts
        // poll `squeue -j ID` until it prints nothing (found side by side: it listed ended
        // jobs, and such a loop never ended).
        out.insert(out.end(), {"--jobs", *v});
      } else if (w.rfind("-u", 0) == 0 || starts("--user")) {
        if (!(v = value(i, w, w[1] == 'u' ? 2 : 6))) return std::vector<std::string>{};
        out.insert(out.end(), {"-u", *v});
      } else if (w.rfind("-A", 0) == 0 || starts("--account")) {
        if (!(v = value(i, w, w[1] == 'A' ? 2 : 9))) return std::vector<std::string>{};
        out.insert(out.end(), {"-A", *v});
      } else if (w.rfind("-o", 0) == 0 || starts("--format")) {
        if (!(v = value(i, w, w[1] == 'o' ? 2 : 8))) return std::vector<std::string>{};
        out.insert(out.end(), {"-o", *v});
      } else if (w.rfind("-O", 0) == 0 || starts("--Format")) {
        if (!(v = value(i, w, w[1] == 'O' ? 2 : 8))) return std::vector<std::string>{};
        out.insert(out.end(), {"-O", *v});
      } else if (w.rfind("-t", 0) == 0 || starts("--states")) {
        if (!(v = value(i, w, w[1] == 't' ? 2 : 8))) return std::vector<std::string>{};
        const std::string state = GantryState(*v);
        if (state.empty()) {
          error = "squeue -t " + *v + ": give one of PD, R, CG, CD, F, CA (one state)";
          return std::vector<std::string>{};
        }
        out.insert(out.end(), {"--state", state});
      } else {
        error = "squeue " + w +
                ": not supported under Gantry (squeue takes -j, -u, --me, -A, -t, "
                "-o, -O, -h)";
        return std::vector<std::string>{};
      }
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace gantry::cli
