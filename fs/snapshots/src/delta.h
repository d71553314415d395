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
// pipeline dropped it) is handed back through Release, which unpins it.
//
// Reverse deltas (DeltaMode::kReverse, the default): ChooseBase offers no
// base (a new chunk is written standalone, so reading the newest save
// decodes one frame per chunk); Record queues (prior version, new chunk).
// A background thread, at the lowest CPU priority, re-encodes each prior
// version as an XOR delta against the new chunk once that is committed,
// when the estimate says it is smaller and the store's chain limit allows
// (Batch::RebaseChunk, checked again under the commit lock). The new frame
// is decoded and compared with the prior version's bytes before it is
// committed. The same thread re-encodes an fp32 master against its bf16
// twin when the twin is written after it (pairing.h). Each queued item is
// also a rebase/ (or rebase-pair/) record, written in the batch that
// commits the new chunk and deleted in the batch that rebases
// the prior version (or gives up on it), so work still queued at a crash
// survives: the next mount reloads the records (LoadQueuedRebases) and
// works them off; until then the prior version stays standalone (space,
// never data). Unmount finishes the queue (Filesystem::Shutdown -> Flush).
// Lineage is keyed by file name, so the chunks of a file with a temporary
// name (an atomic save) are held until a rename names it (Named); and a
// re-encoded chunk that other files share gets their extents' frame
// lengths updated by a scan once the queue is idle (ReconcileShared).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "lineage.h"
#include "lmc/delta_estimate.h"
#include "lmc/fs/delta_policy.h"
#include "lmc/fs/snapshots.h"
#include "lmc/store/chunk_cache.h"
#include "pairing.h"

namespace lmc::fs {

struct DeltaCounters {
  std::atomic<uint64_t> delta{0};             // chunks offered a base
  std::atomic<uint64_t> no_lineage{0};        // no prior version known
  std::atomic<uint64_t> base_gone{0};         // prior version no longer indexed
  std::atomic<uint64_t> keyframes{0};         // standalone: chain limit reached
  std::atomic<uint64_t> estimate_said_no{0};  // standalone: delta not smaller
  std::atomic<uint64_t> base_cache_hits{0};
  std::atomic<uint64_t> explicit_base{0};  // delta against a chunk in delta_base=DIR
  // Pairing (pairing.h): fp32 chunks written as deltas on their bf16 twin,
  // and fp32 chunks whose fingerprint found a candidate that did not check
  // out (values, size, chain limit or estimate).
  std::atomic<uint64_t> paired{0};
  std::atomic<uint64_t> pair_refused{0};
  // fp32 masters written before their bf16 twin, re-encoded against it by
  // the rebaser (queued, and done; the rest went to rebase_* below).
  std::atomic<uint64_t> pair_later_queued{0};
  std::atomic<uint64_t> paired_later{0};
  // Reverse deltas (background).
  std::atomic<uint64_t> rebase_queued{0};
  std::atomic<uint64_t> rebased{0};             // prior versions re-encoded against the new chunk
  std::atomic<uint64_t> rebase_keyframes{0};    // left standalone: chain limit
  std::atomic<uint64_t> rebase_not_smaller{0};  // left standalone: estimate said no
  std::atomic<uint64_t> rebase_skipped{0};      // prior version gone, already a delta, or store refused
  std::atomic<uint64_t> rebase_dropped{0};      // new chunk never committed (or unmount)
  std::atomic<uint64_t> rebase_errors{0};       // decode/encode/verify/commit failures (logged)
  // Chunks of files with a temporary name: lineage held for the final
  // name, recorded when the file got it, dropped (never renamed, or over
  // the limit).
  std::atomic<uint64_t> lineage_held{0};
  std::atomic<uint64_t> lineage_named{0};
  std::atomic<uint64_t> lineage_dropped{0};
  // Extents of other files that share a rebased chunk, told its new frame
  // length by ReconcileShared (and the extent scans that found them).
  std::atomic<uint64_t> shared_refreshed{0};
  std::atomic<uint64_t> shared_scans{0};
};

class SnapshotDeltaPolicy final : public DeltaPolicy {
 public:
  SnapshotDeltaPolicy(store::Store* store, DeltaOptions opts);
  ~SnapshotDeltaPolicy() override;
  std::optional<BaseChoice> ChooseBase(const ChunkOrigin& origin, const uint8_t* data, size_t n) override;
  void Record(const ChunkOrigin& origin, const store::ChunkKey& key,
              const std::optional<store::ChunkKey>& base, const store::ChunkBytes& bytes,
              store::Batch* batch) override;
  void Named(uint64_t ino, std::string_view name, uint64_t parent, std::string_view dir_name,
             store::Batch* batch) override;
  void Forget(uint64_t ino) override;
  void Release(const store::ChunkKey& base) override { store_->UnpinChunk(base); }
  void Flush() override;
  void StopBackground() override;
  // Also tells fn of the places whose refresh a crash cut short (their
  // refresh records, RefreshRecordKey), before it returns.
  void SetRebaseListener(RebaseListener fn) override;
  void SetReencodedListener(ReencodedListener fn) override;
  void SetPathResolver(PathResolver fn) override { resolver_ = std::move(fn); }
  uint64_t Pending() const override;
  std::vector<std::pair<std::string, uint64_t>> Counters() const override;
  CacheUse Cache() const override { return {cache_.bytes(), cache_.capacity()}; }
  const DeltaCounters& counters() const { return counters_; }
  const DeltaOptions& options() const { return opts_; }
  // Tests only: runs on the rebase thread between an item's read of its
  // new chunk (not found) and its read of the item's record, where a
  // commit may land (PrepareRebase). Set before the items it should see
  // are recorded.
  void TestBetweenRebaseReads(std::function<void()> fn) { between_rebase_reads_ = std::move(fn); }

