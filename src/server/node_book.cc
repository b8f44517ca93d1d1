#include "server/node_book.h"

#include <algorithm>
#include <set>

namespace gantry::server {

int NodeBook::Up() const {
  return static_cast<int>(
      std::count_if(nodes_.begin(), nodes_.end(), [](const NodeInfo& n) { return n.up; }));
}

std::vector<core::NodeId> NodeBook::Silent(core::Ticks now, core::Ticks timeout) const {
  std::vector<core::NodeId> out;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].up && now - nodes_[i].last_seen > timeout) out.emplace_back(i);
  }
  return out;
}

void NodeBook::HeardAll(core::Ticks now) {
  for (NodeInfo& info : nodes_) {
    if (info.up) info.last_seen = std::max(info.last_seen, now);
  }
}

bool NodeBook::HeldByUnreadStop(core::NodeId n) const {
  return std::any_of(unread_stops_.begin(), unread_stops_.end(),
                     [n](const UnreadStop& u) { return u.node == n; });
}

bool NodeBook::EndUnreadStops(core::NodeId n, const std::function<bool(const UnreadStop&)>& gone) {
  return std::erase_if(unread_stops_, [&](const UnreadStop& u) { return u.node == n && gone(u); }) >
         0;
}

std::vector<core::NodeId> NodeBook::WithUnreadStops(
    const std::function<bool(const UnreadStop&)>& past) const {
  std::set<uint32_t> nodes;
  for (const UnreadStop& u : unread_stops_) {
    if (past(u)) nodes.insert(u.node.v);
  }
  return {nodes.begin(), nodes.end()};
}

}  // namespace gantry::server
