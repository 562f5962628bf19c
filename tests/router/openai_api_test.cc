// The OpenAI translation (pure, no socket): parse errors, and the responder's logprobs (every
// logprob is a JSON number, in the chat and the completion shapes, streamed and not), token ids
// and continuous usage.
#include "router/openai/openai_api.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/router/http_test_util.h"

namespace llm::router::openai {
namespace {

using nlohmann::json;

// The JSON chunks of a stream's "data: {...}\n\n" events ([DONE] aside).
std::vector<json> Chunks(const std::string& events) {
  std::vector<json> out;
  for (size_t at = 0; (at = events.find("data: ", at)) != std::string::npos; at += 6) {
    const std::string data = events.substr(at + 6, events.find("\n\n", at) - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
  }
  return out;
}

ParsedRequest Parse(ApiKind kind, const std::string& body) {
  ApiError error;
  auto parsed = ParseOpenAiRequest(kind, body, &error);
  EXPECT_TRUE(parsed.ok()) << error.message;
  return parsed.ok() ? *parsed : ParsedRequest{};
}

// What a bad request is told: the field, and what is wrong with it in words that fit.
TEST(OpenAiParseTest, ErrorsSayWhatIsWrong) {
  auto error_of = [](ApiKind kind, const std::string& body) {
    ApiError error;
    EXPECT_FALSE(ParseOpenAiRequest(kind, body, &error).ok()) << body;
    return error;
  };
  ApiError e = error_of(ApiKind::kCompletion, R"({"model": "m", "prompt": []})");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.message, "'prompt' is an empty array: give a string or token ids");
  e = error_of(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "max_tokens": 0})");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "'max_tokens' is 0; it must be at least 1");
  e = error_of(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "max_tokens": 5e9})");
  EXPECT_EQ(e.message, "'max_tokens' is 5000000000.0; it must be in [1, 4294967295]");
}

// vLLM's continue_final_message: the worker continues the last message (a prefill); it needs
// that message to be the assistant's and no generation prompt.
TEST(OpenAiParseTest, ReasoningSentBackReachesTheTemplate) {
  const ParsedRequest p = Parse(ApiKind::kChat, R"({"model": "m", "messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
      {"role": "user", "content": "Bye"}]})");
  EXPECT_EQ(p.request.chat().messages(1).reasoning_content(), "Greet back.");
  ApiError e;
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat, R"({"model": "m", "messages": [
      {"role": "assistant", "content": "x", "reasoning_content": 1}]})",
                                  &e)
                   .ok());
  EXPECT_EQ(e.param, "messages[0].reasoning_content");
}

TEST(OpenAiParseTest, ContinueFinalMessageIsAPrefill) {
  const ParsedRequest p = Parse(ApiKind::kChat, R"({"model": "m", "messages": [
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello,"}],
      "continue_final_message": true})");
  EXPECT_TRUE(p.request.chat().continue_final_message());
  EXPECT_TRUE(p.request.chat().has_add_generation_prompt());
  EXPECT_FALSE(p.request.chat().add_generation_prompt());
  for (const char* body : {R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
            "continue_final_message": true})",
                           R"({"model": "m", "messages": [{"role": "assistant", "content": "Hi"}],
            "continue_final_message": true, "add_generation_prompt": true})"}) {
    ApiError e;
    EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat, body, &e).ok()) << body;
    EXPECT_EQ(e.param, "continue_final_message") << body;
  }
}

// One token "a" (logprob -inf: too unlikely for a float) with alternatives "b" (-0.5) and "c"
// (NaN), ending the request.
llm::v1::GenerateResponse Message() {
  llm::v1::GenerateResponse m;
  m.set_text("a");
  m.add_token_ids(1);
  auto* lp = m.add_logprobs();
  lp->mutable_sampled()->set_text("a");
  lp->mutable_sampled()->set_logprob(-std::numeric_limits<float>::infinity());
  auto* b = lp->add_top();
  b->set_text("b");
  b->set_logprob(-0.5f);
  auto* c = lp->add_top();
  c->set_text("c");
  c->set_logprob(std::numeric_limits<float>::quiet_NaN());
  m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  return m;
}

