#include "router/openai/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "router/openai/body_fields.h"
#include "router/openai/chat_params.h"
#include "router/openai/messages_api.h"
#include "router/openai/reference_fields.h"
#include "router/openai/responses_api.h"
#include "router/openai/structured_params.h"

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
                                             "continue_final_message",
                                             "skip_special_tokens",
                                             "include_stop_str_in_output",
                                             "parallel_tool_calls",
                                             "functions",
                                             "function_call",
                                             "return_token_ids",
                                             "prompt_logprobs"};
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
                                                   "add_special_tokens",
                                                   "return_token_ids",
                                                   "prompt_logprobs"};
  return kind == ApiKind::kChat ? chat : completion;
}

// Choices a request may have over its prompts: the worker's bound (GenerateRequest.more_prompts),
// checked here too, before the responder holds a place for each.
constexpr size_t kMaxChoicesInAll = 128;

// One prompt of a completion: a string or an array of token ids. `param` names it.
absl::StatusOr<llm::v1::BatchPrompt> OnePrompt(const json& prompt, const std::string& param,
                                               ApiError* e) {
  llm::v1::BatchPrompt out;
  if (prompt.is_string()) {
    out.set_text(prompt.get<std::string>());
    return out;
  }
  if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    for (const json& id : prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad(e, param, absl::StrCat("'", param, "' token ids must be non-negative integers"));
      }
      out.mutable_token_ids()->add_ids(id.get<int32_t>());
    }
    return out;
  }
  if (prompt.is_array() && prompt.empty()) {
    return Bad(e, param,
               absl::StrCat("'", param, "' is an empty array: give a string or token ids"));
  }
  return Bad(e, param, absl::StrCat("'", param, "' must be a string or an array of token ids"));
}

// The completion's prompt: a string, token ids, or a list of either (OpenAI's batch: each
// prompt gets n choices; the first is the request's own, the rest GenerateRequest.more_prompts).
// `prompts` gets their count.
absl::Status ParsePrompt(const json& body, llm::v1::GenerateRequest* r, int* prompts,
                         std::vector<std::string>* texts, ApiError* e) {
  if (!Present(body, "prompt")) return Bad(e, "prompt", "'prompt' is required");
  const json& prompt = body["prompt"];
  const bool list = prompt.is_array() && !prompt.empty() && !prompt[0].is_number();
  const size_t count = list ? prompt.size() : 1;
  if (count > kMaxChoicesInAll) {
    return Bad(e, "prompt",
               absl::StrCat("'prompt' lists ", count, " prompts; at most ", kMaxChoicesInAll,
                            " choices a request, n of each prompt"));
  }
  *prompts = static_cast<int>(count);
  for (size_t i = 0; i < count; ++i) {
    LLM_ASSIGN_OR_RETURN(
        llm::v1::BatchPrompt one,
        OnePrompt(list ? prompt[i] : prompt, list ? absl::StrCat("prompt[", i, "]") : "prompt", e));
    texts->push_back(one.has_token_ids() ? std::string() : one.text());
    if (i > 0) {
      *r->add_more_prompts() = std::move(one);
    } else if (one.has_token_ids()) {
      *r->mutable_token_ids() = std::move(*one.mutable_token_ids());
    } else {
      r->set_text(one.text());
    }
  }
  return absl::OkStatus();
}

