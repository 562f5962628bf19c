// The Responses API's translation (pure, no socket): a body's instructions, input items, tools
// and text.format as the chat request they mean; errors named as the Responses API names its
// parameters; and the Response built from worker messages, streamed (its typed events, in
// order, numbered) and not, the stream's final Response the same as the whole one.
#include "router/openai/responses_api.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/router/body_mutations.h"
#include "tests/router/sse_events.h"

namespace llm::router::openai {
namespace {

using nlohmann::json;

ParsedRequest Parse(const std::string& body) {
  ApiError error;
  auto parsed = ParseResponsesRequest(body, &error);
  EXPECT_TRUE(parsed.ok()) << error.param << ": " << error.message;
  return parsed.ok() ? *parsed : ParsedRequest{};
}

ApiError ErrorOf(const std::string& body) {
  ApiError error;
  EXPECT_FALSE(ParseResponsesRequest(body, &error).ok()) << body;
  EXPECT_EQ(error.http_status, 400);
  return error;
}

TEST(ResponsesParseTest, InstructionsAndTextInputAreASystemAndAUserMessage) {
  const ParsedRequest p = Parse(R"({"model": "m", "instructions": "Be brief.", "input": "Hi",
      "max_output_tokens": 40, "temperature": 0.5, "top_p": 0.9, "stream": true,
      "reasoning": {"effort": "low"}, "truncation": "auto", "verbosity": "low",
      "prompt_cache_options": {}, "store": false})");
  EXPECT_EQ(p.kind, ApiKind::kResponses);
  EXPECT_TRUE(p.stream);
  const llm::v1::Chat& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(0).content(), "Be brief.");
  EXPECT_EQ(chat.messages(1).role(), "user");
  EXPECT_EQ(chat.messages(1).content(), "Hi");
  EXPECT_EQ(p.request.max_tokens(), 40u);
  EXPECT_FLOAT_EQ(p.request.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(p.request.sampling().top_p(), 0.9f);
  EXPECT_EQ(json::parse(chat.template_kwargs_json())["reasoning_effort"], "low");
  EXPECT_EQ(p.response_params["instructions"], "Be brief.");
  EXPECT_EQ(p.response_params["max_output_tokens"], 40);
  EXPECT_EQ(p.response_params["tool_choice"], "auto");
  EXPECT_EQ(p.response_params["truncation"], "auto");
}

// A second turn as a client without a store sends it: the first turn's output items (a message
// and a function call) and the call's output, back in `input`.
TEST(ResponsesParseTest, ItemsOfAToolTurnBecomeChatMessages) {
  const ParsedRequest p = Parse(R"({"model": "m", "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user",
       "content": [{"type": "input_text", "text": "Weather"}, {"type": "input_text", "text": "in Oslo?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "weather",
       "arguments": "{\"city\":\"Oslo\"}"},
      {"type": "function_call_output", "call_id": "call_9", "output": "-3 C"}],
      "tools": [{"type": "function", "name": "weather", "description": "Weather now",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                 "strict": true}],
      "tool_choice": {"type": "function", "name": "weather"}, "parallel_tool_calls": false})");
  const llm::v1::Chat& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "Weather\nin Oslo?");
  EXPECT_EQ(chat.messages(2).role(), "assistant");
  EXPECT_EQ(chat.messages(2).content(), "Checking.");
  const json calls = json::parse(chat.messages(2).tool_calls_json());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["id"], "call_9");
  EXPECT_EQ(calls[0]["function"]["name"], "weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(chat.messages(3).role(), "tool");
  EXPECT_EQ(chat.messages(3).tool_call_id(), "call_9");
  EXPECT_EQ(chat.messages(3).content(), "-3 C");
  const json tools = json::parse(chat.tools_json());
  EXPECT_EQ(tools[0]["function"]["name"], "weather");
  EXPECT_EQ(tools[0]["function"]["description"], "Weather now");
  EXPECT_EQ(tools[0]["function"]["strict"], true);
  EXPECT_EQ(chat.tool_choice().mode(), llm::v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  EXPECT_EQ(chat.tool_choice().function_name(), "weather");
  EXPECT_FALSE(chat.parallel_tool_calls());
  EXPECT_EQ(p.response_params["tools"][0]["name"],
            "weather");  // the Response repeats the API's shape
  EXPECT_EQ(p.response_params["parallel_tool_calls"], false);
}

TEST(ResponsesParseTest, TextFormatIsTheConstraintAndLogprobsAreAsked) {
  ParsedRequest p = Parse(R"({"model": "m", "input": "x", "text": {"format": {"type":
      "json_schema", "name": "city", "strict": true, "schema": {"type": "object", "properties":
      {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false}}},
      "include": ["message.output_text.logprobs"], "top_logprobs": 3})");
  EXPECT_EQ(json::parse(p.request.constraint().json_schema())["required"][0], "name");
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 3);
  EXPECT_EQ(p.request.logprobs(), 3u);
  EXPECT_EQ(p.response_params["text"]["format"]["name"], "city");
  p = Parse(R"({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})");
  EXPECT_TRUE(p.request.constraint().json_object());
  EXPECT_FALSE(p.logprobs);
  p = Parse(R"({"model": "m", "input": "x", "text": {"format": {"type": "text"}}})");
  EXPECT_FALSE(p.request.has_constraint());
}

