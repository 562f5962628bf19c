// ResponsesResponder (responses_api.h): GenerateResponse messages -> the Response object, or its
// stream of typed events. Streamed or not, the items are built by the same code (Apply); only a
// stream writes the events.
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/logprob_json.h"
#include "router/openai/responses_api.h"

namespace llm::router::openai {

using json = nlohmann::ordered_json;

ResponsesResponder::ResponsesResponder(const ParsedRequest& request, std::string id,
                                       int64_t created)
    : model_(request.model),
      logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      params_(request.response_params),
      id_(std::move(id)),
      created_(created) {}

void ResponsesResponder::Emit(const std::string& type, json event, std::string& out) {
  if (!stream_) return;
  json e = {{"type", type}};
  for (auto& [key, value] : event.items()) e[key] = std::move(value);
  e["sequence_number"] = sequence_++;
  absl::StrAppend(&out, "event: ", type,
                  "\ndata: ", e.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

void ResponsesResponder::Open(std::string& out) {
  stream_ = true;
  if (opened_) return;
  opened_ = true;
  Emit("response.created", {{"response", ResponseJson("in_progress")}}, out);
  Emit("response.in_progress", {{"response", ResponseJson("in_progress")}}, out);
}

json ResponsesResponder::ItemJson(const Item& item, bool added) const {
  // Added: the item's start. Otherwise as it stands: done, or cut off (a failed stream's).
  // An open item of a finished call closes as CloseLast would close it.
  const std::string status = added                    ? "in_progress"
                             : !item.open             ? item.status
                             : finish_reason_.empty() ? "incomplete"
                                                      : FinalStatus();
  if (item.reasoning) {
    json content = json::array();
    if (!added) content.push_back({{"type", "reasoning_text"}, {"text", item.text}});
    return {{"id", item.id},
            {"type", "reasoning"},
            {"status", status},
            {"summary", json::array()},
            {"content", std::move(content)}};
  }
  if (item.call) {
    return {{"id", item.id},           {"type", "function_call"},
            {"status", status},        {"arguments", added ? std::string() : item.text},
            {"call_id", item.call_id}, {"name", item.name}};
  }
  json content = json::array();
  if (!added) {
    content.push_back({{"type", "output_text"},
                       {"text", item.text},
                       {"annotations", json::array()},
                       {"logprobs", item.logprobs}});
  }
  return {{"id", item.id},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

void ResponsesResponder::CloseLast(std::string& out) {
  if (items_.empty() || !items_.back().open) return;
  Item& item = items_.back();
  item.open = false;
  // Cut by the length limit, or complete (an item closed before the end always is).
  item.status = FinalStatus();
  const json where = {{"item_id", item.id}, {"output_index", items_.size() - 1}};
  json event = where;
  if (item.reasoning) {
    event["content_index"] = 0;
    event["text"] = item.text;
    Emit("response.reasoning_text.done", std::move(event), out);
    event = where;
    event["content_index"] = 0;
    event["part"] = {{"type", "reasoning_text"}, {"text", item.text}};
    Emit("response.content_part.done", std::move(event), out);
  } else if (item.call) {
    event["name"] = item.name;
    event["arguments"] = item.text;
    Emit("response.function_call_arguments.done", std::move(event), out);
  } else {
    const json part = ItemJson(item)["content"][0];
    event["content_index"] = 0;
    event["text"] = item.text;
    event["logprobs"] = item.logprobs;
    Emit("response.output_text.done", event, out);
    event = where;
    event["content_index"] = 0;
    event["part"] = part;
    Emit("response.content_part.done", std::move(event), out);
  }
  Emit("response.output_item.done", {{"output_index", items_.size() - 1}, {"item", ItemJson(item)}},
       out);
}

void ResponsesResponder::ApplyText(const llm::v1::GenerateResponse& m, std::string& out) {
  json entries = logprobs_ ? LogprobEntries(m, top_logprobs_) : json::array();
  // The calls' tokens, or the reasoning's, are not the text's.
  if (m.tool_calls_size() > 0 || (m.text().empty() && !m.reasoning_text().empty())) {
    entries = json::array();
  }
  const bool message_open =
      !items_.empty() && items_.back().open && !items_.back().call && !items_.back().reasoning;
  if (m.text().empty() && !message_open) {
    // Tokens whose text is still held back (a character split over tokens): theirs once it
    // comes. While a call is open they are the call's (its closing markup): no text's.
    if (items_.empty() || !items_.back().call || !items_.back().open) {
      for (auto& x : entries) pending_logprobs_.push_back(std::move(x));
    }
    return;
  }
  if (m.text().empty() && entries.empty()) return;
  if (!message_open) {
    CloseLast(out);
    Item item;
    item.id = absl::StrCat("msg_", id_.substr(id_.find('_') + 1), "_", items_.size());
    items_.push_back(std::move(item));
    const size_t index = items_.size() - 1;
    Emit("response.output_item.added",
         {{"output_index", index}, {"item", ItemJson(items_.back(), /*added=*/true)}}, out);
    Emit("response.content_part.added",
         {{"item_id", items_.back().id},
          {"output_index", index},
          {"content_index", 0},
          {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
         out);
    for (auto& x : entries) pending_logprobs_.push_back(std::move(x));
    entries = std::move(pending_logprobs_);
    pending_logprobs_ = json::array();
  }
  Item& item = items_.back();
  item.text += m.text();
  for (const auto& x : entries) item.logprobs.push_back(x);
  Emit("response.output_text.delta",
       {{"item_id", item.id},
        {"output_index", items_.size() - 1},
        {"content_index", 0},
        {"delta", m.text()},
        {"logprobs", std::move(entries)}},
       out);
}

void ResponsesResponder::ApplyReasoning(const std::string& text, std::string& out) {
  if (items_.empty() || !items_.back().reasoning || !items_.back().open) {
    CloseLast(out);
    Item item;
    item.reasoning = true;
    item.id = absl::StrCat("rs_", id_.substr(id_.find('_') + 1), "_", items_.size());
    items_.push_back(std::move(item));
    Emit("response.output_item.added",
         {{"output_index", items_.size() - 1}, {"item", ItemJson(items_.back(), /*added=*/true)}},
         out);
    Emit("response.content_part.added",
         {{"item_id", items_.back().id},
          {"output_index", items_.size() - 1},
          {"content_index", 0},
          {"part", {{"type", "reasoning_text"}, {"text", ""}}}},
         out);
  }
  Item& item = items_.back();
  item.text += text;
  Emit("response.reasoning_text.delta",
       {{"item_id", item.id},
        {"output_index", items_.size() - 1},
        {"content_index", 0},
        {"delta", text}},
       out);
}

void ResponsesResponder::ApplyCall(const llm::v1::ToolCall& c, std::string& out) {
  if (!c.id().empty()) {  // a new call
    CloseLast(out);
    pending_logprobs_ = json::array();
    Item item;
    item.call = true;
    item.id = absl::StrCat("fc_", id_.substr(id_.find('_') + 1), "_", items_.size());
    item.call_id = c.id();
    item.name = c.name();
    items_.push_back(std::move(item));
    Emit("response.output_item.added",
         {{"output_index", items_.size() - 1}, {"item", ItemJson(items_.back(), /*added=*/true)}},
         out);
  } else if (items_.empty() || !items_.back().call || !items_.back().open) {
    return;  // a later piece of no call (a worker's bug)
  }
  Item& item = items_.back();
  item.text += c.arguments();
  if (c.arguments().empty()) return;
  Emit("response.function_call_arguments.delta",
       {{"item_id", item.id}, {"output_index", items_.size() - 1}, {"delta", c.arguments()}}, out);
}

void ResponsesResponder::Apply(const llm::v1::GenerateResponse& m, std::string& out) {
  if (m.index() != 0) return;  // the API has one choice
  if (m.has_usage()) {
    usage_ = m.usage();
    has_usage_ = true;
  }
  if (!m.reasoning_text().empty()) ApplyReasoning(m.reasoning_text(), out);
  ApplyText(m, out);
  for (const llm::v1::ToolCall& c : m.tool_calls()) ApplyCall(c, out);
  switch (m.finish_reason()) {
    case llm::v1::FINISH_REASON_LENGTH:
      finish_reason_ = "length";
      break;
    case llm::v1::FINISH_REASON_STOP:
    case llm::v1::FINISH_REASON_TOOL_CALLS:
      finish_reason_ = "stop";
      break;
    default:  // none yet; a cancel or an error is no finish (the call's status says what)
      break;
  }
}

std::string ResponsesResponder::FinalStatus() const {
  return finish_reason_ == "length" ? "incomplete" : "completed";
}

json ResponsesResponder::ResponseJson(const std::string& status) const {
  json r = {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", model_},
            {"output", json::array()},
            {"previous_response_id", nullptr},
            {"service_tier", "default"},
            {"store", false},
            {"truncation", "disabled"},
            {"usage", nullptr}};
  for (const auto& [key, value] : params_.items()) r[key] = value;
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "in_progress") return r;
  for (const Item& item : items_) r["output"].push_back(ItemJson(item));
  if (has_usage_) {
    const uint32_t in = usage_.prompt_tokens(), out = usage_.completion_tokens();
    r["usage"] = {{"input_tokens", in},
                  {"input_tokens_details",
                   {{"cached_tokens", usage_.cached_prompt_tokens()}, {"cache_write_tokens", 0}}},
                  {"output_tokens", out},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", in + out}};
  }
  return r;
}

std::string ResponsesResponder::OnStreamMessage(const llm::v1::GenerateResponse& m) {
  std::string out;
  Open(out);
  Apply(m, out);
  return out;
}

int ResponsesResponder::UnfinishedChoices() const { return finish_reason_.empty() ? 1 : 0; }

std::string ResponsesResponder::StreamEnd() {
  std::string out;
  Open(out);
  CloseLast(out);
  const std::string status = FinalStatus();
  Emit(absl::StrCat("response.", status), {{"response", ResponseJson(status)}}, out);
  return out;
}

std::string ResponsesResponder::StreamError(const ApiError& e) {
  std::string out;
  Open(out);
  json r = ResponseJson("failed");
  r["error"] = {
      {"code", e.code.empty() ? (e.http_status >= 500 ? "server_error" : e.type) : e.code},
      {"message", e.message}};
  Emit("response.failed", {{"response", std::move(r)}}, out);
  return out;
}

void ResponsesResponder::Accumulate(const llm::v1::GenerateResponse& m) {
  std::string none;
  Apply(m, none);
}

std::string ResponsesResponder::Body() const {
  return ResponseJson(FinalStatus()).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llm::router::openai
