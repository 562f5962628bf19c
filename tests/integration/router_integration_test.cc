// llm-router with real llm-worker processes on loopback serving the test model: golden text
// through two routers and three workers under 500 concurrent streams, a worker killed with
// SIGKILL during traffic and restarted, a slow worker, a cancel storm, health, reflection and
// /metrics.
#include <csignal>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::GenerateConcurrently;
using llm::testing::GreedyRequest;
using llm::testing::HttpGet;
using llm::testing::MetricValue;
using llm::testing::RouterProcess;
using llm::testing::TimedResult;
using llm::testing::WaitFor;
using llm::testing::WorkerProcess;
using Clock = std::chrono::steady_clock;

constexpr char kModel[] = "models/tinystories-656k";

using llm::testing::Golden;
using llm::testing::LoadGolden;

std::string Join(const std::vector<std::unique_ptr<WorkerProcess>>& workers) {
  std::string s;
  for (const auto& w : workers) s += (s.empty() ? "" : ",") + w->target();
  return s;
}

double Picks(const RouterProcess& r, const WorkerProcess& w) {
  return MetricValue(HttpGet(r.metrics_port(), "/metrics"),
                     "llm_router_picks_total{worker=\"" + w.target() + "\"}");
}

// Requests a worker has accepted (running or waiting for a slot), from its /metrics.
double WorkerInFlight(const WorkerProcess& w) {
  const std::string page = HttpGet(w.metrics_port(), "/metrics");
  return MetricValue(page, "llm_num_requests_running") +
         MetricValue(page, "llm_num_requests_waiting");
}

double RouterInFlight(const RouterProcess& r) {
  return MetricValue(HttpGet(r.metrics_port(), "/metrics"), "llm_router_requests_in_flight");
}

class RouterIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED(kModel);
    LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
    golden_ = LoadGolden();
  }
  std::vector<std::unique_ptr<WorkerProcess>> StartWorkers(int n,
                                                           const std::vector<std::string>& flags = {
                                                               "--engine.cpu_threads", "1"}) {
    std::vector<std::unique_ptr<WorkerProcess>> w;
    for (int i = 0; i < n; ++i) w.push_back(WorkerProcess::Start(kModel, flags));
    return w;
  }
  Golden golden_;
};

TEST_F(RouterIntegrationTest, FiveHundredStreamsThroughTwoRoutersGiveTheGoldenText) {
  auto workers = StartWorkers(3);
  std::vector<std::unique_ptr<RouterProcess>> routers;
  for (int i = 0; i < 2; ++i) {
    // Enough queue room that 500 streams over 96 slots are all taken.
    routers.push_back(
        RouterProcess::Start(Join(workers), {"--policy.saturation_queue_per_slot", "64"}));
    ASSERT_TRUE(routers.back()->WaitReady(3));
  }
  auto s0 = routers[0]->generation(), s1 = routers[1]->generation();
  std::vector<llm::v1::GenerateRequest> requests(500, GreedyRequest(golden_.prompt, 59));
  const auto results = GenerateConcurrently({s0.get(), s1.get()}, requests);
  int ok = 0;
  for (const TimedResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.text, golden_.completion);
    EXPECT_EQ(r.token_ids, golden_.ids);
    ok += r.status.ok() ? 1 : 0;
  }
  EXPECT_EQ(ok, 500);
  // Every worker took a share. (Not an equal one: on a shared machine one worker may get less
  // CPU than the others, and the policy rightly sends it less.)
  double total = 0;
  for (const auto& w : workers) {
    const double picks = Picks(*routers[0], *w) + Picks(*routers[1], *w);
    EXPECT_GT(picks, 500 * 0.05) << w->target();
    total += picks;
  }
  EXPECT_GE(total, 500);
  // Both routers and every worker end idle.
  for (const auto& r : routers) {
    EXPECT_EQ(MetricValue(HttpGet(r->metrics_port(), "/metrics"), "llm_router_requests_in_flight"),
              0);
  }
}

