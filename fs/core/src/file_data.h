// The data of one inode: its write and read pipelines (docs/ARCHITECTURE.md,
// "The filesystem", "Write pipeline", "Read pipeline").
//
// A FileData belongs to one Inode (inode.h) and is used only with that
// inode's mutex held. It owns the file's extents, its dirty bytes, the
// layout stream that cuts them into chunks, the chunks at the encoders and
// the batch of changes not yet committed; it reads and writes the owner's
// record (size, stored bytes, times) and commits it with the batch. What all
// files share (store, chunk cache, encoders, delta policy, write budget) is
// a FileDataShared, owned by the Filesystem.
//
// Codec paths (docs/ARCHITECTURE.md, "GPU codec in the mount"): chunks are
// encoded by the encoder pool (CPU threads, and batches on the GPU when
// FsOptions::gpu is set); reads decode single chunks on the CPU, and with
// gpu=on (FsOptions::gpu_first) read-ahead decodes its batch of standalone
// frames on the GPU when one is active and the batch holds at least
// gpu_min_batch_bytes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "committer.h"
#include "encoder.h"
#include "gpu_path.h"
#include "lmc/chunker.h"
#include "lmc/fs/delta_policy.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/records.h"
#include "lmc/layout.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/thread_pool.h"

namespace lmc::fs {

struct Inode;

// The decoded-chunk cache of a filesystem: its own, or the one it shares
// with the other stores of a union (FsOptions::shared_cache), its chunks
// kept apart there by its tag.
class FsChunkCache {
 public:
  explicit FsChunkCache(const FsOptions& o)
      : own_(o.shared_cache ? nullptr : std::make_unique<store::ChunkCache>(o.cache_bytes)),
        c_(o.shared_cache ? o.shared_cache : own_.get()),
        tag_(o.shared_cache ? o.shared_cache_tag : 0) {}
  store::ChunkBytes Get(const store::ChunkKey& key) { return c_->Get(key, tag_); }
  void Put(const store::ChunkKey& key, store::ChunkBytes bytes) { c_->Put(key, std::move(bytes), tag_); }
  uint64_t capacity() const { return c_->capacity(); }
  uint64_t bytes() const { return c_->bytes(); }
  // store::ChunkCache::NoteReader for file `ino`.
  size_t NoteReader(uint64_t ino) { return c_->NoteReader(ino, tag_); }
  void Demote(const store::ChunkKey& key) { c_->Demote(key, tag_); }

 private:
  std::unique_ptr<store::ChunkCache> own_;
  store::ChunkCache* const c_;
  const uint32_t tag_;
};

// Chunks read and decoded ahead of a sequential reader, without the
// inode's lock, into the chunk cache (FileData::Prefetch): the reader's
// reply, the kernel's copy and the next pack reads overlap with their
// decode. The pool (its own, or the one the stores of a union share) has
// more threads than the machine has cores, since each task first waits for
// its pack read (O_DIRECT, synchronous). Each key is decoded at most once
// at a time; a read that needs a chunk being decoded waits for it (Wait)
// rather than decoding it again. Best effort: a decode that fails leaves
// nothing in the cache, and the read decodes the chunk itself and reports
// the error.
class ReadAhead {
 public:
  // The pool: `shared` (FsOptions::read_pool) or one of its own of
  // ReadAheadThreads(threads).
  ReadAhead(store::Store* store, FsChunkCache* cache, FsCounters* counters, ThreadPool* shared,
            unsigned threads);
  ~ReadAhead();  // waits for the decodes in flight
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Queues the decode of chunk `key` (decoded_len bytes) unless one is in flight.
  void Start(const store::ChunkKey& key, uint32_t decoded_len);
  // Queues one task that decodes these chunks (key, decoded_len) in one
  // Store::ReadChunks call on `gpu` (deltas after their bases, a round a
  // batch) and what that leaves on the CPU, each key in flight until the
  // task ends. Keys in flight already or cached are left out. `ino` names
  // the file in the GPU's log line; gpu must outlive this.
  void StartBatch(std::vector<std::pair<store::ChunkKey, uint32_t>> chunks, GpuPath* gpu, uint64_t ino);
  // Whether a decode of `key` is in flight.
  bool InFlight(const store::ChunkKey& key);
  // Decodes that may run at once (the pool's threads).
  size_t threads() const { return pool_->size(); }
  // Returns once no decode of `key` is in flight.
  void Wait(const store::ChunkKey& key);

