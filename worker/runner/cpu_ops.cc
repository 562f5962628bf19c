#include "worker/runner/cpu_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/cpu_features.h"
#include "common/fast_exp.h"
#include "common/thread_pool.h"

namespace llm::runner {
namespace {

constexpr size_t kPanel = PackedWeights::kPanel;
constexpr size_t kTileRows = 6;

// One panel (kPanel outputs) for ROWS rows of x: each output is a multiply-add chain over the
// input dimension in order. Plain multiply then add (portable).
template <int ROWS>
void PanelPlain(const float* const* x, const float* panel, size_t in, float (*out)[kPanel]) {
  float acc[ROWS][kPanel] = {};
  for (size_t i = 0; i < in; ++i) {
    const float* w = panel + i * kPanel;
    for (int r = 0; r < ROWS; ++r) {
      const float xv = x[r][i];
      for (size_t l = 0; l < kPanel; ++l) acc[r][l] = acc[r][l] + xv * w[l];
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    for (size_t l = 0; l < kPanel; ++l) out[r][l] = acc[r][l];
  }
}

// The same chain with fused multiply-adds (x86 FMA3): rounded once per step. Written with named
// accumulators: GCC 12 spills an accumulator array to the stack on every iteration.
#define LLM_FMA_ROW(r)                               \
  const __m256 x##r = _mm256_broadcast_ss(x[r] + i); \
  a##r##0 = _mm256_fmadd_ps(x##r, w0, a##r##0);      \
  a##r##1 = _mm256_fmadd_ps(x##r, w1, a##r##1)

#define LLM_DECLARE_ROW(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = a##r##0
#define LLM_STORE_ROW(r)             \
  _mm256_storeu_ps(out[r], a##r##0); \
  _mm256_storeu_ps(out[r] + 8, a##r##1)
#define LLM_PANEL_KERNEL(NAME, ROWS_DECLARE, ROWS_FMA, ROWS_STORE)                         \
  __attribute__((target("avx2,fma"))) void NAME(const float* const* x, const float* panel, \
                                                size_t in, float(*out)[kPanel]) {          \
    ROWS_DECLARE;                                                                          \
    for (size_t i = 0; i < in; ++i) {                                                      \
      const __m256 w0 = _mm256_loadu_ps(panel + i * kPanel);                               \
      const __m256 w1 = _mm256_loadu_ps(panel + i * kPanel + 8);                           \
      ROWS_FMA;                                                                            \
    }                                                                                      \
    ROWS_STORE;                                                                            \
  }

LLM_PANEL_KERNEL(PanelFma6, LLM_DECLARE_ROW(0); LLM_DECLARE_ROW(1); LLM_DECLARE_ROW(2);
                 LLM_DECLARE_ROW(3); LLM_DECLARE_ROW(4); LLM_DECLARE_ROW(5), LLM_FMA_ROW(0);
                 LLM_FMA_ROW(1); LLM_FMA_ROW(2); LLM_FMA_ROW(3); LLM_FMA_ROW(4);
                 LLM_FMA_ROW(5), LLM_STORE_ROW(0); LLM_STORE_ROW(1); LLM_STORE_ROW(2);
                 LLM_STORE_ROW(3); LLM_STORE_ROW(4); LLM_STORE_ROW(5))
LLM_PANEL_KERNEL(PanelFma4, LLM_DECLARE_ROW(0); LLM_DECLARE_ROW(1); LLM_DECLARE_ROW(2);
                 LLM_DECLARE_ROW(3), LLM_FMA_ROW(0); LLM_FMA_ROW(1); LLM_FMA_ROW(2);
                 LLM_FMA_ROW(3), LLM_STORE_ROW(0); LLM_STORE_ROW(1); LLM_STORE_ROW(2);
                 LLM_STORE_ROW(3))
LLM_PANEL_KERNEL(PanelFma2, LLM_DECLARE_ROW(0); LLM_DECLARE_ROW(1), LLM_FMA_ROW(0);
                 LLM_FMA_ROW(1), LLM_STORE_ROW(0); LLM_STORE_ROW(1))
LLM_PANEL_KERNEL(PanelFma1, LLM_DECLARE_ROW(0), LLM_FMA_ROW(0), LLM_STORE_ROW(0))
#undef LLM_PANEL_KERNEL
#undef LLM_STORE_ROW
#undef LLM_DECLARE_ROW
#undef LLM_FMA_ROW

// One row against four panels at once (eight independent chains for the FMA units to overlap);
// every output is still the same in-order chain as in the PanelFma kernels.
__attribute__((target("avx2,fma"))) void RowFma4Panels(const float* x, const float* p0, size_t in,
                                                       float* out) {
  const float* p1 = p0 + in * kPanel;
  const float* p2 = p1 + in * kPanel;
  const float* p3 = p2 + in * kPanel;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < in; ++i) {
    const __m256 xv = _mm256_broadcast_ss(x + i);
    const size_t k = i * kPanel;
    a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p0 + k), a0);
    a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p0 + k + 8), a1);
    a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p1 + k), a2);
    a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p1 + k + 8), a3);
    a4 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p2 + k), a4);
    a5 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p2 + k + 8), a5);
    a6 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p3 + k), a6);
    a7 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p3 + k + 8), a7);
  }
  _mm256_storeu_ps(out, a0);
  _mm256_storeu_ps(out + 8, a1);
  _mm256_storeu_ps(out + 16, a2);
  _mm256_storeu_ps(out + 24, a3);
  _mm256_storeu_ps(out + 32, a4);
  _mm256_storeu_ps(out + 40, a5);
  _mm256_storeu_ps(out + 48, a6);
  _mm256_storeu_ps(out + 56, a7);
}

