#include "common/shutdown_signals.h"

#include <csignal>
#include <thread>
#include <utility>

#include "common/thread_name.h"

namespace llm {

namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void WatchShutdownSignals(std::function<void(int)> first, std::function<void(int)> again) {
  std::thread([first = std::move(first), again = std::move(again)] {
    SetCurrentThreadName("signals");
    const sigset_t set = ShutdownSet();
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
