// FP8 E4M3 quantisation on the host: weights (per tensor, output channel or 128x128 block) as
// `llm-cli quantize` and engine.quantization: fp8 make them, and the activations' round trip
// (per token, per 1x128 group or with a static scale) that the CPU reference applies before
// each FP8 product, so it computes what the GPU's FP8 kernels compute (common/fp8.h: scale =
// amax / 448, values divided by the scale and rounded to nearest even, saturating).
#ifndef LLM_WORKER_MODEL_FP8_QUANT_H_
#define LLM_WORKER_MODEL_FP8_QUANT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/model/quant_scheme.h"

namespace llm {
class ThreadPool;
}

namespace llm::model {

inline constexpr int32_t kFp8Block = 128;  // block tiles and activation groups

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Which of a weight's scales covers element (r, c) of a [out, in] weight (layouts as Fp8Matrix's).
inline size_t Fp8ScaleIndex(WeightScaling scaling, int64_t in, int64_t r, int64_t c) {
  switch (scaling) {
    case WeightScaling::kTensor:
      return 0;
    case WeightScaling::kChannel:
      return static_cast<size_t>(r);
    default:
      return static_cast<size_t>(r / kFp8Block * CeilDiv(in, kFp8Block) + c / kFp8Block);
  }
}

// An FP8 weight matrix [out, in] and its scales: kTensor [1], kChannel [out], kBlock
// [ceil(out/128), ceil(in/128)] row-major. Value (r, c) = e4m3[r * in + c] * ScaleAt(r, c).
struct Fp8Matrix {
  int64_t out = 0;
  int64_t in = 0;
  WeightScaling scaling = WeightScaling::kChannel;
  std::vector<uint8_t> e4m3;  // [out, in]
  std::vector<float> scales;

  float ScaleAt(int64_t r, int64_t c) const { return scales[Fp8ScaleIndex(scaling, in, r, c)]; }
  // Row r dequantised into `dst` (`in` floats).
  void DequantizeRow(int64_t r, float* dst) const;
};

// The number of scales a weight of `scaling` and shape [out, in] has.
int64_t NumWeightScales(WeightScaling scaling, int64_t out, int64_t in);

// Quantises w [out, in] (fp32, row-major) with one scale per tensor, row or 128x128 block (the
// block's amax over its rows and columns inside the matrix). `scaling` is not kNone. Split over
// rows on `pool` when given; the result does not depend on it.
Fp8Matrix QuantizeFp8(const float* w, int64_t out, int64_t in, WeightScaling scaling,
                      ThreadPool* pool = nullptr);

// How a product's input rows are quantised (the scheme's activations, and the static scale).
struct ActivationQuant {
  ActivationScaling scaling = ActivationScaling::kNone;
  float static_scale = 0.0f;  // kStatic
};

// Replaces each row of x [rows, dim] with what an FP8 product sees of it: the round trip through
// E4M3 with the row's scale (kToken), each 128 inputs' scale (kGroup) or the static scale.
// kNone leaves x as it is.
void Fp8RoundTripActivations(float* x, size_t rows, size_t dim, const ActivationQuant& q);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_FP8_QUANT_H_
