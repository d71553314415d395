// Read-only views of a filesystem's metadata for the operating tools
// (lmcfs-stat, lmcfs-fsck, lmcfs-gc) and the daemon's control channel:
// per-file and per-directory space figures, filesystem-level consistency
// checks, and the map from chunks back to the paths that use them.
//
// Everything here works on a store::Store, with or without a mounted
// Filesystem on it: each function reads one consistent snapshot per column
// family (Store::Scan). Data a mounted filesystem has not committed yet
// (open files being written) is not seen. Thread safety: the functions may
// run concurrently with a Filesystem using the same Store; RepairTree
// commits through the Store and must only run on an unmounted store.
//
// Figures and checks are defined in docs/ARCHITECTURE.md, "Operating tools".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lmc/status.h"
#include "lmc/store/store.h"

namespace lmc::fs {

// Space figures of one file, or of a directory's whole subtree.
struct SpaceFigures {
  uint64_t files = 0;    // regular files (a directory's subtree: those below it)
  uint64_t chunks = 0;   // distinct chunks a file references (a directory: sum over its files)
  uint64_t logical = 0;  // file sizes (apparent size, `du --apparent-size`)
  uint64_t stored = 0;   // each extent's share of its frame (st_blocks, `du`)
  // stored, with each chunk's frame divided among all the extents that
  // reference it: what the file costs once deduplication is accounted.
  uint64_t charged = 0;
  uint64_t delta_stored = 0;    // part of `stored` in delta frames
  uint64_t derived_stored = 0;  // part of delta_stored: fp32 chunks stored against their bf16 twins
  // Savings, which add up to logical - charged:
  uint64_t saved_dedup = 0;    // stored - charged
  uint64_t saved_delta = 0;    // estimate: delta frames (not derived) vs the store's non-delta ratio
  uint64_t saved_derived = 0;  // the same estimate for the derived frames (pairing)
  int64_t saved_codec = 0;     // the rest (compression, holes); negative when frames outgrow the data
  void Add(const SpaceFigures& o);
  // logical / stored (1.0 when nothing is stored).
  double Ratio() const;
};

struct TreeEntry {
  std::string path;  // "/" for the root, "/a/b" below it
  uint64_t ino = 0;
  uint32_t mode = 0;  // full st_mode
  uint32_t nlink = 0;
  SpaceFigures space;
};

struct StoreTotals {
  uint64_t inodes = 0, files = 0, dirs = 0;
  uint64_t logical = 0;        // every regular inode once (hard links once)
  uint64_t stored = 0;         // extent shares, every inode once
  uint64_t unique_frames = 0;  // frame bytes of distinct chunks files reference
  uint64_t chunks = 0;         // distinct chunks files reference
  uint64_t delta_chunks = 0;   // of those, delta frames
  uint64_t delta_frame_bytes = 0;
  SpaceFigures space;  // whole filesystem (inodes once)
  // From Store::Stats.
  uint64_t packs = 0, pack_bytes = 0, live_bytes = 0;
  double LiveFraction() const {
    return pack_bytes ? static_cast<double>(live_bytes) / static_cast<double>(pack_bytes) : 1.0;
  }
};

struct TreeReport {
  std::vector<TreeEntry> entries;  // files and directories, in path order
  StoreTotals totals;
  std::vector<std::string> not_found;  // the paths asked for that do not exist, in the order asked
};

// Walks the tree from the root. `paths` ("/a/b", relative to the root;
// empty: everything) limit the entries reported to those paths and what lies
// below them; totals always cover the whole store. A path that does not
// exist is listed in not_found (as ls and du go on past a missing name).
Result<TreeReport> InspectTree(store::Store* store, const std::vector<std::string>& paths = {});

// Filesystem-level consistency (the store's own checks are Store::Fsck).
struct TreeProblem {
  enum Kind {
    kDanglingDirent,  // dirent names an inode that does not exist
    kDirentType,      // dirent's type differs from the inode's
    kLinkCount,       // nlink differs from the dirents (and subdirectories)
    kOrphanInode,     // inode no dirent reaches, not awaiting purge
    kStrayExtent,     // extent of an inode that does not exist
    kBadRecord,       // inode, dirent or extent value that does not decode
    kMissingChunk,    // extent names a chunk the store does not index
  };
  Kind kind;
  std::string message;    // one line, with the path or inode
  std::string key_hex;    // the column-family key concerned, hex
  std::string value_hex;  // its value, hex (for the quarantine report)
  uint64_t ino = 0;
  uint32_t want_nlink = 0;  // kLinkCount
  bool repairable = false;
  std::optional<store::ChunkKey> chunk = std::nullopt;  // kMissingChunk: the chunk the extent names
};
// Stable lower-case name of a kind ("dangling_dirent", ...; docs/FORMAT.md, "Control protocol").
const char* TreeProblemKindName(TreeProblem::Kind kind);

// A file whose stored bytes (st_blocks) differ from what its extents'
// chunks hold now: a re-encoding whose refresh of the files was cut short
// (a crash between the two commits). Accounting, not data: reported apart
// from the problems, repaired by RepairStoredBytes.
struct StaleStored {
  uint64_t ino = 0;
  std::string path;
  uint64_t recorded = 0;  // the inode's stored bytes
  uint64_t actual = 0;    // its extents' shares of their frames, from the index
};

struct TreeCheck {
  std::vector<TreeProblem> problems;
  std::vector<StaleStored> stale_stored;
  uint64_t inodes = 0, dirents = 0, extents = 0;
};
Result<TreeCheck> CheckTree(store::Store* store);

// Repairs what can be repaired without touching good data: wrong link
// counts are set to the counted links; dangling dirents and stray extents
// (which no file can reach) are removed, their references released. One
// store commit. Returns how many problems were repaired. Only on an
// unmounted store.
Result<uint64_t> RepairTree(store::Store* store, const TreeCheck& check);

// Told which chunks a maintenance run re-encoded (their frames changed
// length), to refresh the frame lengths the files' extents record
// (st_blocks); returns the extents changed. A mount's is
// fs::Filesystem::ChunksReencoded; offline, RefreshStoredBytes.
using ReencodedFn = std::function<Result<uint64_t>(const std::vector<store::ChunkKey>& keys)>;

// Sets the stored bytes of the files `check` found stale: their extents
// take the frame lengths the index has now, their inodes the sum. Only on
// an unmounted store. Returns the files repaired.
Result<uint64_t> RepairStoredBytes(store::Store* store, const TreeCheck& check);

// Offline (no mount holds the store): a maintenance run re-encoded `keys`
// (Store::RewriteDeadBases), so their frames changed length. Every extent
// naming one takes the frame length the store has now, and its inode's
// stored bytes (st_blocks) follow; one commit per 1,024 inodes. Returns the
// extents changed. A mounted filesystem does this itself
// (fs::Filesystem::ChunksReencoded): its inodes in memory hold the same.
Result<uint64_t> RefreshStoredBytes(store::Store* store, const std::vector<store::ChunkKey>& keys);

// Store::RewriteDeadBases with the files following (st_blocks). Each commit
// also puts a refresh record per re-encoded chunk (docs/FORMAT.md,
// "Re-encode refresh records"); when the run is over, `reencoded` is told of
// every chunk it re-encoded and, if that succeeded, the records go. A crash
// in between leaves them to RefreshLeftOver. `reencoded` unset: no records,
// nobody told (nothing holds frame lengths to refresh).
struct DeadBaseRun {
  Result<store::DeadBaseReport> report = store::DeadBaseReport{};
  Result<uint64_t> refreshed = uint64_t{0};  // extents changed, or why refreshing failed
  uint64_t reencoded = 0;                    // chunks told
};
DeadBaseRun RewriteDeadBasesRefreshing(store::Store* store, const ReencodedFn& reencoded,
                                       const store::DeadBaseProgressFn& progress);

// The re-encode refresh records that a crash cut short (of a
// RewriteDeadBasesRefreshing, or of a rebase of a chunk other files share:
// SnapshotDeltaPolicy): `reencoded` is told of their chunks, then they go.
// Returns the extents changed. Wherever a store is opened for writing with files to
// refresh: a mount before it serves, lmcfs-gc on an unmounted store.
Result<uint64_t> RefreshLeftOver(store::Store* store, const ReencodedFn& reencoded);

// Paths whose data uses any of `chunks`, directly or as a delta base of a
// chunk they use. Inodes no path reaches are reported as "<inode N>".
Result<std::vector<std::string>> PathsUsingChunks(store::Store* store,
                                                  const std::set<store::ChunkKey>& chunks);

}  // namespace lmc::fs