TEST(ResponsesParseTest, ErrorsNameTheResponsesParameter) {
  struct Case {
    const char* body;
    const char* param;
    const char* says;  // part of the message
  };
  const std::vector<Case> cases = {
      {R"({"model": "m"})", "input", "'input' is required"},
      {R"({"model": "m", "input": []})", "input", "non-empty array"},
      {R"({"model": "m", "input": "x", "previous_response_id": "resp_1"})", "previous_response_id",
       "stores no responses"},
      {R"({"model": "m", "input": "x", "conversation": "conv_1"})", "conversation",
       "send the whole conversation"},
      {R"({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]})", "input[0]",
       "stores none"},
      {R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text",
          "text": "a"}, {"type": "input_image", "image_url": "x"}]}]})",
       "input[0].content[1].type", "'input_image' is not supported"},
      {R"({"model": "m", "input": [{"role": "tool", "content": "x"}]})", "input[0].role",
       "user, system, developer or assistant"},
      {R"({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]})",
       "input[0].arguments", "required"},
      {R"({"model": "m", "input": [{"type": "web_search_call"}]})", "input[0].type",
       "not supported"},
      {R"({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type",
       "'web_search' is not supported"},
      {R"({"model": "m", "input": "x", "tool_choice": {"type": "mcp"}})", "tool_choice", "must be"},
      {R"({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}],
          "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice", "'g'"},
      {R"({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}})",
       "text.format.schema", "required"},
      {R"({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}})", "text.format.type",
       "json_schema"},
      {R"({"model": "m", "input": "x", "max_output_tokens": 0})", "max_output_tokens",
       "'max_output_tokens' is 0"},
      {R"({"model": "m", "input": "x", "temperature": "hot"})", "temperature", "temperature"},
      {R"({"model": "m", "input": "x", "reasoning": {"effort": 3}})", "reasoning.effort",
       "'reasoning.effort'"},
      {R"({"model": "m", "input": "x", "background": true})", "background", "not supported"},
      {R"({"model": "m", "input": "x", "truncation": "sideways"})", "truncation", "disabled"},
      {R"({"model": "m", "input": "x", "frobnicate": 1})", "frobnicate", "unknown"},
      {R"({"model": "m", "input": "x", "metadata": {"k": 1}})", "metadata", "'metadata.k'"},
  };
  for (const Case& c : cases) {
    const ApiError e = ErrorOf(c.body);
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("max_completion_tokens"), std::string::npos) << e.message;
  }
}

// Every value of a full body, at every depth, replaced by a value of each JSON type: each body
// parses, or is a 400 with a message; none escapes as an exception or a crash.
TEST(ResponsesParseTest, AnyValueAnywhereIsParsedOrA400) {
  const json full = json::parse(R"({"model": "m", "instructions": "i", "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "a"}]},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c", "output": "o"}],
      "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "f"}, "text": {"format": {"type":
      "json_schema", "name": "n", "schema": {"type": "object"}}}, "max_output_tokens": 5,
      "temperature": 0.5, "include": ["message.output_text.logprobs"], "top_logprobs": 2,
      "reasoning": {"effort": "low"}, "metadata": {"k": "v"}, "stream": true})");
  int refused = 0;
  ForEachMutation(full, OddValues(), [&](const json& body, const auto& path, const json& v) {
    ApiError e;
    if (ParseResponsesRequest(body.dump(), &e).ok()) return;
    ++refused;
    EXPECT_EQ(e.http_status, 400) << path << " = " << v;
    EXPECT_FALSE(e.message.empty()) << path << " = " << v;
  });
  EXPECT_GT(refused, 100);  // the walk did reach the checks
}

