// Anthropic's Messages API's translation (pure, no socket): a body's system, messages (text,
// tool_use, tool_result and thinking blocks), tools, tool_choice, output_config and thinking as
// the chat request they mean; errors named as the Messages API names its fields, and its error
// body; and the Message built from worker messages, streamed (its events, in order, indexed)
// and not, the stream's text and calls the same as the whole Message's.
#include "router/openai/messages_api.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/router/body_mutations.h"
#include "tests/router/sse_events.h"

namespace llm::router::openai {
namespace {

using nlohmann::json;

ParsedRequest Parse(const std::string& body, bool count_tokens = false) {
  ApiError error;
  auto parsed = ParseMessagesRequest(body, &error, {}, count_tokens);
  EXPECT_TRUE(parsed.ok()) << error.param << ": " << error.message;
  return parsed.ok() ? *parsed : ParsedRequest{};
}

ApiError ErrorOf(const std::string& body) {
  ApiError error;
  EXPECT_FALSE(ParseMessagesRequest(body, &error).ok()) << body;
  EXPECT_EQ(error.http_status, 400);
  return error;
}

TEST(MessagesParseTest, SystemAndStringContentAreASystemAndAUserMessage) {
  const ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 40, "system": "Be brief.",
      "messages": [{"role": "user", "content": "Hi"}], "temperature": 0.5, "top_p": 0.9,
      "top_k": 7, "stop_sequences": ["END", "###"], "metadata": {"user_id": "u-1"},
      "cache_control": {"type": "ephemeral"}, "service_tier": "auto"})");
  EXPECT_EQ(p.kind, ApiKind::kMessages);
  EXPECT_EQ(p.model, "m");
  EXPECT_FALSE(p.stream);
  EXPECT_FALSE(p.echo_only);
  const llm::v1::Chat& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(0).content(), "Be brief.");
  EXPECT_EQ(chat.messages(1).role(), "user");
  EXPECT_EQ(chat.messages(1).content(), "Hi");
  EXPECT_FALSE(chat.continue_final_message());
  EXPECT_FALSE(chat.has_add_generation_prompt());  // the generation prompt: the default
  EXPECT_EQ(p.request.max_tokens(), 40u);
  EXPECT_FLOAT_EQ(p.request.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(p.request.sampling().top_p(), 0.9f);
  EXPECT_EQ(p.request.sampling().top_k(), 7u);
  ASSERT_EQ(p.request.stop_size(), 2);
  EXPECT_EQ(p.request.stop(0), "END");
  EXPECT_EQ(p.request.stop(1), "###");
  EXPECT_FALSE(p.request.stream().continuous_usage());
  EXPECT_FALSE(p.request.has_constraint());
}

// `system` as text blocks (with cache_control), and two user turns in a row: one user turn, as
// the API reads them.
TEST(MessagesParseTest, SystemBlocksAndConsecutiveUserTurnsAreOneMessageEach) {
  const ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 5,
      "system": [{"type": "text", "text": "Be brief."},
                 {"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
      "messages": [{"role": "user", "content": "Hello."},
                   {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                                {"type": "text", "text": "In Oslo."}]}]})");
  const llm::v1::Chat& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(0).content(), "Be brief.\nBe kind.");
  EXPECT_EQ(chat.messages(1).role(), "user");
  EXPECT_EQ(chat.messages(1).content(), "Hello.\nWeather?\nIn Oslo.");
}

// An assistant turn's text blocks are the one text the model wrote: joined as they are (a
// prefill is continued after exactly that text).
TEST(MessagesParseTest, AnAssistantTurnsBlocksAreOneText) {
  const llm::v1::Chat chat = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
      {"role": "user", "content": "Go on."},
      {"role": "assistant", "content": [{"type": "text", "text": "The answer"},
                                        {"type": "text", "text": " is"}]}]})")
                                 .request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(1).content(), "The answer is");
  EXPECT_TRUE(chat.continue_final_message());
}

// A second turn of a tool conversation: the assistant's thinking, text and two calls, then the
// user's results (one an error) and more text.
constexpr const char* kToolTurns = R"({"model": "m", "max_tokens": 100, "messages": [
    {"role": "user", "content": "Weather in Oslo and Bergen?"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
      {"type": "redacted_thinking", "data": "xyz"},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
      {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Bergen"}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3 C"},
      {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
       "content": [{"type": "text", "text": "no station"}]},
      {"type": "text", "text": "Thanks."}]}],
    "tools": [{"name": "weather", "description": "Weather now", "input_schema":
      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]})";

