#include "worker/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "common/cpu_features.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/chi_square.h"

namespace llm::sampling {
namespace {

using ::testing::HasSubstr;

std::vector<float> LogitsOf(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Frequencies of each token over `n` draws with counters 0..n-1.
std::vector<double> Frequencies(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Sampler s;
  PenaltyState none;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    ++counts[s.Sample(l, p, none, i).token_id];
  }
  std::vector<double> f;
  for (int c : counts) f.push_back(static_cast<double>(c) / n);
  return f;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  Sampler s;
  PenaltyState none;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l{1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(s.Sample(l, p, none, 0).token_id, 1);
  EXPECT_EQ(s.Sample(l, p, none, 99).token_id, 1);
}

// A prompt token's logprob: log softmax of the raw logits; the alternatives most likely first,
// ties to the lower id; -inf and NaN neither listed nor counted.
TEST(SamplerTest, RawLogprobsAreTheLogSoftmax) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> l = LogitsOf({0.5, 0.25, 0.25});
  SampledToken t = RawLogprobs(l, 1, 2);
  EXPECT_EQ(t.token_id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.25), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].token_id, 0);
  EXPECT_NEAR(t.top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(t.top[1].token_id, 1);  // tied with 2: the lower id
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(RawLogprobs(l, 2, 0).rank, 3);  // after its tie, the lower id
  EXPECT_EQ(RawLogprobs(l, 0, 0).rank, 1);
  std::vector<float> masked = {2.0f, -inf, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  t = RawLogprobs(masked, 3, 5);
  EXPECT_NEAR(t.logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(t.rank, 2);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(RawLogprobs(masked, 1, 0).logprob, -inf);
  EXPECT_EQ(RawLogprobs(masked, 1, 0).rank, 0);
  EXPECT_TRUE(RawLogprobs(masked, 1, 0).top.empty());
}

// logit_bias is added to the logits before anything else: +100 all but forces a token, -100
// all but bans one; sampled draws follow the biased distribution; penalties come after it.
TEST(SamplerTest, LogitBiasComesFirst) {
  Sampler s;
  PenaltyState none;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l{1.0f, 3.0f, 2.0f, -1.0f};
  p.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(s.Sample(l, p, none, 0).token_id, 3);
  l = {1.0f, 3.0f, 2.0f, -1.0f};
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(s.Sample(l, p, none, 0).token_id, 2);
  // Sampled: a bias of ln 3 on token 0 of two equal tokens makes it 3 times as likely.
  SamplingParams drawn;
  drawn.logit_bias = {{0, static_cast<float>(std::log(3.0))}};
  const std::vector<double> f = Frequencies(LogitsOf({0.5, 0.5}), drawn, 20000);
  EXPECT_NEAR(f[0], 0.75, 0.015);
  // Adjust: the bias, then a presence penalty on an output token.
  PenaltyState st;
  st.AddOutput(0);
  SamplingParams both;
  both.logit_bias = {{0, 1.0f}};
  both.presence_penalty = 0.5f;
  std::vector<float> a{0.0f, 0.0f};
  Adjust(a, both, st);
  EXPECT_FLOAT_EQ(a[0], 0.5f);
  EXPECT_FLOAT_EQ(a[1], 0.0f);
}

TEST(SamplerTest, LogitBiasValidationNamesTheField) {
  SamplingParams p;
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THAT(std::string(p.Validate(10).message()), HasSubstr("sampling.logit_bias"));
  p.logit_bias = {{3, 100.5f}};
  EXPECT_THAT(std::string(p.Validate(10).message()), HasSubstr("sampling.logit_bias[3]"));
  p.logit_bias = {{3, -100.0f}};
  EXPECT_TRUE(p.Validate(10).ok());
}

TEST(SamplerTest, MatchesTheDistribution) {
  SamplingParams p;
  p.seed = 11;
  const auto f = Frequencies(LogitsOf({0.5, 0.3, 0.2}), p, 20000);
  EXPECT_NEAR(f[0], 0.5, 0.015);
  EXPECT_NEAR(f[1], 0.3, 0.015);
  EXPECT_NEAR(f[2], 0.2, 0.015);
}

TEST(SamplerTest, TemperatureFlattensAndSharpens) {
  SamplingParams p;
  p.seed = 3;
  p.temperature = 100.0f;
  auto f = Frequencies(LogitsOf({0.9, 0.1}), p, 10000);
  EXPECT_NEAR(f[0], 0.5, 0.03);
  p.temperature = 0.05f;
  f = Frequencies(LogitsOf({0.6, 0.4}), p, 2000);
  EXPECT_GT(f[0], 0.99);
}

TEST(SamplerTest, TopKTopPMinPKeepTheRightSets) {
  const auto logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.seed = 5;
  p.top_k = 2;
  auto f = Frequencies(logits, p, 20000);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_NEAR(f[1], 0.375, 0.015);
  EXPECT_EQ(f[2] + f[3], 0.0);

  p = SamplingParams{};
  p.seed = 5;
  p.top_p = 0.7f;  // 0.5 < 0.7, 0.5 + 0.3 >= 0.7
  f = Frequencies(logits, p, 20000);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f[2] + f[3], 0.0);

  p = SamplingParams{};
  p.seed = 5;
  p.min_p = 0.5f;  // threshold 0.25
  f = Frequencies(logits, p, 20000);
  EXPECT_NEAR(f[1], 0.375, 0.015);
  EXPECT_EQ(f[2] + f[3], 0.0);

  p = SamplingParams{};
  p.top_k = 1;
  f = Frequencies(logits, p, 500);
  EXPECT_EQ(f[0], 1.0);
  p = SamplingParams{};
  p.top_p = 1e-6f;
  f = Frequencies(logits, p, 500);
  EXPECT_EQ(f[0], 1.0);
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  const auto logits = LogitsOf({0.2, 0.2, 0.2, 0.2, 0.2});
  auto draw = [&](uint64_t seed) {
    Sampler s;
    PenaltyState none;
    SamplingParams p;
    p.seed = seed;
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l = logits;
      out.push_back(s.Sample(l, p, none, i).token_id);
    }
    return out;
  };
  EXPECT_EQ(draw(1), draw(1));
  EXPECT_NE(draw(1), draw(2));
}

TEST(SamplerTest, Penalties) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  PenaltyState st;
  const std::vector<int32_t> prompt{0, 1};
  st.AddPrompt(prompt);
  st.AddOutput(1);
  st.AddOutput(2);
  st.AddOutput(2);
  std::vector<float> l{4.0f, -4.0f, 1.0f, 1.0f};
  ApplyPenalties(l, p, st);
  EXPECT_FLOAT_EQ(l[0], 2.0f);                  // prompt only: repetition
  EXPECT_FLOAT_EQ(l[1], -8.0f - 0.5f - 0.25f);  // prompt and output once (penalised once)
  EXPECT_FLOAT_EQ(l[2], 0.5f - 0.5f - 0.5f);    // output twice
  EXPECT_FLOAT_EQ(l[3], 1.0f);                  // untouched
}

