// Speculative decoding on the CUDA runner (n-gram proposals and verification on the device,
// kernels/speculative/): with the batch-invariant mode on, every request's ids are those of a
// run without speculation, greedy and seeded sampling alike (each verify row draws what the
// plain run draws for its token, kernels/speculative/verify.h), proposals do stand on prompts
// that repeat themselves, a prefix-cache hit's cached prompt is searched like a computed one,
// the benchmark-only oracle's own ids all stand, constrained requests share speculative steps
// (and speculate, with engine.cuda_speculate_constrained), the draft model keeps the ids, and a
// cancel storm leaves no block behind.
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/runner/cuda/runner_test_util.h"

namespace llm::runner::cuda::testing {
namespace {

// A prompt whose continuation copies it: a story told twice, then its start again.
std::string RepeatPrompt() {
  const std::string story =
      "Tom had a red ball. He liked to play with it in the park. One day the ball went into the "
      "pond. Tom was sad. A big duck swam to the ball and pushed it back to Tom. Tom was happy. ";
  return story + story + "Tom had a red ball. He liked";
}

WorkerSetup SpeculativeSetup(bool on, int32_t num_tokens,
                             engine::SpeculativeMethod method = engine::SpeculativeMethod::kNgram) {
  WorkerSetup s;
  s.slots = 8;
  s.prefill_tokens = 48;
  s.batch_invariant = true;
  if (on) {
    s.speculative.method = method;
    s.speculative.num_tokens = num_tokens;
    s.speculative.ngram_min = 1;
    s.speculative.ngram_max = 3;
    s.speculative.adaptive = false;  // every decode proposes up to num_tokens
  }
  return s;
}

// The crowd's requests, then `repeats` of the repeating prompt (60 tokens, EOS ignored), the
// odd ones sampled with seeds `seed` + i.
std::vector<GenerateSpec> CrowdAndRepeats(int repeats, uint64_t seed) {
  std::vector<GenerateSpec> specs = CrowdSpecs();
  for (int i = 0; i < repeats; ++i) {
    GenerateSpec s = Spec(RepeatPrompt(), 60);
    s.ignore_eos = true;
    if (i % 2 == 1) {
      s.sampling.temperature = 0.8f;
      s.sampling.seed = seed + static_cast<uint64_t>(i);
    }
    specs.push_back(s);
  }
  return specs;
}

// Runs `specs` on a worker of `setup`, expecting each request's ids to be `plain`'s, then
// specs[alone] by itself, expecting the same of it; returns that request's usage.
loop::Usage ExpectPlainIds(const WorkerSetup& setup, const std::vector<GenerateSpec>& specs,
                           const std::vector<std::vector<int32_t>>& plain, size_t alone,
                           const std::string& label) {
  auto on = MakeWorker(setup);
  EXPECT_NE(on, nullptr) << label;
  if (on == nullptr) return {};
  const auto spec = RunCrowd(*on, specs);
  EXPECT_EQ(spec.size(), specs.size()) << label;
  for (size_t i = 0; i < specs.size() && i < spec.size(); ++i) {
    EXPECT_EQ(spec[i], plain[i]) << label << " request " << i;
  }
  auto sink = std::make_shared<CollectingSink>();
  EXPECT_TRUE(on->Submit(specs[alone], sink).ok()) << label;
  EXPECT_TRUE(sink->Wait()) << label;
  EXPECT_EQ(sink->result().token_ids, plain[alone]) << label << " alone";
  return sink->result().usage;
}

TEST(CudaSpeculativeTest, NgramKeepsEveryRequestsIdsGreedyAndSeeded) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = CrowdAndRepeats(6, 77);
  auto off = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(off, nullptr);
  const auto plain = RunCrowd(*off, specs);
  // Speculative decode steps replay their graphs; without graphs they run eagerly.
  for (const auto& [k, graphs] : {std::pair{1, true}, std::pair{4, true}, std::pair{4, false}}) {
    WorkerSetup setup = SpeculativeSetup(true, k);
    setup.graphs = graphs;
    // Alone, a greedy repeating prompt's proposals stand (the last two specs are the greedy
    // and the sampled repeat).
    const loop::Usage usage = ExpectPlainIds(setup, specs, plain, specs.size() - 2,
                                             absl::StrCat("k ", k, " graphs ", graphs));
    EXPECT_GT(usage.draft_tokens, 0) << "k " << k;
    EXPECT_GT(usage.accepted_draft_tokens, 0) << "k " << k;
  }
}

// Constrained requests share speculative steps with others: such a step replays the
// speculative forward-only graph (or runs eagerly), samples once the masks are written, then
// verifies the groups. Without engine.cuda_speculate_constrained a constrained slot gets no
// proposals; with it, the step copies its proposals back and the host masks each verify row
// along them (worker/runner/slot_constraints.h), with the n-gram proposer and the draft model,
// with graphs, eagerly and with programmatic dependent launch. With the batch-invariant mode
// every request's ids are those of a run without speculation. The constrained requests are a
// choice (whose proposals the constraint mostly refuses) and a regex the story's own text
// satisfies (whose copied proposals stand, so rows past a group's first sample under masks
// made along the proposals).
TEST(CudaSpeculativeTest, ConstrainedRequestsShareSpeculativeSteps) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<std::string> choices = {"happy", "sad", "a big red ball", "Tim"};
  const std::string pattern = "[A-Za-z ,.]+";
  std::vector<GenerateSpec> specs;
  for (int i = 0; i < 8; ++i) {
    GenerateSpec s = Spec(RepeatPrompt(), 60);
    if (i % 4 == 0) {
      s.constraint = {constraint::Kind::kRegex, pattern, {}};
    } else if (i % 4 == 2) {
      s.constraint = {constraint::Kind::kChoice, "", choices};
    } else {
      s.ignore_eos = true;
    }
    if (i % 8 >= 4) {
      s.sampling.temperature = 0.8f;
      s.sampling.seed = 90 + i;
    }
    specs.push_back(s);
  }
  auto off = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(off, nullptr);
  const auto plain = RunCrowd(*off, specs);
  struct Variant {
    bool graphs, constrained, pdl;
    engine::SpeculativeMethod method;
  };
  const auto ngram = engine::SpeculativeMethod::kNgram;
  for (const Variant v : {Variant{true, false, false, ngram}, Variant{false, false, false, ngram},
                          Variant{true, true, false, ngram}, Variant{false, true, false, ngram},
                          Variant{true, true, true, ngram},
                          Variant{true, true, false, engine::SpeculativeMethod::kDraft}}) {
    const std::string label =
        absl::StrCat("graphs ", v.graphs, " constrained proposals ", v.constrained, " pdl ", v.pdl,
                     " draft ", v.method == engine::SpeculativeMethod::kDraft);
    WorkerSetup setup = SpeculativeSetup(true, 4, v.method);
    if (v.method == engine::SpeculativeMethod::kDraft) {
      setup.speculative.draft_model = llm::testing::SharedPath("models/tinystories-656k");
    }
    setup.graphs = v.graphs;
    setup.pdl = v.pdl;
    setup.speculate_constrained = v.constrained;
    auto on = MakeWorker(setup);
    ASSERT_NE(on, nullptr) << label;
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (const GenerateSpec& s : specs) {
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(on->Submit(s, sinks.back()).ok()) << label;
    }
    int64_t accepted = 0, constrained_drafts = 0, constrained_accepted = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_TRUE(sinks[i]->Wait()) << label;
      ASSERT_TRUE(sinks[i]->error().ok()) << label << ": " << sinks[i]->error();
      const auto r = sinks[i]->result();
      EXPECT_EQ(r.token_ids, plain[i]) << label << " request " << i;
      if (specs[i].constraint.kind == constraint::Kind::kChoice) {
        EXPECT_NE(std::find(choices.begin(), choices.end(), r.text), choices.end())
            << label << " request " << i << ": '" << r.text << "'";
      } else if (specs[i].constraint.kind == constraint::Kind::kRegex) {
        EXPECT_TRUE(std::regex_match(r.text, std::regex(pattern)))
            << label << " request " << i << ": '" << r.text << "'";
      }
      if (specs[i].constraint.enabled()) {
        constrained_drafts += r.usage.draft_tokens;
        constrained_accepted += r.usage.accepted_draft_tokens;
      } else {
        accepted += r.usage.accepted_draft_tokens;
      }
    }
    EXPECT_GT(accepted, 0) << label;
    if (v.constrained) {
      EXPECT_GT(constrained_drafts, 0) << label;
      EXPECT_GT(constrained_accepted, 0) << label;
    } else {
      EXPECT_EQ(constrained_drafts, 0) << label;
    }
  }
}

