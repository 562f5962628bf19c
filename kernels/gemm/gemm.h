// Matrix products through cuBLASLt: y[rows, out] = x[rows, in] . w[out, in]^T (+ bias[out]),
// x and w bf16, fp32 accumulation, y bf16 or fp32. The one dispatch point of every product: the
// weight's type (weight.h) and the row count pick the kernel. w is in the Hugging Face layout
// (row-major [out, in]). Plans (descriptors, layouts, the chosen algorithm) are cached per shape,
// so after a first call (or Prepare) of each shape a product allocates nothing and can be captured
// in a CUDA graph. Not thread-safe: one Gemm per stream.
//
// Batch-invariant mode: the algorithm is chosen once per (in, out, output type, bias) and used
// for every row count: the first of cuBLASLt's candidates at a reference row count that has no
// split-K or other cross-block reduction and fits every row count prepared, so each output element
// is summed in the same order whatever the batch: a row's result does not depend on the other
// rows. It costs some speed on shapes where cuBLASLt's per-shape choice would differ.
//
// Otherwise (unless Init was told not to) products of up to kGemvMaxRows rows, the decode
// steps of a few sequences, run on the GEMV kernel of gemv.h, which reads each weight once; a
// product of few weight rows for the device spreads each output over several warps (GemvSplits,
// from the weight matrix, the device's multiprocessors and `gemv_split_rows_per_sm`).
//
// FP8 weights (GemmArgs::w.fp8()): at up to kGemvMaxRows rows the GEMV reads them with bf16 x
// (W8A16: gemv.h); otherwise cuBLASLt's FP8 tensor cores take E4M3 x too (W8A8: args.xq, its
// rows quantised by the kernel that made them, fp8_out.h), with row scales as OUTER_VEC_32F on
// both operands and 128x128 block scales as BLK128x128_32F on w and VEC128_32F on x, fp32
// accumulation, on Fp8GemmRows(rows) rows (the buffers hold them). WantsFp8Input says which an
// FP8 product takes. cuBLASLt's FP8 products take a bf16 bias whatever the output type.
//
// Tuning (Init's `tune`, not in batch-invariant mode): Prepare of a shape of at least
// kTuneMinRows rows times cuBLASLt's first kTuneCandidates algorithms on the arguments' own
// buffers (which it overwrites: y, and x must be readable) and keeps the fastest, where it beats
// the heuristic's first by more than 3%. It synchronises the device, so it belongs to start-up,
// before any graph capture; Run never tunes (a shape first met there takes the heuristic's
// choice).
#ifndef LLM_KERNELS_GEMM_GEMM_H_
#define LLM_KERNELS_GEMM_GEMM_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/elementwise/rope_kv.h"
#include "kernels/gemm/gemv.h"
#include "kernels/gemm/weight.h"

namespace llm::kernels {

enum class GemmOut { kBf16, kF32 };

// A product's input made on the fly from the fp32 residual stream: RMSNorm(x) * weight, the
// bits of LaunchRmsNorm without a delta (rmsnorm.h).
struct NormInput {
  const float* x;               // [rows, in]
  const __nv_bfloat16* weight;  // [in]
  float eps;
};

struct GemmArgs {
  const __nv_bfloat16* x;  // [rows, in]; unused by an FP8 product that takes xq
  Weight w;                // [out, in]: bf16 or FP8 (weight.h)
  const void* bias;        // [out] (bf16 for kBf16 output, fp32 for kF32) or null
  void* y;                 // [rows, out]
  int32_t rows;
  int32_t in;
  int32_t out;
  GemmOut out_type;
  // Fused work (the GEMV path, where FusesEpilogue says so; accumulate on cuBLASLt too). A
  // prologue: x is ignored and RMSNorm(norm->x) * norm->weight is the input (gemv.h, norm prologue;
  // with silu_mul or rope_kv).
  const NormInput* norm = nullptr;
  // kF32 output without another epilogue: y += the product (+ bias), the residual add. Also on
  // cuBLASLt (beta = 1, y both C and D) where CublasLtAccumulates says so.
  bool accumulate = false;
  // Epilogues (at most one):
  // the MLP's gate/up product with SiLU-and-multiply (gemv.h, gated): w has 2 * out rows and
  // y[r, o] = silu(gate) * up, bf16;
  bool silu_mul = false;
  // the q/k/v product with RoPE and the K/V cache write (gemv.h, RoPE/KV): y is rope_kv->qkv.
  const RopeKvParams* rope_kv = nullptr;
  // An FP8 product on cuBLASLt (WantsFp8Input): its E4M3 input, and its bias as bf16 when the
  // output is fp32 (`bias` is then the GEMV's fp32 one).
  Fp8Input xq{};
  const __nv_bfloat16* bias_bf16 = nullptr;
};

inline constexpr int32_t kTuneMinRows = 512;
inline constexpr int kTuneCandidates = 8;

struct GemmOptions {
  size_t workspace_bytes = size_t{32} << 20;
  bool batch_invariant = false;
  bool use_gemv = true;  // ignored when batch_invariant
  bool tune = false;     // ignored when batch_invariant
  // GemvSplits' rows_per_sm: a product with fewer weight rows than this per multiprocessor
  // splits; 0: one warp an output.
  int32_t gemv_split_rows_per_sm = kGemvRowsPerSm;
};

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Loads cuBLASLt (cublaslt_loader.h) and creates the handle and a workspace of
  // `options.workspace_bytes` on the current device, whose multiprocessors it counts for the
  // GEMV's split. cudaErrorSharedObjectInitFailed when the library cannot be loaded
  // (load_error() says why).
  cudaError_t Init(const GemmOptions& options = {});
  const std::string& load_error() const { return load_error_; }
  // Builds the plan of args' shape (rows, in, out, output type, bias or not) without running
  // it, unless it is tuned (above). cuBLAS status as an int (0 = success), so callers need not
  // include cuBLAS headers; a CUDA error while tuning is CUBLAS_STATUS_EXECUTION_FAILED.
  int Prepare(const GemmArgs& args);
  // Plans whose algorithm tuning changed from the heuristic's first, and plans tuned.
  int tuned_changed() const { return tuned_changed_; }
  int tuned() const { return tuned_; }
  int Run(const GemmArgs& args, cudaStream_t stream);
  // Whether Run takes `args` with its fused work (norm, accumulate, silu_mul or rope_kv): the
  // GEMV path (few rows, not batch-invariant), or cuBLASLt for accumulate alone
  // (CublasLtAccumulates). Otherwise the caller runs LaunchRmsNorm, the plain product and then
  // the residual add (LaunchRmsNorm's delta), LaunchSiluMul or LaunchRopeKv (the same bits).
  bool FusesEpilogue(const GemmArgs& args) const;
  // Whether the GEMV kernel runs `args` (the rest run on cuBLASLt).
  bool OnGemv(const GemmArgs& args) const { return GemvTakes(args); }
  // Whether cuBLASLt takes `args`' accumulate: no other fused work, an fp32 output, a bf16
  // weight and x, and no bias. y is then read as C with beta = 1 and written in place: each
  // element is y + the fp32 product, rounded once, the bits of the product into a delta buffer
  // followed by the norm's x + delta where cuBLASLt reduces within one block (always in
  // batch-invariant mode); a split-K algorithm adds its partial sums to y one by one, so the
  // sum may round differently. Not taken: a bias (cuBLASLt adds it after C, where the delta
  // path adds it to the product first) and FP8 weights (their scales and beta = 1 are not yet
  // run on a device); the caller goes through the delta buffer for those.
  bool CublasLtAccumulates(const GemmArgs& args) const;
  // Whether Run takes `args` (an FP8 weight's product) through cuBLASLt, with args.xq as its
  // input, rather than through the GEMV with bf16 x.
  bool WantsFp8Input(const GemmArgs& args) const;
  bool batch_invariant() const { return batch_invariant_; }
  bool uses_gemv() const { return use_gemv_; }
  // The warps per output the GEMV takes for `args`' weight matrix.
  int32_t GemvSplitsFor(const GemmArgs& args) const;