// A subnormal repetition penalty (validation allows (0, 10]) divides a positive logit past
// FLT_MAX: the penalised logit is FLT_MAX, never inf (inf minus the row's maximum of inf would
// make every probability NaN). Here tokens 1 and 2 both reach FLT_MAX and share the mass.
TEST(SamplerTest, TinyRepetitionPenaltyNeverMakesNaN) {
  Sampler s;
  PenaltyState st;
  const std::vector<int32_t> prompt{1, 2, 3};
  st.AddPrompt(prompt);
  for (const float t : {0.0f, 0.7f}) {
    SamplingParams p;
    p.temperature = t;
    p.repetition_penalty = 1e-40f;
    p.seed = 9;
    for (uint64_t counter = 0; counter < 20; ++counter) {
      std::vector<float> l{1.0f, 3.0f, 2.0f, -1.0f};
      const auto r = s.Sample(l, p, st, counter, /*num_top_logprobs=*/3, /*want_logprob=*/true);
      EXPECT_EQ(l[1], std::numeric_limits<float>::max());
      EXPECT_EQ(l[2], std::numeric_limits<float>::max());
      EXPECT_TRUE(r.token_id == 1 || r.token_id == 2) << r.token_id;
      if (t == 0.0f) {
        EXPECT_EQ(r.token_id, 1);
      }
      EXPECT_NEAR(r.logprob, -std::log(2.0f), 1e-6) << "temperature " << t;
      ASSERT_EQ(r.top.size(), 3u);
      EXPECT_EQ(r.top[0].token_id, 1);
      EXPECT_EQ(r.top[1].token_id, 2);
    }
  }
}

