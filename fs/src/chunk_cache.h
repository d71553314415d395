// A bounded LRU cache of decoded chunks, shared by all inodes.
// Thread-safe (one mutex, held only for map operations, never for I/O).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lmc/store/chunk_key.h"

namespace lmc::fs {

using ChunkBytes = std::shared_ptr<const std::vector<uint8_t>>;

class ChunkCache {
 public:
  explicit ChunkCache(uint64_t capacity_bytes) : cap_(capacity_bytes) {}
  ChunkBytes Get(const store::ChunkKey& key);
  void Put(const store::ChunkKey& key, ChunkBytes bytes);

 private:
  using Lru = std::list<std::pair<store::ChunkKey, ChunkBytes>>;
  const uint64_t cap_;
  std::mutex mu_;  // guards everything below
  Lru lru_;        // most recent first
  std::unordered_map<store::ChunkKey, Lru::iterator, store::ChunkKeyHash> map_;
  uint64_t bytes_ = 0;
};

}  // namespace lmc::fs
