// cuBLASLt products and the GEMV kernel (kernels/gemm/gemm.h, kernels/gemm/gemv.h) against a
// double-precision reference.
#include "kernels/gemm/gemm.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/elementwise/activation.h"
#include "kernels/gemm/gemv.h"
#include "tests/kernels/gpu_test_util.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

// One product through `gemm` into a fresh output of `type`, back as floats.
std::vector<float> RunProduct(Gemm& gemm, const __nv_bfloat16* x, const __nv_bfloat16* w,
                              const void* bias, int rows, int in, int out, GemmOut type) {
  DeviceBuffer<__nv_bfloat16> y16(size_t(rows) * out);
  DeviceBuffer<float> y32(size_t(rows) * out);
  void* y = type == GemmOut::kF32 ? static_cast<void*>(y32.get()) : y16.get();
  EXPECT_EQ(gemm.Run({x, w, bias, y, rows, in, out, type}, 0), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return type == GemmOut::kF32 ? y32.Download() : FromBf16Vector(y16.Download());
}

// Tolerance: relative error 1e-2 for bf16 outputs, 1e-4 for fp32 outputs (bf16 inputs are
// exact; the accumulation is fp32 over up to 4096 terms).
TEST(GemmTest, MatchesDoubleReference) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  for (int rows : {1, 7, 33}) {
    for (auto [in, out] : {std::pair{64, 24}, std::pair{4096, 1000}, std::pair{128, 2048}}) {
      for (GemmOut type : {GemmOut::kBf16, GemmOut::kF32}) {
        for (bool with_bias : {false, true}) {
          const auto x = RandomFloats(size_t(rows) * in, 20);
          const auto w = RandomFloats(size_t(out) * in, 21);
          const auto bias = RandomFloats(out, 22);
          DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w));
          DeviceBuffer<__nv_bfloat16> d_bias16(ToBf16Vector(bias));
          DeviceBuffer<float> d_bias32(bias);
          const void* b = !with_bias              ? nullptr
                          : type == GemmOut::kF32 ? static_cast<const void*>(d_bias32.get())
                                                  : static_cast<const void*>(d_bias16.get());
          const std::vector<float> got =
              RunProduct(gemm, d_x.get(), d_w.get(), b, rows, in, out, type);
          const std::vector<double> want =
              DoubleProduct(x, w, with_bias ? bias.data() : nullptr, rows, in, out);
          EXPECT_LT(RelativeError(got, want), type == GemmOut::kF32 ? 1e-4 : 1e-2)
              << rows << "x" << in << "x" << out << " bias " << with_bias;
        }
      }
    }
  }
}

// Tuning (engine.cuda_gemm_tuning): Prepare of a prompt-sized shape times cuBLASLt's candidates
// and keeps one of them; the product still matches the double-precision reference (tolerance as
// above), with a bias and without, and a shape below kTuneMinRows is not tuned.
TEST(GemmTest, TunedProductsMatchTheReference) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init({.tune = true}));
  const int in = 256, out = 384;
  for (const int rows : {kTuneMinRows - 64, kTuneMinRows, kTuneMinRows + 64}) {
    for (const bool with_bias : {false, true}) {
      const auto x = RandomFloats(size_t(rows) * in, 30);
      const auto w = RandomFloats(size_t(out) * in, 31);
      const auto bias = RandomFloats(out, 32);
      DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w));
      DeviceBuffer<float> d_bias(bias), y(size_t(rows) * out);
      const GemmArgs args{d_x.get(), d_w.get(),    with_bias ? d_bias.get() : nullptr,
                          y.get(),   rows,         in,
                          out,       GemmOut::kF32};
      const int tuned_before = gemm.tuned();
      ASSERT_EQ(gemm.Prepare(args), 0);
      EXPECT_EQ(gemm.tuned() - tuned_before, rows >= kTuneMinRows ? 1 : 0) << rows;
      ASSERT_EQ(gemm.Run(args, 0), 0);
      LLM_CUDA_OK(cudaDeviceSynchronize());
      std::vector<double> want(size_t(rows) * out);
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < out; ++o) {
          double acc = with_bias ? bias[o] : 0.0;
          for (int i = 0; i < in; ++i) acc += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
          want[size_t(r) * out + o] = acc;
        }
      }
      EXPECT_LT(RelativeError(y.Download(), want), 1e-4) << rows << " bias " << with_bias;
    }
  }
  EXPECT_LE(gemm.tuned_changed(), gemm.tuned());
}

