// The tiled prefill attention (kernels/attention/prefill_attention.cu) checked on the host, without
// a GPU: the tile plan, the masking decisions, the tensor-core fragment layouts and the whole
// kernel's order of work, emulated warp by warp and lane by lane with the index functions the
// kernel calls (mma_fragment.h, prefill_attention.h, paged_cache.h). ldmatrix and mma.sync are
// emulated here from the PTX ISA's description, written out independently of mma_fragment.h, so a
// wrong fragment index in the kernel's helpers shows up as a wrong attention output. What this
// cannot check: the device code's own statements (a typo in prefill_attention.cu), cp.async timing
// and shared-memory races; the GPU test (rope_attention_test.cc) and compute-sanitizer do.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/mma_fragment.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/attention/prefill_attention_sm90.h"
#include "tests/kernels/mma_emulator.h"
#include "tests/kernels/prefill_reference.h"
#include "worker/model/dtype.h"

namespace llm::kernels {
namespace {

using mma::Coord;
using testing::ExpectMatchesReference;
using testing::Half;
using testing::Launch;
using testing::MakeLaunch;
using testing::Mma;
using testing::Pack;
using testing::PtxA;
using testing::PtxB;
using testing::PtxC;
using testing::Seq;

TEST(MmaFragmentTest, HelpersMatchThePtxTablesAndCoverEachElementOnce) {
  std::vector<int> a(16 * 16, 0), b(16 * 8, 0), c(16 * 8, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const Coord got = mma::FragA(lane, i / 2, i % 2), want = PtxA(lane, i);
      EXPECT_EQ(got.row, want.row) << lane << " a" << i;
      EXPECT_EQ(got.col, want.col) << lane << " a" << i;
      EXPECT_EQ(got.row, lane / 4 + 8 * mma::RowHalfA(i / 2));
      ++a[got.row * 16 + got.col];
    }
    for (int i = 0; i < 4; ++i) {
      const Coord got = mma::FragB(lane, i / 2, i % 2), want = PtxB(lane, i);
      EXPECT_EQ(got.row, want.row) << lane << " b" << i;
      EXPECT_EQ(got.col, want.col) << lane << " b" << i;
      ++b[got.row * 8 + got.col];
      const Coord gc = mma::FragC(lane, i), wc = PtxC(lane, i);
      EXPECT_EQ(gc.row, wc.row) << lane << " c" << i;
      EXPECT_EQ(gc.col, wc.col) << lane << " c" << i;
      EXPECT_EQ(gc.row, lane / 4 + 8 * mma::RowHalfC(i));
      ++c[gc.row * 8 + gc.col];
    }
  }
  for (int n : a) EXPECT_EQ(n, 1);
  for (int n : b) EXPECT_EQ(n, 1);
  for (int n : c) EXPECT_EQ(n, 1);
}

using Regs4 = std::array<std::array<uint32_t, 4>, 32>;  // per lane

// ldmatrix.x4 (optionally .trans) from a [rows][stride] bf16 array; rows[lane] is the (row,
// column) whose 8 elements lane gives the address of: lanes 8i..8i+7 give the rows of matrix i.
Regs4 Ldmatrix(const std::vector<uint16_t>& smem, int stride, const std::array<Coord, 32>& rows,
               bool trans) {
  Regs4 out{};
  for (int m = 0; m < 4; ++m) {
    uint16_t mat[8][8];
    for (int r = 0; r < 8; ++r) {
      const Coord at = rows[8 * m + r];
      for (int e = 0; e < 8; ++e)
        mat[r][e] = smem[static_cast<size_t>(at.row) * stride + at.col + e];
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int r = lane / 4, e = 2 * (lane % 4);
      out[lane][m] = trans ? Pack(mat[e][r], mat[e + 1][r]) : Pack(mat[r][e], mat[r][e + 1]);
    }
  }
  return out;
}

// The kernel's pattern: one ldmatrix.x4 (rows addressed by `row_of(lane)`) gives the B
// fragments of two mma tiles, d0 (registers 0-1) and d1 (registers 2-3).
template <typename RowOf>
void LoadAndMmaPair(const std::vector<uint16_t>& smem, int stride, bool trans,
                    const std::array<std::array<uint32_t, 4>, 32>& a,
                    std::array<std::array<float, 4>, 32>& d0,
                    std::array<std::array<float, 4>, 32>& d1, const RowOf& row_of) {
  std::array<Coord, 32> rows;
  for (int lane = 0; lane < 32; ++lane) rows[lane] = row_of(lane);
  const Regs4 b = Ldmatrix(smem, stride, rows, trans);
  std::array<std::array<uint32_t, 2>, 32> b01, b23;
  for (int lane = 0; lane < 32; ++lane) {
    b01[lane] = {b[lane][0], b[lane][1]};
    b23[lane] = {b[lane][2], b[lane][3]};
  }
  Mma(d0, a, b01);
  Mma(d1, a, b23);
}

// The kernel, block by block, warp by warp, lane by lane: the same calls, in the same order.
std::vector<float> Emulate(const Launch& l, const std::vector<PrefillTile>& tiles) {
  const PrefillAttentionParams p = l.Params();
  const int32_t D = l.D, G = l.G, H = l.H();
  constexpr int kWarps = kPrefillTileRows / kPrefillWarpRows, kKeys = kPrefillTileKeys;
  constexpr int kKeyTiles = kKeys / 8;
  const int kSteps = D / 16, kDimTiles = D / 8;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  std::vector<float> out(static_cast<size_t>(l.rows) * H * D, NAN);
  std::vector<uint16_t> ks(static_cast<size_t>(kKeys) * D), vs(ks.size());
  using Acc = std::array<std::array<float, 4>, 32>;

  for (const PrefillTile& tile : tiles) {
    for (int32_t kv_head = 0; kv_head < l.KV; ++kv_head) {
      const PrefillChunk chunk = l.chunks[tile.chunk];
      const int32_t rows_total = chunk.tokens * G;
      const int32_t m_end = std::min(tile.row_begin + kPrefillTileRows, rows_total);
      const KeySpan span = PrefillRowsKeys(chunk, G, tile.row_begin, m_end, p.sliding_window);
      struct Warp {
        int32_t w_begin, w_end, w_lo = 0, w_hi = -1;
        bool active;
        std::array<std::array<int32_t, 2>, 32> pos, batch;
        std::array<std::array<int64_t, 2>, 32> q;
        std::vector<std::array<std::array<uint32_t, 4>, 32>> q_frag;
        std::vector<Acc> o;
        std::array<std::array<float, 2>, 32> row_max, row_sum;
      };
      std::vector<Warp> warps(kWarps);
      for (int w = 0; w < kWarps; ++w) {
        Warp& W = warps[w];
        W.w_begin = tile.row_begin + w * kPrefillWarpRows;
        W.w_end = std::min(W.w_begin + kPrefillWarpRows, m_end);
        W.active = W.w_begin < W.w_end;
        if (W.active) {
          W.w_lo = chunk.pos_begin + UnpackRow(W.w_begin, G).token;
          W.w_hi = chunk.pos_begin + UnpackRow(W.w_end - 1, G).token;
        }
        W.q_frag.resize(static_cast<size_t>(kSteps));
        W.o.assign(static_cast<size_t>(kDimTiles), Acc{});
        for (int lane = 0; lane < 32; ++lane) {
          for (int h = 0; h < 2; ++h) {
            const int32_t m = W.w_begin + lane / 4 + 8 * h;
            W.pos[lane][h] = -1;
            W.q[lane][h] = 0;
            W.batch[lane][h] = 0;
            if (m < W.w_end) {
              const PackedRow r = UnpackRow(m, G);
              W.pos[lane][h] = chunk.pos_begin + r.token;
              W.batch[lane][h] = chunk.row_begin + r.token;
              W.q[lane][h] = static_cast<int64_t>(kv_head * G + r.head_in_group) * D;
            }
            W.row_max[lane][h] = -INFINITY;
            W.row_sum[lane][h] = 0.0f;
          }
          for (int kk = 0; kk < kSteps; ++kk) {
            for (int reg = 0; reg < 4; ++reg) {
              const Coord c = mma::FragA(lane, reg, 0);
              const int h = mma::RowHalfA(reg);
              uint32_t value = 0;
              if (W.pos[lane][h] >= 0) {
                const size_t at = static_cast<size_t>(W.batch[lane][h] * l.qkv_stride() +
                                                      W.q[lane][h] + kk * 16 + c.col);
                value = Pack(l.qkv[at], l.qkv[at + 1]);  // the kernel's 32-bit load
              }
              W.q_frag[kk][lane][reg] = value;
            }
          }
        }
      }
      const int32_t num_tiles = (span.end - span.begin + kKeys - 1) / kKeys;
      for (int32_t it = 0; it < num_tiles; ++it) {
        const int32_t key0 = span.begin + it * kKeys;
        for (int key = 0; key < kKeys; ++key) {
          const int32_t t = key0 + key;
          for (int d = 0; d < D; ++d) {
            const bool valid = t < span.end;
            const int64_t at = valid ? PagedCacheOffset(p, chunk.slot, t, kv_head) + d : 0;
            ks[static_cast<size_t>(key) * D + d] = valid ? l.k[static_cast<size_t>(at)] : 0;
            vs[static_cast<size_t>(key) * D + d] = valid ? l.v[static_cast<size_t>(at)] : 0;
          }
        }
        for (Warp& W : warps) {
          const TileCover cover =
              W.active ? CoverOfTile(key0, W.w_lo, W.w_hi, p.sliding_window) : TileCover::kSkip;
          if (cover == TileCover::kSkip) continue;
          std::vector<Acc> s(kKeyTiles, Acc{});
          for (int kk = 0; kk < kSteps; ++kk) {
            for (int n = 0; n < kKeyTiles; n += 2) {
              LoadAndMmaPair(ks, D, false, W.q_frag[kk], s[n], s[n + 1],
                             [&](int lane) { return mma::LdmatrixKeyRow(lane, n * 8, kk * 16); });
            }
          }
          std::array<std::array<float, 2>, 32> tile_max, alpha, base, tile_sum;
          for (int lane = 0; lane < 32; ++lane) {
            tile_max[lane] = {-INFINITY, -INFINITY};
            for (int n = 0; n < kKeyTiles; ++n) {
              for (int i = 0; i < 4; ++i) {
                const int h = mma::RowHalfC(i);
                float v = s[n][lane][i] * scale_log2;
                if (cover == TileCover::kMasked &&
                    !(W.pos[lane][h] >= 0 &&
                      PrefillSees(W.pos[lane][h], key0 + n * 8 + mma::FragC(lane, i).col,
                                  p.sliding_window))) {
                  v = -INFINITY;
                }
                s[n][lane][i] = v;
                tile_max[lane][h] = std::max(tile_max[lane][h], v);
              }
            }
          }
          // QuadMax / QuadSum: the 4 lanes of a quad share their rows.
          auto quad = [](const std::array<std::array<float, 2>, 32>& x, int lane, int h, bool max) {
            const int q0 = lane & ~3;
            float r = x[q0][h];
            for (int j = 1; j < 4; ++j) r = max ? std::max(r, x[q0 + j][h]) : r + x[q0 + j][h];
            return r;
          };
          for (int lane = 0; lane < 32; ++lane) {
            for (int h = 0; h < 2; ++h) {
              const float m_new = std::max(W.row_max[lane][h], quad(tile_max, lane, h, true));
              base[lane][h] = m_new == -INFINITY ? 0.0f : m_new;
              alpha[lane][h] = std::exp2(W.row_max[lane][h] - base[lane][h]);
              W.row_max[lane][h] = m_new;
            }
          }
          for (int lane = 0; lane < 32; ++lane) {
            tile_sum[lane] = {0.0f, 0.0f};
            for (int n = 0; n < kKeyTiles; ++n) {
              for (int i = 0; i < 4; ++i) {
                const int h = mma::RowHalfC(i);
                s[n][lane][i] = std::exp2(s[n][lane][i] - base[lane][h]);
                tile_sum[lane][h] += s[n][lane][i];
              }
            }
          }
          for (int lane = 0; lane < 32; ++lane) {
            for (int h = 0; h < 2; ++h) {
              W.row_sum[lane][h] =
                  W.row_sum[lane][h] * alpha[lane][h] + quad(tile_sum, lane, h, false);
            }
            for (int n = 0; n < kDimTiles; ++n) {
              for (int i = 0; i < 4; ++i) W.o[n][lane][i] *= alpha[lane][mma::RowHalfC(i)];
            }
          }
          for (int kk = 0; kk < kKeys / 16; ++kk) {
            std::array<std::array<uint32_t, 4>, 32> pa;
            for (int lane = 0; lane < 32; ++lane) {
              for (int reg = 0; reg < 4; ++reg) {
                const ScoreSource src = PFragmentSource(kk, reg);
                pa[lane][reg] = Pack(model::F32ToBf16(s[src.ntile][lane][src.elem]),
                                     model::F32ToBf16(s[src.ntile][lane][src.elem + 1]));
              }
            }
            for (int n = 0; n < kDimTiles; n += 2) {
              LoadAndMmaPair(vs, D, true, pa, W.o[n], W.o[n + 1],
                             [&](int lane) { return mma::LdmatrixValueRow(lane, kk * 16, n * 8); });
            }
          }
        }
      }
      for (const Warp& W : warps) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int n = 0; n < kDimTiles; ++n) {
            for (int i = 0; i < 4; i += 2) {
              const Coord c = mma::FragC(lane, i);
              const int h = mma::RowHalfC(i);
              if (W.pos[lane][h] < 0) continue;
              const float inv = W.row_sum[lane][h] > 0.0f ? 1.0f / W.row_sum[lane][h] : 0.0f;
              const size_t at = static_cast<size_t>(int64_t{W.batch[lane][h]} * H * D +
                                                    W.q[lane][h] + n * 8 + c.col);
              out[at] = model::Bf16ToF32(model::F32ToBf16(W.o[n][lane][i] * inv));
              out[at + 1] = model::Bf16ToF32(model::F32ToBf16(W.o[n][lane][i + 1] * inv));
            }
          }
        }
      }
    }
  }
  return out;
}

