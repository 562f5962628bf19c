#include "worker/model/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace llm::model {
namespace {

using nlohmann::json;

// Headers larger than this are treated as corrupt (the format caps them at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

absl::Status TensorError(const std::string& file, const std::string& tensor,
                         const std::string& what) {
  return absl::DataLossError(absl::StrCat(file, ": tensor '", tensor, "': ", what));
}

absl::StatusOr<TensorView> ParseEntry(const std::string& file, const std::string& name,
                                      const json& e, const std::byte* data, uint64_t data_size) {
  if (!e.is_object()) return TensorError(file, name, "header entry is not an object");
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return TensorError(file, name, "missing dtype");
  const auto dtype = ParseDType(dt->get<std::string>());
  if (!dtype) {
    return TensorError(file, name, absl::StrCat("unknown dtype '", dt->get<std::string>(), "'"));
  }
  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) return TensorError(file, name, "missing shape");
  TensorView v{name, *dtype, {}, nullptr, 0, nullptr};
  uint64_t elements = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return TensorError(file, name, "shape must hold non-negative integers");
    }
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && elements > (uint64_t{1} << 62) / dim) {
      return TensorError(file, name, "shape too large");
    }
    elements *= dim;
    v.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return TensorError(file, name, "data_offsets must be two non-negative integers");
  }
  const auto begin = (*off)[0].get<uint64_t>();
  const auto end = (*off)[1].get<uint64_t>();
  if (begin > end) return TensorError(file, name, "data_offsets begin after they end");
  if (end > data_size) {
    return TensorError(
        file, name,
        absl::StrCat("data_offsets [", begin, ", ", end, ") run past the end of the ", data_size,
                     "-byte data section (truncated file?)"));
  }
  const uint64_t need = elements * DTypeSize(*dtype);
  if (need != end - begin) {
    return TensorError(
        file, name,
        absl::StrCat("shape ", v.ShapeString(), " of ", std::string(DTypeName(*dtype)), " needs ",
                     need, " bytes but data_offsets give ", end - begin));
  }
  v.data = data + begin;
  v.num_bytes = end - begin;
  return v;
}

}  // namespace

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::vector<TensorView>> ParseSafetensors(const MappedFile& f) {
  const std::string& path = f.path();
  if (f.size() < 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", f.size(),
                                            " bytes, too short for a safetensors header"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(f.data()[i]);
  if (header_len > kMaxHeaderBytes || header_len > f.size() - 8) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt header: header length ", header_len,
                                            " does not fit the ", f.size(), "-byte file"));
  }
  const auto* header_begin = reinterpret_cast<const char*>(f.data() + 8);
  json header = json::parse(header_begin, header_begin + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt header: not a JSON object"));
  }
  const std::byte* data = f.data() + 8 + header_len;
  const uint64_t data_size = f.size() - 8 - header_len;
  std::vector<TensorView> out;
  out.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    LLM_ASSIGN_OR_RETURN(TensorView v, ParseEntry(path, name, entry, data, data_size));
    v.file = &f.path();
    out.push_back(std::move(v));
  }
  // Tensors must not overlap (zero-sized ones may share an offset).
  std::vector<const TensorView*> by_offset;
  for (const auto& v : out) {
    if (v.num_bytes > 0) by_offset.push_back(&v);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->data + by_offset[i - 1]->num_bytes > by_offset[i]->data) {
      return TensorError(path, by_offset[i]->name,
                         absl::StrCat("overlaps tensor '", by_offset[i - 1]->name, "'"));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto store = std::make_unique<TensorStore>();
  store->dir_ = dir;
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(dir) / "model.safetensors").string();

  std::map<std::string, std::string> weight_map;  // tensor -> file name
  std::vector<std::string> files;
  if (fs::exists(index_path)) {
    LLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::DataLossError(index_path + ": corrupt index: no weight_map object");
    }
    std::set<std::string> seen;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::DataLossError(
            absl::StrCat(index_path, ": weight_map entry '", tensor, "' is not a file name"));
      }
      const std::string name = file.get<std::string>();
      if (name.find('/') != std::string::npos || name == ".." || name.empty()) {
        return absl::DataLossError(
            absl::StrCat(index_path, ": weight_map entry '", tensor, "' names a bad file"));
      }
      weight_map[tensor] = name;
      if (seen.insert(name).second) files.push_back(name);
    }
  } else if (fs::exists(single_path)) {
    files.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no model.safetensors or ", "model.safetensors.index.json"));
  }

  std::map<std::string, const MappedFile*> by_name;
  for (const auto& name : files) {
    LLM_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open((fs::path(dir) / name).string()));
    LLM_ASSIGN_OR_RETURN(std::vector<TensorView> views, ParseSafetensors(*mapped));
    for (auto& v : views) {
      if (!weight_map.empty()) {
        const auto it = weight_map.find(v.name);
        if (it == weight_map.end() || it->second != name) continue;  // listed in another shard
      }
      if (store->tensors_.count(v.name)) {
        return TensorError(mapped->path(), v.name, "appears in more than one file");
      }
      std::string key = v.name;
      store->tensors_.emplace(std::move(key), std::move(v));
    }
    by_name[name] = mapped.get();
    store->files_.push_back(std::move(mapped));
  }
  for (const auto& [tensor, file] : weight_map) {
    if (!store->tensors_.count(tensor)) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor '", tensor, "' is listed in ",
                                              file, " but that file does not hold it"));
    }
  }
  return store;
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::FromTensors(
    std::string label, std::vector<TensorData> tensors) {
  auto store = std::make_unique<TensorStore>();
  store->dir_ = std::move(label);
  store->owned_.reserve(tensors.size());
  for (TensorData& t : tensors) {
    TensorView v{t.name, t.dtype, t.shape, nullptr, t.bytes.size(), &store->dir_};
    if (v.num_elements() < 0 ||
        static_cast<size_t>(v.num_elements()) * DTypeSize(t.dtype) != t.bytes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(store->dir_, ": tensor '", t.name, "' holds ", t.bytes.size(),
                       " bytes, not ", v.ShapeString(), " of ", std::string(DTypeName(t.dtype))));
    }
    // NOTE: owned_ is reserved up front, so the strings (and their buffers) never move.
    store->owned_.push_back(std::move(t.bytes));
    v.data = reinterpret_cast<const std::byte*>(store->owned_.back().data());
    if (!store->tensors_.emplace(t.name, std::move(v)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(store->dir_, ": tensor '", t.name, "' appears twice"));
    }
  }
  return store;
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::Derive(
    std::unique_ptr<TensorStore> base, const std::vector<std::string>& removed,
    std::vector<TensorView> views, std::vector<TensorData> owned) {
  LLM_ASSIGN_OR_RETURN(auto store, FromTensors(base->dir_, std::move(owned)));
  std::map<std::string, TensorView, std::less<>> tensors = base->tensors_;
  for (const std::string& name : removed) {
    if (tensors.erase(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(base->dir_, ": no tensor '", name, "' to replace"));
    }
  }
  for (auto& [name, v] : tensors) views.push_back(std::move(v));
  for (TensorView& v : views) {
    const std::string name = v.name;
    if (!store->tensors_.emplace(name, std::move(v)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(base->dir_, ": tensor '", name, "' appears twice"));
    }
  }
  store->base_ = std::move(base);
  return store;
}

