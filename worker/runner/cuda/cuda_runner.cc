#include "worker/runner/cuda/cuda_runner.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/device.h"
#include "kernels/sampling/sampling.h"
#include "kernels/speculative/history_write.h"
#include "kernels/step/slot_update.h"
#include "worker/runner/cuda/step_upload.h"

namespace llm::runner::cuda {
namespace {

using engine::SlotOutput;
using engine::StepPlan;
using engine::StepResult;
using kernels::SampleOutput;
using kernels::SlotAdmit;
using kernels::SlotSampling;

// The device of this runner, made current on the calling thread (the engine thread calls
// Launch and Collect; Create may run elsewhere).
absl::Status UseDevice(int device) {
  thread_local int current = -1;
  if (current == device) return absl::OkStatus();
  LLM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  current = device;
  return absl::OkStatus();
}

}  // namespace

CudaRunner::CudaRunner(const model::ModelConfig& config, const CudaRunnerOptions& options)
    : config_(config), options_(options) {}

CudaRunner::~CudaRunner() {
  if (stream_.get() != nullptr) {
    (void)UseDevice(options_.device);
    cudaStreamSynchronize(stream_.get());
  }
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(const model::ModelConfig& config,
                                                               const model::TensorStore* store,
                                                               const model::QuantScheme& quant,
                                                               uint64_t seed,
                                                               const CudaRunnerOptions& options,
                                                               const CudaDraftSource* draft) {
  if (options.sizes.max_slots < 1 || options.sizes.block_tokens < 1 ||
      options.max_prefill_tokens < 1 || options.max_prefill_tokens_alone < 0) {
    return absl::InvalidArgumentError(
        "CUDA runner: max_slots, block_tokens and max_prefill_tokens must be positive, "
        "max_prefill_tokens_alone not negative");
  }
  if (!(options.kv_memory_fraction > 0.0 && options.kv_memory_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.kv_memory_fraction: ", options.kv_memory_fraction, " is outside (0, 1]"));
  }
  if (!kernels::AttentionSupported(config.head_dim, config.num_heads, config.num_kv_heads)) {
    return absl::UnimplementedError(
        absl::StrCat("CUDA runner: head_dim ", config.head_dim, " with ", config.num_heads,
                     " query and ", config.num_kv_heads,
                     " key/value heads is not supported (head_dim 16, 32, 64 or 128; at "
                     "most 8 query heads per key/value head)"));
  }
  if ((options.speculative.method == engine::SpeculativeMethod::kDraft) != (draft != nullptr)) {
    return absl::InvalidArgumentError(
        draft == nullptr ? "engine.speculative.draft_model.path: a draft model is needed with "
                           "engine.speculative.method: draft"
                         : "CUDA runner: a draft model without engine.speculative.method: draft");
  }
  if (absl::Status st = options.speculative.Validate(); !st.ok()) return st;
  const int devices = kernels::DeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(
        devices == 0 ? absl::StrCat("CUDA runner: ", kernels::NoDeviceReason())
                     : absl::StrCat("engine.device: ", options.device, " is not one of the ",
                                    devices, " CUDA devices"));
  }
  std::unique_ptr<CudaRunner> runner(new CudaRunner(config, options));
  LLM_RETURN_IF_ERROR(runner->Init(store, quant, seed, draft));
  return runner;
}

CudaModelOptions CudaRunner::ModelOptions(const model::QuantScheme& quant, bool draft) const {
  CudaModelOptions o;
  o.switches = options_.switches;
  o.switches.pdl =
      options_.switches.pdl.value_or(ProgrammaticLaunchPays(config_, quant.quantized()));
  o.valid_vocab_size = options_.valid_vocab_size;
  o.ngram_min = options_.speculative.ngram_min;
  o.ngram_max = options_.speculative.ngram_max;
  o.oracle = options_.speculative.method == engine::SpeculativeMethod::kOracle;
  o.proposals_made_before = draft;
  return o;
}

void CudaRunner::DescribeRunner(int32_t max_context, int32_t prompt_rows) {
  info_.sizes = options_.sizes;  // kv_blocks settled by AllocateCaches
  info_.vocab_size = config_.vocab_size;
  info_.max_context = max_context;
  info_.max_prefill_tokens = prompt_rows;
  info_.default_prefill_tokens = options_.max_prefill_tokens;
  info_.default_prefill_tokens_alone = std::max(0, options_.max_prefill_tokens_alone);
  info_.max_stop_ids = kernels::kMaxStopIds;
  // Block grants and readmissions (resumed tokens prefilled and counted) are applied by the
  // slot update; not yet run on a GPU, so the switch engine.kv_on_demand can turn it off.
  info_.kv_on_demand = true;
  info_.penalties_from_prefill = true;  // the prompt mask and output counts (step inputs)
  info_.device = kernels::DeviceDescription(options_.device);
  char bus_id[32] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), options_.device) == cudaSuccess) {
    info_.pci_bus_id = bus_id;
  }
  info_.weight_bytes = model_->weights().bytes();
}

