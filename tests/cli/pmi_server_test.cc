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
  // PMI-2: a frame out (its length in 6 bytes, blank-padded), the answer's frame in.
  void SayFrame(const std::string& body) {
    std::string len = std::to_string(body.size());
    len.resize(6, ' ');
    const std::string s = len + body;
    ASSERT_EQ(::send(fd_, s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
  std::string HearFrame(int wait_ms = 10000) {
    auto fill = [&](size_t n) {
      while (in_.size() < n) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, wait_ms) != 1) return false;
        char buf[4096];
        const ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
        if (got <= 0) return false;
        in_.append(buf, static_cast<size_t>(got));
      }
      return true;
    };
    if (!fill(6)) return "";
    const size_t len = std::stoul(in_.substr(0, 6));
    if (!fill(6 + len)) return "";
    std::string body = in_.substr(6, len);
    in_.erase(0, 6 + len);
    return body;
  }
  std::string AskFrame(const std::string& body) {
    SayFrame(body);
    return HearFrame();
  }

 private:
  int fd_;
  std::string in_;
};

TEST(PmiServer, TasksExchangeAddressesThroughPutsABarrierAndGets) {
  std::string error;
  auto server = PmiServer::Start(&error);
  ASSERT_NE(server, nullptr) << error;
  std::vector<std::unique_ptr<Task>> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(std::make_unique<Task>(server->port()));
  // Before srun knows where the tasks are, their requests wait.
  tasks[0]->Say("cmd=init pmi_version=1 pmi_subversion=1");
  EXPECT_EQ(tasks[0]->Hear(300), "");
  server->SetLayout({0, 0, 1}, "7.1");
  EXPECT_EQ(tasks[0]->Hear(), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
  EXPECT_EQ(tasks[1]->Ask("cmd=get_maxes"),
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024");
  EXPECT_EQ(tasks[1]->Ask("cmd=get_my_kvsname"), "cmd=my_kvsname kvsname=7.1");
  EXPECT_EQ(tasks[2]->Ask("cmd=get_universe_size"), "cmd=universe_size size=3");
  EXPECT_EQ(tasks[2]->Ask("cmd=get_appnum"), "cmd=appnum appnum=-1");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tasks[i]->Ask("cmd=put kvsname=7.1 key=card-" + std::to_string(i) + " value=addr" +
                            std::to_string(i)),
              "cmd=put_result rc=0 msg=success");
  }
  // The barrier ends when the last of the three is in, for all of them at once.
  tasks[0]->Say("cmd=barrier_in");
  tasks[1]->Say("cmd=barrier_in");
  EXPECT_EQ(tasks[0]->Hear(300), "");
  tasks[2]->Say("cmd=barrier_in");
  for (auto& t : tasks) EXPECT_EQ(t->Hear(), "cmd=barrier_out");
  EXPECT_EQ(tasks[0]->Ask("cmd=get kvsname=7.1 key=card-2"),
            "cmd=get_result rc=0 msg=success value=addr2");
  EXPECT_EQ(tasks[2]->Ask("cmd=get kvsname=7.1 key=PMI_process_mapping"),
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,2),(1,1,1))");
  EXPECT_EQ(tasks[1]->Ask("cmd=get kvsname=7.1 key=nope"),
            "cmd=get_result rc=-1 msg=key_nope_not_found value=unknown");
  // A second barrier works as the first.
  for (auto& t : tasks) t->Say("cmd=barrier_in");
  for (auto& t : tasks) EXPECT_EQ(t->Hear(), "cmd=barrier_out");
  for (auto& t : tasks) EXPECT_EQ(t->Ask("cmd=finalize"), "cmd=finalize_ack");
  EXPECT_FALSE(server->Aborted());
}

