// The seam between the filesystem's write pipeline (file_data.cc) and the
// incremental-snapshot policy (deltas against prior checkpoint versions,
// docs/ARCHITECTURE.md, "Incremental snapshots"). The pipeline asks the
// policy, per chunk and on the encoder thread, for an XOR base; it records
// each applied chunk through the policy in the same batch as its extent, so
// lineage and data commit atomically.
//
// With no policy installed (FileDataShared::delta == nullptr) every chunk is
// encoded standalone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmc/chunker.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/store.h"

namespace lmc::fs {

// What the write pipeline knows about a chunk it is about to encode.
struct ChunkOrigin {
  uint64_t ino = 0;
  std::string_view file_name;       // the name the file was created (or last renamed) under
  const ChunkSpec* spec = nullptr;  // offset/length/dtype (+ region fields from the chunker)
  uint64_t parent = 0;              // the directory that name is in (0: unknown)
  store::KeyOwner owner{};          // the chunk's key scope (dedup=uid): bases only of the same owner
  std::string_view dir_name{};      // the name of directory `parent` (empty: unknown, or the root)
};

// An XOR base for one chunk: the decoded bytes of a committed chunk of the
// same length; or, with widened_offset, the chunk is fp32 and `key` its
// bf16 twin, whose decoded bytes are `bytes` (at least 2 * (offset + n/4)):
// the encoder XORs the chunk with its values from that element on, widened
// to fp32 (lmc::EncodeParams::widened_base_offset).
struct BaseChoice {
  store::ChunkKey key;
  store::ChunkBytes bytes;
  std::optional<uint32_t> widened_offset{};
  // The base is not indexed yet: it was pinned ahead (Store::PinPendingChunk)
  // as a chunk of the same inode's uncommitted batches. The inode checks it
  // is still there when it applies the chunk (FileData), and encodes the
  // chunk standalone otherwise.
  bool pending = false;
};

// Told, on the policy's background thread, that the chunk `key` written at
// (ino, offset) was re-encoded: its frame changed length (the filesystem
// reads the length the store has now).
using RebaseListener = std::function<void(uint64_t ino, uint64_t offset, const store::ChunkKey& key)>;
// Told, on the policy's background thread after each commit of
// re-encodings, every chunk it re-encoded: the filesystem refreshes the
// extents naming them that it holds in memory (committed or not), which no
// place and no scan of the store's extents reaches.
using ReencodedListener = std::function<void(const std::vector<store::ChunkKey>& keys)>;
// The inode of a directory given as a path from the mount root; nullopt if
// there is none (yet).
using PathResolver = std::function<std::optional<uint64_t>(const std::string& path)>;

class DeltaPolicy {
 public:
  virtual ~DeltaPolicy() = default;
  // Called on an encoder thread before encoding data[0, n) (the chunk's
  // final bytes). Returns a base when an XOR delta is expected to be
  // smaller, within the delta-chain limit; nullopt: encode standalone.
  // Thread-safe; must be cheap (statistics on a sample, never a trial encode).
  // The policy guarantees that the base is still indexed when the batch
  // that references it commits (a base released meanwhile, e.g. by an
  // unlink, must not make the commit fail): it pins the base in the store
  // (Store::PinChunk) before returning it, and the pin ends either with the
  // batch that Record adds Batch::Unpin to, or with Release.
  virtual std::optional<BaseChoice> ChooseBase(const ChunkOrigin& origin, const uint8_t* data, size_t n) = 0;
  // Called with the inode's mutex held when the encoded chunk `key` is
  // applied to the inode's pending batch (in file order); the policy adds
  // whatever it persists (its lineage record) to `batch`, which commits
  // together with the chunk and its extent. `bytes` are the chunk's decoded
  // bytes (shared, not copied: the base of the next save), or nullptr.
  virtual void Record(const ChunkOrigin& origin, const store::ChunkKey& key,
                      const std::optional<store::ChunkKey>& base, const store::ChunkBytes& bytes,
                      store::Batch* batch) = 0;
  // The file `ino` got the name `name` in directory `parent` (named
  // `dir_name`) by a rename or a link, after its data was finalized: a
  // policy that keys lineage by name records now, in `batch` (the
  // rename's), what it held back while the file's name was a temporary one
  // (an atomic save writes `.tmpXXXXXX` and renames it over the target).
  virtual void Named(uint64_t /*ino*/, std::string_view /*name*/, uint64_t /*parent*/,
                     std::string_view /*dir_name*/, store::Batch* /*batch*/) {}
  // The inode left the filesystem's table (purged, or forgotten by the
  // kernel): whatever the policy holds for it goes.
  virtual void Forget(uint64_t /*ino*/) {}
  // A base that ChooseBase returned for a chunk that will never be recorded
  // (its encode failed, or the pipeline dropped it): releases what
  // ChooseBase holds for it (the pin).
  virtual void Release(const store::ChunkKey& base) = 0;
  // Background work the policy queued (reverse deltas: re-encoding the prior
  // version of each chunk written against it). Flush does all of it that
  // can be done now and returns when the queue is empty; work that waits
  // for a chunk that is not committed is dropped (call after the inodes
  // are committed; unmount does). Pending: items queued or in progress.
  virtual void Flush() {}
  // Stops the background work for good, before the filesystem's state goes
  // away. Items still queued stay persisted (reverse deltas: their rebase/
  // records) for the next mount to work off.
  virtual void StopBackground() {}
  virtual uint64_t Pending() const { return 0; }
  virtual void SetRebaseListener(RebaseListener) {}
  virtual void SetReencodedListener(ReencodedListener) {}
  virtual void SetPathResolver(PathResolver) {}
  // Named counters for lmcfs-stat's daemon section.
  virtual std::vector<std::pair<std::string, uint64_t>> Counters() const { return {}; }
  // Bytes of decoded chunks the policy holds now, and at most.
  struct CacheUse {
    uint64_t bytes = 0, capacity = 0;
  };
  virtual CacheUse Cache() const { return {}; }
};

}  // namespace lmc::fs