TEST(OpenAiResponderTest, LogprobsTooSmallForAFloatAreNumbersNotNull) {
  {
    OpenAiResponder r(Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user",
                      "content": "x"}], "logprobs": true, "top_logprobs": 2})"),
                      "chatcmpl-1", 0);
    r.Accumulate(Message());
    const json content = json::parse(r.Body())["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 1u);
    EXPECT_EQ(content[0]["logprob"], -9999.0);
    ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[0]["top_logprobs"][0]["logprob"], -0.5);
    EXPECT_EQ(content[0]["top_logprobs"][1]["logprob"], -9999.0);
  }
  {
    OpenAiResponder r(
        Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "logprobs": 2})"), "cmpl-1",
        0);
    r.Accumulate(Message());
    const json lp = json::parse(r.Body())["choices"][0]["logprobs"];
    EXPECT_EQ(lp["token_logprobs"], json::array({-9999.0}));
    EXPECT_EQ(lp["top_logprobs"][0]["b"], -0.5);
    EXPECT_EQ(lp["top_logprobs"][0]["c"], -9999.0);
  }
  {
    OpenAiResponder r(Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user",
                      "content": "x"}], "logprobs": true, "top_logprobs": 2, "stream": true})"),
                      "chatcmpl-2", 0);
    const std::string events = r.OnStreamMessage(Message());
    const std::string first = events.substr(6, events.find("\n\n") - 6);
    const json content = json::parse(first)["choices"][0]["logprobs"]["content"];
    EXPECT_EQ(content[0]["logprob"], -9999.0);
    EXPECT_EQ(content[0]["top_logprobs"][1]["logprob"], -9999.0);
    EXPECT_EQ(events.find("\"logprob\":null"), std::string::npos) << events;
  }
}

// A token holding part of a character reports its own bytes (the worker's `bytes`), not the
// bytes of the U+FFFD its text shows; a worker that sends none gets its text's bytes.
TEST(OpenAiResponderTest, BytesAreTheTokensOwn) {
  OpenAiResponder r(Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user",
                    "content": "x"}], "logprobs": true, "top_logprobs": 1})"),
                    "chatcmpl-3", 0);
  llm::v1::GenerateResponse m;
  m.set_text("\u4f60");
  for (const char* bytes : {"\xE4\xBD", "\xA0"}) {
    auto* lp = m.add_logprobs();
    lp->mutable_sampled()->set_text("\uFFFD");
    lp->mutable_sampled()->set_bytes(bytes);
    auto* alt = lp->add_top();
    alt->set_text(" a");  // no bytes: from the text
  }
  m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  r.Accumulate(m);
  const json content = json::parse(r.Body())["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["bytes"], json::array({0xE4, 0xBD}));
  EXPECT_EQ(content[1]["bytes"], json::array({0xA0}));
  EXPECT_EQ(content[0]["top_logprobs"][0]["bytes"], json::array({0x20, 0x61}));
}

// Structured output: response_format, vLLM's structured_outputs and guided_* become the
// worker's constraint.
TEST(OpenAiParseTest, ConstraintsReachTheWorkersRequest) {
  const std::string chat = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  auto parse = [&](const std::string& extra) {
    return Parse(ApiKind::kChat, "{" + chat + ", " + extra + "}").request;
  };
  EXPECT_TRUE(parse(R"("response_format": {"type": "json_object"})").constraint().json_object());
  EXPECT_FALSE(parse(R"("response_format": {"type": "text"})").has_constraint());
  const auto schema = parse(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties":
      {"b": {"type": "integer"}, "a": {"type": "string"}}}}})");
  // The schema as given, its properties in their order.
  EXPECT_EQ(schema.constraint().json_schema(),
            R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");
  EXPECT_EQ(parse(R"("structured_outputs": {"regex": "[0-9]+"})").constraint().regex(), "[0-9]+");
  EXPECT_EQ(parse(R"("structured_outputs": {"grammar": "root ::= \"a\""})").constraint().grammar(),
            "root ::= \"a\"");
  EXPECT_EQ(parse(R"("guided_grammar": "root ::= [0-9]")").constraint().grammar(),
            "root ::= [0-9]");
  EXPECT_EQ(ErrorFromGrpc(3, "constraint.grammar: rule 'root': refers to rule 'x'", 0).param,
            "structured_outputs");
  const auto choice = parse(R"("structured_outputs": {"choice": ["yes", "no"]})");
  ASSERT_EQ(choice.constraint().choice().choices_size(), 2);
  EXPECT_EQ(choice.constraint().choice().choices(1), "no");
  EXPECT_EQ(parse(R"("guided_json": "{\"type\": \"boolean\"}")").constraint().json_schema(),
            R"({"type": "boolean"})");
  ApiError e;
  EXPECT_FALSE(
      ParseOpenAiRequest(ApiKind::kChat, "{" + chat + R"(, "guided_choice": [], "n": 1})", &e)
          .ok());
  EXPECT_EQ(e.param, "guided_choice");
  EXPECT_EQ(ErrorFromGrpc(3, "constraint.json_schema: $.a: not supported", 0).param,
            "response_format");
}

