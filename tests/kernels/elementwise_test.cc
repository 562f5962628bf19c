// RMSNorm, SiLU-and-multiply, random init, step inputs (with the embedding gather) and the row
// gather against the CPU reference.
#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "common/random_weights.h"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/gather_rows.h"
#include "kernels/elementwise/head_rmsnorm.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/step/step_inputs.h"
#include "kernels/weights/random_init.h"
#include "tests/kernels/gpu_test_util.h"
#include "worker/runner/cpu_ops.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

// Tolerance: the output is bf16, so 2^-8 relative per element (plus a little for the fp32 sum
// order) against the fp32 reference. Dims for each path of the launcher: the row in registers
// at 1, 2, 4 and 8 float4 per thread, full (16, 100, 896, 2048, 4096, 8192) and partly filled
// (1536, 3072, 5120), the strided kernel for a dim not a multiple of 4 (130) and one too wide
// for registers (12288); with the residual add and without.
TEST(RmsNormKernelTest, FusedResidualAndRowIndexMatchReference) {
  LLM_REQUIRE_GPU();
  for (int dim : {16, 100, 130, 896, 1536, 2048, 3072, 4096, 5120, 8192, 12288}) {
    for (int rows : {1, 7, 33}) {
      auto x = RandomFloats(size_t(rows) * dim, 2, -3, 3);
      auto delta = RandomFloats(size_t(rows) * dim, 3);
      const bool with_delta = rows != 7;
      if (!with_delta) std::fill(delta.begin(), delta.end(), 0.0f);
      const auto w = RandomFloats(dim, 4, 0.5f, 1.5f);
      std::vector<int32_t> index(rows);
      for (int r = 0; r < rows; ++r) index[r] = rows - 1 - r;
      DeviceBuffer<float> d_x(x), d_delta(delta);
      DeviceBuffer<__nv_bfloat16> d_w(ToBf16Vector(w)), d_out(size_t(rows) * dim);
      DeviceBuffer<int32_t> d_index(index);
      LLM_CUDA_OK(LaunchRmsNorm({d_x.get(), with_delta ? d_delta.get() : nullptr, d_w.get(),
                                 d_out.get(), d_index.get(), rows, dim, 1e-5f},
                                0));
      for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
      const auto x_after = d_x.Download();
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x_after[i], x[i], 1e-6) << i;
      std::vector<float> ref(x.size());
      runner::RmsNorm(x.data(), w.data(), ref.data(), rows, dim, 1e-5f);
      const auto out = FromBf16Vector(d_out.Download());
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < dim; ++i) {
          const float want = ref[size_t(index[r]) * dim + i];
          ASSERT_NEAR(out[size_t(r) * dim + i], want, std::fabs(want) / 128 + 1e-6)
              << "dim " << dim << " row " << r << " i " << i;
        }
      }
    }
  }
}

// Qwen3's q/k head norms in place in bf16 q/k/v rows (head_dim 128 and 64, GQA, 1 and 37 rows):
// every q and k head against runner::RmsNorm of its bf16 input with its own weights; the v heads
// and the padding past them untouched (exact).
TEST(HeadRmsNormKernelTest, NormalisesQAndKHeadsOnly) {
  LLM_REQUIRE_GPU();
  for (const auto& [heads, kv_heads, head_dim] : {std::tuple{16, 8, 128}, std::tuple{4, 1, 64}}) {
    for (int rows : {1, 37}) {
      const int qkv = (heads + 2 * kv_heads) * head_dim, stride = qkv + 8;
      const auto in = ToBf16Vector(RandomFloats(size_t(rows) * stride, 5, -4, 4));
      const auto wq = RandomFloats(head_dim, 6, 0.5f, 1.5f);
      const auto wk = RandomFloats(head_dim, 7, 0.5f, 1.5f);
      DeviceBuffer<__nv_bfloat16> d_qkv(in), d_wq(ToBf16Vector(wq)), d_wk(ToBf16Vector(wk));
      LLM_CUDA_OK(LaunchHeadRmsNorm(
          {d_qkv.get(), d_wq.get(), d_wk.get(), rows, stride, heads, kv_heads, head_dim, 1e-6f},
          0));
      const auto out = FromBf16Vector(d_qkv.Download());
      const auto x = FromBf16Vector(in);
      const auto wq16 = FromBf16Vector(ToBf16Vector(wq)), wk16 = FromBf16Vector(ToBf16Vector(wk));
      for (int r = 0; r < rows; ++r) {
        const float* row = &x[size_t(r) * stride];
        std::vector<float> ref(row, row + stride);
        runner::RmsNorm(row, wq16.data(), ref.data(), heads, head_dim, 1e-6f);
        runner::RmsNorm(row + heads * head_dim, wk16.data(), ref.data() + heads * head_dim,
                        kv_heads, head_dim, 1e-6f);
        for (int i = 0; i < stride; ++i) {
          const float got = out[size_t(r) * stride + i], want = ref[i];
          if (i >= (heads + kv_heads) * head_dim) {
            ASSERT_EQ(got, want) << "v or padding changed: row " << r << " i " << i;
          } else {
            ASSERT_NEAR(got, want, std::fabs(want) / 128 + 1e-6) << "row " << r << " i " << i;
          }
        }
      }
    }
  }
  EXPECT_EQ(LaunchHeadRmsNorm({nullptr, nullptr, nullptr, 1, 100, 1, 1, 64, 1e-6f}, 0),
            cudaErrorInvalidValue);
}

