// A bounded LRU cache of decoded chunks by key. Keys name content, so an
// entry is never stale. Used by the store (decoded delta bases), the
// filesystem (decoded chunks, shared by all inodes) and its delta policy
// (bases of the next save). Thread-safe (one mutex, held only for map
// operations, never for I/O). A chunk larger than the capacity is not kept.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lmc/store/chunk_key.h"

namespace lmc::store {

using ChunkBytes = std::shared_ptr<const std::vector<uint8_t>>;

class ChunkCache {
 public:
  explicit ChunkCache(uint64_t capacity_bytes) : cap_(capacity_bytes) {}
  uint64_t capacity() const { return cap_; }
  ChunkBytes Get(const ChunkKey& key);
  void Put(const ChunkKey& key, ChunkBytes bytes);

 private:
  using Lru = std::list<std::pair<ChunkKey, ChunkBytes>>;
  const uint64_t cap_;
  std::mutex mu_;  // guards everything below
  Lru lru_;        // most recent first
  std::unordered_map<ChunkKey, Lru::iterator, ChunkKeyHash> map_;
  uint64_t bytes_ = 0;
};

}  // namespace lmc::store
