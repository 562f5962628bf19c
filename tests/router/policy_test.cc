// The routing policy on hand-made load tables: no network, no clock.
#include "router/policy/policy.h"

#include <algorithm>
#include <map>

#include "common/retry_after.h"
#include "gtest/gtest.h"

namespace llm::router {
namespace {

WorkerView Fresh(const std::string& id, int32_t queued, int32_t running, int32_t free_slots,
                 int32_t max_slots = 8) {
  WorkerView w;
  w.id = id;
  w.healthy = true;
  w.fresh = true;
  w.report.queued_requests = queued;
  w.report.running_requests = running;
  w.report.free_slots = free_slots;
  w.report.max_slots = max_slots;
  w.report.step_time_ewma_ms = 10;
  w.report.busy_ratio = running > 0 ? 1.0 : 0.0;
  return w;
}

// How often each worker wins over many random draws.
std::map<std::string, int> Shares(const Policy& p, const std::vector<WorkerView>& workers,
                                  int draws = 3000) {
  std::map<std::string, int> shares;
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < draws; ++i) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    auto pick = p.Pick(workers, {}, r);
    EXPECT_TRUE(pick.ok()) << pick.status();
    if (pick.ok()) ++shares[workers[*pick].id];
  }
  return shares;
}

TEST(PolicyTest, SkewedLoadSendsTrafficToTheIdle) {
  PowerOfTwoChoices p;
  const std::vector<WorkerView> workers = {Fresh("busy", 20, 8, 0), Fresh("half", 0, 4, 4),
                                           Fresh("idle", 0, 0, 8)};
  auto shares = Shares(p, workers);
  EXPECT_EQ(shares["busy"], 0);  // always paired with a better one
  EXPECT_GT(shares["idle"], shares["half"]);
  EXPECT_GT(shares["half"], 0);
}

TEST(PolicyTest, EstimatedWaitGrowsWithQueueBacklogAndBusy) {
  PolicyOptions o;
  const double idle = EstimateWaitMs(Fresh("a", 0, 0, 8), o);
  const double busy = EstimateWaitMs(Fresh("a", 0, 2, 6), o);
  const double full = EstimateWaitMs(Fresh("a", 3, 8, 0), o);
  WorkerView backlog = Fresh("a", 0, 2, 6);
  backlog.report.queued_prompt_tokens = 4096;
  EXPECT_LT(idle, busy);
  EXPECT_LT(busy, full);
  EXPECT_LT(busy, EstimateWaitMs(backlog, o));
  // Picks the router made since the report count as queued.
  WorkerView picked = Fresh("a", 0, 8, 0);
  const double before = EstimateWaitMs(picked, o);
  picked.picked_since_report = 4;
  EXPECT_GT(EstimateWaitMs(picked, o), before);
}

TEST(PolicyTest, StaleReportsAreUnknownNotIdle) {
  PowerOfTwoChoices p;
  WorkerView stale = Fresh("stale", 0, 0, 8);
  stale.fresh = false;  // its report says idle, but it is old
  const std::vector<WorkerView> workers = {stale, Fresh("loaded", 2, 8, 0)};
  auto shares = Shares(p, workers, 200);
  EXPECT_EQ(shares["stale"], 0);
  EXPECT_EQ(shares["loaded"], 200);
  // Only unknown ones: they serve (ties by in-flight).
  WorkerView a = stale, b = stale;
  a.id = "a";
  b.id = "b";
  a.in_flight = 5;
  b.in_flight = 1;
  auto pick = p.Pick({a, b}, {}, 12345);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, 1u);
}

