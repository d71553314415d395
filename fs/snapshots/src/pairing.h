// Pairs of an fp32 chunk and its bf16 twin (docs/ARCHITECTURE.md,
// "Incremental snapshots", "Pairing fp32 masters with their bf16 twins"):
// in mixed-precision training the bf16 weights are the fp32 master weights
// rounded to nearest even, and checkpoints often hold both. Pairs are found
// by content, not by name: each bf16 tensor chunk records a fingerprint of
// its leading values (at element 0 and at its middle, where an fp32 chunk
// of the same byte size starts), and an fp32 chunk looks up the fingerprint
// of its own leading values rounded to bf16. A candidate is accepted only
// after a sample of the values checks out (TwinsMatch), so a false match
// costs a lookup, never bytes; the codec's own delta is lossless whatever
// the values (frames with a widened base, docs/FORMAT.md, "Frame").
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "lmc/store/chunk_key.h"
#include "lmc/store/store.h"
#include "lmc/twin.h"

namespace lmc::fs {

// Cf::kMeta key prefixes of pair records (docs/FORMAT.md, "Pair records"):
// the prefix, then (owner-scoped chunks, dedup=uid) the owner's uid u32 BE,
// then the fingerprint u64 BE. Value: the bf16 chunk's key (32 bytes) and
// the element offset of the fingerprinted values in it (u32 BE).
inline constexpr char kPairPrefix[] = "pair/";
inline constexpr char kOwnerPairPrefix[] = "pair-uid/";

struct PairEntry {
  store::ChunkKey key;  // the bf16 chunk
  uint32_t offset = 0;  // element offset of the fingerprinted values in it
  // In memory only: the inode the chunk was written to by this process (0:
  // read from the index). A twin not committed yet may serve the same
  // inode's later chunks, which commit after it.
  uint64_t ino = 0;
};

// The fingerprint -> bf16 chunk records: persistent (Cf::kMeta) with a
// bounded in-memory cache. Thread-safe. A record whose chunk is gone is
// ignored by its reader and overwritten by the next chunk with the same
// fingerprint.
class PairIndex {
 public:
  PairIndex(store::Store* store, size_t max_cached) : store_(store), max_(max_cached) {}
  std::optional<PairEntry> Lookup(uint64_t fingerprint, store::KeyOwner owner);
  // Adds the record to `batch` and to the cache.
  void Record(uint64_t fingerprint, store::KeyOwner owner, const PairEntry& entry, store::Batch* batch);
  static std::string Key(uint64_t fingerprint, store::KeyOwner owner);

 private:
  store::Store* const store_;
  const size_t max_;
  std::mutex mu_;
  std::unordered_map<std::string, PairEntry> cache_;  // guarded by mu_; cleared when full
};

}  // namespace lmc::fs