absl::Status CudaRunner::PlanSizes(int32_t max_context, int32_t prompt_rows) {
  int sm_count = 0;
  LLM_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, options_.device),
      "device attributes");
  const int32_t spec_group =
      options_.speculative.enabled() ? 1 + options_.speculative.num_tokens : 1;
  sizes_ = PlanStepSizes(config_, options_.sizes, max_context, prompt_rows, sm_count,
                         options_.switches.batch_invariant, model_->weights().fp8, spec_group);
  // Constrained slots that speculate take a mask a verify row.
  if (speculates_constrained()) {
    sizes_.max_masks =
        std::min(sizes_.max_sample_rows, options_.sizes.max_slots * sizes_.spec_group);
  }
  buckets_ = MakeBuckets(options_.sizes.max_slots);
  return absl::OkStatus();
}

absl::Status CudaRunner::PrepareProducts() {
  // The row counts a step can have: decode buckets (times each verify group size), and
  // multiples of the alignments for steps with prompt rows.
  std::vector<int32_t> rows = buckets_;
  for (const int32_t g : SpeculativeGroups(sizes_.spec_group)) {
    for (const int32_t b : buckets_) {
      if (b * g <= sizes_.max_decode_rows) rows.push_back(b * g);
    }
  }
  std::vector<int32_t> sample_rows = rows;
  for (int32_t r = kPrefillRowAlign; r <= sizes_.max_rows; r += kPrefillRowAlign) {
    rows.push_back(r);
  }
  for (int32_t r = kSampleRowAlign; r <= sizes_.max_sample_rows; r += kSampleRowAlign) {
    sample_rows.push_back(r);
  }
  // Each shape once (a bucket times a group may be another bucket): Prepare may tune each.
  for (std::vector<int32_t>* v : {&rows, &sample_rows}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  return model_->PrepareProducts(sizes_, buffers_, rows, sample_rows);
}

absl::Status CudaRunner::AllocateCaches(const CudaDraftSource* draft,
                                        const CudaModelOptions& model_options) {
  const model::ModelConfig& c = config_;
  double kv_fraction = options_.kv_memory_fraction;
  if (draft != nullptr) {
    // The draft's weights and buffers first; then the KV memory is split by bytes per position.
    LLM_ASSIGN_OR_RETURN(draft_, CudaDraft::Create(*draft, model_options, c, sizes_, buffers_,
                                                   buckets_, stream_.get()));
    const auto mine = static_cast<double>(KvBytesPerPosition(c, options_.kv.fp8()));
    kv_fraction *= mine / (mine + static_cast<double>(KvBytesPerPosition(draft_->config(), false)));
    info_.weight_bytes += draft_->weight_bytes();
  }
  LLM_ASSIGN_OR_RETURN(
      kv_,
      AllocateKvCache(c, options_.kv, options_.sizes.block_tokens, options_.sizes.kv_blocks,
                      kv_fraction, int64_t{options_.sizes.max_slots} * sizes_.max_blocks_per_seq,
                      model_->weights().bytes()));
  info_.sizes.kv_blocks = kv_.blocks;
  info_.kv_cache_bytes = kv_.bytes;
  LLM_RETURN_IF_ERROR(ChoosePrefillAttention());
  sizes_.engine.kv_blocks = kv_.blocks;
  if (draft_ != nullptr) {
    LLM_RETURN_IF_ERROR(draft_->AllocateCache(options_.sizes.block_tokens, kv_.blocks));
    info_.kv_cache_bytes += draft_->kv_cache_bytes();
  }
  return absl::OkStatus();
}

void CudaRunner::MakeHostMirrors(bool oracle) {
  const model::ModelConfig& c = config_;
  StepLimits limits;
  limits.sizes = info_.sizes;
  limits.max_blocks_per_seq = sizes_.max_blocks_per_seq;
  limits.max_context = info_.max_context;
  limits.vocab_size = c.vocab_size;
  limits.max_prefill_tokens = info_.max_prefill_tokens;
  limits.attention_group = c.num_heads / c.num_kv_heads;
  limits.spec_group = sizes_.spec_group;
  limits.max_decode_rows = sizes_.max_decode_rows;
  limits.max_history_tokens = sizes_.max_history_tokens;
  limits.oracle = oracle;
  limits.draft = draft_ != nullptr;
  limits.speculate_constrained = speculates_constrained();
  mirror_ = std::make_unique<SlotMirror>(limits, buckets_);
  // Structured output: masks written by up to a quarter of the host's cores (8 at most).
  const int mask_threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 4), 1, 8);
  constraints_ = std::make_unique<SlotConstraints>(options_.sizes.max_slots, c.vocab_size,
                                                   mask_threads, sizes_.max_masks);
  info_.constraints = true;
  info_.speculates_constrained = speculates_constrained();
  info_.draft_lapses = draft_ != nullptr;
}

