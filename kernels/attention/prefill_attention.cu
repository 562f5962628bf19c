#include <algorithm>
#include <cmath>

#include "kernels/attention/kv_load.cuh"
#include "kernels/attention/mma.cuh"
#include "kernels/attention/mma_fragment.h"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/attention/prefill_attention.h"
#include "kernels/attention/prefill_attention_sm90.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kWarps = kPrefillTileRows / kPrefillWarpRows;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = kPrefillTileKeys;
constexpr int kKeyTiles = kKeys / 8;  // the 8-key n tiles of S
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kKeys % 16 == 0, "a K/V tile is whole k-steps of P V");

// Shared-memory rows are padded by 16 bytes so the 8 rows an ldmatrix reads fall in distinct
// banks.
template <int D>
constexpr int kStride = D + 8;

template <int D>
constexpr int SharedBytes() {
  return 2 * 2 * kKeys * kStride<D> * static_cast<int>(sizeof(__nv_bfloat16));  // 2 stages K, V
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, zero-filled when !valid (keys past the span: P is 0 there, and a
// zero V keeps 0 * V finite).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(bytes)
               : "memory");
}
// The "memory" clobbers keep the compiler from moving shared-memory accesses across the copies
// and the wait.
__device__ __forceinline__ void CopyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

// FP8: the cache's elements are E4M3. The tiles are then staged through registers (8 bytes
// read, decoded exactly into bf16, 16 bytes stored: kv_load.cuh) instead of cp.async, the K
// scale multiplies the scores and the V scale the output.
template <int D, bool FP8>
__global__ void __launch_bounds__(kThreads) PrefillAttentionKernel(PrefillAttentionParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  static_assert(D % 16 == 0 && D <= 128, "head_dim 16, 32, 64 or 128");
  constexpr int kSteps = D / 16;    // k-steps of Q K^T
  constexpr int kDimTiles = D / 8;  // n tiles of O
  constexpr int kChunks = D / 8;    // 16-byte pieces of a key row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  // [stage][K or V][key][kStride<D>]
  auto tile_row = [&](int stage, int kv, int key) {
    return smem + ((stage * 2 + kv) * kKeys + key) * kStride<D>;
  };

  const PrefillTile tile = p.tiles[blockIdx.x];
  const PrefillChunk chunk = p.chunks[tile.chunk];
  const int32_t kv_head = blockIdx.y;
  const int32_t G = p.num_heads / p.num_kv_heads;
  const int32_t rows_total = chunk.tokens * G;
  const int32_t m_end = min(tile.row_begin + kPrefillTileRows, rows_total);
  const KeySpan span = PrefillRowsKeys(chunk, G, tile.row_begin, m_end, p.sliding_window);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // Stages the K and V of keys [key0, key0 + kKeys) into `stage`. A thread always copies the
  // same 16-byte piece of its keys, a fixed number of keys per tile.
  static_assert(kThreads % kChunks == 0 && kKeys % (kThreads / kChunks) == 0, "whole passes");
  constexpr int kKeysPerPass = kThreads / kChunks;
  const int piece = tid % kChunks;
  auto stage_tile = [&](int stage, int32_t key0) {
#pragma unroll
    for (int key = tid / kChunks; key < kKeys; key += kKeysPerPass) {
      const int32_t t = key0 + key;
      const bool valid = t < span.end;
      const int64_t at =
          valid ? PagedCacheOffset(p, chunk.slot, t, kv_head) + piece * 8 : int64_t{0};
      if constexpr (FP8) {
        uint32_t k[4], v[4];
        LoadKvWords8<true>(p.k_cache, at, valid, k);
        LoadKvWords8<true>(p.v_cache, at, valid, v);
        *reinterpret_cast<uint4*>(tile_row(stage, 0, key) + piece * 8) = {k[0], k[1], k[2], k[3]};
        *reinterpret_cast<uint4*>(tile_row(stage, 1, key) + piece * 8) = {v[0], v[1], v[2], v[3]};
      } else {
        const auto* k_cache = static_cast<const __nv_bfloat16*>(p.k_cache);
        const auto* v_cache = static_cast<const __nv_bfloat16*>(p.v_cache);
        CopyAsync16(tile_row(stage, 0, key) + piece * 8, k_cache + at, valid);
        CopyAsync16(tile_row(stage, 1, key) + piece * 8, v_cache + at, valid);
      }
    }
    CopyAsyncCommit();
  };
  stage_tile(0, span.begin);

  // This warp's rows; a lane holds rows `group` and `group + 8` of them.
  const int32_t w_begin = tile.row_begin + warp * kPrefillWarpRows;
  const int32_t w_end = min(w_begin + kPrefillWarpRows, m_end);
  const bool active = w_begin < w_end;
  int32_t w_lo = 0, w_hi = -1;  // the positions of its first and last row
  if (active) {
    w_lo = chunk.pos_begin + UnpackRow(w_begin, G).token;
    w_hi = chunk.pos_begin + UnpackRow(w_end - 1, G).token;
  }
  int32_t row_pos[2];  // -1: a padding row (sees nothing, writes nothing)
  int64_t row_q[2];    // offset of the row's query (and output head) within its batch row
  int32_t row_batch[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t m = w_begin + lane / 4 + 8 * h;
    row_pos[h] = -1;
    row_q[h] = 0;
    row_batch[h] = 0;
    if (m < w_end) {
      const PackedRow r = UnpackRow(m, G);
      row_pos[h] = chunk.pos_begin + r.token;
      row_batch[h] = chunk.row_begin + r.token;
      row_q[h] = static_cast<int64_t>(kv_head * G + r.head_in_group) * D;
    }
  }

  // Q fragments, straight from global memory (read once); padding rows are zero.
  const int64_t qkv_stride = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * D;
  uint32_t q_frag[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const mma::Coord c = mma::FragA(lane, reg, 0);
      const int h = mma::RowHalfA(reg);
      q_frag[kk][reg] = 0;
      if (row_pos[h] >= 0) {
        q_frag[kk][reg] = *reinterpret_cast<const uint32_t*>(p.qkv + row_batch[h] * qkv_stride +
                                                             row_q[h] + kk * 16 + c.col);
      }
    }
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
  }
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = p.scale * (FP8 ? p.kv.k_scale : 1.0f) * kLog2e;

  const int32_t num_tiles = (span.end - span.begin + kKeys - 1) / kKeys;
  for (int32_t it = 0; it < num_tiles; ++it) {
    const int stage = it % 2;
    const int32_t key0 = span.begin + it * kKeys;
    if (it + 1 < num_tiles) {
      stage_tile(stage ^ 1, key0 + kKeys);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();
    const TileCover cover =
        active ? CoverOfTile(key0, w_lo, w_hi, p.sliding_window) : TileCover::kSkip;
    if (cover != TileCover::kSkip) {
      // S = Q K^T: kKeyTiles n tiles of 8 keys.
      float s[kKeyTiles][4];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
        for (int n = 0; n < kKeyTiles; n += 2) {
          const mma::Coord a = mma::LdmatrixKeyRow(lane, n * 8, kk * 16);
          uint32_t b[4];
          LdMatrixX4(b, tile_row(stage, 0, a.row) + a.col);
          Mma(s[n], q_frag[kk], b[0], b[1]);
          Mma(s[n + 1], q_frag[kk], b[2], b[3]);
        }
      }
      // Mask, then the online softmax of the tile (in log2 units).
      float alpha[2];
      MaskedSoftmaxTile(s, row_pos, lane, key0, cover, p.sliding_window, scale_log2, row_max,
                        row_sum, alpha);
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] *= alpha[mma::RowHalfC(i)];
      }
      // O += P V: k-steps of 16 keys; V read with ldmatrix .trans, 16 dims per load.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t pa[4];
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) {
          const ScoreSource src = PFragmentSource(kk, reg);
          pa[reg] = PackBf16(s[src.ntile][src.elem], s[src.ntile][src.elem + 1]);
        }
