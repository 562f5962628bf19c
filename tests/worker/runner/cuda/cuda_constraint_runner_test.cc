// Structured output on the CUDA runner (worker/runner/slot_constraints.h): masks written on the
// host from the tokens the device sampled, uploaded while the next forward pass runs, applied
// by the device sampler.
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/runner/cuda/runner_test_util.h"

namespace llm::runner::cuda {
namespace {

using namespace testing;

constexpr char kPattern[] = "(Once|One day), [a-z]+( [a-z]+){2,5}\\.";
const std::vector<std::string>& Choices() {
  static const std::vector<std::string> c = {"happy", "sad", "a big red ball", "Tim"};
  return c;
}

// 24 requests: a regex, a choice or nothing (every third), greedy and drawn, some with
// penalties (not the regex ones: a penalty on '.' and ' ' can keep a sentence going past
// max_tokens) and logprobs.
std::vector<GenerateSpec> MixedSpecs() {
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 24; ++i) {
    GenerateSpec s = Spec(StoryPrompts()[static_cast<size_t>(i) % 8], 200);
    if (i % 3 == 0) s.constraint = {constraint::Kind::kRegex, kPattern, {}};
    if (i % 3 == 1) s.constraint = {constraint::Kind::kChoice, "", Choices()};
    if (i % 4 != 0) {
      s.sampling.temperature = 1.0f;
      s.sampling.seed = 500 + i;
    }
    if (i % 5 == 2 && i % 3 != 0) s.sampling.repetition_penalty = 1.3f;
    if (i % 6 == 1) s.logprobs = 2;
    specs.push_back(s);
  }
  return specs;
}

// Every constrained output is in its language and ends by EOS. With batch_invariant, each
// request's ids are the ids it gets alone (steps whose masks wait behind a step in flight, and
// steps with nothing in flight, sample alike); graphs and eager steps agree; and the
// unconstrained requests' ids do not change when constrained requests share their steps.
TEST(CudaConstraintRunnerTest, ConstrainedRowsStayInTheirLanguage) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = MixedSpecs();
  WorkerSetup setup;
  setup.slots = 8;
  setup.prefill_tokens = 24;  // prompts in chunks beside running decodes: mixed masked steps
  setup.batch_invariant = true;
  const std::regex re(kPattern);
  std::vector<std::vector<int32_t>> by_graphs[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    setup.graphs = graphs == 1;
    auto w = MakeWorker(setup);
    ASSERT_NE(w, nullptr);
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (const GenerateSpec& s : specs) {
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(w->Submit(s, sinks.back()).ok());
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_TRUE(sinks[i]->Wait());
      ASSERT_TRUE(sinks[i]->error().ok()) << sinks[i]->error();
      const auto r = sinks[i]->result();
      by_graphs[graphs].push_back(r.token_ids);
      if (specs[i].constraint.kind == constraint::Kind::kRegex) {
        EXPECT_TRUE(std::regex_match(r.text, re)) << i << ": '" << r.text << "'";
      } else if (specs[i].constraint.kind == constraint::Kind::kChoice) {
        EXPECT_THAT(Choices(), ::testing::Contains(r.text)) << i;
        seen.insert(r.text);
      }
      if (specs[i].constraint.enabled()) {
        EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken) << i << ": '" << r.text << "'";
      }
    }
    EXPECT_GE(seen.size(), 2u);  // sampling reaches more than one choice
    if (graphs == 1) {
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(by_graphs[1][i], Generate(*w, specs[i])) << "request " << i << " alone";
      }
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(by_graphs[0][i], by_graphs[1][i]) << "request " << i << ": eager vs graphs";
  }
  // The unconstrained requests alone in a crowd of their own.
  std::vector<GenerateSpec> plain;
  for (const GenerateSpec& s : specs) {
    if (!s.constraint.enabled()) plain.push_back(s);
  }
  auto w = MakeWorker(setup);
  ASSERT_NE(w, nullptr);
  const auto plain_ids = RunCrowd(*w, plain);
  for (size_t i = 0, k = 0; i < specs.size(); ++i) {
    if (specs[i].constraint.enabled()) continue;
    EXPECT_EQ(plain_ids[k++], by_graphs[1][i]) << "request " << i;
  }
}

}  // namespace
}  // namespace llm::runner::cuda
