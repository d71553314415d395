// Private state of a Store, shared by store.cc (open, commit, read),
// compact.cc and fsck.cc.
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/statistics.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "format.h"
#include "journal.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/rados.h"
#include "lmc/store/store.h"

namespace lmc::store {

using ChunkEntries = std::unordered_map<ChunkKey, fmt::ChunkEntry, ChunkKeyHash>;
// The exact delta depth of every chunk of `chunks` from their bases
// (depth(X) = depth(base(X)) + 1, 0 without base); nullopt for a chunk
// whose chain names a base not in `chunks`, loops, or is longer than
// fmt::kMaxDeltaDepth. Open's index migration and fsck (dependants.cc).
std::unordered_map<ChunkKey, std::optional<uint8_t>, ChunkKeyHash> ExactDepths(const ChunkEntries& chunks);

// One Commit call waiting in the group commit queue.
struct Writer {
  const Batch* batch = nullptr;
  bool sync = false;
  bool done = false;
  Status status;
  std::condition_variable cv;
};

struct Store::Impl {
  // Fixed after Open. owned_env: a RADOS store's Env (destroyed after the
  // lock and the journal, which use it).
  std::unique_ptr<Env> owned_env;
  RadosEnv* rados = nullptr;
  // BackingSpace said that the pool's space is unknown (once a store).
  mutable std::atomic<bool> space_unknown_said{false};
  mutable std::atomic<bool> space_failing{false};  // BackingSpace said the monitors failed
  Env* env = nullptr;
  const FrameCodec* codec = nullptr;
  // How chunks are named (CONFIG hash=); with a fast hash the commit
  // compares the bytes of every dedup hit (commit.cc, VerifyHit).
  KeyScheme keys;
  StoreOptions opts;
  std::string dir;
  std::string pack_dir;
  // The RocksDB directory: dir/index, or for a journaled store
  // local_dir/index (local_dir: StoreOptions::local_dir or LocalDirOf).
  std::string index_dir;
  std::string local_dir;
  // CONFIG's format_version; raised to 2 by the first commit of an
  // owner-scoped key (UpgradeFormat). Guarded by commit_mu after Open.
  uint32_t format_version = 0;
  std::unique_ptr<FileLock> lock;
  // The index journal of a journaled store (journal.h); nullptr otherwise.
  // journal_mu orders journal appends and index writes alike.
  std::unique_ptr<IndexJournal> journal;
  std::mutex journal_mu;
  bool local_behind = false;  // a journaled batch failed to apply locally (journal_mu)
  // A follower (StoreOptions::read_only, journaled): the keys and count of
  // the records a read's catch-up applied (Moved), which the next
  // Store::Refresh reports as its own (journal_mu).
  std::vector<std::tuple<Cf, std::string, KeyChange>> caught_up_keys;
  uint64_t caught_up_records = 0;
  // Applies the journal records appended since the local index's last one;
  // on_key (may be empty) hears of their filesystem keys. journal_mu held.
  // A follower behind the writer's last snapshot (the records it lacks went
  // into it with their segments): the local index made the snapshot's in
  // one write of what differs, which on_key hears of as records' keys.
  // Returns the number of entries put or deleted. journal_mu held.
  Result<uint64_t> CatchUpWithSnapshot(const RefreshKeyFn& on_key);
  Result<uint64_t> ApplyJournal(const RefreshKeyFn& on_key);
  // Where Open moved a damaged index before rebuilding it from the journal
  // (StoreOptions::rebuild_damaged_index); "" if it did not.
  std::string rebuilt_index_aside;
  std::vector<std::string> open_repairs;  // what Open repaired (Store::OpenRepairs)
  bool index_differs = false;             // CheckPacksAgainstJournal found the index short
  // StoreOptions::index_on_env: RocksDB's Env over the store's (closed with
  // the index, in ~Impl, before it goes).
  std::unique_ptr<rocksdb::Env> index_env;
  rocksdb::DB* db = nullptr;
  // A write to the index failed (RocksDB may be in its background error
  // state, refusing every write): the next WriteIndex resumes it first
  // (ResumeIndex), one at a time (resume_mu).
  std::atomic<bool> index_stopped{false};
  std::mutex resume_mu;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::ColumnFamilyHandle* chunks_cf = nullptr;
  rocksdb::ColumnFamilyHandle* packs_cf = nullptr;
  std::array<rocksdb::ColumnFamilyHandle*, 4> fs_cf{};  // indexed by Cf

  // Lock order: queue_mu is never held while taking another lock;
  // commit_mu before files_mu.

  // Pack files open for reading (pread), shared with readers without any
  // other lock. Retired packs are never (re)inserted.
  std::shared_mutex files_mu;
  std::map<uint64_t, std::shared_ptr<File>> files;
  std::set<uint64_t> retired;

