// Lineage of chunks: which committed chunk is the prior version of a chunk
// being written (docs/ARCHITECTURE.md, "Incremental snapshots", "Lineage").
//
// The lineage key of a tensor chunk is (file role, tensor name, dtype,
// tensor length, offset in the tensor, chunk length); of a mixed (header /
// packed small tensors) chunk, (file role, file offset, chunk length). The
// file role is the file's name with its step numbers normalized away
// (NormalizeFileName), after its directory's where that names a shard
// (FileRole). The index lineage key -> newest committed chunk key
// is persistent (Cf::kMeta, prefix kLineagePrefix, docs/FORMAT.md,
// "Lineage records") and cached in a bounded in-memory map.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "lmc/chunker.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/store.h"

namespace lmc::fs {

// Cf::kMeta key prefix of lineage records; value: the 32-byte chunk key,
// then (since reverse deltas) inode u64 BE and file offset u64 BE.
inline constexpr char kLineagePrefix[] = "lineage/";

// The file's role in a run: every maximal run of decimal digits becomes
// '#', except runs that identify a shard, which are kept: a run preceded
// (directly or after one of "_-.=") by one of the words rank, shard, part,
// mp, pp, tp, dp, ep, worker, gpu, node, of, pipe, layer, expert; and a run
// followed by "-of-" / "_of_" (the NNNNN of "NNNNN-of-MMMMM").
// Case-insensitive words. A name ending in ".distcp" (PyTorch DCP) or
// starting with "mp_rank_" (Megatron's rank directories, DeepSpeed's files)
// or "layer_" (DeepSpeed's pipeline and expert files) keeps every run.
// ckpt_step_2000.pt -> ckpt_step_#.pt; model-00001-of-00002.safetensors
// stays; mp_rank_00_model_states.pt stays; epoch=3-step=500.ckpt ->
// epoch=#-step=#.ckpt.
std::string NormalizeFileName(std::string_view name);

// True for the names that atomic savers give the file they write before
// renaming it over its target: Rust's tempfile (safetensors' save_file:
// ".tmp" and 6 random characters), Python's tempfile ("tmp" and 8 of
// [a-z0-9_], then an optional ".suffix"), and NAME.tmp, NAME.tmp.SUFFIX,
// NAME.temp, NAME.part, NAME.partial, NAME.incomplete. The lineage of such
// a file's chunks is recorded under the name it is renamed to
// (SnapshotDeltaPolicy::Named).
bool IsTemporaryName(std::string_view name);

// Prefixes of the same records for owner-scoped chunks (dedup=uid): the
// prefix, the owner's uid u32 BE, then what follows kLineagePrefix or
// kDirLineagePrefix. A file's prior version is then only ever a chunk of
// the same owner, so a delta never relates two users' files.
inline constexpr char kOwnerLineagePrefix[] = "lineage-uid/";
inline constexpr char kOwnerDirLineagePrefix[] = "lineage-dir-uid/";

// The role of file `file_name` in directory `dir_name` (names only):
// NormalizeFileName(file_name), after NormalizeFileName(dir_name) and '/'
// where the directory's name keeps a shard number (Megatron's
// mp_rank_00/model_optim_rng.pt and mp_rank_01/model_optim_rng.pt are two
// roles; checkpoint-100/model.safetensors is model.safetensors), and
// always for a PyTorch DCP file (*.distcp: every save's files have the
// same names; optimizer_0/__0_0.distcp is optimizer_#/__0_0.distcp). A
// directory named after a parameter (components of [A-Za-z0-9_] between
// dots, the last not starting with a digit, three components or more or a
// last one of weight, bias: DeepSpeed's universal checkpoints,
// zero/<parameter>/fp32.pt) comes first whole, every digit kept.
std::string FileRole(std::string_view file_name, std::string_view dir_name);

// The lineage key of a chunk of file `file_name` in directory `dir_name`
// (names only, FileRole), among the chunks of `owner` (nullopt: shared
// chunks). Empty: no lineage (empty chunk).
std::string LineageKey(std::string_view file_name, const ChunkSpec& spec,
                       store::KeyOwner owner = std::nullopt, std::string_view dir_name = {});

// Cf::kMeta key prefix of directory-scoped lineage records (the explicit
// base directory, mount option delta_base=DIR): the newest chunk written
// with this chunk part into any file directly in the directory, whatever
// the file's name. Value: as kLineagePrefix records.
inline constexpr char kDirLineagePrefix[] = "lineage-dir/";
// kDirLineagePrefix + directory inode u64 BE + the chunk part of
// LineageKey (tensor name, dtype, tensor length, offset in the tensor, or
// file offset for mixed chunks; then chunk length). Empty for an empty
// chunk or dir_ino 0.
std::string DirLineageKey(uint64_t dir_ino, const ChunkSpec& spec, store::KeyOwner owner = std::nullopt);

// The newest chunk of a lineage and where it was written: the inode and
// file offset of its extent (ino 0: unknown, a record from before they
// were kept). Reverse deltas use the place to refresh that extent's frame
// length (st_blocks) after re-encoding the chunk.
struct LineageEntry {
  store::ChunkKey key;
  uint64_t ino = 0;
  uint64_t offset = 0;
};

// Persistent lineage index with a bounded in-memory cache. Thread-safe.
class LineageIndex {
 public:
  LineageIndex(store::Store* store, size_t max_cached) : store_(store), max_(max_cached) {}
  // The newest chunk recorded for `lineage` (committed or in a pending
  // batch of this process); nullopt if none.
  std::optional<LineageEntry> Lookup(const std::string& lineage);
  // Adds the record to `batch` and to the cache.
  void Record(const std::string& lineage, const LineageEntry& entry, store::Batch* batch);

 private:
  void CacheLocked(const std::string& lineage, const LineageEntry& entry);
  store::Store* const store_;
  const size_t max_;
  std::mutex mu_;                                        // guards the cache
  std::list<std::pair<std::string, LineageEntry>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> map_;
};

}  // namespace lmc::fs
