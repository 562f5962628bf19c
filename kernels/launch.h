// Whether the kernels are launched with programmatic dependent launch (PDL, sm_90): see
// launch.cuh for what it changes. Host-only, for the runner that sets it.
#ifndef LLM_KERNELS_LAUNCH_H_
#define LLM_KERNELS_LAUNCH_H_

namespace llm::kernels {

// Process-wide (engine.cuda_pdl; CudaModel::Load sets it only where
// ProgrammaticLaunchAvailable). Set once before the first launch and before any graph capture;
// off by default.
void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

// Whether the kernels that run on the current device wait for prior grids: the device is sm_90
// or newer and this build carries code compiled for it (griddepcontrol.wait is compiled in only
// for sm_90 and newer; a build without it would run the PTX of an older architecture, whose
// kernels never wait, and then every read of an earlier kernel's output would race). False
// where the device cannot be queried.
bool ProgrammaticLaunchAvailable();

}  // namespace llm::kernels

#endif  // LLM_KERNELS_LAUNCH_H_