 private:
  void Finish(const store::ChunkKey& key);

  store::Store* const store_;
  FsChunkCache* const cache_;
  FsCounters* const counters_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_set<store::ChunkKey, store::ChunkKeyHash> inflight_;  // guarded by mu_
  // Declared last: destroyed (its queue finished, threads joined) first.
  // A shared pool outlives this; the destructor waits for this one's tasks.
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* const pool_;
};

// What the data pipelines of all files share; owned by Filesystem::Impl.
// Members are destroyed in reverse order: the encoders are joined first,
// while the delta policy and the cache their jobs use still live.
struct FileDataShared {
  FileDataShared(store::Store* store, const FsOptions& opts, FsCounters* counters);

  store::Store* const store;
  const FsOptions& opts;
  FsCounters& counters;
  FsChunkCache cache;
  // The GPU codec (FsOptions::gpu), shared by the encoders and read-ahead;
  // destroyed after read-ahead, whose batches use it.
  GpuPath gpu;
  // Decodes ahead of sequential readers into `cache`; destroyed (waiting
  // for its decodes) before the cache and the GPU path.
  ReadAhead readahead;
  // The incremental-snapshot policy (lmc/fs/delta_policy.h); nullptr: every
  // chunk standalone. Installed before use (Filesystem::SetDeltaPolicy).
  std::unique_ptr<DeltaPolicy> delta;
  // Bytes charged by jobs in flight over all inodes (FsOptions::write_budget).
  std::atomic<uint64_t> inflight_bytes{0};
  // Frame bytes of the batches at the committer over all inodes
  // (FsOptions::commit_queue_limit; CommitTicket::queued).
  std::atomic<uint64_t> committing_bytes{0};
  // Commits batches handed off by writers (committer.h); destroyed after the
  // encoders, whose jobs it does not use, and before the caches.
  Committer committer;
  // Last member: destroyed (joined) first, while everything its jobs use lives.
  EncoderPool encoders;