TEST_F(RouterIntegrationTest, KilledWorkerEndsItsStreamsFastOthersServeAndItRejoins) {
  // Steps of at least 2 ms, so the long streams are still running at the kill.
  auto workers = StartWorkers(3, {"--engine.cpu_threads", "1", "--engine.extra_step_ms", "2"});
  auto router = RouterProcess::Start(Join(workers));
  ASSERT_TRUE(router->WaitReady(3));
  auto stub = router->generation();
  WorkerProcess& victim = *workers[1];
  const std::string victim_target = victim.target();

  // Long streams, all started before the kill, and a burst launched at the kill.
  llm::v1::GenerateRequest long_req = GreedyRequest(golden_.prompt, 500);
  long_req.set_ignore_eos(true);
  std::vector<TimedResult> long_results, burst_results;
  Clock::time_point killed_at;
  std::thread long_calls(
      [&] { long_results = GenerateConcurrently({stub.get()}, std::vector(24, long_req)); });
  // Wait for the victim to be streaming, and for all 24 long streams to be at the workers.
  // (EXPECT, not ASSERT, while the threads run: they must be joined.)
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string page = HttpGet(victim.metrics_port(), "/metrics");
        return MetricValue(page, "llm_num_requests_running") > 0;
      },
      std::chrono::milliseconds(4000)));
  EXPECT_TRUE(WaitFor(
      [&] {
        double n = 0;
        for (const auto& w : workers) n += WorkerInFlight(*w);
        return n >= 24;
      },
      std::chrono::seconds(10)));
  std::thread burst([&] {
    burst_results =
        GenerateConcurrently({stub.get()}, std::vector(30, GreedyRequest(golden_.prompt, 59)));
  });
  // The kill lands while the burst arrives: once the router holds the first of it.
  EXPECT_TRUE(WaitFor([&] { return RouterInFlight(*router) > 24; }, std::chrono::seconds(10)));
  killed_at = Clock::now();
  victim.process().Signal(SIGKILL);
  long_calls.join();
  burst.join();

  int on_victim = 0;
  for (const TimedResult& r : long_results) {
    if (r.status.ok()) continue;
    // Streams the victim was serving end with UNAVAILABLE naming it, within a second.
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find(victim_target), std::string::npos)
        << r.status.error_message();
    EXPECT_GT(r.messages, 0);
    EXPECT_LT(std::chrono::duration<double>(r.end - killed_at).count(), 1.0);
    ++on_victim;
  }
  EXPECT_GT(on_victim, 0);
  // Requests that had not started on the victim were served by the others.
  for (const TimedResult& r : burst_results) {
    if (!r.status.ok()) {
      EXPECT_GT(r.messages, 0) << "a request with no message should have been retried: "
                               << r.status.error_message();
      continue;
    }
    EXPECT_EQ(r.text, golden_.completion);
  }
  // New requests all succeed.
  const auto after =
      GenerateConcurrently({stub.get()}, std::vector(30, GreedyRequest(golden_.prompt, 59)));
  for (const TimedResult& r : after) ASSERT_TRUE(r.status.ok()) << r.status.error_message();

  // The worker comes back on the same port and takes traffic again.
  const std::string port = std::to_string(victim.port());
  workers[1] = WorkerProcess::Start(
      kModel, {"--engine.cpu_threads", "1", "--server.listen", "127.0.0.1:" + port});
  ASSERT_EQ(workers[1]->target(), victim_target);
  ASSERT_TRUE(router->WaitReady(3))
      << HttpGet(router->metrics_port(), "/metrics") << router->process().Output();
  const double before = Picks(*router, *workers[1]);
  const auto rejoined =
      GenerateConcurrently({stub.get()}, std::vector(60, GreedyRequest(golden_.prompt, 59)));
  for (const TimedResult& r : rejoined) ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_GT(Picks(*router, *workers[1]), before + 5);
}