template <bool kFma>
struct Panels {
  template <int ROWS>
  static void Run(const float* const* x, const float* panel, size_t in, float (*out)[kPanel]) {
    if constexpr (kFma) {
      static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4 || ROWS == 6);
      if constexpr (ROWS == 1) {
        PanelFma1(x, panel, in, out);
      } else if constexpr (ROWS == 2) {
        PanelFma2(x, panel, in, out);
      } else if constexpr (ROWS == 4) {
        PanelFma4(x, panel, in, out);
      } else {
        PanelFma6(x, panel, in, out);
      }
    } else {
      PanelPlain<ROWS>(x, panel, in, out);
    }
  }
};

// Output panels [p_begin, p_end) for every row.
template <bool kFma>
void MatMulPanels(const float* x, const PackedWeights& w, const float* bias, float* y,
                  size_t num_rows, size_t p_begin, size_t p_end) {
  float tile[kTileRows][kPanel];
  const size_t in = w.in;
  auto store = [&](size_t t, size_t p, const float* vals) {
    const size_t o0 = p * kPanel;
    const size_t width = std::min(kPanel, w.out - o0);
    float* dst = y + t * w.out + o0;
    for (size_t l = 0; l < width; ++l) dst[l] = bias ? vals[l] + bias[o0 + l] : vals[l];
  };
  // Rows in tiles of 6 (long inputs, where fewer passes over each panel pay) or 4, then one of
  // 4 and one of 2 as they fit; a last odd row goes to the single-row kernel below. Every
  // output is the same chain whichever tile computes it.
  auto rows_tile = [&](size_t t, size_t p, auto rows_tag) {
    constexpr int kRows = decltype(rows_tag)::value;
    const float* xr[kRows];
    for (int r = 0; r < kRows; ++r) xr[r] = x + (t + r) * in;
    Panels<kFma>::template Run<kRows>(xr, w.panels.data() + p * in * kPanel, in, tile);
    for (int r = 0; r < kRows; ++r) store(t + r, p, tile[r]);
  };
  const size_t big = in >= 256 ? kTileRows : 4;
  size_t full_rows = num_rows - num_rows % big;
  const size_t rest = num_rows - full_rows;
  for (size_t p = p_begin; p < p_end; ++p) {
    for (size_t t = 0; t < full_rows; t += big) {
      if (big == kTileRows) {
        rows_tile(t, p, std::integral_constant<int, kTileRows>{});
      } else {
        rows_tile(t, p, std::integral_constant<int, 4>{});
      }
    }
    size_t t = full_rows;
    if (rest >= 4) {
      rows_tile(t, p, std::integral_constant<int, 4>{});
      t += 4;
    }
    if (rest % 4 >= 2) rows_tile(t, p, std::integral_constant<int, 2>{});
  }
  full_rows = num_rows - num_rows % 2;
  for (size_t t = full_rows; t < num_rows; ++t) {
    const float* xr[1] = {x + t * in};
    size_t p = p_begin;
    if constexpr (kFma) {
      float group[4 * kPanel];
      for (; p + 4 <= p_end; p += 4) {
        RowFma4Panels(xr[0], w.panels.data() + p * in * kPanel, in, group);
        for (size_t g = 0; g < 4; ++g) store(t, p + g, group + g * kPanel);
      }
    }
    for (; p < p_end; ++p) {
      Panels<kFma>::template Run<1>(xr, w.panels.data() + p * in * kPanel, in, tile);
      store(t, p, tile[0]);
    }
  }
}

__attribute__((target("avx2,fma"))) void MatMulPanelsFma(const float* x, const PackedWeights& w,
                                                         const float* bias, float* y, size_t rows,
                                                         size_t b, size_t e) {
  MatMulPanels<true>(x, w, bias, y, rows, b, e);
}

