// The split sampler run on the host (no GPU): its kernels emulated chunk by chunk and, where a
// block splits work across threads (the select's bucket scan, the draw inside the chosen
// chunk), thread by thread, with the functions of kernels/sampling/sample_select.h that the kernels
// call. Checked against an independent kept set (sorts in double, as the CPU sampler's rules
// say) and against the CPU sampler's token for the same seed.
#include "kernels/sampling/sample_select.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fast_exp.h"
#include "common/logit_arithmetic.h"
#include "common/philox.h"
#include "gtest/gtest.h"
#include "kernels/sampling/sampling.h"
#include "worker/sampling/sampler.h"

namespace llm::kernels {
namespace {

struct Settings {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

std::string Describe(const Settings& s, int32_t n) {
  return "n " + std::to_string(n) + " T " + std::to_string(s.temperature) + " top_k " +
         std::to_string(s.top_k) + " top_p " + std::to_string(s.top_p) + " min_p " +
         std::to_string(s.min_p);
}

struct Emulated {
  int32_t token = -1;
  std::vector<uint8_t> kept;
};

constexpr int kDrawThreads = 1024;
constexpr int kSelectThreads = 256;

// The select level's scan as SelectLevel runs it: thread t holds buckets [1023-4t-3, 1023-4t]
// and the weight above them from an exclusive scan; at most one thread finds the crossing, and
// it is the one a single scan of all buckets finds.
bool ScanLevel(const std::vector<uint64_t>& count, const std::vector<uint64_t>& mass, bool by_mass,
               uint64_t need, Crossing* out) {
  const int per = kDigitBuckets / kSelectThreads;
  uint64_t above_c = 0, above_m = 0;
  int finders = 0;
  for (int t = 0; t < kSelectThreads; ++t) {
    const int hi = kDigitBuckets - 1 - t * per, lo = hi - per + 1;
    Crossing c{};
    if (FindCrossing(count.data(), mass.data(), by_mass, hi, lo, by_mass ? above_m : above_c,
                     above_c, above_m, need, &c)) {
      *out = c;
      ++finders;
    }
    for (int b = lo; b <= hi; ++b) {
      above_c += count[b];
      above_m += mass[b];
    }
  }
  EXPECT_LE(finders, 1);
  Crossing whole{};
  const bool found =
      FindCrossing(count.data(), mass.data(), by_mass, kDigitBuckets - 1, 0, 0, 0, 0, need, &whole);
  EXPECT_EQ(found, finders == 1);
  if (found && finders == 1) {
    EXPECT_EQ(whole.bucket, out->bucket);
    EXPECT_EQ(whole.weight_above, out->weight_above);
    EXPECT_EQ(whole.count_above, out->count_above);
    EXPECT_EQ(whole.mass_above, out->mass_above);
  }
  return finders == 1;
}

// Logits after penalties; what the kernels compute from them, in their order.
Emulated EmulateSplitSampler(const std::vector<float>& logits, const Settings& s, uint64_t seed,
                             uint64_t counter) {
  const auto n = static_cast<int32_t>(logits.size());
  const int32_t chunks = SampleChunks(n);
  Emulated e;
  e.kept.assign(static_cast<size_t>(n), 0);
  // ResetPenaltiesArgmaxKernel and RowMax.
  float max_logit = -std::numeric_limits<float>::infinity();
  int32_t argmax = std::numeric_limits<int32_t>::max();
  for (int32_t i = 0; i < n; ++i) {
    if (ArgmaxBetter(logits[i], i, max_logit, argmax)) {
      max_logit = logits[i];
      argmax = i;
    }
  }
  if (argmax >= n) argmax = 0;
  SampleRowState st = StartRow(s.temperature, s.top_k, s.top_p, n);
  if (s.temperature == 0.0f) {
    e.token = argmax;
    return e;
  }
  // ProbsKernel.
  const float inv_t = sampling::InverseTemperature(s.temperature);
  std::vector<float> probs(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) probs[i] = FastExp((logits[i] - max_logit) * inv_t);
  // The select levels (ProbsKernel's and SelectKernel's); chunks add into the row's histogram
  // in reverse order: integer sums do not care.
  for (int pass = 0; pass < kSelectPasses && st.stage != kStageDone; ++pass) {
    std::vector<uint64_t> count(kDigitBuckets, 0), mass(kDigitBuckets, 0);
    for (int32_t c = chunks - 1; c >= 0; --c) {
      const IdRange r = SampleChunkRange(n, chunks, c);
      for (int32_t i = r.begin; i < r.end; ++i) {
        const uint32_t key = ProbKey(probs[i]);
        if (!InSelect(probs[i], key, st)) continue;
        ++count[DigitOf(key, st.level)];
        mass[DigitOf(key, st.level)] += FixedMass(probs[i]);
      }
    }
    const uint64_t total_m = std::accumulate(mass.begin(), mass.end(), uint64_t{0});
    const uint64_t need = SelectNeed(st, s.top_p, total_m);
    Crossing c{};
    const bool found = ScanLevel(count, mass, st.stage == kStageTopP, need, &c);
    FinishLevel(st, s.top_p, found, c, total_m);
  }
  EXPECT_EQ(st.stage, kStageDone) << Describe(s, n);
  // KeptMassKernel: each chunk's mass above eq_key and its tokens at eq_key; the last block's
  // ChooseChunk.
  std::vector<double> mass_above(static_cast<size_t>(chunks), 0.0);
  std::vector<int32_t> eq_count(static_cast<size_t>(chunks), 0);
  for (int32_t c = 0; c < chunks; ++c) {
    const IdRange r = SampleChunkRange(n, chunks, c);
    for (int32_t i = r.begin; i < r.end; ++i) {
      const uint32_t key = ProbKey(probs[i]);
      if (KeptAbove(probs[i], key, st, s.min_p)) mass_above[c] += probs[i];
      if (AtEqKey(probs[i], key, st)) ++eq_count[c];
    }
  }
  ChooseChunk(st, mass_above.data(), eq_count.data(), chunks, UniformDouble(seed, counter),
              s.min_p);
  // The kept set, with each token's rank at eq_key over the whole row.
  uint64_t rank = 0;
  for (int32_t i = 0; i < n; ++i) {
    const uint32_t key = ProbKey(probs[i]);
    e.kept[i] = Kept(probs[i], key, rank, st, s.min_p) ? 1 : 0;
    if (AtEqKey(probs[i], key, st)) ++rank;
  }
  if (st.chosen_chunk < 0) {
    e.token = argmax;
    return e;
  }
  // DrawKernel: contiguous ids per thread, ranks and kept mass before each thread by prefix;
  // threads starting at or below u search, and offer their last kept id as the fallback.
  const IdRange r = SampleChunkRange(n, chunks, st.chosen_chunk);
  const int32_t per = (r.end - r.begin + kDrawThreads - 1) / kDrawThreads;
  uint64_t thread_rank = static_cast<uint64_t>(st.eq_before);
  double cum = st.cum_before;
  int32_t chosen = std::numeric_limits<int32_t>::max(), last_kept = -1;
  for (int t = 0; t < kDrawThreads; ++t) {
    const int32_t begin = std::min(r.end, r.begin + t * per), end = std::min(r.end, begin + per);
    double mine = 0.0;
    int32_t last = -1;
    uint64_t k = thread_rank;
    for (int32_t i = begin; i < end; ++i) {
      const uint32_t key = ProbKey(probs[i]);
      if (Kept(probs[i], key, k, st, s.min_p)) {
        mine += probs[i];
        last = i;
      }
      if (AtEqKey(probs[i], key, st)) ++k;
    }
    if (mine > 0.0 && cum <= st.u) {
      int32_t unused = -1;
      const int32_t found =
          DrawInRange(probs.data(), begin, end, st, s.min_p, thread_rank, cum, &unused);
      if (found >= 0) chosen = std::min(chosen, found);
      last_kept = std::max(last_kept, last);
    }
    thread_rank = k;
    cum += mine;
  }
  e.token = chosen != std::numeric_limits<int32_t>::max() ? chosen
                                                          : (last_kept >= 0 ? last_kept : argmax);
  return e;
}

// The kept set by the rules, with sorts and double sums (independent of the radix select).
std::vector<uint8_t> ReferenceKept(const std::vector<float>& logits, const Settings& s) {
  const auto n = static_cast<int32_t>(logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<float> p(static_cast<size_t>(n));
  const float inv_t = sampling::InverseTemperature(s.temperature);
  for (int32_t i = 0; i < n; ++i) p[i] = FastExp((logits[i] - max_logit) * inv_t);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::vector<uint8_t> kept(static_cast<size_t>(n), 1);
  size_t keep = order.size();
  if (s.top_k > 0 && s.top_k < n) keep = static_cast<size_t>(s.top_k);
  if (s.top_p < 1.0f) {
    double total = 0.0;
    for (size_t j = 0; j < keep; ++j) total += p[order[j]];
    const double target = static_cast<double>(s.top_p) * total;
    double cum = 0.0;
    size_t j = 0;
    while (j < keep && (j == 0 || cum < target)) cum += p[order[j++]];
    keep = j;
  }
  for (size_t j = keep; j < order.size(); ++j) kept[order[j]] = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (s.min_p > 0.0f && p[i] < s.min_p) kept[i] = 0;
  }
  return kept;
}

std::vector<float> MakeLogits(int32_t n, int kind, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& x : l) x = u(rng);
  switch (kind) {
    case 1:  // coarse values: many exactly equal probabilities, ties across chunks
      for (float& x : l) x = std::round(x * 2.0f) / 2.0f;
      break;
    case 2:  // one dominant token
      l[static_cast<size_t>(rng() % static_cast<uint32_t>(n))] = 30.0f;
      break;
    case 3:  // every token equal: ties decide everything
      for (float& x : l) x = 1.5f;
      break;
    case 4:  // a few equal tops in different chunks
      for (int k = 0; k < 5; ++k) l[static_cast<size_t>(rng() % static_cast<uint32_t>(n))] = 9.0f;
      break;
    default:
      break;
  }
  return l;
}

std::vector<Settings> AllSettings(int32_t n) {
  std::vector<Settings> out;
  for (const float t : {0.7f, 1.0f, 1.3f}) {
    for (const int32_t k : {0, 1, 2, 40, 1000, n - 1, n}) {
      for (const float top_p : {1.0f, 0.9f, 0.5f, 0.99f, 1e-6f}) {
        for (const float min_p : {0.0f, 0.05f}) out.push_back({t, k, top_p, min_p});
      }
    }
  }
  return out;
}

TEST(SampleSelectTest, KeptSetAndTokenMatchTheRulesAndTheCpuSampler) {
  std::mt19937 rng(7);
  int cases = 0, kept_mismatch = 0, token_agree = 0, draws = 0;
  for (const int32_t n : {17, 5003, 32000, 128256}) {
    const std::vector<Settings> settings = AllSettings(n);
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> logits = MakeLogits(n, kind, rng);
      // Fewer settings on the large vocabularies (the CPU sampler sorts for each).
      const size_t stride = n > 10000 ? 7 : 1;
      for (size_t j = (kind * 3) % stride; j < settings.size(); j += stride) {
        const Settings& s = settings[j];
        const uint64_t seed = 1000 + j, counter = static_cast<uint64_t>(kind);
        const Emulated e = EmulateSplitSampler(logits, s, seed, counter);
        const std::vector<uint8_t> want = ReferenceKept(logits, s);
        ++cases;
        if (e.kept != want) {
          ++kept_mismatch;
          ADD_FAILURE() << "kept set differs: " << Describe(s, n) << " kind " << kind;
        }
        ASSERT_GE(e.token, 0);
        ASSERT_LT(e.token, n);
        EXPECT_TRUE(want[e.token]) << "drew a dropped token: " << Describe(s, n);
        sampling::SamplingParams params;
        params.temperature = s.temperature;
        params.top_k = s.top_k;
        params.top_p = s.top_p;
        params.min_p = s.min_p;
        params.seed = seed;
        std::vector<float> row = logits;
        sampling::Sampler cpu;
        const int32_t cpu_token =
            cpu.Sample(row, params, sampling::PenaltyState{}, counter).token_id;
        ++draws;
        token_agree += cpu_token == e.token ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(kept_mismatch, 0) << "of " << cases;
  // The same draw over the same kept set; the sums differ in order (chunks of 4,096 ids, not
  // 64), which can move u across a token boundary by a rounding.
  EXPECT_GE(token_agree * 1000, draws * 995) << token_agree << " of " << draws;
  RecordProperty("draws", draws);
  RecordProperty("agree", token_agree);
}

// A subnormal temperature (1/T overflows a float; sampling::InverseTemperature) draws the argmax
// under every filter, as the CPU sampler does: without the clamp every probability is NaN.
TEST(SampleSelectTest, SubnormalTemperatureDrawsTheArgmax) {
  std::mt19937 rng(13);
  int rows = 0;
  for (const int32_t n : {17, 5003, 128256}) {
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> logits = MakeLogits(n, kind, rng);
      int32_t argmax = 0;
      for (int32_t i = 1; i < n; ++i) {
        if (ArgmaxBetter(logits[i], i, logits[argmax], argmax)) argmax = i;
      }
      for (const Settings& s : {Settings{1e-40f, 0, 1.0f, 0.0f}, Settings{1e-40f, 40, 0.9f, 0.05f},
                                Settings{1e-45f, 0, 0.5f, 0.0f}}) {
        const Emulated e = EmulateSplitSampler(logits, s, 77, static_cast<uint64_t>(kind));
        sampling::SamplingParams params;
        params.temperature = s.temperature;
        params.top_k = s.top_k;
        params.top_p = s.top_p;
        params.min_p = s.min_p;
        params.seed = 77;
        std::vector<float> row = logits;
        sampling::Sampler cpu;
        const auto r =
            cpu.Sample(row, params, sampling::PenaltyState{}, static_cast<uint64_t>(kind), 0, true);
        // Rows whose maximum is tied draw among the tied ids.
        EXPECT_EQ(logits[e.token], logits[argmax]) << Describe(s, n) << " kind " << kind;
        EXPECT_EQ(logits[r.token_id], logits[argmax]) << Describe(s, n) << " kind " << kind;
        EXPECT_FALSE(std::isnan(r.logprob)) << Describe(s, n) << " kind " << kind;
        ++rows;
      }
    }
  }
  EXPECT_EQ(rows, 3 * 5 * 3);
}

// Top-k alone: exactly k kept, the largest, ties by id (every token equal: the first k ids).
TEST(SampleSelectTest, TopKKeepsTheFirstKOfEqualTokens) {
  for (const int32_t n : {5003, 128256}) {
    const std::vector<float> logits(static_cast<size_t>(n), 0.25f);
    for (const int32_t k : {1, 2, 4095, 4096, 4097, 70000}) {
      if (k >= n) continue;
      const Emulated e = EmulateSplitSampler(logits, {1.0f, k, 1.0f, 0.0f}, 5, 0);
      int32_t kept = 0, first_dropped = -1;
      for (int32_t i = 0; i < n; ++i) {
        kept += e.kept[i];
        if (!e.kept[i] && first_dropped < 0) first_dropped = i;
      }
      EXPECT_EQ(kept, k) << n;
      EXPECT_EQ(first_dropped, k) << n;
      EXPECT_LT(e.token, k);
    }
  }
}

// Top-p alone over equal tokens: the smallest id-ordered prefix whose mass reaches top_p.
TEST(SampleSelectTest, TopPCountsEqualTokensInIdOrder) {
  const int32_t n = 5003;
  const std::vector<float> logits(static_cast<size_t>(n), -2.0f);
  for (const float top_p : {0.5f, 0.1f, 0.9999f, 1e-9f}) {
    const Emulated e = EmulateSplitSampler(logits, {1.0f, 0, top_p, 0.0f}, 9, 3);
    const auto want = static_cast<int32_t>(std::max(1.0, std::ceil(double(top_p) * n)));
    int32_t kept = 0;
    for (int32_t i = 0; i < n; ++i) kept += e.kept[i];
    EXPECT_EQ(kept, want) << top_p;
    EXPECT_TRUE(e.kept[0]);
    EXPECT_LT(e.token, want);
  }
}

// The draw's chunk: chunks of equal tokens share eq_need in id order; u at the very top falls to
// the last chunk that keeps anything.
TEST(SampleSelectTest, ChooseChunkSharesTheEqualTokensInOrder) {
  SampleRowState st{};
  st.eq_key = ProbKey(0.5f);
  st.eq_need = 5;
  const double above[3] = {1.0, 0.0, 2.0};
  const int32_t eq[3] = {3, 4, 0};
  // Kept: chunk 0 = 1 + 3 * 0.5 = 2.5, chunk 1 = 2 * 0.5 = 1, chunk 2 = 2; total 5.5.
  ChooseChunk(st, above, eq, 3, 0.0, 0.0f);
  EXPECT_EQ(st.chosen_chunk, 0);
  ChooseChunk(st, above, eq, 3, 2.6 / 5.5, 0.0f);
  EXPECT_EQ(st.chosen_chunk, 1);
  EXPECT_DOUBLE_EQ(st.cum_before, 2.5);
  EXPECT_EQ(st.eq_before, 3);
  ChooseChunk(st, above, eq, 3, 0.99, 0.0f);
  EXPECT_EQ(st.chosen_chunk, 2);
  EXPECT_EQ(st.eq_before, 7);
  // min_p above the equal tokens' probability drops them: chunk 1 keeps nothing.
  ChooseChunk(st, above, eq, 3, 1.5 / 3.0, 0.6f);
  EXPECT_EQ(st.chosen_chunk, 2);
  EXPECT_DOUBLE_EQ(st.cum_before, 1.0);
  // u exactly at a chunk's end belongs to the next chunk (the running mass must pass u).
  const double halves[2] = {1.0, 1.0};
  const int32_t none[2] = {0, 0};
  ChooseChunk(st, halves, none, 2, 0.5, 0.0f);
  EXPECT_EQ(st.chosen_chunk, 1);
  // u past every chunk (rounding): the last chunk that keeps anything.
  const double none_last[3] = {1.0, 1.0, 0.0};
  const int32_t no_eq[3] = {0, 0, 0};
  ChooseChunk(st, none_last, no_eq, 3, 1.0, 0.0f);
  EXPECT_EQ(st.chosen_chunk, 1);
  EXPECT_DOUBLE_EQ(st.cum_before, 1.0);
}

// The top logprobs as the kernels find them: ResetPenaltiesArgmaxKernel's chunk lists (each
// round the best logit after the last taken, thread by thread over the block's strided ids,
// then the block's maximum) and DrawKernel's merge (a lane per chunk, the lanes' best taken and
// its lane moved on).
std::vector<int32_t> EmulateTopLogprobs(const std::vector<float>& logits, int top) {
  constexpr int kThreads = 256;  // sampling.cu's kChunkThreads
  const auto n = static_cast<int32_t>(logits.size());
  const int32_t chunks = SampleChunks(n);
  std::vector<std::vector<std::pair<float, int32_t>>> lists(static_cast<size_t>(chunks));
  for (int32_t c = 0; c < chunks; ++c) {
    const IdRange r = SampleChunkRange(n, chunks, c);
    float prev_v = -std::numeric_limits<float>::max();
    int32_t prev_i = kNoTopId;
    for (int k = 0; k < top; ++k) {
      float bv = -std::numeric_limits<float>::max();
      int32_t bi = kNoTopId;
      for (int t = 0; t < kThreads; ++t) {
        float v = -std::numeric_limits<float>::max();
        int32_t id = kNoTopId;
        for (int32_t i = r.begin + t; i < r.end; i += kThreads) {
          const float l = logits[static_cast<size_t>(i)];
          if ((k == 0 || TopLogprobAfter(l, i, prev_v, prev_i)) && ArgmaxBetter(l, i, v, id)) {
            v = l;
            id = i;
          }
        }
        if (ArgmaxBetter(v, id, bv, bi)) {
          bv = v;
          bi = id;
        }
      }
      lists[static_cast<size_t>(c)].push_back({bv, bi});
      if (bi == kNoTopId) break;
      prev_v = bv;
      prev_i = bi;
    }
  }
  std::vector<int32_t> out;
  std::vector<size_t> head(static_cast<size_t>(chunks), 0);
  for (int k = 0; k < std::min(top, n); ++k) {
    float bv = -std::numeric_limits<float>::max();
    int32_t bi = kNoTopId;
    int lane_of_best = -1;
    for (int32_t c = 0; c < chunks; ++c) {
      const auto& list = lists[static_cast<size_t>(c)];
      if (head[c] >= list.size()) continue;  // a full list (top entries): spent
      const auto [v, id] = list[head[c]];
      if (ArgmaxBetter(v, id, bv, bi)) {
        bv = v;
        bi = id;
        lane_of_best = c;
      }
    }
    if (bi == kNoTopId) break;
    ++head[static_cast<size_t>(lane_of_best)];
    out.push_back(bi);
  }
  return out;
}

// Over vocabularies of 17 to 151,936 ids (1 to 32 chunks) and rows with ties within and across
// chunks, NaN, -inf and -FLT_MAX: the merged list is the first `top` logits in (value, lowest id)
// order, NaN and -inf left out; the CPU sampler's top logprob ids, on every row.
TEST(SampleSelectTest, TopLogprobsMergeTheChunksListsInTheRowsOrder) {
  std::mt19937 rng(11);
  int rows = 0;
  for (const int32_t n : {17, 5003, 128000, 151936}) {
    for (int kind = 0; kind < 7; ++kind) {
      std::vector<float> logits = MakeLogits(n, kind % 5, rng);
      if (kind == 5) {  // NaN and -inf sprinkled, a NaN where the maximum would be
        for (int j = 0; j < 200; ++j) {
          logits[rng() % static_cast<uint32_t>(n)] = std::numeric_limits<float>::quiet_NaN();
          logits[rng() % static_cast<uint32_t>(n)] = -std::numeric_limits<float>::infinity();
        }
        logits[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      }
      if (kind == 6) {  // nearly all -inf: fewer listed than asked; -FLT_MAX is listed
        for (float& x : logits) x = -std::numeric_limits<float>::infinity();
        logits[static_cast<size_t>(n - 1)] = -std::numeric_limits<float>::max();
        logits[static_cast<size_t>(n / 3)] = 2.0f;
        logits[0] = std::numeric_limits<float>::quiet_NaN();
      }
      for (const int top : {1, 5, 20}) {
        std::vector<int32_t> want;
        for (int32_t i = 0; i < n; ++i) {
          const float v = logits[static_cast<size_t>(i)];
          if (!std::isnan(v) && v >= -std::numeric_limits<float>::max()) want.push_back(i);
        }
        const size_t k = std::min<size_t>(static_cast<size_t>(top), want.size());
        std::partial_sort(want.begin(), want.begin() + k, want.end(), [&](int32_t a, int32_t b) {
          return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        want.resize(k);
        const std::vector<int32_t> got = EmulateTopLogprobs(logits, top);
        EXPECT_EQ(got, want) << "vocab " << n << " kind " << kind << " top " << top;
        sampling::SamplingParams params;
        params.seed = 5;
        std::vector<float> row = logits;
        sampling::Sampler cpu;
        const auto r = cpu.Sample(row, params, sampling::PenaltyState{}, 0, top, true);
        std::vector<int32_t> cpu_ids;
        for (const auto& t : r.top) cpu_ids.push_back(t.token_id);
        EXPECT_EQ(got, cpu_ids) << "vocab " << n << " kind " << kind << " top " << top;
        ++rows;
      }
    }
  }
  EXPECT_EQ(rows, 4 * 7 * 3);
}

TEST(SampleSelectTest, KeysOrderProbabilitiesAndFitThirtyBits) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < 10000; ++i) {
    const float a = u(rng), b = u(rng);
    EXPECT_EQ(a < b, ProbKey(a) < ProbKey(b));
    EXPECT_LT(ProbKey(a), 1u << kKeyBits);
  }
  EXPECT_LT(ProbKey(1.999f), 1u << kKeyBits);
  EXPECT_EQ(FixedMass(1.0f), uint64_t{1} << 40);
  EXPECT_EQ(FixedMass(0.0f), 0u);
  EXPECT_EQ(TopPTarget(0.5f, 3), 2u);
  EXPECT_EQ(TopPTarget(1e-9f, 3), 1u);
}

}  // namespace
}  // namespace llm::kernels
