// Speculative decoding's kernels against the CPU: the n-gram proposer against
// worker/speculative/ngram.h, and the sampler's verify rows plus LaunchVerify against the draws
// the sampler makes without speculation; the history spans, the oracle proposer and the draft
// model's rows and picks against their host rules.
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/sampling.h"
#include "kernels/speculative/draft_step.h"
#include "kernels/speculative/history_write.h"
#include "kernels/speculative/ngram_propose.h"
#include "kernels/speculative/oracle_propose.h"
#include "kernels/speculative/verify.h"
#include "tests/kernels/gpu_test_util.h"
#include "worker/speculative/ngram.h"

namespace llm::kernels {
namespace {

using testing::DeviceBuffer;

// The device slot table of `slots` slots over `vocab` ids, in device memory, with a history and
// a proposal table.
struct SlotTable {
  SlotTable(int32_t slots, int32_t vocab, int32_t stride, int32_t max_proposals)
      : last(std::vector<int32_t>(slots, 0)),
        pos(std::vector<int32_t>(slots, 0)),
        generated(std::vector<int32_t>(slots, 0)),
        done(std::vector<uint8_t>(slots, 0)),
        table(slots),
        counts(std::vector<uint16_t>(size_t(slots) * vocab, 0)),
        mask(std::vector<uint8_t>(size_t(slots) * vocab, 0)),
        history(size_t(slots) * stride),
        proposals(size_t(slots) * max_proposals),
        num_proposals(std::vector<int32_t>(slots, 0)),
        stride(stride),
        max_proposals(max_proposals) {}
  DeviceSlots View() const {
    DeviceSlots d{last.get(),  pos.get(),    generated.get(), done.get(),
                  table.get(), counts.get(), mask.get()};
    d.history = history.get();
    d.history_stride = stride;
    d.proposals = proposals.get();
    d.num_proposals = num_proposals.get();
    d.max_proposals = max_proposals;
    return d;
  }
  DeviceBuffer<int32_t> last, pos, generated;
  DeviceBuffer<uint8_t> done;
  DeviceBuffer<SlotSampling> table;
  DeviceBuffer<uint16_t> counts;
  DeviceBuffer<uint8_t> mask;
  DeviceBuffer<int32_t> history, proposals, num_proposals;
  int32_t stride, max_proposals;
};

SlotSampling Settings(float temperature, uint64_t seed) {
  SlotSampling s{};
  s.temperature = temperature;
  s.top_p = 1.0f;
  s.repetition_penalty = 1.0f;
  s.max_tokens = 1000;
  s.seed = seed;
  s.key = seed;
  return s;
}

TEST(NgramProposeKernelTest, ProposesWhatTheCpuProposerDoes) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 24, kStride = 3000, kMaxProposals = 6, kMin = 1, kMax = 4;
  std::mt19937 rng(3);
  std::vector<int32_t> history(size_t(kSlots) * kStride, 0), pos(kSlots), from(kSlots, 0);
  std::vector<int32_t> generated(kSlots, 3);
  std::vector<SlotSampling> table(kSlots, Settings(0.0f, 1));
  std::vector<uint8_t> done(kSlots, 0);
  std::vector<int32_t> decode_list, decode_draft, decode_limit;
  // Blocks hold 2 positions past the last token for some slots, plenty for the others.
  const auto limit = [&](int32_t s) { return s % 5 == 3 ? pos[s] + 3 : kStride; };
  for (int32_t s = 0; s < kSlots; ++s) {
    pos[s] = std::uniform_int_distribution<int32_t>(0, kStride - 1)(rng);
    const int32_t alphabet = 2 + s % 9;
    for (int32_t i = 0; i <= pos[s]; ++i) {
      history[size_t(s) * kStride + i] = std::uniform_int_distribution<int32_t>(0, alphabet)(rng);
    }
    if (s % 4 == 1) from[s] = pos[s] / 2;  // a prefix-cache hit: the history starts later
    decode_list.push_back(s);
    decode_draft.push_back(s % 8);  // allowances wider than the table are cut to it
    decode_limit.push_back(limit(s));
    if (s % 3 == 0) {  // an unused decode row
      decode_list.push_back(-1);
      decode_draft.push_back(0);
      decode_limit.push_back(0);
    }
  }
  done[5] = 1;
  table[7].has_penalties = 1;  // proposes as any slot (its rows count the proposals)
  table[9].max_tokens = 5;     // 3 generated: one proposal at most
  SlotTable t(kSlots, 64, kStride, kMaxProposals);
  t.history.Upload(history);
  t.pos.Upload(pos);
  t.generated.Upload(generated);
  t.done.Upload(done);
  t.table.Upload(table);
  DeviceBuffer<int32_t> d_from(from);
  DeviceSlots slots = t.View();
  slots.history_from = d_from.get();
  DeviceBuffer<int32_t> d_list(decode_list), d_draft(decode_draft), d_limit(decode_limit);
  const NgramProposeParams p{
      d_list.get(), d_draft.get(), d_limit.get(), static_cast<int32_t>(decode_list.size()),
      slots,        kMin,          kMax};
  LLM_CUDA_OK(LaunchNgramPropose(p, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  const auto proposals = t.proposals.Download();
  const auto counts = t.num_proposals.Download();
  int proposed = 0;
  for (int32_t s = 0; s < kSlots; ++s) {
    std::vector<int32_t> want;
    if (s != 5) {
      const std::vector<int32_t> h(history.begin() + size_t(s) * kStride + from[s],
                                   history.begin() + size_t(s) * kStride + pos[s] + 1);
      speculative::ProposeNgram(h, {.min = kMin, .max = kMax},
                                ProposalsAllowed(s % 8, kMaxProposals, table[s].max_tokens,
                                                 generated[s], limit(s) - 1 - pos[s]),
                                want);
    }
    ASSERT_EQ(counts[s], static_cast<int32_t>(want.size())) << "slot " << s;
    const std::vector<int32_t> got(proposals.begin() + size_t(s) * kMaxProposals,
                                   proposals.begin() + size_t(s) * kMaxProposals + counts[s]);
    EXPECT_EQ(got, want) << "slot " << s;
    proposed += counts[s] > 0 ? 1 : 0;
  }
  EXPECT_GT(proposed, kSlots / 2);
}

// History spans land where the host rule puts them: clipped at the row's end, history_from
// lowered by searchable spans only.
TEST(HistoryWriteKernelTest, WritesTheSpansAsTheHostRuleDoes) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 6, kStride = 700;
  std::mt19937 rng(9);
  std::vector<HistorySpan> spans;
  std::vector<int32_t> tokens;
  for (int32_t s = 0; s < kSlots; ++s) {
    const int32_t pos = std::uniform_int_distribution<int32_t>(0, kStride - 1)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 600)(rng);  // some pass the end
    spans.push_back({s, pos, count, static_cast<int32_t>(tokens.size()), s % 2});
    for (int32_t i = 0; i < count; ++i) tokens.push_back(1 + static_cast<int32_t>(rng() % 1000));
  }
  std::vector<int32_t> history(size_t(kSlots) * kStride, -7), from(kSlots, INT32_MAX);
  SlotTable t(kSlots, 64, kStride, 1);
  t.history.Upload(history);
  DeviceBuffer<int32_t> d_from(from), d_tokens(tokens);
  DeviceBuffer<HistorySpan> d_spans(spans);
  DeviceSlots slots = t.View();
  slots.history_from = d_from.get();
  const HistoryWriteParams p{d_spans.get(), kSlots, d_tokens.get(), slots};
  LLM_CUDA_OK(LaunchHistoryWrite(p, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  for (const HistorySpan& s : spans) {
    WriteHistorySpan(s, tokens.data(), history.data(), kStride, from.data());
  }
  EXPECT_EQ(t.history.Download(), history);
  EXPECT_EQ(d_from.Download(), from);
}

// The oracle proposes the history past each slot's last token up to its terminator, within
// the same caps as the n-gram proposer.
TEST(OracleProposeKernelTest, ProposesWhatTheHostRuleDoes) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 20, kStride = 300, kMaxProposals = 6;
  std::mt19937 rng(4);
  std::vector<int32_t> history(size_t(kSlots) * kStride), pos(kSlots);
  std::vector<int32_t> generated(kSlots, 3);
  std::vector<SlotSampling> table(kSlots, Settings(0.0f, 1));
  std::vector<uint8_t> done(kSlots, 0);
  std::vector<int32_t> decode_list, decode_draft, decode_limit;
  for (int32_t s = 0; s < kSlots; ++s) {
    pos[s] = s == 4 ? kStride - 2 : std::uniform_int_distribution<int32_t>(0, kStride - 20)(rng);
    for (int32_t i = 0; i < kStride; ++i) {
      history[size_t(s) * kStride + i] = static_cast<int32_t>(rng() % 500);
    }
    if (s % 3 == 1 && pos[s] + 1 + s % 5 < kStride) {
      history[size_t(s) * kStride + pos[s] + 1 + s % 5] = -1;  // the oracle ends
    }
    decode_list.push_back(s);
    decode_draft.push_back(s % 8);
    decode_limit.push_back(s % 7 == 2 ? pos[s] + 3 : kStride);
  }
  done[5] = 1;
  table[7].has_penalties = 1;  // proposes as any slot
  table[9].max_tokens = 5;
  decode_list[11] = -1;  // an unused decode row
  SlotTable t(kSlots, 64, kStride, kMaxProposals);
  t.history.Upload(history);
  t.pos.Upload(pos);
  t.generated.Upload(generated);
  t.done.Upload(done);
  t.table.Upload(table);
  t.num_proposals.Upload(std::vector<int32_t>(kSlots, -3));
  DeviceBuffer<int32_t> d_list(decode_list), d_draft(decode_draft), d_limit(decode_limit);
  const OracleProposeParams p{d_list.get(), d_draft.get(), d_limit.get(), kSlots, t.View()};
  LLM_CUDA_OK(LaunchOraclePropose(p, 0));
  LLM_CUDA_OK(cudaDeviceSynchronize());
  const auto proposals = t.proposals.Download();
  const auto counts = t.num_proposals.Download();
  int proposed = 0;
  for (int32_t s = 0; s < kSlots; ++s) {
    if (s == 11) {
      EXPECT_EQ(counts[s], -3) << "an unused row's slot is not touched";
      continue;
    }
    std::vector<int32_t> want(kMaxProposals);
    int32_t n = 0;
    if (s != 5) {
      const int32_t k = ProposalsAllowed(decode_draft[s], kMaxProposals, table[s].max_tokens,
                                         generated[s], decode_limit[s] - 1 - pos[s]);
      n = OracleProposals(history.data() + size_t(s) * kStride, kStride, pos[s], k, want.data());
    }
    ASSERT_EQ(counts[s], n) << "slot " << s;
    EXPECT_EQ(std::vector<int32_t>(proposals.begin() + size_t(s) * kMaxProposals,
                                   proposals.begin() + size_t(s) * kMaxProposals + n),
              std::vector<int32_t>(want.begin(), want.begin() + n))
        << "slot " << s;
    proposed += n > 0 ? 1 : 0;
  }
  EXPECT_GT(proposed, kSlots / 3);
}

// The draft model's passes (draft_step.h): every row's slot, position, token and embedding, and
// each round's argmax proposals, as the host rules give them, over four rounds.
TEST(DraftStepKernelTest, RowsAndPicksFollowTheHostRules) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 12, kStride = 200, kMaxProposals = 4, kIds = 3000, kHidden = 72;
  constexpr int32_t kValid = kIds - 100;
  std::mt19937 rng(9);
  std::vector<int32_t> history(size_t(kSlots) * kStride), pos(kSlots), last(kSlots);
  std::vector<int32_t> generated(kSlots, 2), decode_list, decode_draft, decode_limit;
  std::vector<SlotSampling> table(kSlots, Settings(0.0f, 1));
  std::vector<uint8_t> done(kSlots, 0);
  for (int32_t s = 0; s < kSlots; ++s) {
    pos[s] = s == 3 ? 0 : std::uniform_int_distribution<int32_t>(1, kStride - 10)(rng);
    for (int32_t i = 0; i < kStride; ++i) {
      history[size_t(s) * kStride + i] = static_cast<int32_t>(rng() % kIds);
    }
    last[s] = history[size_t(s) * kStride + pos[s]];
    decode_list.push_back(s);
    decode_draft.push_back(s % 5);
    decode_limit.push_back(s % 4 == 1 ? pos[s] + 2 : kStride);
  }
  done[6] = 1;
  decode_list[8] = -1;
  table[2].max_tokens = 3;  // two generated: nothing left to propose
  std::vector<int32_t> proposals(size_t(kSlots) * kMaxProposals, -1), counts(kSlots, -3);
  SlotTable t(kSlots, 8, kStride, kMaxProposals);
  t.history.Upload(history);
  t.pos.Upload(pos);
  t.last.Upload(last);
  t.generated.Upload(generated);
  t.done.Upload(done);
  t.table.Upload(table);
  t.proposals.Upload(proposals);
  t.num_proposals.Upload(counts);
  std::vector<__nv_bfloat16> embedding(size_t(kIds) * kHidden);
  std::normal_distribution<float> normal;
  for (auto& e : embedding) e = testing::HostToBf16(normal(rng));
  DeviceBuffer<__nv_bfloat16> d_embedding(embedding);
  DeviceBuffer<int32_t> d_list(decode_list), d_draft(decode_draft), d_limit(decode_limit);
  // The host's view of the same table, which the host rules update.
  DeviceSlots host{last.data(),  pos.data(), generated.data(), done.data(),
                   table.data(), nullptr,    nullptr};
  host.history = history.data();
  host.history_stride = kStride;
  host.proposals = proposals.data();
  host.num_proposals = counts.data();
  host.max_proposals = kMaxProposals;
  for (int32_t round = 0; round < kMaxProposals; ++round) {
    const int32_t rows = kSlots * DraftRowsPerSlot(round);
    DeviceBuffer<int32_t> row_token(rows), row_pos(rows), row_slot(rows);
    DeviceBuffer<float> x(size_t(rows) * kHidden);
    DraftRowsParams p{};
    p.decode_list = d_list.get();
    p.decode_draft = d_draft.get();
    p.decode_limit = d_limit.get();
    p.num_decode = kSlots;
    p.round = round;
    p.slots = t.View();
    p.vocab = kIds;
    p.row_token = row_token.get();
    p.row_pos = row_pos.get();
    p.row_slot = row_slot.get();
    p.embedding = d_embedding.get();
    p.x = x.get();
    p.hidden = kHidden;
    LLM_CUDA_OK(LaunchDraftRows(p, 0));
    std::vector<float> logits(size_t(rows) * kIds);
    for (float& l : logits) l = static_cast<float>(rng() % 40);  // ties: the lowest id wins
    DeviceBuffer<float> d_logits(logits);
    const DraftPickParams pick{d_logits.get(), kIds,   kValid, d_list.get(), d_draft.get(),
                               d_limit.get(),  kSlots, round,  t.View()};
    LLM_CUDA_OK(LaunchDraftPick(pick, 0));
    LLM_CUDA_OK(cudaDeviceSynchronize());
    DraftRowsParams hp = p;
    hp.decode_list = decode_list.data();
    hp.decode_draft = decode_draft.data();
    hp.decode_limit = decode_limit.data();
    hp.slots = host;
    const auto tokens = row_token.Download(), positions = row_pos.Download();
    const auto slots = row_slot.Download();
    const auto xs = x.Download();
    for (int32_t r = 0; r < rows; ++r) {
      const DraftRow want = DraftRowAt(hp, r);
      ASSERT_EQ(slots[r], want.slot) << "round " << round << " row " << r;
      ASSERT_EQ(positions[r], want.pos) << "round " << round << " row " << r;
      ASSERT_EQ(tokens[r], want.token) << "round " << round << " row " << r;
      for (int32_t i = 0; i < kHidden; i += 17) {
        ASSERT_EQ(xs[size_t(r) * kHidden + i],
                  __bfloat162float(embedding[size_t(want.token) * kHidden + i]))
            << "row " << r;
      }
    }
    DraftPickParams hpick = pick;
    hpick.decode_list = decode_list.data();
    hpick.decode_draft = decode_draft.data();
    hpick.decode_limit = decode_limit.data();
    hpick.slots = host;
    const int32_t per = DraftRowsPerSlot(round);
    for (int32_t d = 0; d < kSlots; ++d) {
      const float* row = logits.data() + (size_t(d) * per + per - 1) * kIds;
      DraftPickApply(hpick, d, static_cast<int32_t>(std::max_element(row, row + kValid) - row));
    }
    ASSERT_EQ(t.num_proposals.Download(), counts) << "round " << round;
    ASSERT_EQ(t.proposals.Download(), proposals) << "round " << round;
  }
  int32_t slots_with_four = 0;
  for (int32_t c : counts) slots_with_four += c == 4 ? 1 : 0;
  EXPECT_GT(slots_with_four, 0);
}

constexpr int32_t kVocab = 5000;

// The sampler's tokens for `rows` logits rows, each row r sampling for row_slot[r] with the
// given generated counts, optionally as verify rows (row_offset), then LaunchVerify.
struct VerifyRun {
  std::vector<float> logits;
  std::vector<int32_t> row_slot, row_pos, row_offset;
};

std::vector<SampleOutput> Sample(SlotTable& t, const VerifyRun& run, bool verify) {
  const auto rows = static_cast<int32_t>(run.row_slot.size());
  DeviceBuffer<float> d_logits(run.logits), d_probs(run.logits.size());
  DeviceBuffer<int32_t> d_slot(run.row_slot), d_pos(run.row_pos), d_offset(run.row_offset);
  DeviceBuffer<SampleOutput> d_out(rows);
  DeviceBuffer<SampleRowWork> work(rows);
  SampleParams sp{d_logits.get(), d_probs.get(), d_slot.get(), d_pos.get(), t.View(),
                  d_out.get(),    rows,          kVocab,       kVocab,      work.get()};
  if (verify) sp.row_offset = d_offset.get();
  EXPECT_EQ(LaunchSample(sp, 0), cudaSuccess);
  if (verify) {
    const VerifyParams vp{d_slot.get(), d_pos.get(), d_offset.get(), d_out.get(),
                          rows,         t.View(),    kVocab};
    EXPECT_EQ(LaunchVerify(vp, 0), cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_out.Download();
}

TEST(VerifyKernelTest, VerifyRowsDrawAsTheRunWithoutSpeculationAndTheAgreeingRunStands) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 3, kRows = 4, kGenerated = 5, kPos = 40;
  // Slot 0 sampled, every proposal right; slot 1 sampled, the second wrong; slot 2 greedy, all
  // right.
  const std::vector<SlotSampling> table = {Settings(0.9f, 11), Settings(0.7f, 12),
                                           Settings(0.0f, 13)};
  VerifyRun run;
  run.logits = testing::RandomFloats(size_t(kSlots) * kRows * kVocab, 5, -4, 4);
  for (int32_t s = 0; s < kSlots; ++s) {
    for (int32_t j = 0; j < kRows; ++j) {
      run.row_slot.push_back(s);
      run.row_pos.push_back(kPos + j);
      run.row_offset.push_back(j);
    }
  }
  // Without speculation: row j of a group is drawn after kGenerated + j tokens, alone.
  std::vector<int32_t> plain(size_t(kSlots) * kRows);
  for (int32_t j = 0; j < kRows; ++j) {
    SlotTable t(kSlots, kVocab, 64, kRows - 1);
    t.table.Upload(table);
    t.generated.Upload(std::vector<int32_t>(kSlots, kGenerated + j));
    VerifyRun one;
    for (int32_t s = 0; s < kSlots; ++s) {
      const auto row = run.logits.begin() + (size_t(s) * kRows + j) * kVocab;
      one.logits.insert(one.logits.end(), row, row + kVocab);
      one.row_slot.push_back(s);
      one.row_pos.push_back(kPos + j);
      one.row_offset.push_back(0);
    }
    const auto out = Sample(t, one, false);
    for (int32_t s = 0; s < kSlots; ++s) plain[size_t(s) * kRows + j] = out[s].token;
  }
  std::vector<int32_t> proposals(size_t(kSlots) * (kRows - 1));
  for (int32_t s = 0; s < kSlots; ++s) {
    for (int32_t j = 0; j + 1 < kRows; ++j) {
      proposals[size_t(s) * (kRows - 1) + j] = plain[size_t(s) * kRows + j];
    }
  }
  proposals[1 * (kRows - 1) + 1] = (plain[1 * kRows + 1] + 1) % kVocab;
  SlotTable t(kSlots, kVocab, 64, kRows - 1);
  t.table.Upload(table);
  t.generated.Upload(std::vector<int32_t>(kSlots, kGenerated));
  t.proposals.Upload(proposals);
  t.num_proposals.Upload(std::vector<int32_t>(kSlots, kRows - 1));
  const auto out = Sample(t, run, true);
  const std::vector<int32_t> accepted = {4, 2, 4};
  const auto generated = t.generated.Download();
  const auto pos = t.pos.Download();
  const auto last = t.last.Download();
  for (int32_t s = 0; s < kSlots; ++s) {
    for (int32_t j = 0; j < kRows; ++j) {
      const SampleOutput& o = out[size_t(s) * kRows + j];
      if (j < accepted[s]) {
        EXPECT_EQ(o.slot, s) << s << "/" << j;
        EXPECT_EQ(o.token, plain[size_t(s) * kRows + j]) << s << "/" << j;
      } else {
        EXPECT_EQ(o.slot, -1) << s << "/" << j;
      }
    }
    EXPECT_EQ(generated[s], kGenerated + accepted[s]);
    EXPECT_EQ(pos[s], kPos + accepted[s]);
    EXPECT_EQ(last[s], plain[size_t(s) * kRows + accepted[s] - 1]);
  }
}

// With penalties, row j of a group counts the proposals before it as outputs: every row's
// logits are the same, so each plain draw is pushed off the earlier ones by the penalties, and
// the verify rows must draw the same tokens with only the slot's own counts uploaded.
TEST(VerifyKernelTest, PenaltyRowsCountTheProposalsBeforeThem) {
  LLM_REQUIRE_GPU();
  constexpr int32_t kSlots = 2, kRows = 5, kGenerated = 3, kPos = 30;
  std::vector<SlotSampling> table = {Settings(0.0f, 21), Settings(0.8f, 22)};
  table[0].repetition_penalty = 1.3f;
  table[0].frequency_penalty = 0.8f;
  table[1].presence_penalty = 1.5f;
  table[1].frequency_penalty = 0.6f;
  for (SlotSampling& t : table) t.has_penalties = 1;
  const std::vector<float> row = testing::RandomFloats(kVocab, 8, -2, 2);
  std::vector<uint16_t> base(size_t(kSlots) * kVocab, 0);
  base[7] = 2;
  base[kVocab + 9] = 1;
  // Without speculation: row j drawn alone after kGenerated + j tokens, counting them.
  std::vector<int32_t> plain(size_t(kSlots) * kRows);
  std::vector<uint16_t> counts = base;
  for (int32_t j = 0; j < kRows; ++j) {
    SlotTable t(kSlots, kVocab, 64, kRows - 1);
    t.table.Upload(table);
    t.generated.Upload(std::vector<int32_t>(kSlots, kGenerated + j));
    t.counts.Upload(counts);
    VerifyRun one;
    for (int32_t s = 0; s < kSlots; ++s) {
      one.logits.insert(one.logits.end(), row.begin(), row.end());
      one.row_slot.push_back(s);
      one.row_pos.push_back(kPos + j);
      one.row_offset.push_back(0);
    }
    const auto out = Sample(t, one, false);
    for (int32_t s = 0; s < kSlots; ++s) {
      plain[size_t(s) * kRows + j] = out[s].token;
      ++counts[size_t(s) * kVocab + out[s].token];
    }
  }
  EXPECT_NE(plain[1], plain[0]) << "the penalties changed nothing: the test tests nothing";
  VerifyRun run;
  std::vector<int32_t> proposals(size_t(kSlots) * (kRows - 1));
  for (int32_t s = 0; s < kSlots; ++s) {
    for (int32_t j = 0; j < kRows; ++j) {
      run.logits.insert(run.logits.end(), row.begin(), row.end());
      run.row_slot.push_back(s);
      run.row_pos.push_back(kPos + j);
      run.row_offset.push_back(j);
      if (j + 1 < kRows) proposals[size_t(s) * (kRows - 1) + j] = plain[size_t(s) * kRows + j];
    }
  }
  SlotTable t(kSlots, kVocab, 64, kRows - 1);
  t.table.Upload(table);
  t.generated.Upload(std::vector<int32_t>(kSlots, kGenerated));
  t.counts.Upload(base);
  t.proposals.Upload(proposals);
  t.num_proposals.Upload(std::vector<int32_t>(kSlots, kRows - 1));
  const auto out = Sample(t, run, true);
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(out[r].slot, static_cast<int32_t>(r) / kRows) << "row " << r;
    EXPECT_EQ(out[r].token, plain[r]) << "row " << r;
  }
  EXPECT_EQ(t.counts.Download(), counts);  // the run appended counts every token once
}

}  // namespace
}  // namespace llm::kernels
