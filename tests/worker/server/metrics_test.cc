// The worker's metrics as a scrape renders them (no HTTP).
#include "worker/server/metrics.h"

#include <string>

#include "common/version.h"
#include "gtest/gtest.h"

namespace llm::server {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

// Verified proposals count under vLLM's names, and each verification's tokens (accepted + 1)
// land in the acceptance-length histogram.
TEST(WorkerMetricsTest, BuildInfoCarriesTheVersion) {
  WorkerMetrics m;
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "llm_build_info{git_commit=\"" + std::string(GitCommit()) +
                                "\",version=\"" + std::string(Version()) + "\"} 1"))
      << text;
}

TEST(WorkerMetricsTest, SpeculativeDecodingCounters) {
  WorkerMetrics m;
  m.OnVerified(4, 3);
  m.OnVerified(4, 0);
  m.OnVerified(2, 2);
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_num_drafts_total 3")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_num_draft_tokens_total 10")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_num_accepted_tokens_total 5")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_acceptance_length_count 3")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_acceptance_length_sum 8")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_acceptance_length_bucket{le=\"1\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "llm_spec_decode_acceptance_length_bucket{le=\"3\"} 2")) << text;
}

}  // namespace
}  // namespace llm::server
