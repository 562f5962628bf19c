// llm.v1.Generation on top of a loop::Worker, with gRPC's callback API.
//
// Generate streams a request's StreamUpdates. The worker's output stage never waits for the
// network: updates that arrive while a write is in flight are merged into one pending message,
// so a slow reader gets fewer, larger messages and never holds up the engine or other streams.
// A client cancel or an expired deadline cancels the request in the worker.
//
// Generate and Tokenize take their requests as raw bytes (see wire_check.h) so that invalid
// UTF-8 and oversized messages get INVALID_ARGUMENT naming the field.
#ifndef LLM_WORKER_SERVER_GENERATION_SERVICE_H_
#define LLM_WORKER_SERVER_GENERATION_SERVICE_H_

#include <atomic>

#include "llm/v1/generation.grpc.pb.h"
#include "worker/loop/worker.h"

namespace llm::server {

class RequestCounters;

using GenerationBase = llm::v1::Generation::WithRawCallbackMethod_Generate<
    llm::v1::Generation::WithRawCallbackMethod_Tokenize<
        llm::v1::Generation::WithCallbackMethod_Detokenize<llm::v1::Generation::Service>>>;

class GenerationService final : public GenerationBase {
 public:
  // `counters` (may be null) counts rejected requests by status code. Requests larger than
  // `max_message_bytes` get INVALID_ARGUMENT.
  GenerationService(RequestCounters* counters, size_t max_message_bytes)
      : counters_(counters), max_message_bytes_(max_message_bytes) {}

  // Until a worker is set (the model is loading), calls get UNAVAILABLE.
  void SetWorker(loop::Worker* worker) { worker_.store(worker); }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const llm::v1::DetokenizeRequest* request,
                                       llm::v1::DetokenizeResponse* response) override;

 private:
  std::atomic<loop::Worker*> worker_{nullptr};
  RequestCounters* counters_;
  size_t max_message_bytes_;
};

// Counts requests that ended before they reached the worker: refused, by gRPC status code name,
// or cancelled by their client before the request message arrived.
class RequestCounters {
 public:
  virtual ~RequestCounters() = default;
  virtual void OnRejected(grpc::StatusCode code) = 0;
  virtual void OnCancelledBeforeArrival() = 0;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_GENERATION_SERVICE_H_