 private:
  using Bytes = store::ChunkBytes;
  // Decoded bytes of chunk `key` (pinned by the caller), from the cache or
  // the store.
  Bytes BaseBytes(const store::ChunkKey& key, size_t n);
  // A forward delta base: `base` (pinned here) if it is indexed, of length
  // n, within the chain limit and smaller by the estimate; else nullopt.
  // `bits`, when given, gets the estimated bits of the delta's sample.
  std::optional<BaseChoice> TryBase(const ChunkOrigin& origin, const uint8_t* data, size_t n,
                                    const store::ChunkKey& base, double* bits = nullptr);
  // The bf16 twin of an fp32 tensor chunk (pinned here), found by the
  // fingerprint of its leading values, as a widened base; nullopt when
  // there is none or it does not pay.
  std::optional<BaseChoice> TryPair(const ChunkOrigin& origin, const uint8_t* data, size_t n, double* bits);
  // Records the fingerprints of a bf16 tensor chunk, and queues the
  // rebase of each standalone fp32 master they find (written before it).
  void RecordPairs(const ChunkOrigin& origin, const store::ChunkKey& key, const store::ChunkBytes& bytes,
                   store::Batch* batch);
  // Records the fingerprint of a standalone fp32 tensor chunk, for a bf16
  // twin written after it (master records, pairing.h).
  void RecordMaster(const ChunkOrigin& origin, const store::ChunkKey& key,
                    const std::optional<store::ChunkKey>& base, const store::ChunkBytes& bytes,
                    store::Batch* batch);
  // The lineage of chunk `key` under origin's file role: in reverse mode
  // (and when it was not written as a delta, `based`), queues the rebase of
  // its prior version against it; then records it as the newest.
  void RecordLineage(const ChunkOrigin& origin, const store::ChunkKey& key, bool based, store::Batch* batch);
  // The explicit base directory's inode (delta_base), resolved at most once
  // a second; nullopt when unset or absent.
  std::optional<uint64_t> BaseDirIno();

