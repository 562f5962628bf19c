#include "worker/runner/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/cpu_features.h"
#include "common/fast_exp.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"

namespace llm::runner {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Tolerance: fp32 accumulation over `in` terms of magnitude <= 1 against a double reference.
TEST(CpuOpsTest, MatMulMatchesDoubleReferenceOnOddShapes) {
  ThreadPool pool(3);
  for (size_t rows : {1u, 5u, 7u, 33u}) {
    for (size_t in : {1u, 3u, 13u, 64u, 129u}) {
      for (size_t out : {1u, 5u, 33u, 256u}) {
        const auto x = Random(rows * in, 1), w = Random(out * in, 2), b = Random(out, 3);
        std::vector<float> y(rows * out);
        MatMulTransposed(x.data(), w.data(), b.data(), y.data(), rows, in, out, &pool);
        for (size_t t = 0; t < rows; ++t) {
          for (size_t o = 0; o < out; ++o) {
            double ref = b[o];
            for (size_t i = 0; i < in; ++i)
              ref += static_cast<double>(x[t * in + i]) * w[o * in + i];
            ASSERT_NEAR(y[t * out + o], ref, 1e-5 * (1 + std::sqrt(in)))
                << rows << "x" << in << "x" << out << " at " << t << "," << o;
          }
        }
      }
    }
  }
}

// A row's result is bit-identical whatever else is in the batch and however threads split it.
TEST(CpuOpsTest, MatMulIsBatchAndThreadInvariant) {
  const size_t in = 200, out = 77, rows = 9;
  const auto x = Random(rows * in, 4), w = Random(out * in, 5);
  ThreadPool one(1), four(4);
  std::vector<float> batched(rows * out), threaded(rows * out);
  MatMulTransposed(x.data(), w.data(), nullptr, batched.data(), rows, in, out, &one);
  MatMulTransposed(x.data(), w.data(), nullptr, threaded.data(), rows, in, out, &four);
  EXPECT_EQ(0, std::memcmp(batched.data(), threaded.data(), batched.size() * sizeof(float)));
  for (size_t t = 0; t < rows; ++t) {
    std::vector<float> alone(out);
    MatMulTransposed(x.data() + t * in, w.data(), nullptr, alone.data(), 1, in, out, nullptr);
    ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + t * out, out * sizeof(float)))
        << "row " << t;
  }
}

TEST(CpuOpsTest, RmsNorm) {
  const auto x = Random(3 * 10, 6), w = Random(10, 7);
  std::vector<float> y(30);
  RmsNorm(x.data(), w.data(), y.data(), 3, 10, 1e-6f);
  for (size_t t = 0; t < 3; ++t) {
    double ss = 0;
    for (size_t i = 0; i < 10; ++i) ss += x[t * 10 + i] * x[t * 10 + i];
    const double inv = 1.0 / std::sqrt(ss / 10 + 1e-6);
    for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(y[t * 10 + i], w[i] * x[t * 10 + i] * inv, 1e-6);
  }
}

