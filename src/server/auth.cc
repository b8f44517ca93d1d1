#include "server/auth.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <array>
#include <cstdio>
#include <stdexcept>

namespace gantry::server {

namespace {
std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}
}  // namespace

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 failed");  // invariant: cannot happen
  }
  return Hex(md.data(), len);
}

std::string NewToken() {
  std::array<unsigned char, 32> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) throw std::runtime_error("getrandom failed");
    got += static_cast<size_t>(n);
  }
  return "gty_" + Hex(bytes.data(), bytes.size());
}

std::string Principal::Describe() const {
  switch (role) {
    case Role::kAdmin:
      return user.empty() ? "admin" : "admin " + user;
    case Role::kAgent:
      return "agent";
    case Role::kTeam:
      if (!job.empty()) return "job " + job + "'s credential";
      return user.empty() ? "team " + team : "user " + user + " of team " + team;
  }
  return "?";
}

nlohmann::json WhoAmIBody(const Principal& p) {
  return {{"principal", p.Describe()},
          {"admin", p.admin()},
          {"team", p.team},
          {"queues", p.queues},
          {"user", p.user}};
}

Principal PrincipalOf(const StoredToken& token) {
  Principal p;
  p.role = token.role == "admin"   ? Role::kAdmin
           : token.role == "agent" ? Role::kAgent
                                   : Role::kTeam;
  p.team = token.team;
  (p.role == Role::kAgent ? p.nodes : p.queues) =
      token.queues;  // an agent token's scope is its nodes
  p.label = token.label;
  p.user = token.user;
  return p;
}

bool MaySubmitTo(const Principal& p, const core::QueueTree& queues, std::string_view queue) {
  if (p.role == Role::kAdmin) return true;
  if (p.role != Role::kTeam) return false;
  auto q = queues.Find(queue);
  if (!q) return false;
  for (core::QueueId a : queues.queue(*q).self_and_ancestors) {
    for (const std::string& own : p.queues) {
      if (queues.queue(a).spec.name == own) return true;
    }
  }
  return false;
}

std::string BearerToken(std::string_view h) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (h.size() <= kPrefix.size() || h.substr(0, kPrefix.size()) != kPrefix) return {};
  h.remove_prefix(kPrefix.size());
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  return std::string(h);
}

}  // namespace gantry::server
