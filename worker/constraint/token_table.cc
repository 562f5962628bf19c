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

TokenTable::TokenTable(const std::vector<std::string>& bytes)
    : vocab_size_(static_cast<int32_t>(bytes.size())), bytes_(bytes) {
  BuildNode root;
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    BuildNode* at = &root;
    for (char c : bytes[id]) {
      auto& kid = at->kids[static_cast<uint8_t>(c)];
      if (!kid) kid = std::make_unique<BuildNode>();
      at = kid.get();
    }
    at->tokens.push_back(static_cast<int32_t>(id));
  }
  // Breadth first, so each node's children are contiguous.
  std::vector<const BuildNode*> order = {&root};
  nodes_.push_back({});
  for (size_t i = 0; i < order.size(); ++i) {
    const BuildNode* b = order[i];
    Node& n = nodes_[i];
    n.first_token = static_cast<uint32_t>(tokens_.size());
    n.num_tokens = static_cast<uint32_t>(b->tokens.size());
    tokens_.insert(tokens_.end(), b->tokens.begin(), b->tokens.end());
    n.first_child = static_cast<uint32_t>(edges_.size());
    n.num_children = static_cast<uint32_t>(b->kids.size());
    for (const auto& [byte, kid] : b->kids) {
      edges_.push_back({byte, static_cast<uint32_t>(order.size())});
      order.push_back(kid.get());
      nodes_.push_back({});
    }
  }
}

}  // namespace llm::constraint
