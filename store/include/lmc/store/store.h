// The chunk store: content-addressed, compressed chunks in append-only pack
// files, indexed by RocksDB, together with the filesystem's metadata so that
// both commit in one atomic batch. Formats: docs/FORMAT.md, "Chunk store"; durability,
// recovery, compaction and fsck: docs/ARCHITECTURE.md, "The chunk store".
//
// Thread safety: a Store is used by many threads at once. Commit groups
// concurrent callers (one pack sync and one WAL sync per group); ReadChunk,
// GetChunkInfo, Get and Scan take no store-wide lock. Compact and Fsck
// exclude commits while they change the index, pack by pack.
//
// No exceptions escape this API; errors are Status values.
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmc/codec.h"
#include "lmc/gpu.h"
#include "lmc/status.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/chunk_key.h"
#include "lmc/store/env.h"
#include "lmc/store/extent.h"
#include "lmc/store/rados.h"

namespace lmc::store {

// Decodes stored frames. The default (LmcFrameCodec) is the LMC codec; tests
// may substitute a trivial one to exercise the store without compression.
class FrameCodec {
 public:
  virtual ~FrameCodec() = default;
  // Decodes frame[0, len) into dst (cap bytes) and verifies the frame's own
  // checksum of the decoded bytes. base is the decoded base chunk of a delta
  // frame, or nullptr. Returns the decoded size; Corruption on any mismatch.
  virtual Result<size_t> Decode(const uint8_t* frame, size_t len, const uint8_t* base, size_t base_len,
                                uint8_t* dst, size_t cap, Workspace& ws) const = 0;
  // A standalone frame of p[0, n): the store makes one only for a matched
  // AddChunk whose chunk left the index before the commit (rare). Default:
  // Unsupported (the batch then fails).
  virtual Result<std::string> EncodeStandalone(const uint8_t* p, size_t n, Workspace& ws) const {
    (void)p;
    (void)n;
    (void)ws;
    return Status::Unsupported("this frame codec cannot encode");
  }
};
// lmc::DecodeChunk. Process lifetime.
const FrameCodec* LmcFrameCodec();

// Column families the filesystem owns; the store only stores them and
// commits them atomically with chunk reference changes.
enum class Cf : uint8_t {
  kInodes = 0,
  kDirents = 1,
  kExtents = 2,  // encoding fixed by lmc/store/extent.h (fsck reads it)
  kMeta = 3,
};

struct StoreOptions {
  Env* env = nullptr;                 // nullptr: Env::Default()
  const FrameCodec* codec = nullptr;  // nullptr: LmcFrameCodec()
  bool create_if_missing = true;      // create an empty store when dir has none
  // A pack is sealed once it reaches min(pack_size_limit, max(pack_size_floor,
  // pack bytes of the store / 8)): packs grow with the store, so that in a
  // small store a checkpoint's records share few packs with other saves'
  // and whole packs die together (freed without copying) when saves rotate.
  uint64_t pack_size_limit = uint64_t{256} << 20;
  uint64_t pack_size_floor = uint64_t{16} << 20;
  uint64_t max_group_bytes = uint64_t{64} << 20;  // frame bytes one commit group gathers at most
  // Also check that the decoded bytes hash to the key on every read (fsck
  // always does).
  bool verify_content_hash = false;
  uint32_t chunk_size = 4u << 20;  // recorded in the config file for the filesystem; not enforced
  // Decoded delta bases kept in memory (LRU, bytes): a chain read once
  // serves the next read that goes through the same bases (a series of
  // checkpoints read in order). 0: none.
  uint64_t base_cache_bytes = uint64_t{256} << 20;
  // Open without the lock and change nothing: a follower of a journaled
  // store that another node writes (Refresh). Commits are Unsupported.
  bool read_only = false;
  // A store named "rados:POOL/NAME" lives in Ceph RADOS (lmc/store/rados.h):
  // how to reach the cluster, the lease of its lock, takeover.
  RadosOptions rados;
  // Journal the index in the store (always for RADOS stores; a POSIX
  // store whose CONFIG says index_journal=1 is journaled whatever this
  // says): docs/ARCHITECTURE.md, "The index journal".
  bool journal = false;
  // A new POSIX store journals its index (CONFIG index_journal=1, format
  // 3), so that lmcfs-fsck --repair can rebuild an index whose RocksDB
  // files are damaged. false: a new store as before (format 1, no
  // journal; older lmcfs reads it).
  bool journal_new_stores = true;
  // A new store names chunks by XXH3-128 under a random secret of its own
  // (CONFIG format 4, hash=xxh3-128), far cheaper than SHA-256
  // (docs/BENCHMARKS.md, "Chunk keys"), and compares the bytes of every
  // dedup hit before it shares a chunk (a collision fails the batch
  // instead). false: SHA-256 keys (format 1 or
  // 3; an older lmcfs reads the store). An existing store keeps its hash.
  bool fast_keys_new_stores = true;
  // Where a journaled store's local index lives ("": STORE itself for a
  // POSIX store, LocalDirOf(store) for a RADOS store).
  std::string local_dir;
  // A journaled store whose index RocksDB finds damaged at open: move the
  // index aside (index.damaged-TIME) and rebuild it from the journal,
  // instead of refusing the open (lmcfs-fsck --repair; Store::RebuiltIndex).
  bool rebuild_damaged_index = false;
  // A journaled store: move the index aside and rebuild it from the journal
  // whatever its state (lmcfs-fsck --repair, when the index differs from
  // the journal: CompareIndexWithJournal).
  bool rebuild_index = false;
  // A snapshot of the index is written when the store closes or is opened
  // with at least this many journal bytes since the last one, and while it
  // runs once the bytes since reach max(this, 4 x the last snapshot).
  uint64_t journal_snapshot_bytes = uint64_t{16} << 20;
  // Give the disk blocks of dead records back to the filesystem as soon as
  // the index change that killed them is durable (fallocate PUNCH_HOLE;
  // docs/ARCHITECTURE.md, "Hole punching"), instead of only when
  // compaction frees a whole pack. Ignored where the Env cannot (RADOS).
  bool punch_dead = true;
  // Space kept free on the backing filesystem: a commit whose records would
  // leave less than min(space_reserve, filesystem size / 16) free fails
  // with kNoSpace before writing anything, so that the index's own writes
  // (deletes, renames, their commits) still find room on a full disk, and
  // deleting files can make room again (their blocks come back at once,
  // punch_dead). 0: none. Ignored where the Env cannot tell (RADOS).
  uint64_t space_reserve = uint64_t{16} << 20;
  // RocksDB's own files go through `env` too (tests: a fault Env then
  // counts them among its crash points and drops what RocksDB had not
  // synced). Default: RocksDB's POSIX files, owner-only.
  bool index_on_env = false;
};

// What Store::MatchChunk found.
struct ChunkMatch {
  enum class Kind : uint8_t { kAbsent, kEqual, kDiffers };
  Kind kind = Kind::kAbsent;
  uint64_t pack_id = 0, offset = 0;  // kEqual: the record compared
  uint32_t frame_len = 0;            // and its frame's length
};

// The checksum of the pack record a frame will be stored in (docs/FORMAT.md,
// "Pack files"), computed by whoever made the frame while its bytes are in
// that thread's cache, so that the commit, one thread for every writer,
// does not read every frame again. The commit uses it only for the record
// it was sealed for (same key, lengths and owner) and computes the checksum
// itself otherwise.
struct RecordSeal {
  ChunkKey key{};
  uint32_t frame_len = 0;
  uint32_t decoded_len = 0;
  KeyOwner owner{};
  uint64_t checksum = 0;
};
RecordSeal SealRecord(const ChunkKey& key, std::span<const uint8_t> frame, uint32_t decoded_len,
                      KeyOwner owner = std::nullopt);

// One atomic unit of change. Operations apply in the order they were added.
// A Batch is filled by one thread and handed to Store::Commit.
class Batch {
 public:
  Batch() = default;
  Batch(const Batch&) = default;
  Batch& operator=(const Batch&) = default;
  Batch(Batch&& o) noexcept;
  Batch& operator=(Batch&& o) noexcept;
  // Gives the frames' buffers back to the frame pool (frame_pool.h).
  ~Batch();

