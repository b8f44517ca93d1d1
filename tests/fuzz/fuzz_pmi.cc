// Fuzzes srun --mpi=pmi2's PMI server (cli/pmi_server.h), which reads whatever reaches its
// port on the cluster's network: each input is sent on a connection of its own (a first
// byte below 128 sends it as PMI-1 lines; from 128 after a PMI-2 init, as frames), then the
// connection is closed. Nothing may crash or hang the server: after every input a task
// connected throughout gets its get_maxes answered.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cli/pmi_server.h"

namespace {

// A connection to the server; a few tries, since a port of a connection just reset may
// still be in the server's TIME_WAIT at thousands of inputs a second.
int Connect(int port) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      // Closed with a reset, leaving no TIME_WAIT: thousands of inputs a second would
      // otherwise use up the ephemeral ports.
      const linger reset{.l_onoff = 1, .l_linger = 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      return fd;
    }
    if (fd >= 0) ::close(fd);
    ::usleep(1000);
  }
  std::fprintf(stderr, "fuzz_pmi: cannot connect: %s\n", std::strerror(errno));
  __builtin_trap();
}

void SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed it: fine
    off += static_cast<size_t>(n);
  }
}

// Reads until `lines` newlines have come, or traps after a minute without an answer: a hang
// is forever, while a loopback segment lost under this churn (thousands of connections a
// second) comes again only after its retransmission timeouts (once about 10 s).
std::string Hear(int fd, int lines) {
  std::string in;
  while (static_cast<int>(std::count(in.begin(), in.end(), '\n')) < lines) {
    pollfd p{fd, POLLIN, 0};
    char buf[4096];
    if (::poll(&p, 1, 60000) != 1) {
      std::fprintf(stderr, "fuzz_pmi: no answer in 60 s, after \"%s\"\n", in.c_str());
      __builtin_trap();
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      std::fprintf(stderr, "fuzz_pmi: the probe's connection ended (%s), after \"%s\"\n",
                   n == 0 ? "closed" : std::strerror(errno), in.c_str());
      __builtin_trap();
    }
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<gantry::cli::PmiServer> server = [] {
    std::string error;
    auto s = gantry::cli::PmiServer::Start(&error);
    if (!s) __builtin_trap();
    s->SetLayout({0, 0, 1}, "1.0");
    return s;
  }();
  // A well-behaved task, connected throughout: it must be answered after every input.
  static const int probe = [] {
    const int fd = Connect(server->port());
    SendAll(fd, "cmd=init pmi_version=1 pmi_subversion=1\n");
    if (Hear(fd, 1).find("rc=0") == std::string::npos) __builtin_trap();
    return fd;
  }();
  if (size == 0) return 0;
  const int fd = Connect(server->port());
  if (data[0] >= 128) SendAll(fd, "cmd=init pmi_version=2 pmi_subversion=0\n");
  SendAll(fd, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  ::close(fd);
  SendAll(probe, "cmd=get_maxes\n");
  if (Hear(probe, 1).find("cmd=maxes") == std::string::npos) __builtin_trap();
  return 0;
}
