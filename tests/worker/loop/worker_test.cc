// The Worker end to end, in process, on the CPU runner with the test model.
#include "worker/loop/worker.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "common/retry_after.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/runner/cpu_runner.h"
#include "worker/runner/sequence_generator.h"

namespace llm::loop {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = "models/tinystories-656k";

struct Golden {
  std::string prompt;
  std::vector<int32_t> generated_ids;
  std::string text;
};

Golden LoadGolden() {
  std::ifstream f(llm::testing::SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  const auto j = nlohmann::json::parse(line);
  return {j["prompt"], j["generated_ids"].get<std::vector<int32_t>>(), j["text"]};
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED(kModel);
    LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
    golden_ = LoadGolden();
  }

  // The test model, its KV cache in bf16 (the fp32 reference) or, with fp8_kv_, rounded
  // through E4M3 as an FP8 cache holds it (scales 1.0: the checkpoint has none).
  absl::StatusOr<std::unique_ptr<runner::CpuModel>> LoadModel() {
    const std::string dir = llm::testing::SharedPath(kModel);
    if (!fp8_kv_) return runner::CpuModel::Load(dir, &pool_);
    LLM_ASSIGN_OR_RETURN(model::ModelConfig config, model::LoadModelConfig(dir));
    LLM_ASSIGN_OR_RETURN(auto store, model::TensorStore::Open(dir));
    LLM_ASSIGN_OR_RETURN(model::KvCacheSpec kv,
                         model::ResolveKvCache("fp8", model::QuantScheme(), config, store.get()));
    return runner::CpuModel::FromStore(config, *store, &pool_, model::QuantScheme(), kv);
  }

  std::unique_ptr<Worker> MakeWorker(int32_t slots, int32_t prefill_tokens = 64,
                                     int32_t max_queued = 1024, int32_t kv_blocks = 512,
                                     bool prefix_cache = true) {
    auto model = LoadModel();
    EXPECT_TRUE(model.ok()) << model.status();
    runner::CpuRunnerOptions ro;
    ro.sizes.max_slots = slots;
    ro.sizes.kv_blocks = kv_blocks;
    auto run = std::make_unique<runner::CpuRunner>(*std::move(model), ro);
    auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
    EXPECT_TRUE(tok.ok());
    WorkerOptions wo;
    wo.scheduler.max_batch_tokens = slots + prefill_tokens;
    wo.scheduler.max_prefill_tokens = prefill_tokens;
    wo.max_queued_requests = max_queued;
    wo.scheduler.prefix_cache = prefix_cache;
    auto w = Worker::Create(wo, std::move(run), *std::move(tok), {2});
    EXPECT_TRUE(w.ok()) << w.status();
    return *std::move(w);
  }

  // Records the prompt tokens of each step that has some.
  struct PromptChunks : StepObserver {
    std::mutex mu;
    std::vector<int32_t> chunks;
    void OnStep(double, double, int32_t, int32_t, int32_t prompt_tokens) override {
      std::lock_guard<std::mutex> lock(mu);
      if (prompt_tokens > 0) chunks.push_back(prompt_tokens);
    }
  };

  // A worker with `wo` over a 2-slot CPU runner (passed through `wrap` when given), its steps
  // reported to `steps`; null (with a failed expectation) when it cannot be made.
  using WrapRunner =
      std::function<std::unique_ptr<runner::ModelRunner>(std::unique_ptr<runner::ModelRunner>)>;
  std::unique_ptr<Worker> ChunkingWorker(const WorkerOptions& wo, PromptChunks* steps,
                                         const WrapRunner& wrap = nullptr) {
    auto model = runner::CpuModel::Load(llm::testing::SharedPath(kModel), &pool_);
    EXPECT_TRUE(model.ok()) << model.status();
    auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
    EXPECT_TRUE(tok.ok());
    if (!model.ok() || !tok.ok()) return nullptr;
    runner::CpuRunnerOptions ro;
    ro.sizes = {.max_slots = 2, .kv_blocks = 64, .block_tokens = 16};
    std::unique_ptr<runner::ModelRunner> run =
        std::make_unique<runner::CpuRunner>(*std::move(model), ro);
    if (wrap) run = wrap(std::move(run));
    auto w = Worker::Create(wo, std::move(run), *std::move(tok), {2}, nullptr, steps);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : nullptr;
  }

  // A 400-token prompt of ids 100..299.
  static std::vector<int32_t> LongPrompt() {
    std::vector<int32_t> prompt(400);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + static_cast<int32_t>(i % 200);
    return prompt;
  }

  // Runs a greedy request for `prompt` (token ids) to its end on `w`.
  static StreamUpdate RunIds(Worker& w, const std::vector<int32_t>& prompt, int32_t max_tokens) {
    GenerateSpec s = Spec("", max_tokens);
    s.has_text = false;
    s.token_ids = prompt;
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(w.Submit(s, sink).ok());
    EXPECT_TRUE(sink->Wait());
    return sink->result();
  }

  // Runs one request alone through the unbatched reference path.
  std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                 const sampling::SamplingParams& sp) {
    if (!reference_) {
      auto m = LoadModel();
      reference_ = *std::move(m);
    }
    runner::SequenceOptions opt;
    opt.max_tokens = max_tokens;
    opt.sampling = sp;
    opt.stop_token_ids = {2};
    auto r = runner::GenerateSequence(*reference_, prompt, opt);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->generated_ids;
  }