// The emulated kernel against the reference.
void CheckLaunch(const Launch& l, const char* what) {
  std::vector<PrefillTile> tiles;
  PlanPrefillTiles(l.chunks, l.G, tiles);
  ExpectMatchesReference(l, Emulate(l, tiles), what);
}

TEST(PrefillTilesTest, TilesCoverEveryChunkRowOnceLongestFirst) {
  const std::vector<PrefillChunk> chunks = {
      {0, 1, 0, 0}, {1, 15, 1, 0}, {16, 17, 2, 40}, {33, 1000, 3, 3000}, {1033, 64, 4, 7}};
  for (const int32_t group : {1, 4, 7, 8}) {
    int32_t tokens = 0;
    for (const auto& c : chunks) tokens += c.tokens;
    // Reserved to the bound, as the runner does: planning replaces the contents and allocates
    // nothing.
    std::vector<PrefillTile> tiles = {{9, 9}};
    tiles.reserve(
        static_cast<size_t>(MaxPrefillTiles(tokens, static_cast<int32_t>(chunks.size()), group)));
    const PrefillTile* storage = tiles.data();
    const size_t capacity = tiles.capacity();
    PlanPrefillTiles(chunks, group, tiles);
    EXPECT_EQ(tiles.data(), storage);
    EXPECT_EQ(tiles.capacity(), capacity);
    EXPECT_LE(static_cast<int32_t>(tiles.size()),
              MaxPrefillTiles(tokens, static_cast<int32_t>(chunks.size()), group));
    std::vector<std::vector<int>> seen(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) seen[c].assign(chunks[c].tokens * group, 0);
    int32_t last = INT32_MAX;
    for (const PrefillTile& t : tiles) {
      const PrefillChunk& c = chunks[t.chunk];
      const int32_t m_end = std::min(t.row_begin + kPrefillTileRows, c.tokens * group);
      ASSERT_LT(t.row_begin, m_end);
      for (int32_t m = t.row_begin; m < m_end; ++m) ++seen[t.chunk][m];
      const int32_t pos = c.pos_begin + UnpackRow(m_end - 1, group).token;
      EXPECT_LE(pos, last) << "tiles with more keys come first";
      last = pos;
    }
    for (const auto& rows : seen) {
      for (int n : rows) EXPECT_EQ(n, 1) << "group " << group;
    }
  }
}

