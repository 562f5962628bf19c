// Structured output end to end, in process, on the CPU runner with the test model (a story
// model that never writes JSON or follows a format on its own): every output stays in its
// constraint's language, and ends complete by EOS.
#include <unistd.h>

#include <fstream>
#include <regex>
#include <thread>

#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"
#include "worker/runner/cpu_runner.h"

namespace llm::loop {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = "models/tinystories-656k";

// A JSON syntax check (RFC 8259) that, unlike a parser into doubles, takes numbers of any
// magnitude (a random model writes 1E399).
class JsonSyntax {
 public:
  explicit JsonSyntax(std::string_view t) : t_(t) {}
  bool Object() { return Peek('{') && Value() && i_ == t_.size(); }

 private:
  bool Peek(char c) const { return i_ < t_.size() && t_[i_] == c; }
  bool Eat(char c) { return Peek(c) ? (++i_, true) : false; }
  bool Digits() {
    const size_t from = i_;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    return i_ > from;
  }
  bool String() {
    if (!Eat('"')) return false;
    while (i_ < t_.size() && t_[i_] != '"') {
      if (static_cast<unsigned char>(t_[i_]) < 0x20) return false;
      if (t_[i_] == '\\') ++i_;
      ++i_;
    }
    return Eat('"');
  }
  bool Number() {
    Eat('-');
    if (Eat('0')) {
      if (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') return false;  // no leading zeros
    } else if (!Digits()) {
      return false;
    }
    if (Eat('.') && !Digits()) return false;
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      if (!Digits()) return false;
    }
    return true;
  }
  template <typename F>
  bool List(char open, char close, F item) {
    if (!Eat(open)) return false;
    if (Eat(close)) return true;
    do {
      if (!item()) return false;
    } while (Eat(','));
    return Eat(close);
  }
  bool Value() {
    if (Peek('{')) return List('{', '}', [&] { return String() && Eat(':') && Value(); });
    if (Peek('[')) return List('[', ']', [&] { return Value(); });
    if (Peek('"')) return String();
    for (std::string_view lit : {"true", "false", "null"}) {
      if (t_.substr(i_, lit.size()) == lit) {
        i_ += lit.size();
        return true;
      }
    }
    return Number();
  }
  std::string_view t_;
  size_t i_ = 0;
};

bool IsJsonObject(std::string_view text) { return JsonSyntax(text).Object(); }

class ConstraintWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED(kModel);
    auto model = runner::CpuModel::Load(llm::testing::SharedPath(kModel), &pool_);
    ASSERT_TRUE(model.ok()) << model.status();
    runner::CpuRunnerOptions ro;
    ro.sizes = {.max_slots = 8, .kv_blocks = 512, .block_tokens = 16};
    auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
    ASSERT_TRUE(tok.ok());
    WorkerOptions wo;
    wo.scheduler.max_batch_tokens = 0;
    wo.scheduler.max_prefill_tokens = 64;
    auto w = Worker::Create(wo, std::make_unique<runner::CpuRunner>(*std::move(model), ro),
                            *std::move(tok), {2});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = *std::move(w);
  }

  static GenerateSpec Spec(const std::string& prompt, constraint::ConstraintSpec c, int i,
                           int32_t max_tokens = 200) {
    GenerateSpec s;
    s.text = prompt;
    s.max_tokens = max_tokens;
    s.constraint = std::move(c);
    s.sampling.temperature = i % 4 == 0 ? 0.0f : 1.0f;  // greedy and sampled
    s.sampling.seed = static_cast<uint64_t>(i);
    return s;
  }

  // Runs `specs` (8 at a time in the slots) and returns their results.
  std::vector<StreamUpdate> RunAll(const std::vector<GenerateSpec>& specs) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (const GenerateSpec& s : specs) {
      sinks.push_back(std::make_shared<CollectingSink>());
      auto key = worker_->Submit(s, sinks.back());
      EXPECT_TRUE(key.ok()) << key.status();
    }
    std::vector<StreamUpdate> out;
    for (auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait());
      EXPECT_TRUE(sink->error().ok()) << sink->error();
      out.push_back(sink->result());
    }
    return out;
  }

  // Replaces the worker with one over random:tiny, whose synthetic vocabulary has every byte
  // (so any JSON can be spelled).
  void UseByteLevelModel(int32_t slots) {
    auto made = MakeByteLevelWorker(slots);
    ASSERT_TRUE(made.ok()) << made.status();
    worker_.reset();
    backend_pool_ = std::move(made->pool);  // the runner's threads: outlive the worker
    worker_ = std::move(made->worker);
  }

  ThreadPool pool_{1};
  std::unique_ptr<ThreadPool> backend_pool_;  // declared before worker_: destroyed after it
  std::unique_ptr<Worker> worker_;
};

