// The signals that end a server, and the thread that takes them.
//
// SIGTERM (Kubernetes deleting the pod), SIGINT (Ctrl-C) and SIGHUP (the terminal closing, or
// a supervisor's stop) each ask for a drain. They are taken by sigwait on one thread, never by
// an asynchronous handler, so what they set off can take locks and log. A second one, while the
// drain waits out its grace period, is the operator saying not to wait: `again` is called for
// it (the binaries then end at once).
#ifndef LLM_COMMON_SHUTDOWN_SIGNALS_H_
#define LLM_COMMON_SHUTDOWN_SIGNALS_H_

#include <functional>

namespace llm {

// Blocks the shutdown signals in the calling thread; every thread it starts later inherits the
// mask. Call it first in main, before any thread is started (else a thread that does not block
// them could take one and die of it). A signal ignored when the process started (SIGHUP under
// nohup) stays ignored.
void BlockShutdownSignals();

// Starts a detached thread that waits for the shutdown signals: the first calls `first(sig)`,
// each later one `again(sig)`, both on that thread. The thread outlives main's scope, so what
// the callbacks use must too (static storage). BlockShutdownSignals must have been called.
void WatchShutdownSignals(std::function<void(int)> first, std::function<void(int)> again);

}  // namespace llm

#endif  // LLM_COMMON_SHUTDOWN_SIGNALS_H_