TEST(MessagesParseTest, ToolUseAndToolResultBlocksAreCallsAndToolMessages) {
  const llm::v1::Chat chat = Parse(kToolTurns).request.chat();
  ASSERT_EQ(chat.messages_size(), 5);
  EXPECT_EQ(chat.messages(0).role(), "user");
  EXPECT_EQ(chat.messages(1).role(), "assistant");
  EXPECT_EQ(chat.messages(1).content(), "Checking.");  // no thinking in it: that is apart
  EXPECT_EQ(chat.messages(1).reasoning_content(), "Two cities.");
  const json calls = json::parse(chat.messages(1).tool_calls_json());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["id"], "toolu_1");
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(calls[1]["id"], "toolu_2");
  EXPECT_EQ(json::parse(calls[1]["function"]["arguments"].get<std::string>())["city"], "Bergen");
  EXPECT_EQ(chat.messages(2).role(), "tool");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "toolu_1");
  EXPECT_EQ(chat.messages(2).content(), "-3 C");
  EXPECT_EQ(chat.messages(3).role(), "tool");
  EXPECT_EQ(chat.messages(3).tool_call_id(), "toolu_2");
  EXPECT_EQ(chat.messages(3).content().rfind("Error:", 0), 0u) << chat.messages(3).content();
  EXPECT_EQ(chat.messages(3).content(), "Error:\nno station");
  EXPECT_EQ(chat.messages(4).role(), "user");  // the text after the results: its own message
  EXPECT_EQ(chat.messages(4).content(), "Thanks.");
  const json tools = json::parse(chat.tools_json());
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["type"], "function");
  EXPECT_EQ(tools[0]["function"]["name"], "weather");
  EXPECT_EQ(tools[0]["function"]["description"], "Weather now");
  EXPECT_EQ(tools[0]["function"]["parameters"]["required"][0], "city");
  EXPECT_EQ(chat.tool_choice().mode(), llm::v1::ToolChoice::TOOL_CHOICE_AUTO);
  EXPECT_FALSE(chat.has_parallel_tool_calls());
}

// An assistant turn of calls only has no text.
TEST(MessagesParseTest, AnAssistantTurnOfCallsOnlyHasNoText) {
  const llm::v1::Chat chat = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                         "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}]})")
                                 .request.chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(1).content(), "");
  EXPECT_EQ(json::parse(chat.messages(1).tool_calls_json())[0]["function"]["arguments"], "{}");
  EXPECT_EQ(chat.messages(2).role(), "tool");
  EXPECT_EQ(chat.messages(2).content(), "");
}

TEST(MessagesParseTest, ToolChoiceIsTheChatsMode) {
  const std::string head = R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
      "content": "x"}], "tools": [{"name": "f", "input_schema": {"type": "object"}},
      {"name": "g", "input_schema": {"type": "object"}}], "tool_choice": )";
  struct Case {
    const char* choice;
    llm::v1::ToolChoice::Mode mode;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "auto"})", llm::v1::ToolChoice::TOOL_CHOICE_AUTO},
           {R"({"type": "any"})", llm::v1::ToolChoice::TOOL_CHOICE_REQUIRED},
           {R"({"type": "tool", "name": "g"})", llm::v1::ToolChoice::TOOL_CHOICE_FUNCTION},
           {R"({"type": "none"})", llm::v1::ToolChoice::TOOL_CHOICE_NONE}}) {
    const llm::v1::Chat chat = Parse(head + c.choice + "}").request.chat();
    EXPECT_EQ(chat.tool_choice().mode(), c.mode) << c.choice;
    EXPECT_FALSE(chat.has_parallel_tool_calls()) << c.choice;
  }
  llm::v1::Chat chat =
      Parse(head + R"({"type": "tool", "name": "g", "disable_parallel_tool_use": true}})")
          .request.chat();
  EXPECT_EQ(chat.tool_choice().function_name(), "g");
  ASSERT_TRUE(chat.has_parallel_tool_calls());
  EXPECT_FALSE(chat.parallel_tool_calls());
  chat = Parse(head + R"({"type": "auto", "disable_parallel_tool_use": false}})").request.chat();
  ASSERT_TRUE(chat.has_parallel_tool_calls());
  EXPECT_TRUE(chat.parallel_tool_calls());
}

// max_tokens 0 warms the prefix cache: one token computed, none answered.
TEST(MessagesParseTest, MaxTokensZeroIsAWarmUp) {
  const std::string messages = R"(, "messages": [{"role": "user", "content": "x"}]})";
  ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 0)" + messages);
  EXPECT_EQ(p.request.max_tokens(), 1u);
  EXPECT_TRUE(p.echo_only);
  p = Parse(R"({"model": "m", "max_tokens": 1)" + messages);
  EXPECT_EQ(p.request.max_tokens(), 1u);
  EXPECT_FALSE(p.echo_only);
}

