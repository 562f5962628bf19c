#include "worker/tools/tool_grammar.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/worker/constraint/fuzz.h"
#include "tests/worker/constraint/regex_language.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/token_table.h"
#include "worker/tools/tool_call_parser.h"

namespace llm::tools {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
      "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}}
])");

bool Accepts(const absl::StatusOr<constraint::RulePatterns>& rules, const std::string& text) {
  return constraint::PatternsLanguage(rules)(text);
}

constraint::RulePatterns Calls(ToolFormat format, ToolChoice choice, bool parallel) {
  auto tools = ParseTools(kTools);
  EXPECT_TRUE(tools.ok()) << tools.status();
  auto rules = ToolCallPatterns(format, *tools, choice, parallel);
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.value_or(constraint::RulePatterns{{"x"}, {"x"}, false});
}

const std::string kWeather = R"({"name":"get_weather","arguments":{"city":"Paris","unit":"c"}})";
const std::string kNow = R"({"name":"now","arguments":{}})";

TEST(ToolGrammarTest, HermesCallsInTheTemplatesForm) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const std::string one = "<tool_call>\n" + kWeather + "\n</tool_call>";
  const std::string two = one + "\n<tool_call>\n" + kNow + "\n</tool_call>";
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kHermes, required, true), one));
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kHermes, required, true), two));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kHermes, required, false), two));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kHermes, required, true), "text"));
  // The argument schema holds: unit must be c or f.
  std::string bad = one;
  bad.replace(bad.find("\"c\""), 3, "\"k\"");
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kHermes, required, true), bad));
  // A named function: only that one.
  const ToolChoice named{ToolChoice::Mode::kFunction, "now"};
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kHermes, named, true), one));
  EXPECT_TRUE(
      Accepts(Calls(ToolFormat::kHermes, named, true), "<tool_call>\n" + kNow + "\n</tool_call>"));
  // What the grammar admits, the parser reads back.
  ToolCallParser parser(ToolFormat::kHermes, true);
  ParseOutput out = parser.Feed(two);
  ParseOutput end = parser.Finish();
  EXPECT_EQ(out.content + end.content, "");
  ASSERT_EQ(out.calls.size() + end.calls.size(), 2u);
}

TEST(ToolGrammarTest, Llama3AndMistral) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  EXPECT_TRUE(
      Accepts(Calls(ToolFormat::kLlama3Json, required, true), R"({"name":"now","parameters":{}})"));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kLlama3Json, required, true), kNow));
  const std::string mistral = "[TOOL_CALLS] [" + kWeather + ", " + kNow + "]";
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kMistral, required, true), mistral));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kMistral, required, false), mistral));
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kMistral, required, false), "[TOOL_CALLS] [" + kNow + "]"));
}

TEST(ToolGrammarTest, Granite) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const std::string two = "<|tool_call|>[" + kWeather + ", " + kNow + "]";
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kGranite, required, true), two));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kGranite, required, false), two));
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kGranite, required, false), "<|tool_call|>[" + kNow + "]"));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kGranite, required, true), "[" + kNow + "]"));
  // What the grammar admits, the parser reads back.
  ToolCallParser parser(ToolFormat::kGranite, true);
  ParseOutput out = parser.Feed(two);
  ParseOutput end = parser.Finish();
  EXPECT_EQ(out.content + end.content, "");
  ASSERT_EQ(out.calls.size() + end.calls.size(), 2u);
}

// Our own form, where the template has none: a compact JSON array of calls, which the parser
// reads back.
TEST(ToolGrammarTest, JsonArrayOfCalls) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const std::string two = "[" + kWeather + "," + kNow + "]";
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kJson, required, true), two));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kJson, required, false), two));
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kJson, required, false), "[" + kNow + "]"));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kJson, required, true), "[]"));
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kJson, required, true), kNow));
  const ToolChoice named{ToolChoice::Mode::kFunction, "get_weather"};
  EXPECT_FALSE(Accepts(Calls(ToolFormat::kJson, named, true), "[" + kNow + "]"));
  EXPECT_TRUE(Accepts(Calls(ToolFormat::kJson, named, true), "[" + kWeather + "]"));
  ToolCallParser parser(ToolFormat::kJson, true);
  ParseOutput out = parser.Feed(two);
  ParseOutput end = parser.Finish();
  EXPECT_EQ(out.content + end.content, "");
  ASSERT_EQ(out.calls.size() + end.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
}

