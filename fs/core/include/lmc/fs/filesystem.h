// The lmcfs filesystem core: POSIX semantics over the chunk store, with no
// FUSE header (the glue is src/fuse_ops.cc). Tests drive it directly.
// Design, lifecycle and lock order: docs/ARCHITECTURE.md, "The filesystem".
//
// Every operation returns 0 or a positive errno (passthrough_hp style), so
// the glue only replies. Inode numbers are the store's and persistent; the
// root is 1 (FUSE_ROOT_ID). Thread safety: all methods may be called from
// any number of threads at once.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lmc/fs/records.h"
#include "lmc/gpu.h"
#include "lmc/status.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/store.h"

namespace lmc {
class ThreadPool;
}  // namespace lmc

namespace lmc::fs {

// Threads of a read-ahead pool for FsOptions::read_threads = want (0: two
// per hardware thread, at least 4).
size_t ReadAheadThreads(unsigned want);

struct FsOptions {
  uint32_t chunk_size = 1u << 20;             // codec chunk size (Chunker); default = lmc::kDefaultChunkSize
  uint64_t dirty_limit = uint64_t{64} << 20;  // unchunked bytes per inode before they are chunked early
  uint64_t batch_limit = uint64_t{16} << 20;  // frame bytes per inode before a (non-sync) commit
  // Frame bytes of the batches at the committer, over all inodes, past
  // which a writer handing off a batch first waits for its own oldest
  // there (so at most this plus a batch a writer).
  uint64_t commit_queue_limit = uint64_t{128} << 20;
  uint64_t cache_bytes = uint64_t{64} << 20;  // decoded-chunk cache
  // A decoded-chunk cache shared with other filesystems (the stores of a
  // union: one cache of cache_bytes for the mount, not one per store),
  // outliving this one; nullptr: a cache of its own. shared_cache_tag
  // keeps this store's chunks apart from the others' in it.
  store::ChunkCache* shared_cache = nullptr;
  uint32_t shared_cache_tag = 0;
  // Write buffer: bytes of chunks handed to the encoders and not yet applied
  // (their input plus their frame), over all inodes. A writer that would
  // exceed it waits for its own oldest chunk (backpressure).
  uint64_t write_budget = uint64_t{256} << 20;
  unsigned encode_threads = 0;  // encoder threads; 0: one per hardware thread
  // Threads that read and decode chunks ahead of sequential readers; 0:
  // two per hardware thread, at least 4. More threads than cores, because
  // each waits for its pack read before it decodes: the others decode
  // meanwhile (docs/ARCHITECTURE.md, "Read pipeline").
  unsigned read_threads = 0;
  // A read-ahead pool shared with other filesystems (the stores of a
  // union), outliving this one; nullptr: a pool of its own of read_threads.
  // Shared, the threads that decode one store's chunks reuse the memory
  // the others' decodes left (each new thread warms up allocator arenas
  // of its own: about 20,000 page faults per store on first reads).
  ThreadPool* read_pool = nullptr;
  bool read_only = false;
  // dedup=uid: a chunk is shared only among files of the same owner (its
  // key is scoped by the owner's uid, ChunkKey::Of), and a delta base is
  // only ever a chunk of the same owner, so the stored size of one user's
  // file (st_blocks, user.lmcfs.dedup_bytes) tells nothing of another
  // user's files. false (dedup=all): chunks are shared store-wide.
  bool dedup_per_owner = false;
  // The GPU codec (lmc/gpu.h; docs/ARCHITECTURE.md, "GPU codec in the
  // mount"), opened by the caller and outliving the Filesystem; nullptr:
  // every chunk on the CPU. With one, a GPU feeder thread encodes batches
  // of queued chunks beside the encoder threads, and read-ahead decodes
  // batches of frames on it; the first device failure switches it off for
  // good (the work goes to the CPU, nothing is lost).
  GpuCodec* gpu = nullptr;
  // Why gpu is nullptr, for lmcfs-stat and the log ("gpu=off", Open's error).
  std::string gpu_none_reason = "not requested";
  // Queued chunk bytes the GPU feeder waits for before it takes a batch
  // (default lmc::kGpuMinBatchBytes, 32 MiB, the measured crossover), and
  // the most it takes at once (default 64 MiB). Read-ahead batches (gpu=on
  // only) below the first go to the CPU too.
  size_t gpu_min_batch_bytes = kGpuMinBatchBytes;
  size_t gpu_batch_bytes = size_t{64} << 20;
  // GPU first (gpu=on): the feeder takes whatever is queued whenever it is
  // free, and the CPU threads take a chunk only while the feeder is busy
  // with a batch and a full batch more waits behind it. Without it (gpu=auto)
  // the CPU threads come first and the GPU takes the backlog.
  bool gpu_first = false;
};

// Who is asking (from fuse_req_ctx): owner of new inodes.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
};

