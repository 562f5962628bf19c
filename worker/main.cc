// llm-worker: serves one model over gRPC (see worker/server). Configuration: --config FILE
// and/or --key value flags (`llm-worker --help` lists them; --print-config prints them as
// YAML with their defaults). SIGTERM or SIGINT drains.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/server/worker_config.h"
#include "worker/server/worker_server.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (auto rc = llm::config::HandleInfoFlags(llm::server::WorkerConfigSchema(), "llm-worker", args,
                                             "/models/MODEL")) {
    return *rc;
  }
  // Signals are taken by sigwait (a thread below); every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto config = llm::server::LoadWorkerConfig(args);
  if (!config.ok()) {
    std::fprintf(stderr, "llm-worker: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  // Signals are waited for from the start: a model can take minutes to load, and a pod deleted
  // (or a Ctrl-C) meanwhile must not wait for it (it waited out the whole load, then drained).
  // Before serving nothing is in flight, so the process just ends. The thread outlives main's
  // scope (it is detached), so what it shares has static storage.
  enum class Phase { kLoading, kServing, kFailed };
  static std::mutex mu;
  static Phase phase = Phase::kLoading;
  static std::promise<int> signalled;
  static sigset_t waited;
  waited = signals;
  std::thread([] {
    int sig = 0;
    sigwait(&waited, &sig);
    std::lock_guard<std::mutex> lock(mu);
    if (phase == Phase::kLoading) {
      std::fprintf(stderr, "llm-worker: %s before serving: exiting\n", strsignal(sig));
      std::_Exit(0);
    }
    if (phase == Phase::kServing) signalled.set_value(sig);
  }).detach();

  llm::server::WorkerServer server(*config);
  if (absl::Status st = server.Start(); !st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      phase = Phase::kFailed;  // a signal now must not turn the failure into exit 0
    }
    std::fprintf(stderr, "llm-worker: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    phase = Phase::kServing;
  }
  if (server.health_port() != 0) {
    std::fprintf(stderr, "llm-worker: health (plaintext) on port %d\n", server.health_port());
  }
  // Tests and scripts read this line to find the ports.
  std::fprintf(stderr, "llm-worker: serving %s on port %d, metrics on port %d\n",
               config->model_name.c_str(), server.port(), server.metrics_port());
  const int sig = signalled.get_future().get();
  std::fprintf(stderr, "llm-worker: %s: draining (grace %.0f s)\n", strsignal(sig),
               config->drain_grace_seconds);
  const bool clean = server.Drain();
  std::fprintf(stderr, "llm-worker: %s\n",
               clean ? "drained, exiting" : "grace period over; remaining streams cancelled");
  return 0;
}
