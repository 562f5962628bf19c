// llm-bench accuracy: how far a model (typically FP8) is from a reference (its 16-bit original),
// teacher-forced on the CPU reference backend: at every position of each text, whether both
// pick the same next token (top-1 agreement), each one's perplexity of the text's actual next
// tokens, and the cosine similarity of their logits.
//
// Texts: the golden prompts with their generated ids (../shared/golden, BOS included) and a
// held-out text (tests/data/heldout_story.txt, in windows of --window tokens), tokenized with
// the model's tokenizer. A random:<shape> model has no text it was trained on, so it takes
// --random-sequences sequences of --window random ids instead; --layers keeps the first N
// layers of such a shape, so that an 8B shape's products fit a CPU's memory (fp32).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "worker/frontend/tokenizer.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/synthetic.h"
#include "worker/runner/cpu_model.h"

namespace llm::bench {
namespace {

using nlohmann::json;

struct Model {
  model::ModelSource source;
  model::ModelConfig config;
  model::QuantScheme scheme;
  model::KvCacheSpec kv;
  std::unique_ptr<model::TensorStore> store;
  std::unique_ptr<runner::CpuModel> cpu;
};

// Loads `spec` (a directory or random:<shape>) with its own format, or quantised at load
// (`quantization`), its KV cache as `kv_cache_dtype` says (engine.kv_cache_dtype), keeping the
// first `layers` layers of a random shape (0: all).
absl::StatusOr<Model> LoadModel(const std::string& spec, const std::string& quantization,
                                const std::string& kv_cache_dtype, int32_t layers,
                                ThreadPool& pool) {
  Model m;
  LLM_ASSIGN_OR_RETURN(m.source, model::ParseModelSource(spec));
  LLM_ASSIGN_OR_RETURN(m.config, model::LoadSourceConfig(m.source));
  model::QuantScheme checkpoint;
  if (m.source.synthetic()) {
    if (layers > 0) m.config.num_layers = std::min(m.config.num_layers, layers);
    LLM_ASSIGN_OR_RETURN(
        m.store, model::MakeSyntheticStore(m.config, m.source.seed, model::DType::kBF16, &pool));
  } else {
    LLM_ASSIGN_OR_RETURN(checkpoint, model::LoadQuantScheme(m.source.dir));
    LLM_ASSIGN_OR_RETURN(auto opened, model::TensorStore::Open(m.source.dir));
    LLM_ASSIGN_OR_RETURN(m.store, model::ToLlamaLayout(m.config, std::move(opened)));
  }
  LLM_ASSIGN_OR_RETURN(m.scheme, model::ApplyQuantizationOption(quantization, checkpoint));
  LLM_ASSIGN_OR_RETURN(m.kv, model::ResolveKvCache(kv_cache_dtype, checkpoint, m.config,
                                                   m.source.synthetic() ? nullptr : m.store.get()));
  LLM_ASSIGN_OR_RETURN(m.cpu,
                       runner::CpuModel::FromStore(m.config, *m.store, &pool, m.scheme, m.kv));
  return m;
}

// The logits at every position of `ids` ([ids.size(), vocab]): one forward pass whose chunks
// are one token each, all of one sequence, so each position's logits come out. `last_only`:
// the sequence in prompt chunks of kLastOnlyChunk tokens (a forward each, so long sequences
// need only a chunk's activations), only the last position's logits ([vocab]).
constexpr int32_t kLastOnlyChunk = 2048;

absl::StatusOr<std::vector<float>> AllLogits(runner::CpuModel& m, const std::vector<int32_t>& ids,
                                             bool last_only) {
  const int32_t bt = 16, n = static_cast<int32_t>(ids.size());
  runner::CpuKvCache kv(m.config(), (n + bt - 1) / bt, bt);
  std::vector<int32_t> table((n + bt - 1) / bt);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::vector<float> logits;
  if (last_only) {
    for (int32_t begin = 0; begin < n; begin += kLastOnlyChunk) {
      const int32_t len = std::min(kLastOnlyChunk, n - begin);
      const std::span<const int32_t> blocks(table.data(), (begin + len + bt - 1) / bt);
      const runner::SeqChunk chunk{0, len, begin, blocks, begin + len == n};
      LLM_RETURN_IF_ERROR(m.Forward({std::span<const int32_t>(ids.data() + begin, len),
                                     std::span<const runner::SeqChunk>(&chunk, 1)},
                                    kv, logits));
    }
    return logits;
  }
  std::vector<runner::SeqChunk> chunks;
  for (int32_t t = 0; t < n; ++t) chunks.push_back({t, 1, t, table, true});
  LLM_RETURN_IF_ERROR(m.Forward({ids, chunks}, kv, logits));
  return logits;
}

// Sums over the positions of several texts.
struct Tally {
  int64_t positions = 0;
  int64_t agree = 0;
  double nll_model = 0, nll_reference = 0;
  double cosine_sum = 0, cosine_min = 1;