TEST(ResponsesParseTest, WorkerErrorsAreNamedAsTheApiNamesThem) {
  EXPECT_EQ(ResponsesParam("messages"), "input");
  EXPECT_EQ(ResponsesParam("messages[2].content"), "input");  // not the input item's index
  EXPECT_EQ(ResponsesParam("response_format"), "text.format");
  EXPECT_EQ(ResponsesParam("max_tokens"), "max_output_tokens");
  EXPECT_EQ(ResponsesParam("tools"), "tools");
  // The worker's "constraint.json_schema.properties.age.minimum: ..." as the front maps it.
  const ApiError e = ErrorFromGrpc(3, "constraint.json_schema: $.properties.age.minimum", 0);
  EXPECT_EQ(ResponsesParam(e.param), "text.format");
}

// Worker messages: text in two pieces, then a call in two pieces, then the end.
std::vector<llm::v1::GenerateResponse> TextThenCall(llm::v1::FinishReason finish) {
  std::vector<llm::v1::GenerateResponse> out(4);
  out[0].set_text("Let me ");
  out[1].set_text("check.");
  auto* call = out[2].add_tool_calls();
  call->set_id("call_1");
  call->set_name("weather");
  call->set_arguments("{\"city\":");
  out[3].add_tool_calls()->set_arguments("\"Oslo\"}");
  out[3].set_finish_reason(finish);
  out[3].mutable_usage()->set_prompt_tokens(30);
  out[3].mutable_usage()->set_cached_prompt_tokens(16);
  out[3].mutable_usage()->set_completion_tokens(12);
  return out;
}

ParsedRequest Request() {
  return Parse(R"({"model": "m", "input": "Weather in Oslo?", "tools": [{"type": "function",
      "name": "weather", "parameters": {"type": "object"}}], "metadata": {"k": "v"}})");
}

