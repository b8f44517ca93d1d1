// NodeBook: what gantryd knows of each node of the config beyond the core's ledger: its
// agent (up, last heard from, address, the GPUs and isolation it reported), a drain and
// who made it (NodeInfo), and the stops of jobs no config reads any more that still run
// there (UnreadStop). Whether the core may place work on a node follows from these
// (Usable); the controller tells the core when that changes. The store keeps each node's
// NodeInfo (the nodes table); the unread stops live in memory only.
// Thread-safety: none; the controller thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/types.h"
#include "proto/node.h"
#include "server/state.h"

namespace gantry::server {

// A worker of a job that failed at start because the config no longer reads it
// (--force-config), told to stop as a preemption would: the checkpoint signal, its grace,
// then SIGKILL. The core cannot hold a job it cannot read, so the node takes no new work
// until its agent reports the worker ended (or the node goes down, or the grace and the
// kill slack pass).
struct UnreadStop {
  core::NodeId node;
  std::string key;  // proto::WorkerKey
  std::shared_ptr<const proto::DesiredWorker> stop;
  core::Ticks deadline;
};

class NodeBook {
 public:
  // `nodes` nodes, none heard from, no unread stop.
  void Reset(size_t nodes) {
    nodes_.assign(nodes, NodeInfo{});
    unread_stops_.clear();
  }
  size_t size() const { return nodes_.size(); }
  NodeInfo& operator[](core::NodeId n) { return nodes_[n.v]; }
  const NodeInfo& operator[](core::NodeId n) const { return nodes_[n.v]; }
  const std::vector<NodeInfo>& all() const { return nodes_; }

  // Whether the core may place work on node n: its agent is up, it is not drained and no
  // unread stop holds it. (Going down for a drain, the jobs there keep running.)
  bool Usable(core::NodeId n) const {
    const NodeInfo& info = nodes_[n.v];
    return info.up && !info.drained && !HeldByUnreadStop(n);
  }
  int Up() const;
  // The nodes up whose agent was last heard from more than `timeout` before `now`.
  std::vector<core::NodeId> Silent(core::Ticks now, core::Ticks timeout) const;
  // Every node up counts as heard from at `now` (a full timeout to report again after a
  // store outage held their heartbeats, or a restart).
  void HeardAll(core::Ticks now);

  const std::vector<UnreadStop>& unread_stops() const { return unread_stops_; }
  void AddUnreadStop(UnreadStop u) { unread_stops_.push_back(std::move(u)); }
  bool HeldByUnreadStop(core::NodeId n) const;
  // Drops node n's unread stops that `gone` selects; true when any went.
  bool EndUnreadStops(core::NodeId n, const std::function<bool(const UnreadStop&)>& gone);
  // The nodes with an unread stop that `past` selects.
  std::vector<core::NodeId> WithUnreadStops(
      const std::function<bool(const UnreadStop&)>& past) const;

 private:
  std::vector<NodeInfo> nodes_;  // by core NodeId
  std::vector<UnreadStop> unread_stops_;
};

}  // namespace gantry::server
