// Reading (and, for tests and tools, writing) GGUF files: llama.cpp's single-file checkpoint
// format (versions 2 and 3, little-endian). A file is a header, typed metadata key/values,
// tensor infos and an aligned data section; the file is memory-mapped and tensors are views into
// the mapping. Element types and dequantisation live in gguf_quant.h.
#ifndef LLM_WORKER_MODEL_GGUF_H_
#define LLM_WORKER_MODEL_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mapped_file.h"
#include "worker/model/gguf_quant.h"

namespace llm::model {

// Metadata value types as stored in the file.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "UINT32", "STRING", ... (gguf-py's names); "unknown value type N" otherwise.
std::string GgufValueTypeName(GgufValueType type);

// One metadata value: a scalar of one of the integer, float or bool types, a string (bytes, not
// checked for UTF-8), or an array whose elements all have `element_type()` (arrays of arrays
// allowed). A plain value type; copies are deep.
class GgufValue {
 public:
  GgufValue() = default;  // UINT8 0
  static GgufValue Uint8(uint8_t v);
  static GgufValue Int8(int8_t v);
  static GgufValue Uint16(uint16_t v);
  static GgufValue Int16(int16_t v);
  static GgufValue Uint32(uint32_t v);
  static GgufValue Int32(int32_t v);
  static GgufValue Uint64(uint64_t v);
  static GgufValue Int64(int64_t v);
  static GgufValue Float32(float v);
  static GgufValue Float64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  // Every element should have type `element_type`; WriteGguf rejects an array where one does not.
  static GgufValue Array(GgufValueType element_type, std::vector<GgufValue> elements);

  GgufValueType type() const { return type_; }
  bool is_integer() const;  // any of the eight integer types
  bool is_float() const;    // FLOAT32 or FLOAT64
  bool is_array() const { return type_ == GgufValueType::kArray; }

  // The value of an integer of any width and sign, when it fits in int64; nullopt otherwise.
  std::optional<int64_t> AsInt() const;
  // The value of an unsigned integer, or of a signed one that is non-negative.
  std::optional<uint64_t> AsUint() const;
  // FLOAT32 (exactly) or FLOAT64.
  std::optional<double> AsDouble() const;
  std::optional<bool> AsBool() const;
  // nullptr unless a string.
  const std::string* AsString() const;

  // Arrays only (element_type() is meaningless, elements() empty, for scalars).
  GgufValueType element_type() const { return element_type_; }
  const std::vector<GgufValue>& elements() const { return elements_; }

  bool operator==(const GgufValue& other) const = default;  // floats compare by bits

 private:
  static GgufValue Scalar(GgufValueType type, uint64_t bits);

  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  // Scalars: integers sign- or zero-extended to 64 bits, floats as the bits of a double, bools
  // as 0/1.
  uint64_t bits_ = 0;
  std::string string_;
  std::vector<GgufValue> elements_;
};

// A tensor inside a GgufFile's mapping; valid while the GgufFile lives.
struct GgufTensor {
  std::string name;
  uint32_t type;              // raw ggml type id (GgufType when known)
  std::vector<int64_t> dims;  // ggml order: dims[0] varies fastest (a row's length)
  const std::byte* data;      // inside the mapping; not necessarily aligned beyond the file's
  size_t num_bytes;

  int64_t num_elements() const;
  // The same shape in row-major (safetensors/PyTorch) order: dims reversed.
  std::vector<int64_t> RowMajorShape() const;
};

// An open GGUF file. Immutable after Open; safe to read from any thread.
class GgufFile {
 public:
  // Memory-maps `path` and checks everything before returning: magic "GGUF", version 2 or 3,
  // every string, array and tensor info inside the file, counts and lengths against the bytes
  // left (so a corrupt count fails instead of allocating), no repeated key or tensor name,
  // general.alignment (UINT32, a power of two, default 32), tensor types known, dims[0] a whole
  // number of blocks, offsets aligned, every tensor's data inside the file and no two
  // overlapping. NOT_FOUND when the file cannot be opened; INVALID_ARGUMENT otherwise. Errors
  // name the file and, where there is one, the key or tensor.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NOT_FOUND naming the file and key when absent, INVALID_ARGUMENT naming them
  // when the value has another type (or an integer does not fit int64). GetInt takes any
  // integer type, GetFloat FLOAT32 or FLOAT64; the array getters take arrays of those types.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  // In file order.
  std::vector<std::string> Keys() const;

  // In file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  class Parser;
  GgufFile() = default;
  absl::StatusOr<const GgufValue*> Get(std::string_view key) const;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;  // key -> metadata_ index
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> tensors_ index
};

// One tensor for WriteGguf: `bytes` already in `type`'s layout.
struct GgufTensorData {
  std::string name;
  uint32_t type;
  std::vector<int64_t> dims;  // ggml order, as GgufTensor::dims
  std::string bytes;
};

// Writes a version 3 GGUF file: the metadata in the given order, then the tensors, each at the
// next multiple of the alignment (general.alignment when given as UINT32, else 32).
// INVALID_ARGUMENT naming the key or tensor for an array with an element of the wrong type, a
// tensor whose bytes do not match its dims and type, or an unknown type; the error names the
// path when the file cannot be written.
absl::Status WriteGguf(const std::string& path,
                       const std::vector<std::pair<std::string, GgufValue>>& metadata,
                       const std::vector<GgufTensorData>& tensors);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_GGUF_H_
