// Tokens and who may do what.
//
// A token is 32 random bytes, written "gty_" + 64 hex digits. The store keeps only its
// SHA-256 (OpenSSL); tokens are long random strings, not passwords, so an unsalted fast
// hash is enough: guessing a token is as hard as guessing 256 random bits, and a stolen
// database yields no usable token. Roles: `admin` (cluster operations, every queue),
// `team` (submit to and cancel in its own queues and their descendants; read the
// cluster), `agent` (the agent endpoints only).
// Thread-safety: stateless functions; Principal is a plain value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/queue.h"
#include "server/store.h"

namespace gantry::server {

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// A fresh token from the kernel's random source.
std::string NewToken();

enum class Role : uint8_t { kAdmin, kTeam, kAgent };

struct Principal {
  Role role = Role::kTeam;
  std::string team;                 // kTeam
  std::vector<std::string> queues;  // kTeam: the queues it owns
  std::vector<std::string> nodes;   // kAgent: the nodes it may speak for; empty: any
  std::string label;
  std::string user;  // the person (a Unix account name), when the token names one
  // A job's own credential (GANTRY_TOKEN inside a batch job, "gjt_..."): a team principal
  // of that job's queue and user, which may also run steps of this job and no other, and
  // cancel only jobs of its user. Valid while the job's run is.
  std::string job;

  bool admin() const { return role == Role::kAdmin; }
  // Who this is, for messages: "team nlp", "admin", "agent".
  std::string Describe() const;
};

Principal PrincipalOf(const StoredToken& token);

// GET /v1/session's body (the console's session): principal, admin, team, queues, user.
nlohmann::json WhoAmIBody(const Principal& p);

// The refusal of a request that carries no token.
inline constexpr const char* kMissingToken =
    "missing token: send \"Authorization: Bearer TOKEN\" (gantry takes --token or "
    "GANTRY_TOKEN)";

// Whether `p` may submit to and cancel in `queue`: admins anywhere; a team in a queue it
// owns or a descendant of one (queues form a tree).
bool MaySubmitTo(const Principal& p, const core::QueueTree& queues, std::string_view queue);

// Extracts the token from an "Authorization: Bearer TOKEN" header value; empty when the
// header is absent or malformed.
std::string BearerToken(std::string_view authorization);

}  // namespace gantry::server
