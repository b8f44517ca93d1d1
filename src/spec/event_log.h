// EventLog: writes the event log of spec section 4, one JSON object per line; the
// simulator and gantryd write the same file contract through it.
//
// Field order and number formatting are fixed, so the same run gives a byte-identical
// log. Times are written in seconds: integers when whole, else decimals.
// Thread-safety: none; one writer per log.
#pragma once

#include <ostream>
#include <string_view>

#include "core/ledger.h"
#include "core/model/cluster.h"
#include "core/model/types.h"

namespace gantry::spec {

class EventLog {
 public:
  EventLog(std::ostream& out, const core::Cluster& cluster) : out_(out), cluster_(cluster) {}

  void Submit(core::Ticks t, std::string_view job);
  void Start(core::Ticks t, std::string_view job, const core::Allocation& alloc);
  // An elastic job runs on from `from` workers at alloc.size(), on `alloc`, from now (its
  // run so far ended at a checkpoint).
  void Resize(core::Ticks t, std::string_view job, size_t from, const core::Allocation& alloc);
  // Written when the victim's GPUs are released; `signaled` is when it was told.
  void Preempt(core::Ticks t, std::string_view job, std::string_view by, std::string_view reason,
               core::Ticks signaled);
  void Finish(core::Ticks t, std::string_view job);
  void Reject(core::Ticks t, std::string_view job, std::string_view error);
  void Reclaim(core::Ticks t, std::string_view job, std::string_view reason);
  void Requeue(core::Ticks t, std::string_view job, std::string_view reason);
  void Cancel(core::Ticks t, std::string_view job, std::string_view reason);
  // `at` (written where >= 0): the wait's time as WaitReason::at gives it, when the text
  // was written (an estimate may move later without a new event).
  void Wait(core::Ticks t, std::string_view job, std::string_view reason, core::Ticks at = -1);
  void NodeDown(core::Ticks t, std::string_view node);
  void NodeUp(core::Ticks t, std::string_view node);
  // A queue's GPU-hour budget ran out (`spent`) or a new period renewed it (`renewed`).
  void Budget(core::Ticks t, std::string_view queue, std::string_view state, double spent_gpu_hours,
              double budget_gpu_hours);

 private:
  void Alloc(const core::Allocation& alloc);  // ,"alloc":[...]
  void Head(core::Ticks t, std::string_view type);
  void Field(std::string_view key, std::string_view value);
  // {"t","type","job", key: text}
  void JobEvent(core::Ticks t, std::string_view type, std::string_view job, std::string_view key,
                std::string_view text);
  void End() { out_ << "}\n"; }

  std::ostream& out_;
  const core::Cluster& cluster_;
};

// Seconds as JSON text: "12", "12.5", "0.001".
std::string FormatSeconds(core::Ticks t);
// JSON string literal with escapes.
void WriteJsonString(std::ostream& out, std::string_view s);

}  // namespace gantry::spec
