// Offload: a thread of its own that runs, in order, work handed to it that reads no state
// of the thread handing it over. The controller decodes the stored jobs of sacct's window
// there (a JSON record and a job spec each: 0.53 s of its thread at 20,000 jobs) and gets
// the result back as a message.
// Thread-safety: every method is thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "server/mailbox.h"

namespace gantry::server {

class Offload {
 public:
  Offload() : thread_([this] { Run(); }) {}
  ~Offload() { Stop(); }
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;

  // False once stopped: `fn` is not run, and the caller answers for it.
  bool Post(std::function<void()> fn) { return box_.Push(std::move(fn)); }

  // Runs what was posted before it, then joins the thread.
  void Stop() {
    box_.Close();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    for (bool closed = false; !closed;) {
      // An hour at most per wait: a steady_clock time point far in the future overflows.
      auto work = box_.Take(std::chrono::steady_clock::now() + std::chrono::hours(1), &closed);
      for (auto& fn : work) fn();
    }
  }

  Mailbox<std::function<void()>> box_;  // before thread_: it is built first
  std::thread thread_;
};

}  // namespace gantry::server
