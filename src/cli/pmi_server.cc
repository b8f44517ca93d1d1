#include "cli/pmi_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>

namespace gantry::cli {

namespace {

// PMI-1's limits, as Hydra gives them.
constexpr int kKvsNameMax = 256, kKeyMax = 64, kValueMax = 1024;
constexpr size_t kMaxFrame = 64 * 1024;  // PMI-2's longest command
constexpr int kSendTimeoutS = 10;

// "cmd=put kvsname=K key=X value=V" -> its fields (values hold no spaces in PMI-1).
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> f;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t end = line.find(' ', i);
    if (end == std::string::npos) end = line.size();
    const std::string word = line.substr(i, end - i);
    if (const size_t eq = word.find('='); eq != std::string::npos)
      f[word.substr(0, eq)] = word.substr(eq + 1);
    i = end;
  }
  return f;
}

// PMI-2's fields: "cmd=kvs-put;key=K;value=V;", a ';' within a value doubled.
std::map<std::string, std::string> Fields2(const std::string& frame) {
  std::map<std::string, std::string> f;
  std::string key, value;
  bool in_value = false;
  for (size_t i = 0; i < frame.size(); ++i) {
    const char ch = frame[i];
    if (!in_value) {
      if (ch == '=') {
        in_value = true;
      } else {
        key += ch;
      }
    } else if (ch == ';' && i + 1 < frame.size() && frame[i + 1] == ';') {
      value += ';';
      ++i;
    } else if (ch == ';') {
      f[key] = value;
      key.clear();
      value.clear();
      in_value = false;
    } else {
      value += ch;
    }
  }
  return f;
}

// A PMI-2 frame of `body`: its length in the first 6 bytes (the rest of them blanks).
std::string Framed(std::string body) {
  std::string len = std::to_string(body.size());
  len.resize(6, ' ');
  return len + body;
}

// A PMI-2 answer: "cmd=NAME;rc=0;" and the fields, each ';' in a value doubled.
std::string Frame2(const std::string& cmd,
                   std::initializer_list<std::pair<const char*, std::string>> fields) {
  std::string body = "cmd=" + cmd + ";rc=0;";
  for (const auto& [k, v] : fields) {
    body += std::string(k) + "=";
    for (char ch : v) body += ch == ';' ? std::string(";;") : std::string(1, ch);
    body += ";";
  }
  return Framed(std::move(body));
}

// A PMI-2 refusal: rc 1 and the reason.
std::string Refusal2(const std::string& cmd, const std::string& why) {
  return Framed("cmd=" + cmd + ";rc=1;errmsg=" + why + ";");
}

}  // namespace

std::string ProcessMapping(const std::vector<int>& node_of_rank) {
  struct Run {
    int first, nodes, ranks;
  };
  std::vector<Run> runs;
  for (size_t r = 0; r < node_of_rank.size();) {
    size_t end = r;
    while (end < node_of_rank.size() && node_of_rank[end] == node_of_rank[r]) ++end;
    const int node = node_of_rank[r], ranks = static_cast<int>(end - r);
    if (!runs.empty() && runs.back().ranks == ranks &&
        runs.back().first + runs.back().nodes == node) {
      ++runs.back().nodes;
    } else {
      runs.push_back({node, 1, ranks});
    }
    r = end;
  }
  std::string s = "(vector";
  for (const Run& x : runs) {
    s += ",(" + std::to_string(x.first) + "," + std::to_string(x.nodes) + "," +
         std::to_string(x.ranks) + ")";
  }
  return s + ")";
}

std::string AddressToward(const std::string& url) {
  std::string host = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
  host = host.substr(0, host.find('/'));
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  std::string address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) == 0 && found != nullptr) {
    // A datagram socket "connected" sends nothing; the kernel picks the route's source.
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN];
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr)
      address = text;
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
  }
  if (address.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    address = name;
  }
  return address;
}

std::unique_ptr<PmiServer> PmiServer::Start(std::string* error) {
  // Non-blocking, as accept(2) advises: a connection reset between poll() and accept() must
  // not leave accept() waiting for the next one while the step's tasks wait for answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return nullptr;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1024) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *error = std::string("listening for the step's MPI tasks: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<PmiServer>(new PmiServer(fd, ntohs(a.sin_port)));
}

PmiServer::PmiServer(int listen_fd, int port)
    : listen_fd_(listen_fd), port_(port), thread_([this] { Loop(); }) {}

PmiServer::~PmiServer() {
  stop_ = true;
  thread_.join();
  for (Conn& c : conns_) ::close(c.fd);
  ::close(listen_fd_);
}

void PmiServer::Send(Conn& c, const std::string& s) {
  for (size_t off = 0; off < s.size() && !c.dead;) {
    const ssize_t n = ::send(c.fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) c.dead = true;  // gone, or not reading its answers (kSendTimeoutS): closed
    if (n > 0) off += static_cast<size_t>(n);
  }
}

