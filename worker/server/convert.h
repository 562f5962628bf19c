// Conversions between llm.v1 messages and the worker's own types. The only place (with the
// services) where protobuf and gRPC status codes meet the engine.
#ifndef LLM_WORKER_SERVER_CONVERT_H_
#define LLM_WORKER_SERVER_CONVERT_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "llm/v1/worker_load.pb.h"
#include "worker/loop/request_spec.h"
#include "worker/loop/stream.h"
#include "worker/loop/worker.h"

namespace llm::server {

class DeviceMonitor;

// The spec of a GenerateRequest. A missing seed is drawn at random here, so the request's
// stream of random numbers is fixed from the start. INVALID_ARGUMENT naming the field when a
// chat's JSON fields (tools_json, tool_calls_json, template_kwargs_json) do not parse.
absl::StatusOr<loop::GenerateSpec> ToSpec(const llm::v1::GenerateRequest& request);

// A chat's prompt (GenerateRequest.chat, TokenizeRequest.chat). INVALID_ARGUMENT naming the
// field when its JSON fields do not parse.
absl::StatusOr<loop::ChatPrompt> ToChat(const llm::v1::Chat& chat);

// Puts `prompt` (one of GenerateRequest.more_prompts) in place of spec's text or token ids.
void SetPrompt(const llm::v1::BatchPrompt& prompt, loop::GenerateSpec& spec);

// Fills `response` (cleared first) from an update.
void ToResponse(const std::string& request_id, const loop::StreamUpdate& update,
                llm::v1::GenerateResponse& response);

grpc::Status ToGrpcStatus(const absl::Status& status);

struct LoadFacts {
  std::string worker_id;
  std::string model;
  std::vector<std::string> served_names;  // aliases
  std::string device;
  const DeviceMonitor* monitor = nullptr;  // the driver's counters (may be unavailable)
  // Without the driver's counters: what the runner reserved, and the device's size.
  uint64_t memory_reserved_bytes = 0;
  uint64_t memory_total_bytes = 0;
};
void ToLoadReport(const loop::WorkerLoad& load, const loop::Worker& worker, const LoadFacts& facts,
                  uint64_t sequence, llm::v1::LoadReport& report);

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_CONVERT_H_