// Two tables gathered in one launch (the last layer's x and attention output: fp32 and bf16
// rows, 896 wide, and 130 wide, whose fp32 rows of 520 bytes go 4 bytes at a time), with
// repeated, out-of-order and padding (-1) rows; exact.
TEST(GatherRowsKernelTest, MatchesTheHostReference) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSrcRows = 37;
  for (const auto& [n, width] :
       {std::pair(1, 896), std::pair(7, 896), std::pair(33, 896), std::pair(33, 130)}) {
    std::vector<int32_t> rows(n);
    for (int32_t i = 0; i < n; ++i) rows[i] = i % 5 == 4 ? -1 : (i * 11) % kSrcRows;
    const auto x = RandomFloats(size_t(kSrcRows) * width, 5);
    const auto attn = ToBf16Vector(RandomFloats(size_t(kSrcRows) * width, 6));
    DeviceBuffer<float> d_x(x), d_x_out(size_t(n) * width);
    DeviceBuffer<__nv_bfloat16> d_attn(attn), d_attn_out(size_t(n) * width);
    DeviceBuffer<int32_t> d_rows(rows);
    GatherRowsParams p{};
    p.rows = d_rows.get();
    p.n = n;
    p.tables = 2;
    p.src[0] = d_x.get();
    p.dst[0] = d_x_out.get();
    p.row_bytes[0] = width * 4;
    p.src[1] = d_attn.get();
    p.dst[1] = d_attn_out.get();
    p.row_bytes[1] = width * 2;
    LLM_CUDA_OK(LaunchGatherRows(p, 0));
    std::vector<float> want_x(size_t(n) * width);
    std::vector<__nv_bfloat16> want_attn(size_t(n) * width);
    GatherRowsParams h = p;
    h.rows = rows.data();
    h.src[0] = x.data();
    h.dst[0] = want_x.data();
    h.src[1] = attn.data();
    h.dst[1] = want_attn.data();
    GatherRowsOnHost(h);
    const auto got_x = d_x_out.Download();
    const auto got_attn = d_attn_out.Download();
    ASSERT_EQ(std::memcmp(got_x.data(), want_x.data(), want_x.size() * 4), 0)
        << "n " << n << " width " << width;
    ASSERT_EQ(std::memcmp(got_attn.data(), want_attn.data(), want_attn.size() * 2), 0)
        << "n " << n << " width " << width;
  }
}

// Refused before any launch, so this runs without a device too.
TEST(GatherRowsKernelTest, BadTablesAndRowSizesAreRefused) {
  GatherRowsParams p{};
  p.n = 4;
  p.tables = 3;
  EXPECT_EQ(LaunchGatherRows(p, 0), cudaErrorInvalidValue);
  p.tables = 1;
  p.row_bytes[0] = 18;
  EXPECT_EQ(LaunchGatherRows(p, 0), cudaErrorInvalidValue);
  p.row_bytes[0] = 0;
  EXPECT_EQ(LaunchGatherRows(p, 0), cudaErrorInvalidValue);
  p.row_bytes[0] = 32;
  p.n = 0;
  EXPECT_EQ(LaunchGatherRows(p, 0), cudaSuccess);  // nothing to gather
}

