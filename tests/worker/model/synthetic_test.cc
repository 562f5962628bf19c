#include "worker/model/synthetic.h"

#include <cstring>
#include <tuple>

#include "common/random_weights.h"
#include "gtest/gtest.h"
#include "worker/model/shapes.h"

namespace llm::model {
namespace {

TEST(ModelSourceTest, ParsesRandomShapesSeedsAndDirectories) {
  auto s = ParseModelSource("random:tiny");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->synthetic());
  EXPECT_EQ(s->shape, "tiny");
  EXPECT_EQ(s->seed, 0u);
  EXPECT_EQ(s->name(), "random:tiny");

  s = ParseModelSource("random:llama-3-8b:42");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape, "llama-3-8b");
  EXPECT_EQ(s->seed, 42u);

  s = ParseModelSource("/models/Llama-3.2-1B/");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->synthetic());
  EXPECT_EQ(s->dir, "/models/Llama-3.2-1B/");
  EXPECT_EQ(s->name(), "Llama-3.2-1B");

  for (const char* bad :
       {"random:", "random:nope", "random:tiny:", "random:tiny:-1", "random:tiny:12x", ""}) {
    const auto r = ParseModelSource(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseModelSource("random:nope").status().message().find("known: tiny"),
            std::string::npos);
}

// llama-3.1-8b is llama-3-8b with Llama 3.1's 128k context and RoPE scaling, for long prompts.
TEST(ShapeConfigTest, Llama31Is8bWithA128kContext) {
  auto a = ShapeConfig("llama-3-8b"), b = ShapeConfig("llama-3.1-8b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->max_position_embeddings, 8192);
  EXPECT_EQ(b->max_position_embeddings, 131072);
  EXPECT_EQ(b->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(b->rope_scaling.factor, 8.0);
  EXPECT_EQ(b->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(a->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(std::tie(a->hidden_size, a->intermediate_size, a->num_layers, a->num_heads,
                     a->num_kv_heads, a->vocab_size),
            std::tie(b->hidden_size, b->intermediate_size, b->num_layers, b->num_heads,
                     b->num_kv_heads, b->vocab_size));
}

TEST(SyntheticStoreTest, HoldsEveryTensorWithTheFillRule) {
  auto config = ShapeConfig("tiny");
  ASSERT_TRUE(config.ok());
  auto store = MakeSyntheticStore(*config, 7, DType::kF32, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const TensorSpec& spec : LlamaTensorSpecs(*config)) {
    auto v = GetChecked(**store, spec);
    ASSERT_TRUE(v.ok()) << v.status();
    const SyntheticFill fill = SyntheticFillFor(spec);
    const uint64_t stream = TensorStream(7, spec.name);
    for (int64_t i : {int64_t{0}, int64_t{1}, (*v)->num_elements() - 1}) {
      float got;
      std::memcpy(&got, (*v)->data + i * 4, 4);
      EXPECT_EQ(got, SyntheticValue(stream, static_cast<uint64_t>(i), fill.bound, fill.constant))
          << spec.name << "[" << i << "]";
    }
  }
  // Norms are ones; matrices are spread with a standard deviation near 1/sqrt(fan_in).
  EXPECT_EQ(SyntheticFillFor({"n", {4}, TensorKind::kNorm}).constant, 1.0f);
  EXPECT_NEAR(SyntheticFillFor({"w", {4, 64}, TensorKind::kLinear, 64}).bound, std::sqrt(3.0f / 64),
              1e-7);
}

TEST(SyntheticStoreTest, Bf16IsTheRoundedFloat) {
  auto config = ShapeConfig("tiny");
  ASSERT_TRUE(config.ok());
  const TensorSpec spec = LlamaTensorSpecs(*config)[2];
  std::vector<std::byte> f32(4 * 100), bf16(2 * 100);
  FillSynthetic(spec, 3, 1000, 100, DType::kF32, f32.data(), nullptr);
  FillSynthetic(spec, 3, 1000, 100, DType::kBF16, bf16.data(), nullptr);
  for (int i = 0; i < 100; ++i) {
    float f;
    uint16_t h;
    std::memcpy(&f, f32.data() + 4 * i, 4);
    std::memcpy(&h, bf16.data() + 2 * i, 2);
    EXPECT_EQ(h, F32ToBf16(f));
  }
}

TEST(TensorStoreTest, FromTensorsChecksSizesAndNames) {
  std::vector<TensorData> ok = {{"a", DType::kF32, {2, 2}, std::string(16, '\0')},
                                {"b", DType::kBF16, {3}, std::string(6, '\0')}};
  auto store = TensorStore::FromTensors("mem", ok);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 2u);
  ASSERT_NE((*store)->Find("b"), nullptr);
  EXPECT_EQ((*store)->Find("b")->num_bytes, 6u);

  auto bad = TensorStore::FromTensors("mem", {{"a", DType::kF32, {2, 2}, std::string(15, '\0')}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tensor 'a'"), std::string::npos) << bad.status();
  auto twice = TensorStore::FromTensors("mem", {{"a", DType::kU8, {1}, std::string(1, '\0')},
                                                {"a", DType::kU8, {1}, std::string(1, '\0')}});
  EXPECT_NE(twice.status().message().find("appears twice"), std::string::npos);
}

}  // namespace
}  // namespace llm::model
