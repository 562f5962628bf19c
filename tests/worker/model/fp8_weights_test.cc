// The host side of FP8 weights: the quantiser (per tensor, channel and 128x128 block), the
// activations' round trip, and how a checkpoint's FP8 linear layer is read and checked.
#include <cmath>
#include <cstring>
#include <random>

#include "common/fp8.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/linear_weights.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"

namespace llm::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<float> Random(size_t n, uint32_t seed, float bound = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every element's round trip is within half an E4M3 step of its scaled value (relative 2^-4),
// or below the subnormal step; the group's largest magnitude comes back (to float rounding).
void ExpectCloseToTheOriginal(const Fp8Matrix& m, const std::vector<float>& w) {
  std::vector<float> row(m.in);
  for (int64_t r = 0; r < m.out; ++r) {
    m.DequantizeRow(r, row.data());
    for (int64_t c = 0; c < m.in; ++c) {
      const float want = w[r * m.in + c], s = m.ScaleAt(r, c);
      EXPECT_LE(std::fabs(row[c] - want), std::max(std::fabs(want) / 16, s / 1024))
          << r << "," << c;
    }
  }
}

TEST(Fp8QuantTest, ScaleLayoutsAndAccuracyOddShapes) {
  ThreadPool pool(2);
  const int64_t out = 200, in = 300;  // neither a multiple of 128
  std::vector<float> w = Random(out * in, 1);
  w[7 * in + 3] = 9.0f;  // one large value: its row, block and the tensor take its scale
  for (WeightScaling s : {WeightScaling::kTensor, WeightScaling::kChannel, WeightScaling::kBlock}) {
    const Fp8Matrix m = QuantizeFp8(w.data(), out, in, s, &pool);
    EXPECT_EQ(static_cast<int64_t>(m.scales.size()), NumWeightScales(s, out, in));
    ExpectCloseToTheOriginal(m, w);
    EXPECT_FLOAT_EQ(Fp8E4M3ToFloat(m.e4m3[7 * in + 3]) * m.ScaleAt(7, 3), 9.0f);
    EXPECT_FLOAT_EQ(m.ScaleAt(7, 3), 9.0f / 448);
    // The split over the pool does not change a bit.
    const Fp8Matrix serial = QuantizeFp8(w.data(), out, in, s);
    EXPECT_EQ(serial.e4m3, m.e4m3);
    EXPECT_EQ(serial.scales, m.scales);
  }
  EXPECT_EQ(NumWeightScales(WeightScaling::kBlock, out, in), 2 * 3);
  const Fp8Matrix block = QuantizeFp8(w.data(), out, in, WeightScaling::kBlock);
  EXPECT_FLOAT_EQ(block.ScaleAt(0, 0), 9.0f / 448);  // the block holding (7, 3)
  EXPECT_LT(block.ScaleAt(130, 0), 9.0f / 448);      // the block below it
}

TEST(Fp8QuantTest, AZeroRowGetsTheSmallestScaleAndZeros) {
  std::vector<float> w(2 * 16, 0.0f);
  w[16] = 1.0f;
  const Fp8Matrix m = QuantizeFp8(w.data(), 2, 16, WeightScaling::kChannel);
  EXPECT_EQ(m.scales[0], kFp8MinScale);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(m.e4m3[c], 0);
}

TEST(Fp8QuantTest, ActivationRoundTripPerTokenGroupAndStatic) {
  const size_t rows = 3, dim = 300;
  const std::vector<float> x = Random(rows * dim, 2, 4.0f);
  // Per token: each row's amax maps to 448 and comes back exactly.
  std::vector<float> t = x;
  Fp8RoundTripActivations(t.data(), rows, dim, {ActivationScaling::kToken, 0});
  for (size_t r = 0; r < rows; ++r) {
    float amax = 0;
    size_t at = 0;
    for (size_t i = 0; i < dim; ++i) {
      if (std::fabs(x[r * dim + i]) > amax) amax = std::fabs(x[r * dim + (at = i)]);
      EXPECT_NEAR(t[r * dim + i], x[r * dim + i], std::fabs(x[r * dim + i]) / 16 + 1e-6);
    }
    EXPECT_FLOAT_EQ(t[r * dim + at], x[r * dim + at]);  // 448 * scale, within an ulp or so
  }
  // Per group of 128: the last group has 44 inputs and its own scale.
  std::vector<float> g = x;
  Fp8RoundTripActivations(g.data(), rows, dim, {ActivationScaling::kGroup, 0});
  for (size_t g0 : {0, 128, 256}) {
    float amax = 0;
    for (size_t i = g0; i < std::min(dim, g0 + 128); ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = Fp8ScaleForAmax(amax);
    for (size_t i = g0; i < std::min(dim, g0 + 128); ++i) EXPECT_EQ(g[i], Fp8RoundTrip(x[i], s));
  }
  // Static: values past 448 * scale saturate.
  std::vector<float> st = {1.0f, 100.0f, -100.0f};
  Fp8RoundTripActivations(st.data(), 1, 3, {ActivationScaling::kStatic, 0.125f});
  EXPECT_EQ(st[0], 1.0f);
  EXPECT_EQ(st[1], 56.0f);
  EXPECT_EQ(st[2], -56.0f);
}

// A store holding one FP8 linear layer (q_proj of layer 0) and its scales.
struct Layer {
  int64_t out = 24, in = 32;
  DType weight_dtype = DType::kF8E4M3;
  std::string scale_name = "model.layers.0.self_attn.q_proj.weight_scale";
  DType scale_dtype = DType::kBF16;
  std::vector<int64_t> scale_shape = {24, 1};
  std::vector<float> scales;  // default: 0.5 + 0.01 * row
  bool with_input_scale = false;
  float input_scale = 0.05f;
};

std::string Pack(DType dtype, const std::vector<float>& v) {
  std::string bytes;
  for (float f : v) {
    if (dtype == DType::kF32) {
      bytes.append(reinterpret_cast<const char*>(&f), 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = F32ToBf16(f);
      bytes.append(reinterpret_cast<const char*>(&h), 2);
    } else {
      const int32_t i = static_cast<int32_t>(f);
      bytes.append(reinterpret_cast<const char*>(&i), 4);
    }
  }
  return bytes;
}

std::unique_ptr<TensorStore> Store(const Layer& l) {
  std::vector<TensorData> t;
  std::string weight;
  for (int64_t i = 0; i < l.out * l.in; ++i) weight.push_back(static_cast<char>(i % 0x7E));
  if (l.weight_dtype == DType::kBF16)
    weight = Pack(DType::kBF16, std::vector<float>(l.out * l.in, 1));
  t.push_back({"model.layers.0.self_attn.q_proj.weight", l.weight_dtype, {l.out, l.in}, weight});
  std::vector<float> scales = l.scales;
  if (scales.empty()) {
    int64_t n = 1;
    for (int64_t d : l.scale_shape) n *= d;
    for (int64_t i = 0; i < n; ++i) scales.push_back(0.5f + 0.01f * i);
  }
  t.push_back({l.scale_name, l.scale_dtype, l.scale_shape, Pack(l.scale_dtype, scales)});
  if (l.with_input_scale) {
    t.push_back({"model.layers.0.self_attn.q_proj.input_scale",
                 DType::kF32,
                 {},
                 Pack(DType::kF32, {l.input_scale})});
  }
  auto s = TensorStore::FromTensors("ckpt/model.safetensors", std::move(t));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

QuantScheme Scheme(WeightScaling w, ActivationScaling a) {
  QuantScheme s;
  s.format = QuantScheme::Format::kCompressedTensors;
  s.weights = w;
  s.activations = a;
  s.source = "ckpt/config.json";
  return s;
}

TensorSpec QSpec(const Layer& l) {
  return {"model.layers.0.self_attn.q_proj.weight", {l.out, l.in}, TensorKind::kLinear, l.in};
}

TEST(LinearWeightsTest, ReadsChannelScalesAndDequantises) {
  const Layer l;
  auto store = Store(l);
  auto w =
      GetLinearWeight(*store, Scheme(WeightScaling::kChannel, ActivationScaling::kToken), QSpec(l));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->scaling, WeightScaling::kChannel);
  ASSERT_EQ(w->scales.size(), 24u);
  std::vector<float> row(l.in);
  w->RowToF32(5, row.data());
  const float s = Bf16ToF32(F32ToBf16(0.5f + 0.01f * 5));  // stored as BF16
  for (int64_t c = 0; c < l.in; ++c) {
    EXPECT_EQ(row[c], Fp8E4M3ToFloat(static_cast<uint8_t>((5 * l.in + c) % 0x7E)) * s);
  }
  const Fp8Matrix m = w->ToFp8();
  EXPECT_EQ(m.e4m3.size(), static_cast<size_t>(l.out * l.in));
}

TEST(LinearWeightsTest, ReadsTensorBlockAndStaticScales) {
  Layer l;
  l.scale_shape = {};
  l.scale_dtype = DType::kF32;
  l.with_input_scale = true;
  const auto tensor_store = Store(l);  // the weight's views live as long as their store
  auto w = GetLinearWeight(*tensor_store,
                           Scheme(WeightScaling::kTensor, ActivationScaling::kStatic), QSpec(l));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->input_scale, 0.05f);
  l = Layer();
  l.out = 200;
  l.in = 300;
  l.scale_shape = {2, 3};
  l.scale_name = "model.layers.0.self_attn.q_proj.weight_scale_inv";
  QuantScheme block = Scheme(WeightScaling::kBlock, ActivationScaling::kGroup);
  block.weight_scale_name = "weight_scale_inv";
  const auto block_store = Store(l);
  auto b = GetLinearWeight(*block_store, block, QSpec(l));
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<float> row(l.in);
  b->RowToF32(130, row.data());  // block row 1: scales 3, 4, 5 -> 0.53, 0.54, 0.55
  const auto bf = [](float f) { return Bf16ToF32(F32ToBf16(f)); };
  EXPECT_EQ(row[0], Fp8E4M3ToFloat(static_cast<uint8_t>((130 * 300) % 0x7E)) * bf(0.53f));
  EXPECT_EQ(row[299], Fp8E4M3ToFloat(static_cast<uint8_t>((130 * 300 + 299) % 0x7E)) * bf(0.55f));
}

// Each broken checkpoint is refused with an error naming the file, the tensor and the fault.
TEST(LinearWeightsTest, RefusesBrokenCheckpointsNamingTheTensor) {
  const QuantScheme channel = Scheme(WeightScaling::kChannel, ActivationScaling::kToken);
  struct Case {
    const char* what;
    std::function<void(Layer&)> edit;
    QuantScheme scheme;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"missing scale",
       [](Layer& l) { l.scale_name = "other"; },
       channel,
       {"ckpt/model.safetensors", "missing tensor", "q_proj.weight_scale"}},
      {"scale shape",
       [](Layer& l) {
         l.scale_shape = {24, 2};
       },
       channel,
       {"q_proj.weight_scale", "[24, 2]", "[24] or [24, 1]"}},
      {"scale dtype",
       [](Layer& l) { l.scale_dtype = DType::kI32; },
       channel,
       {"q_proj.weight_scale", "I32"}},
      {"negative scale",
       [](Layer& l) { l.scales.assign(24, -1.0f); },
       channel,
       {"q_proj.weight_scale", "-1", "finite non-negative"}},
      {"NaN scale",
       [](Layer& l) { l.scales.assign(24, std::nanf("")); },
       channel,
       {"q_proj.weight_scale", "nan"}},
      {"16-bit weight",
       [](Layer& l) { l.weight_dtype = DType::kBF16; },
       channel,
       {"q_proj.weight", "BF16", "ckpt/config.json", "F8_E4M3"}},
      {"e5m2 weight",
       [](Layer& l) { l.weight_dtype = DType::kF8E5M2; },
       channel,
       {"q_proj.weight", "F8_E5M2 weights are not served"}},
      {"missing input scale",
       [](Layer& l) {
         l.scale_shape = {1};
         l.scale_dtype = DType::kF32;
       },
       Scheme(WeightScaling::kTensor, ActivationScaling::kStatic),
       {"q_proj.input_scale", "missing tensor"}},
      {"zero input scale",
       [](Layer& l) {
         l.scale_shape = {1};
         l.with_input_scale = true;
         l.input_scale = 0.0f;
       },
       Scheme(WeightScaling::kTensor, ActivationScaling::kStatic),
       {"q_proj.input_scale", "positive"}},
  };
  for (const Case& c : cases) {
    Layer l;
    c.edit(l);
    auto store = Store(l);
    ASSERT_NE(store, nullptr) << c.what;
    auto w = GetLinearWeight(*store, c.scheme, QSpec(l));
    ASSERT_FALSE(w.ok()) << c.what;
    for (const std::string& part : c.message) {
      EXPECT_THAT(std::string(w.status().message()), HasSubstr(part)) << c.what;
    }
  }
}

}  // namespace
}  // namespace llm::model