TEST(SamplerTest, Logprobs) {
  Sampler s;
  PenaltyState none;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = LogitsOf({0.5, 0.25, 0.25});
  const auto r = s.Sample(l, p, none, 0, /*num_top_logprobs=*/2, /*want_logprob=*/true);
  EXPECT_EQ(r.token_id, 0);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token_id, 0);
  EXPECT_EQ(r.top[1].token_id, 1);
  EXPECT_NEAR(r.top[1].logprob, std::log(0.25), 1e-5);
}

// NaN and -inf are never listed (JSON cannot carry -inf, and NaN would break the order), so a
// row with fewer listable logits than asked lists fewer; -FLT_MAX is a logit like any other.
TEST(SamplerTest, TopLogprobsListOnlyComparableLogits) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kLowest = -std::numeric_limits<float>::max();
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {-kInf, 1.0f, -kInf, kLowest, 3.0f, 1.0f};
  auto r = s.Sample(l, p, PenaltyState{}, 0, /*num_top_logprobs=*/6, /*want_logprob=*/true);
  EXPECT_EQ(r.token_id, 4);
  std::vector<int32_t> ids;
  for (const auto& t : r.top) {
    ids.push_back(t.token_id);
    EXPECT_TRUE(std::isfinite(t.logprob)) << t.token_id;
  }
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 1, 5, 3}));
  EXPECT_EQ(r.top[1].logprob, r.top[2].logprob);

  // NaN anywhere (a broken row: every logprob is NaN then) still leaves a strict order.
  std::vector<float> with_nan = {kNaN, 1.0f, -kInf, 3.0f, kNaN, 1.0f, kNaN};
  r = s.Sample(with_nan, p, PenaltyState{}, 0, 5, true);
  ids.clear();
  for (const auto& t : r.top) ids.push_back(t.token_id);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 1, 5}));

  std::vector<float> none = {kNaN, -kInf};
  EXPECT_TRUE(s.Sample(none, p, PenaltyState{}, 0, 3, true).top.empty());
}

// A temperature so small that 1/T overflows a float (a subnormal one) or that scaled logit gaps
// do: sampling is greedy in the limit, never NaN. The top token's logprob is 0 (it has all the
// mass); the others' are far below, or -inf.
TEST(SamplerTest, TinyTemperaturesSampleTheArgmax) {
  Sampler s;
  for (const float t : {1e-40f, 1e-38f, 1e-30f, 1e-6f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 3;
    for (uint64_t counter = 0; counter < 50; ++counter) {
      std::vector<float> l = {0.0f, 5.0f, 1.0f, 4.999f};
      const auto r = s.Sample(l, p, PenaltyState{}, counter, /*num_top_logprobs=*/2,
                              /*want_logprob=*/true);
      ASSERT_EQ(r.token_id, 1) << "temperature " << t << " counter " << counter;
      EXPECT_EQ(r.logprob, 0.0f) << "temperature " << t;
      ASSERT_EQ(r.top.size(), 2u);
      EXPECT_EQ(r.top[0].token_id, 1);
      EXPECT_EQ(r.top[1].token_id, 3);
      EXPECT_FALSE(std::isnan(r.top[1].logprob)) << "temperature " << t;
    }
  }
}

TEST(SamplerTest, EmptyLogitsGiveTokenZeroWithoutReadingAnything) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.7f;
  std::vector<float> none_logits;
  EXPECT_EQ(s.Sample(none_logits, p, PenaltyState{}, 0, 2, true).token_id, 0);
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.top_p"));
  p = SamplingParams{};
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.temperature"));
  p = SamplingParams{};
  p.temperature = -1;
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.temperature"));
  p = SamplingParams{};
  p.top_k = 101;
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.top_k"));
  p = SamplingParams{};
  p.repetition_penalty = 0;
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.repetition_penalty"));
  p = SamplingParams{};
  p.frequency_penalty = 3;
  EXPECT_THAT(std::string(p.Validate(100).message()), HasSubstr("sampling.frequency_penalty"));
  EXPECT_TRUE(SamplingParams{}.Validate(100).ok());
}

