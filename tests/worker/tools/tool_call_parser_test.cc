#include "worker/tools/tool_call_parser.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/constraint/fuzz.h"

namespace llm::tools {
namespace {

struct Result {
  std::string content;
  std::vector<std::string> calls;  // "name arguments"
};

// Puts a call's pieces together, checking their order: a first piece (named) opens the next
// call, a later one (no name) extends the last.
void Add(Result& r, const ParseOutput& out) {
  r.content += out.content;
  for (const ParsedCall& c : out.calls) {
    if (c.name.empty()) {
      ASSERT_EQ(c.index + 1, static_cast<int>(r.calls.size())) << "a piece of no open call";
      EXPECT_FALSE(c.arguments.empty()) << "an empty piece";
      r.calls.back() += c.arguments;
    } else {
      ASSERT_EQ(c.index, static_cast<int>(r.calls.size()));
      r.calls.push_back(c.name + " " + c.arguments);
    }
  }
}

// The output fed in pieces of `step` bytes (0: whole).
Result Parse(ToolFormat format, const std::string& text, size_t step, bool parallel = true) {
  ToolCallParser parser(format, parallel);
  Result r;
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) Add(r, parser.Feed(text.substr(i, step)));
  Add(r, parser.Finish());
  return r;
}

struct Case {
  ToolFormat format;
  std::string text;
  std::string content;
  std::vector<std::string> calls;
};

// Every split of the stream gives what the whole text gives.
void ExpectParses(const Case& c) {
  for (size_t step : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    const Result r = Parse(c.format, c.text, step);
    EXPECT_EQ(r.content, c.content) << c.text << " in pieces of " << step;
    EXPECT_EQ(r.calls, c.calls) << c.text << " in pieces of " << step;
  }
}

TEST(ToolCallParserTest, Hermes) {
  const ToolFormat f = ToolFormat::kHermes;
  ExpectParses({f,
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris\"}}\n</tool_call>",
                "Let me check.\n",
                {"get_weather {\"city\":\"Paris\"}"}});
  // Two calls; the newline between them is not content.
  ExpectParses({f,
                "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                "{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": null}]}}\n</tool_call>\n",
                "",
                {"a {}", "b {\"x\":[1,{\"y\":null}]}"}});
  // Braces and quotes inside strings do not end the object.
  ExpectParses({f,
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"}{\\\"]\"}}</tool_call>",
                "",
                {"f {\"s\":\"}{\\\"]\"}"}});
  // No end tag (the model stopped after the object): still a call.
  ExpectParses({f, "<tool_call>\n{\"name\":\"f\",\"arguments\":{}}", "", {"f {}"}});
  // Arguments keep the model's key order.
  ExpectParses({f,
                "<tool_call>{\"name\":\"f\",\"arguments\":{\"z\":1,\"a\":2}}</tool_call>",
                "",
                {"f {\"z\":1,\"a\":2}"}});
  // Arguments given as a string (an object's JSON text) are that object.
  ExpectParses({f,
                "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call>",
                "",
                {"f {\"a\":1}"}});
}

// A call whose object opens with its name and then its arguments' object streams: the name
// comes as soon as the arguments' '{' is read, and the arguments in pieces as they are written,
// whitespace outside strings dropped.
TEST(ToolCallParserTest, ACallStreamsAsTheModelWritesIt) {
  const std::string head = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {";
  const std::string text = head + " \"city\" : \"Le Havre\", \"days\": [1, 2] }}\n</tool_call>";
  ToolCallParser parser(ToolFormat::kHermes, true, {"get_weather"});
  Result r;
  int pieces = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const ParseOutput out = parser.Feed(text.substr(i, 1));
    Add(r, out);
    pieces += static_cast<int>(out.calls.size());
    if (i + 1 == head.size()) {  // the opening is complete: the call is there, named
      ASSERT_EQ(r.calls, std::vector<std::string>{"get_weather {"});
    }
  }
  Add(r, parser.Finish());
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls,
            std::vector<std::string>{"get_weather {\"city\":\"Le Havre\",\"days\":[1,2]}"});
  EXPECT_GT(pieces, 20);  // one per byte that the arguments kept
  EXPECT_EQ(parser.calls(), 1);
}

// A committed call is not given back: cut off (max_tokens), its arguments stay as written.
TEST(ToolCallParserTest, ACutOffStreamedCallKeepsWhatWasWritten) {
  ExpectParses({ToolFormat::kHermes,
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Pa",
                "",
                {"f {\"city\":\"Pa"}});
  ExpectParses({ToolFormat::kMistral,
                "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
                "\"arguments\": {\"b\": [",
                "",
                {"f {\"a\":1}", "g {\"b\":["}});
}

// A streamed call whose object the model leaves open after its arguments ends there: what
// follows (its end tag, text, the next call) is read as after any call, nothing lost.
TEST(ToolCallParserTest, AnObjectLeftOpenAfterItsArgumentsEndsThere) {
  ExpectParses({ToolFormat::kHermes,
                "<tool_call>\n{\"name\":\"a\",\"arguments\":{\"x\":1}\n</tool_call>\n"
                "<tool_call>{\"name\":\"b\",\"arguments\":{\"y\":2}}\n</tool_call>\nDone.",
                "\nDone.",
                {"a {\"x\":1}", "b {\"y\":2}"}});
  // Keys after the arguments that never close are text.
  ExpectParses({ToolFormat::kHermes,
                "<tool_call>{\"name\":\"a\",\"arguments\":{},\"id\": \"q",
                ",\"id\": \"q",
                {"a {}"}});
}

// Calls of other shapes are read whole: the arguments before the name, or as a string.
TEST(ToolCallParserTest, OtherShapesAreReadWhole) {
  const ToolFormat f = ToolFormat::kHermes;
  ExpectParses({f,
                "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>",
                "",
                {"f {\"a\":1}"}});
  ExpectParses({f,
                "<tool_call>{\"name\": \"f\", \"id\": 3, \"arguments\": {\"a\": 1}}</tool_call>",
                "",
                {"f {\"a\":1}"}});
  // Keys after the arguments end the object as usual.
  ExpectParses({f,
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"}\"}, \"x\": [\"]\"]}"
                "</tool_call> ok",
                " ok",
                {"f {\"a\":\"}\"}"}});
}

TEST(ToolCallParserTest, HermesGivesBackWhatIsNotACall) {
  const ToolFormat f = ToolFormat::kHermes;
  for (const std::string text : {
           "a < b, and <tool is not a tag",
           "<tool_call>\n{not json}\n</tool_call> then text",
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",  // no name
           "<tool_call>\n{\"name\": \"f\", \"argu",           // cut off
           "<tool_call>\nplain words",
           "ends on a partial marker <tool_c",
       }) {
    ExpectParses({f, text, text, {}});
  }
  // Text after a call stays content.
  ExpectParses({f, "<tool_call>{\"name\":\"f\"}</tool_call>\n\nDone.", "\n\nDone.", {"f {}"}});
}

TEST(ToolCallParserTest, Llama3Json) {
  const ToolFormat f = ToolFormat::kLlama3Json;
  ExpectParses({f, "{\"name\": \"f\", \"parameters\": {\"x\": 1}}", "", {"f {\"x\":1}"}});
  ExpectParses({f,
                " <|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", "
                "\"parameters\": {\"q\": \"a;b\"}}",
                "",
                {"f {}", "g {\"q\":\"a;b\"}"}});
  // Calls only where the answer starts: later braces are text.
  for (const std::string text : {"Hello {\"name\": \"f\"}", "  plain text", "{\"answer\": 42}",
                                 "<|python_tag|>print(1)", "{\"name\": \"f\", \"param"}) {
    ExpectParses({f, text, text, {}});
  }
}

TEST(ToolCallParserTest, Mistral) {
  const ToolFormat f = ToolFormat::kMistral;
  ExpectParses({f,
                "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"name\": "
                "\"g\", \"arguments\": {}}]",
                "",
                {"f {\"a\":[1,2]}", "g {}"}});
  ExpectParses({f, "Sure. [TOOL_CALLS][{\"name\":\"f\",\"arguments\":{}}]", "Sure. ", {"f {}"}});
  for (const std::string text : {"[TOOL", "[not a call]", "[TOOL_CALLS] oops"}) {
    ExpectParses({f, text, text, {}});
  }
}

// Granite 3.x: mistral's list behind <|tool_call|>, its keys in either order (the model card's
// examples put "arguments" first).
TEST(ToolCallParserTest, Granite) {
  const ToolFormat f = ToolFormat::kGranite;
  ExpectParses({f,
                "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"arguments\": "
                "{\"city\": \"Boston, MA\"}, \"name\": \"g\"}]",
                "",
                {"f {\"a\":[1,2]}", "g {\"city\":\"Boston, MA\"}"}});
  ExpectParses({f,
                "Let me check.<|tool_call|> [{\"name\":\"f\",\"arguments\":{}}]",
                "Let me check.",
                {"f {}"}});
  // Granite 3.1's marker.
  ExpectParses({f, "<tool_call>[{\"name\":\"f\",\"arguments\":{}}]", "", {"f {}"}});
  ExpectParses({f, "a <tool_call", "a <tool_call", {}});
  for (const std::string text : {"<|tool", "<|tool_call|> oops", "[TOOL_CALLS] [{\"name\": \"f\"}]",
                                 "[{\"name\":\"f\",\"arguments\":{}}]"}) {
    ExpectParses({f, text, text, {}});
  }
}

// Our own form, for templates with none: the whole answer is a JSON array of calls.
TEST(ToolCallParserTest, Json) {
  const ToolFormat f = ToolFormat::kJson;
  ExpectParses({f,
                "[{\"name\":\"f\",\"arguments\":{\"a\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}]",
                "",
                {"f {\"a\":[1,2]}", "g {}"}});
  ExpectParses({f, " [ {\"name\": \"f\", \"parameters\": {}} ] ", "", {"f {}"}});
  // Text after the array is content; so is an answer that is not an array of calls, a list
  // of objects without arguments among them.
  ExpectParses({f, "[{\"name\":\"f\",\"arguments\":{}}] ok", " ok", {"f {}"}});
  for (const std::string text : {"plain text", "[1, 2]", "[{\"name\": \"Ann\", \"age\": 30}]",
                                 "Sure: [{\"name\":\"f\",\"arguments\":{}}]", "[{\"name\":"}) {
    ExpectParses({f, text, text, {}});
  }
  // Calls after the first are dropped when not parallel.
  const Result one =
      Parse(f, "[{\"name\":\"a\",\"arguments\":{}},{\"name\":\"b\",\"arguments\":{}}]", 1, false);
  EXPECT_EQ(one.calls, std::vector<std::string>{"a {}"});
  EXPECT_EQ(one.content, "");
}

// Only the request's functions, with object arguments, are calls; anything else is text.
TEST(ToolCallParserTest, WhatIsNotTheRequestsCallIsText) {
  const auto parse = [](ToolFormat f, const std::string& text) {
    ToolCallParser parser(f, true, {"get_weather"});
    Result r;
    Add(r, parser.Feed(text));
    Add(r, parser.Finish());
    return r;
  };
  for (const std::string text : {
           "<tool_call>{\"name\": \"other\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"not json\"}</tool_call>",
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": 3}</tool_call>",
       }) {
    const Result r = parse(ToolFormat::kHermes, text);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty()) << text;
  }
  // Llama 3 without <|python_tag|>: a JSON answer that merely has a "name" is an answer.
  const std::string person = "{\"name\": \"get_weather\", \"age\": 30}";
  EXPECT_EQ(parse(ToolFormat::kLlama3Json, person).content, person);
  EXPECT_EQ(parse(ToolFormat::kLlama3Json, "<|python_tag|>" + person).calls,
            std::vector<std::string>{"get_weather {}"});
  EXPECT_EQ(parse(ToolFormat::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {}}").calls,
            std::vector<std::string>{"get_weather {}"});
}

