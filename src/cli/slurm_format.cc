#include "cli/slurm_format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "spec/batch.h"

namespace gantry::cli {

namespace {

using nlohmann::json;

// A field both tools can show: its canonical name (squeue -O's, lower case), squeue's
// letter (0: none), squeue's header, sacct's name and header, and sacct's width.
struct FieldDef {
  const char* name;
  char letter;
  const char* squeue_header;
  const char* sacct_name;  // nullptr: not a sacct field
  int sacct_width;
};

constexpr FieldDef kFields[] = {
    // (An array task's own number, squeue's %A and -O JobID, sacct's JobIDRaw; its array's
    // number and index, squeue's %i and -O JobArrayID, sacct's JobID; as Slurm 22.05's.)
    {"jobid", 'A', "JOBID", "jobidraw", 12},
    {"jobarrayid", 'i', "JOBID", "jobid", 14},
    {"arrayjobid", 'F', "ARRAY_JOB_ID", nullptr, 0},
    {"arraytaskid", 'K', "ARRAY_TASK_ID", nullptr, 0},
    {"name", 'j', "NAME", "jobname", 12},
    {"username", 'u', "USER", "user", 10},
    {"partition", 'P', "PARTITION", "partition", 10},
    {"qos", 'q', "QOS", "qos", 12},
    {"account", 'a', "ACCOUNT", "account", 12},
    {"state", 'T', "STATE", "state", 11},
    {"statecompact", 't', "ST", nullptr, 0},
    {"timeused", 'M', "TIME", "elapsed", 11},
    {"timelimit", 'l', "TIME_LIMIT", "timelimit", 11},
    {"timeleft", 'L', "TIME_LEFT", nullptr, 0},
    {"numnodes", 'D', "NODES", "nnodes", 8},
    {"numtasks", 0, "TASKS", "ntasks", 8},
    {"numcpus", 'C', "CPUS", "alloccpus", 10},
    {"cpus-per-task", 'c', "MIN_CPUS", nullptr, 0},
    {"nice", 'y', "NICE", nullptr, 0},
    // squeue's reason is Slurm's code (SlurmReason); sacct's Reason, Gantry's sentence.
    {"reasonlist", 'R', "NODELIST(REASON)", nullptr, 0},
    {"reason", 'r', "REASON", nullptr, 0},
    {"reasontext", 0, "REASON", "reason", 30},
    {"nodelist", 'N', "NODELIST", "nodelist", 16},
    {"tres-per-node", 'b', "TRES_PER_NODE", nullptr, 0},
    {"submittime", 'V', "SUBMIT_TIME", "submit", 19},
    {"starttime", 'S', "START_TIME", "start", 19},
    {"endtime", 'e', "END_TIME", "end", 19},
    {"exitcode", 0, "EXIT_CODE", "exitcode", 8},
    {"alloctres", 0, "TRES", "alloctres", 28},
    {"gpus", 0, "GPUS", "allocgpus", 9},
    {"gpuhours", 0, "GPU_HOURS", "gpuhours", 10},
    {"elapsedraw", 0, "ELAPSED_RAW", "elapsedraw", 10},
};

// squeue -O and sacct names that mean a field above.
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"user", "username"},   {"jobname", "name"},          {"elapsed", "timeused"},
    {"nnodes", "numnodes"}, {"ntasks", "numtasks"},       {"alloccpus", "numcpus"},
    {"ncpus", "numcpus"},   {"submit", "submittime"},     {"start", "starttime"},
    {"end", "endtime"},     {"allocgpus", "gpus"},        {"gres", "tres-per-node"},
    {"tres", "alloctres"},  {"arraytask", "arraytaskid"}, {"arrayjob", "arrayjobid"},
    {"st", "statecompact"}, {"mincpus", "cpus-per-task"},
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const FieldDef* ByName(const std::string& raw) {
  std::string n = Lower(raw);
  for (const auto& [alias, name] : kAliases) {
    if (n == alias) n = name;
  }
  for (const FieldDef& f : kFields) {
    if (n == f.name) return &f;
  }
  return nullptr;
}

std::string KnownNames(bool sacct) {
  std::string out;
  for (const FieldDef& f : kFields) {
    if (sacct && f.sacct_name == nullptr) continue;
    out += (out.empty() ? "" : ", ") + std::string(sacct ? f.sacct_name : f.name);
  }
  return out;
}

std::optional<int> Width(const std::string& t) {
  if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoi(t);
}

std::string Time(const json& v) {
  if (!v.is_number()) return "Unknown";
  const std::time_t t = static_cast<std::time_t>(v.get<double>());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

double Num(const json& job, const char* key, double dflt = 0) {
  auto it = job.find(key);
  return it != job.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string Str(const json& job, const char* key) {
  auto it = job.find(key);
  return it != job.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Its partition, QoS or account as Slurm names them (gantryd's "slurm" names: the site
// mapping's), else Gantry's pool, tier and queue; "-" for none.
std::string SiteName(const json& job, const std::string& field) {
  const auto slurm = job.find("slurm");
  if (slurm != job.end() && slurm->is_object()) {
    const std::string named = Str(*slurm, field.c_str());
    if (!named.empty()) return named;
  }
  std::string own = field == "partition"           ? Str(job, "pool")
                    : field == "account"           ? Str(job, "queue")
                    : Str(job, "tier_now").empty() ? Str(job, "tier")
                                                   : Str(job, "tier_now");
  return own.empty() ? "-" : own;
}

// Seconds it has run: since its first start, to its end or now.
double Used(const json& job, double now) {
  const double start = Num(job, "start", -1);
  if (start < 0) return 0;
  const double end = Num(job, "end", -1);
  return (end >= 0 ? end : now) - start;
}

std::vector<std::string> Nodes(const json& job) {
  std::vector<std::string> out;
  if (auto it = job.find("nodes"); it != job.end() && it->is_array()) {
    for (const json& n : *it) {
      if (n.is_string()) out.push_back(n.get<std::string>());
    }
  }
  return out;
}

std::string Int(double v) { return std::to_string(std::llround(v)); }

}  // namespace

std::string SlurmDuration(double seconds) {
  const long long s = std::max(0LL, std::llround(seconds));
  char buf[48];
  if (s >= 86400) {
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", s / 86400, s / 3600 % 24,
                  s / 60 % 60, s % 60);
  } else if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

std::string SlurmState(const json& job) {
  const std::string state = Str(job, "state"), reason = Str(job, "reason");
  if (state == "pending") {
    // Back in the queue after a preemption or a lost node: Slurm's REQUEUED.
    return Num(job, "preemptions") + Num(job, "requeues") > 0 ? "REQUEUED" : "PENDING";
  }
  if (state == "running") return "RUNNING";
  if (state == "stopping") return reason.rfind("preempt", 0) == 0 ? "PREEMPTED" : "COMPLETING";
  if (state == "finished") return "COMPLETED";
  if (state == "cancelled") return "CANCELLED";
  if (state == "reclaimed") return "PREEMPTED";  // its idle GPUs were taken back
  if (state == "failed" || state == "rejected") {
    if (reason.rfind("time limit reached", 0) == 0) return "TIMEOUT";
    if (reason.find("out of memory") != std::string::npos) return "OUT_OF_MEMORY";
    return "FAILED";
  }
  return "UNKNOWN";
}

std::string SlurmReason(const json& job) {
  const std::string state = Str(job, "state"), reason = Str(job, "reason");
  // A hold shows while it runs too (it applies if the job is requeued), as Slurm's.
  if (job.contains("hold") && (state == "pending" || state == "running"))
    return Str(job, "hold") == "admin" ? "JobHeldAdmin" : "JobHeldUser";
  if (state == "pending") {
    if (reason.rfind("dependency never", 0) == 0) return "DependencyNeverSatisfied";
    if (reason.rfind("dependency", 0) == 0) return "Dependency";
    if (reason.rfind("begin", 0) == 0) return "BeginTime";
    if (reason.rfind("throttle", 0) == 0) return "JobArrayTaskLimit";
    static constexpr std::pair<const char*, const char*> kByCause[] = {
        {"capacity", "Resources"},    // no room yet (the first in line has its reservation)
        {"preemption", "Resources"},  // room being made: its victims are stopping
        {"reservation", "Priority"},  // the room is held for a job ahead of it
        {"quota", "AssocGrpGRES"},    // its queue (account) at its GPU limit
        {"budget", "AssocGrpBillingMinutes"},  // its queue's GPU-hours spent
        {"window", "BeginTime"},               // its time window has not opened
    };
    const std::string cause = job.contains("wait") ? Str(job["wait"], "cause") : "";
    for (const auto& [c, code] : kByCause) {
      if (cause == c) return code;
    }
    return "None";  // not looked at yet (Slurm's too, before its first pass)
  }
  const std::string slurm = SlurmState(job);
  if (slurm == "TIMEOUT") return "TimeLimit";
  if (slurm == "OUT_OF_MEMORY") return "OutOfMemory";
  if (slurm == "FAILED") return "NonZeroExitCode";
  return "None";
}

std::string SlurmStateCode(const std::string& state) {
  static constexpr std::pair<const char*, const char*> kCodes[] = {
      {"PENDING", "PD"},  {"RUNNING", "R"},        {"COMPLETING", "CG"}, {"COMPLETED", "CD"},
      {"FAILED", "F"},    {"CANCELLED", "CA"},     {"TIMEOUT", "TO"},    {"PREEMPTED", "PR"},
      {"REQUEUED", "RQ"}, {"OUT_OF_MEMORY", "OOM"}};
  for (const auto& [name, code] : kCodes) {
    if (state == name) return code;
  }
  return "?";
}

std::string NormalizeState(const std::string& s) {
  std::string up = s;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up == "CANCELED") up = "CANCELLED";
  for (const char* name : {"PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED",
                           "TIMEOUT", "PREEMPTED", "REQUEUED", "OUT_OF_MEMORY"}) {
    if (up == name || up == SlurmStateCode(name)) return name;
  }
  return "";
}

std::optional<std::vector<Column>> ParseSqueueFormat(const std::string& format,
                                                     std::string& error) {
  std::vector<Column> out;
  std::string literal;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      literal += format[i];
      continue;
    }
    Column c;
    size_t j = i + 1;
    if (j < format.size() && format[j] == '.') {
      c.right = true;
      ++j;
    }
    size_t digits = j;
    while (digits < format.size() && std::isdigit(static_cast<unsigned char>(format[digits])))
      ++digits;
    if (digits > j) {
      auto w = Width(format.substr(j, digits - j));
      if (!w) {
        error = "width too large in \"" + format.substr(i, digits - i + 1) + "\"";
        return std::nullopt;
      }
      c.width = *w;
    }
    if (digits >= format.size()) {
      error = "\"" + format.substr(i) + "\" ends without a field letter";
      return std::nullopt;
    }
    const char letter = format[digits];
    if (letter == '%') {
      literal += '%';
      i = digits;
      continue;
    }
    const FieldDef* def = nullptr;
    for (const FieldDef& f : kFields) {
      if (f.letter == letter) def = &f;
    }
    if (def == nullptr) {
      std::string known;
      for (const FieldDef& f : kFields) {
        if (f.letter != 0) known += std::string(known.empty() ? "" : " ") + "%" + f.letter;
      }
      error = "unknown field %" + std::string(1, letter) + " (known: " + known + ")";
      return std::nullopt;
    }
    if (!literal.empty()) out.push_back(Column{"", literal, 0, false});
    literal.clear();
    c.field = def->name;
    out.push_back(c);
    i = digits;
  }
  if (!literal.empty()) out.push_back(Column{"", literal, 0, false});
  return out;
}

std::optional<std::vector<Column>> ParseSqueueNames(const std::string& format, std::string& error) {
  std::vector<Column> out;
  for (size_t pos = 0; pos <= format.size();) {
    const size_t comma = std::min(format.find(',', pos), format.size());
    const std::string item = format.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t colon = item.find(':');
    const FieldDef* def = ByName(item.substr(0, colon));
    if (def == nullptr) {
      error = "unknown field \"" + item.substr(0, colon) + "\" (known: " + KnownNames(false) + ")";
      return std::nullopt;
    }
    Column c{def->name, "", 20, false};
    if (colon != std::string::npos) {
      std::string w = item.substr(colon + 1);
      if (!w.empty() && w[0] == '.') {
        c.right = true;
        w = w.substr(1);
      }
      auto width = Width(w);
      if (!width) {
        error = "expected NAME:WIDTH or NAME:.WIDTH, got \"" + item + "\"";
        return std::nullopt;
      }
      c.width = *width;
    }
    out.push_back(c);
  }
  return out;
}

std::optional<std::vector<Column>> ParseSacctFormat(const std::string& format, std::string& error) {
  std::vector<Column> out;
  for (size_t pos = 0; pos <= format.size();) {
    const size_t comma = std::min(format.find(',', pos), format.size());
    const std::string item = format.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t pct = item.find('%');
    const std::string name = Lower(item.substr(0, pct));
    const FieldDef* def = nullptr;
    for (const FieldDef& f : kFields) {
      if (f.sacct_name != nullptr && name == f.sacct_name) def = &f;
    }
    if (def == nullptr) {
      error = "unknown field \"" + item.substr(0, pct) + "\" (known: " + KnownNames(true) + ")";
      return std::nullopt;
    }
    Column c{def->name, "", def->sacct_width, true};
    if (pct != std::string::npos) {
      auto width = Width(item.substr(pct + 1));
      if (!width) {
        error = "expected NAME%WIDTH, got \"" + item + "\"";
        return std::nullopt;
      }
      c.width = *width;
    }
    out.push_back(c);
  }
  return out;
}

std::string ColumnHeader(const Column& c, bool sacct) {
  if (c.field.empty()) return c.literal;
  for (const FieldDef& f : kFields) {
    if (c.field != f.name) continue;
    if (!sacct) return f.squeue_header;
    // sacct's own spelling: JobID, JobName, ...
    static constexpr std::pair<const char*, const char*> kSacct[] = {
        {"jobid", "JobID"},         {"jobidraw", "JobIDRaw"},    {"jobname", "JobName"},
        {"user", "User"},           {"partition", "Partition"},  {"qos", "QOS"},
        {"account", "Account"},     {"state", "State"},          {"elapsed", "Elapsed"},
        {"timelimit", "Timelimit"}, {"nnodes", "NNodes"},        {"ntasks", "NTasks"},
        {"alloccpus", "AllocCPUS"}, {"reason", "Reason"},        {"nodelist", "NodeList"},
        {"submit", "Submit"},       {"start", "Start"},          {"end", "End"},
        {"exitcode", "ExitCode"},   {"alloctres", "AllocTRES"},  {"allocgpus", "AllocGPUs"},
        {"gpuhours", "GPUHours"},   {"elapsedraw", "ElapsedRaw"}};
    for (const auto& [n, h] : kSacct) {
      if (f.sacct_name != nullptr && std::string(f.sacct_name) == n) return h;
    }
    return f.squeue_header;
  }
  return c.field;
}

std::string NumberOf(const json& job) {
  for (const char* key : {"number", "seq"}) {  // (seq: from a gantryd before numbers were kept)
    if (auto it = job.find(key); it != job.end() && it->is_number_integer())
      return std::to_string(it->get<int64_t>());
  }
  const std::string id = Str(job, "id");  // else a server-named job's own (j12: 12)
  auto number = spec::NumberOfGivenId(id.substr(0, id.find('.')));
  return number && number->find('_') == std::string::npos ? *number : "";
}

std::string ArrayNumberOf(const json& job) {
  const std::string array = Str(job, "array");
  if (array.empty()) return "";
  if (auto it = job.find("array_number"); it != job.end() && it->is_number_integer())
    return std::to_string(it->get<int64_t>());
  return spec::NumberOfGivenId(array).value_or("");
}

namespace {

// A row's suffix: a step row's (.batch, .0), else "".
std::string StepSuffix(const json& job) {
  const std::string id = Str(job, "id");
  const size_t dot = id.find('.');
  return dot == std::string::npos ? "" : id.substr(dot);
}

// Slurm's id for a row, as squeue's %i and sacct's JobID show it: the job's number (j12 ->
// 12; a job its user named, --id train, its number); an array task's, its array's number
// and its index (41_3); with a step row's suffix (12.batch, 12.0).
std::string SlurmJobId(const json& job) {
  const std::string array = ArrayNumberOf(job);
  if (!array.empty() && job.contains("array_index") && job["array_index"].is_number_integer())
    return array + "_" + std::to_string(job["array_index"].get<int>()) + StepSuffix(job);
  const std::string number = NumberOf(job);
  return number.empty() ? Str(job, "id") : number + StepSuffix(job);
}

}  // namespace

std::string FieldValue(const json& job, const std::string& field, double now) {
  const std::string id = SlurmJobId(job);
  const std::string state = SlurmState(job);
  const std::vector<std::string> nodes = Nodes(job);
  const bool placed =
      !nodes.empty() && (state == "RUNNING" || state == "COMPLETING" || state == "PREEMPTED");
  const double gpus = Num(job, "gpus");
  // An elastic job's tasks are its size now (a pending one's: its most).
  const double replicas = Num(job, "size", Num(job, "replicas", 1));
  const double per_worker = Num(job, "tasks_per_worker", 1);  // tasks a worker stands for
  const std::string own = NumberOf(job).empty() ? id : NumberOf(job) + StepSuffix(job);
  if (field == "jobarrayid") return id;
  if (field == "jobid") return own;
  if (field == "arrayjobid") {
    if (Str(job, "array").empty()) return own;
    return ArrayNumberOf(job).empty() ? Str(job, "array") : ArrayNumberOf(job);
  }
  if (field == "arraytaskid")
    return job.contains("array_index") && job["array_index"].is_number()
               ? Int(job["array_index"].get<double>())
               : "N/A";
  if (field == "name") return Str(job, "name").empty() ? id : Str(job, "name");
  if (field == "username") return Str(job, "user").empty() ? "-" : Str(job, "user");
  if (field == "partition" || field == "qos" || field == "account") return SiteName(job, field);
  if (field == "state") return state;
  if (field == "statecompact") return SlurmStateCode(state);
  if (field == "timeused") return SlurmDuration(Used(job, now));
  if (field == "elapsedraw") return Int(Used(job, now));
  // Slurm's limit: an sbatch --signal's lead back on (slurm_time_limit_s), else Gantry's.
  const char* limit = job.contains("slurm_time_limit_s") ? "slurm_time_limit_s" : "time_limit_s";
  if (field == "timelimit")
    return job.contains(limit) ? SlurmDuration(Num(job, limit)) : "UNLIMITED";
  if (field == "timeleft") {
    if (!job.contains(limit)) return "UNLIMITED";
    const double run = Num(job, "run_start", -1) >= 0 ? now - Num(job, "run_start") : 0;
    return SlurmDuration(Num(job, limit) - run);
  }
  if (field == "numnodes") return nodes.empty() ? "-" : std::to_string(nodes.size());
  if (field == "numtasks") return Int(replicas * per_worker);
  if (field == "nice") return Int(Num(job, "nice"));
  if (field == "numcpus")
    return job.contains("cpus") ? Int(std::ceil(Num(job, "cpus")) * replicas) : "-";
  if (field == "cpus-per-task")
    return job.contains("cpus") ? Int(std::ceil(Num(job, "cpus") / per_worker)) : "-";
  if (field == "reasonlist") return placed ? spec::HostList(nodes) : "(" + SlurmReason(job) + ")";
  if (field == "reason") return SlurmReason(job);
  if (field == "reasontext") {
    // Why it waits, is being stopped, or ended other than cleanly (a reclaimed job's idle
    // GPUs, a failure, a cancel); None while it runs and once it finished.
    const std::string word = Str(job, "state");
    const bool says = word != "running" && word != "finished";
    return !says || Str(job, "reason").empty() ? "None" : Str(job, "reason");
  }
  if (field == "nodelist") return nodes.empty() ? "None assigned" : spec::HostList(nodes);
  if (field == "tres-per-node") {  // the GPUs one worker asks for
    return gpus > 0 ? "gres/gpu:" + Int(gpus / std::max(1.0, replicas)) : "N/A";
  }
  if (field == "submittime") return Time(job.value("submit", json()));
  if (field == "starttime") {  // a pending job's: its --begin time, as Slurm's
    const json start = job.value("start", json());
    return Time(start.is_null() && Str(job, "state") == "pending" ? job.value("begin", json())
                                                                  : start);
  }
  if (field == "endtime") return Time(job.value("end", json()));
  if (field == "exitcode") {
    // code:signal; a signal's end is code 0, as Slurm shows it.
    if (job.contains("exit_signal")) return "0:" + Int(Num(job, "exit_signal"));
    return Int(Num(job, "exit_code")) + ":0";
  }
  if (field == "gpus") return Int(gpus);
  if (field == "alloctres") {
    if (nodes.empty()) return "";
    std::string t;
    if (job.contains("cpus")) t += "cpu=" + Int(std::ceil(Num(job, "cpus")) * replicas) + ",";
    if (gpus > 0) t += "gres/gpu=" + Int(gpus) + ",";
    return t + "node=" + std::to_string(nodes.size());
  }
  if (field == "gpuhours") {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f",
                  job.contains("usage") ? job["usage"].value("gpu_hours", 0.0) : 0.0);
    return buf;
  }
  return "";
}

