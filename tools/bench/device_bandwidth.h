// The device-to-device copy bandwidth, the ceiling llm-bench's GPU figures are compared with.
// CUDA builds only.
#ifndef LLM_TOOLS_BENCH_DEVICE_BANDWIDTH_H_
#define LLM_TOOLS_BENCH_DEVICE_BANDWIDTH_H_

#include "absl/status/statusor.h"

namespace llm::bench {

// Bytes moved (read + written) per second by device-to-device copies of 1 GiB on `device`,
// the best of several rounds. Makes `device` current.
absl::StatusOr<double> DeviceCopyBandwidth(int device);

}  // namespace llm::bench

#endif  // LLM_TOOLS_BENCH_DEVICE_BANDWIDTH_H_
