// A Hugging Face tokenizer.json tokenizer (BPE: byte-level, and sentencepiece-style with byte
// fallback) whose Encode and Decode agree exactly with the `tokenizers` library.
//
// Encode: added tokens that are not `normalized` are cut out of the raw text; each remaining
// piece is normalized, then `normalized` added tokens are cut out of it; the remaining pieces
// are pre-tokenized into words and each word goes through BPE; with add_special_tokens the
// post-processor's template (or, without one, tokenizer_config.json's add_bos_token /
// add_eos_token) adds BOS/EOS.
#ifndef LLM_WORKER_FRONTEND_TOKENIZER_H_
#define LLM_WORKER_FRONTEND_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/frontend/added_tokens.h"
#include "worker/frontend/bpe.h"
#include "worker/frontend/decoder.h"
#include "worker/frontend/normalizer.h"
#include "worker/frontend/pre_tokenizer.h"

namespace llm::frontend {

// Immutable after Load; Encode and Decode are safe to call from many threads at once.
class Tokenizer {
 public:
  // `path` is a directory holding tokenizer.json (and optionally tokenizer_config.json), a
  // tokenizer.json file, or a GGUF file (its tokenizer metadata: gguf_tokenizer.h). Errors name
  // the file and what is wrong or unsupported.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // From file contents; `config_json` may be empty. `source` names them in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view config_json,
                                                             const std::string& source);

  // INVALID_ARGUMENT when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // INVALID_ARGUMENT naming the first id outside [0, vocab_size()).
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // The bytes `ids` stand for, before invalid UTF-8 is repaired: a character split over tokens
  // gives each token its own bytes. Decode repairs them (U+FFFD), so this is what a token's
  // logprob entry reports as its bytes.
  absl::StatusOr<std::string> DecodeBytes(std::span<const int32_t> ids,
                                          bool skip_special_tokens) const;

  // Largest token id + 1, over the model vocabulary and the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;
  // BOS/EOS named by tokenizer_config.json (or the template), when there are any.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  Tokenizer() = default;
  // FromJson's work on the parsed files (a GGUF file's are built as JSON: no text round trip).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromParsed(const nlohmann::json& tokenizer,
                                                               const nlohmann::json& config,
                                                               const std::string& source);
  absl::Status LoadPostProcessor(const nlohmann::json& j, const nlohmann::json& config);
  void EncodePiece(Piece piece, std::vector<int32_t>& out) const;
  absl::StatusOr<std::string> DecodeChain(std::span<const int32_t> ids, bool skip_special_tokens,
                                          bool raw_bytes) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  AddedTokenMatcher raw_added_;         // matched in the input text
  AddedTokenMatcher normalized_added_;  // matched in normalized pieces
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::vector<int32_t> prefix_ids_;  // added before the text with add_special_tokens
  std::vector<int32_t> suffix_ids_;  // added after it
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  int32_t vocab_size_ = 0;
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_TOKENIZER_H_
