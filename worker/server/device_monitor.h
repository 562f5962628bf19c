// GPU counters from the NVIDIA driver's management library (NVML): utilisation, memory, power
// and temperature of the serving device, sampled on a background thread. NVML is loaded at run
// time (dlopen of libnvidia-ml.so.1), so the binaries start on machines without the driver; the
// monitor then reports the counters as unavailable and says why.
#ifndef LLM_WORKER_SERVER_DEVICE_MONITOR_H_
#define LLM_WORKER_SERVER_DEVICE_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace llm::server {

struct DeviceSample {
  bool available = false;
  double utilization = -1.0;  // the driver's busy counter, in [0, 1]
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  double power_watts = -1.0;
  double temperature_celsius = -1.0;
};

// The functions of NVML this project uses, resolved from the driver's library.
class Nvml {
 public:
  // UNAVAILABLE naming the library when it cannot be loaded or initialised.
  static absl::StatusOr<std::unique_ptr<Nvml>> Load(const char* library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The device with PCI bus id `bus_id` (as cudaDeviceGetPCIBusId writes it).
  absl::StatusOr<void*> DeviceByPciBusId(const std::string& bus_id) const;
  DeviceSample Sample(void* device) const;

 private:
  Nvml() = default;
  struct Api;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

// Samples one device every `period`; Latest() never blocks on the driver.
class DeviceMonitor {
 public:
  // `pci_bus_id` empty (a CPU backend): nothing is sampled and Latest() is unavailable.
  explicit DeviceMonitor(const std::string& pci_bus_id,
                         std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~DeviceMonitor();
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

  DeviceSample Latest() const;
  // Why the counters are unavailable; empty when they are available.
  const std::string& unavailable_reason() const { return reason_; }

 private:
  std::unique_ptr<Nvml> nvml_;
  void* device_ = nullptr;
  std::string reason_;
  std::chrono::milliseconds period_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  DeviceSample latest_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_DEVICE_MONITOR_H_
