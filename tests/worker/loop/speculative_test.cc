// Speculative decoding end to end, in process, on the CPU runner with the test model: greedy
// outputs are the same with it on and off for every proposer (n-gram lookup; a draft model that
// is the model itself, which accepts nearly everything; a draft with random weights, which
// accepts nearly nothing), the limits of a request hold inside an accepted run, and no block is
// left behind.
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/chi_square.h"
#include "tests/test_util.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/loop/worker.h"
#include "worker/model/synthetic.h"
#include "worker/runner/cpu_runner.h"
#include "worker/runner/sequence_generator.h"
#include "worker/server/metrics.h"

namespace llm::loop {
namespace {

constexpr char kModel[] = "models/tinystories-656k";

enum class Proposer { kNgram, kDraftSelf, kDraftRandom, kOracle };

std::string Name(Proposer p) {
  switch (p) {
    case Proposer::kNgram:
      return "Ngram";
    case Proposer::kDraftSelf:
      return "DraftIsTheModel";
    case Proposer::kDraftRandom:
      return "DraftWithRandomWeights";
    case Proposer::kOracle:
      return "Oracle";
  }
  return "?";
}

// A prompt whose continuation copies it: a story told twice, then its start again.
std::string RepeatPrompt() {
  const std::string story =
      "Tom had a red ball. He liked to play with it in the park. One day the ball went into the "
      "pond. Tom was sad. A big duck swam to the ball and pushed it back to Tom. Tom was happy. ";
  return story + story + "Tom had a red ball. He liked";
}

class SpeculativeWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { LLM_REQUIRE_SHARED(kModel); }

