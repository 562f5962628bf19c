// Tool calling end to end, in process, on the CPU runner: a model with random weights and a
// byte-level vocabulary, the Qwen3 chat template (calls as <tool_call> JSON). With tool_choice
// "required" or a named function every answer is nothing but valid calls; "none" and "auto"
// leave the output alone; bad tools fail alone, before they take a slot.
#include <fstream>
#include <set>

#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/backend/backend.h"
#include "worker/frontend/bpe_trainer.h"
#include "worker/frontend/chat/chat_template.h"
#include "worker/frontend/sample_text.h"
#include "worker/loop/reasoning_sink.h"
#include "worker/loop/tool_calls.h"
#include "worker/loop/worker.h"

namespace llm::loop {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now"}}
])");

// The arguments hold to get_weather's schema (or now's: none).
void ExpectValidCall(const ToolCall& call) {
  const json args = json::parse(call.arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.arguments;
  if (call.name == "now") {
    EXPECT_TRUE(args.empty()) << call.arguments;
    return;
  }
  ASSERT_EQ(call.name, "get_weather");
  ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
  size_t characters = 0;  // maxLength counts characters, not bytes
  for (unsigned char c : args["city"].get<std::string>()) characters += (c & 0xC0) != 0x80;
  EXPECT_LE(characters, 12u) << call.arguments;
  EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << call.arguments;
  if (args.contains("days")) {
    EXPECT_TRUE(args["days"].is_number_integer()) << call.arguments;
    EXPECT_GE(args["days"].get<int>(), 1);
    EXPECT_LE(args["days"].get<int>(), 7);
  }
  for (const auto& [key, value] : args.items()) {
    EXPECT_TRUE(key == "city" || key == "unit" || key == "days") << call.arguments;
  }
}

class ToolCallsWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string file = "chat-templates/templates/qwen3.jinja";
    LLM_REQUIRE_SHARED(file);
    std::ifstream in(llm::testing::SharedPath(file));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto chat = frontend::ChatTemplate::FromSource(text, std::nullopt, std::string("<eos>"));
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = std::make_shared<const frontend::ChatTemplate>(*std::move(chat));
    auto made = MakeByteLevelWorker(8);
    ASSERT_TRUE(made.ok()) << made.status();
    backend_pool_ = std::move(made->pool);
    worker_ = std::move(made->worker);
    worker_->SetChatRenderer([chat = chat_](const ChatPrompt& c) {
      return chat->Apply(c.messages, c.tools, c.add_generation_prompt, c.kwargs);
    });
    worker_->SetToolFormat(tools::DetectToolFormat(chat_->text()));
  }

  static GenerateSpec Spec(tools::ToolChoice choice, int seed, bool parallel = true) {
    GenerateSpec s;
    ChatPrompt chat;
    chat.messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
    chat.tools = kTools;
    chat.tool_choice = std::move(choice);
    chat.parallel_tool_calls = parallel;
    s.chat = std::move(chat);
    s.max_tokens = 1200;  // parallel calls go on until the model ends them
    s.sampling.temperature = seed % 4 == 0 ? 0.0f : 1.0f;
    s.sampling.seed = static_cast<uint64_t>(seed);
    return s;
  }

  StreamUpdate Run(GenerateSpec spec) {
    auto sink = std::make_shared<CollectingSink>();
    auto key = worker_->Submit(std::move(spec), sink);
    EXPECT_TRUE(key.ok()) << key.status();
    if (!key.ok()) return {};
    EXPECT_TRUE(sink->Wait());
    EXPECT_TRUE(sink->error().ok()) << sink->error();
    return sink->result();
  }

  std::shared_ptr<const frontend::ChatTemplate> chat_;
  std::unique_ptr<ThreadPool> backend_pool_;  // declared before worker_: destroyed after it
  std::unique_ptr<Worker> worker_;
};