absl::Status CudaRunner::Init(const model::TensorStore* store, const model::QuantScheme& quant,
                              uint64_t seed, const CudaDraftSource* draft) {
  const model::ModelConfig& c = config_;
  LLM_RETURN_IF_ERROR(UseDevice(options_.device));
  LLM_RETURN_IF_ERROR(stream_.Create());
  if (options_.valid_vocab_size <= 0 || options_.valid_vocab_size > c.vocab_size) {
    options_.valid_vocab_size = c.vocab_size;
  }
  const CudaModelOptions model_options = ModelOptions(quant, draft != nullptr);
  LLM_ASSIGN_OR_RETURN(model_,
                       CudaModel::Load(c, store, quant, seed, model_options, stream_.get()));
  const int32_t max_context = options_.max_context > 0
                                  ? std::min(options_.max_context, c.max_position_embeddings)
                                  : c.max_position_embeddings;
  // A step holds up to the larger of the two prompt budgets (the longer one comes with no
  // decode rows, but the buffers need not rely on it).
  const int32_t prompt_rows =
      std::max(options_.max_prefill_tokens, options_.max_prefill_tokens_alone);
  DescribeRunner(max_context, prompt_rows);
  LLM_RETURN_IF_ERROR(PlanSizes(max_context, prompt_rows));
  LLM_ASSIGN_OR_RETURN(buffers_, AllocateStepBuffers(c, sizes_, stream_.get()));
  LLM_RETURN_IF_ERROR(AllocateStaging());
  LLM_RETURN_IF_ERROR(PrepareProducts());
  LLM_RETURN_IF_ERROR(AllocateCaches(draft, model_options));
  MakeHostMirrors(model_options.oracle);
  LLM_RETURN_IF_ERROR(CaptureGraphs());
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info_.memory_total_bytes = total_bytes;
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::AllocateStaging() {
  const size_t S = options_.sizes.max_slots, R = sizes_.max_rows, SR = sizes_.max_sample_rows;
  for (RingEntry& e : ring_) {
    LLM_RETURN_IF_ERROR(e.upload.Allocate(sizes_.upload_bytes, "step staging"));
    LLM_RETURN_IF_ERROR(e.outputs.Allocate(SR * sizeof(SampleOutput), "step outputs"));
    LLM_RETURN_IF_ERROR(e.start.Create());
    LLM_RETURN_IF_ERROR(e.end.Create());
    LLM_RETURN_IF_ERROR(e.masks.Allocate(sizes_.mask_bytes(), "mask staging"));
    LLM_RETURN_IF_ERROR(e.forward_end.Create());
    LLM_RETURN_IF_ERROR(e.sample_start.Create());
  }
  mask_row_slots_.reserve(SR);
  mask_row_offsets_.reserve(SR);
  if (speculates_constrained()) {
    LLM_RETURN_IF_ERROR(proposals_back_.Allocate(
        S * static_cast<size_t>(sizes_.spec_group) * sizeof(int32_t), "proposals' copy back"));
    LLM_RETURN_IF_ERROR(proposals_ready_.Create());
  }
  // The step layout's arrays, at their largest, so Launch never allocates.
  layout_.admits.reserve(S);
  layout_.settings.reserve(S);
  layout_.grants.reserve(S);
  layout_.blocks.reserve(S * static_cast<size_t>(sizes_.max_blocks_per_seq));
  layout_.row_changes.reserve(4 * S);
  layout_.prefill_slot.reserve(R);
  layout_.prefill_pos.reserve(R);
  layout_.prefill_token.reserve(R);
  layout_.prefill_chunks.reserve(S);
  layout_.prefill_tiles.reserve(static_cast<size_t>(sizes_.max_prefill_tiles));
  layout_.last_token_tiles.reserve(2 * S);
  layout_.chunk_samples.reserve(S);
  layout_.sample_rows.reserve(SR);
  layout_.decode_draft.reserve(S);
  layout_.decode_limit.reserve(S);
  layout_.history_spans.reserve(2 * S);
  layout_.history_tokens.reserve(static_cast<size_t>(sizes_.max_history_tokens));
  return absl::OkStatus();
}

ForwardShape CudaRunner::DecodeShape(size_t bucket, int32_t group, size_t variant,
                                     bool draft_catch_up) const {
  ForwardShape s;
  s.draft_catch_up = draft_catch_up;
  s.rows = s.decode_rows = s.sample_rows = buckets_[bucket] * group;
  s.identity_sampling = true;
  s.argmax_only = variant == kArgmaxGraph;
  s.defer_sampling = variant == kForwardGraph;
  s.group = group;
  if (variant == kForwardGraph) WantProposalsBack(s);
  if (group > 1) {
    // Enqueue stages the allowances first and the limits next, bucket entries each.
    s.decode_draft = reinterpret_cast<const int32_t*>(buffers_.upload);
    s.decode_limit = reinterpret_cast<const int32_t*>(
        buffers_.upload + SpecLimitOffset(static_cast<size_t>(buckets_[bucket])));
  }
  return s;
}

absl::Status CudaRunner::EnqueueForwardPass(const ForwardShape& shape, KernelClock* clock) {
  // The draft's passes, timed as one class in a profiled step.
  if (draft_ != nullptr) {
    LLM_RETURN_IF_ERROR(draft_->Enqueue(shape, stream_.get()));
    if (clock != nullptr) clock->Mark(KernelClass::kDraft, stream_.get());
  }
  return model_->Forward(shape, sizes_, buffers_, kv_, stream_.get(), clock);
}

absl::Status CudaRunner::CaptureGraph(const ForwardShape& s, GraphExec& out) {
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal),
                           "graph capture");
  const absl::Status enqueued = EnqueueForwardPass(s);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &graph);
  if (!enqueued.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return enqueued;
  }
  LLM_CUDA_RETURN_IF_ERROR(ended, "graph capture");
  const cudaError_t inst = cudaGraphInstantiate(out.out(), graph, 0);
  cudaGraphDestroy(graph);
  LLM_CUDA_RETURN_IF_ERROR(inst, "graph instantiation");
  return absl::OkStatus();
}

