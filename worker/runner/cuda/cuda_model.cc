#include "worker/runner/cuda/cuda_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/gather_rows.h"
#include "kernels/elementwise/head_rmsnorm.h"
#include "kernels/elementwise/quantize_rows.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/launch.h"
#include "kernels/sampling/sampling.h"
#include "kernels/speculative/draft_step.h"
#include "kernels/speculative/ngram_propose.h"
#include "kernels/speculative/oracle_propose.h"
#include "kernels/speculative/verify.h"
#include "kernels/step/step_inputs.h"

namespace llm::runner::cuda {
namespace {

absl::Status CublasStatus(int status, const char* what) {
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt status ", status));
}

// A product's arguments: its weight and bias, on input x into y.
kernels::GemmArgs ProductArgs(const CudaProduct& product, const bf16* x, void* y, int32_t rows,
                              int32_t in, int32_t out, kernels::GemmOut out_type) {
  kernels::GemmArgs g{x, product.w, product.bias, y, rows, in, out, out_type};
  g.bias_bf16 = product.bias_bf16;
  return g;
}

}  // namespace

// The residual stream x (b.x, `rows` rows). A sublayer's output is added to it either by the
// product that makes it (accumulate: the GEMV's at a few rows, fused_norm; cuBLASLt's beta = 1
// above, gemm_residual) or by the next norm (`pending` is then that output, b.delta). A norm is the
// next product's prologue where that product can take it (nothing pending, the GEMV path);
// otherwise LaunchRmsNorm writes its input: b.xn, or E4M3 rows for an FP8 product on cuBLASLt. Same
// bits.
//
// In a step with prompt rows the last layer writes every row's K and V, but only the sampling
// rows go on: their attention (the prefill tiles that hold them, and the decode rows), then
// x and the attention output gathered to the front of x_sampled and attn_sampled, so the o and
// MLP products and the final norm run on s.sample_rows rows (none when nothing samples). A
// decode-only step's rows all sample, in order, so it runs whole.
struct CudaModel::Pass {
  const ForwardShape& s;
  const StepSizes& z;
  const StepBuffers& b;
  const KvCache& kv;
  cudaStream_t st;
  KernelClock* clock;
  float* x;
  int32_t rows;
  const bf16* attn_in;
  bool sampled_rows_only;
  const float* pending = nullptr;
  kernels::AttentionParams attn{};
  kernels::PrefillAttentionParams prefill{};

  void Mark(KernelClass k) const {
    if (clock != nullptr) clock->Mark(k, st);
  }
};

int64_t LayerWeightBytes(const model::ModelConfig& c, bool fp8) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const int64_t qkv = int64_t{c.q_dim()} + 2 * int64_t{c.kv_dim()};
  const int64_t products = h * qkv + int64_t{c.q_dim()} * h + 3 * h * i;
  return (fp8 ? 1 : 2) * products + 2 * 2 * h;
}

bool ProgrammaticLaunchPays(const model::ModelConfig& config, bool fp8) {
  return LayerWeightBytes(config, fp8) < kPdlLayerBytes;
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Load(const model::ModelConfig& config,
                                                           const model::TensorStore* store,
                                                           const model::QuantScheme& quant,
                                                           uint64_t seed,
                                                           const CudaModelOptions& options,
                                                           cudaStream_t stream) {
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
    LLM_ASSIGN_OR_RETURN(m->weights_, UploadCudaWeights(config, *store, quant, stream));
  } else {
    LLM_ASSIGN_OR_RETURN(m->weights_, RandomCudaWeights(config, seed, quant, stream));
  }
  return m;
}

