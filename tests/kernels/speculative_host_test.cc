// Speculative decoding's device rules run on the host (no GPU): the n-gram proposer's parallel
// restatement (ngram_match.h) gives the CPU proposer's proposals whatever the threads' split;
// verification (verify.h) appends exactly the accepted run with the sampler's append and stop
// rules; and the two together, over a deterministic stand-in for the model, give the ids of a
// run without speculation. The oracle proposer (history_write.h, oracle_propose.h) proposes the
// continuation written past the prompt, and with the greedy run's own ids every proposal stands.
// The draft model's rows and picks (draft_step.h), over a stand-in draft, keep the draft's cache
// caught up with two rows a step and give the greedy run's ids.
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/append.h"
#include "kernels/speculative/draft_step.h"
#include "kernels/speculative/history_write.h"
#include "kernels/speculative/ngram_match.h"
#include "kernels/speculative/ngram_propose.h"
#include "kernels/speculative/oracle_propose.h"
#include "kernels/speculative/verify.h"
#include "worker/speculative/ngram.h"

namespace llm::kernels {
namespace {

using sampling::FinishReason;

std::vector<int32_t> RandomHistory(std::mt19937& rng, int32_t len, int32_t alphabet) {
  std::uniform_int_distribution<int32_t> token(0, alphabet - 1);
  std::vector<int32_t> h(static_cast<size_t>(len));
  for (int32_t& t : h) t = token(rng);
  return h;
}

std::vector<int32_t> CpuProposals(const std::vector<int32_t>& h, int32_t min_n, int32_t max_n,
                                  int32_t k) {
  std::vector<int32_t> out;
  speculative::ProposeNgram(h, {.min = min_n, .max = max_n}, k, out);
  return out;
}

// ProposeNgramSerial's rule with the starts split over `threads` threads as the device's block
// splits them, each thread folding its own, reduced in reverse thread order.
std::vector<int32_t> ThreadedProposals(const std::vector<int32_t>& h, int32_t min_n, int32_t max_n,
                                       int32_t k, int32_t threads) {
  const auto len = static_cast<int32_t>(h.size());
  if (k <= 0) return {};
  for (int32_t n = NgramLongest(len, max_n); n >= NgramShortest(min_n); --n) {
    NgramBest all;
    for (int32_t t = threads - 1; t >= 0; --t) {
      NgramBest mine;
      for (int32_t i = t; i < len - n; i += threads) {
        if (NgramMatchesAt(h.data(), len, n, i)) NgramFold(mine, len, n, k, i);
      }
      all.full = std::max(all.full, mine.full);
      all.partial = std::min(all.partial, mine.partial);
    }
    const NgramChoice c = NgramPick(all, len, n, k);
    if (c.count > 0) return {h.begin() + c.start, h.begin() + c.start + c.count};
  }
  return {};
}

TEST(NgramMatchTest, TheDeviceRuleGivesTheCpuProposersProposals) {
  std::mt19937 rng(7);
  int proposed = 0, partial = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t len = std::uniform_int_distribution<int32_t>(1, 200)(rng);
    const int32_t alphabet = std::uniform_int_distribution<int32_t>(2, 12)(rng);
    const int32_t min_n = std::uniform_int_distribution<int32_t>(1, 3)(rng);
    const int32_t max_n = min_n + std::uniform_int_distribution<int32_t>(0, 3)(rng);
    const int32_t k = std::uniform_int_distribution<int32_t>(0, 8)(rng);
    const std::vector<int32_t> h = RandomHistory(rng, len, alphabet);
    const std::vector<int32_t> want = CpuProposals(h, min_n, max_n, k);
    std::vector<int32_t> serial(static_cast<size_t>(std::max(k, 1)));
    serial.resize(
        static_cast<size_t>(ProposeNgramSerial(h.data(), len, min_n, max_n, k, serial.data())));
    ASSERT_EQ(serial, want) << "trial " << trial << " len " << len << " n " << min_n << ".."
                            << max_n << " k " << k;
    for (const int32_t threads : {1, 3, 32, 256}) {
      ASSERT_EQ(ThreadedProposals(h, min_n, max_n, k, threads), want)
          << "trial " << trial << " threads " << threads;
    }
    proposed += want.empty() ? 0 : 1;
    partial += !want.empty() && static_cast<int32_t>(want.size()) < k ? 1 : 0;
  }
  // Both branches of the rule ran: a full k proposals, and fewer (a match near the end).
  EXPECT_GT(proposed, 1000);
  EXPECT_GT(partial, 20);
}

TEST(NgramMatchTest, ProposalsStayWithinThePlanTheTableMaxTokensAndTheBlocks) {
  EXPECT_EQ(ProposalsAllowed(4, 8, 100, 10, 50), 4);  // the plan's allowance
  EXPECT_EQ(ProposalsAllowed(9, 8, 100, 10, 50), 8);  // the table's width
  // max_tokens 20 with 17 generated: the last token's row gives the 18th, so 2 more at most.
  EXPECT_EQ(ProposalsAllowed(4, 8, 20, 17, 50), 2);
  EXPECT_EQ(ProposalsAllowed(4, 8, 20, 19, 50), 0);
  EXPECT_EQ(ProposalsAllowed(4, 8, 20, 20, 50), 0);  // finished: its extra step
  EXPECT_EQ(ProposalsAllowed(0, 8, 100, 1, 50), 0);
  // The last token at position 45 of 48 held positions: rows at 46 and 47 only.
  EXPECT_EQ(ProposalsAllowed(4, 8, 100, 10, 48 - 1 - 45), 2);
  EXPECT_EQ(ProposalsAllowed(4, 8, 100, 10, 48 - 1 - 47), 0);
}

// A slot table in host memory, for VerifyGroup.
struct HostSlots {
  static constexpr int32_t kVocab = 50;
  static constexpr int32_t kStride = 64;  // history
  static constexpr int32_t kMaxProposals = 4;
  explicit HostSlots(int32_t n)
      : last_token(n, 0),
        pos(n, 0),
        generated(n, 0),
        done(n, 0),
        sampling(n, SlotSampling{}),
        out_counts(static_cast<size_t>(n) * kVocab, 0),
        prompt_mask(static_cast<size_t>(n) * kVocab, 0),
        history(static_cast<size_t>(n) * kStride, -1),
        proposals(static_cast<size_t>(n) * kMaxProposals, -1),
        num_proposals(n, 0) {
    for (SlotSampling& s : sampling) {
      s.max_tokens = 1000;
      s.key = 77;
    }
  }
  DeviceSlots View() {
    DeviceSlots d{last_token.data(), pos.data(),        generated.data(),  done.data(),
                  sampling.data(),   out_counts.data(), prompt_mask.data()};
    d.history = history.data();
    d.history_stride = kStride;
    d.proposals = proposals.data();
    d.num_proposals = num_proposals.data();
    d.max_proposals = kMaxProposals;
    return d;
  }
  void Propose(int32_t slot, std::vector<int32_t> ids) {
    std::copy(ids.begin(), ids.end(), proposals.begin() + slot * kMaxProposals);
    num_proposals[slot] = static_cast<int32_t>(ids.size());
  }

