#include "spec/batch.h"

#include <algorithm>
#include <csignal>
#include <utility>

namespace gantry::spec {

namespace {

constexpr std::string_view kFields = "jJxAaNnuts%";

// "%3a": a width of 1-2 digits between the % and the field (Slurm's zero padding, at most
// 10); where the field starts, and the width (0: none).
size_t FieldAt(std::string_view pattern, size_t i, int& width) {
  width = 0;
  size_t j = i;
  while (j < pattern.size() && j < i + 2 && pattern[j] >= '0' && pattern[j] <= '9')
    width = width * 10 + (pattern[j++] - '0');
  width = std::min(width, 10);
  return j;
}

// `v` padded with zeros to `width` when it is a number (Slurm ignores the width otherwise).
std::string Padded(std::string v, int width) {
  const bool number =
      !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (number && static_cast<int>(v.size()) < width)
    v.insert(0, static_cast<size_t>(width) - v.size(), '0');
  return v;
}

constexpr std::pair<std::string_view, int> kSignals[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"ABRT", SIGABRT},
    {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},
    {"ALRM", SIGALRM},     {"TERM", SIGTERM}, {"CONT", SIGCONT},   {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},     {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
    {"PWR", SIGPWR},       {"SYS", SIGSYS}};

}  // namespace

std::optional<std::string> CheckOutputPattern(std::string_view pattern) {
  if (pattern.empty()) return "must not be empty";
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (static_cast<unsigned char>(pattern[i]) < 0x20) return "must not hold control characters";
    if (pattern[i] != '%') continue;
    int width = 0;
    const size_t f = FieldAt(pattern, i + 1, width);
    if (f == pattern.size()) return "ends with a lone %: write %% for a percent sign";
    if (kFields.find(pattern[f]) == std::string_view::npos) {
      return "unknown field %" + std::string(pattern.substr(i + 1, f - i)) +
             " (known: %j job number, %J the same for a batch script (JOB.STEP for srun), %s step, "
             "%x name, %A array number, %a task index, %N node, %n node index, %u user, %t rank, "
             "%% a percent sign; a width pads numbers: %3a)";
    }
    i = f;
  }
  return std::nullopt;
}

std::string ExpandOutputPattern(std::string_view pattern, const OutputNames& n) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    int width = 0;
    const size_t f = pattern[i] == '%' ? FieldAt(pattern, i + 1, width) : pattern.size();
    if (f >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    i = f;
    switch (pattern[i]) {
      case 'j':
        out += Padded(n.job, width);
        break;
      case 'J':  // jobid.stepid; a batch script's is the job id
        out += Padded(n.job, width) + (n.step.empty() ? "" : "." + n.step);
        break;
      case 's':  // a step's id; a batch script has none (Slurm's "batch")
        out += n.step.empty() ? "batch" : Padded(n.step, width);
        break;
      case 'x':
        out += n.name;
        break;
      case 'A':
        out += Padded(n.array_job, width);
        break;
      case 'a':
        out += Padded(n.array_task, width);
        break;
      case 'N':
        out += n.node;
        break;
      case 'n':
        out += Padded(std::to_string(n.node_index), width);
        break;
      case 'u':
        out += n.user;
        break;
      case 't':
        out += Padded(std::to_string(n.rank), width);
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        out += pattern[i];
        break;
    }
  }
  return out;
}

bool IsJobNumber(std::string_view id) {
  auto digits = [](std::string_view v) {
    return !v.empty() &&
           std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const size_t underscore = id.find('_');
  return digits(id.substr(0, underscore)) &&
         (underscore == std::string_view::npos || digits(id.substr(underscore + 1)));
}

std::optional<std::string> NumberOfGivenId(std::string_view id) {
  if (id.size() < 2 || id[0] != 'j' || !IsJobNumber(id.substr(1))) return std::nullopt;
  return std::string(id.substr(1));
}

bool PatternPerRank(std::string_view pattern) {
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    int width = 0;
    i = FieldAt(pattern, i + 1, width);  // the field letter (%%t is a percent sign and a t)
    if (i < pattern.size() && pattern[i] == 't') return true;
  }
  return false;
}

