#include "worker/frontend/bpe.h"

#include <cstdio>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

uint64_t PairKey(int32_t a, int32_t b) {
  return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
}

// A symbol of a word being merged: a token id over a byte span, in a doubly linked list.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // bytes; 0 once merged into its left neighbour
};

// A candidate merge of symbols[pos] with its right neighbour. The queue pops the lowest rank,
// then the leftmost position.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& m) {
  if (!m.is_object() || m.value("type", std::string("BPE")) != "BPE") {
    return absl::InvalidArgumentError(absl::StrCat(
        "model type '", m.value("type", std::string("?")), "' is not supported (BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("model.", key, " is not supported"));
    }
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() > 0) {
    return absl::InvalidArgumentError("model.dropout is not supported for inference");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return absl::InvalidArgumentError("model.vocab: missing");
  }
  int32_t max_id = -1;
  for (const auto& [token, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX / 2) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab['", token, "']: bad id"));
    }
    bpe->vocab_[token] = id.get<int32_t>();
    max_id = std::max(max_id, id.get<int32_t>());
  }
  bpe->id_to_token_.assign(max_id + 1, "");
  for (const auto& [token, id] : bpe->vocab_) bpe->id_to_token_[id] = token;

  if (m.contains("merges") && m["merges"].is_array()) {
    int32_t rank = 0;
    for (const auto& entry : m["merges"]) {
      std::string left, right;
      if (entry.is_string()) {
        const std::string s = entry.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("model.merges[", rank, "]: '", s, "' is not two tokens"));
        }
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                 entry[1].is_string()) {
        left = entry[0].get<std::string>();
        right = entry[1].get<std::string>();
      } else {
        return absl::InvalidArgumentError(absl::StrCat("model.merges[", rank, "]: malformed"));
      }
      const auto l = bpe->vocab_.find(left), r = bpe->vocab_.find(right),
                 n = bpe->vocab_.find(left + right);
      if (l == bpe->vocab_.end() || r == bpe->vocab_.end() || n == bpe->vocab_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("model.merges[", rank, "]: '", left, " ",
                                                       right, "' uses a token not in the vocab"));
      }
      // A repeated pair keeps its last rank, as the reference implementation does.
      bpe->merges_[PairKey(l->second, r->second)] = Merge{rank, n->second};
      ++rank;
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    const auto it = bpe->vocab_.find(m["unk_token"].get<std::string>());
    if (it == bpe->vocab_.end()) {
      return absl::InvalidArgumentError("model.unk_token: not in the vocab");
    }
    bpe->unk_id_ = it->second;
  }
  bpe->fuse_unk_ = m.value("fuse_unk", false);
  bpe->byte_fallback_ = m.value("byte_fallback", false);
  bpe->ignore_merges_ = m.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = bpe->vocab_.find(name);
    bpe->byte_fallback_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    TokenizeUncached(word, out);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>{}(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t begin = out.size();
  TokenizeUncached(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() < kCacheCapacityPerShard) {
    shard.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + begin, out.end()));
  }
}

void BpeModel::TokenizeUncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Initial symbols: one per character, or its <0xNN> byte tokens, or <unk>.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  int32_t pending_unk_len = 0;  // bytes covered by a pending <unk>; 0 when none
  auto add = [&](int32_t id, int32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, -1, len});
    if (n > 0) symbols[n - 1].next = n;
  };
  size_t pos = 0;
  while (pos < word.size()) {
    int len = Utf8SequenceLength(static_cast<uint8_t>(word[pos]));
    if (len <= 0 || pos + len > word.size()) len = 1;
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk_len > 0) {
        add(*unk_id_, pending_unk_len);
        pending_unk_len = 0;
      }
      add(it->second, len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // NOTE: a pending <unk> is not flushed here; the reference implementation adds it
        // after these byte tokens, and so do we.
        for (char c : ch) add(byte_fallback_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk_len > 0 && !fuse_unk_) {
        add(*unk_id_, pending_unk_len);
        pending_unk_len = 0;
      }
      pending_unk_len += len;
    }
  }
  if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t i) {
    const int32_t j = symbols[i].next;
    if (j < 0) return;
    const auto it = merges_.find(PairKey(symbols[i].id, symbols[j].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, i, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.len > 0) out.push_back(s.id);
  }
}

}  // namespace llm::frontend
