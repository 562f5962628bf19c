// cuBLASLt products and the device sampler against the CPU reference.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/sampling.h"
#include "tests/kernels/gpu_test_util.h"
#include "worker/sampling/sampler.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

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
          DeviceBuffer<__nv_bfloat16> y16(size_t(rows) * out);
          DeviceBuffer<float> y32(size_t(rows) * out);
          const void* b = !with_bias              ? nullptr
                          : type == GemmOut::kF32 ? static_cast<const void*>(d_bias32.get())
                                                  : static_cast<const void*>(d_bias16.get());
          void* y = type == GemmOut::kF32 ? static_cast<void*>(y32.get()) : y16.get();
          ASSERT_EQ(gemm.Run({d_x.get(), d_w.get(), b, y, rows, in, out, type}, 0), 0);
          LLM_CUDA_OK(cudaDeviceSynchronize());
          const std::vector<float> got =
              type == GemmOut::kF32 ? y32.Download() : FromBf16Vector(y16.Download());
          std::vector<double> want(size_t(rows) * out);
          for (int r = 0; r < rows; ++r) {
            for (int o = 0; o < out; ++o) {
              double acc = with_bias ? bias[o] : 0.0;
              for (int i = 0; i < in; ++i)
                acc += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
              want[size_t(r) * out + o] = acc;
            }
          }
          EXPECT_LT(RelativeError(got, want), type == GemmOut::kF32 ? 1e-4 : 1e-2)
              << rows << "x" << in << "x" << out << " bias " << with_bias;
        }
      }
    }
  }
}

// The GEMV path (rows <= kGemvMaxRows) against cuBLASLt (the same Gemm with the GEMV kernel
// off) and the double-precision product, over every row count it takes and odd output counts.
// Tolerance as above; the two paths sum in different orders, so they agree to the same bound.
TEST(GemmTest, GemvAgreesWithCublasLt) {
  LLM_REQUIRE_GPU();
  Gemm with_gemv, cublas_only;
  LLM_CUDA_OK(with_gemv.Init());
  LLM_CUDA_OK(cublas_only.Init(size_t{32} << 20, /*batch_invariant=*/false, /*use_gemv=*/false));
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
        auto run = [&](Gemm& gemm) {
          DeviceBuffer<__nv_bfloat16> y16(size_t(rows) * out);
          DeviceBuffer<float> y32(size_t(rows) * out);
          void* y = type == GemmOut::kF32 ? static_cast<void*>(y32.get()) : y16.get();
          EXPECT_EQ(gemm.Run({d_x.get(), d_w.get(), b, y, rows, in, out, type}, 0), 0);
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          return type == GemmOut::kF32 ? y32.Download() : FromBf16Vector(y16.Download());
        };
        const std::vector<float> gemv = run(with_gemv), lt = run(cublas_only);
        std::vector<double> want(size_t(rows) * out), lt_d(lt.begin(), lt.end());
        for (int r = 0; r < rows; ++r) {
          for (int o = 0; o < out; ++o) {
            double acc = bias[o];
            for (int i = 0; i < in; ++i)
              acc += double(x[size_t(r) * in + i]) * w[size_t(o) * in + i];
            want[size_t(r) * out + o] = acc;
          }
        }
        const double tol = type == GemmOut::kF32 ? 1e-4 : 1e-2;
        EXPECT_LT(RelativeError(gemv, want), tol) << rows << "x" << in << "x" << out;
        EXPECT_LT(RelativeError(gemv, lt_d), 2 * tol) << rows << "x" << in << "x" << out;
      }
    }
  }
}

// The gate/up product with SiLU-and-multiply fused (gemv.h, gated) gives the bits of the plain
// GEMV product followed by LaunchSiluMul, with and without a bias, at every row count the GEMV
// takes; and against the CPU reference (runner::SiluMul of the double product rounded to bf16)
// to bf16 tolerance 1e-2. Gemm routes it only where FusesSiluMul says so.
TEST(GemmTest, GatedGemvIsTheProductThenSiluMul) {
  LLM_REQUIRE_GPU();
  Gemm gemm, cublas_only;
  LLM_CUDA_OK(gemm.Init());
  LLM_CUDA_OK(cublas_only.Init(size_t{32} << 20, /*batch_invariant=*/false, /*use_gemv=*/false));
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
        ASSERT_TRUE(gemm.FusesSiluMul(gated));
        ASSERT_FALSE(cublas_only.FusesSiluMul(gated));
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
            want[size_t(r) * inter + o] = g / (1.0 + std::exp(-g)) * u;
          }
        }
        EXPECT_LT(RelativeError(FromBf16Vector(got_bits), want), 1e-2)
            << rows << "x" << in << "x" << inter;
      }
    }
  }
}

