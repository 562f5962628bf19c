#include "worker/model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace llm::model {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read in place");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr size_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
// Limits that keep a corrupt file from asking for huge allocations. Real files stay far below:
// the largest strings are embedded tokenizer JSON (tens of MB), the largest arrays vocabularies
// and merge lists (~10^6 elements in all).
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 28;
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 24;
constexpr int kMaxArrayDepth = 8;

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Bytes of a scalar value type; 0 for STRING and ARRAY.
size_t ScalarBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes a value of type `t` takes in a file (a string's length, an array's element
// type and count).
size_t MinValueBytes(GgufValueType t) {
  if (t == GgufValueType::kString) return 8;
  if (t == GgufValueType::kArray) return 12;
  return ScalarBytes(t);
}

bool IsIntegerType(GgufValueType t) {
  return ScalarBytes(t) > 0 && t != GgufValueType::kBool && t != GgufValueType::kFloat32 &&
         t != GgufValueType::kFloat64;
}

bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}

// Decodes a scalar of type `t` from ScalarBytes(t) bytes at `p`.
GgufValue DecodeScalar(GgufValueType t, const std::byte* p) {
  uint64_t raw = 0;
  std::memcpy(&raw, p, ScalarBytes(t));
  switch (t) {
    case GgufValueType::kUint8:
      return GgufValue::Uint8(static_cast<uint8_t>(raw));
    case GgufValueType::kInt8:
      return GgufValue::Int8(static_cast<int8_t>(raw));
    case GgufValueType::kUint16:
      return GgufValue::Uint16(static_cast<uint16_t>(raw));
    case GgufValueType::kInt16:
      return GgufValue::Int16(static_cast<int16_t>(raw));
    case GgufValueType::kUint32:
      return GgufValue::Uint32(static_cast<uint32_t>(raw));
    case GgufValueType::kInt32:
      return GgufValue::Int32(static_cast<int32_t>(raw));
    case GgufValueType::kUint64:
      return GgufValue::Uint64(raw);
    case GgufValueType::kInt64:
      return GgufValue::Int64(static_cast<int64_t>(raw));
    case GgufValueType::kFloat32:
      return GgufValue::Float32(std::bit_cast<float>(static_cast<uint32_t>(raw)));
    case GgufValueType::kFloat64:
      return GgufValue::Float64(std::bit_cast<double>(raw));
    case GgufValueType::kBool:
      return GgufValue::Bool(raw != 0);
    case GgufValueType::kString:
    case GgufValueType::kArray:
      break;
  }
  return GgufValue();
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// "UINT32", or "ARRAY of STRING".
std::string Describe(const GgufValue& v) {
  if (!v.is_array()) return GgufValueTypeName(v.type());
  return absl::StrCat("ARRAY of ", GgufValueTypeName(v.element_type()));
}

}  // namespace

std::string GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                           "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                           "UINT64", "INT64",   "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  if (IsKnownValueType(i)) return kNames[i];
  return absl::StrCat("unknown value type ", i);
}

// ---- GgufValue ---------------------------------------------------------------------------------

GgufValue GgufValue::Scalar(GgufValueType type, uint64_t bits) {
  GgufValue v;
  v.type_ = type;
  v.bits_ = bits;
  return v;
}

GgufValue GgufValue::Uint8(uint8_t v) { return Scalar(GgufValueType::kUint8, v); }
GgufValue GgufValue::Uint16(uint16_t v) { return Scalar(GgufValueType::kUint16, v); }
GgufValue GgufValue::Uint32(uint32_t v) { return Scalar(GgufValueType::kUint32, v); }
GgufValue GgufValue::Uint64(uint64_t v) { return Scalar(GgufValueType::kUint64, v); }
GgufValue GgufValue::Int8(int8_t v) {
  return Scalar(GgufValueType::kInt8, static_cast<uint64_t>(static_cast<int64_t>(v)));
}
GgufValue GgufValue::Int16(int16_t v) {
  return Scalar(GgufValueType::kInt16, static_cast<uint64_t>(static_cast<int64_t>(v)));
}
GgufValue GgufValue::Int32(int32_t v) {
  return Scalar(GgufValueType::kInt32, static_cast<uint64_t>(static_cast<int64_t>(v)));
}
GgufValue GgufValue::Int64(int64_t v) {
  return Scalar(GgufValueType::kInt64, static_cast<uint64_t>(v));
}
GgufValue GgufValue::Float32(float v) {
  return Scalar(GgufValueType::kFloat32, std::bit_cast<uint64_t>(static_cast<double>(v)));
}
GgufValue GgufValue::Float64(double v) {
  return Scalar(GgufValueType::kFloat64, std::bit_cast<uint64_t>(v));
}
GgufValue GgufValue::Bool(bool v) { return Scalar(GgufValueType::kBool, v ? 1 : 0); }

GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::kString;
  out.string_ = std::move(v);
  return out;
}

GgufValue GgufValue::Array(GgufValueType element_type, std::vector<GgufValue> elements) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.element_type_ = element_type;
  out.elements_ = std::move(elements);
  return out;
}

bool GgufValue::is_integer() const { return IsIntegerType(type_); }

bool GgufValue::is_float() const {
  return type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (!is_integer()) return std::nullopt;
  if (!IsSigned(type_) && bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<int64_t>(bits_);
}

std::optional<uint64_t> GgufValue::AsUint() const {
  if (!is_integer()) return std::nullopt;
  if (IsSigned(type_) && static_cast<int64_t>(bits_) < 0) return std::nullopt;
  return bits_;
}

std::optional<double> GgufValue::AsDouble() const {
  if (!is_float()) return std::nullopt;
  return std::bit_cast<double>(bits_);
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return bits_ != 0;
}

const std::string* GgufValue::AsString() const {
  return type_ == GgufValueType::kString ? &string_ : nullptr;
}

// ---- GgufTensor --------------------------------------------------------------------------------

int64_t GgufTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> GgufTensor::RowMajorShape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

// ---- Parsing -----------------------------------------------------------------------------------

// Reads one mapped file into a GgufFile, checking every read against the bytes left.
class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* f) : f_(f), data_(f->file_->data()), size_(f->file_->size()) {}

  absl::Status Parse() {
    uint64_t num_tensors = 0;
    uint64_t num_kv = 0;
    LLM_RETURN_IF_ERROR(ReadHeader(&num_tensors, &num_kv));
    LLM_RETURN_IF_ERROR(ReadMetadata(num_kv));
    LLM_RETURN_IF_ERROR(ReadAlignment());
    std::vector<uint64_t> offsets;
    LLM_RETURN_IF_ERROR(ReadTensorInfos(num_tensors, &offsets));
    return PlaceTensors(offsets);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(f_->path(), ": ", what));
  }
  absl::Status Truncated(const std::string& what) const {
    return Error(absl::StrCat("truncated: ", what, " at byte ", pos_, " runs past the end of the ",
                              size_, "-byte file"));
  }
  size_t remaining() const { return size_ - pos_; }

  // Copies `n` bytes and advances; false (nothing read) when fewer are left.
  bool Read(void* dst, size_t n) {
    if (n > remaining()) return false;
    std::memcpy(dst, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  absl::Status ReadInt(T* v, const std::string& what) {
    return Read(v, sizeof(T)) ? absl::OkStatus() : Truncated(what);
  }

  absl::Status ReadHeader(uint64_t* num_tensors, uint64_t* num_kv);
  absl::StatusOr<std::string> ReadString(const std::string& what);
  absl::Status ReadValue(GgufValueType type, const std::string& key, int depth, GgufValue* out);
  absl::Status ReadArray(const std::string& key, int depth, GgufValue* out);
  absl::Status ReadMetadata(uint64_t num_kv);
  absl::Status ReadAlignment();
  absl::Status ReadTensorInfo(GgufTensor* t, uint64_t* offset);
  absl::Status ReadTensorInfos(uint64_t num_tensors, std::vector<uint64_t>* offsets);
  absl::Status PlaceTensors(const std::vector<uint64_t>& offsets);

  GgufFile* f_;
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t num_elements_ = 0;  // array elements read so far, against kMaxMetadataElements
};

absl::Status GgufFile::Parser::ReadHeader(uint64_t* num_tensors, uint64_t* num_kv) {
  uint32_t magic = 0;
  if (!Read(&magic, sizeof(magic)) || magic != kMagic) {
    return Error("not a GGUF file (no \"GGUF\" magic)");
  }
  LLM_RETURN_IF_ERROR(ReadInt(&f_->version_, "the version"));
  if (f_->version_ != 2 && f_->version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(f_->version_);
    return Error(absl::StrCat("unsupported GGUF version ", f_->version_, " (only 2 and 3",
                              swapped == 2 || swapped == 3 ? "; the file looks big-endian" : "",
                              ")"));
  }
  LLM_RETURN_IF_ERROR(ReadInt(num_tensors, "the tensor count"));
  LLM_RETURN_IF_ERROR(ReadInt(num_kv, "the metadata count"));
  // Each tensor info takes at least 24 bytes, each key/value at least 13.
  if (*num_tensors > remaining() / 24) {
    return Error(absl::StrCat("corrupt header: ", *num_tensors, " tensors cannot fit in ",
                              remaining(), " bytes"));
  }
  if (*num_kv > remaining() / 13) {
    return Error(absl::StrCat("corrupt header: ", *num_kv, " metadata entries cannot fit in ",
                              remaining(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufFile::Parser::ReadString(const std::string& what) {
  uint64_t len = 0;
  LLM_RETURN_IF_ERROR(ReadInt(&len, what));
  if (len > remaining()) {
    return Error(absl::StrCat("truncated or corrupt: ", what, " has length ", len, " but only ",
                              remaining(), " bytes are left"));
  }
  if (len > kMaxStringBytes) {
    return Error(absl::StrCat(what, " has length ", len, ", over the limit of ", kMaxStringBytes));
  }
  std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return s;
}

absl::Status GgufFile::Parser::ReadValue(GgufValueType type, const std::string& key, int depth,
                                         GgufValue* out) {
  if (type == GgufValueType::kArray) return ReadArray(key, depth + 1, out);
  if (type == GgufValueType::kString) {
    LLM_ASSIGN_OR_RETURN(std::string s, ReadString(absl::StrCat("the string of key '", key, "'")));
    *out = GgufValue::String(std::move(s));
    return absl::OkStatus();
  }
  const size_t n = ScalarBytes(type);
  if (n > remaining()) return Truncated(absl::StrCat("the value of key '", key, "'"));
  *out = DecodeScalar(type, data_ + pos_);
  pos_ += n;
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ReadArray(const std::string& key, int depth, GgufValue* out) {
  const std::string where = absl::StrCat("key '", key, "'");
  if (depth > kMaxArrayDepth) {
    return Error(absl::StrCat(where, ": arrays nested deeper than ", kMaxArrayDepth));
  }
  uint32_t raw_type = 0;
  uint64_t count = 0;
  LLM_RETURN_IF_ERROR(ReadInt(&raw_type, absl::StrCat("the array type of ", where)));
  if (!IsKnownValueType(raw_type)) {
    return Error(absl::StrCat(where, ": unknown array element type ", raw_type));
  }
  const auto type = static_cast<GgufValueType>(raw_type);
  LLM_RETURN_IF_ERROR(ReadInt(&count, absl::StrCat("the array length of ", where)));
  if (count > remaining() / MinValueBytes(type)) {
    return Error(absl::StrCat("truncated or corrupt: ", where, ": array of ", count, " ",
                              GgufValueTypeName(type), " cannot fit in the ", remaining(),
                              " bytes left"));
  }
  if (count > kMaxMetadataElements - num_elements_) {
    return Error(absl::StrCat(where, ": array of ", count, " elements takes the metadata over ",
                              kMaxMetadataElements, " array elements"));
  }
  num_elements_ += count;
  // Grows as elements are read: a corrupt count fails before memory is taken for elements the
  // file does not hold.
  std::vector<GgufValue> elements;
  elements.reserve(static_cast<size_t>(std::min<uint64_t>(count, 4096)));
  for (uint64_t i = 0; i < count; ++i) {
    LLM_RETURN_IF_ERROR(ReadValue(type, key, depth, &elements.emplace_back()));
  }
  *out = GgufValue::Array(type, std::move(elements));
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ReadMetadata(uint64_t num_kv) {
  for (uint64_t i = 0; i < num_kv; ++i) {
    LLM_ASSIGN_OR_RETURN(std::string key,
                         ReadString(absl::StrCat("the key of metadata entry ", i)));
    uint32_t raw_type = 0;
    LLM_RETURN_IF_ERROR(ReadInt(&raw_type, absl::StrCat("the type of key '", key, "'")));
    if (!IsKnownValueType(raw_type)) {
      return Error(absl::StrCat("key '", key, "': unknown value type ", raw_type));
    }
    GgufValue value;
    LLM_RETURN_IF_ERROR(ReadValue(static_cast<GgufValueType>(raw_type), key, 0, &value));
    if (!f_->key_index_.emplace(key, f_->metadata_.size()).second) {
      return Error(absl::StrCat("key '", key, "' appears twice"));
    }
    f_->metadata_.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ReadAlignment() {
  const GgufValue* v = f_->Find("general.alignment");
  if (v == nullptr) return absl::OkStatus();
  const std::optional<uint64_t> a = v->AsUint();
  if (v->type() != GgufValueType::kUint32 || !a || *a == 0 || !std::has_single_bit(*a)) {
    return Error(absl::StrCat("key 'general.alignment' must be a UINT32 power of two, not ",
                              Describe(*v), a ? absl::StrCat(" ", *a) : ""));
  }
  f_->alignment_ = static_cast<size_t>(*a);
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ReadTensorInfo(GgufTensor* t, uint64_t* offset) {
  const auto fail = [&](const std::string& what) {
    return Error(absl::StrCat("tensor '", t->name, "': ", what));
  };
  uint32_t num_dims = 0;
  LLM_RETURN_IF_ERROR(ReadInt(&num_dims, absl::StrCat("the dims of tensor '", t->name, "'")));
  if (num_dims > kMaxDims) return fail(absl::StrCat(num_dims, " dims (at most ", kMaxDims, ")"));
  uint64_t elements = 1;
  for (uint32_t i = 0; i < num_dims; ++i) {
    uint64_t d = 0;
    LLM_RETURN_IF_ERROR(ReadInt(&d, absl::StrCat("the dims of tensor '", t->name, "'")));
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (d != 0 && elements > (uint64_t{1} << 62) / d)) {
      return fail("dims too large");
    }
    elements *= d;
    t->dims.push_back(static_cast<int64_t>(d));
  }
  LLM_RETURN_IF_ERROR(ReadInt(&t->type, absl::StrCat("the type of tensor '", t->name, "'")));
  LLM_RETURN_IF_ERROR(ReadInt(offset, absl::StrCat("the offset of tensor '", t->name, "'")));
  const int64_t block = GgufBlockSize(t->type);
  if (block == 0) return fail(GgufTypeName(t->type));
  const int64_t row = t->dims.empty() ? 1 : t->dims[0];
  if (row % block != 0) {
    return fail(absl::StrCat("row length ", row, " is not a multiple of the ",
                             GgufTypeName(t->type), " block size ", block));
  }
  // elements <= 2^62 and type sizes are small, so this does not overflow.
  t->num_bytes = static_cast<size_t>(elements / static_cast<uint64_t>(block) *
                                     static_cast<uint64_t>(GgufTypeSize(t->type)));
  if (*offset % f_->alignment_ != 0) {
    return fail(
        absl::StrCat("offset ", *offset, " is not a multiple of the alignment ", f_->alignment_));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ReadTensorInfos(uint64_t num_tensors,
                                               std::vector<uint64_t>* offsets) {
  f_->tensors_.reserve(static_cast<size_t>(num_tensors));  // bounded by ReadHeader
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensor t{};
    LLM_ASSIGN_OR_RETURN(t.name, ReadString(absl::StrCat("the name of tensor ", i)));
    uint64_t offset = 0;
    LLM_RETURN_IF_ERROR(ReadTensorInfo(&t, &offset));
    if (!f_->tensor_index_.emplace(t.name, f_->tensors_.size()).second) {
      return Error(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    f_->tensors_.push_back(std::move(t));
    offsets->push_back(offset);
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::PlaceTensors(const std::vector<uint64_t>& offsets) {
  auto& tensors = f_->tensors_;
  if (tensors.empty()) return absl::OkStatus();
  const uint64_t data_start = AlignUp(pos_, f_->alignment_);
  if (data_start > size_) {
    return Error(absl::StrCat("truncated: the data section would start at byte ", data_start,
                              ", past the end of the ", size_, "-byte file"));
  }
  const uint64_t data_size = size_ - data_start;
  for (size_t i = 0; i < tensors.size(); ++i) {
    GgufTensor& t = tensors[i];
    if (offsets[i] > data_size || t.num_bytes > data_size - offsets[i]) {
      return Error(absl::StrCat("tensor '", t.name, "': data [", offsets[i], ", +", t.num_bytes,
                                ") runs past the end of the ", data_size,
                                "-byte data section (truncated file?)"));
    }
    t.data = data_ + data_start + offsets[i];
  }
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors) {
    if (t.num_bytes > 0) by_offset.push_back(&t);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const GgufTensor* a, const GgufTensor* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->data + by_offset[i - 1]->num_bytes > by_offset[i]->data) {
      return Error(absl::StrCat("tensor '", by_offset[i]->name, "': data overlaps tensor '",
                                by_offset[i - 1]->name, "'"));
    }
  }
  return absl::OkStatus();
}

// ---- GgufFile ----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  LLM_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  LLM_RETURN_IF_ERROR(Parser(f.get()).Parse());
  return f;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(metadata_.size());
  for (const auto& [key, value] : metadata_) keys.push_back(key);
  return keys;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- Typed getters -----------------------------------------------------------------------------

namespace {

absl::Status WrongType(const std::string& path, std::string_view key, const GgufValue& v,
                       const std::string& want) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": metadata key '", std::string(key),
                                                 "' is ", Describe(v), ", not ", want));
}

}  // namespace

absl::StatusOr<const GgufValue*> GgufFile::Get(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path(), ": no metadata key '", std::string(key), "'"));
  }
  return v;
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_integer()) return WrongType(path(), key, *v, "an integer");
  const std::optional<int64_t> i = v->AsInt();
  if (!i) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": metadata key '", std::string(key),
                                                   "' value ", *v->AsUint(),
                                                   " does not fit int64"));
  }
  return *i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_float()) return WrongType(path(), key, *v, "FLOAT32 or FLOAT64");
  return *v->AsDouble();
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->AsBool()) return WrongType(path(), key, *v, "BOOL");
  return *v->AsBool();
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (v->AsString() == nullptr) return WrongType(path(), key, *v, "STRING");
  return *v->AsString();
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_array() || v->element_type() != GgufValueType::kString) {
    return WrongType(path(), key, *v, "ARRAY of STRING");
  }
  std::vector<std::string> out;
  out.reserve(v->elements().size());
  for (const GgufValue& e : v->elements()) out.push_back(*e.AsString());
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_array() || !IsIntegerType(v->element_type())) {
    return WrongType(path(), key, *v, "an ARRAY of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->elements().size());
  for (const GgufValue& e : v->elements()) {
    const std::optional<int64_t> i = e.AsInt();
    if (!i) {
      return absl::InvalidArgumentError(absl::StrCat(path(), ": metadata key '", std::string(key),
                                                     "' element ", out.size(), " value ",
                                                     *e.AsUint(), " does not fit int64"));
    }
    out.push_back(*i);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  LLM_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_array() || (v->element_type() != GgufValueType::kFloat32 &&
                         v->element_type() != GgufValueType::kFloat64)) {
    return WrongType(path(), key, *v, "an ARRAY of FLOAT32 or FLOAT64");
  }
  std::vector<double> out;
  out.reserve(v->elements().size());
  for (const GgufValue& e : v->elements()) out.push_back(*e.AsDouble());
  return out;
}

// ---- Writing ----------------------------------------------------------------------------------

namespace {

void PutBytes(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
template <typename T>
void PutInt(std::string* out, T v) {
  PutBytes(out, &v, sizeof(v));
}
void PutString(std::string* out, std::string_view s) {
  PutInt<uint64_t>(out, s.size());
  out->append(s);
}

// Appends `v` (without its type tag); false when an array holds an element of another type.
bool PutValue(std::string* out, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::kString:
      PutString(out, *v.AsString());
      return true;
    case GgufValueType::kArray:
      PutInt(out, static_cast<uint32_t>(v.element_type()));
      PutInt<uint64_t>(out, v.elements().size());
      for (const GgufValue& e : v.elements()) {
        if (e.type() != v.element_type() || !PutValue(out, e)) return false;
      }
      return true;
    case GgufValueType::kFloat32:
      PutInt(out, static_cast<float>(*v.AsDouble()));
      return true;
    case GgufValueType::kFloat64:
      PutInt(out, *v.AsDouble());
      return true;
    case GgufValueType::kBool:
      PutInt<uint8_t>(out, *v.AsBool() ? 1 : 0);
      return true;
    default: {
      // Integers: the low bytes of the sign- or zero-extended value.
      const uint64_t bits = IsSigned(v.type()) ? static_cast<uint64_t>(*v.AsInt()) : *v.AsUint();
      PutBytes(out, &bits, ScalarBytes(v.type()));
      return true;
    }
  }
}

// The byte size of `t`'s data, or an error naming the tensor.
absl::StatusOr<uint64_t> TensorBytes(const GgufTensorData& t) {
  const int64_t block = GgufBlockSize(t.type);
  const auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", t.name, "': ", what));
  };
  if (block == 0) return fail(GgufTypeName(t.type));
  if (t.dims.size() > kMaxDims) return fail("more than 4 dims");
  int64_t elements = 1;
  for (int64_t d : t.dims) {
    if (d < 0) return fail("negative dim");
    elements *= d;
  }
  if ((t.dims.empty() ? 1 : t.dims[0]) % block != 0) {
    return fail(absl::StrCat("row length is not a multiple of the ", GgufTypeName(t.type),
                             " block size ", block));
  }
  const uint64_t need = static_cast<uint64_t>(elements / block * GgufTypeSize(t.type));
  if (need != t.bytes.size()) {
    return fail(absl::StrCat("dims [", absl::StrJoin(t.dims, ", "), "] of ", GgufTypeName(t.type),
                             " need ", need, " bytes, not ", t.bytes.size()));
  }
  return need;
}

}  // namespace