// The vectorised sampler (AVX2) and the portable one choose the same tokens and report the same
// logprobs, bit for bit, over many draws, vocabulary sizes and filters.
TEST(SamplerTest, VectorAndPortablePathsAgreeExactly) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU has no AVX2+FMA: only the portable path runs";
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<SamplingParams> params(5);
  params[0].temperature = 0.8f;
  params[1].temperature = 1.3f;
  params[1].top_k = 40;
  params[2].temperature = 0.7f;
  params[2].top_p = 0.9f;
  params[3].temperature = 1.0f;
  params[3].min_p = 0.05f;
  params[4].temperature = 0.0f;
  PenaltyState none;
  for (int32_t vocab : {3, 64, 100, 2048, 32001}) {
    std::vector<float> logits(vocab);
    for (float& l : logits) l = d(rng);
    if (vocab > 10) logits[vocab / 2] = -std::numeric_limits<float>::infinity();
    for (const SamplingParams& p : params) {
      for (uint64_t counter = 0; counter < 50; ++counter) {
        auto draw = [&](bool portable) {
          ForcePortableCpuPathsForTesting(portable);
          Sampler s;
          std::vector<float> l = logits;
          SampledToken r = s.Sample(l, p, none, counter, 3, true);
          ForcePortableCpuPathsForTesting(false);
          return r;
        };
        const SampledToken a = draw(false), b = draw(true);
        ASSERT_EQ(a.token_id, b.token_id) << "vocab " << vocab << " counter " << counter;
        ASSERT_EQ(a.logprob, b.logprob);
        ASSERT_EQ(a.top.size(), b.top.size());
        for (size_t i = 0; i < a.top.size(); ++i) {
          ASSERT_EQ(a.top[i].token_id, b.top[i].token_id);
          ASSERT_EQ(a.top[i].logprob, b.top[i].logprob);
        }
      }
    }
  }
}

// Speculative verification (Sampler::Verify).

