// srun --mpi=pmi2's PMI-1 server (cli/pmi_server.h), spoken to over TCP as MPICH's PMI
// client speaks it. (tests/integration's Slurm.MpiProgramsRunUnderSrunMpiPmi2 runs real
// MPICH programs against it.)
#include "cli/pmi_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace gantry::cli {
namespace {

TEST(ProcessMapping, RunsOfNodesWithTheirRanks) {
  EXPECT_EQ(ProcessMapping({0, 0, 1, 1}), "(vector,(0,2,2))");
  EXPECT_EQ(ProcessMapping({0, 0, 0, 1}), "(vector,(0,1,3),(1,1,1))");
  EXPECT_EQ(ProcessMapping({0, 1, 0, 1}), "(vector,(0,2,1),(0,2,1))");  // cyclic
  EXPECT_EQ(ProcessMapping({0, 1, 2, 2, 3, 3}), "(vector,(0,2,1),(2,2,2))");
  EXPECT_EQ(ProcessMapping({1, 0}), "(vector,(1,1,1),(0,1,1))");
  EXPECT_EQ(ProcessMapping({0}), "(vector,(0,1,1))");
}

// One task's connection: a line out, the answer's lines in.
class Task {
 public:
  explicit Task(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~Task() { ::close(fd_); }
  void Say(const std::string& line) {
    const std::string s = line + "\n";
    ASSERT_EQ(::send(fd_, s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
  // The next line, or "" when none comes within `wait_ms`.
  std::string Hear(int wait_ms = 10000) {
    while (in_.find('\n') == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, wait_ms) != 1) return "";
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return "";
      in_.append(buf, static_cast<size_t>(n));
    }
    const size_t nl = in_.find('\n');
    std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    return line;
  }
  std::string Ask(const std::string& line) {
    Say(line);
    return Hear();
  }

 private:
  int fd_;
  std::string in_;
};

TEST(PmiServer, TasksExchangeAddressesThroughPutsABarrierAndGets) {
  std::string error;
  auto server = PmiServer::Start("kvs_7_1", &error);
  ASSERT_NE(server, nullptr) << error;
  std::vector<std::unique_ptr<Task>> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(std::make_unique<Task>(server->port()));
  // Before srun knows where the tasks are, their requests wait.
  tasks[0]->Say("cmd=init pmi_version=1 pmi_subversion=1");
  EXPECT_EQ(tasks[0]->Hear(300), "");
  server->SetLayout({0, 0, 1});
  EXPECT_EQ(tasks[0]->Hear(), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
  EXPECT_EQ(tasks[1]->Ask("cmd=get_maxes"),
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024");
  EXPECT_EQ(tasks[1]->Ask("cmd=get_my_kvsname"), "cmd=my_kvsname kvsname=kvs_7_1");
  EXPECT_EQ(tasks[2]->Ask("cmd=get_universe_size"), "cmd=universe_size size=3");
  EXPECT_EQ(tasks[2]->Ask("cmd=get_appnum"), "cmd=appnum appnum=0");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tasks[i]->Ask("cmd=put kvsname=kvs_7_1 key=card-" + std::to_string(i) +
                            " value=addr" + std::to_string(i)),
              "cmd=put_result rc=0 msg=success");
  }
  // The barrier ends when the last of the three is in, for all of them at once.
  tasks[0]->Say("cmd=barrier_in");
  tasks[1]->Say("cmd=barrier_in");
  EXPECT_EQ(tasks[0]->Hear(300), "");
  tasks[2]->Say("cmd=barrier_in");
  for (auto& t : tasks) EXPECT_EQ(t->Hear(), "cmd=barrier_out");
  EXPECT_EQ(tasks[0]->Ask("cmd=get kvsname=kvs_7_1 key=card-2"),
            "cmd=get_result rc=0 msg=success value=addr2");
  EXPECT_EQ(tasks[2]->Ask("cmd=get kvsname=kvs_7_1 key=PMI_process_mapping"),
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,2),(1,1,1))");
  EXPECT_EQ(tasks[1]->Ask("cmd=get kvsname=kvs_7_1 key=nope"),
            "cmd=get_result rc=-1 msg=key_nope_not_found value=unknown");
  // A second barrier works as the first.
  for (auto& t : tasks) t->Say("cmd=barrier_in");
  for (auto& t : tasks) EXPECT_EQ(t->Hear(), "cmd=barrier_out");
  for (auto& t : tasks) EXPECT_EQ(t->Ask("cmd=finalize"), "cmd=finalize_ack");
  EXPECT_FALSE(server->Aborted());
}

TEST(PmiServer, GivesRankAndSizeByPmiIdAndHearsAnAbort) {
  std::string error;
  auto server = PmiServer::Start("kvs", &error);
  ASSERT_NE(server, nullptr) << error;
  server->SetLayout({0, 1});
  Task t(server->port());
  t.Say("cmd=initack pmiid=1");
  EXPECT_EQ(t.Hear(), "cmd=initack rc=0");
  EXPECT_EQ(t.Hear(), "cmd=set size=2");
  EXPECT_EQ(t.Hear(), "cmd=set rank=1");
  EXPECT_EQ(t.Hear(), "cmd=set debug=0");
  // PMI-2's clients ask for version 2: refused, so they stop at once.
  Task v2(server->port());
  EXPECT_EQ(v2.Ask("cmd=init pmi_version=2 pmi_subversion=0"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1");
  // MPI_Comm_spawn is refused once its request has been read; unknown commands too.
  for (const char* line : {"mcmd=spawn", "nprocs=2", "execname=/bin/true", "endcmd"}) t.Say(line);
  EXPECT_EQ(t.Hear(), "cmd=spawn_result rc=-1 msg=spawn_is_not_supported_by_gantry");
  EXPECT_EQ(t.Ask("cmd=publish_name service=x port=y"),
            "cmd=publish_name_result rc=-1 msg=not_supported_by_gantry");
  t.Say("cmd=abort exitcode=7");
  for (int i = 0; i < 100 && !server->Aborted(); ++i) usleep(10000);
  ASSERT_TRUE(server->Aborted());
  EXPECT_EQ(*server->Aborted(), 7);
}

TEST(PmiServer, AnAddressTowardTheServerIsThisHosts) {
  EXPECT_EQ(AddressToward("http://127.0.0.1:8080"), "127.0.0.1");
  EXPECT_EQ(AddressToward("https://127.0.0.1"), "127.0.0.1");
  EXPECT_FALSE(AddressToward("http://no-such-host.invalid:1").empty());  // the host's name
}

}  // namespace
}  // namespace gantry::cli