// SetAttr's mask (the glue maps FUSE_SET_ATTR_* onto these).
enum SetAttrMask : int {
  kSetMode = 1 << 0,
  kSetUid = 1 << 1,
  kSetGid = 1 << 2,
  kSetSize = 1 << 3,
  kSetAtime = 1 << 4,
  kSetMtime = 1 << 5,
  kSetAtimeNow = 1 << 6,
  kSetMtimeNow = 1 << 7,
  kSetCtime = 1 << 8,
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFMT bits only
};

struct FsCounters {
  std::atomic<uint64_t> eio{0};  // operations answered EIO (corruption, I/O)
  std::atomic<uint64_t> write_calls{0};
  std::atomic<uint64_t> read_calls{0};
  std::atomic<uint64_t> getattr_calls{0};  // stats the kernel asked for (its cached copy expired)
  // Flushes, fsyncs (of files and directories) and releases: counted when
  // they start, and how many run now (a gauge, not a count). A writer's
  // close or fsync encodes and commits what its writes left, and may wait
  // on the disk for longer than the memory trimmer's quiet time.
  std::atomic<uint64_t> flush_calls{0};
  std::atomic<uint64_t> flushes_in_flight{0};
  // Files removed or cut (chunk references released by a purge, truncate or
  // overwrite): what may leave dead bytes behind.
  std::atomic<uint64_t> removals{0};
  std::atomic<uint64_t> write_bytes{0};  // bytes received by Write
  std::atomic<uint64_t> commits{0};      // store commits of data batches
  std::atomic<uint64_t> chunks_written{0};
  std::atomic<uint64_t> bytes_written{0};  // logical bytes encoded into chunks
  // Chunks handed to the encoders as a copy of their bytes (they lay in
  // several write blocks, or partly in the store), not as a slice of one
  // block; and the bytes a stream's writes carried into a new block with
  // them (the head of the chunk being assembled when its block filled), so
  // that its chunk is a slice (docs/ARCHITECTURE.md, "Blocks end on chunk
  // boundaries").
  std::atomic<uint64_t> chunk_input_copies{0};
  std::atomic<uint64_t> dirty_carried_bytes{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  // The codec paths (docs/ARCHITECTURE.md, "GPU codec in the mount"):
  // chunks and their decoded bytes that the write pipeline encoded (holes
  // are not encoded) and that the read pipeline decoded from the store, by
  // the path that did it. Chunks a failed GPU batch handed to the CPU count
  // as CPU work and in gpu_fallback_chunks.
  std::atomic<uint64_t> cpu_encode_chunks{0}, cpu_encode_bytes{0};
  std::atomic<uint64_t> gpu_encode_chunks{0}, gpu_encode_bytes{0};
  // Chunks the store held already (Store::MatchChunk compared their bytes),
  // so that the write pipeline encoded nothing for them.
  std::atomic<uint64_t> matched_chunks{0}, matched_bytes{0};
  std::atomic<uint64_t> cpu_decode_chunks{0}, cpu_decode_bytes{0};
  std::atomic<uint64_t> gpu_decode_chunks{0}, gpu_decode_bytes{0};
  std::atomic<uint64_t> gpu_batches{0};         // batch calls the GPU completed
  std::atomic<uint64_t> gpu_failed_batches{0};  // device failures (at most 1: the GPU is then off)
  std::atomic<uint64_t> gpu_fallback_chunks{
      0};  // chunks of failed batches (or refused by the GPU), redone on the CPU
  // Frames the GPU wrote that did not decode back on it (the codec's
  // verify_encode): the codec encoded those chunks again on the CPU inside
  // the call (they count in gpu_encode_* with the rest of their batch), and
  // the GPU is then off for the mount.
  std::atomic<uint64_t> gpu_verify_failures{0};
  // Where the write and codec pipelines spend their time (nanoseconds,
  // summed over threads): what a save waits for, and what the GPU feeder
  // does between device calls (docs/ARCHITECTURE.md, "GPU codec in the
  // mount"). For finding the stage that limits a save; not a benchmark.
  std::atomic<uint64_t> write_budget_wait_ns{0};   // writers blocked on the write budget (encoders behind)
  std::atomic<uint64_t> commit_wait_ns{0};         // writers blocked on their queued commits
  std::atomic<uint64_t> gpu_feeder_idle_ns{0};     // the feeder waiting for chunks
  std::atomic<uint64_t> gpu_feeder_prepare_ns{0};  // zero check, dtype, delta base, frame buffers
  std::atomic<uint64_t> gpu_feeder_finish_ns{0};   // frames copied out, keys, record seals, jobs completed
  std::atomic<uint64_t> gpu_encode_call_ns{0};     // in GpuCodec::EncodeBatch (transfers included)
  std::atomic<uint64_t> gpu_decode_call_ns{0};     // in GpuCodec::DecodeBatch
  std::atomic<uint64_t> gpu_read_batch_ns{0};      // read-ahead batch tasks, start to end
};

struct Inode;
class DeltaPolicy;  // lmc/fs/delta_policy.h

// Read replies as pieces to send without copying them (FUSE replies with an
// iovec): slices of decoded chunks, and zeros for holes.
struct ReadPiece {
  const uint8_t* data = nullptr;  // nullptr: `size` zero bytes
  size_t size = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive
};

// The operations the FUSE glue serves (fuse_ops.cc): one Filesystem, or a
// union of several (lmc/fs/union_fs.h). Semantics: Filesystem's below.
class FsOps {
 public:
  virtual ~FsOps() = default;
  virtual int Lookup(uint64_t parent, std::string_view name, struct stat* out) = 0;
  virtual void Forget(uint64_t ino, uint64_t nlookup) = 0;
  virtual int GetAttr(uint64_t ino, struct stat* out) = 0;
  virtual int SetAttr(uint64_t ino, const struct stat& in, int mask, struct stat* out) = 0;
  virtual int Create(uint64_t parent, std::string_view name, mode_t mode, const Caller& c,
                     struct stat* out) = 0;
  virtual int Mknod(uint64_t parent, std::string_view name, mode_t mode, dev_t rdev, const Caller& c,
                    struct stat* out) = 0;
  virtual int Mkdir(uint64_t parent, std::string_view name, mode_t mode, const Caller& c,
                    struct stat* out) = 0;
  virtual int Symlink(std::string_view target, uint64_t parent, std::string_view name, const Caller& c,
                      struct stat* out) = 0;
  virtual int Readlink(uint64_t ino, std::string* target) = 0;
  virtual int Link(uint64_t ino, uint64_t newparent, std::string_view newname, struct stat* out) = 0;
  virtual int Unlink(uint64_t parent, std::string_view name) = 0;
  virtual int Rmdir(uint64_t parent, std::string_view name) = 0;
  virtual int Rename(uint64_t parent, std::string_view name, uint64_t newparent, std::string_view newname,
                     unsigned flags) = 0;
  virtual int ReadDir(uint64_t ino, std::vector<DirEntry>* out) = 0;
  virtual int Open(uint64_t ino, int flags) = 0;
  virtual int Release(uint64_t ino, bool writer) = 0;
  virtual int Seek(uint64_t ino, uint64_t off, int whence, uint64_t* out) = 0;
  virtual int ReadPieces(uint64_t ino, uint64_t off, size_t size, std::vector<ReadPiece>* pieces) = 0;
  virtual int Write(uint64_t ino, uint64_t off, const void* data, size_t size) = 0;
  virtual int Flush(uint64_t ino) = 0;
  virtual int Fsync(uint64_t ino, bool datasync) = 0;
  virtual int FsyncDir(uint64_t ino) = 0;
  virtual int CopyRange(uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff, uint64_t len,
                        uint64_t* copied) = 0;
  virtual int Fallocate(uint64_t ino, int mode, uint64_t off, uint64_t len) = 0;
  virtual int SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) = 0;
  virtual int GetXattr(uint64_t ino, std::string_view name, std::string* value) = 0;
  virtual int ListXattr(uint64_t ino, std::string* names) = 0;
  virtual int RemoveXattr(uint64_t ino, std::string_view name) = 0;
  virtual int StatFs(struct statvfs* out) = 0;
  // Who hears of a file whose attributes (size, stored bytes, times) the
  // filesystem changed on its own, not as the reply to the call that asked
  // (the stored size after encoding, a rebase, a later commit), so that the
  // kernel's cached copy can be dropped (the glue: FUSE's
  // notify_inval_inode). Called with the inode number and no lock of the
  // filesystem held, from any thread. nullptr: nobody. False: this FsOps
  // cannot tell (the kernel must then ask every time). `data`: the file's
  // bytes changed too (another node wrote them: a follower's refresh), so
  // pages cached of it must go as well.
  using AttrListener = std::function<void(uint64_t ino, bool data)>;
  virtual bool SetAttrListener(AttrListener) { return false; }
  // Whether that listener hears of every such change of ino's attributes
  // (a union inode that a truncating open redirected to the writable
  // member: no, that member's notices name another inode). Asked only once
  // SetAttrListener said it can tell.
  virtual bool TellsAttrOf(uint64_t /*ino*/) const { return true; }
  // Who hears of a name in a directory that changed without a call through
  // this FsOps: another node made, removed or renamed it (a follower's
  // refresh), so that the kernel's cached entry can be dropped (the glue:
  // FUSE's notify_inval_entry). Without it the kernel keeps the old entry
  // for its timeout, and a name another node saved over (rename onto
  // `latest.pt`) answers with the removed file: ENOENT. Called with the
  // directory's inode number, the name, and no lock of the filesystem
  // held. False: this FsOps cannot tell.
  using EntryListener = std::function<void(uint64_t parent, std::string_view name)>;
  virtual bool SetEntryListener(EntryListener) { return false; }
};