absl::Status CudaModel::PrepareProducts(const StepSizes& z, const StepBuffers& b,
                                        std::span<const int32_t> rows,
                                        std::span<const int32_t> sample_rows) {
  const model::ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layers.front();
  const int32_t H = c.hidden_size, I = c.intermediate_size;
  using kernels::GemmOut;
  // An FP8 product's input as the step's kernels write it (tuning runs the products).
  const kernels::Fp8Input xq{b.xq, b.xq_scale, weights_.input_scales};
  const auto prepare = [&](const char* what, kernels::GemmArgs g) {
    if (g.w.fp8()) g.xq = xq;
    const int status = gemm_.Prepare(g);
    if (status == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("GEMM plan of the ", what, " product at ", g.rows,
                                            " rows (in ", g.in, ", out ", g.out,
                                            "): cuBLASLt status ", status));
  };
  // A layer's o and MLP products at `r` rows, o reading `attn`.
  const auto prepare_o_and_mlp = [&](int32_t r, const bf16* attn) {
    LLM_RETURN_IF_ERROR(
        prepare("o", ProductArgs(L.o, attn, b.delta, r, c.q_dim(), H, GemmOut::kF32)));
    LLM_RETURN_IF_ERROR(
        prepare("gate/up", ProductArgs(L.gate_up, b.xn, b.gate_up, r, H, 2 * I, GemmOut::kBf16)));
    return prepare("down", ProductArgs(L.down, b.act, b.delta, r, I, H, GemmOut::kF32));
  };
  for (const int32_t r : rows) {
    LLM_RETURN_IF_ERROR(
        prepare("qkv", ProductArgs(L.qkv, b.xn, b.qkv, r, H, z.qkv_dim, GemmOut::kBf16)));
    LLM_RETURN_IF_ERROR(prepare_o_and_mlp(r, b.attn));
  }
  for (const int32_t r : sample_rows) {
    // The head, and the last layer's o and MLP products on the sampling rows alone (Forward).
    LLM_RETURN_IF_ERROR(prepare(
        "lm_head", {b.xs, weights_.head, nullptr, b.logits, r, H, c.vocab_size, GemmOut::kF32}));
    LLM_RETURN_IF_ERROR(prepare_o_and_mlp(r, b.attn_sampled));
  }
  return absl::OkStatus();
}

kernels::Fp8Out CudaModel::Fp8OutFor(const Pass& p, const CudaProduct& product) const {
  kernels::Fp8Out q;
  q.x = p.b.xq;
  q.scale = p.b.xq_scale;
  q.scales = weights_.input_scales;
  q.static_scale = product.input_scale;
  return q;
}

absl::Status CudaModel::RunProduct(Pass& p, const kernels::GemmArgs& args, const char* what) {
  LLM_RETURN_IF_ERROR(CublasStatus(gemm_.Run(args, p.st), what));
  p.Mark(KernelClass::kProducts);
  return absl::OkStatus();
}

absl::Status CudaModel::NormBefore(Pass& p, kernels::GemmArgs& args, const kernels::NormInput& norm,
                                   const CudaProduct& product) {
  const bool fp8_input = gemm_.WantsFp8Input(args);
  if (options_.switches.fused_norm && p.pending == nullptr && !fp8_input) {
    args.norm = &norm;
    if (gemm_.FusesEpilogue(args)) return absl::OkStatus();
    args.norm = nullptr;
  }
  kernels::RmsNormParams rn{p.x,     p.pending, norm.weight,         p.b.xn,
                            nullptr, p.rows,    config_.hidden_size, norm.eps};
  if (fp8_input) {
    rn.fp8 = Fp8OutFor(p, product);
    args.xq = rn.fp8.Input();
  }
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRmsNorm(rn, p.st), "rmsnorm");
  p.Mark(KernelClass::kNorms);
  p.pending = nullptr;
  return absl::OkStatus();
}

absl::Status CudaModel::QuantizeInputIfWanted(Pass& p, kernels::GemmArgs& args, const bf16* x,
                                              const CudaProduct& product) {
  if (!gemm_.WantsFp8Input(args)) return absl::OkStatus();
  const kernels::QuantizeRowsParams q{x, args.rows, args.in, Fp8OutFor(p, product)};
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchQuantizeRows(q, p.st), "FP8 input");
  p.Mark(KernelClass::kOther);
  args.xq = q.out.Input();
  return absl::OkStatus();
}

