// The FP8 kernels against their host references: the kernels that write an FP8 product's input
// rows (the quantise pass, SiLU-and-multiply, RMSNorm) against model::Fp8RoundTripActivations'
// rule, the weights' quantisation at load against model::QuantizeFp8, the FP8-weight GEMV and
// cuBLASLt's FP8 products against the dequantised product in double (kernels/gemm/weight.h's
// layouts, odd shapes, each scale layout).
#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp8.h"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/quantize_rows.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
#include "kernels/weights/quantize_weights.h"
#include "tests/kernels/gpu_test_util.h"
#include "worker/model/fp8_quant.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

// The rows an FP8 input kernel should write for `x` [rows, dim]: E4M3 bytes and scales in the
// device layout (weight.h), by the host's rule.
struct HostRows {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

HostRows HostQuantize(const std::vector<float>& x, int rows, int dim, ActivationScales mode,
                      float static_scale = 0.0f) {
  HostRows h;
  h.q.resize(size_t(rows) * dim);
  const int groups = mode == ActivationScales::kGroup ? Fp8Blocks(dim) : 1;
  const int ld = Fp8GemmRows(rows);
  h.scale.assign(size_t(groups) * (mode == ActivationScales::kGroup ? ld : rows), 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      const int lo = mode == ActivationScales::kGroup ? g * kFp8BlockSize : 0;
      const int hi = mode == ActivationScales::kGroup ? std::min(dim, lo + kFp8BlockSize) : dim;
      float amax = 0.0f;
      for (int i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[size_t(r) * dim + i]));
      const float s = static_scale > 0.0f ? static_scale : Fp8ScaleForAmax(amax);
      h.scale[mode == ActivationScales::kGroup ? size_t(g) * ld + r : size_t(r)] = s;
      for (int i = lo; i < hi; ++i) {
        h.q[size_t(r) * dim + i] = Fp8E4M3FromFloat(x[size_t(r) * dim + i] / s);
      }
    }
  }
  return h;
}

// Device FP8 rows for `rows` x `dim` inputs (buffers sized for the padded rows).
struct DeviceRows {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<float> scale;
  DeviceRows(int rows, int dim)
      : q(size_t(Fp8GemmRows(rows)) * dim), scale(size_t(Fp8GemmRows(rows)) * Fp8Blocks(dim)) {}
  Fp8Out Out(ActivationScales mode, const float* static_scale = nullptr) {
    Fp8Out o;
    o.x = q.get();
    o.scale = scale.get();
    o.scales = mode;
    o.static_scale = static_scale;
    return o;
  }
};

// Compares device rows with the host's: the scales' layout entries, and every byte.
void ExpectSameRows(DeviceRows& d, const HostRows& want, int rows, int dim, const char* what) {
  const std::vector<uint8_t> q = d.q.Download();
  const std::vector<float> s = d.scale.Download();
  for (size_t i = 0; i < want.scale.size(); ++i) {
    if (want.scale[i] == 0.0f) continue;  // a padding row's slot
    ASSERT_EQ(s[i], want.scale[i]) << what << " scale " << i;
  }
  for (size_t i = 0; i < size_t(rows) * dim; ++i) {
    ASSERT_EQ(q[i], want.q[i]) << what << " element " << i << " (row " << i / dim << ")";
  }
}

// Device rows against values computed on the host in another order (RMSNorm, SiLU): each
// dequantised element within half a step of its value, or one step where the two values fall
// on either side of a rounding boundary, and those few.
void ExpectCloseRows(DeviceRows& d, const std::vector<float>& v, int rows, int dim,
                     ActivationScales mode, const char* what) {
  const std::vector<uint8_t> q = d.q.Download();
  const std::vector<float> s = d.scale.Download();
  size_t off_by_one_step = 0;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i) {
      const float scale = InputScaleAt(s.data(), mode, rows, r, i);
      const float got = Fp8E4M3ToFloat(q[size_t(r) * dim + i]) * scale;
      const float want = v[size_t(r) * dim + i];
      const float step = std::max(std::fabs(want) / 8, scale / 512);
      ASSERT_LE(std::fabs(got - want), step * 1.01f) << what << " [" << r << ", " << i << "]";
      if (std::fabs(got - want) > step / 2 * 1.01f) ++off_by_one_step;
    }
  }
  EXPECT_LE(off_by_one_step, size_t(rows) * dim / 100) << what;
}