  static GenerateSpec Spec(const std::string& text, int32_t max_tokens, float temperature = 0) {
    GenerateSpec s;
    s.text = text;
    s.max_tokens = max_tokens;
    s.sampling.temperature = temperature;
    return s;
  }

  ThreadPool pool_{1};
  Golden golden_;
  std::unique_ptr<runner::CpuModel> reference_;
  bool fp8_kv_ = false;  // engine.kv_cache_dtype: fp8 (LoadModel)

  // A crowd of 24 requests (greedy, seeded, with penalties) in three waves: each gets the tokens
  // it gets alone through the unbatched reference; the golden request among them its golden
  // ids (bf16 cache).
  void ExpectBatchingIsExact();
  // 300 requests, most cancelled at random moments: nothing is left held, and the worker serves.
  void ExpectCancelStormLeavesNothingBehind();
  // A long shared prefix cached, not cached and off: the same tokens.
  void ExpectPrefixCacheHitsGiveTheSameTokens();
};

TEST_F(WorkerTest, GoldenThroughTheWholePipeline) {
  auto w = MakeWorker(4);
  auto sink = std::make_shared<CollectingSink>();
  GenerateSpec spec = Spec(golden_.prompt, 59);
  spec.include_prompt_ids = true;
  ASSERT_TRUE(w->Submit(spec, sink).ok());
  ASSERT_TRUE(sink->Wait());
  const StreamUpdate r = sink->result();
  EXPECT_EQ(r.token_ids, golden_.generated_ids);
  EXPECT_EQ(golden_.prompt + r.text, golden_.text);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(r.reason, sampling::FinishReason::kLength);
  EXPECT_TRUE(r.has_usage);
  EXPECT_EQ(r.usage.prompt_tokens, 6);
  EXPECT_EQ(r.usage.completion_tokens, 59);
  EXPECT_GE(r.usage.total_time_ms, r.usage.time_to_first_token_ms);
  EXPECT_GE(sink->updates(), 20);  // streamed, not one block at the end
}

// Requests of different lengths and settings, admitted at different steps into few slots with
// chunked prefill, give exactly what each gives alone (greedy and seeded sampling alike).
void WorkerTest::ExpectBatchingIsExact() {
  auto w = MakeWorker(/*slots=*/5, /*prefill_tokens=*/12);
  const std::vector<std::string> prompts = StoryPrompts();
  struct Job {
    GenerateSpec spec;
    std::shared_ptr<CollectingSink> sink = std::make_shared<CollectingSink>();
  };
  std::vector<Job> jobs;
  std::mt19937 rng(5);
  for (int i = 0; i < 24; ++i) {
    GenerateSpec s = Spec(prompts[i % prompts.size()], 5 + (i * 13) % 70);
    if (i % 3 == 1) {  // seeded sampling
      s.sampling.temperature = 0.9f;
      s.sampling.top_k = 50;
      s.sampling.top_p = 0.95f;
      s.sampling.seed = 1000 + i;
    }
    if (i % 5 == 2) s.sampling.repetition_penalty = 1.3f;
    jobs.push_back({s});
  }
  jobs[11].spec = Spec(golden_.prompt, 59);  // the golden request, in the middle of the crowd
  // Three waves, so admissions and finishes interleave at different steps.
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(w->Submit(jobs[i].spec, jobs[i].sink).ok());
    if (i == 7 || i == 15) {
      EXPECT_TRUE(WaitForNextStep(*w));
    }
  }
  for (auto& j : jobs) ASSERT_TRUE(j.sink->Wait()) << "timed out";
  if (!fp8_kv_) {
    EXPECT_EQ(jobs[11].sink->result().token_ids, golden_.generated_ids);
  }
  auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto prompt = *(*tok)->Encode(jobs[i].spec.text, true);
    EXPECT_EQ(jobs[i].sink->result().token_ids,
              Reference(prompt, jobs[i].spec.max_tokens, jobs[i].spec.sampling))
        << "request " << i;
  }
  const WorkerLoad load = w->Load();
  EXPECT_EQ(load.in_flight, 0);
  EXPECT_EQ(load.engine.scheduler.kv_blocks_used, 0);
}