  std::unique_ptr<runner::CpuModel> Load() {
    auto m = runner::CpuModel::Load(llm::testing::SharedPath(kModel), &pool_);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // The draft of `proposer`: the model itself, or the model's shape with random weights.
  std::unique_ptr<runner::CpuModel> Draft(Proposer proposer) {
    if (proposer == Proposer::kDraftSelf) return Load();
    if (proposer != Proposer::kDraftRandom) return nullptr;
    auto config = model::LoadModelConfig(llm::testing::SharedPath(kModel));
    EXPECT_TRUE(config.ok());
    auto store = model::MakeSyntheticStore(*config, 7, model::DType::kBF16, &pool_);
    EXPECT_TRUE(store.ok());
    auto m = runner::CpuModel::FromStore(*config, **store, &pool_);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // A worker with `proposer` proposing num_tokens every step (adaptive off) or as the policy
  // chooses (`adaptive`), or none.
  std::unique_ptr<Worker> MakeWorker(std::optional<Proposer> proposer, int32_t slots = 6,
                                     int32_t num_tokens = 4, bool adaptive = false) {
    engine::SpeculativeConfig spec;
    if (proposer) {
      spec.method = *proposer == Proposer::kNgram    ? engine::SpeculativeMethod::kNgram
                    : *proposer == Proposer::kOracle ? engine::SpeculativeMethod::kOracle
                                                     : engine::SpeculativeMethod::kDraft;
      spec.num_tokens = num_tokens;
      spec.ngram_min = 1;
      spec.ngram_max = 3;
      spec.adaptive = adaptive;
    }
    runner::CpuRunnerOptions ro;
    ro.sizes = {.max_slots = slots, .kv_blocks = 512, .block_tokens = 16};
    ro.speculative = spec;
    auto run =
        std::make_unique<runner::CpuRunner>(Load(), ro, proposer ? Draft(*proposer) : nullptr);
    auto tok = frontend::Tokenizer::Load(llm::testing::SharedPath(kModel));
    EXPECT_TRUE(tok.ok());
    WorkerOptions wo;
    wo.scheduler.max_batch_tokens = 0;
    wo.scheduler.max_prefill_tokens = 48;
    wo.scheduler.speculative = spec;
    auto w = Worker::Create(wo, std::move(run), *std::move(tok), {2});
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : nullptr;
  }

  static GenerateSpec Spec(const std::string& text, int32_t max_tokens) {
    GenerateSpec s;
    s.text = text;
    s.max_tokens = max_tokens;
    s.sampling.temperature = 0;
    return s;
  }

  static StreamUpdate Run(Worker& w, const GenerateSpec& spec, int* updates = nullptr) {
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(w.Submit(spec, sink).ok());
    EXPECT_TRUE(sink->Wait());
    if (updates != nullptr) *updates = sink->updates();
    return sink->result();
  }

  // Waits until nothing runs, and checks that every KV block is free or cached (none held).
  static void ExpectNothingHeld(Worker& w) {
    ASSERT_TRUE(w.WaitIdle(Clock::now() + std::chrono::seconds(60)));
    ASSERT_TRUE(WaitForLoad(w, [](const WorkerLoad& l) {
      return l.engine.scheduler.running_requests == 0 && l.engine.scheduler.kv_blocks_used == 0;
    }));
    const engine::SchedulerStats s = w.Load().engine.scheduler;
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_evictable, s.kv_blocks_total);
    EXPECT_EQ(s.free_slots, s.max_slots);
  }

  ThreadPool pool_{1};
};

class SpeculativeTest : public SpeculativeWorkerTest,
                        public ::testing::WithParamInterface<Proposer> {};

// Every story prompt, the golden one and a prompt that repeats itself, greedy, in one crowd:
// the same ids as the unbatched reference without speculation; the golden prompt its golden ids.
TEST_P(SpeculativeTest, GreedyIdsAreTheSameWithSpeculationOnAndOff) {
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  std::ifstream f(llm::testing::SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  const auto golden = nlohmann::json::parse(line);
  auto w = MakeWorker(GetParam());
  ASSERT_NE(w, nullptr);
  std::vector<GenerateSpec> specs;
  specs.push_back(Spec(golden["prompt"], 59));
  for (const std::string& p : StoryPrompts()) specs.push_back(Spec(p, 48));
  specs.push_back(Spec(RepeatPrompt(), 64));
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const GenerateSpec& s : specs) {
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(w->Submit(s, sinks.back()).ok());
  }
  auto reference = Load();
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait()) << "request " << i;
    const StreamUpdate r = sinks[i]->result();
    const auto prompt = w->Tokenize(specs[i].text, true);
    ASSERT_TRUE(prompt.ok());
    runner::SequenceOptions opt;
    opt.max_tokens = static_cast<int32_t>(specs[i].max_tokens);
    opt.sampling = specs[i].sampling;
    opt.stop_token_ids = {2};
    auto expected = runner::GenerateSequence(*reference, *prompt, opt);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(r.token_ids, expected->generated_ids) << "request " << i;
    EXPECT_LE(r.usage.accepted_draft_tokens, r.usage.draft_tokens);
    drafted += r.usage.draft_tokens;
    accepted += r.usage.accepted_draft_tokens;
  }
  EXPECT_EQ(sinks[0]->result().token_ids, golden["generated_ids"].get<std::vector<int32_t>>());
  ASSERT_GT(drafted, 0);
  const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
  const EngineStats stats = w->Load().engine;
  EXPECT_EQ(stats.spec_draft_tokens, static_cast<uint64_t>(drafted));
  EXPECT_EQ(stats.spec_accepted_tokens, static_cast<uint64_t>(accepted));
  if (GetParam() == Proposer::kDraftSelf) {
    EXPECT_GT(rate, 0.95) << accepted << "/" << drafted;
  }
  if (GetParam() == Proposer::kDraftRandom) {
    EXPECT_LT(rate, 0.2) << accepted << "/" << drafted;
  }
  if (GetParam() == Proposer::kNgram) {
    // The repeated story is proposed from its earlier copies, and some of it stands (this
    // small model does not copy it word for word).
    const StreamUpdate r = sinks.back()->result();
    EXPECT_GT(r.usage.draft_tokens, 0);
    EXPECT_GT(r.usage.accepted_draft_tokens, 0);
  }
  ExpectNothingHeld(*w);
}

