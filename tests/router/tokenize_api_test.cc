// The /tokenize and /detokenize bodies (router/openai/tokenize_api.h): vLLM's shapes to
// llm.v1 and back, a bad field a 400 naming it.
#include "router/openai/tokenize_api.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {
namespace {

TEST(TokenizeApiTest, TokenizeBodies) {
  ApiError e;
  auto r =
      ParseTokenizeBody(R"({"model": "tiny", "prompt": "Hi", "add_special_tokens": false})", &e);
  ASSERT_TRUE(r.ok()) << e.message;
  EXPECT_EQ(r->model(), "tiny");
  EXPECT_EQ(r->text(), "Hi");
  ASSERT_TRUE(r->has_add_special_tokens());
  EXPECT_FALSE(r->add_special_tokens());
  r = ParseTokenizeBody(R"({"prompt": ""})", &e);  // no model: the only one; default specials
  ASSERT_TRUE(r.ok()) << e.message;
  EXPECT_EQ(r->model(), "");
  EXPECT_FALSE(r->has_add_special_tokens());

  const struct {
    const char* body;
    const char* param;
  } bad[] = {
      {R"({"model": "m"})", "prompt"},
      {R"({"prompt": 3})", "prompt"},
      {R"({"prompt": "x", "model": 1})", "model"},
      {R"({"prompt": "x", "add_special_tokens": "yes"})", "add_special_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "x"})", "prompt"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": 3})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice"},
      {R"({"prompt": "x", "temperature": 0})", "temperature"},
      {R"([1, 2])", ""},
      {R"({"prompt": )", ""}};
  for (const auto& c : bad) {
    ApiError err;
    EXPECT_FALSE(ParseTokenizeBody(c.body, &err).ok()) << c.body;
    EXPECT_EQ(err.http_status, 400) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body;
  }
  ParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  EXPECT_TRUE(ParseTokenizeBody(R"({"prompt": "x", "temperature": 0})", &e, lenient).ok());
}

// vLLM's chat form: the conversation as the chat API takes it, for the worker to render.
TEST(TokenizeApiTest, ChatTokenizeBodies) {
  ApiError e;
  auto r = ParseTokenizeBody(R"({"model": "tiny", "messages": [{"role": "developer",
      "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
      "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false},
      "tools": [{"type": "function", "function": {"name": "f"}}]})",
                             &e);
  ASSERT_TRUE(r.ok()) << e.message;
  ASSERT_TRUE(r->has_chat());
  EXPECT_EQ(r->text(), "");
  ASSERT_EQ(r->chat().messages_size(), 2);
  EXPECT_EQ(r->chat().messages(0).role(), "system");
  EXPECT_EQ(r->chat().messages(1).content(), "Hi");
  ASSERT_TRUE(r->chat().has_add_generation_prompt());
  EXPECT_FALSE(r->chat().add_generation_prompt());
  EXPECT_EQ(nlohmann::json::parse(r->chat().template_kwargs_json())["enable_thinking"], false);
  EXPECT_EQ(nlohmann::json::parse(r->chat().tools_json())[0]["function"]["name"], "f");
  EXPECT_FALSE(r->has_add_special_tokens());  // the worker's default for a chat: false
  r = ParseTokenizeBody(R"({"prompt": "x"})", &e);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_chat());
  // Nesting is bounded before anything walks it.
  std::string deep = R"({"messages": [{"role": "user", "content": "x", "name": )";
  deep += std::string(300, '[') + std::string(300, ']') + "}]}";
  ApiError err;
  EXPECT_FALSE(ParseTokenizeBody(deep, &err).ok());
  EXPECT_EQ(err.param, "messages");
}

TEST(TokenizeApiTest, DetokenizeBodies) {
  ApiError e;
  auto r = ParseDetokenizeBody(R"({"model": "tiny", "tokens": [1, 2, 300]})", &e);
  ASSERT_TRUE(r.ok()) << e.message;
  EXPECT_EQ(r->model(), "tiny");
  EXPECT_EQ(std::vector<int32_t>(r->token_ids().begin(), r->token_ids().end()),
            (std::vector<int32_t>{1, 2, 300}));
  for (const char* body : {R"({"tokens": [1, -2]})", R"({"tokens": [1, 2.5]})",
                           R"({"tokens": [1, 4294967296]})", R"({"tokens": "1"})", R"({})"}) {
    ApiError err;
    EXPECT_FALSE(ParseDetokenizeBody(body, &err).ok()) << body;
    EXPECT_EQ(err.http_status, 400) << body;
    EXPECT_EQ(err.param.rfind("tokens", 0), 0u) << body << ": " << err.param;
  }
}

TEST(TokenizeApiTest, ResponseBodies) {
  llm::v1::TokenizeResponse t;
  t.add_token_ids(5);
  t.add_token_ids(7);
  t.set_max_context_tokens(2048);
  EXPECT_EQ(nlohmann::json::parse(TokenizeResponseBody(t)),
            nlohmann::json::parse(R"({"count": 2, "max_model_len": 2048, "tokens": [5, 7]})"));
  llm::v1::DetokenizeResponse d;
  d.set_text("caf\xc3");  // cut inside a character
  EXPECT_EQ(nlohmann::json::parse(DetokenizeResponseBody(d))["prompt"], "caf\xef\xbf\xbd");
}

}  // namespace
}  // namespace llm::router::openai
