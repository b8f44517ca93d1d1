// ServerList: the gantryd URLs a client may use ("http://a:8080,http://b:8080", as given
// to --server or GANTRY_SERVER) and which one to use now. With a standby gantryd on
// PostgreSQL, only the leader serves; a standby answers 503 naming the leader, and a
// client that cannot reach its server, or is told of a leader, moves on. Shared by the
// CLI and gantry-agent. Thread-safety: none.
#pragma once

#include <string>
#include <vector>

namespace gantry {

class ServerList {
 public:
  explicit ServerList(const std::string& spec) {
    size_t start = 0;
    while (start <= spec.size()) {
      size_t end = spec.find(',', start);
      if (end == std::string::npos) end = spec.size();
      std::string url = spec.substr(start, end - start);
      while (!url.empty() && url.back() == '/') url.pop_back();
      if (!url.empty())
        urls_.push_back(url.find("://") == std::string::npos ? "http://" + url : url);
      start = end + 1;
    }
    if (urls_.empty()) urls_.push_back("http://127.0.0.1:8080");
  }
  const std::string& current() const { return urls_[at_]; }
  size_t size() const { return urls_.size(); }
  const std::vector<std::string>& urls() const { return urls_; }
  // The current server failed or is a standby: use the leader it named (added if it is
  // not in the list), else the next URL.
  void Failed(const std::string& leader = "") {
    if (!leader.empty()) {
      for (size_t i = 0; i < urls_.size(); ++i) {
        if (urls_[i] == leader) {
          at_ = i;
          return;
        }
      }
      urls_.push_back(leader);
      at_ = urls_.size() - 1;
      return;
    }
    at_ = (at_ + 1) % urls_.size();
  }

 private:
  std::vector<std::string> urls_;
  size_t at_ = 0;
};

}  // namespace gantry
