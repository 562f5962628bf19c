// Reading and writing safetensors checkpoints: one file, or shards listed by
// model.safetensors.index.json. Files are memory-mapped; tensors are views into the mapping.
#ifndef LLM_WORKER_MODEL_SAFETENSORS_H_
#define LLM_WORKER_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_file.h"
#include "worker/model/dtype.h"

namespace llm::model {

// A tensor inside a mapped file. Valid while its TensorStore lives.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;  // not necessarily aligned
  size_t num_bytes;
  const std::string* file;  // the file holding it, for error messages

  int64_t num_elements() const;
  std::string ShapeString() const;  // "[2048, 128]"
};

// Parses the header of one mapped safetensors file and checks every entry: known dtype,
// non-negative shape, data_offsets inside the data section, byte size matching shape x dtype,
// no overlaps. Errors name the file and the tensor.
absl::StatusOr<std::vector<TensorView>> ParseSafetensors(const MappedFile& file);

// All tensors of a checkpoint directory: model.safetensors, or the shards named by
// model.safetensors.index.json. Immutable after Open; safe to read from any thread.
struct TensorData;

class TensorStore {
 public:
  static absl::StatusOr<std::unique_ptr<TensorStore>> Open(const std::string& dir);
  // A store over tensors held in memory (synthetic models); `label` stands for the file name in
  // errors. INVALID_ARGUMENT when a tensor's bytes do not match its shape and dtype or a name
  // repeats.
  static absl::StatusOr<std::unique_ptr<TensorStore>> FromTensors(std::string label,
                                                                  std::vector<TensorData> tensors);

  // A store holding `base`'s tensors (and keeping `base` alive), less those named in `removed`,
  // plus `views` (into `base`'s bytes; their `file` may point into `base`) and `owned` tensors.
  // INVALID_ARGUMENT when an added name is already there or a removed one is not.
  static absl::StatusOr<std::unique_ptr<TensorStore>> Derive(
      std::unique_ptr<TensorStore> base, const std::vector<std::string>& removed,
      std::vector<TensorView> views, std::vector<TensorData> owned);

  // nullptr when absent.
  const TensorView* Find(std::string_view name) const;
  // Error naming the checkpoint when absent.
  absl::StatusOr<const TensorView*> Get(std::string_view name) const;
  const std::string& dir() const { return dir_; }
  size_t size() const { return tensors_.size(); }
  std::vector<std::string> Names() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::string> owned_;  // FromTensors: the tensors' bytes
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::unique_ptr<TensorStore> base_;  // Derive: the store whose bytes the views read
};

// One tensor to write: raw little-endian bytes of `dtype`.
struct TensorData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Writes a safetensors file. Tensors are laid out in the given order.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorData>& tensors);

// Every tensor of one safetensors file, copied out (checked as ParseSafetensors does), in the
// file's order: to rewrite a file with tensors added or changed.
absl::StatusOr<std::vector<TensorData>> ReadSafetensors(const std::string& path);

// Streaming writer for checkpoints too large to hold in memory: the header is written first
// from the declared tensors, then each tensor's bytes in declaration order.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(const std::string& path,
                                                                   std::vector<Entry> entries);
  ~SafetensorsWriter();
  // Appends the next tensor's bytes; `bytes.size()` must match its declared size in total over
  // one or more calls.
  absl::Status Append(std::string_view bytes);
  absl::Status Close();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::FILE* out_ = nullptr;
  uint64_t expected_bytes_ = 0;
  uint64_t written_bytes_ = 0;
};

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_SAFETENSORS_H_
