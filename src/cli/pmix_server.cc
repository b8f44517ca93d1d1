#include "cli/pmix_server.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <pmix.h>
#include <pmix_server.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

namespace gantry::cli {

struct PmixServer::State {
  std::mutex mu;
  std::optional<int> aborted;
};

namespace {

// libpmix's upcalls carry no pointer of ours: one server per process, so one state. It is
// never freed while libpmix may still call (an abandoned finalize keeps it).
PmixServer::State* g_state = nullptr;

// ---- the server module's upcalls, on libpmix's thread. Open MPI 4.1 calls
// client_connected, client_finalized and abort; the rest answer what a client may ask.

pmix_status_t ClientConnected(const pmix_proc_t*, void*, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;  // done: the callback is not called
}

pmix_status_t ClientFinalized(const pmix_proc_t*, void*, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

// A rank's PMIx_Abort: the step is to be killed (srun does it, seeing Aborted()); the
// aborting rank, released, exits by itself.
pmix_status_t Abort(const pmix_proc_t*, void*, int status, const char[], pmix_proc_t[], size_t,
                    pmix_op_cbfunc_t, void*) {
  std::lock_guard<std::mutex> l(g_state->mu);
  if (!g_state->aborted) g_state->aborted = status;
  return PMIX_OPERATION_SUCCEEDED;
}

void FreeBlob(void* p) { std::free(p); }

// Called only where libpmix does not complete a fence itself (its participants are all its
// own clients here, so only with pmix_server_fence_localonly_opt off): the data collected is
// every rank's, handed back. `data` is libpmix's for the call only; what cbfunc gets must
// live until libpmix calls its release function, so a copy.
pmix_status_t FenceNb(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, char* data,
                      size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  char* copy = nullptr;
  if (ndata > 0) {
    copy = static_cast<char*>(std::malloc(ndata));
    if (copy == nullptr) return PMIX_ERR_NOMEM;
    std::memcpy(copy, data, ndata);
  }
  cbfunc(PMIX_SUCCESS, copy, ndata, cbdata, copy != nullptr ? FreeBlob : nullptr, copy);
  return PMIX_SUCCESS;
}

// Asked only for ranks that are not this server's clients: none are.
pmix_status_t DirectModex(const pmix_proc_t*, const pmix_info_t[], size_t, pmix_modex_cbfunc_t,
                          void*) {
  return PMIX_ERR_NOT_SUPPORTED;
}

pmix_status_t RegisterEvents(pmix_status_t*, size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t,
                             void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t DeregisterEvents(pmix_status_t*, size_t, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t NotifyEvent(pmix_status_t, const pmix_proc_t*, pmix_data_range_t, pmix_info_t[],
                          size_t, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t Disconnect(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t,
                         void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_server_module_t Module() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof(m));         // what is left null libpmix answers as not supported
  m.client_connected = ClientConnected;  // (spawn, connect, query, job control, ...)
  m.client_finalized = ClientFinalized;
  m.abort = Abort;
  m.fence_nb = FenceNb;
  m.direct_modex = DirectModex;
  m.disconnect = Disconnect;
  m.register_events = RegisterEvents;
  m.deregister_events = DeregisterEvents;
  m.notify_event = NotifyEvent;
  return m;
}

pmix_server_module_t g_module = Module();

void OpDone(pmix_status_t status, void* cbdata) {
  static_cast<std::promise<pmix_status_t>*>(cbdata)->set_value(status);
}

// `rc` of an asynchronous libpmix call that reports to OpDone(&done): its outcome.
pmix_status_t Outcome(pmix_status_t rc, std::promise<pmix_status_t>& done) {
  if (rc == PMIX_OPERATION_SUCCEEDED) return PMIX_SUCCESS;
  if (rc != PMIX_SUCCESS) return rc;
  return done.get_future().get();
}

std::string Join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? sep : "") + std::to_string(v[i]);
  return s;
}

// A list of pmix_info_t as libpmix builds them, converted for a call.
class Infos {
 public:
  Infos() : list_(PMIx_Info_list_start()) {}
  ~Infos() { PMIx_Info_list_release(list_); }
  Infos(const Infos&) = delete;
  Infos& operator=(const Infos&) = delete;
  void Add(const char* key, const void* value, pmix_data_type_t type) {
    PMIx_Info_list_add(list_, key, value, type);
  }
  void Add(const char* key, const std::string& value) { Add(key, value.c_str(), PMIX_STRING); }
  // `inner` as one value (a node's or a rank's array).
  void AddArray(const char* key, Infos& inner) {
    pmix_data_array_t a;
    PMIx_Info_list_convert(inner.list_, &a);
    Add(key, &a, PMIX_DATA_ARRAY);
    PMIX_DATA_ARRAY_DESTRUCT(&a);
  }
  pmix_data_array_t Convert() {
    pmix_data_array_t a;
    PMIx_Info_list_convert(list_, &a);
    return a;
  }

 private:
  void* list_;
};

}  // namespace

std::string InterfaceOf(const std::string& ip) {
  if (ip.starts_with("127.") || ip == "::1" || ip == "localhost") return "";
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string out;
  for (ifaddrs* a = all; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char host[NI_MAXHOST];
    if (::getnameinfo(a->ifa_addr, sizeof(sockaddr_in), host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) == 0 &&
        ip == host)
      out = a->ifa_name;
  }
  ::freeifaddrs(all);
  return out;
}

std::unique_ptr<PmixServer> PmixServer::Start(const std::string& interface, std::string* error) {
  if (g_state != nullptr) {
    *error = "a PMIx server already runs in this process";
    return nullptr;
  }
  std::string dir = (std::filesystem::temp_directory_path() / "gantry-pmix.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    *error = "cannot make a directory for PMIx under " +
             std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno);
    return nullptr;
  }
  // The job's data goes to the ranks over their connection (libpmix's "hash" store): its
  // shared-memory stores would live on this host only.
  ::setenv("PMIX_MCA_gds", "hash", 1);
  Infos info;
  info.Add(PMIX_SERVER_TMPDIR, dir);
  info.Add(PMIX_SYSTEM_TMPDIR, dir);
  if (!interface.empty()) {
    // Listen on that interface's address (libpmix takes an interface's name or a network
    // with a mask under /32; a bare address it refuses), which the URI then names.
    const bool yes = true;
    info.Add(PMIX_SERVER_REMOTE_CONNECTIONS, &yes, PMIX_BOOL);
    info.Add(PMIX_TCP_IF_INCLUDE, interface);
  }
  pmix_data_array_t a = info.Convert();
  g_state = new State;
  const pmix_status_t rc = PMIx_server_init(&g_module, static_cast<pmix_info_t*>(a.array), a.size);
  PMIX_DATA_ARRAY_DESTRUCT(&a);
  if (rc != PMIX_SUCCESS) {
    *error = std::string("PMIx_server_init: ") + PMIx_Error_string(rc);
    delete g_state;
    g_state = nullptr;
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    return nullptr;
  }
  return std::unique_ptr<PmixServer>(new PmixServer(std::move(dir)));
}

PmixServer::~PmixServer() { Stop(); }

bool PmixServer::Register(const std::string& nspace, const std::vector<int>& node_of_rank,
                          const std::vector<std::string>& hosts, uid_t uid, gid_t gid,
                          std::string* error) {
  nspace_ = nspace;
  const auto size = static_cast<uint32_t>(node_of_rank.size());
  const auto nodes = static_cast<uint32_t>(hosts.size());
  std::vector<std::vector<int>> ranks_on(nodes);
  for (uint32_t r = 0; r < size; ++r) ranks_on[static_cast<size_t>(node_of_rank[r])].push_back(r);
  // What Slurm's mpi/pmix plugin registers that Open MPI reads: the sizes, the node and
  // rank maps (libpmix works out each rank's peers from them), each node's ranks and each
  // rank's place. A key left out does not fail: a client's get of it waits for ever.
  Infos job;
  const bool no = false;
  const uint32_t one = 1;
  job.Add(PMIX_JOB_SIZE, &size, PMIX_UINT32);
  job.Add(PMIX_UNIV_SIZE, &size, PMIX_UINT32);
  job.Add(PMIX_MAX_PROCS, &size, PMIX_UINT32);
  job.Add(PMIX_JOBID, nspace);
  job.Add(PMIX_SPAWNED, &no, PMIX_BOOL);
  job.Add(PMIX_JOB_NUM_APPS, &one, PMIX_UINT32);
  job.Add(PMIX_NUM_NODES, &nodes, PMIX_UINT32);
  std::string host_list, ppn;
  for (uint32_t n = 0; n < nodes; ++n) {
    host_list += (n > 0 ? "," : "") + hosts[n];
    ppn += (n > 0 ? ";" : "") + Join(ranks_on[n], ",");
  }
  char* node_map = nullptr;
  char* proc_map = nullptr;
  if (PMIx_generate_regex(host_list.c_str(), &node_map) != PMIX_SUCCESS ||
      PMIx_generate_ppn(ppn.c_str(), &proc_map) != PMIX_SUCCESS) {
    std::free(node_map);
    *error = "PMIx cannot map the step's nodes (" + host_list + ")";
    return false;
  }
  job.Add(PMIX_NODE_MAP, node_map, PMIX_STRING);
  job.Add(PMIX_PROC_MAP, proc_map, PMIX_STRING);
  std::free(node_map);
  std::free(proc_map);
  for (uint32_t n = 0; n < nodes; ++n) {
    Infos node;
    const auto local = static_cast<uint32_t>(ranks_on[n].size());
    const auto leader = static_cast<pmix_rank_t>(ranks_on[n].empty() ? 0 : ranks_on[n][0]);
    node.Add(PMIX_NODEID, &n, PMIX_UINT32);
    node.Add(PMIX_HOSTNAME, hosts[n]);
    node.Add(PMIX_LOCAL_PEERS, Join(ranks_on[n], ","));
    node.Add(PMIX_LOCAL_SIZE, &local, PMIX_UINT32);
    node.Add(PMIX_NODE_SIZE, &local, PMIX_UINT32);
    node.Add(PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    job.AddArray(PMIX_NODE_INFO_ARRAY, node);
  }
  for (uint32_t r = 0; r < size; ++r) {
    Infos proc;
    const auto n = static_cast<uint32_t>(node_of_rank[r]);
    const std::vector<int>& peers = ranks_on[n];
    const auto local = static_cast<uint16_t>(
        std::find(peers.begin(), peers.end(), static_cast<int>(r)) - peers.begin());
    const pmix_rank_t rank = r, zero = 0;
    const uint32_t app = 0;
    proc.Add(PMIX_RANK, &rank, PMIX_PROC_RANK);
    proc.Add(PMIX_LOCAL_RANK, &local, PMIX_UINT16);
    proc.Add(PMIX_NODE_RANK, &local, PMIX_UINT16);
    proc.Add(PMIX_NODEID, &n, PMIX_UINT32);
    proc.Add(PMIX_HOSTNAME, hosts[n]);
    proc.Add(PMIX_APPNUM, &app, PMIX_UINT32);
    proc.Add(PMIX_APPLDR, &zero, PMIX_PROC_RANK);
    proc.Add(PMIX_GLOBAL_RANK, &rank, PMIX_PROC_RANK);
    proc.Add(PMIX_APP_RANK, &rank, PMIX_PROC_RANK);
    job.AddArray(PMIX_PROC_DATA, proc);
  }
  pmix_data_array_t info = job.Convert();
  pmix_nspace_t ns;
  PMIX_LOAD_NSPACE(ns, nspace.c_str());
  std::promise<pmix_status_t> done;
  pmix_status_t rc = Outcome(
      PMIx_server_register_nspace(ns, static_cast<int>(size), static_cast<pmix_info_t*>(info.array),
                                  info.size, OpDone, &done),
      done);
  PMIX_DATA_ARRAY_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS) {
    *error = std::string("PMIx_server_register_nspace: ") + PMIx_Error_string(rc);
    return false;
  }
  for (uint32_t r = 0; r < size; ++r) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, ns, r);
    std::promise<pmix_status_t> client;
    rc = Outcome(PMIx_server_register_client(&p, uid, gid, nullptr, OpDone, &client), client);
    if (rc != PMIX_SUCCESS) {
      *error = std::string("PMIx_server_register_client: ") + PMIx_Error_string(rc);
      return false;
    }
  }
  return true;
}

