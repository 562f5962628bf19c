#include "worker/constraint/token_table.h"

#include <algorithm>
#include <map>
#include <memory>

namespace llm::constraint {
namespace {

// A pointer trie while building; flattened into arrays afterwards.
struct BuildNode {
  std::map<uint8_t, std::unique_ptr<BuildNode>> kids;
  std::vector<int32_t> tokens;
};

}  // namespace

std::string SpecialTokenBytes(int32_t id) { return "\xFF" + std::to_string(id) + "\xFE"; }

TokenTable::TokenTable(const std::vector<std::string>& bytes)
    : vocab_size_(static_cast<int32_t>(bytes.size())), bytes_(bytes) {
  BuildNode root;
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    if (bytes[id].find_first_of("\xFE\xFF") != std::string::npos &&
        bytes[id] != SpecialTokenBytes(static_cast<int32_t>(id))) {
      bytes_[id].clear();  // not UTF-8 text: it could spell a special token's bytes
      continue;
    }
    BuildNode* at = &root;
    for (char c : bytes[id]) {
      auto& kid = at->kids[static_cast<uint8_t>(c)];
      if (!kid) kid = std::make_unique<BuildNode>();
      at = kid.get();
    }
    at->tokens.push_back(static_cast<int32_t>(id));
  }
  // Preorder: each subtree is one run of nodes_ (the walk skips a run where it stops).
  struct Frame {
    const BuildNode* node;
    uint8_t byte;
    uint16_t depth;
  };
  std::vector<Frame> stack = {{&root, 0, 0}};
  std::vector<uint32_t> open;  // nodes_ indices whose subtree is not closed yet, by depth
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    while (open.size() > f.depth) {
      nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    Node n;
    n.byte = f.byte;
    n.depth = f.depth;
    n.first_token = static_cast<uint32_t>(tokens_.size());
    n.num_tokens = static_cast<uint32_t>(f.node->tokens.size());
    tokens_.insert(tokens_.end(), f.node->tokens.begin(), f.node->tokens.end());
    open.push_back(static_cast<uint32_t>(nodes_.size()));
    nodes_.push_back(n);
    max_depth_ = std::max(max_depth_, f.depth);
    // Children pushed in reverse byte order so that they come out in order.
    for (auto it = f.node->kids.rbegin(); it != f.node->kids.rend(); ++it) {
      stack.push_back({it->second.get(), it->first, static_cast<uint16_t>(f.depth + 1)});
    }
  }
  for (uint32_t i : open) nodes_[i].end = static_cast<uint32_t>(nodes_.size());
  for (uint32_t i = 1; i < nodes_.size(); i = nodes_[i].end)
    first_level_.push_back({nodes_[i].byte, i});
}

}  // namespace llm::constraint
