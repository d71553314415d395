#include "lmc/store/chunk_cache.h"

namespace lmc::store {

ChunkBytes ChunkCache::Get(const ChunkKey& key) {
  std::lock_guard lk(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ChunkCache::Put(const ChunkKey& key, ChunkBytes bytes) {
  if (!bytes || bytes->size() > cap_) return;
  std::lock_guard lk(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  bytes_ += bytes->size();
  lru_.emplace_front(key, std::move(bytes));
  map_[key] = lru_.begin();
  while (bytes_ > cap_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->size();
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace lmc::store
