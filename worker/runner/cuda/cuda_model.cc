#include "worker/runner/cuda/cuda_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/gather_rows.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/launch.h"
#include "kernels/sampling/sampling.h"
#include "kernels/step/step_inputs.h"

namespace llm::runner::cuda {
namespace {

absl::Status CublasStatus(int status, const char* what) {
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt status ", status));
}

}  // namespace

int64_t LayerWeightBytes(const model::ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const int64_t qkv = int64_t{c.q_dim()} + 2 * int64_t{c.kv_dim()};
  return 2 * (h * qkv + int64_t{c.q_dim()} * h + 3 * h * i + 2 * h);
}

bool ProgrammaticLaunchPays(const model::ModelConfig& config) {
  return LayerWeightBytes(config) < kPdlLayerBytes;
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Load(const model::ModelConfig& config,
                                                           const model::TensorStore* store,
                                                           const model::QuantScheme& quant,
                                                           uint64_t seed,
                                                           const CudaModelOptions& options,
                                                           cudaStream_t stream) {
  if (quant.quantized()) {
    return absl::UnimplementedError(
        absl::StrCat("CUDA runner: ", quant.Describe(), ": FP8 products are not served yet"));
  }
  std::unique_ptr<CudaModel> m(new CudaModel(config, options));
  // Process-wide, and before the first launch and any capture (kernels/launch.h); only where
  // the kernels the device runs wait for prior grids (sm_90 code on an sm_90 or newer device).
  const CudaSwitches& sw = options.switches;
  kernels::SetProgrammaticLaunch(sw.pdl.value_or(false) && kernels::ProgrammaticLaunchAvailable());
  kernels::GemmOptions gemm_options;
  gemm_options.batch_invariant = sw.batch_invariant;
  gemm_options.use_gemv = sw.gemv;
  gemm_options.tune = sw.gemm_tuning;
  gemm_options.gemv_split_rows_per_sm = sw.gemv_split_rows_per_sm;
  if (const cudaError_t err = m->gemm_.Init(gemm_options); err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA runner: ", m->gemm_.load_error().empty() ? cudaGetErrorString(err)
                                                                    : m->gemm_.load_error()));
  }
  if (sw.tiled_prefill) {
    LLM_CUDA_RETURN_IF_ERROR(kernels::PreparePrefillAttention(config.head_dim),
                             "prefill attention");
  }
  if (store != nullptr) {
    LLM_ASSIGN_OR_RETURN(m->weights_, UploadCudaWeights(config, *store, stream));
  } else {
    LLM_ASSIGN_OR_RETURN(m->weights_, RandomCudaWeights(config, seed, stream));
  }
  return m;
}

