// Attained-service orders (Tiresias, NSDI'19): a queue may order its own pending jobs
// by the service they have had rather than by arrival, so short jobs get through fast
// without anyone's runtime estimate.
//   las:     2D least-attained-service: GPUs x seconds run so far, discretised into
//            levels by `policy.las_thresholds_gpu_s`; lower levels first, arrival order
//            within a level.
//   gittins: the Gittins index of the service a job has had so far (run time, work lost
//            to preemptions included), from the queue's own distribution of completed
//            run times: the highest chance of finishing soon per second of service first.
// A pending job may preempt a running job of its own queue whose rank is worse (see
// GantryPolicy), only at the victim's checkpoints.
#pragma once

#include <span>
#include <vector>

#include "core/model/types.h"

namespace gantry::core {

// The Gittins index of a job that has done `attained` of work, given the run times of
// completed jobs `sorted` (ascending): max over d of P(S <= a + d | S > a) /
// E[min(S - a, d) | S > a], the d ranging over the samples above a. In 1/ticks; 0 when
// no sample lies above `attained` (the job has outlived every job seen: a bad bet).
double GittinsIndex(std::span<const Ticks> sorted, Ticks attained);

// The LAS level of `gpu_seconds` of attained service: how many thresholds it has
// reached (thresholds ascending).
int LasLevel(std::span<const double> thresholds_gpu_s, double gpu_seconds);

}  // namespace gantry::core
