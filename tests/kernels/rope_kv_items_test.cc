// The RoPE/KV kernel's work items, run on the host (no GPU): every item of every row, in any
// order, gives the CPU reference's rotation (runner::ApplyRope) and the paged K/V write; and the
// q/k/v GEMV's RoPE/KV mode maps its warps onto the same pairs.
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "gtest/gtest.h"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/gemm/gemv.h"
#include "worker/runner/cpu_ops.h"

namespace llm::kernels {
namespace {

std::vector<__nv_bfloat16> Bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

// `rows` sequences (row r in slot r at position pos_of(r)) in a paged cache of 16-token blocks
// scattered by `rng`, each up to `max_len` tokens, and the RoPE tables of head size `D`.
struct RopeSetup {
  static constexpr int32_t kBlockTokens = 16;
  int32_t max_blocks, num_blocks;
  std::vector<int32_t> tables, pos, slot;
  std::vector<float> cos_t, sin_t;

  template <typename PosOf>
  RopeSetup(int32_t rows, int32_t D, int32_t max_len, std::mt19937& rng, PosOf pos_of)
      : max_blocks((max_len + kBlockTokens - 1) / kBlockTokens),
        num_blocks(rows * max_blocks),
        tables(static_cast<size_t>(num_blocks)),
        pos(static_cast<size_t>(rows)),
        slot(pos.size()),
        cos_t(static_cast<size_t>(max_len) * D / 2),
        sin_t(cos_t.size()) {
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);  // non-contiguous blocks
    for (int32_t r = 0; r < rows; ++r) {
      pos[r] = pos_of(r);
      slot[r] = r;
    }
    std::vector<double> inv_freq(static_cast<size_t>(D / 2));
    for (int32_t i = 0; i < D / 2; ++i) inv_freq[i] = 1.0 / std::pow(10000.0, 2.0 * i / D);
    for (int32_t p = 0; p < max_len; ++p) {
      runner::RopeCosSin(inv_freq.data(), D / 2, p, &cos_t[size_t(p) * D / 2],
                         &sin_t[size_t(p) * D / 2]);
    }
  }
  // The items' params over these tables, for `rows` rows of `qkv` and caches k and v.
  RopeKvParams Params(__nv_bfloat16* qkv, void* k, void* v, int32_t rows, int32_t H, int32_t KV,
                      int32_t D) const {
    return {qkv,
            pos.data(),
            slot.data(),
            tables.data(),
            max_blocks,
            cos_t.data(),
            sin_t.data(),
            k,
            v,
            rows,
            H,
            KV,
            D,
            kBlockTokens};
  }
  // Where position pos[r]'s vector of kv head `kh` starts in a cache of `KV` heads.
  size_t CacheAt(int32_t r, int32_t KV, int32_t kh, int32_t D) const {
    const int32_t block = tables[size_t(r) * max_blocks + pos[r] / kBlockTokens];
    return ((size_t(block) * KV + kh) * kBlockTokens + pos[r] % kBlockTokens) * D;
  }
  // Row r of `qkv` as the product leaves it (bf16), with RoPE applied to its q and k heads by
  // the CPU reference.
  std::vector<float> ReferenceRow(const std::vector<float>& qkv, int32_t r, int32_t width,
                                  int32_t rot_heads, int32_t D) const {
    std::vector<float> row(width);
    for (int32_t i = 0; i < width; ++i) {
      row[i] = __bfloat162float(__float2bfloat16_rn(qkv[size_t(r) * width + i]));
    }
    for (int32_t h = 0; h < rot_heads; ++h) {
      runner::ApplyRope(&row[size_t(h) * D], &cos_t[size_t(pos[r]) * D / 2],
                        &sin_t[size_t(pos[r]) * D / 2], D);
    }
    return row;
  }
};

TEST(RopeKvItemsTest, EveryItemOnceGivesTheReferenceRotationAndCacheWrite) {
  struct Shape {
    int32_t rows, head_dim, heads, kv_heads;
  };
  for (const Shape c :
       {Shape{1, 64, 8, 8}, Shape{7, 128, 32, 8}, Shape{3, 64, 14, 2}, Shape{33, 16, 8, 1}}) {
    const int32_t D = c.head_dim, H = c.heads, KV = c.kv_heads, width = (H + 2 * KV) * D;
    std::mt19937 rng(static_cast<uint32_t>(D * 31 + c.rows));
    // Positions not block aligned.
    const RopeSetup g(c.rows, D, 300, rng, [](int32_t r) { return (r * 37 + 5) % 290; });
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> qkv(static_cast<size_t>(c.rows) * width);
    for (float& x : qkv) x = normal(rng);
    std::vector<__nv_bfloat16> q_out = Bf16(qkv);
    const size_t cache_elems = size_t(g.num_blocks) * KV * RopeSetup::kBlockTokens * D;
    std::vector<__nv_bfloat16> k_cache(cache_elems, __float2bfloat16_rn(0.0f)), v_cache = k_cache;
    const RopeKvParams p = g.Params(q_out.data(), k_cache.data(), v_cache.data(), c.rows, H, KV, D);
    // The kernel's threads take the items in no particular order: run them backwards.
    for (int32_t r = c.rows - 1; r >= 0; --r) {
      for (int32_t k = RopeKvItems(p) - 1; k >= 0; --k) RopeKvItem(p, r, k);
    }
    for (int32_t r = 0; r < c.rows; ++r) {
      const std::vector<float> row = g.ReferenceRow(qkv, r, width, H + KV, D);
      for (int32_t h = 0; h < H; ++h) {
        for (int32_t d = 0; d < D; ++d) {
          const float want = row[size_t(h) * D + d];
          ASSERT_NEAR(__bfloat162float(q_out[size_t(r) * width + h * D + d]), want,
                      std::fabs(want) / 128 + 1e-3)
              << "row " << r << " q head " << h << " dim " << d;
        }
      }
      for (int32_t kh = 0; kh < KV; ++kh) {
        const size_t at = g.CacheAt(r, KV, kh, D);
        for (int32_t d = 0; d < D; ++d) {
          const float k_want = row[size_t(H + kh) * D + d];
          ASSERT_NEAR(__bfloat162float(k_cache[at + d]), k_want, std::fabs(k_want) / 128 + 1e-3)
              << "row " << r << " k head " << kh << " dim " << d;
          ASSERT_EQ(__bfloat162float(v_cache[at + d]), row[size_t(H + KV + kh) * D + d]);
        }
      }
    }
  }
}

// With an FP8 cache (KvCacheFormat), the items write E4M3 bytes of the rotated k and of v
// divided by the layer's scales: v exactly the CPU reference's rounding of the product's value
// (common/fp8.h), k within E4M3's precision of the reference's rotation; q is unchanged bf16.
TEST(RopeKvItemsTest, AnFp8CacheGetsTheReferencesRounding) {
  const int32_t rows = 5, D = 64, H = 8, KV = 2, width = (H + 2 * KV) * D, max_len = 100;
  std::mt19937 rng(7);
  const RopeSetup g(rows, D, max_len, rng, [](int32_t r) { return (r * 19 + 3) % 100; });
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> qkv(static_cast<size_t>(rows) * width);
  for (float& x : qkv) x = normal(rng);
  std::vector<__nv_bfloat16> q_out = Bf16(qkv);
  const size_t cache_elems = size_t(g.num_blocks) * KV * RopeSetup::kBlockTokens * D;
  std::vector<uint8_t> k_cache(cache_elems, 0), v_cache(cache_elems, 0);
  RopeKvParams p = g.Params(q_out.data(), k_cache.data(), v_cache.data(), rows, H, KV, D);
  p.kv = {true, 0.05f, 0.02f};  // K within range (448 * 0.05); some v saturate (448 * 0.02)
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t k = 0; k < RopeKvItems(p); ++k) RopeKvItem(p, r, k);
  }
  for (int32_t r = 0; r < rows; ++r) {
    const std::vector<float> row = g.ReferenceRow(qkv, r, width, H + KV, D);
    for (int32_t i = 0; i < H * D; ++i) {
      ASSERT_NEAR(__bfloat162float(q_out[size_t(r) * width + i]), row[i],
                  std::fabs(row[i]) / 128 + 1e-3);
    }
    for (int32_t kh = 0; kh < KV; ++kh) {
      const size_t at = g.CacheAt(r, KV, kh, D);
      for (int32_t d = 0; d < D; ++d) {
        const float k_want = row[size_t(H + kh) * D + d];
        const float k_got = Fp8E4M3ToFloat(k_cache[at + d]) * p.kv.k_scale;
        // Half an E4M3 step (1/16 relative, 2^-10 * scale below the normals) and bf16's 1/256.
        ASSERT_NEAR(k_got, k_want, std::fabs(k_want) / 14 + p.kv.k_scale / 1024)
            << "row " << r << " k head " << kh << " dim " << d;
        const float v = row[size_t(H + KV + kh) * D + d];  // v is not rotated
        ASSERT_EQ(v_cache[at + d], Fp8E4M3FromFloat(v / p.kv.v_scale)) << "v dim " << d;
      }
    }
  }
}