absl::Status CudaRunner::ChoosePrefillAttention() {
  const CudaSwitches& sw = options_.switches;
  info_.prefill_attention = sw.tiled_prefill ? "tiled" : "rows";
  if (!sw.tiled_prefill || !sw.hopper_prefill) return absl::OkStatus();
  cudaDeviceProp prop{};
  LLM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device), "device properties");
  LLM_ASSIGN_OR_RETURN(
      const bool hopper,
      BuildPrefillTensorMaps(config_, options_.sizes.block_tokens, prop.major, prop.minor, kv_));
  if (hopper) info_.prefill_attention = "hopper";
  return absl::OkStatus();
}

absl::Status CudaRunner::CaptureGraphs() {
  // Every decode shape runs once eagerly first: all rows are padding (the decode list is
  // empty), so nothing in the slot table changes, and every lazily made resource exists
  // before capture. graphs_ is indexed bucket * kGraphVariants + variant: the full sampler,
  // its two-launch argmax path, or no sampling (a constrained step samples later); with a
  // draft model, plus kGraphVariants * buckets for the same without its catch-up pass.
  std::vector<std::pair<ForwardShape, GraphExec*>> shapes;
  // With a draft model, each again without its catch-up pass (DecodeGraph picks).
  const size_t plain = kGraphVariants * buckets_.size();
  graphs_.resize(draft_ != nullptr ? 2 * plain : plain);
  for (size_t i = 0; i < graphs_.size(); ++i) {
    shapes.emplace_back(DecodeShape((i % plain) / kGraphVariants, 1, i % kGraphVariants,
                                    /*draft_catch_up=*/i < plain),
                        &graphs_[i]);
  }
  spec_groups_ = SpeculativeGroups(sizes_.spec_group);
  spec_graphs_.resize(kSpecVariants * buckets_.size() * spec_groups_.size());
  for (size_t i = 0; i < spec_graphs_.size(); ++i) {
    const size_t bucket = (i / kSpecVariants) % buckets_.size();
    const int32_t group = spec_groups_[i / kSpecVariants / buckets_.size()];
    if (buckets_[bucket] * group > sizes_.max_decode_rows) continue;
    shapes.emplace_back(DecodeShape(bucket, group, i % kSpecVariants), &spec_graphs_[i]);
  }
  for (const auto& [shape, graph] : shapes) {
    LLM_RETURN_IF_ERROR(EnqueueForwardPass(shape));
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), "warm-up step");
  if (!options_.switches.graphs) {
    graphs_.clear();
    spec_graphs_.clear();
    return absl::OkStatus();
  }
  for (const auto& [shape, graph] : shapes) {
    if (absl::Status st = CaptureGraph(shape, *graph); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("decode graph of ", shape.decode_rows, " rows (",
                                                  shape.group, " a slot): ", st.message()));
    }
    // Upload each now so its first replay is not slower than the rest.
    LLM_CUDA_RETURN_IF_ERROR(cudaGraphUpload(graph->get(), stream_.get()), "graph upload");
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), "graph upload");
  return absl::OkStatus();
}