TEST_F(ToolCallsWorkerTest, RequiredAnswersAreOnlyValidCalls) {
  std::set<std::string> names;
  size_t most = 0;
  for (int seed = 0; seed < 24; ++seed) {
    // Greedy (even seeds 0, 4, ...) repeats a call forever when it may: one call there.
    const bool parallel = seed % 2 == 1;
    const StreamUpdate r = Run(Spec({tools::ToolChoice::Mode::kRequired, ""}, seed, parallel));
    ASSERT_FALSE(r.tool_calls.empty()) << "seed " << seed << ": '" << r.text << "'";
    EXPECT_EQ(r.text, "") << "seed " << seed;
    EXPECT_TRUE(r.called_tools);
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken);
    if (!parallel) {
      EXPECT_EQ(r.tool_calls.size(), 1u);
    }
    std::set<std::string> ids;
    for (size_t i = 0; i < r.tool_calls.size(); ++i) {
      EXPECT_EQ(r.tool_calls[i].index, static_cast<int>(i));
      EXPECT_THAT(r.tool_calls[i].id, ::testing::StartsWith("call_"));
      ids.insert(r.tool_calls[i].id);
      ExpectValidCall(r.tool_calls[i]);
      names.insert(r.tool_calls[i].name);
    }
    EXPECT_EQ(ids.size(), r.tool_calls.size());
    most = std::max(most, r.tool_calls.size());
  }
  EXPECT_EQ(names.size(), 2u);  // sampling reaches both tools
  EXPECT_GT(most, 1u);          // and several calls in one answer
}

TEST_F(ToolCallsWorkerTest, ANamedFunctionIsTheOnlyOneCalled) {
  for (int seed = 0; seed < 8; ++seed) {
    const StreamUpdate r = Run(Spec({tools::ToolChoice::Mode::kFunction, "get_weather"}, seed));
    ASSERT_FALSE(r.tool_calls.empty()) << "seed " << seed;
    // Greedy repeats the call until max_tokens cuts the last one off: it stays as far as it
    // was written (a streamed call is never given back).
    const bool cut = r.reason == sampling::FinishReason::kLength;
    for (size_t i = 0; i < r.tool_calls.size(); ++i) {
      EXPECT_EQ(r.tool_calls[i].name, "get_weather");
      if (cut && i + 1 == r.tool_calls.size()) {
        EXPECT_TRUE(r.tool_calls[i].arguments.starts_with("{")) << r.tool_calls[i].arguments;
        continue;
      }
      ExpectValidCall(r.tool_calls[i]);
    }
  }
}

// A node of the recursive tool below: {"v": integer, "kids": [nodes]}, as deep as it goes;
// returns its depth in nodes.
int ExpectNode(const json& node, const std::string& call) {
  EXPECT_TRUE(node.is_object()) << call;
  if (!node.is_object()) return 0;
  EXPECT_TRUE(node.contains("v") && node["v"].is_number_integer()) << call;
  int depth = 1;
  if (node.contains("kids")) {
    EXPECT_TRUE(node["kids"].is_array()) << call;
    for (const json& kid : node["kids"]) depth = std::max(depth, 1 + ExpectNode(kid, call));
  }
  for (const auto& [key, value] : node.items()) EXPECT_TRUE(key == "v" || key == "kids") << call;
  return depth;
}

// A recursive argument schema (Pydantic's tree) is the call's grammar through the worker: the
// calls' rules are matched with a stack, and each answer is a valid tree.
TEST_F(ToolCallsWorkerTest, RecursiveArgumentsAreValidTrees) {
  const json tree = json::parse(R"([{"type": "function", "function": {"name": "tree",
    "parameters": {"$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer",
    "minimum": 0, "maximum": 9}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"},
    "maxItems": 3}}, "required": ["v"], "additionalProperties": false}},
    "$ref": "#/$defs/Node"}}}])");
  int deepest = 0;
  for (int seed = 1; seed < 12; seed += seed % 4 == 3 ? 2 : 1) {  // sampled: greedy may loop
    GenerateSpec spec = Spec({tools::ToolChoice::Mode::kFunction, "tree"}, seed, false);
    spec.chat->tools = tree;
    const StreamUpdate r = Run(std::move(spec));
    ASSERT_EQ(r.tool_calls.size(), 1u) << "seed " << seed << ": '" << r.text << "'";
    if (r.reason == sampling::FinishReason::kLength) continue;  // cut off inside the tree
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken);
    const std::string& args = r.tool_calls[0].arguments;
    deepest = std::max(deepest, ExpectNode(json::parse(args, nullptr, false), args));
  }
  EXPECT_GT(deepest, 1);  // some answer nested a node
}