// The GEMV path (rows <= kGemvMaxRows) against cuBLASLt (the same Gemm with the GEMV kernel
// off) and the double-precision product, over every row count it takes and odd output counts.
// Tolerance as above; the two paths sum in different orders, so they agree to the same bound.
TEST(GemmTest, GemvAgreesWithCublasLt) {
  LLM_REQUIRE_GPU();
  Gemm with_gemv, cublas_only;
  LLM_CUDA_OK(with_gemv.Init());
  LLM_CUDA_OK(cublas_only.Init({.use_gemv = false}));
  ASSERT_TRUE(with_gemv.uses_gemv());
  ASSERT_FALSE(cublas_only.uses_gemv());
  for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
    for (auto [in, out] : {std::pair{8, 3}, std::pair{264, 33}, std::pair{4096, 1000}}) {
      for (GemmOut type : {GemmOut::kBf16, GemmOut::kF32}) {
        const auto x = RandomFloats(size_t(rows) * in, 30 + rows);
        const auto w = RandomFloats(size_t(out) * in, 31);
        const auto bias = RandomFloats(out, 32);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w));
        DeviceBuffer<__nv_bfloat16> d_bias16(ToBf16Vector(bias));
        DeviceBuffer<float> d_bias32(bias);
        const void* b = type == GemmOut::kF32 ? static_cast<const void*>(d_bias32.get())
                                              : static_cast<const void*>(d_bias16.get());
        const std::vector<float> gemv =
            RunProduct(with_gemv, d_x.get(), d_w.get(), b, rows, in, out, type);
        const std::vector<float> lt =
            RunProduct(cublas_only, d_x.get(), d_w.get(), b, rows, in, out, type);
        const std::vector<double> want = DoubleProduct(x, w, bias.data(), rows, in, out),
                                  lt_d(lt.begin(), lt.end());
        const double tol = type == GemmOut::kF32 ? 1e-4 : 1e-2;
        EXPECT_LT(RelativeError(gemv, want), tol) << rows << "x" << in << "x" << out;
        EXPECT_LT(RelativeError(gemv, lt_d), 2 * tol) << rows << "x" << in << "x" << out;
      }
    }
  }
}

// The GEMV with each output over 1, 2 and 4 warps (GemvParams::splits, as Gemm picks it from
// gemv_split_rows_per_sm: 0 never splits, a huge value splits as far as the input allows) against
// the double-precision product, at every row count the GEMV takes, bf16 and fp32 outputs, with
// a bias, and inputs of 8 (never split), 264 (two warps at most), 896 and 14,336 inputs
// (qwen2-0.5b's o, llama-3-8b's down). Tolerance as above; the splits sum in different orders,
// so they agree with each other to twice it.
TEST(GemmTest, GemvSplitsMatchTheReference) {
  LLM_REQUIRE_GPU();
  Gemm one_warp, split;
  LLM_CUDA_OK(one_warp.Init({.gemv_split_rows_per_sm = 0}));
  LLM_CUDA_OK(split.Init({.gemv_split_rows_per_sm = 1 << 20}));
  for (auto [in, out, splits] : {std::tuple{8, 3, 1}, std::tuple{264, 33, 2},
                                 std::tuple{896, 1152, 4}, std::tuple{14336, 96, 4}}) {
    for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
      for (GemmOut type : {GemmOut::kBf16, GemmOut::kF32}) {
        const auto x = RandomFloats(size_t(rows) * in, 50 + rows);
        const auto w = RandomFloats(size_t(out) * in, 51, -0.2f, 0.2f);
        const auto bias = RandomFloats(out, 52);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w)),
            d_bias16(ToBf16Vector(bias));
        DeviceBuffer<float> d_bias32(bias);
        const void* b = type == GemmOut::kF32 ? static_cast<const void*>(d_bias32.get())
                                              : static_cast<const void*>(d_bias16.get());
        const GemmArgs probe{d_x.get(), d_w.get(), b, nullptr, rows, in, out, type};
        ASSERT_EQ(one_warp.GemvSplitsFor(probe), 1);
        ASSERT_EQ(split.GemvSplitsFor(probe), splits) << in;
        const std::vector<float> got_one =
            RunProduct(one_warp, d_x.get(), d_w.get(), b, rows, in, out, type);
        const std::vector<float> got_split =
            RunProduct(split, d_x.get(), d_w.get(), b, rows, in, out, type);
        const std::vector<double> want = DoubleProduct(x, w, bias.data(), rows, in, out);
        const double tol = type == GemmOut::kF32 ? 1e-4 : 1e-2;
        const std::string what = std::to_string(rows) + "x" + std::to_string(in) + "x" +
                                 std::to_string(out) + ", splits " + std::to_string(splits);
        EXPECT_LT(RelativeError(got_one, want), tol) << what;
        EXPECT_LT(RelativeError(got_split, want), tol) << what;
        EXPECT_LT(RelativeError(got_split, std::vector<double>(got_one.begin(), got_one.end())),
                  2 * tol)
            << what;
      }
    }
  }
}