constexpr ActivationScales kModes[] = {ActivationScales::kRow, ActivationScales::kGroup};

TEST(Fp8KernelTest, QuantizeRowsIsTheHostsRounding) {
  LLM_REQUIRE_GPU();
  for (int rows : {1, 7, 33}) {
    for (int dim : {128, 200, 4096}) {
      const auto x = RandomFloats(size_t(rows) * dim, rows + dim, -3.0f, 3.0f);
      DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x));
      for (ActivationScales mode : kModes) {
        DeviceRows d(rows, dim);
        LLM_CUDA_OK(LaunchQuantizeRows({d_x.get(), rows, dim, d.Out(mode)}, 0));
        LLM_CUDA_OK(cudaDeviceSynchronize());
        ExpectSameRows(d, HostQuantize(x, rows, dim, mode), rows, dim, "quantize rows");
      }
      // A static scale: values past 448 * scale saturate.
      DeviceBuffer<float> s(std::vector<float>{0.004f});
      DeviceRows d(rows, dim);
      LLM_CUDA_OK(LaunchQuantizeRows({d_x.get(), rows, dim, d.Out(kModes[0], s.get())}, 0));
      LLM_CUDA_OK(cudaDeviceSynchronize());
      ExpectSameRows(d, HostQuantize(x, rows, dim, kModes[0], 0.004f), rows, dim, "static");
    }
  }
}

// Every finite bf16 value through the device's E4M3 conversion (cvt.rn.satfinite on sm_89 and
// newer) with a static scale of 1: the host encoder's byte, ties and saturation included.
TEST(Fp8KernelTest, TheDevicesConversionIsTheHostEncoder) {
  LLM_REQUIRE_GPU();
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float v = model::Bf16ToF32(static_cast<uint16_t>(bits));
    if (std::isfinite(v)) x.push_back(v);
  }
  const int dim = 256, rows = static_cast<int>(x.size()) / dim;
  x.resize(size_t(rows) * dim);
  DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x));
  DeviceBuffer<float> one(std::vector<float>{1.0f});
  DeviceRows d(rows, dim);
  LLM_CUDA_OK(LaunchQuantizeRows({d_x.get(), rows, dim, d.Out(kModes[0], one.get())}, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> q = d.q.Download();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], Fp8E4M3FromFloat(x[i])) << x[i];
}

TEST(Fp8KernelTest, SiluMulWritesTheDownProductsRows) {
  LLM_REQUIRE_GPU();
  for (int rows : {1, 9, 64}) {
    for (int inter : {132, 384, 14336}) {
      const auto gu = RandomFloats(size_t(rows) * 2 * inter, rows * inter, -4.0f, 4.0f);
      std::vector<float> v(size_t(rows) * inter);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < inter; ++i) {
          const float g = gu[size_t(r) * 2 * inter + i], u = gu[size_t(r) * 2 * inter + inter + i];
          v[size_t(r) * inter + i] = g / (1.0f + std::exp(-g)) * u;
        }
      }
      DeviceBuffer<__nv_bfloat16> d_gu(ToBf16Vector(gu));
      for (ActivationScales mode : kModes) {
        DeviceRows d(rows, inter);
        SiluMulParams p{d_gu.get(), nullptr, rows, inter};
        p.fp8 = d.Out(mode);
        LLM_CUDA_OK(LaunchSiluMul(p, 0));
        LLM_CUDA_OK(cudaDeviceSynchronize());
        ExpectCloseRows(d, v, rows, inter, mode, "silu");
      }
    }
  }
}

