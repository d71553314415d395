// Pairs of an fp32 chunk and its bf16 twin (docs/ARCHITECTURE.md,
// "Incremental snapshots", "Pairing fp32 masters with their bf16 twins"):
// in mixed-precision training the bf16 weights are the fp32 master weights
// rounded to nearest even, and checkpoints often hold both. Pairs are found
// by content, not by name: each bf16 tensor chunk records a fingerprint of
// its leading values (at element 0 and a quarter of the chunk size in,
// where the twin tensor's fp32 chunks start), and an fp32 chunk looks up
// the fingerprint of its own leading values rounded to bf16. A candidate is accepted only
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
// Master records: the same key layout under these prefixes. Value: the fp32
// chunk's key (32 bytes), then the inode (u64 BE) and file offset (u64 BE)
// of the extent it was written to.
inline constexpr char kMasterPrefix[] = "pair32/";
inline constexpr char kOwnerMasterPrefix[] = "pair32-uid/";

struct PairEntry {
  store::ChunkKey key;  // the bf16 chunk (master records: the fp32 chunk)
  uint32_t offset = 0;  // element offset of the fingerprinted values in it (master records: 0)
  // Twin records: in memory only, the inode the chunk was written to by
  // this process (0: read from the index); a twin not committed yet may
  // serve the same inode's later chunks, which commit after it. Master
  // records: persisted, the inode and file offset of the master's extent
  // (the rebaser refreshes its frame length there).
  uint64_t ino = 0;
  uint64_t file_offset = 0;
};

// The fingerprint -> chunk records: persistent (Cf::kMeta) with a bounded
// in-memory cache. Thread-safe. A record whose chunk is gone is ignored by
// its reader and overwritten by the next chunk with the same fingerprint.
class PairIndex {
 public:
  enum class Kind { kTwins, kMasters };  // pair/ records, pair32/ records
  PairIndex(store::Store* store, size_t max_cached, Kind kind = Kind::kTwins)
      : store_(store), max_(max_cached), kind_(kind) {}
  std::optional<PairEntry> Lookup(uint64_t fingerprint, store::KeyOwner owner);
  // Adds the record to `batch` and to the cache.
  void Record(uint64_t fingerprint, store::KeyOwner owner, const PairEntry& entry, store::Batch* batch);
  std::string Key(uint64_t fingerprint, store::KeyOwner owner) const;

 private:
  store::Store* const store_;
  const size_t max_;
  const Kind kind_;
  std::mutex mu_;
  std::unordered_map<std::string, PairEntry> cache_;  // guarded by mu_; cleared when full
};

}  // namespace lmc::fs