TEST_F(ToolCallsWorkerTest, NoneAndAutoLeaveTheOutputAlone) {
  // A random model writes no <tool_call>: under auto its text passes through as content.
  for (auto mode : {tools::ToolChoice::Mode::kNone, tools::ToolChoice::Mode::kAuto}) {
    GenerateSpec spec = Spec({mode, ""}, 1);
    spec.max_tokens = 20;
    const StreamUpdate r = Run(std::move(spec));
    EXPECT_TRUE(r.tool_calls.empty());
    EXPECT_FALSE(r.called_tools);
    EXPECT_EQ(r.token_ids.size(), 20u);
  }
}

TEST_F(ToolCallsWorkerTest, BadToolRequestsFailAloneNamingTheField) {
  const auto refused = [&](GenerateSpec spec) {
    auto key = worker_->Submit(std::move(spec), std::make_shared<CollectingSink>());
    EXPECT_FALSE(key.ok());
    EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(key.status().message());
  };
  GenerateSpec s = Spec({tools::ToolChoice::Mode::kFunction, "forecast"}, 0);
  EXPECT_THAT(refused(s), HasSubstr("tool_choice: names function 'forecast'"));
  s = Spec({tools::ToolChoice::Mode::kRequired, ""}, 0);
  s.constraint = {constraint::Kind::kJsonObject, "", {}};
  EXPECT_THAT(refused(s), HasSubstr("tool_choice: a required or named call cannot be combined"));
  s = Spec({tools::ToolChoice::Mode::kRequired, ""}, 0);
  s.ignore_eos = true;
  EXPECT_THAT(refused(s), HasSubstr("ignore_eos: not with a required or named tool call"));
  s = Spec({tools::ToolChoice::Mode::kRequired, ""}, 0);
  s.chat->tools[0]["function"]["parameters"]["properties"]["city"]["format"] = "hostname";
  EXPECT_THAT(refused(s), HasSubstr("tools[0].function.parameters.properties.city.format"));
  s = Spec({tools::ToolChoice::Mode::kAuto, ""}, 0);
  s.chat->tools[1]["function"]["name"] = "get_weather";
  EXPECT_THAT(refused(s), HasSubstr("tools[1].function.name: 'get_weather' is named twice"));
  // A worker with no call format refuses auto: it could not read the calls.
  worker_->SetToolFormat(tools::ToolFormat::kNone);
  EXPECT_THAT(refused(Spec({tools::ToolChoice::Mode::kAuto, ""}, 0)),
              HasSubstr("tool_choice: \"auto\" needs a call format"));
  EXPECT_TRUE(Run(Spec({tools::ToolChoice::Mode::kNone, ""}, 0)).finished);
  // Nothing was left behind: the next request runs.
  worker_->SetToolFormat(tools::ToolFormat::kHermes);
  EXPECT_FALSE(Run(Spec({tools::ToolChoice::Mode::kRequired, ""}, 3)).tool_calls.empty());
}

// A template with no call format of its own (a worker whose format is none): required and
// named calls are still enforced, written as a JSON array of calls and read back.
TEST_F(ToolCallsWorkerTest, WithNoFormatForcedCallsAreAJsonArray) {
  worker_->SetToolFormat(tools::ToolFormat::kNone);
  size_t most = 0;
  for (int seed = 0; seed < 12; ++seed) {
    const bool named = seed % 3 == 2, parallel = seed % 2 == 1;
    const tools::ToolChoice choice{
        named ? tools::ToolChoice::Mode::kFunction : tools::ToolChoice::Mode::kRequired,
        named ? "get_weather" : ""};
    const StreamUpdate r = Run(Spec(choice, seed, parallel));
    ASSERT_FALSE(r.tool_calls.empty()) << "seed " << seed << ": '" << r.text << "'";
    if (r.reason == sampling::FinishReason::kLength) continue;  // greedy repeats calls
    EXPECT_EQ(r.text, "") << "seed " << seed;
    EXPECT_TRUE(r.called_tools);
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken);
    if (!parallel) {
      EXPECT_EQ(r.tool_calls.size(), 1u);
    }
    for (const ToolCall& call : r.tool_calls) {
      EXPECT_THAT(call.id, ::testing::StartsWith("call_"));
      if (named) {
        EXPECT_EQ(call.name, "get_weather");
      }
      ExpectValidCall(call);
    }
    most = std::max(most, r.tool_calls.size());
  }
  EXPECT_GT(most, 1u);  // several calls in one answer, where parallel
}