TEST(ResponsesResponderTest, TheResponseHasAMessageThenAFunctionCall) {
  ResponsesResponder r(Request(), "resp_abc", 1700000000);
  for (const auto& m : TextThenCall(llm::v1::FINISH_REASON_TOOL_CALLS)) r.Accumulate(m);
  EXPECT_EQ(r.UnfinishedChoices(), 0);
  const json body = json::parse(r.Body());
  EXPECT_EQ(body["id"], "resp_abc");
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["created_at"], 1700000000);
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["store"], false);
  EXPECT_EQ(body["metadata"]["k"], "v");
  EXPECT_EQ(body["tools"][0]["name"], "weather");
  ASSERT_EQ(body["output"].size(), 2u);
  const json& message = body["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "completed");
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "Let me check.");
  const json& call = body["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["call_id"], "call_1");
  EXPECT_EQ(call["name"], "weather");
  EXPECT_EQ(call["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_NE(call["id"], message["id"]);
  EXPECT_EQ(body["usage"]["input_tokens"], 30);
  EXPECT_EQ(body["usage"]["input_tokens_details"]["cached_tokens"], 16);
  EXPECT_EQ(body["usage"]["input_tokens_details"]["cache_write_tokens"], 0);
  EXPECT_EQ(body["usage"]["output_tokens"], 12);
  EXPECT_EQ(body["usage"]["total_tokens"], 42);
  EXPECT_TRUE(body["incomplete_details"].is_null());
}

// The model's thinking (reasoning_text) is a reasoning item before the message, with one
// reasoning_text part; streamed as response.reasoning_text.delta, then .done.
TEST(ResponsesResponderTest, ReasoningIsAReasoningItem) {
  std::vector<llm::v1::GenerateResponse> ms(2);
  ms[0].set_reasoning_text("Think.");
  ms[1].set_text("Done.");
  ms[1].set_finish_reason(llm::v1::FINISH_REASON_STOP);
  ResponsesResponder whole(Request(), "resp_abc", 0);
  ResponsesResponder stream(Request(), "resp_abc", 0);
  std::string sse;
  for (const auto& m : ms) {
    whole.Accumulate(m);
    sse += stream.OnStreamMessage(m);
  }
  sse += stream.StreamEnd();
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["output"].size(), 2u);
  const json& item = body["output"][0];
  EXPECT_EQ(item["type"], "reasoning");
  EXPECT_EQ(item["status"], "completed");
  EXPECT_EQ(item["summary"], json::array());
  EXPECT_EQ(item["content"], json::parse(R"([{"type": "reasoning_text", "text": "Think."}])"));
  EXPECT_EQ(body["output"][1]["content"][0]["text"], "Done.");
  std::vector<std::string> types;
  for (const auto& [type, data] : Events(sse)) types.push_back(type);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(Events(sse).back().second["response"], body);
}

TEST(ResponsesResponderTest, TheLengthLimitMakesItIncomplete) {
  ResponsesResponder r(Request(), "resp_abc", 0);
  auto messages = TextThenCall(llm::v1::FINISH_REASON_LENGTH);
  for (const auto& m : messages) r.Accumulate(m);
  const json body = json::parse(r.Body());
  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(body["output"][0]["status"], "completed");  // done before the limit cut the call
  EXPECT_EQ(body["output"][1]["status"], "incomplete");
}

TEST(ResponsesResponderTest, AStreamIsTheTypedEventsInOrderEndingInTheWholeResponse) {
  ResponsesResponder stream(Request(), "resp_abc", 5);
  ResponsesResponder whole(Request(), "resp_abc", 5);
  std::string sse;
  for (const auto& m : TextThenCall(llm::v1::FINISH_REASON_TOOL_CALLS)) {
    sse += stream.OnStreamMessage(m);
    whole.Accumulate(m);
  }
  sse += stream.StreamEnd();
  const auto events = Events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i].first);
    EXPECT_EQ(events[i].second["type"], events[i].first);
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(events[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(events[2].second["output_index"], 0);
  EXPECT_EQ(events[2].second["item"]["status"], "in_progress");
  EXPECT_EQ(events[5].second["delta"], "check.");
  EXPECT_EQ(events[6].second["text"], "Let me check.");
  EXPECT_EQ(events[9].second["output_index"], 1);
  EXPECT_EQ(events[9].second["item"]["arguments"], "");
  EXPECT_EQ(events[11].second["item_id"], events[9].second["item"]["id"]);
  EXPECT_EQ(events[12].second["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(events.back().second["response"], json::parse(whole.Body()));
}

TEST(ResponsesResponderTest, AnErrorAfterTheStartIsResponseFailed) {
  ResponsesResponder r(Request(), "resp_abc", 0);
  std::string sse = r.OnStreamMessage(TextThenCall(llm::v1::FINISH_REASON_STOP)[0]);
  ApiError e;
  e.http_status = 500;
  e.type = "server_error";
  e.message = "the worker failed";
  sse += r.StreamError(e);
  const auto events = Events(sse);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "response.failed");
  EXPECT_EQ(events.back().second["response"]["status"], "failed");
  EXPECT_EQ(events.back().second["response"]["error"]["code"], "server_error");
  EXPECT_EQ(events.back().second["response"]["error"]["message"], "the worker failed");
  // What streamed before the failure stands in the failed Response, cut off.
  const json& item = events.back().second["response"]["output"][0];
  EXPECT_EQ(item["status"], "incomplete");
  EXPECT_EQ(item["content"][0]["text"], "Let me ");
  EXPECT_EQ(r.UnfinishedChoices(), 1);
}

// A token whose text is held back (half a character) reports its logprob with the text that
// completes it; a call's tokens are not the text's.
TEST(ResponsesResponderTest, LogprobsFollowTheTextTheyMade) {
  const ParsedRequest p = Parse(R"({"model": "m", "input": "x", "top_logprobs": 1})");
  const auto token = [](llm::v1::GenerateResponse& m, const char* text, float logprob) {
    auto* lp = m.add_logprobs();
    lp->mutable_sampled()->set_text(text);
    lp->mutable_sampled()->set_logprob(logprob);
    auto* top = lp->add_top();
    top->set_text(text);
    top->set_logprob(logprob);
  };
  std::vector<llm::v1::GenerateResponse> messages(3);
  token(messages[0], "\xEF\xBF\xBD", -0.5f);  // half of "é"
  messages[1].set_text("\xC3\xA9t\xC3\xA9");
  token(messages[1], "\xEF\xBF\xBD", -0.25f);
  token(messages[1], "t\xC3\xA9", -1.0f);
  messages[2].set_finish_reason(llm::v1::FINISH_REASON_STOP);
  ResponsesResponder whole(p, "resp_1", 0);
  for (const auto& m : messages) whole.Accumulate(m);
  const json body = json::parse(whole.Body());
  const json& logprobs = body["output"][0]["content"][0]["logprobs"];
  ASSERT_EQ(logprobs.size(), 3u);
  EXPECT_FLOAT_EQ(logprobs[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(logprobs[2]["token"], "t\xC3\xA9");
  EXPECT_EQ(logprobs[2]["top_logprobs"].size(), 1u);
}

}  // namespace
}  // namespace llm::router::openai