absl::Status CudaModel::ResidualProduct(Pass& p, kernels::GemmArgs args, const char* what) {
  kernels::GemmArgs into_x = args;
  into_x.y = p.x;
  into_x.accumulate = true;
  // The GEMV's accumulate (fused_norm) or cuBLASLt's beta = 1 (gemm_residual): one question
  // each, asked only where its switch is on.
  const CudaSwitches& sw = options_.switches;
  const bool fused = gemm_.OnGemv(into_x) ? sw.fused_norm && gemm_.FusesEpilogue(into_x)
                                          : sw.gemm_residual && gemm_.CublasLtAccumulates(into_x);
  LLM_RETURN_IF_ERROR(RunProduct(p, fused ? into_x : args, what));
  p.pending = fused ? nullptr : p.b.delta;
  return absl::OkStatus();
}

absl::Status CudaModel::DraftRows(Pass& p) {
  const ForwardShape& s = p.s;
  kernels::DraftRowsParams rows{};
  rows.prefill_slot = s.prefill_slot;
  rows.prefill_pos = s.prefill_pos;
  rows.prefill_token = s.prefill_token;
  rows.num_prefill = s.prefill_rows;
  rows.num_rows = s.rows;
  rows.decode_list = p.b.decode_list;
  rows.decode_draft = s.decode_draft;
  rows.decode_limit = s.decode_limit;
  rows.round = s.draft_round;
  rows.num_decode = s.draft_round == kernels::kDraftPromptPass
                        ? 0
                        : s.decode_rows / kernels::DraftRowsPerSlot(s.draft_round);
  rows.slots = p.b.slots;
  rows.vocab = config_.vocab_size;
  rows.row_token = p.b.row_token;
  rows.row_pos = p.b.row_pos;
  rows.row_slot = p.b.row_slot;
  rows.embedding = weights_.embedding;
  rows.x = p.b.x;
  rows.hidden = config_.hidden_size;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchDraftRows(rows, p.st), "draft rows");
  p.Mark(KernelClass::kOther);
  return absl::OkStatus();
}

absl::Status CudaModel::Propose(Pass& p) {
  const ForwardShape& s = p.s;
  if (options_.oracle) {
    const kernels::OracleProposeParams oracle{p.b.decode_list, s.decode_draft, s.decode_limit,
                                              s.decode_rows / s.group, p.b.slots};
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchOraclePropose(oracle, p.st), "oracle proposals");
    return absl::OkStatus();
  }
  // The decoding slots' proposals, from their histories, before their rows are built.
  kernels::NgramProposeParams propose{};
  propose.decode_list = p.b.decode_list;
  propose.decode_draft = s.decode_draft;
  propose.decode_limit = s.decode_limit;
  propose.num_decode = s.decode_rows / s.group;
  propose.slots = p.b.slots;
  propose.min_n = options_.ngram_min;
  propose.max_n = options_.ngram_max;
  // Timed with the step's inputs (both kOther): the clock's marks per step are fixed.
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchNgramPropose(propose, p.st), "n-gram proposals");
  return absl::OkStatus();
}

absl::Status CudaModel::CopyProposalsBack(Pass& p) {
  const kernels::DeviceSlots& slots = p.b.slots;
  const size_t counts = static_cast<size_t>(p.z.engine.max_slots) * sizeof(int32_t);
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.s.proposals_back, slots.num_proposals, counts,
                                           cudaMemcpyDeviceToHost, p.st),
                           "proposals' copy back");
  LLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.s.proposals_back + counts, slots.proposals,
                                           counts * static_cast<size_t>(slots.max_proposals),
                                           cudaMemcpyDeviceToHost, p.st),
                           "proposals' copy back");
  // Under graph capture an external event node, recorded at each replay (the external flag is
  // invalid outside capture: an eager step records as usual).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LLM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(p.st, &capture), "proposals' event");
  LLM_CUDA_RETURN_IF_ERROR(
      cudaEventRecordWithFlags(p.s.proposals_ready, p.st,
                               capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                        : cudaEventRecordDefault),
      "proposals' event");
  return absl::OkStatus();
}