class Filesystem : public FsOps {
 public:
  // The store must outlive the Filesystem. Creates the root on an empty
  // store, and purges inodes left unlinked-but-open by a crash.
  static Result<std::unique_ptr<Filesystem>> Open(store::Store* store, const std::string& store_dir,
                                                  const FsOptions& options);
  ~Filesystem();
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // Namespace. Calls that answer with an entry (Lookup, Create, Mknod,
  // Mkdir, Symlink, Link) take one kernel lookup reference, released by Forget.
  int Lookup(uint64_t parent, std::string_view name, struct stat* out);
  void Forget(uint64_t ino, uint64_t nlookup);
  int GetAttr(uint64_t ino, struct stat* out);
  int SetAttr(uint64_t ino, const struct stat& in, int mask, struct stat* out);
  // Create also opens (Release later); Mknod does not.
  int Create(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out);
  int Mknod(uint64_t parent, std::string_view name, mode_t mode, dev_t rdev, const Caller& c,
            struct stat* out);
  int Mkdir(uint64_t parent, std::string_view name, mode_t mode, const Caller& c, struct stat* out);
  int Symlink(std::string_view target, uint64_t parent, std::string_view name, const Caller& c,
              struct stat* out);
  int Readlink(uint64_t ino, std::string* target);
  int Link(uint64_t ino, uint64_t newparent, std::string_view newname, struct stat* out);
  int Unlink(uint64_t parent, std::string_view name);
  int Rmdir(uint64_t parent, std::string_view name);
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (linux/fs.h values).
  int Rename(uint64_t parent, std::string_view name, uint64_t newparent, std::string_view newname,
             unsigned flags);
  // A snapshot of the directory ("." and ".." first): readdir offsets index it.
  int ReadDir(uint64_t ino, std::vector<DirEntry>* out);