// The vector items (eight elements of a row each, RopeKvVectorItem) leave exactly the bytes the
// one-element items leave: q rotated in place, and the K and V caches, bf16 or E4M3; every
// element is covered once (the rest of the cache stays as filled).
TEST(RopeKvItemsTest, VectorItemsLeaveTheBitsOfTheScalarItems) {
  struct Shape {
    int32_t rows, head_dim, heads, kv_heads;
  };
  for (const bool fp8 : {false, true}) {
    for (const Shape c :
         {Shape{1, 8, 2, 1}, Shape{7, 128, 32, 8}, Shape{3, 64, 14, 2}, Shape{5, 16, 8, 8}}) {
      const int32_t D = c.head_dim, H = c.heads, KV = c.kv_heads, width = (H + 2 * KV) * D;
      std::mt19937 rng(static_cast<uint32_t>(D * 17 + c.rows + fp8));
      const RopeSetup g(c.rows, D, 200, rng, [](int32_t r) { return (r * 41 + 9) % 197; });
      std::normal_distribution<float> normal(0.0f, 2.0f);
      std::vector<float> qkv(static_cast<size_t>(c.rows) * width);
      for (float& x : qkv) x = normal(rng);
      const size_t cache_bytes = size_t(g.num_blocks) * KV * RopeSetup::kBlockTokens * D * 2;
      std::vector<__nv_bfloat16> q_scalar = Bf16(qkv), q_vector = q_scalar;
      // Filled with a byte no item writes on its own, so a missed or stray element shows.
      std::vector<uint8_t> k_scalar(cache_bytes, 0x5a), v_scalar = k_scalar, k_vector = k_scalar,
                                                        v_vector = k_scalar;
      RopeKvParams a =
          g.Params(q_scalar.data(), k_scalar.data(), v_scalar.data(), c.rows, H, KV, D);
      RopeKvParams b =
          g.Params(q_vector.data(), k_vector.data(), v_vector.data(), c.rows, H, KV, D);
      a.kv = b.kv = {fp8, 0.03f, 0.02f};
      ASSERT_EQ(RopeKvVectorItems(b) * 8, width);
      for (int32_t r = 0; r < c.rows; ++r) {
        for (int32_t k = 0; k < RopeKvItems(a); ++k) RopeKvItem(a, r, k);
        for (int32_t k = RopeKvVectorItems(b) - 1; k >= 0; --k) RopeKvVectorItem(b, r, k);
      }
      const std::string what = std::to_string(D) + "/" + std::to_string(H) + "/" +
                               std::to_string(KV) + (fp8 ? " fp8" : " bf16");
      EXPECT_EQ(std::memcmp(q_scalar.data(), q_vector.data(), q_scalar.size() * 2), 0) << what;
      EXPECT_EQ(k_scalar, k_vector) << what;
      EXPECT_EQ(v_scalar, v_vector) << what;
    }
  }
}