// Pearson's chi-square statistic of `counts` against the normalised `expected` over the tokens
// with a positive expected probability (tokens with none must never be drawn).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& expected, int n,
                 int* categories) {
  double chi = 0.0;
  *categories = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    ++*categories;
    const double e = expected[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// The distribution Sample draws from (temperature, top-k, top-p), normalised.
std::vector<double> TargetOf(const std::vector<float>& logits, const SamplingParams& p) {
  Sampler s;
  PenaltyState none;
  std::vector<float> l = logits, probs;
  s.Distribution(l, p, none, probs);
  return std::vector<double>(probs.begin(), probs.end());
}

struct VerifyCase {
  const char* name;
  SamplingParams params;
  std::vector<double> draft;  // q; empty: a point mass on `fixed`
  int32_t fixed = 0;
};

// 40,000 verifications with proposals drawn from q (or fixed): the tokens that come out follow
// the target distribution (chi-square at p > 0.001), and proposals stand about as often as
// sum(min(p, q)) says.
TEST(SamplerVerifyTest, RejectionSamplingGivesTheTargetDistribution) {
  const std::vector<float> logits = LogitsOf({0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02});
  SamplingParams base;
  base.temperature = 1.0f;
  base.seed = 1234;
  SamplingParams hot = base;
  hot.temperature = 0.7f;
  hot.top_k = 5;
  SamplingParams nucleus = base;
  nucleus.top_p = 0.8f;
  const std::vector<VerifyCase> cases = {
      {"point mass on the likeliest", base, {}, 0},
      {"point mass on an unlikely one", base, {}, 6},
      {"point mass outside top-k", hot, {}, 7},
      {"draft distribution", base, {0.05, 0.05, 0.40, 0.10, 0.10, 0.10, 0.10, 0.10}},
      {"draft distribution, top-p", nucleus, {0.10, 0.30, 0.05, 0.05, 0.05, 0.05, 0.20, 0.20}},
      {"draft distribution equal to the target",
       base,
       {0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02}},
  };
  constexpr int kDraws = 40000;
  for (const VerifyCase& c : cases) {
    const std::vector<double> target = TargetOf(logits, c.params);
    const std::vector<float> q(c.draft.begin(), c.draft.end());
    std::mt19937_64 rng(99);
    std::discrete_distribution<int32_t> propose(c.draft.begin(), c.draft.end());
    Sampler s;
    PenaltyState none;
    std::vector<int> counts(logits.size(), 0);
    int accepted_count = 0;
    for (int i = 0; i < kDraws; ++i) {
      const int32_t draft = c.draft.empty() ? c.fixed : propose(rng);
      std::vector<float> l = logits;
      bool accepted = false;
      const SampledToken t =
          s.Verify(l, c.params, none, static_cast<uint64_t>(i), draft, q, accepted);
      ASSERT_GE(t.token_id, 0);
      ASSERT_LT(t.token_id, 8);
      if (accepted) {
        EXPECT_EQ(t.token_id, draft);
      }
      ++counts[t.token_id];
      accepted_count += accepted ? 1 : 0;
    }
    int categories = 0;
    const double chi = ChiSquare(counts, target, kDraws, &categories);
    EXPECT_LT(chi, llm::testing::ChiSquareCritical(categories - 1)) << c.name;
    double overlap = 0.0;  // sum min(p, q): the chance a proposal stands
    for (size_t t = 0; t < target.size(); ++t) {
      overlap +=
          std::min(target[t],
                   c.draft.empty() ? (static_cast<int32_t>(t) == c.fixed ? 1.0 : 0.0) : c.draft[t]);
    }
    EXPECT_NEAR(static_cast<double>(accepted_count) / kDraws, overlap, 0.015) << c.name;
  }
}

// Greedy: the token is Sample's, and the proposal stands exactly when it is that token.
TEST(SamplerVerifyTest, GreedyKeepsTheArgmax) {
  const std::vector<float> logits = LogitsOf({0.1, 0.5, 0.2, 0.2});
  SamplingParams p;
  p.temperature = 0;
  Sampler s;
  PenaltyState none;
  for (int32_t draft = 0; draft < 4; ++draft) {
    std::vector<float> l = logits;
    bool accepted = true;
    EXPECT_EQ(s.Verify(l, p, none, 0, draft, {}, accepted).token_id, 1);
    EXPECT_EQ(accepted, draft == 1);
  }
  // Penalties apply first, as in Sample: the repeated token loses.
  PenaltyState seen;
  seen.AddOutput(1);
  p.presence_penalty = 2.0f;
  std::vector<float> l = logits;
  bool accepted = false;
  EXPECT_EQ(s.Verify(l, p, seen, 0, 2, {}, accepted).token_id, 2);
  EXPECT_TRUE(accepted);
}

// A proposal the target cannot produce (probability 0 after top-k) never stands, and the
// replacement is drawn from the rest.
TEST(SamplerVerifyTest, AProposalOutsideTheKeptSetIsRejected) {
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler s;
  PenaltyState none;
  for (uint64_t i = 0; i < 200; ++i) {
    std::vector<float> l = logits;
    bool accepted = true;
    const int32_t t = s.Verify(l, p, none, i, 3, {}, accepted).token_id;
    EXPECT_FALSE(accepted);
    EXPECT_TRUE(t == 0 || t == 1) << t;
  }
}

}  // namespace
}  // namespace llm::sampling