// Seeded sampling with every filter and penalty runs through verification: outputs of the
// requested length, inside the vocabulary, and for a draft that is the model nearly every
// proposal stands (p = q: the draft applies the request's penalties too).
TEST_P(SpeculativeTest, SampledRequestsVerifyAndKeepTheirLimits) {
  auto w = MakeWorker(GetParam());
  ASSERT_NE(w, nullptr);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    GenerateSpec s = Spec(i % 2 == 0 ? RepeatPrompt() : StoryPrompts()[i], 10 + 9 * i);
    s.sampling.temperature = 0.8f;
    s.sampling.top_k = i % 3 == 0 ? 40 : 0;
    s.sampling.top_p = i % 3 == 1 ? 0.9f : 1.0f;
    s.sampling.min_p = i % 3 == 2 ? 0.05f : 0.0f;
    s.sampling.repetition_penalty = i == 4 ? 1.2f : 1.0f;
    s.sampling.seed = 100 + i;
    s.ignore_eos = true;
    s.logprobs = i == 5 ? 2 : 0;
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(w->Submit(s, sinks.back()).ok());
  }
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    const StreamUpdate r = sinks[i]->result();
    ASSERT_EQ(r.token_ids.size(), static_cast<size_t>(10 + 9 * i)) << "request " << i;
    EXPECT_EQ(r.reason, sampling::FinishReason::kLength);
    EXPECT_EQ(r.usage.completion_tokens, 10 + 9 * i);
    for (int32_t t : r.token_ids) EXPECT_TRUE(t >= 0 && t < 2048) << t;
    if (i == 5) {
      ASSERT_EQ(r.logprobs.size(), r.token_ids.size());
      for (size_t j = 0; j < r.token_ids.size(); ++j) {
        EXPECT_EQ(r.logprobs[j].sampled.token_id, r.token_ids[j]);
        EXPECT_LE(r.logprobs[j].sampled.logprob, 0.0f);
      }
    }
    drafted += r.usage.draft_tokens;
    accepted += r.usage.accepted_draft_tokens;
  }
  ASSERT_GT(drafted, 0);
  if (GetParam() == Proposer::kDraftSelf) {
    EXPECT_GT(static_cast<double>(accepted) / drafted, 0.95) << accepted << "/" << drafted;
  }
  ExpectNothingHeld(*w);
}

// A stop string, a stop token and max_tokens inside an accepted run end the output exactly
// where they end it without speculation.
TEST_P(SpeculativeTest, StopsInsideAnAcceptedRunEndTheOutputThere) {
  auto off = MakeWorker(std::nullopt);
  auto on = MakeWorker(GetParam());
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  const StreamUpdate plain = Run(*off, Spec(RepeatPrompt(), 40));
  ASSERT_GE(plain.token_ids.size(), 20u);
  std::vector<GenerateSpec> specs;
  GenerateSpec by_string = Spec(RepeatPrompt(), 40);
  by_string.stop = {plain.text.substr(plain.text.size() / 2, 6)};
  specs.push_back(by_string);
  GenerateSpec by_token = Spec(RepeatPrompt(), 40);
  by_token.stop_token_ids = {plain.token_ids[13]};
  specs.push_back(by_token);
  for (int32_t n : {1, 2, 3, 5, 7}) {
    GenerateSpec by_length = Spec(RepeatPrompt(), n);
    by_length.ignore_eos = true;
    specs.push_back(by_length);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const StreamUpdate a = Run(*off, specs[i]);
    const StreamUpdate b = Run(*on, specs[i]);
    EXPECT_EQ(b.token_ids, a.token_ids) << "request " << i;
    EXPECT_EQ(b.text, a.text) << "request " << i;
    EXPECT_EQ(b.reason, a.reason) << "request " << i;
    EXPECT_EQ(b.stop_string, a.stop_string) << "request " << i;
    EXPECT_EQ(b.usage.completion_tokens, a.usage.completion_tokens) << "request " << i;
  }
  ExpectNothingHeld(*on);
}

