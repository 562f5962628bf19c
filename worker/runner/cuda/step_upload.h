// One step's upload: the StepLayout's arrays staged back to back (16-byte aligned) in a pinned
// host buffer, copied as one block to the device's upload area, which then has the same layout;
// and the forward pass's and the slot update's views of that area. Pure host logic.
#ifndef LLM_WORKER_RUNNER_CUDA_STEP_UPLOAD_H_
#define LLM_WORKER_RUNNER_CUDA_STEP_UPLOAD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/step/slot_update.h"
#include "worker/runner/cuda/cuda_model.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {

// Every staged array starts at a multiple of 16 bytes of the area.
constexpr size_t kUploadAlign = 16;
constexpr size_t AlignUpload(size_t bytes) {
  return (bytes + kUploadAlign - 1) / kUploadAlign * kUploadAlign;
}

// Bump allocation of one step's upload in pinned memory; the device copy has the same layout.
class Staging {
 public:
  Staging(std::byte* base, size_t capacity) : base_(base), capacity_(capacity) {}
  // Copies `v` in and returns its offset, or -1 when it does not fit.
  template <typename T>
  int64_t Put(const std::vector<T>& v) {
    used_ = AlignUpload(used_);
    const size_t bytes = v.size() * sizeof(T);
    if (used_ + bytes > capacity_) return -1;
    const int64_t offset = static_cast<int64_t>(used_);
    if (bytes > 0) std::memcpy(base_ + used_, v.data(), bytes);
    used_ += bytes;
    return offset;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t capacity_;
  size_t used_ = 0;
};

// A speculative step stages its allowances first (offset 0, one int32 per decoding slot of the
// bucket) and its block limits next, at this offset: its graph reads both at fixed addresses.
size_t SpecLimitOffset(size_t bucket_slots);

// Where each of a step's upload arrays sits in the upload area (byte offsets), as staged.
struct UploadOffsets {
  int64_t draft = 0, limit = 0, admits = 0, settings = 0, grants = 0, blocks = 0, rows = 0;
  int64_t pslot = 0, ppos = 0, ptoken = 0, chunks = 0, tiles = 0, last_tiles = 0;
  int64_t samples = 0, spans = 0, history = 0;
};

// Stages `l`'s upload arrays, the verify groups' allowances and limits first (at 0 and
// SpecLimitOffset). INTERNAL when they overflow the staging or, in a speculative step, the
// allowances and limits are not where the graph reads them.
absl::StatusOr<UploadOffsets> StageUpload(const StepLayout& l, Staging& staging);

// The forward pass's shape of `l`, its arrays read from the device's upload area at `upload`.
ForwardShape ShapeOf(const StepLayout& l, const UploadOffsets& o, const std::byte* upload);

// The slot table's updates of `l` (admissions, settings, grants, decode rows), their arrays read
// from the device's upload area at `upload`; the table's own pointers are the caller's to set.
kernels::SlotUpdateParams SlotUpdatesOf(const StepLayout& l, const UploadOffsets& o,
                                        const std::byte* upload);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_STEP_UPLOAD_H_
