#include "common/shutdown_signals.h"

#include <csignal>
#include <thread>
#include <utility>

#include "common/thread_name.h"

namespace llm {

namespace {

// The signals taken: those of kShutdownSignals not ignored when the process started. A signal
// blocked for sigwait is queued even when its disposition is SIG_IGN, so `nohup llm-worker`
// (SIGHUP ignored) drained when its terminal closed.
sigset_t taken;

constexpr int kShutdownSignals[] = {SIGTERM, SIGINT, SIGHUP};

}  // namespace

void BlockShutdownSignals() {
  sigemptyset(&taken);
  for (const int sig : kShutdownSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&taken, sig);
  }
  pthread_sigmask(SIG_BLOCK, &taken, nullptr);
}

void WatchShutdownSignals(std::function<void(int)> first, std::function<void(int)> again) {
  std::thread([first = std::move(first), again = std::move(again)] {
    SetCurrentThreadName("signals");
    const sigset_t set = taken;
    bool seen = false;
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (seen) {
        again(sig);
      } else {
        seen = true;
        first(sig);
      }
    }
  }).detach();
}

}  // namespace llm