absl::Status WriteGguf(const std::string& path,
                       const std::vector<std::pair<std::string, GgufValue>>& metadata,
                       const std::vector<GgufTensorData>& tensors) {
  uint64_t alignment = kDefaultAlignment;
  std::string head;
  PutInt(&head, kMagic);
  PutInt<uint32_t>(&head, 3);
  PutInt<uint64_t>(&head, tensors.size());
  PutInt<uint64_t>(&head, metadata.size());
  for (const auto& [key, value] : metadata) {
    PutString(&head, key);
    PutInt(&head, static_cast<uint32_t>(value.type()));
    if (!PutValue(&head, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": metadata key '", key, "': an array element has the wrong type"));
    }
    if (key == "general.alignment" && value.type() == GgufValueType::kUint32) {
      alignment = std::max<uint64_t>(1, *value.AsUint());
    }
  }
  uint64_t offset = 0;
  for (const GgufTensorData& t : tensors) {
    LLM_ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(t));
    PutString(&head, t.name);
    PutInt<uint32_t>(&head, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) PutInt<uint64_t>(&head, static_cast<uint64_t>(d));
    PutInt<uint32_t>(&head, t.type);
    PutInt<uint64_t>(&head, offset);
    offset = AlignUp(offset + bytes, alignment);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  head.resize(AlignUp(head.size(), alignment), '\0');
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  const std::string padding(alignment, '\0');
  for (const GgufTensorData& t : tensors) {
    out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
    out.write(padding.data(),
              static_cast<std::streamsize>(AlignUp(t.bytes.size(), alignment) - t.bytes.size()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace llm::model
