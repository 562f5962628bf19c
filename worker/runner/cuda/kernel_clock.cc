#include "worker/runner/cuda/kernel_clock.h"

#include "worker/runner/cuda/cuda_util.h"

namespace llm::runner::cuda {

const char* KernelClassName(KernelClass c) {
  switch (c) {
    case KernelClass::kAttention:
      return "attention";
    case KernelClass::kProducts:
      return "products";
    case KernelClass::kNorms:
      return "norms";
    case KernelClass::kRopeKv:
      return "rope_kv";
    case KernelClass::kSampler:
      return "sampler";
    case KernelClass::kDraft:
      return "draft";
    case KernelClass::kOther:
      break;
  }
  return "other";
}

KernelClock::~KernelClock() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status KernelClock::Create(int marks) {
  while (static_cast<int>(events_.size()) < marks + 1) {
    cudaEvent_t e = nullptr;
    LLM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e), "kernel clock");
    events_.push_back(e);
  }
  classes_.assign(events_.size(), KernelClass::kOther);
  return absl::OkStatus();
}

void KernelClock::Start(cudaStream_t stream) {
  used_ = 0;
  if (events_.empty()) return;
  cudaEventRecord(events_[0], stream);
  used_ = 1;
}

void KernelClock::Mark(KernelClass c, cudaStream_t stream) {
  if (used_ == 0 || used_ >= static_cast<int>(events_.size())) return;
  cudaEventRecord(events_[used_], stream);
  classes_[used_] = c;
  ++used_;
}

void KernelClock::AddTo(KernelTimes& times) const {
  for (int i = 1; i < used_; ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, events_[i - 1], events_[i]) == cudaSuccess) {
      times.ms[static_cast<size_t>(classes_[i])] += ms;
    }
  }
  ++times.steps;
}

}  // namespace llm::runner::cuda