  std::vector<int32_t> last_token, pos, generated;
  std::vector<uint8_t> done;
  std::vector<SlotSampling> sampling;
  std::vector<uint16_t> out_counts;
  std::vector<uint8_t> prompt_mask;
  std::vector<int32_t> history, proposals, num_proposals;
};

// Sampling rows as the sampler leaves them with row_offset set: a token each, nothing appended.
struct Rows {
  void Add(int32_t slot, int32_t pos, int32_t offset, int32_t token) {
    SampleOutput o{};
    o.key = 77;
    o.slot = slot;
    o.token = token;
    o.finish = FinishReason::kNone;
    out.push_back(o);
    row_slot.push_back(slot);
    row_pos.push_back(pos);
    row_offset.push_back(offset);
  }
  // A verify group of slot `slot` at position `pos` whose rows drew `tokens`.
  void Group(int32_t slot, int32_t pos, const std::vector<int32_t>& tokens) {
    for (size_t j = 0; j < tokens.size(); ++j) {
      Add(slot, pos + static_cast<int32_t>(j), static_cast<int32_t>(j), tokens[j]);
    }
  }
  VerifyParams Params(const DeviceSlots& slots) {
    return {row_slot.data(),
            row_pos.data(),
            row_offset.data(),
            out.data(),
            static_cast<int32_t>(out.size()),
            slots,
            HostSlots::kVocab};
  }
  // What LaunchVerify does: each group's first row walks its group.
  std::vector<int32_t> VerifyAll(const DeviceSlots& slots) {
    const VerifyParams p = Params(slots);
    std::vector<int32_t> taken;
    for (int32_t r = 0; r < p.rows; ++r) {
      if (row_offset[r] == 0) taken.push_back(VerifyGroup(p, r));
    }
    return taken;
  }
  std::vector<int32_t> Tokens() const {
    std::vector<int32_t> t;
    for (const SampleOutput& o : out) {
      if (o.slot >= 0) t.push_back(o.token);
    }
    return t;
  }