// `speculative` reaches the worker's request (unset stays unset: the worker's default), and
// the proposals' counts come back as OpenAI's predicted-output usage fields.
TEST(OpenAiParseTest, SpeculativeOptOutAndItsUsage) {
  EXPECT_FALSE(
      Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x"})").request.has_speculative());
  const ParsedRequest off =
      Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "speculative": false})");
  ASSERT_TRUE(off.request.has_speculative());
  EXPECT_FALSE(off.request.speculative());
  ApiError e;
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat,
                                  R"({"model": "m", "messages": [{"role": "user", "content":
                                  "x"}], "speculative": "no"})",
                                  &e)
                   .ok());
  EXPECT_EQ(e.param, "speculative");

  OpenAiResponder r(Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x"})"), "cmpl-4", 0);
  llm::v1::GenerateResponse m;
  m.set_text("abc");
  m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  m.mutable_usage()->set_completion_tokens(9);
  m.mutable_usage()->set_draft_tokens(12);
  m.mutable_usage()->set_accepted_draft_tokens(7);
  r.Accumulate(m);
  const json usage = json::parse(r.Body())["usage"];
  EXPECT_EQ(usage["completion_tokens_details"],
            json({{"accepted_prediction_tokens", 7}, {"rejected_prediction_tokens", 5}}));
}

// tools, tool_choice and parallel_tool_calls reach the worker's Chat; bad ones are a 400
// naming the parameter.
TEST(OpenAiParseTest, ToolsReachTheWorkersChat) {
  const std::string head = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}},
      {"type": "function", "function": {"name": "g"}}])";
  auto chat = [&](const std::string& extra) {
    return Parse(ApiKind::kChat, "{" + head + ", " + extra + "}").request.chat();
  };
  const llm::v1::Chat named =
      chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}},
          "parallel_tool_calls": false)");
  EXPECT_EQ(named.tool_choice().mode(), llm::v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  EXPECT_EQ(named.tool_choice().function_name(), "g");
  ASSERT_TRUE(named.has_parallel_tool_calls());
  EXPECT_FALSE(named.parallel_tool_calls());
  // The tools as given, keys in their order.
  EXPECT_EQ(json::parse(named.tools_json())[0]["function"]["parameters"]["properties"].dump(),
            R"({"a":{},"b":{}})");
  EXPECT_NE(named.tools_json().find(R"("b":{},"a":{})"), std::string::npos);
  EXPECT_EQ(chat(tools + R"(, "tool_choice": "required")").tool_choice().mode(),
            llm::v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  EXPECT_EQ(chat(tools).tool_choice().mode(), llm::v1::ToolChoice::TOOL_CHOICE_AUTO);
  EXPECT_EQ(chat(R"("tool_choice": "none")").tool_choice().mode(),
            llm::v1::ToolChoice::TOOL_CHOICE_NONE);
  EXPECT_TRUE(chat(R"("tools": [])").tools_json().empty());

  const auto param_of = [&](const std::string& extra) {
    ApiError e;
    EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kChat, "{" + head + ", " + extra + "}", &e).ok())
        << extra;
    return e.param;
  };
  EXPECT_EQ(param_of(R"("tools": {})"), "tools");
  EXPECT_EQ(param_of(R"("tools": [{"type": "function"}])"), "tools");
  EXPECT_EQ(param_of(R"("tools": [{"type": "function", "function": {"name": "f"}},
                                  {"type": "function", "function": {"name": "f"}}])"),
            "tools");
  EXPECT_EQ(param_of(R"("tool_choice": "required")"), "tool_choice");
  EXPECT_EQ(param_of(tools + R"(, "tool_choice": {"type": "function", "function": {"name":
      "h"}})"),
            "tool_choice");
  EXPECT_EQ(param_of(tools + R"(, "tool_choice": "sometimes")"), "tool_choice");
  EXPECT_EQ(param_of(tools + R"(, "parallel_tool_calls": "yes")"), "parallel_tool_calls");
  EXPECT_EQ(param_of(R"("functions": [])"), "functions");
  EXPECT_EQ(ErrorFromGrpc(3, "tools[0].function.parameters.properties.x: no", 0).param, "tools");
  EXPECT_EQ(ErrorFromGrpc(3, "tool_choice: this worker reads no tool calls", 0).param,
            "tool_choice");
}

