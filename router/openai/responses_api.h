// The OpenAI Responses API (POST /v1/responses), served statelessly over the chat path (pure
// logic: no socket, no gRPC call). docs/router.md, "The Responses API".
//
//   ParseResponsesRequest  a /v1/responses body -> ParsedRequest (kind kResponses) whose
//                          GenerateRequest is the chat the body's `instructions` and `input`
//                          items make; a 400 names the parameter as the Responses API does
//                          (`input[2].content[0].type`, `text.format`, `max_output_tokens`).
//   ResponsesResponder     GenerateResponse messages -> the Response object, or its typed SSE
//                          events (response.created ... response.completed).
//
// Nothing is stored: `previous_response_id`, `conversation`, `prompt` and item references are
// a 400 saying to send the whole conversation in `input`, as a client of a store-less server
// (`store: false`) does; the Response says `store: false`.
#ifndef LLM_ROUTER_OPENAI_RESPONSES_API_H_
#define LLM_ROUTER_OPENAI_RESPONSES_API_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Parses a /v1/responses body. Errors are 400 with `param` naming the field.
absl::StatusOr<ParsedRequest> ParseResponsesRequest(std::string_view body, ApiError* error,
                                                    const ParseOptions& options = {});

// A chat request's parameter name (an error's `param`: the chat translation's, or the
// worker's mapped by ErrorFromGrpc) as the Responses API names it: messages -> input,
// max_completion_tokens -> max_output_tokens, response_format -> text.format.
std::string ResponsesParam(const std::string& chat_param);

// Builds the Response of one call (one choice: the API has no n) from its messages. Output
// items in the order the model wrote them: a "reasoning" item (one reasoning_text part) for
// its thinking, a "message" item (one output_text part) for text, a "function_call" item for
// each tool call. Status "completed", or "incomplete" with
// incomplete_details.reason "max_output_tokens" when the length limit ended it.
class ResponsesResponder final : public Responder {
 public:
  // `id` "resp_..."; `created` in Unix seconds.
  ResponsesResponder(const ParsedRequest& request, std::string id, int64_t created);

  // Streaming: "event: TYPE\ndata: {...}\n\n" events, each with its sequence_number; the first
  // message is preceded by response.created and response.in_progress. StreamEnd closes the
  // open items (*.done events) and ends with response.completed or response.incomplete;
  // StreamError with response.failed (status "failed", error {code, message}).
  std::string OnStreamMessage(const llm::v1::GenerateResponse& m) override;
  int UnfinishedChoices() const override;
  std::string StreamEnd() override;
  std::string StreamError(const ApiError& e) override;
  void Accumulate(const llm::v1::GenerateResponse& m) override;
  std::string Body() const override;

 private:
  // One output item: a message (its text and logprobs), a function call, or the model's
  // reasoning (its text).
  struct Item {
    bool call = false;
    bool reasoning = false;
    bool open = true;                    // not yet *.done
    std::string status = "in_progress";  // once done: completed or incomplete
    std::string id;
    std::string text;  // message: output_text.text; call: arguments
    nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();
    std::string call_id, name;
  };

  // Applies `m` to the items; with stream_ set, appends its events to `out`.
  void Apply(const llm::v1::GenerateResponse& m, std::string& out);
  void ApplyText(const llm::v1::GenerateResponse& m, std::string& out);
  void ApplyCall(const llm::v1::ToolCall& c, std::string& out);
  void ApplyReasoning(const std::string& text, std::string& out);
  // Marks the last item done (its *.done events to `out`).
  void CloseLast(std::string& out);
  // The stream's opening events, once.
  void Open(std::string& out);
  void Emit(const std::string& type, nlohmann::ordered_json event, std::string& out);
  // `item` as the output holds it; `added`: as response.output_item.added shows it (in
  // progress, no content yet).
  nlohmann::ordered_json ItemJson(const Item& item, bool added = false) const;
  // The Response object with `status` ("in_progress", "completed", "incomplete", "failed").
  nlohmann::ordered_json ResponseJson(const std::string& status) const;
  std::string FinalStatus() const;

  std::string model_;
  bool logprobs_;
  int top_logprobs_;
  nlohmann::ordered_json params_;  // ParsedRequest::response_params
  std::string id_;
  int64_t created_;
  bool stream_ = false;  // Apply emits events
  bool opened_ = false;
  int64_t sequence_ = 0;
  std::vector<Item> items_;
  // Logprobs of tokens whose text no message has carried yet (held back; or before any item).
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();
  std::string finish_reason_;  // the FinishReason's OpenAI name; empty: not finished
  llm::v1::Usage usage_;
  bool has_usage_ = false;
};

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_RESPONSES_API_H_