// The draft model on the device (engine.speculative.method: draft), here the model itself:
// every request's ids are those of a run without speculation (batch-invariant), greedy and
// seeded alike, with graphs and without, and most of a greedy request's proposals stand (its
// draft sees what the target sees, in passes of other shapes).
TEST(CudaSpeculativeTest, DraftModelKeepsTheIds) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::vector<GenerateSpec> specs = CrowdAndRepeats(4, 300);
  auto off = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(off, nullptr);
  const auto plain = RunCrowd(*off, specs);
  for (const bool graphs : {true, false}) {
    WorkerSetup setup = SpeculativeSetup(true, 4, engine::SpeculativeMethod::kDraft);
    setup.speculative.draft_model = llm::testing::SharedPath("models/tinystories-656k");
    setup.graphs = graphs;
    // Alone: the greedy repeat (the fourth from the end).
    const loop::Usage usage = ExpectPlainIds(setup, specs, plain, specs.size() - 4,
                                             absl::StrCat("draft, graphs ", graphs));
    EXPECT_GT(usage.draft_tokens, 20) << "graphs " << graphs;
    EXPECT_GT(2 * usage.accepted_draft_tokens, usage.draft_tokens) << "graphs " << graphs;
  }
}

TEST(CudaSpeculativeTest, PrefixCacheHitsMatchComputingThePrompt) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  ExpectPrefixCacheHitsMatchComputingThePrompt(SpeculativeSetup(true, 4), RepeatPrompt());
}

