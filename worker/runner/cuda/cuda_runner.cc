#include "worker/runner/cuda/cuda_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope_kv.h"
#include "kernels/slot_update.h"
#include "kernels/step_inputs.h"
#include "worker/runner/cpu_ops.h"

namespace llm::runner::cuda {
namespace {

using engine::SlotOutput;
using engine::StepPlan;
using engine::StepResult;
using kernels::SampleOutput;
using kernels::SlotAdmit;
using kernels::SlotSampling;

constexpr size_t kAlign = 256;

int32_t RoundUp(int32_t x, int32_t m) { return (x + m - 1) / m * m; }
size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Carves aligned arrays out of one allocation; with a null base it only measures.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <typename T>
  T* Take(size_t n) {
    used_ = RoundUp(used_, kAlign);
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + used_);
    used_ += n * sizeof(T);
    return p;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

absl::Status CublasStatus(int status, const char* what) {
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt status ", status));
}

// The device of this runner, made current on the calling thread (the engine thread calls
// Launch and Collect; Create may run elsewhere).
absl::Status UseDevice(int device) {
  thread_local int current = -1;
  if (current == device) return absl::OkStatus();
  LLM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  current = device;
  return absl::OkStatus();
}

// Bump allocation of one step's upload in pinned memory; the device copy has the same layout.
class Staging {
 public:
  Staging(std::byte* base, size_t capacity) : base_(base), capacity_(capacity) {}
  // Copies `v` in and returns its offset, or -1 when it does not fit.
  template <typename T>
  int64_t Put(const std::vector<T>& v) {
    used_ = RoundUp(used_, size_t{16});
    const size_t bytes = v.size() * sizeof(T);
    if (used_ + bytes > capacity_) return -1;
    const int64_t offset = static_cast<int64_t>(used_);
    if (bytes > 0) std::memcpy(base_ + used_, v.data(), bytes);
    used_ += bytes;
    return offset;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t capacity_;
  size_t used_ = 0;
};

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
                                                               uint64_t seed,
                                                               const CudaRunnerOptions& options) {
  if (options.sizes.max_slots < 1 || options.sizes.block_tokens < 1 ||
      options.max_prefill_tokens < 1) {
    return absl::InvalidArgumentError(
        "CUDA runner: max_slots, block_tokens and max_prefill_tokens must be positive");
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
  const int devices = kernels::DeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(
        devices == 0 ? absl::StrCat("CUDA runner: ", kernels::NoDeviceReason())
                     : absl::StrCat("engine.device: ", options.device, " is not one of the ",
                                    devices, " CUDA devices"));
  }
  std::unique_ptr<CudaRunner> runner(new CudaRunner(config, options));
  LLM_RETURN_IF_ERROR(runner->Init(store, seed));
  return runner;
}

absl::Status CudaRunner::Init(const model::TensorStore* store, uint64_t seed) {
  const model::ModelConfig& c = config_;
  LLM_RETURN_IF_ERROR(UseDevice(options_.device));
  LLM_RETURN_IF_ERROR(stream_.Create());
  if (const cudaError_t err = gemm_.Init(size_t{32} << 20, options_.batch_invariant, options_.gemv);
      err != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA runner: ", gemm_.load_error().empty()
                                                                           ? cudaGetErrorString(err)
                                                                           : gemm_.load_error()));
  }
  if (store != nullptr) {
    LLM_ASSIGN_OR_RETURN(weights_, UploadCudaWeights(c, *store, stream_.get()));
  } else {
    LLM_ASSIGN_OR_RETURN(weights_, RandomCudaWeights(c, seed, stream_.get()));
  }

