#include <algorithm>
#include <cfloat>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_mma.h"
#include "kernels/attention/attention_split.cuh"
#include "kernels/attention/kv_load.cuh"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = kAttentionTile;  // keys per tile (= warp size: one lane per key in softmax)
static_assert(kTile == 32, "the softmax gives one lane per key of a tile");

// One block per (row, kv head, chunk). G: query heads per kv head, at most G_MAX. FP8: the
// cache's elements are E4M3 (kv_load.cuh: decoded times the layer's scales).
template <int D, int G_MAX, bool FP8>
__global__ void __launch_bounds__(kThreads) AttentionKernel(AttentionParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  // Keys are read 8 elements per lane (LoadKvFloats8), D / 8 lanes per key.
  constexpr int kElems = 8;
  constexpr int kLanesPerToken = D / kElems;
  constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  constexpr int kWarps = kThreads / 32;
  // Passes of the block's warps over a tile's keys; all of a lane's loads are issued first.
  constexpr int kPasses = (kTile + kWarps * kTokensPerWarp - 1) / (kWarps * kTokensPerWarp);
  static_assert(D % kElems == 0 && 32 % kLanesPerToken == 0, "head_dim 16, 32, 64 or 128");
  static_assert(kThreads / kLanesPerToken * D >= kMaxAttentionSplits,
                "the combine keeps G_MAX * kMaxAttentionSplits scales in red_s");
  // P.V: V is read 8 elements a load too; a thread owns 8 dimensions of the keys of its token
  // group, kLanesPerToken threads per key.
  constexpr int kGroups = kThreads / kLanesPerToken;
  __shared__ float q_s[G_MAX][D];
  __shared__ float s_s[G_MAX][kTile];
  __shared__ float m_s[G_MAX], l_s[G_MAX], alpha_s[G_MAX];
  __shared__ float red_s[kGroups][G_MAX][D];

  const int32_t local_row = blockIdx.x;
  const int32_t row = p.row_begin + local_row;
  const int32_t kv_head = blockIdx.y;
  const int32_t chunk = blockIdx.z;
  const int32_t slot = p.row_slot[row];
  if (slot < 0) return;
  const int32_t G = p.num_heads / p.num_kv_heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t pos = p.row_pos[row];
  const KeyRange range = AttentionKeyRange(pos, p.sliding_window, p.splits, chunk);
  const bool split = p.splits > 1;
  auto part_index = [&](int g) {
    return (static_cast<int64_t>(local_row) * p.num_heads + kv_head * G + g) * p.splits + chunk;
  };
  // A chunk past the row's context: the combine reads UsedChunks only, so nothing to write.
  if (range.begin >= range.end) return;

  const int64_t row_stride = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * D;
  const __nv_bfloat16* q_row = p.qkv + row * row_stride + static_cast<int64_t>(kv_head) * G * D;
  for (int k = tid; k < G * D; k += kThreads) q_s[k / D][k % D] = ToFloat(q_row[k]) * p.scale;
  if (tid < G_MAX) {
    m_s[tid] = -FLT_MAX;
    l_s[tid] = 0.0f;
  }
  const int dv = tid % kLanesPerToken, grp = tid / kLanesPerToken;  // dims [dv * 8, dv * 8 + 8)
  float acc[G_MAX][kElems];
#pragma unroll
  for (int g = 0; g < G_MAX; ++g) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[g][e] = 0.0f;
  }
  __syncthreads();

  const int sub = lane / kLanesPerToken, lane_in = lane % kLanesPerToken;
  for (int32_t t0 = range.begin; t0 < range.end; t0 += kTile) {
    const int n = min(kTile, range.end - t0);
    // Scores of the tile: kLanesPerToken lanes per key. The warp's keys of every pass are
    // loaded before any is used, so several loads are in flight.
    float k[kPasses][kElems];
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int j = (it * kWarps + warp) * kTokensPerWarp + sub;
      if (j < n) {
        LoadKvFloats8<FP8>(p.k_cache, PagedCacheOffset(p, slot, t0 + j, kv_head) + lane_in * kElems,
                           p.kv.k_scale, k[it]);
      }
    }
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      // Uniform over the warp: kTile is a multiple of kTokensPerWarp.
      if ((it * kWarps + warp) * kTokensPerWarp >= kTile) continue;
      const int j = (it * kWarps + warp) * kTokensPerWarp + sub;
      float dot[G_MAX];