  // Held by the leader of a commit group, by Compact (per pack) and Fsck.
  // Guards everything below down to the stats.
  std::mutex commit_mu;
  std::map<uint64_t, fmt::PackMeta> packs;  // committed state of every pack in the index
  uint64_t next_pack_id = 1;
  uint64_t active_id = 0;
  std::shared_ptr<File> active;  // nullptr: the next commit starts a new pack
  uint64_t active_end = 0;       // committed end of the active pack

  // Group commit queue (front = current leader).
  std::mutex queue_mu;
  std::deque<Writer*> writers;

  // Pins (Store::PinChunk; docs/ARCHITECTURE.md, "Pinned bases"). Lock
  // order: commit_mu before pin_mu; pin_mu is held only for set operations.
  mutable std::mutex pin_mu;
  std::unordered_map<ChunkKey, uint32_t, ChunkKeyHash> pins;  // key -> pin count (> 0)
  // Chunks indexed with refcount 0 because a pin held them when their last
  // reference went (each has a marker in the default column family), and
  // those of them whose last pin is gone: the next commit group drops them.
  std::set<ChunkKey> pinned_dead, reap;
  bool Pinned(const ChunkKey& key) const {
    std::lock_guard l(pin_mu);
    return pins.count(key) > 0;
  }

  std::atomic<uint64_t> n_commits{0}, n_groups{0}, n_stored{0}, n_dedup{0}, n_dedup_verified{0},
      n_encoded_at_commit{0}, n_appended{0}, n_corruptions{0}, n_rebased{0}, n_rebase_skipped{0},
      n_base_hits{0}, n_base_misses{0};
  // Bytes written to pack files (records of commits, rebases and compaction
  // copies, and pack headers), and what compaction copied and gave back.
  std::atomic<uint64_t> n_pack_written{0}, n_compact_copied{0}, n_compact_reclaimed{0};
  // RocksDB's counters (bytes it wrote: WAL, flushes, compactions).
  std::shared_ptr<rocksdb::Statistics> rocks_stats;
  // The index's block caches (OpenIndex): the chunk keys', the rest's.
  std::shared_ptr<rocksdb::Cache> chunk_blocks, meta_blocks;

  // One maintenance run at a time (Compact, RewriteDeadBases): an explicit
  // lmcfs-gc and the daemon's background reclamation take turns. Taken
  // before commit_mu, never while holding it.
  std::mutex maint_mu;

  // Decoded delta bases (StoreOptions::base_cache_bytes); set at Open.
  std::unique_ptr<ChunkCache> base_cache;

  // Hole punching (docs/ARCHITECTURE.md, "Hole punching"). A committed
  // index batch that kills records (released, rebased, rewritten, moved by
  // compaction) queues their places; the puncher thread makes the index
  // durable (a synced barrier write; a journaled store's batches already
  // are) and then punches the whole blocks inside them. Lock
  // order: commit_mu before punch_mu; punch_mu is held only to queue or
  // take the queue.
  struct DeadRange {
    uint64_t pack = 0, off = 0, len = 0;
    // The pack's committed size when the range died (QueueDead sets it):
    // the block holding the pack's last byte is never punched. In RADOS a
    // zeroed range that reaches the object's end truncates the object.
    uint64_t pack_end = 0;
  };
  std::mutex punch_mu;
  std::condition_variable punch_cv;
  std::vector<DeadRange> punch_queue;  // punch_mu
  // Ranges whose round could not sync the index (it stopped: a full disk);
  // queued again with the next ranges, which a commit killed once the
  // index took writes again.
  std::vector<DeadRange> punch_deferred;  // punch_mu
  bool punch_stop = false;                // punch_mu
  std::atomic<bool> punch_enabled{false};
  std::mutex punch_run_mu;  // one PunchDead at a time
  std::thread puncher;
  std::atomic<uint64_t> n_punched{0}, n_holes{0};
  // Where a pack's bytes on disk cost a round trip to learn (RADOS: its
  // size less its holes attribute, Env::FileDiskBytes), the holes of each
  // pack this process knows: packs it created (none yet) and packs read
  // once on demand (PackOnDisk); the puncher adds what it gives back. A
  // POSIX store asks the filesystem (st_blocks) each time. holes_mu, taken
  // after commit_mu, if at all.
  bool cache_holes = false;
  std::mutex holes_mu;
  std::unordered_map<uint64_t, uint64_t> pack_holes;  // holes_mu
  // What pack `id` (committed size `size`) holds on disk: `size` less its
  // holes; `size` where punching is off or the Env cannot tell. With
  // `ask` false, a pack whose holes are not cached counts whole (no round
  // trip).
  uint64_t PackOnDisk(uint64_t id, uint64_t size, bool ask = true);
  // Reads the holes of every pack not cached yet (cache_holes), outside
  // commit_mu, until stop() says so.
  void CachePackHoles(const std::function<bool()>& stop);
  // A read-only store in RADOS follows the holes another node's puncher
  // makes (docs/ARCHITECTURE.md, "Hole punching"): its own thread (in
  // `puncher`'s place) reads every pack's holes once at open, then those of
  // each pack a refresh changed, kHolesRecheck after the change and once
  // more later (the writer punches after its commit is durable, so the
  // first read may come too early).
  bool follow_holes = false;
  struct HolesDue {
    std::chrono::steady_clock::time_point due;
    int reads_left = 0;
  };
  std::map<uint64_t, HolesDue> holes_due;  // punch_mu
  // Packs that a journal record changed (size or live bytes), and those it
  // removed; commit_mu held (ApplyJournal).
  void PacksChanged(const std::vector<uint64_t>& changed, const std::vector<uint64_t>& gone);
  // Reads the holes of pack `id` from the cluster, replacing what is cached.
  void ReadPackHoles(uint64_t id);
  // IndexJournal::FollowHead under journal_mu, unless no record was read
  // since the last call (*seen: the journal's next_seq then).
  void FollowJournalHead(uint64_t* seen);
  void StartHolesFollower();
  void QueueDead(std::vector<DeadRange> ranges);  // commit_mu held
  // Punches what is queued (after making the index durable). Takes no store
  // lock but punch_mu briefly.
  void PunchDead();
  void StartPuncher();
  void StopPuncher();  // punches what is queued, then joins

