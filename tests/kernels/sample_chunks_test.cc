// The sampler's split argmax, run on the host (no GPU): the vocabulary's chunks
// (SampleChunkRange) cover it once in id order, and each chunk's (maximum, lowest id) combined
// in chunk order under ArgmaxBetter is the CPU sampler's Argmax (ties to the lowest id, NaN
// never chosen, all -inf or NaN giving id 0 as DrawKernel maps it); both start from -inf.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/sampling.h"
#include "worker/sampling/sampler.h"

namespace llm::kernels {
namespace {

// What ResetPenaltiesArgmaxKernel and RowMax compute, in the kernels' order.
int32_t ChunkedArgmax(const std::vector<float>& logits) {
  const auto n = static_cast<int32_t>(logits.size());
  const int32_t chunks = SampleChunks(n);
  float bv = -std::numeric_limits<float>::infinity();
  int32_t bi = std::numeric_limits<int32_t>::max();
  for (int32_t c = 0; c < chunks; ++c) {
    const IdRange r = SampleChunkRange(n, chunks, c);
    float cv = -std::numeric_limits<float>::infinity();
    int32_t ci = std::numeric_limits<int32_t>::max();
    // A block's threads each take a stride, then reduce: any order gives the same result.
    for (int32_t i = r.end - 1; i >= r.begin; --i) {
      if (ArgmaxBetter(logits[i], i, cv, ci)) {
        cv = logits[i];
        ci = i;
      }
    }
    if (ArgmaxBetter(cv, ci, bv, bi)) {
      bv = cv;
      bi = ci;
    }
  }
  return bi >= n ? 0 : bi;
}

TEST(SampleChunksTest, ChunksCoverTheVocabularyOnceInOrder) {
  for (const int32_t n : {1, 64, 4096, 4097, 5003, 32000, 128256, 151936, 1 << 20}) {
    const int32_t chunks = SampleChunks(n);
    ASSERT_GE(chunks, 1);
    ASSERT_LE(chunks, kMaxSampleChunks);
    int32_t next = 0;
    for (int32_t c = 0; c < chunks; ++c) {
      const IdRange r = SampleChunkRange(n, chunks, c);
      EXPECT_EQ(r.begin, next) << n << " chunk " << c;
      EXPECT_GE(r.end, r.begin);
      next = r.end;
    }
    EXPECT_EQ(next, n) << n;
  }
  EXPECT_EQ(SampleChunks(128256), kMaxSampleChunks);  // llama 3: 32 blocks per row
  EXPECT_EQ(SampleChunks(5003), 2);
}

TEST(SampleChunksTest, ChunkedArgmaxIsTheCpuSamplersArgmax) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int32_t n : {1, 7, 4097, 5003, 128256}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& x : logits) x = u(rng);
      if (trial % 4 == 1) {
        // The maximum tied across chunks: the lowest id must win.
        const float top = 9.0f;
        logits[static_cast<size_t>(n - 1)] = top;
        logits[static_cast<size_t>(n / 2)] = top;
        logits[static_cast<size_t>(n / 3)] = top;
      } else if (trial % 4 == 2) {
        for (int32_t i = 0; i < n; i += 3) logits[i] = nan;
        logits[0] = -inf;
      } else if (trial % 4 == 3) {
        for (float& x : logits) x = trial % 8 == 3 ? -inf : nan;
      }
      EXPECT_EQ(ChunkedArgmax(logits), sampling::Argmax(logits)) << "n " << n << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace llm::kernels
