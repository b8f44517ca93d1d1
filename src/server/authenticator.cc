#include "server/authenticator.h"

#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "server/controller_internal.h"
#include "server/metrics.h"

namespace gantry::server {

Authenticator::Authenticator(Store& store, double submit_rate, double submit_burst)
    : store_(store),
      submit_rate_(submit_rate),
      submit_burst_(submit_burst > 0 ? submit_burst : 2 * submit_rate) {}

std::optional<Principal> Authenticator::Authenticate(const std::string& token, int64_t now_ms,
                                                     Reply& error) {
  if (token.empty()) {
    error = Reply::Error(Code::kUnauthenticated, kMissingToken);
    return std::nullopt;
  }
  if (token.rfind(kJobTokenPrefix, 0) == 0) {
    if (jobs_) return jobs_(token, error);
    error = Reply::Error(Code::kUnauthenticated,
                         "invalid token: a job's credential is valid only while its run is");
    return std::nullopt;
  }
  if (token.rfind(kSessionPrefix, 0) == 0) return SessionPrincipal(token, now_ms, error);
  const std::string hash = Sha256Hex(token);
  if (auto it = cache_.find(hash); it != cache_.end()) return it->second;
  auto found = store_.FindToken(hash);
  if (!found) StoreFailed(found.error());
  if (!*found) {
    error = Reply::Error(Code::kUnauthenticated, "invalid token: no such token is registered");
    return std::nullopt;
  }
  Principal p = PrincipalOf(**found);
  if (cache_.size() > 10000) cache_.clear();
  cache_.emplace(hash, p);
  return p;
}

std::optional<Principal> Authenticator::AuthenticateUser(const std::string& token, int64_t now_ms,
                                                         Reply& error) {
  auto p = Authenticate(token, now_ms, error);
  if (p && p->role == Role::kAgent) {
    error = Reply::Error(Code::kForbidden, "an agent token may only be used by gantry-agent");
    return std::nullopt;
  }
  return p;
}

std::optional<Principal> Authenticator::SessionPrincipal(const std::string& session, int64_t now_ms,
                                                         Reply& error) {
  auto found = store_.FindSession(Sha256Hex(session));
  if (!found) StoreFailed(found.error());
  if (!*found || (**found).second <= now_ms) {
    error = Reply::Error(Code::kUnauthenticated,
                         "session ended (signed out or expired): sign in again");
    return std::nullopt;
  }
  auto token = store_.FindToken((**found).first);
  if (!token) StoreFailed(token.error());
  if (!*token) {
    error = Reply::Error(Code::kUnauthenticated, "session ended: its token was revoked");
    return std::nullopt;
  }
  return PrincipalOf(**token);
}

Reply Authenticator::SignIn(const std::string& token, int64_t now_ms) {
  Reply err;
  if (token.rfind(kSessionPrefix, 0) == 0 || token.rfind(kJobTokenPrefix, 0) == 0) {
    err = Reply::Error(Code::kUnauthenticated,
                       "sign in with a user's or an admin's token, not a session's or a job's");
    LogRefusal(err, "unauthenticated");
    return err;
  }
  auto user = AuthenticateUser(token, now_ms, err);
  if (!user) {
    LogRefusal(err, "unauthenticated");
    return err;
  }
  const std::string session = kSessionPrefix + NewToken();
  if (Status s = store_.AddSession(Sha256Hex(session), Sha256Hex(token),
                                   now_ms + int64_t{ApiBackend::kSessionSeconds} * 1000);
      !s) {
    StoreFailed(s.error());
  }
  Reply r;
  r.body = WhoAmIBody(*user);
  r.body["session"] = session;
  return r;
}

void Authenticator::SignOut(const std::string& session) {
  if (session.rfind(kSessionPrefix, 0) != 0) return;
  if (Status s = store_.DeleteSession(Sha256Hex(session)); !s) StoreFailed(s.error());
}

std::optional<Reply> Authenticator::OverSubmitRate(const Principal& user, int64_t now_ms) {
  if (submit_rate_ <= 0 || user.admin()) return std::nullopt;
  auto [it, fresh] = buckets_.try_emplace(user.team, Bucket{submit_burst_, now_ms});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens = std::min(submit_burst_,
                        b.tokens + static_cast<double>(std::max<int64_t>(0, now_ms - b.at_ms)) /
                                       1000.0 * submit_rate_);
    b.at_ms = now_ms;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return std::nullopt;
  }
  ++rate_limited_;
  const double wait_s = (1 - b.tokens) / submit_rate_;
  Reply r =
      Reply::Error(Code::kTooManyRequests, "team " + user.team + " is over its submit rate (" +
                                               FormatValue(submit_rate_) + " a second, bursts of " +
                                               FormatValue(submit_burst_) + "): retry in " +
                                               FormatValue(std::ceil(wait_s * 100) / 100) + " s");
  r.body["retry_after_s"] = static_cast<int64_t>(std::ceil(wait_s));
  return r;
}

void Authenticator::Flush(int64_t now) {
  if (now - flushed_ < 10'000) return;
  cache_.clear();
  flushed_ = now;
}

void Authenticator::LogRefusal(const Reply& r, const std::string& who) {
  if (r.code != Code::kUnauthenticated && r.code != Code::kForbidden) return;
  log::Warn("refused", {{"who", who},
                        {"status", r.code == Code::kForbidden ? "403" : "401"},
                        {"error", r.body.value("error", std::string())}});
}

}  // namespace gantry::server
