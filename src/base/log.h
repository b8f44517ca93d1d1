// Operational log: what gantryd and gantry-agent do (registrations, starts, ends,
// refusals, who did what), one line per event on stderr, for people and for journald and
// log shippers. Two forms:
//   text (default): 2026-11-25T10:04:05.123Z info node up node=h100-3 agent=5f2c...
//   json (--log-format json): {"ts":"2026-11-25T10:04:05.123Z","level":"info",
//                              "program":"gantryd","msg":"node up","node":"h100-3",...}
// When stderr is the systemd journal (JOURNAL_STREAM is set), each line starts with the
// syslog priority (<6> info, <4> warning, <3> error), which journald reads and strips,
// so `journalctl -u gantryd -p warning` shows refusals and failures only.
// Written here rather than with spdlog: a line is one formatted write under a mutex with
// key=value fields, which spdlog would need a custom formatter for; nothing else is used.
// Thread-safety: Write may be called from any thread.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace gantry::log {

enum class Level { kInfo, kWarning, kError };
using Fields = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// Once, at start: the program's name and the form ("text" or "json"); false for another form.
bool Configure(std::string_view program, std::string_view format);
void Write(Level level, std::string_view message, Fields fields = {});
inline void Info(std::string_view message, Fields fields = {}) {
  Write(Level::kInfo, message, fields);
}
inline void Warn(std::string_view message, Fields fields = {}) {
  Write(Level::kWarning, message, fields);
}
inline void Error(std::string_view message, Fields fields = {}) {
  Write(Level::kError, message, fields);
}

}  // namespace gantry::log