// The second run of a prompt finds it in the prefix cache; its history spans put the cached
// positions into the device history, so it proposes and accepts exactly what the first did.
TEST(CudaSpeculativeTest, ACachedPromptIsSearchedLikeAComputedOne) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto w = MakeWorker(SpeculativeSetup(true, 4));
  ASSERT_NE(w, nullptr);
  GenerateSpec spec = Spec(RepeatPrompt(), 48);
  spec.ignore_eos = true;
  std::vector<loop::StreamUpdate> runs;
  for (int i = 0; i < 2; ++i) {
    auto sink = std::make_shared<CollectingSink>();
    ASSERT_TRUE(w->Submit(spec, sink).ok());
    ASSERT_TRUE(sink->Wait());
    runs.push_back(sink->result());
  }
  EXPECT_EQ(runs[0].usage.cached_prompt_tokens, 0);
  EXPECT_GT(runs[1].usage.cached_prompt_tokens, 16);
  EXPECT_EQ(runs[1].token_ids, runs[0].token_ids);
  EXPECT_GT(runs[0].usage.draft_tokens, 0);
  EXPECT_EQ(runs[1].usage.draft_tokens, runs[0].usage.draft_tokens);
  EXPECT_EQ(runs[1].usage.accepted_draft_tokens, runs[0].usage.accepted_draft_tokens);
}

// The oracle proposes each request's oracle_ids from the device history: with the plain run's
// own ids every proposal stands and the ids are unchanged; with a wrong oracle the ids are
// still unchanged. An oracle shorter than the output proposes nothing past its end (the slot's
// earlier history is cleared), so its proposals all stand too.
TEST(CudaSpeculativeTest, TheOraclesOwnIdsAllStand) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  std::vector<GenerateSpec> specs;
  for (const std::string& p : {RepeatPrompt(), std::string("Once upon a time"),
                               std::string("The little dog"), RepeatPrompt()}) {
    GenerateSpec s = Spec(p, 64);
    s.ignore_eos = true;
    specs.push_back(s);
  }
  auto off = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(off, nullptr);
  const auto plain = RunCrowd(*off, specs);
  auto on = MakeWorker(SpeculativeSetup(true, 4, engine::SpeculativeMethod::kOracle));
  ASSERT_NE(on, nullptr);
  for (const bool own : {true, false}) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (size_t i = 0; i < specs.size(); ++i) {
      GenerateSpec s = specs[i];
      s.oracle_ids = plain[i];
      if (i == 1) s.oracle_ids.resize(20);
      if (!own) {
        for (size_t j = 2; j < s.oracle_ids.size(); j += 3) s.oracle_ids[j] ^= 1;
      }
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(on->Submit(s, sinks.back()).ok());
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_TRUE(sinks[i]->Wait());
      const loop::StreamUpdate r = sinks[i]->result();
      EXPECT_EQ(r.token_ids, plain[i]) << (own ? "own" : "wrong") << " request " << i;
      EXPECT_GT(r.usage.draft_tokens, i == 1 ? 10 : 40) << "request " << i;
      if (i == 1) {
        EXPECT_LE(r.usage.draft_tokens, 20);
      }
      if (own) {
        EXPECT_EQ(r.usage.accepted_draft_tokens, r.usage.draft_tokens) << "request " << i;
      } else {
        EXPECT_LT(r.usage.accepted_draft_tokens, r.usage.draft_tokens) << "request " << i;
      }
    }
  }
}

TEST(CudaSpeculativeTest, CancelsInsideAcceptedRunsLeaveEveryBlock) {
  LLM_REQUIRE_GPU();
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto w = MakeWorker(SpeculativeSetup(true, 4));
  ASSERT_NE(w, nullptr);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 40; ++i) {
    GenerateSpec s = Spec(RepeatPrompt(), 120);
    s.ignore_eos = true;
    auto key = w->Submit(s, std::make_shared<CollectingSink>());
    ASSERT_TRUE(key.ok()) << key.status();
    keys.push_back(*key);
    // Cancel every third request once it has run a step or two.
    if (i % 3 == 2) {
      ASSERT_TRUE(WaitForNextStep(*w));
      w->Cancel(keys[i - 2]);
    }
  }
  for (uint64_t k : keys) w->Cancel(k);
  ASSERT_TRUE(w->WaitIdle(loop::Clock::now() + std::chrono::seconds(30)));
  EXPECT_TRUE(WaitForLoad(*w, [](const loop::WorkerLoad& l) {
    return l.engine.scheduler.running_requests == 0 && l.engine.scheduler.kv_blocks_used == 0;
  }));
  EXPECT_EQ(w->Load().engine.scheduler.free_slots, 8);
  // And the runner still gives the plain run's ids.
  auto plain = MakeWorker(SpeculativeSetup(false, 0));
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(Generate(*w, Spec(RepeatPrompt(), 40)), Generate(*plain, Spec(RepeatPrompt(), 40)));
}

}  // namespace
}  // namespace llm::runner::cuda::testing