  // Takes one reference to chunk `key`, storing `frame` (decoding to
  // decoded_len bytes) if the chunk is not yet present. When stored, a chunk
  // with a `base` (a delta frame, decoded against the base's decoded bytes)
  // also takes one reference to its base. The frame is copied. `owner`:
  // the key is owner-scoped (ChunkKey::Of with that owner); the record and
  // index entry say so, so reads verify the key as it was made.
  void AddChunk(const ChunkKey& key, std::span<const uint8_t> frame, uint32_t decoded_len,
                const std::optional<ChunkKey>& base = std::nullopt, KeyOwner owner = std::nullopt);
  // The same, taking the frame's buffer instead of copying it; `seal`:
  // SealRecord of this frame, if its maker computed it.
  void AddChunk(const ChunkKey& key, std::string&& frame, uint32_t decoded_len,
                const std::optional<ChunkKey>& base = std::nullopt, KeyOwner owner = std::nullopt,
                const std::optional<RecordSeal>& seal = std::nullopt);
  // A reference to chunk `key`, which Store::MatchChunk found indexed at
  // `match` with exactly the bytes `raw` (no frame: nothing was encoded).
  // At commit: if the chunk's record is still the one matched, it takes the
  // reference; if it moved, raw is compared with it again (a fast-hash
  // store); if it left the index meanwhile, the store encodes raw itself
  // (FrameCodec::EncodeStandalone) and stores it. raw is kept until the
  // batch is cleared, and counts in frame_bytes().
  void AddMatchedChunk(const ChunkKey& key, const ChunkMatch& match, ChunkBytes raw,
                       KeyOwner owner = std::nullopt);
  // Takes one more reference to an existing chunk.
  void Ref(const ChunkKey& key);
  // Releases one reference. At zero the chunk leaves the index (its record
  // becomes garbage for Compact) and releases its base's reference.
  void Unref(const ChunkKey& key);
  void Put(Cf cf, std::string_view key, std::string_view value);
  void Delete(Cf cf, std::string_view key);
  // Releases one pin taken with Store::PinChunk, once this batch has
  // committed (the pin covers the window until the chunks that use `key` as
  // a base are indexed). A batch that fails or is never committed keeps its
  // pins until the store is reopened: a dead chunk then waits for the next
  // Open to be reclaimed, which costs space, never data.
  void Unpin(const ChunkKey& key);
  // Replaces the record of indexed chunk `key` by `frame` (decoding to the
  // same bytes: the key is their SHA-256), as a delta against `base` or
  // standalone. The chunk keeps its references; its old base releases one
  // reference, the new base takes one, all in this batch (garbage
  // collection of dead delta bases, Store::RewriteDeadBases). The depths of
  // the chunk and of its transitive dependants are recomputed; a base that
  // would make any of them deeper than 8 hops, or that is built on `key`,
  // fails the batch with kInvalidArgument.
  void RewriteChunk(const ChunkKey& key, std::span<const uint8_t> frame,
                    const std::optional<ChunkKey>& base = std::nullopt);
  // A conditional RewriteChunk with a base (reverse deltas: the previous
  // version of a chunk becomes a delta on the newest one). Applies at commit
  // only if all hold: `key` is indexed and has no base; `base` is indexed
  // (a pinned chunk at refcount 0 counts), differs from `key`, has the same
  // decoded size (for an LMC frame with a widened base: holds the bf16
  // values the frame names) and does not have `key` in its own chain; and
  // afterwards
  // every chunk of key's subtree (key and its transitive dependants) has a
  // delta depth <= min(max_depth, kMaxDeltaDepth). Otherwise the op is
  // skipped (not an error: the rest of the batch applies); StoreStats counts
  // both outcomes. The frame is copied.
  void RebaseChunk(const ChunkKey& key, std::span<const uint8_t> frame, const ChunkKey& base,
                   uint8_t max_depth);