// The last layer's tiles: every row of a sampling chunk's last token is in exactly one of them,
// each of them holds such a row, and chunks that do not sample have none.
TEST(PrefillTilesTest, LastTokenTilesHoldTheSampledRowsAlone) {
  const std::vector<PrefillChunk> chunks = {
      {0, 1, 0, 0},     {1, 15, 1, 0},     {16, 17, 2, 40}, {33, 1000, 3, 3000},
      {1033, 64, 4, 7}, {1097, 10, 5, 100}};  // the last: at group 7, rows 63-69 (two tiles)
  const std::vector<uint8_t> samples = {1, 0, 1, 1, 0, 1};
  for (const int32_t group : {1, 4, 7, 8}) {
    std::vector<PrefillTile> tiles, last;
    PlanPrefillTiles(chunks, group, tiles);
    SelectLastTokenTiles(chunks, samples, group, tiles, last);
    EXPECT_LE(last.size(), 2u * 4u);
    if (group == 7) {
      EXPECT_EQ(last.size(), 5u);  // chunk 5's token straddles two tiles
    }
    std::vector<int> seen(chunks.size() * 8, 0);  // [chunk][row of the last token]
    size_t at = 0;
    for (const PrefillTile& t : last) {
      // In the order of `tiles`.
      while (at < tiles.size() &&
             (tiles[at].chunk != t.chunk || tiles[at].row_begin != t.row_begin)) {
        ++at;
      }
      ASSERT_LT(at, tiles.size()) << "group " << group;
      ASSERT_TRUE(samples[t.chunk]) << "group " << group << " chunk " << t.chunk;
      const int32_t first_row = (chunks[t.chunk].tokens - 1) * group;
      const int32_t m_end =
          std::min(t.row_begin + kPrefillTileRows, chunks[t.chunk].tokens * group);
      int held = 0;
      for (int32_t m = std::max(t.row_begin, first_row); m < m_end; ++m, ++held) {
        ++seen[t.chunk * 8 + (m - first_row)];
      }
      EXPECT_GT(held, 0) << "group " << group << " tile " << t.chunk << "/" << t.row_begin;
    }
    for (size_t c = 0; c < chunks.size(); ++c) {
      for (int32_t g = 0; g < group; ++g) {
        EXPECT_EQ(seen[c * 8 + g], samples[c] ? 1 : 0) << "group " << group << " chunk " << c;
      }
    }
  }
}

