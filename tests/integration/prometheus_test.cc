// Prometheus for real: Debian's prometheus server on loopback scrapes one llm-router and two
// llm-workers (and evaluates the rules shipped in deploy/prometheus/rules.yaml) while traffic
// runs; the queue-depth and TTFT series, and the router's, are read back through its HTTP API.

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::GenerateConcurrently;
using llm::testing::GreedyRequest;
using llm::testing::HttpGet;
using llm::testing::RouterProcess;
using llm::testing::WorkerProcess;

constexpr char kModel[] = "models/tinystories-656k";
constexpr char kPrometheus[] = "/usr/bin/prometheus";

std::string UrlEncode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED(kModel);
    ASSERT_TRUE(std::filesystem::exists(kPrometheus))
        << kPrometheus << " is missing: install the Debian package prometheus";
  }

  // Runs an instant query; the "result" array of its data.
  nlohmann::json Query(const std::string& promql) {
    const std::string body = HttpGet(port_, "/api/v1/query?query=" + UrlEncode(promql));
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || j.value("status", "") != "success") {
      ADD_FAILURE() << promql << ": " << body;
      return nlohmann::json::array();
    }
    return j["data"]["result"];
  }
  // The value of a one-series result (NaN when there is none).
  double Scalar(const std::string& promql) {
    const auto r = Query(promql);
    if (r.empty()) return std::nan("");
    return std::stod(r[0]["value"][1].get<std::string>());
  }

  // Polls `promql` until it is at least `at_least` (scrapes come once a second); its value.
  double WaitForAtLeast(const std::string& promql, double at_least) {
    double v = std::nan("");
    llm::testing::WaitFor([&] { return (v = Scalar(promql)) >= at_least; },
                          std::chrono::seconds(10));
    return v;
  }

  int port_ = 0;
};

TEST_F(PrometheusTest, ScrapesRouterAndWorkersAndAnswersQueriesAboutThem) {
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(WorkerProcess::Start(kModel, {"--engine.cpu_threads", "1"}));
  }
  auto router = RouterProcess::Start(workers[0]->target() + "," + workers[1]->target());
  ASSERT_TRUE(router->WaitReady(2));

  const std::string dir = llm::testing::MakeTempDir("prometheus");
  const std::string rules = llm::testing::SourcePath("deploy/prometheus/rules.yaml");
  port_ = llm::testing::FreeLoopbackPort();
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "rule_files:\n  - " << rules << "\n"
      << "scrape_configs:\n"
      << "  - job_name: llm-worker\n    static_configs:\n      - targets: ['127.0.0.1:"
      << workers[0]->metrics_port() << "', '127.0.0.1:" << workers[1]->metrics_port() << "']\n"
      << "  - job_name: llm-router\n    static_configs:\n      - targets: ['127.0.0.1:"
      << router->metrics_port() << "']\n";
  auto prometheus = llm::testing::ChildProcess::Start(
      {kPrometheus, "--config.file=" + dir + "/prometheus.yml",
       "--storage.tsdb.path=" + dir + "/data",
       "--web.listen-address=127.0.0.1:" + std::to_string(port_)});
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] { return HttpGet(port_, "/-/ready").find("Ready") != std::string::npos; },
      std::chrono::seconds(20)))
      << prometheus->Output();

  // Every target scraped once before the traffic, so rates have a starting point.
  ASSERT_TRUE(llm::testing::WaitFor([&] { return Scalar("count(up == 1)") == 3; },
                                    std::chrono::seconds(10)))
      << prometheus->Output();

  // Traffic through the router while Prometheus scrapes.
  auto stub = router->generation();
  const auto results =
      GenerateConcurrently({stub.get()}, std::vector(64, GreedyRequest("Once upon a time", 40)));
  for (const auto& r : results) ASSERT_TRUE(r.status.ok()) << r.status.error_message();

  // The series read back once a scrape after the traffic is in.
  EXPECT_GE(WaitForAtLeast("sum(llm_time_to_first_token_seconds_count)", 64), 64);
  EXPECT_GE(WaitForAtLeast("sum(llm_router_requests_total{code=\"OK\"})", 64), 64);
  EXPECT_EQ(Scalar("sum(up{job=\"llm-worker\"})"), 2);
  EXPECT_EQ(Scalar("sum(up{job=\"llm-router\"})"), 1);
  // Queue depth: one series per worker (the HPA's metric).
  const auto waiting = Query("llm_num_requests_waiting{job=\"llm-worker\"}");
  EXPECT_EQ(waiting.size(), 2u) << waiting.dump();
  // TTFT as a dashboard asks for it.
  const double p99 = Scalar(
      "histogram_quantile(0.99, sum by (le) (rate(llm_time_to_first_token_seconds_bucket[1m])))");
  EXPECT_GT(p99, 0);
  EXPECT_LT(p99, 60);
  // The shipped rules load and evaluate (a rule group is listed with no evaluation error).
  const auto groups = nlohmann::json::parse(HttpGet(port_, "/api/v1/rules"), nullptr,
                                            /*allow_exceptions=*/false);
  ASSERT_FALSE(groups.is_discarded());
  int evaluated = 0;
  for (const auto& g : groups["data"]["groups"]) {
    for (const auto& rule : g["rules"]) {
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
      ++evaluated;
    }
  }
  EXPECT_GT(evaluated, 0) << "no rule from " << rules;
}

}  // namespace
}  // namespace llm
