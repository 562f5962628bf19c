// The GEMV's norm prologue and accumulate epilogue (gemv.h) against the kernels they replace:
// LaunchRmsNorm followed by the product, and the product followed by LaunchRmsNorm's residual
// add. Both must leave the same bits, so the tolerance is zero: every element is compared bit
// for bit. cuBLASLt's accumulate (beta = 1, the prompt steps' residual add) likewise, bit for bit
// in batch-invariant mode. (The RoPE/KV mode with the norm prologue is in rope_attention_test.cc.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/elementwise/rmsnorm.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
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
// 3072, 4096 (llama-3-8b) and 8192; at 1 and 2 rows (kGemvNormMaxRows), the gated mode (gate/up
// with SiLU; the RoPE/KV mode is in rope_attention_test.cc), with and without a bias. The
// residual stream's scale varies from row to row, as real rows' do.
TEST(GemvFusionTest, NormPrologueIsRmsNormThenTheProduct) {
  LLM_REQUIRE_GPU();
  Gemm gemm, cublas_only;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(cublas_only.Init({.use_gemv = false}));
  const float eps = 1e-5f;
  for (int in : {8, 264, 896, 1000, 2048, 3072, 4096, 8192}) {
    for (int rows = 1; rows <= kGemvNormMaxRows; ++rows) {
      for (const bool with_bias : {false, true}) {
        const int out = 37;
        std::vector<float> x = ResidualFloats(size_t(rows) * in, 60 + in + rows, 1.0f);
        for (int i = 0; i < in; ++i) x[size_t(rows - 1) * in + i] *= 40.0f;
        const auto gamma = RandomFloats(in, 61, 0.5f, 1.5f);
        const auto w = RandomFloats(size_t(2 * out) * in, 62, -0.2f, 0.2f);
        const auto bias = RandomFloats(2 * out, 63);
        DeviceBuffer<float> d_x(x);
        DeviceBuffer<__nv_bfloat16> d_gamma(ToBf16Vector(gamma)), d_w(ToBf16Vector(w)),
            d_bias(ToBf16Vector(bias)), xn(size_t(rows) * in), y_a(size_t(rows) * out),
            y_b(size_t(rows) * out);
        const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
        // a: the norm kernel, then the product of its output.
        LLM_CUDA_OK(LaunchRmsNorm(
            {d_x.get(), nullptr, d_gamma.get(), xn.get(), nullptr, rows, in, eps}, 0));
        GemmArgs unfused{xn.get(), d_w.get(), b, y_a.get(), rows, in, out, GemmOut::kBf16};
        unfused.silu_mul = true;
        EXPECT_EQ(gemm.Run(unfused, 0), 0);
        // b: the norm inside the product.
        const NormInput norm{d_x.get(), d_gamma.get(), eps};
        GemmArgs fused{nullptr, d_w.get(), b, y_b.get(), rows, in, out, GemmOut::kBf16};
        fused.silu_mul = true;
        fused.norm = &norm;
        const std::string what =
            std::to_string(rows) + " rows, in " + std::to_string(in) + (with_bias ? ", bias" : "");
        ASSERT_TRUE(gemm.FusesEpilogue(fused)) << what;
        EXPECT_FALSE(cublas_only.FusesEpilogue(fused)) << what;
        EXPECT_NE(cublas_only.Run(fused, 0), 0) << what;  // refused, not silently unfused
        EXPECT_EQ(gemm.Run(fused, 0), 0) << what;
        LLM_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(DifferingElements(y_a.Download(), y_b.Download()), 0) << what;
        EXPECT_EQ(DifferingElements(d_x.Download(), x), 0) << "the prologue wrote x, " << what;
      }
    }
  }
}

