#include <cmath>
#include <utility>

#include "kernels/gemm/cublaslt_loader.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"

namespace llm::kernels {

namespace {

// The loaded cuBLASLt; only called once Init has loaded it.
const CublasLtApi& Lt() { return *LoadCublasLt(nullptr); }

// Row count at which batch-invariant mode picks each shape's algorithm: large enough that
// cuBLASLt offers its general tiles, small enough to fit decode batches well.
constexpr int32_t kInvariantReferenceRows = 128;

#define LLM_CUBLAS_TRY(expr)                              \
  do {                                                    \
    const cublasStatus_t llm_st_ = (expr);                \
    if (llm_st_ != CUBLAS_STATUS_SUCCESS) return llm_st_; \
  } while (0)

// The plan key's weight kind.
int WeightKindOf(const Weight& w) {
  return !w.fp8() ? 0 : w.scales == WeightScales::kBlock ? 2 : 1;
}

// The rows a product's plan is made for: an FP8 one's are padded (weight.h).
int32_t PlanRows(const GemmArgs& g) { return g.w.fp8() ? Fp8GemmRows(g.rows) : g.rows; }

bool HasBias(const GemmArgs& g) {
  return g.w.fp8() && g.out_type == GemmOut::kF32 ? g.bias_bf16 != nullptr : g.bias != nullptr;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
  ~Plan() {
    if (desc) Lt().MatmulDescDestroy(desc);
    if (a) Lt().MatrixLayoutDestroy(a);
    if (b) Lt().MatrixLayoutDestroy(b);
    if (c) Lt().MatrixLayoutDestroy(c);
  }

  // Column-major view: C[out, rows] = op_T(A)[out, in] . B[in, rows], with A = w stored as a
  // column-major [in, out] matrix and B = x as a column-major [in, rows] one (the "TN" layout
  // cuBLASLt's FP8 kernels need on Hopper).
  cublasStatus_t Create(const GemmArgs& g) {
    const cudaDataType_t c_type = g.out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    const bool fp8 = g.w.fp8();
    const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const int32_t rows = PlanRows(g);
    LLM_CUBLAS_TRY(Lt().MatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    LLM_CUBLAS_TRY(
        Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    LLM_CUBLAS_TRY(
        Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (HasBias(g)) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      // FP8 products take a bf16 bias, whatever the output (cuBLASLt's FP8 type table).
      const cudaDataType_t bias_type = fp8 ? CUDA_R_16BF : c_type;
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof(epilogue)));
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                 &bias_type, sizeof(bias_type)));
    }
    if (fp8) {
      const bool block = g.w.scales == WeightScales::kBlock;
      const int32_t a_mode = block ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                   : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      const int32_t b_mode = block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                   : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                                 sizeof(a_mode)));
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                                 sizeof(b_mode)));
      // The scale pointers as the heuristic will see them (RunPlan sets each run's own).
      const void* a_scale = g.w.scale;
      const void* b_scale = g.xq.scale;
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                 &a_scale, sizeof(a_scale)));
      LLM_CUBLAS_TRY(Lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                 &b_scale, sizeof(b_scale)));
    }
    LLM_CUBLAS_TRY(Lt().MatrixLayoutCreate(&a, in_type, g.in, g.out, g.in));
    LLM_CUBLAS_TRY(Lt().MatrixLayoutCreate(&b, in_type, g.in, rows, g.in));
    LLM_CUBLAS_TRY(Lt().MatrixLayoutCreate(&c, c_type, g.out, rows, g.out));
    return CUBLAS_STATUS_SUCCESS;
  }
};

Gemm::Gemm() = default;

Gemm::~Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) Lt().Destroy(handle_);
}