const GraphExec* CudaRunner::DecodeGraph(size_t variant) const {
  const StepLayout& l = layout_;
  if (l.group == 1) {
    if (graphs_.empty()) return nullptr;
    const size_t lapsed =
        draft_ != nullptr && !l.draft_catch_up ? kGraphVariants * buckets_.size() : 0;
    return &graphs_[lapsed + kGraphVariants * l.bucket + variant];
  }
  if (spec_graphs_.empty()) return nullptr;
  for (size_t g = 0; g < spec_groups_.size(); ++g) {
    if (spec_groups_[g] != l.group) continue;
    const GraphExec& graph =
        spec_graphs_[kSpecVariants * (buckets_.size() * g + l.bucket) + variant];
    return graph.get() != nullptr ? &graph : nullptr;
  }
  return nullptr;
}

absl::Status CudaRunner::Launch(StepPlan plan) {
  if (!broken_.ok()) return broken_;
  if (in_flight_.size() >= static_cast<size_t>(kMaxInFlight)) {
    return absl::FailedPreconditionError("Launch: too many steps in flight");
  }
  LLM_RETURN_IF_ERROR(UseDevice(options_.device));
  // A bad plan is refused and changes nothing; past the check, the host's view of the device
  // changes, so an error there leaves the runner broken.
  LLM_RETURN_IF_ERROR(mirror_->Check(plan));
  if (pending_.has_value()) {
    // Cannot happen with kMaxInFlight 2: the step waiting for its masks is enqueued by the
    // Collect that must come first. A later step launched before it would read stale tokens.
    broken_ = absl::InternalError("Launch: a step is still waiting for its masks");
    return broken_;
  }
  mirror_->Apply(plan, layout_);
  constraints_->OnPlan(plan);
  absl::Status st = Enqueue(plan.step_id);
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status CudaRunner::Enqueue(uint64_t step_id) {
  const StepLayout& l = layout_;
  // 4. Stage the upload.
  RingEntry& ring = ring_[next_ring_];
  Staging staging(ring.upload.get(), sizes_.upload_bytes);
  LLM_ASSIGN_OR_RETURN(const UploadOffsets o, StageUpload(l, staging));
  ForwardShape shape = ShapeOf(l, o, buffers_.upload);

  // 5. Enqueue: upload (only when something changed), slot updates, the forward pass and
  // sampling (a graph replay for decode-only steps), the outputs' copy back, the end event.
  const cudaStream_t st = stream_.get();
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.start.get(), st), "step start");
  if (staging.used() > 0) {
    LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffers_.upload, ring.upload.get(), staging.used(),
                                             cudaMemcpyHostToDevice, st),
                             "step upload");
  }
  kernels::SlotUpdateParams up = SlotUpdatesOf(l, o, buffers_.upload);
  up.slots = buffers_.slots;
  up.sampling_table = buffers_.sampling_table;
  up.block_tables = buffers_.block_tables;
  up.max_blocks_per_seq = sizes_.max_blocks_per_seq;
  up.decode_list = buffers_.decode_list;
  up.vocab = config_.vocab_size;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSlotUpdate(up, st), "slot update");
  if (!l.history_spans.empty()) {
    const kernels::HistoryWriteParams hw{
        reinterpret_cast<const kernels::HistorySpan*>(buffers_.upload + o.spans),
        static_cast<int32_t>(l.history_spans.size()),
        reinterpret_cast<const int32_t*>(buffers_.upload + o.history), buffers_.slots};
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchHistoryWrite(hw, st), "history spans");
  }
  return EnqueueForward(step_id, shape, ring);
}