TEST(PrefillTilesTest, TileCoverIsExact) {
  // kSkip: no row of [lo, hi] sees a key of the tile; kFull: every row sees every key.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20000; ++trial) {
    const int32_t window = trial % 3 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 200);
    const int32_t lo = static_cast<int32_t>(rng() % 300);
    const int32_t hi = lo + static_cast<int32_t>(rng() % 20);
    const int32_t key0 = static_cast<int32_t>(rng() % 400) - 80;
    int32_t seen = 0, pairs = 0;
    for (int32_t q = lo; q <= hi; ++q) {
      for (int32_t k = key0; k < key0 + kPrefillTileKeys; ++k) {
        seen += PrefillSees(q, k, window) ? 1 : 0;
        ++pairs;
      }
    }
    const TileCover cover = CoverOfTile(key0, lo, hi, window);
    EXPECT_EQ(cover == TileCover::kSkip, seen == 0)
        << lo << " " << hi << " " << key0 << " " << window;
    EXPECT_EQ(cover == TileCover::kFull, seen == pairs)
        << lo << " " << hi << " " << key0 << " " << window;
  }
}

TEST(PrefillTilesTest, SeveralSequencesInOneLaunchMatchTheReference) {
  // Prompts of 1, 15 and 17 tokens, chunks that continue earlier ones mid-block, scattered
  // blocks; every head size and the group sizes.
  const std::vector<Seq> seqs = {{0, 1}, {0, 15}, {0, 17}, {40, 17}, {203, 70}, {5, 1}};
  uint32_t seed = 1;
  for (const int32_t D : {16, 64, 128}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      const int32_t KV = G == 8 ? 1 : 2;
      CheckLaunch(MakeLaunch(D, G, KV, 0, seqs, seed++), "several sequences");
    }
  }
  CheckLaunch(MakeLaunch(32, 2, 4, 0, seqs, seed++), "head dim 32");
}