// A marker the tokenizer has as a special token is that token's bytes in the grammar
// (constraint::SpecialTokenBytes), never its text; other markers stay text.
TEST(ToolGrammarTest, SpecialTokenMarkers) {
  auto tools = ParseTools(kTools);
  ASSERT_TRUE(tools.ok());
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const MarkerRegex special = [](std::string_view m) {
    return m == "[TOOL_CALLS]" || m == "<tool_call>" ? constraint::SpecialTokenBytes(7)
                                                     : constraint::EscapeRegex(m);
  };
  auto mistral = ToolCallPatterns(ToolFormat::kMistral, *tools, required, true, special);
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_TRUE(Accepts(*mistral, constraint::SpecialTokenBytes(7) + " [" + kNow + "]"));
  EXPECT_FALSE(Accepts(*mistral, "[TOOL_CALLS] [" + kNow + "]"));
  auto hermes = ToolCallPatterns(ToolFormat::kHermes, *tools, required, true, special);
  ASSERT_TRUE(hermes.ok()) << hermes.status();
  EXPECT_TRUE(Accepts(*hermes, constraint::SpecialTokenBytes(7) + "\n" + kNow + "\n</tool_call>"));
  EXPECT_FALSE(Accepts(*hermes, "<tool_call>\n" + kNow + "\n</tool_call>"));
}

// Recursive argument schemas (two tools, each with its own rules) nest as deep as the call goes,
// in one answer with both calls; free-form objects too, through one rule the tools share.
TEST(ToolGrammarTest, RecursiveArgumentsNestAsDeepAsTheCallGoes) {
  auto tools = ParseTools(json::parse(R"([
    {"type": "function", "function": {"name": "plan", "parameters": {"$defs": {"Step":
      {"type": "object", "properties": {"do": {"type": "string"}, "then": {"type": "array",
      "items": {"$ref": "#/$defs/Step"}}, "extra": {"type": "object"}}, "required": ["do", "then"],
      "additionalProperties": false}}, "$ref": "#/$defs/Step"}}},
    {"type": "function", "function": {"name": "tree", "parameters": {"$defs": {"T":
      {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}},
      "meta": {"type": "object"}}, "additionalProperties": false}},
      "$ref": "#/$defs/T"}}}])"));
  ASSERT_TRUE(tools.ok()) << tools.status();
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  auto rules = ToolCallPatterns(ToolFormat::kHermes, *tools, required, true);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_TRUE(rules->calls);
  EXPECT_EQ(rules->names, (std::vector<std::string>{
                              "tool calls", "tools[0].function.parameters#/$defs/Step",
                              "(any JSON value)", "tools[1].function.parameters#/$defs/T"}));
  std::string step = R"({"do":"x","then":[],"extra":{"a":[{"b":{}}]}})",
              tree = R"({"meta":{"a":[[[{"b":1}]]]}})";
  for (int i = 0; i < 9; ++i) {
    step = R"({"do":"s","then":[)" + step + "," + step + "]}";
    tree = R"({"kids":[)" + tree + "]}";
  }
  const auto call = [](const std::string& name, const std::string& args) {
    return "<tool_call>\n{\"name\":\"" + name + "\",\"arguments\":" + args + "}\n</tool_call>";
  };
  const constraint::PatternsLanguage language(rules);
  EXPECT_TRUE(language(call("plan", step)));
  EXPECT_TRUE(language(call("tree", tree) + "\n" + call("plan", step)));
  // Each tool's rules are its own: a plan's step is not a tree, nor a tree a step.
  EXPECT_FALSE(language(call("plan", tree)));
  EXPECT_FALSE(language(call("tree", step)));
  EXPECT_FALSE(language(call("plan", step.substr(0, step.size() - 1))));
  // What the grammar admits, the parser reads back, arguments whole.
  ToolCallParser parser(ToolFormat::kHermes, true);
  ParseOutput out = parser.Feed(call("tree", tree) + "\n" + call("plan", step));
  ParseOutput end = parser.Finish();
  out.calls.insert(out.calls.end(), end.calls.begin(), end.calls.end());
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(json::parse(out.calls[1].arguments), json::parse(step));
}

