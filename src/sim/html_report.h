// HtmlReport: the self-contained HTML page of one or more simulated runs (`gantry sim
// --html`, `gantry compare --html`): a summary table of the main figures and, per run,
// plots drawn by JavaScript embedded in the page (html/report.js) from JSON embedded
// in the page. Nothing is loaded from the network; the page opens from a file.
// Thread-safety: none needed (a function).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "sim/run_summary.h"

namespace gantry::sim {

// Writes the page. `subtitle` says where the runs came from (inputs, command).
void WriteHtml(std::ostream& out, const std::string& title, const std::string& subtitle,
               const std::vector<RunSummary>& runs);

}  // namespace gantry::sim
