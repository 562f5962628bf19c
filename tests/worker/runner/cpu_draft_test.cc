// The CPU draft model's proposals (worker/runner/cpu_draft.h) under a constraint: every
// proposal is one the constraint allows after the proposals before it, a sampled proposal's
// recorded distribution q is the masked one (zero where the constraint refuses, summing to 1),
// a job's proposals end after a stop id, and an unconstrained job beside a constrained one
// proposes what it proposes alone.
#include "worker/runner/cpu_draft.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "worker/model/shapes.h"
#include "worker/model/synthetic.h"

namespace llm::runner {
namespace {

constexpr int32_t kBlockTokens = 16;

class CpuDraftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = model::ShapeConfig("tiny");
    ASSERT_TRUE(config.ok()) << config.status();
    vocab_ = config->vocab_size;
    eos_ = config->eos_token_ids.front();
    auto store = model::MakeSyntheticStore(*config, 7, model::DType::kBF16, &pool_);
    ASSERT_TRUE(store.ok()) << store.status();
    auto m = CpuModel::FromStore(*config, **store, &pool_);
    ASSERT_TRUE(m.ok()) << m.status();
    draft_ = std::make_unique<CpuDraft>(*std::move(m), 64, kBlockTokens);
    // Tokens of one to three letters of a..h, so a pattern over those letters has many
    // tokens to choose from at every step and refuses most of the vocabulary.
    std::vector<std::string> bytes(static_cast<size_t>(vocab_));
    for (int32_t t = 0; t < vocab_; ++t) {
      bytes[t] = std::string(1 + static_cast<size_t>(t / 26 % 3), static_cast<char>('a' + t % 26));
    }
    bytes[eos_] = constraint::SpecialTokenBytes(eos_);
    auto c = constraint::Compile({constraint::Kind::kRegex, "[a-h]{2,9}", {}},
                                 std::make_shared<constraint::TokenTable>(bytes));
    ASSERT_TRUE(c.ok()) << c.status();
    constraint_ = *c;
  }

  engine::EngineRequest Request(float temperature, uint64_t seed) const {
    engine::EngineRequest r;
    r.prompt_ids = {3, 4, 5, 6, 7};
    r.max_tokens = 32;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.stop_token_ids = {eos_};
    return r;
  }

  // One slot's state for a job: its block table and draft-cache length.
  struct Slot {
    std::vector<int32_t> blocks;
    int32_t written = 0;
    std::vector<int32_t> drafts;
    std::vector<float> probs;
    sampling::PenaltyState penalties;
  };

  static DraftJob Job(const engine::EngineRequest& r, Slot& s, int32_t max_draft,
                      const constraint::Matcher* m) {
    s.drafts.clear();
    return DraftJob{&r,         r.prompt_ids, s.blocks, 0, &s.penalties,    max_draft,
                    &s.written, &s.drafts,    &s.probs, m, r.stop_token_ids};
  }

  ThreadPool pool_{1};
  int32_t vocab_ = 0;
  int32_t eos_ = 0;
  std::unique_ptr<CpuDraft> draft_;
  std::shared_ptr<const constraint::CompiledConstraint> constraint_;
};