// The worker's calls become message.tool_calls (content null when there is no text) and
// streamed tool_calls deltas; finish_reason tool_calls.
TEST(OpenAiResponderTest, ToolCallsInOpenAisShape) {
  const ParsedRequest req =
      Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  llm::v1::GenerateResponse m;
  auto* call = m.add_tool_calls();
  call->set_index(0);
  call->set_id("call_1");
  call->set_name("f");
  call->set_arguments(R"({"a":1})");
  m.set_finish_reason(llm::v1::FINISH_REASON_TOOL_CALLS);
  OpenAiResponder whole(req, "chatcmpl-1", 0);
  whole.Accumulate(m);
  const json choice = json::parse(whole.Body())["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["tool_calls"], json::parse(R"([{"id": "call_1", "type": "function",
                             "function": {"name": "f", "arguments": "{\"a\":1}"}}])"));

  OpenAiResponder stream(req, "chatcmpl-2", 0);
  const std::vector<json> chunks = Chunks(stream.OnStreamMessage(m));
  ASSERT_EQ(chunks.size(), 3u);  // the role, the call, the finish
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
}

// The model's thinking (the worker's reasoning_text) as DeepSeek's API and vLLM carry it:
// message.reasoning_content, and streamed delta.reasoning_content with content only once the
// answer comes; no field at all without reasoning.
TEST(OpenAiResponderTest, ReasoningIsReasoningContent) {
  const ParsedRequest req =
      Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  std::vector<llm::v1::GenerateResponse> ms(3);
  ms[0].set_reasoning_text("Two and ");
  ms[1].set_reasoning_text("two.");
  ms[1].set_text("Four");
  ms[2].set_text(".");
  ms[2].set_finish_reason(llm::v1::FINISH_REASON_STOP);
  OpenAiResponder whole(req, "chatcmpl-1", 0);
  OpenAiResponder stream(req, "chatcmpl-2", 0);
  std::vector<json> deltas;
  for (const auto& m : ms) {
    whole.Accumulate(m);
    for (const json& chunk : Chunks(stream.OnStreamMessage(m))) {
      deltas.push_back(chunk["choices"][0]["delta"]);
    }
  }
  const json message = json::parse(whole.Body())["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Four.");
  EXPECT_EQ(message["reasoning_content"], "Two and two.");
  ASSERT_EQ(deltas.size(), 4u);  // three messages, then the finish
  EXPECT_EQ(deltas[0], json::parse(R"({"role": "assistant", "reasoning_content": "Two and "})"));
  EXPECT_EQ(deltas[1], json::parse(R"({"content": "Four", "reasoning_content": "two."})"));
  EXPECT_EQ(deltas[2], json::parse(R"({"content": "."})"));
  OpenAiResponder plain(req, "chatcmpl-3", 0);
  plain.Accumulate(ms[2]);
  EXPECT_FALSE(json::parse(plain.Body())["choices"][0]["message"].contains("reasoning_content"));
}

// A call streamed in pieces: the first delta has the id, type and name, later ones only the
// index and the next part of the arguments (OpenAI's shape); the whole answer joins them.
TEST(OpenAiResponderTest, ToolCallPiecesStreamAsArgumentDeltas) {
  const ParsedRequest req =
      Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  std::vector<llm::v1::GenerateResponse> messages(3);
  const auto piece = [&](int m, uint32_t index, const char* id, const char* args) {
    auto* call = messages[m].add_tool_calls();
    call->set_index(index);
    call->set_id(id);
    if (*id != '\0') call->set_name(index == 0 ? "f" : "g");
    call->set_arguments(args);
  };
  piece(0, 0, "call_1", "{\"a\":");
  piece(1, 0, "", "1}");
  piece(1, 1, "call_2", "{");
  piece(2, 1, "", "}");
  messages[2].set_finish_reason(llm::v1::FINISH_REASON_TOOL_CALLS);
  OpenAiResponder whole(req, "chatcmpl-1", 0);
  OpenAiResponder stream(req, "chatcmpl-2", 0);
  std::vector<json> deltas;
  for (const auto& m : messages) {
    whole.Accumulate(m);
    for (const json& chunk : Chunks(stream.OnStreamMessage(m))) {
      const json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("tool_calls")) {
        for (const json& d : delta["tool_calls"]) deltas.push_back(d);
      }
    }
  }
  EXPECT_EQ(json::parse(whole.Body())["choices"][0]["message"]["tool_calls"],
            json::parse(R"([{"id": "call_1", "type": "function",
                             "function": {"name": "f", "arguments": "{\"a\":1}"}},
                            {"id": "call_2", "type": "function",
                             "function": {"name": "g", "arguments": "{}"}}])"));
  ASSERT_EQ(deltas.size(), 4u);
  EXPECT_EQ(deltas[0], json::parse(R"({"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": "f", "arguments": "{\"a\":"}})"));
  EXPECT_EQ(deltas[1], json::parse(R"({"index": 0, "function": {"arguments": "1}"}})"));
  EXPECT_EQ(deltas[2]["id"], "call_2");
  EXPECT_EQ(deltas[3], json::parse(R"({"index": 1, "function": {"arguments": "}"}})"));
}

