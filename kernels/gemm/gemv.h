// Matrix-vector products for decode steps of a few rows: y[r, o] = sum_i x[r, i] * w[o, i]
// (+ bias[o]), x and w bf16, fp32 accumulation, y bf16 or fp32 (the GemmArgs contract of
// gemm.h). Such a product is bound by reading w once; one warp per output streams w's row with
// 16-byte loads and applies it to every row of x, so each weight byte is read once per step.
// Reference: runner::MatMulPacked (and the double-precision product in the tests).
//
// Gated (the MLP's gate/up product with SiLU-and-multiply as its epilogue): w has 2 * out rows,
// the gate's then the up's; the warp of output o streams rows o and out + o and writes
// y[r, o] = bf16(silu(bf16(gate)) * bf16(up)), the bits of the product followed by
// LaunchSiluMul (activation.h), without the [rows, 2 * out] intermediate or the extra launch.
//
// RoPE/KV (the q/k/v product with LaunchRopeKv, rope_kv.h, as its epilogue): a warp computes the
// pair of outputs (i, i + head_dim / 2) of one head and writes what the product followed by
// LaunchRopeKv would leave, bit for bit: y holds the product (bf16, bias added) with q rotated
// in place; k rotated and v go into the layer's paged cache (rows with a slot only).
//
// Norm prologue (up to kGemvNormMaxRows rows, with the gated or RoPE/KV modes): x is
// RMSNorm(norm_x) with norm_weight, computed by each warp as it streams, not read: the bits
// LaunchRmsNorm (rmsnorm.h, no delta; its RmsNormVecKernel, which it takes for such rows with
// 8-byte aligned weights and output) would write to x, so the norm's launch disappears. Each
// warp first sums its rows' squares in the norm kernel's order (rmsnorm.cuh), then rounds every
// normed element to bf16 as it goes. That first pass is paid once per wave of blocks, so it
// pays for the q/k/v and gate/up products (a wave or two) and not for a vocabulary-wide lm head
// (15 waves at 128k ids on an H100), whose norm stays a kernel; so no plain mode.
//
// Accumulate (plain fp32 mode): y[r, o] += x . w[o] (+ bias[o]): the residual add that
// LaunchRmsNorm's delta would do next, done where the delta is made (the same bits:
// y + (sum + bias)).
//
// FP8 weights (GemvParams::w.fp8(), every mode but the norm prologue; W8A16): w is E4M3 with row
// or 128x128 block scales (weight.h), x stays bf16. A lane's 16-byte vector
// holds 16 weights, so a lane-round covers 512 inputs (in a multiple of 16). With row scales the
// warp's sum is multiplied by the row's scale before the bias and the epilogue; with block
// scales each vector's 16 products are summed, then added times its block's scale (a vector
// lies in one 128-input block). Decode steps read the weights once in half the bytes, and keep
// every fusion above but the norm prologue; the activations are not quantised (the prompt's
// products, on cuBLASLt, quantise them: gemm.h). Reference: the dequantised weight times x in
// double. No norm prologue: it reads 6 bytes of residual and norm weight from L1 for every
// weight byte (3 with bf16 weights), and on an H200 that made llama-3-8b's FP8 gate/up GEMV
// L1-bound (L1 88% busy, DRAM 41%) and the batch-1 step 3.78 ms against 2.98 ms with the norm
// as a kernel (2026-11-26, docs/cuda-measurements.md).
//
// Split (GemvParams::splits, every mode): a product of few weight rows for the device (at batch
// 1, fewer warps than the multiprocessors hold) spreads each output over 2 or 4 warps of one
// block, which add their sums through shared memory in a fixed order; Gemm picks the split from
// the weight matrix (GemvSplits).
#ifndef LLM_KERNELS_GEMM_GEMV_H_
#define LLM_KERNELS_GEMM_GEMV_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/elementwise/rmsnorm_order.h"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/gemm/weight.h"