TEST(PolicyTest, AllSaturatedIsResourceExhausted) {
  PowerOfTwoChoices p;
  const std::vector<WorkerView> workers = {Fresh("a", 40, 8, 0), Fresh("b", 33, 8, 0)};
  EXPECT_TRUE(Saturated(workers[0], PolicyOptions{}));
  auto pick = p.Pick(workers, {}, 1);
  EXPECT_EQ(pick.status().code(), absl::StatusCode::kResourceExhausted);
  // The retry hint is the least loaded worker's estimated wait.
  const double least = std::min(EstimateWaitMs(workers[0], PolicyOptions{}),
                                EstimateWaitMs(workers[1], PolicyOptions{}));
  ASSERT_TRUE(RetryAfterMs(pick.status()).has_value());
  EXPECT_EQ(*RetryAfterMs(pick.status()),
            std::clamp<int64_t>(static_cast<int64_t>(least), kMinRetryAfterMs, kMaxRetryAfterMs));
  // Draining workers do not take requests either.
  WorkerView draining = Fresh("d", 0, 0, 8);
  draining.report.draining = true;
  EXPECT_EQ(p.Pick({draining}, {}, 1).status().code(), absl::StatusCode::kResourceExhausted);
  // One worker with room among saturated ones takes everything.
  auto shares = Shares(p, {Fresh("a", 40, 8, 0), Fresh("ok", 40, 7, 1), draining}, 100);
  EXPECT_EQ(shares["ok"], 100);
}

TEST(PolicyTest, OneWorkerAndNone) {
  PowerOfTwoChoices p;
  auto pick = p.Pick({Fresh("only", 3, 8, 0)}, {}, 99);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, 0u);
  EXPECT_EQ(p.Pick({}, {}, 1).status().code(), absl::StatusCode::kUnavailable);
  WorkerView down = Fresh("down", 0, 0, 8);
  down.healthy = false;
  EXPECT_EQ(p.Pick({down}, {}, 1).status().code(), absl::StatusCode::kUnavailable);
  // Already tried: skipped; nothing else left is UNAVAILABLE, saying so.
  const auto tried = p.Pick({Fresh("only", 0, 0, 8), down}, {0}, 1);
  EXPECT_EQ(tried.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(tried.status().message().find("every healthy worker has been tried"), std::string::npos)
      << tried.status();
  auto other = p.Pick({Fresh("tried", 0, 0, 8), Fresh("other", 5, 8, 0)}, {0}, 1);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, 1u);
}

// Ejected workers serve only when no other healthy worker is left: ejection steers traffic away
// from a failing worker, it must not turn a burst of errors into an outage (the sole worker,
// ejected after three errors and healthy again, refused everything for its back-off).
TEST(PolicyTest, EjectedWorkersServeOnlyWhenNoOtherCan) {
  WorkerView ejected = Fresh("ejected", 0, 0, 8);
  ejected.ejected = true;
  WorkerView down = Fresh("down", 0, 0, 8);
  down.healthy = false;
  const WorkerView full = Fresh("full", 40, 8, 0);  // saturated
  for (const char* name : {"p2c", "least_in_flight", "cache_aware"}) {
    auto p = *MakePolicy(name, {});
    for (uint64_t r = 0; r < 20; ++r) {
      auto pick = p->Pick({ejected, Fresh("ok", 5, 8, 0)}, {}, r);
      ASSERT_TRUE(pick.ok()) << name;
      EXPECT_EQ(*pick, 1u) << name;
      pick = p->Pick({down, ejected}, {}, r);
      ASSERT_TRUE(pick.ok()) << name << ": " << pick.status();
      EXPECT_EQ(*pick, 1u) << name;
      // A saturated worker is busy, not gone: overload is RESOURCE_EXHAUSTED, not sent to the
      // worker that was failing.
      pick = p->Pick({full, ejected}, {}, r);
      EXPECT_EQ(pick.status().code(), absl::StatusCode::kResourceExhausted) << name;
      // Tried already: not picked again.
      EXPECT_FALSE(p->Pick({ejected}, {0}, r).ok()) << name;
    }
  }
}

