// RAII owners of CUDA resources (device and pinned memory, events, streams, graphs) and the
// conversion of CUDA errors to absl::Status, for the CUDA runner's host code.
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_UTIL_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_UTIL_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llm::runner::cuda {

// INTERNAL naming `what` and CUDA's message; OK for cudaSuccess.
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of device memory (", cudaGetErrorString(err), ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

#define LLM_CUDA_RETURN_IF_ERROR(expr, what)                                       \
  do {                                                                             \
    if (absl::Status llm_cuda_st_ = ::llm::runner::cuda::CudaStatus((expr), what); \
        !llm_cuda_st_.ok()) {                                                      \
      return llm_cuda_st_;                                                         \
    }                                                                              \
  } while (0)

// Device memory, freed with the owner. Moves only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory() { Reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  absl::Status Allocate(size_t bytes, const char* what) {
    Reset();
    LLM_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1), what);
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  std::byte* get() const { return static_cast<std::byte*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (the staging of asynchronous copies). Moves only.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory() { Reset(); }
  PinnedMemory(PinnedMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  absl::Status Allocate(size_t bytes, const char* what) {
    Reset();
    LLM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes > 0 ? bytes : 1), what);
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  std::byte* get() const { return static_cast<std::byte*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA event with timing.
class Event {
 public:
  Event() = default;
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  absl::Status Create() {
    LLM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event_), "cudaEventCreate");
    return absl::OkStatus();
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Seconds between two completed events.
inline double ElapsedSeconds(const Event& from, const Event& to) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, from.get(), to.get()) != cudaSuccess) return -1.0;
  return static_cast<double>(ms) * 1e-3;
}

class Stream {
 public:
  Stream() = default;
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  absl::Status Create() {
    LLM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate");
    return absl::OkStatus();
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An instantiated CUDA graph.
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() { Reset(); }
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      Reset();
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  void Reset() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  cudaGraphExec_t* out() { return &exec_; }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_UTIL_H_