std::string HostList(const std::vector<std::string>& nodes) {
  // Groups by prefix (everything before the trailing digits), keeping first appearance.
  struct Group {
    std::string prefix;
    std::vector<std::string> numbers;
  };
  std::vector<Group> groups;
  for (const std::string& n : nodes) {
    size_t cut = n.size();
    while (cut > 0 && n[cut - 1] >= '0' && n[cut - 1] <= '9') --cut;
    const std::string prefix = n.substr(0, cut), number = n.substr(cut);
    Group* g = nullptr;
    for (Group& x : groups) {
      if (x.prefix == prefix && !number.empty() && !x.numbers.empty()) g = &x;
    }
    if (g == nullptr || number.empty()) {
      groups.push_back({prefix, {}});
      g = &groups.back();
    }
    if (!number.empty()) g->numbers.push_back(number);
  }
  std::string out;
  for (const Group& g : groups) {
    if (!out.empty()) out += ',';
    out += g.prefix;
    if (g.numbers.empty()) continue;
    if (g.numbers.size() == 1) {
      out += g.numbers[0];
      continue;
    }
    // Runs of consecutive numbers of one width: 0-2 (a leading zero keeps its width).
    std::string ranges;
    for (size_t i = 0; i < g.numbers.size();) {
      size_t j = i;
      while (j + 1 < g.numbers.size() && g.numbers[j + 1].size() == g.numbers[i].size() &&
             g.numbers[j + 1].size() < 18 &&
             std::stoll(g.numbers[j + 1]) == std::stoll(g.numbers[j]) + 1) {
        ++j;
      }
      ranges += (ranges.empty() ? "" : ",") + g.numbers[i] + (j > i ? "-" + g.numbers[j] : "");
      i = j + 1;
    }
    out += "[" + ranges + "]";
  }
  return out;
}

std::optional<std::vector<std::string>> ExpandHostList(std::string_view list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    // One item: up to a comma outside brackets.
    size_t end = i;
    int depth = 0;
    for (; end < list.size() && (depth > 0 || list[end] != ','); ++end) {
      if (list[end] == '[' && ++depth > 1) return std::nullopt;
      if (list[end] == ']' && --depth < 0) return std::nullopt;
    }
    if (depth != 0) return std::nullopt;
    const std::string_view item = list.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == std::string_view::npos) {
      out.emplace_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (item.find('[', close) != std::string_view::npos) return std::nullopt;  // one range
    const std::string prefix(item.substr(0, open)), suffix(item.substr(close + 1));
    const std::string_view ranges = item.substr(open + 1, close - open - 1);
    for (size_t p = 0; p <= ranges.size();) {
      const size_t comma = std::min(ranges.find(',', p), ranges.size());
      const std::string_view r = ranges.substr(p, comma - p);
      p = comma + 1;
      const size_t dash = r.find('-');
      const std::string_view lo = r.substr(0, dash);
      const std::string_view hi = dash == std::string_view::npos ? lo : r.substr(dash + 1);
      auto digits = [](std::string_view d) {
        return !d.empty() && d.size() <= 9 &&
               d.find_first_not_of("0123456789") == std::string_view::npos;
      };
      if (!digits(lo) || !digits(hi)) return std::nullopt;
      const long a = std::stol(std::string(lo)), b = std::stol(std::string(hi));
      if (b < a || out.size() + static_cast<size_t>(b - a) >= 100000) return std::nullopt;
      for (long v = a; v <= b; ++v) {
        std::string num = std::to_string(v);
        if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');
        out.push_back(prefix + num + suffix);
      }
    }
  }
  return out;
}

std::string TasksPerNode(const std::vector<int>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j + 1 < counts.size() && counts[j + 1] == counts[i]) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(counts[i]) +
           (j > i ? "(x" + std::to_string(j - i + 1) + ")" : "");
    i = j + 1;
  }
  return out;
}

std::string DistributionProblem(std::string_view value) {
  const std::string_view nodes = value.substr(0, value.find_first_of(":,"));
  if (nodes == "block" || nodes == "cyclic" || nodes == "*") return "";
  return "tasks are laid out over the nodes block by block or cyclic only (" +
         (nodes.rfind("plane", 0) == 0 || nodes == "arbitrary"
              ? std::string(nodes) + " is not done"
              : "no \"" + std::string(nodes) + "\"") +
         "); give block or cyclic";
}

bool DistributionCyclic(std::string_view value) {
  return value.substr(0, value.find_first_of(":,")) == "cyclic";
}

int SignalNumber(std::string_view name) {
  if (name.empty()) return -1;
  if (name.find_first_not_of("0123456789") == std::string_view::npos) {
    if (name.size() > 2) return -1;
    const int v = std::stoi(std::string(name));
    return v >= 1 && v <= 64 ? v : -1;
  }
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  for (const auto& [n, v] : kSignals) {
    if (n == name) return v;
  }
  return -1;
}

std::string SignalName(int number) {
  for (const auto& [n, v] : kSignals) {
    if (v == number) return std::string(n);
  }
  return std::to_string(number);
}

}  // namespace gantry::spec
