// OpenAiResponder (openai_api.h): GenerateResponse messages -> OpenAI SSE chunks or one body.
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "router/openai/logprob_json.h"
#include "router/openai/messages_api.h"
#include "router/openai/openai_api.h"
#include "router/openai/responses_api.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

std::unique_ptr<Responder> MakeResponder(const ParsedRequest& request, std::string id,
                                         int64_t created) {
  if (request.kind == ApiKind::kResponses) {
    return std::make_unique<ResponsesResponder>(request, std::move(id), created);
  }
  if (request.kind == ApiKind::kMessages) {
    return std::make_unique<MessagesResponder>(request, std::move(id));
  }
  return std::make_unique<OpenAiResponder>(request, std::move(id), created);
}

OpenAiResponder::OpenAiResponder(const ParsedRequest& request, std::string id, int64_t created)
    : kind_(request.kind),
      model_(request.model),
      include_usage_(request.include_usage),
      continuous_usage_(request.continuous_usage),
      return_token_ids_(request.return_token_ids),
      echo_(request.echo),
      echo_only_(request.echo_only),
      prompt_logprobs_(request.prompt_logprobs),
      prompt_texts_(request.prompt_texts),
      logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      n_(std::max(1, request.n)),
      id_(std::move(id)),
      created_(created),
      choices_(static_cast<size_t>(n_ * std::max(1, request.prompts))) {}

OpenAiResponder::Choice* OpenAiResponder::ChoiceOf(const llm::v1::GenerateResponse& m) {
  return m.index() < choices_.size() ? &choices_[m.index()] : nullptr;
}

namespace {

std::string FinishReason(llm::v1::FinishReason r) {
  switch (r) {
    case llm::v1::FINISH_REASON_STOP:
      return "stop";
    case llm::v1::FINISH_REASON_LENGTH:
      return "length";
    case llm::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "";
  }
}

// OpenAI's tool_calls entry for a call's first piece; a streamed delta carries its index.
json ToolCallJson(const llm::v1::ToolCall& c, bool stream) {
  json call = json::object();
  if (stream) call["index"] = c.index();
  call["id"] = c.id();
  call["type"] = "function";
  call["function"] = {{"name", c.name()}, {"arguments", c.arguments()}};
  return call;
}

// A streamed chunk's delta.tool_calls: a later piece of a call is its index and the next part
// of its arguments, as OpenAI streams them.
json ToolCallDeltas(const llm::v1::GenerateResponse& m) {
  json calls = json::array();
  for (const llm::v1::ToolCall& c : m.tool_calls()) {
    calls.push_back(c.id().empty()
                        ? json{{"index", c.index()}, {"function", {{"arguments", c.arguments()}}}}
                        : ToolCallJson(c, true));
  }
  return calls;
}

json Ids(const google::protobuf::RepeatedField<int32_t>& ids) {
  return json(std::vector<int32_t>(ids.begin(), ids.end()));
}

// vLLM's prompt_logprobs: null for the first token, then per token {"id": {"logprob", "rank",
// "decoded_token"}} for the token and its `top` most likely alternatives (rank 1, 2, ...).
json VllmPromptLogprobs(const llm::v1::GenerateResponse& m, int top) {
  json out = json::array();
  for (const auto& lp : m.prompt_logprobs()) {
    if (out.empty()) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    for (int i = 0; i < lp.top_size() && i < top; ++i) {
      entry[std::to_string(lp.top(i).token_id())] = {{"logprob", JsonLogprob(lp.top(i).logprob())},
                                                     {"rank", i + 1},
                                                     {"decoded_token", lp.top(i).text()}};
    }
    entry[std::to_string(lp.sampled().token_id())] = {
        {"logprob", JsonLogprob(lp.sampled().logprob())},
        {"rank", lp.sampled().rank()},
        {"decoded_token", lp.sampled().text()}};
    out.push_back(std::move(entry));
  }
  return out;
}

std::string Event(const json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

}  // namespace

json OpenAiResponder::Chunk() const {
  return json{{"id", id_},
              {"object", kind_ == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_}};
}

json OpenAiResponder::LogprobsJson(const llm::v1::GenerateResponse& m, Choice& c) const {
  if (!logprobs_) return nullptr;
  if (kind_ == ApiKind::kChat) return json{{"content", LogprobEntries(m, top_logprobs_)}};
  return CompletionLogprobs(m.logprobs(), c, /*first_has_none=*/false);
}

json OpenAiResponder::CompletionLogprobs(
    const google::protobuf::RepeatedPtrField<llm::v1::TokenLogprobs>& entries, Choice& c,
    bool first_has_none) const {
  json tokens = json::array(), lps = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : entries) {
    tokens.push_back(lp.sampled().text());
    // A prompt's first token has nothing before it to be predicted from: null, as OpenAI.
    const bool none = first_has_none && lps.empty();
    lps.push_back(none ? json(nullptr) : json(JsonLogprob(lp.sampled().logprob())));
    json alts = json::object();
    for (int i = 0; i < lp.top_size() && i < top_logprobs_; ++i) {
      alts[lp.top(i).text()] = JsonLogprob(lp.top(i).logprob());
    }
    top.push_back(none ? json(nullptr) : alts);
    // In bytes of the output, token by token (the text a message carries lags what a partial
    // character holds back, and U+FFFD is 3 bytes where a token may hold 1).
    offsets.push_back(c.text_offset);
    c.text_offset +=
        lp.sampled().bytes().empty() ? lp.sampled().text().size() : lp.sampled().bytes().size();
  }
  return json{
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top}, {"text_offset", offsets}};
}

