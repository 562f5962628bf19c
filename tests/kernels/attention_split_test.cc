// The decode attention's split of a row's live context into chunks, its cache indexing and its
// combine, checked on the host (no GPU): the functions here are the ones the kernels call
// (kernels/attention/attention.h). The chunks are emulated with the kernel's order of work — tiles
// of kAttentionTile keys with an online softmax, then the combine's arithmetic (its normaliser
// summed in chunk order here; CombineChunks sums it lane-strided, DecodeMmaTest mirrors that
// exactly) — and compared with the plain softmax attention in double.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"

namespace llm::kernels {
namespace {

// The chunks below UsedChunks are the non-empty ones: exactly the blocks that arrive on the
// (row, KV head) counter, whose last arrival combines (AttentionKernel).
TEST(AttentionSplitTest, ChunksCoverTheLiveContextOnceInTiles) {
  for (const int32_t live : {1, 15, 17, 31, 32, 33, 1000, 4095}) {
    for (const int32_t window : {0, 100}) {
      for (const int32_t splits : {1, 2, 7, 8, 64}) {
        const int32_t pos = live - 1 + 37;  // the row's position: context [first, pos]
        const KeyRange all = AttentionKeyRange(pos, window, 1, 0);
        EXPECT_EQ(all.end, pos + 1);
        EXPECT_EQ(all.begin, window > 0 ? std::max(0, pos - window + 1) : 0);
        const int32_t used = UsedChunks(pos, window, splits);
        ASSERT_GE(used, 1);
        ASSERT_LE(used, std::max(1, splits));
        int32_t next = all.begin;
        for (int32_t part = 0; part < std::max(1, splits); ++part) {
          const KeyRange r = AttentionKeyRange(pos, window, splits, part);
          if (part < used) {
            EXPECT_EQ(r.begin, next) << live << " " << window << " " << splits << " " << part;
            EXPECT_GT(r.end, r.begin);
            if (part + 1 < used && splits > 1) {
              EXPECT_EQ((r.end - r.begin) % kAttentionChunkKeys, 0);  // whole units but the last
            }
            next = r.end;
          } else {
            EXPECT_EQ(r.begin, r.end) << "chunk " << part << " past the context";
          }
        }
        EXPECT_EQ(next, all.end) << live << " " << window << " " << splits;
      }
    }
  }
}

TEST(AttentionSplitTest, DecodeSplitsFillTheDeviceAndStayWithinBounds) {
  // H100: 132 SMs, 4 blocks each wanted.
  EXPECT_EQ(DecodeSplits(1, 8, 132, 64), 64);  // 528 / 8 = 66, capped
  EXPECT_EQ(DecodeSplits(1, 2, 132, 64), 64);
  EXPECT_EQ(DecodeSplits(7, 8, 132, 64), 10);  // ceil(528 / 56)
  EXPECT_EQ(DecodeSplits(33, 8, 132, 64), 2);
  EXPECT_EQ(DecodeSplits(256, 8, 132, 64), 1);  // already 2,048 blocks: no combine
  EXPECT_EQ(DecodeSplits(1, 8, 132, 3), 3);     // a short context caps it
  EXPECT_EQ(DecodeSplits(0, 0, 0, 64), 4);      // degenerate inputs stay positive
}

// One decode row of G query heads per kv head against a paged cache whose blocks are shuffled.
struct Row {
  int32_t head_dim, group, kv_heads, pos, window;
};

void CheckSplitAttention(const Row& row, int32_t splits, uint32_t seed) {
  const int32_t D = row.head_dim, KV = row.kv_heads, H = KV * row.group, bt = 16;
  const int32_t len = row.pos + 1, blocks = (len + bt - 1) / bt;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(table.begin(), table.end(), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(blocks) * KV * bt * D), v(k.size());
  std::vector<float> q(static_cast<size_t>(H) * D);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  AttentionParams p{};
  p.block_tables = table.data();
  p.max_blocks_per_seq = blocks;
  p.num_heads = H;
  p.num_kv_heads = KV;
  p.head_dim = D;
  p.block_tokens = bt;
  p.sliding_window = row.window;
  p.splits = splits;
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  const KeyRange all = AttentionKeyRange(row.pos, row.window, 1, 0);
  const int32_t used = UsedChunks(row.pos, row.window, splits);
  for (int32_t h = 0; h < H; ++h) {
    const int32_t kv = h / row.group;
    const float* qh = &q[static_cast<size_t>(h) * D];
    // The reference: softmax over the whole context, in double.
    std::vector<double> want(static_cast<size_t>(D), 0.0), score;
    double mx = -1e300;
    for (int32_t t = all.begin; t < all.end; ++t) {
      const float* kt = &k[static_cast<size_t>(PagedCacheOffset(p, 0, t, kv))];
      double s = 0;
      for (int32_t d = 0; d < D; ++d) s += double(qh[d]) * kt[d];
      score.push_back(s * p.scale);
      mx = std::max(mx, score.back());
    }
    double total = 0;
    for (double& s : score) total += (s = std::exp(s - mx));
    for (int32_t t = all.begin; t < all.end; ++t) {
      const float* vt = &v[static_cast<size_t>(PagedCacheOffset(p, 0, t, kv))];
      for (int32_t d = 0; d < D; ++d) want[d] += score[t - all.begin] / total * vt[d];
    }
    // The kernels' order: per chunk, tiles with an online softmax; then the combine.
    std::vector<float> m_part, l_part, o_part;
    for (int32_t c = 0; c < used; ++c) {
      const KeyRange r = AttentionKeyRange(row.pos, row.window, splits, c);
      float m = -FLT_MAX, l = 0.0f;
      std::vector<float> acc(static_cast<size_t>(D), 0.0f);
      for (int32_t t0 = r.begin; t0 < r.end; t0 += kAttentionTile) {
        const int32_t n = std::min(kAttentionTile, r.end - t0);
        std::vector<float> s(static_cast<size_t>(n));
        float tile_max = -FLT_MAX;
        for (int32_t j = 0; j < n; ++j) {
          const float* kt = &k[static_cast<size_t>(PagedCacheOffset(p, 0, t0 + j, kv))];
          float dot = 0.0f;
          for (int32_t d = 0; d < D; ++d) dot = std::fma(qh[d] * p.scale, kt[d], dot);
          s[j] = dot;
          tile_max = std::max(tile_max, dot);
        }
        const float m_new = std::max(m, tile_max);
        const float alpha = std::exp(m - m_new);
        float tile_sum = 0.0f;
        for (float& x : s) tile_sum += (x = std::exp(x - m_new));
        l = l * alpha + tile_sum;
        m = m_new;
        for (int32_t d = 0; d < D; ++d) {
          acc[d] *= alpha;
          for (int32_t j = 0; j < n; ++j) {
            acc[d] = std::fma(s[j], v[static_cast<size_t>(PagedCacheOffset(p, 0, t0 + j, kv)) + d],
                              acc[d]);
          }
        }
      }
      m_part.push_back(m);
      l_part.push_back(l);
      o_part.insert(o_part.end(), acc.begin(), acc.end());
    }
    float m = -FLT_MAX;
    for (float x : m_part) m = std::max(m, x);
    float sum = 0.0f;
    for (int32_t c = 0; c < used; ++c) sum += std::exp(m_part[c] - m) * l_part[c];
    double err = 0, norm = 0;
    for (int32_t d = 0; d < D; ++d) {
      float o = 0.0f;
      for (int32_t c = 0; c < used; ++c) {
        o = std::fma(std::exp(m_part[c] - m), o_part[static_cast<size_t>(c) * D + d], o);
      }
      err += std::pow(o / sum - want[d], 2);
      norm += want[d] * want[d];
    }
    // float accumulation over up to 4k keys against double: 1e-5 relative.
    EXPECT_LT(std::sqrt(err / std::max(norm, 1e-30)), 1e-5)
        << "D " << D << " G " << row.group << " pos " << row.pos << " window " << row.window
        << " splits " << splits << " head " << h;
  }
}

TEST(AttentionSplitTest, SplitChunksCombineToTheWholeContextsAttention) {
  const Row rows[] = {{64, 1, 2, 0, 0},     {128, 4, 2, 14, 0},  {64, 7, 1, 16, 0},
                      {128, 8, 1, 999, 0},  {64, 7, 2, 4094, 0}, {128, 4, 1, 1000, 100},
                      {64, 1, 1, 4094, 300}};
  uint32_t seed = 1;
  for (const Row& r : rows) {
    for (const int32_t splits : {1, 2, 7, 64}) CheckSplitAttention(r, splits, seed++);
  }
}

}  // namespace
}  // namespace llm::kernels