cudaError_t Gemm::Init(const GemmOptions& options) {
  if (LoadCublasLt(&load_error_) == nullptr) return cudaErrorSharedObjectInitFailed;
  if (Lt().Create(&handle_) != CUBLAS_STATUS_SUCCESS) return cudaErrorInitializationError;
  workspace_bytes_ = options.workspace_bytes;
  batch_invariant_ = options.batch_invariant;
  use_gemv_ = options.use_gemv && !options.batch_invariant;
  tune_ = options.tune && !options.batch_invariant;
  split_rows_per_sm_ = options.gemv_split_rows_per_sm;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (const cudaError_t err = cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device);
      err != cudaSuccess) {
    return err;
  }
  return cudaMalloc(&workspace_, workspace_bytes_);
}

int32_t Gemm::GemvSplitsFor(const GemmArgs& g) const {
  const int64_t weight_rows = g.silu_mul ? int64_t{2} * g.out : int64_t{g.out};
  return GemvSplits(weight_rows, g.in, sms_, split_rows_per_sm_, GemvVecInputs(g.w.fp8()));
}

bool Gemm::AlgoFits(const Plan& plan, const cublasLtMatmulAlgo_t& algo) const {
  cublasLtMatmulHeuristicResult_t check{};
  return Lt().MatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, &algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= workspace_bytes_;
}

int Gemm::InvariantCandidates(const GemmArgs& g, std::vector<cublasLtMatmulAlgo_t>* out) {
  GemmArgs ref = g;
  ref.rows = kInvariantReferenceRows;
  Plan ref_plan;
  cublasStatus_t st = ref_plan.Create(ref);
  cublasLtMatmulPreference_t pref = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) st = Lt().MatmulPreferenceCreate(&pref);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Lt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes_, sizeof(workspace_bytes_));
  }
  // Only algorithms that reduce nothing across blocks (split-K needs a reduction scheme).
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Lt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                           &no_reduction, sizeof(no_reduction));
  }
  constexpr int kCandidates = 32;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Lt().MatmulAlgoGetHeuristic(handle_, ref_plan.desc, ref_plan.a, ref_plan.b, ref_plan.c,
                                     ref_plan.c, pref, kCandidates, results, &found);
  }
  if (pref) Lt().MatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  // Each output element summed within one thread block: no split-K, no reduction scheme.
  for (int i = 0; i < found; ++i) {
    cublasLtMatmulAlgo_t candidate = results[i].algo;
    int32_t split_k = 1;
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t written = 0;
    if (Lt().MatmulAlgoConfigGetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                          sizeof(split_k), &written) == CUBLAS_STATUS_SUCCESS &&
        Lt().MatmulAlgoConfigGetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                          &reduction, sizeof(reduction),
                                          &written) == CUBLAS_STATUS_SUCCESS &&
        split_k <= 1 && reduction == CUBLASLT_REDUCTION_SCHEME_NONE) {
      out->push_back(candidate);
    }
  }
  return 0;
}

int Gemm::InvariantAlgo(const GemmArgs& g, Plan& plan, bool may_repick) {
  const Shape key{0, g.in, g.out, static_cast<int>(g.out_type), HasBias(g), WeightKindOf(g.w)};
  auto [it, fresh] = invariant_.try_emplace(key);
  InvariantChoice& choice = it->second;
  if (fresh) {
    if (const int st = InvariantCandidates(g, &choice.candidates); st != 0) {
      invariant_.erase(it);
      return st;
    }
  }
  // The first candidate, in the heuristic's order, that fits this row count and every row count
  // planned for the key before; those plans move to it too (Prepare only: a graph captured on
  // the earlier choice would otherwise sum differently).
  for (size_t i = choice.pick; i < choice.candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& candidate = choice.candidates[i];
    if (!AlgoFits(plan, candidate)) continue;
    if (i != choice.pick && !choice.plans.empty()) {
      if (!may_repick) break;
      bool all = true;
      for (const Plan* earlier : choice.plans) all = all && AlgoFits(*earlier, candidate);
      if (!all) continue;
      for (Plan* earlier : choice.plans) earlier->algo = candidate;
    }
    choice.pick = i;
    choice.plans.push_back(&plan);
    plan.algo = candidate;
    return 0;
  }
  return static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED);
}

