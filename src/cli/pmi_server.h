// PmiServer: the process manager's side of PMI-1's and PMI-2's wire protocols (as MPICH's
// Hydra and Slurm's mpi/pmi2 plugin serve them), for `srun --mpi=pmi2`. The step's MPI tasks
// reach it over TCP at PMI_PORT (host:port), put their addresses into the step's one
// key-value space, meet at barriers and read each other's; PMI_process_mapping says which
// ranks share a node. Slurm's slurmstepd hands each task a socket (PMI_FD) instead; MPICH's
// and Slurm's own PMI clients take PMI_PORT as well (docs/slurm.md, "MPI").
//
// Written here because no Debian library serves this protocol: libpmix serves PMIx (another
// protocol, with a server on every node), and MPICH's server lives inside Hydra.
// Thread-safety: the methods are thread-safe; one thread of its own serves the tasks.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace gantry::cli {

// PMI_process_mapping's value for tasks on nodes `node_of_rank` (the step's node index of
// each rank, in rank order): "(vector,(FIRST_NODE,NODES,RANKS_PER_NODE),...)", each triple a
// run of nodes given that many consecutive ranks each, as Hydra and Slurm write it.
std::string ProcessMapping(const std::vector<int>& node_of_rank);

// This host's address on the way to `url`'s host (gantryd's, so the cluster's network): what
// the step's tasks on other nodes reach PMI_PORT at; the host name when there is no route.
std::string AddressToward(const std::string& url);

class PmiServer {
 public:
  // Listens on every address at a port of the kernel's choosing; nullptr and `error` when it
  // cannot.
  static std::unique_ptr<PmiServer> Start(std::string* error);
  ~PmiServer();
  PmiServer(const PmiServer&) = delete;
  PmiServer& operator=(const PmiServer&) = delete;

  int port() const { return port_; }
  // The step's tasks, once placed: each rank's node index, and the name of their key-value
  // space (JOB.STEP, as Slurm names it). Until then the tasks' requests wait (a task cannot
  // start before its step is placed, but srun may hear of it later).
  void SetLayout(std::vector<int> node_of_rank, std::string kvs);
  // A task called PMI_Abort (MPI_Abort): its exit code (-1 from PMI-2, which says none),
  // once one has.
  std::optional<int> Aborted() const;

 private:
  struct Conn {
    int fd = -1;
    std::string in;
    bool v2 = false;          // speaks PMI-2's frames (after its init asked for version 2)
    int rank = -1;            // PMI-2: from its fullinit
    bool in_barrier = false;  // PMI-1's barrier_in, PMI-2's kvs-fence
    bool spawn = false;       // reading a multi-line "mcmd=spawn" request, refused at its end
    std::string waits_for;    // PMI-2: a node attribute it waits for
    bool dead = false;        // a send failed: closed at the loop's next turn
  };
  PmiServer(int listen_fd, int port);
  void Loop();
  // Answers the complete lines (PMI-1) or frames (PMI-2) `c` has; false when it is to be
  // closed.
  bool Serve(Conn& c);
  void Answer(Conn& c, const std::string& line);
  void Answer2(Conn& c, const std::string& frame);
  void AnswerNodeAttrWaits();
  void Send(Conn& c, const std::string& s);
  void EndBarrierIfAllIn();

  const int listen_fd_;
  const int port_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  // Written once, under mu_, before placed_; the loop reads them only after it has seen
  // placed_ under mu_, and they never change after: no lock then.
  std::vector<int> layout_;
  std::string kvs_;
  std::string mapping_;                    // ProcessMapping(layout_), which every task asks for
  bool placed_ = false;                    // guarded by mu_
  std::optional<int> aborted_;             // guarded by mu_
  std::map<std::string, std::string> kv_;  // the loop's only
  std::map<int, std::map<std::string, std::string>> node_attrs_;  // by node; the loop's only
  std::vector<Conn> conns_;                                       // the loop's only
  std::thread thread_;
};

}  // namespace gantry::cli