TEST(MessagesParseTest, OutputConfigFormatIsAJsonSchemaConstraint) {
  const ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 5, "messages": [{"role":
      "user", "content": "x"}], "output_config": {"effort": "low", "format": {"type":
      "json_schema", "schema": {"type": "object", "properties": {"name": {"type": "string"}},
      "required": ["name"], "additionalProperties": false}}}})");
  ASSERT_TRUE(p.request.has_constraint());
  const json schema = json::parse(p.request.constraint().json_schema());
  EXPECT_EQ(schema["required"][0], "name");
  EXPECT_EQ(schema["properties"]["name"]["type"], "string");
  EXPECT_EQ(json::parse(p.request.chat().template_kwargs_json())["reasoning_effort"], "low");
}

TEST(MessagesParseTest, ThinkingIsTheTemplatesEnableThinking) {
  const std::string head =
      R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], )";
  const auto kwargs = [&](const std::string& rest) {
    return json::parse(Parse(head + rest).request.chat().template_kwargs_json());
  };
  EXPECT_EQ(kwargs(R"("thinking": {"type": "disabled"}})")["enable_thinking"], false);
  EXPECT_EQ(kwargs(R"("thinking": {"type": "enabled", "budget_tokens": 2048}})")["enable_thinking"],
            true);
  EXPECT_EQ(kwargs(R"("thinking": {"type": "adaptive"}})")["enable_thinking"], true);
  // The template's own variable, set by the client, wins.
  const json both = kwargs(
      R"("thinking": {"type": "disabled"}, "chat_template_kwargs": {"enable_thinking": true,
      "x": 1}})");
  EXPECT_EQ(both["enable_thinking"], true);
  EXPECT_EQ(both["x"], 1);
  // None asked for: none, as the API (a thinking template is told so).
  EXPECT_EQ(kwargs(R"("max_tokens": 5})"), json::parse(R"({"enable_thinking": false})"));
}

// A final assistant message is a prefill: the answer continues it.
TEST(MessagesParseTest, AFinalAssistantMessageIsContinued) {
  const llm::v1::Chat chat = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
      {"role": "user", "content": "JSON please."},
      {"role": "assistant", "content": [{"type": "text", "text": "{\"a\":"}]}]})")
                                 .request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(1).role(), "assistant");
  EXPECT_EQ(chat.messages(1).content(), "{\"a\":");
  EXPECT_TRUE(chat.continue_final_message());
  ASSERT_TRUE(chat.has_add_generation_prompt());
  EXPECT_FALSE(chat.add_generation_prompt());
}

// An empty final assistant message is no prefill: it is dropped and the user answered. A
// prefill with an output format or a forced call is refused (their grammar starts over).
TEST(MessagesParseTest, PrefillsThatCannotBeContinued) {
  const llm::v1::Chat chat = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
      {"role": "user", "content": "Hi."}, {"role": "assistant", "content": ""}]})")
                                 .request.chat();
  ASSERT_EQ(chat.messages_size(), 1);
  EXPECT_EQ(chat.messages(0).role(), "user");
  EXPECT_FALSE(chat.continue_final_message());
  const std::string turns = R"("messages": [{"role": "user", "content": "Hi."},
      {"role": "assistant", "content": "{"}])";
  for (const std::string& extra :
       {std::string(R"("output_config": {"format": {"type": "json_schema", "schema": {}}})"),
        std::string(R"("tools": [{"name": "f", "input_schema": {"type": "object"}}],
                      "tool_choice": {"type": "any"})")}) {
    const ApiError e = ErrorOf(R"({"model": "m", "max_tokens": 5, )" + turns + ", " + extra + "}");
    EXPECT_EQ(e.param, "messages[1]") << extra;
    EXPECT_NE(e.message.find("is a prefill, which cannot be combined"), std::string::npos)
        << e.message;
  }
}

// As the API: max_tokens is what the answer may take, lowered to what the context leaves.
TEST(MessagesParseTest, MaxTokensFitsTheContext) {
  EXPECT_TRUE(Parse(R"({"model": "m", "max_tokens": 32000,
      "messages": [{"role": "user", "content": "x"}]})")
                  .request.max_tokens_fit());
  const ParsedRequest warm = Parse(R"({"model": "m", "max_tokens": 0,
      "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FALSE(warm.request.max_tokens_fit());  // one token, exactly
}

// message_start carries the prompt's usage: a stream asks the worker for usage on every message.
TEST(MessagesParseTest, AStreamAsksForUsageOnEveryMessage) {
  const ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 5, "stream": true,
      "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.request.stream().continuous_usage());
}

