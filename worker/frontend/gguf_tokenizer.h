// Hugging Face tokenizer files (tokenizer.json + tokenizer_config.json) rebuilt from the
// tokenizer metadata of a GGUF file (llama.cpp's `tokenizer.ggml.*` keys), so that a GGUF model
// is tokenized by the same Tokenizer as a Hugging Face directory:
//
//   GgufVocab vocab = ...;  // filled by a GGUF reader
//   LLM_ASSIGN_OR_RETURN(HfTokenizerFiles files, TokenizerFilesFromGguf(vocab, path));
//   auto tok = Tokenizer::FromJson(files.tokenizer.dump(), files.tokenizer_config.dump(), path);
//
// The result follows Hugging Face transformers' own GGUF tokenizer conversion
// (integrations/gguf/gguf_tokenizer_mapping.py in 5.24), id for id:
//  * model "gpt2": byte-level BPE with the file's merges (tokens outside the byte alphabet are
//    respelled in it); the pre-tokenizer `pre` names, as the model's own tokenizer.json has it:
//    "llama-bpe" (also "llama3", "llama-v3", "smaug-bpe") Llama 3's Split regex + ByteLevel;
//    "qwen2" (also "deepseek-r1-qwen") Qwen2's Split regex + ByteLevel; "smollm"
//    Digits(individual) + ByteLevel; "gpt-2" ByteLevel with the GPT-2 regex. ByteLevel decoder.
//    No normalizer (transformers and llama.cpp drop Qwen2's NFC too).
//  * model "llama": sentencepiece-style BPE with byte fallback; merges from the file or, when it
//    has none, derived from the scores as transformers' generate_merges derives them; Metaspace
//    pre-tokenizer (prepend_scheme "first", no split) and Replace/ByteFallback/Fuse/Strip.
//  * added tokens: CONTROL tokens and the tokens the bos/eos/unk/pad ids name are special,
//    USER_DEFINED ones are plain added tokens; all are matched in the raw text.
//  * BOS/EOS: a TemplateProcessing post-processor and tokenizer_config.json's add_bos_token /
//    add_eos_token; a file that does not say gets BOS for "llama" only.
//
// Where transformers departs from llama.cpp (the models' runtime) and from the models' own
// tokenizer.json, this follows the latter; none of it shows on the agreement corpus:
// "llama-bpe" looks whole words up first (ignore_merges, as Llama 3's tokenizer.json and
// llama.cpp do), "smollm" splits digits (SmolLM2's tokenizer.json; transformers uses the GPT-2
// regex alone), add_space_prefix = false is honoured (prepend "never", no Strip), unk_id becomes
// the BPE unk_token, CONTROL/USER_DEFINED tokens are added whatever characters they use, and no
// "<|endoftext|>" is invented for a gpt2 vocabulary that lacks one. One departure is kept, since
// it shows: for "llama", transformers' Metaspace "first" puts no "▁" before text that follows a
// special token or starts with a space, where llama.cpp (and e.g. Mistral's legacy tokenizer.json)
// prepend one; see NOTE(gguf-spm-prefix) in the .cc for the one-line switch.
//
// Pure function of its input; thread-safe.
#ifndef LLM_WORKER_FRONTEND_GGUF_TOKENIZER_H_
#define LLM_WORKER_FRONTEND_GGUF_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/model/gguf.h"

namespace llm::frontend {

// The `tokenizer.*` metadata of a GGUF file, as plain values.
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                   // tokenizer.ggml.pre; "" when absent
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, indexed by id
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (1..6); may be empty
  std::vector<float> scores;         // tokenizer.ggml.scores; may be empty
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right"; may be empty
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template; may be empty
};

// GGUF token types (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The contents of tokenizer.json and tokenizer_config.json.
struct HfTokenizerFiles {
  nlohmann::json tokenizer;
  nlohmann::json tokenizer_config;
};

// INVALID_ARGUMENT naming `source` and the tokenizer.ggml field for an unsupported model or
// pre-tokenizer, or inconsistent arrays (lengths differ, ids out of range, a token that is not
// UTF-8, a merge naming an unknown token, a "llama" vocabulary with neither merges nor scores).
absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGguf(const GgufVocab& vocab,
                                                        const std::string& source);

// The tokenizer.ggml.* keys and tokenizer.chat_template of an open GGUF file. NOT_FOUND naming
// the file when it has no tokenizer.ggml.model or tokens; INVALID_ARGUMENT naming the key when
// one has the wrong type.
absl::StatusOr<GgufVocab> ReadGgufVocab(const model::GgufFile& file);
// ReadGgufVocab, then TokenizerFilesFromGguf with the file's path as the source.
absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGgufFile(const model::GgufFile& file);
// The same for the GGUF file at `path` (opened, and its metadata read: the tensors are not).
absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGgufPath(const std::string& path);
// tokenizer_config.json alone (the special tokens' text, the BOS/EOS flags, the chat template)
// of the GGUF file at `path`, without building tokenizer.json: what a chat template needs.
absl::StatusOr<nlohmann::json> TokenizerConfigFromGgufPath(const std::string& path);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_GGUF_TOKENIZER_H_
