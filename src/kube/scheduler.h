// KubeScheduler: Gantry as a scheduler for Kubernetes (gantryd --kubernetes,
// docs/kubernetes.md). It watches nodes, every pod (what other schedulers' pods hold
// counts as used) and scheduling.x-k8s.io PodGroups, feeds the same core as gantryd's
// agents (queues, tiers, gangs, topology, backfill, preemption), and writes back what
// the core decides: bindings (a gang's pods in one pass), evictions of the pods it
// placed, and PodScheduled=False with the wait reason.
//
// Threads: one per watched resource (list, then watch from its resourceVersion; relist
// after 410 Gone; backoff on errors), each with its own connection, handing events to
// the scheduling thread, which alone owns the state and the core and writes to the API.
// The node list the core sees is rebuilt (Scheduler + Adopt of what runs) when nodes
// join, leave or change, or a pod selects nodes in a way no pool yet tells apart.
// State: what Kubernetes records (pods, bindings, groups) is read back from the API on
// start; a gang found partly bound (a crash between its bindings) has its bound pods
// evicted, so its controller recreates them and the gang is placed whole.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "kube/client.h"
#include "kube/lease.h"
#include "server/store.h"
#include "spec/config_reader.h"

namespace gantry::kube {

struct SchedulerOptions {
  std::string policy = "gantry";
  // Seconds between passes while nothing happens (time-based work: windows, aging).
  double idle_pass_s = 1.0;
  // Replicas elect a leader through this Lease; only the leader schedules. `elect` false:
  // no election (one replica, or tests).
  bool elect = true;
  LeaseOptions lease;
  // HOST:PORT for gantryd's HTTP API (empty: none; port 0: any free port): GET /healthz,
  // GET /metrics, and with `store` the reads of /v1 (jobs, a job, queues).
  std::string listen;
  // gantryd's store (--db): its tokens, and the console's sessions kept in it, say who
  // calls /v1; nullptr: /v1 is not served. Used from one thread at a time.
  server::Store* store = nullptr;
  // The scheduling thread's own connection to that store (nullptr: none): Gantry's
  // accounting in this mode, a run row per bound pod (server/accounts.h), from which
  // gantry usage answers and fair share and budgets go on after a restart.
  server::Store* ledger = nullptr;
};

// Runs until `stop`; 0 after a clean stop, 1 when the API server cannot be used or the
// leader lease was lost (a replica that lost it exits, to come back as a standby).
int RunScheduler(const spec::ClusterConfig& config, const Credentials& creds,
                 const SchedulerOptions& options, const std::atomic<bool>& stop);

}  // namespace gantry::kube
