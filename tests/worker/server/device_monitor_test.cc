#include "worker/server/device_monitor.h"

#include "gtest/gtest.h"

namespace llm::server {
namespace {

TEST(DeviceMonitorTest, CpuWorkersHaveNoCounters) {
  DeviceMonitor m("");
  EXPECT_EQ(m.unavailable_reason(), "no GPU in use");
  EXPECT_FALSE(m.Latest().available);
  EXPECT_EQ(m.Latest().utilization, -1.0);
}

TEST(DeviceMonitorTest, MissingDriverLibraryIsNamed) {
  auto nvml = Nvml::Load("libnvidia-ml-does-not-exist.so.1");
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("libnvidia-ml-does-not-exist.so.1"), std::string::npos)
      << nvml.status();
  // A library without NVML's functions is refused by name.
  nvml = Nvml::Load("libc.so.6");
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("lacks nvmlInit_v2"), std::string::npos) << nvml.status();
}

// On a machine with the driver and a GPU this samples it; elsewhere it reports why not, and
// never fails the worker.
TEST(DeviceMonitorTest, UnknownBusIdIsReported) {
  DeviceMonitor m("00000000:FF:1F.7");
  EXPECT_FALSE(m.unavailable_reason().empty());
  EXPECT_FALSE(m.Latest().available);
}

}  // namespace
}  // namespace llm::server