// The eight-a-thread kernel (inter % 8 == 0, 16-byte aligned rows: 8, 96, 14,336; rows past
// the grid's 65,535 strided) and the one-a-thread kernel (1, 100, and an output one element off
// alignment) against the reference, and each other's bits.
TEST(SiluMulKernelTest, MatchesReference) {
  LLM_REQUIRE_GPU();
  struct Shape {
    int rows, inter;
  };
  for (const Shape c : {Shape{1, 1}, Shape{7, 100}, Shape{33, 8}, Shape{1, 96}, Shape{7, 14336},
                        Shape{33, 14336}, Shape{70001, 8}}) {
    const int rows = c.rows, inter = c.inter;
    const auto gu = RandomFloats(size_t(rows) * 2 * inter, 5, -6, 6);
    DeviceBuffer<__nv_bfloat16> d_gu(ToBf16Vector(gu)), d_out(size_t(rows) * inter),
        d_odd(size_t(rows) * inter + 1);
    LLM_CUDA_OK(LaunchSiluMul({d_gu.get(), d_out.get(), rows, inter}, 0));
    LLM_CUDA_OK(LaunchSiluMul({d_gu.get(), d_odd.get() + 1, rows, inter}, 0));  // unaligned
    std::vector<float> ref(size_t(rows) * inter);
    runner::SiluMul(gu.data(), ref.data(), rows, inter);
    const auto out = FromBf16Vector(d_out.Download());
    const auto odd = FromBf16Vector(d_odd.Download());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], std::fabs(ref[i]) / 128 + 1e-5) << i;  // bf16 output
      ASSERT_EQ(odd[i + 1], out[i]) << rows << "x" << inter << " " << i;
    }
  }
}

TEST(RandomInitKernelTest, SameNumbersAsTheHost) {
  LLM_REQUIRE_GPU();
  const int64_t n = 100003;
  const uint64_t stream = model::TensorStream(42, "model.layers.3.mlp.up_proj.weight");
  DeviceBuffer<__nv_bfloat16> d(n);
  DeviceBuffer<float> d32(n);
  LLM_CUDA_OK(LaunchRandomInit({d.get(), nullptr, n, stream, 0.05f, 0.0f}, 0));
  LLM_CUDA_OK(LaunchRandomInit({nullptr, d32.get(), n, stream, 0.05f, 0.0f}, 0));
  const auto out = d.Download();
  const auto out32 = d32.Download();
  for (int64_t i = 0; i < n; ++i) {
    const float want = model::RandomUniform(stream, static_cast<uint64_t>(i), 0.05f);
    ASSERT_EQ(HostFromBf16(out[i]), RoundBf16(want)) << i;
    ASSERT_EQ(out32[i], RoundBf16(want)) << i;
  }
  // A constant fill (norm weights).
  LLM_CUDA_OK(LaunchRandomInit({d.get(), nullptr, n, stream, 0.0f, 1.0f}, 0));
  for (const auto& v : d.Download()) ASSERT_EQ(HostFromBf16(v), 1.0f);
}