// n = 2: the choices' messages interleave; each choice gets its role once and its own index,
// the body holds both, and usage counts the prompt once, the most cached of it, and both
// choices' completions.
TEST(OpenAiResponderTest, ChoicesKeepTheirIndexAndUsageCountsThePromptOnce) {
  const ParsedRequest req = Parse(
      ApiKind::kChat, R"({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(req.n, 2);
  EXPECT_EQ(req.request.n(), 2u);
  auto message = [](uint32_t index, const std::string& text, bool last, uint32_t cached) {
    llm::v1::GenerateResponse m;
    m.set_index(index);
    m.set_text(text);
    if (last) {
      m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
      m.mutable_usage()->set_prompt_tokens(40);
      m.mutable_usage()->set_cached_prompt_tokens(cached);
      m.mutable_usage()->set_completion_tokens(3);
    }
    return m;
  };
  const std::vector<llm::v1::GenerateResponse> messages = {
      message(0, "a", false, 0), message(1, "x", false, 0), message(0, "b", true, 0),
      message(1, "y", true, 32), message(5, "beyond n: dropped", true, 0)};
  OpenAiResponder whole(req, "chatcmpl-1", 0);
  for (const auto& m : messages) whole.Accumulate(m);
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "ab");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], "xy");
  EXPECT_EQ(body["usage"], json::parse(R"({"prompt_tokens": 40, "completion_tokens": 6,
      "total_tokens": 46, "prompt_tokens_details": {"cached_tokens": 32}})"));

  OpenAiResponder stream(req, "chatcmpl-2", 0);
  std::map<int, std::string> text;
  std::map<int, int> roles, finishes;
  for (const auto& m : messages) {
    for (const json& chunk : Chunks(stream.OnStreamMessage(m))) {
      const json& c = chunk["choices"][0];
      const int i = c["index"];
      if (c["delta"].contains("role")) ++roles[i];
      if (c["delta"].contains("content")) text[i] += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) ++finishes[i];
    }
  }
  EXPECT_EQ(text, (std::map<int, std::string>{{0, "ab"}, {1, "xy"}}));
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(stream.UnfinishedChoices(), 0);
}

// A completion's list of prompts is one request: the first prompt in place, the rest in
// more_prompts, each a string or token ids; a bad one is named by its place in the list.
TEST(OpenAiParseTest, APromptListIsOneRequestOfMorePrompts) {
  ParsedRequest req =
      Parse(ApiKind::kCompletion, R"({"model": "m", "n": 2, "prompt": ["a", [1, 2], "c"]})");
  EXPECT_EQ(req.prompts, 3);
  EXPECT_EQ(req.request.text(), "a");
  ASSERT_EQ(req.request.more_prompts_size(), 2);
  EXPECT_EQ(req.request.more_prompts(0).token_ids().ids_size(), 2);
  EXPECT_EQ(req.request.more_prompts(1).text(), "c");
  req = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": [[7, 8]]})");  // a list of one
  EXPECT_EQ(req.prompts, 1);
  EXPECT_EQ(req.request.token_ids().ids_size(), 2);
  EXPECT_EQ(req.request.more_prompts_size(), 0);
  for (const auto& [prompt, param] :
       std::vector<std::pair<std::string, std::string>>{{R"(["a", 3])", "prompt[1]"},
                                                        {R"(["a", []])", "prompt[1]"},
                                                        {R"([[1, -2], "b"])", "prompt[0]"},
                                                        {R"(["a", {"text": "b"}])", "prompt[1]"}}) {
    ApiError e;
    EXPECT_FALSE(
        ParseOpenAiRequest(ApiKind::kCompletion, R"({"model": "m", "prompt": )" + prompt + "}", &e)
            .ok());
    EXPECT_EQ(e.param, param) << prompt;
  }
}

