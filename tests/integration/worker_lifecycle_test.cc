// llm-worker's start-up, overload and shutdown: configuration errors, a full queue, and the
// SIGTERM drain with and without enough grace.
#include <csignal>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::BinPath;
using llm::testing::Generate;
using llm::testing::GreedyRequest;
using llm::testing::HttpGet;
using llm::testing::MetricValue;
using llm::testing::RunCommand;
using llm::testing::SharedPath;
using llm::testing::WaitFor;
using llm::testing::WorkerProcess;
using ::testing::HasSubstr;

constexpr char kModel[] = "models/tinystories-656k";
constexpr char kPrompt[] = "Once upon a time";

llm::v1::GenerateRequest Long(uint32_t tokens) {
  auto r = GreedyRequest(kPrompt, tokens);
  r.set_ignore_eos(true);
  return r;
}

// Requests the worker has accepted (running or waiting for a slot), from its /metrics.
double InFlight(const WorkerProcess& w) {
  const std::string page = HttpGet(w.metrics_port(), "/metrics");
  return MetricValue(page, "llm_num_requests_running") +
         MetricValue(page, "llm_num_requests_waiting");
}

TEST(WorkerLifecycleTest, ConfigurationErrorsNameTheKey) {
  LLM_REQUIRE_SHARED(kModel);
  auto r = RunCommand(
      {BinPath("llm-worker"), "--model.path", SharedPath(kModel), "--engine.max_slots", "many"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("engine.max_slots"));
  r = RunCommand(
      {BinPath("llm-worker"), "--model.path", SharedPath(kModel), "--engine.bogus", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("engine.bogus"));
  r = RunCommand({BinPath("llm-worker")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.path"));
  const std::string dir = llm::testing::MakeTempDir("cfg");
  std::ofstream(dir + "/worker.yaml")
      << "model:\n  path: " << SharedPath(kModel) << "\nengine:\n  max_slots: 4\n  max_slot: 5\n";
  r = RunCommand({BinPath("llm-worker"), "--config", dir + "/worker.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("worker.yaml:5"));
  EXPECT_THAT(r.err, HasSubstr("engine.max_slot"));
  std::ofstream(dir + "/bad.yaml") << "engine:\n  max_batch_tokens: 1.5\n";
  r = RunCommand({BinPath("llm-worker"), "--config", dir + "/bad.yaml", "--model.path", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("engine.max_batch_tokens"));
  r = RunCommand({BinPath("llm-worker"), "--model.path", "/no/such/model", "--server.listen",
                  "127.0.0.1:0", "--server.metrics_listen", ""});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/no/such/model"));
}

TEST(WorkerLifecycleTest, ExampleConfigIsCurrent) {
  // deploy/config/worker.yaml is `llm-worker --print-config`; regenerate it when keys change.
  const auto r = RunCommand({BinPath("llm-worker"), "--print-config"});
  ASSERT_EQ(r.exit_code, 0);
  std::ifstream f(llm::testing::SourcePath("deploy/config/worker.yaml"));
  const std::string committed((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(committed, r.out)
      << "run: build/bin/llm-worker --print-config > deploy/config/worker.yaml";
}

TEST(WorkerLifecycleTest, YamlConfigIsUsedAndFlagsOverrideIt) {
  LLM_REQUIRE_SHARED(kModel);
  const std::string dir = llm::testing::MakeTempDir("cfg");
  std::ofstream(dir + "/worker.yaml")
      << "model:\n  path: " << SharedPath(kModel) << "\n  name: story\nengine:\n  max_slots: 3\n";
  auto w = WorkerProcess::Start("", {"--config", dir + "/worker.yaml", "--engine.max_slots", "5"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  auto stub = llm::v1::WorkerLoad::NewStub(w->channel());
  grpc::ClientContext ctx;
  auto reader = stub->WatchLoad(&ctx, llm::v1::WatchLoadRequest());
  llm::v1::LoadReport report;
  ASSERT_TRUE(reader->Read(&report));
  EXPECT_EQ(report.model(), "story");
  EXPECT_EQ(report.max_slots(), 5u);
  ctx.TryCancel();
}

TEST(WorkerLifecycleTest, FullQueueGivesResourceExhausted) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = WorkerProcess::Start(kModel, {"--engine.max_slots", "1", "--engine.max_queued_requests",
                                         "1", "--engine.extra_step_ms", "2"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i) {
    busy.emplace_back([&] { Generate(*w->generation(), Long(100)); });
  }
  // Both accepted: the slot and the queue are taken. (EXPECT: the threads must be joined.)
  EXPECT_TRUE(WaitFor([&] { return InFlight(*w) >= 2; }, std::chrono::seconds(10))) << InFlight(*w);
  const auto r = Generate(*w->generation(), GreedyRequest(kPrompt, 5));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("full"));
  ASSERT_TRUE(r.trailers.count("grpc-retry-pushback-ms"));
  EXPECT_GE(std::stoll(r.trailers.at("grpc-retry-pushback-ms")), 10);
  for (auto& t : busy) t.join();
}

TEST(WorkerLifecycleTest, SigtermDrainsInFlightStreamsThenExitsZero) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = WorkerProcess::Start(
      kModel, {"--engine.extra_step_ms", "3", "--server.drain_grace_seconds", "20"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  ASSERT_EQ(llm::testing::HealthStatus(w->channel()), 1);
  std::vector<llm::testing::GenerateResult> results(4);
  std::vector<std::thread> streams;
  for (size_t i = 0; i < results.size(); ++i) {
    streams.emplace_back([&, i] { results[i] = Generate(*w->generation(), Long(150)); });
  }
  // All four accepted before the signal. (EXPECT: the threads must be joined.)
  EXPECT_TRUE(WaitFor([&] { return InFlight(*w) >= 4; }, std::chrono::seconds(10))) << InFlight(*w);
  w->process().Signal(SIGTERM);
  // Health goes NOT_SERVING and new requests are refused, while the streams carry on.
  int health = 1;
  EXPECT_TRUE(WaitFor([&] { return (health = llm::testing::HealthStatus(w->channel())) == 2; },
                      std::chrono::milliseconds(500)))
      << "health " << health;
  const auto refused = Generate(*w->generation(), GreedyRequest(kPrompt, 5));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("draining"));
  for (auto& t : streams) t.join();
  for (const auto& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), 150u);
  }
  EXPECT_EQ(w->process().WaitExit(10000), 0) << w->process().Output();
  EXPECT_THAT(w->process().Output(), HasSubstr("drained"));
}

// SIGTERM while the model loads ends the process at once (nothing is in flight): it waited for
// the whole load (about 13 s here, minutes for a large model on a GPU) before draining.
TEST(WorkerLifecycleTest, SigtermWhileLoadingExitsAtOnce) {
  auto w = llm::testing::ChildProcess::Start(
      {BinPath("llm-worker"), "--model.path", "random:qwen2-0.5b", "--engine.cpu_threads", "1",
       "--server.listen", "127.0.0.1:0", "--server.metrics_listen", ""});
  // Loading: the signal thread is up (it is started before the model is loaded), so the
  // process has more than one thread and still has not printed its serving line.
  const std::string status = "/proc/" + std::to_string(w->pid()) + "/status";
  const bool loading = WaitFor(
      [&] {
        std::ifstream f(status);
        for (std::string line; std::getline(f, line);) {
          if (line.rfind("Threads:", 0) == 0 && std::atoi(line.c_str() + 8) > 1) return true;
        }
        return false;
      },
      std::chrono::milliseconds(5000));
  ASSERT_TRUE(loading) << w->Output();
  ASSERT_EQ(w->Output().find("serving"), std::string::npos) << "loaded too fast to test";
  const auto start = std::chrono::steady_clock::now();
  w->Signal(SIGTERM);
  EXPECT_EQ(w->WaitExit(5000), 0) << w->Output();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_THAT(w->Output(), HasSubstr("before serving: exiting"));
}

// SIGHUP drains as SIGTERM does (it killed the process, cutting every stream), and a second
// signal during the drain ends the process at once (it was ignored until the grace ran out).
TEST(WorkerLifecycleTest, SighupDrainsAndASecondSignalEndsTheDrainAtOnce) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = WorkerProcess::Start(
      kModel, {"--engine.extra_step_ms", "20", "--server.drain_grace_seconds", "60"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  grpc::ClientContext ctx;
  auto reader = w->generation()->Generate(&ctx, Long(400));  // ~8 s of steps
  llm::v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();  // streaming now
  w->process().Signal(SIGHUP);
  ASSERT_FALSE(w->process().WaitForLine("Hangup: draining", 5000).empty()) << w->process().Output();
  EXPECT_TRUE(w->process().running()) << "SIGHUP must drain, not kill";
  const auto start = std::chrono::steady_clock::now();
  w->process().Signal(SIGINT);
  EXPECT_EQ(w->process().WaitExit(3000), 1) << w->process().Output();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3.0);
  EXPECT_THAT(w->process().Output(), HasSubstr("Interrupt again: exiting now"));
  int tokens = 0;
  while (reader->Read(&resp)) tokens += resp.token_ids_size();
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_LT(tokens, 400);
}

// Under nohup (SIGHUP ignored when it starts) SIGHUP stays ignored: a signal blocked for
// sigwait is taken even when ignored, so the worker drained when its terminal closed.
TEST(WorkerLifecycleTest, SighupStaysIgnoredUnderNohup) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = llm::testing::ChildProcess::Start({"/usr/bin/nohup", BinPath("llm-worker"),
                                              "--model.path", SharedPath(kModel),
                                              "--engine.cpu_threads", "1", "--server.listen",
                                              "127.0.0.1:0", "--server.metrics_listen", ""});
  const std::string line = w->WaitForLine("serving", 30000);
  ASSERT_FALSE(line.empty()) << w->Output();
  const int port = std::atoi(line.c_str() + line.find("on port") + 8);
  auto stub = llm::v1::Generation::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  w->Signal(SIGHUP);
  const auto r = Generate(*stub, GreedyRequest(kPrompt, 5), 30000);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  w->Signal(SIGTERM);
  EXPECT_EQ(w->WaitExit(20000), 0) << w->Output();
  EXPECT_THAT(w->Output(), ::testing::Not(HasSubstr("Hangup")));
  EXPECT_THAT(w->Output(), HasSubstr("Terminated: draining"));
}

TEST(WorkerLifecycleTest, StreamsStillOpenAfterTheGracePeriodAreEnded) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = WorkerProcess::Start(
      kModel, {"--engine.extra_step_ms", "5", "--server.drain_grace_seconds", "0.3"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  llm::testing::GenerateResult r;
  std::thread stream([&] { r = Generate(*w->generation(), Long(450)); });  // ~2.3 s of steps
  // Accepted before the signal. (EXPECT: the thread must be joined.)
  EXPECT_TRUE(WaitFor([&] { return InFlight(*w) >= 1; }, std::chrono::seconds(10))) << InFlight(*w);
  const auto start = std::chrono::steady_clock::now();
  w->process().Signal(SIGTERM);
  stream.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.status.ok());
  EXPECT_LT(r.token_ids.size(), 450u);
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(w->process().WaitExit(10000), 0) << w->process().Output();
}

TEST(WorkerLifecycleTest, AHungStepFailsLivenessUntilTheEngineStepsAgain) {
  LLM_REQUIRE_SHARED(kModel);
  // Every step takes 2.5 s against a 1 s watchdog: a stand-in for a hung kernel.
  auto w =
      WorkerProcess::Start(kModel, {"--engine.extra_step_ms", "2500", "--engine.watchdog_seconds",
                                    "1", "--server.health_listen", "127.0.0.1:0"});
  const std::string line = w->process().WaitForLine("health (plaintext) on port", 10000);
  ASSERT_FALSE(line.empty()) << w->process().Output();
  auto health = grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(std::atoi(line.c_str() + line.find("on port") + 8)),
      grpc::InsecureChannelCredentials());
  ASSERT_EQ(llm::testing::HealthStatus(health, "liveness"), 1);
  ASSERT_EQ(llm::testing::HealthStatus(health), 1);  // ready

  std::thread call([&] { (void)Generate(*w->generation(), GreedyRequest("Once", 2), 60000); });
  auto wait_for = [&](int status) {
    return WaitFor([&] { return llm::testing::HealthStatus(health, "liveness") == status; },
                   std::chrono::milliseconds(5000));
  };
  EXPECT_TRUE(wait_for(2)) << "liveness should go NOT_SERVING during a 2.5 s step";
  call.join();
  EXPECT_TRUE(wait_for(1)) << "liveness should come back once the engine is idle";
  EXPECT_THAT(w->process().Output(), HasSubstr("engine watchdog"));
}

// The load generator against a real worker: every request of every level completes, and the
// JSON holds the figures the engine issue reports (not asserted: they belong in benchmarks).
TEST(WorkerLifecycleTest, ServeBenchmarkCompletesEveryRequest) {
  LLM_REQUIRE_SHARED(kModel);
  auto w = WorkerProcess::Start(kModel, {"--engine.cpu_threads", "1"});
  ASSERT_GT(w->port(), 0) << w->process().Output();
  const auto r =
      RunCommand({BinPath("llm-bench"), "serve", "--target",
                  "127.0.0.1:" + std::to_string(w->port()), "--concurrency", "1,5", "--requests",
                  "12", "--max-tokens", "6", "--ignore-eos", "--rounds", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& level : j["results"]) {
    EXPECT_EQ(level["completed"], 12) << level.dump();
    EXPECT_EQ(level["errors"], 0) << level.dump();
    EXPECT_EQ(level["output_tokens"], 12 * 6) << level.dump();
    EXPECT_GT(level["ttft_ms_p50"].get<double>(), 0.0);
    EXPECT_EQ(level["rounds_output_tokens_per_s"].size(), 2u);
  }
  EXPECT_TRUE(j["throughput_vs_first_level"].contains("c5"));
}

}  // namespace
}  // namespace llm