#pragma unroll
        for (int n = 0; n < kDimTiles; n += 2) {
          const mma::Coord v = mma::LdmatrixValueRow(lane, kk * 16, n * 8);
          uint32_t b[4];
          LdMatrixX4Trans(b, tile_row(stage, 1, v.row) + v.col);
          Mma(o[n], pa, b[0], b[1]);
          Mma(o[n + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's copy
  }

  // O / l, as bf16 pairs.
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    inv[h] = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
    if constexpr (FP8) inv[h] *= p.kv.v_scale;
  }
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; i += 2) {
      const mma::Coord c = mma::FragC(lane, i);
      const int h = mma::RowHalfC(i);
      if (row_pos[h] < 0) continue;
      __nv_bfloat16* dst =
          p.out + static_cast<int64_t>(row_batch[h]) * p.num_heads * D + row_q[h] + n * 8 + c.col;
      *reinterpret_cast<__nv_bfloat162*>(dst) =
          __floats2bfloat162_rn(o[n][i] * inv[h], o[n][i + 1] * inv[h]);
    }
  }
}

template <int D>
cudaError_t AllowSharedMemory() {
  for (auto* kernel : {PrefillAttentionKernel<D, false>, PrefillAttentionKernel<D, true>}) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SharedBytes<D>());
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <int D>
cudaError_t LaunchForDim(const PrefillAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_tiles, p.num_kv_heads);
  if (p.kv.fp8) {
    return Launch(PrefillAttentionKernel<D, true>, grid, kThreads, SharedBytes<D>(), stream, p);
  }
  return Launch(PrefillAttentionKernel<D, false>, grid, kThreads, SharedBytes<D>(), stream, p);
}

}  // namespace