absl::Status CudaRunner::EnqueueForward(uint64_t step_id, ForwardShape& shape, RingEntry& ring) {
  const StepLayout& l = layout_;
  const cudaStream_t st = stream_.get();
  // A step with a constrained sampling row samples once its masks are written: at once when
  // they can be, else from the Collect of the step before (SlotConstraints::OnLaunch).
  SlotConstraints::LaunchMasks masks;
  if (constraints_->active() > 0 && shape.sample_rows > 0) {
    mirror_->SampleRowSlots(l, mask_row_slots_, mask_row_offsets_);
    masks = constraints_->OnLaunch(
        step_id,
        in_flight_.empty() ? SlotConstraints::kNothingInFlight : in_flight_.front().step_id,
        mask_row_slots_);
  }
  const bool masked = masks.masked;
  // Timed steps: those of the kind ProfileSteps asks for, while it asks, eagerly.
  bool profiled = false;
  const bool kind_asked = profile_prompt_steps_.load(std::memory_order_relaxed)
                              ? shape.prefill_rows > 0
                              : shape.identity_sampling && shape.prefill_rows == 0;
  if (!masked && kind_asked && clocks_made_.load(std::memory_order_acquire) &&
      profile_steps_.load(std::memory_order_relaxed) > 0) {
    profiled = profile_steps_.fetch_sub(1, std::memory_order_relaxed) > 0;
  }
  if (masked) {
    LLM_RETURN_IF_ERROR(EnqueueMaskedForward(shape, ring));
  } else if (profiled) {
    KernelClock& clock = clocks_[next_ring_];
    clock.Start(st);
    LLM_RETURN_IF_ERROR(EnqueueForwardPass(shape, &clock));
  } else if (shape.rows > 0) {
    const GraphExec* graph = shape.identity_sampling
                                 ? DecodeGraph(l.argmax_only ? kArgmaxGraph : kSampleGraph)
                                 : nullptr;
    if (graph != nullptr) {
      LLM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->get(), st), "graph launch");
    } else {
      LLM_RETURN_IF_ERROR(EnqueueForwardPass(shape));
    }
  }
  if (!masked) LLM_RETURN_IF_ERROR(EnqueueStepEnd(shape, ring));
  in_flight_.push_back(
      InFlight{step_id, next_ring_, shape.sample_rows, in_flight_.empty(), profiled, masked});
  next_ring_ = (next_ring_ + 1) % kRing;
  // Every token the masks depend on has been collected. Masks along the step's proposals wait
  // for their copy too: at once only when nothing before it is in flight, else from its Collect.
  const bool wait_proposals = masked && shape.proposals_back != nullptr && in_flight_.size() > 1;
  if (masked && masks.ready && !wait_proposals) return EnqueuePendingSample();
  return absl::OkStatus();
}

absl::Status CudaRunner::EnqueueMaskedForward(ForwardShape& shape, RingEntry& ring) {
  // The forward pass alone (a decode-only step's graph without sampling); the sampling is
  // enqueued later, after the masks' upload.
  shape.defer_sampling = true;
  shape.mask_index = reinterpret_cast<const int32_t*>(buffers_.mask_upload);
  shape.masks = reinterpret_cast<const uint64_t*>(buffers_.mask_upload + sizes_.masks_offset());
  shape.mask_words = sizes_.mask_words;
  WantProposalsBack(shape);  // as DecodeShape's forward-only graphs do
  const GraphExec* graph = shape.identity_sampling ? DecodeGraph(kForwardGraph) : nullptr;
  if (graph != nullptr) {
    LLM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->get(), stream_.get()), "graph launch");
  } else {
    LLM_RETURN_IF_ERROR(EnqueueForwardPass(shape));
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.forward_end.get(), stream_.get()), "forward end");
  pending_ = PendingSample{shape, next_ring_};
  return absl::OkStatus();
}

