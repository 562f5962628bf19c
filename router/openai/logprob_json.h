// Logprobs as OpenAI's JSON writes them, shared by the chat and Responses answers.
#ifndef LLM_ROUTER_OPENAI_LOGPROB_JSON_H_
#define LLM_ROUTER_OPENAI_LOGPROB_JSON_H_

#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {

// A logprob as a JSON number. JSON has no -inf (nlohmann writes null, which the OpenAI SDKs
// reject), so a token too unlikely for a float (a tiny temperature) reports -9999.0, the value
// OpenAI itself uses for that; NaN, from a broken row, does too.
float JsonLogprob(float logprob);

// A token's bytes as a JSON array of numbers (the worker's; from its text for a worker that
// sends none).
nlohmann::ordered_json TokenBytes(const llm::v1::TokenLogprob& t);

// `m`'s tokens as chat's logprobs.content entries (the Responses API's output_text.logprobs
// too): {"token", "logprob", "bytes", "top_logprobs": at most `top` of {"token", "logprob",
// "bytes"}}.
nlohmann::ordered_json LogprobEntries(const llm::v1::GenerateResponse& m, int top);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_LOGPROB_JSON_H_
