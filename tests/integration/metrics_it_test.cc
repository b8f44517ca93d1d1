// Issue 12, item 6: what a real gantryd says on /metrics while jobs run (whole GPUs, a
// MIG instance, an MPS share; one reclaimed, one held pending), and the Grafana
// dashboard shipped in deploy/grafana/gantry.json checked against it: every metric any
// panel queries is one gantryd exports (or dcgm-exporter's, DCGM_FI_*), with a series
// now, and every label a selector names is on it.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;

// What a PromQL expression reads: metric name -> the label names its selectors match on
// (an empty set where it is named bare). Label names in {...}, by/without/on/ignoring/
// group_left/group_right lists, strings, [ranges], numbers, durations, functions,
// aggregations and keywords are not metric names. Enough PromQL for dashboards, not a
// parser: it assumes the expression is well-formed.
std::map<std::string, std::set<std::string>> MetricsIn(const std::string& expr) {
  static const std::set<std::string> kKeywords = {
      "by",          "without", "on",       "ignoring",     "group_left", "group_right",
      "bool",        "and",     "or",       "unless",       "offset",     "sum",
      "min",         "max",     "avg",      "count",        "stddev",     "stdvar",
      "topk",        "bottomk", "quantile", "count_values", "group",      "limitk",
      "limit_ratio", "atan2",   "inf",      "nan",          "Inf",        "NaN"};
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  std::map<std::string, std::set<std::string>> out;
  const size_t n = expr.size();
  size_t i = 0;
  const auto skip_space = [&](size_t j) {
    while (j < n && std::isspace(static_cast<unsigned char>(expr[j]))) ++j;
    return j;
  };
  const auto skip_string = [&](size_t j) {  // expr[j] opens a string; returns past its end
    const char quote = expr[j++];
    while (j < n && expr[j] != quote) j += expr[j] == '\\' && quote != '`' ? 2 : 1;
    return j + 1;
  };
  const auto is_ident = [](char c, bool first) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  std::string last_metric;  // the metric just read, for a selector that follows it
  while (i < n) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = skip_string(i);
    } else if (c == '[') {
      while (i < n && expr[i] != ']') ++i;
      ++i;
    } else if (c == '{') {
      // Label matchers: name op "value", ...
      ++i;
      while (i < n && expr[i] != '}') {
        i = skip_space(i);
        if (i < n && is_ident(expr[i], true)) {
          const size_t start = i;
          while (i < n && is_ident(expr[i], false)) ++i;
          if (!last_metric.empty()) out[last_metric].insert(expr.substr(start, i - start));
        } else if (i < n && (expr[i] == '"' || expr[i] == '\'' || expr[i] == '`')) {
          i = skip_string(i);
        } else if (i < n && expr[i] != '}') {
          ++i;
        }
      }
      ++i;
      last_metric.clear();
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < n && (std::isalnum(static_cast<unsigned char>(expr[i])) || expr[i] == '.'))
        ++i;  // 0.95, 1e3, 5m
      last_metric.clear();
    } else if (is_ident(c, true)) {
      const size_t start = i;
      while (i < n && is_ident(expr[i], false)) ++i;
      const std::string word = expr.substr(start, i - start);
      const size_t next = skip_space(i);
      last_metric.clear();
      if (kLabelLists.count(word) && next < n && expr[next] == '(') {
        i = expr.find(')', next);
        i = i == std::string::npos ? n : i + 1;
      } else if (!kKeywords.count(word) && !(next < n && expr[next] == '(')) {
        out[word];
        last_metric = word;
      }
    } else {
      if (!std::isspace(static_cast<unsigned char>(c))) last_metric.clear();
      ++i;
    }
  }
  return out;
}

// Every targets[].expr of every panel (rows' nested panels included), with its panel's title.
void Exprs(const json& panels, std::vector<std::pair<std::string, std::string>>& out) {
  for (const json& p : panels) {
    for (const json& t : p.value("targets", json::array())) {
      if (t.contains("expr")) out.emplace_back(p.value("title", ""), t["expr"].get<std::string>());
    }
    if (p.contains("panels")) Exprs(p["panels"], out);
  }
}

