// A node's CPUs and how a job's tasks are bound to them, as Slurm's task/affinity and
// task/cgroup plugins do it:
//  - each job holds whole CPUs on a node (SLURM_CPUS_ON_NODE of them), which gantry-agent
//    picks from the CPUs it may use (PickCpus) and confines the job's processes to;
//  - `srun --cpu-bind=TYPE` binds each task of a step to a part of them (TaskCpus), laid
//    out over the sockets as the second level of `--distribution` says (Slurm's default:
//    cyclic), in blocks of `--cpus-per-task`.
// srun checks the option (CpuBind::Parse) where the user typed it; gantry-agent reads it
// again from the task's SLURM_CPU_BIND and binds. Written here: no Debian library reads
// Slurm's option, and hwloc's binding would add a dependency for a few sysfs files.
// Thread-safety: value types and pure functions (CpuTopology::Read reads files).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry {

// CPU ids as Linux lists them ("0-3,8,10-11"): sorted, each once; nullopt when not one.
std::optional<std::vector<int>> ParseCpuList(std::string_view text);
std::string FormatCpuList(const std::vector<int>& cpus);
// As a hexadecimal mask, Slurm's way: "0x3" for CPUs 0 and 1 ("0x0" for none).
std::string CpuMask(const std::vector<int>& cpus);
// A mask as Slurm's --cpu-bind=mask_cpu takes it: hexadecimal, "0x" optional.
std::optional<std::vector<int>> ParseCpuMask(std::string_view text);

struct Cpu {
  int id = 0;
  int socket = 0;  // physical package
  int core = 0;    // unique on the node: CPUs with the same are one core's threads
  int numa = 0;    // NUMA node (a "locality domain", Slurm's ldom)
};

struct CpuTopology {
  std::vector<Cpu> cpus;  // by id
  // The CPUs of `allowed` as Linux's sysfs under `root` (/sys/devices/system) describes
  // them; one missing there gets socket, core and NUMA node 0, its own core.
  static CpuTopology Read(const std::string& root, const std::vector<int>& allowed);
  // The CPUs this process may run on (sched_getaffinity), empty when it cannot tell.
  static std::vector<int> Allowed();
  const Cpu* Find(int id) const;
};

// `count` CPUs for a job, from those used by the fewest jobs (`uses`, by id), then on the
// NUMA nodes in `near` (its GPUs'), then whole cores and sockets in order, starting at the
// `rotate`-th CPU of that order (0 on a real node: emulated nodes sharing one machine
// spread over it). All of them, when `count` is at least as many. Sorted.
std::vector<int> PickCpus(const CpuTopology& topology, const std::map<int, int>& uses, int count,
                          const std::vector<int>& near, size_t rotate);

// srun --cpu-bind (and SLURM_CPU_BIND): [quiet|verbose,]TYPE, where TYPE is none (no),
// threads, cores, sockets, ldoms, boards, rank, rank_ldom, map_cpu:LIST, mask_cpu:LIST,
// map_ldom:LIST or mask_ldom:LIST (a LIST's entries may repeat as ID*COUNT), as Slurm
// 22.05's srun takes it.
struct CpuBind {
  enum class Kind : uint8_t {
    kNone,
    kThreads,
    kCores,
    kSockets,
    kLdoms,
    kBoards,
    kRank,
    kRankLdom,
    kMapCpu,
    kMaskCpu,
    kMapLdom,
    kMaskLdom
  };
  Kind kind = Kind::kNone;
  bool verbose = false;
  // map_* and mask_*: by task (its local id, cycled): CPU ids or NUMA node ids.
  std::vector<std::vector<int>> list;
  // nullopt with `why` set (Slurm's words where it has them) when `text` is not one.
  static std::optional<CpuBind> Parse(std::string_view text, std::string& why);
  // SLURM_CPU_BIND_TYPE's value: "cores", "map_cpu:", ... as Slurm's srun exports it.
  std::string Type() const;
};

// The CPUs task `local` (its id among the step's tasks on this node) is bound to, of the
// job's `job_cpus` there, with `cpus_per_task` each; `distribution` is the step's
// SLURM_DISTRIBUTION ("block:cyclic": the part after the first ':' lays the tasks over the
// sockets; cyclic when not given). A map or mask that names none of the job's CPUs is an
// error (`why`), as is one that names a CPU or NUMA node the node lacks.
std::optional<std::vector<int>> TaskCpus(const CpuBind& bind, const CpuTopology& topology,
                                         const std::vector<int>& job_cpus, int local,
                                         int cpus_per_task, std::string_view distribution,
                                         std::string& why);

}  // namespace gantry
