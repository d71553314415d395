// The incremental-snapshot policy (docs/ARCHITECTURE.md, "Incremental
// snapshots"): for each chunk of a file being written, finds the prior
// version of the chunk through its lineage (lineage.h), and offers it as an
// XOR base when the sampled entropy estimate (lmc/delta_estimate.h) says
// the delta is smaller and the delta chain stays within the limit.
//
// Pinning: ChooseBase pins the base it returns (Store::PinChunk) before
// reading it; Record hands the pin to the inode's batch (Batch::Unpin),
// which releases it when that batch commits. Between the two, an unlink
// that drops the base's last reference leaves it indexed at refcount 0, so
// the commit that adds the delta finds its base (it takes the base's
// reference and keeps it alive). A chunk offered but never recorded (the
// pipeline dropped it) keeps its pin until the store is reopened: space,
// never data.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "delta_hook.h"
#include "lineage.h"
#include "lmc/delta_estimate.h"
#include "lmc/fs/snapshots.h"

namespace lmc::fs {

struct DeltaCounters {
  std::atomic<uint64_t> delta{0};          // chunks offered a base
  std::atomic<uint64_t> no_lineage{0};     // no prior version known
  std::atomic<uint64_t> base_gone{0};      // prior version no longer indexed
  std::atomic<uint64_t> keyframes{0};      // standalone: chain limit reached
  std::atomic<uint64_t> estimate_said_no{0};  // standalone: delta not smaller
  std::atomic<uint64_t> base_cache_hits{0};
};

class SnapshotDeltaPolicy final : public DeltaPolicy {
 public:
  SnapshotDeltaPolicy(store::Store* store, DeltaOptions opts);
  std::optional<BaseChoice> ChooseBase(const ChunkOrigin& origin, const uint8_t* data,
                                       size_t n) override;
  void Record(const ChunkOrigin& origin, const store::ChunkKey& key,
              const std::optional<store::ChunkKey>& base, store::Batch* batch) override;
  const DeltaCounters& counters() const { return counters_; }
  const DeltaOptions& options() const { return opts_; }

 private:
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;
  // Decoded bytes of chunk `key` (pinned by the caller), from the cache or
  // the store.
  Bytes BaseBytes(const store::ChunkKey& key, size_t n);
  Bytes CacheGet(const store::ChunkKey& key);
  void CachePut(const store::ChunkKey& key, Bytes b);

  store::Store* const store_;
  const DeltaOptions opts_;
  LineageIndex lineage_;
  DeltaCounters counters_;

  // Decoded chunks, LRU bounded by base_cache_bytes: bases read from the
  // store, and the bytes of chunks just written (the bases of the next
  // save), handed from ChooseBase to Record through `pending_`.
  std::mutex mu_;  // guards everything below
  std::list<std::pair<store::ChunkKey, Bytes>> lru_;
  std::unordered_map<store::ChunkKey, decltype(lru_)::iterator, store::ChunkKeyHash> map_;
  uint64_t cached_ = 0;
  // (ino, file offset) -> the chunk's bytes, from ChooseBase until Record.
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, Bytes>> pending_;
  uint64_t pending_bytes_ = 0;
};

}  // namespace lmc::fs