  const int32_t max_context = options_.max_context > 0
                                  ? std::min(options_.max_context, c.max_position_embeddings)
                                  : c.max_position_embeddings;
  if (options_.valid_vocab_size <= 0 || options_.valid_vocab_size > c.vocab_size) {
    options_.valid_vocab_size = c.vocab_size;
  }
  info_.sizes = options_.sizes;  // kv_blocks settled by AllocateKvCache
  info_.vocab_size = c.vocab_size;
  info_.max_context = max_context;
  info_.max_prefill_tokens = options_.max_prefill_tokens;
  info_.max_stop_ids = kernels::kMaxStopIds;
  info_.device = kernels::DeviceDescription(options_.device);
  char bus_id[32] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), options_.device) == cudaSuccess) {
    info_.pci_bus_id = bus_id;
  }
  info_.weight_bytes = weights_.bytes();

  max_blocks_per_seq_ =
      (max_context + options_.sizes.block_tokens - 1) / options_.sizes.block_tokens;
  max_rows_ = RoundUp(options_.max_prefill_tokens + options_.sizes.max_slots, kPrefillRowAlign);
  max_sample_rows_ = RoundUp(std::min(2 * options_.sizes.max_slots,
                                      options_.sizes.max_slots + options_.max_prefill_tokens),
                             kSampleRowAlign);
  // Split-K attention: at most 64 partitions of a multiple of 32 tokens (the kernel's tile).
  partition_tokens_ = RoundUp(std::max(256, (max_context + 63) / 64), 32);
  max_partitions_ = (max_context + partition_tokens_ - 1) / partition_tokens_;
  qkv_dim_ = c.q_dim() + 2 * c.kv_dim();
  buckets_ = MakeBuckets(options_.sizes.max_slots);

  LLM_RETURN_IF_ERROR(AllocateBuffers());
  LLM_RETURN_IF_ERROR(PrepareGemms());
  LLM_RETURN_IF_ERROR(AllocateKvCache());
  StepLimits limits;
  limits.sizes = info_.sizes;
  limits.max_blocks_per_seq = max_blocks_per_seq_;
  limits.max_context = info_.max_context;
  limits.vocab_size = c.vocab_size;
  limits.max_prefill_tokens = options_.max_prefill_tokens;
  mirror_ = std::make_unique<SlotMirror>(limits, buckets_);
  LLM_RETURN_IF_ERROR(CaptureGraphs());
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info_.memory_total_bytes = total_bytes;
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::AllocateBuffers() {
  const model::ModelConfig& c = config_;
  const size_t S = options_.sizes.max_slots, V = c.vocab_size, H = c.hidden_size;
  const size_t R = max_rows_, SR = max_sample_rows_, D = c.head_dim;
  const size_t half = D / 2;
  // The upload area: admissions, their block lists, decode row changes, prefill rows and
  // sampling rows of one step, each array 16-byte aligned.
  upload_bytes_ = S * (sizeof(SlotAdmit) + sizeof(SlotSampling)) +
                  S * static_cast<size_t>(max_blocks_per_seq_) * 4 + 2 * S * 2 * 4 + 3 * R * 4 +
                  SR * 4 + 16 * 16;

  auto carve = [&](Carver& k) {
    slots_.last_token = k.Take<int32_t>(S);
    slots_.pos = k.Take<int32_t>(S);
    slots_.generated = k.Take<int32_t>(S);
    slots_.done = k.Take<uint8_t>(S);
    sampling_table_ = k.Take<SlotSampling>(S);
    slots_.sampling = sampling_table_;
    slots_.out_counts = k.Take<uint16_t>(S * V);
    slots_.prompt_mask = k.Take<uint8_t>(S * V);
    block_tables_ = k.Take<int32_t>(S * max_blocks_per_seq_);
    decode_list_ = k.Take<int32_t>(S);
    const size_t slot_table_end = k.used();
    rope_cos_ = k.Take<float>(static_cast<size_t>(info_.max_context) * half);
    rope_sin_ = k.Take<float>(static_cast<size_t>(info_.max_context) * half);
    x_ = k.Take<float>(R * H);
    delta_ = k.Take<float>(R * H);
    xn_ = k.Take<bf16>(R * H);
    qkv_ = k.Take<bf16>(R * qkv_dim_);
    attn_ = k.Take<bf16>(R * c.q_dim());
    gate_up_ = k.Take<bf16>(R * 2 * c.intermediate_size);
    act_ = k.Take<bf16>(R * c.intermediate_size);
    row_token_ = k.Take<int32_t>(R);
    row_pos_ = k.Take<int32_t>(R);
    row_slot_ = k.Take<int32_t>(R);
    sample_slot_ = k.Take<int32_t>(SR);
    sample_pos_ = k.Take<int32_t>(SR);
    xs_ = k.Take<bf16>(SR * H);
    logits_ = k.Take<float>(SR * V);
    probs_ = k.Take<float>(SR * V);
    out_ = k.Take<SampleOutput>(SR);
    const size_t parts = S * c.num_heads * max_partitions_;
    part_out_ = k.Take<float>(parts * D);
    part_max_ = k.Take<float>(parts);
    part_sum_ = k.Take<float>(parts);
    upload_ = k.Take<std::byte>(upload_bytes_);
    return slot_table_end;
  };
  Carver measure(nullptr);
  carve(measure);
  LLM_RETURN_IF_ERROR(buffers_.Allocate(measure.used(), "runner buffers"));
  Carver carver(buffers_.get());
  const size_t slot_table_bytes = carve(carver);
  // A clean slot table; every decode row unused.
  // NOTE: on the runner's stream (a non-blocking one, unordered with the default stream), and
  // synchronised below, so the warm-up steps see the cleared table.
  const cudaStream_t st = stream_.get();
  LLM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buffers_.get(), 0, slot_table_bytes, st), "slot table");
  LLM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(decode_list_, 0xFF, S * sizeof(int32_t), st),
                           "slot table");

  // RoPE tables: the CPU reference's values.
  const std::vector<double> inv_freq = model::RopeInverseFrequencies(c);
  std::vector<float> cos_t(static_cast<size_t>(info_.max_context) * half);
  std::vector<float> sin_t(cos_t.size());
  for (int32_t p = 0; p < info_.max_context; ++p) {
    RopeCosSin(inv_freq.data(), half, p, &cos_t[p * half], &sin_t[p * half]);
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<float*>(rope_cos_), cos_t.data(),
                                           cos_t.size() * 4, cudaMemcpyHostToDevice, st),
                           "RoPE tables");
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<float*>(rope_sin_), sin_t.data(),
                                           sin_t.size() * 4, cudaMemcpyHostToDevice, st),
                           "RoPE tables");
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st), "runner buffers");

  for (RingEntry& e : ring_) {
    LLM_RETURN_IF_ERROR(e.upload.Allocate(upload_bytes_, "step staging"));
    LLM_RETURN_IF_ERROR(e.outputs.Allocate(SR * sizeof(SampleOutput), "step outputs"));
    LLM_RETURN_IF_ERROR(e.start.Create());
    LLM_RETURN_IF_ERROR(e.end.Create());
  }
  // The step layout's arrays, at their largest, so Launch never allocates.
  layout_.admits.reserve(S);
  layout_.settings.reserve(S);
  layout_.blocks.reserve(S * static_cast<size_t>(max_blocks_per_seq_));
  layout_.row_changes.reserve(4 * S);
  layout_.prefill_slot.reserve(R);
  layout_.prefill_pos.reserve(R);
  layout_.prefill_token.reserve(R);
  layout_.sample_rows.reserve(SR);
  return absl::OkStatus();
}

