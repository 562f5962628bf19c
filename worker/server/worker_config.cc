#include "worker/server/worker_config.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/tls/tls_files.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/model/synthetic.h"
#include "worker/tools/reasoning_parser.h"
#include "worker/tools/tool_format.h"

namespace llm::server {

namespace {

// The keys of runner::CudaSwitchSpecs, each with its switch's default.
void AddCudaSwitches(config::ConfigSchema& s) {
  const runner::CudaSwitches defaults;
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    if (spec.flag != nullptr) {
      s.Bool(spec.key, defaults.*spec.flag, spec.help);
    } else if (spec.number != nullptr) {
      s.Int(spec.key, defaults.*spec.number, spec.min, spec.max, spec.help);
    } else {
      s.String(spec.key, runner::TristateName(defaults.*spec.tristate), spec.help);
    }
  }
}

absl::Status LoadCudaSwitches(const config::ConfigValues& v, runner::CudaSwitches& out) {
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    if (spec.flag != nullptr) {
      out.*spec.flag = v.Bool(spec.key);
    } else if (spec.number != nullptr) {
      out.*spec.number = static_cast<int32_t>(v.Int(spec.key));
    } else {
      auto value = runner::ParseTristate(v.String(spec.key));
      if (!value.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(spec.key, ": ", value.status().message()));
      }
      out.*spec.tristate = *value;
    }
  }
  return absl::OkStatus();
}

// model.*: the checkpoint, its tokenizer, names and chat handling.
void AddModelKeys(config::ConfigSchema& s) {
  s.RequiredString(
       "model.path",
       "Hugging Face checkpoint directory, a GGUF file, or random:<shape>[:<seed>] for synthetic "
       "weights of a real shape (tiny, small, llama-3.2-1b, llama-3-8b, llama-3.1-8b, qwen2-0.5b, "
       "qwen3-0.6b, qwen3-8b, mistral-7b)")
      .String("model.tokenizer", "",
              "tokenizer.json (or its directory, or a GGUF file) to use instead of the model's; "
              "random models "
              "default to a byte-level one of the model's vocabulary size")
      .String("model.name", "",
              "name reported to clients and routers (default: the folder's name, or a GGUF "
              "file's without .gguf)")
      .String("model.served_names", "",
              "more names the model answers to (comma-separated aliases), reported to routers")
      .String("model.chat_template", "",
              "Jinja chat template file for chat requests (default: the tokenizer's: "
              "chat_template.jinja or tokenizer_config.json chat_template)")
      .String("model.tool_call_parser", "auto",
              "format of tool calls in chat answers: auto (from the chat template's markers), "
              "llama3_json, hermes, mistral, granite, json (a JSON array of calls) or none "
              "(tool_choice auto "
              "refused; required and named calls are written as json)")
      .String("model.reasoning_parser", "auto",
              "where chat answers carry the model's thinking apart from its text "
              "(reasoning_content): auto (think where the chat template writes <think> and "
              "</think>), think, or none (left in the text)");
}

// server.*: the addresses and the gRPC server's bounds.
void AddServerKeys(config::ConfigSchema& s) {
  s.String("server.listen", "0.0.0.0:50051", "gRPC address (host:port; port 0 picks one)")
      .String("server.metrics_listen", "0.0.0.0:9090",
              "HTTP address of /metrics (host:port; empty disables)")
      .String("server.health_listen", "",
              "plaintext gRPC address serving only grpc.health.v1 (service \"\": ready; "
              "\"liveness\": the engine watchdog), for Kubernetes probes when server.listen "
              "needs TLS; empty disables")
      .String("server.worker_id", "", "id in load reports (default: hostname:port)")
      .Double("server.drain_grace_seconds", 30, 0, 86400,
              "on SIGTERM, how long in-flight streams may take to finish before exit")
      .Int("server.load_interval_ms", 10, 1, 1000,
           "default lower bound between two load reports to one watcher")
      .Int("server.max_message_bytes", 4 << 20, 1024, 1 << 30,
           "largest gRPC message accepted (bytes)");
}