TEST(Fp8KernelTest, RmsNormWritesTheNextProductsRows) {
  LLM_REQUIRE_GPU();
  for (int rows : {1, 5, 40}) {
    for (int dim : {128, 896, 4096, 8192}) {
      const auto x = RandomFloats(size_t(rows) * dim, dim + rows, -2.0f, 2.0f);
      const auto delta = RandomFloats(size_t(rows) * dim, dim + rows + 1, -1.0f, 1.0f);
      const auto weight = RandomFloats(dim, dim, 0.5f, 1.5f);
      std::vector<float> sum(x.size()), v(x.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < dim; ++i) {
          sum[size_t(r) * dim + i] = x[size_t(r) * dim + i] + delta[size_t(r) * dim + i];
          ss += double(sum[size_t(r) * dim + i]) * sum[size_t(r) * dim + i];
        }
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + 1e-5));
        for (int i = 0; i < dim; ++i) {
          v[size_t(r) * dim + i] = weight[i] * (sum[size_t(r) * dim + i] * inv);
        }
      }
      DeviceBuffer<__nv_bfloat16> d_w(ToBf16Vector(weight));
      for (ActivationScales mode : kModes) {
        DeviceBuffer<float> d_x(x), d_delta(delta);
        DeviceRows d(rows, dim);
        RmsNormParams p{d_x.get(), d_delta.get(), d_w.get(), nullptr, nullptr, rows, dim, 1e-5f};
        p.fp8 = d.Out(mode);
        LLM_CUDA_OK(LaunchRmsNorm(p, 0));
        LLM_CUDA_OK(cudaDeviceSynchronize());
        ExpectCloseRows(d, v, rows, dim, mode, "rmsnorm");
        EXPECT_EQ(d_x.Download(), sum) << "the residual add still lands in x";
      }
    }
  }
}

TEST(Fp8KernelTest, WeightQuantisationIsTheHostQuantiser) {
  LLM_REQUIRE_GPU();
  for (auto [out, in] : {std::pair{3, 16}, std::pair{300, 1040}, std::pair{1024, 4096}}) {
    auto w = RandomFloats(size_t(out) * in, out + in, -0.2f, 0.2f);
    for (int i = 0; i < in; ++i) w[i] = 0.0f;  // an all-zero row
    const model::Fp8Matrix want =
        model::QuantizeFp8(w.data(), out, in, model::WeightScaling::kChannel);
    DeviceBuffer<__nv_bfloat16> d_w(ToBf16Vector(w));
    DeviceBuffer<uint8_t> q(size_t(out) * in);
    DeviceBuffer<float> s(out);
    LLM_CUDA_OK(LaunchQuantizeWeightRows({d_w.get(), out, in, q.get(), s.get()}, 0));
    LLM_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(q.Download(), want.e4m3) << out << "x" << in;
    EXPECT_EQ(s.Download(), want.scales) << out << "x" << in;
  }
}

// An FP8 weight on the device: its bytes and its scales in the device layout (weight.h).
struct DeviceWeight {
  model::Fp8Matrix m;
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<float> scale;
  WeightScales layout;

  DeviceWeight(const std::vector<float>& w, int out, int in, WeightScales scales)
      : m(model::QuantizeFp8(w.data(), out, in,
                             scales == WeightScales::kBlock ? model::WeightScaling::kBlock
                                                            : model::WeightScaling::kChannel)),
        q(m.e4m3),
        scale(DeviceScales(m, out, in, scales)),
        layout(scales) {}

  static std::vector<float> DeviceScales(const model::Fp8Matrix& m, int out, int in,
                                         WeightScales scales) {
    if (scales == WeightScales::kRow) return m.scales;
    std::vector<float> a(size_t(BlockScaleCount(out, in)), 0.0f);
    for (int mb = 0; mb < Fp8Blocks(out); ++mb) {
      for (int kb = 0; kb < Fp8Blocks(in); ++kb) {
        a[size_t(mb) * BlockScaleStride(in) + kb] = m.scales[size_t(mb) * Fp8Blocks(in) + kb];
      }
    }
    return a;
  }
  Weight Get() const { return Weight::Fp8(q.get(), layout, scale.get()); }
  // The dequantised matrix [out, in], read through the device layout's index function.
  std::vector<float> Dequantised(int out, int in) const {
    const std::vector<float> s = scale.Download();
    std::vector<float> d(size_t(out) * in);
    for (int o = 0; o < out; ++o) {
      for (int i = 0; i < in; ++i) {
        d[size_t(o) * in + i] =
            Fp8E4M3ToFloat(m.e4m3[size_t(o) * in + i]) * WeightScaleAt(s.data(), layout, in, o, i);
        EXPECT_EQ(d[size_t(o) * in + i],
                  Fp8E4M3ToFloat(m.e4m3[size_t(o) * in + i]) * m.ScaleAt(o, i));
      }
    }
    return d;
  }
};

