// The HTTP layer: status codes, error bodies, size limits, unauthenticated endpoints.
#include "server/http_api.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include <zlib.h>
#include <array>
#include <filesystem>
#include <thread>

#include "server/http_server.h"
#include "server/sqlite_store.h"

namespace gantry::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gantry-http-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    spec::Diagnostics diags;
    config_ = spec::ParseClusterConfig(
        "pools:\n  - name: n\n    count: 1\n    gpus: 8\n    gpu_model: H100-80GB\n"
        "queues:\n  - name: q\n    guaranteed_gpus: 8\n",
        "c.yaml", diags);
    ASSERT_TRUE(config_) << diags.ToString();
    auto store = SqliteStore::Open((dir_ / "s.db").string());
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    StoredToken t;
    t.hash = Sha256Hex("tok");
    t.role = "team";
    t.team = "t";
    t.queues = {"q"};
    ASSERT_TRUE(store_->AddToken(t).ok());
    ctl_ = std::make_unique<Controller>(*config_, *store_, ControllerOptions{}, nullptr,
                                        [] { return int64_t{1'700'000'000'000}; });
    ASSERT_TRUE(ctl_->Start().ok());
    api_ = std::make_unique<HttpApi>(*ctl_, HttpOptions{});
    auto port = api_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    port_ = *port;
    serve_ = std::thread([this] { api_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    for (int i = 0; i < 100 && !client_->Get("/healthz"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  void TearDown() override {
    api_->Stop();
    serve_.join();
    ctl_->Stop();
    fs::remove_all(dir_);
  }
  httplib::Result Post(const std::string& path, const std::string& body,
                       const char* token = "tok") {
    httplib::Headers h;
    if (token) h.emplace("Authorization", std::string("Bearer ") + token);
    return client_->Post(path.c_str(), h, body, "application/json");
  }

  fs::path dir_;
  std::optional<spec::ClusterConfig> config_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Controller> ctl_;
  std::unique_ptr<HttpApi> api_;
  std::thread serve_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpApiTest, StatusesAndErrorBodies) {
  auto r = Post("/v1/jobs", R"({"queue":"q","gpus":1,"vram_gb":10,"command":"x"})", nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find("missing token"),
            std::string::npos);
  r = Post("/v1/jobs", R"({"queue":"q","gpus":1,"vram_gb":10,"command":"x"})", "wrong");
  EXPECT_EQ(r->status, 401);
  r = Post("/v1/jobs", R"({"queue":"q","gpus":1,"vram_gb":10,"command":"x"})");
  EXPECT_EQ(r->status, 201);
  r = Post("/v1/jobs", R"({"queue":"q","gpus":"two","vram_gb":10,"command":"x"})");
  EXPECT_EQ(r->status, 400);
  json err = json::parse(r->body);
  ASSERT_TRUE(err.contains("problems"));
  EXPECT_NE(err["problems"][0].get<std::string>().find("gpus"), std::string::npos) << r->body;
  r = Post("/v1/jobs", R"({"queue":"q","gpus":1,"vram_gb":100,"command":"x"})");
  EXPECT_EQ(r->status, 422);
  r = Post("/v1/jobs/nosuch/cancel", "");
  EXPECT_EQ(r->status, 404);
  r = Post("/v1/nodes/n-0/drain", "");
  EXPECT_EQ(r->status, 403);
  auto g = client_->Get("/v1/nosuch");
  EXPECT_EQ(g->status, 404);
  EXPECT_TRUE(json::parse(g->body).contains("error"));
}

TEST_F(HttpApiTest, OversizedRequestsAreRefusedAndChangeNothing) {
  std::string big(2 << 20, ' ');
  auto r = Post("/v1/jobs", big);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find("too large"), std::string::npos)
      << r->body;
  // Under the HTTP limit but over the job spec limit.
  std::string padded = R"({"queue":"q","gpus":1,"vram_gb":10,"command":"x","env":{"PAD":")" +
                       std::string(100000, 'x') + "\"}}";
  r = Post("/v1/jobs", padded);
  EXPECT_EQ(r->status, 413);
  httplib::Headers h = {{"Authorization", "Bearer tok"}};
  auto list = client_->Get("/v1/jobs?all=1", h);
  EXPECT_EQ(json::parse(list->body)["jobs"].size(), 0u);
}

TEST_F(HttpApiTest, AListingPageTakesItsFiltersFromTheQueryAndRefusesABadLimit) {
  httplib::Headers h = {{"Authorization", "Bearer tok"}};
  ASSERT_EQ(Post("/v1/jobs", R"({"queue":"q","gpus":1,"vram_gb":10,"command":"x"})")->status, 201);
  auto page = client_->Get("/v1/jobs?all=1&limit=0&queue=q", h);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200) << page->body;
  const json body = json::parse(page->body);
  EXPECT_EQ(body["jobs"].size(), 0u);
  EXPECT_EQ(body["total"], 1);
  EXPECT_EQ(json::parse(client_->Get("/v1/jobs?queue=other", h)->body)["total"], 0);
  for (const char* bad : {"/v1/jobs?limit=x", "/v1/jobs?limit=-1", "/v1/jobs?limit=5x"}) {
    auto r = client_->Get(bad, h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find("limit"), std::string::npos)
        << r->body;
  }
}