// /metrics as metric name -> its sample lines; types from "# TYPE" lines.
struct Exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, std::vector<std::string>> samples;

  explicit Exposition(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream f(line.substr(7));
        std::string name, type;
        f >> name >> type;
        types[name] = type;
      } else if (!line.empty() && line[0] != '#') {
        samples[line.substr(0, line.find_first_of("{ "))].push_back(line);
      }
    }
  }
  // The value of the one series whose line starts with `series` ("name{labels}").
  double Value(const std::string& series) const {
    for (const auto& [name, lines] : samples) {
      for (const std::string& l : lines) {
        if (l.rfind(series + " ", 0) == 0) return std::stod(l.substr(series.size() + 1));
      }
    }
    ADD_FAILURE() << "no series " << series;
    return -1;
  }
  // The sample lines of `name` that contain every one of `parts`.
  std::vector<std::string> Find(const std::string& name,
                                const std::vector<std::string>& parts) const {
    std::vector<std::string> found;
    auto it = samples.find(name);
    if (it == samples.end()) return found;
    for (const std::string& l : it->second) {
      bool all = true;
      for (const std::string& p : parts) all = all && l.find(p) != std::string::npos;
      if (all) found.push_back(l);
    }
    return found;
  }
};

TEST(MetricsDashboard, PromqlMetricNamesAreFoundAndLabelsAreNot) {
  const auto m = MetricsIn(
      "sum by (queue, gantry_job) (rate(gantry_x_total{gantry_job!=\"a}{b\",queue=~'q.*'}[5m] "
      "offset 1h)) / 0.95 "
      "* on(UUID) group_left(queue) DCGM_FI_DEV_GPU_UTIL + histogram_quantile(0.5, "
      "gantry_w_bucket) or vector(0)");
  std::map<std::string, std::set<std::string>> want = {{"gantry_x_total", {"gantry_job", "queue"}},
                                                       {"DCGM_FI_DEV_GPU_UTIL", {}},
                                                       {"gantry_w_bucket", {}}};
  EXPECT_EQ(m, want);
}

constexpr const char* kMetricsCluster = R"(cluster: metrics
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps]
queues:
  - name: research
    guaranteed_gpus: 8
    budget: {gpu_hours: 1000, period: month}
  - name: serving
    guaranteed_gpus: 8
policy:
  reclaim_idle_after_s: 1
)";