// Constrained requests speculate on the CPU runner: each verified row is masked after the
// proposals accepted before it, and a proposal the constraint refuses is not made. Greedy ids
// are those of a worker without speculation; seeded sampled outputs keep to the constraint.
TEST_P(SpeculativeTest, ConstrainedRequestsSpeculateUnderTheirMasks) {
  const std::vector<std::string> choices = {"happy", "sad", "a big red ball", "Tim"};
  const std::string letters = "[A-Za-z .,]{1,400}";
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 6; ++i) {
    GenerateSpec s = Spec(i < 3 ? RepeatPrompt() : StoryPrompts()[i], 64);
    s.constraint = i % 3 == 2 ? constraint::ConstraintSpec{constraint::Kind::kChoice, "", choices}
                              : constraint::ConstraintSpec{constraint::Kind::kRegex, letters, {}};
    if (i % 3 == 1) {
      s.sampling.temperature = 0.8f;
      s.sampling.seed = 40 + i;
    }
    specs.push_back(s);
  }
  auto off = MakeWorker(std::nullopt);
  auto on = MakeWorker(GetParam());
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const GenerateSpec& spec : specs) {
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(on->Submit(spec, sinks.back()).ok());
  }
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait()) << "request " << i;
    ASSERT_TRUE(sinks[i]->error().ok()) << sinks[i]->error();
    const StreamUpdate r = sinks[i]->result();
    if (i % 3 == 2) {
      EXPECT_NE(std::find(choices.begin(), choices.end(), r.text), choices.end())
          << i << ": '" << r.text << "'";
    } else {
      EXPECT_FALSE(r.text.empty()) << i;
      EXPECT_EQ(r.text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,"),
                std::string::npos)
          << i << ": '" << r.text << "'";
    }
    if (i % 3 != 1) {
      EXPECT_EQ(r.token_ids, Run(*off, specs[i]).token_ids) << "request " << i;
    }
    drafted += r.usage.draft_tokens;
    accepted += r.usage.accepted_draft_tokens;
  }
  EXPECT_GT(drafted, 0);
  if (GetParam() != Proposer::kDraftRandom) {
    EXPECT_GT(accepted, 0);
  }
  // A draft that is the model proposes under the mask what verification then picks (p = q for
  // sampled requests), so nearly every proposal stands.
  if (GetParam() == Proposer::kDraftSelf) {
    EXPECT_GE(accepted, drafted * 9 / 10) << accepted << " of " << drafted;
  }
  ExpectNothingHeld(*on);
}

// The rejection rule under masks, through the runner: a constrained request sampled with
// speculation on gives its choices as often as without it. Each side runs kDraws independent
// requests (different seeds), and the two samples' counts agree (two-sample chi-square at
// p > 0.001). The draft's proposals are drawn under the mask (q masked), the random draft's
// mostly rejected, so the residual's draws are what is checked; n-gram proposals are point
// masses cut where the constraint refuses them.
TEST_P(SpeculativeTest, SampledConstrainedOutputsFollowTheTargetsDistribution) {
  constexpr int kDraws = 3000, kWave = 256;
  const std::vector<std::string> choices = {" a little girl",  " a little boy named Tim",
                                            " a little cat",   " a big dog",
                                            " a big red ball", " the sun"};
  const std::string prompt =
      "Once upon a time there was a little girl. She saw a big dog and a big red ball. A little "
      "boy named Tim saw a little cat under the sun. Then she saw";
  auto run = [&](Worker& w, uint64_t first_seed, int64_t* drafted, int64_t* accepted) {
    std::map<std::string, int64_t> counts;
    for (int from = 0; from < kDraws; from += kWave) {
      std::vector<std::shared_ptr<CollectingSink>> sinks;
      for (int i = from; i < std::min(kDraws, from + kWave); ++i) {
        GenerateSpec s = Spec(prompt, 48);
        s.constraint = {constraint::Kind::kChoice, "", choices};
        s.sampling.temperature = 1.0f;
        s.sampling.seed = first_seed + static_cast<uint64_t>(i);
        sinks.push_back(std::make_shared<CollectingSink>());
        EXPECT_TRUE(w.Submit(s, sinks.back()).ok());
      }
      for (const auto& sink : sinks) {
        EXPECT_TRUE(sink->Wait());
        const StreamUpdate r = sink->result();
        ++counts[r.text];
        *drafted += r.usage.draft_tokens;
        *accepted += r.usage.accepted_draft_tokens;
      }
    }
    return counts;
  };
  auto off = MakeWorker(std::nullopt, 8);
  auto on = MakeWorker(GetParam(), 8);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  int64_t drafted = 0, accepted = 0, none = 0;
  const auto without = run(*off, 1, &none, &none);
  const auto with = run(*on, 1'000'000, &drafted, &accepted);
  for (const auto& [text, n] : with) {
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << "'" << text << "'";
  }
  int categories = 0;
  const double chi = llm::testing::TwoSampleChiSquare(with, without, &categories);
  std::string table;
  for (const std::string& c : choices) {
    table += absl::StrCat(c, ": ", with.contains(c) ? with.at(c) : 0, " / ",
                          without.contains(c) ? without.at(c) : 0, "; ");
  }
  ASSERT_GE(categories, 3) << table;  // the draws spread over several choices
  EXPECT_LT(chi, llm::testing::ChiSquareCritical(categories - 1)) << table;
  EXPECT_GT(drafted, 0);
  if (GetParam() == Proposer::kDraftRandom) {
    EXPECT_LT(accepted, drafted * 3 / 4) << "the residual is drawn from often";
  }
  RecordProperty("counts_on_off", table);
  RecordProperty("accepted_of_drafted", absl::StrCat(accepted, "/", drafted));
  ExpectNothingHeld(*on);
}

