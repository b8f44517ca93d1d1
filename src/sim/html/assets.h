// The HTML report's stylesheet and script (report.css, report.js beside this file),
// compiled into the binary by CMake (assets.cc.in) so a report needs no other file.
#pragma once

namespace gantry::sim::html {

extern const char* const kReportCss;
extern const char* const kReportJs;

}  // namespace gantry::sim::html
