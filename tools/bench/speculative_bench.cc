// llm-bench speculative: what speculative decoding gives on a backend, measured side by side in
// one process. For each workload the same requests run on a worker without speculation and on
// one with it (the same backend options otherwise), and the report has, for both, output tokens
// a second of wall time and the ids; for the speculative run the proposals verified, the share
// accepted and the mean acceptance length (tokens a verifying decode gave: accepted proposals
// plus the token sampled after them). Greedy ids must agree between the two runs; the report
// says whether they did (on the CUDA backend bit for bit only with --batch-invariant 1: a
// verify group's rows change the batch's shape, and with it the products' and attention's
// arithmetic otherwise), and for the steps in which every request of a wave decodes, their
// median time, the backend's busy share and the gaps between them. With --adaptive 1 the
// speculative run's report also has where the speculation policy settled per group of batch
// sizes (speculation_by_batch, speculation_at_concurrency: the proposals per slot it chose, 0
// where it turned speculation off), so runs at several --concurrency values show where it
// switches.
//
// --method oracle is the upper bound (benchmark-only): the speculative run proposes, for each
// request, the ids the run without speculation gave it (EngineRequest::oracle_ids), so every
// proposal stands while the target agrees and proposing costs nothing. On the CUDA backend run
// it with --batch-invariant 1, so the target's ids do not move with the batch's shape.
//
// --regex constrains every request of both runs to a regex (structured output): on the CPU
// backend constrained requests speculate too, each verified row under its mask; on CUDA only
// with --speculate-constrained 1 (engine.cuda_speculate_constrained), else they get no
// proposals.
//
// Workloads (text prompts in the tinystories style, so the shared test model continues them):
//   story   story openings the model continues freely (little to copy);
//   repeat  a story told twice and begun a third time (the continuation copies its input, as
//           code edits, quoting answers and summaries do).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/worker_driver.h"
#include "worker/backend/backend.h"
#include "worker/constraint/constraint.h"
#include "worker/loop/worker.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Prompts(const std::string& workload) {
  if (workload == "story") {
    return {"Once upon a time",
            "The little dog",
            "Lily and Tom went to the park. They",
            "One day, a big bear came to the village. The bear was hungry and",
            "Tim had a red ball.",
            "The sun was hot",
            "Mom said, \"Let's go home.\"",
            "Sue found a shiny box under the tree."};
  }
  const std::vector<std::string> stories = {
      "Tom had a red ball. He liked to play with it in the park. One day the ball went into "
      "the pond. Tom was sad. A big duck swam to the ball and pushed it back to Tom. Tom was "
      "happy. ",
      "Lily saw a little cat in the garden. The cat was hungry. Lily gave the cat some milk. "
      "The cat drank the milk and purred. Lily and the cat became best friends. ",
      "Ben wanted to build a tall tower. He put one block on top of another. The tower fell "
      "down. Ben tried again, slowly and carefully. This time the tower stood tall. ",
      "Anna and her mom baked a cake. They mixed flour, eggs and sugar. The cake smelled "
      "sweet. When it was ready, they shared it with their friends. "};
  std::vector<std::string> prompts;
  for (const std::string& s : stories) {
    // The third telling breaks off inside its second sentence (a finished sentence invites
    // the model to end the story).
    const size_t second = s.find('.') + 2;
    const std::string start = s.substr(0, s.find(' ', s.find(' ', second) + 1));
    prompts.push_back(s + s + start);
  }
  return prompts;
}

// Collects one request's ids and usage (read once `done` has counted it down).
class Collected : public loop::StreamSink {
 public:
  explicit Collected(Countdown* done) : done_(done) {}
  void OnUpdate(loop::StreamUpdate u) override {
    const bool finished = u.finished;
    result_.Merge(std::move(u));
    if (finished) done_->Done(absl::OkStatus());
  }
  void OnError(const absl::Status& status) override { done_->Done(status); }
  const loop::StreamUpdate& result() const { return result_; }

 private:
  Countdown* done_;
  loop::StreamUpdate result_;
};