void PmiServer::SetLayout(std::vector<int> node_of_rank, std::string kvs) {
  std::lock_guard lock(mu_);
  if (placed_) return;
  layout_ = std::move(node_of_rank);
  kvs_ = std::move(kvs);
  mapping_ = ProcessMapping(layout_);
  placed_ = true;
}

std::optional<int> PmiServer::Aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

void PmiServer::Loop() {
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    while (fds[0].revents & POLLIN) {  // each waiting connection (accepted ones block)
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      // A client that stops reading its answers must not stall the others.
      const timeval limit{.tv_sec = kSendTimeoutS, .tv_usec = 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
      conns_.push_back(Conn{});
      conns_.back().fd = fd;
    }
    bool placed;
    {
      std::lock_guard lock(mu_);
      placed = placed_;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Conn& c = conns_[i - 1];
      bool open = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          open = false;
        }
      }
      if (open && placed) open = Serve(c);
      if (!open || c.dead) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });
    if (placed) EndBarrierIfAllIn();
  }
}

bool PmiServer::Serve(Conn& c) {
  while (!c.dead) {
    if (c.v2) {  // a frame: its length in 6 bytes, then that many
      if (c.in.size() < 6) break;
      const long len = std::strtol(c.in.substr(0, 6).c_str(), nullptr, 10);
      if (len <= 0 || static_cast<size_t>(len) > kMaxFrame) return false;  // not PMI-2
      if (c.in.size() < 6 + static_cast<size_t>(len)) break;
      const std::string frame = c.in.substr(6, static_cast<size_t>(len));
      c.in.erase(0, 6 + static_cast<size_t>(len));
      Answer2(c, frame);
      continue;
    }
    const size_t nl = c.in.find('\n');
    if (nl == std::string::npos) break;
    const std::string line = c.in.substr(0, nl);
    c.in.erase(0, nl + 1);
    Answer(c, line);
  }
  return c.in.size() <= kMaxFrame;  // no line or frame is that long: not a PMI client
}

void PmiServer::Answer(Conn& c, const std::string& line) {
  if (c.spawn) {  // MPI_Comm_spawn: refused once its request has been read
    if (line == "endcmd") {
      c.spawn = false;
      Send(c, "cmd=spawn_result rc=-1 msg=spawn_is_not_supported_by_gantry\n");
    }
    return;
  }
  if (line == "mcmd=spawn") {
    c.spawn = true;
    return;
  }
  auto f = Fields(line);
  const std::string cmd = f["cmd"];
  const int size = static_cast<int>(layout_.size());
  if (cmd == "init" && f["pmi_version"] == "2") {  // PMI-2: its frames from here on
    Send(c, "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n");
    c.v2 = true;
  } else if (cmd == "init") {
    Send(c, std::string("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=") +
                (f["pmi_version"] == "1" ? "0" : "-1") + "\n");
  } else if (cmd == "initack") {  // PMI_ID given: the rank and size come from here
    const int rank = std::atoi(f["pmiid"].c_str());
    Send(c, "cmd=initack rc=0\ncmd=set size=" + std::to_string(size) +
                "\ncmd=set rank=" + std::to_string(rank) + "\ncmd=set debug=0\n");
  } else if (cmd == "get_maxes") {
    Send(c, "cmd=maxes kvsname_max=" + std::to_string(kKvsNameMax) + " keylen_max=" +
                std::to_string(kKeyMax) + " vallen_max=" + std::to_string(kValueMax) + "\n");
  } else if (cmd == "get_appnum") {
    Send(c, "cmd=appnum appnum=-1\n");  // Slurm's: no MPMD application number
  } else if (cmd == "get_my_kvsname") {
    Send(c, "cmd=my_kvsname kvsname=" + kvs_ + "\n");
  } else if (cmd == "get_universe_size") {
    Send(c, "cmd=universe_size size=" + std::to_string(size) + "\n");
  } else if (cmd == "put") {
    const std::string& key = f["key"];
    if (key.empty() || key.size() > kKeyMax || f["value"].size() > kValueMax) {
      Send(c, "cmd=put_result rc=-1 msg=key_or_value_too_long\n");
    } else {
      kv_[key] = f["value"];
      Send(c, "cmd=put_result rc=0 msg=success\n");
    }
  } else if (cmd == "get") {
    const std::string& key = f["key"];
    std::optional<std::string> value;
    if (key == "PMI_process_mapping") {
      value = mapping_;
    } else if (auto it = kv_.find(key); it != kv_.end()) {
      value = it->second;
    }
    if (!value) {
      Send(c, "cmd=get_result rc=-1 msg=key_" + key + "_not_found value=unknown\n");
    } else {
      Send(c, "cmd=get_result rc=0 msg=success value=" + *value + "\n");
    }
  } else if (cmd == "barrier_in") {
    c.in_barrier = true;
  } else if (cmd == "finalize") {
    Send(c, "cmd=finalize_ack\n");
  } else if (cmd == "abort") {
    std::lock_guard lock(mu_);
    if (!aborted_) aborted_ = std::atoi(f["exitcode"].c_str());
  } else {
    Send(c, "cmd=" + (cmd.empty() ? std::string("unknown") : cmd) +
                "_result rc=-1 msg=not_supported_by_gantry\n");
  }
}