  bool empty() const { return ops_.empty(); }
  size_t frame_bytes() const { return frame_bytes_; }
  // Drops every op; the frames' buffers go back to the frame pool.
  void Clear();
  // Appends the ops of `later` after this batch's (leaving `later` empty).
  void Absorb(Batch&& later);

  enum class OpKind : uint8_t { kAdd, kRef, kUnref, kPut, kDelete, kUnpin, kRewrite, kRebase };
  // Every member has a default initializer, so the builders name only what
  // their op uses (designated initializers).
  struct Op {
    OpKind kind = OpKind::kPut;
    Cf cf = Cf::kMeta;
    ChunkKey key{};                             // chunk ops
    std::optional<ChunkKey> base{};             // kAdd, kRewrite, kRebase
    uint32_t decoded_len = 0;                   // kAdd
    KeyOwner owner{};                           // kAdd: the key's owner scope
    uint8_t max_depth = 0;                      // kRebase
    std::string frame{};                        // kAdd, kRewrite, kRebase: the chunk's encoded frame
    ChunkBytes raw{};                           // kAdd of a matched chunk: its decoded bytes
    uint64_t match_pack = 0, match_offset = 0;  // kAdd with raw: the record MatchChunk compared
    std::optional<RecordSeal> seal{};           // kAdd: the record's checksum, computed already
    std::string cf_key{};                       // kPut, kDelete: key in column family `cf`
    std::string value{};                        // kPut
  };
  const std::vector<Op>& ops() const { return ops_; }

 private:
  // Appends op (every builder goes through here) and counts its frame bytes.
  void Append(Op op);

