#include "base/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace gantry {
namespace {

bool ParseInt(std::string_view s, int& out, int base = 10) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// Sockets, then cores, then threads: the order CPUs are handed out and laid out in.
bool TopologyOrder(const Cpu& a, const Cpu& b) {
  return std::tie(a.socket, a.core, a.id) < std::tie(b.socket, b.core, b.id);
}

std::string ReadWord(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  in >> word;
  return word;
}

// A map or mask list's entries (after "map_cpu:"): ID or ID*COUNT each, decimal or 0x hex
// for map_*, hexadecimal masks for mask_*.
std::optional<std::vector<std::vector<int>>> ParseBindList(std::string_view text, bool mask) {
  std::vector<std::vector<int>> out;
  for (std::string_view entry : Split(text, ',')) {
    int repeat = 1;
    if (const size_t star = entry.find('*'); star != std::string_view::npos) {
      if (!ParseInt(entry.substr(star + 1), repeat) || repeat < 1 || repeat > 4096)
        return std::nullopt;
      entry = entry.substr(0, star);
    }
    std::vector<int> cpus;
    if (mask) {
      std::optional<std::vector<int>> m = ParseCpuMask(entry);
      if (!m || m->empty()) return std::nullopt;
      cpus = std::move(*m);
    } else {
      int id = 0;
      const bool hex = entry.size() > 2 && entry[0] == '0' && (entry[1] == 'x' || entry[1] == 'X');
      if (!(hex ? ParseInt(entry.substr(2), id, 16) : ParseInt(entry, id))) return std::nullopt;
      cpus = {id};
    }
    out.insert(out.end(), static_cast<size_t>(repeat), cpus);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  std::set<int> cpus;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  if (text.empty()) return std::vector<int>{};
  for (std::string_view range : Split(text, ',')) {
    const size_t dash = range.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!ParseInt(range, lo)) return std::nullopt;
      hi = lo;
    } else if (!ParseInt(range.substr(0, dash), lo) || !ParseInt(range.substr(dash + 1), hi) ||
               hi < lo || hi - lo > 65536) {
      return std::nullopt;
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string CpuMask(const std::vector<int>& cpus) {
  int top = -1;
  for (int c : cpus) top = std::max(top, c);
  std::string hex;
  for (int nibble = top / 4; nibble >= 0; --nibble) {
    int v = 0;
    for (int c : cpus) {
      if (c / 4 == nibble) v |= 1 << (c % 4);
    }
    hex += "0123456789ABCDEF"[v];
  }
  return "0x" + (hex.empty() ? "0" : hex);
}

std::optional<std::vector<int>> ParseCpuMask(std::string_view text) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    text.remove_prefix(2);
  if (text.empty() || text.size() > 1024) return std::nullopt;
  std::vector<int> cpus;
  for (size_t i = 0; i < text.size(); ++i) {
    int v = 0;
    if (!ParseInt(text.substr(i, 1), v, 16)) return std::nullopt;
    const int base = static_cast<int>(text.size() - 1 - i) * 4;
    for (int b = 0; b < 4; ++b) {
      if (v & (1 << b)) cpus.push_back(base + b);
    }
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

CpuTopology CpuTopology::Read(const std::string& root, const std::vector<int>& allowed) {
  namespace fs = std::filesystem;
  std::map<int, int> numa_of;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(root) / "node", ec)) {
    const std::string name = e.path().filename().string();
    int node = 0;
    if (name.rfind("node", 0) != 0 || !ParseInt(std::string_view(name).substr(4), node)) continue;
    std::ifstream in(e.path() / "cpulist");
    std::string text;
    std::getline(in, text);
    if (std::optional<std::vector<int>> cpus = ParseCpuList(text)) {
      for (int c : *cpus) numa_of[c] = node;
    }
  }
  CpuTopology t;
  std::map<std::pair<int, int>, int> cores;  // (package, core_id) -> unique core number
  for (int id : allowed) {
    const fs::path dir = fs::path(root) / "cpu" / ("cpu" + std::to_string(id)) / "topology";
    Cpu c{.id = id, .socket = 0, .core = 0, .numa = numa_of.contains(id) ? numa_of[id] : 0};
    int core_id = 0;
    if (!ParseInt(ReadWord(dir / "physical_package_id"), c.socket)) c.socket = 0;
    if (!ParseInt(ReadWord(dir / "core_id"), core_id)) core_id = -1 - id;  // its own core
    c.core = cores.try_emplace({c.socket, core_id}, static_cast<int>(cores.size())).first->second;
    t.cpus.push_back(c);
  }
  std::sort(t.cpus.begin(), t.cpus.end(), [](const Cpu& a, const Cpu& b) { return a.id < b.id; });
  return t;
}

std::vector<int> CpuTopology::Allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

const Cpu* CpuTopology::Find(int id) const {
  auto it =
      std::lower_bound(cpus.begin(), cpus.end(), id, [](const Cpu& c, int v) { return c.id < v; });
  return it != cpus.end() && it->id == id ? &*it : nullptr;
}

std::vector<int> PickCpus(const CpuTopology& topology, const std::map<int, int>& uses, int count,
                          const std::vector<int>& near, size_t rotate) {
  std::vector<Cpu> order = topology.cpus;
  std::sort(order.begin(), order.end(), TopologyOrder);
  const size_t n = order.size();
  if (n == 0) return {};
  std::vector<std::tuple<int, bool, size_t, int>> ranked;  // uses, far, position, id
  for (size_t i = 0; i < n; ++i) {
    const Cpu& c = order[i];
    auto u = uses.find(c.id);
    const bool far = !near.empty() && std::find(near.begin(), near.end(), c.numa) == near.end();
    ranked.emplace_back(u == uses.end() ? 0 : u->second, far, (i + n - rotate % n) % n, c.id);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<int> out;
  for (size_t i = 0; i < ranked.size() && out.size() < static_cast<size_t>(std::max(count, 0)); ++i)
    out.push_back(std::get<3>(ranked[i]));
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<CpuBind> CpuBind::Parse(std::string_view text, std::string& why) {
  // As Slurm's srun reads it: a comma followed by a digit goes on with a list.
  std::vector<std::string> options;
  for (std::string_view piece : Split(text, ',')) {
    if (!options.empty() && !piece.empty() && std::isdigit(static_cast<unsigned char>(piece[0])) &&
        options.back().find(':') != std::string::npos) {
      options.back() += "," + std::string(piece);
    } else {
      options.emplace_back(piece);
    }
  }
  static const std::map<std::string, Kind, std::less<>> kWords = {
      {"no", Kind::kNone},           {"none", Kind::kNone},        {"threads", Kind::kThreads},
      {"cores", Kind::kCores},       {"sockets", Kind::kSockets},  {"ldoms", Kind::kLdoms},
      {"boards", Kind::kBoards},     {"rank", Kind::kRank},        {"rank_ldom", Kind::kRankLdom},
      {"map_cpu", Kind::kMapCpu},    {"mask_cpu", Kind::kMaskCpu}, {"map_ldom", Kind::kMapLdom},
      {"mask_ldom", Kind::kMaskLdom}};
  CpuBind b;
  bool typed = false;
  for (const std::string& o : options) {
    if (o == "q" || o == "quiet") {
      b.verbose = false;
      continue;
    }
    if (o == "v" || o == "verbose") {
      b.verbose = true;
      continue;
    }
    const size_t colon = o.find(':');
    auto it = kWords.find(std::string_view(o).substr(0, colon));
    const bool listed = it != kWords.end() && it->second >= Kind::kMapCpu;
    if (it == kWords.end() || listed != (colon != std::string::npos)) {
      why = "unrecognized --cpu-bind argument \"" + o + "\"";
      return std::nullopt;
    }
    if (typed) {
      why = "--cpu-bind: one binding type, not two (\"" + std::string(text) + "\")";
      return std::nullopt;
    }
    typed = true;
    b.kind = it->second;
    if (listed) {
      const bool mask = b.kind == Kind::kMaskCpu || b.kind == Kind::kMaskLdom;
      auto list = ParseBindList(std::string_view(o).substr(colon + 1), mask);
      if (!list) {
        why = "--cpu-bind=" + o + ": " +
              (mask ? "give hexadecimal masks, e.g. mask_cpu:0x3,0xC"
                    : "give numbers, e.g. " + o.substr(0, colon) + ":0,2 or :0*2,1*2");
        return std::nullopt;
      }
      b.list = std::move(*list);
    }
  }
  return b;
}

std::string CpuBind::Type() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kThreads:
      return "threads";
    case Kind::kCores:
      return "cores";
    case Kind::kSockets:
      return "sockets";
    case Kind::kLdoms:
      return "ldoms";
    case Kind::kBoards:
      return "boards";
    case Kind::kRank:
      return "rank";
    case Kind::kRankLdom:
      return "rank_ldom";
    case Kind::kMapCpu:
      return "map_cpu:";
    case Kind::kMaskCpu:
      return "mask_cpu:";
    case Kind::kMapLdom:
      return "map_ldom:";
    case Kind::kMaskLdom:
      return "mask_ldom:";
  }
  return "none";
}

std::optional<std::vector<int>> TaskCpus(const CpuBind& bind, const CpuTopology& topology,
                                         const std::vector<int>& job_cpus, int local,
                                         int cpus_per_task, std::string_view distribution,
                                         std::string& why) {
  using Kind = CpuBind::Kind;
  // The job's CPUs with what sysfs says of them, in socket, core, thread order.
  std::vector<Cpu> job;
  for (const Cpu& c : topology.cpus) {
    if (job_cpus.empty() || std::find(job_cpus.begin(), job_cpus.end(), c.id) != job_cpus.end())
      job.push_back(c);
  }
  std::sort(job.begin(), job.end(), TopologyOrder);
  std::vector<int> all;
  for (const Cpu& c : job) all.push_back(c.id);
  std::sort(all.begin(), all.end());
  if (job.empty()) return all;
  const size_t t = static_cast<size_t>(std::max(local, 0));
  // The job's CPUs whose socket or NUMA node (`key`) is one of `keys`, and those whose
  // is one of those of `cpus`.
  auto on = [&](const std::set<int>& keys, int Cpu::*key) {
    std::vector<int> out;
    for (const Cpu& c : job) {
      if (keys.contains(c.*key)) out.push_back(c.id);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto widen = [&](const std::vector<int>& cpus, int Cpu::*key) {
    std::set<int> keys;
    for (int id : cpus) keys.insert(topology.Find(id)->*key);
    return on(keys, key);
  };
  auto entry = [&]() -> const std::vector<int>& { return bind.list[t % bind.list.size()]; };
  const std::string option = "--cpu-bind=" + bind.Type().substr(0, bind.Type().find(':'));
  switch (bind.kind) {
    case Kind::kNone:
    case Kind::kBoards:  // one board a node: all of the job's
      return all;
    case Kind::kRank:
      return std::vector<int>{all[t % all.size()]};
    case Kind::kRankLdom: {
      std::vector<int> numas;
      for (const Cpu& c : job) {
        if (std::find(numas.begin(), numas.end(), c.numa) == numas.end()) numas.push_back(c.numa);
      }
      return on({numas[t % numas.size()]}, &Cpu::numa);
    }
    case Kind::kMapCpu:
    case Kind::kMaskCpu: {
      std::vector<int> out;
      for (int id : entry()) {
        if (std::binary_search(all.begin(), all.end(), id)) out.push_back(id);
      }
      if (out.empty()) {
        why = option + ": task " + std::to_string(t) + "'s " +
              (bind.kind == Kind::kMapCpu ? "CPU " + std::to_string(entry()[0])
                                          : "mask " + CpuMask(entry())) +
              " is none of the job's CPUs on this node (" + FormatCpuList(all) + ")";
        return std::nullopt;
      }
      return out;
    }
    case Kind::kMapLdom:
    case Kind::kMaskLdom: {
      const std::vector<int> out = on({entry().begin(), entry().end()}, &Cpu::numa);
      if (out.empty()) {
        why = option + ": task " + std::to_string(t) + "'s NUMA node(s) " + FormatCpuList(entry()) +
              " hold none of the job's CPUs on this node (" + FormatCpuList(all) + ")";
        return std::nullopt;
      }
      return out;
    }
    case Kind::kThreads:
    case Kind::kCores:
    case Kind::kSockets:
    case Kind::kLdoms:
      break;
  }
  // Auto-generated masks, as task/affinity lays them out: each task takes its CPUs (threads,
  // or whole cores for the wider kinds) from the sockets, one socket after another (block),
  // the next socket for each next task (cyclic, the default) or for each CPU (fcyclic);
  // tasks beyond the CPUs start over.
  const size_t colon = distribution.find(':');
  std::string_view level = colon == std::string_view::npos ? "" : distribution.substr(colon + 1);
  level = level.substr(0, level.find_first_of(":,"));
  const bool by_thread = bind.kind == Kind::kThreads;
  std::vector<std::vector<std::vector<int>>> sockets;  // units (a thread, or a core) by socket
  int threads_per_core = 1;
  for (size_t i = 0; i < job.size(); ++i) {
    const bool new_socket = i == 0 || job[i].socket != job[i - 1].socket;
    if (new_socket) sockets.emplace_back();
    if (by_thread || new_socket || job[i].core != job[i - 1].core) sockets.back().emplace_back();
    sockets.back().back().push_back(job[i].id);
    threads_per_core = std::max(threads_per_core, static_cast<int>(sockets.back().back().size()));
  }
  const int c = std::max(1, cpus_per_task);
  const size_t need =
      static_cast<size_t>(by_thread ? c : (c + threads_per_core - 1) / threads_per_core);
  std::vector<size_t> next(sockets.size(), 0);  // each socket's next unit
  size_t socket = 0;                            // where the next task starts
  std::vector<int> mine;
  for (size_t task = 0; task <= t; ++task) {
    std::vector<int> got;
    size_t s = level == "block" ? 0 : socket;
    for (size_t taken = 0; taken < need; ++taken) {
      size_t tries = 0;
      while (next[s] >= sockets[s].size() && tries++ < sockets.size()) s = (s + 1) % sockets.size();
      if (tries > sockets.size()) {  // every CPU given out: start over
        std::fill(next.begin(), next.end(), 0);
        s = 0;
      }
      got.insert(got.end(), sockets[s][next[s]].begin(), sockets[s][next[s]].end());
      ++next[s];
      if (level == "fcyclic") s = (s + 1) % sockets.size();
    }
    socket = level == "fcyclic" ? s : (s + 1) % sockets.size();  // (fcyclic: moved on already)
    if (task == t) mine = std::move(got);
  }
  std::sort(mine.begin(), mine.end());
  mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  if (bind.kind == Kind::kSockets) return widen(mine, &Cpu::socket);
  if (bind.kind == Kind::kLdoms) return widen(mine, &Cpu::numa);
  return mine;
}

}  // namespace gantry