std::string RenderRow(const std::vector<Column>& cols, const std::vector<std::string>& values,
                      const std::string& separator, bool pad, bool trailing) {
  std::string out;
  for (size_t i = 0; i < cols.size(); ++i) {
    const Column& c = cols[i];
    std::string v = i < values.size() ? values[i] : "";
    if (c.field.empty()) {
      out += v;
      continue;
    }
    if (pad && c.width > 0) {
      const size_t w = static_cast<size_t>(c.width);
      if (v.size() > w) v = v.substr(0, w);  // squeue and sacct cut to the width
      const std::string fill(w - v.size(), ' ');
      v = c.right ? fill + v : v + fill;
    }
    out += v;
    if (!separator.empty() && (i + 1 < cols.size() || trailing)) out += separator;
  }
  return out;
}

std::vector<json> AcctRows(const json& job) {
  std::vector<json> rows = {job};
  // A job its time limit ended: the allocation's row 0:0, the batch step's how the script
  // ended (0:15, killed by SIGTERM at the limit), as Slurm's sacct.
  if (SlurmState(job) == "TIMEOUT") {
    rows.front().erase("exit_code");
    rows.front().erase("exit_signal");
  }
  if (!job.value("batch", false) || job.value("start", json()).is_null()) return rows;
  // A step's row: the job's, with the step's id, name, state, status, times and tasks.
  auto row = [&](const std::string& suffix, const std::string& name) {
    json r = job;
    r["id"] = Str(job, "id") + "." + suffix;
    r["name"] = name;
    for (const char* drop : {"usage", "reason", "exit_code", "exit_signal", "steps", "gpus"})
      r.erase(drop);
    return r;
  };
  // The batch script: the job's state, on its first node.
  json batch = row("batch", "batch");
  batch["replicas"] = 1;
  if (auto n = Nodes(job); !n.empty()) batch["nodes"] = json::array({n.front()});
  if (job.contains("exit_code")) batch["exit_code"] = job["exit_code"];
  if (job.contains("exit_signal")) batch["exit_signal"] = job["exit_signal"];
  if (SlurmState(job) == "TIMEOUT")
    batch["state"] = "cancelled";  // killed at the limit, as Slurm's
  rows.push_back(std::move(batch));
  for (const json& s : job.value("steps", json::array())) {
    json r = row(std::to_string(s.value("step", 0)), s.value("name", ""));
    const std::string state = s.value("state", "");
    const int code = s.value("exit_code", 0);
    // In Gantry's words, as SlurmState reads them.
    r["state"] = state == "ended" ? (code != 0 || s.contains("exit_signal") ? "failed" : "finished")
                 : state == "cancelled"  ? "cancelled"
                 : state == "cancelling" ? "stopping"
                 : state == "timeout"    ? "failed"
                                         : state;
    if (state == "timeout") r["reason"] = "time limit reached (srun --time)";  // TIMEOUT
    r["exit_code"] = code;
    if (s.contains("exit_signal")) r["exit_signal"] = s["exit_signal"];
    r["replicas"] = s.value("ntasks", 0);
    r["nodes"] = s.value("nodes", json::array());
    r["start"] = s.value("start", json());
    r["end"] = s.value("end", json());
    r["run_start"] = s.value("start", json());
    rows.push_back(std::move(r));
  }
  return rows;
}