  std::vector<Op> ops_;
  size_t frame_bytes_ = 0;
};

// One chunk of a Store::ReadChunks call.
struct ChunkRead {
  ChunkKey key;
  uint8_t* dst = nullptr;  // cap >= the chunk's decoded length
  size_t cap = 0;
  // --- out ---
  Result<size_t> result = Status::Aborted("not read");  // as ReadChunk would return
  bool batched = false;   // decoded by the batch decoder (else on the CPU, or from a cache)
                          // (a delta: its own frame; its base may have come from the cache)
  bool redone = false;    // the batch decoder's result failed a check: decoded again on the CPU
  bool deferred = false;  // batch_only, and not for the batch: left unread (result untouched)
};

// Decodes count frames in one call: lmc::GpuCodec::DecodeBatch, or a test
// double. Per-frame results are in the items; a non-OK return means the
// device failed and no item is valid (the store then decodes them on the CPU).
using FrameBatchDecoder = std::function<Status(GpuDecodeItem* items, size_t count)>;

// What the index knows of one chunk.
struct ChunkInfo {
  uint64_t pack_id = 0;
  uint64_t offset = 0;  // of the record header in the pack
  uint32_t frame_len = 0;
  uint32_t decoded_len = 0;
  uint64_t refcount = 0;
  uint8_t delta_depth = 0;  // 0: no base
  std::optional<ChunkKey> base;
};

struct StoreStats {
  uint64_t packs = 0;
  uint64_t empty_packs = 0;        // sealed packs with no live record (free to delete)
  uint64_t pack_bytes = 0;         // committed bytes of all packs
  uint64_t live_bytes = 0;         // record bytes of indexed chunks
  uint64_t commits = 0;            // successful Commit calls
  uint64_t commit_groups = 0;      // leader rounds (one pack sync + one WAL write each)
  uint64_t chunks_stored = 0;      // AddChunk that wrote a record
  uint64_t dedup_hits = 0;         // AddChunk that only took a reference
  uint64_t dedup_verified = 0;     // of those, hits whose bytes were compared (a fast-hash store)
  uint64_t encoded_at_commit = 0;  // AddMatchedChunk whose chunk had left: encoded by the store
  uint64_t bytes_appended = 0;
  uint64_t corruptions = 0;        // reads that failed verification
  uint64_t base_cache_hits = 0;    // delta bases found decoded in the cache
  uint64_t base_cache_misses = 0;  // delta bases decoded
  uint64_t rebased = 0;            // RebaseChunk ops applied
  uint64_t rebase_skipped = 0;     // RebaseChunk ops whose conditions did not hold
  // Bytes written to the backing disk since Open: pack files (commits,
  // rebases, compaction copies, headers) and the index (RocksDB's WAL,
  // flushes and compactions).
  uint64_t pack_bytes_written = 0;
  uint64_t index_bytes_written = 0;
  uint64_t compact_bytes_copied = 0;  // live records compaction moved, since Open
  uint64_t compact_bytes_reclaimed =
      0;  // bytes on disk compaction gave back (holes punched before not counted), since Open
  // Hole punching (StoreOptions::punch_dead), since Open: bytes of dead
  // records given back (whole blocks) and the holes punched for them.
  uint64_t punched_bytes = 0;
  uint64_t punched_holes = 0;
  // Bytes the pack files occupy on disk (allocated blocks, as du counts
  // them): pack_bytes less the holes punched. pack_bytes where the Env
  // cannot tell. In RADOS: less the holes counted in the packs' attributes,
  // read once at open by the store's punching thread (a pack not read yet
  // counts whole).
  uint64_t pack_disk_bytes = 0;
  // Memory held now (lmcfs-stat's "memory" line): decoded delta bases
  // (StoreOptions::base_cache_bytes), and the index's memtables, table
  // readers (their index and filter blocks) and block caches.
  uint64_t base_cache_bytes = 0;
  uint64_t base_cache_capacity = 0;
  uint64_t index_memtable_bytes = 0;
  uint64_t index_table_reader_bytes = 0;
  uint64_t index_block_cache_bytes = 0;
  uint64_t index_block_cache_capacity = 0;
  // Pack bytes that hold no live record (dead records, headers).
  uint64_t dead_bytes() const { return pack_bytes > live_bytes ? pack_bytes - live_bytes : 0; }
  // The same on disk: dead bytes not yet given back (by punching or by
  // compaction).
  uint64_t dead_disk_bytes() const { return pack_disk_bytes > live_bytes ? pack_disk_bytes - live_bytes : 0; }
};

struct CompactOptions {
  // Which sealed packs are compacted.
  enum class Policy : uint8_t {
    // Every pack whose live bytes / record bytes fall below
    // live_fraction_threshold (lmcfs-gc's rule).
    kThreshold,
    // The log-structured cleaner's cost-benefit choice: packs in order of
    // bytes freed per byte read and rewritten, (1 - u) / (1 + u) with u the
    // live fraction, best first, until the dead bytes left are at most
    // target_dead_fraction of all pack bytes (the daemon's reclamation).
    kCostBenefit,
  };
  Policy policy = Policy::kThreshold;
  // kThreshold: sealed packs whose live bytes / record bytes fall below this are compacted.
  double live_fraction_threshold = 0.5;
  // kCostBenefit: stop once dead bytes <= this fraction of pack bytes.
  double target_dead_fraction = 0.10;
  // Seal the active pack first when it holds at least this many dead bytes
  // (0: never), so that it can be compacted too (after deletes, its dead
  // records would otherwise stay until it fills up).
  uint64_t seal_active_dead_bytes = 0;
  // Judge packs (and the active pack's sealing) by what they hold on disk:
  // committed bytes less the holes punched for dead records
  // (StoreOptions::punch_dead), so that a pack whose dead records are
  // already holes is not copied for nothing (the daemon's reclamation).
  // false: by committed bytes, as an explicit lmcfs-gc does (which then
  // also rewrites packs full of holes into dense ones).
  bool judge_by_disk = false;
  // Stop after copying this many bytes (checked between packs).
  uint64_t max_bytes_to_copy = UINT64_MAX;
  bool dry_run = false;  // only report what would be done
};

struct CompactProgress {
  uint64_t pack_id = 0;  // pack being (or just) compacted
  size_t packs_done = 0;
  size_t packs_total = 0;     // candidates
  uint64_t bytes_copied = 0;  // so far
  uint64_t bytes_reclaimed = 0;
};
// Return false to stop (Compact then returns Aborted after finishing the
// current pack; everything done so far stays committed).
using CompactProgressFn = std::function<bool(const CompactProgress&)>;

struct CompactReport {
  size_t packs_examined = 0;
  size_t packs_compacted = 0;  // retired (copied out or entirely dead)
  uint64_t chunks_moved = 0;
  uint64_t bytes_copied = 0;
  uint64_t bytes_reclaimed = 0;      // bytes on disk freed (a pack's holes were freed when punched)
  std::vector<uint64_t> candidates;  // pack ids selected (dry run too)
};

// Garbage collection of dead delta bases (docs/ARCHITECTURE.md,
// "Incremental snapshots", "Dead bases"). A chunk is a dead base when every
// reference it holds comes from chunks that use it as their delta base (no
// file references it any more): it would live forever. Its dependants are
// re-encoded standalone (their key does not change), which lets the base go.
struct DeadBaseOptions {
  // Re-encodes one chunk standalone: decoded bytes and the dtype its
  // current frame was coded with -> a standalone frame. Unset: the LMC codec
  // (lmc::EncodeChunk).
  std::function<Result<std::vector<uint8_t>>(const ChunkKey& key, const uint8_t* decoded, size_t n,
                                             DType dtype)>
      reencode;
  // Called after each commit with the chunks it re-encoded. Their frames
  // changed length, and the files' extents record frame lengths for
  // st_blocks (fs::ExtentRec): the filesystem refreshes those.
  std::function<void(const std::vector<ChunkKey>& rewritten)> committed;
  // Called before each commit with the chunks it re-encodes and its batch:
  // records the caller adds (the filesystem's refresh records,
  // fs::RewriteDeadBasesRefreshing) commit with the rewrites or not at all.
  std::function<void(const std::vector<ChunkKey>& rewriting, Batch* batch)> before_commit;
  uint64_t max_chunks = UINT64_MAX;  // stop after rewriting this many dependants
  uint64_t batch_bytes = 64u << 20;  // frame bytes per commit
  bool dry_run = false;              // only report what would be done
};
struct DeadBaseReport {
  uint64_t chunks_scanned = 0;
  uint64_t dead_bases = 0;       // chunks found referenced only as bases
  uint64_t dead_base_bytes = 0;  // their record bytes (freed for Compact once rewritten)
  uint64_t rewritten = 0;        // dependants re-encoded
  uint64_t bytes_before = 0;     // record bytes of those dependants before
  uint64_t bytes_after = 0;      // and after
};
// Return false to stop after the current commit (work done so far stays).
using DeadBaseProgressFn = std::function<bool(const DeadBaseReport&)>;

struct FsckOptions {
  // Fix counts, truncate orphan tails, delete orphan packs, fix the
  // dependants index and delta depths.
  bool repair = false;
  // false: every record's checksum, header and lengths are verified (a scrub:
  // any changed byte of a record is found), without decoding frames.
  // true: also decode every frame (its own checksum of the decoded bytes).
  bool decode = true;
  bool verify_content_hash = true;  // with decode: SHA-256 of every decoded chunk == its key
  // A journaled store: first compare the index with the one its journal
  // makes (CompareIndexWithJournal). Where they differ the index is not
  // trusted: nothing is repaired from it (rebuild it from the journal).
  bool compare_journal = true;
  std::function<void(uint64_t done, uint64_t total)> progress;  // chunks verified
};

// fsck(8) exit codes.
enum FsckExit : int {
  kFsckOk = 0,
  kFsckCorrected = 1,
  kFsckUncorrected = 4,
  kFsckOperationalError = 8,
  kFsckUsage = 16,
  kFsckCancelled = 32,
};

// One problem Store::Fsck found. Callers act on the structured fields; the
// message is for people and may be reworded at any time.
struct FsckProblem {
  enum class Kind : uint8_t {
    kBadRecord,             // record, frame or pack header fails verification; entry names an unknown pack
    kBadIndexValue,         // chunk/pack/extent key or value fails its checks
    kMissingChunk,          // referenced (extent or delta base) but not indexed
    kRefcountMismatch,      // stored count != references (including leaks)
    kLiveBytesMismatch,     // pack's live bytes != its chunks' record bytes
    kOrphanPack,            // pack file the index does not know
    kUncommittedTail,       // pack file longer than its committed size
    kMissingPack,           // indexed pack file absent or short
    kDependantIndex,        // dep/ record missing or naming no such dependant
    kDepth,                 // entry's depth != its chain's
    kLoosePermissions,      // a store path other users can access, or owned by another user (path set)
    kJournal,               // the index journal fails its checks (repair: written again from the index)
    kIndexJournalMismatch,  // the index differs from the one its journal makes (compare_journal)
  };
  Kind kind = Kind::kBadRecord;
  std::optional<ChunkKey> key = std::nullopt;      // the chunk concerned
  std::optional<ChunkKey> base = std::nullopt;     // its delta base, where the problem involves one
  std::optional<uint64_t> pack_id = std::nullopt;  // the pack concerned
  std::optional<uint64_t> offset = std::nullopt;   // with pack_id: the record's offset in it
  std::optional<uint64_t> ino = std::nullopt;      // the inode whose extent is concerned
  std::string path = {};                           // kLoosePermissions: the file or directory
  bool repaired = false;
  std::string message;  // one line, for people
};
// Stable lower-case name of a kind ("bad_record", ...; docs/FORMAT.md, "Control protocol").
const char* FsckProblemKindName(FsckProblem::Kind kind);

// fsck(8) exit code of a run that found `errors` problems and repaired
// `fixed` of them: the one place that decides it.
int FsckExitCode(uint64_t errors, uint64_t fixed);
// Exit code of an fsck that could not run (failure is not ok): cancelled
// for kAborted, else an operational error.
int FsckExitCode(const Status& failure);

struct FsckReport {
  uint64_t chunks_checked = 0;
  uint64_t orphan_bytes = 0;          // tails and orphan packs
  std::vector<FsckProblem> problems;  // in the order found
  uint64_t Count(FsckProblem::Kind kind) const;
  uint64_t errors() const { return problems.size(); }  // problems found
  uint64_t fixed() const;                              // of those, repaired
  // One line per problem, " (repaired)" appended to those repaired.
  std::vector<std::string> Messages() const;
  int ExitCode() const { return FsckExitCode(errors(), fixed()); }
};
// Exit code of an fsck run that may have failed to run at all.
int FsckExitCode(const Result<FsckReport>& r);

// What this build reads and writes, for every tool's --version: the
// release, then the store's and the codec's formats, as
// "NAME (lmcfs) 0.1.0\nformats: store 1-4, frame versions 1-5, .lmc container 1"
// (no newline at the end: CLI11 adds one).
std::string VersionText(std::string_view name);

class Store {
 public:
  // Opens (or creates) the store in dir. A store opened by another Store,
  // in this or another process, gives kBusy. Recovery after a crash happens
  // here (docs/ARCHITECTURE.md, "The chunk store", "Recovery").
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, const StoreOptions& options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Commits the batch atomically: either all of it or none of it. Pack bytes
  // are always made durable before the index refers to them; sync=true also
  // syncs the index's write-ahead log before returning (what fsync needs).
  // Errors: kInvalidArgument (unknown chunk in Ref/Unref/base, refcount
  // underflow, oversize frame: nothing of this batch applied), kNoSpace,
  // kIOError. The batch is left as is.
  Status Commit(const Batch& batch, bool sync = true);