TEST(Integration, MetricsNameWhoHoldsEachGpuAndTheDashboardQueriesOnlyRealMetrics) {
  Harness h("metrics");
  h.Setup(kMetricsCluster, {{"b", "serving"}});
  h.AddToken("a", {"--team", "a", "--queues", "research", "--user", "alice"});
  h.Write("job.sh", kJobScript, true);
  fs::create_directories(h.Path("out"));
  h.StartServer();
  for (int i = 0; i < 2; ++i) h.StartAgent("h100-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  auto spec = [&](const std::string& id, const std::string& queue, const std::string& shape,
                  const std::string& extra) {
    h.Write(id + ".yaml", "id: " + id + "\nqueue: " + queue + "\n" + shape + "grace_s: 1\n" +
                              extra + "command: [" + h.Path("job.sh") + ", " + h.Path("out") +
                              ", \"60000\"]\n");
    return h.Path(id + ".yaml");
  };
  Submit(h, "a",
         {spec("whole", "research", "gpus: 2\nvram_gb: 40\n",
               "emulate: {util: 0.5, vram_used_gb: 9}\n")});
  Submit(h, "a",
         {spec("mig", "research", "mig: 3g.40gb\nvram_gb: 30\n", "emulate: {util: 0.4}\n")});
  Submit(
      h, "b",
      {spec("mps", "serving", "sharing: mps\ngpus: 0.5\nvram_gb: 10\n", "emulate: {util: 0.3}\n")});
  Submit(h, "b",
         {spec("idle", "serving", "gpus: 1\nvram_gb: 10\n", "emulate: {idle_after_s: 0}\n")});
  Submit(h, "a", {"--after", "whole", spec("after", "research", "gpus: 1\nvram_gb: 10\n", "")});
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Job("idle")["state"] == "reclaimed" &&
               h.Job("whole")["usage"].contains("vram_peak_gb") &&
               h.Job("mig")["state"] == "running" && h.Job("mps")["state"] == "running";
      },
      20))
      << h.Cli({"ls", "--all"}, h.token("admin")).out;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a few more usage reports

  httplib::Client c(h.ServerUrl());
  auto get = [&] {
    auto r = c.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return Exposition(r ? r->body : "");
  };
  const Exposition m = get();

  // Per GPU: dcgm-exporter's labels, the agent's UUID, and who holds it.
  const std::string gpu_labels = "UUID=\"GPU-";
  const auto whole = m.Find("gantry_gpu_allocated_ratio",
                            {gpu_labels, "Hostname=\"h100-", "modelName=\"H100-80GB\"",
                             "queue=\"research\",gantry_job=\"whole\",user=\"alice\"} 1"});
  EXPECT_EQ(whole.size(), 2u) << "a series per GPU of the 2-GPU job";
  EXPECT_EQ(m.Find("gantry_gpu_allocated_ratio", {gpu_labels,
                                                  "GPU_I_PROFILE=\"3g.40gb\",queue=\"research\","
                                                  "gantry_job=\"mig\",user=\"alice\"} 0.428571429"})
                .size(),
            1u);
  EXPECT_EQ(m.Find("gantry_gpu_allocated_ratio",
                   {gpu_labels, "queue=\"serving\",gantry_job=\"mps\",user=\"\"} 0.5"})
                .size(),
            1u);
  // 16 GPUs: 2 whole, one with the MIG instance, one with the MPS share; the rest free.
  EXPECT_EQ(
      m.Find("gantry_gpu_allocated_ratio", {gpu_labels, "queue=\"\",gantry_job=\"\",user=\"\"} 0"})
          .size(),
      12u);
  EXPECT_EQ(
      m.Find("gantry_gpu_busy_ratio", {gpu_labels, "gantry_job=\"whole\",user=\"alice\"} 0.5"})
          .size(),
      2u);
  EXPECT_EQ(m.samples.at("gantry_gpu_busy_ratio").size(), 16u);

  // Per queue.
  EXPECT_EQ(m.Value("gantry_queue_pending_jobs{queue=\"research\"}"), 1);  // `after`, held
  EXPECT_EQ(m.Value("gantry_queue_pending_jobs{queue=\"serving\"}"), 0);
  EXPECT_EQ(m.Value("gantry_queue_wait_seconds_count{queue=\"research\",tier=\"standard\"}"), 2);
  EXPECT_EQ(m.Value("gantry_queue_wait_seconds_count{queue=\"serving\",tier=\"standard\"}"), 2);
  EXPECT_EQ(m.Value("gantry_queue_wait_seconds_count{queue=\"serving\",tier=\"critical\"}"), 0);
  EXPECT_EQ(m.Value("gantry_reclaims_total{queue=\"serving\"}"), 1);
  EXPECT_EQ(m.Value("gantry_reclaims_total{queue=\"research\"}"), 0);
  EXPECT_EQ(m.Value("gantry_jobs_ended_total{end=\"reclaimed\"}"), 1);
  const double held =
      m.Value("gantry_queue_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}");
  const double busy =
      m.Value("gantry_queue_busy_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}");
  EXPECT_GT(held, 0.5);  // 2 3/7 GPUs for a second or more
  EXPECT_GT(busy, 0.1);
  EXPECT_LT(busy, held);  // at most half busy
  EXPECT_EQ(m.Value("gantry_node_up{node=\"h100-0\",Hostname=\"h100-0\",pool=\"h100\"}"), 1);

  // The dashboard: every query reads metrics that are there, with the labels it names.
  std::ifstream in(GANTRY_DASHBOARD);
  ASSERT_TRUE(in) << GANTRY_DASHBOARD;
  const json dash = json::parse(in);
  std::vector<std::pair<std::string, std::string>> exprs;
  Exprs(dash.at("panels"), exprs);
  ASSERT_GE(exprs.size(), 10u);
  std::set<std::string> used;
  for (const auto& [title, expr] : exprs) {
    const auto metrics = MetricsIn(expr);
    EXPECT_FALSE(metrics.empty()) << title << ": " << expr;
    for (const auto& [name, labels] : metrics) {
      if (name.rfind("DCGM_FI_", 0) == 0) continue;  // dcgm-exporter's, where it runs
      SCOPED_TRACE(title + ": " + expr);
      if (name.rfind("gantry_", 0) != 0) {
        ADD_FAILURE() << name << " is neither gantryd's nor dcgm-exporter's";
        continue;
      }
      std::string family = name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (!m.types.count(name) && name.size() > s.size() &&
            name.compare(name.size() - s.size(), s.size(), s) == 0) {
          family = name.substr(0, name.size() - s.size());
        }
      }
      if (!m.types.count(family)) {
        ADD_FAILURE() << name << " is not a metric gantryd exports";
        continue;
      }
      if (family != name) {
        EXPECT_EQ(m.types.at(family), "histogram") << name;
      }
      if (!m.samples.count(name)) {
        ADD_FAILURE() << name << " has no series";
        continue;
      }
      for (const std::string& label : labels) {
        EXPECT_FALSE(m.Find(name, {label + "=\""}).empty()) << name << " has no label " << label;
      }
      used.insert(family);
    }
  }
  for (const char* family :
       {"gantry_gpu_allocated_ratio", "gantry_gpu_busy_ratio", "gantry_queue_pending_jobs",
        "gantry_queue_wait_seconds", "gantry_queue_gpu_seconds_total",
        "gantry_queue_busy_gpu_seconds_total", "gantry_node_up", "gantry_reclaims_total",
        "gantry_preemptions_total", "gantry_queue_guaranteed_gpus"}) {
    EXPECT_TRUE(used.count(family)) << "no panel shows " << family;
  }

  // Prometheus' own linter on the whole exposition (`promtool check metrics`, Debian's
  // prometheus package; issue 47: it exited 3 on budgets in hours). Allowed: dcgm-exporter's
  // camelCase label names on the per-GPU families, kept for joins (docs/control-plane.md).
  {
    auto r = c.Get("/metrics");
    ASSERT_TRUE(r && r->status == 200);
    h.Write("metrics.txt", r->body);
    const RunResult lint =
        it::Run({"sh", "-c", "promtool check metrics < " + h.Path("metrics.txt")});
    EXPECT_TRUE(lint.rc == 0 || lint.rc == 3) << "promtool could not read it: " << lint.err;
    std::istringstream lines(lint.out + lint.err);
    int allowed = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      const std::string camel = " label names should be written in 'snake_case' not 'camelCase'";
      if ((line == "gantry_gpu_allocated_ratio" + camel ||
           line == "gantry_gpu_busy_ratio" + camel)) {
        ++allowed;
        continue;
      }
      ADD_FAILURE() << "promtool: " << line;
    }
    EXPECT_GT(allowed, 0) << "promtool said nothing of modelName: did it run?";
    EXPECT_GT(m.Value("gantry_queue_budget_gpu_seconds{queue=\"research\",period=\"month\"}"),
              1000 * 3600 - 1);
  }

  // Counters only grow; a node whose agent leaves is down.
  h.StopAgent(1);
  ASSERT_TRUE(Harness::WaitFor([&] { return !h.NodesUp(2); }, 10));
  const Exposition later = get();
  EXPECT_GE(later.Value("gantry_queue_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}"),
            held);
  EXPECT_GE(
      later.Value("gantry_queue_busy_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}"),
      busy);
  EXPECT_EQ(later.Value("gantry_node_up{node=\"h100-1\",Hostname=\"h100-1\",pool=\"h100\"}"), 0);
  EXPECT_EQ(later.Value("gantry_node_up{node=\"h100-0\",Hostname=\"h100-0\",pool=\"h100\"}"), 1);
}

}  // namespace
}  // namespace gantry::it
