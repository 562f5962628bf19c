// The CPU reference with an FP8 KV cache (engine.kv_cache_dtype: fp8): every cached K and V goes
// through E4M3 with its layer's scale, against the double-precision reference forward doing the
// same with its own E4M3 table; the scales read from a checkpoint under each name checkpoints
// use; and a retrieval check a random model can pass: one query's attention over a planted key
// at distances from 1k to 32k, FP8 cache against bf16's.
#include <cmath>
#include <random>

#include "common/fp8.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/worker/runner/reference_forward.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/cpu_ops.h"

namespace llm::runner {
namespace {

using model::ModelConfig;
using testing::Mat;

ModelConfig Shape() {
  return testing::TinyLlama(
      {.hidden = 64, .intermediate = 96, .layers = 3, .heads = 8, .kv_heads = 2, .head_dim = 8});
}

// `dir`'s tensors plus one K and one V scale a layer under `names` ("self_attn.k_scale" style:
// `k_name` and `v_name` follow "model.layers.N.").
std::unique_ptr<model::TensorStore> WithScales(const std::string& dir, const ModelConfig& c,
                                               const std::string& k_name, const std::string& v_name,
                                               float k, float v) {
  auto read = model::ReadSafetensors(dir + "/model.safetensors");
  EXPECT_TRUE(read.ok()) << read.status();
  std::vector<model::TensorData> t = *std::move(read);
  for (int l = 0; l < c.num_layers; ++l) {
    const float ks = k * (1 + l), vs = v * (1 + l);  // a different scale a layer
    t.push_back({"model.layers." + std::to_string(l) + "." + k_name,
                 model::DType::kF32,
                 {},
                 std::string(reinterpret_cast<const char*>(&ks), 4)});
    t.push_back({"model.layers." + std::to_string(l) + "." + v_name,
                 model::DType::kF32,
                 {1},
                 std::string(reinterpret_cast<const char*>(&vs), 4)});
  }
  auto s = model::TensorStore::FromTensors(dir, std::move(t));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

const std::vector<int32_t> kIds = {5, 17, 29, 41, 53, 65, 77, 89, 3, 11, 23, 35, 47, 59, 71};

TEST(CpuFp8KvTest, TheCacheRoundsAsTheReferenceDoesWithEachScaleName) {
  const ModelConfig c = Shape();
  const std::string dir = testing::WriteRandomCheckpoint(c, 21);
  const std::pair<const char*, const char*> names[] = {
      {"self_attn.k_scale", "self_attn.v_scale"},                           // compressed-tensors
      {"self_attn.k_proj.k_scale", "self_attn.v_proj.v_scale"},             // ModelOpt
      {"self_attn.k_proj.output_scale", "self_attn.v_proj.output_scale"}};  // older files
  ThreadPool pool(2);
  for (const auto& [k_name, v_name] : names) {
    const auto store = WithScales(dir, c, k_name, v_name, 0.02f, 0.01f);
    auto kv = model::ResolveKvCache("fp8", model::QuantScheme(), c, store.get());
    ASSERT_TRUE(kv.ok()) << kv.status();
    ASSERT_EQ(kv->k_scale.size(), 3u);
    EXPECT_EQ(kv->k_scale[2], 0.02f * 3);
    EXPECT_EQ(kv->v_scale[1], 0.01f * 2);
    auto cpu = CpuModel::FromStore(c, *store, &pool, model::QuantScheme(), *kv);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    testing::RefKvCache ref_kv;
    for (int l = 0; l < c.num_layers; ++l) {
      ref_kv.k_scale.push_back(kv->k_scale[l]);
      ref_kv.v_scale.push_back(kv->v_scale[l]);
    }
    const Mat want = testing::Reference(c, *store, nullptr, {}, ref_kv).LastLogits(kIds);
    const std::vector<float> got = testing::CpuLastLogits(**cpu, kIds);
    const double rel = testing::RelativeL2(got, want);
    const double rel_bf16 =
        testing::RelativeL2(got, testing::Reference(c, *store).LastLogits(kIds));
    std::printf("%s: relative L2 %.3g against the reference, %.3g against an unrounded cache\n",
                k_name, rel, rel_bf16);
    EXPECT_LT(rel, 1e-4) << k_name;
    EXPECT_GT(rel_bf16, 10 * rel) << k_name << ": the cache did not round";
  }
  // No scales in the checkpoint: 1.0, as vLLM; a bf16 cache rounds nothing.
  auto plain = model::TensorStore::Open(dir);
  ASSERT_TRUE(plain.ok());
  auto kv = model::ResolveKvCache("fp8", model::QuantScheme(), c, plain->get());
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->k_scale, std::vector<float>(3, 1.0f));
  EXPECT_NE(kv->Describe().find("scales 1.0"), std::string::npos) << kv->Describe();
  auto bf16 = model::ResolveKvCache("bf16", model::QuantScheme(), c, plain->get());
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(bf16->fp8());
}

TEST(CpuFp8KvTest, AutoFollowsTheCheckpointAndBadScalesAreNamed) {
  const ModelConfig c = Shape();
  const std::string dir = testing::WriteRandomCheckpoint(c, 22);
  model::QuantScheme declares;
  declares.kv_cache_fp8 = true;
  declares.source = "ckpt/config.json";
  const auto store = WithScales(dir, c, "self_attn.k_scale", "self_attn.v_scale", 0.01f, 0.01f);
  auto kv = model::ResolveKvCache("auto", declares, c, store.get());
  ASSERT_TRUE(kv.ok());
  EXPECT_TRUE(kv->fp8());
  EXPECT_NE(kv->Describe().find("ckpt/config.json"), std::string::npos) << kv->Describe();
  EXPECT_FALSE(model::ResolveKvCache("auto", model::QuantScheme(), c, store.get())->fp8());
  auto bad = model::ResolveKvCache("int8", declares, c, store.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("engine.kv_cache_dtype"), std::string::npos);
  const auto negative = WithScales(dir, c, "self_attn.k_scale", "self_attn.v_scale", -1.0f, 1.0f);
  bad = model::ResolveKvCache("fp8", declares, c, negative.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers.0.self_attn.k_scale"), std::string::npos)
      << bad.status();
}

// One query attending over `context` keys, one of them planted `distance` positions back (a
// the query scaled by 1.25, so its score is about 14 against the others' N(0, 1)); the rest
// random. The output is
// the softmax-weighted values; the planted value should dominate it. The cache's K and V go
// through E4M3 with scale 1 (no checkpoint scales) or stay fp32, and the two outputs are
// compared: their cosine and each one's weight on the planted value.
struct Retrieval {
  double cosine;        // FP8 output against the fp32 cache's
  double planted_fp32;  // the planted key's softmax weight, fp32 cache
  double planted_fp8;
};

Retrieval RetrieveOnce(int32_t context, int32_t distance, uint32_t seed) {
  const int d = 128;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> q(d), keys(static_cast<size_t>(context) * d), values(keys.size());
  for (float& x : q) x = n01(rng);
  for (float& x : keys) x = n01(rng);
  for (float& x : values) x = n01(rng);
  const int32_t at = context - 1 - distance;
  for (int i = 0; i < d; ++i) keys[static_cast<size_t>(at) * d + i] = 1.25f * q[i];  // the needle
  for (int i = 0; i < d; ++i) values[static_cast<size_t>(at) * d + i] = 4.0f;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto attend = [&](bool fp8, double* planted) {
    std::vector<float> scores(context), out(d, 0.0f);
    std::vector<float> k(d), v(d);
    for (int32_t t = 0; t < context; ++t) {
      for (int i = 0; i < d; ++i) {
        k[i] = keys[static_cast<size_t>(t) * d + i];
        v[i] = values[static_cast<size_t>(t) * d + i];
        if (fp8) {
          k[i] = Fp8RoundTrip(k[i], 1.0f);
          v[i] = Fp8RoundTrip(v[i], 1.0f);
        }
      }
      scores[t] = scale * Dot(q.data(), k.data(), d);
    }
    SoftmaxInPlace(scores.data(), context);
    *planted = scores[at];
    for (int32_t t = 0; t < context; ++t) {
      for (int i = 0; i < d; ++i) {
        const float vi = fp8 ? Fp8RoundTrip(values[static_cast<size_t>(t) * d + i], 1.0f)
                             : values[static_cast<size_t>(t) * d + i];
        out[i] += scores[t] * vi;
      }
    }
    return out;
  };
  Retrieval r;
  const std::vector<float> a = attend(false, &r.planted_fp32), b = attend(true, &r.planted_fp8);
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < d; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  r.cosine = ab / std::sqrt(aa * bb);
  return r;
}

// The FP8 cache keeps the planted key found: at 1k, 8k and 32k tokens back the FP8 output is
// within a cosine of 0.999 of the fp32 cache's, and the planted key keeps at least 90% of the
// softmax weight it had.
TEST(CpuFp8KvTest, APlantedKeyIsRetrievedAsWithABf16Cache) {
  for (const int32_t distance : {1024, 8192, 32768}) {
    const Retrieval r = RetrieveOnce(distance + 64, distance, static_cast<uint32_t>(distance));
    std::printf("distance %d: 1 - output cosine %.2e, planted weight %.4f (fp8) vs %.4f (fp32)\n",
                distance, 1.0 - r.cosine, r.planted_fp8, r.planted_fp32);
    EXPECT_GT(r.cosine, 0.999) << distance;
    EXPECT_GT(r.planted_fp8, 0.9 * r.planted_fp32) << distance;
    EXPECT_GT(r.planted_fp32, 0.5) << distance << ": the needle should dominate";
  }
}

}  // namespace
}  // namespace llm::runner
