// The engine's sizes: how many requests run at once (max_slots) and how its KV cache is cut
// (kv_blocks blocks of block_tokens positions). One value travels from the configuration to the
// scheduler: BackendOptions::sizes is what was asked for (kv_blocks 0: as many as the backend's
// memory budget holds), the runner settles it and reports it as RunnerInfo::sizes, and the
// worker gives exactly that to its scheduler, so the slot table and block pool of the runner and
// of the scheduler cannot disagree.
#ifndef LLM_WORKER_ENGINE_ENGINE_SIZES_H_
#define LLM_WORKER_ENGINE_ENGINE_SIZES_H_

#include <cstdint>

namespace llm::engine {

struct EngineSizes {
  int32_t max_slots = 32;     // requests computed together (the slot table)
  int32_t kv_blocks = 0;      // KV blocks in the pool; 0 in a request: decided from memory
  int32_t block_tokens = 16;  // positions per KV block

  int64_t kv_capacity_tokens() const { return int64_t{kv_blocks} * block_tokens; }
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_ENGINE_SIZES_H_