absl::Status CudaModel::StepRows(Pass& p) {
  const ForwardShape& s = p.s;
  if (s.draft_round != ForwardShape::kNotDraft) return DraftRows(p);
  // The draft model's rounds made the proposals before this pass (proposals_made_before).
  if (s.group > 1 && !options_.proposals_made_before) LLM_RETURN_IF_ERROR(Propose(p));
  if (s.group > 1 && s.proposals_back != nullptr) LLM_RETURN_IF_ERROR(CopyProposalsBack(p));
  kernels::StepInputsParams in{};
  in.prefill_slot = s.prefill_slot;
  in.prefill_pos = s.prefill_pos;
  in.prefill_token = s.prefill_token;
  in.num_prefill = s.prefill_rows;
  in.decode_list = p.b.decode_list;
  in.num_decode = s.decode_rows;
  in.slots = p.b.slots;
  in.vocab = config_.vocab_size;
  in.row_token = p.b.row_token;
  in.row_pos = p.b.row_pos;
  in.row_slot = p.b.row_slot;
  in.embedding = weights_.embedding;  // and each row's embedding, in the same launch
  in.x = p.b.x;
  in.hidden = config_.hidden_size;
  in.group = s.group;
  in.row_offset = s.group > 1 ? p.b.row_offset : nullptr;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchStepInputs(in, p.st), "step inputs and embedding");
  p.Mark(KernelClass::kOther);
  return absl::OkStatus();
}

absl::Status CudaModel::StepInputs(Pass& p) {
  LLM_RETURN_IF_ERROR(StepRows(p));
  const ForwardShape& s = p.s;
  const model::ModelConfig& c = config_;
  kernels::AttentionParams& attn = p.attn;
  attn.qkv = p.b.qkv;
  attn.row_pos = p.b.row_pos;
  attn.row_slot = p.b.row_slot;
  attn.block_tables = p.b.block_tables;
  attn.max_blocks_per_seq = p.z.max_blocks_per_seq;
  attn.out = p.b.attn;
  attn.partial_out = p.b.part_out;
  attn.partial_max = p.b.part_max;
  attn.partial_sum = p.b.part_sum;
  attn.split_arrivals = p.b.split_arrivals;
  attn.num_heads = c.num_heads;
  attn.num_kv_heads = c.num_kv_heads;
  attn.head_dim = c.head_dim;
  attn.block_tokens = p.z.engine.block_tokens;
  attn.sliding_window = c.sliding_window;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn.tensor_cores = options_.switches.tensor_core_decode;
  kernels::PrefillAttentionParams& prefill = p.prefill;
  prefill.qkv = p.b.qkv;
  prefill.block_tables = p.b.block_tables;
  prefill.max_blocks_per_seq = p.z.max_blocks_per_seq;
  prefill.chunks = s.prefill_chunks;
  prefill.tiles = s.prefill_tiles;
  prefill.num_tiles = s.num_prefill_tiles;
  prefill.out = p.b.attn;
  prefill.num_heads = c.num_heads;
  prefill.num_kv_heads = c.num_kv_heads;
  prefill.head_dim = c.head_dim;
  prefill.block_tokens = p.z.engine.block_tokens;
  prefill.sliding_window = c.sliding_window;
  prefill.scale = attn.scale;
  return absl::OkStatus();
}

kernels::RopeKvParams CudaModel::RopeParams(const Pass& p, int l) const {
  const model::ModelConfig& c = config_;
  kernels::RopeKvParams rope{};
  rope.qkv = p.b.qkv;
  rope.row_pos = p.b.row_pos;
  rope.row_slot = p.b.row_slot;
  rope.block_tables = p.b.block_tables;
  rope.max_blocks_per_seq = p.z.max_blocks_per_seq;
  rope.cos_table = p.b.rope_cos;
  rope.sin_table = p.b.rope_sin;
  rope.k_cache = p.kv.k[l];
  rope.v_cache = p.kv.v[l];
  rope.kv = p.kv.format[l];
  rope.rows = p.s.rows;
  rope.num_heads = c.num_heads;
  rope.num_kv_heads = c.num_kv_heads;
  rope.head_dim = c.head_dim;
  rope.block_tokens = p.z.engine.block_tokens;
  return rope;
}