absl::Status CudaModel::PrepareProducts(const StepSizes& z, const StepBuffers& b,
                                        std::span<const int32_t> rows,
                                        std::span<const int32_t> sample_rows) {
  const model::ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layers.front();
  for (const int32_t r : rows) {
    const kernels::GemmArgs shapes[] = {
        {b.xn, L.qkv, L.qkv_bias, b.qkv, r, c.hidden_size, z.qkv_dim, kernels::GemmOut::kBf16},
        {b.attn, L.o, L.o_bias, b.delta, r, c.q_dim(), c.hidden_size, kernels::GemmOut::kF32},
        {b.xn, L.gate_up, L.gate_up_bias, b.gate_up, r, c.hidden_size, 2 * c.intermediate_size,
         kernels::GemmOut::kBf16},
        {b.act, L.down, L.down_bias, b.delta, r, c.intermediate_size, c.hidden_size,
         kernels::GemmOut::kF32},
    };
    for (const auto& g : shapes) LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Prepare(g), "GEMM plan"));
  }
  for (const int32_t r : sample_rows) {
    // The head, and the last layer's o and MLP products on the sampling rows alone (Forward).
    const kernels::GemmArgs shapes[] = {
        {b.xs, weights_.head, nullptr, b.logits, r, c.hidden_size, c.vocab_size,
         kernels::GemmOut::kF32},
        {b.attn_sampled, L.o, L.o_bias, b.delta, r, c.q_dim(), c.hidden_size,
         kernels::GemmOut::kF32},
        {b.xn, L.gate_up, L.gate_up_bias, b.gate_up, r, c.hidden_size, 2 * c.intermediate_size,
         kernels::GemmOut::kBf16},
        {b.act, L.down, L.down_bias, b.delta, r, c.intermediate_size, c.hidden_size,
         kernels::GemmOut::kF32},
    };
    for (const auto& g : shapes) LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Prepare(g), "GEMM plan"));
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Forward(const ForwardShape& s, const StepSizes& z, const StepBuffers& b,
                                const KvCache& kv, cudaStream_t st, KernelClock* clock) {
  const model::ModelConfig& c = config_;
  const auto mark = [&](KernelClass k) {
    if (clock != nullptr) clock->Mark(k, st);
  };
  const int32_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  kernels::StepInputsParams in{};
  in.prefill_slot = s.prefill_slot;
  in.prefill_pos = s.prefill_pos;
  in.prefill_token = s.prefill_token;
  in.num_prefill = s.prefill_rows;
  in.decode_list = b.decode_list;
  in.num_decode = s.decode_rows;
  in.slots = b.slots;
  in.vocab = c.vocab_size;
  in.row_token = b.row_token;
  in.row_pos = b.row_pos;
  in.row_slot = b.row_slot;
  in.embedding = weights_.embedding;  // and each row's embedding, in the same launch
  in.x = b.x;
  in.hidden = H;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchStepInputs(in, st), "step inputs and embedding");
  mark(KernelClass::kOther);

  kernels::AttentionParams attn{};
  attn.qkv = b.qkv;
  attn.row_pos = b.row_pos;
  attn.row_slot = b.row_slot;
  attn.block_tables = b.block_tables;
  attn.max_blocks_per_seq = z.max_blocks_per_seq;
  attn.out = b.attn;
  attn.partial_out = b.part_out;
  attn.partial_max = b.part_max;
  attn.partial_sum = b.part_sum;
  attn.split_arrivals = b.split_arrivals;
  attn.num_heads = c.num_heads;
  attn.num_kv_heads = c.num_kv_heads;
  attn.head_dim = c.head_dim;
  attn.block_tokens = z.engine.block_tokens;
  attn.sliding_window = c.sliding_window;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn.tensor_cores = options_.switches.tensor_core_decode;
  kernels::PrefillAttentionParams prefill{};
  prefill.qkv = b.qkv;
  prefill.block_tables = b.block_tables;
  prefill.max_blocks_per_seq = z.max_blocks_per_seq;
  prefill.chunks = s.prefill_chunks;
  prefill.tiles = s.prefill_tiles;
  prefill.num_tiles = s.num_prefill_tiles;
  prefill.out = b.attn;
  prefill.num_heads = c.num_heads;
  prefill.num_kv_heads = c.num_kv_heads;
  prefill.head_dim = c.head_dim;
  prefill.block_tokens = z.engine.block_tokens;
  prefill.sliding_window = c.sliding_window;
  prefill.scale = attn.scale;

  // The residual stream x (b.x, `rows` rows). A sublayer's output is added to it either by the
  // product that makes it (accumulate: at a few rows, options_.switches.fused_norm) or by the next
  // norm
  // (`pending` is then that output, b.delta). A norm is the next product's prologue where that
  // product can take it (nothing pending, the GEMV path); otherwise LaunchRmsNorm writes its
  // input, b.xn. Same bits.
  //
  // In a step with prompt rows the last layer writes every row's K and V, but only the sampling
  // rows go on: their attention (the prefill tiles that hold them, and the decode rows), then
  // x and the attention output gathered to the front of x_sampled and attn_sampled, so the o and
  // MLP products and the final norm run on s.sample_rows rows (none when nothing samples). A
  // decode-only step's rows all sample, in order, so it runs whole.
  float* x = b.x;
  int32_t rows = s.rows;
  const bf16* attn_in = b.attn;
  const bool sampled_rows_only =
      options_.switches.last_layer_sampled_rows && s.prefill_rows > 0 && !s.identity_sampling;
  const float* pending = nullptr;
  const auto norm_before = [&](kernels::GemmArgs& args,
                               const kernels::NormInput* norm) -> absl::Status {
    if (options_.switches.fused_norm && pending == nullptr) {
      args.norm = norm;
      if (gemm_.FusesEpilogue(args)) return absl::OkStatus();
      args.norm = nullptr;
    }
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchRmsNorm({x, pending, norm->weight, b.xn, nullptr, rows, H, eps}, st),
        "rmsnorm");
    mark(KernelClass::kNorms);
    pending = nullptr;
    return absl::OkStatus();
  };
  const auto residual_product = [&](kernels::GemmArgs args, const char* what) -> absl::Status {
    kernels::GemmArgs into_x = args;
    into_x.y = x;
    into_x.accumulate = true;
    const bool fused = options_.switches.fused_norm && gemm_.FusesEpilogue(into_x);
    LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run(fused ? into_x : args, st), what));
    pending = fused ? nullptr : b.delta;
    return absl::OkStatus();
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaLayerWeights& L = weights_.layers[l];
    const bool last_sampled_only = sampled_rows_only && l + 1 == c.num_layers;
    const kernels::NormInput input_norm{x, L.input_norm, eps};
    kernels::RopeKvParams rope{};
    rope.qkv = b.qkv;
    rope.row_pos = b.row_pos;
    rope.row_slot = b.row_slot;
    rope.block_tables = b.block_tables;
    rope.max_blocks_per_seq = z.max_blocks_per_seq;
    rope.cos_table = b.rope_cos;
    rope.sin_table = b.rope_sin;
    rope.k_cache = kv.k[l];
    rope.v_cache = kv.v[l];
    rope.rows = s.rows;
    rope.num_heads = c.num_heads;
    rope.num_kv_heads = c.num_kv_heads;
    rope.head_dim = c.head_dim;
    rope.block_tokens = z.engine.block_tokens;
    kernels::GemmArgs qkv{b.xn,   L.qkv, L.qkv_bias, b.qkv,
                          s.rows, H,     z.qkv_dim,  kernels::GemmOut::kBf16};
    qkv.rope_kv = &rope;
    LLM_RETURN_IF_ERROR(norm_before(qkv, &input_norm));
    if (gemm_.FusesEpilogue(qkv)) {
      // A few rows: RoPE and the K/V write are the GEMV's epilogue.
      LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run(qkv, st), "qkv projection"));
      mark(KernelClass::kProducts);
    } else {
      qkv.rope_kv = nullptr;
      LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run(qkv, st), "qkv projection"));
      mark(KernelClass::kProducts);
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRopeKv(rope, st), "rope");
      mark(KernelClass::kRopeKv);
    }
    if (last_sampled_only && s.sample_rows == 0) break;  // K and V written; nothing samples
    attn.k_cache = kv.k[l];
    attn.v_cache = kv.v[l];
    if (s.prefill_rows > 0 && options_.switches.tiled_prefill) {
      prefill.k_cache = kv.k[l];
      prefill.v_cache = kv.v[l];
      if (last_sampled_only) {
        prefill.tiles = s.last_token_tiles;
        prefill.num_tiles = s.num_last_token_tiles;
      }
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchPrefillAttention(prefill, st), "prefill attention");
      mark(KernelClass::kAttention);
    } else if (s.prefill_rows > 0) {
      attn.row_begin = 0;
      attn.rows = s.prefill_rows;
      attn.splits = 1;
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(attn, st), "prefill attention");
      mark(KernelClass::kAttention);
    }
    if (s.decode_rows > 0) {
      attn.row_begin = s.prefill_rows;
      attn.rows = s.decode_rows;
      attn.splits = DecodeSplitsFor(z, s.decode_rows);
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(attn, st), "decode attention");
      mark(KernelClass::kAttention);
    }
    if (last_sampled_only) {
      // Nothing is pending here: the input norm took the last delta into b.x.
      kernels::GatherRowsParams g{};
      g.rows = s.sample_rows_index;
      g.n = s.sample_rows;
      g.tables = 2;
      g.src[0] = b.x;
      g.dst[0] = b.x_sampled;
      g.row_bytes[0] = H * static_cast<int32_t>(sizeof(float));
      g.src[1] = b.attn;
      g.dst[1] = b.attn_sampled;
      g.row_bytes[1] = c.q_dim() * static_cast<int32_t>(sizeof(bf16));
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(g, st), "sampling rows");
      mark(KernelClass::kOther);
      x = b.x_sampled;
      rows = s.sample_rows;
      attn_in = b.attn_sampled;
    }
    LLM_RETURN_IF_ERROR(residual_product(
        {attn_in, L.o, L.o_bias, b.delta, rows, c.q_dim(), H, kernels::GemmOut::kF32},
        "o projection"));
    mark(KernelClass::kProducts);
    const kernels::NormInput post_norm{x, L.post_norm, eps};
    kernels::GemmArgs gated{b.xn, L.gate_up, L.gate_up_bias,         b.act, rows,
                            H,    I,         kernels::GemmOut::kBf16};
    gated.silu_mul = true;
    LLM_RETURN_IF_ERROR(norm_before(gated, &post_norm));
    if (gemm_.FusesEpilogue(gated)) {
      // A few rows: SiLU-and-multiply is the GEMV's epilogue (no gate_up intermediate).
      LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run(gated, st), "gate/up projection"));
      mark(KernelClass::kProducts);
    } else {
      LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run({b.xn, L.gate_up, L.gate_up_bias, b.gate_up, rows,
                                                  H, 2 * I, kernels::GemmOut::kBf16},
                                                 st),
                                       "gate/up projection"));
      mark(KernelClass::kProducts);
      LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSiluMul({b.gate_up, b.act, rows, I}, st), "silu");
      mark(KernelClass::kOther);
    }
    LLM_RETURN_IF_ERROR(
        residual_product({b.act, L.down, L.down_bias, b.delta, rows, I, H, kernels::GemmOut::kF32},
                         "down projection"));
    mark(KernelClass::kProducts);
  }

  if (s.sample_rows == 0) return absl::OkStatus();
  const int32_t* rows_index = s.identity_sampling ? nullptr : s.sample_rows_index;
  // The final norm stays a kernel: the lm head's grid is many waves (gemv.h, norm prologue).
  // After a last layer on the sampling rows alone, they are x's first rows already.
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRmsNorm({x, pending, weights_.final_norm, b.xs,
                              sampled_rows_only ? nullptr : rows_index, s.sample_rows, H, eps},
                             st),
      "final rmsnorm");
  mark(KernelClass::kNorms);
  const int32_t* sample_slot = b.row_slot;
  const int32_t* sample_pos = b.row_pos;
  if (!s.identity_sampling) {
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(b.row_slot, rows_index, b.sample_slot, s.sample_rows, st),
        "sampling rows");
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(b.row_pos, rows_index, b.sample_pos, s.sample_rows, st),
        "sampling rows");
    mark(KernelClass::kOther);
    sample_slot = b.sample_slot;
    sample_pos = b.sample_pos;
  }
  LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run({b.xs, weights_.head, nullptr, b.logits, s.sample_rows,
                                              H, c.vocab_size, kernels::GemmOut::kF32},
                                             st),
                                   "lm head"));
  mark(KernelClass::kProducts);
  kernels::SampleParams sp{};
  sp.logits = b.logits;
  sp.probs = b.probs;
  sp.row_slot = sample_slot;
  sp.row_pos = sample_pos;
  sp.slots = b.slots;
  sp.out = b.out;
  sp.rows = s.sample_rows;
  sp.vocab = c.vocab_size;
  sp.valid_vocab = options_.valid_vocab_size;
  sp.work = b.sample_work;
  sp.argmax_only = s.argmax_only;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSample(sp, st), "sampling");
  mark(KernelClass::kSampler);
  return absl::OkStatus();
}

}  // namespace llm::runner::cuda