TEST(PolicyTest, TiesGoToFewerInFlight) {
  PowerOfTwoChoices p;
  WorkerView a = Fresh("a", 0, 0, 8), b = Fresh("b", 0, 0, 8);
  a.in_flight = 3;
  for (uint64_t r = 0; r < 50; ++r) {
    auto pick = p.Pick({a, b}, {}, r);
    ASSERT_TRUE(pick.ok());
    EXPECT_EQ(*pick, 1u);
  }
}

TEST(PolicyTest, LeastInFlightAndFactory) {
  auto p = MakePolicy("least_in_flight", {});
  ASSERT_TRUE(p.ok());
  WorkerView a = Fresh("a", 0, 0, 8), b = Fresh("b", 0, 0, 8), c = Fresh("c", 0, 0, 8);
  a.in_flight = 2;
  b.in_flight = 0;
  c.in_flight = 1;
  auto pick = (*p)->Pick({a, b, c}, {}, 7);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, 1u);
  EXPECT_EQ((*MakePolicy("p2c", {}))->name(), "p2c");
  auto bad = MakePolicy("random", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("policy.name"), std::string::npos);
}

}  // namespace
}  // namespace llm::router

namespace llm::router {
namespace {

TEST(PrefixIndexTest, ChainsMatchTheLongestRecordedPrefixAndForgetLeastRecentlyUsed) {
  const std::string a(640, 'a');
  const std::string ab = a + std::string(128, 'b');
  EXPECT_EQ(PrefixIndex::Chain(a).size(), 10u);
  EXPECT_EQ(PrefixIndex::Chain(std::string(63, 'x')).size(), 0u);
  PrefixIndex index(/*capacity=*/12);
  index.Record("w1", PrefixIndex::Chain(a));
  EXPECT_EQ(index.Match("w1", PrefixIndex::Chain(ab)), 10u);  // the shared part
  EXPECT_EQ(index.Match("w2", PrefixIndex::Chain(ab)), 0u);
  // A chunk's hash covers everything before it: the same bytes after another start differ.
  EXPECT_EQ(index.Match("w1", PrefixIndex::Chain("z" + a)), 0u);
  // Over capacity, the least recently used chunks go first.
  index.Record("w1", PrefixIndex::Chain(std::string(320, 'c')));
  EXPECT_LT(index.Match("w1", PrefixIndex::Chain(a)), 10u);
  EXPECT_EQ(index.Match("w1", PrefixIndex::Chain(std::string(320, 'c'))), 5u);
}

TEST(CacheAwareTest, PrefixesStickToAWorkerUntilItsQueueOutweighsTheHit) {
  CacheAware policy;
  std::vector<WorkerView> workers = {Fresh("a", 0, 0, 8), Fresh("b", 0, 0, 8), Fresh("c", 0, 0, 8)};
  const std::vector<uint64_t> doc = PrefixIndex::Chain(std::string(8192, 'd'));  // ~2k tokens
  // A new prefix goes where p2c sends it.
  const uint64_t r = 12345;
  auto first = policy.PickFor(workers, {}, r, doc);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, *PowerOfTwoChoices().Pick(workers, {}, r));
  // Then it sticks, whatever the random draw, while the loads are even.
  for (uint64_t k = 1; k < 50; ++k) {
    auto again = policy.PickFor(workers, {}, k * 7919, doc);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *first) << k;
  }
  // Being busier (half its slots taken, a step in progress) costs less than recomputing 2k
  // prompt tokens: still there.
  workers[*first] = Fresh(workers[*first].id, 0, 4, 4);
  EXPECT_EQ(*policy.PickFor(workers, {}, 99, doc), *first);
  // A long queue outweighs the hit: no worker is flooded.
  workers[*first] = Fresh(workers[*first].id, 30, 8, 0);
  int stayed = 0;
  for (uint64_t k = 1; k <= 50; ++k)
    stayed += *policy.PickFor(workers, {}, k * 104729, doc) == *first;
  EXPECT_EQ(stayed, 0);
  // Without a prompt, it is p2c.
  EXPECT_EQ(*policy.PickFor(workers, {}, r, {}), *PowerOfTwoChoices().Pick(workers, {}, r));
}

