// A generation request as callers hand it to the Worker (the gRPC server converts llm.v1
// messages to this), and the checks that turn it into an engine request.
#ifndef LLM_WORKER_LOOP_REQUEST_SPEC_H_
#define LLM_WORKER_LOOP_REQUEST_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/constraint/constraint.h"
#include "worker/engine/request.h"
#include "worker/loop/engine_loop.h"
#include "worker/sampling/sampling_params.h"
#include "worker/tools/tool_format.h"

namespace llm::loop {

struct ReasoningStart;  // reasoning_sink.h

// A conversation to render with the model's chat template (llm.v1.Chat), as the template sees
// it: messages [{role, content, name?, tool_call_id?, tool_calls?}], tools (null: none), extra
// template variables.
// Key order is kept (ordered_json): templates print dicts (tools, arguments) in order.
struct ChatPrompt {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null or an array
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  // The answer continues the last message (ChatTemplate::ApplyContinuing).
  bool continue_final_message = false;
  // What the model may do with `tools` (tool_calls.h), and whether it may call several.
  tools::ToolChoice tool_choice;
  bool parallel_tool_calls = true;
};

struct GenerateSpec {
  std::string request_id;  // empty: the worker assigns one
  std::string model;       // the model the request names; empty: whatever this worker serves
  // Prompt given as text (else as token ids). A chat prompt is text too: rendered, then
  // tokenized without special tokens (the template writes them).
  bool has_text = true;
  std::optional<ChatPrompt> chat;
  std::string text;
  std::vector<int32_t> token_ids;
  bool add_special_tokens = true;
  // Numbers as the client sent them (uint32 on the wire), so errors quote them as sent.
  int64_t max_tokens = 0;  // 0: the default
  // max_tokens is lowered to what the context and the limits leave, not refused
  // (llm.v1.GenerateRequest.max_tokens_fit).
  bool max_tokens_fit = false;
  sampling::SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool speculative = true;  // false: no proposals for this request (engine.speculative)
  // Benchmark-only, in process (no API carries it): the oracle proposer's continuation
  // (engine::EngineRequest::oracle_ids).
  std::vector<int32_t> oracle_ids;
  // Structured output (constraint.*); compiled by Worker::Submit into `compiled`.
  constraint::ConstraintSpec constraint;
  std::shared_ptr<const constraint::CompiledConstraint> compiled;
  int64_t logprobs = 0;  // 0: none; n >= 1: the sampled token's and the top n
  // -1: none; n >= 0: each prompt token's logprob and the top n (engine::EngineRequest).
  int64_t prompt_logprobs = -1;
  bool skip_special_tokens = true;
  bool include_stop_str = false;
  bool include_prompt_ids = false;
  bool continuous_usage = false;
  Clock::time_point arrival = Clock::now();
  // A chat on a worker with a reasoning format: where the rendered prompt leaves the output
  // (set once rendered; reasoning_sink.h).
  std::shared_ptr<ReasoningStart> reasoning_start;
};

// Per-request limits (configuration) and the model's facts.
struct RequestLimits {
  int32_t vocab_size = 0;          // ids must be below this
  int32_t max_context = 0;         // prompt + max_tokens
  int32_t kv_capacity_tokens = 0;  // what the whole KV pool can hold for one request
  int32_t default_max_tokens = 0;  // 0: the rest of the context
  int32_t max_tokens_cap = 0;      // 0: no cap beyond the context
  int32_t max_prompt_tokens = 0;   // 0: no cap beyond the context
  size_t max_prompt_bytes = 1 << 20;
  size_t max_request_id_bytes = 128;
  int32_t max_stop_strings = 16;
  size_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;
  int32_t max_logprobs = 20;
  std::vector<int32_t> eos_token_ids;

  // The longest prompt + max_tokens a request can have: the model's context, or the whole KV
  // pool where that is smaller (a long-context model on a small device).
  int32_t accepted_context() const {
    return kv_capacity_tokens > 0 && kv_capacity_tokens < max_context ? kv_capacity_tokens
                                                                      : max_context;
  }
};

// A chat's messages: a conversation, each message with a role, every text valid UTF-8, the
// texts within the prompt's bytes. INVALID_ARGUMENT naming the field ("chat.messages[1].role").
absl::Status ValidateChat(const nlohmann::ordered_json& messages, const RequestLimits& limits);

// Checks everything that does not need the prompt's token count. INVALID_ARGUMENT naming the
// field (as in llm.v1.GenerateRequest: "max_tokens", "sampling.top_p", "stop[2]", ...).
absl::Status ValidateSpec(const GenerateSpec& spec, const RequestLimits& limits);

// The engine request for a validated spec and its prompt ids: checks the prompt's length,
// resolves max_tokens, and adds EOS to the stop ids unless ignore_eos.
absl::StatusOr<engine::EngineRequest> BuildEngineRequest(const GenerateSpec& spec,
                                                         std::vector<int32_t> prompt_ids,
                                                         const RequestLimits& limits);

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_REQUEST_SPEC_H_
