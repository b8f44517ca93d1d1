// ProgressLine: one self-overwriting line on stderr while a simulation runs: events
// handled, simulated time, jobs done of the total, events per second. Shown only when
// enabled and stderr is a terminal; nothing at all is written otherwise (pipes, files,
// tests). The simulator calls the callback every N events without reading a clock;
// the line throttles itself to one redraw per 0.5 s of wall time and is erased by
// Clear() (or the destructor). Thread-safety: none; one run at a time.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "sim/simulator.h"

namespace gantry::cli {

class ProgressLine {
 public:
  // `label` starts the line (e.g. "fifo 1/2: "); `total_jobs` is the trace's job count.
  ProgressLine(bool enabled, std::string label, size_t total_jobs);
  ~ProgressLine() { Clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // For SimOptions::progress; empty when the line is off.
  std::function<void(const sim::SimProgress&)> Callback();
  // Erases the line if one was drawn.
  void Clear();

  // True when stderr is a terminal and `no_progress` was not asked for.
  static bool Wanted(bool no_progress);
  // "3d 04:05:06" or "04:05:06".
  static std::string FormatSimTime(core::Ticks t);

 private:
  void Update(const sim::SimProgress& p);

  bool enabled_;
  std::string label_;
  size_t total_jobs_;
  std::chrono::steady_clock::time_point start_, last_;
  bool shown_ = false;
};

}  // namespace gantry::cli
