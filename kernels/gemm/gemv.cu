#include "kernels/gemm/gemv.h"
#include "kernels/gemm/gemv_kernel.cuh"

namespace llm::kernels {
namespace {

bool RopeShapeMatches(const GemvParams& p) {
  const RopeKvParams& r = p.rope;
  return r.head_dim > 0 && r.head_dim % 2 == 0 && r.qkv == p.y && r.rows == p.rows &&
         p.out == (r.num_heads + 2 * r.num_kv_heads) * r.head_dim;
}

}  // namespace

bool GemvSupports(const GemvParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool plain = !p.gated && !p.rope_kv;
  const bool split_ok = p.splits == 1 || p.splits == 2 || p.splits == 4;
  const bool weight_ok = !p.w.fp8() || (p.w.scale != nullptr && p.w.scales != WeightScales::kNone);
  const bool shape_ok = split_ok && weight_ok && p.rows >= 1 && p.rows <= kGemvMaxRows &&
                        p.in > 0 && p.in % GemvVecInputs(p.w.fp8()) == 0 && p.out > 0 &&
                        aligned(p.w.data) && !((p.gated || p.rope_kv) && p.out_f32) &&
                        !(p.gated && p.rope_kv) && (!p.rope_kv || RopeShapeMatches(p));
  const bool accumulate_ok = !p.accumulate || (plain && p.out_f32 && p.norm_x == nullptr);
  const bool input_ok = p.norm_x == nullptr
                            ? p.x != nullptr && aligned(p.x)
                            : !p.w.fp8() && p.rows <= kGemvNormMaxRows && p.in <= kGemvNormMaxIn &&
                                  aligned(p.norm_x) && p.norm_weight != nullptr &&
                                  aligned(p.norm_weight) && !plain;
  return shape_ok && accumulate_ok && input_ok;
}

cudaError_t LaunchGemv(const GemvParams& p, cudaStream_t stream) {
  if (!GemvSupports(p)) return cudaErrorInvalidValue;
  if (!p.w.fp8()) return gemv_internal::LaunchBf16(p, stream);
  if (p.w.scales == WeightScales::kBlock) return gemv_internal::LaunchFp8Block(p, stream);
  return gemv_internal::LaunchFp8Row(p, stream);
}

}  // namespace llm::kernels