constexpr WeightScales kLayouts[] = {WeightScales::kRow, WeightScales::kBlock};

// The FP8-weight GEMV (W8A16): bf16 x times the dequantised weight, every row count, 1, 2 and 4
// warps an output, inputs that end inside a 128-block, fp32 and bf16 outputs with a bias.
// Tolerance: relative 1e-4 (fp32 out) and 1e-2 (bf16 out), as the bf16 GEMV.
TEST(GemvFp8Test, MatchesTheDequantisedProduct) {
  LLM_REQUIRE_GPU();
  for (auto [in, out] : {std::pair{16, 3}, std::pair{1040, 37}, std::pair{4096, 300}}) {
    const auto w = RandomFloats(size_t(out) * in, in + out, -0.1f, 0.1f);
    const auto bias = RandomFloats(out, 7);
    DeviceBuffer<float> d_bias32(bias);
    DeviceBuffer<__nv_bfloat16> d_bias16(ToBf16Vector(bias));
    for (WeightScales layout : kLayouts) {
      const DeviceWeight dw(w, out, in, layout);
      const std::vector<float> dq = dw.Dequantised(out, in);
      for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
        const auto x = RandomFloats(size_t(rows) * in, rows * 3 + in);
        DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x));
        const std::vector<double> want = DoubleProduct(x, dq, bias.data(), rows, in, out);
        for (int splits : {1, 2, 4}) {
          for (bool f32 : {true, false}) {
            DeviceBuffer<float> y32(size_t(rows) * out);
            DeviceBuffer<__nv_bfloat16> y16(size_t(rows) * out);
            GemvParams p{};
            p.x = d_x.get();
            p.w = dw.Get();
            p.bias = f32 ? static_cast<const void*>(d_bias32.get()) : d_bias16.get();
            p.y = f32 ? static_cast<void*>(y32.get()) : y16.get();
            p.rows = rows;
            p.in = in;
            p.out = out;
            p.out_f32 = f32;
            p.splits = splits;
            ASSERT_TRUE(GemvSupports(p));
            LLM_CUDA_OK(LaunchGemv(p, 0));
            LLM_CUDA_OK(cudaDeviceSynchronize());
            const std::vector<float> got = f32 ? y32.Download() : FromBf16Vector(y16.Download());
            EXPECT_LT(RelativeError(got, want), f32 ? 1e-4 : 1e-2)
                << in << "x" << out << " rows " << rows << " splits " << splits << " layout "
                << int(layout);
          }
        }
      }
    }
  }
}

