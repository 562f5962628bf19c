// How the kernels are launched: every launcher goes through Launch, which adds programmatic
// dependent launch (PDL, sm_90) when it is on for the process. With PDL a kernel may be
// scheduled while the one before it on the stream still runs: it does what needs nothing from
// its predecessors (a GEMV's weight prefetch), then WaitForPriorGrids, which returns once every
// earlier grid has completed and its writes are visible — the same guarantee as plain stream
// order — and then AllowDependentGrids, which lets the next kernel be scheduled in turn. So
// every kernel calls WaitForPriorGrids before it reads anything an earlier kernel wrote (the
// launch order's data), and the launch latency of the next kernel overlaps this one's work. On
// sm_80, and for launches without the attribute, both calls do nothing. Captured into CUDA
// graphs as programmatic edges. Internal to kernels/.
#ifndef LLM_KERNELS_LAUNCH_CUH_
#define LLM_KERNELS_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "kernels/launch.h"

namespace llm::kernels {

// Launches `kernel` on `stream` (grid, block, dynamic shared memory), with PDL when it is on;
// returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (ProgrammaticLaunch()) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

__device__ __forceinline__ void WaitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void AllowDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The two at a kernel's start, for kernels with nothing to do before their inputs are ready.
__device__ __forceinline__ void AfterPriorGrids() {
  WaitForPriorGrids();
  AllowDependentGrids();
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_LAUNCH_CUH_
