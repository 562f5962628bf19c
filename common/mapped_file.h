// Read-only memory mapping of a whole file (used for safetensors weights).
#ifndef LLM_COMMON_MAPPED_FILE_H_
#define LLM_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm {

// Owns a read-only mmap of one file; the mapping lives as long as the object. Thread-safe to
// read from any thread. Errors name the path.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const std::byte* data_;
  size_t size_;
};

// Reads a whole (small) file into a string; the error names the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path`, replacing it; the error names the path.
absl::Status WriteStringToFile(const std::string& path, std::string_view contents);

}  // namespace llm

#endif  // LLM_COMMON_MAPPED_FILE_H_
