// RunSummary: what a finished simulation leaves for the reports people read: its JSON
// report, its time series, its queue-wait CDF per tier, and the table of main figures
// that `gantry compare` prints and the HTML report shows (one column per run).
// Thread-safety: none needed (values).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sim/report.h"
#include "sim/timeline.h"

namespace gantry::sim {

struct RunSummary {
  std::string policy;
  nlohmann::ordered_json report;    // as Report::Write writes it
  nlohmann::ordered_json timeline;  // Timeline::ToJson
  // Per tier: {"count", "wait_s": [...], "fraction": [...]}: at most kCdfPoints points
  // (wait_s[k], fraction of the tier's started jobs that waited at most that long).
  nlohmann::ordered_json wait_cdf;
};

inline constexpr size_t kCdfPoints = 200;

// Captures a finished run. Cost: O(jobs log jobs) for the CDF.
RunSummary SummarizeRun(std::string policy, const Report& report, const Timeline& timeline);

// Rows of formatted figures, one column per run; "-" where a report lacks the figure.
struct FigureTable {
  std::vector<std::string> columns;  // "figure", then the policies
  std::vector<std::vector<std::string>> rows;
};
FigureTable MainFigures(const std::vector<RunSummary>& runs);
// Aligned text: figure names left, values right.
void PrintTable(std::ostream& out, const FigureTable& table);
nlohmann::ordered_json ToJson(const FigureTable& table);

}  // namespace gantry::sim