  std::vector<SampleOutput> out;
  std::vector<int32_t> row_slot, row_pos, row_offset;
};

TEST(VerifyGroupTest, AppendsTheRunTheProposalsAgreeWith) {
  HostSlots slots(4);
  slots.pos = {10, 20, 30, 40};
  slots.last_token = {1, 2, 3, 4};
  slots.Propose(0, {5, 6, 7, 8});  // all agree: 5 tokens
  slots.Propose(1, {5, 6, 7, 8});  // the second disagrees: t0 = 5 stands, t1 = 9 ends the run
  slots.Propose(2, {5, 6});        // two real proposals in a group of five rows
  // Slot 3 has no proposals: a group of one.
  Rows rows;
  rows.Group(0, 10, {5, 6, 7, 8, 11});
  rows.Group(1, 20, {5, 9, 7, 8, 12});
  rows.Group(2, 30, {5, 6, 7, 8, 13});
  rows.Group(3, 40, {14});
  const DeviceSlots d = slots.View();
  EXPECT_EQ(rows.VerifyAll(d), (std::vector<int32_t>{5, 2, 3, 1}));
  EXPECT_EQ(rows.Tokens(), (std::vector<int32_t>{5, 6, 7, 8, 11, 5, 9, 5, 6, 7, 14}));
  EXPECT_EQ(slots.pos, (std::vector<int32_t>{15, 22, 33, 41}));
  EXPECT_EQ(slots.generated, (std::vector<int32_t>{5, 2, 3, 1}));
  EXPECT_EQ(slots.last_token, (std::vector<int32_t>{11, 9, 7, 14}));
  // Each group's first row reports its proposals and those that stood.
  for (const auto& [row, drafts, accepted] :
       std::vector<std::array<int32_t, 3>>{{0, 4, 4}, {5, 4, 1}, {10, 2, 2}, {15, 0, 0}}) {
    EXPECT_EQ(rows.out[row].draft_tokens, drafts) << row;
    EXPECT_EQ(rows.out[row].accepted_tokens, accepted) << row;
  }
  // The history holds each appended token at its position.
  const auto history = [&](int32_t slot, int32_t from, int32_t n) {
    const auto at = slots.history.begin() + slot * HostSlots::kStride + from;
    return std::vector<int32_t>(at, at + n);
  };
  EXPECT_EQ(history(0, 11, 5), (std::vector<int32_t>{5, 6, 7, 8, 11}));
  EXPECT_EQ(history(1, 21, 3), (std::vector<int32_t>{5, 9, -1}));
  EXPECT_EQ(history(2, 31, 3), (std::vector<int32_t>{5, 6, 7}));
  // Rejected rows are skipped rows.
  for (const SampleOutput& o : rows.out) {
    if (o.slot < 0) {
      EXPECT_EQ(o.token, -1);
    }
    EXPECT_EQ(o.finish, FinishReason::kNone);
  }
}

// As the device lays a group out: rows past the slot's real proposals are padding rows (slot
// -1, offset 0), which end the group's scan and are left alone.
TEST(VerifyGroupTest, PaddingRowsEndAGroup) {
  HostSlots slots(2);
  slots.pos = {30, 8};
  slots.Propose(0, {5, 6});
  slots.Propose(1, {1});
  Rows rows;
  rows.Group(0, 30, {5, 6, 7});
  for (int i = 0; i < 2; ++i) rows.Add(-1, 0, 0, -1);  // the group's rows 3 and 4
  rows.Group(1, 8, {2, 3});  // the proposal (1) is not what row 0 gave: one token
  const DeviceSlots d = slots.View();
  EXPECT_EQ(rows.VerifyAll(d), (std::vector<int32_t>{3, 0, 0, 1}));
  EXPECT_EQ(rows.Tokens(), (std::vector<int32_t>{5, 6, 7, 2}));
  EXPECT_EQ(slots.pos, (std::vector<int32_t>{33, 9}));
  EXPECT_EQ(rows.out[0].accepted_tokens, 2);
  EXPECT_EQ(rows.out[5].draft_tokens, 1);
  EXPECT_EQ(rows.out[5].accepted_tokens, 0);
}

TEST(VerifyGroupTest, AStopIdOrMaxTokensInsideTheRunEndsIt) {
  HostSlots slots(2);
  slots.sampling[0].num_stop_ids = 1;
  slots.sampling[0].stop_ids[0] = 7;
  slots.sampling[1].max_tokens = 3;
  slots.generated[1] = 1;
  slots.Propose(0, {5, 6, 7, 8});
  slots.Propose(1, {5, 6, 7, 8});
  Rows rows;
  rows.Group(0, 0, {5, 6, 7, 8, 9});
  rows.Group(1, 0, {5, 6, 7, 8, 9});
  const DeviceSlots d = slots.View();
  EXPECT_EQ(rows.VerifyAll(d), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(rows.out[2].finish, FinishReason::kStopToken);
  EXPECT_EQ(rows.out[6].finish, FinishReason::kLength);
  EXPECT_EQ(rows.Tokens(), (std::vector<int32_t>{5, 6, 7, 5, 6}));
  EXPECT_EQ(slots.done, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(slots.generated, (std::vector<int32_t>{3, 3}));
}

TEST(VerifyGroupTest, SkippedRowsAndPenaltyCountsFollowTheSampler) {
  HostSlots slots(2);
  slots.sampling[1].has_penalties = 1;
  Rows rows;
  rows.Add(-1, 0, 0, -1);  // padding
  rows.Group(1, 5, {4, 4});
  rows.Group(0, 3, {9, 9});
  for (int r = 3; r < 5; ++r) rows.out[r].slot = -1;  // slot 0 finished: the sampler skipped it
  const DeviceSlots d = slots.View();
  EXPECT_EQ(rows.VerifyAll(d), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(slots.out_counts[1 * HostSlots::kVocab + 4], 1);  // one token stood
  EXPECT_EQ(slots.generated, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(rows.Tokens(), (std::vector<int32_t>{4}));
}

// A stand-in for the model: the greedy next token of a history, a deterministic function of its
// last three tokens over a small vocabulary, so n-gram proposals are often right.
int32_t NextToken(const std::vector<int32_t>& h) {
  const size_t n = h.size();
  const uint32_t a = n > 0 ? h[n - 1] : 0, b = n > 1 ? h[n - 2] : 0, c = n > 2 ? h[n - 3] : 0;
  return static_cast<int32_t>((a * 7 + b * 3 + c + n % 5) % 11);
}

// Steps of the device's speculative loop, on the host: propose from the history, build each
// row's input (VerifyRowToken), "sample" each row (the stand-in model over the history plus the
// row's inputs), verify. The ids equal the run without speculation's, and proposals were taken.
TEST(VerifyGroupTest, TheSpeculativeLoopGivesTheGreedyRunsIds) {
  constexpr int32_t kMaxTokens = 60, kK = 4;
  for (const int32_t prompt_len : {1, 5, 12}) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < prompt_len; ++i) prompt.push_back(i % 4);
    std::vector<int32_t> plain = prompt;
    for (int32_t i = 0; i < kMaxTokens; ++i) plain.push_back(NextToken(plain));

    HostSlots slots(1);
    slots.sampling[0].max_tokens = kMaxTokens;
    std::copy(prompt.begin(), prompt.end(), slots.history.begin());
    // The prompt's last row sampled the first output token (an ordinary row).
    std::vector<int32_t> seq = prompt;
    seq.push_back(NextToken(seq));
    slots.pos[0] = prompt_len;
    slots.last_token[0] = seq.back();
    slots.history[prompt_len] = seq.back();
    slots.generated[0] = 1;
    int steps = 0, accepted = 0;
    while (slots.done[0] == 0) {
      const DeviceSlots d = slots.View();
      const int32_t len = slots.pos[0] + 1;
      slots.num_proposals[0] =
          ProposeNgramSerial(slots.history.data(), len, 1, 3, kK, slots.proposals.data());
      Rows rows;
      std::vector<int32_t> inputs(seq.begin(), seq.end() - 1);
      for (int32_t j = 0; j <= kK; ++j) {
        inputs.push_back(VerifyRowToken(d, 0, j));
        rows.Add(0, slots.pos[0] + j, j, NextToken(inputs));
      }
      const int32_t taken = rows.VerifyAll(d).front();
      const std::vector<int32_t> tokens = rows.Tokens();
      ASSERT_EQ(static_cast<int32_t>(tokens.size()), taken);
      seq.insert(seq.end(), tokens.begin(), tokens.end());
      accepted += taken - 1;
      ASSERT_LT(++steps, 200);
    }
    plain.resize(seq.size());
    EXPECT_EQ(seq, plain) << "prompt " << prompt_len;
    EXPECT_EQ(static_cast<int32_t>(seq.size()), prompt_len + kMaxTokens);
    EXPECT_GT(accepted, 0) << "no proposal ever stood: the loop tested nothing";
  }
}

// A verify row's output count: the slot's count plus the proposals before the row, saturating.
TEST(VerifyGroupTest, RowsCountTheProposalsBeforeThemForPenalties) {
  HostSlots slots(2);
  const DeviceSlots d = slots.View();
  slots.out_counts[HostSlots::kVocab + 5] = 2;
  slots.out_counts[HostSlots::kVocab + 6] = 0xFFFF;
  slots.Propose(1, {5, 8, 5, 6});
  EXPECT_EQ(GroupOutputCount(d, 1, 0, 5, HostSlots::kVocab), 2);
  EXPECT_EQ(GroupOutputCount(d, 1, 1, 5, HostSlots::kVocab), 3);
  EXPECT_EQ(GroupOutputCount(d, 1, 3, 5, HostSlots::kVocab), 4);
  EXPECT_EQ(GroupOutputCount(d, 1, 3, 8, HostSlots::kVocab), 1);
  EXPECT_EQ(GroupOutputCount(d, 1, 2, 9, HostSlots::kVocab), 0);
  EXPECT_EQ(GroupOutputCount(d, 1, 4, 6, HostSlots::kVocab), 0xFFFF);
  EXPECT_EQ(GroupOutputCount(d, 0, 4, 5, HostSlots::kVocab), 0);  // slot 0 has no proposals
}

// The oracle's loop on the host: the continuation goes into the history past the prompt as the
// runner writes it at admission (a span that clears the rest of the row), each step proposes from
// it (OracleProposals within ProposalsAllowed) and verifies. With the greedy run's own ids as the
// oracle every proposal stands and a step gives k + 1 tokens; with a wrong oracle the ids are
// still the greedy run's. Past the oracle's end nothing is proposed.
TEST(OracleProposeTest, TheOracleLoopKeepsTheIdsAndItsOwnIdsAllStand) {
  constexpr int32_t kPrompt = 5, kMaxTokens = 40, kK = 4, kOracle = 30;
  std::vector<int32_t> plain;
  for (int32_t i = 0; i < kPrompt; ++i) plain.push_back(i % 4);
  for (int32_t i = 0; i < kMaxTokens; ++i) plain.push_back(NextToken(plain));
  const std::vector<int32_t> right(plain.begin() + kPrompt, plain.begin() + kPrompt + kOracle);
  std::vector<int32_t> wrong = right;
  for (size_t i = 3; i < wrong.size(); i += 4) wrong[i] = (wrong[i] + 1) % 11;
  for (const bool own : {true, false}) {
    HostSlots slots(1);
    slots.sampling[0].max_tokens = kMaxTokens;
    // What an earlier request left in the slot: the span clears it past the oracle.
    std::fill(slots.history.begin(), slots.history.end(), 3);
    std::copy(plain.begin(), plain.begin() + kPrompt, slots.history.begin());
    const std::vector<int32_t>& tokens = own ? right : wrong;
    WriteHistorySpan(HistorySpan{0, kPrompt, kOracle, 0, 0}, tokens.data(), slots.history.data(),
                     HostSlots::kStride, nullptr);
    std::vector<int32_t> seq(plain.begin(), plain.begin() + kPrompt);
    seq.push_back(NextToken(seq));  // the prompt's last row, appended
    slots.history[kPrompt] = seq.back();
    slots.pos[0] = kPrompt;
    slots.last_token[0] = seq.back();
    slots.generated[0] = 1;
    int32_t proposed = 0, accepted = 0, steps = 0;
    while (slots.done[0] == 0) {
      const DeviceSlots d = slots.View();
      const int32_t allowed =
          ProposalsAllowed(kK, HostSlots::kMaxProposals, kMaxTokens, slots.generated[0], 1000);
      const int32_t n = OracleProposals(slots.history.data(), HostSlots::kStride, slots.pos[0],
                                        allowed, slots.proposals.data());
      slots.num_proposals[0] = n;
      // What the CPU runner proposes: oracle_ids from the generated count on.
      const std::vector<int32_t>& oracle = own ? right : wrong;
      const int32_t from = std::min<int32_t>(slots.generated[0], kOracle);
      const std::vector<int32_t> cpu(oracle.begin() + from,
                                     oracle.begin() + std::min(kOracle, from + allowed));
      if (own) {
        EXPECT_EQ(std::vector<int32_t>(slots.proposals.begin(), slots.proposals.begin() + n), cpu);
      }
      Rows rows;
      std::vector<int32_t> inputs(seq.begin(), seq.end() - 1);
      for (int32_t j = 0; j <= n; ++j) {
        inputs.push_back(VerifyRowToken(d, 0, j));
        rows.Add(0, slots.pos[0] + j, j, NextToken(inputs));
      }
      const int32_t taken = rows.VerifyAll(d).front();
      const std::vector<int32_t> out = rows.Tokens();
      seq.insert(seq.end(), out.begin(), out.end());
      proposed += n;
      accepted += taken - 1;
      ASSERT_LT(++steps, 100);
    }
    EXPECT_EQ(seq, plain) << (own ? "own ids" : "wrong oracle");
    if (own) {
      EXPECT_EQ(accepted, proposed);
      // Through the oracle's 29 outputs after the first, 4 of each 5 proposed (the fifth is the
      // token sampled after them); none past its end.
      EXPECT_GE(proposed, 20);
      EXPECT_LE(proposed, kOracle - 1);
    } else {
      EXPECT_LT(accepted, proposed);
    }
  }
}

// A searchable span (a cached prompt) lowers history_from to its start; the oracle's does not.
TEST(OracleProposeTest, OnlyCachedPromptSpansAreSearchable) {
  HostSlots slots(2);
  std::fill(slots.history.begin(), slots.history.end(), 3);
  std::vector<int32_t> from = {INT32_MAX, INT32_MAX};
  const std::vector<int32_t> tokens = {4, 5, 6, 7, 8, 9};
  WriteHistorySpan(HistorySpan{1, 0, 3, 0, 1}, tokens.data(), slots.history.data(),
                   HostSlots::kStride, from.data());
  WriteHistorySpan(HistorySpan{0, 10, 3, 3, 0}, tokens.data(), slots.history.data(),
                   HostSlots::kStride, from.data());
  EXPECT_EQ(from[1], 0);
  EXPECT_EQ(from[0], INT32_MAX);
  EXPECT_EQ(slots.history[HostSlots::kStride + 2], 6);
  EXPECT_EQ(slots.history[10], 7);
  EXPECT_EQ(slots.history[12], 9);
  EXPECT_EQ(slots.history[13], -1);  // the oracle's span clears the row after it
  EXPECT_EQ(slots.history[HostSlots::kStride - 1], -1);
  EXPECT_EQ(slots.history[HostSlots::kStride + 3], 3);  // slot 1: a cached span clears nothing

  // Positions past the history's end are dropped.
  WriteHistorySpan(HistorySpan{0, HostSlots::kStride - 1, 3, 0, 0}, tokens.data(),
                   slots.history.data(), HostSlots::kStride, from.data());
  EXPECT_EQ(slots.history[HostSlots::kStride - 1], 4);
  EXPECT_EQ(slots.history[HostSlots::kStride], 4);  // slot 1's position 0, untouched
}

// The draft model's passes on the host (draft_step.h), over a stand-in draft whose "cache" is
// the token it was fed at each position (-1: never) and which predicts from it as NextToken
// does, perturbed every `wrong_every` positions (0: never, a draft that is the model itself).
class DraftLoop {
 public:
  static constexpr int32_t kSlots = 2, kK = 4, kMaxTokens = 50;

  // Every `plain_every`-th step (0: none) decodes without verifying: the catch-up pass alone.
  DraftLoop(int32_t wrong_every, int32_t plain_every = 0)
      : wrong_every_(wrong_every), plain_every_(plain_every), slots_(kSlots) {
    for (int32_t s = 0; s < kSlots; ++s) cache_[s].assign(HostSlots::kStride, -1);
  }

  int32_t Predict(int32_t slot, int32_t pos) const {
    const std::vector<int32_t> seen(cache_[slot].begin(), cache_[slot].begin() + pos + 1);
    const int32_t t = NextToken(seen);
    return wrong_every_ > 0 && pos % wrong_every_ == 0 ? (t + 1) % 11 : t;
  }

  // A pass's rows fed to the draft's cache; its picks (a round) applied.
  void Pass(const DraftRowsParams& p) {
    std::vector<DraftRow> fed;
    for (int32_t r = 0; r < DraftRows(p); ++r) {
      const DraftRow row = DraftRowAt(p, r);
      fed.push_back(row);
      if (row.slot >= 0) cache_[row.slot][row.pos] = row.token;
    }
    if (p.round < 0) return;  // the prompt and catch-up passes pick nothing
    const DraftPickParams pick{nullptr,        11,           11,      p.decode_list, p.decode_draft,
                               p.decode_limit, p.num_decode, p.round, p.slots};
    const int32_t per = DraftRowsPerSlot(p.round);
    for (int32_t d = 0; d < p.num_decode; ++d) {
      const DraftRow& last = fed[static_cast<size_t>(d * per + per - 1)];
      DraftPickApply(pick, d, last.slot >= 0 ? Predict(last.slot, last.pos) : -7);
    }
  }

  // Runs both slots' requests to the end; returns their sequences (prompt and output).
  std::vector<std::vector<int32_t>> Run(int32_t* proposed, int32_t* accepted) {
    const std::vector<std::vector<int32_t>> prompts = {{0, 1, 2, 3, 1}, {2, 2, 5, 1, 0, 3, 3, 1}};
    std::vector<std::vector<int32_t>> seq(kSlots);
    std::vector<int32_t> pslot, ppos, ptoken;
    for (int32_t s = 0; s < kSlots; ++s) {
      slots_.sampling[s].max_tokens = kMaxTokens;
      const std::vector<int32_t>& prompt = prompts[s];
      for (size_t i = 0; i < prompt.size(); ++i) {
        pslot.push_back(s);
        ppos.push_back(static_cast<int32_t>(i));
        ptoken.push_back(prompt[i]);
        slots_.history[s * HostSlots::kStride + i] = prompt[i];
      }
      pslot.push_back(-1);  // a padding row
      ppos.push_back(0);
      ptoken.push_back(0);
      seq[s] = prompt;
      seq[s].push_back(NextToken(seq[s]));  // the prompt's last row sampled it
      const auto n = static_cast<int32_t>(prompt.size());
      slots_.pos[s] = n;
      slots_.last_token[s] = seq[s].back();
      slots_.history[s * HostSlots::kStride + n] = seq[s].back();
      slots_.generated[s] = 1;
    }
    const std::vector<int32_t> decode_list = {0, 1}, draft = {kK, kK}, limit = {1000, 1000};
    DraftRowsParams p{};
    p.prefill_slot = pslot.data();
    p.prefill_pos = ppos.data();
    p.prefill_token = ptoken.data();
    p.num_prefill = static_cast<int32_t>(pslot.size());
    p.num_rows = p.num_prefill + 3;  // padding rows up to a prepared shape
    p.decode_list = decode_list.data();
    p.decode_draft = draft.data();
    p.decode_limit = limit.data();
    p.num_decode = kSlots;
    p.round = kDraftPromptPass;
    p.slots = slots_.View();
    EXPECT_EQ(DraftRows(p), p.num_rows);
    for (int32_t r = p.num_prefill; r < p.num_rows; ++r) EXPECT_EQ(DraftRowAt(p, r).slot, -1);
    Pass(p);
    p.num_prefill = 0;
    for (int steps = 0; slots_.done[0] == 0 || slots_.done[1] == 0; ++steps) {
      EXPECT_LT(steps, 200);
      if (steps >= 200) break;
      if (plain_every_ > 0 && steps % plain_every_ == plain_every_ - 1) {
        p.round = kDraftCatchUp;
        Pass(p);
        for (int32_t s = 0; s < kSlots; ++s) slots_.num_proposals[s] = 0;
      } else {
        for (p.round = 0; p.round < kK; ++p.round) Pass(p);
      }
      Verify(seq, proposed, accepted);
      for (int32_t s = 0; s < kSlots; ++s) {
        // The draft has seen every position before the new pos - 1.
        for (int32_t q = 0; q + 1 < slots_.pos[s] && slots_.done[s] == 0; ++q) {
          EXPECT_EQ(cache_[s][q], seq[s][q]) << "slot " << s << " position " << q;
        }
      }
    }
    return seq;
  }

 private:
  // The target's verify groups over the slots' proposals, as LaunchVerify appends them.
  void Verify(std::vector<std::vector<int32_t>>& seq, int32_t* proposed, int32_t* accepted) {
    const DeviceSlots d = slots_.View();
    Rows rows;
    for (int32_t s = 0; s < kSlots; ++s) {
      if (slots_.done[s] != 0) continue;
      std::vector<int32_t> inputs(seq[s].begin(), seq[s].end() - 1);
      for (int32_t j = 0; j <= slots_.num_proposals[s]; ++j) {
        inputs.push_back(VerifyRowToken(d, s, j));
        rows.Add(s, slots_.pos[s] + j, j, NextToken(inputs));
      }
      *proposed += slots_.num_proposals[s];
    }
    const std::vector<int32_t> taken = rows.VerifyAll(d);
    size_t at = 0, group = 0;
    for (int32_t s = 0; s < kSlots; ++s) {
      if (rows.row_slot.empty() ||
          std::find(rows.row_slot.begin(), rows.row_slot.end(), s) == rows.row_slot.end()) {
        continue;
      }
      const int32_t n = taken[group++];
      *accepted += n - 1;
      for (int32_t i = 0; i < n; ++i) seq[s].push_back(rows.out[at + static_cast<size_t>(i)].token);
      while (at < rows.out.size() && rows.row_slot[at] == s) ++at;
    }
  }

  int32_t wrong_every_;
  int32_t plain_every_;
  HostSlots slots_;
  std::array<std::vector<int32_t>, kSlots> cache_;
};

// With steps that decode without verifying between them (every second or third), the catch-up
// pass keeps the cache whole: the draft that is the model still has every proposal stand.
TEST(DraftStepTest, TwoCatchUpRowsKeepTheDraftsCacheAndTheGreedyIds) {
  for (const int32_t plain_every : {0, 2, 3}) {
    SCOPED_TRACE(plain_every);
    for (const int32_t wrong_every : {0, 3}) {
      std::vector<std::vector<int32_t>> plain(DraftLoop::kSlots);
      const std::vector<std::vector<int32_t>> prompts = {{0, 1, 2, 3, 1}, {2, 2, 5, 1, 0, 3, 3, 1}};
      for (int32_t s = 0; s < DraftLoop::kSlots; ++s) {
        plain[s] = prompts[s];
        for (int32_t i = 0; i < DraftLoop::kMaxTokens; ++i) plain[s].push_back(NextToken(plain[s]));
      }
      DraftLoop loop(wrong_every, plain_every);
      int32_t proposed = 0, accepted = 0;
      const auto seq = loop.Run(&proposed, &accepted);
      for (int32_t s = 0; s < DraftLoop::kSlots; ++s) {
        EXPECT_EQ(seq[s], plain[s]) << "slot " << s << " wrong every " << wrong_every;
      }
      EXPECT_GT(proposed, 20);
      if (wrong_every == 0) {
        EXPECT_EQ(accepted, proposed);  // the draft is the model: every proposal stands
      } else {
        EXPECT_GT(accepted, 0);
        EXPECT_LT(accepted, proposed);
      }
    }
  }
}

// A slot past its allowance gets padding rows and keeps its proposals; a finished slot none.
TEST(DraftStepTest, RowsStopWithTheAllowanceAndAFinishedSlotHasNone) {
  HostSlots slots(2);
  slots.pos = {10, 20};
  slots.last_token = {4, 5};
  slots.history[9] = 3;
  slots.sampling[0].max_tokens = 100;
  slots.sampling[1].max_tokens = 100;
  slots.done[1] = 1;
  const std::vector<int32_t> decode_list = {0, 1, -1}, draft = {2, 4, 4}, limit = {1000, 1000, 0};
  DraftRowsParams p{};
  p.decode_list = decode_list.data();
  p.decode_draft = draft.data();
  p.decode_limit = limit.data();
  p.num_decode = 3;
  p.round = 0;
  p.slots = slots.View();
  ASSERT_EQ(DraftRows(p), 6);
  EXPECT_EQ(DraftRowAt(p, 0).token, 3);  // slot 0 at pos - 1, from the history
  EXPECT_EQ(DraftRowAt(p, 0).pos, 9);
  EXPECT_EQ(DraftRowAt(p, 1).token, 4);
  EXPECT_EQ(DraftRowAt(p, 1).pos, 10);
  EXPECT_EQ(DraftRowAt(p, 2).slot, -1);  // finished
  EXPECT_EQ(DraftRowAt(p, 5).slot, -1);  // no slot
  DraftPickParams pick{nullptr,      50, 50, decode_list.data(), draft.data(),
                       limit.data(), 3,  0,  slots.View()};
  for (int32_t d = 0; d < 3; ++d) DraftPickApply(pick, d, 7);
  EXPECT_EQ(slots.num_proposals[0], 1);
  EXPECT_EQ(slots.num_proposals[1], 0);
  p.round = pick.round = 1;
  ASSERT_EQ(DraftRows(p), 3);
  EXPECT_EQ(DraftRowAt(p, 0).token, 7);
  EXPECT_EQ(DraftRowAt(p, 0).pos, 11);
  DraftPickApply(pick, 0, 8);
  EXPECT_EQ(slots.num_proposals[0], 2);
  p.round = pick.round = 2;  // past slot 0's allowance of 2
  EXPECT_EQ(DraftRowAt(p, 0).slot, -1);
  DraftPickApply(pick, 0, 9);
  EXPECT_EQ(slots.num_proposals[0], 2);
  EXPECT_EQ(slots.proposals[0], 7);
  EXPECT_EQ(slots.proposals[1], 8);
}

}  // namespace
}  // namespace llm::kernels