  ~Impl();
  std::string PackPath(uint64_t id) const { return pack_dir + "/" + fmt::PackFileName(id); }

  // Rewrites CONFIG with format_version 2 (atomically), so that an lmcfs
  // that reads only 1 refuses the store ("upgrade lmcfs") instead of
  // finding owner-scoped records it would call corrupt. Under commit_mu.
  Status UpgradeFormat();
  Status OpenIndex(bool fresh);
  Status VerifyIndexFiles();  // whole-file checksums of the index's table files
  Status IndexDamaged(const rocksdb::Status& rs) const;
  void CloseIndex();
  // A journaled store's Open after the lock: the journal, then the local
  // index brought up to it (rebuilt from the snapshot when it is missing,
  // of another journal, or behind the snapshot).
  Status OpenJournaled(bool fresh);
  // The Env that holds the index's files (the store's, for index_on_env).
  Env* IndexFileEnv() const;
  // index.sum: the MANIFEST as a clean close left it (CloseIndex), checked
  // by the next open before RocksDB reads it.
  void WriteManifestSum();
  Status CheckManifestSum();
  // Recover's guard in a journaled store: the index's packs column family
  // equals the journal's (Corruption "differs from its journal" if not).
  Status CheckPacksAgainstJournal();
  // The index against the one its journal makes (Store::CompareIndexWithJournal). journal_mu held.
  Result<std::vector<std::string>> CompareWithJournal();
  // Calls sink for every entry of every column family (a snapshot's scan).
  Status ScanIndex(const IndexJournal::SinkFn& sink);
  // Writes a snapshot of the index to the journal. journal_mu held.
  Status SnapshotIndex();
  uint64_t LocalJournalSeq();
  Status Recover();

