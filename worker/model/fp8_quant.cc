#include "worker/model/fp8_quant.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/fp8.h"
#include "common/thread_pool.h"

namespace llm::model {

int64_t NumWeightScales(WeightScaling scaling, int64_t out, int64_t in) {
  switch (scaling) {
    case WeightScaling::kTensor:
      return 1;
    case WeightScaling::kChannel:
      return out;
    case WeightScaling::kBlock:
      return CeilDiv(out, kFp8Block) * CeilDiv(in, kFp8Block);
    default:
      return 0;
  }
}

void Fp8Matrix::DequantizeRow(int64_t r, float* dst) const {
  const uint8_t* row = e4m3.data() + r * in;
  for (int64_t c = 0; c < in; ++c) dst[c] = Fp8E4M3ToFloat(row[c]) * ScaleAt(r, c);
}

Fp8Matrix QuantizeFp8(const float* w, int64_t out, int64_t in, WeightScaling scaling,
                      ThreadPool* pool) {
  Fp8Matrix m;
  m.out = out;
  m.in = in;
  m.scaling = scaling;
  m.e4m3.resize(static_cast<size_t>(out * in));
  const auto rows = [&](const std::function<void(int64_t, int64_t)>& fn) {
    if (pool == nullptr) return fn(0, out);
    pool->ParallelFor(static_cast<size_t>(out), 16, [&](size_t b, size_t e) {
      fn(static_cast<int64_t>(b), static_cast<int64_t>(e));
    });
  };
  // Each row's amax per 128 columns (the whole row's for kTensor and kChannel), then each
  // scale's amax over the rows it covers.
  const int64_t col_groups = scaling == WeightScaling::kBlock ? CeilDiv(in, kFp8Block) : 1;
  const int64_t group_cols = scaling == WeightScaling::kBlock ? kFp8Block : in;
  std::vector<float> row_amax(static_cast<size_t>(out * col_groups), 0.0f);
  rows([&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < in; ++c) {
        float& a = row_amax[static_cast<size_t>(r * col_groups + c / group_cols)];
        a = std::max(a, std::fabs(w[r * in + c]));
      }
    }
  });
  std::vector<float> amax(static_cast<size_t>(NumWeightScales(scaling, out, in)), 0.0f);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t g = 0; g < col_groups; ++g) {
      const size_t k = Fp8ScaleIndex(scaling, in, r, g * group_cols);
      amax[k] = std::max(amax[k], row_amax[static_cast<size_t>(r * col_groups + g)]);
    }
  }
  m.scales.resize(amax.size());
  for (size_t k = 0; k < amax.size(); ++k) m.scales[k] = Fp8ScaleForAmax(amax[k]);
  rows([&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < in; ++c) {
        m.e4m3[static_cast<size_t>(r * in + c)] = Fp8E4M3FromFloat(w[r * in + c] / m.ScaleAt(r, c));
      }
    }
  });
  return m;
}

void Fp8RoundTripActivations(float* x, size_t rows, size_t dim, const ActivationQuant& q) {
  if (q.scaling == ActivationScaling::kNone) return;
  const size_t group = q.scaling == ActivationScaling::kGroup ? kFp8Block : dim;
  for (size_t r = 0; r < rows; ++r) {
    float* row = x + r * dim;
    for (size_t g0 = 0; g0 < dim; g0 += group) {
      const size_t g1 = std::min(dim, g0 + group);
      float scale = q.static_scale;
      if (q.scaling != ActivationScaling::kStatic) {
        float amax = 0.0f;
        for (size_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(row[i]));
        scale = Fp8ScaleForAmax(amax);
      }
      for (size_t i = g0; i < g1; ++i) row[i] = Fp8RoundTrip(row[i], scale);
    }
  }
}

}  // namespace llm::model
