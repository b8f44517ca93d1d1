#include "cli/trace_commands.h"

#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <iostream>
#include <memory>

#include "cli/exit_codes.h"
#include "sim/convert/convert.h"
#include "sim/gen/generator.h"

namespace gantry::cli {
namespace {

int ExitFor(const Error& e) { return e.field == "--out" ? kExitRunFailure : kExitBadInput; }

template <typename Map>
void PrintCounts(const char* label, const Map& counts) {
  for (const auto& [reason, n] : counts)
    std::cout << fmt::format("  {:<16} {:>9}  {}\n", label, n, reason);
}

void PrintTrace(const convert::TraceStats& t) {
  std::cout << fmt::format(
      "  jobs written     {:>9}  ({:.1f} GPU-hours offered, largest job {} GPUs)\n", t.jobs,
      t.gpu_hours, convert::Num(t.max_job_gpus));
  if (t.jobs > 0) {
    std::cout << fmt::format("  submit span      {:>9}  s ({:.1f} days)\n",
                             convert::Num(t.last_submit - t.first_submit, 0),
                             (t.last_submit - t.first_submit) / 86400);
  }
}

struct ConvertArgs {
  convert::ConvertOptions options;
  bool quiet = false;
};

int RunConvert(const ConvertArgs& a) {
  Result<convert::ConvertSummary> r = convert::Convert(a.options);
  if (!r.ok()) {
    std::cerr << "gantry trace convert: " << r.error().ToString() << "\n";
    return ExitFor(r.error());
  }
  if (a.quiet) return 0;
  const convert::ConvertSummary& s = *r;
  std::cout << fmt::format("gantry trace convert: {} -> {}\n", a.options.format, a.options.out);
  std::cout << fmt::format("  rows read        {:>9}\n", s.rows);
  PrintTrace(s.trace);
  std::cout << fmt::format("  cluster          {:>9}  GPUs on {} nodes\n", s.cluster_gpus,
                           s.cluster_nodes);
  PrintCounts("dropped", s.dropped);
  PrintCounts("adjusted", s.adjusted);
  for (const std::string& f : s.files) std::cout << "  wrote            " << f << "\n";
  return 0;
}

struct GenArgs {
  gen::GenOptions options;
  std::string mix;
  bool quiet = false;
};

int RunGen(GenArgs a) {
  Result<gen::Mix> mix = gen::ParseMix(a.mix);
  if (!mix.ok()) {
    std::cerr << "gantry gen: " << mix.error().ToString() << "\n";
    return kExitBadInput;
  }
  a.options.mix = *mix;
  Result<gen::GenSummary> r = gen::Generate(a.options);
  if (!r.ok()) {
    std::cerr << "gantry gen: " << r.error().ToString() << "\n";
    return ExitFor(r.error());
  }
  const gen::GenSummary& s = *r;
  // Each kind meets its share to within one job; on a small cluster or a short period one
  // job can be a large part of the load, and the workload is not what was asked. Say so.
  const double offered = s.offered_load(), asked = a.options.load;
  if (asked > 0 && std::abs(offered - asked) > 0.1 * asked) {
    std::cerr << fmt::format(
        "gantry gen: warning: offered load {:.3f}, not the {:.3f} asked (--load): on {} GPUs over "
        "{:g} days a "
        "single job of the mix is a large part of the load, and each kind can only be met to "
        "within one job; "
        "use more --gpus or --days, or another --seed\n",
        offered, asked, s.gpus, a.options.days);
  }
  if (a.quiet) return 0;
  std::cout << fmt::format("gantry gen: seed {} -> {}\n", a.options.seed, a.options.out);
  std::cout << fmt::format("  cluster          {:>9}  GPUs on {} nodes\n", s.gpus, s.nodes);
  PrintTrace(s.trace);
  std::cout << fmt::format("  offered load     {:>9.3f}  of {:.0f} GPU-hours\n", s.offered_load(),
                           s.capacity_gpu_hours);
  for (const auto& [kind, k] : s.kinds) {
    std::cout << fmt::format("  {:<16} {:>9}  jobs, {:.1f} GPU-hours\n", kind, k.jobs, k.gpu_hours);
  }
  std::cout << fmt::format("  failures         {:>9}\n", s.failures);
  for (const std::string& f : s.files) std::cout << "  wrote            " << f << "\n";
  return 0;
}

}  // namespace

void AddTraceCommands(CLI::App& app, int& exit_code) {
  // The option structs live as long as the app: CLI11 writes into them while parsing.
  auto conv = std::make_shared<ConvertArgs>();
  CLI::App* trace = app.add_subcommand("trace", "Work with public GPU-cluster traces");
  trace->require_subcommand(1);
  CLI::App* c = trace->add_subcommand(
      "convert", "Convert a public trace to cluster.yaml + trace.jsonl (docs/traces.md)");
  convert::ConvertOptions& o = conv->options;
  std::string formats;
  for (const std::string& f : convert::Formats()) {
    if (!formats.empty()) formats += ", ";
    formats += f;
  }
  c->add_option("--format", o.format, "Source format: " + formats)->required();
  c->add_option("-i,--input,inputs", o.inputs,
                "Job files of the source (gavel: a seed=N folder or its <vc>.trace.gz files)");
  c->add_option("--out", o.out, "Folder to write cluster.yaml and trace.jsonl to")->required();
  c->add_option("--node-list", o.node_list, "openb: openb_node_list_*.csv");
  c->add_option("--fill", o.fill,
                "openb: FGD fill mode, sample pods until this multiple of capacity");
  c->add_option("--seed", o.seed, "openb --fill: sampling seed");
  c->add_option("--throughputs", o.throughputs, "gavel: simulation_throughputs.json(.gz)");
  c->add_option("--worker-type", o.worker_type, "gavel: throughput column (v100, p100, k80)")
      ->capture_default_str();
  c->add_option("--profiles", o.profiles, "pollux/sia: folder of per-application profiles");
  c->add_option("--elastic", o.elastic_checkpoint_s,
                "pollux/sia: jobs of several workers elastic down to one, at their profile's "
                "speed at each size (speedup), checkpointing every this many seconds");
  c->add_option("--cluster-spec", o.cluster_spec, "tiresias: cluster spec CSV (e.g. n32g4.csv)");
  c->add_option("--nodes", o.nodes, "Cluster size in nodes (default: per format, see docs)");
  c->add_option("--duration-s", o.duration_s,
                "kubernetes: the run time of a pod that gives none (gantry.dev/runtime-estimate-s)")
      ->capture_default_str();
  c->add_option("--cluster-scale", o.cluster_scale, "pollux/sia: multiply the default cluster");
  c->add_option("--limit", o.limit, "Keep only the first N jobs in submit order");
  c->add_option("--name", o.name, "Cluster name in cluster.yaml");
  c->add_flag("-q,--quiet", conv->quiet, "Print no summary");
  c->callback([conv, &exit_code] {
    exit_code = Guard("gantry trace convert", [&] { return RunConvert(*conv); });
  });

  auto gen_args = std::make_shared<GenArgs>();
  gen::GenOptions& g = gen_args->options;
  CLI::App* gen = app.add_subcommand("gen", "Generate a synthetic cluster, trace and failures");
  gen->add_option("--seed", g.seed, "Random seed (required: same seed, same files)")->required();
  gen->add_option("--gpus", g.gpus, "GPUs in the cluster (whole 8-GPU nodes)")
      ->capture_default_str();
  gen->add_option("--days", g.days, "Length of the arrival period in days")->capture_default_str();
  gen->add_option("--load", g.load, "Offered GPU-hours over capacity GPU-hours")
      ->capture_default_str();
  gen->add_option("--out", g.out, "Folder to write cluster.yaml, trace.jsonl, failures.jsonl to")
      ->required();
  gen->add_option("--mix", gen_args->mix,
                  "Shares of the load, e.g. realtime=0.15,batch=0.15,training=0.45,notebook=0.07,"
                  "sweep=0.08,finetune=0.1 (also gang, small, scavenger: none by default)");
  gen->add_option("--teams", g.teams, "Research teams (child queues)")->capture_default_str();
  gen->add_option("--spot", g.spot, "Share of GPU nodes in a spot pool (0: none)")
      ->capture_default_str();
  gen->add_option("--cpu-nodes", g.cpu_nodes, "CPU-only nodes (default: 1 per 128 GPUs)");
  gen->add_option("--node-failures-per-day", g.node_failures_per_day,
                  "Failures per GPU node per day")
      ->capture_default_str();
  gen->add_option("--spot-revocations-per-day", g.spot_revocations_per_day,
                  "Revocations per day across the spot pool")
      ->capture_default_str();
  gen->add_option("--reclaim-idle-after", g.reclaim_idle_after_s,
                  "policy.reclaim_idle_after_s of the cluster (0: never)")
      ->capture_default_str();
  gen->add_flag("--observed-usage", g.observed_usage,
                "Trace lines carry observed usage (util, vram_used_gb) for right-sizing figures");
  gen->add_flag("--guarantees-by-model", g.guarantees_by_model,
                "Guarantees per GPU model: serving's on A100, research's on H100");
  gen->add_option("--leaf-nodes", g.leaf_nodes, "Nodes per InfiniBand leaf in each GPU pool")
      ->capture_default_str();
  gen->add_flag("--equal-teams", g.equal_teams, "Research teams of equal weight");
  gen->add_option("--gang-nodes", g.gang_nodes,
                  "The gang kind's sizes in nodes, e.g. 3,6 (default: 2, 4, ... up to half the "
                  "H100 pool)")
      ->delimiter(',');
  gen->add_option("--checkpoint-s", g.checkpoint_s,
                  "Checkpoint intervals the gang, small and scavenger kinds draw from, e.g. "
                  "0,600,3600 (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  gen->add_option("--elastic", g.elastic,
                  "Share (0..1) of the checkpointing whole-GPU gangs made elastic, min_replicas "
                  "half their replicas; the rest of the workload is unchanged")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  gen->add_flag("-q,--quiet", gen_args->quiet, "Print no summary");
  gen->callback([gen_args, &exit_code] {
    exit_code = Guard("gantry gen", [&] { return RunGen(*gen_args); });
  });
}

}  // namespace gantry::cli