// A sum of squares in another order moves the inverse RMS by an ulp or so, which changes a
// normed bf16 input only where it lies next to a rounding boundary (about 1 in 2^16) and a
// product of random weights hardly ever. So here every output shows one normed input: the gate
// and up rows of output o are both e_o (one-hot), so y[r, o] = silu(xn[r, o]) * xn[r, o], over
// 64 rows of 4,096 whose magnitudes span six decades (a quarter of a million normed inputs,
// compared bit for bit with LaunchRmsNorm followed by the same product).
TEST(GemvFusionTest, OneHotWeightsShowEveryNormedInput) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  constexpr int in = 4096, out = 4096, rows = kGemvNormMaxRows, batches = 64 / rows;
  std::vector<__nv_bfloat16> w(size_t(2) * out * in, HostToBf16(0.0f));
  for (int o = 0; o < out; ++o) {
    w[size_t(o) * in + o] = HostToBf16(1.0f);
    w[size_t(out + o) * in + o] = HostToBf16(1.0f);
  }
  const auto gamma = RandomFloats(in, 91, 0.5f, 1.5f);
  DeviceBuffer<__nv_bfloat16> d_w(w), d_gamma(ToBf16Vector(gamma)), xn(size_t(rows) * in),
      y_a(size_t(rows) * out), y_b(size_t(rows) * out);
  std::mt19937 rng(92);
  std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
  int differ = 0;
  for (int batch = 0; batch < batches; ++batch) {
    std::vector<float> x(size_t(rows) * in);
    for (float& v : x) v = std::pow(10.0f, decade(rng)) * (rng() % 2 == 0 ? 1.0f : -1.0f);
    DeviceBuffer<float> d_x(x);
    LLM_CUDA_OK(
        LaunchRmsNorm({d_x.get(), nullptr, d_gamma.get(), xn.get(), nullptr, rows, in, 1e-5f}, 0));
    GemmArgs unfused{xn.get(), d_w.get(), nullptr, y_a.get(), rows, in, out, GemmOut::kBf16};
    unfused.silu_mul = true;
    const NormInput norm{d_x.get(), d_gamma.get(), 1e-5f};
    GemmArgs fused{nullptr, d_w.get(), nullptr, y_b.get(), rows, in, out, GemmOut::kBf16};
    fused.silu_mul = true;
    fused.norm = &norm;
    ASSERT_TRUE(gemm.FusesEpilogue(fused));
    EXPECT_EQ(gemm.Run(unfused, 0), 0);
    EXPECT_EQ(gemm.Run(fused, 0), 0);
    LLM_CUDA_OK(cudaDeviceSynchronize());
    differ += DifferingElements(y_a.Download(), y_b.Download());
  }
  EXPECT_EQ(differ, 0) << "of " << batches * rows * out << " outputs";
}

// Where the prologue is refused (the caller then runs the norm kernel): more rows than
// kGemvNormMaxRows, an input wider than the norm kernel's registers, a plain product (the lm
// head: gemv.h), the batch-invariant Gemm (no GEMV), an unaligned residual row.
TEST(GemvFusionTest, NormPrologueRefusedOutsideItsShapes) {
  LLM_REQUIRE_GPU();
  Gemm gemm, invariant;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(invariant.Init({.batch_invariant = true}));
  const int wide = kGemvNormMaxIn + 8;
  DeviceBuffer<float> x(size_t(kGemvMaxRows) * wide + 4), y32(size_t(kGemvMaxRows) * 4);
  DeviceBuffer<__nv_bfloat16> gamma(wide), w(size_t(8) * wide), y16(size_t(kGemvMaxRows) * 4);
  const NormInput norm{x.get(), gamma.get(), 1e-5f};
  auto gated = [&](int rows, int in) {
    GemmArgs a{nullptr, w.get(), nullptr, y16.get(), rows, in, 4, GemmOut::kBf16};
    a.silu_mul = true;
    a.norm = &norm;
    return a;
  };
  EXPECT_TRUE(gemm.FusesEpilogue(gated(kGemvNormMaxRows, 4096)));
  EXPECT_TRUE(gemm.FusesEpilogue(gated(1, kGemvNormMaxIn)));
  EXPECT_FALSE(gemm.FusesEpilogue(gated(kGemvNormMaxRows + 1, 4096)));
  EXPECT_FALSE(gemm.FusesEpilogue(gated(1, wide)));
  EXPECT_FALSE(invariant.FusesEpilogue(gated(1, 4096)));
  GemmArgs plain{nullptr, w.get(), nullptr, y32.get(), 1, 4096, 4, GemmOut::kF32};
  plain.norm = &norm;
  EXPECT_FALSE(gemm.FusesEpilogue(plain));
  const NormInput unaligned{x.get() + 1, gamma.get(), 1e-5f};
  GemmArgs a = gated(1, 4096);
  a.norm = &unaligned;
  EXPECT_FALSE(gemm.FusesEpilogue(a));
  EXPECT_NE(gemm.Run(a, 0), 0);
  // Accumulate only into an fp32 plain product that has its x.
  GemmArgs acc{nullptr, w.get(), nullptr, y32.get(), 1, 4096, 4, GemmOut::kF32};
  acc.accumulate = true;
  EXPECT_FALSE(gemm.FusesEpilogue(acc));  // no x
  acc.norm = &norm;
  EXPECT_FALSE(gemm.FusesEpilogue(acc));
}

// One product both ways on the same random operands: (a) into a delta buffer, then
// LaunchRmsNorm adds it to the residual stream; (b) accumulated into the stream (`acc`), then
// the norm with nothing to add. The two streams and the two norm outputs, downloaded.
struct BothWays {
  std::vector<float> res_a, res_b, xn_a, xn_b;
  bool on_gemv = false, on_cublaslt = false;  // who took (b)'s accumulate
};

