// Device helpers of the Hopper (sm_90a) kernels: mbarriers, the bulk tensor copy (TMA) that
// completes on one, and the warpgroup matrix product (wgmma) with A in registers and B in shared
// memory under the 128-byte swizzle. Only for translation units built for sm_90a
// (prefill_attention_sm90.cu); the layouts are the PTX ISA's ("Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate", "Tensor copy").
//
// Every shared-memory address here is a 32-bit shared-window address (SharedAddress).
#ifndef LLM_KERNELS_ATTENTION_HOPPER_ASYNC_CUH_
#define LLM_KERNELS_ATTENTION_HOPPER_ASYNC_CUH_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels::hopper {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// --- mbarriers -------------------------------------------------------------------------------

__device__ __forceinline__ void BarrierInit(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the copy engine (then a __syncthreads).
__device__ __forceinline__ void BarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` the copy engine will complete on the barrier.
__device__ __forceinline__ void BarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void BarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so a
// wait on parity 1 returns at once (how a producer passes its first round of empty stages).
__device__ __forceinline__ void BarrierWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// --- generic stores into what the async proxy reads ---------------------------------------------

// Sixteen zero bytes at shared address `at` (16-byte aligned).
__device__ __forceinline__ void StoreSharedZero16(uint32_t at) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0u) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones
// (the tensor cores' reads of a wgmma descriptor operand, the copy engine's writes).
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barrier 1 among `threads` threads (a warpgroup: 128), so the producer warp, which never
// arrives there, is not waited for.
__device__ __forceinline__ void NamedBarrierSync(uint32_t threads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}

// --- the bulk tensor copy ----------------------------------------------------------------------

// Copies the box of `map` at coordinates (c0 innermost, c1) to shared memory at `dst`, and
// completes the box's bytes on `bar`.
// `map` lives in parameter space (a __grid_constant__ kernel parameter).
__device__ __forceinline__ void TensorLoad2d(uint32_t dst, const CUtensorMap* map, int32_t c0,
                                             int32_t c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// --- wgmma ---------------------------------------------------------------------------------------

// Orders this thread's register accesses before the wgmma that follows.
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaWaitAll() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// Pins a register's value at this point in program order, so the compiler moves no access of
// it across the wgmma fence, issue or wait around it.
__device__ __forceinline__ void PinRegister(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void PinRegister(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <typename T, int N>
__device__ __forceinline__ void PinRegisters(T (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) PinRegister(r[i]);
}
template <typename T, int N, int M>
__device__ __forceinline__ void PinRegisters(T (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i) PinRegisters(r[i]);
}

// D (64 x 64, fp32) = A B (+ D when `accumulate`), one m64n64k16 of the warpgroup: A (64 x 16,
// bf16) in registers, each warp's 16 rows laid out as mma.m16n8k16's A (mma_fragment.h FragA);
// B (16 x 64) in shared memory at `b`; D as eight m16n8 C fragments (d[n] columns 8n..8n+7,
// FragC). kTransB 0: B is K-major (stored [n][k]); 1: MN-major (stored [k][n]).
template <int kTransB>
__device__ __forceinline__ void Wgmma64x64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                           bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0), "n"(kTransB));
}

}  // namespace llm::kernels::hopper

#endif  // LLM_KERNELS_ATTENTION_HOPPER_ASYNC_CUH_