  // Whether chunk `key` is indexed with exactly the bytes p[0, n) (read,
  // decoded and compared): kEqual, with the record compared
  // (AddMatchedChunk); kAbsent; kDiffers (a key that names other bytes: a
  // collision, to be stored by AddChunk and refused at commit). Errors:
  // those of ReadChunk. Thread-safe; takes no store-wide lock.
  Result<ChunkMatch> MatchChunk(const ChunkKey& key, const uint8_t* p, size_t n, Workspace& ws);

  // Decodes chunk `key` into dst (cap >= decoded_len), verifying the
  // record checksum and the frame's decoded checksum (and the key, with
  // verify_content_hash). Returns decoded_len. kNotFound if absent;
  // kCorruption (logged and counted) if anything fails verification.
  Result<size_t> ReadChunk(const ChunkKey& key, uint8_t* dst, size_t cap, Workspace& ws);
  // Reads several chunks, each with ReadChunk's checks, errors, counters
  // and caches, their frames decoded by decode_batch in rounds: first the
  // standalone frames, with those of the delta bases that no read names
  // and the base cache lacks, then the deltas on them, and so on up each
  // chain (one call a round; bases from the base cache are used as they
  // are; fp32 masters on their bf16 twins are deltas too). A round whose
  // call fails (the device) is decoded on the CPU from the records already
  // read. Without decode_batch, or with a FrameCodec other than
  // LmcFrameCodec(), it is one ReadChunk per item. The records are read,
  // and each round's results hashed, in parallel on ThreadPool::Shared()
  // (the caller takes part), so it must not be called from a task of that
  // pool; the rest runs on the calling thread. What is out of the ordinary (a
  // chunk the base cache holds, a short buffer, a key asked for twice, a
  // chunk or base moved meanwhile, a chain too deep, a delta whose base
  // failed) takes ReadChunk's path; batch_only: those are left to the
  // caller instead (ChunkRead::deferred), to read in parallel.
  void ReadChunks(std::span<ChunkRead> reads, Workspace& ws, const FrameBatchDecoder& decode_batch,
                  bool batch_only = false);
  Result<ChunkInfo> GetChunkInfo(const ChunkKey& key);
  // Whether the chunk is a delta on its bf16 twin (its frame has a widened
  // base: docs/FORMAT.md, "Frame", flag bit 1): reads the frame's first
  // bytes. For the "derived" figures of the xattrs and lmcfs-stat.
  Result<bool> DerivedFromTwin(const ChunkKey& key);
  // Height of key's subtree in the committed index: the largest
  // depth(X) - depth(key) over the chunks X that reach `key` through their
  // delta bases; 0 when none. kNotFound if `key` is not indexed. Takes no
  // commit lock, so a concurrent commit may change the answer: a hint for
  // callers deciding whether a RebaseChunk is worth encoding (the commit
  // checks again).
  Result<uint32_t> SubtreeHeight(const ChunkKey& key);
  // Number of chunks that use `key` as their delta base (each holds one of
  // its references; the rest come from file extents), from the committed
  // dependants index. No commit lock.
  Result<uint64_t> CountDependants(const ChunkKey& key);