BothWays ResidualBothWays(Gemm& gemm, int rows, int in, int out, bool with_bias, uint32_t seed,
                          const std::string& what) {
  const auto x = RandomFloats(size_t(rows) * in, seed + rows);
  const auto w = RandomFloats(size_t(out) * in, seed + 1, -0.2f, 0.2f);
  const auto bias = RandomFloats(out, seed + 2);
  const auto residual = ResidualFloats(size_t(rows) * out, seed + 3 + rows, 3.0f);
  const auto gamma = RandomFloats(out, seed + 4, 0.5f, 1.5f);
  DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w)),
      d_gamma(ToBf16Vector(gamma)), xn_a(size_t(rows) * out), xn_b(size_t(rows) * out);
  DeviceBuffer<float> d_bias(bias), delta(size_t(rows) * out), res_a(residual), res_b(residual);
  const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
  const GemmArgs plain{d_x.get(), d_w.get(), b, delta.get(), rows, in, out, GemmOut::kF32};
  GemmArgs acc = plain;
  acc.y = res_b.get();
  acc.accumulate = true;
  EXPECT_TRUE(gemm.FusesEpilogue(acc)) << what;
  EXPECT_EQ(gemm.Run(plain, 0), 0) << what;
  EXPECT_EQ(
      LaunchRmsNorm(
          {res_a.get(), delta.get(), d_gamma.get(), xn_a.get(), nullptr, rows, out, 1e-5f}, 0),
      cudaSuccess);
  EXPECT_EQ(gemm.Run(acc, 0), 0) << what;
  EXPECT_EQ(LaunchRmsNorm(
                {res_b.get(), nullptr, d_gamma.get(), xn_b.get(), nullptr, rows, out, 1e-5f}, 0),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {res_a.Download(),
          res_b.Download(),
          FromBf16Vector(xn_a.Download()),
          FromBf16Vector(xn_b.Download()),
          gemm.OnGemv(acc),
          gemm.CublasLtAccumulates(acc)};
}

std::string ShapeName(int rows, int in, int out, bool with_bias) {
  return std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out) +
         (with_bias ? ", bias" : "");
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
        const std::string what = ShapeName(rows, in, out, with_bias);
        const BothWays r = ResidualBothWays(gemm, rows, in, out, with_bias, 70, what);
        EXPECT_TRUE(r.on_gemv) << what;
        EXPECT_EQ(DifferingElements(r.res_a, r.res_b), 0) << what;
        EXPECT_EQ(DifferingElements(r.xn_a, r.xn_b), 0) << what;
      }
    }
  }
}

// Above the GEMV's rows cuBLASLt takes the residual add of a product without a bias (beta = 1,
// y read as C and written in place): the product into a delta buffer followed by
// LaunchRmsNorm's x + delta leaves the same residual stream and norm output, bit for bit in
// batch-invariant mode (no split-K) and within fp32 rounding of the sum with cuBLASLt's own
// choice. A bias (added after C by cuBLASLt), other fused work and bf16 output stay refused.
TEST(GemvFusionTest, CublasLtAccumulateIsTheProductThenTheResidualAdd) {
  LLM_REQUIRE_GPU();
  for (const bool invariant : {true, false}) {
    Gemm gemm;
    LLM_CUDA_OK(gemm.Init({.batch_invariant = invariant}));
    for (const int rows : {kGemvMaxRows + 1, 64, 300}) {
      for (auto [in, out] : {std::pair{264, 1000}, std::pair{4096, 2048}}) {
        {
          const bool with_bias = false;
          const std::string what =
              ShapeName(rows, in, out, with_bias) + (invariant ? ", invariant" : "");
          const BothWays r = ResidualBothWays(gemm, rows, in, out, with_bias, 80, what);
          EXPECT_FALSE(r.on_gemv) << what;
          EXPECT_TRUE(r.on_cublaslt) << what;
          if (invariant) {
            EXPECT_EQ(DifferingElements(r.res_a, r.res_b), 0) << what;
            EXPECT_EQ(DifferingElements(r.xn_a, r.xn_b), 0) << what;
            continue;
          }
          for (size_t i = 0; i < r.res_a.size(); ++i) {
            ASSERT_NEAR(r.res_b[i], r.res_a[i], 1e-5f * (std::fabs(r.res_a[i]) + 1.0f))
                << what << " " << i;
          }
        }
      }
    }
    // A bias, other fused work, or a bf16 output, stays the GEMV's alone.
    DeviceBuffer<__nv_bfloat16> x(size_t(64) * 256), w(size_t(64) * 256), y16(size_t(64) * 64);
    DeviceBuffer<float> y32(size_t(64) * 64), bias(64);
    GemmArgs biased{x.get(), w.get(), bias.get(), y32.get(), 64, 256, 64, GemmOut::kF32};
    biased.accumulate = true;
    EXPECT_FALSE(gemm.FusesEpilogue(biased));
    EXPECT_NE(gemm.Run(biased, 0), 0);
    GemmArgs bf16_out{x.get(), w.get(), nullptr, y16.get(), 64, 256, 64, GemmOut::kBf16};
    bf16_out.accumulate = true;
    EXPECT_FALSE(gemm.FusesEpilogue(bf16_out));
    EXPECT_NE(gemm.Run(bf16_out, 0), 0);
    GemmArgs gated{x.get(), w.get(), nullptr, y32.get(), 64, 256, 32, GemmOut::kF32};
    gated.accumulate = true;
    gated.silu_mul = true;
    EXPECT_FALSE(gemm.FusesEpilogue(gated));
    EXPECT_NE(gemm.Run(gated, 0), 0);
  }
}

}  // namespace
}  // namespace llm::kernels
