// Reference fp32 operators of the Llama forward pass. These are the CPU backend's math and the
// reference every CUDA kernel is tested against.
//
// Determinism: every output element is computed by one fixed sequence of float operations
// that does not depend on the batch size, the other rows of the batch or the thread split, so
// a token's result is bit-identical however requests are batched. Dot products accumulate in
// eight lanes (element i goes to lane i % 8), then sum the lanes in a fixed tree.
#ifndef LLM_WORKER_RUNNER_CPU_OPS_H_
#define LLM_WORKER_RUNNER_CPU_OPS_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace llm {
class ThreadPool;
}

namespace llm::runner {

// sum_i a[i] * b[i] in the fixed order described above.
float Dot(const float* a, const float* b, size_t n);

// y[t, o] = dot(x[t, :], w[o, :]) (+ bias[o]) for t < num_rows, o < out_features.
// x: [num_rows, in_features], w: [out_features, in_features] (row-major, Hugging Face layout),
// bias: [out_features] or null, y: [num_rows, out_features]. Parallel over output features
// when `pool` is given and the work is large enough.
void MatMulTransposed(const float* x, const float* w, const float* bias, float* y, size_t num_rows,
                      size_t in_features, size_t out_features, ThreadPool* pool);

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight. x and y may alias.
void RmsNorm(const float* x, const float* weight, float* y, size_t num_rows, size_t dim, float eps);

// Rotates one head vector in place with the Hugging Face rotate-half layout: element i pairs
// with element i + head_dim/2. cos/sin: [head_dim / 2] for the token's position.
void ApplyRope(float* head, const float* cos, const float* sin, size_t head_dim);

// cos/sin of position * inv_freq[i], computed in double: [head_dim / 2] each.
void RopeCosSin(const double* inv_freq, size_t half_dim, int64_t position, float* cos, float* sin);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]; gate_up: [num_rows, 2 * inter].
void SiluMul(const float* gate_up, float* out, size_t num_rows, size_t inter);

// Softmax over n scores in place (max-subtracted), in float.
void SoftmaxInPlace(float* x, size_t n);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_OPS_H_