Gemm::Plan* Gemm::GetPlan(const GemmArgs& g, int* status, bool tune, bool preparing) {
  const Shape shape{PlanRows(g),      g.in, g.out, static_cast<int>(g.out_type), HasBias(g),
                    WeightKindOf(g.w)};
  if (auto it = plans_.find(shape); it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  cublasStatus_t st = plan->Create(g);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *status = static_cast<int>(st);
    return nullptr;
  }
  if (batch_invariant_) {
    *status = InvariantAlgo(g, *plan, preparing);
    if (*status != 0) return nullptr;
    plan->has_algo = true;
  } else {
    cublasLtMatmulPreference_t pref = nullptr;
    st = Lt().MatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = Lt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes_, sizeof(workspace_bytes_));
    }
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = Lt().MatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                       pref, tune ? kTuneCandidates : 1, results, &found);
    }
    if (pref) Lt().MatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) {
      *status = static_cast<int>(st);
      return nullptr;
    }
    int keep = 0;
    if (tune) {
      // Timed as plain products: a residual add run again and again would pile up in y.
      GemmArgs timed = g;
      timed.accumulate = false;
      if (found > 1) keep = FastestCandidate(timed, *plan, results, found, status);
      if (keep < 0) return nullptr;
      ++tuned_;
      if (keep != 0) ++tuned_changed_;
    }
    if (found > 0) {
      plan->algo = results[keep].algo;
      plan->has_algo = true;
    }
  }
  *status = 0;
  return plans_.emplace(shape, std::move(plan)).first->second.get();
}

int Gemm::Prepare(const GemmArgs& g) {
  if (g.rows <= 0) return 0;
  if (g.w.fp8() && !WantsFp8Input(g)) return 0;  // the GEMV's: no cuBLASLt plan
  int status = 0;
  // Tuning runs the product: an FP8 one needs its input's buffers.
  const bool runnable = !g.w.fp8() || (g.xq.x != nullptr && g.xq.scale != nullptr);
  GetPlan(g, &status, tune_ && g.rows >= kTuneMinRows && runnable, /*preparing=*/true);
  return status;
}

