#include "kernels/gemm.h"

namespace llm::kernels {

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

Gemm::Gemm() = default;

Gemm::~Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

cudaError_t Gemm::Init(size_t workspace_bytes) {
  if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS) return cudaErrorInitializationError;
  workspace_bytes_ = workspace_bytes;
  return cudaMalloc(&workspace_, workspace_bytes);
}

int Gemm::Run(const GemmArgs& g, cudaStream_t stream) {
  if (g.rows <= 0) return 0;
  const Shape shape{g.rows, g.in, g.out, static_cast<int>(g.out_type), g.bias != nullptr};
  auto it = plans_.find(shape);
  if (it == plans_.end()) {
    // Column-major view: C[out, rows] = op_T(A)[out, in] . B[in, rows], with A = w stored as a
    // column-major [in, out] matrix and B = x as a column-major [in, rows] one.
    auto plan = std::make_unique<Plan>();
    const cudaDataType_t c_type = g.out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasStatus_t st = cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                          sizeof(trans_a));
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                          sizeof(trans_b));
    }
    if (st == CUBLAS_STATUS_SUCCESS && g.bias != nullptr) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = c_type;
      st = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                          sizeof(epilogue));
      if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                            &bias_type, sizeof(bias_type));
      }
    }
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, g.in, g.out, g.in);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, g.in, g.rows, g.in);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutCreate(&plan->c, c_type, g.out, g.rows, g.out);
    if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
    cublasLtMatmulPreference_t pref = nullptr;
    st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_bytes_, sizeof(workspace_bytes_));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                          pref, 1, &result, &found);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
    if (found > 0) {
      plan->algo = result.algo;
      plan->has_algo = true;
    }
    it = plans_.emplace(shape, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (g.bias != nullptr) {
    const void* bias = g.bias;
    const cublasStatus_t st = cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  }
  const float alpha = 1.0f, beta = 0.0f;
  return static_cast<int>(cublasLtMatmul(
      handle_, plan.desc, &alpha, g.w, plan.a, g.x, plan.b, &beta, g.y, plan.c, g.y, plan.c,
      plan.has_algo ? &plan.algo : nullptr, workspace_, workspace_bytes_, stream));
}

}  // namespace llm::kernels