// The vector kernel runs only where its loads and stores fall on their own sizes.
TEST(RopeKvItemsTest, VectorItemsNeedHeadSizesOfEightsAndAlignedBuffers) {
  alignas(16) static float table[64];
  alignas(16) static __nv_bfloat16 buffer[64];
  RopeKvParams p{};
  p.qkv = buffer;
  p.cos_table = p.sin_table = table;
  p.k_cache = p.v_cache = buffer;
  p.head_dim = 64;
  EXPECT_TRUE(RopeKvVectorsFit(p));
  p.head_dim = 12;
  EXPECT_FALSE(RopeKvVectorsFit(p));
  p.head_dim = 64;
  p.qkv = buffer + 4;  // 8 bytes off
  EXPECT_FALSE(RopeKvVectorsFit(p));
  p.qkv = buffer;
  p.v_cache = buffer + 1;
  EXPECT_FALSE(RopeKvVectorsFit(p));
  p.v_cache = buffer;
  p.sin_table = table + 2;
  EXPECT_FALSE(RopeKvVectorsFit(p));
}

// The q/k/v GEMV's RoPE/KV mode (gemv.h): its out / 2 warps cover every output of the row once,
// each warp's two outputs are the pair (i, i + head_dim / 2) of one head that a RoPE item
// rotates, and a head's pairs are all its warps.
TEST(RopeKvItemsTest, GemvRopeWarpsCoverEveryOutputOnceInRotatedPairs) {
  for (const int32_t head_dim : {16, 64, 128}) {
    for (const int32_t heads : {3, 12, 48}) {  // num_heads + 2 * num_kv_heads
      const int32_t out = heads * head_dim, half = head_dim / 2;
      std::vector<int> seen(static_cast<size_t>(out), 0);
      for (int32_t warp = 0; warp < out / 2; ++warp) {
        const GemvRopePair p = RopePairOfWarp(warp, head_dim);
        ASSERT_GE(p.first, 0);
        ASSERT_LT(p.second, out);
        EXPECT_EQ(p.second, p.first + half);
        EXPECT_EQ(p.first / head_dim, p.head);
        EXPECT_EQ(p.second / head_dim, p.head);
        EXPECT_EQ(p.first % head_dim, p.pair);
        EXPECT_LT(p.pair, half);
        ++seen[p.first];
        ++seen[p.second];
      }
      for (int32_t o = 0; o < out; ++o)
        EXPECT_EQ(seen[o], 1) << head_dim << " " << heads << " " << o;
    }
  }
}

}  // namespace
}  // namespace llm::kernels