// Parameters we cannot honour are refused by name rather than ignored.
absl::Status Unsupported(const json& body, ApiKind kind, ApiError* e) {
  if (kind == ApiKind::kCompletion) {
    int64_t best_of = 1;
    auto got = Int(body, "best_of", 1, std::numeric_limits<int32_t>::max(), &best_of, e);
    if (!got.ok()) return got.status();
    if (best_of != 1) return Bad(e, "best_of", "'best_of' must be 1");
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

// The chat's messages, tools and template switches, or the completion's prompt.
absl::Status ParseInput(const json& body, ApiKind kind, ParsedRequest& p, ApiError* e) {
  bool add = true;
  llm::v1::GenerateRequest& r = p.request;
  if (kind != ApiKind::kChat) {
    if (auto s = ParsePrompt(body, &r, &p.prompts, &p.prompt_texts, e); !s.ok()) return s;
    LLM_ASSIGN_OR_RETURN(const bool got, Bool(body, "add_special_tokens", &add, e));
    if (got) r.set_add_special_tokens(add);
    return absl::OkStatus();
  }
  return ParseChat(body, *r.mutable_chat(), e);
}

// max_tokens (and chat's max_completion_tokens, which wins); 16 for a completion without one.
absl::Status ParseMaxTokens(const json& body, ApiKind kind, ParsedRequest& p, ApiError* e) {
  llm::v1::GenerateRequest& r = p.request;
  int64_t max_tokens = 0;
  // A completion that echoes may ask for no output (the prompt's logprobs alone, as OpenAI's
  // legacy API and HELM ask): the worker computes one token, which the answer leaves out.
  const bool echo = kind == ApiKind::kCompletion && Present(body, "echo") &&
                    body["echo"].is_boolean() && body["echo"].get<bool>();
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (kind == ApiKind::kCompletion && std::string_view(key) != "max_tokens") continue;
    LLM_ASSIGN_OR_RETURN(const bool got, Int(body, key, echo ? 0 : 1,
                                             std::numeric_limits<uint32_t>::max(), &max_tokens, e));
    if (got) r.set_max_tokens(static_cast<uint32_t>(std::max<int64_t>(max_tokens, 1)));
    p.echo_only = got && max_tokens == 0;
  }
  if (kind == ApiKind::kCompletion && !Present(body, "max_tokens")) {
    r.set_max_tokens(16);  // the completions API's documented default
  }
  return absl::OkStatus();
}

// temperature, top_p, min_p, the penalties, top_k (-1 and 0: off) and seed.
absl::Status ParseSampling(const json& body, llm::v1::SamplingParams& s, ApiError* e) {
  struct FloatField {
    const char* key;
    void (llm::v1::SamplingParams::*set)(float);
  };
  double d = 0;
  for (const FloatField& f :
       {FloatField{"temperature", &llm::v1::SamplingParams::set_temperature},
        FloatField{"top_p", &llm::v1::SamplingParams::set_top_p},
        FloatField{"min_p", &llm::v1::SamplingParams::set_min_p},
        FloatField{"repetition_penalty", &llm::v1::SamplingParams::set_repetition_penalty},
        FloatField{"presence_penalty", &llm::v1::SamplingParams::set_presence_penalty},
        FloatField{"frequency_penalty", &llm::v1::SamplingParams::set_frequency_penalty}}) {
    LLM_ASSIGN_OR_RETURN(const bool got, Number(body, f.key, &d, e));
    if (got) (s.*f.set)(static_cast<float>(d));
  }
  int64_t v = 0;
  LLM_ASSIGN_OR_RETURN(bool got,
                       Int(body, "top_k", -1, std::numeric_limits<uint32_t>::max(), &v, e));
  if (got && v > 0) s.set_top_k(static_cast<uint32_t>(v));
  LLM_ASSIGN_OR_RETURN(got, Int(body, "seed", std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), &v, e));
  if (got) s.set_seed(static_cast<uint64_t>(v));
  return absl::OkStatus();
}

// stop (a string or strings) and stop_token_ids (non-negative int32s).
absl::Status ParseStops(const json& body, llm::v1::GenerateRequest& r, ApiError* e) {
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
  if (!Present(body, "stop_token_ids")) return absl::OkStatus();
  const json& ids = body["stop_token_ids"];
  if (!ids.is_array()) return Bad(e, "stop_token_ids", "'stop_token_ids' must be an array");
  for (const json& x : ids) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
        x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Bad(e, "stop_token_ids", "'stop_token_ids' must hold non-negative integers");
    }
    r.add_stop_token_ids(x.get<int32_t>());
  }
  return absl::OkStatus();
}

// The boolean switches of the request and its stream, and stream / stream_options.
absl::Status ParseSwitches(const json& body, ParsedRequest& p, ApiError* e) {
  llm::v1::GenerateRequest& r = p.request;
  bool flag = false;
  LLM_ASSIGN_OR_RETURN(bool got, Bool(body, "ignore_eos", &flag, e));
  r.set_ignore_eos(got && flag);
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "speculative", &flag, e));
  if (got) r.set_speculative(flag);
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "skip_special_tokens", &flag, e));
  if (got) r.mutable_stream()->set_skip_special_tokens(flag);
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "include_stop_str_in_output", &flag, e));
  if (got) r.mutable_stream()->set_include_stop_str_in_output(flag);
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "return_token_ids", &p.return_token_ids, e));
  if (p.return_token_ids) r.mutable_stream()->set_include_prompt_ids(true);
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "stream", &p.stream, e));
  if (!Present(body, "stream_options")) return absl::OkStatus();
  const json& so = body["stream_options"];
  if (!so.is_object()) return Bad(e, "stream_options", "'stream_options' must be an object");
  if (!p.stream) {
    return Bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  for (const char* key : {"include_usage", "continuous_usage_stats"}) {
    bool* out = std::string_view(key) == "include_usage" ? &p.include_usage : &p.continuous_usage;
    if (auto got_it = Bool(so, key, out, e); !got_it.ok()) {
      e->param = absl::StrCat("stream_options.", key);
      return got_it.status();
    }
  }
  // As vLLM: usage in every chunk needs usage asked for at all.
  p.continuous_usage = p.continuous_usage && p.include_usage;
  if (p.continuous_usage) r.mutable_stream()->set_continuous_usage(true);
  return absl::OkStatus();
}