// /v1/messages/count_tokens: no max_tokens needed, and `stream` plays no part.
TEST(MessagesParseTest, CountTokensNeedsNoMaxTokens) {
  const std::string body = R"({"model": "m", "system": "s", "stream": true,
      "messages": [{"role": "user", "content": "x"}]})";
  const ParsedRequest p = Parse(body, /*count_tokens=*/true);
  EXPECT_EQ(p.kind, ApiKind::kMessages);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.request.chat().messages_size(), 2);
  EXPECT_EQ(ErrorOf(body).param, "max_tokens");
  const ParsedRequest with = Parse(R"({"model": "m", "max_tokens": 9,
      "messages": [{"role": "user", "content": "x"}]})",
                                   /*count_tokens=*/true);
  EXPECT_EQ(with.request.chat().messages(0).content(), "x");
}

struct ErrorCase {
  const char* body;
  const char* param;
  const char* says;  // part of the message
};

// Bodies of one user message "x" and max_tokens 5, plus `rest`.
std::string Body(const std::string& rest) {
  return R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}])" +
         rest + "}";
}

void ExpectErrors(const std::vector<ErrorCase>& cases) {
  for (const ErrorCase& c : cases) {
    const ApiError e = ErrorOf(c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("max_completion_tokens"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("'stop'"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("function."), std::string::npos) << e.message;
  }
}

TEST(MessagesParseTest, ErrorsInMessagesNameTheBlock) {
  ExpectErrors({
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", "max_tokens",
       "'max_tokens' is required"},
      {R"({"model": "m", "max_tokens": -1, "messages": [{"role": "user", "content": "x"}]})",
       "max_tokens", "'max_tokens' is -1"},
      {R"({"model": "m", "max_tokens": 5})", "messages", "'messages' is required"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
          "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]})",
       "messages[0].content[0].type", "'image' is not supported"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
          "text", "text": "a"}, {"type": "document", "source": {}}]}]})",
       "messages[0].content[1].type", "'document' is not supported"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
          "tool_use", "id": "t", "name": "f", "input": {}}]}]})",
       "messages[0].content[0].type", "assistant message"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]})",
       "messages[1].content[0].type", "user message"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
          "input": "{}"}]}, {"role": "user", "content": "y"}]})",
       "messages[1].content[0].input", "must be an object"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
          "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}]})",
       "messages[0].content[0].content[0].type", "'image' is not supported"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]})",
       "messages[0].role", "user, assistant or system"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": "Sure. "}]})",
       "messages[1].content", "trailing whitespace"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
          "input": {}}]}]})",
       "messages[1]", "tool_use"},
  });
}

TEST(MessagesParseTest, ErrorsInOtherFieldsNameTheField) {
  ExpectErrors({
      {Body(R"(, "tools": [{"type": "web_search_20250305", "name": "web_search"}])").c_str(),
       "tools[0].type", "server tool"},
      {Body(R"(, "tools": [{"name": "f"}])").c_str(), "tools[0].input_schema", "required"},
      {Body(R"(, "mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}])").c_str(),
       "mcp_servers", "'mcp_servers' is not supported"},
      {Body(R"(, "container": "c_1")").c_str(), "container", "'container' is not supported"},
      {Body(R"(, "tool_choice": {"type": "function"})").c_str(), "tool_choice.type",
       "auto, any, tool or none"},
      {Body(R"(, "tool_choice": "auto")").c_str(), "tool_choice", "must be an object"},
      {Body(R"(, "tool_choice": {"type": "tool"})").c_str(), "tool_choice.name", "required"},
      {Body(R"(, "thinking": {"type": "enabled"})").c_str(), "thinking.budget_tokens", "required"},
      {Body(R"(, "thinking": {"type": "on"})").c_str(), "thinking.type", "enabled"},
      {Body(R"(, "output_config": {"format": {"type": "json_object"}})").c_str(),
       "output_config.format", "json_schema"},
      {Body(R"(, "metadata": {"user_id": 7})").c_str(), "metadata.user_id", "string"},
      {Body(R"(, "frobnicate": 1)").c_str(), "frobnicate", "unknown parameter 'frobnicate'"},
  });
}

