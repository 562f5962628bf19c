// Built for sm_90a alone (kernels/attention/CMakeLists.txt): wgmma and the warpgroup's
// register layouts exist nowhere else.
#include <cmath>

#include "kernels/attention/hopper_async.cuh"
#include "kernels/attention/hopper_layout.h"
#include "kernels/attention/mma.cuh"
#include "kernels/attention/mma_fragment.h"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/attention/prefill_attention_sm90.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

using hopper::BarrierArrive;
using hopper::BarrierArriveExpectTx;
using hopper::BarrierInit;
using hopper::BarrierInitFence;
using hopper::BarrierWait;
using hopper::BoxOffset;
using hopper::FenceProxyAsyncShared;
using hopper::KStepDescriptor;
using hopper::NamedBarrierSync;
using hopper::PinRegisters;
using hopper::StoreSharedZero16;
using hopper::TensorLoad2d;
using hopper::VStepDescriptor;
using hopper::Wgmma64x64;
using hopper::WgmmaCommit;
using hopper::WgmmaFence;
using hopper::WgmmaWaitAll;

constexpr int kKeys = hopper::kTileKeys;         // keys a stage holds
constexpr int kStages = 3;                       // the ring of K/V stages
constexpr int kConsumerThreads = 128;            // one warpgroup: the tile's 64 rows
constexpr int kThreads = kConsumerThreads + 32;  // and the producer warp
constexpr int kBoxColumns = hopper::kBoxColumns;
constexpr int kSlabBytes = hopper::kSlabBytes;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kPrefillTileRows == 64 && kKeys == kPrefillTileKeys,
              "one m64 warpgroup, the tiled kernel's key tiles");

// Dynamic shared memory, from a 1 KiB-aligned base: per stage K then V, each head_dim / 64
// slabs of [64 keys][128 bytes]; then the stages' full and empty barriers.
template <int D>
struct Smem {
  static constexpr int kSlabs = D / 64;
  static constexpr int kTileBytes = kSlabs * kSlabBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kBarriers = kStages * kStageBytes;
  static constexpr int kBytes = kBarriers + 2 * kStages * 8 + 1024;  // + room to align the base
};

template <int D>
__device__ __forceinline__ uint32_t KTile(uint32_t smem, int stage) {
  return smem + stage * Smem<D>::kStageBytes;
}
template <int D>
__device__ __forceinline__ uint32_t VTile(uint32_t smem, int stage) {
  return KTile<D>(smem, stage) + Smem<D>::kTileBytes;
}
template <int D>
__device__ __forceinline__ uint32_t FullBarrier(uint32_t smem, int stage) {
  return smem + Smem<D>::kBarriers + 8 * stage;
}
template <int D>
__device__ __forceinline__ uint32_t EmptyBarrier(uint32_t smem, int stage) {
  return smem + Smem<D>::kBarriers + 8 * (kStages + stage);
}

// The kernel's one parameter, in parameter space (__grid_constant__): the tensor maps must be.
struct Args {
  PrefillAttentionParams p;
  PrefillTensorMaps maps;
};

// What the whole block works on: the tile's chunk, its rows [m_begin, m_end), the positions of
// the first and last (lo, hi), and the keys they see in 64-key tiles.
struct BlockWork {
  PrefillChunk chunk;
  int32_t group;
  int32_t m_begin, m_end;
  int32_t lo, hi;
  KeySpan span;
  int32_t num_tiles;
};

__device__ __forceinline__ BlockWork WorkOf(const PrefillAttentionParams& p) {
  const PrefillTile tile = p.tiles[blockIdx.x];
  BlockWork w;
  w.chunk = p.chunks[tile.chunk];
  w.group = p.num_heads / p.num_kv_heads;
  w.m_begin = tile.row_begin;
  w.m_end = min(tile.row_begin + kPrefillTileRows, w.chunk.tokens * w.group);
  w.lo = w.chunk.pos_begin + UnpackRow(w.m_begin, w.group).token;
  w.hi = w.chunk.pos_begin + UnpackRow(w.m_end - 1, w.group).token;
  w.span = PrefillRowsKeys(w.chunk, w.group, w.m_begin, w.m_end, p.sliding_window);
  w.num_tiles = (w.span.end - w.span.begin + kKeys - 1) / kKeys;
  return w;
}

