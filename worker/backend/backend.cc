#include "worker/backend/backend.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/frontend/synthetic_tokenizer.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/dtype.h"
#include "worker/model/gguf_model.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/cpu_runner.h"
#ifdef LLM_HAVE_CUDA
#include "worker/runner/cuda/runner_factory.h"
#endif

namespace llm::backend {

namespace {

// The weights of `source` in the Llama layout (checkpoint_layout.h): a checkpoint directory's
// files mapped, a GGUF file's tensors dequantised to `gguf_dtype` (on `pool`, with progress lines),
// or a synthetic model generated in bf16.
absl::StatusOr<std::unique_ptr<model::TensorStore>> OpenWeights(const model::ModelSource& source,
                                                                const model::ModelConfig& config,
                                                                model::DType gguf_dtype,
                                                                ThreadPool* pool) {
  if (source.synthetic()) {
    return model::MakeSyntheticStore(config, source.seed, model::DType::kBF16, pool);
  }
  std::unique_ptr<model::TensorStore> store;
  if (source.gguf()) {
    LLM_ASSIGN_OR_RETURN(auto file, model::GgufFile::Open(source.dir));
    LLM_ASSIGN_OR_RETURN(store, model::LoadGgufTensors(*file, config, {gguf_dtype, pool, true}));
  } else {
    LLM_ASSIGN_OR_RETURN(store, model::TensorStore::Open(source.dir));
  }
  return model::ToLlamaLayout(config, std::move(store));
}

absl::StatusOr<std::unique_ptr<frontend::Tokenizer>> LoadTokenizer(
    const BackendOptions& options, const model::ModelSource& source,
    const model::ModelConfig& config) {
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  if (!options.tokenizer.empty()) {
    LLM_ASSIGN_OR_RETURN(tokenizer, frontend::Tokenizer::Load(options.tokenizer));
  } else if (source.synthetic()) {
    LLM_ASSIGN_OR_RETURN(
        tokenizer,
        frontend::SyntheticTokenizer(config.vocab_size, config.bos_token_id, config.eos_token_ids));
  } else {
    LLM_ASSIGN_OR_RETURN(tokenizer, frontend::Tokenizer::Load(source.dir));
  }
  if (tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: its vocabulary (", tokenizer->vocab_size(),
                     " ids) is larger than the model's (", config.vocab_size, ")"));
  }
  return tokenizer;
}

// The draft model of engine.speculative.method: draft, checked against the target: the same
// vocabulary (it proposes the target's token ids) and at least the served context. Its weights
// in `dtype` (none for a synthetic draft when `synthetic_store` is false: the CUDA runner makes
// them on the device from its seed).
struct DraftWeights {
  model::ModelSource source;
  model::ModelConfig config;
  std::unique_ptr<model::TensorStore> store;
};

absl::StatusOr<DraftWeights> LoadDraftWeights(const BackendOptions& options,
                                              const model::ModelConfig& target, model::DType dtype,
                                              bool synthetic_store, ThreadPool* pool) {
  const std::string field = "engine.speculative.draft_model.path";
  auto fail = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(field, ": ", st.message()));
  };
  DraftWeights d;
  auto source = model::ParseModelSource(options.speculative.draft_model);
  if (!source.ok()) return fail(source.status());
  d.source = *source;
  auto config = model::LoadSourceConfig(d.source);
  if (!config.ok()) return fail(config.status());
  d.config = *config;
  if (d.config.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", options.speculative.draft_model, "' has a vocabulary of ",
                     d.config.vocab_size, " tokens, the model ", target.vocab_size,
                     "; a draft model must share the model's tokenizer"));
  }
  const int32_t context =
      options.max_context > 0 ? options.max_context : target.max_position_embeddings;
  if (d.config.max_position_embeddings < context) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", options.speculative.draft_model, "' has ", d.config.max_position_embeddings,
        " positions, fewer than the served context of ", context,
        "; set engine.max_context to at most that"));
  }
  model::SetServedContext(d.config, context);
  if (!d.source.synthetic() && !d.source.gguf()) {
    auto scheme = model::LoadQuantScheme(d.source.dir);
    if (!scheme.ok()) return fail(scheme.status());
    if (scheme->quantized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", options.speculative.draft_model,
          "' is an FP8 checkpoint; a draft model runs 16-bit weights (give a bf16 one)"));
    }
  }
  if (d.source.synthetic() && !synthetic_store) return d;
  auto store = OpenWeights(d.source, d.config, dtype, pool);
  if (!store.ok()) return fail(store.status());
  d.store = *std::move(store);
  return d;
}