  // The errno for a failed store call: ENOENT, ENOSPC, or EIO (counted and
  // logged with `what` and the inode).
  int ToErrno(const Status& s, std::string_view what, uint64_t ino);
  // The frame length the index holds for `key` now; `fallback` when the
  // chunk is not (or no longer) indexed or the lookup fails.
  uint32_t FrameLenNow(const store::ChunkKey& key, uint32_t fallback) const {
    auto info = store->GetChunkInfo(key);
    return info.ok() ? static_cast<uint32_t>(info->frame_len) : fallback;
  }
};

// A range of a file to cut into one chunk; dtype nullopt: detect. `spec`
// carries the chunker's fields (offset, length, dtype and the lineage
// fields) unchanged for chunks the stream cut; for other cuts it holds
// offset and length only.
struct CutSpec {
  uint64_t begin = 0, end = 0;
  std::optional<DType> dtype;
  ChunkSpec spec;
};

// A buffer written bytes land in (FileData::InsertDirty): a write that
// continues the previous one is appended after it while there is room, so
// that a stream's bytes lie contiguous and a chunk cut from them is handed
// to the encoders as a slice of the block, not a copy. Bytes below `used`
// never change once written (an overwrite goes to another block), so
// slices may be read on any thread while the inode appends above `used`.
// Blocks of kDirtyBlockSize come from a process-wide pool (no page faults
// or zero fills in the steady state); others are allocated to size.
//
// When the written bytes ending at `used` leave the file's dirty map (cut
// into a chunk, overwritten, truncated away), no segment ends at `used`
// any more; the file keeps the block as its tail, which the write at the
// offset those bytes ended at (the stream's next tensor) goes on in
// (FileData::tail_). A block is sealed once nothing will append to it.
// Sealing gives the pages past `used` back to the system, so that a chunk
// a cache keeps, sliced from a block its tensors filled only partly,
// holds its own bytes' pages, not the whole 8 MiB. `backed` counts the
// bytes from the start of the block that may hold pages; an append past
// it (a block from the pool) counts them again.
struct DirtyBlock {
  static constexpr size_t kDirtyBlockSize = size_t{8} << 20;
  // Less than this past `used` is kept (not worth the call).
  static constexpr size_t kMinGiveBack = size_t{256} << 10;
  std::unique_ptr<uint8_t[]> mem;
  size_t cap = 0;
  size_t used = 0;    // guarded by the owning inode's mutex
  size_t backed = 0;  // likewise; cap unless pages were given back
  ~DirtyBlock();
};
// A block of at least n bytes: pooled when n <= kDirtyBlockSize and
// `stream` (the write continues a sequence), else exactly n.
std::shared_ptr<DirtyBlock> NewDirtyBlock(size_t n, bool stream);
// Appends n bytes at `used` (the caller checked the room).
void AppendToDirtyBlock(DirtyBlock& b, const uint8_t* p, size_t n);
// Nothing appends to b any more: gives back the whole pages past `used`
// (kMinGiveBack or more) when others still hold the block. Idempotent.
void SealDirtyBlock(DirtyBlock& b, bool held_elsewhere);
// Process-wide: the bytes of the dirty blocks alive that may hold pages
// (held by files being written, by the jobs of the encoders, and by the
// caches holding chunks sliced from them: a slice keeps its whole block
// alive, but a sealed block only its written pages), and of the free
// blocks the pool keeps.
uint64_t DirtyBlockBytes();
uint64_t DirtyBlockPoolBytes();
// The most the pool keeps (bytes).
uint64_t DirtyBlockPoolCapacity();
// Frees the pool's free blocks but 8 (64 MiB, or fewer as the limit says;
// for a mount gone quiet); the backed bytes freed.
uint64_t TrimDirtyBlockPool();
// The pool keeps at most `bytes` of free blocks from now on (whole 8 MiB
// blocks, 32 at most: the default), and frees those past it at once.
// Process-wide, the last call wins: every Filesystem sets it to its write
// budget when made (the filesystems of a union share one).
void SetDirtyBlockPoolLimit(uint64_t bytes);

// Written bytes [start, start+len) of a block.
struct DirtySeg {
  std::shared_ptr<DirtyBlock> blk;
  size_t start = 0, len = 0;
  size_t size() const { return len; }
  const uint8_t* data() const { return blk->mem.get() + start; }
  DirtySeg Slice(size_t from, size_t n) const { return {blk, start + from, n}; }
};

class FileData {
 public:
  FileData(Inode& owner, FileDataShared& shared) : owner_(owner), shared_(shared) {}
  FileData(const FileData&) = delete;
  FileData& operator=(const FileData&) = delete;
  ~FileData() { SealTail(); }

  // Every call below: with the owner's mutex held; errors are errnos.