absl::Status CudaModel::Attend(Pass& p, int l, bool last_sampled_only) {
  const ForwardShape& s = p.s;
  p.attn.k_cache = p.kv.k[l];
  p.attn.v_cache = p.kv.v[l];
  p.attn.kv = p.kv.format[l];
  if (s.prefill_rows > 0 && options_.switches.tiled_prefill) {
    p.prefill.k_cache = p.kv.k[l];
    p.prefill.v_cache = p.kv.v[l];
    p.prefill.kv = p.kv.format[l];
    p.prefill.tma = p.kv.prefill_maps.empty() ? nullptr : &p.kv.prefill_maps[l];
    if (last_sampled_only) {
      p.prefill.tiles = s.last_token_tiles;
      p.prefill.num_tiles = s.num_last_token_tiles;
    }
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchPrefillAttention(p.prefill, p.st), "prefill attention");
    p.Mark(KernelClass::kAttention);
  } else if (s.prefill_rows > 0) {
    p.attn.row_begin = 0;
    p.attn.rows = s.prefill_rows;
    p.attn.splits = 1;
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(p.attn, p.st), "prefill attention");
    p.Mark(KernelClass::kAttention);
  }
  if (s.decode_rows > 0) {
    p.attn.row_begin = s.prefill_rows;
    p.attn.rows = s.decode_rows;
    p.attn.splits = DecodeSplitsFor(p.z, s.decode_rows);
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(p.attn, p.st), "decode attention");
    p.Mark(KernelClass::kAttention);
  }
  if (!last_sampled_only) return absl::OkStatus();
  // Nothing is pending here: the input norm took the last delta into b.x.
  const StepBuffers& b = p.b;
  kernels::GatherRowsParams g{};
  g.rows = s.sample_rows_index;
  g.n = s.sample_rows;
  g.tables = 2;
  g.src[0] = b.x;
  g.dst[0] = b.x_sampled;
  g.row_bytes[0] = config_.hidden_size * static_cast<int32_t>(sizeof(float));
  g.src[1] = b.attn;
  g.dst[1] = b.attn_sampled;
  g.row_bytes[1] = config_.q_dim() * static_cast<int32_t>(sizeof(bf16));
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchGatherRows(g, p.st), "sampling rows");
  p.Mark(KernelClass::kOther);
  p.x = b.x_sampled;
  p.rows = s.sample_rows;
  p.attn_in = b.attn_sampled;
  return absl::OkStatus();
}

absl::Status CudaModel::AttentionBlock(Pass& p, int l, bool* done) {
  const model::ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layers[l];
  const bool last_sampled_only = p.sampled_rows_only && l + 1 == c.num_layers;
  const kernels::NormInput input_norm{p.x, L.input_norm, static_cast<float>(c.rms_norm_eps)};
  const kernels::RopeKvParams rope = RopeParams(p, l);
  kernels::GemmArgs qkv = ProductArgs(L.qkv, p.b.xn, p.b.qkv, p.s.rows, c.hidden_size, p.z.qkv_dim,
                                      kernels::GemmOut::kBf16);
  // A few rows: RoPE and the K/V write are the GEMV's epilogue; otherwise a kernel of their own
  // after the product. Decided before the norm, which makes the input that product takes. With
  // q/k norms (qwen3) the heads are normalised between the product and RoPE: never fused.
  qkv.rope_kv = &rope;
  const bool fused_rope = !c.qk_norm && gemm_.FusesEpilogue(qkv);
  if (!fused_rope) qkv.rope_kv = nullptr;
  LLM_RETURN_IF_ERROR(NormBefore(p, qkv, input_norm, L.qkv));
  LLM_RETURN_IF_ERROR(RunProduct(p, qkv, "qkv projection"));
  if (c.qk_norm) {
    const kernels::HeadRmsNormParams heads{
        p.b.qkv,        L.q_norm,    L.k_norm,
        p.s.rows,       p.z.qkv_dim, c.num_heads,
        c.num_kv_heads, c.head_dim,  static_cast<float>(c.rms_norm_eps)};
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchHeadRmsNorm(heads, p.st), "q/k head norm");
    p.Mark(KernelClass::kNorms);
  }
  if (!fused_rope) {
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchRopeKv(rope, p.st), "rope");
    p.Mark(KernelClass::kRopeKv);
  }
  if (last_sampled_only && p.s.sample_rows == 0) {  // K and V written; nothing samples
    *done = true;
    return absl::OkStatus();
  }
  LLM_RETURN_IF_ERROR(Attend(p, l, last_sampled_only));
  kernels::GemmArgs o = ProductArgs(L.o, p.attn_in, p.b.delta, p.rows, c.q_dim(), c.hidden_size,
                                    kernels::GemmOut::kF32);
  LLM_RETURN_IF_ERROR(QuantizeInputIfWanted(p, o, p.attn_in, L.o));
  return ResidualProduct(p, o, "o projection");
}

