// The GEMV kernel template (gemv.h), included by the translation units that instantiate it, one
// per weight kind (gemv_bf16.cu, gemv_fp8_row.cu, gemv_fp8_block.cu), so they compile in
// parallel. Internal to kernels/gemm.
#ifndef LLM_KERNELS_GEMM_GEMV_KERNEL_CUH_
#define LLM_KERNELS_GEMM_GEMV_KERNEL_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/common.cuh"
#include "kernels/elementwise/rmsnorm.cuh"
#include "kernels/gemm/gemv.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace gemv_internal {

constexpr int kWarpsPerBlock = kGemvWarpsPerBlock;
// 128-byte lines of each weight row a warp prefetches before waiting for the kernel before it.
constexpr int kPrefetchLines = 16;

__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Eight bf16 (one 16-byte vector) as floats.
__device__ __forceinline__ void Unpack8(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[k]));
    f[2 * k] = pair.x;
    f[2 * k + 1] = pair.y;
  }
}

// Sixteen E4M3 weights (one 16-byte vector, byte j the j-th) as floats, exactly.
__device__ __forceinline__ void UnpackE4M3x16(const uint4& v, float* f) {
  E4M3x4ToFloats(v.x, f);
  E4M3x4ToFloats(v.y, f + 4);
  E4M3x4ToFloats(v.z, f + 8);
  E4M3x4ToFloats(v.w, f + 12);
}

// The weight type a GEMV instance streams: bf16, or E4M3 with row or 128x128 block scales.
enum WeightKind { kWBf16, kWFp8Row, kWFp8Block };

// Eight normed inputs from two float4 of the residual row and eight norm weights: the bits
// RmsNormVecKernel writes (rmsnorm.cu), back as floats.
__device__ __forceinline__ void Normed8(const float4& a, const float4& b, const float* g, float inv,
                                        float* f) {
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = ToFloat(ToBf16(g[k] * (v[k] * inv)));
}

// One warp per output o: lane l takes the 16-byte vectors l, l + 32, ... of w's row o (read
// once, not kept in L1: each weight is used by this warp only) and the same vectors of every
// row of x (read by all warps, so cached), then the warp sums its lanes with xor shuffles
// (every lane gets the same bits) and lane r writes row r. Gated: the warp also streams row
// out + o (the up projection) and writes silu(gate) * up. RoPE: the warp streams a head's rows
// i and i + half and rotates and writes the pair (RopeEpilogue). NORM: x's vectors are made
// from the fp32 residual rows and the norm weights (Normed8) after the warp has summed each
// row's squares (RmsSumSquaresInWarp). SPLIT > 1: SPLIT warps share the output
// (GemvParams::splits); each streams its lane-rounds, and after the block's barrier the group's
// first warp adds their sums in order and goes on to the epilogue alone.
enum Epilogue { kPlain, kGated, kRope };

// RoPE/KV mode's epilogue for row r: the pair (a, b) = outputs (o, o + half) of head `head`,
// already rounded to bf16 as the product writes them; what RopeKvItem then does to them.
__device__ __forceinline__ void RopeEpilogue(const GemvParams& p, int r, int32_t head, int32_t i,
                                             float a, float b) {
  const RopeKvParams& rp = p.rope;
  const int32_t half = rp.head_dim / 2, rot_heads = rp.num_heads + rp.num_kv_heads;
  __nv_bfloat16* row = static_cast<__nv_bfloat16*>(p.y) + static_cast<int64_t>(r) * p.out;
  __nv_bfloat16* h = row + head * rp.head_dim;
  const int32_t slot = rp.row_slot[r];
  if (slot < 0 || head >= rp.num_heads) {  // k and v stay as the product wrote them, padding too
    h[i] = ToBf16(a);
    h[i + half] = ToBf16(b);
  }
  if (slot < 0) return;  // padding: LaunchRopeKv skips the row
  const int32_t pos = rp.row_pos[r];
  if (head < rot_heads) {
    const float c = rp.cos_table[static_cast<int64_t>(pos) * half + i];
    const float s = rp.sin_table[static_cast<int64_t>(pos) * half + i];
    float ra, rb;
    RotatePair(a, b, c, s, &ra, &rb);
    if (head < rp.num_heads) {
      h[i] = ToBf16(ra);
      h[i + half] = ToBf16(rb);
    } else {
      StoreCachePair(rp, rp.k_cache, rp.kv.k_scale, slot, pos, head - rp.num_heads, i, ra, rb);
    }
  } else {
    StoreCachePair(rp, rp.v_cache, rp.kv.v_scale, slot, pos, head - rot_heads, i, a, b);
  }
}