TEST_F(ConstraintWorkerTest, RegexOutputsMatchTheWholePattern) {
  const std::string pattern = "(Once|One day), [a-z]+( [a-z]+){2,5}\\.";
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 40; ++i) {
    specs.push_back(Spec(StoryPrompts()[static_cast<size_t>(i) % 8],
                         {constraint::Kind::kRegex, pattern, {}}, i));
  }
  const std::regex re(pattern);
  for (const StreamUpdate& r : RunAll(specs)) {
    EXPECT_TRUE(std::regex_match(r.text, re)) << "'" << r.text << "'";
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken) << r.text;
  }
}

TEST_F(ConstraintWorkerTest, GrammarOutputsAreInTheGrammar) {
  const std::string grammar = R"g(root ::= opening ", " name " " verb " " thing "."
opening ::= "Once upon a time" | "One day"   # how stories start
name    ::= "Lily" | "Tom" | "the dog"
verb    ::= "saw" | "found" | "wanted"
thing   ::= ("a " | "the ") ("ball" | "tree" | "cat"))g";
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 40; ++i) {
    specs.push_back(Spec(StoryPrompts()[static_cast<size_t>(i) % 8],
                         {constraint::Kind::kGrammar, grammar, {}}, i));
  }
  const std::regex re(
      "(Once upon a time|One day), (Lily|Tom|the dog) (saw|found|wanted) (a |the )"
      "(ball|tree|cat)\\.");
  std::set<std::string> seen;
  for (const StreamUpdate& r : RunAll(specs)) {
    EXPECT_TRUE(std::regex_match(r.text, re)) << "'" << r.text << "'";
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken) << r.text;
    seen.insert(r.text);
  }
  EXPECT_GE(seen.size(), 3u);  // sampling reaches several sentences
}

// A grammar whose rule recurses is matched with a stack: outputs nest past the 4 levels a
// one-automaton expansion allowed (a letter opens a level, 26 tokens against the one "."
// that ends the innermost), and every complete one closes each level it opened.
TEST_F(ConstraintWorkerTest, RecursiveGrammarOutputsNestAsDeepAsTheyGo) {
  UseByteLevelModel(8);
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 100; ++i) {
    specs.push_back(Spec("Once upon a time",
                         {constraint::Kind::kGrammar, R"g(root ::= [a-z] root ")" | ".")g", {}}, i,
                         128));
  }
  size_t deepest = 0;
  int complete = 0;
  for (const StreamUpdate& r : RunAll(specs)) {
    const size_t open =
        std::min(r.text.find_first_not_of("abcdefghijklmnopqrstuvwxyz"), r.text.size());
    if (r.reason != sampling::FinishReason::kStopToken) {
      EXPECT_EQ(r.reason, sampling::FinishReason::kLength);
      EXPECT_LE(r.text.size() - open, open + 1) << r.text;
      continue;
    }
    ++complete;
    EXPECT_EQ(r.text, r.text.substr(0, open) + "." + std::string(open, ')'));
    deepest = std::max(deepest, open);
  }
  EXPECT_GE(complete, 30);
  EXPECT_GT(deepest, 4u);
}

TEST_F(ConstraintWorkerTest, ChoiceOutputsAreOneOfTheChoices) {
  const std::vector<std::string> choices = {"happy", "sad", "a big red ball", "Tim"};
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 40; ++i) {
    specs.push_back(Spec("Lily was", {constraint::Kind::kChoice, "", choices}, i));
  }
  std::set<std::string> seen;
  for (const StreamUpdate& r : RunAll(specs)) {
    EXPECT_THAT(choices, ::testing::Contains(r.text));
    EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken);
    seen.insert(r.text);
  }
  EXPECT_GE(seen.size(), 2u);  // sampling reaches more than one
}

// The test model's vocabulary has no braces (and no byte tokens): a JSON object cannot be
// spelled, and the request says so before it takes a slot.
TEST_F(ConstraintWorkerTest, AConstraintTheVocabularyCannotSpellIsRefused) {
  auto sink = std::make_shared<CollectingSink>();
  auto key = worker_->Submit(Spec("Once", {constraint::Kind::kJsonObject, "", {}}, 0), sink);
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(key.status().message(), HasSubstr("constraint.json_object: no token"));
}

// Any JSON object, from a model with random weights and a byte-level vocabulary (every byte a
// token): every output that ends by EOS parses as an object, and every other one is an
// object's beginning cut by max_tokens.
TEST_F(ConstraintWorkerTest, JsonObjectOutputsParse) {
  UseByteLevelModel(8);
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 100; ++i) {
    specs.push_back(Spec("Once upon a time", {constraint::Kind::kJsonObject, "", {}}, i, 256));
  }
  int complete = 0;
  for (const StreamUpdate& r : RunAll(specs)) {
    if (r.reason != sampling::FinishReason::kStopToken) {
      EXPECT_EQ(r.reason, sampling::FinishReason::kLength);
      EXPECT_EQ(r.text.front(), '{');
      continue;
    }
    ++complete;
    EXPECT_TRUE(IsJsonObject(r.text)) << r.text;
  }
  EXPECT_GE(complete, 50);
  // The check itself refuses what is not an object.
  for (const char* bad : {"{\"a\":}", "{\"a\":1,}", "[1]", "{\"a\":01}", "{\"a\":1} "}) {
    EXPECT_FALSE(IsJsonObject(bad)) << bad;
  }
  EXPECT_TRUE(IsJsonObject("{\"a\":[1E399,{\"b\":null}],\"c\\\"\":-0.5e-3}"));
}