TEST(CacheAwareTest, TheHitIsWorthTheWorkersMeasuredCostOfAPromptToken) {
  // A chat's history, 768 bytes (about 192 tokens), was sent to "a", which is now in a 10 ms
  // step with requests running; "b" is idle.
  const std::vector<uint64_t> chat = PrefixIndex::Chain(std::string(768, 'h'));
  const auto route = [&](double prefill_ms_per_token) {
    CacheAware policy;
    std::vector<WorkerView> workers = {Fresh("a", 0, 0, 8)};
    EXPECT_EQ(*policy.PickFor(workers, {}, 1, chat), 0u);
    workers = {Fresh("a", 0, 4, 4), Fresh("b", 0, 0, 8)};
    for (WorkerView& w : workers) w.report.prefill_ms_per_token = prefill_ms_per_token;
    return workers[*policy.PickFor(workers, {}, 2, chat)].id;
  };
  // Priced at the default 512 prompt tokens per step, the hit saves 192 / 512 * 10 = 3.75 ms,
  // less than the 10 ms wait: it moves (and loses the hit).
  EXPECT_EQ(route(0.0), "b");
  // Measured at 0.5 ms per prompt token, the hit saves 96 ms: it stays.
  EXPECT_EQ(route(0.5), "a");
  // The prompts queued ahead are priced the same way.
  WorkerView queued = Fresh("q", 0, 0, 8);
  queued.report.queued_prompt_tokens = 1000;
  EXPECT_DOUBLE_EQ(EstimateWaitMs(queued, PolicyOptions{}), 1000.0 * 10 / 512);
  queued.report.prefill_ms_per_token = 0.5;
  EXPECT_DOUBLE_EQ(EstimateWaitMs(queued, PolicyOptions{}), 500.0);
}

TEST(CacheAwareTest, AHotPrefixSpreadsWhenItsWorkerIsOutOfBalance) {
  CacheAware policy;  // balance: 2x the least loaded + 4 requests
  const std::vector<uint64_t> doc = PrefixIndex::Chain(std::string(4096, 'd'));  // ~1k tokens
  std::vector<WorkerView> workers = {Fresh("a", 0, 0, 8)};
  ASSERT_EQ(*policy.PickFor(workers, {}, 1, doc), 0u);
  // The hit is worth 1 s (1 ms per prompt token), far more than any wait here.
  const auto at = [](const std::string& id, int32_t running) {
    WorkerView w = Fresh(id, 0, running, 8 - running);
    w.report.prefill_ms_per_token = 1.0;
    return w;
  };
  // 4 running against idle workers: within the margin, the hit wins.
  workers = {at("a", 4), at("b", 0), at("c", 1)};
  EXPECT_EQ(*policy.PickFor(workers, {}, 2, doc), 0u);
  // 5 running against an idle worker: out of balance, the least loaded takes it (a miss there).
  workers = {at("a", 5), at("b", 0), at("c", 1)};
  EXPECT_EQ(*policy.PickFor(workers, {}, 3, doc), 1u);
  // Now both hold the prefix: the one with the lower wait of the two wins (the crowded one's
  // steps have grown slower), whatever the random draw.
  workers = {at("a", 4), at("b", 1), at("c", 0)};
  workers[0].report.step_time_ewma_ms = 20;
  for (uint64_t r = 10; r < 20; ++r) EXPECT_EQ(*policy.PickFor(workers, {}, r, doc), 1u) << r;
  // This router's own streams count when the report lags behind them.
  workers = {at("a", 0), at("b", 0), at("c", 0)};
  workers[0].in_flight = 9;
  EXPECT_EQ(*policy.PickFor(workers, {}, 5, doc), 1u);
}

}  // namespace
}  // namespace llm::router
