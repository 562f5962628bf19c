// cuBLASLt, loaded at run time (dlopen) rather than linked. The library's large static
// thread-local storage (about 90 KiB) would otherwise be carved out of every thread's stack in
// the process, and threads that other libraries start with small stacks (the metrics server's)
// would fail to start. Loaded on first use, by the CUDA backend only.
#ifndef LLM_KERNELS_GEMM_CUBLASLT_LOADER_H_
#define LLM_KERNELS_GEMM_CUBLASLT_LOADER_H_

#include <cublasLt.h>

#include <string>

namespace llm::kernels {

struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulAlgoCheck) MatmulAlgoCheck;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) MatmulAlgoConfigGetAttribute;
  decltype(&cublasLtMatmul) Matmul;
};

// The loaded API, or null with `*error` saying what was tried. Thread-safe; loads once.
const CublasLtApi* LoadCublasLt(std::string* error);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_CUBLASLT_LOADER_H_
