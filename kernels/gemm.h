// Matrix products through cuBLASLt: y[rows, out] = x[rows, in] . w[out, in]^T (+ bias[out]),
// x and w bf16, fp32 accumulation, y bf16 or fp32. w is in the Hugging Face layout (row-major
// [out, in]). Plans (descriptors, layouts, the chosen algorithm) are cached per shape, so after
// a first call of each shape a product allocates nothing and can be captured in a CUDA graph.
// Not thread-safe: one Gemm per stream.
#ifndef LLM_KERNELS_GEMM_H_
#define LLM_KERNELS_GEMM_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace llm::kernels {

enum class GemmOut { kBf16, kF32 };

struct GemmArgs {
  const __nv_bfloat16* x;  // [rows, in]
  const __nv_bfloat16* w;  // [out, in]
  const void* bias;        // [out] (bf16 for kBf16 output, fp32 for kF32) or null
  void* y;                 // [rows, out]
  int32_t rows;
  int32_t in;
  int32_t out;
  GemmOut out_type;
};

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Creates the handle and a workspace of `workspace_bytes` on the current device.
  cudaError_t Init(size_t workspace_bytes = size_t{32} << 20);
  // cuBLAS status as an int (0 = success) so callers need not include cuBLAS headers.
  int Run(const GemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  using Shape = std::tuple<int32_t, int32_t, int32_t, int, bool>;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_H_