// Fields checked by the chat parser: its message renamed as this API names the field.
TEST(MessagesParseTest, ChatParserErrorsSayTheMessagesApiNames) {
  ApiError e = ErrorOf(Body(R"(, "stop_sequences": [1])"));
  EXPECT_EQ(e.message, "'stop_sequences' must be a string or an array of strings");
  e = ErrorOf(Body(R"(, "stop_sequences": "END")"));  // the API takes a list only
  EXPECT_EQ(e.message, "'stop_sequences' must be an array of strings");
  e = ErrorOf(Body(R"(, "tools": [{"name": "f", "input_schema": {}},
      {"name": "f", "input_schema": {}}])"));
  EXPECT_EQ(e.message, "'tools[1].name' repeats an earlier tool's");
  e = ErrorOf(Body(R"(, "tools": [{"name": "f", "input_schema": {}}],
      "tool_choice": {"type": "tool", "name": "g"})"));
  EXPECT_EQ(e.message, "'tool_choice' names 'g', which is not among 'tools'");
  e = ErrorOf(Body(R"(, "temperature": "hot")"));
  EXPECT_EQ(e.message, "'temperature' must be a number");
}

// Int's error names the key inside `thinking` by its whole path.
TEST(MessagesParseTest, ABudgetBelowTheMinimumNamesThinkingBudgetTokens) {
  const ApiError e = ErrorOf(Body(R"(, "thinking": {"type": "enabled", "budget_tokens": 100})"));
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_NE(e.message.find("'thinking.budget_tokens'"), std::string::npos) << e.message;
}

// A final assistant turn of thinking blocks only has no text to continue: the user's turn is
// answered (no prefill), whatever that turn's text ends with.
TEST(MessagesParseTest, AFinalTurnOfThinkingOnlyIsNoPrefill) {
  for (const char* user : {"x", "x "}) {
    const ParsedRequest p = Parse(R"({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": ")" +
                                  std::string(user) + R"("},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t",
                                           "signature": "s"}]}]})");
    EXPECT_FALSE(p.request.chat().continue_final_message()) << user;
    ASSERT_EQ(p.request.chat().messages_size(), 1) << user;
    EXPECT_EQ(p.request.chat().messages(0).role(), "user");
  }
}

TEST(MessagesParseTest, MessagesErrorTextRenamesTheChatParameters) {
  EXPECT_EQ(MessagesErrorText("'max_completion_tokens' is 0; it must be at least 1"),
            "'max_tokens' is 0; it must be at least 1");
  EXPECT_EQ(MessagesErrorText("'stop' must be a string or an array of strings"),
            "'stop_sequences' must be a string or an array of strings");
  EXPECT_EQ(MessagesErrorText("'response_format.json_schema.schema' is required"),
            "'output_config.format.json_schema.schema' is required");
  EXPECT_EQ(MessagesErrorText("'tools[0].function.parameters' must be a JSON Schema object"),
            "'tools[0].input_schema' must be a JSON Schema object");
  EXPECT_EQ(MessagesErrorText("'tools[2].function.name' must be a string"),
            "'tools[2].name' must be a string");
  EXPECT_EQ(MessagesErrorText("the prompt is too long"), "the prompt is too long");
}

// Every value of a full body, at every depth, replaced by a value of each JSON type: each body
// parses, or is a 400 with a message; none escapes as an exception or a crash.
TEST(MessagesParseTest, AnyValueAnywhereIsParsedOrA400) {
  const json full = json::parse(R"({"model": "m", "max_tokens": 5, "system": [{"type": "text",
      "text": "s"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "g"},
       {"type": "text", "text": "b"}, {"type": "tool_use", "id": "t1", "name": "f",
       "input": {"x": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content":
       [{"type": "text", "text": "r"}], "is_error": false}, {"type": "text", "text": "c"}]}],
      "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
      "stop_sequences": ["x"], "metadata": {"user_id": "u"}, "thinking": {"type": "enabled",
      "budget_tokens": 2048}, "output_config": {"format": {"type": "json_schema", "schema":
      {"type": "object"}}, "effort": "low"}, "temperature": 0.5, "top_k": 3, "stream": true})");
  Parse(full.dump());  // the body itself is good
  int refused = 0;
  ForEachMutation(full, OddValues(), [&](const json& body, const auto& path, const json& v) {
    for (const bool count_tokens : {false, true}) {
      ApiError e;
      if (ParseMessagesRequest(body.dump(), &e, {}, count_tokens).ok()) continue;
      ++refused;
      EXPECT_EQ(e.http_status, 400) << path << " = " << v;
      EXPECT_FALSE(e.message.empty()) << path << " = " << v;
    }
  });
  EXPECT_GT(refused, 100);  // the walk did reach the checks
}

TEST(MessagesErrorBodyTest, TheErrorTypeFollowsTheStatus) {
  const std::vector<std::pair<int, std::string>> cases = {{400, "invalid_request_error"},
                                                          {401, "authentication_error"},
                                                          {403, "permission_error"},
                                                          {404, "not_found_error"},
                                                          {413, "request_too_large"},
                                                          {429, "rate_limit_error"},
                                                          {500, "api_error"},
                                                          {502, "api_error"},
                                                          {503, "overloaded_error"},
                                                          {504, "timeout_error"}};
  for (const auto& [status, type] : cases) {
    ApiError e;
    e.http_status = status;
    e.type = "server_error";  // the OpenAI type plays no part
    e.message = "went \"wrong\"";
    const json body = json::parse(MessagesErrorBody(e));
    EXPECT_EQ(body,
              json({{"type", "error"}, {"error", {{"type", type}, {"message", "went \"wrong\""}}}}))
        << status;
  }
}

