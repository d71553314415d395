// A bounded LRU cache of decoded chunks by key. Keys name content, so an
// entry is never stale. Used by the store (decoded delta bases), the
// filesystem (decoded chunks, shared by all inodes; one cache for all the
// stores of a union) and its delta policy (bases of the next save).
// Thread-safe (one mutex, held only for map operations, never for I/O). A
// chunk larger than the capacity is not kept. `tag` keeps the chunks of
// different stores sharing one cache apart: a key names content only
// within its own store (keys are hashed under each store's secret).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lmc/store/chunk_key.h"

namespace lmc::store {

// The decoded bytes of one chunk, immutable once shared: a buffer of their
// own (NewChunkBytes, CopyChunkBytes) or a slice of a larger buffer that the
// handle keeps alive (SliceChunkBytes: the write path hands chunks to the
// encoders, the cache and the delta policy straight out of the buffers the
// written bytes landed in, without copying them).
class ChunkView {
 public:
  ChunkView(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }
  const uint8_t* begin() const { return p_; }
  const uint8_t* end() const { return p_ + n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};
using ChunkBytes = std::shared_ptr<const ChunkView>;

// A buffer of n bytes, not zero-filled: the caller fills *writable before
// sharing the handle.
ChunkBytes NewChunkBytes(size_t n, uint8_t** writable);
ChunkBytes CopyChunkBytes(const uint8_t* p, size_t n);
// [p, p+n) of a buffer that `owner` keeps alive (and nobody changes).
ChunkBytes SliceChunkBytes(std::shared_ptr<const void> owner, const uint8_t* p, size_t n);

class ChunkCache {
 public:
  explicit ChunkCache(uint64_t capacity_bytes) : cap_(capacity_bytes) {}
  uint64_t capacity() const { return cap_; }
  ChunkBytes Get(const ChunkKey& key, uint32_t tag = 0);
  void Put(const ChunkKey& key, ChunkBytes bytes, uint32_t tag = 0);
  uint64_t bytes() const;  // held now
  // Makes the chunk, if held, the next to be evicted: a sequential reader
  // has read past it, so it should not push out chunks decoded ahead of
  // readers that have yet to read them.
  void Demote(const ChunkKey& key, uint32_t tag = 0);

  // The sequential readers that share this cache (the filesystem's
  // read-ahead windows divide it among them): notes a read by reader `id`
  // (a file; `tag` as above) now, and returns how many distinct readers
  // read within the last kReaderHorizon, this one included.
  size_t NoteReader(uint64_t id, uint32_t tag = 0);
  static constexpr std::chrono::milliseconds kReaderHorizon{1000};

 private:
  struct Key {
    ChunkKey key;
    uint32_t tag = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return ChunkKeyHash()(k.key) ^ (size_t{k.tag} * 0x9E3779B97F4A7C15ull);
    }
  };
  using Lru = std::list<std::pair<Key, ChunkBytes>>;
  struct ReaderHash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& r) const {
      return std::hash<uint64_t>()(r.second) ^ (size_t{r.first} * 0x9E3779B97F4A7C15ull);
    }
  };
  const uint64_t cap_;
  mutable std::mutex mu_;  // guards lru_, map_, bytes_
  Lru lru_;                // most recent first
  std::unordered_map<Key, Lru::iterator, KeyHash> map_;
  uint64_t bytes_ = 0;
  std::mutex readers_mu_;  // guards readers_
  // (tag, id) -> the reader's last read.
  std::unordered_map<std::pair<uint32_t, uint64_t>, std::chrono::steady_clock::time_point, ReaderHash>
      readers_;
};

}  // namespace lmc::store
