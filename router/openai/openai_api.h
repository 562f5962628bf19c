// The OpenAI HTTP API's request and response bodies, translated to and from llm.v1 (pure logic:
// no socket, no gRPC call).
//
//   ParseOpenAiRequest   a /v1/chat/completions or /v1/completions JSON body -> GenerateRequest,
//                        or a 400 naming the parameter. Parameters we cannot honour (best_of,
//                        echo, functions, ...) are refused, never ignored. Structured
//                        output's parameters: structured_params.h; tools: tool_params.h.
//   OpenAiResponder      GenerateResponse messages -> SSE chunks (stream) or one JSON object
//                        (openai_responder.cc).
//   OpenAiError          an error body {"error": {"message", "type", "param", "code"}}.
#ifndef LLM_ROUTER_OPENAI_OPENAI_API_H_
#define LLM_ROUTER_OPENAI_OPENAI_API_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {

enum class ApiKind { kChat, kCompletion };

// An HTTP error: status, and the OpenAI error object's fields.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;           // empty: null
  std::string code;            // empty: null
  int64_t retry_after_ms = 0;  // 429: the Retry-After header (seconds, rounded up)
};
std::string OpenAiErrorBody(const ApiError& e);

struct ParsedRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;                   // choices (GenerateRequest.n) of each prompt
  int prompts = 1;             // completions: prompts (1 + GenerateRequest.more_prompts)
  bool logprobs = false;       // report logprobs
  int top_logprobs = 0;        // alternatives to report per token
  llm::v1::GenerateRequest request;
};

struct ParseOptions {
  // A field no OpenAI reference has is logged once and ignored rather than a 400
  // (router.unknown_fields: ignore).
  bool ignore_unknown_fields = false;
};

// Parses a request body of `kind`. Errors are 400 with `param` naming the field. The fields of
// the OpenAI references it implements or ignores, and why: reference_fields.h.
absl::StatusOr<ParsedRequest> ParseOpenAiRequest(ApiKind kind, std::string_view body,
                                                 ApiError* error, const ParseOptions& options = {});

// The error a gRPC status becomes: INVALID_ARGUMENT 400 (param from the message's field name),
// NOT_FOUND 404 (model_not_found for "model: ..."), UNAUTHENTICATED 401, RESOURCE_EXHAUSTED 429
// (retry_after_ms from the pushback), UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499,
// anything else 500.
ApiError ErrorFromGrpc(int code, const std::string& message, int64_t pushback_ms);

// Builds the response of one request from its GenerateResponse messages, one choice per
// GenerateResponse.index (n > 1 or several prompts: their messages interleave; prompt p's
// choices are p * n to p * n + n - 1). Usage counts each prompt once: its prompt tokens and,
// of those, the most any of its choices took from the prefix cache, and every choice's
// completion tokens.
class OpenAiResponder {
 public:
  // `id` e.g. "chatcmpl-..."; `created` in Unix seconds.
  OpenAiResponder(const ParsedRequest& request, std::string id, int64_t created);

  // Streaming: the SSE events ("data: {...}\n\n", possibly several) this message produces.
  std::string OnStreamMessage(const llm::v1::GenerateResponse& m);
  // Choices without a finish reason yet: after a call that ended OK, choices the worker never
  // answered (one older than the router, which ignored n or more prompts).
  int UnfinishedChoices() const;
  // Streaming: the final events after the last message (the usage chunk when asked, [DONE]).
  std::string StreamEnd();
  // Streaming: an error after the stream started, as an SSE event, then [DONE].
  static std::string StreamError(const ApiError& e);

  // Non-streaming: accumulates `m`.
  void Accumulate(const llm::v1::GenerateResponse& m);
  // Non-streaming: the whole response body.
  std::string Body() const;

 private:
  // One choice's state.
  struct Choice {
    bool role_sent = false;
    size_t text_offset = 0;  // completions' text_offset of the next logprob entry
    std::string text;
    nlohmann::ordered_json logprob_entries = nlohmann::ordered_json::array();  // chat: content
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array(),
                           token_logprobs = nlohmann::ordered_json::array(),
                           top = nlohmann::ordered_json::array(),
                           offsets = nlohmann::ordered_json::array();
    nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // message.tool_calls
    std::string finish_reason;
    llm::v1::Usage usage;
  };

  // The choice `m` belongs to (null for an index past the request's n: a worker's bug).
  Choice* ChoiceOf(const llm::v1::GenerateResponse& m);
  nlohmann::ordered_json Chunk() const;
  nlohmann::ordered_json LogprobsJson(const llm::v1::GenerateResponse& m, Choice& c) const;
  nlohmann::ordered_json UsageJson() const;
  std::string OnStreamChat(const llm::v1::GenerateResponse& m, Choice& c,
                           const std::string& finish);

  ApiKind kind_;
  std::string model_;
  bool include_usage_;
  bool logprobs_;
  int top_logprobs_;
  int n_;  // choices per prompt
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;  // by index
};

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_OPENAI_API_H_
