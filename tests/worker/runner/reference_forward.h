// An independent, naive double-precision Llama forward (no KV cache, no paging, no fused
// weights), the reference the CPU forward is checked against: random checkpoints with biases,
// GQA, explicit head_dim, Qwen3's q/k norms, Llama 3 RoPE scaling and sliding windows, and FP8
// checkpoints, whose dequantised weights it takes from their writer and whose products' input
// rounding it does itself, in double, with its own E4M3 table (RefActivations).
#ifndef LLM_TESTS_WORKER_RUNNER_REFERENCE_FORWARD_H_
#define LLM_TESTS_WORKER_RUNNER_REFERENCE_FORWARD_H_

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/mapped_file.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/config.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner::testing {

using Mat = std::vector<double>;

// The E4M3 values written out from the format's definition (1 sign, 4 exponent bits of bias 7,
// 3 mantissa bits; no infinities; 448 the largest), and the nearest of them, ties to the even
// code, saturating: independent of common/fp8.h.
inline double NearestE4M3(double v) {
  static const std::vector<double> values = [] {
    std::vector<double> out;
    for (int code = 0; code < 0x7F; ++code) {
      const int exp = code >> 3, mant = code & 7;
      out.push_back(exp == 0 ? mant * std::ldexp(1.0, -9)
                             : (1.0 + mant / 8.0) * std::ldexp(1.0, exp - 7));
    }
    return out;
  }();
  const double a = std::min(std::fabs(v), 448.0);
  size_t best = 0;
  for (size_t code = 1; code < values.size(); ++code) {
    const double d = std::fabs(values[code] - a), bd = std::fabs(values[best] - a);
    if (d < bd || (d == bd && code % 2 == 0)) best = code;
  }
  return std::copysign(values[best], v);
}

// What an FP8 product does to its input vector: nothing, or the round trip through E4M3 with
// the vector's own scale (per token: amax / 448, at least 1 / (448 * 512)), each 128 inputs'
// scale, or a static one.
struct RefActivations {
  enum class Mode { kNone, kToken, kGroup, kStatic };
  Mode mode = Mode::kNone;
  double static_scale = 0;

  Mat Apply(const Mat& x) const {
    if (mode == Mode::kNone) return x;
    const size_t group = mode == Mode::kGroup ? 128 : x.size();
    Mat out(x.size());
    for (size_t g0 = 0; g0 < x.size(); g0 += group) {
      const size_t g1 = std::min(x.size(), g0 + group);
      double scale = static_scale;
      if (mode != Mode::kStatic) {
        double amax = 0;
        for (size_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(x[i]));
        scale = std::max(amax / 448.0, 1.0 / (448.0 * 512.0));
      }
      for (size_t i = g0; i < g1; ++i) out[i] = NearestE4M3(x[i] / scale) * scale;
    }
    return out;
  }
};

// What an FP8 KV cache does to the K and V it holds: each value through E4M3 with the layer's
// scale (empty: a bf16 cache, nothing).
struct RefKvCache {
  std::vector<double> k_scale, v_scale;  // [layers]

  void Apply(int layer, double* k, double* v, int n) const {
    if (k_scale.empty()) return;
    for (int i = 0; i < n; ++i) {
      k[i] = NearestE4M3(k[i] / k_scale[layer]) * k_scale[layer];
      v[i] = NearestE4M3(v[i] / v_scale[layer]) * v_scale[layer];
    }
  }
};

class Reference {
 public:
  // `dequantised`, when given, holds float32 weights that take the place of the store's (an
  // FP8 checkpoint's linear layers, dequantised by their writer); `act` is what the FP8
  // products do to their inputs (kNone: nothing).
  Reference(const model::ModelConfig& c, const model::TensorStore& s,
            const model::TensorStore* dequantised = nullptr, RefActivations act = {},
            RefKvCache kv = {})
      : c_(c), s_(s), dequantised_(dequantised), act_(act), kv_(std::move(kv)) {}

  Mat W(const std::string& name) const {
    const model::TensorView* v = dequantised_ != nullptr && dequantised_->Find(name) != nullptr
                                     ? dequantised_->Find(name)
                                     : s_.Find(name);
    if (v == nullptr) return {};
    std::vector<float> f(v->num_elements());
    model::ConvertToF32(v->dtype, v->data, f.size(), f.data());
    return Mat(f.begin(), f.end());
  }

  // y = W q(x) + b, W: [out, in], q the products' activation round trip (RefActivations).
  Mat Linear(const Mat& w, const Mat& b, const Mat& x_in) const {
    const Mat x = act_.Apply(x_in);
    const size_t in = x.size(), out = w.size() / in;
    Mat y(out);
    for (size_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (size_t i = 0; i < in; ++i) acc += w[o * in + i] * x[i];
      y[o] = acc;
    }
    return y;
  }

  Mat Norm(const Mat& x, const Mat& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + c_.rms_norm_eps);
    Mat y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * inv;
    return y;
  }

  void HeadNorm(double* head, const Mat& w) const {
    const Mat y = Norm(Mat(head, head + w.size()), w);
    std::copy(y.begin(), y.end(), head);
  }

  // Hugging Face's default and llama3 inverse frequencies, written out independently.
  std::vector<double> InvFreq() const {
    const int d = c_.head_dim;
    std::vector<double> f(d / 2);
    for (int i = 0; i < d / 2; ++i) f[i] = 1.0 / std::pow(c_.rope_theta, 2.0 * i / d);
    if (c_.rope_scaling.kind == model::RopeScaling::Kind::kLlama3) {
      const auto& r = c_.rope_scaling;
      const double old = static_cast<double>(r.original_max_position_embeddings);
      for (double& x : f) {
        const double wavelen = 2 * std::numbers::pi / x;
        const double scaled = wavelen > old / r.low_freq_factor ? x / r.factor : x;
        const double smooth =
            (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        const bool medium =
            !(wavelen < old / r.high_freq_factor) && !(wavelen > old / r.low_freq_factor);
        x = medium ? (1 - smooth) * scaled / r.factor + smooth * scaled : scaled;
      }
    }
    return f;
  }

  void Rope(double* h, int pos, const std::vector<double>& inv) const {
    const int half = c_.head_dim / 2;
    for (int i = 0; i < half; ++i) {
      const double cs = std::cos(pos * inv[i]), sn = std::sin(pos * inv[i]);
      const double a = h[i], b = h[i + half];
      h[i] = a * cs - b * sn;
      h[i + half] = b * cs + a * sn;
    }
  }

  // Logits after the last of `ids`, recomputing everything from scratch.
  Mat LastLogits(const std::vector<int32_t>& ids) const {
    const int n = static_cast<int>(ids.size()), hd = c_.head_dim, H = c_.num_heads,
              KV = c_.num_kv_heads, hidden = c_.hidden_size;
    const Mat embed = c_.tie_word_embeddings && s_.Find(model::kEmbedName) == nullptr
                          ? W(model::kLmHeadName)
                          : W(model::kEmbedName);
    std::vector<Mat> x(n);
    for (int t = 0; t < n; ++t)
      x[t] = Mat(embed.begin() + ids[t] * hidden, embed.begin() + (ids[t] + 1) * hidden);
    const std::vector<double> inv = InvFreq();
    for (int l = 0; l < c_.num_layers; ++l) {
      const auto names = model::LlamaLayerTensorNames(l);
      const Mat wq = W(names.q), wk = W(names.k), wv = W(names.v), wo = W(names.o);
      const Mat bq = W(names.q_bias), bk = W(names.k_bias), bv = W(names.v_bias),
                bo = W(names.o_bias);
      std::vector<Mat> q(n), k(n), v(n);
      for (int t = 0; t < n; ++t) {
        const Mat xn = Norm(x[t], W(names.input_norm));
        q[t] = Linear(wq, bq, xn);
        k[t] = Linear(wk, bk, xn);
        v[t] = Linear(wv, bv, xn);
        if (c_.qk_norm) {  // Qwen3: an RMSNorm over each head's q and k, before RoPE
          for (int h = 0; h < H; ++h) HeadNorm(&q[t][h * hd], W(names.q_norm));
          for (int h = 0; h < KV; ++h) HeadNorm(&k[t][h * hd], W(names.k_norm));
        }
        for (int h = 0; h < H; ++h) Rope(&q[t][h * hd], t, inv);
        for (int h = 0; h < KV; ++h) Rope(&k[t][h * hd], t, inv);
        kv_.Apply(l, k[t].data(), v[t].data(), KV * hd);
      }
      for (int t = 0; t < n; ++t) {
        Mat attn(H * hd, 0.0);
        for (int h = 0; h < H; ++h) {
          const int kvh = h / (H / KV);
          const int first = c_.sliding_window > 0 ? std::max(0, t - c_.sliding_window + 1) : 0;
          std::vector<double> score;
          double mx = -1e300;
          for (int s = first; s <= t; ++s) {
            double d = 0;
            for (int i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[s][kvh * hd + i];
            score.push_back(d / std::sqrt(static_cast<double>(hd)));
            mx = std::max(mx, score.back());
          }
          double sum = 0;
          for (double& sc : score) sum += (sc = std::exp(sc - mx));
          for (int s = first; s <= t; ++s) {
            for (int i = 0; i < hd; ++i) {
              attn[h * hd + i] += score[s - first] / sum * v[s][kvh * hd + i];
            }
          }
        }
        const Mat o = Linear(wo, bo, attn);
        for (int i = 0; i < hidden; ++i) x[t][i] += o[i];
        const Mat xn = Norm(x[t], W(names.post_norm));
        const Mat g = Linear(W(names.gate), W(names.gate_bias), xn);
        const Mat u = Linear(W(names.up), W(names.up_bias), xn);
        Mat act(g.size());
        for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        const Mat d = Linear(W(names.down), W(names.down_bias), act);
        for (int i = 0; i < hidden; ++i) x[t][i] += d[i];
      }
    }
    const Mat xn = Norm(x[n - 1], W(model::kFinalNormName));
    const Mat head = c_.tie_word_embeddings ? embed : W(model::kLmHeadName);
    const RefActivations keep = act_;
    act_ = {};  // the head stays 16-bit
    Mat logits = Linear(head, {}, xn);
    act_ = keep;
    return logits;
  }

 private:
  const model::ModelConfig& c_;
  const model::TensorStore& s_;
  const model::TensorStore* dequantised_;
  mutable RefActivations act_;
  RefKvCache kv_;
};

// The sizes of a small random model (TinyLlama).
struct TinyShape {
  int32_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
// A Llama config of shape `s` for random checkpoints: 97 tokens, 64 positions.
inline model::ModelConfig TinyLlama(const TinyShape& s) {
  model::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 97;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_layers = s.layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  return c;
}

// Writes config.json and a random f32 model.safetensors for `c` into a new directory: norms
// 1 +- 0.5, biases +- 0.2, matrices uniform in +- sqrt(linear_bound_sq / fan_in).
inline std::string WriteRandomCheckpoint(const model::ModelConfig& c, uint32_t seed,
                                         float linear_bound_sq = 3.0f) {
  const std::string dir = llm::testing::MakeTempDir("ckpt");
  EXPECT_TRUE(WriteStringToFile(dir + "/config.json", model::ModelConfigToJson(c).dump()).ok());
  std::mt19937 rng(seed);
  std::vector<model::TensorData> tensors;
  for (const auto& spec : model::LlamaTensorSpecs(c)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    const float bound = spec.kind == model::TensorKind::kNorm ? 0.5f
                        : spec.kind == model::TensorKind::kBias
                            ? 0.2f
                            : std::sqrt(linear_bound_sq / static_cast<float>(spec.fan_in));
    std::uniform_real_distribution<float> d(-bound, bound);
    std::vector<float> v(n);
    for (float& x : v) x = spec.kind == model::TensorKind::kNorm ? 1.0f + d(rng) : d(rng);
    tensors.push_back({spec.name, model::DType::kF32, spec.shape,
                       std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  }
  EXPECT_TRUE(model::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

// The CPU model's logits after the last of `ids` (one sequence, one chunk).
inline std::vector<float> CpuLastLogits(CpuModel& m, const std::vector<int32_t>& ids) {
  CpuKvCache kv(m.config(), (static_cast<int32_t>(ids.size()) + 15) / 16, 16);
  std::vector<int32_t> table(static_cast<size_t>(kv.num_blocks()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  SeqChunk chunk{0, static_cast<int32_t>(ids.size()), 0, table, true};
  std::vector<float> logits;
  EXPECT_TRUE(m.Forward({ids, std::span<const SeqChunk>(&chunk, 1)}, kv, logits).ok());
  return logits;
}

// ||got - want|| / ||want||.
inline double RelativeL2(const std::vector<float>& got, const Mat& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace llm::runner::testing

#endif  // LLM_TESTS_WORKER_RUNNER_REFERENCE_FORWARD_H_