TEST(PrefillTilesTest, KeySpansStartOnWholeTiles) {
  for (const int32_t window : {0, 1, 37, 100}) {
    for (const int32_t pos_begin : {0, 5, 63, 64, 300}) {
      const PrefillChunk chunk{0, 200, 0, pos_begin};
      for (const int32_t group : {1, 4, 7}) {
        for (int32_t m = 0; m < 200 * group; m += kPrefillTileRows) {
          const int32_t m_end = std::min(m + kPrefillTileRows, 200 * group);
          const KeySpan span = PrefillRowsKeys(chunk, group, m, m_end, window);
          const int32_t first = PrefillFirstKey(pos_begin + m / group, window);
          EXPECT_EQ(span.begin % kPrefillTileKeys, 0);
          EXPECT_LE(span.begin, first);
          EXPECT_GT(span.begin + kPrefillTileKeys, first);
          EXPECT_EQ(span.end, pos_begin + (m_end - 1) / group + 1);
        }
      }
    }
  }
}

// engine.batch_invariant: a row's output must not depend on how its prompt was cut into chunks
// (which depends on the rest of the batch), even with a sliding window. The same 150 tokens as
// one chunk and as chunks of 37 and 113 give bit-identical outputs.
TEST(PrefillTilesTest, ChunkingDoesNotChangeARowsResult) {
  for (const int32_t window : {0, 37, 100}) {
    Launch whole = MakeLaunch(64, 4, 2, window, {{0, 150}}, 90 + window);
    Launch cut = whole;
    cut.chunks = {{0, 37, 0, 0}, {37, 113, 0, 37}};
    std::vector<PrefillTile> tiles_whole, tiles_cut;
    PlanPrefillTiles(whole.chunks, whole.G, tiles_whole);
    PlanPrefillTiles(cut.chunks, cut.G, tiles_cut);
    const std::vector<float> a = Emulate(whole, tiles_whole), b = Emulate(cut, tiles_cut);
    const size_t used = static_cast<size_t>(150) * whole.H() * whole.D;
    for (size_t i = 0; i < used; ++i) {
      ASSERT_EQ(a[i], b[i]) << "window " << window << ", element " << i;
    }
  }
}