// The producer (one thread): each 64-key tile's K and V into the ring, a box per cache block
// (or per 64 keys of a larger one) and per 64 columns.
template <int D>
__device__ void ProduceTiles(const Args& a, const BlockWork& w, uint32_t smem) {
  const PrefillAttentionParams& p = a.p;
  const int32_t box = a.maps.box_rows;
  const int64_t table = static_cast<int64_t>(w.chunk.slot) * p.max_blocks_per_seq;
  for (int32_t it = 0; it < w.num_tiles; ++it) {
    const int stage = it % kStages;
    BarrierWait(EmptyBarrier<D>(smem, stage), ((it / kStages) & 1) ^ 1);
    const uint32_t full = FullBarrier<D>(smem, stage);
    BarrierArriveExpectTx(full, Smem<D>::kStageBytes);
    const int32_t key0 = w.span.begin + it * kKeys;
    for (int32_t j = 0; j < kKeys; j += box) {
      // A box past the span copies the span's last box again (no box ever lies outside the
      // tensor); the consumers zero its V rows, and the stale ones of the last block, before use.
      int32_t key = key0 + j;
      if (key >= w.span.end) key = (w.span.end - 1) - (w.span.end - 1) % box;
      const int64_t block = p.block_tables[table + key / p.block_tokens];
      const int32_t row = static_cast<int32_t>(
          (block * p.num_kv_heads + blockIdx.y) * p.block_tokens + key % p.block_tokens);
#pragma unroll
      for (int slab = 0; slab < Smem<D>::kSlabs; ++slab) {
        const uint32_t at = BoxOffset(slab, j);
        TensorLoad2d(KTile<D>(smem, stage) + at, &a.maps.k, slab * kBoxColumns, row, full);
        TensorLoad2d(VTile<D>(smem, stage) + at, &a.maps.v, slab * kBoxColumns, row, full);
      }
    }
  }
}

// A lane's two rows (group and group + 8 of its warp's 16): position (-1: padding, sees
// nothing, writes nothing), batch row, and the offset of its query head within the batch row.
struct LaneRows {
  int32_t pos[2];
  int32_t batch[2];
  int64_t q[2];
};

__device__ __forceinline__ LaneRows RowsOfLane(const BlockWork& w, int32_t kv_head, int32_t D,
                                               int warp, int lane) {
  LaneRows r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t m = w.m_begin + warp * kPrefillWarpRows + lane / 4 + 8 * h;
    r.pos[h] = -1;
    r.batch[h] = 0;
    r.q[h] = 0;
    if (m < w.m_end) {
      const PackedRow u = UnpackRow(m, w.group);
      r.pos[h] = w.chunk.pos_begin + u.token;
      r.batch[h] = w.chunk.row_begin + u.token;
      r.q[h] = static_cast<int64_t>(kv_head * w.group + u.head_in_group) * D;
    }
  }
  return r;
}

// Q as the A operand of S = Q K^T, one 16-column k-step per entry; padding rows are zero.
template <int D>
__device__ __forceinline__ void LoadQ(const PrefillAttentionParams& p, const LaneRows& r, int lane,
                                      uint32_t (&q)[D / 16][4]) {
  const int64_t stride = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * D;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int h = mma::RowHalfA(reg);
      q[kk][reg] = 0;
      if (r.pos[h] >= 0) {
        q[kk][reg] = *reinterpret_cast<const uint32_t*>(p.qkv + r.batch[h] * stride + r.q[h] +
                                                        kk * 16 + mma::FragA(lane, reg, 0).col);
      }
    }
  }
}

// S = Q K^T over the stage's K (hopper_layout.h: KStepDescriptor).
template <int D>
__device__ __forceinline__ void ScoreTile(const uint32_t (&q)[D / 16][4], uint32_t k_tile,
                                          float (&s)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
  }
  PinRegisters(s);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    Wgmma64x64<0>(s, q[kk], KStepDescriptor(k_tile, kk), kk > 0);
  }
  WgmmaCommit();
  WgmmaWaitAll();
  PinRegisters(s);
}

// O = alpha O + P V over the stage's V (hopper_layout.h: VStepDescriptor).
template <int D>
__device__ __forceinline__ void AccumulateTile(const float (&s)[8][4], const float (&alpha)[2],
                                               uint32_t v_tile, float (&o)[D / 64][8][4]) {
  uint32_t pa[kKeys / 16][4];
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const ScoreSource src = PFragmentSource(kk, reg);
      pa[kk][reg] = PackBf16(s[src.ntile][src.elem], s[src.ntile][src.elem + 1]);
    }
  }