namespace llm::kernels {

inline constexpr int32_t kGemvMaxRows = 8;
// At most this many warps share one output's inputs (GemvParams::splits: 1, 2 or 4).
inline constexpr int32_t kGemvMaxSplits = 4;
inline constexpr int32_t kGemvWarpsPerBlock = 8;
// The norm prologue re-reads each row's fp32 residual (4 bytes per input, twice) in every block,
// so it is kept to the smallest batches, where the norm's own launch costs the most.
inline constexpr int32_t kGemvNormMaxRows = 2;
// RmsNormVecKernel's widest row (RmsNormVecFloat4s): 8 float4 for each of its threads, 8192.
inline constexpr int32_t kGemvNormMaxIn = 4 * 8 * kRmsNormThreads;

struct GemvParams {
  const __nv_bfloat16* x;  // [rows, in]
  Weight w;                // [out, in]: bf16, or FP8 with row or block scales (weight.h)
  const void* bias;        // [out]: fp32 when out_f32, else bf16; or null
  void* y;                 // [rows, out]: fp32 when out_f32, else bf16
  int32_t rows;            // 1..kGemvMaxRows
  int32_t in;              // a multiple of 8 (bf16 weights) or 16 (FP8)
  int32_t out;
  bool out_f32;
  bool gated = false;  // y bf16; bias (if any) has 2 * out entries
  // RoPE/KV epilogue: y bf16 is `rope.qkv`, out = (num_heads + 2 * num_kv_heads) * head_dim.
  bool rope_kv = false;
  RopeKvParams rope{};
  // Norm prologue: x is ignored and RMSNorm(norm_x) * norm_weight used instead.
  const float* norm_x = nullptr;               // [rows, in] fp32 residual stream
  const __nv_bfloat16* norm_weight = nullptr;  // [in]
  float norm_eps = 0.0f;
  bool accumulate = false;  // plain fp32 mode: y += product (+ bias)
  // Warps that share each output's (each RoPE pair's) inputs: 1, 2 or 4. With S, the S warps of
  // a group take every S-th lane-round of the row's 16-byte vectors (GemvWarpOf, GemvVecs), sum
  // their lanes as one warp does, and the group's first warp adds the S sums in order and writes
  // the output: more warps in flight for a product with few outputs, in a fixed order (so the
  // bits depend on S and not on the rows or the batch). Gemm picks S with GemvSplits.
  int32_t splits = 1;
};

// Where warp `warp_in_block` of block `block` works, with `splits` warps an output: the output
// (RoPE/KV mode: the pair) `unit`, and its part of the row's inputs.
struct GemvWarp {
  int32_t unit;
  int32_t part;
};

__host__ __device__ inline GemvWarp GemvWarpOf(int32_t block, int32_t warp_in_block,
                                               int32_t splits) {
  return {block * (kGemvWarpsPerBlock / splits) + warp_in_block / splits, warp_in_block % splits};
}

// The 16-byte vectors of a row that lane `lane` of part `part` reads: first, first + stride,
// ... below the row's in / 8.
struct GemvVecs {
  int32_t first;
  int32_t stride;
};

__host__ __device__ inline GemvVecs GemvVecsOf(int32_t part, int32_t lane, int32_t splits) {
  return {part * 32 + lane, 32 * splits};
}

// Blocks of a launch with `units` outputs (RoPE/KV mode: out / 2 pairs) and `splits`.
inline int32_t GemvBlocks(int32_t units, int32_t splits) {
  const int32_t per_block = kGemvWarpsPerBlock / splits;
  return (units + per_block - 1) / per_block;
}

// The split for a product of `weight_rows` rows of `in` inputs (the rows w holds: 2 * out when
// gated) on a device of `sms` multiprocessors: a product with fewer than `rows_per_sm` weight
// rows a multiprocessor (0: none) takes 4 warps an output, or 2 where its input is too short
// for each of 4 warps to keep half a lane-round (16 vectors); others one. It depends on the
// weight matrix alone, not on the rows of x, so a product gives the same bits at every batch
// size and in its fused and unfused forms (the same w).
//
// Measured on an H100 (docs/cuda-measurements.md), batch-1 steps: qwen2-0.5b's q/k/v, o and
// down (7-9 rows a multiprocessor) split took its step from 0.98 to 0.84 ms; llama-3.2-1b's
// (16-23) from 1.25 to 1.24; llama-3-8b's (31-47) split made it 1% slower, and so did
// llama-3.2-1b's q/k/v and o without its down. kGemvRowsPerSm sits between those.
inline constexpr int32_t kGemvRowsPerSm = 24;

// Inputs per 16-byte weight vector: 8 bf16 or 16 E4M3.
inline int32_t GemvVecInputs(bool fp8) { return fp8 ? 16 : 8; }

inline int32_t GemvSplits(int64_t weight_rows, int32_t in, int32_t sms,
                          int32_t rows_per_sm = kGemvRowsPerSm, int32_t vec_inputs = 8) {
  if (weight_rows >= int64_t{rows_per_sm} * sms) return 1;
  const int32_t vecs = in / vec_inputs;
  return vecs >= 16 * 4 ? 4 : vecs >= 16 * 2 ? 2 : 1;
}

// RoPE/KV mode: warp w computes outputs `first` = head * head_dim + pair and
// `second` = first + head_dim / 2 of head w / (head_dim / 2), pair w % (head_dim / 2): the
// pair a RoPE item rotates (RopeKvItem); out / 2 warps cover every output once.
struct GemvRopePair {
  int32_t head;
  int32_t pair;
  int32_t first;
  int32_t second;
};

__host__ __device__ inline GemvRopePair RopePairOfWarp(int32_t warp, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  const int32_t head = warp / half, pair = warp % half;
  return {head, pair, head * head_dim + pair, head * head_dim + pair + half};
}

// Whether LaunchGemv takes `p`: rows in [1, kGemvMaxRows], splits 1, 2 or 4, in a multiple of 8
// (16 for FP8 weights, which need their scales), x and w 16-byte aligned, a bf16 output when gated
// or with RoPE/KV (then out matches rope's shape and y is rope.qkv), not both; with the norm
// prologue, bf16 weights, rows <= kGemvNormMaxRows, in <= kGemvNormMaxIn, norm_x and norm_weight
// 16-byte aligned and the gated or RoPE/KV mode (x may then be null); accumulate only in the
// plain fp32 mode.
bool GemvSupports(const GemvParams& p);

cudaError_t LaunchGemv(const GemvParams& p, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_GEMV_H_
