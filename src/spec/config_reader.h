// Reads the cluster config (spec section 1) into core value types.
//
// Unknown fields, wrong types and impossible values are reported with file, line and
// field; reading goes on so every problem is reported at once. On any problem the
// result is empty.
// Thread-safety: stateless functions.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/cluster.h"
#include "core/model/queue.h"
#include "core/scheduler.h"
#include "spec/diagnostics.h"

namespace gantry::spec {

// The config's `policy` section. Keys are the PolicyParams fields, times in seconds:
// reclaim_idle_after_s (0 = never), fairshare_half_life_s, aging_s,
// min_run_before_repreempt_s, backfill_depth, default_runtime_estimate_s. Absent keys
// keep PolicyParams' defaults. default_grace_s is not the core's: it is the grace a job
// spec (an API request, a job file) gets when it gives no grace_s, as Slurm's KillWait
// and Kubernetes' terminationGracePeriodSeconds (30 s); trace lines keep what they
// record (0 when absent), so replayed workloads do not change under it.
// The config's `accounting` section fills params.gpu_hour_price (`gpu_hour_prices`, a
// price per GPU-hour by model, 1 where absent; it weighs budgets and makes costs) and
// `currency` (a label for reports).
// max_grace_s caps the grace a job may ask for, per tier (a number for every tier, or
// `{critical: 600, standard: 600, best-effort: 60}`): a job spec asking more is refused,
// a trace line's grace is cut to it, and so is default_grace_s. A preempted or cancelled
// job keeps its GPUs for its grace, so without a cap a team could hold them for years.
struct PolicyConfig {
  core::PolicyParams params;
  int64_t default_grace = 30'000;                                                    // ms (Ticks)
  std::array<core::Ticks, core::kTierCount> max_grace = {600'000, 600'000, 60'000};  // by Tier
  std::string currency;
};

// The config's `site` section: how this site's names and places map onto Gantry's.
// workdir_roots: the directories under which a job may name its workdir (absent: any
// absolute path outside the system's own directories, /etc, /usr, /proc and the like).
struct SiteConfig {
  std::optional<std::vector<std::string>> workdir_roots;
  // The most active jobs (pending, held, running or stopping; each array task one) a team
  // may have: a submit that would pass it is refused (Slurm's MaxSubmitJobs). 0: no cap.
  int64_t max_active_jobs_per_team = 0;
  // Slurm's names for Gantry's (`gantry sbatch` scripts as written; docs/slurm.md): --qos
  // values to tiers (as kubernetes.priority_classes does for pods; `normal` is standard
  // unless listed), --gres GPU types to catalog models (besides the models' own names,
  // case-insensitive, and NVML's long names), partitions to pools, accounts to queues.
  // gantryd resolves them where a job names a tier, gpu_model, pool or queue.
  std::vector<std::pair<std::string, core::Tier>> qos;
  std::vector<std::pair<std::string, core::ModelMask>> gpu_types;  // lower-case alias
  std::vector<std::pair<std::string, core::PoolId>> partitions;
  std::optional<core::PoolId> default_partition;  // an sbatch job without -p runs there
  std::vector<std::pair<std::string, core::QueueId>> accounts;
  // A job that names no queue (sbatch without -A) goes there: Slurm's default account.
  std::optional<core::QueueId> default_account;
  // Node features per pool (Slurm's node Features, sbatch --constraint), by pool id.
  std::vector<std::pair<core::PoolId, std::vector<std::string>>> features;
  // Resource limits a job does not take from its submitter unless it names them with
  // --propagate (Slurm's PropagateResourceLimitsExcept; base/rlimits.h names them).
  // MEMLOCK by default, where Slurm excepts none: a login shell's locked-memory limit would
  // keep InfiniBand and NCCL from registering memory (NVIDIA's DeepOps excepts it too).
  std::vector<std::string> propagate_resource_limits_except = {"MEMLOCK"};
  // A batch job whose dependency can never be met (a job it waits to succeed failed) is
  // cancelled, where Slurm's default (and Gantry's, for sbatch jobs) leaves it pending,
  // DependencyNeverSatisfied, until cancelled: Slurm's SchedulerParameters=kill_invalid_depend.
  // sbatch --kill-on-invalid-dep=yes|no decides for its job. Native jobs (gantry submit
  // --after) are always cancelled.
  bool kill_invalid_depend = false;
};

// The models `name` means on this site: a catalog model's name (any case), an alias of
// site.gpu_types, or a product name as NVML and Slurm's gres.conf write it
// (nvidia_h100_80gb_hbm3, NVIDIA A100-SXM4-40GB, a100: every A100 the catalog has). 0: none.
core::ModelMask GpuModelsNamed(std::string_view name, const core::Catalog& catalog,
                               const SiteConfig& site);

// The config's `kubernetes` section (gantryd --kubernetes, docs/kubernetes.md): how pods
// map onto queues and tiers. With it, `pools` may be left out: the nodes come from the
// API server.
struct KubernetesConfig {
  bool present = false;
  std::string scheduler_name = "gantry";  // pods with this spec.schedulerName are ours
  // namespace -> queue; namespaces not listed go to default_queue (none: their pods wait
  // with a message saying so).
  std::vector<std::pair<std::string, core::QueueId>> namespaces;
  std::optional<core::QueueId> default_queue;
  // priorityClassName -> tier; pods naming no class, or one not listed, are standard.
  std::vector<std::pair<std::string, core::Tier>> priority_classes;
  // The node label naming a node's InfiniBand leaf (its value is the leaf); empty: each
  // group of like nodes is one leaf.
  std::string leaf_label;
  // Pools by label: a node goes to the first pool whose node_labels it all has, and its
  // pool takes that name (split by shape where its nodes differ) and these properties;
  // other nodes are grouped by shape alone.
  struct Pool {
    std::string name;
    std::vector<std::pair<std::string, std::string>> node_labels;
    bool spot = false;       // preemptible nodes: critical work is never placed there
    int nvlink_domains = 0;  // GPUs of a node split evenly into this many (0: the node's own)
  };
  std::vector<Pool> pools;
};

struct ClusterConfig {
  core::Cluster cluster;
  core::QueueTree queues;
  PolicyConfig policy;
  SiteConfig site;
  KubernetesConfig kubernetes;
};

// Why `path` is not an absolute path free of `..` (for roots and workdirs).
std::optional<std::string> WhyNotAPlainAbsolutePath(std::string_view path);
// Why a job may not have `workdir` on this site (issue 47 B4: `../..` ran in /, and /etc
// was accepted), or nullopt.
std::optional<std::string> WhyWorkdirRefused(std::string_view workdir, const SiteConfig& site);

std::optional<ClusterConfig> ReadClusterConfig(const std::string& path, Diagnostics& diags);
// A config to read job specs against where the real one is missing or no longer fits
// them: no nodes, the built-in GPU catalog, and one top-level queue per name given
// (`gantry validate` without a config; a job --force-config fails, read as written).
std::optional<ClusterConfig> StandInConfig(const std::vector<std::string>& queue_names);
// `file` labels diagnostics.
std::optional<ClusterConfig> ParseClusterConfig(std::string_view yaml_text, const std::string& file,
                                                Diagnostics& diags);

}  // namespace gantry::spec