TEST(MessagesErrorBodyTest, CountTokensBodyIsTheInputTokens) {
  llm::v1::TokenizeResponse r;
  for (int id : {1, 2, 3, 4, 5, 6, 7}) r.add_token_ids(id);
  r.set_max_context_tokens(4096);
  EXPECT_EQ(json::parse(CountTokensBody(r)), json({{"input_tokens", 7}}));
  EXPECT_EQ(json::parse(CountTokensBody(llm::v1::TokenizeResponse())), json({{"input_tokens", 0}}));
}

// Worker messages: text in two pieces, then a call in two pieces, then the end. With
// `every_usage` (a stream's continuous usage) each message has the usage so far.
std::vector<llm::v1::GenerateResponse> TextThenCall(llm::v1::FinishReason finish,
                                                    bool every_usage = false) {
  std::vector<llm::v1::GenerateResponse> out(4);
  out[0].set_text("Let me ");
  out[1].set_text("check.");
  auto* call = out[2].add_tool_calls();
  call->set_id("toolu_1");
  call->set_name("weather");
  call->set_arguments("{\"city\":");
  out[3].add_tool_calls()->set_arguments("\"Oslo\"}");
  out[3].set_finish_reason(finish);
  for (size_t i = every_usage ? 0 : 3; i < out.size(); ++i) {
    out[i].mutable_usage()->set_prompt_tokens(30);
    out[i].mutable_usage()->set_cached_prompt_tokens(16);
    out[i].mutable_usage()->set_completion_tokens(i == 3 ? 12 : 2 * i + 1);
  }
  return out;
}

ParsedRequest Request(int max_tokens = 100) {
  return Parse(R"({"model": "m", "max_tokens": )" + std::to_string(max_tokens) +
               R"(, "messages": [{"role": "user", "content": "Weather in Oslo?"}],
      "tools": [{"name": "weather", "input_schema": {"type": "object"}}]})");
}

TEST(MessagesResponderTest, TheMessageHasATextThenAToolUseBlock) {
  MessagesResponder r(Request(), "msg_abc");
  const auto messages = TextThenCall(llm::v1::FINISH_REASON_TOOL_CALLS);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(r.UnfinishedChoices(), 1) << i;
    r.Accumulate(messages[i]);
  }
  EXPECT_EQ(r.UnfinishedChoices(), 0);
  const json body = json::parse(r.Body());
  EXPECT_EQ(body["id"], "msg_abc");
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["role"], "assistant");
  EXPECT_EQ(body["model"], "m");
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][0], json({{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(body["content"][1], json({{"type", "tool_use"},
                                      {"id", "toolu_1"},
                                      {"name", "weather"},
                                      {"input", {{"city", "Oslo"}}}}));
  EXPECT_EQ(body["stop_reason"], "tool_use");
  EXPECT_TRUE(body["stop_sequence"].is_null());
  EXPECT_EQ(body["usage"]["input_tokens"], 14);  // 30 prompt tokens, 16 of them cached
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(body["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_EQ(body["usage"]["output_tokens"], 12);
}

// Worker messages: thinking, then text.
std::vector<llm::v1::GenerateResponse> ThinkThenText() {
  std::vector<llm::v1::GenerateResponse> ms(3);
  ms[0].set_reasoning_text("Cold ");
  ms[1].set_reasoning_text("north.");
  ms[1].set_text("It is ");
  ms[2].set_text("cold.");
  ms[2].set_finish_reason(llm::v1::FINISH_REASON_STOP);
  for (auto& m : ms) m.mutable_usage()->set_prompt_tokens(9);
  return ms;
}

// Asked for (`thinking` enabled), the model's thinking (reasoning_text) is a thinking block
// before the text, streamed as thinking_delta events; its signature is empty (nothing signs
// it).
TEST(MessagesResponderTest, ReasoningIsAThinkingBlock) {
  const ParsedRequest asked = Parse(R"({"model": "m", "max_tokens": 4096,
      "messages": [{"role": "user", "content": "Cold?"}],
      "thinking": {"type": "enabled", "budget_tokens": 2048}})");
  EXPECT_EQ(json::parse(asked.request.chat().template_kwargs_json())["enable_thinking"], true);
  const auto ms = ThinkThenText();
  MessagesResponder whole(asked, "msg_1");
  MessagesResponder stream(asked, "msg_1");
  std::string sse;
  for (const auto& m : ms) {
    whole.Accumulate(m);
    sse += stream.OnStreamMessage(m);
  }
  sse += stream.StreamEnd();
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][0],
            json({{"type", "thinking"}, {"thinking", "Cold north."}, {"signature", ""}}));
  EXPECT_EQ(body["content"][1], json({{"type", "text"}, {"text", "It is cold."}}));
  std::vector<std::string> types;
  std::string thinking;
  for (const auto& [type, data] : Events(sse)) {
    types.push_back(type);
    if (type == "content_block_delta" && data["delta"]["type"] == "thinking_delta") {
      EXPECT_EQ(data["index"], 0);
      thinking += data["delta"]["thinking"].get<std::string>();
    }
  }
  EXPECT_EQ(thinking, "Cold north.");
  const std::vector<std::string> want = {
      "message_start",      "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop", "message_delta",       "message_stop"};
  EXPECT_EQ(types, want);
}

// Not asked for (no `thinking`), as the API: the template is told not to think, and a model
// that thinks all the same (R1's template always opens a block) shows only its answer.
TEST(MessagesResponderTest, UnaskedThinkingIsNotShown) {
  const ParsedRequest plain = Request();
  EXPECT_EQ(json::parse(plain.request.chat().template_kwargs_json())["enable_thinking"], false);
  MessagesResponder whole(plain, "msg_1");
  MessagesResponder stream(plain, "msg_1");
  std::string sse;
  for (const auto& m : ThinkThenText()) {
    whole.Accumulate(m);
    sse += stream.OnStreamMessage(m);
  }
  sse += stream.StreamEnd();
  EXPECT_EQ(json::parse(whole.Body())["content"],
            json::parse(R"([{"type": "text", "text": "It is cold."}])"));
  EXPECT_EQ(sse.find("thinking"), std::string::npos) << sse;
}

TEST(MessagesResponderTest, AMatchedStopStringIsAStopSequence) {
  MessagesResponder r(Request(), "msg_1");
  llm::v1::GenerateResponse m;
  m.set_text("Done");
  m.set_finish_reason(llm::v1::FINISH_REASON_STOP);
  m.set_stop_string("###");
  m.mutable_usage()->set_prompt_tokens(10);
  m.mutable_usage()->set_completion_tokens(2);
  r.Accumulate(m);
  json body = json::parse(r.Body());
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "###");
  EXPECT_EQ(body["content"][0]["text"], "Done");
  EXPECT_EQ(body["usage"]["input_tokens"], 10);
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 0);
  MessagesResponder eos(Request(), "msg_2");
  m.set_stop_token_id(2);  // the end of the turn, not a stop string
  eos.Accumulate(m);
  body = json::parse(eos.Body());
  EXPECT_EQ(body["stop_reason"], "end_turn");
  EXPECT_TRUE(body["stop_sequence"].is_null());
}