  // Filesystem column families. Get: kNotFound if absent.
  Result<std::string> Get(Cf cf, std::string_view key);
  // Calls fn(key, value) for every key starting with prefix, in key order,
  // until fn returns false. Reads a consistent snapshot.
  Status Scan(Cf cf, std::string_view prefix,
              const std::function<bool(std::string_view key, std::string_view value)>& fn);

  StoreStats Stats() const;

  // What the store directory occupies on the backing disk (allocated
  // blocks): in all, and its index (RocksDB) and pack directories.
  struct DiskUsage {
    uint64_t total = 0, index = 0, packs = 0;
  };
  Result<DiskUsage> GetDiskUsage() const;
  // The same as this node knows it, for what asks often (statfs, the mount
  // root's attributes). For a RADOS store, where GetDiskUsage lists the
  // pool and reads each object's size, nothing is asked of the cluster:
  // the packs by their sizes less the holes known (Stats().pack_disk_bytes),
  // the journal by its snapshot and the records since it that this node
  // wrote or read, and the node's local index by its files. Objects of a
  // few bytes (HEAD, LOCK) are not counted. Other stores: GetDiskUsage.
  Result<DiskUsage> KnownDiskUsage() const;
  // The backing storage's size and free space, as statvfs(3) fills them:
  // the filesystem of a POSIX store's directory; for a RADOS store, its
  // pool's (RadosEnv::Space: what the pool stores and can still take,
  // replicas and quota counted; 0 blocks where the cluster reports no
  // figures). Returns 0 or an errno.
  int BackingSpace(struct statvfs* out) const;
  // How this store names chunks: the key of bytes written to it is
  // keys().Of(bytes, owner) (ChunkKey::Of for a SHA-256 store).
  const KeyScheme& keys() const;
  // The store's name ("rados:POOL/NAME" or its real directory) and where
  // what is local to this node lives (its own directory for a POSIX store;
  // a journaled store's local index directory).
  const std::string& Name() const;
  // Opened read-only (StoreOptions::read_only): a follower of a store
  // another node writes.
  bool ReadOnly() const;
  const std::string& LocalDir() const;
  // Where this open moved a damaged index before rebuilding it from the
  // journal (StoreOptions::rebuild_damaged_index), or "".
  const std::string& RebuiltIndex() const;
  // A journaled store: builds the index its journal describes (snapshot,
  // then records) in a scratch RocksDB and compares it with the index, entry
  // by entry; one line per column family that differs (empty: the same).
  // Commits wait meanwhile. Unsupported without a journal.
  Result<std::vector<std::string>> CompareIndexWithJournal();
  // What this open repaired, one line each, for people (an index rebuilt
  // from the journal; a journal written again from the index).
  const std::vector<std::string>& OpenRepairs() const;