// engine.*: the backend, the weights' and the cache's formats, the sizes.
void AddEngineKeys(config::ConfigSchema& s) {
  s.String("engine.backend", "auto",
           "auto (cuda when built with CUDA and a GPU is present, else cpu), cpu or cuda")
      .String("engine.quantization", "none",
              "none (the checkpoint's own format: 16/32-bit, or FP8 as its config.json or "
              "hf_quant_config.json declares) or fp8 (a 16/32-bit checkpoint's linear layers "
              "quantised at load to FP8 E4M3 per output channel, activations per token; "
              "docs/cuda.md)")
      .String("engine.kv_cache_dtype", "auto",
              "auto (the checkpoint's: FP8 where its kv_cache_scheme or kv_cache_quant_algo says "
              "so, else bf16), bf16 or fp8 (E4M3 with per-layer K and V scales from the "
              "checkpoint, else 1.0; the CPU backend emulates its rounding: docs/cuda.md)")
      .Int("engine.device", 0, 0, 1024, "CUDA device index")
      .Int("engine.max_slots", 32, 1, 4096, "requests computed together (slot table size)")
      .Int("engine.max_context", 0, 0, 1 << 24,
           "positions per sequence (prompt + output), at most the model's "
           "max_position_embeddings; 0: that")
      .Int("engine.kv_blocks", 0, 0, 1 << 24,
           "KV-cache blocks (16 tokens each); 0 sizes the cache from engine.kv_cache_mb (cpu) "
           "or engine.kv_memory_fraction (cuda)")
      .Int("engine.kv_cache_mb", 256, 1, 1 << 20, "cpu: KV-cache memory when engine.kv_blocks is 0")
      .Double("engine.kv_memory_fraction", 0.9, 0.01, 1.0,
              "cuda: share of the device memory left free by the weights and buffers that the "
              "KV cache takes, when engine.kv_blocks is 0");
}

// engine.*: what one step may hold, the prompt budgets and the KV policy.
void AddSchedulerKeys(config::ConfigSchema& s) {
  s.Int("engine.max_batch_tokens", 0, 0, 1 << 20,
        "tokens per step (decode + prefill); 0: no cap beyond engine.max_slots and the two "
        "prompt budgets below")
      .Int("engine.max_prefill_tokens", 0, 0, 1 << 20,
           "prompt tokens per step, so decoding requests never stall behind a long prompt; 0: "
           "the backend's default (cpu 128, cuda 2048: docs/engine.md)")
      .Int("engine.max_prefill_tokens_alone", 0, 0, 1 << 20,
           "prompt tokens of a step in which no request decodes, when above "
           "engine.max_prefill_tokens (no stream to stall, so only time to first token counts); "
           "0: the backend's default (cpu: engine.max_prefill_tokens, cuda 4096: docs/engine.md)")
      .Double("engine.max_decode_slowdown", 2.0, 0, 1000,
              "while requests decode, a long prompt's chunks (more than "
              "engine.max_prefill_tokens) are spaced out so that their time per output token "
              "stays within this many times a decode-only step's, as measured; the prompt's time "
              "to first token grows instead (docs/engine.md); 0: off, more than 1 otherwise")
      .Bool("engine.prefix_cache", true,
            "keep the KV of finished prompts' full blocks and reuse it for requests that start "
            "with the same tokens (evicted least recently used when room is needed)")
      .Bool("engine.kv_on_demand", true,
            "take KV blocks as sequences grow and preempt the newest request (it resumes later "
            "with nothing lost) when the cache runs out; false: reserve prompt + max_tokens at "
            "admission");
}

void AddSpeculativeKeys(config::ConfigSchema& s) {
  s.String("engine.speculative.method", "off",
           "speculative decoding: off, ngram (prompt lookup in the request's own tokens) or "
           "draft (a smaller model sharing the tokenizer, on either backend)")
      .Int("engine.speculative.num_tokens", 4, 1, 16, "proposals per decode step at most")
      .Int("engine.speculative.ngram_min", 2, 1, 64, "ngram: shortest suffix looked up")
      .Int("engine.speculative.ngram_max", 4, 1, 64, "ngram: longest suffix looked up (first)")
      .String("engine.speculative.draft_model.path", "",
              "draft: the draft model's checkpoint directory or random:<shape>")
      .Bool("engine.speculative.adaptive", true,
            "choose the proposals per step from measured throughput, down to none when "
            "verifying costs more than it saves (false: always num_tokens)");
}