void PmiServer::Answer2(Conn& c, const std::string& frame) {
  auto f = Fields2(frame);
  const std::string cmd = f["cmd"];
  const int size = static_cast<int>(layout_.size());
  if (cmd == "fullinit") {  // the rank from PMI_RANK (pmirank) or PMI_ID (srcid)
    const std::string& rank = f.count("pmirank") ? f["pmirank"] : f["srcid"];
    char* end = nullptr;
    c.rank = static_cast<int>(std::strtol(rank.c_str(), &end, 10));
    if (rank.empty() || *end != '\0' || c.rank < 0 || c.rank >= size) {
      Send(c, Refusal2("fullinit-response",
                       "no rank " + rank + " in a step of " + std::to_string(size) + " tasks"));
      c.rank = -1;
      return;
    }
    Send(c, Frame2("fullinit-response", {{"pmi-version", "2"},
                                         {"pmi-subversion", "0"},
                                         {"rank", std::to_string(c.rank)},
                                         {"size", std::to_string(size)},
                                         {"appnum", "-1"},
                                         {"debugged", "FALSE"},
                                         {"pmiverbose", "FALSE"}}));
  } else if (cmd == "job-getid") {
    Send(c, Frame2("job-getid-response", {{"jobid", kvs_}}));
  } else if (cmd == "kvs-put") {
    if (f["key"].empty() || f["key"].size() > kKeyMax || f["value"].size() > kValueMax) {
      Send(c, Refusal2("kvs-put-response", "key or value too long"));
    } else {
      kv_[f["key"]] = f["value"];
      Send(c, Frame2("kvs-put-response", {}));
    }
  } else if (cmd == "kvs-fence") {
    c.in_barrier = true;
  } else if (cmd == "kvs-get") {
    auto it = kv_.find(f["key"]);
    if (it == kv_.end()) {
      Send(c, Frame2("kvs-get-response", {{"found", "FALSE"}}));
    } else {
      Send(c, Frame2("kvs-get-response", {{"found", "TRUE"}, {"value", it->second}}));
    }
  } else if (cmd == "info-putnodeattr" || cmd == "info-getnodeattr") {
    if (c.rank < 0) {
      Send(c, Refusal2(cmd + "-response", "fullinit first"));
      return;
    }
    auto& attrs = node_attrs_[layout_[static_cast<size_t>(c.rank)]];
    if (cmd == "info-putnodeattr") {
      attrs[f["key"]] = f["value"];
      Send(c, Frame2(cmd + "-response", {}));
      AnswerNodeAttrWaits();
    } else if (auto it = attrs.find(f["key"]); it != attrs.end()) {
      Send(c, Frame2(cmd + "-response", {{"found", "TRUE"}, {"value", it->second}}));
    } else if (f["wait"] == "TRUE") {  // answered once a task on the node puts it
      c.waits_for = f["key"];
    } else {
      Send(c, Frame2(cmd + "-response", {{"found", "FALSE"}}));
    }
  } else if (cmd == "info-getjobattr") {
    if (f["key"] == "PMI_process_mapping") {
      Send(c, Frame2("info-getjobattr-response", {{"found", "TRUE"}, {"value", mapping_}}));
    } else if (f["key"] == "universeSize") {
      Send(c, Frame2("info-getjobattr-response",
                     {{"found", "TRUE"}, {"value", std::to_string(size)}}));
    } else {
      Send(c, Frame2("info-getjobattr-response", {{"found", "FALSE"}}));
    }
  } else if (cmd == "finalize") {
    Send(c, Frame2("finalize-response", {}));
  } else if (cmd == "abort") {  // PMI-2 says no exit code: the task exits with its own
    std::lock_guard lock(mu_);
    if (!aborted_) aborted_ = -1;
  } else {
    Send(c, Refusal2((cmd.empty() ? std::string("unknown") : cmd) + "-response",
                     "not supported by Gantry"));
  }
}

void PmiServer::AnswerNodeAttrWaits() {
  for (Conn& c : conns_) {
    if (c.waits_for.empty() || c.rank < 0) continue;
    const auto& attrs = node_attrs_[layout_[static_cast<size_t>(c.rank)]];
    if (auto it = attrs.find(c.waits_for); it != attrs.end()) {
      Send(c, Frame2("info-getnodeattr-response", {{"found", "TRUE"}, {"value", it->second}}));
      c.waits_for.clear();
    }
  }
}

void PmiServer::EndBarrierIfAllIn() {
  size_t in = 0;
  for (const Conn& c : conns_) in += c.in_barrier;
  if (layout_.empty() || in < layout_.size()) return;
  for (Conn& c : conns_) {
    if (!c.in_barrier) continue;
    c.in_barrier = false;
    Send(c, c.v2 ? Frame2("kvs-fence-response", {}) : "cmd=barrier_out\n");
  }
}

}  // namespace gantry::cli