// The gate/up product with SiLU-and-multiply fused (gemv.h, gated) gives the bits of the plain
// GEMV product followed by LaunchSiluMul, with and without a bias, at every row count the GEMV
// takes; and against a double reference (the products in double, rounded to bf16 as the GEMV
// writes them, then SiLU-and-multiply in double) to bf16 tolerance 1e-2. Gemm routes it only where
// FusesEpilogue says so.
TEST(GemmTest, GatedGemvIsTheProductThenSiluMul) {
  LLM_REQUIRE_GPU();
  Gemm gemm, cublas_only;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(cublas_only.Init({.use_gemv = false}));
  for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
    for (auto [in, inter] : {std::pair{8, 3}, std::pair{264, 37}, std::pair{2048, 1000}}) {
      for (const bool with_bias : {false, true}) {
        const auto x = RandomFloats(size_t(rows) * in, 40 + rows, -2, 2);
        const auto w = RandomFloats(size_t(2 * inter) * in, 41, -0.2f, 0.2f);
        const auto bias = RandomFloats(2 * inter, 42);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x)), d_w(ToBf16Vector(w));
        DeviceBuffer<__nv_bfloat16> d_bias(ToBf16Vector(bias));
        const void* b = with_bias ? static_cast<const void*>(d_bias.get()) : nullptr;
        DeviceBuffer<__nv_bfloat16> gate_up(size_t(rows) * 2 * inter), act(size_t(rows) * inter),
            fused(size_t(rows) * inter);
        GemmArgs plain{d_x.get(), d_w.get(), b, gate_up.get(), rows, in, 2 * inter, GemmOut::kBf16};
        GemmArgs gated{d_x.get(), d_w.get(), b, fused.get(), rows, in, inter, GemmOut::kBf16};
        gated.silu_mul = true;
        ASSERT_TRUE(gemm.FusesEpilogue(gated));
        ASSERT_FALSE(cublas_only.FusesEpilogue(gated));
        EXPECT_NE(cublas_only.Run(gated, 0), 0);  // refused, not silently unfused
        EXPECT_EQ(gemm.Run(plain, 0), 0);
        LLM_CUDA_OK(LaunchSiluMul({gate_up.get(), act.get(), rows, inter}, 0));
        EXPECT_EQ(gemm.Run(gated, 0), 0);
        LLM_CUDA_OK(cudaDeviceSynchronize());
        const auto want_bits = act.Download(), got_bits = fused.Download();
        int differ = 0;
        for (size_t k = 0; k < want_bits.size(); ++k) {
          differ += std::memcmp(&want_bits[k], &got_bits[k], sizeof(want_bits[k])) != 0 ? 1 : 0;
        }
        EXPECT_EQ(differ, 0) << rows << "x" << in << "x" << inter << " bias " << with_bias;
        std::vector<double> want(size_t(rows) * inter);
        for (int r = 0; r < rows; ++r) {
          for (int o = 0; o < inter; ++o) {
            double g = with_bias ? bias[o] : 0.0, u = with_bias ? bias[inter + o] : 0.0;
            for (int i = 0; i < in; ++i) {
              g += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
              u += double(x[size_t(r) * in + i]) * w[size_t(inter + o) * in + i];
            }
            // Gate and up rounded to bf16, as the product's output is.
            g = RoundBf16(static_cast<float>(g));
            u = RoundBf16(static_cast<float>(u));
            want[size_t(r) * inter + o] = g / (1.0 + std::exp(-g)) * u;
          }
        }
        EXPECT_LT(RelativeError(FromBf16Vector(got_bits), want), 1e-2)
            << rows << "x" << in << "x" << inter;
      }
    }
  }
}

}  // namespace
}  // namespace llm::kernels