// Mistral v0.3's own tokenizer has [TOOL_CALLS] as a special token. A required call then begins
// with that token, as the model was trained to write it, not with the marker spelled in
// ordinary tokens, and the calls read back as before: a random model (random:tiny) under Mistral
// v0.3's template, with a synthetic tokenizer whose id 509 (below BOS and EOS) is [TOOL_CALLS].
TEST(ToolCallsSpecialMarkerTest, ARequiredCallBeginsWithTheMarkerToken) {
  const std::string file = "chat-templates/templates/mistral_v03.jinja";
  LLM_REQUIRE_SHARED(file);
  auto b = backend::CreateBackend(RandomTinyOnCpu(4));
  ASSERT_TRUE(b.ok()) << b.status();
  const int32_t marker = 509;
  ASSERT_EQ(b->config.vocab_size, 512);
  ASSERT_EQ(b->config.bos_token_id, 510);
  frontend::ByteLevelTokenizerSpec ts;
  ts.vocab_size = b->config.vocab_size;
  ts.bos_id = b->config.bos_token_id;
  ts.eos_ids = b->config.eos_token_ids;
  ts.extra_specials = {{marker, "[TOOL_CALLS]"}};
  ts.training_text = frontend::kSampleText;
  auto files = frontend::MakeByteLevelTokenizer(ts);
  ASSERT_TRUE(files.ok()) << files.status();
  auto tok = frontend::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json,
                                           "synthetic tokenizer with [TOOL_CALLS]");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE((*tok)->IsSpecial(marker));
  std::unique_ptr<ThreadPool> pool = std::move(b->pool);  // the runner's threads: outlive it
  WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 0;
  auto w = Worker::Create(wo, std::move(b->runner), *std::move(tok), b->config.eos_token_ids);
  ASSERT_TRUE(w.ok()) << w.status();
  std::ifstream in(llm::testing::SharedPath(file));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto chat = frontend::ChatTemplate::FromSource(text, std::string("<|begin_of_text|>"),
                                                 std::string("<|end_of_text|>"));
  ASSERT_TRUE(chat.ok()) << chat.status();
  auto shared_chat = std::make_shared<const frontend::ChatTemplate>(*std::move(chat));
  (*w)->SetChatRenderer([shared_chat](const ChatPrompt& c) {
    return shared_chat->Apply(c.messages, c.tools, c.add_generation_prompt, c.kwargs);
  });
  ASSERT_EQ(tools::DetectToolFormat(shared_chat->text()), tools::ToolFormat::kMistral);
  (*w)->SetToolFormat(tools::ToolFormat::kMistral);
  for (int seed = 0; seed < 8; ++seed) {
    GenerateSpec s;
    ChatPrompt c;
    c.messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
    c.tools = kTools;
    c.tool_choice = {tools::ToolChoice::Mode::kRequired, ""};
    c.parallel_tool_calls = seed % 2 == 1;
    s.chat = std::move(c);
    s.max_tokens = 1200;
    s.sampling.temperature = seed % 4 == 0 ? 0.0f : 1.0f;
    s.sampling.seed = static_cast<uint64_t>(seed);
    auto sink = std::make_shared<CollectingSink>();
    ASSERT_TRUE((*w)->Submit(std::move(s), sink).ok());
    ASSERT_TRUE(sink->Wait());
    ASSERT_TRUE(sink->error().ok()) << sink->error();
    const StreamUpdate r = sink->result();
    ASSERT_FALSE(r.token_ids.empty());
    EXPECT_EQ(r.token_ids[0], marker) << "seed " << seed;
    EXPECT_EQ(std::count(r.token_ids.begin(), r.token_ids.end(), marker), 1) << "seed " << seed;
    ASSERT_FALSE(r.tool_calls.empty()) << "seed " << seed << ": '" << r.text << "'";
    EXPECT_EQ(r.text, "") << "seed " << seed;
    for (const ToolCall& call : r.tool_calls) ExpectValidCall(call);
  }
}

