// Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection
// does it for kube-scheduler: the holder renews the Lease every retry period; another
// replica takes it over once it has seen the same record unchanged for the lease's
// duration (its own clock, never the holder's timestamps, so clock skew does not matter);
// writes carry the resourceVersion read, so two replicas never both win. A holder that
// cannot renew within the renew deadline stops leading (gantryd then exits, to be
// restarted as a standby).
// Thread-safety: one LeaseElector per thread.
#pragma once

#include <atomic>
#include <string>

#include "kube/client.h"

namespace gantry::kube {

struct LeaseOptions {
  std::string ns = "kube-system";
  std::string name = "gantry-scheduler";
  std::string identity;  // this replica's; unique (host name and a random suffix)
  int duration_s = 15;
  int renew_deadline_s = 10;
  int retry_s = 2;
};

class LeaseElector {
 public:
  LeaseElector(Client& client, LeaseOptions options);
  // Blocks until this replica holds the Lease (true) or `stop` (false).
  bool Acquire(const std::atomic<bool>& stop);
  // Renews until `stop` or until a renewal could not be made within the renew deadline
  // (returns false: leadership lost). Gives the Lease up on `stop` (returns true).
  bool KeepRenewing(const std::atomic<bool>& stop);
  const LeaseOptions& options() const { return options_; }

 private:
  enum class Try { kHeld, kTaken, kError };
  Try TryAcquireOrRenew();
  void Release();

  Client& client_;
  LeaseOptions options_;
  std::string collection_, path_;  // the namespace's leases; this Lease
  std::string label_;              // namespace/name, for the log
  std::string observed_;           // the holder, renewTime and transitions last seen
  int64_t observed_at_ms_ = 0;     // when (steady clock) it last changed
  std::string resource_version_;
  int transitions_ = 0;
};

}  // namespace gantry::kube