  // A follower (StoreOptions::read_only, a journaled store another node
  // writes): applies the journal records the writer appended since the
  // last call; returns how many. A follower the writer's snapshot left
  // behind (it took records not yet read, with their segments) makes its
  // index the snapshot's in one write of what differs (counted as one
  // record), then applies the records after it. Reads running meanwhile
  // see the state before or after each record. on_key, if set,
  // hears of each key of the filesystem's column families that an applied
  // record put or deleted (a key deleted by range: its range's start), so
  // that the follower can tell who caches those records that they changed,
  // and how: kTrailerOnly for an extent put over one with the same first
  // Extent::kEncodedSize bytes (the same bytes of the file: flags, length,
  // chunk, offset), whose filesystem trailer alone differs (a rebase's or
  // re-encoding's new frame length: the file's stored size, not its bytes).
  enum class KeyChange : uint8_t { kChanged, kTrailerOnly };
  using RefreshKeyFn = std::function<void(Cf cf, std::string_view key, KeyChange how)>;
  Result<uint64_t> Refresh(const RefreshKeyFn& on_key = nullptr);
  // Calls fn whenever the writer of this RADOS store commits (RADOS
  // watch/notify on the journal head), until the handle dies. Unsupported
  // for other stores.
  Result<std::unique_ptr<FileLock>> WatchChanges(std::function<void()> fn);