  // A new or non-regular inode has no extents to load.
  void SetEmpty() { extents_loaded_ = true; }
  // The size of a regular file loaded from the store: durable already.
  void SetLoadedSize(uint64_t size) { size_floor_ = size; }
  // `r` (the owner's record) as it may be committed: a regular file's size
  // no larger than what is durable with it, that is the size set
  // explicitly (truncate, fallocate, the size it was loaded with) or what
  // applied chunks cover, never bytes still buffered or at the encoders.
  // Otherwise a crash would leave the file its full size with a tail of
  // zeros never written (found by scripts/crash_run.py).
  InodeRec Durable(InodeRec r) const;
  int Write(uint64_t off, const uint8_t* p, size_t n);
  int Read(uint64_t off, size_t n, std::string* out);
  // Filesystem::Seek: the first offset at or after `off` in data (`data`)
  // or in a hole. Data: the committed extents, the chunks at the encoders
  // and the written bytes, whatever their bytes; the rest of [0, size) is
  // holes. `holes` false: no holes but the end of the file.
  int Seek(uint64_t off, bool data, bool holes, uint64_t* out);
  // Filesystem::ReadPieces.
  int ReadPieces(uint64_t off, size_t n, std::vector<Filesystem::ReadPiece>* pieces);
  // Truncate to 0 drops what is not committed yet instead of committing it
  // (DropUncommitted), so that a file whose data hit a full disk can be
  // emptied.
  int Truncate(uint64_t size);
  // The bytes of [a, b) inside the file become a hole (zeros, stored as
  // nothing); the size is unchanged.
  int PunchHole(uint64_t a, uint64_t b);
  // Cuts everything written into chunks (finishing the stream), waits for
  // the encoders and commits. Reports (once) an encoder error that a write
  // could not.
  int Finalize(bool sync);
  // Commits the pending batch with the owner's record (after the batch at
  // the committer, if any).
  int Commit(bool sync);
  // Waits for this inode's batches at the committer (a failed one goes back
  // in front of the pending batch, its error to the next Finalize), so that
  // a record of the owner that the caller commits lands after them.
  void SettleQueued();
  // Adds to `b` the removal of every committed extent, the owner's record,
  // its orphan mark and xattrs. What is not committed (written bytes, chunks
  // at the encoders or in the pending batch) is dropped, not committed
  // (DropUncommitted): a file whose data hit a full disk can be deleted, and
  // its committed bytes give their space back. The caller commits b, then
  // calls DropExtents.
  int Purge(store::Batch* b);
  void DropExtents() { extents_.clear(); }
  // This file's [doff, doff+len) := src's [soff, soff+len) by chunk
  // references; both owners' mutexes held, src != this, src finalized.
  int CloneFrom(FileData& src, uint64_t soff, uint64_t doff, uint64_t len);
  // The chunk `key` of the extent at `off` was re-encoded (reverse deltas)
  // into a frame of frame_len bytes: updates that extent and the owner's
  // stored bytes (st_blocks) and commits them; nothing when the extent no
  // longer holds `key`.
  void RefreshFrameLen(uint64_t off, const store::ChunkKey& key, uint32_t frame_len);
  // Chunks `keys` were re-encoded: every extent in memory naming one takes
  // the frame length the index has now, committed or not (an extent cloned
  // before the re-encoding and committed after it is in no scan of the
  // store's extents), and the owner's stored bytes
  // follow. Nothing when the extents were never loaded (then the store's
  // extents are all there are). Returns the extents changed.
  uint64_t RefreshKeys(const ChunkKeySet& keys);

  // Changes (xattrs) to commit with the next Commit.
  store::Batch& pending() { return pending_; }
  // Nothing buffered, streaming, at the encoders or uncommitted.
  bool Clean() const {
    return dirty_.empty() && !streaming_ && pending_.empty() && inflight_.empty() && committing_.empty();
  }