struct SamplerCase {
  sampling::SamplingParams params;
  bool penalties;
};

// Runs the device sampler on `rows` copies of random logits (one per slot, each with its own
// settings) and compares every token with the CPU sampler on the same fp32 logits. Both use the
// same exp, the same Philox draw and the same rules; only summation order differs, which can
// move a boundary by a hair, so at least 99% of draws must agree exactly (greedy: all).
TEST(SampleKernelTest, AgreesWithTheCpuSampler) {
  LLM_REQUIRE_GPU();
  const int vocab = 5003, slots = 33;
  std::vector<SamplerCase> cases;
  for (int i = 0; i < slots; ++i) {
    sampling::SamplingParams p;
    p.seed = 1000 + i;
    switch (i % 6) {
      case 0:
        p.temperature = 0;
        break;
      case 1:
        p.temperature = 0.8f;
        break;
      case 2:
        p.temperature = 1.0f;
        p.top_k = 40;
        break;
      case 3:
        p.temperature = 0.7f;
        p.top_p = 0.9f;
        break;
      case 4:
        p.temperature = 1.2f;
        p.top_k = 100;
        p.top_p = 0.8f;
        p.min_p = 0.05f;
        break;
      case 5:
        p.temperature = 0;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.25f;
        break;
    }
    cases.push_back({p, i % 6 == 5});
  }
  int agree = 0, total = 0, greedy_mismatch = 0;
  for (int round = 0; round < 6; ++round) {
    const auto logits = RandomFloats(size_t(slots) * vocab, 100 + round, -8, 8);
    std::vector<SlotSampling> table(slots);
    std::vector<uint16_t> counts(size_t(slots) * vocab, 0);
    std::vector<uint8_t> mask(size_t(slots) * vocab, 0);
    std::vector<int32_t> generated(slots, round), row_slot(slots), row_pos(slots, 10);
    for (int s = 0; s < slots; ++s) {
      const auto& p = cases[s].params;
      SlotSampling& t = table[s];
      t = SlotSampling{};
      t.temperature = p.temperature;
      t.top_p = p.top_p;
      t.min_p = p.min_p;
      t.repetition_penalty = p.repetition_penalty;
      t.presence_penalty = p.presence_penalty;
      t.frequency_penalty = p.frequency_penalty;
      t.top_k = p.top_k;
      t.max_tokens = 1000;
      t.seed = p.seed;
      t.key = 77 + s;
      t.has_penalties = cases[s].penalties;
      row_slot[s] = s;
      if (cases[s].penalties) {
        for (int k = 0; k < 50; ++k) mask[size_t(s) * vocab + (k * 31) % vocab] = 1;
        for (int k = 0; k < 20; ++k) counts[size_t(s) * vocab + (k * 97) % vocab] = 1 + k % 3;
      }
    }
    DeviceBuffer<float> d_logits(logits), d_probs(logits.size());
    DeviceBuffer<int32_t> d_row_slot(row_slot), d_row_pos(row_pos), d_generated(generated);
    DeviceBuffer<int32_t> d_last(std::vector<int32_t>(slots, 0)),
        d_pos(std::vector<int32_t>(slots, 0));
    DeviceBuffer<uint8_t> d_done(std::vector<uint8_t>(slots, 0));
    DeviceBuffer<SlotSampling> d_table(table);
    DeviceBuffer<uint16_t> d_counts(counts);
    DeviceBuffer<uint8_t> d_mask(mask);
    DeviceBuffer<SampleOutput> d_out(slots);
    DeviceBuffer<SampleRowWork> d_work(slots);
    DeviceSlots ds{d_last.get(),  d_pos.get(),    d_generated.get(), d_done.get(),
                   d_table.get(), d_counts.get(), d_mask.get()};
    LLM_CUDA_OK(LaunchSample({d_logits.get(), d_probs.get(), d_row_slot.get(), d_row_pos.get(), ds,
                              d_out.get(), slots, vocab, vocab, d_work.get()},
                             0));
    LLM_CUDA_OK(cudaDeviceSynchronize());
    const auto out = d_out.Download();
    const auto last = d_last.Download();
    const auto gen_after = d_generated.Download();
    for (int s = 0; s < slots; ++s) {
      sampling::Sampler cpu;
      sampling::PenaltyState st;
      if (cases[s].penalties) {
        std::vector<int32_t> prompt;
        for (int k = 0; k < 50; ++k) prompt.push_back((k * 31) % vocab);
        st.AddPrompt(prompt);
        for (int k = 0; k < 20; ++k) {
          for (int c = 0; c < 1 + k % 3; ++c) st.AddOutput((k * 97) % vocab);
        }
      }
      std::vector<float> row(logits.begin() + size_t(s) * vocab,
                             logits.begin() + size_t(s + 1) * vocab);
      const int32_t want = cpu.Sample(row, cases[s].params, st, round).token_id;
      ++total;
      agree += out[s].token == want ? 1 : 0;
      if (cases[s].params.greedy() && out[s].token != want) ++greedy_mismatch;
      EXPECT_EQ(out[s].key, 77u + s);
      EXPECT_EQ(out[s].finish, sampling::FinishReason::kNone);
      EXPECT_EQ(last[s], out[s].token);  // the next decode input is in the slot table
      EXPECT_EQ(gen_after[s], round + 1);
    }
  }
  EXPECT_EQ(greedy_mismatch, 0);
  EXPECT_GE(agree, total * 99 / 100) << agree << " of " << total;
}