// The FP8 GEMV's fused work leaves the unfused bits: SiLU-and-multiply as the gate/up product's
// epilogue against the plain product and LaunchSiluMul; the residual add against the product and
// the sum on the host. It takes no norm prologue (gemv.h): the caller runs LaunchRmsNorm.
TEST(GemvFp8Test, FusedWorkIsTheUnfusedBits) {
  LLM_REQUIRE_GPU();
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  const int in = 4096, inter = 352;
  for (WeightScales layout : kLayouts) {
    const DeviceWeight gate_up(RandomFloats(size_t(2) * inter * in, 5, -0.05f, 0.05f), 2 * inter,
                               in, layout);
    for (int rows : {1, 2, 5}) {
      const auto xr = RandomFloats(size_t(rows) * in, rows, -2.0f, 2.0f);
      const auto nw = RandomFloats(in, 9, 0.5f, 1.5f);
      DeviceBuffer<float> d_xr(xr);
      DeviceBuffer<__nv_bfloat16> d_nw(ToBf16Vector(nw)), xn(size_t(rows) * in);
      LLM_CUDA_OK(
          LaunchRmsNorm({d_xr.get(), nullptr, d_nw.get(), xn.get(), nullptr, rows, in, 1e-5f}, 0));
      DeviceBuffer<__nv_bfloat16> gu(size_t(rows) * 2 * inter), act_a(size_t(rows) * inter),
          act_b(size_t(rows) * inter), act_c(size_t(rows) * inter);
      ASSERT_EQ(
          gemm.Run(
              {xn.get(), gate_up.Get(), nullptr, gu.get(), rows, in, 2 * inter, GemmOut::kBf16}, 0),
          0);
      LLM_CUDA_OK(LaunchSiluMul({gu.get(), act_a.get(), rows, inter}, 0));
      GemmArgs gated{xn.get(), gate_up.Get(), nullptr,       act_b.get(), rows,
                     in,       inter,         GemmOut::kBf16};
      gated.silu_mul = true;
      ASSERT_TRUE(gemm.FusesEpilogue(gated));
      ASSERT_EQ(gemm.Run(gated, 0), 0);
      LLM_CUDA_OK(cudaDeviceSynchronize());
      const auto a = FromBf16Vector(act_a.Download());
      EXPECT_EQ(FromBf16Vector(act_b.Download()), a) << "gated, rows " << rows;
      const NormInput norm{d_xr.get(), d_nw.get(), 1e-5f};
      GemmArgs fused{nullptr, gate_up.Get(), nullptr, act_c.get(), rows, in, inter, GemmOut::kBf16};
      fused.silu_mul = true;
      fused.norm = &norm;
      EXPECT_FALSE(gemm.FusesEpilogue(fused)) << "norm prologue, rows " << rows;
    }
  }
  // The residual add: y += product + bias in the product (o and down at a few rows).
  const int out = 256;
  const auto w = RandomFloats(size_t(out) * in, 11, -0.05f, 0.05f);
  const DeviceWeight dw(w, out, in, WeightScales::kRow);
  const auto x = RandomFloats(size_t(3) * in, 12);
  const auto residual = RandomFloats(size_t(3) * out, 13);
  DeviceBuffer<__nv_bfloat16> d_x(ToBf16Vector(x));
  DeviceBuffer<float> plain(size_t(3) * out), acc(residual);
  ASSERT_EQ(gemm.Run({d_x.get(), dw.Get(), nullptr, plain.get(), 3, in, out, GemmOut::kF32}, 0), 0);
  GemmArgs into{d_x.get(), dw.Get(), nullptr, acc.get(), 3, in, out, GemmOut::kF32};
  into.accumulate = true;
  ASSERT_EQ(gemm.Run(into, 0), 0);
  LLM_CUDA_OK(cudaDeviceSynchronize());
  const auto p = plain.Download(), sum = acc.Download();
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i], residual[i] + (p[i] + 0.0f)) << i;
}