absl::Status CudaRunner::PrepareGemms() {
  const model::ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layers.front();
  std::vector<int32_t> rows = buckets_;
  for (int32_t r = kPrefillRowAlign; r <= max_rows_; r += kPrefillRowAlign) rows.push_back(r);
  for (int32_t r : rows) {
    const kernels::GemmArgs shapes[] = {
        {xn_, L.qkv, L.qkv_bias, qkv_, r, c.hidden_size, qkv_dim_, kernels::GemmOut::kBf16},
        {attn_, L.o, L.o_bias, delta_, r, c.q_dim(), c.hidden_size, kernels::GemmOut::kF32},
        {xn_, L.gate_up, L.gate_up_bias, gate_up_, r, c.hidden_size, 2 * c.intermediate_size,
         kernels::GemmOut::kBf16},
        {act_, L.down, L.down_bias, delta_, r, c.intermediate_size, c.hidden_size,
         kernels::GemmOut::kF32},
    };
    for (const auto& g : shapes) LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Prepare(g), "GEMM plan"));
  }
  std::vector<int32_t> sample_rows = buckets_;
  for (int32_t r = kSampleRowAlign; r <= max_sample_rows_; r += kSampleRowAlign) {
    sample_rows.push_back(r);
  }
  for (int32_t r : sample_rows) {
    const kernels::GemmArgs head{xs_, weights_.head, nullptr,      logits_,
                                 r,   c.hidden_size, c.vocab_size, kernels::GemmOut::kF32};
    LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Prepare(head), "GEMM plan"));
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::AllocateKvCache() {
  const model::ModelConfig& c = config_;
  const size_t per_layer_block =
      static_cast<size_t>(c.num_kv_heads) * options_.sizes.block_tokens * c.head_dim * sizeof(bf16);
  const size_t block_bytes = per_layer_block * 2 * c.num_layers;
  int64_t blocks = options_.sizes.kv_blocks;
  size_t free_bytes = 0, total_bytes = 0;
  LLM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (blocks <= 0) {
    blocks = static_cast<int64_t>(static_cast<double>(free_bytes) * options_.kv_memory_fraction /
                                  static_cast<double>(block_bytes));
  }
  blocks = std::min<int64_t>(blocks, int64_t{options_.sizes.max_slots} * max_blocks_per_seq_);
  blocks = std::min<int64_t>(blocks, INT32_MAX / 2);
  if (blocks < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache: ", free_bytes >> 20, " MiB free on the device after the weights (",
        weights_.bytes() >> 20, " MiB) is not enough for one block of ", block_bytes >> 10,
        " KiB at engine.kv_memory_fraction ", options_.kv_memory_fraction));
  }
  LLM_RETURN_IF_ERROR(kv_.Allocate(static_cast<size_t>(blocks) * block_bytes, "KV cache"));
  k_cache_.resize(c.num_layers);
  v_cache_.resize(c.num_layers);
  const size_t layer_bytes = static_cast<size_t>(blocks) * per_layer_block;
  for (int l = 0; l < c.num_layers; ++l) {
    k_cache_[l] = reinterpret_cast<bf16*>(kv_.get() + (2 * l) * layer_bytes);
    v_cache_[l] = reinterpret_cast<bf16*>(kv_.get() + (2 * l + 1) * layer_bytes);
  }
  info_.sizes.kv_blocks = static_cast<int32_t>(blocks);
  info_.kv_cache_bytes = static_cast<uint64_t>(blocks) * block_bytes;
  return absl::OkStatus();
}