// engine.*: the worker's queue and threads, the watchdog, the test hook.
void AddWorkerKeys(config::ConfigSchema& s) {
  s.Int("engine.max_queued_requests", 1024, 0, 1 << 20,
        "requests that may wait beyond the slots; more get RESOURCE_EXHAUSTED")
      .Int("engine.tokenizer_threads", 2, 1, 256, "threads tokenizing prompts")
      .Int("engine.output_threads", 1, 1, 256, "threads detokenizing and matching stop strings")
      .Int("engine.cpu_threads", 0, 0, 1024, "CPU backend threads (0: all cores)")
      .Double("engine.watchdog_seconds", 60, 1, 86400,
              "an engine iteration (about one step) running longer than this marks the worker "
              "not live (health service \"liveness\"): a hung step, not a slow request")
      .Double("engine.extra_step_ms", 0, 0, 60000,
              "added to every step: models a slow worker in tests and benchmarks");
}

void AddTlsAndLimitKeys(config::ConfigSchema& s) {
  s.String("tls.cert_file", "",
           "PEM certificate (chain) of server.listen; with tls.key_file turns TLS on")
      .String("tls.key_file", "", "PEM private key of tls.cert_file")
      .String("tls.client_ca_file", "",
              "PEM CA bundle: clients (routers) must present a certificate signed by it "
              "(mutual TLS)")
      .Int("tls.reload_seconds", 10, 1, 86400,
           "how often the TLS files are checked; changed files apply to new connections")
      .Int("limits.default_max_tokens", 0, 0, 1 << 24,
           "max_tokens when a request leaves it 0; 0: the rest of the context (as OpenAI's "
           "chat API; 256 with engine.kv_on_demand off), capped by limits.max_tokens")
      .Int("limits.max_tokens", 0, 0, 1 << 24, "largest max_tokens accepted (0: the context)")
      .Int("limits.max_prompt_tokens", 0, 0, 1 << 24, "largest prompt accepted (0: the context)")
      .Int("limits.max_prompt_bytes", 1 << 20, 1, 1 << 30, "largest text prompt accepted (bytes)")
      .Int("limits.max_stop_strings", 16, 0, 1024, "stop strings per request")
      .Int("limits.max_stop_string_bytes", 256, 1, 1 << 16, "bytes per stop string")
      .Int("limits.max_stop_token_ids", 64, 0, 1 << 16, "stop token ids per request")
      .Int("limits.max_logprobs", 20, 0, 1024, "top logprobs per token");
}

}  // namespace

config::ConfigSchema WorkerConfigSchema() {
  config::ConfigSchema s;
  AddModelKeys(s);
  AddServerKeys(s);
  AddEngineKeys(s);
  AddCudaSwitches(s);
  AddSchedulerKeys(s);
  AddSpeculativeKeys(s);
  AddWorkerKeys(s);
  AddTlsAndLimitKeys(s);
  return s;
}