absl::Status CudaModel::MlpBlock(Pass& p, int l) {
  const model::ModelConfig& c = config_;
  const StepBuffers& b = p.b;
  const CudaLayerWeights& L = weights_.layers[l];
  const int32_t H = c.hidden_size, I = c.intermediate_size;
  const kernels::NormInput post_norm{p.x, L.post_norm, static_cast<float>(c.rms_norm_eps)};
  // A few rows: SiLU-and-multiply is the GEMV's epilogue (no gate_up intermediate); otherwise
  // the plain product into b.gate_up, then SiLU's kernel. Decided before the norm, which makes
  // the input that product takes.
  kernels::GemmArgs gated =
      ProductArgs(L.gate_up, b.xn, b.act, p.rows, H, I, kernels::GemmOut::kBf16);
  gated.silu_mul = true;
  const bool fused_silu = gemm_.FusesEpilogue(gated);
  if (!fused_silu) {
    gated.silu_mul = false;
    gated.y = b.gate_up;
    gated.out = 2 * I;
  }
  LLM_RETURN_IF_ERROR(NormBefore(p, gated, post_norm, L.gate_up));
  LLM_RETURN_IF_ERROR(RunProduct(p, gated, "gate/up projection"));
  kernels::GemmArgs down =
      ProductArgs(L.down, b.act, b.delta, p.rows, I, H, kernels::GemmOut::kF32);
  if (fused_silu) {
    LLM_RETURN_IF_ERROR(QuantizeInputIfWanted(p, down, b.act, L.down));
  } else {
    kernels::SiluMulParams silu{b.gate_up, b.act, p.rows, I};
    if (gemm_.WantsFp8Input(down)) {
      silu.fp8 = Fp8OutFor(p, L.down);  // SiLU writes the down product's E4M3 rows
      down.xq = silu.fp8.Input();
    }
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSiluMul(silu, p.st), "silu");
    p.Mark(KernelClass::kOther);
  }
  return ResidualProduct(p, down, "down projection");
}

