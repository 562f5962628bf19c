// The CPU reference on FP8 checkpoints that our writer makes (llm-cli quantize's
// WriteFp8Checkpoint) from random checkpoints whose dimensions are not multiples of 128, against
// the double-precision reference forward (weights decoded by the test's own E4M3 table, inputs
// rounded by its own rounding); and engine.quantization: fp8 against the same checkpoint
// written per channel. The independent writer's checkpoints are fp8_checkpoint_test's.
#include <random>

#include "common/mapped_file.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/worker/runner/reference_forward.h"
#include "worker/model/fp8_writer.h"
#include "worker/model/linear_weights.h"
#include "worker/model/quant_scheme.h"
#include "worker/runner/cpu_model.h"

namespace llm::runner {
namespace {

using model::ModelConfig;
using model::WeightScaling;
using testing::Mat;
using testing::RefActivations;

ModelConfig Shape() {
  // hidden 128 + 16: a partial block.
  ModelConfig c = testing::TinyLlama(
      {.hidden = 144, .intermediate = 200, .layers = 2, .heads = 6, .kv_heads = 2, .head_dim = 24});
  c.model_type = "qwen2";  // q/k/v biases ride along with the FP8 products
  c.qkv_bias = true;
  return c;
}

// A random f32 checkpoint of `c` in a new folder, its matrices a little wider than
// reference_forward_test's (std 1/sqrt(fan_in) * sqrt(2)), so the products' inputs span E4M3's
// range better.
std::string RandomCheckpoint(const ModelConfig& c, uint32_t seed) {
  return testing::WriteRandomCheckpoint(c, seed, 6.0f);
}

std::string Quantized(const std::string& src, const ModelConfig& c, WeightScaling s) {
  auto store = model::TensorStore::Open(src);
  EXPECT_TRUE(store.ok()) << store.status();
  const std::string out = llm::testing::MakeTempDir("fp8out");
  ThreadPool pool(2);
  const absl::Status st = model::WriteFp8Checkpoint(c, **store, s, out, &pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// The FP8 linear weights of `dir` decoded with the reference's own E4M3 table (codes 0..0x7E,
// the sign bit) times their scales, as float32 tensors.
std::unique_ptr<model::TensorStore> Dequantised(const std::string& dir, const ModelConfig& c) {
  auto store = model::TensorStore::Open(dir);
  auto scheme = model::LoadQuantScheme(dir);
  EXPECT_TRUE(store.ok() && scheme.ok());
  std::vector<model::TensorData> out;
  for (const auto& spec : model::LlamaTensorSpecs(c)) {
    if (spec.kind != model::TensorKind::kLinear || spec.name == model::kLmHeadName) continue;
    const model::TensorView* w = (*store)->Find(spec.name);
    const std::string module = model::ModuleOf(spec.name);
    const model::TensorView* s = (*store)->Find(module + "." + scheme->weight_scale_name);
    EXPECT_TRUE(w != nullptr && s != nullptr && w->dtype == model::DType::kF8E4M3) << spec.name;
    const int64_t rows = spec.shape[0], cols = spec.shape[1], blocks = (cols + 127) / 128;
    const auto* scales = reinterpret_cast<const float*>(s->data);
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const uint8_t code = reinterpret_cast<const uint8_t*>(w->data)[r * cols + col];
        const int e = (code >> 3) & 0xF, m = code & 7;
        double value = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
        if (code & 0x80) value = -value;
        const float scale = scheme->weights == WeightScaling::kTensor ? scales[0]
                            : scheme->weights == WeightScaling::kChannel
                                ? scales[r]
                                : scales[r / 128 * blocks + col / 128];
        v[static_cast<size_t>(r * cols + col)] = static_cast<float>(value) * scale;
      }
    }
    out.push_back({spec.name, model::DType::kF32, spec.shape,
                   std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  }
  auto s = model::TensorStore::FromTensors("dequantised", std::move(out));
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

std::vector<float> Logits(CpuModel& m, const std::vector<int32_t>& ids) {
  return testing::CpuLastLogits(m, ids);
}

using testing::RelativeL2;

const std::vector<int32_t> kIds = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};

// Each of llm-cli quantize's formats loads and matches the reference forward.
TEST(CpuFp8Test, OurCheckpointsMatchTheReferenceForward) {
  const ModelConfig c = Shape();
  const std::string src = RandomCheckpoint(c, 11);
  for (WeightScaling s : {WeightScaling::kTensor, WeightScaling::kChannel, WeightScaling::kBlock}) {
    const std::string dir = Quantized(src, c, s);
    ThreadPool pool(2);
    auto cpu = CpuModel::Load(dir, &pool);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto store = model::TensorStore::Open(dir);
    ASSERT_TRUE(store.ok());
    const auto weights = Dequantised(dir, c);
    RefActivations act;
    act.mode =
        s == WeightScaling::kBlock ? RefActivations::Mode::kGroup : RefActivations::Mode::kToken;
    testing::Reference ref((*cpu)->config(), **store, weights.get(), act);
    const Mat want = ref.LastLogits(kIds);
    const std::vector<float> got = Logits(**cpu, kIds);
    ASSERT_EQ(got.size(), want.size());
    // fp32 against fp64 (a few 1e-7 measured); an input element that rounds to the other
    // E4M3 neighbour in the two would move by 1/16 of itself, which the bound allows for.
    const double rel = RelativeL2(got, want);
    EXPECT_LT(rel, 1e-4) << model::WeightScalingName(s);
    // Without the inputs' rounding the reference is far away: the CPU does round them.
    testing::Reference no_act((*cpu)->config(), **store, weights.get());
    const double rel_no_act = RelativeL2(got, no_act.LastLogits(kIds));
    EXPECT_GT(rel_no_act, 100 * rel) << model::WeightScalingName(s);
    std::printf("%s: relative L2 %.3g against the reference, %.3g without its rounding\n",
                model::WeightScalingName(s), rel, rel_no_act);
  }
}

// engine.quantization: fp8 quantises each row at load as the writer does per channel: the same
// logits, bit for bit.
TEST(CpuFp8Test, QuantisedAtLoadEqualsTheChannelCheckpoint) {
  const ModelConfig c = Shape();
  const std::string src = RandomCheckpoint(c, 12);
  const std::string dir = Quantized(src, c, WeightScaling::kChannel);
  ThreadPool pool(2);
  auto from_file = CpuModel::Load(dir, &pool);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto store = model::TensorStore::Open(src);
  ASSERT_TRUE(store.ok());
  auto online = model::ApplyQuantizationOption("fp8", model::QuantScheme());
  ASSERT_TRUE(online.ok());
  auto at_load = CpuModel::FromStore(c, **store, &pool, *online);
  ASSERT_TRUE(at_load.ok()) << at_load.status();
  EXPECT_EQ(Logits(**from_file, kIds), Logits(**at_load, kIds));
  auto plain = CpuModel::FromStore(c, **store, &pool);
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(Logits(**plain, kIds), Logits(**at_load, kIds));
}

// A quantised checkpoint is not quantised again: the writer refuses it, naming the tensor.
TEST(CpuFp8Test, TheWriterRefusesAnFp8Checkpoint) {
  const ModelConfig c = Shape();
  const std::string dir = Quantized(RandomCheckpoint(c, 13), c, WeightScaling::kChannel);
  auto store = model::TensorStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const std::string out = llm::testing::MakeTempDir("fp8again");
  const absl::Status st =
      model::WriteFp8Checkpoint(c, **store, WeightScaling::kChannel, out, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("F8_E4M3"), std::string::npos) << st;
}

}  // namespace
}  // namespace llm::runner
