// Private state of fs::Filesystem. Lifecycle and lock order are in
// docs/ARCHITECTURE.md, "The filesystem"; in short:
//
//   ns_mu (shared_mutex) -> Inode::mu (several: increasing ino) -> table_mu
//   Inode::mu -> EncoderPool's and EncodeJob's mutexes (leaves)
//
// ns_mu: exclusive for every namespace change (create, unlink, rename, ...)
//   and for Forget (which may evict or purge); shared for Lookup and ReadDir.
// Inode::mu: the inode's attributes, counts and whole data state. Data ops
//   (read, write, flush, setattr) take only this.
// table_mu: the ino -> Inode map only; a leaf, held for map operations.
// Encoder threads never take an inode's mutex: a writer may wait for a job
// with its inode's mutex held.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "lmc/store/chunk_cache.h"
#include "lmc/fs/delta_policy.h"
#include "encoder.h"
#include "lmc/chunker.h"
#include "lmc/fs/filesystem.h"
#include "lmc/layout.h"
#include "lmc/fs/records.h"

namespace lmc::fs {

using store::ChunkBytes;
using store::ChunkCache;

// A range of a file to cut into one chunk; dtype nullopt: detect. `spec`
// carries the chunker's fields (offset, length, dtype and the lineage
// fields) unchanged for chunks the stream cut; for other cuts it holds
// offset and length only.
struct CutSpec {
  uint64_t a = 0, b = 0;
  std::optional<DType> dtype;
  ChunkSpec spec;
};

// Written bytes [start, start+len) of a shared buffer: cutting a chunk out
// of a write's bytes re-slices the rest instead of copying it.
struct DirtySeg {
  std::shared_ptr<std::string> buf;
  size_t start = 0, len = 0;
  size_t size() const { return len; }
  const char* data() const { return buf->data() + start; }
  DirtySeg Slice(size_t from, size_t n) const { return {buf, start + from, n}; }
};

struct Inode {
  explicit Inode(uint64_t n) : ino(n) {}
  const uint64_t ino;
  std::mutex mu;  // guards everything below

  InodeRec rec;
  bool rec_dirty = false;   // rec differs from the store
  bool purged = false;      // deleted from the store; no more commits
  uint64_t nlookup = 0;     // kernel lookup references
  uint64_t nopen = 0;       // open handles

  // Committed (or in `pending`) extents: file offset -> extent. Loaded on
  // first data access; they never overlap.
  bool extents_loaded = false;
  std::map<uint64_t, ExtentRec> extents;

  // Written bytes not yet cut into chunks: offset -> bytes, non-overlapping.
  // They override extents on read.
  std::map<uint64_t, DirtySeg> dirty;
  uint64_t dirty_bytes = 0;

  // Sequential stream: active while the file is written from offset 0 in
  // order; bytes [0, stream_pos) went through the layout parser.
  bool streaming = false;
  uint64_t stream_pos = 0;
  std::unique_ptr<LayoutParser> parser;
  std::unique_ptr<Chunker> chunker;

  // Chunks handed to the encoders, in file order (submission order). Their
  // bytes left `dirty` when submitted; reads see them (over extents, under
  // dirty) until they are applied, in this order, by ApplyDone or Drain.
  std::deque<std::shared_ptr<EncodeJob>> inflight;
  // An encoder error applied outside flush/fsync (in a write): reported by
  // the next flush or fsync, then cleared. The chunk's bytes went back to
  // `dirty`, so reads stay right and the next flush retries.
  int write_error = 0;

  // The name the file was created, last linked or renamed under (or looked
  // up by), for the delta policy's lineage (lmc/fs/delta_policy.h).
  std::string name_hint;
  uint64_t parent_hint = 0;  // the directory of that name (0: unknown)

  uint64_t last_read_end = 0;  // sequential-read detection (prefetch)

  // Chunk adds, extent and inode puts not yet committed.
  store::Batch pending;
  bool pending_chunks = false;  // pending holds AddChunk (not yet readable from the store)

  bool IsDir() const { return S_ISDIR(rec.mode); }
  bool IsReg() const { return S_ISREG(rec.mode); }
  bool Clean() const {
    return !rec_dirty && dirty.empty() && !streaming && pending.empty() && inflight.empty();
  }
};
using InodePtr = std::shared_ptr<Inode>;

struct Filesystem::Impl {
  explicit Impl(Filesystem* f);