void MatMulPanelsPlain(const float* x, const PackedWeights& w, const float* bias, float* y,
                       size_t rows, size_t b, size_t e) {
  MatMulPanels<false>(x, w, bias, y, rows, b, e);
}

// Chosen once per process, so every matrix product of a run takes the same path.
using MatMulPanelsFn = void (*)(const float*, const PackedWeights&, const float*, float*, size_t,
                                size_t, size_t);
MatMulPanelsFn ChooseMatMul() { return CpuHasAvx2Fma() ? MatMulPanelsFma : MatMulPanelsPlain; }
const MatMulPanelsFn kMatMulPanels = ChooseMatMul();

}  // namespace

PackedWeights PackWeights(const float* w, size_t out, size_t in) {
  PackedWeights p;
  p.out = out;
  p.in = in;
  const size_t num_panels = (out + kPanel - 1) / kPanel;
  p.panels.assign(num_panels * in * kPanel, 0.0f);
  for (size_t o = 0; o < out; ++o) {
    float* panel = p.panels.data() + (o / kPanel) * in * kPanel;
    for (size_t i = 0; i < in; ++i) panel[i * kPanel + o % kPanel] = w[o * in + i];
  }
  return p;
}

void MatMulPacked(const float* x, const PackedWeights& w, const float* bias, float* y,
                  size_t num_rows, ThreadPool* pool) {
  const size_t num_panels = (w.out + kPanel - 1) / kPanel;
  // Waking a pool thread costs several microseconds (more when other threads want the core),
  // so a chunk must hold ~256k multiply-adds (tens of microseconds) to be worth handing out.
  // A single decoding sequence therefore stays on one thread.
  constexpr size_t kMinWorkPerChunk = 256 * 1024;
  const size_t work_per_panel = std::max<size_t>(1, num_rows * w.in * kPanel);
  const size_t min_chunk = (kMinWorkPerChunk + work_per_panel - 1) / work_per_panel;
  auto run = [&](size_t begin, size_t end) { kMatMulPanels(x, w, bias, y, num_rows, begin, end); };
  if (pool == nullptr || pool->num_threads() == 1 || num_panels <= min_chunk) {
    run(0, num_panels);
    return;
  }
  pool->ParallelFor(num_panels, min_chunk, run);
}

void MatMulTransposed(const float* x, const float* w, const float* bias, float* y, size_t num_rows,
                      size_t in, size_t out, ThreadPool* pool) {
  MatMulPacked(x, PackWeights(w, out, in), bias, y, num_rows, pool);
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

void RopeCosSin(const double* inv_freq, size_t half, int64_t position, float* cos, float* sin,
                double scale) {
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(angle) * scale);
    sin[i] = static_cast<float>(std::sin(angle) * scale);
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

// NOTE: the attention helpers below use std::fma (portable) or FMA instructions (AVX2) for
// every multiply-add, and FastExp / FastExp8 for exp. Both are exactly rounded, so each
// portable function and its AVX2 twin give the same bits; CpuHasAvx2Fma() picks the twin. The
// portable twins are also cloned for FMA (target_clones), for the shapes the AVX2 code leaves
// to them (blocks over 16 tokens, head dims not a multiple of 8) and CPUs with FMA but no AVX2.
#define LLM_CLONES __attribute__((target_clones("fma", "default")))

float Exp(float x) { return FastExp(x); }

namespace {

LLM_CLONES void BlockScoresPortable(const float* q, const float* keys_t, size_t head_dim,
                                    size_t block_tokens, size_t n, float scale, float* scores) {
  float acc[64];  // block_tokens <= 64
  for (size_t j = 0; j < n; ++j) acc[j] = 0.0f;
  for (size_t d = 0; d < head_dim; ++d) {
    const float qd = q[d];
    const float* k = keys_t + d * block_tokens;
    for (size_t j = 0; j < n; ++j) acc[j] = std::fma(qd, k[j], acc[j]);
  }
  for (size_t j = 0; j < n; ++j) scores[j] = acc[j] * scale;
}

LLM_CLONES void AccumulateValuesPortable(const float* p, const float* values, size_t n,
                                         size_t head_dim, float* out) {
  for (size_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* v = values + j * head_dim;
    for (size_t d = 0; d < head_dim; ++d) out[d] = std::fma(pj, v[d], out[d]);
  }
}

// The same chains with the accumulators in registers: eight lanes of tokens (BlockScores) or of
// head dimensions (AccumulateValues) per register. Shapes they do not cover go to the portable
// code, which gives the same bits.
__attribute__((target("avx2,fma"))) void BlockScoresAvx2(const float* q, const float* keys_t,
                                                         size_t head_dim, size_t block_tokens,
                                                         size_t n, float scale, float* scores) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (size_t d = 0; d < head_dim; ++d) {
    const __m256 qd = _mm256_broadcast_ss(q + d);
    const float* k = keys_t + d * block_tokens;
    acc0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k), acc0);
    acc1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k + 8), acc1);
  }
  alignas(32) float acc[16];
  const __m256 s = _mm256_set1_ps(scale);
  _mm256_store_ps(acc, _mm256_mul_ps(acc0, s));
  _mm256_store_ps(acc + 8, _mm256_mul_ps(acc1, s));
  std::memcpy(scores, acc, n * sizeof(float));
}

