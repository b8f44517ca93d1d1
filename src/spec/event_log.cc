#include "spec/event_log.h"

#include <bit>
#include <cstdio>
#include <string>

namespace gantry::spec {

std::string FormatSeconds(core::Ticks t) {
  const char* sign = t < 0 ? "-" : "";
  core::Ticks a = t < 0 ? -t : t;
  std::string s = sign + std::to_string(a / core::kTicksPerSecond);
  core::Ticks ms = a % core::kTicksPerSecond;
  if (ms != 0) {
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03lld", static_cast<long long>(ms));
    s += frac;
    while (s.back() == '0') s.pop_back();
  }
  return s;
}

void WriteJsonString(std::ostream& out, std::string_view s) {
  out << '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      case '\r':
        out << "\\r";
        break;
      case '\t':
        out << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out << buf;
        } else {
          out << c;
        }
    }
  }
  out << '"';
}

void EventLog::Head(core::Ticks t, std::string_view type) {
  out_ << "{\"t\":" << FormatSeconds(t) << ",\"type\":\"" << type << '"';
}

void EventLog::Field(std::string_view key, std::string_view value) {
  out_ << ",\"" << key << "\":";
  WriteJsonString(out_, value);
}

void EventLog::Submit(core::Ticks t, std::string_view job) {
  Head(t, "submit");
  Field("job", job);
  End();
}

void EventLog::Start(core::Ticks t, std::string_view job, const core::Allocation& alloc) {
  Head(t, "start");
  Field("job", job);
  Alloc(alloc);
  End();
}

void EventLog::Resize(core::Ticks t, std::string_view job, size_t from,
                      const core::Allocation& alloc) {
  Head(t, "resize");
  Field("job", job);
  out_ << ",\"from\":" << from << ",\"size\":" << alloc.size();
  Alloc(alloc);
  End();
}

void EventLog::Alloc(const core::Allocation& alloc) {
  out_ << ",\"alloc\":[";
  for (size_t i = 0; i < alloc.size(); ++i) {
    const core::WorkerAlloc& w = alloc[i];
    const core::Node& node = cluster_.node(w.node);
    out_ << (i ? ",{" : "{") << "\"node\":";
    WriteJsonString(out_, node.name);
    switch (w.sharing) {
      case core::Sharing::kExclusive: {
        out_ << ",\"gpus\":[";
        bool first = true;
        for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
          out_ << (first ? "" : ",") << std::countr_zero(m);
          first = false;
        }
        out_ << ']';
        break;
      }
      case core::Sharing::kMig:
        out_ << ",\"gpu\":" << int{w.gpu} << ",\"mig\":";
        WriteJsonString(out_,
                        cluster_.catalog().model(node.model).mig_profiles[w.mig_profile].name);
        out_ << ",\"start\":" << int{w.mig_start};
        break;
      case core::Sharing::kMps:
      case core::Sharing::kTimeslice: {
        // share_milli / 1000 written exactly, e.g. 250 -> 0.25
        std::string share = "0." + std::to_string(1000 + w.share_milli).substr(1);
        while (share.back() == '0') share.pop_back();
        out_ << ",\"gpu\":" << int{w.gpu} << ",\"share\":" << share << ",\"sharing\":\""
             << core::Name(w.sharing) << '"';
        break;
      }
    }
    out_ << '}';
  }
  out_ << ']';
}

void EventLog::Preempt(core::Ticks t, std::string_view job, std::string_view by,
                       std::string_view reason, core::Ticks signaled) {
  Head(t, "preempt");
  Field("job", job);
  if (!by.empty()) Field("by", by);
  Field("reason", reason);
  out_ << ",\"signaled\":" << FormatSeconds(signaled);
  End();
}

void EventLog::Finish(core::Ticks t, std::string_view job) {
  Head(t, "finish");
  Field("job", job);
  End();
}

void EventLog::JobEvent(core::Ticks t, std::string_view type, std::string_view job,
                        std::string_view key, std::string_view text) {
  Head(t, type);
  Field("job", job);
  Field(key, text);
  End();
}

void EventLog::Reject(core::Ticks t, std::string_view job, std::string_view error) {
  JobEvent(t, "reject", job, "error", error);
}
void EventLog::Budget(core::Ticks t, std::string_view queue, std::string_view state,
                      double spent_gpu_hours, double budget_gpu_hours) {
  Head(t, "budget");
  Field("queue", queue);
  Field("state", state);
  char buf[64];
  std::snprintf(buf, sizeof buf, ",\"spent_gpu_hours\":%.6g,\"budget_gpu_hours\":%.6g",
                spent_gpu_hours, budget_gpu_hours);
  out_ << buf;
  End();
}

void EventLog::Reclaim(core::Ticks t, std::string_view job, std::string_view reason) {
  JobEvent(t, "reclaim", job, "reason", reason);
}
void EventLog::Requeue(core::Ticks t, std::string_view job, std::string_view reason) {
  JobEvent(t, "requeue", job, "reason", reason);
}
void EventLog::Cancel(core::Ticks t, std::string_view job, std::string_view reason) {
  JobEvent(t, "cancel", job, "reason", reason);
}
void EventLog::Wait(core::Ticks t, std::string_view job, std::string_view reason, core::Ticks at) {
  Head(t, "wait");
  Field("job", job);
  Field("reason", reason);
  if (at >= 0) out_ << ",\"at\":" << FormatSeconds(at);
  End();
}

void EventLog::NodeDown(core::Ticks t, std::string_view node) {
  Head(t, "node_down");
  Field("node", node);
  End();
}

void EventLog::NodeUp(core::Ticks t, std::string_view node) {
  Head(t, "node_up");
  Field("node", node);
  End();
}

}  // namespace gantry::spec