// `text` to `sink` in updates of `step` bytes, the last one ending by a stop token.
void FeedInPieces(StreamSink& sink, const std::string& text, size_t step) {
  for (size_t i = 0; i < text.size(); i += step) {
    StreamUpdate u;
    u.text = text.substr(i, step);
    u.finished = i + step >= text.size();
    u.reason = u.finished ? sampling::FinishReason::kStopToken : sampling::FinishReason::kNone;
    sink.OnUpdate(std::move(u));
  }
}

// The sink alone: calls split over updates come whole once the updates are merged, numbered,
// with ids of the format's shape; the last update says there were calls.
TEST(ToolCallSinkTest, NumbersCallsAcrossUpdates) {
  auto inner = std::make_shared<CollectingSink>();
  ToolCallSink sink(tools::ToolFormat::kMistral, true, {"a", "b"}, inner);
  const std::string text =
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": "
      "{\"x\": 1}}]";
  FeedInPieces(sink, text, 5);
  const StreamUpdate r = inner->result();
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.called_tools);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.tool_calls[i].index, i);
    EXPECT_EQ(r.tool_calls[i].id.size(), 9u);  // Mistral's template takes 9 characters
  }
  EXPECT_EQ(r.tool_calls[1].arguments, "{\"x\":1}");
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
}

// Every update as it came, unmerged.
class RecordingSink : public StreamSink {
 public:
  void OnUpdate(StreamUpdate update) override { updates.push_back(std::move(update)); }
  void OnError(const absl::Status&) override {}
  std::vector<StreamUpdate> updates;
};

// A call streams: its first piece has an id and the name, later pieces only more of its
// arguments, and merged updates put the call back together.
TEST(ToolCallSinkTest, StreamsArgumentsInPieces) {
  auto inner = std::make_shared<RecordingSink>();
  ToolCallSink sink(tools::ToolFormat::kHermes, true, {"get_weather"}, inner);
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"c\"}}\n</tool_call>";
  FeedInPieces(sink, text, 3);
  StreamUpdate all;
  int pieces = 0;
  for (StreamUpdate& u : inner->updates) {
    EXPECT_EQ(u.text, "");
    for (const ToolCall& c : u.tool_calls) {
      EXPECT_EQ(c.index, 0);
      EXPECT_EQ(c.id.empty(), pieces > 0) << "only the first piece has an id";
      EXPECT_EQ(c.name, pieces > 0 ? "" : "get_weather");
      EXPECT_FALSE(c.arguments.empty());
      ++pieces;
    }
    all.Merge(std::move(u));
  }
  EXPECT_GT(pieces, 5);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_THAT(all.tool_calls[0].id, ::testing::StartsWith("call_"));
  EXPECT_EQ(all.tool_calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"c\"}");
  EXPECT_TRUE(all.called_tools);
}

// The reasoning sink reads first: a call written while thinking is reasoning, not a call; the
// one after </think> is read.
TEST(ReasoningSinkTest, ACallWhileThinkingIsNoCall) {
  auto inner = std::make_shared<RecordingSink>();
  auto calls = std::make_shared<ToolCallSink>(tools::ToolFormat::kHermes, true,
                                              std::vector<std::string>{"f"}, inner);
  auto start = std::make_shared<ReasoningStart>();
  ReasoningSink sink(start, calls);
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  FeedInPieces(sink, "<think>\nMaybe " + call + "?\n</think>\n\n" + call, 4);
  StreamUpdate all;
  for (StreamUpdate& u : inner->updates) all.Merge(std::move(u));
  EXPECT_EQ(all.reasoning, "Maybe " + call + "?");
  EXPECT_EQ(all.text, "");
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "f");
  EXPECT_TRUE(all.called_tools);
}

}  // namespace
}  // namespace llm::loop