TEST_F(RouterIntegrationTest, SlowWorkerGetsASmallerShare) {
  auto fast = WorkerProcess::Start(kModel, {"--engine.cpu_threads", "1"});
  auto slow =
      WorkerProcess::Start(kModel, {"--engine.cpu_threads", "1", "--engine.extra_step_ms", "20"});
  auto router = RouterProcess::Start(fast->target() + "," + slow->target());
  ASSERT_TRUE(router->WaitReady(2));
  auto stub = router->generation();
  // Waves of requests, so the load reports reflect each worker's speed.
  for (int wave = 0; wave < 6; ++wave) {
    const auto results =
        GenerateConcurrently({stub.get()}, std::vector(16, GreedyRequest(golden_.prompt, 40)));
    for (const auto& r : results) ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  const double f = Picks(*router, *fast), s = Picks(*router, *slow);
  std::printf("picks: fast %.0f, slow %.0f\n", f, s);
  EXPECT_EQ(f + s, 96);
  EXPECT_LT(s, f);
}

TEST_F(RouterIntegrationTest, CancelStormLeavesEveryWorkerIdle) {
  auto workers = StartWorkers(3);
  auto router = RouterProcess::Start(Join(workers));
  ASSERT_TRUE(router->WaitReady(3));
  auto stub = router->generation();
  llm::v1::GenerateRequest req = GreedyRequest(golden_.prompt, 400);
  req.set_ignore_eos(true);
  std::vector<bool> cancel(300);
  std::mt19937 rng(3);
  for (size_t i = 0; i < cancel.size(); ++i) cancel[i] = rng() % 4 != 0;
  // Calls not cancelled by the first message end by their (short) deadline.
  const auto results = GenerateConcurrently({stub.get()}, std::vector(300, req), 1500, cancel);
  for (const TimedResult& r : results) {
    EXPECT_TRUE(r.status.error_code() == grpc::StatusCode::CANCELLED ||
                r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || r.status.ok())
        << r.status.error_message();
  }
  for (const auto& w : workers) {
    double running = -1;
    EXPECT_TRUE(WaitFor([&] { return (running = WorkerInFlight(*w)) == 0; },
                        std::chrono::milliseconds(5000)))
        << w->target() << ": " << running << " requests running or waiting";
  }
  EXPECT_EQ(
      MetricValue(HttpGet(router->metrics_port(), "/metrics"), "llm_router_requests_in_flight"), 0);
}

TEST_F(RouterIntegrationTest, HealthReflectionTokenizeAndMetrics) {
  auto workers = StartWorkers(1);
  auto router = RouterProcess::Start(Join(workers));
  ASSERT_TRUE(router->WaitReady(1));
  EXPECT_EQ(llm::testing::HealthStatus(router->channel()), 1);
  EXPECT_EQ(llm::testing::HealthStatus(router->channel(), "llm.v1.Generation"), 1);
  const auto services = llm::testing::ReflectionServices(router->channel());
  EXPECT_NE(std::find(services.begin(), services.end(), "llm.v1.Generation"), services.end());
  // Tokenize and Detokenize are relayed.
  auto stub = router->generation();
  grpc::ClientContext c1;
  llm::v1::TokenizeRequest treq;
  treq.set_text(golden_.prompt);
  llm::v1::TokenizeResponse tresp;
  ASSERT_TRUE(stub->Tokenize(&c1, treq, &tresp).ok());
  EXPECT_EQ(tresp.token_ids_size(), 6);
  grpc::ClientContext c2;
  llm::v1::DetokenizeRequest dreq;
  for (int32_t id : golden_.ids) dreq.add_token_ids(id);
  llm::v1::DetokenizeResponse dresp;
  ASSERT_TRUE(stub->Detokenize(&c2, dreq, &dresp).ok());
  EXPECT_EQ(dresp.text(), golden_.completion);
  // A bad request gets the worker's INVALID_ARGUMENT unchanged.
  llm::v1::GenerateRequest bad = GreedyRequest(golden_.prompt, 5);
  bad.mutable_sampling()->set_top_p(7);
  const auto r = llm::testing::Generate(*stub, bad);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("sampling.top_p"), std::string::npos);
  // /metrics passes promtool.
  const std::string page = HttpGet(router->metrics_port(), "/metrics");
  EXPECT_NE(page.find("llm_router_picks_total"), std::string::npos);
  const std::string dir = llm::testing::MakeTempDir("metrics");
  std::ofstream(dir + "/page.txt") << page;
  const auto check =
      llm::testing::RunCommand({"/bin/sh", "-c", "promtool check metrics < " + dir + "/page.txt"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST_F(RouterIntegrationTest, SigtermDrainsCallsInProgressThenExitsZero) {
  auto workers = StartWorkers(1, {"--engine.cpu_threads", "1", "--engine.extra_step_ms", "5"});
  // A drain grace far beyond the call, so a slow (loaded) worker cannot run it out.
  auto router = RouterProcess::Start(Join(workers), {"--router.drain_grace_seconds", "300"});
  ASSERT_TRUE(router->WaitReady(1));
  // A long call, under way when SIGTERM arrives.
  llm::v1::GenerateRequest long_req = GreedyRequest(golden_.prompt, 150);
  long_req.set_ignore_eos(true);
  std::promise<void> started;
  llm::testing::GenerateResult long_result;
  std::thread long_call([&] {
    auto stub = router->generation();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub->Generate(&ctx, long_req);
    llm::v1::GenerateResponse resp;
    bool first = true;
    while (reader->Read(&resp)) {
      if (first) started.set_value();
      first = false;
      long_result.token_ids.insert(long_result.token_ids.end(), resp.token_ids().begin(),
                                   resp.token_ids().end());
    }
    if (first) started.set_value();
    long_result.status = reader->Finish();
  });
  started.get_future().wait();
  router->process().Signal(SIGTERM);
  // Generous waits for a loaded machine: each returns as soon as its state is reached. EXPECT,
  // not ASSERT, so the call's thread is always joined below.
  EXPECT_NE(router->process().WaitForLine("draining", 60000), "");
  // New calls are turned away at once (the port is closed), on a fresh connection; the deadline
  // only bounds a hang (connecting and being refused can take a while on a starved machine).
  // A local subchannel pool makes the connection fresh: a channel to the same target otherwise
  // shares the long call's connection, where a call can race the router's GOAWAY (seen once in
  // CI: the call was served).
  grpc::ChannelArguments fresh_args;
  fresh_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto fresh = llm::v1::Generation::NewStub(
      grpc::CreateCustomChannel(router->target(), grpc::InsecureChannelCredentials(), fresh_args));
  const auto refused = llm::testing::Generate(*fresh, GreedyRequest(golden_.prompt, 5), 30000);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.status.error_message();
  // The call in progress finishes whole, then the router exits 0.
  long_call.join();
  EXPECT_TRUE(long_result.status.ok()) << long_result.status.error_message();
  EXPECT_EQ(long_result.token_ids.size(), 150u);
  EXPECT_EQ(router->process().WaitExit(60000), 0) << router->process().Output();
  EXPECT_NE(router->process().Output().find("drained, exiting"), std::string::npos);
}

// SIGHUP drains as SIGTERM does (it killed the router, cutting every call), and a second
// signal during the drain ends the router at once (it was ignored until the grace ran out).
TEST_F(RouterIntegrationTest, SighupDrainsAndASecondSignalEndsTheDrainAtOnce) {
  auto workers = StartWorkers(1, {"--engine.cpu_threads", "1", "--engine.extra_step_ms", "20"});
  auto router = RouterProcess::Start(Join(workers), {"--router.drain_grace_seconds", "300"});
  ASSERT_TRUE(router->WaitReady(1));
  llm::v1::GenerateRequest long_req = GreedyRequest(golden_.prompt, 400);  // ~8 s of steps
  long_req.set_ignore_eos(true);
  auto stub = router->generation();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, long_req);
  llm::v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();  // under way
  router->process().Signal(SIGHUP);
  ASSERT_NE(router->process().WaitForLine("Hangup: draining", 30000), "")
      << router->process().Output();
  EXPECT_TRUE(router->process().running()) << "SIGHUP must drain, not kill";
  const auto start = Clock::now();
  router->process().Signal(SIGTERM);
  EXPECT_EQ(router->process().WaitExit(10000), 1) << router->process().Output();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_NE(router->process().Output().find("Terminated again: exiting now"), std::string::npos)
      << router->process().Output();
  size_t tokens = 0;
  while (reader->Read(&resp)) tokens += resp.token_ids_size();
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_LT(tokens, 400u);
}

TEST(RouterLifecycleTest, ExampleConfigIsCurrentAndBadKeysAreNamed) {
  // deploy/config/router.yaml is `llm-router --print-config`; regenerate it when keys change.
  auto r = llm::testing::RunCommand({llm::testing::BinPath("llm-router"), "--print-config"});
  ASSERT_EQ(r.exit_code, 0);
  std::ifstream f(llm::testing::SourcePath("deploy/config/router.yaml"));
  const std::string committed((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(committed, r.out)
      << "run: build/bin/llm-router --print-config > deploy/config/router.yaml";
  const std::string dir = llm::testing::MakeTempDir("router-cfg");
  std::ofstream(dir + "/router.yaml") << "discovery:\n  workers: \"127.0.0.1:1\"\nproxy:\n"
                                      << "  threads: -3\n";
  r = llm::testing::RunCommand(
      {llm::testing::BinPath("llm-router"), "--config", dir + "/router.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("proxy.threads"), std::string::npos) << r.err;
  r = llm::testing::RunCommand(
      {llm::testing::BinPath("llm-router"), "--router.listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("discovery.workers"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace llm