// The length limit: max_tokens when it was the request's, else the context's.
TEST(MessagesResponderTest, TheLengthLimitIsMaxTokensOrTheContextWindow) {
  for (const auto& [completion, reason] : std::vector<std::pair<int, std::string>>{
           {12, "max_tokens"}, {5, "model_context_window_exceeded"}}) {
    MessagesResponder r(Request(/*max_tokens=*/12), "msg_1");
    llm::v1::GenerateResponse m;
    m.set_text("abc");
    m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
    m.mutable_usage()->set_prompt_tokens(4000);
    m.mutable_usage()->set_completion_tokens(completion);
    r.Accumulate(m);
    const json body = json::parse(r.Body());
    EXPECT_EQ(body["stop_reason"], reason) << completion;
    EXPECT_EQ(body["usage"]["output_tokens"], completion);
    EXPECT_EQ(r.UnfinishedChoices(), 0);
  }
}

// max_tokens 0: the one token computed is no part of the answer.
TEST(MessagesResponderTest, AWarmUpAnswersNothing) {
  const ParsedRequest p = Request(/*max_tokens=*/0);
  ASSERT_TRUE(p.echo_only);
  llm::v1::GenerateResponse m;
  m.set_text("The");
  m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  m.mutable_usage()->set_prompt_tokens(30);
  m.mutable_usage()->set_cached_prompt_tokens(8);
  m.mutable_usage()->set_completion_tokens(1);
  MessagesResponder whole(p, "msg_1");
  whole.Accumulate(m);
  const json body = json::parse(whole.Body());
  EXPECT_TRUE(body["content"].empty());
  EXPECT_EQ(body["stop_reason"], "max_tokens");
  EXPECT_EQ(body["usage"]["output_tokens"], 0);
  EXPECT_EQ(body["usage"]["input_tokens"], 22);
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 8);
  MessagesResponder stream(p, "msg_1");
  const std::string sse = stream.OnStreamMessage(m) + stream.StreamEnd();
  EXPECT_EQ(sse.find("content_block"), std::string::npos) << sse;
  EXPECT_NE(sse.find("event: message_stop"), std::string::npos) << sse;
}

