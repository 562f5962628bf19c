#include "kernels/elementwise/fp8_row_kernel.cuh"
#include "kernels/elementwise/quantize_rows.h"

namespace llm::kernels {
namespace {

struct Bf16Rows {
  const __nv_bfloat16* x;
  int32_t dim;
  __device__ float4 Values(int32_t r, int32_t i) const {
    const __nv_bfloat16* p = x + static_cast<int64_t>(r) * dim + i;
    return make_float4(ToFloat(p[0]), ToFloat(p[1]), ToFloat(p[2]), ToFloat(p[3]));
  }
};

}  // namespace

cudaError_t LaunchQuantizeRows(const QuantizeRowsParams& p, cudaStream_t stream) {
  return LaunchFp8Rows(Bf16Rows{p.x, p.dim}, p.rows, p.dim, p.out, stream);
}

}  // namespace llm::kernels
