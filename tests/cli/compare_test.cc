// gantry compare and the report outputs of gantry sim, run as a user runs them: the
// side-by-side table, its agreement with single runs, bad input, the HTML file, and the
// progress line (on a terminal only).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_util.h"

namespace {

namespace fs = std::filesystem;
using gantry::testing::CliTest;
using gantry::testing::Examples;
using gantry::testing::Gantry;
using gantry::testing::Outcome;
using Json = nlohmann::json;

std::string ExampleInputs() {
  return " --config " + Examples() + "/cluster.yaml --trace " + Examples() +
         "/trace.jsonl --failures " + Examples() + "/failures.jsonl";
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// The line of the printed table that starts with `label`, split on runs of spaces.
std::vector<std::string> Row(const std::string& output, const std::string& label) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label + "  ", 0) != 0) continue;
    std::vector<std::string> cells{label};
    std::istringstream rest(line.substr(label.size()));
    for (std::string cell; rest >> cell;) cells.push_back(cell);
    return cells;
  }
  return {};
}

void ExpectNoProgressText(const Outcome& r) {
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("events/s"), std::string::npos) << r.output;
}

TEST_F(CliTest, CompareRunsEachPolicyAndPrintsTheFiguresSideBySide) {
  Outcome r = Gantry("compare" + ExampleInputs() + " --policy fifo,gantry --json " +
                     Path("c.json") + " --html " + Path("c.html"));
  ASSERT_EQ(r.status, 0) << r.output;
  ExpectNoProgressText(r);
  EXPECT_EQ(Row(r.output, "figure"), (std::vector<std::string>{"figure", "fifo", "gantry"}))
      << r.output;
  for (const char* label :
       {"GPU utilisation (%)", "JCT mean (s)", "JCT p99 (s)", "queue wait mean (s)",
        "queue wait p99 (s)", "critical queue wait p99 (s)", "critical in guarantee, wait p99 (s)",
        "preemption rate (% of starts)", "GPU-hours lost to preemption", "jobs rejected",
        "jobs unfinished", "allocation ratio at last arrival (%)"}) {
    EXPECT_EQ(Row(r.output, label).size(), 3u) << label << "\n" << r.output;
  }
  const Json j = ReadJson(Path("c.json"));
  EXPECT_EQ(j["policies"], Json::parse(R"(["fifo","gantry"])"));
  ASSERT_EQ(j["reports"].size(), 2u);
  EXPECT_EQ(j["reports"][0]["policy"], "fifo");
  EXPECT_EQ(j["reports"][1]["policy"], "gantry");
  EXPECT_EQ(j["table"]["columns"], Json::parse(R"(["figure","fifo","gantry"])"));
  for (const Json& row : j["table"]["rows"]) EXPECT_EQ(row.size(), 3u) << row;
  // The printed value is the report's.
  EXPECT_EQ(Row(r.output, "jobs submitted")[1],
            std::to_string(j["reports"][0]["jobs"]["submitted"].get<int>()));
  std::ifstream html(Path("c.html"));
  std::stringstream page;
  page << html.rdbuf();
  EXPECT_NE(page.str().find(R"(id="gantry-data")"), std::string::npos);
  EXPECT_NE(page.str().find(R"("policy":"gantry")"), std::string::npos);
}

TEST_F(CliTest, CompareGivesTheSameFiguresAsSeparateSimRuns) {
  Outcome c =
      Gantry("compare" + ExampleInputs() + " --policy gantry,fifo --json " + Path("c.json"));
  ASSERT_EQ(c.status, 0) << c.output;
  const Json runs = ReadJson(Path("c.json"))["reports"];
  const char* policies[] = {"gantry", "fifo"};
  for (size_t i = 0; i < 2; ++i) {
    Outcome s = Gantry("sim" + ExampleInputs() + " --policy " + policies[i] + " --report " +
                       Path("r.json"));
    ASSERT_EQ(s.status, 0) << s.output;
    Json single = ReadJson(Path("r.json"));
    Json compared = runs[i];
    // Everything but the wall-clock latency of passes is a function of the inputs.
    single.erase("scheduling_latency_ms");
    compared.erase("scheduling_latency_ms");
    EXPECT_EQ(single, compared) << policies[i];
    EXPECT_TRUE(single.contains("allocation_ratio_at_last_arrival_pct"));
  }
}

