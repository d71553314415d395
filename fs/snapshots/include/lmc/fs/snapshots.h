// Incremental snapshots (docs/ARCHITECTURE.md, "Incremental snapshots"):
// the options of the delta policy and how to install it. The policy itself
// is private to lmc_fs_snapshots (snapshots/src/delta.h, behind the
// core's seam lmc/fs/delta_policy.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "lmc/chunker.h"
#include "lmc/delta_estimate.h"
#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs {

class DeltaPolicy;
class Filesystem;

// The store's limit on delta chains (docs/FORMAT.md, "Chunk entry": depth <= 8).
inline constexpr uint32_t kMaxDeltaChain = 8;

// delta=on (reverse), delta=forward, delta=off. docs/ARCHITECTURE.md,
// "Incremental snapshots", "Reverse deltas".
enum class DeltaMode : uint8_t {
  kOff,      // every chunk standalone
  kReverse,  // new chunks standalone; the prior version is re-encoded against the new one in the background
  kForward,  // new chunks are XOR deltas against the prior version when smaller
};

struct DeltaOptions {
  DeltaMode mode = DeltaMode::kReverse;             // mount option delta=on|forward|off
  uint32_t max_chain = 4;                           // delta_chain=N (1..8): decodes per chunk read <= N + 1
  size_t lineage_cached = size_t{1} << 16;          // lineage records kept in memory
  uint64_t base_cache_bytes = uint64_t{256} << 20;  // decoded bases kept for the next save
  uint32_t min_chunk = 4096;                        // smaller chunks are always standalone
  // pair=on|off: an fp32 tensor chunk whose values round to a stored bf16
  // chunk's is stored as a delta on that twin (pairing.h) when smaller.
  bool pair = true;
  size_t pairs_cached = size_t{1} << 18;  // pair records kept in memory
  // The chunker's chunk size (FsOptions::chunk_size; InstallSnapshotPolicy
  // sets it): an fp32 tensor's chunks start every chunk_size / 4 values, a
  // bf16 tensor's every chunk_size / 2.
  uint32_t chunk_size = kDefaultChunkSize;
  // delta_base=DIR: a directory of the mount (path from the mount root)
  // holding the explicit bases: a chunk written outside it is a forward
  // delta against the chunk with the same tensor name, dtype, length and
  // offset in any file directly in DIR, when smaller. Empty: none.
  std::string base_dir;
  // Start the reverse-delta background thread (false: rebases are only
  // queued and persisted, for a later mount; tests).
  bool background = true;
  DeltaEstimateOptions estimate;
};

// Parses one mount option of the policy: "delta" (on|forward|off), "delta_base" (a
// directory of the mount), "delta_chain" (1..8) or "pair" (on|off). Returns false when `key` is not one of
// them; InvalidArgument (with a message naming the option and the accepted values) when the value is bad.
Result<bool> ParseDeltaOption(std::string_view key, std::string_view value, DeltaOptions* out);

// The incremental-snapshot policy over `store` (which must outlive it).
std::unique_ptr<DeltaPolicy> MakeSnapshotDeltaPolicy(store::Store* store, const DeltaOptions& options);
// Installs it in `fs` (Filesystem::SetDeltaPolicy) over fs's store; before
// the first write.
void InstallSnapshotPolicy(Filesystem* fs, const DeltaOptions& options);

}  // namespace lmc::fs