  // Files. Open counts an open handle (O_TRUNC truncates); Release drops
  // it. `writer`: the handle may have written (opened for writing, or made
  // by Create), as Open counted it.
  int Open(uint64_t ino, int flags);
  int Release(uint64_t ino, bool writer);
  // lseek(2)'s SEEK_DATA and SEEK_HOLE (whence) from `off`: *out is the
  // first offset at or after off in data, or in a hole (the end of the
  // file counts as one); ENXIO when there is none before the end (off at
  // or past it included). Holes are ranges stored as nothing: never
  // written, punched, or written as all zeros (whole chunks). While a
  // handle that may write is open the whole file is data, as without
  // SEEK_DATA support: pages a writer dirtied through a shared mapping may
  // wait in the kernel's page cache, which this cannot see.
  int Seek(uint64_t ino, uint64_t off, int whence, uint64_t* out);
  int Read(uint64_t ino, uint64_t off, size_t size, std::string* out);
  // The same bytes as pieces to send without copying them (FUSE replies
  // with an iovec): slices of decoded chunks, and zeros for holes. Where
  // written bytes not yet stored overlap the range, one piece of a copy.
  using ReadPiece = fs::ReadPiece;
  int ReadPieces(uint64_t ino, uint64_t off, size_t size, std::vector<ReadPiece>* pieces);
  int Write(uint64_t ino, uint64_t off, const void* data, size_t size);
  // Chunks everything written and commits it (sync: WAL synced, durable).
  int Flush(uint64_t ino);
  int Fsync(uint64_t ino, bool datasync);
  int FsyncDir(uint64_t ino);
  // copy_file_range: dst's [doff, doff+len) takes references to src's
  // chunks instead of copies (no bytes re-encoded, no space used).
  // *copied: bytes copied (less than len at src's end of file).
  int CopyRange(uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff, uint64_t len, uint64_t* copied);
  // fallocate(2), with ext4's semantics for the modes it takes: 0 (extend
  // the size to off+len; the new bytes read as zeros and are stored as
  // nothing), FALLOC_FL_KEEP_SIZE (nothing to do: space is not reserved
  // ahead), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (the range inside
  // the file becomes a hole), FALLOC_FL_ZERO_RANGE (a hole as well, and the
  // size extended unless KEEP_SIZE). Other modes (collapse, insert,
  // unshare) are EOPNOTSUPP, as on filesystems without them.
  int Fallocate(uint64_t ino, int mode, uint64_t off, uint64_t len);