#pragma unroll
  for (int slab = 0; slab < D / 64; ++slab) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[slab][n][i] *= alpha[mma::RowHalfC(i)];
    }
    PinRegisters(o[slab]);
  }
  PinRegisters(pa);
  WgmmaFence();
#pragma unroll
  for (int slab = 0; slab < D / 64; ++slab) {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      Wgmma64x64<1>(o[slab], pa[kk], VStepDescriptor(v_tile, slab, kk), true);
    }
  }
  WgmmaCommit();
  WgmmaWaitAll();
#pragma unroll
  for (int slab = 0; slab < D / 64; ++slab) PinRegisters(o[slab]);
}

// The stage's V rows from `first` on (keys past the span: the last block's rows this sequence has
// not written, another request's or never written, and the box copied again past it), zeroed by
// the warpgroup, so their weight of exactly 0 meets 0 and never an inf or a NaN (0 x inf), as the
// tiled kernel's zero fill. Under the 128-byte swizzle a key's 64 columns of a slab stay in its
// own 128-byte line (the chunks move within it), so whole lines are cleared. Generic stores into
// what the copy engine wrote and the tensor cores read next: each thread fences its stores to the
// async proxy, then the warpgroup meets before any P.V product.
template <int D>
__device__ __forceinline__ void ZeroRowsPastSpan(uint32_t v_tile, int32_t first) {
  const int32_t rows = kKeys - first;
  const int32_t chunks = rows * Smem<D>::kSlabs * (hopper::kRowBytes / 16);
  for (int32_t i = threadIdx.x; i < chunks; i += kConsumerThreads) {
    const int32_t line = i / (hopper::kRowBytes / 16), chunk = i % (hopper::kRowBytes / 16);
    const int32_t slab = line / rows, row = first + line % rows;
    StoreSharedZero16(v_tile + BoxOffset(slab, row) + chunk * 16);
  }
  FenceProxyAsyncShared();
  NamedBarrierSync(kConsumerThreads);
}

// O / l as bf16 pairs, for the lane's rows that are not padding.
template <int D>
__device__ __forceinline__ void WriteOut(const PrefillAttentionParams& p, const LaneRows& r,
                                         int lane, const float (&row_sum)[2],
                                         const float (&o)[D / 64][8][4]) {
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) inv[h] = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
#pragma unroll
  for (int slab = 0; slab < D / 64; ++slab) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; i += 2) {
        const int h = mma::RowHalfC(i);
        if (r.pos[h] < 0) continue;
        const int32_t col = slab * 64 + n * 8 + mma::FragC(lane, i).col;
        __nv_bfloat16* dst =
            p.out + static_cast<int64_t>(r.batch[h]) * p.num_heads * D + r.q[h] + col;
        *reinterpret_cast<__nv_bfloat162*>(dst) =
            __floats2bfloat162_rn(o[slab][n][i] * inv[h], o[slab][n][i + 1] * inv[h]);
      }
    }
  }
}

// The consumer warpgroup: every tile of the span, in order, each released once its products
// are done.
template <int D>
__device__ void ConsumeTiles(const PrefillAttentionParams& p, const BlockWork& w, uint32_t smem) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const LaneRows r = RowsOfLane(w, blockIdx.y, D, warp, lane);
  uint32_t q[D / 16][4];
  LoadQ<D>(p, r, lane, q);
  float o[D / 64][8][4];