#pragma unroll
      for (int g = 0; g < G_MAX; ++g) dot[g] = 0.0f;
      if (j < n) {
#pragma unroll
        for (int g = 0; g < G_MAX; ++g) {
          if (g < G) {
#pragma unroll
            for (int e = 0; e < kElems; ++e)
              dot[g] = fmaf(q_s[g][lane_in * kElems + e], k[it][e], dot[g]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < G_MAX; ++g) dot[g] = GroupSum(dot[g], kLanesPerToken);
      if (lane_in == 0 && j < n) {
#pragma unroll
        for (int g = 0; g < G_MAX; ++g) {
          if (g < G) s_s[g][j] = dot[g];
        }
      }
    }
    __syncthreads();
    // Online softmax update, one warp per head.
    for (int g = warp; g < G; g += kWarps) {
      const float v = lane < n ? s_s[g][lane] : -FLT_MAX;
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, WarpMax(v));
      const float e = lane < n ? __expf(v - m_new) : 0.0f;
      s_s[g][lane] = e;
      const float tile_sum = GroupSum(e, 32);
      // Every lane has read m_s[g] before lane 0 replaces it (an intra-warp hazard otherwise).
      __syncwarp();
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new);
        alpha_s[g] = alpha;
        l_s[g] = l_s[g] * alpha + tile_sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    // P.V: each thread owns 8 dimensions for the keys of its token group.
#pragma unroll
    for (int g = 0; g < G_MAX; ++g) {
      if (g < G) {
#pragma unroll
        for (int e = 0; e < kElems; ++e) acc[g][e] *= alpha_s[g];
      }
    }
    for (int j = grp; j < n; j += kGroups) {
      float v[kElems];
      LoadKvFloats8<FP8>(p.v_cache, PagedCacheOffset(p, slot, t0 + j, kv_head) + dv * kElems,
                         p.kv.v_scale, v);
#pragma unroll
      for (int g = 0; g < G_MAX; ++g) {
        if (g < G) {
          const float w = s_s[g][j];
#pragma unroll
          for (int e = 0; e < kElems; ++e) acc[g][e] = fmaf(w, v[e], acc[g][e]);
        }
      }
    }
    __syncthreads();
  }
  if constexpr (kGroups > 1) {
#pragma unroll
    for (int g = 0; g < G_MAX; ++g) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) red_s[grp][g][dv * kElems + e] = acc[g][e];
    }
    __syncthreads();
    if (grp == 0) {
      for (int k = 1; k < kGroups; ++k) {
#pragma unroll
        for (int g = 0; g < G_MAX; ++g) {
#pragma unroll
          for (int e = 0; e < kElems; ++e) acc[g][e] += red_s[k][g][dv * kElems + e];
        }
      }
    }
  }
  if (grp == 0) {
#pragma unroll
    for (int g = 0; g < G_MAX; ++g) {
      if (g >= G) continue;
#pragma unroll
      for (int e = 0; e < kElems; ++e) {
        const int d = dv * kElems + e;
        if (split) {
          p.partial_out[part_index(g) * D + d] = acc[g][e];
        } else {
          const int32_t head = kv_head * G + g;
          p.out[row * static_cast<int64_t>(p.num_heads) * D + head * D + d] =
              ToBf16(acc[g][e] / l_s[g]);
        }
      }
      if (split && dv == 0) {
        p.partial_max[part_index(g)] = m_s[g];
        p.partial_sum[part_index(g)] = l_s[g];
      }
    }
  }
  if (!split) return;
  __shared__ int last_s;
  if (!LastChunkToArrive(p, local_row, kv_head, pos, &last_s)) return;
  // m_s, l_s and red_s are free now: red_s holds kThreads * 8 * G_MAX floats, at least
  // G * kMaxAttentionSplits.
  CombineChunks<D, kThreads, G_MAX>(p, local_row, row, kv_head, G, pos, m_s, l_s, &red_s[0][0][0]);
}

template <int D, bool FP8>
cudaError_t LaunchForCache(const AttentionParams& p, dim3 grid, cudaStream_t stream) {
  const int32_t g = p.num_heads / p.num_kv_heads;
  if (g <= 1) return Launch(AttentionKernel<D, 1, FP8>, grid, kThreads, 0, stream, p);
  if (g <= 2) return Launch(AttentionKernel<D, 2, FP8>, grid, kThreads, 0, stream, p);
  if (g <= 4) return Launch(AttentionKernel<D, 4, FP8>, grid, kThreads, 0, stream, p);
  return Launch(AttentionKernel<D, 8, FP8>, grid, kThreads, 0, stream, p);
}

template <int D>
cudaError_t LaunchForDim(const AttentionParams& p, dim3 grid, cudaStream_t stream) {
  return p.kv.fp8 ? LaunchForCache<D, true>(p, grid, stream)
                  : LaunchForCache<D, false>(p, grid, stream);
}

}  // namespace

int32_t DecodeSplits(int32_t rows, int32_t num_kv_heads, int32_t sm_count, int32_t max_splits) {
  const int64_t blocks = int64_t{rows > 0 ? rows : 1} * (num_kv_heads > 0 ? num_kv_heads : 1);
  const int64_t target = int64_t{sm_count > 0 ? sm_count : 1} * kAttentionBlocksPerSm;
  const int64_t splits = (target + blocks - 1) / blocks;
  return static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(splits, max_splits)));
}

bool AttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
  return dim_ok && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads <= 8;
}

bool AttentionUsesTensorCores(const AttentionParams& p) {
  return p.tensor_cores && (p.head_dim == 64 || p.head_dim == 128);
}

cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (!AttentionSupported(p.head_dim, p.num_heads, p.num_kv_heads)) return cudaErrorInvalidValue;
  if (p.splits < 1 || p.splits > kMaxAttentionSplits ||
      (p.splits > 1 && p.split_arrivals == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(p.rows, p.num_kv_heads, p.splits);
  if (AttentionUsesTensorCores(p)) return LaunchAttentionMma(p, grid, stream);
  cudaError_t err = cudaSuccess;
  switch (p.head_dim) {
    case 16:
      err = LaunchForDim<16>(p, grid, stream);
      break;
    case 32:
      err = LaunchForDim<32>(p, grid, stream);
      break;
    case 64:
      err = LaunchForDim<64>(p, grid, stream);
      break;
    default:
      err = LaunchForDim<128>(p, grid, stream);
      break;
  }
  return err;
}

}  // namespace llm::kernels
