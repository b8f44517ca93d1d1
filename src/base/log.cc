#include "base/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>

namespace gantry::log {

namespace {

struct State {
  std::mutex mu;
  std::string program = "gantry";
  bool json = false;
  bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
};

State& state() {
  static State s;
  return s;
}

std::string Now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// A text field value: as is when it has no space, quote or '=', else JSON-quoted.
std::string TextValue(std::string_view v) {
  const bool plain = !v.empty() && v.find_first_of(" \t\n\"=") == std::string_view::npos;
  return plain ? std::string(v) : nlohmann::json(std::string(v)).dump();
}

}  // namespace

bool Configure(std::string_view program, std::string_view format) {
  if (format != "text" && format != "json") return false;
  State& s = state();
  std::lock_guard lk(s.mu);
  s.program = program;
  s.json = format == "json";
  return true;
}

void Write(Level level, std::string_view message, Fields fields) {
  State& s = state();
  const char* name = level == Level::kInfo      ? "info"
                     : level == Level::kWarning ? "warning"
                                                : "error";
  const char* priority = level == Level::kInfo ? "<6>" : level == Level::kWarning ? "<4>" : "<3>";
  std::string line = s.journal ? priority : "";
  std::lock_guard lk(s.mu);
  if (s.json) {
    nlohmann::ordered_json j = {
        {"ts", Now()}, {"level", name}, {"program", s.program}, {"msg", std::string(message)}};
    for (const auto& [k, v] : fields) j[std::string(k)] = std::string(v);
    line += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line += Now() + " " + name + " " + s.program + ": " + std::string(message);
    for (const auto& [k, v] : fields) line += " " + std::string(k) + "=" + TextValue(v);
  }
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace gantry::log