// Many tools with free-form arguments share one rule for them, so the automaton stays small and
// its masks are kept per stack top (a stack grows by one frame a byte at most, far from the
// depth limit).
TEST(ToolGrammarTest, ToolsShareTheRuleOfAnyValue) {
  json many = json::array();
  for (int t = 0; t < 12; ++t) {
    many.push_back(
        {{"type", "function"},
         {"function",
          {{"name", "f" + std::to_string(t)},
           {"parameters",
            {{"type", "object"},
             {"properties", {{"meta", {{"type", "object"}}}, {"list", json::object()}}}}}}}});
  }
  auto tools = ParseTools(many);
  ASSERT_TRUE(tools.ok());
  auto rules =
      ToolCallPatterns(ToolFormat::kHermes, *tools, {ToolChoice::Mode::kRequired, ""}, true);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->names, (std::vector<std::string>{"tool calls", "(any JSON value)"}));
  auto pda = constraint::Pushdown::Build(*rules, constraint::kMaxDfaStates, "tools");
  ASSERT_TRUE(pda.ok()) << pda.status();
  EXPECT_FALSE(pda->NearLimit(0, 128));
  EXPECT_FALSE(pda->NearLimit(600, 128));
  EXPECT_TRUE(pda->NearLimit(990, 128));
  EXPECT_TRUE(
      pda->Accepts("<tool_call>\n{\"name\":\"f11\",\"arguments\":{\"meta\":{\"a\":[[{}]]},\"list\":"
                   "3}}\n</tool_call>"));
}

TEST(ToolGrammarTest, BadToolsNameTheField) {
  const auto error = [](const char* tools) {
    return std::string(ParseTools(json::parse(tools)).status().message());
  };
  EXPECT_THAT(error(R"({"type": "function"})"), HasSubstr("tools: must be an array"));
  EXPECT_THAT(error(R"([{"type": "web"}])"), HasSubstr("tools[0].type"));
  EXPECT_THAT(error(R"([{"type": "function", "function": {"name": "a b"}}])"),
              HasSubstr("tools[0].function.name"));
  EXPECT_THAT(error(R"([{"type": "function", "function": {"name": "a"}},
                        {"type": "function", "function": {"name": "a"}}])"),
              HasSubstr("tools[1].function.name: 'a' is named twice"));
  EXPECT_THAT(error(R"([{"type": "function", "function": {"name": "a", "parameters": 3}}])"),
              HasSubstr("tools[0].function.parameters"));
  // A schema the grammar cannot take names its path inside the tool.
  auto tools = ParseTools(json::parse(R"([{"type": "function", "function": {"name": "a",
      "parameters": {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 7}}}}}])"));
  ASSERT_TRUE(tools.ok());
  auto regex =
      ToolCallPatterns(ToolFormat::kHermes, *tools, {ToolChoice::Mode::kRequired, ""}, true);
  ASSERT_FALSE(regex.ok());
  EXPECT_THAT(regex.status().message(),
              HasSubstr("tools[0].function.parameters.properties.n.multipleOf"));
  // Inside a definition: the reference's path after the parameters.
  auto in_def = ParseTools(json::parse(R"([{"type": "function", "function": {"name": "a",
      "parameters": {"$defs": {"X": {"type": "object", "properties": {"n": {"type": "number",
      "multipleOf": 7}}}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}}}}])"));
  ASSERT_TRUE(in_def.ok());
  auto def_error =
      ToolCallPatterns(ToolFormat::kHermes, *in_def, {ToolChoice::Mode::kRequired, ""}, true);
  ASSERT_FALSE(def_error.ok());
  EXPECT_THAT(def_error.status().message(),
              HasSubstr("tools[0].function.parameters#/$defs/X.properties.n.multipleOf: "));
  // Many large tools: the calls' pattern has a budget.
  json many = json::array();
  for (int t = 0; t < 300; ++t) {
    json props = json::object();
    for (int p = 0; p < 20; ++p) props["p" + std::to_string(p)] = {{"type", "string"}};
    many.push_back({{"type", "function"},
                    {"function",
                     {{"name", "f" + std::to_string(t)},
                      {"parameters", {{"type", "object"}, {"properties", props}}}}}});
  }
  auto big = ParseTools(many);
  ASSERT_TRUE(big.ok());
  auto too_big =
      ToolCallPatterns(ToolFormat::kHermes, *big, {ToolChoice::Mode::kRequired, ""}, true);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.status().message(), HasSubstr("more than 2 MiB"));
  // tool_choice naming a function that is not there.
  EXPECT_THAT(CheckToolChoice(*tools, {ToolChoice::Mode::kFunction, "b"}).message(),
              HasSubstr("tool_choice"));
  EXPECT_FALSE(CheckToolChoice({}, {ToolChoice::Mode::kRequired, ""}).ok());
}