  void Add(const Tally& o) {
    positions += o.positions;
    agree += o.agree;
    nll_model += o.nll_model;
    nll_reference += o.nll_reference;
    cosine_sum += o.cosine_sum;
    cosine_min = std::min(cosine_min, o.cosine_min);
  }

  json Json() const {
    const double n = static_cast<double>(std::max<int64_t>(positions, 1));
    const double ppl_m = std::exp(nll_model / n), ppl_r = std::exp(nll_reference / n);
    return {{"positions", positions},
            {"top1_agreement", agree / n},
            {"perplexity_model", ppl_m},
            {"perplexity_reference", ppl_r},
            {"perplexity_change", ppl_m / ppl_r - 1.0},
            {"logit_cosine_mean", cosine_sum / n},
            {"logit_cosine_min", cosine_min}};
  }
};

// -log softmax(row)[target].
double Nll(const float* row, int32_t vocab, int32_t target) {
  const float mx = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  return std::log(sum) - (static_cast<double>(row[target]) - mx);
}

// Every position of `ids` but the last predicts the next id; `last_only`: only the last of
// those (the sequence's last id is the target).
absl::Status Compare(Model& m, Model& r, const std::vector<int32_t>& ids, bool last_only,
                     Tally& tally) {
  const std::vector<int32_t> input =
      last_only ? std::vector<int32_t>(ids.begin(), ids.end() - 1) : ids;
  LLM_ASSIGN_OR_RETURN(const std::vector<float> lm, AllLogits(*m.cpu, input, last_only));
  LLM_ASSIGN_OR_RETURN(const std::vector<float> lr, AllLogits(*r.cpu, input, last_only));
  const int32_t vocab = m.config.vocab_size;
  const size_t first = last_only ? ids.size() - 2 : 0;
  for (size_t t = first; t + 1 < ids.size(); ++t) {
    const float* a = lm.data() + (t - first) * vocab;
    const float* b = lr.data() + (t - first) * vocab;
    tally.agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    tally.nll_model += Nll(a, vocab, ids[t + 1]);
    tally.nll_reference += Nll(b, vocab, ids[t + 1]);
    double ab = 0, aa = 0, bb = 0;
    for (int32_t i = 0; i < vocab; ++i) {
      ab += static_cast<double>(a[i]) * b[i];
      aa += static_cast<double>(a[i]) * a[i];
      bb += static_cast<double>(b[i]) * b[i];
    }
    const double cosine = ab / std::sqrt(aa * bb);
    tally.cosine_sum += cosine;
    tally.cosine_min = std::min(tally.cosine_min, cosine);
    ++tally.positions;
  }
  return absl::OkStatus();
}

// The golden sequences: prompt ids then generated ids, per line.
absl::StatusOr<std::vector<std::vector<int32_t>>> GoldenSequences(const std::string& path) {
  LLM_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("prompt_ids") || !j.contains("generated_ids")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a line without prompt_ids and generated_ids"));
    }
    std::vector<int32_t> ids = j["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t id : j["generated_ids"].get<std::vector<int32_t>>()) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

// `text` tokenized (BOS as the tokenizer adds it) in windows of `window` tokens, each window
// after the first starting with BOS again where the model has one.
absl::StatusOr<std::vector<std::vector<int32_t>>> TextWindows(const std::string& dir,
                                                              const std::string& path,
                                                              int32_t window, int32_t bos) {
  LLM_ASSIGN_OR_RETURN(auto tok, frontend::Tokenizer::Load(dir));
  LLM_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  LLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(text, true));
  std::vector<std::vector<int32_t>> out;
  size_t at = 0;
  while (at + 1 < ids.size()) {
    std::vector<int32_t> w;
    if (at > 0 && bos >= 0) w.push_back(bos);
    while (at < ids.size() && static_cast<int32_t>(w.size()) < window) w.push_back(ids[at++]);
    out.push_back(std::move(w));
  }
  return out;
}

// The settings of one run, read from its flags once.
struct AccuracyBenchSettings {
  std::string model, reference, quantization, kv_cache_dtype, golden, text;
  int64_t window = 0, layers = 0, random_sequences = 0, threads = 0;
  bool last_only = false;
};

void AddAccuracyBenchFlags(FlagSet& flags) {
  flags.Value("model", "the model measured: a checkpoint directory or random:<shape>")
      .Value("reference", "the reference: a checkpoint directory or random:<shape>")
      .Value("quantization", "--model quantised at load: none or fp8 (engine.quantization)", "none")
      .Value("kv-cache-dtype",
             "--model's KV cache: auto, bf16 or fp8 (engine.kv_cache_dtype); the reference's "
             "follows its checkpoint",
             "auto")
      .Value("golden", "golden JSON lines (prompt_ids, generated_ids); empty: none",
             SharedPath("golden/tinystories-656k.jsonl"))
      .Value("text", "held-out text, tokenized with --model's tokenizer; empty: none",
             SourcePath("tests/data/heldout_story.txt"))
      .Value("window", "tokens per teacher-forced sequence (at most the context)", "256")
      .Value("layers", "random shapes: keep the first N layers (0: all)", "0")
      .Value("random-sequences", "random shapes: sequences of random ids", "4")
      .Bool("last-only",
            "compare each sequence's last position only (one logits row a sequence: long "
            "windows, e.g. an FP8 cache at 4k to 32k tokens)")
      .Value("threads", "CPU threads (0 = all cores)", "0");
}

absl::StatusOr<AccuracyBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  if (absl::Status st = flags.Require({"model", "reference"}); !st.ok()) return st;
  AccuracyBenchSettings s;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"window", &s.window},
                          {"layers", &s.layers},
                          {"random-sequences", &s.random_sequences},
                          {"threads", &s.threads}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  s.model = flags.GetString("model");
  s.reference = flags.GetString("reference");
  s.quantization = flags.GetString("quantization");
  s.kv_cache_dtype = flags.GetString("kv-cache-dtype");
  s.golden = flags.GetString("golden");
  s.text = flags.GetString("text");
  s.last_only = flags.GetBool("last-only");
  return s;
}