absl::Status CudaRunner::CaptureGraphs() {
  // Every decode bucket runs once eagerly first: all rows are padding (the decode list is
  // empty), so nothing in the slot table changes, and every lazily made resource exists
  // before capture.
  for (int32_t b : buckets_) {
    StepShape s;
    s.rows = s.decode_rows = s.sample_rows = b;
    s.identity_sampling = true;
    LLM_RETURN_IF_ERROR(EnqueueForward(s));
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), "warm-up step");
  if (!options_.cuda_graphs) return absl::OkStatus();
  graphs_.resize(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    StepShape s;
    s.rows = s.decode_rows = s.sample_rows = buckets_[i];
    s.identity_sampling = true;
    LLM_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "graph capture");
    const absl::Status enqueued = EnqueueForward(s);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &graph);
    if (!enqueued.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return enqueued;
    }
    LLM_CUDA_RETURN_IF_ERROR(ended, "graph capture");
    const cudaError_t inst = cudaGraphInstantiate(graphs_[i].out(), graph, 0);
    cudaGraphDestroy(graph);
    LLM_CUDA_RETURN_IF_ERROR(inst, "graph instantiation");
  }
  // Upload the graphs now so the first replay of each is not slower than the rest.
  for (const GraphExec& g : graphs_) {
    LLM_CUDA_RETURN_IF_ERROR(cudaGraphUpload(g.get(), stream_.get()), "graph upload");
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), "graph upload");
  return absl::OkStatus();
}