  Result<fmt::ChunkEntry> LoadEntry(const ChunkKey& key);
  // fsck's record pass (fsck.cc); takes no lock.
  Status CheckRecord(const ChunkKey& key);
  struct BadRecord {
    std::string message;  // why verification failed
    uint64_t pack_id = 0, offset = 0;
  };
  using BadRecords = std::unordered_map<ChunkKey, BadRecord, ChunkKeyHash>;
  Status VerifyRecords(const FsckOptions& options, BadRecords* bad);
  // The pack file for reading; kNotFound if it does not exist (retired).
  Result<std::shared_ptr<File>> PackFile(uint64_t id);
  // Logs, counts and returns a Corruption naming the chunk and its place.
  Status Corrupt(const ChunkKey& key, uint64_t pack, uint64_t off, const std::string& what);
  // A Corruption naming the chunk and its place, not yet logged or counted.
  static Status CorruptionAt(const std::string& pack_path, const ChunkKey& key, uint64_t off,
                             const std::string& what);
  // Logs and counts a Corruption (passes other statuses through).
  Status Reported(Status st);
  // Reads the record of `key` at e into buf and verifies it (header, key,
  // lengths, checksum). A failure is returned, not yet logged or counted:
  // the record may have died and been punched after e was read (see
  // Moved); callers report what stays a failure (Reported).
  Status ReadRecord(const ChunkKey& key, const fmt::ChunkEntry& e, const File& f, std::vector<uint8_t>& buf);
  // ReadRecord for the read path: a record of kDirectRecordBytes or more is
  // read with the file's direct read (File::ReadDirect: the aligned blocks
  // around it, no copy out of the page cache) into a buffer of the
  // thread's, others into buf. Returns where the record starts, valid
  // until the thread's next call.
  Result<const uint8_t*> ReadRecordForDecode(const ChunkKey& key, const fmt::ChunkEntry& e, const File& f,
                                             std::vector<uint8_t>& buf);
  // ReadRecord's checks of the record at `rec`.
  Status CheckRecord(const ChunkKey& key, const fmt::ChunkEntry& e, const uint8_t* rec);
  // Whether chunk `key` is no longer where entry e says (released, or its
  // record rewritten or moved since): a read of e's record that failed
  // verification is then retried from the new entry, not reported. A
  // follower first applies what the writer's journal has that its index
  // lacks: the writer may have released, punched or moved the record since
  // the last refresh.
  bool Moved(const ChunkKey& key, const fmt::ChunkEntry& e);
  Result<size_t> Read(const ChunkKey& key, uint8_t* dst, size_t cap, Workspace& ws, bool verify_hash,
                      int depth);
  // The checks after a frame of entry e was decoded into dst (n: the
  // decoder's result): errors become Corruption naming the chunk's place
  // (Unsupported passes through), then the size and, with verify_hash, the
  // key. Returns the decoded size.
  Result<size_t> CheckDecoded(const ChunkKey& key, const fmt::ChunkEntry& e, const Result<size_t>& n,
                              const uint8_t* dst, bool verify_hash);

  // Dependants index (dependants.cc; docs/FORMAT.md, "Dependants index").
  // Calls fn(dependant) for each committed dep/ record of `base`, in key
  // order, reading `snap` (nullptr: the latest state). Takes no lock.
  Status ScanDependants(const ChunkKey& base, const rocksdb::Snapshot* snap,
                        const std::function<void(const ChunkKey&)>& fn);
  // Whether `base` has a committed dependant (one seek; false on error).
  bool HasDependants(const ChunkKey& base);
  // Puts a standalone bf16 chunk just decoded at depth 0 (dst, n bytes;
  // `frame` its frame) in the base cache when chunks depend on it: the
  // fp32 masters paired with it, read next in the same file, then find it
  // there instead of decoding it again.
  void KeepIfPairedBase(const ChunkKey& key, const uint8_t* frame, const uint8_t* dst, size_t n);
  // Whether a frame (read and checked whole) is an fp32 chunk on a widened
  // bf16 base.
  static bool WidenedFrame(const uint8_t* frame);
  // At Open, before any commit: a new store gets the marker; a store
  // without it gets its index built from one scan of the chunk index (and
  // its entries' depths made exact), then the marker, in one write.
  Status EnsureDependantsIndex(bool fresh);

  // --- commit_mu held ---
  Status EnsureActivePack();
  // Size at which the active pack is sealed (StoreOptions::pack_size_limit).
  uint64_t PackLimit() const;
  // Appends records to the active pack and makes them durable; on failure
  // the pack is cut back to active_end (or abandoned if that fails too).
  // kNoSpace (writing nothing) if appending `bytes` would leave less than
  // the reserve free on the backing filesystem (StoreOptions::space_reserve).
  Status CheckRoom(uint64_t bytes);
  // The bytes kept free on a filesystem of `total` bytes:
  // min(StoreOptions::space_reserve, total / 16).
  uint64_t ReserveOf(uint64_t total) const { return std::min(opts.space_reserve, total / 16); }
  Status AppendDurably(const std::string& records);
  Status AppendDurably(std::span<const std::span<const uint8_t>> pieces, size_t bytes);
  void Rollback();
  Status CommitGroup(const std::vector<Writer*>& group);
  Status WriteIndex(rocksdb::WriteBatch& wb, bool sync);
  // The result of an index write `what`: a failure marks the index stopped
  // and, on a filesystem now mounted read-only, is kReadOnly.
  Status IndexWriteResult(const rocksdb::Status& rs, const std::string& what);
  // DB::Resume after a failed index write, once the index's filesystem has
  // the reserve free again (a resume flushes the memtables); an error that
  // says what to do otherwise.
  Status ResumeIndex();
  // Whether the index's write failed (`rs`) because its filesystem is
  // read-only.
  bool IndexReadOnly(const rocksdb::Status& rs) const;
  // Loads the markers of pinned dead chunks left by a previous run (no pin
  // survives a restart) and drops them with one commit group.
  Status ReapPinnedDead();
};

Status FromRocks(const rocksdb::Status& s, const std::string& what);

}  // namespace lmc::store