// Named sets of sequences to teacher-force.
using SequenceSets = std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>>;

// A random shape: --random-sequences sequences of random ids; else the golden sequences and the
// held-out text's windows, each where its flag names a file. Windows are at most both contexts.
absl::StatusOr<SequenceSets> Sequences(const AccuracyBenchSettings& s, const Model& m,
                                       const Model& r) {
  const int32_t win = static_cast<int32_t>(std::min<int64_t>(
      s.window, std::min(m.config.max_position_embeddings, r.config.max_position_embeddings)));
  SequenceSets sets;
  if (m.source.synthetic()) {
    std::mt19937 rng(1);
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(s.random_sequences));
    for (auto& seq : seqs) {
      for (int32_t i = 0; i < win; ++i)
        seq.push_back(static_cast<int32_t>(rng() % m.config.vocab_size));
    }
    sets.emplace_back("random", std::move(seqs));
    return sets;
  }
  if (!s.golden.empty()) {
    auto golden = GoldenSequences(s.golden);
    if (!golden.ok()) return golden.status();
    sets.emplace_back("golden", std::move(*golden));
  }
  if (!s.text.empty()) {
    auto text = TextWindows(m.source.dir, s.text, win, m.config.bos_token_id);
    if (!text.ok()) return text.status();
    sets.emplace_back("heldout", std::move(*text));
  }
  return sets;
}

// Every set's tally (out["sets"][name]) and their sum (out["all"]).
absl::Status CompareSets(const AccuracyBenchSettings& s, Model& m, Model& r,
                         const SequenceSets& sets, json& out) {
  Tally all;
  for (const auto& [name, seqs] : sets) {
    Tally t;
    for (const auto& ids : seqs) {
      if (ids.size() < 2) continue;
      if (absl::Status st = Compare(m, r, ids, s.last_only, t); !st.ok()) return st;
    }
    out["sets"][name] = t.Json();
    all.Add(t);
  }
  out["all"] = all.Json();
  return absl::OkStatus();
}

}  // namespace

int RunAccuracyBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench accuracy";
  auto parsed = ParseSettings(cmd, args, AddAccuracyBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const AccuracyBenchSettings& s = *parsed.settings;
  ThreadPool pool(static_cast<int>(s.threads));  // declared first: the models compute on it
  const auto layers = static_cast<int32_t>(s.layers);
  auto m = LoadModel(s.model, s.quantization, s.kv_cache_dtype, layers, pool);
  if (!m.ok()) return Fail(cmd, m.status());
  auto r = LoadModel(s.reference, "none", "auto", layers, pool);
  if (!r.ok()) return Fail(cmd, r.status());
  if (m->config.vocab_size != r->config.vocab_size) {
    return Fail(cmd, absl::InvalidArgumentError("--model and --reference differ in vocabulary"));
  }
  auto sets = Sequences(s, *m, *r);
  if (!sets.ok()) return Fail(cmd, sets.status());
  json out = {{"benchmark", "accuracy"},
              {"backend", "cpu-fp32"},
              {"model", s.model},
              {"model_scheme", m->scheme.Describe()},
              {"reference", s.reference},
              {"reference_scheme", r->scheme.Describe()},
              {"layers", m->config.num_layers}};
  if (absl::Status st = CompareSets(s, *m, *r, *sets, out); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
