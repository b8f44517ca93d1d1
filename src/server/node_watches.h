// NodeWatches: the agents' watches (GET /v1/agents/NODE/watch, a long poll). Each node has
// a version that every change to what it should run moves on (Bump); a watch holding the
// current version is parked until the version moves or its deadline passes, and is then
// answered with what the node should run now (one answer serves every watch of a node).
// Thread-safety: none; the controller thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/model/types.h"
#include "server/api_backend.h"

namespace gantry::server {

class NodeWatches {
 public:
  // `nodes` nodes at version 0, no watch parked.
  void Reset(size_t nodes) {
    versions_.assign(nodes, 0);
    parked_.assign(nodes, {});
  }
  int64_t version(core::NodeId n) const { return versions_[n.v]; }
  void Bump(core::NodeId n) { ++versions_[n.v]; }
  const std::vector<int64_t>& versions() const { return versions_; }
  // After the state was read again (a store outage): each node's version moves past the
  // one it had `before`, so that an answer sent before is older than any sent after.
  void MoveOn(const std::vector<int64_t>& before) {
    for (size_t i = 0; i < versions_.size() && i < before.size(); ++i) versions_[i] = before[i] + 1;
  }

  // A watch of node n that holds `version`, answered through `done` by `deadline` at the
  // latest.
  void Park(core::NodeId n, Done done, int64_t version, core::Ticks deadline) {
    parked_[n.v].push_back(Watch{std::move(done), version, deadline});
  }
  // Answers the watches whose node's version moved or whose deadline passed, with
  // `answer(node)`; the others stay parked.
  void AnswerDue(core::Ticks now, const std::function<Reply(core::NodeId)>& answer) {
    for (uint32_t i = 0; i < parked_.size(); ++i) {
      std::vector<Watch>& ws = parked_[i];
      if (ws.empty()) continue;
      std::optional<Reply> reply;  // one answer serves every watch of the node
      auto keep = ws.begin();
      for (auto it = ws.begin(); it != ws.end(); ++it) {
        if (it->version != versions_[i] || now >= it->deadline) {
          if (!reply) reply = answer(core::NodeId(i));
          it->done(*reply);
        } else {
          if (keep != it) *keep = std::move(*it);
          ++keep;
        }
      }
      ws.erase(keep, ws.end());
    }
  }
  // Answers every parked watch with `reply` (shutting down, a store outage).
  void AnswerAll(const Reply& reply) {
    for (std::vector<Watch>& ws : parked_) {
      for (Watch& w : ws) w.done(reply);
      ws.clear();
    }
  }

 private:
  struct Watch {
    Done done;
    int64_t version = 0;
    core::Ticks deadline = 0;
  };
  std::vector<int64_t> versions_;           // by NodeId
  std::vector<std::vector<Watch>> parked_;  // by NodeId
};

}  // namespace gantry::server