namespace {

// model.*: the checkpoint, the names the model answers to, the chat handling.
absl::Status LoadModelKeys(const config::ConfigValues& v, WorkerConfig& c) {
  backend::BackendOptions& b = c.backend;
  b.model = v.String("model.path");
  b.tokenizer = v.String("model.tokenizer");
  c.chat_template = v.String("model.chat_template");
  c.tool_call_parser = v.String("model.tool_call_parser");
  if (auto f = tools::ResolveToolFormat(c.tool_call_parser, ""); !f.ok()) return f.status();
  c.reasoning_parser = v.String("model.reasoning_parser");
  if (auto f = tools::ResolveReasoningFormat(c.reasoning_parser, ""); !f.ok()) return f.status();
  auto source = model::ParseModelSource(b.model);
  if (!source.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model.path: ", source.status().message()));
  }
  c.model_name = v.String("model.name");
  if (c.model_name.empty()) c.model_name = source->name();
  for (absl::string_view name :
       absl::StrSplit(v.String("model.served_names"), ',', absl::SkipWhitespace())) {
    const std::string alias(absl::StripAsciiWhitespace(name));
    if (alias != c.model_name &&
        std::find(c.served_names.begin(), c.served_names.end(), alias) == c.served_names.end()) {
      c.served_names.push_back(alias);
    }
  }
  return absl::OkStatus();
}

// engine.speculative.*
absl::Status LoadSpeculativeKeys(const config::ConfigValues& v, engine::SpeculativeConfig& spec) {
  LLM_ASSIGN_OR_RETURN(spec.method,
                       engine::ParseSpeculativeMethod(v.String("engine.speculative.method")));
  if (spec.method == engine::SpeculativeMethod::kOracle) {
    return absl::InvalidArgumentError(
        "engine.speculative.method: 'oracle' is a benchmark-only proposer (llm-bench "
        "speculative --method oracle); a worker serves off, ngram or draft");
  }
  spec.num_tokens = static_cast<int32_t>(v.Int("engine.speculative.num_tokens"));
  spec.ngram_min = static_cast<int32_t>(v.Int("engine.speculative.ngram_min"));
  spec.ngram_max = static_cast<int32_t>(v.Int("engine.speculative.ngram_max"));
  spec.draft_model = v.String("engine.speculative.draft_model.path");
  spec.adaptive = v.Bool("engine.speculative.adaptive");
  return spec.Validate();
}

// engine.*: the backend's options (the prompt budgets are the scheduler's, LoadWorkerKeys).
absl::Status LoadEngineKeys(const config::ConfigValues& v, backend::BackendOptions& b) {
  b.backend = v.String("engine.backend");
  if (b.backend != "auto" && b.backend != "cpu" && b.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.backend: '", b.backend, "' is not one of auto, cpu, cuda"));
  }
  b.quantization = v.String("engine.quantization");
  if (b.quantization != "none" && b.quantization != "fp8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.quantization: '", b.quantization, "' is not one of ", model::kQuantizationOptions));
  }
  b.kv_cache_dtype = v.String("engine.kv_cache_dtype");
  if (b.kv_cache_dtype != "auto" && b.kv_cache_dtype != "bf16" && b.kv_cache_dtype != "fp8") {
    return absl::InvalidArgumentError(absl::StrCat("engine.kv_cache_dtype: '", b.kv_cache_dtype,
                                                   "' is not one of ", model::kKvCacheDtypes));
  }
  b.device = static_cast<int>(v.Int("engine.device"));
  b.sizes.max_slots = static_cast<int32_t>(v.Int("engine.max_slots"));
  b.max_context = static_cast<int32_t>(v.Int("engine.max_context"));
  b.sizes.kv_blocks = static_cast<int32_t>(v.Int("engine.kv_blocks"));
  b.kv_cache_mb = static_cast<int32_t>(v.Int("engine.kv_cache_mb"));
  b.kv_memory_fraction = v.Double("engine.kv_memory_fraction");
  if (absl::Status st = LoadCudaSwitches(v, b.cuda); !st.ok()) return st;
  b.cpu_threads = static_cast<int>(v.Int("engine.cpu_threads"));
  if (absl::Status st = LoadSpeculativeKeys(v, b.speculative); !st.ok()) return st;
  b.extra_step_seconds = v.Double("engine.extra_step_ms") / 1e3;
  return absl::OkStatus();
}

// server.* and tls.*: the addresses (checked), TLS (its files checked), the server's bounds.
absl::Status LoadServerKeys(const config::ConfigValues& v, WorkerConfig& c) {
  c.listen = v.String("server.listen");
  c.metrics_listen = v.String("server.metrics_listen");
  c.health_listen = v.String("server.health_listen");
  for (const auto& [key, value, may_be_empty] :
       {std::tuple<const char*, const std::string&, bool>{"server.listen", c.listen, false},
        {"server.metrics_listen", c.metrics_listen, true},
        {"server.health_listen", c.health_listen, true}}) {
    if (absl::Status st = config::CheckHostPort(key, value, may_be_empty, 0); !st.ok()) return st;
  }
  c.watchdog_seconds = v.Double("engine.watchdog_seconds");
  c.tls.cert_file = v.String("tls.cert_file");
  c.tls.key_file = v.String("tls.key_file");
  c.tls.ca_file = v.String("tls.client_ca_file");
  c.tls.reload_seconds = static_cast<int>(v.Int("tls.reload_seconds"));
  if (absl::Status st = tls::CheckServerFiles(c.tls, "tls"); !st.ok()) return st;
  c.worker_id = v.String("server.worker_id");
  c.drain_grace_seconds = v.Double("server.drain_grace_seconds");
  c.load_interval_ms = static_cast<int>(v.Int("server.load_interval_ms"));
  c.max_message_bytes = static_cast<int>(v.Int("server.max_message_bytes"));
  return absl::OkStatus();
}

