#include "worker/server/device_monitor.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace llm::server {

namespace {

// NVML's C types, declared here so no NVML header is needed at build time (they are part of
// NVML's stable ABI).
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*by_bus_id)(const char*, NvmlDevice*);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*);
  NvmlReturn (*power)(NvmlDevice, unsigned int*);
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*);
};

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const char* library) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::UnavailableError(
        absl::StrCat("NVML: cannot load ", library, ": ", err != nullptr ? err : "unknown error"));
  }
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->handle_ = handle;
  nvml->api_ = std::make_unique<Api>();
  Api& a = *nvml->api_;
  bool missing = false;
  std::string missing_name;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && !missing) {
      missing = true;
      missing_name = name;
    }
  };
  sym(a.init, "nvmlInit_v2");
  sym(a.shutdown, "nvmlShutdown");
  sym(a.error_string, "nvmlErrorString");
  sym(a.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(a.utilization, "nvmlDeviceGetUtilizationRates");
  sym(a.memory, "nvmlDeviceGetMemoryInfo");
  sym(a.power, "nvmlDeviceGetPowerUsage");
  sym(a.temperature, "nvmlDeviceGetTemperature");
  if (missing) {
    a.shutdown = nullptr;  // not initialised: nothing to shut down
    return absl::UnavailableError(absl::StrCat("NVML: ", library, " lacks ", missing_name));
  }
  if (const NvmlReturn r = a.init(); r != kNvmlSuccess) {
    a.shutdown = nullptr;
    return absl::UnavailableError(absl::StrCat("NVML: nvmlInit failed: ", a.error_string(r)));
  }
  return nvml;
}

Nvml::~Nvml() {
  if (api_ != nullptr && api_->shutdown != nullptr) api_->shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

absl::StatusOr<void*> Nvml::DeviceByPciBusId(const std::string& bus_id) const {
  NvmlDevice device = nullptr;
  if (const NvmlReturn r = api_->by_bus_id(bus_id.c_str(), &device); r != kNvmlSuccess) {
    return absl::NotFoundError(
        absl::StrCat("NVML: no device at PCI bus id ", bus_id, ": ", api_->error_string(r)));
  }
  return device;
}

DeviceSample Nvml::Sample(void* device) const {
  DeviceSample s;
  NvmlUtilization u{};
  if (api_->utilization(device, &u) == kNvmlSuccess) {
    s.available = true;
    s.utilization = u.gpu / 100.0;
  }
  NvmlMemory m{};
  if (api_->memory(device, &m) == kNvmlSuccess) {
    s.available = true;
    s.memory_used_bytes = m.used;
    s.memory_total_bytes = m.total;
  }
  unsigned int milliwatts = 0;
  if (api_->power(device, &milliwatts) == kNvmlSuccess) s.power_watts = milliwatts / 1000.0;
  unsigned int celsius = 0;
  if (api_->temperature(device, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess) {
    s.temperature_celsius = celsius;
  }
  return s;
}

DeviceMonitor::DeviceMonitor(const std::string& pci_bus_id, std::chrono::milliseconds period)
    : period_(period) {
  if (pci_bus_id.empty()) {
    reason_ = "no GPU in use";
    return;
  }
  auto nvml = Nvml::Load();
  if (!nvml.ok()) {
    reason_ = std::string(nvml.status().message());
    return;
  }
  auto device = (*nvml)->DeviceByPciBusId(pci_bus_id);
  if (!device.ok()) {
    reason_ = std::string(device.status().message());
    return;
  }
  nvml_ = *std::move(nvml);
  device_ = *device;
  latest_ = nvml_->Sample(device_);
  thread_ = std::thread([this] {
    SetCurrentThreadName("nvml");
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period_, [&] { return stop_; })) {
      lock.unlock();
      const DeviceSample s = nvml_->Sample(device_);
      lock.lock();
      latest_ = s;
    }
  });
}

DeviceMonitor::~DeviceMonitor() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

DeviceSample DeviceMonitor::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

}  // namespace llm::server