// The inputs of 16-byte weight vector v for row r: E (8 or 16) floats of x, or of the norm
// prologue (two or four float4 of the residual row, the norm weights' matching vectors).
template <int E, bool NORM>
__device__ __forceinline__ void InputsOf(const GemvParams& p, int r, int32_t v, float inv,
                                         const float* gf, float* xf) {
  const int32_t n4 = p.in / 4;
#pragma unroll
  for (int h = 0; h < E / 8; ++h) {
    const int32_t v8 = v * (E / 8) + h;  // the 8-input vector
    if constexpr (NORM) {
      const float4* row =
          reinterpret_cast<const float4*>(p.norm_x) + static_cast<int64_t>(r) * n4 + 2 * v8;
      Normed8(__ldg(row), __ldg(row + 1), gf + 8 * h, inv, xf + 8 * h);
    } else {
      const uint4* x = reinterpret_cast<const uint4*>(p.x);
      Unpack8(__ldg(x + static_cast<int64_t>(r) * (p.in / 8) + v8), xf + 8 * h);
    }
  }
}

template <int ROWS, bool F32, int MODE, bool NORM, int SPLIT, int WK>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) GemvKernel(GemvParams p) {
  // PDL: before the wait (launch.cuh), only the parameters and the weights are read: no earlier
  // kernel writes them, so the start of this warp's rows is fetched into L2 while the kernel
  // before still runs.
  constexpr bool GATED = MODE == kGated;
  constexpr bool TWO = MODE != kPlain;  // two weight rows per warp
  const int warp_in_block = threadIdx.x / 32;
  const GemvWarp at_warp = GemvWarpOf(blockIdx.x, warp_in_block, SPLIT);
  const int32_t warp = at_warp.unit;
  const int lane = threadIdx.x % 32;
  // Plain and gated: output o = warp (gated: and its up row out + o). RoPE: RopePairOfWarp.
  GemvRopePair rp{0, 0, warp, warp + p.out};
  if constexpr (MODE == kRope) rp = RopePairOfWarp(warp, p.rope.head_dim);
  const int32_t head = rp.head, pair = rp.pair, o = rp.first, o2 = rp.second;
  // The whole warp leaves together; with SPLIT > 1 only after the block's barrier below.
  const bool active = (MODE == kRope ? warp * 2 : warp) < p.out;
  if constexpr (SPLIT == 1) {
    if (!active) return;
  }
  constexpr int E = WK == kWBf16 ? 8 : 16;  // inputs per 16-byte weight vector
  constexpr int kBytes = WK == kWBf16 ? 2 : 1;
  const int32_t vecs = p.in / E;
  const char* w_bytes = static_cast<const char*>(p.w.data);
  const uint4* w =
      reinterpret_cast<const uint4*>(w_bytes + static_cast<int64_t>(o) * p.in * kBytes);
  const uint4* w_up =
      reinterpret_cast<const uint4*>(w_bytes + static_cast<int64_t>(o2) * p.in * kBytes);
  // Block scales: the rows of o's and o2's 128-row blocks.
  const float* block_scale = p.w.scale + int64_t{o / kFp8BlockSize} * BlockScaleStride(p.in);
  const float* block_scale_up = p.w.scale + int64_t{o2 / kFp8BlockSize} * BlockScaleStride(p.in);
  if (active && at_warp.part == 0 && lane < kPrefetchLines && lane * 128 < p.in * kBytes) {
    PrefetchL2(reinterpret_cast<const char*>(w) + lane * 128);
    if constexpr (TWO) PrefetchL2(reinterpret_cast<const char*>(w_up) + lane * 128);
  }
  AfterPriorGrids();
  const float4* norm_x = reinterpret_cast<const float4*>(p.norm_x);
  const uint4* norm_w = reinterpret_cast<const uint4*>(p.norm_weight);
  const int32_t n4 = p.in / 4;
  constexpr int kUpRows = TWO ? ROWS : 1;
  float acc[ROWS], acc_up[kUpRows];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
#pragma unroll
  for (int r = 0; r < kUpRows; ++r) acc_up[r] = 0.0f;
  if (active) {
    float inv[NORM ? ROWS : 1];
    if constexpr (NORM) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        inv[r] = RmsInverse(RmsSumSquaresInWarp(norm_x + static_cast<int64_t>(r) * n4, n4), p.in,
                            p.norm_eps);
      }
    }
    const GemvVecs walk = GemvVecsOf(at_warp.part, lane, SPLIT);
