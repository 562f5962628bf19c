// The GEMV's norm prologue and accumulate epilogue (gemv.h) against the kernels they replace:
// LaunchRmsNorm followed by the product, and the product followed by LaunchRmsNorm's residual
// add. Both must leave the same bits, so the tolerance is zero: every element is compared bit
// for bit. (The RoPE/KV mode with the norm prologue is in rope_attention_test.cc.)
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/rmsnorm.h"
#include "tests/kernels/gpu_test_util.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

// A residual stream's values: any fp32, not only bf16-representable ones.
std::vector<float> ResidualFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
int DifferingElements(const std::vector<T>& a, const std::vector<T>& b) {
  int differ = a.size() == b.size() ? 0 : 1;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
    differ += std::memcmp(&a[k], &b[k], sizeof(T)) != 0 ? 1 : 0;
  }
  return differ;
}

// Input widths for every float4 count per thread of RmsNormVecKernel (1, 2, 4 and 8), full and
// partly filled, down to one 16-byte vector: 8, 264, 896 (qwen2-0.5b), 1000, 2048 (llama-3.2-1b),
// 3072, 4096 (llama-3-8b) and 8192; at 1 and 2 rows (kGemvNormMaxRows), the fp32 plain mode
// (the lm head; with and without a bias) and the gated mode (gate/up with SiLU; with and without
// a bias). The residual stream's scale varies from row to row, as real rows' do.
TEST(GemvFusionTest, NormPrologueIsRmsNormThenTheProduct) {
  LLM_REQUIRE_GPU();
  Gemm gemm, cublas_only;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(cublas_only.Init(size_t{32} << 20, /*batch_invariant=*/false, /*use_gemv=*/false));
  const float eps = 1e-5f;
  for (int in : {8, 264, 896, 1000, 2048, 3072, 4096, 8192}) {
    for (int rows = 1; rows <= kGemvNormMaxRows; ++rows) {
      for (const bool gated : {false, true}) {
        for (const bool with_bias : {false, true}) {
          const int out = gated ? 37 : 33, w_rows = gated ? 2 * out : out;
          std::vector<float> x = ResidualFloats(size_t(rows) * in, 60 + in + rows, 1.0f);
          for (int i = 0; i < in; ++i) x[size_t(rows - 1) * in + i] *= 40.0f;
          const auto gamma = RandomFloats(in, 61, 0.5f, 1.5f);
          const auto w = RandomFloats(size_t(w_rows) * in, 62, -0.2f, 0.2f);
          const auto bias = RandomFloats(w_rows, 63);
          DeviceBuffer<float> d_x(x), d_bias32(bias);
          DeviceBuffer<__nv_bfloat16> d_gamma(ToBf16Vector(gamma)), d_w(ToBf16Vector(w)),
              d_bias16(ToBf16Vector(bias)), xn(size_t(rows) * in);
          const GemmOut type = gated ? GemmOut::kBf16 : GemmOut::kF32;
          const void* b = !with_bias ? nullptr
                          : gated    ? static_cast<const void*>(d_bias16.get())
                                     : static_cast<const void*>(d_bias32.get());
          DeviceBuffer<float> y32_a(size_t(rows) * out), y32_b(size_t(rows) * out);
          DeviceBuffer<__nv_bfloat16> y16_a(size_t(rows) * out), y16_b(size_t(rows) * out);
          void* y_a = gated ? static_cast<void*>(y16_a.get()) : y32_a.get();
          void* y_b = gated ? static_cast<void*>(y16_b.get()) : y32_b.get();
          // a: the norm kernel, then the product of its output.
          LLM_CUDA_OK(LaunchRmsNorm(
              {d_x.get(), nullptr, d_gamma.get(), xn.get(), nullptr, rows, in, eps}, 0));
          GemmArgs unfused{xn.get(), d_w.get(), b, y_a, rows, in, out, type};
          unfused.silu_mul = gated;
          EXPECT_EQ(gemm.Run(unfused, 0), 0);
          // b: the norm inside the product.
          const NormInput norm{d_x.get(), d_gamma.get(), eps};
          GemmArgs fused{nullptr, d_w.get(), b, y_b, rows, in, out, type};
          fused.silu_mul = gated;
          fused.norm = &norm;
          const std::string what = std::to_string(rows) + " rows, in " + std::to_string(in) +
                                   (gated ? ", gated" : ", plain") + (with_bias ? ", bias" : "");
          ASSERT_TRUE(gemm.FusesEpilogue(fused)) << what;
          EXPECT_FALSE(cublas_only.FusesEpilogue(fused)) << what;
          EXPECT_NE(cublas_only.Run(fused, 0), 0) << what;  // refused, not silently unfused
          EXPECT_EQ(gemm.Run(fused, 0), 0) << what;
          LLM_CUDA_OK(cudaDeviceSynchronize());
          if (gated) {
            EXPECT_EQ(DifferingElements(y16_a.Download(), y16_b.Download()), 0) << what;
          } else {
            EXPECT_EQ(DifferingElements(y32_a.Download(), y32_b.Download()), 0) << what;
          }
          EXPECT_EQ(DifferingElements(d_x.Download(), x), 0) << "the prologue wrote x, " << what;
        }
      }
    }
  }
}

