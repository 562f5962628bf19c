// Checked parsing of raw request bytes. Protobuf rejects a proto3 string field holding invalid
// UTF-8 with a bare parse failure, which gRPC reports without naming anything. Requests whose
// string fields come from users are therefore taken as raw bytes: their size and the UTF-8 of
// the named fields are checked here first, so the client gets INVALID_ARGUMENT naming the field.
#ifndef LLM_WORKER_SERVER_WIRE_CHECK_H_
#define LLM_WORKER_SERVER_WIRE_CHECK_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace llm::server {

// String fields to check: field number -> name used in errors. A name ending in "[]" is a
// repeated field and gets an index ("stop[2]"). A field with `nested` is a message whose own
// string fields are checked ("chat.messages[1].content").
struct StringField;
using StringFields = std::map<int, StringField>;
struct StringField {
  StringField(const char* name, const StringFields* nested = nullptr)  // NOLINT: implicit
      : name(name), nested(nested) {}
  std::string name;
  const StringFields* nested;
};

// Parses `buffer` into `message`. INVALID_ARGUMENT when the message is larger than `max_bytes`
// ("request: ..."), a listed field is not valid UTF-8 ("text: not valid UTF-8 (byte 3)"), or
// the bytes are not a valid message.
absl::Status ParseChecked(const grpc::ByteBuffer& buffer, size_t max_bytes,
                          const StringFields& fields, google::protobuf::Message& message);

// Serializes `message` into a ByteBuffer for a raw-method response.
void SerializeTo(const google::protobuf::Message& message, grpc::ByteBuffer& buffer);

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_WIRE_CHECK_H_