bool JobIsOneOf(const json& job, const std::vector<std::string>& ids) {
  if (ids.empty()) return true;
  auto in = [&](const std::string& v) {
    return !v.empty() && std::find(ids.begin(), ids.end(), v) != ids.end();
  };
  // Numbers too, as Slurm's ids: the job's own (SLURM_JOB_ID), its array's (which stands
  // for every task), an array task's 41_3.
  return in(Str(job, "id")) || in(Str(job, "array")) || in(SlurmJobId(job)) || in(NumberOf(job)) ||
         in(ArrayNumberOf(job));
}

bool AcctMatches(const json& job, const AcctFilter& f) {
  auto in = [](const std::vector<std::string>& list, const std::string& v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  // An account by the site's name or Gantry's queue.
  if (!in(f.users, Str(job, "user")) ||
      (!in(f.accounts, Str(job, "queue")) && !in(f.accounts, SiteName(job, "account"))))
    return false;
  if (!f.states.empty() && !in(f.states, SlurmState(job))) return false;
  if (!JobIsOneOf(job, f.jobs)) return false;
  if (f.any_time) return true;
  // In the window: submitted before its end, and not ended before its start.
  const double submit = Num(job, "submit"), end = Num(job, "end", -1);
  return submit <= f.end && (end < 0 || end >= f.start);
}

}  // namespace gantry::cli