const std::string* OpenAiResponder::PromptText(const llm::v1::GenerateResponse& m) const {
  const size_t prompt = m.index() / static_cast<size_t>(n_);
  return prompt < prompt_texts_.size() && !prompt_texts_[prompt].empty() ? &prompt_texts_[prompt]
                                                                         : nullptr;
}

std::string OpenAiResponder::EchoText(const llm::v1::GenerateResponse& m) const {
  if (const std::string* text = PromptText(m)) return *text;
  std::string bytes;  // token ids: as the worker decoded each prompt token, joined
  for (const auto& lp : m.prompt_logprobs()) {
    bytes += lp.sampled().bytes().empty() ? lp.sampled().text() : lp.sampled().bytes();
  }
  return Utf8Lossy(bytes);
}

json OpenAiResponder::Echo(const llm::v1::GenerateResponse& m, Choice& c) {
  c.echoed = true;
  // A worker that ignored prompt_logprobs (older than the router) sent none: no silent gap.
  c.echo_missing = (logprobs_ || PromptText(m) == nullptr) && m.prompt_logprobs_size() == 0;
  const std::string text = EchoText(m);
  c.text += text;
  json lp = logprobs_ ? CompletionLogprobs(m.prompt_logprobs(), c, true) : json(nullptr);
  // The output's offsets count from the echoed text (a BOS the text prompt does not show, or a
  // leading space a decoder stripped, would shift them).
  c.text_offset = text.size();
  return json{{"text", text}, {"logprobs", std::move(lp)}};
}

std::string OpenAiResponder::MissingFromWorker() const {
  for (const Choice& c : choices_) {
    if (c.echo_missing) {
      return "the worker sent no prompt logprobs for echo (is it older than the router?)";
    }
  }
  return "";
}