// Past 128 choices over the prompts is refused before anything holds a place for them; a
// worker's refusal of a later prompt names its place in the list.
TEST(OpenAiParseTest, ChoicesOverThePromptsAreBounded) {
  std::string list = "[\"a\"";
  for (int i = 1; i < 65; ++i) list += ", \"a\"";
  list += "]";
  ApiError e;
  EXPECT_TRUE(ParseOpenAiRequest(
                  ApiKind::kCompletion,
                  R"({"model": "m", "n": 2, "prompt": [")" + std::string("a") + R"(", "b"]})", &e)
                  .ok());
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kCompletion,
                                  R"({"model": "m", "n": 2, "prompt": )" + list + "}", &e)
                   .ok());
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("65 prompts of n = 2 are 130 choices"), std::string::npos) << e.message;
  for (int i = 65; i < 129; ++i) list.insert(1, "\"a\", ");
  EXPECT_FALSE(
      ParseOpenAiRequest(ApiKind::kCompletion, R"({"model": "m", "prompt": )" + list + "}", &e)
          .ok());
  EXPECT_NE(e.message.find("'prompt' lists 129 prompts"), std::string::npos) << e.message;
  EXPECT_EQ(ErrorFromGrpc(3, "more_prompts[1].token_ids.ids[0]: 9 is outside", 0).param,
            "prompt[2]");
  EXPECT_EQ(ErrorFromGrpc(3, "text: empty", 0).param, "prompt");
}

// Prompt p's choices are p * n .. p * n + n - 1; usage counts each prompt once.
TEST(OpenAiResponderTest, UsageCountsEachPromptOnce) {
  const ParsedRequest req =
      Parse(ApiKind::kCompletion, R"({"model": "m", "n": 2, "prompt": ["a", "bb"]})");
  OpenAiResponder r(req, "cmpl-1", 0);
  for (uint32_t i = 0; i < 4; ++i) {
    llm::v1::GenerateResponse m;
    m.set_index(i);
    m.set_text(std::to_string(i));
    m.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
    m.mutable_usage()->set_prompt_tokens(i < 2 ? 5 : 7);
    m.mutable_usage()->set_completion_tokens(1);
    if (i != 3) r.Accumulate(m);
  }
  EXPECT_EQ(r.UnfinishedChoices(), 1);  // choice 3 never came
  llm::v1::GenerateResponse last;
  last.set_index(3);
  last.set_finish_reason(llm::v1::FINISH_REASON_STOP);
  last.mutable_usage()->set_prompt_tokens(7);
  last.mutable_usage()->set_completion_tokens(1);
  r.Accumulate(last);
  EXPECT_EQ(r.UnfinishedChoices(), 0);
  const json body = json::parse(r.Body());
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][2]["text"], "2");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
}

// Two messages of one choice: ids 5 and 6 (the first with the prompt's ids 1 2 3), then 7, the
// end; each with its usage so far (a worker asked for continuous usage sends that).
std::vector<llm::v1::GenerateResponse> WithIds() {
  std::vector<llm::v1::GenerateResponse> out(2);
  out[0].set_text("ab");
  out[0].add_token_ids(5);
  out[0].add_token_ids(6);
  for (int id : {1, 2, 3}) out[0].add_prompt_token_ids(id);
  out[0].mutable_usage()->set_prompt_tokens(3);
  out[0].mutable_usage()->set_completion_tokens(2);
  out[1].add_token_ids(7);  // a token whose text is held back: only its id
  out[1].set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  out[1].mutable_usage()->set_prompt_tokens(3);
  out[1].mutable_usage()->set_completion_tokens(3);
  return out;
}

// vLLM's return_token_ids: the prompt's ids (a chat's at the top, a completion's in its choice)
// and every output id, streamed or not; the worker is asked for the prompt's ids.
TEST(OpenAiResponderTest, ReturnTokenIdsGivesThePromptsAndTheOutputsIds) {
  const ParsedRequest chat = Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role":
      "user", "content": "x"}], "return_token_ids": true})");
  EXPECT_TRUE(chat.request.stream().include_prompt_ids());
  EXPECT_FALSE(Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content":
      "x"}]})")
                   .request.stream()
                   .include_prompt_ids());
  OpenAiResponder whole(chat, "chatcmpl-1", 0);
  for (const auto& m : WithIds()) whole.Accumulate(m);
  json body = json::parse(whole.Body());
  EXPECT_EQ(body["prompt_token_ids"], json({1, 2, 3}));
  EXPECT_EQ(body["choices"][0]["token_ids"], json({5, 6, 7}));

  OpenAiResponder stream(chat, "chatcmpl-2", 0);
  bool done = false;
  std::string sse;
  for (const auto& m : WithIds()) sse += stream.OnStreamMessage(m);
  json ids = json::array(), prompt;
  for (const json& chunk : Events(sse + stream.StreamEnd(), &done)) {
    if (chunk.contains("prompt_token_ids")) prompt = chunk["prompt_token_ids"];
    for (const json& x : chunk["choices"][0].value("token_ids", json::array())) ids.push_back(x);
  }
  EXPECT_EQ(prompt, json({1, 2, 3}));
  EXPECT_EQ(ids, json({5, 6, 7}));

  const ParsedRequest completion =
      Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "return_token_ids": true})");
  OpenAiResponder c(completion, "cmpl-1", 0);
  for (const auto& m : WithIds()) c.Accumulate(m);
  body = json::parse(c.Body());
  EXPECT_EQ(body["choices"][0]["prompt_token_ids"], json({1, 2, 3}));
  EXPECT_EQ(body["choices"][0]["token_ids"], json({5, 6, 7}));
  EXPECT_FALSE(body.contains("prompt_token_ids"));
}

