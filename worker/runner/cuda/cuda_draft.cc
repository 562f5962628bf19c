#include "worker/runner/cuda/cuda_draft.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/speculative/draft_step.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {
namespace {

constexpr char kField[] = "engine.speculative.draft_model.path";

// The draft's matrix shapes: its rounds' rows (a bucket, two rows a slot in round 0) and its
// prompt passes' (multiples of kPrefillRowAlign); its head runs on the rounds' rows.
void DraftRowCounts(const StepSizes& sizes, const std::vector<int32_t>& buckets,
                    std::vector<int32_t>& rows, std::vector<int32_t>& sample_rows) {
  for (const int32_t b : buckets) {
    for (const int32_t r : {b, 2 * b}) {
      if (r <= sizes.max_decode_rows) sample_rows.push_back(r);
    }
  }
  rows = sample_rows;
  for (int32_t r = kPrefillRowAlign; r <= sizes.max_rows; r += kPrefillRowAlign) rows.push_back(r);
  for (std::vector<int32_t>* v : {&rows, &sample_rows}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDraft>> CudaDraft::Create(
    const CudaDraftSource& source, const CudaModelOptions& options,
    const model::ModelConfig& target_config, const StepSizes& target, const StepBuffers& shared,
    const std::vector<int32_t>& buckets, cudaStream_t stream) {
  const model::ModelConfig& c = source.config;
  if (!kernels::AttentionSupported(c.head_dim, c.num_heads, c.num_kv_heads)) {
    return absl::UnimplementedError(absl::StrCat(
        kField, ": the draft's head_dim ", c.head_dim, " with ", c.num_heads, " query and ",
        c.num_kv_heads, " key/value heads is not supported by the CUDA runner"));
  }
  if (c.vocab_size != target_config.vocab_size) {  // its proposals are the target's ids
    return absl::InvalidArgumentError(absl::StrCat(kField, ": the draft's vocabulary (",
                                                   c.vocab_size, ") is not the target's (",
                                                   target_config.vocab_size, ")"));
  }
  std::unique_ptr<CudaDraft> d(new CudaDraft());
  CudaModelOptions o = options;
  o.oracle = false;
  o.proposals_made_before = false;
  // The prompt pass reuses the target's prefill attention tiles, which are laid out for the
  // target's query heads per key/value head: with another ratio the draft attends untiled.
  const model::ModelConfig& t = target_config;
  if (c.num_heads / c.num_kv_heads != t.num_heads / t.num_kv_heads) {
    o.switches.tiled_prefill = false;
  }
  auto model = CudaModel::Load(c, source.store, model::QuantScheme{}, source.seed, o, stream);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(kField, ": ", model.status().message()));
  }
  d->model_ = *std::move(model);
  // Round 0 has two rows a decoding slot: planned as a verify group of 2.
  d->sizes_ = PlanStepSizes(c, target.engine, target.max_context, target.max_prefill_tokens,
                            target.sm_count, target.batch_invariant, /*fp8=*/false,
                            /*spec_group=*/2);
  // A prompt pass has the target's prompt rows, which sit beside up to the target's decode rows
  // (more than the draft's own): rounded up, they reach the target's max_rows.
  d->sizes_.max_rows = std::max(d->sizes_.max_rows, target.max_rows);
  d->sizes_.forward_only = true;
  LLM_ASSIGN_OR_RETURN(d->buffers_, AllocateStepBuffers(c, d->sizes_, stream));
  // The target's request state (the draft's own slot table is a small unused remainder).
  d->buffers_.slots = shared.slots;
  d->buffers_.block_tables = shared.block_tables;
  d->buffers_.decode_list = shared.decode_list;
  d->buffers_.upload = shared.upload;
  std::vector<int32_t> rows, sample_rows;
  DraftRowCounts(d->sizes_, buckets, rows, sample_rows);
  LLM_RETURN_IF_ERROR(d->model_->PrepareProducts(d->sizes_, d->buffers_, rows, sample_rows));
  return d;
}

absl::Status CudaDraft::AllocateCache(int32_t block_tokens, int32_t blocks) {
  auto kv = AllocateKvCache(model_->config(), model::KvCacheSpec{}, block_tokens, blocks, 1.0,
                            blocks, model_->weights().bytes());
  if (!kv.ok()) {
    return absl::Status(kv.status().code(),
                        absl::StrCat(kField, ": the draft's KV cache: ", kv.status().message()));
  }
  // Zeroed by AllocateKvCache: a position the draft never wrote is finite (costs acceptance,
  // not a NaN).
  kv_ = *std::move(kv);
  if (kv_.blocks != blocks) {
    return absl::ResourceExhaustedError(absl::StrCat(kField, ": the draft's KV cache holds ",
                                                     kv_.blocks, " blocks, not the ", blocks,
                                                     " of the model's"));
  }
  sizes_.engine.kv_blocks = blocks;
  return absl::OkStatus();
}

ForwardShape CudaDraft::PromptShape(const ForwardShape& target) {
  ForwardShape s = target;
  // Rounded up to a prepared shape (padding rows after the prompt's).
  s.rows = (target.prefill_rows + kPrefillRowAlign - 1) / kPrefillRowAlign * kPrefillRowAlign;
  s.decode_rows = 0;
  s.sample_rows = 0;  // no head: the last layer stops after its K/V write
  s.identity_sampling = false;
  s.argmax_only = false;
  s.defer_sampling = false;
  s.mask_index = nullptr;
  s.masks = nullptr;
  s.proposals_back = nullptr;
  s.group = 1;
  s.draft_round = kernels::kDraftPromptPass;
  return s;
}

ForwardShape CudaDraft::RoundShape(const ForwardShape& target, int32_t round) {
  ForwardShape s;
  const int32_t bucket = target.decode_rows / target.group;
  s.rows = s.decode_rows = s.sample_rows = bucket * kernels::DraftRowsPerSlot(round);
  s.identity_sampling = true;
  s.decode_draft = target.decode_draft;
  s.decode_limit = target.decode_limit;
  s.draft_round = round;
  return s;
}

ForwardShape CudaDraft::CatchUpShape(const ForwardShape& target) {
  ForwardShape s;
  s.rows = s.decode_rows = target.decode_rows * kernels::DraftRowsPerSlot(kernels::kDraftCatchUp);
  s.sample_rows = 0;  // no head: the last layer stops after K/V
  s.draft_round = kernels::kDraftCatchUp;
  return s;
}

absl::Status CudaDraft::Enqueue(const ForwardShape& target, cudaStream_t stream) {
  if (target.prefill_rows > 0) {
    LLM_RETURN_IF_ERROR(model_->Forward(PromptShape(target), sizes_, buffers_, kv_, stream));
  }
  if (target.group == 1) {
    if (target.decode_rows == 0 || !target.draft_catch_up) return absl::OkStatus();
    return model_->Forward(CatchUpShape(target), sizes_, buffers_, kv_, stream);
  }
  for (int32_t round = 0; round + 1 < target.group; ++round) {
    LLM_RETURN_IF_ERROR(model_->Forward(RoundShape(target, round), sizes_, buffers_, kv_, stream));
  }
  return absl::OkStatus();
}

}  // namespace llm::runner::cuda