// Cancels and deadlines at random moments, many in the middle of accepted runs: afterwards no
// block is held and the worker still gives the reference's ids.
TEST_P(SpeculativeTest, CancelsLeaveEveryBlockAccountedFor) {
  auto w = MakeWorker(GetParam(), 4);
  ASSERT_NE(w, nullptr);
  std::mt19937 rng(3);
  std::vector<uint64_t> keys;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 60; ++i) {
    GenerateSpec s = Spec(i % 2 ? RepeatPrompt() : StoryPrompts()[i % 8], 120);
    s.ignore_eos = true;
    sinks.push_back(std::make_shared<CollectingSink>());
    auto key = w->Submit(s, sinks.back());
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    if (rng() % 3 == 0) {
      ASSERT_TRUE(WaitForNextStep(*w));
    }
    if (rng() % 2 == 0) w->Cancel(keys[rng() % keys.size()]);
  }
  for (uint64_t k : keys) w->Cancel(k);
  ExpectNothingHeld(*w);
  const StreamUpdate plain = Run(*MakeWorker(std::nullopt), Spec(RepeatPrompt(), 30));
  EXPECT_EQ(Run(*w, Spec(RepeatPrompt(), 30)).token_ids, plain.token_ids);
}

INSTANTIATE_TEST_SUITE_P(Proposers, SpeculativeTest,
                         ::testing::Values(Proposer::kNgram, Proposer::kDraftSelf,
                                           Proposer::kDraftRandom),
                         [](const auto& info) { return Name(info.param); });

// A run of accepted tokens reaches the client as one update; a request may opt out.
TEST_F(SpeculativeWorkerTest, AnAcceptedRunIsOneUpdateAndARequestMayOptOut) {
  auto w = MakeWorker(Proposer::kDraftSelf);
  ASSERT_NE(w, nullptr);
  int updates = 0;
  GenerateSpec spec = Spec(RepeatPrompt(), 40);
  spec.ignore_eos = true;
  const StreamUpdate on = Run(*w, spec, &updates);
  ASSERT_EQ(on.token_ids.size(), 40u);
  EXPECT_GT(on.usage.accepted_draft_tokens, 20);
  // Four proposals a step, nearly all accepted: about one update per five tokens.
  EXPECT_LE(updates, 40 / 5 + 4) << updates;
  spec.speculative = false;
  const StreamUpdate off = Run(*w, spec, &updates);
  EXPECT_EQ(off.token_ids, on.token_ids);
  EXPECT_EQ(off.usage.draft_tokens, 0);
  EXPECT_EQ(off.usage.accepted_draft_tokens, 0);
  EXPECT_GE(updates, 30);
}