void PlanPrefillTiles(const std::vector<PrefillChunk>& chunks, int32_t group,
                      std::vector<PrefillTile>& tiles) {
  tiles.clear();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int32_t rows = chunks[c].tokens * group;
    for (int32_t m = 0; m < rows; m += kPrefillTileRows) {
      tiles.push_back({static_cast<int32_t>(c), m});
    }
  }
  // The last position of a tile (its key count up to the window) orders them, longest first.
  auto last_pos = [&](const PrefillTile& t) {
    const PrefillChunk& c = chunks[t.chunk];
    const int32_t m_end = std::min(t.row_begin + kPrefillTileRows, c.tokens * group);
    return c.pos_begin + (m_end - 1) / group;
  };
  std::sort(tiles.begin(), tiles.end(), [&](const PrefillTile& a, const PrefillTile& b) {
    const int32_t pa = last_pos(a), pb = last_pos(b);
    if (pa != pb) return pa > pb;
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.row_begin < b.row_begin;
  });
}

void SelectLastTokenTiles(const std::vector<PrefillChunk>& chunks,
                          const std::vector<uint8_t>& samples, int32_t group,
                          const std::vector<PrefillTile>& tiles, std::vector<PrefillTile>& out) {
  out.clear();
  for (const PrefillTile& t : tiles) {
    if (samples[t.chunk] == 0) continue;
    const int32_t last_end = chunks[t.chunk].tokens * group;  // the last token's rows end here
    if (t.row_begin < last_end && t.row_begin + kPrefillTileRows > last_end - group) {
      out.push_back(t);
    }
  }
}

int32_t MaxPrefillTiles(int32_t tokens, int32_t max_chunks, int32_t group) {
  // Each chunk adds at most one partial tile.
  const int64_t rows = int64_t{tokens} * group;
  return static_cast<int32_t>((rows + kPrefillTileRows - 1) / kPrefillTileRows + max_chunks);
}

bool PrefillAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
  return dim_ok && num_kv_heads > 0 && num_heads % num_kv_heads == 0;
}

cudaError_t PreparePrefillAttention(int32_t head_dim) {
  switch (head_dim) {
    case 16:
      return AllowSharedMemory<16>();
    case 32:
      return AllowSharedMemory<32>();
    case 64:
      return AllowSharedMemory<64>();
    case 128:
      return AllowSharedMemory<128>();
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream) {
  if (p.num_tiles <= 0) return cudaSuccess;
  if (!PrefillAttentionSupported(p.head_dim, p.num_heads, p.num_kv_heads)) {
    return cudaErrorInvalidValue;
  }
  if (p.tma != nullptr) return LaunchHopperPrefillAttention(p, *p.tma, stream);
  switch (p.head_dim) {
    case 16:
      return LaunchForDim<16>(p, stream);
    case 32:
      return LaunchForDim<32>(p, stream);
    case 64:
      return LaunchForDim<64>(p, stream);
    default:
      return LaunchForDim<128>(p, stream);
  }
}

}  // namespace llm::kernels
