#include <cmath>

#include "kernels/attention/attention_mma.h"
#include "kernels/attention/attention_split.cuh"
#include "kernels/attention/decode_mma_layout.h"
#include "kernels/attention/kv_load.cuh"
#include "kernels/attention/mma.cuh"
#include "kernels/attention/mma_fragment.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

using decode_mma::kDecodeTileKeys;
using decode_mma::kMaxGroup;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Blocks per SM the registers must allow: 3 on sm_90 (at most 168 registers: no spills there at
// head_dim 128, by ptxas -v); no bound on sm_80, whose code needs more (2 blocks per SM at
// head_dim 128).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kMinBlocks = 3;
#else
constexpr int kMinBlocks = 1;
#endif
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The block's shared scratch: first the warps' O (kWarps * kMaxGroup rows, WarpOutputIndex),
// later the combine's chunk scales (kMaxGroup * kMaxAttentionSplits).
template <int D>
constexpr int ScratchFloats() {
  constexpr int kWarpO = decode_mma::WarpOutputIndex(kWarps * kMaxGroup, 0, D);
  return kWarpO > kMaxGroup * kMaxAttentionSplits ? kWarpO : kMaxGroup * kMaxAttentionSplits;
}

// One block per (row, kv head, chunk); warp w takes the chunk's 16-key tiles w, w + 4, ...
// FP8: the cache's elements are E4M3, converted unscaled (exactly) into half fragments
// (E4M3x8ToHalfWords: one conversion a pair, where bf16 would take four and bound the kernel),
// so the products run in fp16: Q as half (Bf16PairToHalfPair), P as half. The K scale
// multiplies the scores and the V scale the output. A tile's loads carry half the bytes of
// bf16's, so a warp issues the next tile's loads (raw bytes, RawTile) before this tile's
// products: about the bytes in flight of the bf16 kernel.
template <int D, bool FP8>
__global__ void __launch_bounds__(kThreads, kMinBlocks) AttentionMmaKernel(AttentionParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  constexpr int kSteps = D / 16;       // k-steps of Q K^T
  constexpr int kKeyLoads = D / 32;    // 8-element loads of a key (or a query head) per lane
  constexpr int kDimTiles = D / 8;     // n tiles of O
  constexpr int kValueWords = D / 16;  // the D / 8 dims a lane reads of a V key, as words
  __shared__ float warp_m[kWarps][kMaxGroup], warp_l[kWarps][kMaxGroup];
  __shared__ float head_m[kMaxGroup], head_l[kMaxGroup];
  __shared__ float scratch[ScratchFloats<D>()];
  __shared__ int last_s;

  const int32_t local_row = blockIdx.x;
  const int32_t row = p.row_begin + local_row;
  const int32_t kv_head = blockIdx.y;
  const int32_t chunk = blockIdx.z;
  const int32_t slot = p.row_slot[row];
  if (slot < 0) return;
  const int32_t G = p.num_heads / p.num_kv_heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, group = lane / 4;
  const int32_t pos = p.row_pos[row];
  const KeyRange range = AttentionKeyRange(pos, p.sliding_window, p.splits, chunk);
  // A chunk past the row's context: the combine reads UsedChunks only, so nothing to write.
  if (range.begin >= range.end) return;
  const bool split = p.splits > 1;
  auto part_index = [&](int g) {
    return (static_cast<int64_t>(local_row) * p.num_heads + kv_head * G + g) * p.splits + chunk;
  };

  // Q as A: row `group` is query head kv_head * G + group (zero past G), rows group + 8 are
  // zero, so a lane keeps registers 0 and 2 of each k-step (q[kk][khalf]).
  const int64_t row_stride = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * D;
  uint32_t q[kSteps][2];
#pragma unroll
  for (int b = 0; b < kKeyLoads; ++b) {
    // A lane past the group reads head 0 of it and drops it.
    const int32_t head = group < G ? group : 0;
    uint32_t w[4];
    LoadKvWords8<false>(p.qkv,
                        row * row_stride + static_cast<int64_t>(kv_head * G + head) * D +
                            decode_mma::KeyLoad(lane, 0, b).dim,
                        group < G, w);
#pragma unroll
    for (int kk = 2 * b; kk < 2 * b + 2; ++kk) {
#pragma unroll
      for (int khalf = 0; khalf < 2; ++khalf) {
        const uint32_t word = w[decode_mma::DimWord(kk, khalf)];
        q[kk][khalf] = FP8 ? Bf16PairToHalfPair(word) : word;
      }
    }
  }

  // O's C fragments, row `group` only (elements 0 and 1; rows group + 8 are zero, see
  // MmaRows0To7).
  float o[kDimTiles][2];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = 0.0f;
  // Head `group`'s softmax over this warp's keys (log2 units), the same in the 4 lanes of a quad.
  float row_max = -INFINITY, row_sum = 0.0f;
  const float scale_log2 = p.scale * (FP8 ? p.kv.k_scale : 1.0f) * kLog2e;
  const float out_scale = FP8 ? p.kv.v_scale : 1.0f;

  // Where a lane's K load (ntile, b) and V load (i, l) of the tile at t0 read; a key past the
  // chunk reads the chunk's first key and is dropped (`valid`): its score is masked, and its V
  // must be zero (0 times stale bits could be NaN).
  auto valid = [&](int32_t t) { return t < range.end; };
  auto key_at = [&](int32_t t0, int nt, int b) {
    const int32_t t = t0 + decode_mma::KeyLoad(lane, nt, 0).key;
    return PagedCacheOffset(p, slot, valid(t) ? t : range.begin, kv_head) +
           decode_mma::KeyLoad(lane, nt, b).dim;
  };
  auto value_at = [&](int32_t t0, int i, int l) {
    const int32_t t = t0 + decode_mma::ValueKey(lane, i);
    return PagedCacheOffset(p, slot, valid(t) ? t : range.begin, kv_head) +
           decode_mma::ValueDim(lane, D) + 8 * l;
  };
  // FP8: a tile's loads as raw E4M3 bytes, kept until its products.
  struct RawTile {
    uint2 k[2][kKeyLoads];
    uint2 v[4][kValueWords / 4];
  };
  // The products and the online softmax of the tile at t0, from its K as B words and its V as
  // B words (`bf16_values`, [4][kValueWords]) or, for FP8, as raw bytes (`raw`), converted only
  // when P V needs them so that fewer registers are live.
  auto tile = [&](int32_t t0, const uint32_t(&kw)[2][kKeyLoads][4], const uint32_t* bf16_values,
                  const RawTile* raw) {
    // S = Q K^T: two n tiles of 8 keys (row `group`: elements 0 and 1).
    float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        MmaRows0To7<FP8>(s[nt][0], s[nt][1], q[kk][0], q[kk][1],
                         kw[nt][kk / 2][decode_mma::DimWord(kk, 0)],
                         kw[nt][kk / 2][decode_mma::DimWord(kk, 1)]);
      }
    }
    // Mask past the chunk, then the online softmax of row `group` (elements 0 and 1). The
    // tile's first key is in the chunk, so the maximum is finite.
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int32_t t = t0 + 8 * nt + mma::FragC(lane, i).col;
        s[nt][i] = t < range.end ? s[nt][i] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, s[nt][i]);
      }
    }
    const float m_new = fmaxf(row_max, QuadMax(tile_max));
    const float alpha = exp2f(row_max - m_new);  // 0 on the first tile (row_max is -inf)
    row_max = m_new;
    float tile_sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        s[nt][i] = exp2f(s[nt][i] - m_new);
        tile_sum += s[nt][i];
      }
    }
    row_sum = row_sum * alpha + QuadSum(tile_sum);
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      o[j][0] *= alpha;
      o[j][1] *= alpha;
    }
    // O += P V: P's A registers 0 and 2 are the C fragments of S's n tiles 0 and 1 (rows
    // group + 8, registers 1 and 3, are zero); V's B registers come from the lane's V keys.
    const uint32_t pa0 = FP8 ? PackHalf(s[0][0], s[0][1]) : PackBf16(s[0][0], s[0][1]);
    const uint32_t pa2 = FP8 ? PackHalf(s[1][0], s[1][1]) : PackBf16(s[1][0], s[1][1]);
    uint32_t vw[4][kValueWords];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (FP8) {
        const bool keep = valid(t0 + decode_mma::ValueKey(lane, i));
#pragma unroll
        for (int l = 0; l < kValueWords / 4; ++l) {
          E4M3x8ToHalfWords(raw->v[i][l], keep, &vw[i][4 * l]);
        }
      } else {
#pragma unroll
        for (int w = 0; w < kValueWords; ++w) vw[i][w] = bf16_values[i * kValueWords + w];
      }
    }
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      MmaRows0To7<FP8>(o[j][0], o[j][1], pa0, pa2, decode_mma::ValueRegister(vw[0], vw[1], j),
                       decode_mma::ValueRegister(vw[2], vw[3], j));
    }
  };
  constexpr int32_t kStride = kWarps * kDecodeTileKeys;
  if constexpr (FP8) {
    auto load = [&](int32_t t0, RawTile& raw) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int b = 0; b < kKeyLoads; ++b) raw.k[nt][b] = LoadKvRaw8(p.k_cache, key_at(t0, nt, b));
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int l = 0; l < kValueWords / 4; ++l)
          raw.v[i][l] = LoadKvRaw8(p.v_cache, value_at(t0, i, l));
      }
    };
    int32_t t0 = range.begin + warp * kDecodeTileKeys;
    RawTile next;
    if (t0 < range.end) load(t0, next);
    for (; t0 < range.end; t0 += kStride) {
      const RawTile cur = next;
      if (t0 + kStride < range.end) load(t0 + kStride, next);  // warp-uniform
      uint32_t kw[2][kKeyLoads][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const bool keep = valid(t0 + decode_mma::KeyLoad(lane, nt, 0).key);
#pragma unroll
        for (int b = 0; b < kKeyLoads; ++b) E4M3x8ToHalfWords(cur.k[nt][b], keep, kw[nt][b]);
      }
      tile(t0, kw, nullptr, &cur);
    }
  } else {
    for (int32_t t0 = range.begin + warp * kDecodeTileKeys; t0 < range.end; t0 += kStride) {
      // Every load of the tile first (2 K keys and 4 V keys per lane), so 2 * kKeyLoads +
      // kValueWords loads are in flight.
      uint32_t kw[2][kKeyLoads][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const bool keep = valid(t0 + decode_mma::KeyLoad(lane, nt, 0).key);
#pragma unroll
        for (int b = 0; b < kKeyLoads; ++b) {
          LoadKvWords8<false>(p.k_cache, key_at(t0, nt, b), keep, kw[nt][b]);
        }
      }
      uint32_t vw[4][kValueWords];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool keep = valid(t0 + decode_mma::ValueKey(lane, i));
#pragma unroll
        for (int l = 0; l < kValueWords / 4; ++l) {
          LoadKvWords8<false>(p.v_cache, value_at(t0, i, l), keep, &vw[i][4 * l]);
        }
      }
      tile(t0, kw, &vw[0][0], nullptr);
    }
  }

  // The warps' softmaxes merged (a split within the block): each warp's maximum, sum and O per
  // head through shared memory. A warp without keys has maximum -inf and weighs 0; warp 0
  // always has some, so the merged maximum is finite.
  float* warp_o = scratch;  // rows warp * kMaxGroup + head, WarpOutputIndex
  if (group < G) {
    if (lane % 4 == 0) {
      warp_m[warp][group] = row_max;
      warp_l[warp][group] = row_sum;
    }
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        warp_o[decode_mma::WarpOutputIndex(warp * kMaxGroup + group,
                                           decode_mma::OutputDim(lane, j, i, D), D)] = o[j][i];
      }
    }
  }
  __syncthreads();
  if (tid < G) {
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_m[w][tid]);
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(warp_m[w][tid] - m);
      warp_m[w][tid] = f;  // now the warp's weight
      l += f * warp_l[w][tid];
    }
    head_m[tid] = m;
    head_l[tid] = l;
  }
  __syncthreads();
  for (int k = tid; k < G * D; k += kThreads) {
    const int g = k / D, d = k % D;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      v = fmaf(warp_m[w][g], warp_o[decode_mma::WarpOutputIndex(w * kMaxGroup + g, d, D)], v);
    }
    if (split) {
      p.partial_out[part_index(g) * D + d] = v * out_scale;
    } else {
      p.out[row * static_cast<int64_t>(p.num_heads) * D + (kv_head * G + g) * D + d] =
          ToBf16(v / head_l[g] * out_scale);
    }
  }
  if (!split) return;
  if (tid < G) {
    p.partial_max[part_index(tid)] = head_m[tid] * kLn2;  // natural-log units, as the combine's
    p.partial_sum[part_index(tid)] = head_l[tid];
  }
  if (!LastChunkToArrive(p, local_row, kv_head, pos, &last_s)) return;
  // head_m, head_l and scratch are free now (LastChunkToArrive synchronised the block).
  CombineChunks<D, kThreads, kMaxGroup>(p, local_row, row, kv_head, G, pos, head_m, head_l,
                                        scratch);
}

}  // namespace

cudaError_t LaunchAttentionMma(const AttentionParams& p, dim3 grid, cudaStream_t stream) {
  if (p.num_heads / p.num_kv_heads > kMaxGroup) return cudaErrorInvalidValue;
  if (p.kv.fp8) {
    if (p.head_dim == 64) return Launch(AttentionMmaKernel<64, true>, grid, kThreads, 0, stream, p);
    if (p.head_dim == 128) {
      return Launch(AttentionMmaKernel<128, true>, grid, kThreads, 0, stream, p);
    }
    return cudaErrorInvalidValue;
  }
  if (p.head_dim == 64) return Launch(AttentionMmaKernel<64, false>, grid, kThreads, 0, stream, p);
  if (p.head_dim == 128)
    return Launch(AttentionMmaKernel<128, false>, grid, kThreads, 0, stream, p);
  return cudaErrorInvalidValue;
}

}  // namespace llm::kernels