// The steps in which `concurrency` requests decode and no prompt runs: their median time, and
// the backend's busy share and gaps between them (issue 32: >= 0.99 and < 5 us with
// speculation on, as without).
void AddDecodeSteps(const std::vector<StepRecord>& steps, int concurrency, nlohmann::json& out) {
  std::vector<double> step_s, gaps;
  double busy = 0, idle = 0;
  for (const StepRecord& r : steps) {
    if (r.decodes != concurrency || r.prompt_tokens != 0) continue;
    step_s.push_back(r.step_s);
    busy += r.step_s;
    if (r.gap_s >= 0) {
      gaps.push_back(r.gap_s);
      idle += r.gap_s;
    }
  }
  out["decode_steps"] = step_s.size();
  if (step_s.empty()) return;
  out["decode_step_ms_median"] = Percentile(step_s, 0.5) * 1e3;
  out["decode_busy_ratio"] = busy / (busy + idle);
  if (gaps.empty()) return;
  out["decode_gap_us_p50"] = Percentile(gaps, 0.5) * 1e6;
  out["decode_gap_us_p99"] = Percentile(gaps, 0.99) * 1e6;
}

struct RunResult {
  nlohmann::json report;
  std::vector<std::vector<int32_t>> ids;
};

// What every request of a run asks for, and how many run at once.
struct RunSettings {
  int rounds = 2;  // times each prompt runs
  int concurrency = 1;
  int32_t max_tokens = 96;
  float temperature = 0.0f;  // 0: greedy; else seeded by the request's index
  std::string regex;         // a regex constraint on every request; empty: none
};

// With speculation on: where the adaptive policy settled, and what was proposed and accepted.
void AddSpeculation(const engine::SpeculativeConfig& spec, const loop::EngineStats& stats,
                    int concurrency, int64_t drafted, int64_t accepted, nlohmann::json& report) {
  if (spec.enabled() && spec.adaptive) {
    report["speculation_by_batch"] = SpeculationByBatch(stats.scheduler);
    report["speculation_at_concurrency"] = SpeculationAt(stats.scheduler, concurrency);
  }
  if (spec.enabled()) {
    const auto verifications = static_cast<double>(stats.spec_drafts);
    report["draft_tokens"] = drafted;
    report["accepted_tokens"] = accepted;
    report["acceptance_rate"] = drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0;
    report["verifications"] = stats.spec_drafts;
    report["mean_acceptance_length"] =
        verifications > 0 ? (verifications + static_cast<double>(accepted)) / verifications : 0.0;
  }
}

// Runs every prompt `rounds` times, `concurrency` at a time, on a fresh backend with `spec`.
// `oracle` (the oracle method): request i's oracle_ids.
absl::StatusOr<RunResult> RunWorkload(const backend::BackendOptions& base,
                                      const engine::SpeculativeConfig& spec,
                                      const std::vector<std::string>& prompts,
                                      const RunSettings& run,
                                      const std::vector<std::vector<int32_t>>* oracle) {
  const auto concurrency = static_cast<size_t>(run.concurrency);
  backend::BackendOptions bo = base;
  bo.speculative = spec;
  LLM_ASSIGN_OR_RETURN(backend::Backend b, backend::CreateBackend(bo));
  loop::WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 0;
  wo.scheduler.prefix_cache = false;  // each run computes its prompts
  wo.scheduler.speculative = spec;
  Recorder recorder;
  LLM_ASSIGN_OR_RETURN(auto worker,
                       loop::Worker::Create(wo, std::move(b.runner), std::move(b.tokenizer),
                                            b.config.eos_token_ids, &recorder, &recorder));
  RunResult r;
  int64_t tokens = 0, drafted = 0, accepted = 0;
  const auto start = Clock::now();
  std::vector<std::shared_ptr<Collected>> sinks;
  const size_t total = prompts.size() * static_cast<size_t>(run.rounds);
  for (size_t begin = 0; begin < total; begin += concurrency) {
    const size_t end = std::min(total, begin + concurrency);
    Countdown done;
    done.Add(static_cast<int>(end - begin));
    std::vector<std::shared_ptr<Collected>> wave;
    for (size_t i = begin; i < end; ++i) {
      loop::GenerateSpec g;
      g.text = prompts[i % prompts.size()];
      g.max_tokens = run.max_tokens;
      g.sampling.temperature = run.temperature;
      g.sampling.seed = i;
      if (!run.regex.empty()) g.constraint = {constraint::Kind::kRegex, run.regex, {}};
      if (oracle != nullptr && i < oracle->size()) g.oracle_ids = (*oracle)[i];
      wave.push_back(std::make_shared<Collected>(&done));
      if (auto key = worker->Submit(g, wave.back()); !key.ok()) {
        for (size_t j = i; j < end; ++j) done.Done(absl::OkStatus());  // never submitted
        done.Wait().IgnoreError();  // the submitted ones hold `done`
        return key.status();
      }
    }
    LLM_RETURN_IF_ERROR(done.Wait());
    sinks.insert(sinks.end(), wave.begin(), wave.end());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& s : sinks) {
    tokens += static_cast<int64_t>(s->result().token_ids.size());
    drafted += s->result().usage.draft_tokens;
    accepted += s->result().usage.accepted_draft_tokens;
    r.ids.push_back(s->result().token_ids);
  }
  const loop::EngineStats stats = worker->Load().engine;
  r.report = {{"requests", sinks.size()},
              {"output_tokens", tokens},
              {"seconds", seconds},
              {"tokens_per_second", tokens / seconds},
              {"steps", stats.steps}};
  AddDecodeSteps(recorder.TakeSteps(), run.concurrency, r.report);
  AddSpeculation(spec, stats, run.concurrency, drafted, accepted, r.report);
  return r;
}