// The benchmark-only oracle: a request whose oracle_ids are its own greedy ids has every
// proposal accepted (four a step, so about a fifth of the steps); one whose oracle is wrong
// every few tokens keeps its ids; one without oracle_ids gets no proposals. A bad oracle id is
// refused, naming the field.
TEST_F(SpeculativeWorkerTest, TheOracleProposesTheRequestsOwnIds) {
  auto off = MakeWorker(std::nullopt);
  auto w = MakeWorker(Proposer::kOracle);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(w, nullptr);
  for (const std::string& prompt : {RepeatPrompt(), StoryPrompts()[1]}) {
    GenerateSpec spec = Spec(prompt, 48);
    spec.ignore_eos = true;
    const StreamUpdate plain = Run(*off, spec);
    ASSERT_EQ(plain.token_ids.size(), 48u);
    spec.oracle_ids = plain.token_ids;
    int updates = 0;
    const StreamUpdate own = Run(*w, spec, &updates);
    EXPECT_EQ(own.token_ids, plain.token_ids);
    EXPECT_GT(own.usage.draft_tokens, 30);
    EXPECT_EQ(own.usage.accepted_draft_tokens, own.usage.draft_tokens);
    EXPECT_LE(updates, 48 / 5 + 2) << updates;
    for (size_t i = 2; i < spec.oracle_ids.size(); i += 3) spec.oracle_ids[i] ^= 1;
    const StreamUpdate wrong = Run(*w, spec);
    EXPECT_EQ(wrong.token_ids, plain.token_ids);
    EXPECT_LT(wrong.usage.accepted_draft_tokens, wrong.usage.draft_tokens);
    spec.oracle_ids.clear();
    const StreamUpdate none = Run(*w, spec);
    EXPECT_EQ(none.token_ids, plain.token_ids);
    EXPECT_EQ(none.usage.draft_tokens, 0);
  }
  GenerateSpec bad = Spec(RepeatPrompt(), 8);
  bad.oracle_ids = {5, 1 << 30};
  auto sink = std::make_shared<CollectingSink>();
  const auto key = w->Submit(bad, sink);
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(key.status().message().find("oracle_ids"), std::string::npos) << key.status();
  ExpectNothingHeld(*w);
}

// Under the adaptive policy, a request's decode steps at batch 1 settle the policy's choice for
// that batch size, which the worker's load and /metrics then report (issue 32 item 5: where
// speculation switches); batch sizes never seen stay "measuring" and have no series.
TEST_F(SpeculativeWorkerTest, ThePolicysChoicePerBatchReachesTheLoadAndMetrics) {
  using engine::SpeculationPolicy;
  auto w = MakeWorker(Proposer::kNgram, 6, 4, /*adaptive=*/true);
  ASSERT_NE(w, nullptr);
  const engine::SchedulerStats before = w->Load().engine.scheduler;
  for (int8_t k : before.speculation_by_batch) EXPECT_EQ(k, SpeculationPolicy::kMeasuring);
  // Each candidate k is tried on kMinDecodes batch-1 steps before the choice is made: 4
  // requests of 96 tokens are more decode steps than that takes.
  GenerateSpec spec = Spec(RepeatPrompt(), 96);
  spec.ignore_eos = true;
  for (int i = 0; i < 4; ++i) {
    const StreamUpdate out = Run(*w, spec);
    ASSERT_EQ(out.token_ids.size(), 96u);
  }
  // The pipeline's last step may still be collected (and observed) after the streams end: a
  // render is compared with the loads read just before and after it, until they agree.
  server::WorkerMetrics metrics("m");
  metrics.SetWorker(w.get());
  SpeculationPolicy::Standing standing{};
  std::string text;
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] {
        standing = w->Load().engine.scheduler.speculation_by_batch;
        text = metrics.Render();
        return standing[0] != SpeculationPolicy::kMeasuring &&
               w->Load().engine.scheduler.speculation_by_batch == standing;
      },
      std::chrono::seconds(30)));
  EXPECT_TRUE(standing[0] == 0 || standing[0] == 1 || standing[0] == 2 || standing[0] == 4)
      << static_cast<int>(standing[0]);
  for (size_t g = 1; g < standing.size(); ++g) {
    EXPECT_EQ(standing[g], SpeculationPolicy::kMeasuring);
  }
  EXPECT_EQ(llm::testing::MetricValue(
                text, "llm_spec_decode_policy_tokens{batch=\"1\",model_name=\"m\"}"),
            standing[0])
      << text;
  EXPECT_EQ(text.find("batch=\"2-3\""), std::string::npos) << text;
  metrics.SetWorker(nullptr);
}

}  // namespace
}  // namespace llm::loop