 private:
  int LoadExtents();
  // LoadExtents for reading the file's bytes: ESTALE for a follower's file
  // that the node writing its store removed between this inode's load here
  // and its extents' (stale_); one it changed in place meanwhile is read
  // as it is now (LoadExtents takes its record again).
  int ReadableExtents();
  // Drops the chunks at the encoders (their bytes and delta bases released).
  void DropJobs();
  // Forgets every change to the file's data that is not committed: written
  // bytes, chunks at the encoders, and the pending batch's chunk adds,
  // references, extents and owner record (after waiting for the committer);
  // the extents are loaded again from the store. The pending batch keeps
  // its metadata (xattrs, lineage) and the ends of its pins. For callers
  // that discard all the file's data anyway (truncate to 0, purge).
  int DropUncommitted();
  void KillStream();
  int AdvanceStream();
  int FinishStream();
  // Hands each range of the file's current bytes to the encoders as one
  // chunk (to replace whatever covers it once applied); returns at once.
  int MaterializeRanges(const std::vector<CutSpec>& specs);
  // Cuts every dirty range into chunks aligned to chunk_size in the file.
  int MaterializeDirty();
  // Which jobs ApplyHead applies from the head of inflight_.
  enum class Until {
    kNotDone,     // those already done
    kEmpty,       // all (waits for each)
    kUnderBudget  // while the write budget is exceeded (waits for each)
  };
  // First error wins; the others are still applied.
  int ApplyHead(Until until);
  int ApplyDone() { return ApplyHead(Until::kNotDone); }
  int Drain() { return ApplyHead(Until::kEmpty); }
  // Waits while the write budget is exceeded and this file has jobs in
  // flight. A writer over the budget waits for its own oldest jobs only:
  // waiting for another inode's could wait for a writer that is itself
  // waiting. So the budget can be exceeded by what other inodes hold, at
  // most about one write's worth per concurrent writer.
  int Backpressure() { return ApplyHead(Until::kUnderBudget); }
  int ApplyJob(EncodeJob& job);
  // BaseChoice::pending: whether the base still commits first, and the
  // standalone re-encode when it does not.
  bool ComesFirst(const store::ChunkKey& key);
  Status DropPendingBase(EncodeJob& job);
  // Hands the pending batch, with the owner's record, to the committer and
  // returns (after waiting while kMaxQueuedPerInode of this inode's are there).
  int CommitAsync();
  // Waits until at most `keep` of this inode's batches are at the
  // committer, oldest first. A failed batch, and every later one (which
  // then fails too), go back in front of pending_, in order (the next
  // commit retries them); returns the first failure's errno.
  int WaitCommits(size_t keep = 0);
  // Lets go, without waiting, of this inode's batches at the head of
  // committing_ that the committer has committed, so that their frames go
  // back to the pool as the writer goes on. Otherwise a batch committed
  // stayed until kMaxQueuedPerInode more were queued: up to 80 MiB of
  // frames an inode, which with 8 writers outgrew the frame pool, and most
  // frames of a save came from fresh pages (docs/BENCHMARKS.md, "Tensors
  // share their dirty blocks").
  void ReapCommitted();
  // A batch the committer committed, taken back: its frames to the pool,
  // out of the committer's count, counted as a commit.
  void TakeBackCommitted(CommitTicket& t);
  // Puts a failed job's bytes back into dirty_ where nothing newer covers them.
  void Restore(const EncodeJob& job);
  void ReplaceRange(uint64_t a, uint64_t b, const ExtentRec* nw);
  // `stream`: the write continues the previous one (a pooled block).
  void InsertDirty(uint64_t off, const uint8_t* p, size_t n, bool stream);
  void RemoveDirty(uint64_t a, uint64_t b);
  // When dirty bytes cover all of [a, b), copies them to out and returns true.
  bool CopyDirty(uint64_t a, uint64_t b, uint8_t* out) const;
  // The file's current bytes [a, b) for an encoder: a slice of one dirty
  // segment when one covers the range (no copy), else a copy.
  int ChunkInput(uint64_t a, uint64_t b, store::ChunkBytes* out);
  // The file's current bytes [a, b): zeros, then extents, then jobs, then dirty bytes.
  int View(uint64_t a, uint64_t b, uint8_t* out);
  // What Read does before View: clamps n to the size, reads ahead when
  // sequential. Returns the clamped length.
  size_t PrepareRead(uint64_t off, size_t n);
  int GetChunk(const ExtentRec& e, store::ChunkBytes* out);
  // Decodes the chunks under [a, b) that are not cached into the cache:
  // those under [a, need_end) at once, in parallel on the shared pool (a
  // chunk already being decoded ahead is waited for); those after it in the
  // background (ReadAhead), the read not waiting for them. With the GPU,
  // those after it as one background batch (ReadAhead::StartBatch) once
  // there are enough of them, or they reach the end of the file. Best
  // effort: errors surface on the read.
  void Prefetch(uint64_t a, uint64_t b, uint64_t need_end);
  // The sequential read-ahead window (bytes after a read), and with the GPU
  // the bytes of a batch: within this file's share of the cache
  // (ReadAheadWindow), as `readers_` files read it at once.
  uint64_t ReadAheadWindow() const;
  uint64_t GpuReadBatchBytes() const;
  // Decodes `todo` into the cache at once, in parallel on the shared pool.
  void DecodeNow(const std::vector<ExtentRec>& todo);

  Inode& owner_;
  FileDataShared& shared_;
  // Files read sequentially through the cache at the last sequential read
  // of this one (FsChunkCache::NoteReader), this one included.
  size_t readers_ = 1;