json OpenAiResponder::UsageJson() const {
  // Each prompt once (its n choices have the same), and of it the most any choice found cached.
  uint32_t prompt = 0, cached = 0, completion = 0, drafts = 0, accepted = 0;
  for (size_t first = 0; first < choices_.size(); first += static_cast<size_t>(n_)) {
    uint32_t this_prompt = 0, this_cached = 0;
    for (size_t i = first; i < first + static_cast<size_t>(n_); ++i) {
      this_prompt = std::max(this_prompt, choices_[i].usage.prompt_tokens());
      this_cached = std::max(this_cached, choices_[i].usage.cached_prompt_tokens());
    }
    prompt += this_prompt;
    cached += this_cached;
  }
  for (const Choice& c : choices_) {
    completion += echo_only_ ? 0 : c.usage.completion_tokens();
    drafts += c.usage.draft_tokens();
    accepted += c.usage.accepted_draft_tokens();
  }
  json usage{{"prompt_tokens", prompt},
             {"completion_tokens", completion},
             {"total_tokens", prompt + completion},
             {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (drafts > 0) {
    // Speculative decoding's proposals, in the fields OpenAI uses for predicted outputs.
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                          {"rejected_prediction_tokens", drafts - accepted}};
  }
  return usage;
}

json OpenAiResponder::ChunkUsage(const Choice& c) const {
  if (!continuous_usage_) return nullptr;
  const uint32_t prompt = c.usage.prompt_tokens(),
                 completion = echo_only_ ? 0 : c.usage.completion_tokens();
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

void OpenAiResponder::AddTokenIds(const llm::v1::GenerateResponse& m, json& choice) const {
  // vLLM's prompt_logprobs ride with the ids: a chat's at the chunk's top (OnStreamChat).
  if (prompt_logprobs_ >= 0 && kind_ == ApiKind::kCompletion && m.prompt_logprobs_size() > 0) {
    choice["prompt_logprobs"] = VllmPromptLogprobs(m, prompt_logprobs_);
  }
  if (!return_token_ids_) return;
  // A chat chunk has them at its top (as vLLM's); a completion's choice has its own prompt.
  if (kind_ == ApiKind::kCompletion && m.prompt_token_ids_size() > 0) {
    choice["prompt_token_ids"] = Ids(m.prompt_token_ids());
  }
  choice["token_ids"] = Ids(m.token_ids());
}

std::string OpenAiResponder::OnStreamChat(const llm::v1::GenerateResponse& m, Choice& c,
                                          const std::string& finish) {
  std::string out;
  json chunk = Chunk();
  if (include_usage_) chunk["usage"] = ChunkUsage(c);
  const json index = m.index();
  const bool ids = return_token_ids_ && m.token_ids_size() > 0;
  const std::string& reasoning = m.reasoning_text();
  if (!c.role_sent || !m.text().empty() || !reasoning.empty() || m.logprobs_size() > 0 || ids) {
    json delta = json::object();
    if (!c.role_sent) delta["role"] = "assistant";
    // The model's thinking as DeepSeek's API and vLLM name it; content only once it comes.
    if (!m.text().empty() || reasoning.empty()) delta["content"] = m.text();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    c.role_sent = true;
    json choice = {{"index", index},
                   {"delta", delta},
                   {"logprobs", LogprobsJson(m, c)},
                   {"finish_reason", nullptr}};
    AddTokenIds(m, choice);
    if (return_token_ids_ && m.prompt_token_ids_size() > 0) {
      chunk["prompt_token_ids"] = Ids(m.prompt_token_ids());
    }
    if (prompt_logprobs_ >= 0 && m.prompt_logprobs_size() > 0) {
      chunk["prompt_logprobs"] = VllmPromptLogprobs(m, prompt_logprobs_);
    }
    chunk["choices"] = json::array({std::move(choice)});
    out += Event(chunk);
    chunk.erase("prompt_token_ids");
    chunk.erase("prompt_logprobs");
  }
  if (m.tool_calls_size() > 0) {
    chunk["choices"] = json::array({{{"index", index},
                                     {"delta", {{"tool_calls", ToolCallDeltas(m)}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    out += Event(chunk);
  }
  if (!finish.empty()) {
    chunk["choices"] = json::array({{{"index", index},
                                     {"delta", json::object()},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish}}});
    out += Event(chunk);
  }
  return out;
}

namespace {

// echo with max_tokens 0: the message without what the worker generated.
llm::v1::GenerateResponse WithoutOutput(const llm::v1::GenerateResponse& m) {
  llm::v1::GenerateResponse out = m;
  out.clear_text();
  out.clear_logprobs();
  out.clear_token_ids();
  out.clear_tool_calls();
  return out;
}

}  // namespace

std::string OpenAiResponder::OnStreamMessage(const llm::v1::GenerateResponse& message) {
  std::optional<llm::v1::GenerateResponse> stripped;  // only for echo_only_
  const llm::v1::GenerateResponse& m =
      echo_only_ ? stripped.emplace(WithoutOutput(message)) : message;
  Choice* c = ChoiceOf(m);
  if (c == nullptr) return "";
  if (m.has_usage()) c->usage = m.usage();
  const std::string finish = FinishReason(m.finish_reason());
  c->text += m.text();
  if (!finish.empty()) c->finish_reason = finish;
  if (kind_ == ApiKind::kChat) return OnStreamChat(m, *c, finish);
  std::string out;
  if (echo_ && !c->echoed) {  // the prompt, as a chunk before the output's
    json echo = Echo(m, *c);
    json chunk = Chunk();
    if (include_usage_) chunk["usage"] = ChunkUsage(*c);
    chunk["choices"] = json::array({{{"index", m.index()},
                                     {"text", echo["text"]},
                                     {"logprobs", echo["logprobs"]},
                                     {"finish_reason", nullptr}}});
    out = Event(chunk);
  }
  const bool ids = return_token_ids_ && m.token_ids_size() > 0;
  const bool prompt = prompt_logprobs_ >= 0 && m.prompt_logprobs_size() > 0;
  if (m.text().empty() && m.logprobs_size() == 0 && finish.empty() && !ids && !prompt) return out;
  json chunk = Chunk();
  if (include_usage_) chunk["usage"] = ChunkUsage(*c);
  json choice = {{"index", m.index()},
                 {"text", m.text()},
                 {"logprobs", LogprobsJson(m, *c)},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  AddTokenIds(m, choice);
  chunk["choices"] = json::array({std::move(choice)});
  return out + Event(chunk);
}

int OpenAiResponder::UnfinishedChoices() const {
  int n = 0;
  for (const Choice& c : choices_) n += c.finish_reason.empty() ? 1 : 0;
  return n;
}

std::string OpenAiResponder::StreamEnd() {
  std::string out;
  if (include_usage_) {
    json chunk = Chunk();
    chunk["choices"] = json::array();
    chunk["usage"] = UsageJson();
    out += Event(chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string OpenAiResponder::StreamError(const ApiError& e) {
  return absl::StrCat("data: ", OpenAiErrorBody(e), "\n\ndata: [DONE]\n\n");
}

void OpenAiResponder::AppendLogprobs(const json& lp, Choice& c) const {
  if (kind_ == ApiKind::kChat) {
    for (const auto& x : lp["content"]) c.logprob_entries.push_back(x);
    return;
  }
  for (const auto& x : lp["tokens"]) c.tokens.push_back(x);
  for (const auto& x : lp["token_logprobs"]) c.token_logprobs.push_back(x);
  for (const auto& x : lp["top_logprobs"]) c.top.push_back(x);
  for (const auto& x : lp["text_offset"]) c.offsets.push_back(x);
}

void OpenAiResponder::Accumulate(const llm::v1::GenerateResponse& message) {
  std::optional<llm::v1::GenerateResponse> stripped;  // only for echo_only_
  const llm::v1::GenerateResponse& m =
      echo_only_ ? stripped.emplace(WithoutOutput(message)) : message;
  Choice* c = ChoiceOf(m);
  if (c == nullptr) return;
  if (m.has_usage()) c->usage = m.usage();
  if (echo_ && !c->echoed) {
    const json echo = Echo(m, *c);
    if (logprobs_) AppendLogprobs(echo["logprobs"], *c);
  }
  if (logprobs_) AppendLogprobs(LogprobsJson(m, *c), *c);
  c->text += m.text();
  c->reasoning += m.reasoning_text();
  if (m.prompt_token_ids_size() > 0) c->prompt_ids = Ids(m.prompt_token_ids());
  if (prompt_logprobs_ >= 0 && m.prompt_logprobs_size() > 0) {
    c->prompt_lp = VllmPromptLogprobs(m, prompt_logprobs_);
  }
  for (const int32_t id : m.token_ids()) c->token_ids.push_back(id);
  for (const llm::v1::ToolCall& call : m.tool_calls()) {
    if (!call.id().empty() || c->tool_calls.empty()) {
      c->tool_calls.push_back(ToolCallJson(call, false));
    } else {  // the last call's next piece
      c->tool_calls.back()["function"]["arguments"].get_ref<std::string&>() += call.arguments();
    }
  }
  const std::string finish = FinishReason(m.finish_reason());
  if (!finish.empty()) c->finish_reason = finish;
}

std::string OpenAiResponder::Body() const {
  json body = {{"id", id_},
               {"object", kind_ == ApiKind::kChat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_}};
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}};
    if (kind_ == ApiKind::kChat) {
      // With calls and nothing else, content is null (as OpenAI answers).
      const bool calls = !c.tool_calls.empty();
      choice["message"] = {{"role", "assistant"},
                           {"content", calls && c.text.empty() ? json(nullptr) : json(c.text)}};
      if (calls) choice["message"]["tool_calls"] = c.tool_calls;
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
      choice["logprobs"] = logprobs_ ? json{{"content", c.logprob_entries}} : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = logprobs_ ? json{{"tokens", c.tokens},
                                            {"token_logprobs", c.token_logprobs},
                                            {"top_logprobs", c.top},
                                            {"text_offset", c.offsets}}
                                     : json(nullptr);
    }
    choice["finish_reason"] = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
    if (prompt_logprobs_ >= 0 && kind_ == ApiKind::kCompletion) {
      choice["prompt_logprobs"] = c.prompt_lp;
    }
    if (return_token_ids_ && kind_ == ApiKind::kCompletion) {
      choice["prompt_token_ids"] = c.prompt_ids;
    }
    if (return_token_ids_) choice["token_ids"] = c.token_ids;
    choices.push_back(std::move(choice));
  }
  // A chat's prompt, once (its choices share it), as vLLM's.
  if (return_token_ids_ && kind_ == ApiKind::kChat) {
    body["prompt_token_ids"] = choices_[0].prompt_ids;
  }
  if (prompt_logprobs_ >= 0 && kind_ == ApiKind::kChat) {
    body["prompt_logprobs"] = choices_[0].prompt_lp;
  }
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson();
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llm::router::openai