// Chat's logprobs (bool) and top_logprobs, or the completion's logprobs (a count); the worker
// reports the sampled token's logprob with at least one alternative.
absl::Status ParseLogprobs(const json& body, ApiKind kind, ParsedRequest& p, ApiError* e) {
  int64_t v = 0;
  if (kind == ApiKind::kChat) {
    LLM_ASSIGN_OR_RETURN(bool got, Bool(body, "logprobs", &p.logprobs, e));
    LLM_ASSIGN_OR_RETURN(got, Int(body, "top_logprobs", 0, 20, &v, e));
    if (got) {
      if (!p.logprobs) {
        return Bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
      }
      p.top_logprobs = static_cast<int>(v);
    }
  } else {
    LLM_ASSIGN_OR_RETURN(const bool got, Int(body, "logprobs", 0, 20, &v, e));
    if (got) {
      p.logprobs = true;
      p.top_logprobs = static_cast<int>(v);
    }
  }
  if (p.logprobs) p.request.set_logprobs(static_cast<uint32_t>(std::max(1, p.top_logprobs)));
  // vLLM's prompt_logprobs: each prompt token's logprob and rank, with n alternatives.
  LLM_ASSIGN_OR_RETURN(const bool prompt, Int(body, "prompt_logprobs", 0, 20, &v, e));
  if (prompt) {
    p.prompt_logprobs = static_cast<int>(v);
    p.request.set_prompt_logprobs(static_cast<uint32_t>(v));
  }
  if (kind != ApiKind::kCompletion) return absl::OkStatus();
  // echo: the prompt before the output, and with logprobs its tokens' (the first's null), as
  // OpenAI answers; the worker's prompt_logprobs give the tokens and their texts.
  LLM_ASSIGN_OR_RETURN(const bool got, Bool(body, "echo", &p.echo, e));
  // The worker's prompt entries are needed for logprobs, or for a token-id prompt's text; a
  // text prompt alone is echoed as sent (no prompt logprobs: the prefix cache still serves it).
  const bool token_prompt = std::any_of(p.prompt_texts.begin(), p.prompt_texts.end(),
                                        [](const std::string& t) { return t.empty(); });
  if (got && p.echo && (p.logprobs || token_prompt)) {
    p.request.set_prompt_logprobs(
        static_cast<uint32_t>(std::max(p.top_logprobs, p.prompt_logprobs)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedRequest> ParseBody(ApiKind kind, std::string_view text,
                                        const ParseOptions& options, ApiError* e) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return Bad(e, "", "the request body is not valid JSON");
  }
  if (!body.is_object()) return Bad(e, "", "the request body must be a JSON object");
  const auto known = [kind](const std::string& key) {
    return Known(kind).count(key) > 0 || IsReferenceField(kind, key);
  };
  if (auto s = CheckFields(body, known, options, e); !s.ok()) return s;
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
  llm::v1::GenerateRequest& r = p.request;
  if (auto s = ParseConstraint(body, r, e); !s.ok()) return s;
  if (auto s = ParseInput(body, kind, p, e); !s.ok()) return s;
  if (static_cast<size_t>(p.prompts) * static_cast<size_t>(p.n) > kMaxChoicesInAll) {
    return Bad(e, "prompt",
               absl::StrCat(p.prompts, " prompts of n = ", p.n, " are ", p.prompts * p.n,
                            " choices; at most ", kMaxChoicesInAll, " a request"));
  }
  if (auto s = ParseReferenceFields(body, kind, r, e); !s.ok()) return s;
  if (auto s = ParseMaxTokens(body, kind, p, e); !s.ok()) return s;
  if (auto s = ParseSampling(body, *r.mutable_sampling(), e); !s.ok()) return s;
  if (auto s = ParseStops(body, r, e); !s.ok()) return s;
  if (auto s = ParseSwitches(body, p, e); !s.ok()) return s;
  if (auto s = ParseLogprobs(body, kind, p, e); !s.ok()) return s;
  if (Present(body, "user") && !body["user"].is_string()) {
    return Bad(e, "user", "'user' must be a string");
  }
  return p;
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseOpenAiRequest(ApiKind kind, std::string_view text, ApiError* e,
                                                 const ParseOptions& options) {
  if (kind == ApiKind::kResponses) return ParseResponsesRequest(text, e, options);
  if (kind == ApiKind::kMessages) return ParseMessagesRequest(text, e, options);
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
      // A later prompt of a list: "more_prompts[1].text" is the list's "prompt[2]".
      int64_t later = 0;
      if (field.rfind("more_prompts[", 0) == 0 &&
          absl::SimpleAtoi(field.substr(13, field.find(']') - 13), &later) && later >= 0) {
        e.param = absl::StrCat("prompt[", later + 1, "]");
        break;
      }
      // The API's parameter: the field's first name ("token_ids.ids[1]", "stop[0]").
      field = field.substr(0, field.find_first_of(".["));
      if (field == "text" || field == "token_ids" || field == "more_prompts") field = "prompt";
      if (field == "chat") field = "messages";
      if (field == "logprobs") field = "top_logprobs";
      if (field == "prompt_logprobs") field = "echo";
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

}  // namespace llm::router::openai
