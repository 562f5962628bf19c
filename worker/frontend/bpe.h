// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback and unknown-token
// handling, with the semantics of the Hugging Face `tokenizers` library.
#ifndef LLM_WORKER_FRONTEND_BPE_H_
#define LLM_WORKER_FRONTEND_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::frontend {

// Immutable after construction except for an internal cache of tokenized words (guarded), so
// Tokenize may be called from several threads at once.
class BpeModel {
 public:
  // Parses tokenizer.json's "model" object (type BPE). Errors name the offending entry.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word to `out`.
  void Tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocabulary as id -> token; ids without a token hold "".
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  BpeModel() = default;
  void TokenizeUncached(std::string_view word, std::vector<int32_t>& out) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  // (left id, right id) packed into 64 bits -> merge.
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_fallback_ids_{};  // <0xNN> ids, -1 where absent

  // Word cache, split into shards to keep lock contention low.
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheCapacityPerShard = 8192;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_BPE_H_
