// The GEMV's norm prologue claims the norm kernel's bits (gemv.h): its warps sum a row's squares
// in the order of RmsNormVecKernel's block. Both reductions emulated on the host, lane by lane
// and thread by thread, through the index maps the kernels use
// (kernels/elementwise/rmsnorm_order.h), with the shuffles' xor butterfly (GroupSum) and fmaf as
// the device computes them.
#include "kernels/elementwise/rmsnorm_order.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace llm::kernels {
namespace {

using Lanes = std::array<float, 32>;

// GroupSum(v, 32) over a warp: at each offset every lane adds its xor partner's value.
Lanes ButterflySum(Lanes v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    Lanes next;
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
    v = next;
  }
  return v;
}

// AddSquares (rmsnorm.cuh): one fmaf per component.
float AddSquares(const float* v4, float s) {
  for (int c = 0; c < 4; ++c) s = std::fmaf(v4[c], v4[c], s);
  return s;
}

const float kZero4[4] = {0.0f, 0.0f, 0.0f, 0.0f};

const float* Float4(const std::vector<float>& row, int32_t i, int32_t n4) {
  return i < n4 ? &row[size_t(i) * 4] : kZero4;
}

// RmsNormVecKernel<VEC>: thread t adds its VEC float4s; BlockSum: each warp's butterfly, then
// the warps' sums (lane w: warp w's, the rest zero) by one more butterfly. Lane 0's result.
float BlockOrder(const std::vector<float>& row) {
  const int32_t n4 = static_cast<int32_t>(row.size() / 4);
  const int vec = RmsNormVecFloat4s(n4);
  Lanes warp_sums{};
  for (int w = 0; w < kRmsNormWarps; ++w) {
    Lanes part{};
    for (int l = 0; l < 32; ++l) {
      const int32_t t = w * 32 + l;
      float s = 0.0f;
      for (int k = 0; k < vec; ++k) s = AddSquares(Float4(row, RmsNormVector(t, k), n4), s);
      part[l] = s;
    }
    warp_sums[w] = ButterflySum(part)[0];
  }
  return ButterflySum(warp_sums)[0];
}

// RmsSumSquaresInWarp (rmsnorm.cuh): lane l keeps slot w's sum for thread
// RmsNormThreadOfLane(l, w), round after round while the round's first float4 is in the row;
// then every slot's butterfly, lane w keeping slot w's, and one more butterfly. Every lane's
// result, which must agree.
Lanes WarpOrder(const std::vector<float>& row, int32_t (*thread_of)(int32_t, int32_t)) {
  const int32_t n4 = static_cast<int32_t>(row.size() / 4);
  std::array<Lanes, kRmsNormWarps> part{};
  for (int32_t round = 0; RmsNormVector(0, round) < n4; ++round) {
    for (int w = 0; w < kRmsNormWarps; ++w) {
      for (int l = 0; l < 32; ++l) {
        part[w][l] = AddSquares(Float4(row, RmsNormVector(thread_of(l, w), round), n4), part[w][l]);
      }
    }
  }
  Lanes mine{};
  for (int w = 0; w < kRmsNormWarps; ++w) {
    const Lanes sum = ButterflySum(part[w]);
    for (int l = 0; l < 32; ++l) {
      if (l == w) mine[l] = sum[l];
    }
  }
  return ButterflySum(mine);
}

int32_t KernelThreadOfLane(int32_t lane, int32_t slot) { return RmsNormThreadOfLane(lane, slot); }
// A plausible wrong map (lane-major threads): the test must tell it apart.
int32_t LaneMajorThread(int32_t lane, int32_t slot) { return lane * kRmsNormWarps + slot; }

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// A row: magnitudes over six decades (`wide`, the sum led by a few terms) or normally
// distributed (terms alike, where the order shows most in the sum's last bits).
std::vector<float> RandomRow(int32_t dim, uint32_t seed, bool wide) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(dim));
  for (float& v : row) {
    v = wide ? std::pow(10.0f, decade(rng)) * (rng() % 2 == 0 ? 1.0f : -1.0f) : normal(rng);
  }
  return row;
}

// Rows of every register count of the norm kernel (1, 2, 4, 8 float4s per thread), full and
// partly filled, down to one 16-byte vector.

constexpr int32_t kDims[] = {8, 264, 896, 1000, 2048, 3072, 4096, 5120, 8192};

TEST(RmsNormOrderTest, WarpPlaysTheBlockBitForBit) {
  for (const int32_t dim : kDims) {
    for (uint32_t seed = 0; seed < 40; ++seed) {
      const auto row = RandomRow(dim, 1000 * dim + seed, /*wide=*/seed % 2 == 0);
      const float block = BlockOrder(row);
      const Lanes warp = WarpOrder(row, KernelThreadOfLane);
      for (int l = 0; l < 32; ++l) {
        ASSERT_EQ(Bits(warp[l]), Bits(block)) << "dim " << dim << " seed " << seed << " lane " << l;
      }
    }
  }
}

// The emulation is sensitive to the order, so the test above would catch a wrong map: with
// lane-major threads (the same per-thread sums, added in another tree) the bits differ for
// about a quarter of normally distributed rows of 2,048 and more, summed in plain row order
// for nearly all.
TEST(RmsNormOrderTest, AnotherOrderGivesOtherBits) {
  int rows = 0, lane_major_differs = 0, sequential_differs = 0;
  for (const int32_t dim : kDims) {
    if (dim < 1024) continue;  // a few float4s per lane: most orders coincide
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const auto row = RandomRow(dim, 1000 * dim + seed, /*wide=*/false);
      const float block = BlockOrder(row);
      float sequential = 0.0f;
      for (const float v : row) sequential = std::fmaf(v, v, sequential);
      ++rows;
      lane_major_differs += Bits(WarpOrder(row, LaneMajorThread)[0]) != Bits(block) ? 1 : 0;
      sequential_differs += Bits(sequential) != Bits(block) ? 1 : 0;
    }
  }
  EXPECT_GT(lane_major_differs, rows / 10) << "of " << rows;
  EXPECT_GT(sequential_differs, rows / 2) << "of " << rows;
}

TEST(RmsNormOrderTest, RegistersPerThreadFollowTheRowWidth) {
  EXPECT_EQ(RmsNormVecFloat4s(1), 1);
  EXPECT_EQ(RmsNormVecFloat4s(256), 1);
  EXPECT_EQ(RmsNormVecFloat4s(257), 2);
  EXPECT_EQ(RmsNormVecFloat4s(768), 4);  // 3072 wide: 3 of 4 float4s used
  EXPECT_EQ(RmsNormVecFloat4s(2048), 8);
  EXPECT_EQ(RmsNormVecFloat4s(2049), 0);  // wider than 8192: the strided kernel
}

}  // namespace
}  // namespace llm::kernels
