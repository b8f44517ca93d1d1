#include "kube/lease.h"

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/log.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// metav1.MicroTime, as the Lease's times are written.
std::string MicroTimeNow() {
  const auto now = std::chrono::system_clock::now();
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t t = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lldZ", static_cast<long long>(us % 1'000'000));
  return std::string(buf) + frac;
}

bool Sleep(const std::atomic<bool>& stop, int ms) {
  for (int slept = 0; slept < ms && !stop; slept += 50)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !stop;
}

}  // namespace

LeaseElector::LeaseElector(Client& client, LeaseOptions options)
    : client_(client),
      options_(std::move(options)),
      collection_("/apis/coordination.k8s.io/v1/namespaces/" + options_.ns + "/leases"),
      path_(collection_ + "/" + options_.name),
      label_(options_.ns + "/" + options_.name) {}

LeaseElector::Try LeaseElector::TryAcquireOrRenew() {
  const std::string now = MicroTimeNow();
  auto got = client_.Request("GET", path_);
  if (!got) return Try::kError;
  if (got->status == 404) {
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                  {"spec",
                   {{"holderIdentity", options_.identity},
                    {"leaseDurationSeconds", options_.duration_s},
                    {"acquireTime", now},
                    {"renewTime", now},
                    {"leaseTransitions", 0}}}};
    auto r = client_.Request("POST", collection_, lease.dump());
    if (!r) return Try::kError;
    return r->status == 201 ? Try::kHeld : Try::kTaken;
  }
  if (got->status != 200) return Try::kError;
  json lease = json::parse(got->body, nullptr, false);
  if (!lease.is_object()) return Try::kError;
  json& spec = lease["spec"];
  if (!spec.is_object()) spec = json::object();
  const std::string holder = spec.value("holderIdentity", "");
  const int duration_s = spec.value("leaseDurationSeconds", options_.duration_s);
  const std::string record = spec.dump();
  if (record != observed_) {  // it moved: the holder is alive (or it was us)
    observed_ = record;
    observed_at_ms_ = SteadyMs();
  }
  transitions_ = spec.value("leaseTransitions", 0);
  const bool ours = holder == options_.identity;
  const bool expired = holder.empty() || SteadyMs() - observed_at_ms_ > int64_t{duration_s} * 1000;
  if (!ours && !expired) return Try::kTaken;
  if (!ours) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = transitions_ + 1;
  }
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = options_.duration_s;
  spec["renewTime"] = now;
  // The metadata read carries its resourceVersion: a replica that wrote meanwhile wins
  // and this write is refused (409).
  auto r = client_.Request("PUT", path_, lease.dump());
  if (!r) return Try::kError;
  if (r->status != 200) return r->status == 409 ? Try::kTaken : Try::kError;
  observed_ = json::parse(r->body, nullptr, false).value("spec", json::object()).dump();
  observed_at_ms_ = SteadyMs();
  if (!ours) {
    log::Info("kubernetes: leader lease taken", {{"lease", label_},
                                                 {"identity", options_.identity},
                                                 {"previous", holder.empty() ? "(none)" : holder}});
  }
  return Try::kHeld;
}

bool LeaseElector::Acquire(const std::atomic<bool>& stop) {
  bool said = false;
  while (!stop) {
    const Try t = TryAcquireOrRenew();
    if (t == Try::kHeld) return true;
    if (!said) {
      log::Info("kubernetes: waiting for the leader lease",
                {{"lease", label_}, {"identity", options_.identity}});
      said = true;
    }
    if (!Sleep(stop, options_.retry_s * 1000)) break;
  }
  return false;
}

bool LeaseElector::KeepRenewing(const std::atomic<bool>& stop) {
  int64_t renewed = SteadyMs();
  while (Sleep(stop, options_.retry_s * 1000)) {
    const Try t = TryAcquireOrRenew();
    if (t == Try::kHeld) {
      renewed = SteadyMs();
      continue;
    }
    if (t == Try::kTaken || SteadyMs() - renewed > int64_t{options_.renew_deadline_s} * 1000) {
      log::Error("kubernetes: leader lease lost",
                 {{"lease", label_}, {"identity", options_.identity}});
      return false;
    }
  }
  Release();
  return true;
}

// On a clean stop the Lease is given up at once (holder cleared), so a standby need not
// wait out its duration, as client-go's ReleaseOnCancel.
void LeaseElector::Release() {
  auto got = client_.Request("GET", path_);
  if (!got || got->status != 200) return;
  json lease = json::parse(got->body, nullptr, false);
  if (!lease.is_object() || !lease["spec"].is_object() ||
      lease["spec"].value("holderIdentity", "") != options_.identity) {
    return;
  }
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = MicroTimeNow();
  (void)client_.Request("PUT", path_, lease.dump());
}

}  // namespace gantry::kube