absl::Status CudaRunner::EnqueueForward(const StepShape& s) {
  const model::ModelConfig& c = config_;
  const cudaStream_t st = stream_.get();
  const int32_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  kernels::StepInputsParams in{};
  in.prefill_slot = s.prefill_slot;
  in.prefill_pos = s.prefill_pos;
  in.prefill_token = s.prefill_token;
  in.num_prefill = s.prefill_rows;
  in.decode_list = decode_list_;
  in.num_decode = s.decode_rows;
  in.slots = slots_;
  in.vocab = c.vocab_size;
  in.row_token = row_token_;
  in.row_pos = row_pos_;
  in.row_slot = row_slot_;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchStepInputs(in, st), "step inputs");
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::LaunchEmbedding({row_token_, weights_.embedding, x_, s.rows, H, c.vocab_size}, st),
      "embedding");

  kernels::AttentionParams attn{};
  attn.qkv = qkv_;
  attn.row_pos = row_pos_;
  attn.row_slot = row_slot_;
  attn.block_tables = block_tables_;
  attn.max_blocks_per_seq = max_blocks_per_seq_;
  attn.out = attn_;
  attn.partial_out = part_out_;
  attn.partial_max = part_max_;
  attn.partial_sum = part_sum_;
  attn.num_heads = c.num_heads;
  attn.num_kv_heads = c.num_kv_heads;
  attn.head_dim = c.head_dim;
  attn.block_tokens = options_.sizes.block_tokens;
  attn.sliding_window = c.sliding_window;
  attn.max_partitions = max_partitions_;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  const float* pending = nullptr;  // the last sublayer's output, added by the next norm
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaLayerWeights& L = weights_.layers[l];
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchRmsNorm({x_, pending, L.input_norm, xn_, nullptr, s.rows, H, eps}, st),
        "rmsnorm");
    LLM_RETURN_IF_ERROR(CublasStatus(
        gemm_.Run({xn_, L.qkv, L.qkv_bias, qkv_, s.rows, H, qkv_dim_, kernels::GemmOut::kBf16}, st),
        "qkv projection"));
    kernels::RopeKvParams rope{};
    rope.qkv = qkv_;
    rope.row_pos = row_pos_;
    rope.row_slot = row_slot_;
    rope.block_tables = block_tables_;
    rope.max_blocks_per_seq = max_blocks_per_seq_;
    rope.cos_table = rope_cos_;
    rope.sin_table = rope_sin_;
    rope.k_cache = k_cache_[l];
    rope.v_cache = v_cache_[l];
    rope.rows = s.rows;
    rope.num_heads = c.num_heads;
    rope.num_kv_heads = c.num_kv_heads;
    rope.head_dim = c.head_dim;
    rope.block_tokens = options_.sizes.block_tokens;
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRopeKv(rope, st), "rope");
    attn.k_cache = k_cache_[l];
    attn.v_cache = v_cache_[l];
    if (s.prefill_rows > 0) {
      attn.row_begin = 0;
      attn.rows = s.prefill_rows;
      attn.partition_tokens = 0;
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(attn, st), "prefill attention");
    }
    if (s.decode_rows > 0) {
      attn.row_begin = s.prefill_rows;
      attn.rows = s.decode_rows;
      attn.partition_tokens = partition_tokens_;
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(attn, st), "decode attention");
    }
    LLM_RETURN_IF_ERROR(CublasStatus(
        gemm_.Run({attn_, L.o, L.o_bias, delta_, s.rows, c.q_dim(), H, kernels::GemmOut::kF32}, st),
        "o projection"));
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchRmsNorm({x_, delta_, L.post_norm, xn_, nullptr, s.rows, H, eps}, st),
        "rmsnorm");
    LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run({xn_, L.gate_up, L.gate_up_bias, gate_up_, s.rows, H,
                                                2 * I, kernels::GemmOut::kBf16},
                                               st),
                                     "gate/up projection"));
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSiluMul({gate_up_, act_, s.rows, I}, st), "silu");
    LLM_RETURN_IF_ERROR(CublasStatus(
        gemm_.Run({act_, L.down, L.down_bias, delta_, s.rows, I, H, kernels::GemmOut::kF32}, st),
        "down projection"));
    pending = delta_;
  }

  if (s.sample_rows == 0) return absl::OkStatus();
  const int32_t* rows_index = s.identity_sampling ? nullptr : s.sample_rows_index;
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRmsNorm(
          {x_, pending, weights_.final_norm, xs_, rows_index, s.sample_rows, H, eps}, st),
      "final rmsnorm");
  const int32_t* sample_slot = row_slot_;
  const int32_t* sample_pos = row_pos_;
  if (!s.identity_sampling) {
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(row_slot_, rows_index, sample_slot_, s.sample_rows, st),
        "sampling rows");
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(row_pos_, rows_index, sample_pos_, s.sample_rows, st),
        "sampling rows");
    sample_slot = sample_slot_;
    sample_pos = sample_pos_;
  }
  LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run({xs_, weights_.head, nullptr, logits_, s.sample_rows,
                                              H, c.vocab_size, kernels::GemmOut::kF32},
                                             st),
                                   "lm head"));
  kernels::SampleParams sp{};
  sp.logits = logits_;
  sp.probs = probs_;
  sp.row_slot = sample_slot;
  sp.row_pos = sample_pos;
  sp.slots = slots_;
  sp.out = out_;
  sp.rows = s.sample_rows;
  sp.vocab = c.vocab_size;
  sp.valid_vocab = options_.valid_vocab_size;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSample(sp, st), "sampling");
  return absl::OkStatus();
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
  mirror_->Apply(plan, layout_);
  absl::Status st = Enqueue(plan.step_id);
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status CudaRunner::Enqueue(uint64_t step_id) {
  const StepLayout& l = layout_;
  StepShape shape;
  shape.rows = l.rows;
  shape.prefill_rows = l.prefill_rows;
  shape.decode_rows = l.decode_rows;
  shape.sample_rows = l.num_sample_rows;
  shape.identity_sampling = l.identity_sampling;

  // 4. Stage the upload.
  RingEntry& ring = ring_[next_ring_];
  Staging staging(ring.upload.get(), upload_bytes_);
  const int64_t off_admits = staging.Put(l.admits);
  const int64_t off_settings = staging.Put(l.settings);
  const int64_t off_blocks = staging.Put(l.blocks);
  const int64_t off_rows = staging.Put(l.row_changes);
  const int64_t off_pslot = staging.Put(l.prefill_slot);
  const int64_t off_ppos = staging.Put(l.prefill_pos);
  const int64_t off_ptoken = staging.Put(l.prefill_token);
  const int64_t off_samples = staging.Put(l.sample_rows);
  for (int64_t off : {off_admits, off_settings, off_blocks, off_rows, off_pslot, off_ppos,
                      off_ptoken, off_samples}) {
    if (off < 0) return absl::InternalError("Launch: the step's upload overflows its staging");
  }
  auto dev = [&](int64_t off) { return upload_ + off; };
  shape.prefill_slot = reinterpret_cast<const int32_t*>(dev(off_pslot));
  shape.prefill_pos = reinterpret_cast<const int32_t*>(dev(off_ppos));
  shape.prefill_token = reinterpret_cast<const int32_t*>(dev(off_ptoken));
  shape.sample_rows_index = reinterpret_cast<const int32_t*>(dev(off_samples));

  // 5. Enqueue: upload (only when something changed), slot updates, the forward pass and
  // sampling (a graph replay for decode-only steps), the outputs' copy back, the end event.
  const cudaStream_t st = stream_.get();
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.start.get(), st), "step start");
  if (staging.used() > 0) {
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(upload_, ring.upload.get(), staging.used(), cudaMemcpyHostToDevice, st),
        "step upload");
  }
  kernels::SlotUpdateParams up{};
  up.admits = reinterpret_cast<const SlotAdmit*>(dev(off_admits));
  up.settings = reinterpret_cast<const SlotSampling*>(dev(off_settings));
  up.blocks = reinterpret_cast<const int32_t*>(dev(off_blocks));
  up.row_changes = reinterpret_cast<const int32_t*>(dev(off_rows));
  up.num_admits = static_cast<int32_t>(l.admits.size());
  up.num_row_changes = static_cast<int32_t>(l.row_changes.size() / 2);
  up.slots = slots_;
  up.sampling_table = sampling_table_;
  up.block_tables = block_tables_;
  up.max_blocks_per_seq = max_blocks_per_seq_;
  up.decode_list = decode_list_;
  up.vocab = config_.vocab_size;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSlotUpdate(up, st), "slot update");
  if (shape.rows > 0) {
    if (shape.identity_sampling && !graphs_.empty()) {
      LLM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[l.bucket].get(), st), "graph launch");
    } else {
      LLM_RETURN_IF_ERROR(EnqueueForward(shape));
    }
  }
  if (shape.sample_rows > 0) {
    LLM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(ring.outputs.get(), out_, shape.sample_rows * sizeof(SampleOutput),
                        cudaMemcpyDeviceToHost, st),
        "step outputs");
  }
  LLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ring.end.get(), st), "step end");
  in_flight_.push_back(InFlight{step_id, next_ring_, shape.sample_rows, in_flight_.empty()});
  next_ring_ = (next_ring_ + 1) % kRing;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> CudaRunner::Collect() {
  if (in_flight_.empty()) return absl::FailedPreconditionError("Collect: no step in flight");
  if (!broken_.ok()) return broken_;
  LLM_RETURN_IF_ERROR(UseDevice(options_.device));
  const InFlight f = in_flight_.front();
  in_flight_.pop_front();
  const RingEntry& ring = ring_[f.ring];
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
  last_collected_ring_ = f.ring;
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
    SlotOutput out{o.slot, o.key, {o.token, o.logprob, {}}, o.finish};
    for (int32_t k = 0; k < o.num_top && k < kernels::kMaxTopLogprobs; ++k) {
      out.sampled.top.push_back({o.top_ids[k], o.top_logprobs[k]});
    }
    result.outputs.push_back(std::move(out));
  }
  return result;
}

}  // namespace llm::runner::cuda