  // Extended attributes. Stored for every name except user.lmcfs.*, which
  // are virtual and read-only: user.lmcfs.stored_bytes, user.lmcfs.ratio
  // (stored / logical size). flags: XATTR_CREATE / XATTR_REPLACE.
  int SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags);
  int GetXattr(uint64_t ino, std::string_view name, std::string* value);
  int ListXattr(uint64_t ino, std::string* names);  // NUL-terminated names
  int RemoveXattr(uint64_t ino, std::string_view name);
  int StatFs(struct statvfs* out);
  // Told after Flush, Fsync, Release and CopyRange (the source) whenever
  // they changed a stat of the file, and after the delta
  // policy's rebases and re-encodings changed its stored bytes; over a
  // follower store, by FollowerRefreshed of what another node changed.
  // Write, SetAttr, Fallocate and CopyRange's destination are not told: the
  // kernel drops its copy after each of those itself.
  bool SetAttrListener(AttrListener fn) override;
  // Told by FollowerRefreshed of each entry another node's commits made or
  // removed, before the attribute listener hears of the inodes.
  bool SetEntryListener(EntryListener fn) override;

  // Flushes every inode and purges unlinked ones, then finishes the delta
  // policy's background work (FlushBackground); called once at unmount.
  Status Shutdown();

  // What a follower store's refresh changed (store::Store::Refresh's
  // keys), by inode: records of the inode itself or of entries in it
  // (a directory), and extents (a file's bytes; an extent whose trailer
  // alone changed, a rebase's new frame length: its stored size only); and
  // the entries made or removed (directory inode, name).
  struct Refreshed {
    std::unordered_set<uint64_t> attrs, data;
    std::set<std::pair<uint64_t, std::string>> entries;
    void Add(store::Cf cf, std::string_view key,
             store::Store::KeyChange how = store::Store::KeyChange::kChanged);
    bool empty() const { return attrs.empty() && data.empty() && entries.empty(); }
  };
  // A read-only Filesystem over a follower store, after each refresh
  // (every second and at each notice, whether it applied records or not).
  // When `changed` is not empty (store::Store::Refresh applied another
  // node's commits): forgets the inodes it holds in memory that no handle
  // has open, so that the next access loads them again, tells the entry
  // listener of each entry made or removed, then the attribute listener of
  // each changed inode (with `data` for the extents'): entries first, so
  // that a name saved over is looked up again before its old file's
  // attributes are asked for. A changed file open here keeps the version it opened; once
  // its last handle is closed it is forgotten and told of again at the next
  // call, so that what the kernel cached of that version goes too. One
  // caller at a time.
  void FollowerRefreshed(const Refreshed& changed);

  // Background work of the delta policy (reverse deltas re-encode the prior
  // version of each chunk written): FlushBackground does what can be done
  // now and returns when none is left (work waiting for an uncommitted
  // chunk is dropped: the prior version stays standalone);
  // BackgroundPending counts the items queued or in progress (also the
  // mount root's xattr user.lmcfs.pending_rebases).
  void FlushBackground();
  uint64_t BackgroundPending() const;
  // counters() by the names operators see (lmcfs-stat's "daemon" object).
  std::vector<std::pair<std::string, uint64_t>> NamedCounters() const;
  // The delta policy's named counters (empty without one).
  std::vector<std::pair<std::string, uint64_t>> DeltaCounters() const;
  // The memory this filesystem holds now, by part, named as in
  // lmcfs-stat's "memory" object: bytes of writes in flight (written, not
  // yet committed) against the write budget, the dirty blocks alive and
  // idle (process-wide), the decoded-chunk cache (the union's, where it is
  // shared) and the delta policy's bases.
  std::vector<std::pair<std::string, uint64_t>> MemoryCounters() const;
  // Process-wide, for a mount gone quiet (the trimmer): frees the free
  // write blocks the pool keeps for the next writes but 8 (64 MiB);
  // returns their bytes that held pages.
  static uint64_t ReleaseIdleWriteBlocks();
  // The GPU codec path in words, for lmcfs-stat and the log: "CUDA 13.0,
  // NVIDIA H100 (active)", "none (gpu=off)", "off after a device failure
  // (...)".
  std::string GpuState() const;

  // Virtual read-only attributes of the mount root, by name (without the
  // "user.lmcfs." prefix): the daemon's figures (reclamation) that the core
  // does not own. Called on each getxattr/listxattr of the root.
  using RootAttributesFn = std::function<std::vector<std::pair<std::string, std::string>>()>;
  void SetRootAttributes(RootAttributesFn fn);

  // Installs the incremental-snapshot policy the write pipeline consults
  // for each chunk (lmc/fs/delta_policy.h); nullptr: none. Call before the first
  // write or while no write is in flight (encoder jobs hold the pointer).
  void SetDeltaPolicy(std::unique_ptr<DeltaPolicy> policy);

  // A maintenance run re-encoded these chunks in the store (garbage
  // collection of dead delta bases, Store::RewriteDeadBases): their frames
  // changed length. Every file extent naming one takes the length the store
  // has now, so that st_blocks, du and lmcfs-stat follow; the kernel is told
  // (SetAttrListener). One scan of the extents. Returns the extents
  // refreshed; an error leaves st_blocks as it was, never the data.
  Result<uint64_t> ChunksReencoded(const std::vector<store::ChunkKey>& keys);

  const FsOptions& options() const { return opts_; }
  FsCounters& counters() { return counters_; }
  const FsCounters& counters() const { return counters_; }
  store::Store* store() { return store_; }

  struct Impl;  // private state (core/src/fs_impl.h)

 private:
  Filesystem(store::Store* store, std::string store_dir, const FsOptions& options);
  friend struct Impl;

  store::Store* store_;
  std::string store_dir_;
  FsOptions opts_;
  FsCounters counters_;
  RootAttributesFn root_attributes_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmc::fs