TEST_F(WorkerTest, BatchingIsExact) { ExpectBatchingIsExact(); }

// An FP8 KV cache (engine.kv_cache_dtype: fp8) rounds every cached K and V the same way alone
// and in a crowd: batching stays exact.
TEST_F(WorkerTest, BatchingIsExactWithAnFp8KvCache) {
  fp8_kv_ = true;
  ExpectBatchingIsExact();
}

TEST_F(WorkerTest, StopStringEndsTheRequestAndFreesItsSlot) {
  auto w = MakeWorker(2);
  auto sink = std::make_shared<CollectingSink>();
  GenerateSpec spec = Spec(golden_.prompt, 59);
  spec.stop = {" named"};
  ASSERT_TRUE(w->Submit(spec, sink).ok());
  ASSERT_TRUE(sink->Wait());
  const StreamUpdate r = sink->result();
  EXPECT_EQ(r.text, ", a little girl");
  EXPECT_EQ(r.reason, sampling::FinishReason::kStopString);
  EXPECT_EQ(r.stop_string, " named");
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(10)));
  EXPECT_TRUE(
      llm::testing::WaitFor([&] { return w->Load().engine.scheduler.running_requests == 0; },
                            std::chrono::milliseconds(1000)))
      << w->Load().engine.scheduler.running_requests << " requests still running";
  EXPECT_EQ(w->Load().engine.scheduler.kv_blocks_used, 0);
}

TEST_F(WorkerTest, StopTokenIdIsReported) {
  auto w = MakeWorker(2);
  auto sink = std::make_shared<CollectingSink>();
  GenerateSpec spec = Spec(golden_.prompt, 59);
  spec.stop_token_ids = {golden_.generated_ids[4]};
  ASSERT_TRUE(w->Submit(spec, sink).ok());
  ASSERT_TRUE(sink->Wait());
  const StreamUpdate r = sink->result();
  EXPECT_EQ(r.reason, sampling::FinishReason::kStopToken);
  EXPECT_EQ(r.stop_token_id, golden_.generated_ids[4]);
  EXPECT_EQ(r.token_ids.size(), 5u);
}

TEST_F(WorkerTest, LogprobsOfGreedyTokensAreTheTopOnes) {
  auto w = MakeWorker(2);
  auto sink = std::make_shared<CollectingSink>();
  GenerateSpec spec = Spec(golden_.prompt, 8);
  spec.logprobs = 3;
  ASSERT_TRUE(w->Submit(spec, sink).ok());
  ASSERT_TRUE(sink->Wait());
  const StreamUpdate r = sink->result();
  ASSERT_EQ(r.logprobs.size(), 8u);
  std::string joined;
  for (size_t i = 0; i < 8; ++i) {
    const auto& lp = r.logprobs[i];
    EXPECT_EQ(lp.sampled.token_id, r.token_ids[i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].token_id, lp.sampled.token_id);
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.sampled.logprob);
    EXPECT_LE(lp.sampled.logprob, 0.0f);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_FALSE(lp.sampled.text.empty());
    EXPECT_EQ(lp.top[0].bytes, lp.sampled.bytes);
    joined += lp.sampled.bytes;
  }
  // Each token as it reads in the output: decoded alone, a word's token lost its leading space.
  EXPECT_EQ(joined, r.text);
}