// A stream of TextThenCall's messages, and the Message of the same messages.
std::pair<std::vector<std::pair<std::string, json>>, json> StreamAndWhole() {
  MessagesResponder stream(Request(), "msg_abc");
  MessagesResponder whole(Request(), "msg_abc");
  std::string sse;
  for (const auto& m : TextThenCall(llm::v1::FINISH_REASON_TOOL_CALLS, /*every_usage=*/true)) {
    sse += stream.OnStreamMessage(m);
    whole.Accumulate(m);
  }
  EXPECT_EQ(stream.UnfinishedChoices(), 0);
  sse += stream.StreamEnd();
  return {Events(sse), json::parse(whole.Body())};
}

TEST(MessagesResponderTest, AStreamIsTheEventsInOrder) {
  const auto [events, whole] = StreamAndWhole();
  std::vector<std::string> types;
  for (const auto& [type, data] : events) {
    types.push_back(type);
    EXPECT_EQ(data["type"], type);
  }
  const std::vector<std::string> want = {
      "message_start",      "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop", "message_delta",       "message_stop"};
  ASSERT_EQ(types, want);
  const json& start = events[0].second["message"];
  EXPECT_EQ(start["id"], "msg_abc");
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_EQ(start["model"], "m");
  EXPECT_EQ(start["content"], json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_TRUE(start["stop_sequence"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], 14);  // the first message's usage
  EXPECT_EQ(start["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(start["usage"]["output_tokens"], 1);
  for (const size_t i : {1, 2, 3, 4}) EXPECT_EQ(events[i].second["index"], 0) << i;
  for (const size_t i : {5, 6, 7, 8}) EXPECT_EQ(events[i].second["index"], 1) << i;
  EXPECT_EQ(events[1].second["content_block"], json({{"type", "text"}, {"text", ""}}));
  EXPECT_EQ(events[2].second["delta"], json({{"type", "text_delta"}, {"text", "Let me "}}));
  EXPECT_EQ(events[5].second["content_block"], json({{"type", "tool_use"},
                                                     {"id", "toolu_1"},
                                                     {"name", "weather"},
                                                     {"input", json::object()}}));
  EXPECT_EQ(events[6].second["delta"]["type"], "input_json_delta");
  const json& delta = events[9].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  EXPECT_TRUE(delta["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(delta["usage"]["output_tokens"], 12);
  EXPECT_EQ(delta["usage"]["input_tokens"], 14);
  EXPECT_EQ(events[10].second, json({{"type", "message_stop"}}));
}

// What a client puts together from the deltas is the whole Message's content.
TEST(MessagesResponderTest, AStreamsDeltasMakeTheWholeMessagesContent) {
  const auto [events, whole] = StreamAndWhole();
  std::string text, arguments;
  for (const auto& [type, data] : events) {
    if (type != "content_block_delta") continue;
    if (data["delta"]["type"] == "text_delta") text += data["delta"]["text"].get<std::string>();
    if (data["delta"]["type"] == "input_json_delta") {
      arguments += data["delta"]["partial_json"].get<std::string>();
    }
  }
  ASSERT_EQ(whole["content"].size(), 2u);
  EXPECT_EQ(text, "Let me check.");
  EXPECT_EQ(text, whole["content"][0]["text"]);
  EXPECT_EQ(json::parse(arguments), whole["content"][1]["input"]);
  EXPECT_EQ(whole["stop_reason"], events[9].second["delta"]["stop_reason"]);
  EXPECT_EQ(whole["usage"], events[9].second["usage"]);
}

TEST(MessagesResponderTest, AnErrorAfterTheStartIsAnErrorEvent) {
  MessagesResponder r(Request(), "msg_abc");
  const auto messages = TextThenCall(llm::v1::FINISH_REASON_STOP, /*every_usage=*/true);
  std::string sse = r.OnStreamMessage(messages[0]);
  ApiError e;
  e.http_status = 503;
  e.message = "the worker is overloaded";
  sse += r.StreamError(e);
  const auto events = Events(sse);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].first, "message_start");
  EXPECT_EQ(events[2].first, "content_block_delta");
  EXPECT_EQ(events.back().first, "error");
  EXPECT_EQ(events.back().second, json::parse(MessagesErrorBody(e)));
  EXPECT_EQ(events.back().second["error"]["type"], "overloaded_error");
  EXPECT_EQ(r.UnfinishedChoices(), 1);
}

// MakeResponder answers a Messages request with the Message.
TEST(MessagesResponderTest, MakeResponderMakesAMessagesResponder) {
  const auto r = MakeResponder(Request(), "msg_9", 0);
  for (const auto& m : TextThenCall(llm::v1::FINISH_REASON_TOOL_CALLS)) r->Accumulate(m);
  const json body = json::parse(r->Body());
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["id"], "msg_9");
}

}  // namespace
}  // namespace llm::router::openai
