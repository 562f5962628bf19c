// The OpenAI reference's fields beyond the translator's own (router/openai/reference_fields.h):
// each accepted with its rule, a wrong type a 400 naming it, unknown fields a 400 unless
// router.unknown_fields is ignore.
#include "router/openai/reference_fields.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::json;

json Chat() { return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }

absl::StatusOr<ParsedRequest> Parse(const json& body, ApiError* e, bool ignore_unknown = false,
                                    ApiKind kind = ApiKind::kChat) {
  ParseOptions o;
  o.ignore_unknown_fields = ignore_unknown;
  return ParseOpenAiRequest(kind, body.dump(), e, o);
}

TEST(ReferenceFieldsTest, EveryFieldOfTodaysChatReferenceIsAccepted) {
  json body = Chat();
  body["service_tier"] = "auto";
  body["verbosity"] = "low";
  body["safety_identifier"] = "user-123";
  body["prediction"] = {{"type", "content"}, {"content", "hi"}};
  body["web_search_options"] = json::object();
  body["modalities"] = {"text"};
  body["audio"] = nullptr;
  body["reasoning_effort"] = "high";
  body["prompt_cache_key"] = "tenant-7";
  body["logit_bias"] = {{"50256", -100}, {"7", 2.5}};
  ApiError e;
  auto p = Parse(body, &e);
  ASSERT_TRUE(p.ok()) << e.param << ": " << e.message;
  const auto& bias = p->request.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 2u);
  EXPECT_EQ(bias.at(50256), -100.0f);
  EXPECT_EQ(bias.at(7), 2.5f);
  EXPECT_EQ(p->request.prompt_cache_key(), "tenant-7");
  EXPECT_EQ(json::parse(p->request.chat().template_kwargs_json())["reasoning_effort"], "high");
}

TEST(ReferenceFieldsTest, ChatTemplateKwargsWinOverReasoningEffort) {
  json body = Chat();
  body["reasoning_effort"] = "high";
  body["chat_template_kwargs"] = {{"reasoning_effort", "low"}, {"x", 1}};
  ApiError e;
  auto p = Parse(body, &e);
  ASSERT_TRUE(p.ok()) << e.message;
  const json kwargs = json::parse(p->request.chat().template_kwargs_json());
  EXPECT_EQ(kwargs["reasoning_effort"], "low");
  EXPECT_EQ(kwargs["x"], 1);
}

TEST(ReferenceFieldsTest, CompletionsTakeALogitBias) {
  ApiError e;
  auto p = Parse({{"model", "m"}, {"prompt", "x"}, {"logit_bias", {{"3", 1}}}}, &e, false,
                 ApiKind::kCompletion);
  ASSERT_TRUE(p.ok()) << e.message;
  EXPECT_EQ(p->request.sampling().logit_bias().at(3), 1.0f);
}

TEST(ReferenceFieldsTest, WrongValuesAre400sNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"logit_bias", {{"x", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"5", 101}}}}, "logit_bias"},
      {{{"logit_bias", {{"-1", 1}}}}, "logit_bias"},
      {{{"logit_bias", 3}}, "logit_bias"},
      {{{"modalities", {"text", "audio"}}}, "modalities"},
      {{{"audio", {{"voice", "alloy"}}}}, "audio"},
      {{{"service_tier", 1}}, "service_tier"},
      {{{"prediction", "text"}}, "prediction"},
      {{{"reasoning_effort", 2}}, "reasoning_effort"},
      {{{"prompt_cache_key", {"a"}}}, "prompt_cache_key"},
  };
  for (const auto& [extra, param] : cases) {
    json body = Chat();
    body.update(extra);
    ApiError e;
    EXPECT_FALSE(Parse(body, &e).ok()) << body.dump();
    EXPECT_EQ(e.param, param) << body.dump() << ": " << e.message;
    EXPECT_EQ(e.http_status, 400);
  }
}

TEST(ReferenceFieldsTest, UnknownFieldsAre400sUnlessIgnored) {
  json body = Chat();
  body["frobnicate"] = true;
  ApiError e;
  EXPECT_FALSE(Parse(body, &e).ok());
  EXPECT_EQ(e.param, "frobnicate");
  EXPECT_EQ(e.message, "unknown parameter 'frobnicate'");
  ApiError e2;
  auto p = Parse(body, &e2, /*ignore_unknown=*/true);
  ASSERT_TRUE(p.ok()) << e2.message;
  EXPECT_EQ(p->request.chat().messages_size(), 1);
  // A completions-only field on chat is unknown there.
  body = Chat();
  body["echo"] = false;
  EXPECT_FALSE(Parse(body, &e).ok());
  EXPECT_EQ(e.param, "echo");
}

}  // namespace
}  // namespace llm::router::openai