TEST_F(CliTest, CompareRejectsBadInputLikeSim) {
  std::ofstream(Path("bad.jsonl"))
      << R"({"id":"a","submit":0,"duration":10,"queue":"research","gpus":1,"vram_gb":8})"
         "\n"
      << R"({"id":"c","submit":2,"duration":10,"queue":"research","gpus":-2,"vram_gb":8})"
         "\n";
  const std::string inputs =
      " --config " + Examples() + "/cluster.yaml --trace " + Path("bad.jsonl");
  Outcome r = Gantry("compare" + inputs + " --policy fifo,gantry --json " + Path("c.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:2: gpus:"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(Path("c.json")));  // nothing ran
  Outcome s = Gantry("sim" + inputs);
  EXPECT_EQ(s.status, 2);
  EXPECT_EQ(r.output, s.output);  // the same messages, from the same code

  Outcome p = Gantry("compare" + ExampleInputs() + " --policy fifo,nope");
  EXPECT_EQ(p.status, 2) << p.output;
  EXPECT_NE(p.output.find("gantry compare: --policy: unknown policy \"nope\""), std::string::npos)
      << p.output;
  Outcome half = Gantry("compare --config " + Examples() + "/cluster.yaml");
  EXPECT_EQ(half.status, 2) << half.output;
}

TEST_F(CliTest, SimWritesASelfContainedHtmlReport) {
  Outcome r =
      Gantry("sim" + ExampleInputs() + " --report " + Path("r.json") + " --html " + Path("r.html"));
  ASSERT_EQ(r.status, 0) << r.output;
  ExpectNoProgressText(r);
  EXPECT_NE(r.output.find("HTML report"), std::string::npos) << r.output;
  std::ifstream html(Path("r.html"));
  std::stringstream page;
  page << html.rdbuf();
  const std::string text = page.str();
  EXPECT_EQ(text.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(text.find(R"(id="gantry-data")"), std::string::npos);
  // Nothing is fetched: no external scripts, stylesheets or images.
  EXPECT_EQ(text.find("src=\"http"), std::string::npos);
  EXPECT_EQ(text.find("href=\"http"), std::string::npos);
  EXPECT_EQ(text.find("<script src"), std::string::npos);
  const Json report = ReadJson(Path("r.json"));
  EXPECT_GT(report["allocation_ratio_at_last_arrival_pct"].get<double>(), 0.0);
  EXPECT_LE(report["allocation_ratio_at_last_arrival_pct"].get<double>(), 100.0);

  Outcome quiet = Gantry("sim" + ExampleInputs() + " --no-progress --quiet");
  EXPECT_EQ(quiet.status, 0) << quiet.output;
  EXPECT_EQ(quiet.output, "");
  Outcome unwritable =
      Gantry("sim" + ExampleInputs() + " --quiet --html " + Path("no/such/dir/r.html"));
  EXPECT_EQ(unwritable.status, 1) << unwritable.output;
  EXPECT_NE(unwritable.output.find("gantry sim: --html: cannot write"), std::string::npos)
      << unwritable.output;
}

// A workload the gantry binary takes well over a second to replay (3 s on the 2-core
// machine of 2026-12-01, where 2,048 GPUs for 4 days took 0.75 s, too near the first
// redraw). The sanitizer build runs about 40 times slower, so a smaller one does there.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kLongRun = "--gpus 512 --days 1";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr const char* kLongRun = "--gpus 512 --days 1";
#else
constexpr const char* kLongRun = "--gpus 4096 --days 8";
#endif
#else
constexpr const char* kLongRun = "--gpus 4096 --days 8";
#endif

// On a terminal (a pseudo-terminal from script(1)) a long run draws a progress line on
// stderr and erases it at the end; --no-progress and pipes (every test above) get none.
TEST_F(CliTest, ProgressLineOnlyOnATerminal) {
  Outcome gen = Gantry(std::string("gen --seed 1 --quiet ") + kLongRun + " --out " + Path("gen"));
  ASSERT_EQ(gen.status, 0) << gen.output;
  const std::string sim = std::string(GANTRY_BINARY) + " sim --policy fifo --quiet --config " +
                          Path("gen/cluster.yaml") + " --trace " + Path("gen/trace.jsonl");
  Outcome tty = gantry::testing::Shell("script -qec '" + sim + "' /dev/null");
  ASSERT_EQ(tty.status, 0) << tty.output;
  // The run takes well over the 0.5 s between redraws.
  EXPECT_EQ(tty.output.rfind("\r", 0), 0u) << tty.output;
  EXPECT_NE(tty.output.find(" events, sim time "), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find(" done, "), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find("events/s"), std::string::npos) << tty.output;
  EXPECT_GE(tty.output.size(), 4u);
  EXPECT_EQ(tty.output.substr(tty.output.size() - 4), "\r\033[K")
      << "the line is erased at the end";
  Outcome off = gantry::testing::Shell("script -qec '" + sim + " --no-progress' /dev/null");
  ASSERT_EQ(off.status, 0) << off.output;
  EXPECT_EQ(off.output, "");
}

}  // namespace

// gantry gen says when the workload's offered load is far from --load (issue 15: 0.515
// for 0.8 on 32 GPUs, silently): on a quarter day one job is a large part of the load.
TEST_F(CliTest, GenWarnsWhenTheOfferedLoadMissesTheAskedOne) {
  int warned = 0;
  for (int seed = 1; seed <= 4; ++seed) {
    Outcome gen = Gantry("gen --gpus 32 --days 0.25 --load 0.8 --seed " + std::to_string(seed) +
                         " --out " + Path(("gen" + std::to_string(seed)).c_str()));
    ASSERT_EQ(gen.status, 0) << gen.output;
    const size_t at = gen.output.find("offered load");
    ASSERT_NE(at, std::string::npos) << gen.output;
    const double offered = std::stod(gen.output.substr(at + 12));
    const bool far = std::abs(offered - 0.8) > 0.08;
    EXPECT_EQ(gen.output.find("warning: offered load") != std::string::npos, far) << gen.output;
    warned += far;
  }
  EXPECT_GT(warned, 0)
      << "no seed of a quarter day on 32 GPUs missed the load: the check proves nothing";
  Outcome week = Gantry("gen --gpus 32 --load 0.8 --seed 1 --out " + Path("week"));
  ASSERT_EQ(week.status, 0) << week.output;
  EXPECT_EQ(week.output.find("warning"), std::string::npos) << week.output;
}

// What-if (issue 15 item 3): `--set` runs a variant of the config beside it, and the table
// shows the differences that matter: per queue waits and GPU-hours, cost per GPU-hour.
TEST_F(CliTest, CompareRunsWhatIfVariantsOfTheConfigBesideIt) {
  Outcome r =
      Gantry("compare" + ExampleInputs() + " --policy gantry --set 'pools.h100.count=8' --set " +
             "'pools.h100.count=3; queues.serving.burst_gpus=8' --json " + Path("w.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(Row(r.output, "figure"),
            (std::vector<std::string>{"figure", "cluster", "pools.h100.count=8",
                                      "pools.h100.count=3;", "queues.serving.burst_gpus=8"}))
      << r.output;
  const Json j = ReadJson(Path("w.json"));
  ASSERT_EQ(j["reports"].size(), 3u);
  EXPECT_EQ(
      j["runs"],
      Json::parse(
          R"(["cluster","pools.h100.count=8","pools.h100.count=3; queues.serving.burst_gpus=8"])"));
  // The runs differ as the configs do: more H100 nodes, less waiting; fewer, more.
  const auto wait = [&](size_t i) {
    return j["reports"][i]["queue_wait_time_ms"]["all"]["mean"].get<double>();
  };
  EXPECT_LE(wait(1), wait(0)) << r.output;
  EXPECT_GT(wait(2), wait(0)) << r.output;
  for (const char* label : {"cost per GPU-hour", "standard queue wait p99 (s)"}) {
    EXPECT_NE(r.output.find(label), std::string::npos) << label << "\n" << r.output;
  }
  for (const auto& [name, q] : j["reports"][0]["by_queue"].items()) {
    EXPECT_NE(r.output.find("queue " + name + ": wait mean (s)"), std::string::npos) << name << "\n"
                                                                                     << r.output;
  }
  // A path that matches nothing: a clear error, nothing run.
  Outcome bad = Gantry("compare" + ExampleInputs() + " --set 'pools.h200.count=8'");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find(
                "gantry compare: --set: \"pools.h200.count=8\": pools has no item named \"h200\""),
            std::string::npos)
      << bad.output;
  // Two whole configs, comma-separated.
  Outcome two =
      Gantry("compare --config " + Examples() + "/cluster.yaml," + Path("cluster-copy.yaml") +
             " --trace " + Examples() + "/trace.jsonl --policy fifo,gantry");
  EXPECT_NE(two.status, 0);  // the copy does not exist yet
  {
    std::ifstream in(Examples() + "/cluster.yaml");
    std::ofstream out(Path("cluster-copy.yaml"));
    out << in.rdbuf();
  }
  two = Gantry("compare --config " + Examples() + "/cluster.yaml," + Path("cluster-copy.yaml") +
               " --trace " + Examples() + "/trace.jsonl --policy fifo,gantry");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_EQ(Row(two.output, "figure"),
            (std::vector<std::string>{"figure", "cluster", "/", "fifo", "cluster", "/", "gantry",
                                      "cluster-copy", "/", "fifo", "cluster-copy", "/", "gantry"}))
      << two.output;
  EXPECT_EQ(Row(two.output, "jobs finished")[1],
            Row(two.output, "jobs finished")[3]);  // same inputs, same figures
}
