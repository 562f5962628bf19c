// CUDA device discovery. Safe to call on machines without a GPU or a driver: it reports zero
// devices instead of failing.
#ifndef LLM_KERNELS_DEVICE_H_
#define LLM_KERNELS_DEVICE_H_

#include <string>

namespace llm::kernels {

// Number of usable CUDA devices; 0 when there is no driver or no device.
int DeviceCount();

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" for a present device.
std::string DeviceDescription(int device);

// Why no device is usable ("no CUDA driver", ...), for skip messages; empty when one is.
std::string NoDeviceReason();

}  // namespace llm::kernels

#endif  // LLM_KERNELS_DEVICE_H_
