#include "router/openai/openai_api.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "router/openai/body_fields.h"
#include "router/openai/reference_fields.h"
#include "router/openai/structured_params.h"
#include "router/openai/tool_params.h"

namespace llm::router::openai {

namespace {

using json = nlohmann::ordered_json;

// Parameters accepted and passed on or harmless; anything else is refused by name.
const std::set<std::string>& Known(ApiKind kind) {
  static const std::set<std::string> chat = {"model",
                                             "messages",
                                             "max_tokens",
                                             "max_completion_tokens",
                                             "temperature",
                                             "top_p",
                                             "seed",
                                             "stop",
                                             "presence_penalty",
                                             "frequency_penalty",
                                             "logprobs",
                                             "top_logprobs",
                                             "stream",
                                             "stream_options",
                                             "user",
                                             "n",
                                             "top_k",
                                             "min_p",
                                             "repetition_penalty",
                                             "ignore_eos",
                                             "speculative",
                                             "structured_outputs",
                                             "guided_json",
                                             "guided_regex",
                                             "guided_choice",
                                             "guided_grammar",
                                             "stop_token_ids",
                                             "tools",
                                             "tool_choice",
                                             "response_format",
                                             "metadata",
                                             "store",
                                             "chat_template_kwargs",
                                             "add_generation_prompt",
                                             "skip_special_tokens",
                                             "include_stop_str_in_output",
                                             "parallel_tool_calls",
                                             "functions",
                                             "function_call"};
  static const std::set<std::string> completion = {"model",
                                                   "prompt",
                                                   "max_tokens",
                                                   "temperature",
                                                   "top_p",
                                                   "seed",
                                                   "stop",
                                                   "presence_penalty",
                                                   "frequency_penalty",
                                                   "logprobs",
                                                   "stream",
                                                   "stream_options",
                                                   "user",
                                                   "n",
                                                   "best_of",
                                                   "echo",
                                                   "suffix",
                                                   "top_k",
                                                   "min_p",
                                                   "repetition_penalty",
                                                   "ignore_eos",
                                                   "speculative",
                                                   "response_format",
                                                   "structured_outputs",
                                                   "guided_json",
                                                   "guided_regex",
                                                   "guided_choice",
                                                   "guided_grammar",
                                                   "stop_token_ids",
                                                   "skip_special_tokens",
                                                   "include_stop_str_in_output",
                                                   "add_special_tokens"};
  return kind == ApiKind::kChat ? chat : completion;
}

// `text` of a message's content: a string, null, or an array of {"type": "text", "text"} parts
// (joined with newlines).
absl::StatusOr<std::string> ContentText(const json& content, const std::string& param,
                                        ApiError* e) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Bad(e, param, absl::StrCat("'", param, "' must be a string or an array of parts"));
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string p = absl::StrCat(param, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Bad(e, p, absl::StrCat("'", p, "' must be an object with a 'type'"));
    }
    if (part["type"] != "text") {
      return Bad(e, p + ".type",
                 absl::StrCat("content part type '", part["type"].get<std::string>(),
                              "' is not supported (text only)"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Bad(e, p + ".text", absl::StrCat("'", p, ".text' must be a string"));
    }
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

absl::Status ParseMessages(const json& body, llm::v1::Chat* chat, ApiError* e) {
  if (!Present(body, "messages")) return Bad(e, "messages", "'messages' is required");
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) {
    return Bad(e, "messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string p = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(e, p, absl::StrCat("'", p, "' must be an object"));
    if (!m.contains("role") || !m["role"].is_string()) {
      return Bad(e, p + ".role", absl::StrCat("'", p, ".role' must be a string"));
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Bad(e, p + ".role",
                 absl::StrCat("'", p, ".role' is '", role,
                              "'; it must be system, developer, user, assistant or tool"));
    }
    auto* out = chat->add_messages();
    out->set_role(role);
    if (m.contains("content")) {
      auto text = ContentText(m["content"], p + ".content", e);
      if (!text.ok()) return text.status();
      out->set_content(*std::move(text));
    } else if (role != "assistant") {
      return Bad(e, p + ".content", absl::StrCat("'", p, ".content' is required"));
    }
    for (const char* key : {"name", "tool_call_id"}) {
      if (!Present(m, key)) continue;
      if (!m[key].is_string()) {
        return Bad(e, absl::StrCat(p, ".", key),
                   absl::StrCat("'", p, ".", key, "' must be a string"));
      }
      if (std::string_view(key) == "name") {
        out->set_name(m[key].get<std::string>());
      } else {
        out->set_tool_call_id(m[key].get<std::string>());
      }
    }
    if (Present(m, "tool_calls")) {
      if (!m["tool_calls"].is_array()) {
        return Bad(e, p + ".tool_calls", absl::StrCat("'", p, ".tool_calls' must be an array"));
      }
      out->set_tool_calls_json(m["tool_calls"].dump());
    }
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, llm::v1::GenerateRequest* r, ApiError* e) {
  if (!Present(body, "prompt")) return Bad(e, "prompt", "'prompt' is required");
  json prompt = body["prompt"];
  // A batch of one is the same as its element.
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    prompt = json(prompt[0]);
  }
  if (prompt.is_string()) {
    r->set_text(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    for (const json& id : prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad(e, "prompt", "'prompt' token ids must be non-negative integers");
      }
      r->mutable_token_ids()->add_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    return Bad(e, "prompt", "'prompt' token ids must be non-negative integers");
  }
  if (prompt.is_array() && prompt.size() > 1) {
    return Bad(e, "prompt", "'prompt' holds several prompts; send one per request");
  }
  if (prompt.is_array() && prompt.empty()) {
    return Bad(e, "prompt", "'prompt' is an empty array: give a string or at least one token id");
  }
  return Bad(e, "prompt", "'prompt' must be a string or an array of token ids");
}

// Parameters we cannot honour are refused by name rather than ignored.
absl::Status Unsupported(const json& body, ApiKind kind, ApiError* e) {
  if (kind == ApiKind::kCompletion) {
    int64_t best_of = 1;
    auto got = Int(body, "best_of", 1, std::numeric_limits<int32_t>::max(), &best_of, e);
    if (!got.ok()) return got.status();
    if (best_of != 1) return Bad(e, "best_of", "'best_of' must be 1");
    if (Present(body, "echo") && body["echo"] != false) {
      return Bad(e, "echo", "'echo' is not supported");
    }
    if (Present(body, "suffix") && body["suffix"] != "") {
      return Bad(e, "suffix", "'suffix' is not supported");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string OpenAiErrorBody(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

absl::StatusOr<ParsedRequest> ParseBody(ApiKind kind, std::string_view text,
                                        const ParseOptions& options, ApiError* e) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return Bad(e, "", "the request body is not valid JSON");
  }
  if (!body.is_object()) return Bad(e, "", "the request body must be a JSON object");
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    if (!Known(kind).count(key) && !IsReferenceField(kind, key)) {
      if (!options.ignore_unknown_fields) {
        return Bad(e, key, absl::StrCat("unknown parameter '", key, "'"));
      }
      LogIgnoredOnce(key, "not in the OpenAI reference (router.unknown_fields: ignore)");
      unknown.push_back(key);
      continue;
    }
    // Before anything walks it recursively (dump, the worker's template values).
    if (JsonNestsDeeperThan(value, kMaxJsonNesting - 1)) {
      return Bad(e, key,
                 absl::StrCat("'", key, "' nests deeper than ", kMaxJsonNesting, " levels"));
    }
  }
  ParsedRequest p;
  p.kind = kind;
  if (!Present(body, "model") || !body["model"].is_string()) {
    return Bad(e, "model", "'model' is required and must be a string");
  }
  p.model = body["model"].get<std::string>();
  p.request.set_model(p.model);
  if (auto s = Unsupported(body, kind, e); !s.ok()) return s;
  // n choices, 1 to 16 (as many as a worker takes a request).
  int64_t n = 1;
  if (auto got = Int(body, "n", 1, 16, &n, e); !got.ok()) return got.status();
  p.n = static_cast<int>(n);
  if (n > 1) p.request.set_n(static_cast<uint32_t>(n));
  for (const std::string& key : unknown) body.erase(key);
  llm::v1::GenerateRequest& r = p.request;
  if (auto s = ParseConstraint(body, r, e); !s.ok()) return s;
  if (kind == ApiKind::kChat) {
    llm::v1::Chat* chat = r.mutable_chat();
    if (auto s = ParseMessages(body, chat, e); !s.ok()) return s;
    if (auto s = ParseToolParams(body, *chat, e); !s.ok()) return s;
    bool add = true;
    auto got = Bool(body, "add_generation_prompt", &add, e);
    if (!got.ok()) return got.status();
    if (*got) chat->set_add_generation_prompt(add);
    if (Present(body, "chat_template_kwargs")) {
      if (!body["chat_template_kwargs"].is_object()) {
        return Bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
      }
      chat->set_template_kwargs_json(body["chat_template_kwargs"].dump());
    }
  } else {
    if (auto s = ParsePrompt(body, &r, e); !s.ok()) return s;
    bool add = true;
    auto got = Bool(body, "add_special_tokens", &add, e);
    if (!got.ok()) return got.status();
    if (*got) r.set_add_special_tokens(add);
  }
  if (auto s = ParseReferenceFields(body, kind, r, e); !s.ok()) return s;
  constexpr int64_t kU32 = std::numeric_limits<uint32_t>::max();
  int64_t max_tokens = 0;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (kind == ApiKind::kCompletion && std::string_view(key) != "max_tokens") continue;
    auto got = Int(body, key, 1, kU32, &max_tokens, e);
    if (!got.ok()) return got.status();
    if (*got) r.set_max_tokens(static_cast<uint32_t>(max_tokens));
  }
  if (kind == ApiKind::kCompletion && !Present(body, "max_tokens")) {
    r.set_max_tokens(16);  // the completions API's documented default
  }
  llm::v1::SamplingParams* s = r.mutable_sampling();
  double d = 0;
  struct FloatField {
    const char* key;
    void (llm::v1::SamplingParams::*set)(float);
  };
  for (const FloatField& f :
       {FloatField{"temperature", &llm::v1::SamplingParams::set_temperature},
        FloatField{"top_p", &llm::v1::SamplingParams::set_top_p},
        FloatField{"min_p", &llm::v1::SamplingParams::set_min_p},
        FloatField{"repetition_penalty", &llm::v1::SamplingParams::set_repetition_penalty},
        FloatField{"presence_penalty", &llm::v1::SamplingParams::set_presence_penalty},
        FloatField{"frequency_penalty", &llm::v1::SamplingParams::set_frequency_penalty}}) {
    auto got = Number(body, f.key, &d, e);
    if (!got.ok()) return got.status();
    if (*got) (s->*f.set)(static_cast<float>(d));
  }
  int64_t v = 0;
  auto got = Int(body, "top_k", -1, kU32, &v, e);
  if (!got.ok()) return got.status();
  if (*got && v > 0) s->set_top_k(static_cast<uint32_t>(v));  // -1 and 0: disabled
  got = Int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
            &v, e);
  if (!got.ok()) return got.status();
  if (*got) s->set_seed(static_cast<uint64_t>(v));
  if (Present(body, "stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      r.add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& x : stop) {
        if (!x.is_string()) return Bad(e, "stop", "'stop' must be a string or an array of strings");
        r.add_stop(x.get<std::string>());
      }
    } else {
      return Bad(e, "stop", "'stop' must be a string or an array of strings");
    }
  }
  if (Present(body, "stop_token_ids")) {
    const json& ids = body["stop_token_ids"];
    if (!ids.is_array()) return Bad(e, "stop_token_ids", "'stop_token_ids' must be an array");
    for (const json& x : ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad(e, "stop_token_ids", "'stop_token_ids' must hold non-negative integers");
      }
      r.add_stop_token_ids(x.get<int32_t>());
    }
  }
  bool flag = false;
  got = Bool(body, "ignore_eos", &flag, e);
  if (!got.ok()) return got.status();
  r.set_ignore_eos(*got && flag);
  got = Bool(body, "speculative", &flag, e);
  if (!got.ok()) return got.status();
  if (*got) r.set_speculative(flag);
  got = Bool(body, "skip_special_tokens", &flag, e);
  if (!got.ok()) return got.status();
  if (*got) r.mutable_stream()->set_skip_special_tokens(flag);
  got = Bool(body, "include_stop_str_in_output", &flag, e);
  if (!got.ok()) return got.status();
  if (*got) r.mutable_stream()->set_include_stop_str_in_output(flag);
  got = Bool(body, "stream", &p.stream, e);
  if (!got.ok()) return got.status();
  if (Present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return Bad(e, "stream_options", "'stream_options' must be an object");
    if (!p.stream) {
      return Bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    got = Bool(so, "include_usage", &p.include_usage, e);
    if (!got.ok()) {
      e->param = "stream_options.include_usage";
      return got.status();
    }
  }
  if (kind == ApiKind::kChat) {
    got = Bool(body, "logprobs", &p.logprobs, e);
    if (!got.ok()) return got.status();
    got = Int(body, "top_logprobs", 0, 20, &v, e);
    if (!got.ok()) return got.status();
    if (*got) {
      if (!p.logprobs) {
        return Bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
      }
      p.top_logprobs = static_cast<int>(v);
    }
  } else {
    got = Int(body, "logprobs", 0, 20, &v, e);
    if (!got.ok()) return got.status();
    if (*got) {
      p.logprobs = true;
      p.top_logprobs = static_cast<int>(v);
    }
  }
  // The worker reports the sampled token's logprob with at least one alternative.
  if (p.logprobs) r.set_logprobs(static_cast<uint32_t>(std::max(1, p.top_logprobs)));
  if (Present(body, "user") && !body["user"].is_string()) {
    return Bad(e, "user", "'user' must be a string");
  }
  return p;
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseOpenAiRequest(ApiKind kind, std::string_view text, ApiError* e,
                                                 const ParseOptions& options) {
  // Every field is checked before it is read; this catch is the backstop that keeps a check
  // missed in future from taking the router down with an uncaught exception.
  try {
    return ParseBody(kind, text, options, e);
  } catch (const json::exception& x) {
    return Bad(e, "", absl::StrCat("the request body could not be read: ", x.what()));
  }
}

ApiError ErrorFromGrpc(int code, const std::string& message, int64_t pushback_ms) {
  ApiError e;
  e.message = message;
  switch (code) {
    case 3: {  // INVALID_ARGUMENT: "field: what"
      e.http_status = 400;
      const size_t colon = message.find(':');
      std::string field = colon == std::string::npos ? "" : message.substr(0, colon);
      if (field.find(' ') != std::string::npos) field.clear();
      if (field.rfind("sampling.", 0) == 0) field = field.substr(9);
      // The API's parameter: the field's first name ("token_ids.ids[1]", "stop[0]").
      field = field.substr(0, field.find_first_of(".["));
      if (field == "text" || field == "token_ids") field = "prompt";
      if (field == "chat") field = "messages";
      if (field == "logprobs") field = "top_logprobs";
      if (field == "constraint") {
        field =
            message.rfind("constraint.grammar", 0) == 0 ? "structured_outputs" : "response_format";
      }
      e.param = field;
      break;
    }
    case 5:  // NOT_FOUND: a model nobody serves ("model: ...", the pool's or a worker's)
      e.http_status = 404;
      if (message.rfind("model:", 0) == 0) {
        e.param = "model";
        e.code = "model_not_found";
      }
      break;
    case 16:
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case 8:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.retry_after_ms = pushback_ms > 0 ? pushback_ms : 1000;
      break;
    case 14:
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    case 4:
      e.http_status = 504;
      e.type = "timeout";
      break;
    case 1:
      e.http_status = 499;
      e.type = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
  }
  return e;
}

// ---- OpenAiResponder ----

OpenAiResponder::OpenAiResponder(const ParsedRequest& request, std::string id, int64_t created)
    : kind_(request.kind),
      model_(request.model),
      include_usage_(request.include_usage),
      logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      id_(std::move(id)),
      created_(created),
      choices_(static_cast<size_t>(std::max(1, request.n))) {}

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

// A token's bytes (the worker's; from its text for a worker that sends none).
json Bytes(const llm::v1::TokenLogprob& t) {
  const std::string& s = t.bytes().empty() ? t.text() : t.bytes();
  json b = json::array();
  for (const unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// A logprob as a JSON number. JSON has no -inf (nlohmann writes null, which the OpenAI SDKs
// reject), so a token too unlikely for a float (a tiny temperature) reports -9999.0, the value
// OpenAI itself uses for that; NaN, from a broken row, does too.
constexpr float kUnlikelyLogprob = -9999.0f;
float JsonLogprob(float logprob) { return std::isfinite(logprob) ? logprob : kUnlikelyLogprob; }

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
  if (kind_ == ApiKind::kChat) {
    json content = json::array();
    for (const auto& lp : m.logprobs()) {
      json top = json::array();
      for (int i = 0; i < lp.top_size() && i < top_logprobs_; ++i) {
        top.push_back({{"token", lp.top(i).text()},
                       {"logprob", JsonLogprob(lp.top(i).logprob())},
                       {"bytes", Bytes(lp.top(i))}});
      }
      content.push_back({{"token", lp.sampled().text()},
                         {"logprob", JsonLogprob(lp.sampled().logprob())},
                         {"bytes", Bytes(lp.sampled())},
                         {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : m.logprobs()) {
    tokens.push_back(lp.sampled().text());
    lps.push_back(JsonLogprob(lp.sampled().logprob()));
    json alts = json::object();
    for (int i = 0; i < lp.top_size() && i < top_logprobs_; ++i) {
      alts[lp.top(i).text()] = JsonLogprob(lp.top(i).logprob());
    }
    top.push_back(alts);
    // In bytes of the output, token by token (the text a message carries lags what a partial
    // character holds back, and U+FFFD is 3 bytes where a token may hold 1).
    offsets.push_back(c.text_offset);
    c.text_offset +=
        lp.sampled().bytes().empty() ? lp.sampled().text().size() : lp.sampled().bytes().size();
  }
  return json{
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json OpenAiResponder::UsageJson() const {
  // The prompt once (every choice has the same), and of it the most any choice found cached.
  uint32_t prompt = 0, cached = 0, completion = 0, drafts = 0, accepted = 0;
  for (const Choice& c : choices_) {
    prompt = std::max(prompt, c.usage.prompt_tokens());
    cached = std::max(cached, c.usage.cached_prompt_tokens());
    completion += c.usage.completion_tokens();
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

std::string OpenAiResponder::OnStreamChat(const llm::v1::GenerateResponse& m, Choice& c,
                                          const std::string& finish) {
  std::string out;
  json chunk = Chunk();
  if (include_usage_) chunk["usage"] = nullptr;
  const json index = m.index();
  if (!c.role_sent || !m.text().empty() || m.logprobs_size() > 0) {
    json delta = json::object();
    if (!c.role_sent) delta["role"] = "assistant";
    delta["content"] = m.text();
    c.role_sent = true;
    chunk["choices"] = json::array({{{"index", index},
                                     {"delta", delta},
                                     {"logprobs", LogprobsJson(m, c)},
                                     {"finish_reason", nullptr}}});
    out += Event(chunk);
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

std::string OpenAiResponder::OnStreamMessage(const llm::v1::GenerateResponse& m) {
  Choice* c = ChoiceOf(m);
  if (c == nullptr) return "";
  if (m.has_usage()) c->usage = m.usage();
  const std::string finish = FinishReason(m.finish_reason());
  c->text += m.text();
  if (kind_ == ApiKind::kChat) return OnStreamChat(m, *c, finish);
  if (m.text().empty() && m.logprobs_size() == 0 && finish.empty()) return "";
  json chunk = Chunk();
  if (include_usage_) chunk["usage"] = nullptr;
  chunk["choices"] =
      json::array({{{"index", m.index()},
                    {"text", m.text()},
                    {"logprobs", LogprobsJson(m, *c)},
                    {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}}});
  return Event(chunk);
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

void OpenAiResponder::Accumulate(const llm::v1::GenerateResponse& m) {
  Choice* c = ChoiceOf(m);
  if (c == nullptr) return;
  if (m.has_usage()) c->usage = m.usage();
  if (logprobs_) {
    const json lp = LogprobsJson(m, *c);
    if (kind_ == ApiKind::kChat) {
      for (const auto& x : lp["content"]) c->logprob_entries.push_back(x);
    } else {
      for (const auto& x : lp["tokens"]) c->tokens.push_back(x);
      for (const auto& x : lp["token_logprobs"]) c->token_logprobs.push_back(x);
      for (const auto& x : lp["top_logprobs"]) c->top.push_back(x);
      for (const auto& x : lp["text_offset"]) c->offsets.push_back(x);
    }
  }
  c->text += m.text();
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
    choices.push_back(std::move(choice));
  }
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson();
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llm::router::openai