std::map<std::string, std::string> PmixServer::Env() const {
  std::map<std::string, std::string> out;
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, nspace_.c_str(), 0);
  char** env = nullptr;
  if (PMIx_server_setup_fork(&p, &env) != PMIX_SUCCESS) return out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string var = *e;
    std::free(*e);
    const size_t eq = var.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = var.substr(0, eq);
    // The rank's own (gantryd gives them per task): rank 0's, and this host's name.
    if (name == "PMIX_RANK" || name == "PMIX_HOSTNAME") continue;
    out[name] = var.substr(eq + 1);
  }
  std::free(static_cast<void*>(env));
  out["PMIX_MCA_gds"] = "hash";  // not the shared-memory stores of this host (Start)
  return out;
}

std::optional<int> PmixServer::Aborted() const {
  std::lock_guard<std::mutex> l(g_state->mu);
  return g_state->aborted;
}

void PmixServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // PMIx_server_finalize closes the ranks' connections and stops libpmix's thread; on a
  // thread of its own, given 5 s (it can hang, above), past which it and g_state are left.
  auto done = std::make_shared<std::promise<void>>();
  std::thread([done] {
    PMIx_server_finalize();
    done->set_value();
  }).detach();
  const bool finished =
      done->get_future().wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  std::error_code ignored;
  std::filesystem::remove_all(tmpdir_, ignored);
  if (!finished) return;
  delete g_state;
  g_state = nullptr;
}

}  // namespace gantry::cli