#pragma unroll 4
    for (int32_t v = walk.first; v < vecs; v += walk.stride) {
      float wf[E], uf[E], gf[E];
      if constexpr (WK == kWBf16) {
        Unpack8(__ldcs(w + v), wf);
        if constexpr (TWO) Unpack8(__ldcs(w_up + v), uf);
      } else {
        UnpackE4M3x16(__ldcs(w + v), wf);
        if constexpr (TWO) UnpackE4M3x16(__ldcs(w_up + v), uf);
      }
      if constexpr (NORM) {
#pragma unroll
        for (int h = 0; h < E / 8; ++h) Unpack8(__ldg(norm_w + v * (E / 8) + h), gf + 8 * h);
      }
      // Block scales: this vector's 16 inputs lie in block v / 8.
      float s = 1.0f, s_up = 1.0f;
      if constexpr (WK == kWFp8Block) {
        s = __ldg(block_scale + v / 8);
        if constexpr (TWO) s_up = __ldg(block_scale_up + v / 8);
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float xf[E];
        float inv_r = 0.0f;
        if constexpr (NORM) inv_r = inv[r];
        InputsOf<E, NORM>(p, r, v, inv_r, gf, xf);
        if constexpr (WK == kWFp8Block) {
          float part = 0.0f;
#pragma unroll
          for (int k = 0; k < E; ++k) part = fmaf(xf[k], wf[k], part);
          acc[r] = fmaf(part, s, acc[r]);
          if constexpr (TWO) {
            float part_up = 0.0f;
#pragma unroll
            for (int k = 0; k < E; ++k) part_up = fmaf(xf[k], uf[k], part_up);
            acc_up[r] = fmaf(part_up, s_up, acc_up[r]);
          }
        } else {
#pragma unroll
          for (int k = 0; k < E; ++k) acc[r] = fmaf(xf[k], wf[k], acc[r]);
          if constexpr (TWO) {
#pragma unroll
            for (int k = 0; k < E; ++k) acc_up[r] = fmaf(xf[k], uf[k], acc_up[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = GroupSum(acc[r], 32);
    if constexpr (TWO) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc_up[r] = GroupSum(acc_up[r], 32);
    }
  }
  if constexpr (SPLIT > 1) {
    // Each warp's sums (every lane holds them) to shared memory; the group's first warp adds
    // the parts in order 0, 1, ..., SPLIT - 1 and goes on alone.
    __shared__ float part_sums[kWarpsPerBlock][2][ROWS];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        part_sums[warp_in_block][0][r] = acc[r];
        if constexpr (TWO) part_sums[warp_in_block][1][r] = acc_up[r];
      }
    }
    __syncthreads();
    if (!active || at_warp.part != 0) return;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float sum = part_sums[warp_in_block][0][r];
#pragma unroll
      for (int k = 1; k < SPLIT; ++k) sum += part_sums[warp_in_block + k][0][r];
      acc[r] = sum;
      if constexpr (TWO) {
        float sum_up = part_sums[warp_in_block][1][r];
#pragma unroll
        for (int k = 1; k < SPLIT; ++k) sum_up += part_sums[warp_in_block + k][1][r];
        acc_up[r] = sum_up;
      }
    }
  }
  // Every lane holds every row's sums (xor shuffles): lane r writes row r.
  if (lane >= ROWS) return;
  const int r = lane;
  float sum = 0.0f, sum_up = 0.0f;
#pragma unroll
  for (int k = 0; k < ROWS; ++k) {
    if (k == r) {
      sum = acc[k];
      if constexpr (TWO) sum_up = acc_up[k];
    }
  }
  if constexpr (WK == kWFp8Row) {
    sum *= __ldg(p.w.scale + o);
    if constexpr (TWO) sum_up *= __ldg(p.w.scale + o2);
  }
  const int64_t at = static_cast<int64_t>(r) * p.out + o;
  if constexpr (MODE == kRope) {
    const auto* bias = static_cast<const __nv_bfloat16*>(p.bias);
    const float ba = bias != nullptr ? ToFloat(bias[o]) : 0.0f;
    const float bb = bias != nullptr ? ToFloat(bias[o2]) : 0.0f;
    RopeEpilogue(p, r, head, pair, ToFloat(ToBf16(sum + ba)), ToFloat(ToBf16(sum_up + bb)));
  } else if constexpr (GATED) {
    const auto* bias = static_cast<const __nv_bfloat16*>(p.bias);
    const float bg = bias != nullptr ? ToFloat(bias[o]) : 0.0f;
    const float bu = bias != nullptr ? ToFloat(bias[p.out + o]) : 0.0f;
    // Rounded to bf16 first, as the product's output that SiluMulKernel would read.
    const float g = ToFloat(ToBf16(sum + bg));
    const float u = ToFloat(ToBf16(sum_up + bu));
    static_cast<__nv_bfloat16*>(p.y)[at] = ToBf16(SiluTimes(g, u));
  } else if constexpr (F32) {
    const float b = p.bias != nullptr ? static_cast<const float*>(p.bias)[o] : 0.0f;
    float* y = static_cast<float*>(p.y);
    // Accumulate: the residual add as RmsNormVecKernel does it, x + delta with delta = sum + b.
    y[at] = p.accumulate ? y[at] + (sum + b) : sum + b;
  } else {
    const float b =
        p.bias != nullptr ? ToFloat(static_cast<const __nv_bfloat16*>(p.bias)[o]) : 0.0f;
    static_cast<__nv_bfloat16*>(p.y)[at] = ToBf16(sum + b);
  }
}

