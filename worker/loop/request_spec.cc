#include "worker/loop/request_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::loop {
namespace {

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckIds(const std::string& field, const std::vector<int32_t>& ids, int32_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat(ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// The prompt, whichever form it takes: chat messages, text or token ids.
absl::Status CheckPrompt(const GenerateSpec& s, const RequestLimits& l) {
  if (s.chat) return ValidateChat(s.chat->messages, l);
  if (!s.has_text) {
    if (s.token_ids.empty()) return Invalid("token_ids", "the prompt is empty");
    return CheckIds("token_ids.ids", s.token_ids, l.vocab_size);
  }
  if (s.text.empty()) return Invalid("text", "the prompt is empty");
  if (s.text.size() > l.max_prompt_bytes) {
    return Invalid("text", absl::StrCat(s.text.size(), " bytes is more than the limit of ",
                                        l.max_prompt_bytes));
  }
  if (const size_t bad = FirstInvalidUtf8(s.text); bad != s.text.size()) {
    return Invalid("text", absl::StrCat("not valid UTF-8 (byte ", bad, ")"));
  }
  return absl::OkStatus();
}

// Stop strings and stop ids: their counts, sizes and encodings.
absl::Status CheckStops(const GenerateSpec& s, const RequestLimits& l) {
  if (static_cast<int32_t>(s.stop.size()) > l.max_stop_strings) {
    return Invalid("stop", absl::StrCat(s.stop.size(), " strings; at most ", l.max_stop_strings));
  }
  for (size_t i = 0; i < s.stop.size(); ++i) {
    const std::string field = absl::StrCat("stop[", i, "]");
    if (s.stop[i].empty()) return Invalid(field, "empty");
    if (s.stop[i].size() > l.max_stop_string_bytes) {
      return Invalid(field, absl::StrCat("longer than ", l.max_stop_string_bytes, " bytes"));
    }
    if (!IsValidUtf8(s.stop[i])) return Invalid(field, "not valid UTF-8");
  }
  if (static_cast<int32_t>(s.stop_token_ids.size()) > l.max_stop_token_ids) {
    return Invalid("stop_token_ids",
                   absl::StrCat(s.stop_token_ids.size(), " ids; at most ", l.max_stop_token_ids));
  }
  return CheckIds("stop_token_ids", s.stop_token_ids, l.vocab_size);
}

}  // namespace

absl::Status ValidateChat(const nlohmann::ordered_json& m, const RequestLimits& l) {
  if (!m.is_array() || m.empty()) return Invalid("chat.messages", "the conversation is empty");
  size_t bytes = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string() ||
        m[i]["role"].get_ref<const std::string&>().empty()) {
      return Invalid(absl::StrCat("chat.messages[", i, "].role"), "missing");
    }
    for (const auto& [key, value] : m[i].items()) {
      if (!value.is_string()) continue;
      const std::string& text = value.get_ref<const std::string&>();
      bytes += text.size();
      if (const size_t bad = FirstInvalidUtf8(text); bad != text.size()) {
        return Invalid(absl::StrCat("chat.messages[", i, "].", key),
                       absl::StrCat("not valid UTF-8 (byte ", bad, ")"));
      }
    }
  }
  if (bytes > l.max_prompt_bytes) {
    return Invalid("chat.messages",
                   absl::StrCat(bytes, " bytes is more than the limit of ", l.max_prompt_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateSpec(const GenerateSpec& s, const RequestLimits& l) {
  if (s.request_id.size() > l.max_request_id_bytes) {
    return Invalid("request_id", absl::StrCat("longer than ", l.max_request_id_bytes, " bytes"));
  }
  if (!IsValidUtf8(s.request_id)) return Invalid("request_id", "not valid UTF-8");
  if (s.constraint.enabled() && s.ignore_eos) {
    // A constrained output ends by a stop token once it is complete.
    return Invalid("ignore_eos", "cannot be combined with a constraint");
  }
  if (s.constraint.enabled() && s.stop_token_ids.empty() && l.eos_token_ids.empty()) {
    // Else a complete output would have no token left to take: every id masked.
    return Invalid("stop_token_ids",
                   "a constrained output ends by a stop token, and the model has no EOS id: "
                   "name one");
  }
  if (absl::Status st = CheckPrompt(s, l); !st.ok()) return st;
  if (s.max_tokens < 0) return Invalid("max_tokens", "must be >= 0");
  if (l.max_tokens_cap > 0 && s.max_tokens > l.max_tokens_cap && !s.max_tokens_fit) {
    return Invalid("max_tokens",
                   absl::StrCat(s.max_tokens, " is more than the limit of ", l.max_tokens_cap));
  }
  if (s.max_tokens >= l.max_context && !s.max_tokens_fit) {
    return Invalid("max_tokens", absl::StrCat(s.max_tokens, " leaves no room for a prompt in the ",
                                              l.max_context, "-token context"));
  }
  if (absl::Status st = s.sampling.Validate(l.vocab_size); !st.ok()) return st;
  if (absl::Status st = CheckStops(s, l); !st.ok()) return st;
  if (absl::Status st = CheckIds("oracle_ids", s.oracle_ids, l.vocab_size); !st.ok()) return st;
  if (s.logprobs < 0 || s.logprobs > l.max_logprobs) {
    return Invalid("logprobs", absl::StrCat(s.logprobs, " is outside [0, ", l.max_logprobs, "]"));
  }
  if (s.prompt_logprobs < -1 || s.prompt_logprobs > l.max_logprobs) {
    return Invalid("prompt_logprobs",
                   absl::StrCat(s.prompt_logprobs, " is outside [0, ", l.max_logprobs, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::EngineRequest> BuildEngineRequest(const GenerateSpec& s,
                                                         std::vector<int32_t> prompt_ids,
                                                         const RequestLimits& l) {
  const std::string prompt_field = s.chat ? "chat" : s.has_text ? "text" : "token_ids";
  const auto prompt = static_cast<int32_t>(prompt_ids.size());
  if (prompt == 0) return Invalid(prompt_field, "the prompt is empty");
  const int32_t context = l.accepted_context();
  if (prompt >= context) {
    return Invalid(prompt_field,
                   absl::StrCat("the prompt is ", prompt, " tokens; the ",
                                context < l.max_context ? "KV cache holds " : "context is ",
                                context, " (prompt + max_tokens)"));
  }
  if (l.max_prompt_tokens > 0 && prompt > l.max_prompt_tokens) {
    return Invalid(prompt_field, absl::StrCat("the prompt is ", prompt, " tokens; the limit is ",
                                              l.max_prompt_tokens));
  }
  // Validated above: max_tokens < max_context fits an int32 (or is lowered to it).
  int32_t max_tokens = static_cast<int32_t>(std::min<int64_t>(s.max_tokens, l.max_context));
  if (s.max_tokens_fit && max_tokens > 0) {  // what the context, the cache and the limit allow
    max_tokens = std::min(max_tokens, context - prompt);
    if (l.max_tokens_cap > 0) max_tokens = std::min(max_tokens, l.max_tokens_cap);
  } else if (max_tokens == 0) {  // the rest of what the request may hold
    max_tokens = context - prompt;
    if (l.default_max_tokens > 0) max_tokens = std::min(max_tokens, l.default_max_tokens);
    if (l.max_tokens_cap > 0) max_tokens = std::min(max_tokens, l.max_tokens_cap);
  } else if (prompt + max_tokens > l.max_context) {
    return Invalid("max_tokens",
                   absl::StrCat("prompt (", prompt, " tokens) + max_tokens (", max_tokens,
                                ") exceeds the context of ", l.max_context));
  }
  if (prompt + max_tokens > l.kv_capacity_tokens) {
    return Invalid("max_tokens",
                   absl::StrCat("prompt (", prompt, " tokens) + max_tokens (", max_tokens,
                                ") exceeds the KV cache's ", l.kv_capacity_tokens, " tokens"));
  }
  engine::EngineRequest r;
  r.prompt_ids = std::move(prompt_ids);
  r.max_tokens = max_tokens;
  r.sampling = s.sampling;
  r.stop_token_ids = s.stop_token_ids;
  if (!s.ignore_eos) {
    for (int32_t eos : l.eos_token_ids) {
      if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), eos) ==
          r.stop_token_ids.end()) {
        r.stop_token_ids.push_back(eos);
      }
    }
  }
  r.want_logprobs = s.logprobs > 0;
  r.speculate = s.speculative;
  r.oracle_ids = s.oracle_ids;
  r.constraint = s.compiled;
  r.num_top_logprobs = static_cast<int32_t>(s.logprobs);
  r.prompt_logprobs = static_cast<int32_t>(s.prompt_logprobs);
  return r;
}

}  // namespace llm::loop