  // Pins an indexed chunk so that it stays indexed, even if its last
  // reference goes, until the pin is released (Batch::Unpin at the commit of
  // the batch that uses it as a delta base, or UnpinChunk). Pins are in
  // memory; counted (pin twice, release twice). kNotFound if the chunk is
  // not indexed. Thread-safe. docs/ARCHITECTURE.md, "Pinned bases".
  Status PinChunk(const ChunkKey& key);
  // The same for a chunk that is not indexed yet: its AddChunk is in a
  // batch that the caller knows commits no later than the one that takes
  // the pin's reference (the same file's earlier batch, or the same batch).
  // From its commit on, the chunk stays indexed while pinned, as with
  // PinChunk; meanwhile PinChunk of it succeeds too (it counts pins, not
  // entries: GetChunkInfo says whether it is indexed yet). Released the
  // same way.
  void PinPendingChunk(const ChunkKey& key);
  // The deepest delta chain the store accepts (a chunk and its bases).
  static constexpr int kMaxDeltaChain = 8;
  // Releases a pin at once (the caller did not use the chunk).
  void UnpinChunk(const ChunkKey& key);
  // Chunks kept only by their pins (their last reference is gone), waiting
  // for the pin to go.
  uint64_t PinnedDeadChunks() const;

  // Finds dead delta bases and re-encodes their dependants (see
  // DeadBaseOptions). Safe while the store serves commits: each rewrite
  // commits like any batch; a dependant released meanwhile is skipped.
  // Follow with Compact to give the freed records' space back.
  Result<DeadBaseReport> RewriteDeadBases(const DeadBaseOptions& options,
                                          const DeadBaseProgressFn& progress = {});

  Result<CompactReport> Compact(const CompactOptions& options, const CompactProgressFn& progress = {});
  // Punches the dead records queued so far now, after making the index
  // durable (StoreOptions::punch_dead). The store's own thread does this
  // within 20 ms of a commit that kills records; tests and tools that need
  // the space back at a known moment call it.
  void PunchDeadRecords();
  Result<FsckReport> Fsck(const FsckOptions& options);

  struct Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmc::store