void WorkerTest::ExpectCancelStormLeavesNothingBehind() {
  auto w = MakeWorker(8, 32);
  std::mt19937 rng(11);
  std::vector<uint64_t> keys;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 300; ++i) {
    GenerateSpec s = Spec(golden_.prompt, 200);
    s.ignore_eos = true;
    auto sink = std::make_shared<CollectingSink>();
    auto key = w->Submit(s, sink);
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    sinks.push_back(sink);
    // A deliberate random pause (not a wait): it varies where the cancels land.
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    if (rng() % 3 != 0) w->Cancel(keys[rng() % keys.size()]);
  }
  for (uint64_t k : keys) w->Cancel(k);
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(30)));
  EXPECT_TRUE(llm::testing::WaitFor(
      [&] {
        const auto s = w->Load().engine.scheduler;
        return s.running_requests == 0 && s.kv_blocks_used == 0 && s.queued_requests == 0;
      },
      std::chrono::milliseconds(2000)));
  const WorkerLoad load = w->Load();
  EXPECT_EQ(load.in_flight, 0);
  EXPECT_EQ(load.engine.scheduler.running_requests, 0);
  EXPECT_EQ(load.engine.scheduler.queued_requests, 0);
  EXPECT_EQ(load.engine.scheduler.kv_blocks_used, 0);
  EXPECT_EQ(load.engine.scheduler.free_slots, 8);
  // The worker still serves.
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(Spec(golden_.prompt, 59), sink).ok());
  ASSERT_TRUE(sink->Wait());
  // With an FP8 cache the golden ids are not expected; the unbatched reference's are.
  const auto prompt = w->Tokenize(golden_.prompt, /*add_special=*/true);
  ASSERT_TRUE(prompt.ok());
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sink->result().token_ids,
            fp8_kv_ ? Reference(*prompt, 59, greedy) : golden_.generated_ids);
}

TEST_F(WorkerTest, CancelStormLeavesNothingBehind) { ExpectCancelStormLeavesNothingBehind(); }

TEST_F(WorkerTest, CancelStormLeavesNothingBehindWithAnFp8KvCache) {
  fp8_kv_ = true;
  ExpectCancelStormLeavesNothingBehind();
}

TEST_F(WorkerTest, BadRequestsFailAloneWithTheFieldNamed) {
  auto w = MakeWorker(2);
  auto good = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(Spec(golden_.prompt, 59), good).ok());

  auto bad = w->Submit(Spec("", 5), std::make_shared<CollectingSink>());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("text"));

  GenerateSpec ids;
  ids.has_text = false;
  ids.token_ids = {1, 5000};
  bad = w->Submit(ids, std::make_shared<CollectingSink>());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("token_ids.ids[1]"));

  // Too long for the context only once tokenized: reported through the sink.
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "Once upon a time ";
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(Spec(long_text, 10), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sink->error().message()), HasSubstr("context"));

  ASSERT_TRUE(good->Wait());
  EXPECT_EQ(good->result().token_ids, golden_.generated_ids);  // unaffected
}

TEST_F(WorkerTest, FullQueueAndDraining) {
  auto w = MakeWorker(/*slots=*/1, 64, /*max_queued=*/2);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    GenerateSpec s = Spec(golden_.prompt, 300);
    s.ignore_eos = true;
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(w->Submit(s, sinks.back()).ok());
  }
  auto full = w->Submit(Spec(golden_.prompt, 5), std::make_shared<CollectingSink>());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  // With a hint of when to retry (a second before any request has ended).
  EXPECT_EQ(RetryAfterMs(full.status()), std::optional<int64_t>(1000));

  w->BeginDrain();
  EXPECT_TRUE(w->Load().draining);
  auto drained = w->Submit(Spec(golden_.prompt, 5), std::make_shared<CollectingSink>());
  EXPECT_EQ(drained.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(60)));
  for (auto& s : sinks) {
    ASSERT_TRUE(s->done());
    EXPECT_EQ(s->result().token_ids.size(), 300u);  // in-flight requests finish
  }
}

