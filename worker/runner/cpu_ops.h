// Reference fp32 operators of the Llama forward pass. These are the CPU backend's math and the
// reference every CUDA kernel is tested against.
//
// Determinism: every output element is computed by one fixed sequence of float operations that
// does not depend on the batch size, the other rows of the batch or the thread split, so a
// token's result is bit-identical however requests are batched. A matrix-product output is one
// multiply-add chain over the input dimension in order (fused multiply-adds where the CPU has
// them, chosen once per process); a Dot accumulates in eight lanes (element i in lane i % 8)
// and sums the lanes in a fixed tree.
#ifndef LLM_WORKER_RUNNER_CPU_OPS_H_
#define LLM_WORKER_RUNNER_CPU_OPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/lane_sum.h"

namespace llm {
class ThreadPool;
}

namespace llm::runner {

// A weight matrix [out, in] (Hugging Face layout) repacked for the CPU matrix product: panels
// of kPanel consecutive outputs, each panel stored input-major ([in][kPanel]), the last panel
// padded with zeros.
struct PackedWeights {
  static constexpr size_t kPanel = 16;
  size_t out = 0;
  size_t in = 0;
  std::vector<float> panels;  // [ceil(out / kPanel)][in][kPanel]
};

PackedWeights PackWeights(const float* w, size_t out, size_t in);

// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) for t < num_rows.
// x: [num_rows, in], bias: [out] or null, y: [num_rows, out]. Parallel over output panels
// when `pool` is given and the work is large enough.
void MatMulPacked(const float* x, const PackedWeights& w, const float* bias, float* y,
                  size_t num_rows, ThreadPool* pool);

// The same for an unpacked row-major w: [out, in] (packs it first; for tests and one-offs).
void MatMulTransposed(const float* x, const float* w, const float* bias, float* y, size_t num_rows,
                      size_t in_features, size_t out_features, ThreadPool* pool);

// sum_i a[i] * b[i]: eight lanes, then a fixed tree over the lanes.
inline float Dot(const float* a, const float* b, size_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t n8 = n & ~size_t{7};
  for (size_t i = 0; i < n8; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] = lane[l] + a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (size_t i = n8; i < n; ++i) tail = tail + a[i] * b[i];
  return LaneTree(lane) + tail;
}

// exp(x) for float x, as a range-reduced polynomial evaluated with fused multiply-adds (a few
// ulp from the true value; exactly the same bits on every machine). 0 below -87, inf above 88.
float Exp(float x);

// Attention scores for one query against up to one KV block of keys:
// scores[j] = scale * sum_d q[d] * keys_t[d * block_tokens + j] for j < n.
// keys_t is the block's keys transposed: [head_dim][block_tokens].
void BlockScores(const float* q, const float* keys_t, size_t head_dim, size_t block_tokens,
                 size_t n, float scale, float* scores);

// out[d] += sum_{j < n} p[j] * values[j * head_dim + d], accumulated over j in order.
// values: [block_tokens][head_dim].
void AccumulateValues(const float* p, const float* values, size_t n, size_t head_dim, float* out);

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight. x and y may alias.
void RmsNorm(const float* x, const float* weight, float* y, size_t num_rows, size_t dim, float eps);

// Rotates one head vector in place with the Hugging Face rotate-half layout: element i pairs
// with element i + head_dim/2. cos/sin: [head_dim / 2] for the token's position.
void ApplyRope(float* head, const float* cos, const float* sin, size_t head_dim);

// cos/sin of position * inv_freq[i], computed in double, times `scale` (YaRN's attention
// factor; model::RopeAttentionFactor): [head_dim / 2] each.
void RopeCosSin(const double* inv_freq, size_t half_dim, int64_t position, float* cos, float* sin,
                double scale = 1.0);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]; gate_up: [num_rows, 2 * inter].
// silu(g) = g / (1 + FastExp(-g)).
void SiluMul(const float* gate_up, float* out, size_t num_rows, size_t inter);

// Softmax over n scores in place (max-subtracted), in float; the denominator sums element i in
// lane i % 8, then the lanes in a fixed tree.
void SoftmaxInPlace(float* x, size_t n);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_OPS_H_
