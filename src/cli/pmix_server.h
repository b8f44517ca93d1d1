// PmixServer: the process manager's side of PMIx for `srun --mpi=pmix` (docs/slurm.md,
// "MPI"), on OpenPMIx's server library (Debian's libpmix-dev): what Open MPI 4 and 5 (and
// other PMIx clients) need to start ranks launched by srun rather than by mpirun.
//
// Slurm runs a PMIx server in each node's slurmstepd and exchanges the ranks' data between
// them; here ONE server, in srun, serves every rank of the step wherever it runs: the ranks
// reach it over TCP at the URI their environment names (Env()), so they are all its own
// clients, and libpmix completes their fences itself (no server-to-server exchange, no
// direct modex). The namespace is registered with the step's real layout (which ranks share
// a node), so an MPI uses shared memory between the ranks of a node and the network between
// nodes, as under Slurm.
//
// libpmix allows one server per process and calls back from a thread of its own; the
// methods here are for srun's one thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gantry::cli {

class PmixServer {
 public:
  // `interface`: the network interface the ranks on other nodes reach this host through
  // (its name, as libpmix takes it); empty: 127.0.0.1 only (every node on this host).
  // nullptr and `error` when libpmix cannot start.
  static std::unique_ptr<PmixServer> Start(const std::string& interface, std::string* error);
  ~PmixServer();  // Stop()
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // Registers namespace `nspace` (JOB.STEP): rank r runs on node `hosts[node_of_rank[r]]`,
  // as user `uid`/`gid` (a rank that says it is anyone else is refused). False and `error`
  // when libpmix refuses it.
  bool Register(const std::string& nspace, const std::vector<int>& node_of_rank,
                const std::vector<std::string>& hosts, uid_t uid, gid_t gid, std::string* error);
  // The variables every rank needs to reach this server (after Register): the namespace,
  // the server's URI, its security mode, ... Each rank adds its own PMIX_RANK and
  // PMIX_HOSTNAME (gantryd gives them, as it gives pmi2's PMI_RANK).
  std::map<std::string, std::string> Env() const;
  // A rank called PMIx_Abort (MPI_Abort): its status, once one has.
  std::optional<int> Aborted() const;
  // Closes the ranks' connections and stops libpmix. Bounded: libpmix 4.2.2 can hang in its
  // finalize (seen after it refused a client's credential), and past 5 s it is left to it.
  void Stop();

  struct State;  // what libpmix's callbacks update (they carry no pointer of ours)

 private:
  explicit PmixServer(std::string tmpdir) : tmpdir_(std::move(tmpdir)) {}
  std::string tmpdir_;  // libpmix's rendezvous files; removed by Stop()
  std::string nspace_;
  bool stopped_ = false;
};

// The name of the network interface holding address `ip` (e.g. "eth0"); "" for a loopback
// address or none of this host's.
std::string InterfaceOf(const std::string& ip);

}  // namespace gantry::cli