// Runs the sampler once over `rows` rows (row r on slot r, `generated[r]` tokens so far) with a
// fresh, poisoned workspace; returns the outputs.
std::vector<SampleOutput> RunSampler(const std::vector<float>& logits,
                                     const std::vector<SlotSampling>& table, int vocab,
                                     const std::vector<int32_t>& generated) {
  const int rows = static_cast<int>(table.size());
  std::vector<int32_t> row_slot(rows);
  for (int r = 0; r < rows; ++r) row_slot[r] = r;
  DeviceBuffer<float> d_logits(logits), d_probs(logits.size());
  DeviceBuffer<int32_t> d_row_slot(row_slot), d_row_pos(std::vector<int32_t>(rows, 10));
  DeviceBuffer<int32_t> d_generated(generated), d_last(std::vector<int32_t>(rows, 0)),
      d_pos(std::vector<int32_t>(rows, 0));
  DeviceBuffer<uint8_t> d_done(std::vector<uint8_t>(rows, 0));
  DeviceBuffer<SlotSampling> d_table(table);
  DeviceBuffer<uint16_t> d_counts(std::vector<uint16_t>(size_t(rows) * vocab, 0));
  DeviceBuffer<uint8_t> d_mask(std::vector<uint8_t>(size_t(rows) * vocab, 0));
  DeviceBuffer<SampleOutput> d_out(rows);
  DeviceBuffer<SampleRowWork> d_work(rows);
  DeviceSlots ds{d_last.get(),  d_pos.get(),    d_generated.get(), d_done.get(),
                 d_table.get(), d_counts.get(), d_mask.get()};
  const cudaError_t launched =
      LaunchSample({d_logits.get(), d_probs.get(), d_row_slot.get(), d_row_pos.get(), ds,
                    d_out.get(), rows, vocab, vocab, d_work.get()},
                   0);
  EXPECT_EQ(launched, cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_out.Download();
}

// A Llama 3 vocabulary (32 chunks per row) with ties: logits on a coarse grid, all equal, or a
// few equal maxima in different chunks, under top-k, top-p, min-p and their mixes. Every token
// agrees with the CPU sampler (99% for draws: only summation order differs; greedy: all); a
// second run gives the same bits (determinism); each row run alone gives the same token and
// logprob bits as in the batch of 33 (batch independence).
TEST(SampleKernelTest, LargeVocabularyTiesDeterminismAndBatchIndependence) {
  LLM_REQUIRE_GPU();
  const int vocab = 128256, rows = 33;
  std::vector<float> logits = RandomFloats(size_t(rows) * vocab, 31, -8, 8);
  std::vector<sampling::SamplingParams> params(rows);
  std::vector<SlotSampling> table(rows);
  for (int r = 0; r < rows; ++r) {
    float* row = logits.data() + size_t(r) * vocab;
    switch (r % 4) {
      case 1:
        for (int i = 0; i < vocab; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
        break;
      case 2:
        for (int i = 0; i < vocab; ++i) row[i] = 0.5f;
        break;
      case 3:
        for (int k = 0; k < 4; ++k) row[(k * 40009 + r) % vocab] = 9.0f;
        break;
      default:
        break;
    }
    sampling::SamplingParams& p = params[r];
    p.seed = 500 + r;
    p.temperature = 0.6f + 0.1f * (r % 7);
    switch (r % 6) {
      case 0:
        p.top_k = 40;
        break;
      case 1:
        p.top_p = 0.9f;
        break;
      case 2:
        p.top_k = 4097;
        p.top_p = 0.5f;
        p.min_p = 0.05f;
        break;
      case 3:
        p.top_p = 0.99f;
        p.min_p = 0.01f;
        break;
      case 4:
        p.temperature = 0;
        break;
      case 5:
        break;
    }
    SlotSampling& t = table[r];
    t = SlotSampling{};
    t.temperature = p.temperature;
    t.top_p = p.top_p;
    t.min_p = p.min_p;
    t.repetition_penalty = 1.0f;
    t.top_k = p.top_k;
    t.max_tokens = 1000;
    t.seed = p.seed;
    t.key = 900 + r;
    t.want_logprob = 1;
  }
  const std::vector<int32_t> generated(rows, 3);
  const auto out = RunSampler(logits, table, vocab, generated);
  const auto again = RunSampler(logits, table, vocab, generated);
  int agree = 0, greedy_mismatch = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + size_t(r) * vocab,
                           logits.begin() + size_t(r + 1) * vocab);
    sampling::Sampler cpu;
    const auto want = cpu.Sample(row, params[r], sampling::PenaltyState{}, 3, 0, true);
    agree += out[r].token == want.token_id ? 1 : 0;
    if (params[r].greedy() && out[r].token != want.token_id) ++greedy_mismatch;
    if (out[r].token == want.token_id) {
      EXPECT_NEAR(out[r].logprob, want.logprob, 1e-4) << "row " << r;
    }
    EXPECT_EQ(out[r].slot, r);
    EXPECT_EQ(again[r].token, out[r].token) << "row " << r;
    EXPECT_EQ(again[r].logprob, out[r].logprob) << "row " << r;
    const std::vector<float> alone(logits.begin() + size_t(r) * vocab,
                                   logits.begin() + size_t(r + 1) * vocab);
    const auto single = RunSampler(alone, {table[r]}, vocab, {3});
    EXPECT_EQ(single[0].token, out[r].token) << "row " << r;
    EXPECT_EQ(single[0].logprob, out[r].logprob) << "row " << r;
  }
  EXPECT_EQ(greedy_mismatch, 0);
  EXPECT_GE(agree, rows - 1) << agree << " of " << rows;
}