int Gemm::RunPlan(const GemmArgs& g, Plan& plan, const cublasLtMatmulAlgo_t* algo,
                  cudaStream_t stream) {
  const bool fp8 = g.w.fp8();
  if (HasBias(g)) {
    const void* bias = fp8 && g.out_type == GemmOut::kF32 ? g.bias_bf16 : g.bias;
    const cublasStatus_t st = Lt().MatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  }
  const void* x = g.x;
  if (fp8) {
    // The scale pointers are the step's (the input's) and the layer's: set per run, as the bias.
    const void* a_scale = g.w.scale;
    const void* b_scale = g.xq.scale;
    for (const auto& [attr, ptr] : {std::pair{CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale},
                                    std::pair{CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale}}) {
      const cublasStatus_t st = Lt().MatmulDescSetAttribute(plan.desc, attr, ptr, sizeof(*ptr));
      if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
    }
    x = g.xq.x;
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  return static_cast<int>(Lt().Matmul(handle_, plan.desc, &alpha, g.w.data, plan.a, x, plan.b,
                                      &beta, g.y, plan.c, g.y, plan.c, algo, workspace_,
                                      workspace_bytes_, stream));
}

int Gemm::FastestCandidate(const GemmArgs& g, Plan& plan,
                           const cublasLtMatmulHeuristicResult_t* candidates, int count,
                           int* status) {
  constexpr int kWarmUp = 2, kTimed = 3;
  constexpr float kMargin = 0.97f;  // another algorithm must beat the first by over 3%
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&end);
  int best = 0;
  float best_ms = INFINITY, first_ms = INFINITY;
  for (int i = 0; i < count && err == cudaSuccess; ++i) {
    if (candidates[i].workspaceSize > workspace_bytes_) continue;
    const cublasLtMatmulAlgo_t* algo = &candidates[i].algo;
    bool ok = true;
    for (int r = 0; r < kWarmUp && ok; ++r) ok = RunPlan(g, plan, algo, stream) == 0;
    if (ok) err = cudaEventRecord(start, stream);
    for (int r = 0; r < kTimed && ok && err == cudaSuccess; ++r) {
      ok = RunPlan(g, plan, algo, stream) == 0;
    }
    if (err == cudaSuccess) err = cudaEventRecord(end, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    float ms = 0.0f;
    if (err == cudaSuccess && ok) err = cudaEventElapsedTime(&ms, start, end);
    if (err != cudaSuccess || !ok) continue;  // a candidate cuBLASLt refuses is skipped
    ms /= kTimed;
    if (i == 0) first_ms = ms;
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (err != cudaSuccess) {
    *status = static_cast<int>(CUBLAS_STATUS_EXECUTION_FAILED);
    return -1;
  }
  return best != 0 && best_ms < kMargin * first_ms ? best : 0;
}

namespace {

GemvParams GemvFor(const GemmArgs& g, int32_t splits) {
  GemvParams p{g.x, g.w, g.bias, g.y, g.rows, g.in, g.out, g.out_type == GemmOut::kF32};
  p.splits = splits;
  p.gated = g.silu_mul;
  p.accumulate = g.accumulate;
  if (g.norm != nullptr) {
    p.norm_x = g.norm->x;
    p.norm_weight = g.norm->weight;
    p.norm_eps = g.norm->eps;
  }
  if (g.rope_kv != nullptr) {
    p.rope_kv = true;
    p.rope = *g.rope_kv;
  }
  return p;
}

bool HasEpilogue(const GemmArgs& g) {
  return g.silu_mul || g.rope_kv != nullptr || g.norm != nullptr || g.accumulate;
}

}  // namespace

bool Gemm::GemvTakes(const GemmArgs& g, GemvParams* params) const {
  if (!use_gemv_) return false;
  const GemvParams p = GemvFor(g, GemvSplitsFor(g));
  if (params != nullptr) *params = p;
  return GemvSupports(p);
}

bool Gemm::CublasLtAccumulates(const GemmArgs& g) const {
  return g.accumulate && !g.silu_mul && g.rope_kv == nullptr && g.norm == nullptr &&
         g.out_type == GemmOut::kF32 && g.y != nullptr && g.x != nullptr && !g.w.fp8() &&
         !HasBias(g) && !GemvTakes(g);
}

bool Gemm::FusesEpilogue(const GemmArgs& g) const {
  return HasEpilogue(g) && (GemvTakes(g) || CublasLtAccumulates(g));
}

bool Gemm::WantsFp8Input(const GemmArgs& g) const { return g.w.fp8() && !GemvTakes(g); }

int Gemm::Run(const GemmArgs& g, cudaStream_t stream) {
  if (g.rows <= 0) return 0;
  GemvParams gemv;
  if (GemvTakes(g, &gemv)) {
    return LaunchGemv(gemv, stream) == cudaSuccess
               ? 0
               : static_cast<int>(CUBLAS_STATUS_EXECUTION_FAILED);
  }
  // cuBLASLt's: no fused epilogue but the residual add, and an FP8 weight wants its input
  // quantised (WantsFp8Input).
  if (HasEpilogue(g) && !CublasLtAccumulates(g)) {
    return static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  if (g.w.fp8()) {
    // The input's scales in the layout the weight's mode pairs with (row scales with per-row
    // inputs, 128x128 blocks with 1x128 groups), and a bias of an fp32 output given in bf16
    // (cuBLASLt's FP8 products take no other).
    const bool block = g.w.scales == WeightScales::kBlock;
    if (g.xq.x == nullptr || g.xq.scale == nullptr ||
        block != (g.xq.scales == ActivationScales::kGroup) ||
        (g.out_type == GemmOut::kF32 && g.bias != nullptr && g.bias_bf16 == nullptr)) {
      return static_cast<int>(CUBLAS_STATUS_INVALID_VALUE);
    }
  }
  int status = 0;
  Plan* plan = GetPlan(g, &status);
  if (plan == nullptr) return status;
  return RunPlan(g, *plan, plan->has_algo ? &plan->algo : nullptr, stream);
}

}  // namespace llm::kernels