TEST_F(WorkerTest, DestroyingTheWorkerEndsOpenStreams) {
  auto sink = std::make_shared<CollectingSink>();
  {
    auto w = MakeWorker(1);
    GenerateSpec s = Spec(golden_.prompt, 400);
    s.ignore_eos = true;
    ASSERT_TRUE(w->Submit(s, sink).ok());
    // The stream is open (its first tokens came) when the worker is destroyed.
    EXPECT_TRUE(llm::testing::WaitFor([&] { return sink->updates() > 0 || sink->done(); },
                                      std::chrono::seconds(10)));
  }
  ASSERT_TRUE(sink->done());
  if (!sink->error().ok()) {
    EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable);
  }
}

// A chat prompt is rendered (on the tokenizer pool) and tokenized without special tokens: the
// same ids as the rendered text sent with add_special_tokens false. Without a renderer, or when
// it fails, the request fails alone naming "chat".
TEST_F(WorkerTest, ChatPromptsAreRenderedThenTokenizedWithoutSpecialTokens) {
  auto w = MakeWorker(2);
  GenerateSpec chat = Spec("", 8);
  chat.chat = ChatPrompt{};
  chat.chat->messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "a cat"}}});
  auto no_renderer = w->Submit(chat, std::make_shared<CollectingSink>());
  ASSERT_FALSE(no_renderer.ok());
  EXPECT_EQ(no_renderer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_renderer.status().message(), HasSubstr("chat: the model has no chat template"));

  w->SetChatRenderer([](const ChatPrompt& c) -> absl::StatusOr<std::string> {
    if (c.messages[0]["content"] == "raise") return absl::InvalidArgumentError("template raised");
    return "<s>" + c.messages[0]["content"].get<std::string>() + " said:";
  });
  auto sink = std::make_shared<CollectingSink>();
  GenerateSpec with_ids = chat;
  with_ids.include_prompt_ids = true;
  ASSERT_TRUE(w->Submit(with_ids, sink).ok());
  ASSERT_TRUE(sink->Wait());
  auto expected = w->Tokenize("<s>a cat said:", /*add_special=*/false);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(sink->result().prompt_ids, *expected);
  GenerateSpec plain = Spec("<s>a cat said:", 8);
  plain.add_special_tokens = false;
  auto plain_sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(plain, plain_sink).ok());
  ASSERT_TRUE(plain_sink->Wait());
  EXPECT_EQ(sink->result().token_ids, plain_sink->result().token_ids);

  GenerateSpec raises = chat;
  raises.chat->messages[0]["content"] = "raise";
  auto failing = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(raises, failing).ok());
  ASSERT_TRUE(failing->Wait());
  EXPECT_EQ(failing->error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(failing->error().message(), HasSubstr("chat: template raised"));

  GenerateSpec empty = chat;
  empty.chat->messages = nlohmann::ordered_json::array();
  auto refused = w->Submit(empty, std::make_shared<CollectingSink>());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("chat.messages"));
}

// With a reasoning format, a chat's output is split where its prompt leaves it: after a prompt
// that opens a think block, the story model's greedy output (which never writes </think>) is
// all reasoning, the same text a worker without the format answers; after one that does not,
// it stays text (it does not start with <think>).
TEST_F(WorkerTest, AReasoningFormatSplitsAChatsOutput) {
  const auto run = [this](bool reasoning, const std::string& prompt, std::string regex = "") {
    auto w = MakeWorker(2);
    if (reasoning) w->SetReasoningFormat(tools::ReasoningFormat::kThink);
    w->SetChatRenderer([](const ChatPrompt& c) -> absl::StatusOr<std::string> {
      return c.messages[0]["content"].get<std::string>();
    });
    GenerateSpec chat = Spec("", 8);
    chat.chat = ChatPrompt{};
    chat.chat->messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt}}});
    if (!regex.empty()) {
      chat.constraint.kind = constraint::Kind::kRegex;
      chat.constraint.text = regex;
    }
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(w->Submit(chat, sink).ok());
    EXPECT_TRUE(sink->Wait());
    return sink->result();
  };
  const std::string opened = "Once upon a time <think>\n";
  const StreamUpdate plain = run(false, opened);
  ASSERT_FALSE(plain.text.empty());
  const StreamUpdate split = run(true, opened);
  EXPECT_EQ(split.text, "");
  EXPECT_EQ(split.reasoning, std::string(absl::StripLeadingAsciiWhitespace(plain.text)));
  EXPECT_EQ(split.token_ids, plain.token_ids);
  const StreamUpdate closed = run(true, "Once upon a time <think></think>");
  EXPECT_EQ(closed.reasoning, "");
  EXPECT_EQ(closed.text, run(false, "Once upon a time <think></think>").text);
  // A constrained output is the grammar's: text after an opening prompt too (a forced call
  // after R1's prompt stays a call).
  const StreamUpdate held = run(true, opened, "[a-z ]{1,6}");
  EXPECT_EQ(held.reasoning, "");
  EXPECT_FALSE(held.text.empty());
  // (A grammar that writes <think> itself is split: integration.openai_tools, on a byte-level
  // vocabulary; under this story model's vocabulary the grammar ends early, at EOS.)
}