template <int kRegs>
__attribute__((target("avx2,fma"), always_inline)) inline void AccumulateRegs(
    const float* p, const float* values, size_t n, size_t head_dim, float* out) {
  __m256 acc[kRegs];
  for (int r = 0; r < kRegs; ++r) acc[r] = _mm256_loadu_ps(out + 8 * r);
  for (size_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_broadcast_ss(p + j);
    const float* v = values + j * head_dim;
    for (int r = 0; r < kRegs; ++r)
      acc[r] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * r), acc[r]);
  }
  for (int r = 0; r < kRegs; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

__attribute__((target("avx2,fma"))) void AccumulateValuesAvx2(const float* p, const float* values,
                                                              size_t n, size_t head_dim,
                                                              float* out) {
  // Up to 64 dimensions (eight registers) per pass over the tokens.
  for (size_t d = 0; d < head_dim; d += 64) {
    switch (std::min<size_t>(64, head_dim - d) / 8) {
      case 8:
        AccumulateRegs<8>(p, values + d, n, head_dim, out + d);
        break;
      case 4:
        AccumulateRegs<4>(p, values + d, n, head_dim, out + d);
        break;
      case 2:
        AccumulateRegs<2>(p, values + d, n, head_dim, out + d);
        break;
      default: {
        const size_t regs = std::min<size_t>(64, head_dim - d) / 8;
        for (size_t r = 0; r < regs; ++r)
          AccumulateRegs<1>(p, values + d + 8 * r, n, head_dim, out + d + 8 * r);
      }
    }
  }
}

}  // namespace

void BlockScores(const float* q, const float* keys_t, size_t head_dim, size_t block_tokens,
                 size_t n, float scale, float* scores) {
  // The vector path reads 16 token lanes per dimension: blocks of at least 16 tokens.
  if (n <= 16 && block_tokens >= 16 && CpuHasAvx2Fma()) {
    return BlockScoresAvx2(q, keys_t, head_dim, block_tokens, n, scale, scores);
  }
  BlockScoresPortable(q, keys_t, head_dim, block_tokens, n, scale, scores);
}

void AccumulateValues(const float* p, const float* values, size_t n, size_t head_dim, float* out) {
  if (head_dim % 8 == 0 && CpuHasAvx2Fma()) {
    return AccumulateValuesAvx2(p, values, n, head_dim, out);
  }
  AccumulateValuesPortable(p, values, n, head_dim, out);
}

namespace {

LLM_CLONES void SiluMulPortable(const float* gate_up, float* out, size_t num_rows, size_t inter) {
  for (size_t t = 0; t < num_rows; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (size_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + FastExp(-g[i])) * u[i];
  }
}

LLM_CLONES void SoftmaxPortable(float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  for (size_t i = 0; i < n; ++i) x[i] = FastExp(x[i] - m);
  const float inv = 1.0f / LaneSum(x, n);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

__attribute__((target("avx2,fma"))) void SiluMulAvx2(const float* gate_up, float* out,
                                                     size_t num_rows, size_t inter) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (size_t t = 0; t < num_rows; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    size_t i = 0;
    for (; i + 8 <= inter; i += 8) {
      const __m256 gv = _mm256_loadu_ps(g + i);
      const __m256 e = FastExp8(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    for (; i < inter; ++i) o[i] = g[i] / (1.0f + FastExp(-g[i])) * u[i];
  }
}

__attribute__((target("avx2,fma"))) void SoftmaxAvx2(float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = FastExp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  for (; i < n; ++i) {
    x[i] = FastExp(x[i] - m);
    lane[i % 8] += x[i];
  }
  const float inv = 1.0f / LaneTree(lane);
  const __m256 inv_v = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv_v));
  }
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace

void SiluMul(const float* gate_up, float* out, size_t num_rows, size_t inter) {
  if (CpuHasAvx2Fma()) return SiluMulAvx2(gate_up, out, num_rows, inter);
  SiluMulPortable(gate_up, out, num_rows, inter);
}

void SoftmaxInPlace(float* x, size_t n) {
  if (n == 0) return;
  if (CpuHasAvx2Fma()) return SoftmaxAvx2(x, n);
  SoftmaxPortable(x, n);
}

}  // namespace llm::runner