absl::Status CudaRunner::EnqueuePendingSample() {
  const PendingSample p = *pending_;
  pending_.reset();
  RingEntry& ring = ring_[p.ring];
  // The step's own staging: an earlier step's masks may still wait to be copied from theirs.
  // The device's copy is one buffer: this step's upload follows the earlier step's sampling
  // on the stream.
  auto* index = reinterpret_cast<int32_t*>(ring.masks.get());
  auto* masks = reinterpret_cast<uint64_t*>(ring.masks.get() + sizes_.masks_offset());
  const size_t words = static_cast<size_t>(sizes_.mask_words);
  // The verify rows' masks follow the proposals the step made on the device.
  if (p.shape.proposals_back != nullptr) {
    LLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(proposals_ready_.get()), "proposals' copy back");
  }
  const int32_t written = constraints_->WriteGroupMasks(
      mask_row_slots_, mask_row_offsets_, ProposalsBack(p.shape),
      std::span<int32_t>(index, mask_row_slots_.size()),
      std::span<uint64_t>(masks, static_cast<size_t>(sizes_.max_masks) * words));
  if (written < 0) return absl::InternalError("a step's masks overflow their staging");
  const cudaStream_t st = stream_.get();
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.sample_start.get(), st), "sampling start");
  LLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(buffers_.mask_upload, index, mask_row_slots_.size() * sizeof(int32_t),
                      cudaMemcpyHostToDevice, st),
      "mask upload");
  if (written > 0) {
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(buffers_.mask_upload + sizes_.masks_offset(), masks,
                        static_cast<size_t>(written) * words * sizeof(uint64_t),
                        cudaMemcpyHostToDevice, st),
        "mask upload");
  }
  LLM_RETURN_IF_ERROR(model_->Sample(p.shape, buffers_, st));
  return EnqueueStepEnd(p.shape, ring);
}

void CudaRunner::WantProposalsBack(ForwardShape& shape) const {
  if (shape.group <= 1 || !speculates_constrained()) return;
  shape.proposals_back = proposals_back_.get();
  shape.proposals_ready = proposals_ready_.get();
}

SlotConstraints::Proposals CudaRunner::ProposalsBack(const ForwardShape& shape) const {
  if (shape.proposals_back == nullptr) return {};
  const auto slots = static_cast<size_t>(options_.sizes.max_slots);
  const int32_t stride = sizes_.spec_group - 1;
  const auto* counts = reinterpret_cast<const int32_t*>(shape.proposals_back);
  return {std::span<const int32_t>(counts + slots, slots * static_cast<size_t>(stride)),
          std::span<const int32_t>(counts, slots), stride};
}

absl::Status CudaRunner::EnqueueStepEnd(const ForwardShape& shape, RingEntry& ring) {
  const cudaStream_t st = stream_.get();
  if (shape.sample_rows > 0) {
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(ring.outputs.get(), buffers_.out, shape.sample_rows * sizeof(SampleOutput),
                        cudaMemcpyDeviceToHost, st),
        "step outputs");
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.end.get(), st), "step end");
  return absl::OkStatus();
}