// limits.*
void LoadLimitKeys(const config::ConfigValues& v, loop::RequestLimits& l) {
  l.default_max_tokens = static_cast<int32_t>(v.Int("limits.default_max_tokens"));
  l.max_tokens_cap = static_cast<int32_t>(v.Int("limits.max_tokens"));
  l.max_prompt_tokens = static_cast<int32_t>(v.Int("limits.max_prompt_tokens"));
  l.max_prompt_bytes = static_cast<size_t>(v.Int("limits.max_prompt_bytes"));
  l.max_stop_strings = static_cast<int32_t>(v.Int("limits.max_stop_strings"));
  l.max_stop_string_bytes = static_cast<size_t>(v.Int("limits.max_stop_string_bytes"));
  l.max_stop_token_ids = static_cast<int32_t>(v.Int("limits.max_stop_token_ids"));
  l.max_logprobs = static_cast<int32_t>(v.Int("limits.max_logprobs"));
}

// The worker's options: the scheduler (which shares the backend's prompt budgets and
// speculation), the queue and threads, the names, the limits.
void LoadWorkerKeys(const config::ConfigValues& v, WorkerConfig& c) {
  backend::BackendOptions& b = c.backend;
  loop::WorkerOptions& w = c.worker;
  w.scheduler.max_batch_tokens = static_cast<int32_t>(v.Int("engine.max_batch_tokens"));
  w.scheduler.max_prefill_tokens = static_cast<int32_t>(v.Int("engine.max_prefill_tokens"));
  w.scheduler.max_decode_slowdown = v.Double("engine.max_decode_slowdown");
  w.scheduler.prefix_cache = v.Bool("engine.prefix_cache");
  w.scheduler.kv_on_demand = v.Bool("engine.kv_on_demand");
  w.scheduler.speculative = b.speculative;
  // Cached KV belongs to one model: its name (and the checkpoint's path) salt the block hashes.
  w.scheduler.cache_salt = std::hash<std::string>{}(c.model_name + "\n" + b.model);
  w.scheduler.max_prefill_tokens_alone =
      static_cast<int32_t>(v.Int("engine.max_prefill_tokens_alone"));
  b.max_prefill_tokens = w.scheduler.max_prefill_tokens;
  b.max_prefill_tokens_alone = w.scheduler.max_prefill_tokens_alone;
  w.max_queued_requests = static_cast<int32_t>(v.Int("engine.max_queued_requests"));
  w.tokenizer_threads = static_cast<int>(v.Int("engine.tokenizer_threads"));
  w.output_threads = static_cast<int>(v.Int("engine.output_threads"));
  w.model_name = c.model_name;
  w.served_names = c.served_names;
  LoadLimitKeys(v, w.limits);
}

// What holds across sections.
absl::Status CheckAcrossKeys(const WorkerConfig& c) {
  const engine::SchedulerConfig& sc = c.worker.scheduler;
  if (sc.max_batch_tokens > 0 && sc.max_batch_tokens < c.backend.sizes.max_slots + 1) {
    return absl::InvalidArgumentError(
        "engine.max_batch_tokens: must be at least engine.max_slots + 1, so a step can hold "
        "every slot's decode token and some prefill");
  }
  if (c.worker.limits.max_prompt_bytes + 64 * 1024 > static_cast<size_t>(c.max_message_bytes)) {
    return absl::InvalidArgumentError(
        "limits.max_prompt_bytes: must be below server.max_message_bytes by at least 64 KiB, "
        "so an oversized prompt gets a clear INVALID_ARGUMENT");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerConfig> LoadWorkerConfig(const std::vector<std::string>& args) {
  auto v = WorkerConfigSchema().Load(args);
  if (!v.ok()) return v.status();
  WorkerConfig c;
  LLM_RETURN_IF_ERROR(LoadModelKeys(*v, c));
  LLM_RETURN_IF_ERROR(LoadEngineKeys(*v, c.backend));
  LLM_RETURN_IF_ERROR(LoadServerKeys(*v, c));
  LoadWorkerKeys(*v, c);
  LLM_RETURN_IF_ERROR(CheckAcrossKeys(c));
  return c;
}

}  // namespace llm::server
