// Authenticator: who a request's token stands for, for both of gantryd's backends (the
// Controller; with --kubernetes, the API of kube/scheduler.cc). auth.h has the roles and
// what each may do; this type owns the state behind them:
//   - the store's tokens ("gty_..."), cached by hash; the cache is dropped every 10 s, so
//     a revoked token works at most that long after `gantryd token revoke`;
//   - console sessions ("gss_..."): a secret made at sign-in whose hash the store maps to
//     its token's hash and an expiry, so the cookie never holds the token;
//   - job credentials ("gjt_..."): the jobs' book knows them (a job's run holds one), so
//     its owner gives a lookup (SetJobCredentials); without one they are refused;
//   - the per-team submit rate limit (a token bucket per team; admins are exempt).
// A store call that fails throws StoreDown (store.h): the Controller drops its batch and
// rides through the outage; the Kubernetes API answers 503.
// Thread-safety: none; the owner serialises calls (the controller thread; KubeApi's mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/api_backend.h"
#include "server/auth.h"
#include "server/store.h"

namespace gantry::server {

// A console session's secret starts so (a cookie's value; never a token of the store).
inline constexpr const char* kSessionPrefix = "gss_";
// A job's credential: "gjt_" + 64 hex digits + "_" + the job's name.
inline constexpr const char* kJobTokenPrefix = "gjt_";
inline constexpr size_t kJobTokenHex = 64;

class Authenticator {
 public:
  // The principal of a job credential while its job's run is active; nullopt with a 401
  // in `error` otherwise.
  using JobCredentials =
      std::function<std::optional<Principal>(const std::string& token, Reply& error)>;

  // `submit_rate` submits a second refill each team's bucket of `submit_burst` (0: twice
  // the rate); a rate of 0 is no limit.
  explicit Authenticator(Store& store, double submit_rate = 0, double submit_burst = 0);

  void SetJobCredentials(JobCredentials jobs) { jobs_ = std::move(jobs); }

  // Whoever `token` stands for at wall time `now_ms` (Unix ms: sessions expire), or
  // nullopt with the 401 in `error`.
  std::optional<Principal> Authenticate(const std::string& token, int64_t now_ms, Reply& error);
  // The same for a user or an admin: an agent's token is refused (403).
  std::optional<Principal> AuthenticateUser(const std::string& token, int64_t now_ms, Reply& error);

  // POST /v1/session: WhoAmIBody of a user's or an admin's token plus, in `session`, a
  // new session's secret, valid for ApiBackend::kSessionSeconds from `now_ms`.
  Reply SignIn(const std::string& token, int64_t now_ms);
  // Ends a session (anything but a session's secret is ignored).
  void SignOut(const std::string& session);

  // A 429 with retry_after_s when `user`'s team is over its submit rate at `now_ms`;
  // nullopt (and one token taken) otherwise.
  std::optional<Reply> OverSubmitRate(const Principal& user, int64_t now_ms);
  uint64_t rate_limited() const { return rate_limited_; }

  // Drops the cached principals when 10 s have passed since the last time (`now`: any
  // clock in ms, the same at each call); Forget drops them now (the store was read back).
  void Flush(int64_t now);
  void Forget() { cache_.clear(); }

  // A 401 or 403 goes to the operational log with who asked and why it was refused.
  static void LogRefusal(const Reply& r, const std::string& who);

 private:
  std::optional<Principal> SessionPrincipal(const std::string& session, int64_t now_ms,
                                            Reply& error);

  Store& store_;
  JobCredentials jobs_;
  std::unordered_map<std::string, Principal> cache_;  // token hash -> principal
  int64_t flushed_ = 0;
  double submit_rate_ = 0;
  double submit_burst_ = 0;
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  std::map<std::string, Bucket> buckets_;  // by team
  uint64_t rate_limited_ = 0;              // submits refused for the rate limit (metrics)
};

}  // namespace gantry::server
