// gguf_dump: the C++ side of gguf_agreement.py. Opens a GGUF file with GgufFile, prints its
// metadata and tensor infos as JSON on stdout and, with --out, writes tensors dequantised.
//
//   gguf_dump FILE [--out DIR] [--tensor NAME]... [--dtype f32|bf16]
//
// With --out, each selected tensor (all when no --tensor is given) is written to DIR/<i>.bin as
// raw little-endian f32 (or bf16), i being its index in the file; its JSON entry names the file.
// Errors go to stderr with exit status 1.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "nlohmann/json.hpp"
#include "worker/model/gguf.h"

namespace llm::model {
namespace {

using nlohmann::json;

struct Options {
  std::string file;
  std::string out_dir;
  std::set<std::string> tensors;
  DType dtype = DType::kF32;
};

// The value as JSON; arrays as (nested) lists.
json ValueJson(const GgufValue& v) {
  if (v.is_array()) {
    json list = json::array();
    for (const GgufValue& e : v.elements()) list.push_back(ValueJson(e));
    return list;
  }
  if (const std::string* s = v.AsString()) return *s;
  if (const auto b = v.AsBool()) return *b;
  if (const auto d = v.AsDouble()) return *d;
  if (const auto i = v.AsInt()) return *i;
  return *v.AsUint();
}

// The type chain as gguf-py's ReaderField.types names it: ["ARRAY", "ARRAY", "INT32"], taking
// nested arrays' types from their first element.
json TypesJson(const GgufValue& v) {
  json types = json::array({GgufValueTypeName(v.type())});
  if (!v.is_array()) return types;
  if (!v.elements().empty()) {
    for (const auto& t : TypesJson(v.elements().front())) types.push_back(t);
  } else {
    types.push_back(GgufValueTypeName(v.element_type()));
  }
  return types;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--out" && has_value) {
      o->out_dir = argv[++i];
    } else if (arg == "--tensor" && has_value) {
      o->tensors.insert(argv[++i]);
    } else if (arg == "--dtype" && has_value) {
      const std::string d = argv[++i];
      if (d != "f32" && d != "bf16") return false;
      o->dtype = d == "f32" ? DType::kF32 : DType::kBF16;
    } else if (o->file.empty() && !arg.starts_with("--")) {
      o->file = arg;
    } else {
      return false;
    }
  }
  return !o->file.empty();
}

int Run(const Options& o) {
  auto opened = GgufFile::Open(o.file);
  if (!opened.ok()) {
    std::cerr << opened.status().message() << "\n";
    return 1;
  }
  const GgufFile& f = **opened;
  for (const std::string& name : o.tensors) {
    if (f.FindTensor(name) == nullptr) {
      std::cerr << o.file << ": no tensor '" << name << "'\n";
      return 1;
    }
  }
  json out = {{"version", f.version()}, {"alignment", f.alignment()}};
  json& metadata = out["metadata"] = json::array();
  for (const std::string& key : f.Keys()) {
    const GgufValue& v = *f.Find(key);
    metadata.push_back({{"key", key}, {"types", TypesJson(v)}, {"value", ValueJson(v)}});
  }
  json& tensors = out["tensors"] = json::array();
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    json entry = {{"name", t.name}, {"type", GgufTypeName(t.type)}, {"type_id", t.type},
                  {"dims", t.dims}, {"shape", t.RowMajorShape()},   {"num_bytes", t.num_bytes}};
    if (!o.out_dir.empty() && (o.tensors.empty() || o.tensors.count(t.name))) {
      std::string bytes;
      if (const auto s = DequantizeTensor(t, o.dtype, &bytes); !s.ok()) {
        std::cerr << s.message() << "\n";
        return 1;
      }
      const std::string name = std::to_string(i) + ".bin";
      const std::string path = (std::filesystem::path(o.out_dir) / name).string();
      if (const auto s = WriteStringToFile(path, bytes); !s.ok()) {
        std::cerr << s.message() << "\n";
        return 1;
      }
      entry["file"] = name;
    }
    tensors.push_back(std::move(entry));
  }
  std::cout << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace
}  // namespace llm::model

int main(int argc, char** argv) {
  llm::model::Options options;
  if (!llm::model::ParseArgs(argc, argv, &options)) {
    std::cerr << "usage: gguf_dump FILE [--out DIR] [--tensor NAME]... [--dtype f32|bf16]\n";
    return 2;
  }
  return llm::model::Run(options);
}
