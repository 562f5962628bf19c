#include <atomic>

#include "kernels/launch.cuh"
#include "kernels/launch.h"

namespace llm::kernels {
namespace {

std::atomic<bool> programmatic_launch{false};

// Never launched: compiled like every kernel here, its attributes tell which architecture the
// code the device runs was compiled for.
__global__ void ArchitectureProbeKernel() { AfterPriorGrids(); }

}  // namespace

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on); }

bool ProgrammaticLaunch() { return programmatic_launch.load(std::memory_order_relaxed); }

bool ProgrammaticLaunchAvailable() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, ArchitectureProbeKernel) != cudaSuccess) return false;
  // ptxVersion: the virtual architecture the code was compiled from, major * 10 + minor.
  return major >= 9 && attr.ptxVersion >= 90;
}

}  // namespace llm::kernels