// stream_options.continuous_usage_stats (vLLM's): every chunk has its choice's usage so far;
// it needs include_usage, as vLLM's does, and asks the worker for usage in every message.
TEST(OpenAiResponderTest, ContinuousUsageStatsPutUsageInEveryChunk) {
  const ParsedRequest p = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x",
      "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  EXPECT_TRUE(p.request.stream().continuous_usage());
  OpenAiResponder r(p, "cmpl-1", 0);
  std::string sse;
  for (const auto& m : WithIds()) sse += r.OnStreamMessage(m);
  bool done = false;
  const std::vector<json> chunks = Events(sse, &done);
  ASSERT_EQ(chunks.size(), 2u) << sse;
  EXPECT_EQ(chunks[0]["usage"],
            json({{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}));
  EXPECT_EQ(chunks[1]["usage"]["completion_tokens"], 3);
  const ParsedRequest without = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x",
      "stream": true, "stream_options": {"continuous_usage_stats": true}})");
  EXPECT_FALSE(without.continuous_usage);
  EXPECT_FALSE(without.request.stream().continuous_usage());
  ApiError e;
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kCompletion, R"({"model": "m", "prompt": "x",
      "stream": true, "stream_options": {"continuous_usage_stats": 1}})",
                                  &e)
                   .ok());
  EXPECT_EQ(e.param, "stream_options.continuous_usage_stats");
}

// One prompt entry: `text`, its logprob and one alternative (itself).
void PromptEntry(llm::v1::GenerateResponse& m, const char* text, float logprob) {
  auto* lp = m.add_prompt_logprobs();
  lp->mutable_sampled()->set_text(text);
  lp->mutable_sampled()->set_logprob(logprob);
  auto* top = lp->add_top();
  top->set_text(text);
  top->set_logprob(logprob);
}

// echo (what lm-eval's loglikelihood sends, with logprobs and token ids): the prompt's tokens
// lead the text and the logprobs, the first token's null, the offsets running on into the
// output; a text prompt is echoed as sent. The worker is asked for the prompt's logprobs.
TEST(OpenAiResponderTest, EchoPutsThePromptsTokensFirst) {
  const ParsedRequest p = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": [[5, 6], "xy"],
      "echo": true, "logprobs": 1, "max_tokens": 1})");
  EXPECT_EQ(p.request.prompt_logprobs(), 1u);
  EXPECT_FALSE(Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x"})")
                   .request.has_prompt_logprobs());
  // A text prompt echoed without logprobs needs nothing from the worker; token ids need their
  // text.
  EXPECT_FALSE(Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x", "echo": true})")
                   .request.has_prompt_logprobs());
  EXPECT_TRUE(Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": [5], "echo": true})")
                  .request.has_prompt_logprobs());
  std::vector<llm::v1::GenerateResponse> m(2);
  for (uint32_t i = 0; i < 2; ++i) {
    m[i].set_index(i);
    PromptEntry(m[i], "A", 0.0f);
    PromptEntry(m[i], "B", -0.5f);
    m[i].set_text("c");
    auto* lp = m[i].add_logprobs();
    lp->mutable_sampled()->set_text("c");
    lp->mutable_sampled()->set_logprob(-1.0f);
    m[i].set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
  }
  OpenAiResponder whole(p, "cmpl-1", 0);
  for (const auto& x : m) whole.Accumulate(x);
  const json body = json::parse(whole.Body());
  const json& c = body["choices"][0];
  EXPECT_EQ(c["text"], "ABc");
  EXPECT_EQ(c["logprobs"]["tokens"], json({"A", "B", "c"}));
  EXPECT_EQ(c["logprobs"]["token_logprobs"], json({nullptr, -0.5, -1.0}));
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0], nullptr);
  EXPECT_EQ(c["logprobs"]["top_logprobs"][1], json({{"B", -0.5}}));
  EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(body["choices"][1]["text"], "xyc");  // a text prompt, as sent

  OpenAiResponder stream(p, "cmpl-2", 0);
  std::string sse;
  for (const auto& x : m) sse += stream.OnStreamMessage(x);
  bool done = false;
  const std::vector<json> chunks = Events(sse, &done);
  ASSERT_EQ(chunks.size(), 4u) << sse;
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "AB");
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["token_logprobs"], json({nullptr, -0.5}));
  EXPECT_EQ(chunks[1]["choices"][0]["text"], "c");
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["text_offset"], json({2}));

  // max_tokens 0 with echo: the worker computes a token; the answer is the prompt alone.
  const ParsedRequest none = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": [5, 6],
      "echo": true, "logprobs": 1, "max_tokens": 0})");
  EXPECT_EQ(none.request.max_tokens(), 1u);
  m[0].mutable_usage()->set_prompt_tokens(2);
  m[0].mutable_usage()->set_completion_tokens(1);
  OpenAiResponder alone(none, "cmpl-3", 0);
  alone.Accumulate(m[0]);
  const json only = json::parse(alone.Body());
  EXPECT_EQ(only["choices"][0]["text"], "AB");
  EXPECT_EQ(only["choices"][0]["logprobs"]["token_logprobs"], json({nullptr, -0.5}));
  EXPECT_EQ(only["usage"]["completion_tokens"], 0);
  EXPECT_EQ(only["usage"]["total_tokens"], 2);
  EXPECT_TRUE(alone.MissingFromWorker().empty());

  // A worker that ignored prompt_logprobs (older than the router): said, not a silent gap.
  OpenAiResponder old(p, "cmpl-4", 0);
  llm::v1::GenerateResponse bare = m[0];
  bare.clear_prompt_logprobs();
  old.Accumulate(bare);
  EXPECT_NE(old.MissingFromWorker().find("no prompt logprobs"), std::string::npos);
}

