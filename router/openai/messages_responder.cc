// MessagesResponder (messages_api.h): GenerateResponse messages -> Anthropic's Message object,
// or its stream of events. Streamed or not, the blocks are built by the same code (Apply); only
// a stream writes the events.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/messages_api.h"

namespace llm::router::openai {

using json = nlohmann::ordered_json;

MessagesResponder::MessagesResponder(const ParsedRequest& request, std::string id)
    : model_(request.model),
      id_(std::move(id)),
      max_tokens_(request.request.max_tokens()),
      warm_only_(request.echo_only),
      thinking_(request.show_reasoning) {}

void MessagesResponder::Emit(const std::string& type, json event, std::string& out) {
  if (!stream_) return;
  json e = {{"type", type}};
  for (auto& [key, value] : event.items()) e[key] = std::move(value);
  absl::StrAppend(&out, "event: ", type,
                  "\ndata: ", e.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

void MessagesResponder::Start(std::string& out) {
  stream_ = true;
  if (started_) return;
  started_ = true;
  Emit("message_start", {{"message", MessageJson(/*started=*/true)}}, out);
}

json MessagesResponder::BlockJson(const Block& b) const {
  if (b.thinking) return {{"type", "thinking"}, {"thinking", b.text}, {"signature", ""}};
  if (!b.tool) return {{"type", "text"}, {"text", b.text}};
  // The worker reads a call's arguments as a JSON object; anything else (a call cut off by
  // the length limit) is an empty input, as a stream's client would be left with nothing.
  json input = json::parse(b.text, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded() || !input.is_object()) input = json::object();
  return {{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", std::move(input)}};
}

json MessagesResponder::UsageJson() const {
  const uint32_t cached = std::min(usage_.cached_prompt_tokens(), usage_.prompt_tokens());
  return {{"input_tokens", usage_.prompt_tokens() - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", warm_only_ ? 0 : usage_.completion_tokens()}};
}

std::string MessagesResponder::StopReason() const {
  switch (finish_) {
    case llm::v1::FINISH_REASON_LENGTH:
      // Cut before max_tokens: the context was full.
      return !warm_only_ && max_tokens_ > 0 && usage_.completion_tokens() < max_tokens_
                 ? "model_context_window_exceeded"
                 : "max_tokens";
    case llm::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_use";
    case llm::v1::FINISH_REASON_STOP:
      if (warm_only_) return "max_tokens";
      return stop_sequence_.empty() ? "end_turn" : "stop_sequence";
    default:
      return "";
  }
}

json MessagesResponder::MessageJson(bool started) const {
  json content = json::array();
  if (!started) {
    for (const Block& b : blocks_) content.push_back(BlockJson(b));
  }
  const std::string reason = started ? "" : StopReason();
  return {
      {"id", id_},
      {"type", "message"},
      {"role", "assistant"},
      {"model", model_},
      {"content", std::move(content)},
      {"stop_reason", reason.empty() ? json(nullptr) : json(reason)},
      {"stop_sequence", started || stop_sequence_.empty() ? json(nullptr) : json(stop_sequence_)},
      {"usage", UsageJson()}};
}

void MessagesResponder::CloseLast(std::string& out) {
  if (blocks_.empty() || !blocks_.back().open) return;
  blocks_.back().open = false;
  Emit("content_block_stop", {{"index", blocks_.size() - 1}}, out);
}

void MessagesResponder::ApplyCall(const llm::v1::ToolCall& c, std::string& out) {
  if (!c.id().empty()) {  // a new call
    CloseLast(out);
    Block b;
    b.tool = true;
    b.id = c.id();
    b.name = c.name();
    blocks_.push_back(std::move(b));
    Emit("content_block_start",
         {{"index", blocks_.size() - 1},
          {"content_block",
           {{"type", "tool_use"}, {"id", c.id()}, {"name", c.name()}, {"input", json::object()}}}},
         out);
  } else if (blocks_.empty() || !blocks_.back().tool || !blocks_.back().open) {
    return;  // a later piece of no call (a worker's bug)
  }
  Block& b = blocks_.back();
  b.text += c.arguments();
  if (c.arguments().empty()) return;
  Emit("content_block_delta",
       {{"index", blocks_.size() - 1},
        {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments()}}}},
       out);
}

void MessagesResponder::ApplyText(const std::string& text, bool thinking, std::string& out) {
  if (blocks_.empty() || blocks_.back().tool || blocks_.back().thinking != thinking ||
      !blocks_.back().open) {
    CloseLast(out);
    blocks_.emplace_back();
    blocks_.back().thinking = thinking;
    const json start = thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                : json{{"type", "text"}, {"text", ""}};
    Emit("content_block_start", {{"index", blocks_.size() - 1}, {"content_block", start}}, out);
  }
  blocks_.back().text += text;
  const json delta = thinking ? json{{"type", "thinking_delta"}, {"thinking", text}}
                              : json{{"type", "text_delta"}, {"text", text}};
  Emit("content_block_delta", {{"index", blocks_.size() - 1}, {"delta", delta}}, out);
}

void MessagesResponder::Apply(const llm::v1::GenerateResponse& m, std::string& out) {
  if (m.index() != 0) return;  // the API has one choice
  if (m.has_usage()) usage_ = m.usage();
  if (stream_) Start(out);
  if (m.stop_string().size() > 0) stop_sequence_ = m.stop_string();
  if (m.finish_reason() != llm::v1::FINISH_REASON_UNSPECIFIED) finish_ = m.finish_reason();
  if (warm_only_) return;
  if (thinking_ && !m.reasoning_text().empty()) {
    ApplyText(m.reasoning_text(), /*thinking=*/true, out);
  }
  if (!m.text().empty()) ApplyText(m.text(), /*thinking=*/false, out);
  for (const llm::v1::ToolCall& c : m.tool_calls()) ApplyCall(c, out);
}

std::string MessagesResponder::OnStreamMessage(const llm::v1::GenerateResponse& m) {
  std::string out;
  stream_ = true;
  Apply(m, out);
  return out;
}

int MessagesResponder::UnfinishedChoices() const {
  // A cancel or an error is no finish (the call's status says what).
  return StopReason().empty() ? 1 : 0;
}

std::string MessagesResponder::StreamEnd() {
  std::string out;
  Start(out);
  CloseLast(out);
  Emit("message_delta",
       {{"delta",
         {{"stop_reason", StopReason()},
          {"stop_sequence", stop_sequence_.empty() ? json(nullptr) : json(stop_sequence_)}}},
        {"usage", UsageJson()}},
       out);
  Emit("message_stop", json::object(), out);
  return out;
}

std::string MessagesResponder::StreamError(const ApiError& e) {
  std::string out;
  Start(out);
  absl::StrAppend(&out, "event: error\ndata: ", MessagesErrorBody(e), "\n\n");
  return out;
}

void MessagesResponder::Accumulate(const llm::v1::GenerateResponse& m) {
  std::string none;
  Apply(m, none);
}

std::string MessagesResponder::Body() const {
  return MessageJson(/*started=*/false).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llm::router::openai