TEST(ToolFormatTest, DetectedFromTheShippedTemplates) {
  EXPECT_EQ(DetectToolFormat("{{ '<tool_call>' }}"), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat("{{ '[TOOL_CALLS] [' }}"), ToolFormat::kMistral);
  EXPECT_EQ(DetectToolFormat("respond only with <|tool_call|> followed by"), ToolFormat::kGranite);
  EXPECT_EQ(ResolveToolFormat("granite", "").value(), ToolFormat::kGranite);
  EXPECT_EQ(DetectToolFormat("<|python_tag|>"), ToolFormat::kLlama3Json);
  EXPECT_EQ(DetectToolFormat("plain"), ToolFormat::kNone);
  EXPECT_EQ(ResolveToolFormat("hermes", "").value(), ToolFormat::kHermes);
  EXPECT_EQ(ResolveToolFormat("json", "<tool_call>").value(), ToolFormat::kJson);
  EXPECT_THAT(ResolveToolFormat("xml", "").status().message(), HasSubstr("model.tool_call_parser"));
}

TEST(ToolFormatTest, EachShippedTemplateHasItsFormat) {
  LLM_REQUIRE_SHARED("chat-templates/templates");
  const std::map<std::string, ToolFormat> expected = {{"hermes3_tool_use", ToolFormat::kHermes},
                                                      {"qwen25", ToolFormat::kHermes},
                                                      {"qwen3", ToolFormat::kHermes},
                                                      {"llama31", ToolFormat::kLlama3Json},
                                                      {"llama32", ToolFormat::kLlama3Json},
                                                      {"mistral_v03", ToolFormat::kMistral},
                                                      {"granite33", ToolFormat::kGranite}};
  int seen = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::SharedPath("chat-templates/templates"))) {
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto it = expected.find(entry.path().stem().string());
    EXPECT_EQ(DetectToolFormat(text), it == expected.end() ? ToolFormat::kNone : it->second)
        << entry.path();
    ++seen;
  }
  EXPECT_EQ(seen, 15);
}

// A request's tools reach the compiler unchecked: random mutations of a tool list (schemas'
// keywords given values of other kinds, names and functions replaced) are each refused with
// INVALID_ARGUMENT or compile, for every format, to a grammar whose masks allow only tokens
// it then takes; nothing throws.
TEST(ToolGrammarTest, MutatedToolsCompileOrFailCleanly) {
  const json seed = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]},
      "days": {"type": "array", "items": {"type": "integer", "minimum": 1}}},
      "required": ["city"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "tree", "parameters": {"$defs": {"N": {"type":
      "object", "properties": {"v": {}, "kids": {"type": "array", "items": {"$ref":
      "#/$defs/N"}}}}}, "$ref": "#/$defs/N"}}},
    {"type": "function", "function": {"name": "now"}}])");
  const auto vocab = constraint::fuzz::Vocabulary();
  const int runs = constraint::fuzz::EnvInt("LLM_FUZZ_RUNS", 600);
  std::mt19937 rng(constraint::fuzz::EnvInt("LLM_FUZZ_SEED", 20261129));
  int served = 0;
  for (int i = 0; i < runs && !HasFailure(); ++i) {
    const json tools_json = constraint::fuzz::Mutated(seed, rng);
    const std::string what = tools_json.dump();
    absl::StatusOr<std::vector<Tool>> tools;
    try {
      tools = ParseTools(tools_json);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw " << e.what() << " on " << what;
      break;
    }
    if (!tools.ok()) {
      EXPECT_EQ(tools.status().code(), absl::StatusCode::kInvalidArgument) << what;
      continue;
    }
    const ToolFormat format =
        std::array{ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral}[i % 3];
    const ToolChoice choice = tools->empty() || i % 2 == 0
                                  ? ToolChoice{ToolChoice::Mode::kRequired, ""}
                                  : ToolChoice{ToolChoice::Mode::kFunction, (*tools)[0].name};
    if (!CheckToolChoice(*tools, choice).ok()) continue;
    absl::StatusOr<constraint::RulePatterns> rules;
    try {
      rules = ToolCallPatterns(format, *tools, choice, /*parallel=*/i % 4 < 2);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw " << e.what() << " on " << what;
      break;
    }
    if (!rules.ok()) {
      EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument) << what;
      continue;
    }
    constraint::ConstraintSpec spec;
    spec.kind = constraint::Kind::kRegex;
    spec.built = *std::move(rules);
    served += constraint::fuzz::Compiled(spec, vocab, rng, what, "tools");
  }
  std::cout << served << " of " << runs << " served\n";
  EXPECT_GT(served, runs / 10);
}

}  // namespace
}  // namespace llm::tools
