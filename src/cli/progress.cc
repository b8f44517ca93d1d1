#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace gantry::cli {

namespace {
constexpr std::chrono::milliseconds kRedrawEvery{500};
}  // namespace

ProgressLine::ProgressLine(bool enabled, std::string label, size_t total_jobs)
    : enabled_(enabled),
      label_(std::move(label)),
      total_jobs_(total_jobs),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

bool ProgressLine::Wanted(bool no_progress) { return !no_progress && ::isatty(STDERR_FILENO) == 1; }

std::string ProgressLine::FormatSimTime(core::Ticks t) {
  const int64_t s = t / core::kTicksPerSecond;
  const std::string hms = fmt::format("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60);
  return s >= 86400 ? fmt::format("{}d {}", s / 86400, hms) : hms;
}

std::function<void(const sim::SimProgress&)> ProgressLine::Callback() {
  if (!enabled_) return {};
  return [this](const sim::SimProgress& p) { Update(p); };
}

void ProgressLine::Update(const sim::SimProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < kRedrawEvery) return;
  last_ = now;
  const double wall = std::chrono::duration<double>(now - start_).count();
  const double rate = wall > 0 ? static_cast<double>(p.events) / wall : 0.0;
  // \r back to the start, \033[K erases what a longer earlier line left.
  std::fputs(fmt::format("\r{}{} events, sim time {}, jobs {}/{} done, {:.0f} events/s\033[K",
                         label_, p.events, FormatSimTime(p.now), p.done, total_jobs_, rate)
                 .c_str(),
             stderr);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace gantry::cli
