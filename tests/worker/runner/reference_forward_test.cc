// Checks the CPU forward pass against an independent, naive double-precision Llama forward
// (no KV cache, no paging, no fused weights) on random checkpoints that exercise biases, GQA
// ratios 1/4/8, explicit head_dim, Llama 3 RoPE scaling and sliding windows.
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>

#include "common/mapped_file.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/config.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner {
namespace {

using model::ModelConfig;
using Mat = std::vector<double>;

// Writes config.json and a random f32 model.safetensors for `c` into a new directory.
std::string WriteRandomCheckpoint(const ModelConfig& c, uint32_t seed) {
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
                            : std::sqrt(3.0f / static_cast<float>(spec.fan_in));
    std::uniform_real_distribution<float> d(-bound, bound);
    std::vector<float> v(n);
    for (float& x : v) x = spec.kind == model::TensorKind::kNorm ? 1.0f + d(rng) : d(rng);
    tensors.push_back({spec.name, model::DType::kF32, spec.shape,
                       std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  }
  EXPECT_TRUE(model::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

class Reference {
 public:
  Reference(const ModelConfig& c, const model::TensorStore& s) : c_(c), s_(s) {}

  Mat W(const std::string& name) const {
    const model::TensorView* v = s_.Find(name);
    if (v == nullptr) return {};
    std::vector<float> f(v->num_elements());
    model::ConvertToF32(v->dtype, v->data, f.size(), f.data());
    return Mat(f.begin(), f.end());
  }

  // y = W x + b, W: [out, in].
  static Mat Linear(const Mat& w, const Mat& b, const Mat& x) {
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
        for (int h = 0; h < H; ++h) Rope(&q[t][h * hd], t, inv);
        for (int h = 0; h < KV; ++h) Rope(&k[t][h * hd], t, inv);
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
    return Linear(head, {}, xn);
  }

 private:
  const ModelConfig& c_;
  const model::TensorStore& s_;
};

ModelConfig Base() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 12;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  return c;
}

void ExpectMatchesReference(const ModelConfig& c, uint32_t seed) {
  const std::string dir = WriteRandomCheckpoint(c, seed);
  ThreadPool pool(2);
  auto cpu = CpuModel::Load(dir, &pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto store = model::TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  Reference ref((*cpu)->config(), **store);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(13);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % c.vocab_size);
  CpuKvCache kv((*cpu)->config(), 1, 16);
  const std::vector<int32_t> table{0};
  SeqChunk chunk{0, static_cast<int32_t>(ids.size()), 0, table, true};
  std::vector<float> logits;
  ASSERT_TRUE((*cpu)->Forward({ids, std::span<const SeqChunk>(&chunk, 1)}, kv, logits).ok());
  const Mat want = ref.LastLogits(ids);
  ASSERT_EQ(logits.size(), want.size());
  // fp32 against fp64 through two layers of unit-scale activations.
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(logits[i], want[i], 2e-4) << "logit " << i;
}

TEST(ReferenceForwardTest, LlamaWithAllBiasesAndGqa4Tied) {
  ModelConfig c = Base();
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 8;  // explicit, not hidden / heads
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.tie_word_embeddings = true;
  ExpectMatchesReference(c, 1);
}

TEST(ReferenceForwardTest, Qwen2QkvBiasUntied) {
  ModelConfig c = Base();
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.head_dim = 16;
  ExpectMatchesReference(c, 2);
}

TEST(ReferenceForwardTest, MistralSlidingWindowGqa8) {
  ModelConfig c = Base();
  c.model_type = "mistral";
  c.num_heads = 8;
  c.num_kv_heads = 1;
  c.head_dim = 6;
  c.sliding_window = 5;
  ExpectMatchesReference(c, 3);
}

TEST(ReferenceForwardTest, Llama3RopeScaling) {
  ModelConfig c = Base();
  c.rope_theta = 500000.0;
  c.rope_scaling = {model::RopeScaling::Kind::kLlama3, 8.0, 1.0, 4.0, 16};
  ExpectMatchesReference(c, 4);
}

}  // namespace
}  // namespace llm::runner