// The golden prompt after a long shared prefix: the same greedy ids with the cache cold (first
// request), warm (the prefix found cached) and off, exactly (CPU fp32).
void WorkerTest::ExpectPrefixCacheHitsGiveTheSameTokens() {
  auto cached = MakeWorker(4);
  auto uncached = MakeWorker(4, 64, 1024, 512, /*prefix_cache=*/false);
  auto prefix = cached->Tokenize(
      "Once upon a time there was a little red fox who lived at the edge of a big green forest. "
      "Every morning the fox ran to the river to drink, and every evening it came home tired. ",
      /*add_special=*/true);
  auto tail = cached->Tokenize(golden_.prompt, /*add_special=*/false);
  ASSERT_TRUE(prefix.ok() && tail.ok());
  std::vector<int32_t> prompt = *prefix;
  prompt.insert(prompt.end(), tail->begin(), tail->end());
  ASSERT_GE(prompt.size(), 40u);
  const auto run = [&](Worker& w) { return RunIds(w, prompt, 40); };
  EXPECT_EQ(cached->Load().engine.prefill_ms_per_token, 0.0);  // no prompt computed yet
  const StreamUpdate cold = run(*cached);
  // The cost of a prompt token is measured from steps with at least 32 of them.
  EXPECT_GT(cached->Load().engine.prefill_ms_per_token, 0.0);
  const StreamUpdate warm = run(*cached);
  const StreamUpdate off = run(*uncached);
  EXPECT_EQ(cold.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(warm.usage.cached_prompt_tokens, static_cast<int32_t>((prompt.size() - 1) / 16 * 16));
  EXPECT_EQ(off.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(cold.token_ids.size(), 40u);
  EXPECT_EQ(warm.token_ids, cold.token_ids);
  EXPECT_EQ(off.token_ids, cold.token_ids);
  EXPECT_EQ(warm.text, cold.text);
}

TEST_F(WorkerTest, PrefixCacheHitsGiveTheSameTokensAsComputingThePrompt) {
  ExpectPrefixCacheHitsGiveTheSameTokens();
}

// A hit on FP8 blocks gives the bits of recomputing them into an FP8 cache.
TEST_F(WorkerTest, PrefixCacheHitsOnAnFp8KvCacheGiveTheSameTokens) {
  fp8_kv_ = true;
  ExpectPrefixCacheHitsGiveTheSameTokens();
}

// A chat's next turn resends the previous answer: the blocks of generated tokens are found in
// the cache, and the next answer is the same as computing the whole prompt.
TEST_F(WorkerTest, TheNextTurnReusesTheBlocksOfThePreviousAnswer) {
  auto cached = MakeWorker(4);
  auto uncached = MakeWorker(4, 64, 1024, 512, /*prefix_cache=*/false);
  auto first = cached->Tokenize(golden_.prompt, /*add_special=*/true);
  auto next = cached->Tokenize(" Then the fox said:", /*add_special=*/false);
  ASSERT_TRUE(first.ok() && next.ok());
  const StreamUpdate turn1 = RunIds(*cached, *first, 45);
  ASSERT_GE(turn1.token_ids.size(), 2u);
  std::vector<int32_t> prompt2 = *first;
  prompt2.insert(prompt2.end(), turn1.token_ids.begin(), turn1.token_ids.end());
  prompt2.insert(prompt2.end(), next->begin(), next->end());
  const StreamUpdate warm = RunIds(*cached, prompt2, 30);
  const StreamUpdate off = RunIds(*uncached, prompt2, 30);
  // Every block whose K/V was final when turn 1 ended: its prompt and all but its last token.
  const size_t final_positions = first->size() + turn1.token_ids.size() - 1;
  EXPECT_EQ(warm.usage.cached_prompt_tokens, static_cast<int32_t>(final_positions / 16 * 16));
  EXPECT_GT(warm.usage.cached_prompt_tokens, static_cast<int32_t>(first->size() / 16 * 16));
  EXPECT_EQ(off.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(warm.token_ids.size(), 30u);
  EXPECT_EQ(warm.token_ids, off.token_ids);
  EXPECT_EQ(warm.text, off.text);
}

// 1,000 random requests over 20 shared prefixes, some cancelled: nothing left running, every
// block either free or cached (none held), and the cache was used.
TEST_F(WorkerTest, RandomRequestsOverSharedPrefixesLeaveOnlyCachedBlocks) {
  auto w = MakeWorker(8, 64, 2048, 256);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prefixes;
  for (int g = 0; g < 20; ++g) {
    std::vector<int32_t> p;
    for (int i = 0; i < 16 * (1 + g % 5); ++i) p.push_back(3 + (g * 37 + i * 11) % 500);
    prefixes.push_back(p);
  }
  std::vector<uint64_t> keys;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 1000; ++i) {
    GenerateSpec s = Spec("", 1 + static_cast<int32_t>(rng() % 8));
    s.has_text = false;
    s.token_ids = prefixes[rng() % prefixes.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 10); k < n; ++k) {
      s.token_ids.push_back(3 + static_cast<int32_t>(rng() % 500));
    }
    auto sink = std::make_shared<CollectingSink>();
    auto key = w->Submit(s, sink);
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    sinks.push_back(sink);
    if (rng() % 5 == 0) w->Cancel(keys[rng() % keys.size()]);
  }
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(60)));
  EXPECT_TRUE(llm::testing::WaitFor(
      [&] {
        const auto s = w->Load().engine.scheduler;
        return s.running_requests == 0 && s.kv_blocks_used == 0;
      },
      std::chrono::milliseconds(2000)));
  const auto s = w->Load().engine.scheduler;
  EXPECT_EQ(s.running_requests, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_evictable, s.kv_blocks_total);
  EXPECT_EQ(s.kv_blocks_evictable, s.kv_blocks_cached);
  EXPECT_GT(s.prefix_hit_tokens, s.prefix_query_tokens / 4);
}