// cuBLASLt's FP8 products (W8A8): x quantised per row (OUTER_VEC with row-scaled weights) or per
// 128 inputs (VEC128 with 128x128-block weights) on the host, in the device layouts, times the
// dequantised weight in double. Row counts that are not multiples of 8 run padded. Tolerance:
// relative 1e-3 (fp32 out) and 1e-2 (bf16 out): the quantised operands are exact, the
// accumulation fp32.
TEST(GemmFp8Test, CublasLtMatchesTheDequantisedProduct) {
  LLM_REQUIRE_GPU();
  int major = 0;
  LLM_CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major != 9) {
    GTEST_SKIP() << "cuBLASLt's outer-vector and block FP8 scale modes are Hopper's (sm_90; this "
                    "is sm_"
                 << major << "x)";
  }
  Gemm gemm;
  LLM_CUDA_OK(gemm.Init());
  for (auto [in, out] : {std::pair{256, 128}, std::pair{1024, 304}, std::pair{4096, 1024}}) {
    const auto w = RandomFloats(size_t(out) * in, in + out, -0.1f, 0.1f);
    const auto bias = RandomFloats(out, 3);
    DeviceBuffer<__nv_bfloat16> d_bias(ToBf16Vector(bias));
    std::vector<float> bias_bf16(bias.size());
    for (size_t i = 0; i < bias.size(); ++i) bias_bf16[i] = RoundBf16(bias[i]);
    for (WeightScales layout : kLayouts) {
      const DeviceWeight dw(w, out, in, layout);
      const std::vector<float> dq = dw.Dequantised(out, in);
      const ActivationScales mode =
          layout == WeightScales::kBlock ? ActivationScales::kGroup : ActivationScales::kRow;
      for (int rows : {16, 33, 256}) {
        const auto x = RandomFloats(size_t(rows) * in, rows + in, -2.0f, 2.0f);
        const HostRows hx = HostQuantize(x, rows, in, mode);
        std::vector<float> xdq(x.size());
        for (int r = 0; r < rows; ++r) {
          for (int i = 0; i < in; ++i) {
            xdq[size_t(r) * in + i] = Fp8E4M3ToFloat(hx.q[size_t(r) * in + i]) *
                                      InputScaleAt(hx.scale.data(), mode, rows, r, i);
          }
        }
        std::vector<uint8_t> q_padded(size_t(Fp8GemmRows(rows)) * in, 0);
        std::copy(hx.q.begin(), hx.q.end(), q_padded.begin());
        std::vector<float> s_padded(size_t(Fp8GemmRows(rows)) * Fp8Blocks(in), 1.0f);
        std::copy(hx.scale.begin(), hx.scale.end(), s_padded.begin());
        DeviceBuffer<uint8_t> d_q(q_padded);
        DeviceBuffer<float> d_s(s_padded);
        for (bool f32 : {true, false}) {
          for (bool with_bias : {false, true}) {
            DeviceBuffer<float> y32(size_t(Fp8GemmRows(rows)) * out);
            DeviceBuffer<__nv_bfloat16> y16(size_t(Fp8GemmRows(rows)) * out);
            GemmArgs args{
                nullptr, dw.Get(), nullptr, f32 ? static_cast<void*>(y32.get()) : y16.get(),
                rows,    in,       out,     f32 ? GemmOut::kF32 : GemmOut::kBf16};
            if (with_bias && f32) args.bias_bf16 = d_bias.get();
            if (with_bias && !f32) args.bias = d_bias.get();
            args.xq = {d_q.get(), d_s.get(), mode};
            ASSERT_TRUE(gemm.WantsFp8Input(args));
            ASSERT_EQ(gemm.Prepare(args), 0) << in << "x" << out << " rows " << rows;
            ASSERT_EQ(gemm.Run(args, 0), 0) << in << "x" << out << " rows " << rows;
            LLM_CUDA_OK(cudaDeviceSynchronize());
            std::vector<float> got = f32 ? y32.Download() : FromBf16Vector(y16.Download());
            got.resize(size_t(rows) * out);
            const std::vector<double> want =
                DoubleProduct(xdq, dq, with_bias ? bias_bf16.data() : nullptr, rows, in, out);
            EXPECT_LT(RelativeError(got, want), f32 ? 1e-3 : 1e-2)
                << in << "x" << out << " rows " << rows << " layout " << int(layout) << " f32 "
                << f32 << " bias " << with_bias;
            // The residual add stays the delta buffer's on cuBLASLt for FP8 products (not
            // yet run with beta = 1 on a device): refused, not silently dropped.
            if (f32) {
              GemmArgs acc = args;
              acc.accumulate = true;
              EXPECT_FALSE(gemm.FusesEpilogue(acc));
              EXPECT_NE(gemm.Run(acc, 0), 0);
            }
          }
        }
      }
    }
  }
  // At a few rows the GEMV takes FP8 weights, with bf16 x.
  const DeviceWeight dw(RandomFloats(size_t(64) * 256, 1), 64, 256, WeightScales::kRow);
  DeviceBuffer<__nv_bfloat16> x(size_t(kGemvMaxRows) * 256);
  DeviceBuffer<float> y(size_t(kGemvMaxRows) * 64);
  EXPECT_FALSE(gemm.WantsFp8Input(
      {x.get(), dw.Get(), nullptr, y.get(), kGemvMaxRows, 256, 64, GemmOut::kF32}));
  EXPECT_TRUE(gemm.WantsFp8Input(
      {x.get(), dw.Get(), nullptr, y.get(), kGemvMaxRows + 1, 256, 64, GemmOut::kF32}));
}

}  // namespace
}  // namespace llm::kernels
