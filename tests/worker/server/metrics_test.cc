// The worker's metrics as a scrape renders them (no HTTP).
#include "worker/server/metrics.h"

#include <sstream>
#include <string>

#include "common/version.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace llm::server {
namespace {

using llm::testing::MetricValue;

// Every series carries the worker's model.name (model_name, as vLLM's do), so a dashboard or an
// autoscaler can select one model's workers.
TEST(WorkerMetricsTest, BuildInfoCarriesTheVersionAndEverySeriesTheModel) {
  WorkerMetrics m("tinystories");
  const std::string text = m.Render();
  EXPECT_EQ(MetricValue(text, "llm_build_info{git_commit=\"" + std::string(GitCommit()) +
                                  "\",model_name=\"tinystories\",version=\"" +
                                  std::string(Version()) + "\"}"),
            1)
      << text;
  int samples = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_NE(line.find("model_name=\"tinystories\""), std::string::npos) << line;
  }
  EXPECT_GT(samples, 20);
  EXPECT_EQ(MetricValue(text, "llm_num_requests_waiting{model_name=\"tinystories\"}"), 0);
}

// Verified proposals count under vLLM's names, and each verification's tokens (accepted + 1)
// land in the acceptance-length histogram.
TEST(WorkerMetricsTest, SpeculativeDecodingCounters) {
  WorkerMetrics m("m");
  m.OnVerified(4, 3);
  m.OnVerified(4, 0);
  m.OnVerified(2, 2);
  const std::string text = m.Render();
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_num_drafts_total"), 3) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_num_draft_tokens_total"), 10) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_num_accepted_tokens_total"), 5) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_acceptance_length_count"), 3) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_acceptance_length_sum"), 8) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_acceptance_length_bucket{le=\"1\"}"), 1) << text;
  EXPECT_EQ(MetricValue(text, "llm_spec_decode_acceptance_length_bucket{le=\"3\"}"), 2) << text;
}

}  // namespace
}  // namespace llm::server