 private:
  struct Plan;
  // Whether the GEMV takes `args` (its params, for Run to launch, in `*params` when given).
  bool GemvTakes(const GemmArgs& args, GemvParams* params = nullptr) const;
  // rows, in, out, output type, bias, weight kind (0 bf16, 1 FP8 row scales, 2 FP8 blocks).
  using Shape = std::tuple<int32_t, int32_t, int32_t, int, bool, int>;
  // The plan for `args`' shape, created on first use (tuned when `tune`; `preparing`: by
  // Prepare); null with `*status` set on failure.
  Plan* GetPlan(const GemmArgs& args, int* status, bool tune = false, bool preparing = false);
  // Times `candidates` on args' buffers; returns the index of the one to keep, or -1 with
  // `*status` set when the device failed.
  int FastestCandidate(const GemmArgs& args, Plan& plan,
                       const cublasLtMatmulHeuristicResult_t* candidates, int count, int* status);
  // The product on `plan` with `algo` (null: cuBLASLt's own choice), as Run does.
  int RunPlan(const GemmArgs& args, Plan& plan, const cublasLtMatmulAlgo_t* algo,
              cudaStream_t stream);
  // Whether `algo` runs `plan`'s shape within the workspace.
  bool AlgoFits(const Plan& plan, const cublasLtMatmulAlgo_t& algo) const;
  // Batch-invariant mode: the heuristic's algorithms for args' (in, out, type, bias, weight
  // kind) at a reference row count that reduce nothing across blocks, best first.
  int InvariantCandidates(const GemmArgs& args, std::vector<cublasLtMatmulAlgo_t>* out);
  // Sets plan.algo to the key's one algorithm: the first candidate that fits every row count
  // planned for the key. A row count the current choice does not fit moves the key's earlier
  // plans to a candidate that fits them all, where `may_repick` (Prepare, before any capture);
  // NOT_SUPPORTED otherwise, or where no candidate fits.
  int InvariantAlgo(const GemmArgs& args, Plan& plan, bool may_repick);
  struct InvariantChoice {
    std::vector<cublasLtMatmulAlgo_t> candidates;
    size_t pick = 0;           // candidates[pick] is every plan's
    std::vector<Plan*> plans;  // the key's plans (owned by plans_)
  };

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool batch_invariant_ = false;
  bool use_gemv_ = false;
  bool tune_ = false;
  int32_t split_rows_per_sm_ = 0;
  int32_t sms_ = 1;
  int tuned_ = 0, tuned_changed_ = 0;
  std::string load_error_;
  std::map<Shape, std::unique_ptr<Plan>> plans_;
  std::map<Shape, InvariantChoice> invariant_;  // rows = 0 in the key
};

}  // namespace llm::kernels

#endif  // LLM_KERNELS_GEMM_GEMM_H_