absl::StatusOr<StepResult> CudaRunner::Collect() {
  if (in_flight_.empty()) return absl::FailedPreconditionError("Collect: no step in flight");
  if (!broken_.ok()) {
    // Each call takes a step off, so the engine's drain of a broken runner ends.
    in_flight_.pop_front();
    pending_.reset();
    return broken_;
  }
  LLM_RETURN_IF_ERROR(UseDevice(options_.device));
  const InFlight f = in_flight_.front();
  in_flight_.pop_front();
  const RingEntry& ring = ring_[f.ring];
  if (pending_.has_value() && pending_->ring == f.ring) {
    broken_ = absl::InternalError("Collect: the step has not sampled yet");
    return broken_;
  }
  // The one host synchronisation of a step.
  if (absl::Status st = CudaStatus(cudaEventSynchronize(ring.end.get()), "step"); !st.ok()) {
    broken_ = st;
    return st;
  }
  StepResult result;
  result.step_id = f.step_id;
  result.device_seconds = std::max(0.0, ElapsedSeconds(ring.start, ring.end));
  if (!f.after_idle && last_collected_ring_ >= 0) {
    result.gap_seconds = std::max(0.0, ElapsedSeconds(ring_[last_collected_ring_].end, ring.start));
  }
  if (f.masked) {
    // The device idled from the forward pass's end to the sampling's start when the masks came
    // late: a gap, not busy time.
    const double wait = std::max(0.0, ElapsedSeconds(ring.forward_end, ring.sample_start));
    result.device_seconds = std::max(0.0, result.device_seconds - wait);
    if (result.gap_seconds >= 0.0 || wait > 0.0) {
      result.gap_seconds = std::max(0.0, result.gap_seconds) + wait;
    }
  }
  last_collected_ring_ = f.ring;
  if (f.profiled) {
    std::lock_guard<std::mutex> lock(profile_mu_);
    clocks_[f.ring].AddTo(kernel_times_);
  }
  const auto* outs = reinterpret_cast<const SampleOutput*>(ring.outputs.get());
  for (int32_t i = 0; i < f.sample_rows; ++i) {
    const SampleOutput& o = outs[i];
    if (o.slot < 0) continue;  // a padding row, or a slot that had already finished
    if (o.token < 0 || o.token >= info_.vocab_size) {
      broken_ =
          absl::InternalError(absl::StrCat("step ", f.step_id, ": slot ", o.slot, " sampled token ",
                                           o.token, " outside the vocabulary"));
      return broken_;
    }
    if (constraints_->active() > 0) {
      constraints_->OnToken(f.step_id, o.slot, o.key, o.token, o.finish);
    }
    SlotOutput out{o.slot, o.key, {o.token, o.logprob, {}}, o.finish};
    out.draft_tokens = o.draft_tokens;  // a verify group's first row: its proposals
    out.accepted_tokens = o.accepted_tokens;
    for (int32_t k = 0; k < o.num_top && k < kernels::kMaxTopLogprobs; ++k) {
      out.sampled.top.push_back({o.top_ids[k], o.top_logprobs[k]});
    }
    result.outputs.push_back(std::move(out));
  }
  // The next step's constrained rows: their masks now, while the device runs its forward pass.
  if (pending_.has_value()) {
    if (absl::Status st = EnqueuePendingSample(); !st.ok()) {
      broken_ = st;
      return st;
    }
  }
  return result;
}

absl::Status CudaRunner::ProfileSteps(int steps, ProfiledSteps which) {
  if (!clocks_made_.load(std::memory_order_acquire)) {
    // Before clocks_made_ is set the engine thread never touches the clocks.
    std::lock_guard<std::mutex> lock(profile_mu_);
    if (!clocks_made_.load(std::memory_order_relaxed)) {
      LLM_RETURN_IF_ERROR(UseDevice(options_.device));
      const int marks =
          CudaModel::kMarksPerLayer * config_.num_layers + CudaModel::kMarksOutsideLayers;
      for (KernelClock& c : clocks_) LLM_RETURN_IF_ERROR(c.Create(marks));
      clocks_made_.store(true, std::memory_order_release);
    }
  }
  profile_steps_.store(0, std::memory_order_relaxed);  // no step counts under the old kind
  profile_prompt_steps_.store(which == ProfiledSteps::kWithPrompt, std::memory_order_relaxed);
  profile_steps_.store(steps, std::memory_order_relaxed);
  return absl::OkStatus();
}

KernelTimes CudaRunner::TakeKernelTimes() {
  std::lock_guard<std::mutex> lock(profile_mu_);
  return std::exchange(kernel_times_, KernelTimes{});
}

int CudaDeviceCount() { return kernels::DeviceCount(); }

absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCudaRunner(const model::ModelConfig& config,
                                                              const model::TensorStore* store,
                                                              const model::QuantScheme& quant,
                                                              uint64_t seed,
                                                              const CudaRunnerOptions& options,
                                                              const CudaDraftSource* draft) {
  LLM_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                       CudaRunner::Create(config, store, quant, seed, options, draft));
  return runner;
}

}  // namespace llm::runner::cuda
