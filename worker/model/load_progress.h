// A checkpoint load's progress on stderr: "<label>: <verb> X of Y MiB, T of N tensors", at most
// once a second and only once the load has taken a second, from whichever thread reports
// (GGUF dequantisation, the CPU weights' conversion, the CUDA upload). Thread-safe.
#ifndef LLM_WORKER_MODEL_LOAD_PROGRESS_H_
#define LLM_WORKER_MODEL_LOAD_PROGRESS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace llm::model {

class LoadProgress {
 public:
  // `total_tensors` 0: the line counts bytes only. `enabled` false: prints nothing.
  LoadProgress(std::string label, std::string verb, uint64_t total_bytes, size_t total_tensors,
               bool enabled = true);

  void Add(uint64_t bytes, size_t tensors);

 private:
  static int64_t NowNs();

  const std::string label_, verb_;
  const uint64_t total_bytes_;
  const size_t total_tensors_;
  const bool enabled_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<size_t> tensors_{0};
  std::atomic<int64_t> last_;  // when the last line was printed (or the load began)
};

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_LOAD_PROGRESS_H_
