// The typed operands of a matrix product (the dtype seam): a weight is bf16, or FP8 E4M3 with
// its scales and their layout; an FP8 product's input rows are E4M3 with per-row or per-128-input
// scales. Gemm (gemm.h) picks the kernel from these types, so the layer wiring names products,
// not formats. Value of weight element (o, i) = e4m3 * scale (common/fp8.h).
//
// Layouts (those cuBLASLt's FP8 scale modes read, so the GEMV and cuBLASLt share one copy):
//   WeightScales::kRow    scale[o], one float per output row ([out]; a per-tensor scale is
//                         stored once per row of its shard) - cuBLASLt OUTER_VEC_32F
//   WeightScales::kBlock  scale[(o / 128) * BlockScaleStride(in) + i / 128]: row-major
//                         [ceil(out/128), ceil(in/128)] with each row padded to a multiple of 4
//                         - cuBLASLt BLK128x128_32F
//   ActivationScales::kRow    scale[r], one per input row - OUTER_VEC_32F
//   ActivationScales::kGroup  scale[(i / 128) * ld + r]: per 128 inputs of a row, the rows of a
//                             group contiguous (ld = Fp8GemmRows(rows)) - VEC128_32F
// An FP8 product runs on Fp8GemmRows(rows) rows (a multiple of 8, as cuBLASLt's block modes
// need): its input and output buffers hold that many rows; the extra ones are never read.
#ifndef LLM_KERNELS_GEMM_WEIGHT_H_
#define LLM_KERNELS_GEMM_WEIGHT_H_

#include <cuda_bf16.h>

#include <cstdint>

namespace llm::kernels {

inline constexpr int32_t kFp8BlockSize = 128;

enum class WeightType : uint8_t { kBf16, kFp8 };
enum class WeightScales : uint8_t { kNone, kRow, kBlock };
enum class ActivationScales : uint8_t { kRow, kGroup };

struct Weight {
  WeightType type = WeightType::kBf16;
  const void* data = nullptr;  // [out, in]: bf16, or e4m3 bytes
  WeightScales scales = WeightScales::kNone;
  const float* scale = nullptr;  // layout above

  Weight() = default;
  // A bf16 weight (every product before FP8 named its weight by its pointer).
  Weight(const __nv_bfloat16* bf16) : data(bf16) {}  // NOLINT(google-explicit-constructor)
  static Weight Fp8(const uint8_t* e4m3, WeightScales scales, const float* scale) {
    Weight w;
    w.type = WeightType::kFp8;
    w.data = e4m3;
    w.scales = scales;
    w.scale = scale;
    return w;
  }
  const __nv_bfloat16* bf16() const { return static_cast<const __nv_bfloat16*>(data); }
  const uint8_t* e4m3() const { return static_cast<const uint8_t*>(data); }
  bool fp8() const { return type == WeightType::kFp8; }
};

// An FP8 product's input: E4M3 rows and their scales (layout above).
struct Fp8Input {
  const uint8_t* x = nullptr;  // [Fp8GemmRows(rows), in]
  const float* scale = nullptr;
  ActivationScales scales = ActivationScales::kRow;
};

#if defined(__CUDACC__)
#define LLM_WEIGHT_HD __host__ __device__
#else
#define LLM_WEIGHT_HD
#endif

LLM_WEIGHT_HD inline int32_t Fp8Blocks(int32_t n) {
  return (n + kFp8BlockSize - 1) / kFp8BlockSize;
}
// Floats per row of a block-scaled weight's scales: ceil(in/128) rounded up to 4.
LLM_WEIGHT_HD inline int32_t BlockScaleStride(int32_t in) { return (Fp8Blocks(in) + 3) / 4 * 4; }
LLM_WEIGHT_HD inline int64_t BlockScaleCount(int32_t out, int32_t in) {
  return int64_t{Fp8Blocks(out)} * BlockScaleStride(in);
}
// The rows an FP8 product of `rows` rows runs on.
LLM_WEIGHT_HD inline int32_t Fp8GemmRows(int32_t rows) { return (rows + 7) / 8 * 8; }

// The scale of weight element (o, i).
LLM_WEIGHT_HD inline float WeightScaleAt(const float* scale, WeightScales layout, int32_t in,
                                         int32_t o, int32_t i) {
  return layout == WeightScales::kRow
             ? scale[o]
             : scale[int64_t{o / kFp8BlockSize} * BlockScaleStride(in) + i / kFp8BlockSize];
}

// The scale of input element (r, i) of an FP8 input of `rows` rows.
LLM_WEIGHT_HD inline float InputScaleAt(const float* scale, ActivationScales layout, int32_t rows,
                                        int32_t r, int32_t i) {
  return layout == ActivationScales::kRow
             ? scale[r]
             : scale[int64_t{i / kFp8BlockSize} * Fp8GemmRows(rows) + r];
}

#undef LLM_WEIGHT_HD

}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_WEIGHT_H_