TEST_F(HttpApiTest, HealthAndMetricsNeedNoToken) {
  auto h = client_->Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<title>Gantry</title>"), std::string::npos);
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  for (const char* name :
       {"gantry_gpu_utilization_ratio", "gantry_scheduling_latency_seconds_bucket",
        "gantry_queue_wait_seconds_count", "gantry_preemptions_total{queue=\"q\"}",
        "gantry_queue_guaranteed_gpus{queue=\"q\"} 8",
        "gantry_gpu_allocated_ratio{gpu=\"0\",UUID=\"\",Hostname=\"n-0\""}) {
    EXPECT_NE(m->body.find(name), std::string::npos) << name;
  }
}

// Inflates a gzip stream with zlib; empty on any error.
std::string Gunzip(const std::string& packed) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "";
  std::string out;
  std::array<char, 65536> chunk;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(packed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(chunk.data());
    z.avail_out = chunk.size();
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - z.avail_out);
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END ? out : "";
}

TEST(AcceptEncodingTest, GzipIsTakenWhereTheClientAcceptsIt) {
  for (const char* yes : {"gzip", "GZip", "x-gzip", "br, gzip, deflate", "deflate, gzip;q=0.5", "*",
                          "identity, *;q=0.1", "gzip ; q=1.0"}) {
    EXPECT_TRUE(AcceptsGzip(yes)) << yes;
  }
  for (const char* no : {"", "identity", "deflate, br", "gzip;q=0", "gzip; q=0.000", "*;q=0",
                         "gzip;q=0, *", "gzipped"}) {
    EXPECT_FALSE(AcceptsGzip(no)) << no;
  }
}

TEST_F(HttpApiTest, BigAnswersGoGzipCompressedToClientsThatAcceptIt) {
  client_->set_decompress(false);  // see the bytes as they come
  auto plain = client_->Get("/", httplib::Headers{{"Accept-Encoding", "identity"}});  // the console
  ASSERT_TRUE(plain);
  ASSERT_GT(plain->body.size(), 1024u);
  EXPECT_FALSE(plain->has_header("Content-Encoding"));
  EXPECT_EQ(plain->get_header_value("Vary"), "Accept-Encoding");
  auto packed = client_->Get("/", httplib::Headers{{"Accept-Encoding", "gzip, deflate"}});
  ASSERT_TRUE(packed);
  EXPECT_EQ(packed->status, 200);
  EXPECT_EQ(packed->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(packed->body.size(), plain->body.size() / 2);
  EXPECT_EQ(Gunzip(packed->body), plain->body);
  // Small answers go as they are.
  auto small = client_->Get("/healthz", httplib::Headers{{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(small);
  EXPECT_LT(small->body.size(), 1024u);
  EXPECT_FALSE(small->has_header("Content-Encoding"));
  EXPECT_EQ(json::parse(small->body)["status"], "ok");
  // A client that decompresses (cpp-httplib's, as the CLI and the agent use) gets the text.
  client_->set_decompress(true);
  auto auto_plain = client_->Get("/", httplib::Headers{{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(auto_plain);
  EXPECT_EQ(auto_plain->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(auto_plain->body, plain->body);
}

}  // namespace
}  // namespace gantry::server
