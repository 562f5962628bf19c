// The device sampler (kernels/sampling/sampling.h) against the CPU sampler
// (worker/sampling/sampler.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/sampling/sampling.h"
#include "tests/kernels/gpu_test_util.h"
#include "worker/constraint/constraint.h"
#include "worker/sampling/sampler.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

// A slot's device settings for `p` (max_tokens 1000, no stop ids, no logprobs).
SlotSampling TableEntry(const sampling::SamplingParams& p, uint64_t key) {
  SlotSampling t{};
  t.temperature = p.temperature;
  t.top_p = p.top_p;
  t.min_p = p.min_p;
  t.repetition_penalty = p.repetition_penalty;
  t.presence_penalty = p.presence_penalty;
  t.frequency_penalty = p.frequency_penalty;
  t.top_k = p.top_k;
  t.max_tokens = 1000;
  t.seed = p.seed;
  t.key = key;
  return t;
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
      table[s] = TableEntry(p, 77 + s);
      table[s].has_penalties = cases[s].penalties;
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

// One sampler launch: sampling row i reads logits row i and samples for slot row_slot[i] (-1:
// padding); `table`, `generated`, penalties and the done flags are per slot. The workspace is
// the caller's, so launches can reuse it as the runner does.
struct SamplerRun {
  std::vector<float> logits;  // [rows, vocab]
  std::vector<int32_t> row_slot;
  std::vector<SlotSampling> table;  // [slots]
  std::vector<int32_t> generated;   // [slots]
  std::vector<uint8_t> done;        // [slots]
  std::vector<uint16_t> counts;     // [slots, vocab]
  std::vector<uint8_t> mask;        // [slots, vocab]
  int vocab = 0;
  int valid_vocab = 0;
  bool argmax_only = false;  // SampleParams::argmax_only
  // Constraint masks (SampleParams::mask_index, masks): none when mask_index is empty.
  std::vector<int32_t> mask_index;  // [rows]
  std::vector<uint64_t> masks;      // [masks, mask_words]
  int mask_words = 0;
};

std::vector<SampleOutput> RunSampler(const SamplerRun& run, DeviceBuffer<SampleRowWork>& work) {
  const int rows = static_cast<int>(run.row_slot.size());
  const int slots = static_cast<int>(run.table.size());
  DeviceBuffer<float> d_logits(run.logits), d_probs(run.logits.size());
  DeviceBuffer<int32_t> d_row_slot(run.row_slot), d_row_pos(std::vector<int32_t>(rows, 10));
  DeviceBuffer<int32_t> d_generated(run.generated), d_last(std::vector<int32_t>(slots, 0)),
      d_pos(std::vector<int32_t>(slots, 0));
  DeviceBuffer<uint8_t> d_done(run.done);
  DeviceBuffer<SlotSampling> d_table(run.table);
  DeviceBuffer<uint16_t> d_counts(run.counts);
  DeviceBuffer<uint8_t> d_mask(run.mask);
  DeviceBuffer<SampleOutput> d_out(rows);
  DeviceSlots ds{d_last.get(),  d_pos.get(),    d_generated.get(), d_done.get(),
                 d_table.get(), d_counts.get(), d_mask.get()};
  DeviceBuffer<int32_t> d_mask_index(run.mask_index);
  DeviceBuffer<uint64_t> d_masks(run.masks);
  SampleParams sp{d_logits.get(), d_probs.get(), d_row_slot.get(), d_row_pos.get(), ds,
                  d_out.get(),    rows,          run.vocab,        run.valid_vocab, work.get(),
                  run.argmax_only};
  if (!run.mask_index.empty()) {
    sp.mask_index = d_mask_index.get();
    sp.masks = d_masks.get();
    sp.mask_words = run.mask_words;
  }
  const cudaError_t launched = LaunchSample(sp, 0);
  EXPECT_EQ(launched, cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_out.Download();
}

constexpr int kLlamaVocab = 128256;

// `slots` rows of random logits in [-8, 8] over a Llama 3 vocabulary whose last 256 ids are
// invalid, a table entry each (the caller fills them in) with `generated` tokens, and
// `extra_slots` more slots' done flags and penalty arrays (for table entries without a row);
// nothing done, no penalties.
// Row `r` of `run`'s logits as CpuRunner gives them to the CPU sampler: ids past valid_vocab
// at -inf.
std::vector<float> CpuRow(const SamplerRun& run, int r) {
  std::vector<float> row(run.logits.begin() + size_t(r) * run.vocab,
                         run.logits.begin() + size_t(r + 1) * run.vocab);
  for (int i = run.valid_vocab; i < run.vocab; ++i)
    row[i] = -std::numeric_limits<float>::infinity();
  return row;
}

SamplerRun LlamaVocabularyRun(int slots, int extra_slots, uint32_t seed, int32_t generated,
                              int vocab = kLlamaVocab, int invalid = 256) {
  SamplerRun run;
  run.vocab = vocab;
  run.valid_vocab = vocab - invalid;
  run.logits = RandomFloats(size_t(slots) * vocab, seed, -8, 8);
  run.table.resize(slots);
  run.generated.assign(slots, generated);
  run.done.assign(slots + extra_slots, 0);
  run.counts.assign(size_t(slots + extra_slots) * vocab, 0);
  run.mask.assign(size_t(slots + extra_slots) * vocab, 0);
  return run;
}

// A Llama 3 vocabulary (32 chunks per row) with the last 256 ids invalid, and ties: logits on a
// coarse grid, all equal, or a few equal maxima in different chunks; top-k, top-p, min-p and
// their mixes, penalties (0.1 and 0.3: not exact in binary) with and without a draw, top
// logprobs (3 to 20, over ties too). Checked:
// - against the CPU sampler on the same row (ids past valid_vocab at -inf, as CpuRunner does):
//   greedy tokens, top logprob ids and penalised greedy tokens exactly; draws in all but one
//   row (only summation order differs); logprobs within 1e-4;
// - determinism and batch independence: a second launch on the same workspace with the rows
//   reversed and padding rows and a finished slot interleaved gives each slot the same token
//   and logprob bits; and each row alone on a fresh workspace does too.
TEST(SampleKernelTest, LargeVocabularyTiesDeterminismAndBatchIndependence) {
  LLM_REQUIRE_GPU();
  const int vocab = kLlamaVocab, valid = vocab - 256, slots = 33;
  SamplerRun run = LlamaVocabularyRun(slots, /*extra_slots=*/1, /*seed=*/31, /*generated=*/3);
  std::vector<sampling::SamplingParams> params(slots);
  std::vector<int> top(slots, 0);
  for (int r = 0; r < slots; ++r) {
    float* row = run.logits.data() + size_t(r) * vocab;
    switch (r % 4) {
      case 1:
        for (int i = 0; i < vocab; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
        break;
      case 2:
        for (int i = 0; i < vocab; ++i) row[i] = 0.5f;
        break;
      case 3:
        for (int k = 0; k < 4; ++k) row[(k * 40009 + r) % valid] = 9.0f;
        break;
      default:
        break;
    }
    sampling::SamplingParams& p = params[r];
    p.seed = 500 + r;
    p.temperature = 0.6f + 0.1f * (r % 7);
    switch (r % 8) {
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
        top[r] = 5;
        break;
      case 5:
        top[r] = 3;
        break;
      case 6:  // penalties not exact in binary, greedy (exact) and drawn
      case 7:
        if (r % 8 == 6) p.temperature = 0;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.3f;
        p.frequency_penalty = 0.1f;
        break;
    }
    // Top logprobs over ties: every logit equal (the lowest ids, all in chunk 0), and equal
    // maxima in different chunks (the chunks' lists merged in id order).
    if (r % 4 == 2) top[r] = 20;
    if (r % 4 == 3) top[r] = 7;
    SlotSampling& t = run.table[r];
    t = TableEntry(p, 900 + r);
    t.has_penalties = p.has_penalties();
    t.want_logprob = 1;
    t.num_top_logprobs = top[r];
    if (t.has_penalties) {
      for (int k = 0; k < 50; ++k) run.mask[size_t(r) * vocab + (k * 31 + r) % valid] = 1;
      for (int k = 0; k < 20; ++k) run.counts[size_t(r) * vocab + (k * 97 + r) % valid] = 1 + k % 3;
    }
  }
  // Slot `slots` is finished: the second launch must skip it.
  run.table.push_back(run.table[0]);
  run.generated.push_back(3);
  run.done[slots] = 1;
  run.row_slot.resize(slots);
  for (int r = 0; r < slots; ++r) run.row_slot[r] = r;

  DeviceBuffer<SampleRowWork> work(slots + 8);
  const auto out = RunSampler(run, work);

  // The same slots reversed, with padding rows and the finished slot among them.
  SamplerRun shuffled = run;
  shuffled.row_slot.clear();
  shuffled.logits.clear();
  for (int r = slots - 1; r >= 0; --r) {
    shuffled.row_slot.push_back(r);
    shuffled.logits.insert(shuffled.logits.end(), run.logits.begin() + size_t(r) * vocab,
                           run.logits.begin() + size_t(r + 1) * vocab);
    if (r % 5 == 0) {
      shuffled.row_slot.push_back(r % 10 == 0 ? -1 : slots);
      shuffled.logits.insert(shuffled.logits.end(), run.logits.begin(), run.logits.begin() + vocab);
    }
  }
  const auto again = RunSampler(shuffled, work);  // the same workspace, reused
  std::vector<const SampleOutput*> by_slot(slots, nullptr);
  for (size_t i = 0; i < shuffled.row_slot.size(); ++i) {
    const int slot = shuffled.row_slot[i];
    if (slot < 0 || slot == slots) {
      EXPECT_EQ(again[i].slot, -1) << "padding or finished row " << i;
      continue;
    }
    by_slot[slot] = &again[i];
  }

  int agree = 0;
  for (int r = 0; r < slots; ++r) {
    std::vector<float> row = CpuRow(run, r);
    sampling::PenaltyState st;
    if (params[r].has_penalties()) {
      std::vector<int32_t> prompt;
      for (int k = 0; k < 50; ++k) prompt.push_back((k * 31 + r) % valid);
      st.AddPrompt(prompt);
      for (int k = 0; k < 20; ++k) {
        for (int c = 0; c < 1 + k % 3; ++c) st.AddOutput((k * 97 + r) % valid);
      }
    }
    sampling::Sampler cpu;
    const auto want = cpu.Sample(row, params[r], st, 3, top[r], true);
    if (params[r].greedy()) {
      EXPECT_EQ(out[r].token, want.token_id) << "greedy row " << r;
    }
    agree += out[r].token == want.token_id ? 1 : 0;
    if (out[r].token == want.token_id) {
      EXPECT_NEAR(out[r].logprob, want.logprob, 1e-4) << "row " << r;
    }
    ASSERT_EQ(out[r].num_top, top[r]) << "row " << r;
    for (int k = 0; k < top[r]; ++k) {
      EXPECT_EQ(out[r].top_ids[k], want.top[k].token_id) << "row " << r << " top " << k;
      EXPECT_NEAR(out[r].top_logprobs[k], want.top[k].logprob, 1e-4) << "row " << r;
    }
    EXPECT_EQ(out[r].slot, r);
    ASSERT_NE(by_slot[r], nullptr) << "slot " << r;
    EXPECT_EQ(by_slot[r]->token, out[r].token) << "slot " << r;
    EXPECT_EQ(by_slot[r]->logprob, out[r].logprob) << "slot " << r;

    SamplerRun alone = run;
    alone.row_slot = {r};
    alone.logits.assign(run.logits.begin() + size_t(r) * vocab,
                        run.logits.begin() + size_t(r + 1) * vocab);
    DeviceBuffer<SampleRowWork> fresh(1);
    const auto single = RunSampler(alone, fresh);
    EXPECT_EQ(single[0].token, out[r].token) << "row " << r;
    EXPECT_EQ(single[0].logprob, out[r].logprob) << "row " << r;
  }
  EXPECT_GE(agree, slots - 1) << agree << " of " << slots;
}

// Structured output's masks (SampleParams::masks) against the CPU runner's path (the row masked
// by constraint::ApplyTokenMask, then the CPU sampler): rows that allow a few ids (one past
// valid_vocab, one the row's lowest logit), half the ids, every id, or one id; greedy and drawn,
// penalties on an allowed prompt token, top logprobs; unmasked rows and a padding row beside
// them; the two-launch argmax path too. Over `vocab` ids, the last `invalid` never sampled.
void ExpectConstraintMasksMatchTheCpuPath(int vocab, int invalid) {
  const int valid = vocab - invalid, slots = 8;
  const int words = (vocab + 63) / 64;
  SamplerRun run =
      LlamaVocabularyRun(slots, /*extra_slots=*/0, /*seed=*/91, /*generated=*/2, vocab, invalid);
  std::vector<sampling::SamplingParams> params(slots);
  std::vector<int> top(slots, 0);
  std::vector<std::vector<uint64_t>> row_masks(slots);  // empty: unmasked
  const auto allow = [&](int r, int id) { row_masks[r][id / 64] |= uint64_t{1} << (id % 64); };
  for (int r = 0; r < slots; ++r) {
    float* row = run.logits.data() + size_t(r) * vocab;
    sampling::SamplingParams& p = params[r];
    p.seed = 700 + r;
    p.temperature = r % 2 == 0 ? 0.0f : 0.9f;
    if (r != 2) row_masks[r].assign(words, 0);
    switch (r) {
      case 0:
      case 1: {  // a few ids: one invalid, one the row's lowest logit
        const int lowest = static_cast<int>(std::min_element(row, row + valid) - row);
        for (int id : {17, valid / 3, valid * 3 / 4, lowest, valid + 5}) allow(r, id);
        row[valid + 5] = 100.0f;  // never sampled: past valid_vocab
        break;
      }
      case 3:
      case 5:  // every other word of ids, top logprobs among them
        for (int w = 0; w < words; w += 2) row_masks[r][w] = ~uint64_t{0};
        top[r] = 5;
        break;
      case 4:  // every id, with penalties: as unmasked
        std::fill(row_masks[r].begin(), row_masks[r].end(), ~uint64_t{0});
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.3f;
        break;
      case 6:  // one id
        allow(r, valid / 2 + 1);
        break;
      case 7:  // penalties on allowed prompt tokens
        for (int k = 0; k < 3000; ++k) allow(r, (k * 37 + 11) % valid);
        p.repetition_penalty = 1.5f;
        p.frequency_penalty = 0.2f;
        break;
      default:
        break;
    }
    SlotSampling& t = run.table[r];
    t = TableEntry(p, 400 + r);
    t.has_penalties = p.has_penalties();
    t.want_logprob = top[r] > 0 ? 1 : 0;
    t.num_top_logprobs = top[r];
    if (t.has_penalties) {
      for (int k = 0; k < 50; ++k) run.mask[size_t(r) * vocab + (k * 37 + 11) % valid] = 1;
      for (int k = 0; k < 20; ++k) run.counts[size_t(r) * vocab + (k * 97 + r) % valid] = 1 + k % 3;
    }
  }
  // Rows: the slots in order, then a padding row that names a mask.
  run.row_slot.resize(slots + 1);
  for (int r = 0; r < slots; ++r) run.row_slot[r] = r;
  run.row_slot[slots] = -1;
  const std::vector<float> first_row(run.logits.begin(), run.logits.begin() + vocab);
  run.logits.insert(run.logits.end(), first_row.begin(), first_row.end());
  run.mask_words = words;
  for (int r = 0; r < slots; ++r) {
    run.mask_index.push_back(row_masks[r].empty() ? -1
                                                  : static_cast<int32_t>(run.masks.size() / words));
    run.masks.insert(run.masks.end(), row_masks[r].begin(), row_masks[r].end());
  }
  run.mask_index.push_back(0);
  DeviceBuffer<SampleRowWork> work(slots + 1);
  const auto out = RunSampler(run, work);
  EXPECT_EQ(out[slots].slot, -1);

  int agree = 0;
  for (int r = 0; r < slots; ++r) {
    std::vector<float> row = CpuRow(run, r);
    if (!row_masks[r].empty()) constraint::ApplyTokenMask(row, row_masks[r]);
    sampling::PenaltyState st;
    if (params[r].has_penalties()) {
      std::vector<int32_t> prompt;
      for (int k = 0; k < 50; ++k) prompt.push_back((k * 37 + 11) % valid);
      st.AddPrompt(prompt);
      for (int k = 0; k < 20; ++k) {
        for (int c = 0; c < 1 + k % 3; ++c) st.AddOutput((k * 97 + r) % valid);
      }
    }
    sampling::Sampler cpu;
    const auto want = cpu.Sample(row, params[r], st, 2, top[r], top[r] > 0);
    ASSERT_GE(out[r].token, 0) << "row " << r;
    ASSERT_LT(out[r].token, valid) << "row " << r;
    if (!row_masks[r].empty()) {
      EXPECT_TRUE((row_masks[r][out[r].token / 64] >> (out[r].token % 64)) & 1) << "row " << r;
    }
    if (params[r].greedy()) {
      EXPECT_EQ(out[r].token, want.token_id) << "greedy row " << r;
    }
    agree += out[r].token == want.token_id ? 1 : 0;
    ASSERT_EQ(out[r].num_top, top[r]) << "row " << r;
    for (int k = 0; k < top[r]; ++k) {
      EXPECT_EQ(out[r].top_ids[k], want.top[k].token_id) << "row " << r << " top " << k;
      EXPECT_NEAR(out[r].top_logprobs[k], want.top[k].logprob, 1e-4) << "row " << r;
    }
  }
  EXPECT_GE(agree, slots - 1) << agree << " of " << slots;
  EXPECT_EQ(out[6].token, valid / 2 + 1);

  // The two-launch path on the greedy rows: the same tokens.
  SamplerRun greedy = run;
  for (int r = 0; r < slots; ++r) {
    if (!params[r].greedy() || top[r] > 0) greedy.row_slot[r] = -1;
  }
  greedy.argmax_only = true;
  const auto fast = RunSampler(greedy, work);
  for (int r = 0; r < slots; ++r) {
    if (greedy.row_slot[r] >= 0) {
      EXPECT_EQ(fast[r].token, out[r].token) << "row " << r;
    }
  }
}

// A Llama 3 vocabulary (whole mask words), and one whose last word is partial.
TEST(SampleKernelTest, ConstraintMasksMatchTheCpuPath) {
  LLM_REQUIRE_GPU();
  ExpectConstraintMasksMatchTheCpuPath(kLlamaVocab, 256);
  ExpectConstraintMasksMatchTheCpuPath(5003, 11);
}

// The two-launch path (every row greedy without logprobs) gives every row the full launch's
// result bit for bit, over a Llama 3 vocabulary with invalid ids, ties within and across chunks,
// penalties, a stop id, padding rows and a finished slot; a row outside the contract (drawn)
// gets its argmax and no logprob.
TEST(SampleKernelTest, ArgmaxOnlyLaunchMatchesTheFullLaunch) {
  LLM_REQUIRE_GPU();
  const int vocab = kLlamaVocab, valid = vocab - 256, slots = 9;
  SamplerRun run = LlamaVocabularyRun(slots, /*extra_slots=*/0, /*seed=*/77, /*generated=*/5);
  for (int r = 0; r < slots; ++r) {
    float* row = run.logits.data() + size_t(r) * vocab;
    if (r % 3 == 1) {  // equal maxima in different chunks: the lowest id wins
      for (int k = 0; k < 4; ++k) row[(k * 40009 + r) % valid] = 9.0f;
    }
    if (r == 2) row[valid + 3] = 50.0f;  // an invalid id is never chosen
    sampling::SamplingParams p;
    p.temperature = 0;
    if (r % 2 == 1) {
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.3f;
      p.frequency_penalty = 0.1f;
    }
    run.table[r] = TableEntry(p, 300 + r);
    run.table[r].has_penalties = p.has_penalties();
    if (p.has_penalties()) {
      for (int k = 0; k < 50; ++k) run.mask[size_t(r) * vocab + (k * 31 + r) % valid] = 1;
      for (int k = 0; k < 20; ++k) run.counts[size_t(r) * vocab + (k * 97 + r) % valid] = 1 + k % 3;
      // A prompt token above every random logit (< 8) falls below them once penalised (/1.3).
      run.mask[size_t(r) * vocab + 1234] = 1;
      row[1234] = 8.5f;
    }
  }
  run.table[4].num_stop_ids = 1;  // slot 4 stops on its argmax
  run.done[6] = 1;                // slot 6 finished: skipped
  run.row_slot = {0, 1, -1, 2, 3, 4, 5, 6, 7, 8, -1};
  std::vector<float> logits;
  for (int32_t slot : run.row_slot) {
    const int src = slot < 0 ? 0 : slot;
    logits.insert(logits.end(), run.logits.begin() + size_t(src) * vocab,
                  run.logits.begin() + size_t(src + 1) * vocab);
  }
  run.logits = logits;
  {
    // Slot 4's argmax, found on the host, is its stop id.
    const float* row = run.logits.data() + size_t(5) * vocab;
    run.table[4].stop_ids[0] = static_cast<int32_t>(std::max_element(row, row + valid) - row);
  }

  DeviceBuffer<SampleRowWork> work(run.row_slot.size());
  const auto full = RunSampler(run, work);
  run.argmax_only = true;
  const auto fast = RunSampler(run, work);
  for (size_t i = 0; i < run.row_slot.size(); ++i) {
    EXPECT_EQ(fast[i].slot, full[i].slot) << "row " << i;
    EXPECT_EQ(fast[i].key, full[i].key) << "row " << i;
    EXPECT_EQ(fast[i].token, full[i].token) << "row " << i;
    EXPECT_EQ(fast[i].finish, full[i].finish) << "row " << i;
    EXPECT_EQ(fast[i].num_top, 0) << "row " << i;
    if (full[i].slot >= 0) {
      EXPECT_EQ(fast[i].logprob, 0.0f) << "row " << i;
      EXPECT_LT(full[i].token, valid) << "row " << i;
    }
  }
  EXPECT_EQ(full[7].slot, -1);  // the finished slot
  EXPECT_EQ(full[5].finish, sampling::FinishReason::kStopToken);
  EXPECT_EQ(full[2].slot, -1);  // padding
  for (size_t i = 0; i < run.row_slot.size(); ++i) {
    if (full[i].slot >= 0 && full[i].slot % 2 == 1) {  // penalised
      EXPECT_NE(full[i].token, 1234) << "row " << i;
    }
  }

  // A drawn row in an argmax-only launch (outside the contract): its argmax, no logprob.
  SamplerRun drawn = run;
  drawn.table[0].temperature = 0.8f;
  drawn.table[0].want_logprob = 1;
  drawn.table[0].num_top_logprobs = 3;
  const auto out = RunSampler(drawn, work);
  EXPECT_EQ(out[0].token, full[0].token);
  EXPECT_EQ(out[0].logprob, 0.0f);
  EXPECT_EQ(out[0].num_top, 0);
}

// A subnormal temperature (1/T overflows a float: sampling::InverseTemperature clamps it) draws
// the argmax under every filter, with logprob 0 and the other listed logprobs far below (-inf
// where the gap exceeds 1), bit for bit the CPU sampler's: with inf as 1/T, every probability and
// logprob of the row was NaN. Each row's maximum is made unique (9 above logits in [-8, 8] on
// the bf16 grid, where about a hundred ids share the top value: the draw then picks among them,
// each with logprob -log(ties), on both samplers, as the first run on a GPU showed).
TEST(SampleKernelTest, SubnormalTemperatureDrawsTheArgmax) {
  LLM_REQUIRE_GPU();
  const int slots = 4;
  SamplerRun run = LlamaVocabularyRun(slots, /*extra_slots=*/0, /*seed=*/91, /*generated=*/2);
  std::vector<sampling::SamplingParams> params(slots);
  for (int r = 0; r < slots; ++r) {
    run.logits[size_t(r) * run.vocab + 1000 + 37 * r] = 9.0f;
    sampling::SamplingParams& p = params[r];
    p.temperature = r % 2 == 0 ? 1e-40f : 1e-45f;
    p.seed = 40 + r;
    if (r == 1) p.top_k = 40;
    if (r == 2) p.top_p = 0.9f;
    if (r == 3) p.min_p = 0.05f;
    run.table[r] = TableEntry(p, 700 + r);
    run.table[r].want_logprob = 1;
    run.table[r].num_top_logprobs = 3;
  }
  run.row_slot = {0, 1, 2, 3};
  DeviceBuffer<SampleRowWork> work(slots);
  const auto out = RunSampler(run, work);
  for (int r = 0; r < slots; ++r) {
    std::vector<float> row = CpuRow(run, r);
    const int32_t argmax =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    ASSERT_EQ(argmax, 1000 + 37 * r);
    sampling::Sampler cpu;
    const auto want = cpu.Sample(row, params[r], sampling::PenaltyState{}, 2, 3, true);
    EXPECT_EQ(want.token_id, argmax) << "row " << r;
    EXPECT_EQ(out[r].token, argmax) << "row " << r;
    EXPECT_EQ(out[r].logprob, 0.0f) << "row " << r;
    ASSERT_EQ(out[r].num_top, 3) << "row " << r;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(out[r].top_ids[k], want.top[k].token_id) << "row " << r << " top " << k;
      EXPECT_EQ(out[r].top_logprobs[k], want.top[k].logprob) << "row " << r << " top " << k;
    }
    EXPECT_LT(out[r].top_logprobs[1], -1e30f) << "row " << r;  // the gap times FLT_MAX
  }
}

// A subnormal repetition penalty divides a seen positive logit past FLT_MAX: it becomes FLT_MAX
// (sampling::RepetitionPenalised), never inf, so the seen tokens share the mass without NaN, as
// in the CPU sampler (same token, logprob and top ids).
TEST(SampleKernelTest, SubnormalRepetitionPenaltyKeepsTheRowFinite) {
  LLM_REQUIRE_GPU();
  const int vocab = kLlamaVocab, valid = vocab - 256, slots = 3;
  SamplerRun run = LlamaVocabularyRun(slots, /*extra_slots=*/0, /*seed=*/93, /*generated=*/4);
  std::vector<sampling::SamplingParams> params(slots);
  std::vector<sampling::PenaltyState> states(slots);
  for (int r = 0; r < slots; ++r) {
    sampling::SamplingParams& p = params[r];
    p.temperature = r == 0 ? 0.0f : 0.8f;
    p.repetition_penalty = 1e-40f;
    p.seed = 60 + r;
    std::vector<int32_t> prompt;
    for (int k = 0; k < 5; ++k) {
      const int32_t id = (k * 20011 + r * 7) % valid;
      run.logits[size_t(r) * vocab + id] = 0.5f + k;  // positive: divided past FLT_MAX
      run.mask[size_t(r) * vocab + id] = 1;
      prompt.push_back(id);
    }
    states[r].AddPrompt(prompt);
    run.table[r] = TableEntry(p, 800 + r);
    run.table[r].has_penalties = 1;
    run.table[r].want_logprob = 1;
    run.table[r].num_top_logprobs = 4;
  }
  run.row_slot = {0, 1, 2};
  DeviceBuffer<SampleRowWork> work(slots);
  const auto out = RunSampler(run, work);
  for (int r = 0; r < slots; ++r) {
    std::vector<float> row = CpuRow(run, r);
    sampling::Sampler cpu;
    const auto want = cpu.Sample(row, params[r], states[r], 4, 4, true);
    EXPECT_EQ(out[r].token, want.token_id) << "row " << r;
    EXPECT_EQ(run.mask[size_t(r) * vocab + out[r].token], 1) << "row " << r;
    EXPECT_FALSE(std::isnan(out[r].logprob)) << "row " << r;
    EXPECT_NEAR(out[r].logprob, want.logprob, 1e-6) << "row " << r;
    ASSERT_EQ(out[r].num_top, 4) << "row " << r;
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(out[r].top_ids[k], want.top[k].token_id) << "row " << r << " top " << k;
    }
  }
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