template <int ROWS, int SPLIT, int WK>
cudaError_t LaunchRowsSplit(const GemvParams& p, cudaStream_t stream) {
  const int32_t units = p.rope_kv ? p.out / 2 : p.out;
  const dim3 grid(GemvBlocks(units, SPLIT));
  const dim3 block(kWarpsPerBlock * 32);
  if (p.norm_x != nullptr) {  // GemvSupports: bf16 weights, gated or RoPE/KV, few rows
    if constexpr (ROWS <= kGemvNormMaxRows && WK == kWBf16) {
      if (p.rope_kv) {
        return Launch(GemvKernel<ROWS, false, kRope, true, SPLIT, WK>, grid, block, 0, stream, p);
      }
      return Launch(GemvKernel<ROWS, false, kGated, true, SPLIT, WK>, grid, block, 0, stream, p);
    } else {
      return cudaErrorInvalidValue;
    }
  }
  if (p.rope_kv) {
    return Launch(GemvKernel<ROWS, false, kRope, false, SPLIT, WK>, grid, block, 0, stream, p);
  }
  if (p.gated) {
    return Launch(GemvKernel<ROWS, false, kGated, false, SPLIT, WK>, grid, block, 0, stream, p);
  }
  if (p.out_f32) {
    return Launch(GemvKernel<ROWS, true, kPlain, false, SPLIT, WK>, grid, block, 0, stream, p);
  }
  return Launch(GemvKernel<ROWS, false, kPlain, false, SPLIT, WK>, grid, block, 0, stream, p);
}

template <int ROWS, int WK>
cudaError_t LaunchRowsKind(const GemvParams& p, cudaStream_t stream) {
  switch (p.splits) {
    case 2:
      return LaunchRowsSplit<ROWS, 2, WK>(p, stream);
    case 4:
      return LaunchRowsSplit<ROWS, 4, WK>(p, stream);
    default:
      return LaunchRowsSplit<ROWS, 1, WK>(p, stream);
  }
}

// Every row count's kernels of weight kind WK.
template <int WK>
cudaError_t LaunchKind(const GemvParams& p, cudaStream_t stream) {
  switch (p.rows) {
    case 1:
      return LaunchRowsKind<1, WK>(p, stream);
    case 2:
      return LaunchRowsKind<2, WK>(p, stream);
    case 3:
      return LaunchRowsKind<3, WK>(p, stream);
    case 4:
      return LaunchRowsKind<4, WK>(p, stream);
    case 5:
      return LaunchRowsKind<5, WK>(p, stream);
    case 6:
      return LaunchRowsKind<6, WK>(p, stream);
    case 7:
      return LaunchRowsKind<7, WK>(p, stream);
    default:
      return LaunchRowsKind<8, WK>(p, stream);
  }
}

// Defined one per translation unit.
cudaError_t LaunchBf16(const GemvParams& p, cudaStream_t stream);
cudaError_t LaunchFp8Row(const GemvParams& p, cudaStream_t stream);
cudaError_t LaunchFp8Block(const GemvParams& p, cudaStream_t stream);

}  // namespace gemv_internal
}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_GEMV_KERNEL_CUH_
