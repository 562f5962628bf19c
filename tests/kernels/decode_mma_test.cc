// The tensor-core decode attention (kernels/attention/attention_mma.cu) checked on the host,
// without a GPU: the kernel's order of work emulated block by block, warp by warp and lane by lane
// with the index functions it calls (decode_mma_layout.h, attention.h, paged_cache.h,
// mma_fragment.h), mma.sync from the PTX ISA's tables (mma_emulator.h, written independently of the
// kernel's helpers), so a wrong register in the loads, the P fragments or the output's dim
// permutation shows up as a wrong attention output. Decode rows are one-token chunks of the prefill
// tests' launches (prefill_reference.h), compared with the same double reference. What this cannot
// check: the device code's own statements (a typo in attention_mma.cu) and races; the GPU test
// (rope_attention_test.cc) and compute-sanitizer do.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/decode_mma_layout.h"
#include "kernels/attention/mma_fragment.h"
#include "tests/kernels/mma_emulator.h"
#include "tests/kernels/prefill_reference.h"
#include "worker/model/dtype.h"

namespace llm::kernels {
namespace {

using decode_mma::kDecodeTileKeys;
using decode_mma::kMaxGroup;
using testing::ExpectMatchesReference;
using testing::Launch;
using testing::MakeLaunch;
using testing::Pack;
using testing::Seq;

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using Acc = std::array<std::array<float, 4>, 32>;       // a C fragment, per lane
using RegsA = std::array<std::array<uint32_t, 4>, 32>;  // an A fragment, per lane
using RegsB = std::array<std::array<uint32_t, 2>, 32>;  // a B fragment, per lane
using Words = std::array<uint32_t, 4>;                  // one 16-byte load

// The kernel's LoadWords: 8 bf16 from `bits` at `at`.
Words LoadWords(const std::vector<uint16_t>& bits, int64_t at) {
  Words w;
  for (int i = 0; i < 4; ++i) {
    w[i] = Pack(bits[static_cast<size_t>(at + 2 * i)], bits[static_cast<size_t>(at + 2 * i + 1)]);
  }
  return w;
}

// The max (or sum) of a value over the 4 lanes of each quad, given to every lane of it.
template <typename Op>
std::array<float, 32> OverQuads(const std::array<float, 32>& v, Op op) {
  std::array<float, 32> out;
  for (int lane = 0; lane < 32; ++lane) {
    const int q0 = lane / 4 * 4;
    // The kernel's xor-1 then xor-2 butterfly: (a op b) op (c op d).
    out[lane] = op(op(v[q0], v[q0 + 1]), op(v[q0 + 2], v[q0 + 3]));
  }
  return out;
}

// One decode launch: batch rows are the launch's one-token chunks (their slot and position),
// then its padding rows (slot -1).
struct Decode {
  AttentionParams p{};
  std::vector<int32_t> pos, slot;
};

Decode MakeDecode(const Launch& l, int32_t splits) {
  Decode d;
  d.pos.assign(static_cast<size_t>(l.rows), 0);
  d.slot.assign(static_cast<size_t>(l.rows), -1);
  for (const PrefillChunk& c : l.chunks) {
    d.pos[c.row_begin] = c.pos_begin;
    d.slot[c.row_begin] = c.slot;
  }
  const PrefillAttentionParams pp = l.Params();
  d.p.row_pos = d.pos.data();
  d.p.row_slot = d.slot.data();
  d.p.block_tables = pp.block_tables;
  d.p.max_blocks_per_seq = pp.max_blocks_per_seq;
  d.p.rows = l.rows;
  d.p.num_heads = pp.num_heads;
  d.p.num_kv_heads = pp.num_kv_heads;
  d.p.head_dim = pp.head_dim;
  d.p.block_tokens = pp.block_tokens;
  d.p.sliding_window = pp.sliding_window;
  d.p.splits = splits;
  d.p.scale = pp.scale;
  return d;
}

// The kernel, block by block (row, KV head, chunk), warp by warp, lane by lane: the same calls
// in the same order, the split partials and the combine included. Returns [rows][H][D] with NaN
// where the kernel writes nothing (padding rows).
std::vector<float> Emulate(const Launch& l, const AttentionParams& p) {
  const int32_t D = p.head_dim, G = p.num_heads / p.num_kv_heads, H = p.num_heads;
  const int kSteps = D / 16, kKeyLoads = D / 32, kDimTiles = D / 8, kValueWords = D / 16;
  const int64_t row_stride = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * D;
  const float scale_log2 = p.scale * kLog2e;
  std::vector<float> out(static_cast<size_t>(l.rows) * H * D, NAN);
  const size_t parts = static_cast<size_t>(l.rows) * H * p.splits;
  std::vector<float> part_out(parts * D, NAN), part_max(parts, NAN), part_sum(parts, NAN);
  auto part_index = [&](int32_t row, int32_t kv_head, int32_t g, int32_t chunk) {
    return (static_cast<size_t>(row) * H + kv_head * G + g) * p.splits + chunk;
  };
  auto value_words = [&](int32_t slot, int32_t t, int32_t kv_head, int lane, int32_t end) {
    std::vector<uint32_t> w(static_cast<size_t>(kValueWords), 0u);
    if (t < end) {
      const int64_t at = PagedCacheOffset(p, slot, t, kv_head) + decode_mma::ValueDim(lane, D);
      for (int i = 0; i < kValueWords / 4; ++i) {
        const Words got = LoadWords(l.v, at + 8 * i);
        std::copy(got.begin(), got.end(), w.begin() + 4 * i);
      }
    }
    return w;
  };

  for (int32_t row = 0; row < p.rows; ++row) {
    const int32_t slot = p.row_slot[row];
    if (slot < 0) continue;
    const int32_t pos = p.row_pos[row];
    for (int32_t kv_head = 0; kv_head < p.num_kv_heads; ++kv_head) {
      for (int32_t chunk = 0; chunk < p.splits; ++chunk) {
        const KeyRange range = AttentionKeyRange(pos, p.sliding_window, p.splits, chunk);
        if (range.begin >= range.end) continue;
        float warp_m[kWarps][kMaxGroup], warp_l[kWarps][kMaxGroup];
        std::vector<float> warp_o(
            static_cast<size_t>(decode_mma::WarpOutputIndex(kWarps * kMaxGroup, 0, D)), NAN);
        for (int warp = 0; warp < kWarps; ++warp) {
          // Q's registers 0 and 2 per k-step.
          std::vector<std::array<std::array<uint32_t, 2>, 32>> q(static_cast<size_t>(kSteps));
          for (int lane = 0; lane < 32; ++lane) {
            const int group = lane / 4;
            for (int b = 0; b < kKeyLoads; ++b) {
              Words w{};
              if (group < G) {
                w = LoadWords(l.qkv, row * row_stride +
                                         static_cast<int64_t>(kv_head * G + group) * D +
                                         decode_mma::KeyLoad(lane, 0, b).dim);
              }
              for (int kk = 2 * b; kk < 2 * b + 2; ++kk) {
                for (int khalf = 0; khalf < 2; ++khalf)
                  q[kk][lane][khalf] = w[decode_mma::DimWord(kk, khalf)];
              }
            }
          }
          std::vector<Acc> o(static_cast<size_t>(kDimTiles), Acc{});
          std::array<float, 32> row_max, row_sum;
          row_max.fill(-INFINITY);
          row_sum.fill(0.0f);
          for (int32_t t0 = range.begin + warp * kDecodeTileKeys; t0 < range.end;
               t0 += kWarps * kDecodeTileKeys) {
            // Loads: K of keys t0 + KeyLoad(lane, nt, b).key, V of keys t0 + ValueKey(lane, i).
            std::vector<std::array<std::array<Words, 4>, 2>> kw(32);
            std::vector<std::array<std::vector<uint32_t>, 4>> vw(32);
            for (int lane = 0; lane < 32; ++lane) {
              for (int nt = 0; nt < 2; ++nt) {
                const int32_t t = t0 + decode_mma::KeyLoad(lane, nt, 0).key;
                for (int b = 0; b < kKeyLoads; ++b) {
                  kw[lane][nt][b] = Words{};
                  if (t < range.end) {
                    kw[lane][nt][b] = LoadWords(l.k, PagedCacheOffset(p, slot, t, kv_head) +
                                                         decode_mma::KeyLoad(lane, nt, b).dim);
                  }
                }
              }
              for (int i = 0; i < 4; ++i) {
                vw[lane][i] =
                    value_words(slot, t0 + decode_mma::ValueKey(lane, i), kv_head, lane, range.end);
              }
            }
            // S = Q K^T.
            Acc s[2] = {Acc{}, Acc{}};
            for (int kk = 0; kk < kSteps; ++kk) {
              RegsA a;
              for (int lane = 0; lane < 32; ++lane)
                a[lane] = {q[kk][lane][0], 0u, q[kk][lane][1], 0u};
              for (int nt = 0; nt < 2; ++nt) {
                RegsB b;
                for (int lane = 0; lane < 32; ++lane) {
                  b[lane] = {kw[lane][nt][kk / 2][decode_mma::DimWord(kk, 0)],
                             kw[lane][nt][kk / 2][decode_mma::DimWord(kk, 1)]};
                }
                testing::Mma(s[nt], a, b);
              }
            }
            // Mask and the online softmax of row `group` (elements 0 and 1).
            std::array<float, 32> tile_max;
            for (int lane = 0; lane < 32; ++lane) {
              tile_max[lane] = -INFINITY;
              for (int nt = 0; nt < 2; ++nt) {
                for (int i = 0; i < 2; ++i) {
                  const int32_t t = t0 + 8 * nt + mma::FragC(lane, i).col;
                  s[nt][lane][i] = t < range.end ? s[nt][lane][i] * scale_log2 : -INFINITY;
                  tile_max[lane] = std::max(tile_max[lane], s[nt][lane][i]);
                }
              }
            }
            const auto quad_max =
                OverQuads(tile_max, [](float a, float b) { return std::max(a, b); });
            std::array<float, 32> alpha, tile_sum;
            for (int lane = 0; lane < 32; ++lane) {
              const float m_new = std::max(row_max[lane], quad_max[lane]);
              EXPECT_TRUE(std::isfinite(m_new)) << "the tile's first key is in the chunk";
              alpha[lane] = std::exp2(row_max[lane] - m_new);
              row_max[lane] = m_new;
              tile_sum[lane] = 0.0f;
              for (int nt = 0; nt < 2; ++nt) {
                for (int i = 0; i < 2; ++i) {
                  s[nt][lane][i] = std::exp2(s[nt][lane][i] - m_new);
                  tile_sum[lane] += s[nt][lane][i];
                }
              }
            }
            const auto quad_sum = OverQuads(tile_sum, [](float a, float b) { return a + b; });
            RegsA pa;
            for (int lane = 0; lane < 32; ++lane) {
              row_sum[lane] = row_sum[lane] * alpha[lane] + quad_sum[lane];
              for (int j = 0; j < kDimTiles; ++j) {
                o[j][lane][0] *= alpha[lane];
                o[j][lane][1] *= alpha[lane];
              }
              auto bf = [](float x) { return model::F32ToBf16(x); };
              pa[lane] = {Pack(bf(s[0][lane][0]), bf(s[0][lane][1])), 0u,
                          Pack(bf(s[1][lane][0]), bf(s[1][lane][1])), 0u};
            }
            // O += P V.
            for (int j = 0; j < kDimTiles; ++j) {
              RegsB b;
              for (int lane = 0; lane < 32; ++lane) {
                b[lane] = {decode_mma::ValueRegister(vw[lane][0].data(), vw[lane][1].data(), j),
                           decode_mma::ValueRegister(vw[lane][2].data(), vw[lane][3].data(), j)};
              }
              testing::Mma(o[j], pa, b);
            }
          }
          // Rows group + 8 of A and P are zero: so are O's elements 2 and 3.
          for (int j = 0; j < kDimTiles; ++j) {
            for (int lane = 0; lane < 32; ++lane) {
              EXPECT_EQ(o[j][lane][2], 0.0f);
              EXPECT_EQ(o[j][lane][3], 0.0f);
            }
          }
          // This warp's share of the merge.
          for (int lane = 0; lane < 32; ++lane) {
            const int group = lane / 4;
            if (group >= G) continue;
            if (lane % 4 == 0) {
              warp_m[warp][group] = row_max[lane];
              warp_l[warp][group] = row_sum[lane];
            } else {
              EXPECT_EQ(row_max[lane], row_max[lane / 4 * 4]) << "a quad agrees";
              EXPECT_EQ(row_sum[lane], row_sum[lane / 4 * 4]) << "a quad agrees";
            }
            for (int j = 0; j < kDimTiles; ++j) {
              for (int i = 0; i < 2; ++i) {
                warp_o[decode_mma::WarpOutputIndex(warp * kMaxGroup + group,
                                                   decode_mma::OutputDim(lane, j, i, D), D)] =
                    o[j][lane][i];
              }
            }
          }
        }
        // The block's merge, then the output or the chunk's partials.
        float head_m[kMaxGroup], head_l[kMaxGroup];
        for (int g = 0; g < G; ++g) {
          float m = -INFINITY;
          for (int w = 0; w < kWarps; ++w) m = std::max(m, warp_m[w][g]);
          float total = 0.0f;
          for (int w = 0; w < kWarps; ++w) {
            const float f = std::exp2(warp_m[w][g] - m);
            warp_m[w][g] = f;
            total += f * warp_l[w][g];
          }
          head_m[g] = m;
          head_l[g] = total;
        }
        for (int g = 0; g < G; ++g) {
          for (int d = 0; d < D; ++d) {
            float v = 0.0f;
            for (int w = 0; w < kWarps; ++w) {
              v = std::fma(warp_m[w][g],
                           warp_o[decode_mma::WarpOutputIndex(w * kMaxGroup + g, d, D)], v);
            }
            if (p.splits > 1) {
              part_out[part_index(row, kv_head, g, chunk) * D + d] = v;
            } else {
              out[(static_cast<size_t>(row) * H + kv_head * G + g) * D + d] =
                  model::Bf16ToF32(model::F32ToBf16(v / head_l[g]));
            }
          }
          if (p.splits > 1) {
            part_max[part_index(row, kv_head, g, chunk)] = head_m[g] * kLn2;
            part_sum[part_index(row, kv_head, g, chunk)] = head_l[g];
          }
        }
      }
      if (p.splits == 1) continue;
      // CombineChunks (attention_split.cuh), in chunk order.
      const int32_t used = UsedChunks(pos, p.sliding_window, p.splits);
      for (int g = 0; g < G; ++g) {
        // A warp: lane l takes chunks l, l + 32, ...; the sum by xor butterfly (GroupSum).
        float m = -FLT_MAX;
        for (int c = 0; c < used; ++c) m = std::max(m, part_max[part_index(row, kv_head, g, c)]);
        std::vector<float> scale(static_cast<size_t>(used));
        std::array<float, 32> lane_total{};
        for (int c = 0; c < used; ++c) {
          scale[c] = std::exp(part_max[part_index(row, kv_head, g, c)] - m);
          lane_total[c % 32] =
              std::fma(scale[c], part_sum[part_index(row, kv_head, g, c)], lane_total[c % 32]);
        }
        for (int offset = 16; offset > 0; offset /= 2) {
          std::array<float, 32> next;
          for (int l = 0; l < 32; ++l) next[l] = lane_total[l] + lane_total[l ^ offset];
          lane_total = next;
        }
        const float total = lane_total[0];
        for (int d = 0; d < D; ++d) {
          float o = 0.0f;
          for (int c = 0; c < used; ++c) {
            const size_t at = part_index(row, kv_head, g, c);
            o = std::fma(scale[c], part_out[at * D + d], o);
          }
          out[(static_cast<size_t>(row) * H + kv_head * G + g) * D + d] =
              model::Bf16ToF32(model::F32ToBf16(o / total));
        }
      }
    }
  }
  return out;
}

// Decode rows at the contexts (1, 15, 17, 1,000 and 4,095 keys) and others around the
// 16-key tiles and 16-token blocks, head dims 64 and 128, groups 1, 4, 7 and 8, with and
// without a sliding window, one block per row and several chunks (some past short rows).
// Tolerance (the reference's): relative L2 error 1e-2 per (row, head).
TEST(DecodeMmaTest, EmulatedKernelMatchesTheReference) {
  struct Case {
    int32_t D, G, KV, window;
    std::vector<int32_t> lens;
  };
  const std::vector<Case> cases = {
      {128, 4, 2, 0, {1, 15, 17, 1000, 4095}},   {64, 7, 2, 0, {1, 16, 33, 64, 65, 1000}},
      {128, 8, 1, 0, {2, 31, 100, 513}},         {64, 1, 3, 0, {1, 15, 17, 200}},
      {128, 4, 2, 100, {1, 99, 100, 101, 1000}}, {64, 8, 1, 1, {1, 40}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    std::vector<Seq> seqs;
    for (const int32_t len : c.lens) seqs.push_back({len - 1, 1});
    const Launch l = MakeLaunch(c.D, c.G, c.KV, c.window, seqs, seed++);
    for (const int32_t splits : {1, 3, 64}) {
      const Decode d = MakeDecode(l, splits);
      const std::vector<float> out = Emulate(l, d.p);
      const std::string what = "D " + std::to_string(c.D) + ", G " + std::to_string(c.G) +
                               ", window " + std::to_string(c.window) + ", splits " +
                               std::to_string(splits);
      ExpectMatchesReference(l, out, what.c_str());
      // Padding rows are left alone.
      for (int32_t r = 0; r < l.rows; ++r) {
        if (d.slot[r] >= 0) continue;
        for (int32_t k = 0; k < l.H() * c.D; ++k) {
          ASSERT_TRUE(std::isnan(out[static_cast<size_t>(r) * l.H() * c.D + k])) << what;
        }
      }
    }
  }
}

// The layout's maps cover what they claim: the K loads of a lane pair with Q's (the same dims
// in the same words), every (key, dim) of a 16-key tile is loaded once for K and once for V, and
// OutputDim is a permutation of the dims.
TEST(DecodeMmaTest, LoadsCoverTheTileOnceAndOutputDimsArePermuted) {
  for (const int32_t D : {64, 128}) {
    std::vector<int> k_seen(static_cast<size_t>(kDecodeTileKeys) * D, 0), v_seen(k_seen.size(), 0);
    std::vector<int> o_seen(static_cast<size_t>(D), 0);
    for (int lane = 0; lane < 32; ++lane) {
      for (int nt = 0; nt < 2; ++nt) {
        for (int b = 0; b < D / 32; ++b) {
          const decode_mma::KeyDims kd = decode_mma::KeyLoad(lane, nt, b);
          for (int e = 0; e < 8; ++e) ++k_seen[static_cast<size_t>(kd.key) * D + kd.dim + e];
        }
      }
      for (int i = 0; i < 4; ++i) {
        for (int e = 0; e < D / 8; ++e) {
          ++v_seen[static_cast<size_t>(decode_mma::ValueKey(lane, i)) * D +
                   decode_mma::ValueDim(lane, D) + e];
        }
      }
      if (lane / 4 == 0) {  // one row's columns: every n tile, both elements, the 4 quads
        for (int j = 0; j < D / 8; ++j) {
          for (int i = 0; i < 2; ++i) ++o_seen[decode_mma::OutputDim(lane, j, i, D)];
        }
      }
    }
    for (int n : k_seen) EXPECT_EQ(n, 1) << "K, D " << D;
    for (int n : v_seen) EXPECT_EQ(n, 1) << "V, D " << D;
    for (int n : o_seen) EXPECT_EQ(n, 1) << "O, D " << D;
  }
  // WarpOutputIndex: distinct places for every (row, dim), all below the next row's first.
  for (const int32_t D : {64, 128}) {
    const int32_t rows = kWarps * kMaxGroup, size = decode_mma::WarpOutputIndex(rows, 0, D);
    std::vector<int> seen(static_cast<size_t>(size), 0);
    for (int32_t r = 0; r < rows; ++r) {
      for (int32_t d = 0; d < D; ++d) {
        const int32_t at = decode_mma::WarpOutputIndex(r, d, D);
        ASSERT_LT(at, decode_mma::WarpOutputIndex(r + 1, 0, D));
        ++seen[static_cast<size_t>(at)];
      }
    }
    EXPECT_EQ(*std::max_element(seen.begin(), seen.end()), 1) << "D " << D;
  }
  // ValueRegister puts the lower key's element in the low half.
  const uint32_t lower[2] = {0x22221111u, 0x44443333u}, upper[2] = {0xbbbbaaaau, 0xddddccccu};
  EXPECT_EQ(decode_mma::ValueRegister(lower, upper, 0), 0xaaaa1111u);
  EXPECT_EQ(decode_mma::ValueRegister(lower, upper, 3), 0xdddd4444u);
}

}  // namespace
}  // namespace llm::kernels