  // --- reverse deltas ---
  struct RebaseItem {
    store::ChunkKey prev, next;  // re-encode prev as a delta against next
    DType dtype = DType::kBytes;
    uint32_t n = 0;  // prev's length (paired: 0, read from the index)
    int64_t queued_ns = 0;
    uint64_t prev_ino = 0, prev_offset = 0;  // where prev was written (0: unknown)
    // prev is an fp32 master and next its bf16 twin, from element
    // base_offset on: a frame with a widened base.
    bool paired = false;
    uint32_t base_offset = 0;
  };
  enum class Outcome { kAdded, kWaiting, kSkipped };
  void RebaseLoop();
  // The record that the extent at (ino, offset), which holds `prev`, still
  // has to take prev's new frame length (docs/FORMAT.md, "Rebase
  // records"): put in the rebase's batch, deleted once the listener was
  // told, so that a crash between the two leaves it for the next mount
  // (SetRebaseListener).
  static std::string RefreshRecordKey(uint64_t ino, uint64_t offset);
  // The persistent record of a queued rebase (docs/FORMAT.md, "Rebase
  // records"): written with the new chunk, deleted with the rebase (or
  // when it is skipped), reloaded by the next mount.
  static std::string RebaseRecordKey(const RebaseItem& it);
  static std::string EncodeRebaseItem(const RebaseItem& it);
  void LoadQueuedRebases();
  // Persists `item` in `batch` and, with the background thread, queues it.
  void QueueRebase(const RebaseItem& item, store::Batch* batch);
  // Adds the rebase of item.prev to `batch` when it pays; kWaiting: the new
  // chunk is not committed yet.
  Outcome PrepareRebase(const RebaseItem& item, store::Batch* batch);

  store::Store* const store_;
  const DeltaOptions opts_;
  LineageIndex lineage_;
  PairIndex pairs_;    // bf16 twins
  PairIndex masters_;  // standalone fp32 masters
  DeltaCounters counters_;

  // Decoded chunks, LRU bounded by base_cache_bytes: bases read from the
  // store, and the bytes of chunks just written (the bases of the next
  // save), shared with the write pipeline by Record.
  store::ChunkCache cache_;

  // Rebase queue, worked by rebaser_ (started in the constructor in
  // reverse mode, joined by the destructor).
  mutable std::mutex rq_mu_;         // guards the queue state below
  std::condition_variable rq_cv_;    // work queued, flush asked, or stop
  std::condition_variable idle_cv_;  // queue drained
  std::deque<RebaseItem> rq_;
  size_t in_progress_ = 0;  // items taken by the worker, not yet finished
  int flushers_ = 0;        // Flush calls waiting: waiting items are dropped
  bool stop_ = false;
  RebaseListener listener_;               // guarded by rq_mu_ (the worker copies it with the items it takes)
  ReencodedListener reencoded_listener_;  // likewise
  PathResolver resolver_;                 // likewise
  // Rebased chunks that more extents reference than the one the listener
  // was told about (deduplicated: a copy, weights saved twice), with that
  // place (and a frame length ReconcileShared re-reads): it scans the extents and
  // tells the listener about the others, when the queue is idle, at most
  // kMaxShared keys a scan. Scans are spaced by ten times the last one's
  // duration, at least 2 s (a flush does not wait).
  struct Shared {
    uint64_t ino = 0, offset = 0;  // the place the listener was told about
  };
  void ReconcileShared(const RebaseListener& listener);
  // Whether the committed extent at (ino, offset) references `key`.
  bool PlaceHolds(uint64_t ino, uint64_t offset, const store::ChunkKey& key);
  static constexpr size_t kMaxShared = 65536;
  std::unordered_map<store::ChunkKey, Shared, store::ChunkKeyHash> shared_rebased_;  // rebaser thread only
  bool reconcile_due_ = false;     // guarded by rq_mu_: shared_rebased_ is not empty
  int64_t next_reconcile_ns_ = 0;  // guarded by rq_mu_
  // Chunks of files with a temporary name (IsTemporaryName), whose lineage
  // waits for the name the file is renamed to (Named); dropped by Forget.
  // At most kMaxHeld chunks in all (64 GiB of 1 MiB chunks); beyond, a
  // chunk's lineage is not recorded.
  struct Held {
    ChunkSpec spec;
    store::ChunkKey key;
    store::KeyOwner owner{};
    bool based = false;
  };
  static constexpr size_t kMaxHeld = 65536;
  std::mutex held_mu_;  // guards the two below
  std::unordered_map<uint64_t, std::vector<Held>> held_;
  size_t held_count_ = 0;
  std::mutex dir_mu_;  // guards the two below
  std::optional<uint64_t> base_dir_ino_;
  int64_t base_dir_checked_ns_ = 0;
  std::function<void()> between_rebase_reads_;  // TestBetweenRebaseReads
  std::thread rebaser_;
};

}  // namespace lmc::fs
