// Whether the kernels are launched with programmatic dependent launch (PDL, sm_90): see
// launch.cuh for what it changes. Host-only, for the runner that sets it.
#ifndef LLM_KERNELS_LAUNCH_H_
#define LLM_KERNELS_LAUNCH_H_

namespace llm::kernels {

// Process-wide (engine.cuda_pdl; CudaModel::Load sets it only on sm_90 and newer). Set once
// before the first launch and before any graph capture; off by default.
void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

}  // namespace llm::kernels

#endif  // LLM_KERNELS_LAUNCH_H_