absl::Status CudaModel::Head(Pass& p) {
  const ForwardShape& s = p.s;
  const StepBuffers& b = p.b;
  const model::ModelConfig& c = config_;
  if (s.sample_rows == 0) return absl::OkStatus();
  const int32_t* rows_index = s.identity_sampling ? nullptr : s.sample_rows_index;
  // The final norm stays a kernel: the lm head's grid is many waves (gemv.h, norm prologue).
  // After a last layer on the sampling rows alone, they are x's first rows already.
  LLM_CUDA_RETURN_IF_ERROR(
      kernels::LaunchRmsNorm(
          {p.x, p.pending, weights_.final_norm, b.xs, p.sampled_rows_only ? nullptr : rows_index,
           s.sample_rows, c.hidden_size, static_cast<float>(c.rms_norm_eps)},
          p.st),
      "final rmsnorm");
  p.Mark(KernelClass::kNorms);
  if (!s.identity_sampling) {
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(b.row_slot, rows_index, b.sample_slot, s.sample_rows, p.st),
        "sampling rows");
    LLM_CUDA_RETURN_IF_ERROR(
        kernels::LaunchGatherInts(b.row_pos, rows_index, b.sample_pos, s.sample_rows, p.st),
        "sampling rows");
    if (s.group > 1) {
      LLM_CUDA_RETURN_IF_ERROR(
          kernels::LaunchGatherInts(b.row_offset, rows_index, b.sample_offset, s.sample_rows, p.st),
          "sampling rows");
    }
    p.Mark(KernelClass::kOther);
  }
  LLM_RETURN_IF_ERROR(RunProduct(p,
                                 {b.xs, weights_.head, nullptr, b.logits, s.sample_rows,
                                  c.hidden_size, c.vocab_size, kernels::GemmOut::kF32},
                                 "lm head"));
  if (s.draft_round >= 0) {
    const kernels::DraftPickParams pick{b.logits,
                                        c.vocab_size,
                                        options_.valid_vocab_size,
                                        b.decode_list,
                                        s.decode_draft,
                                        s.decode_limit,
                                        s.sample_rows / kernels::DraftRowsPerSlot(s.draft_round),
                                        s.draft_round,
                                        b.slots};
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchDraftPick(pick, p.st), "draft proposals");
    p.Mark(KernelClass::kSampler);
    return absl::OkStatus();
  }
  if (s.defer_sampling) return absl::OkStatus();
  LLM_RETURN_IF_ERROR(Sample(s, b, p.st));
  p.Mark(KernelClass::kSampler);
  return absl::OkStatus();
}

absl::Status CudaModel::Sample(const ForwardShape& s, const StepBuffers& b, cudaStream_t st) {
  kernels::SampleParams sp{};
  sp.logits = b.logits;
  sp.probs = b.probs;
  // Head gathered the sampling rows' slots and positions unless every row samples in order.
  sp.row_slot = s.identity_sampling ? b.row_slot : b.sample_slot;
  sp.row_pos = s.identity_sampling ? b.row_pos : b.sample_pos;
  sp.slots = b.slots;
  sp.out = b.out;
  sp.rows = s.sample_rows;
  sp.vocab = config_.vocab_size;
  sp.valid_vocab = options_.valid_vocab_size;
  sp.work = b.sample_work;
  sp.argmax_only = s.argmax_only;
  sp.mask_index = s.mask_index;
  sp.masks = s.masks;
  sp.mask_words = s.mask_words;
  if (s.group > 1) sp.row_offset = s.identity_sampling ? b.row_offset : b.sample_offset;
  LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchSample(sp, st), "sampling");
  if (s.group > 1) {
    // The verify groups' accepted runs, appended token by token (kernels/speculative/verify.h).
    const kernels::VerifyParams verify{sp.row_slot,   sp.row_pos, sp.row_offset,     b.out,
                                       s.sample_rows, b.slots,    config_.vocab_size};
    LLM_CUDA_RETURN_IF_ERROR(kernels::LaunchVerify(verify, st), "speculative verification");
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Forward(const ForwardShape& s, const StepSizes& z, const StepBuffers& b,
                                const KvCache& kv, cudaStream_t st, KernelClock* clock) {
  Pass p{s,
         z,
         b,
         kv,
         st,
         clock,
         b.x,
         s.rows,
         b.attn,
         options_.switches.last_layer_sampled_rows && s.prefill_rows > 0 && !s.identity_sampling};
  LLM_RETURN_IF_ERROR(StepInputs(p));
  for (int l = 0; l < config_.num_layers; ++l) {
    bool done = false;
    LLM_RETURN_IF_ERROR(AttentionBlock(p, l, &done));
    if (done) return absl::OkStatus();  // the last layer's K/V written; nothing samples
    LLM_RETURN_IF_ERROR(MlpBlock(p, l));
  }
  return Head(p);
}

}  // namespace llm::runner::cuda