// Load watchers wake whenever a counter a load report carries changes: a request accepted (and
// still tokenizing, which counts as queued), and one ended, not only engine steps.
// The busy ratio is reported per one-second window; an idle engine's falls to 0 rather than
// staying at its last busy window's (a router would think an idle worker busy).
TEST_F(WorkerTest, BusyRatioFallsToZeroWhenIdle) {
  auto model = runner::CpuModel::Load(llm::testing::SharedPath(kModel), &pool_);
  ASSERT_TRUE(model.ok()) << model.status();
  runner::CpuRunnerOptions ro;
  ro.sizes = {.max_slots = 2, .kv_blocks = 64, .block_tokens = 16};
  ro.extra_step_seconds = 0.005;  // about 1.5 s of steps for 300 tokens
  auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
  ASSERT_TRUE(tok.ok());
  auto w =
      Worker::Create(WorkerOptions{}, std::make_unique<runner::CpuRunner>(*std::move(model), ro),
                     *std::move(tok), {2});
  ASSERT_TRUE(w.ok()) << w.status();
  GenerateSpec spec = Spec(golden_.prompt, 300);
  spec.ignore_eos = true;
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*w)->Submit(spec, sink).ok());
  EXPECT_TRUE(WaitForLoad(**w, [](const WorkerLoad& l) { return l.engine.busy_ratio > 0.5; }));
  ASSERT_TRUE(sink->Wait());
  EXPECT_TRUE(WaitForLoad(
      **w, [](const WorkerLoad& l) { return l.in_flight == 0 && l.engine.busy_ratio == 0.0; }))
      << "busy ratio still " << (*w)->Load().engine.busy_ratio;
}

