#include "worker/runner/cpu_ops.h"

#include <algorithm>
#include <cmath>

#include "common/thread_pool.h"

namespace llm::runner {
namespace {

// Eight float lanes. GCC lowers this to AVX registers, or to pairs of SSE registers, with the
// same per-lane IEEE results either way.
typedef float V8 __attribute__((vector_size(32)));

inline V8 Load8(const float* p) {
  V8 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

inline float SumLanes(V8 v) {
  // Fixed tree: ((0+4)+(2+6)) + ((1+5)+(3+7)).
  const float a = (v[0] + v[4]) + (v[2] + v[6]);
  const float b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}

// Computes a ROWS x COLS tile of dot products; each one follows exactly the order of Dot().
template <int ROWS, int COLS>
inline void DotTile(const float* const* x, const float* const* w, size_t n, float* out) {
  V8 acc[ROWS][COLS] = {};
  const size_t n8 = n & ~size_t{7};
  for (size_t i = 0; i < n8; i += 8) {
    V8 xv[ROWS];
    for (int r = 0; r < ROWS; ++r) xv[r] = Load8(x[r] + i);
    for (int c = 0; c < COLS; ++c) {
      const V8 wv = Load8(w[c] + i);
      for (int r = 0; r < ROWS; ++r) acc[r][c] = acc[r][c] + xv[r] * wv;
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < COLS; ++c) {
      float tail = 0.0f;
      for (size_t i = n8; i < n; ++i) tail = tail + x[r][i] * w[c][i];
      out[r * COLS + c] = SumLanes(acc[r][c]) + tail;
    }
  }
}

// Rows [row_begin, row_end) x outputs [o_begin, o_end) of MatMulTransposed.
__attribute__((target_clones("avx2", "default"))) void MatMulBlock(const float* x, const float* w,
                                                                   const float* bias, float* y,
                                                                   size_t num_rows, size_t in,
                                                                   size_t out, size_t o_begin,
                                                                   size_t o_end) {
  constexpr int kRows = 4;
  constexpr int kCols = 2;
  float tile[kRows * kCols];
  size_t o = o_begin;
  for (; o + kCols <= o_end; o += kCols) {
    const float* wr[kCols] = {w + o * in, w + (o + 1) * in};
    size_t t = 0;
    for (; t + kRows <= num_rows; t += kRows) {
      const float* xr[kRows] = {x + t * in, x + (t + 1) * in, x + (t + 2) * in, x + (t + 3) * in};
      DotTile<kRows, kCols>(xr, wr, in, tile);
      for (int r = 0; r < kRows; ++r) {
        for (int c = 0; c < kCols; ++c) y[(t + r) * out + o + c] = tile[r * kCols + c];
      }
    }
    for (; t < num_rows; ++t) {
      const float* xr[1] = {x + t * in};
      DotTile<1, kCols>(xr, wr, in, tile);
      for (int c = 0; c < kCols; ++c) y[t * out + o + c] = tile[c];
    }
  }
  for (; o < o_end; ++o) {
    const float* wr[1] = {w + o * in};
    for (size_t t = 0; t < num_rows; ++t) {
      const float* xr[1] = {x + t * in};
      DotTile<1, 1>(xr, wr, in, tile);
      y[t * out + o] = tile[0];
    }
  }
  if (bias != nullptr) {
    for (size_t t = 0; t < num_rows; ++t) {
      for (size_t oo = o_begin; oo < o_end; ++oo) y[t * out + oo] = y[t * out + oo] + bias[oo];
    }
  }
}

}  // namespace

float Dot(const float* a, const float* b, size_t n) {
  float out;
  const float* ar[1] = {a};
  const float* br[1] = {b};
  DotTile<1, 1>(ar, br, n, &out);
  return out;
}

void MatMulTransposed(const float* x, const float* w, const float* bias, float* y, size_t num_rows,
                      size_t in, size_t out, ThreadPool* pool) {
  // Below ~64k multiply-adds a chunk, waking threads costs more than it saves.
  constexpr size_t kMinWorkPerChunk = 64 * 1024;
  const size_t work_per_output = std::max<size_t>(1, num_rows * in);
  const size_t min_chunk = (kMinWorkPerChunk + work_per_output - 1) / work_per_output;
  auto run = [&](size_t begin, size_t end) {
    MatMulBlock(x, w, bias, y, num_rows, in, out, begin, end);
  };
  if (pool == nullptr || pool->num_threads() == 1 || out <= min_chunk) {
    run(0, out);
    return;
  }
  // Keep chunks even so the 2-wide output tiles line up.
  pool->ParallelFor(out, std::max<size_t>(2, min_chunk + (min_chunk & 1)), run);
}

void RmsNorm(const float* x, const float* weight, float* y, size_t num_rows, size_t dim,
             float eps) {
  for (size_t t = 0; t < num_rows; ++t) {
    const float* xr = x + t * dim;
    double sum_sq = 0.0;
    for (size_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
    float* yr = y + t * dim;
    for (size_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
  }
}

void RopeCosSin(const double* inv_freq, size_t half, int64_t position, float* cos, float* sin) {
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void ApplyRope(float* head, const float* cos, const float* sin, size_t head_dim) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const float a = head[i];
    const float b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

void SiluMul(const float* gate_up, float* out, size_t num_rows, size_t inter) {
  for (size_t t = 0; t < num_rows; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (size_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void SoftmaxInPlace(float* x, size_t n) {
  if (n == 0) return;
  const float m = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace llm::runner
