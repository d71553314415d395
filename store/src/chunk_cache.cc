#include "lmc/store/chunk_cache.h"

#include <cstring>

namespace lmc::store {

namespace {

// One allocation for the handle's control block and view; the bytes in a
// second one, uninitialized.
struct OwnedBytes {
  explicit OwnedBytes(size_t n) : mem(std::make_unique_for_overwrite<uint8_t[]>(n)), view(mem.get(), n) {}
  std::unique_ptr<uint8_t[]> mem;
  ChunkView view;
};

struct SlicedBytes {
  SlicedBytes(std::shared_ptr<const void> o, const uint8_t* p, size_t n) : owner(std::move(o)), view(p, n) {}
  std::shared_ptr<const void> owner;
  ChunkView view;
};

}  // namespace

ChunkBytes NewChunkBytes(size_t n, uint8_t** writable) {
  auto o = std::make_shared<OwnedBytes>(n);
  *writable = o->mem.get();
  return ChunkBytes(o, &o->view);
}

ChunkBytes CopyChunkBytes(const uint8_t* p, size_t n) {
  uint8_t* w;
  ChunkBytes b = NewChunkBytes(n, &w);
  if (n) std::memcpy(w, p, n);
  return b;
}

ChunkBytes SliceChunkBytes(std::shared_ptr<const void> owner, const uint8_t* p, size_t n) {
  auto s = std::make_shared<SlicedBytes>(std::move(owner), p, n);
  return ChunkBytes(s, &s->view);
}

ChunkBytes ChunkCache::Get(const ChunkKey& key, uint32_t tag) {
  std::lock_guard lk(mu_);
  auto it = map_.find(Key{key, tag});
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ChunkCache::Put(const ChunkKey& key, ChunkBytes bytes, uint32_t tag) {
  if (!bytes || bytes->size() > cap_) return;
  const Key k{key, tag};
  std::lock_guard lk(mu_);
  auto it = map_.find(k);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  bytes_ += bytes->size();
  lru_.emplace_front(k, std::move(bytes));
  map_[k] = lru_.begin();
  while (bytes_ > cap_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->size();
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

void ChunkCache::Demote(const ChunkKey& key, uint32_t tag) {
  std::lock_guard lk(mu_);
  auto it = map_.find(Key{key, tag});
  if (it != map_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

size_t ChunkCache::NoteReader(uint64_t id, uint32_t tag) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(readers_mu_);
  readers_[{tag, id}] = now;
  std::erase_if(readers_, [&](const auto& r) { return now - r.second > kReaderHorizon; });
  return readers_.size();
}

uint64_t ChunkCache::bytes() const {
  std::lock_guard lk(mu_);
  return bytes_;
}

}  // namespace lmc::store