// engine.max_prefill_tokens 0 takes the backend's default (RunnerInfo::default_prefill_tokens):
// a 400-token prompt on the CPU runner is computed in chunks of kCpuDefaultPrefillTokens, the
// last one holding the rest.
TEST_F(WorkerTest, ZeroMaxPrefillTokensTakesTheBackendsDefault) {
  PromptChunks steps;
  WorkerOptions wo;
  wo.scheduler.max_prefill_tokens = 0;
  wo.scheduler.max_batch_tokens = 4096;
  auto w = ChunkingWorker(wo, &steps);
  ASSERT_NE(w, nullptr);
  const StreamUpdate r = RunIds(*w, LongPrompt(), 2);
  EXPECT_EQ(r.token_ids.size(), 2u);
  std::lock_guard<std::mutex> lock(steps.mu);
  std::vector<int32_t> want;
  for (int32_t left = 400; left > 0; left -= runner::kCpuDefaultPrefillTokens) {
    want.push_back(std::min(left, runner::kCpuDefaultPrefillTokens));
  }
  ASSERT_GT(want.size(), 1u);
  EXPECT_EQ(steps.chunks, want);
}

// engine.max_prefill_tokens_alone 0 takes the backend's default
// (RunnerInfo::default_prefill_tokens_alone), capped by the runner's max_prefill_tokens: a lone
// 400-token prompt goes in chunks of that size. The CPU runner has none, so a wrapper states one.
TEST_F(WorkerTest, ALonePromptTakesTheBackendsLongerChunk) {
  class LongerAlone : public runner::ModelRunner {
   public:
    LongerAlone(std::unique_ptr<runner::ModelRunner> inner, int32_t alone, int32_t cap)
        : inner_(std::move(inner)), info_(inner_->info()) {
      info_.default_prefill_tokens_alone = alone;
      info_.max_prefill_tokens = cap;
    }
    const runner::RunnerInfo& info() const override { return info_; }
    absl::Status Launch(engine::StepPlan plan) override { return inner_->Launch(std::move(plan)); }
    absl::StatusOr<engine::StepResult> Collect() override { return inner_->Collect(); }
    int in_flight() const override { return inner_->in_flight(); }

   private:
    std::unique_ptr<runner::ModelRunner> inner_;
    runner::RunnerInfo info_;
  };
  // {the runner's default, its cap, engine.max_prefill_tokens_alone} -> the chunks.
  const struct {
    int32_t alone, cap, setting;
    std::vector<int32_t> want;
  } cases[] = {{256, 1024, 0, {256, 144}},
               {256, 200, 0, {200, 200}},
               {256, 1024, 300, {300, 100}},
               {0, 1024, 0, {128, 128, 128, 16}}};
  for (const auto& c : cases) {
    PromptChunks steps;
    WorkerOptions wo;
    wo.scheduler.max_prefill_tokens = 128;
    wo.scheduler.max_prefill_tokens_alone = c.setting;
    wo.scheduler.max_batch_tokens = 0;
    auto w = ChunkingWorker(wo, &steps, [&](std::unique_ptr<runner::ModelRunner> run) {
      return std::make_unique<LongerAlone>(std::move(run), c.alone, c.cap);
    });
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(RunIds(*w, LongPrompt(), 2).token_ids.size(), 2u);
    std::lock_guard<std::mutex> lock(steps.mu);
    EXPECT_EQ(steps.chunks, c.want)
        << "default " << c.alone << ", cap " << c.cap << ", setting " << c.setting;
  }
}

TEST_F(WorkerTest, InFlightChangesWakeLoadWatchers) {
  auto w = MakeWorker(2);
  const uint64_t before = w->Load().engine.version;
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(w->Submit(Spec(golden_.prompt, 3), sink).ok());
  EXPECT_NE(w->WaitForLoadChange(before, Clock::now()), before);  // no wait needed
  ASSERT_TRUE(sink->Wait());
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(10)));
  const uint64_t idle = w->Load().engine.version;
  auto other = std::make_shared<CollectingSink>();
  auto key = w->Submit(Spec(golden_.prompt, 3), other);
  ASSERT_TRUE(key.ok());
  w->Cancel(*key);
  EXPECT_NE(w->Load().engine.version, idle);
  ASSERT_TRUE(w->WaitIdle(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(w->Load().in_flight, 0);
}

}  // namespace
}  // namespace llm::loop