absl::Status CreateCpuRunner(const BackendOptions& options, const model::QuantScheme& checkpoint,
                             Backend& b) {
  b.pool = std::make_unique<ThreadPool>(options.cpu_threads);
  LLM_ASSIGN_OR_RETURN(auto store,
                       OpenWeights(b.source, b.config, model::DType::kF32, b.pool.get()));
  LLM_ASSIGN_OR_RETURN(b.kv, model::ResolveKvCache(options.kv_cache_dtype, checkpoint, b.config,
                                                   b.source.synthetic() ? nullptr : store.get()));
  LLM_ASSIGN_OR_RETURN(auto model,
                       runner::CpuModel::FromStore(b.config, *store, b.pool.get(), b.quant, b.kv));
  const model::ModelConfig& c = b.config;
  runner::CpuRunnerOptions ro;
  ro.sizes = options.sizes;
  const int64_t block_bytes =
      int64_t{c.num_layers} * 2 * c.num_kv_heads * c.head_dim * ro.sizes.block_tokens * 4;
  if (ro.sizes.kv_blocks <= 0) {
    ro.sizes.kv_blocks = static_cast<int32_t>((int64_t{options.kv_cache_mb} << 20) / block_bytes);
  }
  if (ro.sizes.kv_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("engine.kv_cache_mb: ", options.kv_cache_mb,
                                                   " MiB is too small for one KV block (",
                                                   block_bytes, " bytes)"));
  }
  ro.valid_vocab_size = b.tokenizer->vocab_size();
  ro.extra_step_seconds = options.extra_step_seconds;
  ro.max_context = options.max_context;
  ro.speculative = options.speculative;
  std::unique_ptr<runner::CpuModel> draft;
  if (options.speculative.method == engine::SpeculativeMethod::kDraft) {
    LLM_ASSIGN_OR_RETURN(DraftWeights d, LoadDraftWeights(options, b.config, model::DType::kF32,
                                                          /*synthetic_store=*/true, b.pool.get()));
    auto model = runner::CpuModel::FromStore(d.config, *d.store, b.pool.get());
    if (!model.ok()) {
      return absl::Status(
          model.status().code(),
          absl::StrCat("engine.speculative.draft_model.path: ", model.status().message()));
    }
    draft = *std::move(model);
  }
  b.runner = std::make_unique<runner::CpuRunner>(std::move(model), ro, std::move(draft));
  b.backend = "cpu";
  return absl::OkStatus();
}

#ifdef LLM_HAVE_CUDA
absl::Status CreateCudaRunner(const BackendOptions& options, const model::QuantScheme& checkpoint,
                              Backend& b) {
  std::unique_ptr<model::TensorStore> store;  // none for a synthetic model: generated on the device
  if (!b.source.synthetic()) {
    ThreadPool pool(0);
    LLM_ASSIGN_OR_RETURN(store, OpenWeights(b.source, b.config, model::DType::kBF16, &pool));
  }
  LLM_ASSIGN_OR_RETURN(
      b.kv, model::ResolveKvCache(options.kv_cache_dtype, checkpoint, b.config, store.get()));
  runner::cuda::CudaRunnerOptions ro;
  ro.kv = b.kv;
  ro.device = options.device;
  ro.sizes = options.sizes;
  ro.kv_memory_fraction = options.kv_memory_fraction;
  if (options.max_prefill_tokens > 0) ro.max_prefill_tokens = options.max_prefill_tokens;
  if (options.max_prefill_tokens_alone > 0) {
    ro.max_prefill_tokens_alone = options.max_prefill_tokens_alone;
  }
  ro.max_context = options.max_context;
  ro.valid_vocab_size = b.tokenizer->vocab_size();
  ro.switches = options.cuda;
  ro.speculative = options.speculative;
  std::optional<runner::cuda::CudaDraftSource> draft_source;
  DraftWeights draft;
  if (options.speculative.method == engine::SpeculativeMethod::kDraft) {
    ThreadPool pool(0);
    LLM_ASSIGN_OR_RETURN(draft, LoadDraftWeights(options, b.config, model::DType::kBF16,
                                                 /*synthetic_store=*/false, &pool));
    draft_source =
        runner::cuda::CudaDraftSource{draft.config, draft.store.get(), draft.source.seed};
  }
  LLM_ASSIGN_OR_RETURN(
      b.runner, runner::cuda::CreateCudaRunner(b.config, store.get(), b.quant, b.source.seed, ro,
                                               draft_source ? &*draft_source : nullptr));
  b.backend = "cuda";
  return absl::OkStatus();
}
#endif

}  // namespace

bool CudaBuilt() {
#ifdef LLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<Backend> CreateBackend(const BackendOptions& options) {
  Backend b;
  LLM_ASSIGN_OR_RETURN(b.source, model::ParseModelSource(options.model));
  LLM_ASSIGN_OR_RETURN(b.config, model::LoadSourceConfig(b.source));
  LLM_ASSIGN_OR_RETURN(b.tokenizer, LoadTokenizer(options, b.source, b.config));
  model::QuantScheme checkpoint;
  if (!b.source.synthetic() && !b.source.gguf()) {  // a GGUF file is dequantised at load
    LLM_ASSIGN_OR_RETURN(checkpoint, model::LoadQuantScheme(b.source.dir));
  }
  LLM_ASSIGN_OR_RETURN(b.quant, model::ApplyQuantizationOption(options.quantization, checkpoint));
  if (options.max_context > b.config.max_position_embeddings) {
    // Positions past it were never trained (RoPE): answers there would be silently bad.
    return absl::InvalidArgumentError(
        absl::StrCat("engine.max_context: ", options.max_context, " is more than the model's ",
                     b.config.max_position_embeddings, " positions (max_position_embeddings of ",
                     options.model, "); set it to at most that, or 0 for the model's own"));
  }
  model::SetServedContext(
      b.config, options.max_context > 0 ? options.max_context : b.config.max_position_embeddings);
  if (absl::Status st = options.speculative.Validate(); !st.ok()) return st;
  std::string kind = options.backend;
  if (kind == "auto") {
    kind = "cpu";
#ifdef LLM_HAVE_CUDA
    if (runner::cuda::CudaDeviceCount() > 0) kind = "cuda";
#endif
  }
  if (kind == "cpu") {
    LLM_RETURN_IF_ERROR(CreateCpuRunner(options, checkpoint, b));
  } else if (kind == "cuda") {
#ifdef LLM_HAVE_CUDA
    LLM_RETURN_IF_ERROR(CreateCudaRunner(options, checkpoint, b));
#else
    return absl::FailedPreconditionError(
        "engine.backend: cuda, but this build has no CUDA backend (LLM_ENABLE_CUDA=OFF)");
#endif
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.backend: '", options.backend, "' is not one of auto, cpu, cuda"));
  }
  return b;
}

}  // namespace llm::backend