  Filesystem* fs;
  store::Store* store;
  ChunkCache cache;

  // The incremental-snapshot policy (lmc/fs/delta_policy.h); nullptr: every chunk
  // standalone. Installed before use (Filesystem::SetDeltaPolicy); declared
  // before `encoders` so that it outlives the jobs that use it.
  std::unique_ptr<DeltaPolicy> delta;

  std::shared_mutex ns_mu;
  std::mutex table_mu;  // guards table and next_ino
  std::unordered_map<uint64_t, InodePtr> table;
  uint64_t next_ino = 2;

  // --- table (filesystem.cc) ---
  // The in-memory inode, loaded from the store if needed; nullptr if absent.
  // Sets *err (ENOENT, EIO).
  InodePtr Get(uint64_t ino, int* err);
  void Erase(uint64_t ino);
  int ToErrno(const Status& s, std::string_view what, uint64_t ino);

  // --- data (file_data.cc); all with in.mu held ---
  int LoadExtents(Inode& in);
  int WriteLocked(Inode& in, uint64_t off, const uint8_t* p, size_t n);
  int ReadLocked(Inode& in, uint64_t off, size_t n, std::string* out);
  int TruncateLocked(Inode& in, uint64_t size);
  // Cuts everything written into chunks (finishing the stream) and commits.
  int FinalizeLocked(Inode& in, bool sync);
  // Commits the pending batch with the inode record.
  int CommitLocked(Inode& in, bool sync);
  // Adds to `b` the removal of every extent and the inode record (after
  // committing in's own pending batch). The caller commits b.
  int PurgeLocked(Inode& in, store::Batch* b);

  // The chunk `key` of the extent at (ino, off) was re-encoded (reverse
  // deltas) into a frame of frame_len bytes: updates that extent and the
  // inode's stored bytes (st_blocks) and commits them. Takes the inode's
  // mutex; does nothing when the extent no longer holds `key`.
  void RefreshFrameLen(uint64_t ino, uint64_t off, const store::ChunkKey& key, uint32_t frame_len);

  // dst's [doff, doff+len) := src's [soff, soff+len) by chunk references;
  // both mutexes held, src != dst, src fully committed.
  int CloneRangeLocked(Inode& src, uint64_t soff, Inode& dst, uint64_t doff, uint64_t len);

  // helpers
  void KillStream(Inode& in);
  int AdvanceStream(Inode& in);
  int FinishStream(Inode& in);
  // Hands each range [a, b) of the file's current bytes to the encoders as
  // one chunk (to replace whatever covers it once applied); returns at once.
  int MaterializeRanges(Inode& in, const std::vector<CutSpec>& specs);
  // Applies the finished jobs at the head of in.inflight (all: Drain waits
  // for each). First error wins; the others are still applied.
  int ApplyDone(Inode& in);
  int Drain(Inode& in);
  int ApplyJob(Inode& in, EncodeJob& job);
  // Waits while the write budget is exceeded and this inode has jobs in flight.
  int Backpressure(Inode& in);
  int MaterializeDirty(Inode& in);
  void ReplaceRange(Inode& in, uint64_t a, uint64_t b, const ExtentRec* nw);
  void InsertDirty(Inode& in, uint64_t off, const uint8_t* p, size_t n);
  void RemoveDirty(Inode& in, uint64_t a, uint64_t b);
  int View(Inode& in, uint64_t a, uint64_t b, uint8_t* out);
  int GetChunk(Inode& in, const ExtentRec& e, ChunkBytes* out);
  // Decodes the chunks under [a, b) that are not cached, in parallel on the
  // shared pool, into the cache, once there are enough of them or one lies
  // under [a, need_end). Best effort: errors surface on the read.
  void Prefetch(Inode& in, uint64_t a, uint64_t b, uint64_t need_end);

  // Bytes charged by jobs in flight over all inodes (FsOptions::write_budget).
  std::atomic<uint64_t> inflight_bytes{0};
  // Last member: destroyed (joined) first, while everything its jobs use lives.
  EncoderPool encoders;
};

}  // namespace lmc::fs