TEST(SampleKernelTest, StopTokensLengthAndFinishedSlots) {
  LLM_REQUIRE_GPU();
  const int vocab = 64, slots = 3;
  std::vector<float> logits(size_t(slots) * vocab, 0.0f);
  logits[0 * vocab + 5] = 10;  // slot 0 picks 5, a stop id
  logits[1 * vocab + 6] = 10;  // slot 1 picks 6, reaching max_tokens
  logits[2 * vocab + 7] = 10;  // slot 2 is already done: skipped
  std::vector<SlotSampling> table(slots);
  for (auto& t : table) {
    t = SlotSampling{};
    t.max_tokens = 100;
    t.num_stop_ids = 1;
    t.stop_ids[0] = 5;
  }
  table[1].max_tokens = 4;
  DeviceBuffer<float> d_logits(logits), d_probs(logits.size());
  DeviceBuffer<int32_t> d_row_slot({0, 1, 2}), d_row_pos({20, 30, 40});
  DeviceBuffer<int32_t> d_generated({0, 3, 1}), d_last({1, 1, 1}), d_pos({20, 30, 40});
  DeviceBuffer<uint8_t> d_done(std::vector<uint8_t>{0, 0, 1});
  DeviceBuffer<SlotSampling> d_table(table);
  DeviceBuffer<uint16_t> d_counts(std::vector<uint16_t>(slots * vocab, 0));
  DeviceBuffer<uint8_t> d_mask(std::vector<uint8_t>(slots * vocab, 0));
  DeviceBuffer<SampleOutput> d_out(slots);
  DeviceBuffer<SampleRowWork> d_work(slots);
  DeviceSlots ds{d_last.get(),  d_pos.get(),    d_generated.get(), d_done.get(),
                 d_table.get(), d_counts.get(), d_mask.get()};
  LLM_CUDA_OK(LaunchSample({d_logits.get(), d_probs.get(), d_row_slot.get(), d_row_pos.get(), ds,
                            d_out.get(), slots, vocab, vocab, d_work.get()},
                           0));
  const auto out = d_out.Download();
  EXPECT_EQ(out[0].token, 5);
  EXPECT_EQ(out[0].finish, sampling::FinishReason::kStopToken);
  EXPECT_EQ(out[1].token, 6);
  EXPECT_EQ(out[1].finish, sampling::FinishReason::kLength);
  EXPECT_EQ(out[2].slot, -1);  // already done: sampled nothing
  EXPECT_EQ(d_done.Download(), (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(d_pos.Download(), (std::vector<int32_t>{21, 31, 40}));
  EXPECT_EQ(d_last.Download(), (std::vector<int32_t>{5, 6, 1}));
}

}  // namespace
}  // namespace llm::kernels