// The settings of one run, read from its flags once.
struct SpeculativeBenchSettings {
  backend::BackendOptions backend;  // without speculation: each run sets its own
  engine::SpeculativeConfig spec;
  std::string method;  // --method as given
  std::string workloads;
  int64_t concurrency = 0, max_tokens = 0;
  double temperature = 0;
  RunSettings run;
};

void AddSpeculativeBenchFlags(FlagSet& flags) {
  flags.Value("model", "checkpoint directory or random:<shape>", "random:small")
      .Value("tokenizer", "tokenizer.json or its directory (default: the model's)", "")
      .Value("backend", "auto, cpu or cuda", "cpu")
      .Value("method",
             "ngram, draft or oracle (the upper bound: each request's ids without "
             "speculation)",
             "ngram")
      .Value("draft-model", "draft: checkpoint directory or random:<shape>", "")
      .Value("num-tokens", "proposals per step at most", "4")
      .Value("ngram-min", "ngram: shortest suffix", "2")
      .Value("ngram-max", "ngram: longest suffix", "4")
      .Value("adaptive", "1: the speculation policy chooses per step; 0: always num-tokens", "0")
      .Value("workloads", "comma-separated: story, repeat", "story,repeat")
      .Value("rounds", "times each prompt runs", "2")
      .Value("concurrency", "requests at once", "1")
      .Value("max-tokens", "output tokens per request", "96")
      .Value("temperature", "0: greedy (ids compared); else seeded sampling", "0")
      .Value("regex",
             "constrain every request's output to this regex (structured output; empty: none)", "")
      .Value("slots", "slot table size", "8")
      .Value("batch-invariant",
             "cuda: 1 for engine.cuda_batch_invariant (ids comparable bit for "
             "bit across batch shapes)",
             "0")
      .Value("speculate-constrained",
             "cuda: 1 for engine.cuda_speculate_constrained (constrained requests speculate, "
             "their verify rows masked along the proposals)",
             "0")
      .Value("cpu-threads", "cpu: threads (0: all cores)", "0");
}

// The integer flags, read in the order their errors are reported.
struct IntFlags {
  int64_t num_tokens = 0, ngram_min = 0, ngram_max = 0, adaptive = 0, rounds = 0;
  int64_t concurrency = 0, max_tokens = 0, slots = 0, threads = 0, batch_invariant = 0;
  int64_t speculate_constrained = 0;
};

absl::StatusOr<IntFlags> ReadIntFlags(const FlagSet& flags) {
  IntFlags f;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"num-tokens", &f.num_tokens},
                          {"ngram-min", &f.ngram_min},
                          {"ngram-max", &f.ngram_max},
                          {"adaptive", &f.adaptive},
                          {"rounds", &f.rounds},
                          {"concurrency", &f.concurrency},
                          {"max-tokens", &f.max_tokens},
                          {"slots", &f.slots},
                          {"cpu-threads", &f.threads},
                          {"batch-invariant", &f.batch_invariant},
                          {"speculate-constrained", &f.speculate_constrained}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  return f;
}