TEST(CpuOpsTest, RopeRotatesHalves) {
  // head_dim 4: pairs (0, 2) and (1, 3).
  std::vector<double> inv_freq{1.0, 0.01};
  float cos[2], sin[2];
  RopeCosSin(inv_freq.data(), 2, 3, cos, sin);
  EXPECT_NEAR(cos[0], std::cos(3.0), 1e-7);
  EXPECT_NEAR(sin[1], std::sin(0.03), 1e-7);
  float h[4] = {1, 2, 3, 4};
  ApplyRope(h, cos, sin, 4);
  EXPECT_NEAR(h[0], 1 * std::cos(3.0) - 3 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(h[2], 3 * std::cos(3.0) + 1 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(h[1], 2 * std::cos(0.03) - 4 * std::sin(0.03), 1e-6);
  EXPECT_NEAR(h[3], 4 * std::cos(0.03) + 2 * std::sin(0.03), 1e-6);
}

TEST(CpuOpsTest, ExpIsAccurate) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0173f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(Exp(x) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);  // a few ulp
  EXPECT_EQ(Exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(Exp(100.0f)));
  EXPECT_EQ(Exp(0.0f), 1.0f);
}

TEST(CpuOpsTest, BlockScoresAndValues) {
  // head_dim 5, block of 16 tokens of which 7 are valid.
  const size_t hd = 5, bt = 16, n = 7;
  const auto q = Random(hd, 9), keys = Random(n * hd, 10), vals = Random(bt * hd, 11);
  std::vector<float> keys_t(hd * bt, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    for (size_t d = 0; d < hd; ++d) keys_t[d * bt + j] = keys[j * hd + d];
  }
  float scores[16];
  BlockScores(q.data(), keys_t.data(), hd, bt, n, 0.5f, scores);
  for (size_t j = 0; j < n; ++j) {
    double want = 0;
    for (size_t d = 0; d < hd; ++d) want += static_cast<double>(q[d]) * keys[j * hd + d];
    EXPECT_NEAR(scores[j], 0.5 * want, 1e-6);
  }
  std::vector<float> out(hd, 1.0f);
  AccumulateValues(scores, vals.data(), n, hd, out.data());
  for (size_t d = 0; d < hd; ++d) {
    double want = 1.0;
    for (size_t j = 0; j < n; ++j) want += static_cast<double>(scores[j]) * vals[j * hd + d];
    EXPECT_NEAR(out[d], want, 1e-5);
  }
}

TEST(CpuOpsTest, SiluMulAndSoftmax) {
  const std::vector<float> gu{1.0f, -2.0f, 3.0f, 0.5f};  // one row, inter = 2
  std::vector<float> out(2);
  SiluMul(gu.data(), out.data(), 1, 2);
  EXPECT_NEAR(out[0], 1.0 / (1 + std::exp(-1.0)) * 3.0, 1e-6);
  EXPECT_NEAR(out[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-6);
  std::vector<float> s{1000.0f, 1000.0f, -1000.0f};
  SoftmaxInPlace(s.data(), s.size());
  EXPECT_FLOAT_EQ(s[0], 0.5f);
  EXPECT_FLOAT_EQ(s[2], 0.0f);
}

// The vector paths (AVX2 + FMA) promise the same bits as their portable twins: run each op both
// ways in one process over odd shapes and compare bit for bit.
template <typename Fn>
std::vector<float> BothWays(Fn fn, std::vector<float>* portable) {
  ForcePortableCpuPathsForTesting(true);
  *portable = fn();
  ForcePortableCpuPathsForTesting(false);
  return fn();
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(CpuOpsTest, VectorPathsGiveThePortableBits) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU has no AVX2+FMA: only the portable paths run";
  for (size_t n : {1u, 7u, 16u, 33u, 130u}) {
    const auto scores = Random(n, 20 + n);
    std::vector<float> portable;
    const auto vec = BothWays(
        [&] {
          std::vector<float> s = scores;
          for (float& x : s) x *= 30.0f;
          SoftmaxInPlace(s.data(), s.size());
          return s;
        },
        &portable);
    ExpectSameBits(vec, portable, "softmax");
  }
  for (size_t inter : {1u, 8u, 13u, 384u}) {
    const auto gu = Random(3 * 2 * inter, 30 + inter);
    std::vector<float> portable;
    const auto vec = BothWays(
        [&] {
          std::vector<float> out(3 * inter);
          SiluMul(gu.data(), out.data(), 3, inter);
          return out;
        },
        &portable);
    ExpectSameBits(vec, portable, "silu_mul");
  }
  for (size_t hd : {5u, 16u, 24u, 64u, 128u, 200u}) {
    for (size_t n : {1u, 9u, 16u}) {
      const size_t bt = 16;
      const auto q = Random(hd, 40), keys_t = Random(hd * bt, 41), vals = Random(bt * hd, 42);
      std::vector<float> portable;
      const auto vec = BothWays(
          [&] {
            std::vector<float> out(n + hd, 0.5f);
            BlockScores(q.data(), keys_t.data(), hd, bt, n, 0.25f, out.data());
            AccumulateValues(out.data(), vals.data(), n, hd, out.data() + n);
            return out;
          },
          &portable);
      ExpectSameBits(vec, portable, "attention");
    }
  }
}

TEST(CpuOpsTest, FastExp8GivesFastExpBits) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1e-30f,
                           -1e-30f,
                           -87.0f,
                           -87.5f,
                           88.0f,
                           88.5f,
                           -100.0f,
                           100.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (float x = -90.0f; x <= 90.0f; x += 0.0371f) xs.push_back(x);
  while (xs.size() % 8 != 0) xs.push_back(0.25f);
  std::vector<float> vec(xs.size());
  auto run = [&]() __attribute__((target("avx2,fma"))) {
    for (size_t i = 0; i < xs.size(); i += 8) {
      _mm256_storeu_ps(&vec[i], FastExp8(_mm256_loadu_ps(&xs[i])));
    }
  };
  run();
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = FastExp(xs[i]);
    ASSERT_EQ(std::memcmp(&vec[i], &want, sizeof(float)), 0)
        << "x=" << xs[i] << ": " << vec[i] << " vs " << want;
  }
}

}  // namespace
}  // namespace llm::runner