#pragma unroll
  for (int slab = 0; slab < D / 64; ++slab) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[slab][n][i] = 0.0f;
    }
  }
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = p.scale * kLog2e;
  for (int32_t it = 0; it < w.num_tiles; ++it) {
    const int stage = it % kStages;
    BarrierWait(FullBarrier<D>(smem, stage), (it / kStages) & 1);
    const int32_t key0 = w.span.begin + it * kKeys;
    const TileCover cover = CoverOfTile(key0, w.lo, w.hi, p.sliding_window);
    if (cover != TileCover::kSkip) {
      // The same for the whole warpgroup (the barrier inside needs all 128 threads).
      if (key0 + kKeys > w.span.end) ZeroRowsPastSpan<D>(VTile<D>(smem, stage), w.span.end - key0);
      float s[8][4], alpha[2];
      ScoreTile<D>(q, KTile<D>(smem, stage), s);
      MaskedSoftmaxTile(s, r.pos, lane, key0, cover, p.sliding_window, scale_log2, row_max, row_sum,
                        alpha);
      AccumulateTile<D>(s, alpha, VTile<D>(smem, stage), o);
    }
    if (lane == 0) BarrierArrive(EmptyBarrier<D>(smem, stage));
  }
  WriteOut<D>(p, r, lane, row_sum, o);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2) HopperPrefillKernel(const __grid_constant__ Args a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  // Rounded up at run time (kBytes has the room): a declared 1 KiB alignment would let the
  // compiler drop the round-up on a promise the launch does not make.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t smem = (hopper::SharedAddress(smem_raw) + 1023u) & ~1023u;
  const BlockWork w = WorkOf(a.p);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(FullBarrier<D>(smem, s), 1);
      BarrierInit(EmptyBarrier<D>(smem, s), kConsumerThreads / 32);
    }
    BarrierInitFence();
  }
  __syncthreads();
  if (threadIdx.x < kConsumerThreads) {
    ConsumeTiles<D>(a.p, w, smem);
  } else if (threadIdx.x == kConsumerThreads) {
    ProduceTiles<D>(a, w, smem);
  }
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, through the runtime (no link to libcuda); null when absent.
EncodeTiled TensorMapEncoder() {
  static const EncodeTiled encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encoder;
}

cudaError_t EncodeCacheMap(EncodeTiled encode, const void* cache, int32_t rows, int32_t head_dim,
                           int32_t box_rows, CUtensorMap* map) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(head_dim) * 2};
  const cuuint32_t box[2] = {kBoxColumns, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(cache), dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <int D>
cudaError_t LaunchForDim(const Args& a, cudaStream_t stream) {
  const dim3 grid(a.p.num_tiles, a.p.num_kv_heads);
  return Launch(HopperPrefillKernel<D>, grid, kThreads, Smem<D>::kBytes, stream, a);
}

}  // namespace

bool HopperPrefillSupported(int device_major, int device_minor, int32_t head_dim,
                            int32_t block_tokens, bool fp8_cache) {
  const bool pow2 = block_tokens >= 8 && (block_tokens & (block_tokens - 1)) == 0;
  return device_major == 9 && device_minor == 0 && (head_dim == 64 || head_dim == 128) &&
         !fp8_cache && pow2;
}

cudaError_t MakePrefillTensorMaps(const void* k_cache, const void* v_cache, int64_t blocks,
                                  int32_t num_kv_heads, int32_t block_tokens, int32_t head_dim,
                                  PrefillTensorMaps* maps) {
  const int64_t rows = blocks * num_kv_heads * block_tokens;
  if (!HopperPrefillSupported(9, 0, head_dim, block_tokens, false) || rows <= 0 ||
      rows > INT32_MAX - kKeys) {
    return cudaErrorInvalidValue;
  }
  const EncodeTiled encode = TensorMapEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  maps->rows = static_cast<int32_t>(rows);
  maps->box_rows = block_tokens < kKeys ? block_tokens : kKeys;
  const cudaError_t err =
      EncodeCacheMap(encode, k_cache, maps->rows, head_dim, maps->box_rows, &maps->k);
  if (err != cudaSuccess) return err;
  return EncodeCacheMap(encode, v_cache, maps->rows, head_dim, maps->box_rows, &maps->v);
}

cudaError_t PrepareHopperPrefillAttention(int32_t head_dim) {
  if (head_dim == 64) {
    return cudaFuncSetAttribute(HopperPrefillKernel<64>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<64>::kBytes);
  }
  if (head_dim == 128) {
    return cudaFuncSetAttribute(HopperPrefillKernel<128>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<128>::kBytes);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHopperPrefillAttention(const PrefillAttentionParams& params,
                                         const PrefillTensorMaps& maps, cudaStream_t stream) {
  if (params.num_tiles <= 0) return cudaSuccess;
  const int32_t box = params.block_tokens < kKeys ? params.block_tokens : kKeys;
  if (params.kv.fp8 || params.num_kv_heads <= 0 || params.num_heads % params.num_kv_heads != 0 ||
      maps.box_rows != box || box < 8) {
    return cudaErrorInvalidValue;  // the maps are not this cache's
  }
  Args a{params, maps};
  a.p.tma = nullptr;  // a host pointer; the kernel has the maps themselves
  if (params.head_dim == 64) return LaunchForDim<64>(a, stream);
  if (params.head_dim == 128) return LaunchForDim<128>(a, stream);
  return cudaErrorInvalidValue;
}

}  // namespace llm::kernels
