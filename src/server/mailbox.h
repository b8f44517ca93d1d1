// Mailbox: how other threads hand work to a thread that owns some state, in batches. Any
// thread pushes; the owner takes everything waiting at once (the Controller runs a batch
// of calls in one store transaction; the Kubernetes scheduler applies a batch of watch
// events before a pass). Closing it refuses later pushes and wakes the owner, which takes
// what is left and answers it.
// Thread-safety: every method is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

namespace gantry::server {

template <typename T>
class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  // `open` false: pushes are refused until Open (a controller not started yet).
  explicit Mailbox(bool open = true) : closed_(!open) {}

  void Open() {
    std::lock_guard lock(mu_);
    closed_ = false;
  }

  // Takes `item` and wakes the owner; false while closed, and `item` is left untouched
  // with the caller (to answer it).
  bool Push(T&& item) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }

  // Waits until something is waiting, `until` passes, or the mailbox is closed; takes all
  // that waits (possibly nothing). `closed` says whether it was closed by then.
  std::deque<T> Take(Clock::time_point until, bool* closed = nullptr) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, until, [&] { return closed_ || !items_.empty(); });
    if (closed != nullptr) *closed = closed_;
    std::deque<T> out;
    out.swap(items_);
    return out;
  }

  // Refuses later pushes and wakes the owner; false when it was closed already.
  bool Close() {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      closed_ = true;
    }
    cv_.notify_all();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_;
};

}  // namespace gantry::server
