#include "worker/server/wire_check.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::server {

using google::protobuf::internal::WireFormatLite;

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
      const int index = seen[number]++;
      if (!IsValidUtf8(value)) {
        const std::string name =
            it->second.size() > 2 && it->second.substr(it->second.size() - 2) == "[]"
                ? absl::StrCat(it->second.substr(0, it->second.size() - 2), "[", index, "]")
                : it->second;
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": not valid UTF-8 (byte ", FirstInvalidUtf8(value), ")"));
      }
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::InvalidArgumentError("request: malformed message");
    }
  }
  if (!in.ConsumedEntireMessage() || !message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("request: malformed message");
  }
  return absl::OkStatus();
}

void SerializeTo(const google::protobuf::Message& message, grpc::ByteBuffer& buffer) {
  grpc::Slice slice(message.SerializeAsString());
  buffer = grpc::ByteBuffer(&slice, 1);
}

}  // namespace llm::server
