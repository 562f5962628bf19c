#include "worker/engine/prefill_pacer.h"

#include <deque>

#include "gtest/gtest.h"

namespace llm::engine {
namespace {

// A device whose step costs `decode` seconds plus `per_token` seconds a prompt token, run as the
// engine runs it: step N+1 is planned before step N's result is in. A long prompt always waits
// for chunks of `chunk` tokens.
struct Simulation {
  double decode = 0.005, per_token = 0.00006;
  int32_t chunk = 2048, decode_tokens = 8;

  struct Outcome {
    double slowdown;  // mean step time over the decode-only step's: the decoders' TPOT ratio
    int chunks;
  };
  Outcome Run(PrefillPacer& pacer, int steps) const {
    std::deque<std::pair<uint64_t, double>> in_flight;
    double total = 0;
    int chunks = 0;
    for (uint64_t id = 1; id <= static_cast<uint64_t>(steps); ++id) {
      const int32_t prompt = pacer.Allow(decode_tokens) ? chunk : 0;
      pacer.Planned(id, decode_tokens, prompt, prompt);
      const double seconds = decode + per_token * prompt;
      in_flight.emplace_back(id, seconds);
      total += seconds;
      chunks += prompt > 0;
      if (in_flight.size() == 2) {  // the result of the step before comes in
        pacer.Observe(in_flight.front().first, in_flight.front().second);
        in_flight.pop_front();
      }
    }
    return {total / steps / decode, chunks};
  }
};

TEST(PrefillPacerTest, OffAllowsEveryStep) {
  PrefillPacer pacer(0);
  EXPECT_FALSE(pacer.enabled());
  const auto out = Simulation{}.Run(pacer, 100);
  EXPECT_EQ(out.chunks, 100);
}

// A group's decode-only time is measured first: one decode-only step, then chunks may go while
// its result is on the way.
TEST(PrefillPacerTest, MeasuresADecodeOnlyStepFirst) {
  PrefillPacer pacer(2);
  EXPECT_TRUE(pacer.Allow(0));  // nobody decodes: nothing to protect
  EXPECT_FALSE(pacer.Probe(0));
  EXPECT_FALSE(pacer.Allow(4));
  EXPECT_TRUE(pacer.Probe(4));  // the step must carry no prompt tokens, short ones included
  pacer.Planned(1, 4, 0, 0);
  EXPECT_FALSE(pacer.Probe(4));
  EXPECT_TRUE(pacer.Allow(4));  // the measuring step is in flight
  EXPECT_FALSE(pacer.Allow(64)) << "another group is measured on its own";
  pacer.Observe(1, 0.005);
  EXPECT_DOUBLE_EQ(pacer.decode_seconds(5), 0.005);  // 4..7: one group
  EXPECT_LT(pacer.decode_seconds(64), 0);
  // A plan whose result never comes is forgotten when a later one's does.
  pacer.Planned(2, 64, 0, 0);
  pacer.Planned(3, 4, 0, 0);
  pacer.Observe(3, 0.005);
  EXPECT_FALSE(pacer.Allow(64));
  EXPECT_TRUE(pacer.Probe(64));  // measured again
  // A chunk owed is owed in a group not yet measured too.
  pacer.Planned(4, 4, 2048, 2048);  // unpriced: its cost is measured from its result
  pacer.Observe(4, 0.005 + 0.1);
  EXPECT_LT(pacer.credit_seconds(), -0.09);
  pacer.Planned(5, 64, 0, 0);
  EXPECT_FALSE(pacer.Allow(64));
}

// Over a long prefill the decoders' time per token is the ratio times the decode-only step's:
// not more, and not much less (the pacer spends what it is allowed).
TEST(PrefillPacerTest, KeepsTheDecodersWithinTheRatio) {
  for (const double ratio : {1.5, 2.0, 4.0}) {
    PrefillPacer pacer(ratio);
    const auto out = Simulation{}.Run(pacer, 5000);
    EXPECT_LE(out.slowdown, ratio * 1.01) << "ratio " << ratio;
    EXPECT_GE(out.slowdown, ratio * 0.9) << "ratio " << ratio;
    // A chunk costs 123 ms against 5 ms decode-only: about (ratio - 1) 5 / 123 of the steps.
    const double expected = 5000 * (ratio - 1) * 0.005 / (0.00006 * 2048);
    EXPECT_NEAR(out.chunks, expected, expected * 0.1) << "ratio " << ratio;
    EXPECT_NEAR(pacer.seconds_per_prompt_token(), 0.00006, 1e-9);
  }
  // Unpaced, the same decoders see 25 times the decode-only step.
  PrefillPacer off(0);
  EXPECT_GT(Simulation{}.Run(off, 100).slowdown, 25);
}

// Chunks cheaper than what a decode step earns go into every step.
TEST(PrefillPacerTest, CheapChunksAreNotHeldBack) {
  Simulation cheap;
  cheap.chunk = 16;  // 1 ms against 5 ms decode-only
  PrefillPacer pacer(2);
  const auto out = cheap.Run(pacer, 1000);
  EXPECT_GE(out.chunks, 998);  // all but the measuring step (and its one-step lag)
}

// A backend that reports no time is not paced (it would otherwise wait forever).
TEST(PrefillPacerTest, ABackendWithoutTimesIsNotPaced) {
  Simulation untimed;
  untimed.decode = 0;
  untimed.per_token = 0;
  PrefillPacer pacer(2);
  EXPECT_GE(untimed.Run(pacer, 100).chunks, 99);
}

}  // namespace
}  // namespace llm::engine
