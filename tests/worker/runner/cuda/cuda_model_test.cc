// The CUDA model's host-side choices, which need no device.
#include "worker/runner/cuda/cuda_model.h"

#include "gtest/gtest.h"
#include "worker/model/shapes.h"

namespace llm::runner::cuda {
namespace {

// engine.cuda_pdl: auto turns programmatic dependent launch on for the model it was measured to
// help (qwen2-0.5b) and leaves it off for those it slowed (llama-3.2-1b, llama-3-8b).
TEST(CudaModelTest, ProgrammaticLaunchPaysForSmallLayersOnly) {
  const struct {
    const char* shape;
    int64_t layer_bytes;
    bool pays;
  } cases[] = {
      // 896 wide: q/k/v 896 x 1152, o 896 x 896, gate/up/down 3 x 896 x 4864, two norms.
      {"qwen2-0.5b", 2 * (896 * 1152 + 896 * 896 + 3 * 896 * 4864 + 2 * 896), true},
      {"llama-3.2-1b", 2 * (2048 * 3072 + 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2048), false},
      {"llama-3-8b", int64_t{2} * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096), false},
  };
  for (const auto& c : cases) {
    auto config = model::ShapeConfig(c.shape);
    ASSERT_TRUE(config.ok()) << c.shape << ": " << config.status();
    EXPECT_EQ(LayerWeightBytes(*config), c.layer_bytes) << c.shape;
    EXPECT_EQ(ProgrammaticLaunchPays(*config), c.pays) << c.shape;
  }
  // FP8 products read a byte a weight: llama-3.2-1b's layers (61 MiB) then count as small.
  auto config = model::ShapeConfig("llama-3.2-1b");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(LayerWeightBytes(*config, /*fp8=*/true),
            2048 * 3072 + 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2 * 2048);
  EXPECT_TRUE(ProgrammaticLaunchPays(*config, /*fp8=*/true));
}

}  // namespace
}  // namespace llm::runner::cuda