// Prompt rows' tokens (given) and decode rows' (the slot table's last token; a padding row
// embeds id 0) picked and embedded exactly. A slot with penalties marks its prompt's tokens
// in its prompt mask and counts the prefill rows past its prompt (tokens it generated before a
// preemption) as outputs.
TEST(StepInputsKernelTest, DecodeRowsReadTheSlotTable) {
  LLM_REQUIRE_GPU();
  const int slots = 4, vocab = 16, hidden = 8;
  DeviceBuffer<int32_t> last({11, 12, 13, 14}), pos({5, 6, 7, 8}), generated({1, 1, 1, 1});
  DeviceBuffer<uint8_t> done(std::vector<uint8_t>{0, 0, 1, 0});
  std::vector<SlotSampling> params(slots);
  for (auto& p : params) p = SlotSampling{};
  params[3].has_penalties = 1;
  params[3].prompt_tokens = 1;  // row 1 (position 1) is a resumed output
  DeviceBuffer<SlotSampling> d_params(params);
  DeviceBuffer<uint16_t> counts(std::vector<uint16_t>(slots * vocab, 0));
  DeviceBuffer<uint8_t> mask(std::vector<uint8_t>(slots * vocab, 0));
  DeviceSlots ds{last.get(),     pos.get(),    generated.get(), done.get(),
                 d_params.get(), counts.get(), mask.get()};
  DeviceBuffer<int32_t> pf_slot({3, 3}), pf_pos({0, 1}), pf_token({9, 10}), list({1, -1, 0, 2});
  DeviceBuffer<int32_t> row_token(6), row_pos(6), row_slot(6);
  const auto table = RandomFloats(size_t(vocab) * hidden, 5);
  DeviceBuffer<__nv_bfloat16> d_table(ToBf16Vector(table));
  DeviceBuffer<float> x(size_t(6) * hidden);
  LLM_CUDA_OK(LaunchStepInputs(
      {pf_slot.get(), pf_pos.get(), pf_token.get(), 2, list.get(), 4, ds, vocab, row_token.get(),
       row_pos.get(), row_slot.get(), d_table.get(), x.get(), hidden},
      0));
  EXPECT_EQ(row_slot.Download(), (std::vector<int32_t>{3, 3, 1, -1, 0, 2}));
  const std::vector<int32_t> tokens{9, 10, 12, 0, 11, 13};
  EXPECT_EQ(row_token.Download(), tokens);
  const auto got = x.Download();
  for (int r = 0; r < 6; ++r) {
    for (int i = 0; i < hidden; ++i) {
      ASSERT_EQ(got[size_t(r) * hidden + i], table[size_t(tokens[r]) * hidden + i]) << "row " << r;
    }
  }
  EXPECT_EQ(row_pos.Download(), (std::vector<int32_t>{0, 1, 6, 0, 5, 7}));
  const auto m = mask.Download();
  EXPECT_EQ(m[3 * vocab + 9], 1);
  EXPECT_EQ(m[3 * vocab + 10], 0);
  EXPECT_EQ(m[3 * vocab + 11], 0);
  const auto c = counts.Download();
  EXPECT_EQ(c[3 * vocab + 9], 0);
  EXPECT_EQ(c[3 * vocab + 10], 1);
}

// The embedding gather in the step-inputs launch: prompt rows (no slot) whose tokens pick table
// rows, hidden sizes 8 and 4,096 (16-byte loads) and 13 (one element at a time), 1, 7 and 33
// rows, and an id past the vocabulary giving zeros. Exact: a bf16 row widened to fp32.
TEST(StepInputsKernelTest, EmbedsEachRowsTokenExactly) {
  LLM_REQUIRE_GPU();
  for (int hidden : {8, 13, 4096}) {
    for (int rows : {1, 7, 33}) {
      const int vocab = 101;
      const auto table = RandomFloats(size_t(vocab) * hidden, 1);
      std::vector<int32_t> ids(rows);
      for (int r = 0; r < rows; ++r) ids[r] = (r * 37 + 5) % vocab;
      ids[0] = vocab + 3;  // out of range: zeros
      DeviceBuffer<__nv_bfloat16> d_table(ToBf16Vector(table));
      DeviceBuffer<int32_t> d_ids(ids), no_slot(std::vector<int32_t>(rows, -1)),
          pos(std::vector<int32_t>(rows, 0)), row_token(rows), row_pos(rows), row_slot(rows);
      DeviceBuffer<float> d_out(size_t(rows) * hidden);
      LLM_CUDA_OK(LaunchStepInputs(
          {no_slot.get(), pos.get(), d_ids.get(), rows, nullptr, 0, DeviceSlots{}, vocab,
           row_token.get(), row_pos.get(), row_slot.get(), d_table.get(), d_out.get(), hidden},
          0));
      const auto out = d_out.Download();
      EXPECT_EQ(row_token.Download(), ids);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < hidden; ++i) {
          const float want = ids[r] >= vocab ? 0.0f : table[size_t(ids[r]) * hidden + i];
          ASSERT_EQ(out[size_t(r) * hidden + i], want) << "hidden " << hidden << " row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace llm::kernels