TEST_F(CpuDraftTest, ConstrainedProposalsAreAllowedAndTheirDistributionIsMasked) {
  int64_t proposals = 0, stops = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const engine::EngineRequest r = Request(seed % 3 == 0 ? 0.0f : 1.3f, seed);
    constraint::Matcher start(constraint_);
    Slot s{.blocks = {static_cast<int32_t>(seed % 4) * 2, static_cast<int32_t>(seed % 4) * 2 + 1}};
    std::vector<DraftJob> jobs = {Job(r, s, 8, &start)};
    ASSERT_TRUE(draft_->Propose(jobs).ok());
    ASSERT_FALSE(s.drafts.empty()) << "seed " << seed;
    EXPECT_EQ(start.AllowedPrefix(s.drafts, r.stop_token_ids), s.drafts.size()) << seed;
    const auto stop = std::find(s.drafts.begin(), s.drafts.end(), eos_);
    if (stop != s.drafts.end()) {
      EXPECT_EQ(stop + 1, s.drafts.end()) << "nothing is proposed after a stop id";
      ++stops;
    } else {
      EXPECT_EQ(s.drafts.size(), 8u) << "seed " << seed;
    }
    proposals += static_cast<int64_t>(s.drafts.size());
    if (r.sampling.greedy()) {
      EXPECT_TRUE(s.probs.empty());
      continue;
    }
    ASSERT_EQ(s.probs.size(), s.drafts.size() * static_cast<size_t>(vocab_));
    constraint::Matcher m(constraint_);
    std::vector<float> allowed(static_cast<size_t>(vocab_));
    for (size_t i = 0; i < s.drafts.size(); ++i) {
      const std::span<const float> q(s.probs.data() + i * vocab_, static_cast<size_t>(vocab_));
      std::fill(allowed.begin(), allowed.end(), 0.0f);
      m.Apply(allowed, r.stop_token_ids);  // 0 where allowed, -inf where refused
      for (int32_t t = 0; t < vocab_; ++t) {
        if (allowed[t] != 0.0f) {
          ASSERT_EQ(q[t], 0.0f) << "seed " << seed << " row " << i;
        }
      }
      EXPECT_NEAR(std::accumulate(q.begin(), q.end(), 0.0), 1.0, 1e-4);
      EXPECT_GT(q[s.drafts[i]], 0.0f);
      if (s.drafts[i] != eos_) {
        ASSERT_TRUE(m.Advance(s.drafts[i]));
      }
    }
  }
  EXPECT_GT(stops, 0) << "the pattern is complete after two letters, so some drafts stop";
  EXPECT_GT(proposals, 60);
}

// A greedy draft adds the request's logit bias before its argmax, as the target's sampler
// does, so a biased request's proposals are the tokens verification would pick.
TEST_F(CpuDraftTest, GreedyProposalsFollowTheLogitBias) {
  engine::EngineRequest r = Request(0.0f, 0);
  r.sampling.logit_bias = {{1, 100.0f}};  // "b"
  const constraint::Matcher start(constraint_);
  for (const constraint::Matcher* m : {&start, static_cast<const constraint::Matcher*>(nullptr)}) {
    Slot s{.blocks = {0, 1}};
    std::vector<DraftJob> jobs = {Job(r, s, 8, m)};
    ASSERT_TRUE(draft_->Propose(jobs).ok());
    EXPECT_EQ(s.drafts, std::vector<int32_t>(8, 1)) << (m ? "constrained" : "unconstrained");
  }
}

TEST_F(CpuDraftTest, AnUnconstrainedJobProposesWhatItProposesAlone) {
  for (float temperature : {0.0f, 1.0f}) {
    const engine::EngineRequest plain = Request(temperature, 11);
    const engine::EngineRequest constrained = Request(temperature, 12);
    Slot alone{.blocks = {0, 1}};
    std::vector<DraftJob> one = {Job(plain, alone, 6, nullptr)};
    ASSERT_TRUE(draft_->Propose(one).ok());

    constraint::Matcher start(constraint_);
    Slot a{.blocks = {2, 3}}, b{.blocks = {4, 5}};
    std::vector<DraftJob> two = {Job(constrained, b, 6, &start), Job(plain, a, 6, nullptr)};
    ASSERT_TRUE(draft_->Propose(two).ok());
    EXPECT_EQ(a.drafts, alone.drafts) << "temperature " << temperature;
    EXPECT_EQ(a.probs, alone.probs);
    EXPECT_EQ(start.AllowedPrefix(b.drafts, constrained.stop_token_ids), b.drafts.size());
    // Without its constraint the other request's draft proposes tokens the pattern refuses.
    Slot free{.blocks = {6, 7}};
    std::vector<DraftJob> unmasked = {Job(constrained, free, 6, nullptr)};
    ASSERT_TRUE(draft_->Propose(unmasked).ok());
    EXPECT_LT(start.AllowedPrefix(free.drafts, constrained.stop_token_ids), free.drafts.size());
  }
}

}  // namespace
}  // namespace llm::runner