absl::StatusOr<SpeculativeBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  auto ints = ReadIntFlags(flags);
  if (!ints.ok()) return ints.status();
  const IntFlags& f = *ints;
  auto temperature = flags.GetDouble("temperature");
  if (!temperature.ok()) return temperature.status();
  SpeculativeBenchSettings s;
  s.method = flags.GetString("method");
  auto method = engine::ParseSpeculativeMethod(s.method);
  if (!method.ok()) return method.status();
  s.spec.method = *method;
  s.spec.num_tokens = static_cast<int32_t>(f.num_tokens);
  s.spec.ngram_min = static_cast<int32_t>(f.ngram_min);
  s.spec.ngram_max = static_cast<int32_t>(f.ngram_max);
  s.spec.draft_model = flags.GetString("draft-model");
  s.spec.adaptive = f.adaptive != 0;
  if (absl::Status st = s.spec.Validate(); !st.ok()) return st;
  backend::BackendOptions& bo = s.backend;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.backend = flags.GetString("backend");
  bo.sizes.max_slots = static_cast<int32_t>(f.slots);
  bo.cpu_threads = static_cast<int>(f.threads);
  bo.cuda.batch_invariant = f.batch_invariant != 0;
  bo.cuda.speculate_constrained = f.speculate_constrained != 0;
  s.workloads = flags.GetString("workloads");
  s.concurrency = f.concurrency;
  s.max_tokens = f.max_tokens;
  s.temperature = *temperature;
  s.run = RunSettings{static_cast<int>(f.rounds), static_cast<int>(f.concurrency),
                      static_cast<int32_t>(f.max_tokens), static_cast<float>(*temperature),
                      flags.GetString("regex")};
  return s;
}

// The report's head: what was run, and how.
nlohmann::json Describe(const SpeculativeBenchSettings& s) {
  const backend::BackendOptions& bo = s.backend;
  nlohmann::json out = {{"benchmark", "speculative"},
                        {"model", bo.model},
                        {"method", s.method},
                        {"num_tokens", s.spec.num_tokens},
                        {"adaptive", s.spec.adaptive},
                        {"backend", bo.backend},
                        {"batch_invariant", bo.cuda.batch_invariant},
                        {"concurrency", s.concurrency},
                        {"max_tokens", s.max_tokens}};
  if (!s.run.regex.empty()) {
    out["regex"] = s.run.regex;
    // The CPU runner always speculates constrained requests.
    out["speculate_constrained"] = bo.backend != "cuda" || bo.cuda.speculate_constrained;
  }
  if (s.spec.method == engine::SpeculativeMethod::kDraft) out["draft_model"] = s.spec.draft_model;
  if (s.spec.method == engine::SpeculativeMethod::kOracle) out["upper_bound"] = true;
  return out;
}

// One workload's prompts without speculation, then with it (the oracle proposes the first
// run's ids): both reports, the speedup and, when greedy, whether the ids agree.
absl::StatusOr<nlohmann::json> CompareWorkload(const SpeculativeBenchSettings& s,
                                               const std::vector<std::string>& prompts) {
  auto off = RunWorkload(s.backend, engine::SpeculativeConfig(), prompts, s.run, nullptr);
  if (!off.ok()) return off.status();
  auto on = RunWorkload(s.backend, s.spec, prompts, s.run,
                        s.spec.method == engine::SpeculativeMethod::kOracle ? &off->ids : nullptr);
  if (!on.ok()) return on.status();
  nlohmann::json w = {{"off", off->report}, {"on", on->report}};
  w["speedup"] = on->report["tokens_per_second"].get<double>() /
                 off->report["tokens_per_second"].get<double>();
  if (s.temperature == 0) w["greedy_ids_identical"] = on->ids == off->ids;
  return w;
}

// Every workload of --workloads in turn, each checked as its turn comes.
absl::Status MeasureWorkloads(const SpeculativeBenchSettings& s, nlohmann::json& out) {
  const std::vector<std::string> workloads = absl::StrSplit(s.workloads, ',', absl::SkipEmpty());
  for (const std::string& workload : workloads) {
    if (workload != "story" && workload != "repeat") {
      return absl::InvalidArgumentError("--workloads: '" + workload +
                                        "' is not one of story, repeat");
    }
    auto w = CompareWorkload(s, Prompts(workload));
    if (!w.ok()) return w.status();
    out[workload] = *w;
  }
  return absl::OkStatus();
}

}  // namespace

int RunSpeculativeBench(const std::vector<std::string>& args) {
  const char* cmd = "llm-bench speculative";
  auto parsed = ParseSettings(cmd, args, AddSpeculativeBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  nlohmann::json out = Describe(*parsed.settings);
  if (absl::Status st = MeasureWorkloads(*parsed.settings, out); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