// vLLM's prompt_logprobs: [null, {"id": {"logprob", "rank", "decoded_token"}}, ...], the
// prompt token's rank the worker's and the alternatives' their place; a chat's at the top, a
// completion's in each choice, streamed in the first chunk.
TEST(OpenAiResponderTest, PromptLogprobsInVllmsShape) {
  const ParsedRequest chat = Parse(ApiKind::kChat, R"({"model": "m", "messages": [{"role":
      "user", "content": "x"}], "prompt_logprobs": 1})");
  EXPECT_EQ(chat.request.prompt_logprobs(), 1u);
  llm::v1::GenerateResponse m;
  m.add_prompt_logprobs()->mutable_sampled()->set_text("A");
  auto* b = m.add_prompt_logprobs();
  b->mutable_sampled()->set_token_id(7);
  b->mutable_sampled()->set_text("B");
  b->mutable_sampled()->set_logprob(-2.0f);
  b->mutable_sampled()->set_rank(3);
  b->add_top()->set_token_id(9);
  b->mutable_top(0)->set_text("C");
  b->mutable_top(0)->set_logprob(-0.1f);
  m.set_text("z");
  m.set_finish_reason(llm::v1::FINISH_REASON_STOP);
  const json want =
      json::array({nullptr,
                   {{"9", {{"logprob", -0.1f}, {"rank", 1}, {"decoded_token", "C"}}},
                    {"7", {{"logprob", -2.0f}, {"rank", 3}, {"decoded_token", "B"}}}}});
  OpenAiResponder whole(chat, "chatcmpl-1", 0);
  whole.Accumulate(m);
  EXPECT_EQ(json::parse(whole.Body())["prompt_logprobs"], want);
  OpenAiResponder stream(chat, "chatcmpl-2", 0);
  bool done = false;
  const std::vector<json> chunks = Events(stream.OnStreamMessage(m), &done);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0]["prompt_logprobs"], want);
  const ParsedRequest completion = Parse(ApiKind::kCompletion, R"({"model": "m", "prompt": "x",
      "prompt_logprobs": 1})");
  OpenAiResponder c(completion, "cmpl-1", 0);
  c.Accumulate(m);
  EXPECT_EQ(json::parse(c.Body())["choices"][0]["prompt_logprobs"], want);
  ApiError e;
  EXPECT_FALSE(ParseOpenAiRequest(ApiKind::kCompletion,
                                  R"({"model": "m", "prompt": "x", "prompt_logprobs": 21})", &e)
                   .ok());
  EXPECT_EQ(e.param, "prompt_logprobs");
}

}  // namespace
}  // namespace llm::router::openai