// 1,000 generations under 10 JSON Schemas (tests/data/structured/schemas.json) and
// json_object, from a random model with a byte-level vocabulary: every output that ends by EOS
// validates under the reference implementation (Python's jsonschema, Draft 2020-12, formats
// checked), and nearly every output ends so.
TEST_F(ConstraintWorkerTest, JsonSchemaOutputsValidateWithTheReference) {
  const std::string python = llm::testing::SourcePath(".venv/bin/python");
  ASSERT_EQ(access(python.c_str(), X_OK), 0) << python << " is missing: run scripts/setup.sh";
  UseByteLevelModel(16);
  std::ifstream f(llm::testing::SourcePath("tests/data/structured/schemas.json"));
  const nlohmann::json schemas = nlohmann::json::parse(f);
  ASSERT_EQ(schemas.size(), 10u);
  std::vector<GenerateSpec> specs;
  std::vector<nlohmann::json> schema_of;
  for (int i = 0; i < 1000; ++i) {
    const size_t k = static_cast<size_t>(i) % 11;
    constraint::ConstraintSpec c{constraint::Kind::kJsonObject, "", {}};
    if (k < 10) c = {constraint::Kind::kJsonSchema, schemas[k].dump(), {}};
    specs.push_back(Spec("Once upon a time", c, i, 160));
    schema_of.push_back(k < 10 ? schemas[k] : nlohmann::json(nullptr));
  }
  const std::vector<StreamUpdate> results = RunAll(specs);
  const std::string out = llm::testing::MakeTempDir("structured") + "/outputs.jsonl";
  std::ofstream lines(out);
  int complete = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const bool done = results[i].reason == sampling::FinishReason::kStopToken;
    complete += done ? 1 : 0;
    lines << nlohmann::json{{"schema", schema_of[i]},
                            {"output", results[i].text},
                            {"complete", done}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\n";
  }
  lines.close();
  EXPECT_GE(complete, 900);
  const auto r = llm::testing::RunCommand(
      {python, llm::testing::SourcePath("tests/worker/loop/validate_structured.py"), out});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto summary = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << r.out << r.err;
  EXPECT_EQ(summary["complete"], complete);
  EXPECT_EQ(summary["valid"], complete) << summary.dump();
}

TEST_F(ConstraintWorkerTest, BadConstraintsFailAloneWithTheFieldNamed) {
  auto sink = std::make_shared<CollectingSink>();
  auto key = worker_->Submit(Spec("Once", {constraint::Kind::kRegex, "(unclosed", {}}, 0), sink);
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(key.status().message(), HasSubstr("constraint.regex: missing ')'"));
  GenerateSpec s = Spec("Once", {constraint::Kind::kChoice, "", {"a"}}, 0);
  s.ignore_eos = true;
  key = worker_->Submit(s, sink);
  EXPECT_THAT(key.status().message(), HasSubstr("ignore_eos"));
  // The worker still serves, constrained and not.
  const auto ok = RunAll(
      {Spec("Once", {constraint::Kind::kChoice, "", {"yes", "no"}}, 0), Spec("Once", {}, 1, 8)});
  EXPECT_THAT(ok[0].text, ::testing::AnyOf("yes", "no"));
  EXPECT_EQ(ok[1].token_ids.size(), 8u);
}

// Cancels in the middle of constrained streams free every slot and block.
TEST_F(ConstraintWorkerTest, CancelsFreeEverything) {
  std::vector<uint64_t> keys;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 24; ++i) {
    sinks.push_back(std::make_shared<CollectingSink>());
    auto key =
        worker_->Submit(Spec("Once upon a time",
                             {constraint::Kind::kRegex, "( [a-z]+,?){40,120}\\.", {}}, i + 1, 400),
                        sinks.back());
    ASSERT_TRUE(key.ok());
    keys.push_back(*key);
  }
  ASSERT_TRUE(WaitForLoad(
      *worker_, [](const WorkerLoad& l) { return l.engine.scheduler.running_requests >= 8; }));
  ASSERT_TRUE(WaitForNextStep(*worker_));
  for (uint64_t k : keys) worker_->Cancel(k);
  ASSERT_TRUE(worker_->WaitIdle(Clock::now() + std::chrono::seconds(60)));
  ASSERT_TRUE(WaitForLoad(*worker_, [](const WorkerLoad& l) {
    return l.engine.scheduler.running_requests == 0 && l.engine.scheduler.kv_blocks_used == 0;
  }));
  EXPECT_EQ(worker_->Load().engine.scheduler.free_slots, 8);
}

}  // namespace
}  // namespace llm::loop
