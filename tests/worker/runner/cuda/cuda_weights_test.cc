// How FP8 checkpoints' scales go to the device (kernels/gemm/weight.h's layouts), and which
// quantised models the CUDA runner serves: host logic, no device.
#include "worker/runner/cuda/cuda_weights.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gemm/weight.h"
#include "worker/model/fp8_quant.h"
#include "worker/model/shapes.h"

namespace llm::runner::cuda {
namespace {

using ::testing::HasSubstr;

// A module's LinearWeight with scales only (DeviceScaleArray reads no bytes).
model::LinearWeight Module(int64_t out, int64_t in, model::WeightScaling scaling, uint32_t seed) {
  model::LinearWeight w;
  w.out = out;
  w.in = in;
  w.scaling = scaling;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  w.scales.resize(static_cast<size_t>(model::NumWeightScales(scaling, out, in)));
  for (float& s : w.scales) s = d(rng);
  return w;
}

// The scale of every element of the stacked product, read through the device layout, is its
// module's own (Fp8Matrix's layout), for q, k and v of different heights, each scaling.
TEST(CudaWeightsTest, DeviceScalesAreEachModulesOwn) {
  const int64_t in = 1040;  // 8.125 blocks of 128: a partial last block and a padded row
  const int64_t outs[] = {512, 128, 128};
  for (model::WeightScaling s : {model::WeightScaling::kTensor, model::WeightScaling::kChannel,
                                 model::WeightScaling::kBlock}) {
    std::vector<model::LinearWeight> shards;
    int64_t out = 0;
    for (size_t k = 0; k < 3; ++k) {
      shards.push_back(Module(outs[k], in, s, static_cast<uint32_t>(k)));
      out += outs[k];
    }
    const kernels::WeightScales layout = s == model::WeightScaling::kBlock
                                             ? kernels::WeightScales::kBlock
                                             : kernels::WeightScales::kRow;
    const std::vector<float> a = DeviceScaleArray(shards, layout, out, static_cast<int32_t>(in));
    ASSERT_EQ(static_cast<int64_t>(a.size()),
              layout == kernels::WeightScales::kBlock
                  ? kernels::BlockScaleCount(static_cast<int32_t>(out), static_cast<int32_t>(in))
                  : out);
    int64_t first = 0;
    for (const auto& m : shards) {
      model::Fp8Matrix fm;
      fm.out = m.out;
      fm.in = m.in;
      fm.scaling = m.scaling;
      fm.scales = m.scales;
      for (int64_t r = 0; r < m.out; r += 7) {
        for (int64_t c = 0; c < in; c += 13) {
          ASSERT_EQ(
              kernels::WeightScaleAt(a.data(), layout, static_cast<int32_t>(in),
                                     static_cast<int32_t>(first + r), static_cast<int32_t>(c)),
              fm.ScaleAt(r, c))
              << model::WeightScalingName(s) << " row " << first + r << " col " << c;
        }
      }
      first += m.out;
    }
  }
}

// Block scales stack into one cuBLASLt block grid only where every module but the last holds
// whole 128-row blocks: qwen2-0.5b's do (896, 128 and 4,864 rows), tinystories-656k's k (64
// rows) does not, and is refused naming it; other scalings stack anywhere.
TEST(CudaWeightsTest, BlockScalesNeedWholeBlocksPerModule) {
  model::QuantScheme block;
  block.format = model::QuantScheme::Format::kHfFp8;
  block.weights = model::WeightScaling::kBlock;
  block.activations = model::ActivationScaling::kGroup;
  block.source = "ckpt/config.json";
  auto qwen = model::ShapeConfig("qwen2-0.5b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_TRUE(CheckCudaQuantization(*qwen, block).ok());
  model::ModelConfig small = *qwen;
  small.num_kv_heads = 1;
  small.head_dim = 64;  // k and v of 64 rows
  small.num_heads = 14;
  const absl::Status st = CheckCudaQuantization(small, block);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("k_proj"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("ckpt/config.json"));
  block.weights = model::WeightScaling::kChannel;
  EXPECT_TRUE(CheckCudaQuantization(small, block).ok());
  // The FP8 kernels' shapes: inputs a multiple of 16, a hidden size RMSNorm's FP8 kernel takes.
  model::ModelConfig odd = *qwen;
  odd.intermediate_size = 4860;
  const absl::Status st_odd = CheckCudaQuantization(odd, block);
  ASSERT_FALSE(st_odd.ok());
  EXPECT_THAT(std::string(st_odd.message()), HasSubstr("intermediate_size is 4860"));
  model::ModelConfig wide = *qwen;
  wide.hidden_size = 16384;
  EXPECT_FALSE(CheckCudaQuantization(wide, block).ok());
  EXPECT_TRUE(CheckCudaQuantization(wide, model::QuantScheme()).ok());  // bf16: any shape
}

}  // namespace
}  // namespace llm::runner::cuda