// Where the prologue is refused (the caller then runs the norm kernel): more rows than
// kGemvNormMaxRows, an input wider than the norm kernel's registers, a bf16 plain product, the
// batch-invariant or cuBLASLt-only Gemm, an unaligned residual row.
TEST(GemvFusionTest, NormPrologueRefusedOutsideItsShapes) {
  LLM_REQUIRE_GPU();
  Gemm gemm, invariant;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(invariant.Init(size_t{32} << 20, /*batch_invariant=*/true));
  DeviceBuffer<float> x(size_t(kGemvMaxRows) * (kGemvNormMaxIn + 8) + 4);
  DeviceBuffer<__nv_bfloat16> gamma(kGemvNormMaxIn + 8), w(size_t(4) * (kGemvNormMaxIn + 8));
  DeviceBuffer<float> y(size_t(kGemvMaxRows) * 4);
  const NormInput norm{x.get(), gamma.get(), 1e-5f};
  auto args = [&](int rows, int in, GemmOut type) {
    GemmArgs a{nullptr, w.get(), nullptr, y.get(), rows, in, 4, type};
    a.norm = &norm;
    return a;
  };
  EXPECT_TRUE(gemm.FusesEpilogue(args(kGemvNormMaxRows, 4096, GemmOut::kF32)));
  EXPECT_TRUE(gemm.FusesEpilogue(args(1, kGemvNormMaxIn, GemmOut::kF32)));
  EXPECT_FALSE(gemm.FusesEpilogue(args(kGemvNormMaxRows + 1, 4096, GemmOut::kF32)));
  EXPECT_FALSE(gemm.FusesEpilogue(args(1, kGemvNormMaxIn + 8, GemmOut::kF32)));
  EXPECT_FALSE(gemm.FusesEpilogue(args(1, 4096, GemmOut::kBf16)));
  EXPECT_FALSE(invariant.FusesEpilogue(args(1, 4096, GemmOut::kF32)));
  const NormInput unaligned{x.get() + 1, gamma.get(), 1e-5f};
  GemmArgs a = args(1, 4096, GemmOut::kF32);
  a.norm = &unaligned;
  EXPECT_FALSE(gemm.FusesEpilogue(a));
  EXPECT_NE(gemm.Run(a, 0), 0);
  // Accumulate only into an fp32 plain product without a prologue.
  GemmArgs acc{nullptr, w.get(), nullptr, y.get(), 1, 4096, 4, GemmOut::kF32};
  acc.accumulate = true;
  EXPECT_FALSE(gemm.FusesEpilogue(acc));  // no x
  acc.norm = &norm;
  EXPECT_FALSE(gemm.FusesEpilogue(acc));
}

// The o and down products writing into the residual stream (accumulate) leave the bits of the
// product into a delta buffer followed by LaunchRmsNorm's residual add (x += delta), at every
// row count the GEMV takes, with and without a bias; the norm's output from there on is the
// same too.
TEST(GemvFusionTest, AccumulateIsTheProductThenTheResidualAdd) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
    for (auto [in, out] : {std::pair{8, 24}, std::pair{264, 1000}, std::pair{4096, 2048}}) {
      for (const bool with_bias : {false, true}) {
        const auto x = RandomFloats(size_t(rows) * in, 70 + rows);
        const auto w = RandomFloats(size_t(out) * in, 71, -0.2f, 0.2f);
        const auto bias = RandomFloats(out, 72);
        const auto residual = ResidualFloats(size_t(rows) * out, 73 + rows, 3.0f);
        const auto gamma = RandomFloats(out, 74, 0.5f, 1.5f);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w)),
            d_gamma(ToBf16Vector(gamma)), xn_a(size_t(rows) * out), xn_b(size_t(rows) * out);
        DeviceBuffer<float> d_bias(bias), delta(size_t(rows) * out), res_a(residual),
            res_b(residual);
        const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
        // a: into delta, then the norm adds it.
        EXPECT_EQ(gemm.Run({d_x.get(), d_w.get(), b, delta.get(), rows, in, out, GemmOut::kF32}, 0),
                  0);
        LLM_CUDA_OK(LaunchRmsNorm(
            {res_a.get(), delta.get(), d_gamma.get(), xn_a.get(), nullptr, rows, out, 1e-5f}, 0));
        // b: into the residual stream, then the norm with nothing to add.
        GemmArgs acc{d_x.get(), d_w.get(), b, res_b.get(), rows, in, out, GemmOut::kF32};
        acc.accumulate = true;
        const std::string what = std::to_string(rows) + "x" + std::to_string(in) + "x" +
                                 std::to_string(out) + (with_bias ? ", bias" : "");
        ASSERT_TRUE(gemm.FusesEpilogue(acc)) << what;
        EXPECT_EQ(gemm.Run(acc, 0), 0) << what;
        LLM_CUDA_OK(LaunchRmsNorm(
            {res_b.get(), nullptr, d_gamma.get(), xn_b.get(), nullptr, rows, out, 1e-5f}, 0));
        LLM_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(DifferingElements(res_a.Download(), res_b.Download()), 0) << what;
        EXPECT_EQ(DifferingElements(xn_a.Download(), xn_b.Download()), 0) << what;
      }
    }
  }
}

}  // namespace
}  // namespace llm::kernels