TEST(PmiServer, GivesRankAndSizeByPmiIdAndHearsAnAbort) {
  std::string error;
  auto server = PmiServer::Start(&error);
  ASSERT_NE(server, nullptr) << error;
  server->SetLayout({0, 1}, "7.2");
  Task t(server->port());
  t.Say("cmd=initack pmiid=1");
  EXPECT_EQ(t.Hear(), "cmd=initack rc=0");
  EXPECT_EQ(t.Hear(), "cmd=set size=2");
  EXPECT_EQ(t.Hear(), "cmd=set rank=1");
  EXPECT_EQ(t.Hear(), "cmd=set debug=0");
  // A version neither 1 nor 2 is refused, so the client stops at once.
  Task v3(server->port());
  EXPECT_EQ(v3.Ask("cmd=init pmi_version=3 pmi_subversion=0"),
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

// PMI-2's frames, as Slurm's libpmi2 (MVAPICH2, Intel MPI) speaks them after asking for
// version 2: rank from fullinit, puts, a fence for all, gets (a ';' in a value doubled),
// node attributes (a get that waits is answered by the put), job attributes.
TEST(PmiServer, SpeaksPmi2sFramesAfterAnInitForVersion2) {
  std::string error;
  auto server = PmiServer::Start(&error);
  ASSERT_NE(server, nullptr) << error;
  server->SetLayout({0, 0, 1}, "9.0");
  std::vector<std::unique_ptr<Task>> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(std::make_unique<Task>(server->port()));
    EXPECT_EQ(tasks[i]->Ask("cmd=init pmi_version=2 pmi_subversion=0"),
              "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0");
    EXPECT_EQ(tasks[i]->AskFrame("cmd=fullinit;pmijobid=9.0;pmirank=" + std::to_string(i) +
                                 ";threaded=FALSE;"),
              "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=" +
                  std::to_string(i) + ";size=3;appnum=-1;debugged=FALSE;pmiverbose=FALSE;");
  }
  Task stranger(server->port());
  stranger.Ask("cmd=init pmi_version=2 pmi_subversion=0");
  EXPECT_EQ(stranger.AskFrame("cmd=fullinit;pmirank=3;threaded=FALSE;"),
            "cmd=fullinit-response;rc=1;errmsg=no rank 3 in a step of 3 tasks;");
  EXPECT_EQ(tasks[0]->AskFrame("cmd=job-getid;"), "cmd=job-getid-response;rc=0;jobid=9.0;");
  EXPECT_EQ(tasks[0]->AskFrame("cmd=kvs-put;key=card-0;value=a;;b;"), "cmd=kvs-put-response;rc=0;");
  // Node attributes are the node's: rank 1 waits for what rank 0 (its node) puts; rank 2
  // (another node) does not see it.
  tasks[1]->SayFrame("cmd=info-getnodeattr;key=leader;wait=TRUE;");
  EXPECT_EQ(tasks[1]->HearFrame(300), "");
  EXPECT_EQ(tasks[0]->AskFrame("cmd=info-putnodeattr;key=leader;value=0;"),
            "cmd=info-putnodeattr-response;rc=0;");
  EXPECT_EQ(tasks[1]->HearFrame(), "cmd=info-getnodeattr-response;rc=0;found=TRUE;value=0;");
  EXPECT_EQ(tasks[2]->AskFrame("cmd=info-getnodeattr;key=leader;wait=FALSE;"),
            "cmd=info-getnodeattr-response;rc=0;found=FALSE;");
  for (auto& t : tasks) t->SayFrame("cmd=kvs-fence;");
  for (auto& t : tasks) EXPECT_EQ(t->HearFrame(), "cmd=kvs-fence-response;rc=0;");
  EXPECT_EQ(tasks[2]->AskFrame("cmd=kvs-get;jobid=9.0;srcid=-1;key=card-0;"),
            "cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;");
  EXPECT_EQ(tasks[2]->AskFrame("cmd=kvs-get;jobid=9.0;srcid=-1;key=nope;"),
            "cmd=kvs-get-response;rc=0;found=FALSE;");
  EXPECT_EQ(tasks[1]->AskFrame("cmd=info-getjobattr;key=PMI_process_mapping;"),
            "cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2),(1,1,1));");
  EXPECT_EQ(tasks[1]->AskFrame("cmd=name-publish;name=x;port=y;infokeycount=0;"),
            "cmd=name-publish-response;rc=1;errmsg=not supported by Gantry;");
  for (auto& t : tasks) EXPECT_EQ(t->AskFrame("cmd=finalize;"), "cmd=finalize-response;rc=0;");
  tasks[0]->SayFrame("cmd=abort;isworld=TRUE;msg=bye;");
  for (int i = 0; i < 100 && !server->Aborted(); ++i) usleep(10000);
  ASSERT_TRUE(server->Aborted());
  EXPECT_EQ(*server->Aborted(), -1) << "PMI-2 gives no exit code";
}

TEST(PmiServer, AnAddressTowardTheServerIsThisHosts) {
  EXPECT_EQ(AddressToward("http://127.0.0.1:8080"), "127.0.0.1");
  EXPECT_EQ(AddressToward("https://127.0.0.1"), "127.0.0.1");
  EXPECT_FALSE(AddressToward("http://no-such-host.invalid:1").empty());  // the host's name
}

}  // namespace
}  // namespace gantry::cli
