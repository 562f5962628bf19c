// The GEMV's split (gemv.h): how a launch's warps map to outputs and parts of a row, checked on
// the host for every split; and which split Gemm picks for the products of the models we serve.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/gemm/gemv.h"

namespace llm::kernels {
namespace {

// Every output (or RoPE pair) of a launch is taken by exactly `splits` warps, parts 0 to
// splits - 1, of one block (the parts add up through that block's shared memory), and the parts'
// lanes read every 16-byte vector of the row once.
TEST(GemvSplitTest, EveryOutputsVectorsAreReadOnceByTheWarpsOfOneBlock) {
  for (const int32_t splits : {1, 2, 4}) {
    for (const int32_t units : {1, 3, 8, 37, 112, 576}) {
      for (const int32_t vecs : {1, 31, 32, 33, 112, 512, 1792}) {
        std::vector<int> parts_seen(static_cast<size_t>(units) * splits, 0);
        std::vector<int32_t> block_of(static_cast<size_t>(units), -1);
        std::vector<int> vec_seen(static_cast<size_t>(units) * vecs, 0);
        const int32_t blocks = GemvBlocks(units, splits);
        for (int32_t block = 0; block < blocks; ++block) {
          for (int32_t w = 0; w < kGemvWarpsPerBlock; ++w) {
            const GemvWarp at = GemvWarpOf(block, w, splits);
            ASSERT_GE(at.part, 0);
            ASSERT_LT(at.part, splits);
            if (at.unit >= units) continue;  // the last block's spare warps
            ++parts_seen[static_cast<size_t>(at.unit) * splits + at.part];
            if (block_of[at.unit] < 0) block_of[at.unit] = block;
            EXPECT_EQ(block_of[at.unit], block) << "unit " << at.unit << " splits " << splits;
            for (int lane = 0; lane < 32; ++lane) {
              const GemvVecs walk = GemvVecsOf(at.part, lane, splits);
              for (int32_t v = walk.first; v < vecs; v += walk.stride) {
                ++vec_seen[static_cast<size_t>(at.unit) * vecs + v];
              }
            }
          }
        }
        for (int32_t u = 0; u < units; ++u) {
          for (int32_t part = 0; part < splits; ++part) {
            EXPECT_EQ(parts_seen[static_cast<size_t>(u) * splits + part], 1)
                << "unit " << u << " part " << part << " splits " << splits;
          }
          for (int32_t v = 0; v < vecs; ++v) {
            ASSERT_EQ(vec_seen[static_cast<size_t>(u) * vecs + v], 1)
                << "unit " << u << " vector " << v << " splits " << splits;
          }
        }
        // No whole block is spare.
        EXPECT_LT(static_cast<int64_t>(blocks - 1) * (kGemvWarpsPerBlock / splits), units);
      }
    }
  }
}

// On an H100 (132 multiprocessors) at the default of 24 weight rows per multiprocessor: the
// products measured faster split (qwen2-0.5b's and llama-3.2-1b's q/k/v, o and down) take 4
// warps an output, those measured slower split (llama-3-8b's) or wide (gate/up, the lm head)
// one; an input too short for half a lane-round per warp takes fewer.
TEST(GemvSplitTest, ProductsOfFewWeightRowsPerMultiprocessorSplit) {
  constexpr int32_t kH100 = 132;
  // llama-3-8b: q/k/v 6,144 rows, o 4,096, gate/up 28,672, down 4,096 of 14,336, head 128,256.
  EXPECT_EQ(GemvSplits(6144, 4096, kH100), 1);
  EXPECT_EQ(GemvSplits(4096, 4096, kH100), 1);
  EXPECT_EQ(GemvSplits(28672, 4096, kH100), 1);
  EXPECT_EQ(GemvSplits(4096, 14336, kH100), 1);
  EXPECT_EQ(GemvSplits(128256, 4096, kH100), 1);
  // llama-3.2-1b: q/k/v 3,072 rows of 2,048, o 2,048, gate/up 16,384, down 2,048 of 8,192.
  EXPECT_EQ(GemvSplits(3072, 2048, kH100), 4);
  EXPECT_EQ(GemvSplits(2048, 2048, kH100), 4);
  EXPECT_EQ(GemvSplits(16384, 2048, kH100), 1);
  EXPECT_EQ(GemvSplits(2048, 8192, kH100), 4);
  // qwen2-0.5b: q/k/v 1,152 rows of 896, o 896, gate/up 9,728, down 896 of 4,864.
  EXPECT_EQ(GemvSplits(1152, 896, kH100), 4);
  EXPECT_EQ(GemvSplits(896, 896, kH100), 4);
  EXPECT_EQ(GemvSplits(9728, 896, kH100), 1);
  EXPECT_EQ(GemvSplits(896, 4864, kH100), 4);
  // Short inputs: 264 inputs are 33 vectors, enough for two warps (16 each) and not four; 8
  // inputs are one vector.
  EXPECT_EQ(GemvSplits(37, 264, kH100), 2);
  EXPECT_EQ(GemvSplits(37, 8, kH100), 1);
  // 0 rows per multiprocessor: never; more of them: larger products split too.
  EXPECT_EQ(GemvSplits(37, 4096, kH100, 0), 1);
  EXPECT_EQ(GemvSplits(4096, 4096, kH100, 32), 4);
  EXPECT_EQ(GemvSplits(4224, 4096, kH100, 32), 1);  // exactly 32 a multiprocessor
  // Fewer multiprocessors (a small part's 16) move the bound with them.
  EXPECT_EQ(GemvSplits(896, 896, 16), 1);
  EXPECT_EQ(GemvSplits(300, 896, 16), 4);
  for (int64_t rows : {1, 100, 5000, 100000}) {
    for (int32_t rows_per_sm : {0, 16, 24, 1024}) {
      const int32_t s = GemvSplits(rows, 4096, kH100, rows_per_sm);
      EXPECT_TRUE(s == 1 || s == 2 || s == 4) << s;
    }
  }
}

}  // namespace
}  // namespace llm::kernels
