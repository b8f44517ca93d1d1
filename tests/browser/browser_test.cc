// The HTML report in a real browser (label `browser`): Debian's chromium, headless,
// opens the page from a file and dumps the DOM after the page's scripts ran. Asserts
// that no JavaScript error was recorded (the page's window.onerror writes them into
// data-errors on <html>), that the script ran to its end (data-done), and that every
// plot has one <svg> with the series or bars the run's data calls for, each non-empty.
// Expected counts come from the JSON report of the same run, not from the page.
// Without chromium the test fails and says how to install it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using gantry::testing::Outcome;
using gantry::testing::Shell;
using Json = nlohmann::ordered_json;

std::string Chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    Outcome r = Shell(std::string("command -v ") + name + " 2>/dev/null");
    if (r.status == 0 && !r.output.empty()) return r.output.substr(0, r.output.find('\n'));
  }
  return "";
}

// One drawn series: a <path class="series"> with its path data, or a <rect class="bar">.
struct Series {
  std::string name;
  bool path = false;
  std::string d;     // path data
  double width = 0;  // bar width
};

// The value of attribute `attr` in the tag that starts at `pos`.
std::string Attr(const std::string& dom, size_t pos, const std::string& attr) {
  const size_t end = dom.find('>', pos);
  const size_t a = dom.find(" " + attr + "=\"", pos);
  if (a == std::string::npos || a > end) return "";
  const size_t v = a + attr.size() + 3;
  return dom.substr(v, dom.find('"', v) - v);
}

// A plot container's drawing: how many <svg>, and its series in order.
struct Plot {
  int svgs = 0;
  std::vector<Series> series;
};

// Plots by "policy/plot id", read from the dumped DOM by string search (the path data
// can be long; no regular expressions over it).
std::map<std::string, Plot> Plots(const std::string& dom) {
  std::map<std::string, Plot> plots;
  std::string policy;
  size_t pos = 0;
  const std::string kPlot = "<div class=\"plot\"";
  const std::string kSection = "<section class=\"run\"";
  while (true) {
    const size_t next_plot = dom.find(kPlot, pos);
    const size_t next_section = dom.find(kSection, pos);
    if (next_section != std::string::npos && next_section < next_plot) {
      policy = Attr(dom, next_section, "data-policy");
      pos = next_section + 1;
      continue;
    }
    if (next_plot == std::string::npos) break;
    // A plot ends where the next one or its section does.
    const size_t end =
        std::min({dom.find(kPlot, next_plot + 1), dom.find("</section>", next_plot), dom.size()});
    const std::string block = dom.substr(next_plot, end - next_plot);
    Plot& p = plots[policy + "/" + Attr(dom, next_plot, "data-plot")];
    for (size_t s = block.find("<svg"); s != std::string::npos; s = block.find("<svg", s + 1))
      ++p.svgs;
    for (size_t s = block.find("<path class=\"series\""); s != std::string::npos;
         s = block.find("<path class=\"series\"", s + 1)) {
      p.series.push_back(Series{Attr(block, s, "data-series"), true, Attr(block, s, "d"), 0});
    }
    for (size_t s = block.find("<rect class=\"bar\""); s != std::string::npos;
         s = block.find("<rect class=\"bar\"", s + 1)) {
      p.series.push_back(Series{Attr(block, s, "data-series"), false, "",
                                std::atof(Attr(block, s, "width").c_str())});
    }
    pos = end;
  }
  return plots;
}

// What each plot of a run must show, from the run's JSON report.
std::map<std::string, std::vector<std::string>> Expected(const Json& report) {
  std::map<std::string, std::vector<std::string>> want;
  want["alloc-tier"] = {"critical", "standard", "best-effort", "GPUs up"};
  for (const auto& [name, q] : report["by_queue"].items()) want["alloc-queue"].push_back(name);
  want["alloc-queue"].push_back("GPUs up");
  want["pending"] = {"pending jobs"};
  want["pending-cause"] = {
      "not yet placed",     "capacity",     "held for a reservation", "preemption under way",
      "queue at its burst", "budget spent", "outside its window",     "other",
      "pending jobs"};
  for (const char* tier : {"critical", "standard", "best-effort"}) {
    if (report["queue_wait_time_ms"][tier]["count"].get<int>() > 0)
      want["wait-cdf"].push_back(tier);
  }
  for (const auto& [name, q] : report["by_queue"].items()) {
    want["queue-usage"].push_back("mean allocated");
    want["queue-usage"].push_back("guaranteed");
    if (q.contains("burst_gpus")) want["queue-usage"].push_back("burst limit");
  }
  want["sharing"] = {"MIG instances", "MPS shares", "time-slice shares"};
  want["fragmentation"] = {"unallocated GPUs (up minus allocated)", "fragmented GPUs (FGD)"};
  want["idle-cause"] = {"down",
                        "nothing waits",
                        "wrong model",
                        "wrong pool or sharing",
                        "held for a reservation",
                        "fragmented",
                        "queue limits",
                        "not yet placed or other",
                        "unallocated GPUs (up minus allocated)"};
  want["preemptions"] = {"preemptions", "requeues (node failures)", "idle reclaims"};
  want["lost-work"] = {"preemption", "node failure", "idle reclaim"};
  return want;
}

class BrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-browser-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // kept on failure, to look at
  }
  std::string Path(const char* name) const { return (dir_ / name).string(); }

  std::string Gantry(const std::string& args) {
    Outcome r = Shell(std::string(GANTRY_BINARY) + " " + args + " 2>&1");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    return r.output;
  }

  // The DOM of the page after its scripts ran, or "" (with a test failure).
  std::string Dom(const std::string& html) {
    const std::string chromium = Chromium();
    if (chromium.empty()) {
      ADD_FAILURE() << "chromium not found: this test opens the HTML report in Debian's headless "
                       "chromium. Install it (apt-get install chromium; scripts/setup.sh does), or "
                       "leave the label out: ctest -LE browser";
      return "";
    }
    const std::string cmd =
        "timeout 120 " + chromium +
        " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" + Path("profile") +
        " --virtual-time-budget=5000 --dump-dom file://" + html + " 2>" + Path("chromium.log");
    Outcome r = Shell(cmd);
    EXPECT_EQ(r.status, 0) << cmd << "\n(see " << Path("chromium.log") << ")";
    std::ofstream(Path("dom.html")) << r.output;
    return r.output;
  }

  // Checks the page: no errors, the script finished, the summary table has a column per
  // policy, and each policy's plots show what its report calls for.
  void CheckPage(const std::string& dom, const std::map<std::string, Json>& reports) {
    ASSERT_FALSE(dom.empty());
    const size_t html_tag = dom.find("<html");
    ASSERT_NE(html_tag, std::string::npos);
    EXPECT_EQ(Attr(dom, html_tag, "data-errors"), "[]")
        << "JavaScript errors, see " << Path("dom.html");
    EXPECT_EQ(Attr(dom, html_tag, "data-done"), "1") << "the report's script did not finish";
    const size_t thead = dom.find("<thead>");
    ASSERT_NE(thead, std::string::npos) << "no summary table";
    const std::string head = dom.substr(thead, dom.find("</thead>", thead) - thead);
    size_t columns = 0;
    for (size_t s = head.find("<th>"); s != std::string::npos; s = head.find("<th>", s + 1))
      ++columns;
    EXPECT_EQ(columns, reports.size() + 1) << head;

    const std::map<std::string, Plot> plots = Plots(dom);
    size_t checked = 0;
    for (const auto& [policy, report] : reports) {
      for (const auto& [id, names] : Expected(report)) {
        SCOPED_TRACE(policy + "/" + id);
        auto it = plots.find(policy + "/" + id);
        ASSERT_NE(it, plots.end()) << "no plot container";
        const Plot& p = it->second;
        EXPECT_EQ(p.svgs, 1);
        std::vector<std::string> drawn;
        for (const Series& s : p.series) {
          drawn.push_back(s.name);
          if (s.path) {
            // Non-empty: a move and at least one line segment.
            EXPECT_EQ(s.d.substr(0, 1), "M") << s.name;
            EXPECT_NE(s.d.find('L'), std::string::npos) << s.name << ": " << s.d.substr(0, 80);
            EXPECT_EQ(s.d.find("NaN"), std::string::npos) << s.name;
          } else {
            EXPECT_GT(s.width, 0) << s.name;
          }
        }
        EXPECT_EQ(drawn, names);
        ++checked;
      }
    }
    EXPECT_EQ(plots.size(), checked) << "plots the test does not know";
  }

  fs::path dir_;
};

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

TEST_F(BrowserTest, SimReportOfAGeneratedWorkloadDrawsEveryPlot) {
  Gantry("gen --seed 7 --gpus 64 --days 2 --out " + Path("gen") + " --quiet");
  Gantry("sim --config " + Path("gen/cluster.yaml") + " --trace " + Path("gen/trace.jsonl") +
         " --failures " + Path("gen/failures.jsonl") + " --report " + Path("report.json") +
         " --html " + Path("report.html") + " --quiet");
  const Json report = ReadJson(Path("report.json"));
  CheckPage(Dom(Path("report.html")), {{report["policy"].get<std::string>(), report}});
}

TEST_F(BrowserTest, CompareReportOfTheExampleDrawsEveryPolicysPlots) {
  const std::string examples = std::string(GANTRY_SOURCE_DIR) + "/examples/";
  Gantry("compare --config " + examples + "cluster.yaml --trace " + examples +
         "trace.jsonl --failures " + examples + "failures.jsonl --policy fifo,gantry --json " +
         Path("compare.json") + " --html " + Path("compare.html"));
  const Json j = ReadJson(Path("compare.json"));
  std::map<std::string, Json> reports;
  for (const Json& r : j["reports"]) reports[r["policy"].get<std::string>()] = r;
  ASSERT_EQ(reports.size(), 2u);
  CheckPage(Dom(Path("compare.html")), reports);
}

// The checks above must be able to fail: a page whose script throws is caught.
TEST_F(BrowserTest, AScriptErrorIsReported) {
  const std::string examples = std::string(GANTRY_SOURCE_DIR) + "/examples/";
  Gantry("sim --config " + examples + "cluster.yaml --trace " + examples + "trace.jsonl --html " +
         Path("report.html") + " --quiet");
  std::ifstream in(Path("report.html"));
  std::stringstream page;
  page << in.rdbuf();
  std::string text = page.str();
  // Break the data the script reads: the timeline of the run loses its capacity series.
  const size_t at = text.find("\"capacity_gpus\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "\"capacity_gone\"");
  std::ofstream(Path("broken.html")) << text;
  const std::string dom = Dom(Path("broken.html"));
  ASSERT_FALSE(dom.empty());
  const size_t html_tag = dom.find("<html");
  ASSERT_NE(html_tag, std::string::npos);
  EXPECT_NE(Attr(dom, html_tag, "data-errors"), "");
  EXPECT_NE(Attr(dom, html_tag, "data-errors"), "[]");
  EXPECT_NE(dom.find("Errors while drawing this report"), std::string::npos);
}

}  // namespace