TEST(PrefillTilesTest, SlidingWindowMatchesTheReference) {
  const std::vector<Seq> seqs = {{0, 150}, {90, 60}, {300, 33}};
  uint32_t seed = 50;
  for (const int32_t window : {1, 37, 64, 100}) {
    CheckLaunch(MakeLaunch(64, 4, 2, window, seqs, seed++), "sliding window");
  }
  CheckLaunch(MakeLaunch(128, 7, 1, 100, seqs, seed++), "sliding window, group 7");
}

TEST(PrefillTilesTest, LongPromptsMatchTheReference) {
  CheckLaunch(MakeLaunch(128, 4, 1, 0, {{0, 1000}}, 70), "1,000 tokens");
  CheckLaunch(MakeLaunch(64, 1, 1, 0, {{0, 4095}}, 71), "4,095 tokens");
  // The last chunk of a 4,095-token prompt, continuing at 3,583.
  CheckLaunch(MakeLaunch(128, 8, 1, 0, {{3583, 512}, {0, 3}}, 72), "a late chunk");
}

// Which shapes and devices take the Hopper kernel (prefill_attention_sm90.h); no device needed.
TEST(PrefillTilesTest, HopperKernelsChoice) {
  EXPECT_TRUE(HopperPrefillSupported(9, 0, 128, 16, false));
  EXPECT_TRUE(HopperPrefillSupported(9, 0, 64, 256, false));
  EXPECT_FALSE(HopperPrefillSupported(8, 0, 128, 16, false));
  EXPECT_FALSE(HopperPrefillSupported(10, 0, 128, 16, false));
  EXPECT_FALSE(HopperPrefillSupported(9, 0, 32, 16, false));
  EXPECT_FALSE(HopperPrefillSupported(9, 0, 128, 16, true));  // FP8 cache: the tiled kernel
  EXPECT_FALSE(HopperPrefillSupported(9, 0, 128, 4, false));
  EXPECT_FALSE(HopperPrefillSupported(9, 0, 128, 24, false));
  PrefillTensorMaps maps;
  EXPECT_EQ(MakePrefillTensorMaps(nullptr, nullptr, int64_t{1} << 40, 8, 16, 128, &maps),
            cudaErrorInvalidValue);  // rows past the copy engine's 32-bit coordinates
}

}  // namespace
}  // namespace llm::kernels
