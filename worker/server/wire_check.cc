#include "worker/server/wire_check.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::server {

using google::protobuf::internal::WireFormatLite;

namespace {

// The name a field's occurrence `index` has in errors, under `prefix`.
std::string FieldName(const std::string& prefix, const std::string& name, int index) {
  if (name.size() > 2 && name.substr(name.size() - 2) == "[]") {
    return absl::StrCat(prefix, name.substr(0, name.size() - 2), "[", index, "]");
  }
  return prefix + name;
}

// Checks the listed string fields of the message in `bytes` (recursing into the listed nested
// messages: a depth the schema fixes), then that the rest is well formed.
absl::Status CheckStrings(const std::string& bytes, const StringFields& fields,
                          const std::string& prefix) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::map<int, int> seen;  // occurrences of each checked field, for repeated ones
  for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
    const int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const auto it = fields.find(number);
    if (it != fields.end() &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      std::string value;
      if (!in.ReadVarint32(&length) || !in.ReadString(&value, static_cast<int>(length))) {
        return absl::InvalidArgumentError("request: malformed message");
      }
      const std::string name = FieldName(prefix, it->second.name, seen[number]++);
      if (it->second.nested != nullptr) {
        if (absl::Status st = CheckStrings(value, *it->second.nested, name + "."); !st.ok()) {
          return st;
        }
      } else if (!IsValidUtf8(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": not valid UTF-8 (byte ", FirstInvalidUtf8(value), ")"));
      }
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::InvalidArgumentError("request: malformed message");
    }
  }
  if (!in.ConsumedEntireMessage()) return absl::InvalidArgumentError("request: malformed message");
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseChecked(const grpc::ByteBuffer& buffer, size_t max_bytes,
                          const StringFields& fields, google::protobuf::Message& message) {
  if (buffer.Length() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("request: ", buffer.Length(),
                                                   " bytes is more than the limit of ", max_bytes,
                                                   " (server.max_message_bytes)"));
  }
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("request: unreadable");
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (absl::Status st = CheckStrings(bytes, fields, ""); !st.ok()) return st;
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("request: malformed message");
  }
  return absl::OkStatus();
}

void SerializeTo(const google::protobuf::Message& message, grpc::ByteBuffer& buffer) {
  grpc::Slice slice(message.SerializeAsString());
  buffer = grpc::ByteBuffer(&slice, 1);
}

}  // namespace llm::server
