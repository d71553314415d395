// The index journal (docs/FORMAT.md, "Index journal"; docs/ARCHITECTURE.md,
// "Stores in RADOS"): every index batch of a journaled store (a RADOS store)
// is appended, durably and in order, to journal segments in the store
// before it is applied to the node's RocksDB, which is then a local
// materialization that any node can rebuild: the last index snapshot,
// then the records after it.
//
// Files, all under STORE/journal/ and written through the store's Env:
//   HEAD                      "lmcfs-journal 1", id=, snapshot=SEQ, parts=N
//   seg-<16 hex: first seq>   records: magic "LMJR", u32 length, u64 seq,
//                             u64 XXH3(seq, data), data (a RocksDB
//                             WriteBatch's contents)
//   snap-<16 hex seq>-<part>  the index at SEQ, in parts of at most 8 MiB
//
// Thread safety: none; the store serialises Append (journal_mu), except
// bytes_since_snapshot and snapshot_bytes, which any thread may read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmc/status.h"
#include "lmc/store/env.h"

namespace lmc::store {

class IndexJournal {
 public:
  // Opens the journal of the store at `dir` (creating it when `create`).
  static Result<std::unique_ptr<IndexJournal>> Open(Env* env, const std::string& dir, bool create);

  // The journal's identity: a local index made from another journal (a
  // store of the same name made again) is rebuilt.
  const std::string& id() const { return id_; }
  // The sequence number of the last snapshot (0: none).
  uint64_t snapshot_seq() const { return snapshot_seq_; }

  using SinkFn = std::function<Status(uint32_t cf, std::string_view key, std::string_view value)>;
  // Calls put(cf, key, value) for every entry of the last snapshot.
  using PutFn = std::function<Status(uint32_t cf, std::string_view key, std::string_view value)>;
  Status LoadSnapshot(const PutFn& put);

  // Calls apply(seq, data) for every record after `after`, in order, and
  // positions the journal for appending after the last one. A torn record
  // at the very end (a write that never completed, so never acknowledged)
  // is cut off; damage anywhere else is Corruption. Must precede Append.
  // *replayed: bytes of the records applied.
  // A reader (writable = false; a follower) claims nothing and cuts
  // nothing: it stops before a torn tail, and a later Replay goes on from
  // where the last one stopped, reading only what was appended since.
  // Aborted: `after` is not in the journal (the local index is ahead of
  // it, or behind its snapshot): rebuild it.
  // A damaged record the local index already holds (its number is at most
  // `after`: it was whole when appended, so rot, not a torn write) cuts
  // nothing: the replay goes on from the next whole record and damaged()
  // says so; the writer then heals the journal from its index (Heal).
  Status Replay(uint64_t after, const std::function<Status(uint64_t seq, std::string_view data)>& apply,
                uint64_t* replayed, bool writable = true);
  // Reads HEAD again (a reader: the writer may have written a snapshot).
  Status Reload() { return ReadHead(); }
  // A reader: reads HEAD again and, where the writer's snapshot moved on,
  // drops the records it now holds from bytes_since_snapshot, so that a
  // follower counts the journal as the writer's snapshots leave it (their
  // records' segments deleted), not every record it read since it opened.
  Status FollowHead();

  // The sequence number the next Append gets.
  uint64_t next_seq() const { return next_seq_; }
  // Appends the record of next_seq() (a new segment after a replay and
  // every kSegmentBytes), durably when `sync` (which also makes every
  // earlier append durable). On failure the record is cut off again if
  // possible; if not, the journal refuses every later append.
  Status Append(std::string_view data, bool sync = true);
  // Takes the last Append back (the local index refused it, so it must
  // not reach the index at a later replay either): the segment is cut back
  // and synced. On failure the journal refuses every later append.
  Status Unappend();
  // The last Replay met a damaged record below the local index's.
  bool damaged() const { return damaged_; }
  // Writes a snapshot at next_seq() - 1 (the local index, all of the
  // journal applied) and deletes every segment, the damaged ones with the
  // rest: the journal is whole again. Appends then start a new segment.
  Status Heal(const std::function<Status(const SinkFn&)>& scan);
  // A journal whose HEAD is damaged, made again from a whole local index:
  // journal `id` (the index's journal-id), a snapshot at `seq` (its
  // journal-seq) from scan; every old segment and part is deleted.
  // Positioned for appending, like a replayed journal.
  static Result<std::unique_ptr<IndexJournal>> Recreate(Env* env, const std::string& dir, std::string id,
                                                        uint64_t seq,
                                                        const std::function<Status(const SinkFn&)>& scan);
  // Reads every segment and snapshot part and checks each checksum, record
  // numbers in order (fsck). Corruption names the first damage.
  Status Verify();
  // Reads every segment, checking each record as Verify does, and calls
  // fn(seq, data) for every record after the snapshot, in order (what
  // LoadSnapshot then these make is the index; fsck compares).
  Status ForEachRecord(const std::function<Status(uint64_t seq, std::string_view data)>& fn);
  // Journal bytes since the last snapshot: the records after it that this
  // journal appended, or read in the segments its replays read (a reader
  // adds each replay's to the last one's).
  uint64_t bytes_since_snapshot() const { return since_snapshot_.load(std::memory_order_relaxed); }
  // Bytes of the last snapshot's parts (0: none, or not known).
  uint64_t snapshot_bytes() const { return snapshot_bytes_.load(std::memory_order_relaxed); }

  // Writes a snapshot of the index at `seq` (the caller's scan calls the
  // sink for every entry of a consistent view at seq), points HEAD at it,
  // and deletes the segments and snapshots it makes unnecessary.
  Status WriteSnapshot(uint64_t seq, const std::function<Status(const SinkFn&)>& scan);

  static constexpr uint64_t kSegmentBytes = uint64_t{64} << 20;

 private:
  IndexJournal(Env* env, std::string dir) : env_(env), dir_(std::move(dir)) {}
  Status ReadHead();
  Status WriteHead(uint64_t seq, uint32_t parts);
  struct Segment {
    uint64_t first;
    std::string name;
  };
  Result<std::vector<Segment>> Segments();
  Status StartSegment();

  Env* env_;
  std::string dir_;  // STORE/journal
  std::string id_;
  uint64_t snapshot_seq_ = 0;
  uint32_t snapshot_parts_ = 0;
  uint64_t next_seq_ = 1;
  std::atomic<uint64_t> since_snapshot_{0};
  std::atomic<uint64_t> snapshot_bytes_{0};
  bool replayed_ = false, broken_ = false;
  bool damaged_ = false;                  // Replay skipped a damaged record the local index holds
  bool unsynced_ = false;                 // seg_ has appends not yet synced
  uint64_t last_append_at_ = UINT64_MAX;  // where the last Append began in seg_ (Unappend)
  std::unique_ptr<File> seg_;             // the segment appended to; nullptr: start one
  // A reader's position: the segment it read last and where its next
  // record starts (after the record numbered cursor_seq_).
  std::string cursor_seg_;
  uint64_t cursor_off_ = 0, cursor_seq_ = 0;
  // A reader's records counted in since_snapshot_, in order: (seq, bytes),
  // each after the snapshot it knew when it read the record (FollowHead).
  std::vector<std::pair<uint64_t, uint64_t>> read_since_snapshot_;
  // The snapshot whose parts snapshot_bytes_ sums (UINT64_MAX: none).
  uint64_t sized_seq_ = UINT64_MAX;
  uint32_t sized_parts_ = 0;
};

}  // namespace lmc::store
