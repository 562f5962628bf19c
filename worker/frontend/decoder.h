// tokenizer.json decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and
// Sequence, with the semantics of the Hugging Face `tokenizers` library. A decoder chain maps
// token strings to text.
#ifndef LLM_WORKER_FRONTEND_DECODER_H_
#define LLM_WORKER_FRONTEND_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::frontend {

// Immutable and thread-safe after construction.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Transforms the token strings (the reference's decode_chain). The final text is the
  // concatenation of the result. With `raw_bytes`, bytes that do not form valid UTF-8 are kept
  // as they are (ByteLevel and ByteFallback repair them otherwise, as the reference does).
  virtual void DecodeChain(std::vector<std::string>& tokens, bool raw_bytes) const = 0;
};

// Builds the decoder a tokenizer.json "decoder" value describes; nullptr for null. An
// unsupported type is an error naming it.
absl::StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const nlohmann::json& j);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_DECODER_H_