TEST(ToolCallParserTest, NoneIsText) {
  const std::string text = "<tool_call>{\"name\":\"f\"}</tool_call>";
  ExpectParses({ToolFormat::kNone, text, text, {}});
}

// Calls after the first are dropped, whether read whole or streamed.
TEST(ToolCallParserTest, OneCallWhenNotParallel) {
  for (const auto& [text, first] : std::vector<std::pair<std::string, std::string>>{
           {"<tool_call>{\"name\":\"a\"}</tool_call>\n<tool_call>{\"name\":\"b\"}</tool_call>",
            "a {}"},
           {"<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>\n"
            "<tool_call>{\"name\":\"b\",\"arguments\":{\"y\":2}}</tool_call>",
            "a {\"x\":1}"}}) {
    const Result r = Parse(ToolFormat::kHermes, text, 1, /*parallel=*/false);
    EXPECT_EQ(r.calls, std::vector<std::string>{first});
    EXPECT_EQ(r.content, "");
  }
}

TEST(ToolCallParserTest, DeepNestingIsText) {
  std::string text = "<tool_call>{\"name\":\"f\",\"arguments\":";
  text += std::string(200, '[');
  ExpectParses({ToolFormat::kHermes, text, text, {}});
}

// Streams must not depend on where the text is cut: random edits of call texts in every format
// (braces, quotes, escapes and markers put in, spans deleted or repeated) parse the same fed
// whole, a byte at a time and in pieces of 2, 3 and 7, and never throw.
TEST(ToolCallParserTest, EditedCallsParseTheSameInAnyPieces) {
  const std::vector<std::pair<ToolFormat, std::string>> seeds = {
      {ToolFormat::kHermes,
       "Let me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"}{\\\"]\", "
       "\"n\": [1, {\"y\": null}]}}\n</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":"
       "\"{\\\"a\\\":1}\"}</tool_call> done"},
      {ToolFormat::kLlama3Json,
       " <|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", "
       "\"parameters\": {\"q\": \"a;b\"}}"},
      {ToolFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"x\": [true, \"\\u00e9\"]}}"},
      {ToolFormat::kMistral,
       "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"name\": "
       "\"g\", \"arguments\": {}, \"id\": \"abc123xyz\"}]"},
      {ToolFormat::kJson,
       "[{\"name\":\"f\",\"arguments\":{\"s\":\"]\\\"[\",\"n\":[1]}},{\"arguments\":{},"
       "\"name\":\"g\"}] and text"}};
  const int runs = constraint::fuzz::EnvInt("LLM_FUZZ_RUNS", 3000);
  std::mt19937 rng(constraint::fuzz::EnvInt("LLM_FUZZ_SEED", 20261129));
  for (int i = 0; i < runs && !HasFailure(); ++i) {
    const auto& [format, seed] = seeds[i % seeds.size()];
    const std::string text = constraint::fuzz::Edited(seed, "{}[]\",:\\ \n<>/_|TOOLCALS", rng);
    Result whole;
    try {
      whole = Parse(format, text, 0);
      for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
        const Result r = Parse(format, text, step);
        EXPECT_EQ(r.content, whole.content) << text << " in pieces of " << step;
        EXPECT_EQ(r.calls, whole.calls) << text << " in pieces of " << step;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw " << e.what() << " on " << text;
    }
  }
}

}  // namespace
}  // namespace llm::tools