const TensorView* TensorStore::Find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<const TensorView*> TensorStore::Get(std::string_view name) const {
  if (const TensorView* v = Find(name)) return v;
  return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", std::string(name), "'"));
}

std::vector<std::string> TensorStore::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, v] : tensors_) names.push_back(name);
  return names;
}

namespace {

std::string BuildHeader(const std::vector<SafetensorsWriter::Entry>& entries,
                        uint64_t* data_bytes) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& e : entries) {
    uint64_t n = DTypeSize(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    header[e.name] = {
        {"dtype", DTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  *data_bytes = offset;
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<Entry> entries) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  const std::string header = BuildHeader(entries, &w->expected_bytes_);
  w->out_ = std::fopen(path.c_str(), "wb");
  if (w->out_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, w->out_) != 8 ||
      std::fwrite(header.data(), 1, header.size(), w->out_) != header.size()) {
    return absl::DataLossError(path + ": write failed");
  }
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (out_ != nullptr) std::fclose(out_);
}

absl::Status SafetensorsWriter::Append(std::string_view bytes) {
  if (written_bytes_ + bytes.size() > expected_bytes_) {
    return absl::InternalError(path_ + ": more tensor bytes than declared");
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), out_) != bytes.size()) {
    return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  written_bytes_ += bytes.size();
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Close() {
  if (written_bytes_ != expected_bytes_) {
    return absl::InternalError(absl::StrCat(path_, ": wrote ", written_bytes_, " tensor bytes of ",
                                            expected_bytes_, " declared"));
  }
  const int rc = std::fclose(out_);
  out_ = nullptr;
  if (rc != 0) return absl::DataLossError(absl::StrCat(path_, ": close failed"));
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorData>& tensors) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  LLM_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, std::move(entries)));
  for (const auto& t : tensors) LLM_RETURN_IF_ERROR(writer->Append(t.bytes));
  return writer->Close();
}

absl::StatusOr<std::vector<TensorData>> ReadSafetensors(const std::string& path) {
  LLM_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  LLM_ASSIGN_OR_RETURN(const std::vector<TensorView> views, ParseSafetensors(*file));
  std::vector<TensorData> tensors;
  tensors.reserve(views.size());
  for (const TensorView& v : views) {
    tensors.push_back({v.name, v.dtype, v.shape,
                       std::string(reinterpret_cast<const char*>(v.data), v.num_bytes)});
  }
  return tensors;
}

}  // namespace llm::model