  // Committed (or in pending_) extents: file offset -> extent. Loaded on
  // first data access; they never overlap.
  bool extents_loaded_ = false;
  // A follower's file whose record, read again after its extents were
  // loaded, was gone (or kept changing): the version opened here is gone,
  // its reads fail with ESTALE.
  bool stale_ = false;
  // Chunks applied and not checked yet: (offset, key). The frame the
  // store keeps for one may not be the one its extent names: a dedup hit
  // that every other file released before this file's commit is stored
  // anew by that commit (Store: AddMatchedChunk encodes it standalone),
  // and a chunk this file encoded itself that another file stored first,
  // coded otherwise, only takes a reference on that record. Each is
  // checked against the index once it is committed (RecheckCommitted):
  // those of the batches the committer finished by the next batch handed
  // to it (so a file written for long without a flush holds a list of a
  // few batches, and its stored bytes in the store are right from batch to
  // batch), the rest by Commit.
  std::deque<std::pair<uint64_t, store::ChunkKey>> applied_;
  // The number (among every chunk this file applied) of applied_.front(),
  // and one past the last chunk of the batches the committer finished
  // (CommitTicket::applied_end).
  uint64_t applied_first_ = 0, applied_committed_ = 0;
  // Checks the first n of applied_ and drops them; frame lengths that
  // changed go to pending_ (SetFrameLen). Returns the extents changed.
  uint64_t RecheckCommitted(size_t n);
  // RefreshKeys without its commit: the extents changed are in pending_.
  uint64_t SetFrameLensOf(const ChunkKeySet& keys);
  // Sets the extent at `off` to a frame of frame_len bytes, the owner's
  // stored bytes with it, and puts the extent in pending_.
  void SetFrameLen(uint64_t off, ExtentRec& x, uint32_t frame_len);
  // Durable(): the size set explicitly, and the end of the applied chunks.
  uint64_t size_floor_ = 0, data_end_ = 0;
  std::map<uint64_t, ExtentRec> extents_;

  // Written bytes not yet cut into chunks: offset -> bytes, non-overlapping.
  // They override extents on read.
  std::map<uint64_t, DirtySeg> dirty_;
  uint64_t dirty_bytes_ = 0;
  uint64_t last_write_end_ = 0;  // sequential-write detection (dirty blocks)
  // The block whose bytes ending at `used` left dirty_ last (cut into a
  // chunk), and the file offset they ended at. A write at that offset (the
  // stream going on: the next tensor of a torch.save starts where the last
  // one's final chunk was cut) is appended to it while it has room, so that
  // a stream's tensors fill their blocks. Sealing each block at each
  // tensor's end gave its pages past `used` back, and the pool's next use
  // of it faulted them in again: 70,000 page faults a GiB of a warm save
  // with one writer (docs/BENCHMARKS.md, "Tensors share their dirty
  // blocks"). Sealed (SealTail) when a write
  // goes elsewhere or does not fit, when another block's end leaves, at
  // Finalize and with the FileData.
  std::shared_ptr<DirtyBlock> tail_;
  uint64_t tail_end_ = 0;
  void SealTail();

  // Sequential stream: active while the file is written from offset 0 in
  // order; bytes [0, stream_pos_) went through the layout parser.
  bool streaming_ = false;
  uint64_t stream_pos_ = 0;
  std::unique_ptr<LayoutParser> parser_;
  std::unique_ptr<Chunker> chunker_;

  // Chunks handed to the encoders, in file order (submission order). Their
  // bytes left dirty_ when submitted; reads see them (over extents, under
  // dirty bytes) until they are applied, in this order, by ApplyHead.
  std::deque<std::shared_ptr<EncodeJob>> inflight_;
  // An encoder error applied outside flush/fsync (in a write): reported by
  // the next Finalize, then cleared. The chunk's bytes went back to dirty_,
  // so reads stay right and the next flush retries.
  int write_error_ = 0;

  uint64_t last_read_end_ = 0;    // sequential-read detection (prefetch)
  uint64_t last_read_start_ = 0;  // and the chunks it read past (demoted in the cache)

  // Chunk adds, extent, xattr and inode puts not yet committed.
  store::Batch pending_;
  bool pending_chunks_ = false;  // pending_ holds AddChunk (not yet readable from the store)
  // This inode's batches at the committer, oldest first (their chunks are
  // not readable from the store until they are done).
  std::deque<std::shared_ptr<CommitTicket>> committing_;
};

}  // namespace lmc::fs
