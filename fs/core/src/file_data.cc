// FileData (file_data.h): the write and read pipelines of one inode
// (docs/ARCHITECTURE.md, "The filesystem", "Write pipeline", "Read
// pipeline"). Every FileData call runs with its owner's mutex held.
#include "file_data.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "inode.h"
#include "lmc/codec.h"
#include "lmc/store/extent.h"
#include "lmc/thread_pool.h"
#include "ns_timer.h"

namespace lmc::fs {

namespace {

// Per-thread codec scratch and frame buffer: encode never allocates in the
// steady state.
struct EncodeScratch {
  Workspace ws;
  std::vector<uint8_t> frame;
};
EncodeScratch& Scratch() {
  thread_local EncodeScratch s;
  return s;
}

// Free dirty blocks of kDirtyBlockSize, shared by every filesystem of the
// process (and never destroyed: a block may outlive them all in a cache).
// It keeps at most kMaxFree blocks (256 MiB), and no more than the write
// budget holds (SetLimit), for the next writes, each with the bytes from
// its start that may hold pages (DirtyBlock::backed): with many files
// written at once, the blocks alive swing by more than a few
// (a tail per file, the encoders' inputs, the caches' slices), and a block
// freed at one swing and allocated again at the next is 8 MiB of fresh
// pages faulted in and zeroed. Trim(), when the mount goes quiet, frees
// all but kQuietFree of them (or fewer, as the limit says).
class BlockPool {
 public:
  static BlockPool& Get() {
    static BlockPool* pool = new BlockPool;
    return *pool;
  }
  // A block and its backed bytes.
  std::pair<std::unique_ptr<uint8_t[]>, size_t> Take() {
    {
      std::lock_guard lk(mu_);
      if (!free_.empty()) {
        auto f = std::move(free_.back());
        free_.pop_back();
        idle_ -= f.second;
        return f;
      }
    }
    return {std::make_unique_for_overwrite<uint8_t[]>(DirtyBlock::kDirtyBlockSize),
            DirtyBlock::kDirtyBlockSize};
  }
  void Give(std::unique_ptr<uint8_t[]> m, size_t backed) {
    std::lock_guard lk(mu_);
    if (free_.size() < max_free_) {
      idle_ += backed;
      free_.emplace_back(std::move(m), backed);
    }
  }
  uint64_t IdleBytes() {
    std::lock_guard lk(mu_);
    return idle_;
  }
  // Frees the free blocks past the first kQuietFree (or the limit, if
  // lower); their backed bytes.
  uint64_t Trim() { return FreePast(kQuietFree); }
  // Keeps at most `bytes` of free blocks (whole blocks, kMaxFree at most)
  // from now on, and frees those past it.
  void SetLimit(uint64_t bytes) {
    {
      std::lock_guard lk(mu_);
      max_free_ = static_cast<size_t>(std::min<uint64_t>(bytes / DirtyBlock::kDirtyBlockSize, kMaxFree));
    }
    FreePast(kMaxFree);
  }
  uint64_t Capacity() {
    std::lock_guard lk(mu_);
    return uint64_t{max_free_} * DirtyBlock::kDirtyBlockSize;
  }
  static constexpr size_t kMaxFree = 32;
  static constexpr size_t kQuietFree = 8;

 private:
  // Frees the free blocks past the first min(keep, max_free_); their
  // backed bytes.
  uint64_t FreePast(size_t keep) {
    std::vector<std::pair<std::unique_ptr<uint8_t[]>, size_t>> gone;
    {
      std::lock_guard lk(mu_);
      keep = std::min(keep, max_free_);
      while (free_.size() > keep) {
        idle_ -= free_.back().second;
        gone.push_back(std::move(free_.back()));
        free_.pop_back();
      }
    }
    uint64_t bytes = 0;
    for (const auto& g : gone) bytes += g.second;
    return bytes;  // freed here, outside the lock
  }

  std::mutex mu_;
  std::vector<std::pair<std::unique_ptr<uint8_t[]>, size_t>> free_;
  uint64_t idle_ = 0;
  size_t max_free_ = kMaxFree;
};

// The first entry of an offset-keyed map of non-overlapping ranges that
// ends after `a` (the one covering a, else the next); len(v) is a range's length.
template <typename Map, typename Len>
auto FirstEndingAfter(Map& m, uint64_t a, Len len) {
  auto it = m.upper_bound(a);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (prev->first + len(prev->second) > a) it = prev;
  }
  return it;
}
auto FirstExtentAfter(std::map<uint64_t, ExtentRec>& m, uint64_t a) {
  return FirstEndingAfter(m, a, [](const ExtentRec& e) { return uint64_t{e.length}; });
}
template <typename Map>
auto FirstDirtyAfter(Map& m, uint64_t a) {
  return FirstEndingAfter(m, a, [](const DirtySeg& d) { return uint64_t{d.size()}; });
}

std::vector<CutSpec> ToCuts(const std::vector<ChunkSpec>& specs) {
  std::vector<CutSpec> q;
  q.reserve(specs.size());
  for (const ChunkSpec& c : specs) {
    CutSpec x;
    x.begin = c.offset;
    x.end = c.offset + c.length;
    x.dtype = c.dtype;
    x.spec = c;
    q.push_back(std::move(x));
  }
  return q;
}

}  // namespace

namespace {
std::atomic<uint64_t> g_dirty_block_bytes{0};  // backed bytes of the blocks alive
}  // namespace

DirtyBlock::~DirtyBlock() {
  g_dirty_block_bytes.fetch_sub(backed, std::memory_order_relaxed);
  if (mem && cap == kDirtyBlockSize) BlockPool::Get().Give(std::move(mem), backed);
}

std::shared_ptr<DirtyBlock> NewDirtyBlock(size_t n, bool stream) {
  auto b = std::make_shared<DirtyBlock>();
  if (stream && n <= DirtyBlock::kDirtyBlockSize) {
    std::tie(b->mem, b->backed) = BlockPool::Get().Take();
    b->cap = DirtyBlock::kDirtyBlockSize;
  } else {
    b->mem = std::make_unique_for_overwrite<uint8_t[]>(n);
    b->cap = b->backed = n;
  }
  g_dirty_block_bytes.fetch_add(b->backed, std::memory_order_relaxed);
  return b;
}

void AppendToDirtyBlock(DirtyBlock& b, const uint8_t* p, size_t n) {
  std::memcpy(b.mem.get() + b.used, p, n);
  b.used += n;
  // Pages given back earlier (a block from the pool) are faulted in again.
  if (b.used > b.backed) {
    g_dirty_block_bytes.fetch_add(b.used - b.backed, std::memory_order_relaxed);
    b.backed = b.used;
  }
}

void SealDirtyBlock(DirtyBlock& b, bool held_elsewhere) {
  // A block no one else holds goes back to the pool whole, its pages kept
  // for the next writes.
  if (!held_elsewhere || b.backed <= b.used) return;
  static const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(b.mem.get());
  const uintptr_t lo = (base + b.used + kPage - 1) & ~(kPage - 1);
  const uintptr_t hi = (base + b.backed) & ~(kPage - 1);
  if (hi < lo + DirtyBlock::kMinGiveBack) return;
  // Private anonymous memory: the range reads as zeros if touched again,
  // and no byte below `used` is in it.
  if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) return;
  const size_t keep = lo - base;
  g_dirty_block_bytes.fetch_sub(b.backed - keep, std::memory_order_relaxed);
  b.backed = keep;
}

uint64_t DirtyBlockBytes() { return g_dirty_block_bytes.load(std::memory_order_relaxed); }
uint64_t DirtyBlockPoolBytes() { return BlockPool::Get().IdleBytes(); }
uint64_t DirtyBlockPoolCapacity() { return BlockPool::Get().Capacity(); }
uint64_t TrimDirtyBlockPool() { return BlockPool::Get().Trim(); }
void SetDirtyBlockPoolLimit(uint64_t bytes) { BlockPool::Get().SetLimit(bytes); }

FileDataShared::FileDataShared(store::Store* st, const FsOptions& o, FsCounters* c)
    : store(st),
      opts(o),
      counters(*c),
      cache(o),
      gpu(o.gpu, o.gpu_none_reason, o.gpu_min_batch_bytes, o.gpu_batch_bytes, c, o.gpu_first),
      readahead(st, &cache, c, o.read_pool, o.read_threads),
      committer(st),
      encoders(o.encode_threads, &gpu, c) {}

namespace {
// Decodes chunk `key` on the CPU into the cache, counted. Best effort: a
// chunk that fails is left out, and the read decodes (and reports) it on
// its own.
void DecodeIntoCache(store::Store* store, FsChunkCache* cache, FsCounters* counters,
                     const store::ChunkKey& key, uint32_t decoded_len) {
  try {
    uint8_t* w;
    store::ChunkBytes buf = store::NewChunkBytes(decoded_len, &w);
    auto r = store->ReadChunk(key, w, buf->size(), Scratch().ws);
    if (r.ok() && *r == buf->size()) {
      counters->cpu_decode_chunks++;
      counters->cpu_decode_bytes += *r;
      cache->Put(key, std::move(buf));
    }
  } catch (...) {
  }
}

// One store call for the whole batch: the frames go to the GPU in one
// DecodeBatch a round, deltas after their bases (the store decodes a round
// on the CPU if the device fails). Returns the chunks it leaves for the CPU
// (ReadChunks' deferred reads: cached bases, anything out of the ordinary).
std::vector<std::pair<store::ChunkKey, uint32_t>> DecodeBatchIntoCache(
    store::Store* store, FsChunkCache* cache, FsCounters* counters, GpuPath* gpu,
    const std::vector<std::pair<store::ChunkKey, uint32_t>>& todo, uint64_t ino) {
  std::vector<std::pair<store::ChunkKey, uint32_t>> rest;
  try {
    std::vector<store::ChunkBytes> bufs;
    std::vector<store::ChunkRead> reads(todo.size());
    bufs.reserve(todo.size());
    for (size_t i = 0; i < todo.size(); i++) {
      uint8_t* w;
      bufs.push_back(store::NewChunkBytes(todo[i].second, &w));
      reads[i].key = todo[i].first;
      reads[i].dst = w;
      reads[i].cap = bufs[i]->size();
    }
    const std::string what =
        std::to_string(todo.size()) + " chunks read ahead in inode " + std::to_string(ino);
    store->ReadChunks(
        reads, Scratch().ws,
        [&](GpuDecodeItem* items, size_t count) { return gpu->DecodeBatch(items, count, what); },
        /*batch_only=*/true);
    for (size_t i = 0; i < todo.size(); i++) {
      const store::ChunkRead& r = reads[i];
      if (r.deferred) {
        rest.push_back(todo[i]);
        continue;
      }
      if (r.redone) counters->gpu_fallback_chunks++;
      if (!r.result.ok() || *r.result != bufs[i]->size()) continue;  // the read reports it
      (r.batched ? counters->gpu_decode_chunks : counters->cpu_decode_chunks)++;
      (r.batched ? counters->gpu_decode_bytes : counters->cpu_decode_bytes) += *r.result;
      cache->Put(todo[i].first, std::move(bufs[i]));
    }
  } catch (...) {
    // best effort, as DecodeIntoCache
  }
  return rest;
}
}  // namespace

size_t ReadAheadThreads(unsigned want) {
  if (want) return want;
  return std::max<size_t>(4, 2 * size_t{std::max(1u, std::thread::hardware_concurrency())});
}

ReadAhead::ReadAhead(store::Store* store, FsChunkCache* cache, FsCounters* counters, ThreadPool* shared,
                     unsigned threads)
    : store_(store),
      cache_(cache),
      counters_(counters),
      own_pool_(shared ? nullptr : std::make_unique<ThreadPool>(ReadAheadThreads(threads))),
      pool_(shared ? shared : own_pool_.get()) {}

ReadAhead::~ReadAhead() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return inflight_.empty(); });
}

bool ReadAhead::InFlight(const store::ChunkKey& key) {
  std::lock_guard lk(mu_);
  return inflight_.count(key) != 0;
}

void ReadAhead::Wait(const store::ChunkKey& key) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return inflight_.count(key) == 0; });
}

void ReadAhead::Start(const store::ChunkKey& key, uint32_t decoded_len) {
  {
    std::lock_guard lk(mu_);
    if (!inflight_.insert(key).second) return;
  }
  // Decoded since the caller looked (a decode puts its chunk in the cache
  // before it ends).
  if (cache_->Get(key)) {
    Finish(key);
    return;
  }
  pool_->Submit([this, key, decoded_len](size_t) {
    DecodeIntoCache(store_, cache_, counters_, key, decoded_len);
    Finish(key);
  });
}

void ReadAhead::StartBatch(std::vector<std::pair<store::ChunkKey, uint32_t>> chunks, GpuPath* gpu,
                           uint64_t ino) {
  {
    std::lock_guard lk(mu_);
    std::erase_if(chunks, [&](const auto& c) { return !inflight_.insert(c.first).second; });
  }
  // Decoded since the caller looked (as in Start).
  std::vector<store::ChunkKey> cached;
  std::erase_if(chunks, [&](const auto& c) {
    if (!cache_->Get(c.first)) return false;
    cached.push_back(c.first);
    return true;
  });
  for (const auto& k : cached) Finish(k);
  if (chunks.empty()) return;
  pool_->Submit([this, chunks = std::move(chunks), gpu, ino](size_t) {
    {
      NsTimer t(counters_->gpu_read_batch_ns);
      for (const auto& [key, len] : DecodeBatchIntoCache(store_, cache_, counters_, gpu, chunks, ino))
        DecodeIntoCache(store_, cache_, counters_, key, len);
    }
    // Notified under the lock, all at once: once it is released, the
    // destructor may run.
    std::lock_guard lk(mu_);
    for (const auto& c : chunks) inflight_.erase(c.first);
    cv_.notify_all();
  });
}

void ReadAhead::Finish(const store::ChunkKey& key) {
  // Notified under the lock: once it is released, the destructor may run.
  std::lock_guard lk(mu_);
  inflight_.erase(key);
  cv_.notify_all();
}

namespace {
// Whether a line about a full or read-only store, or a follower's open
// file gone stale, may be logged now: one every 10 s at most, since such a
// store fails every write (and such a file every read).
bool LogNow() {
  static std::atomic<int64_t> last_ns{0};
  const int64_t now = NowNs();
  int64_t last = last_ns.load();
  return now - last >= int64_t{10'000'000'000} && last_ns.compare_exchange_strong(last, now);
}
}  // namespace

int FileDataShared::ToErrno(const Status& s, std::string_view what, uint64_t ino) {
  switch (s.code()) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kNoSpace:
      // The store's message says what to do (delete files, free space).
      if (LogNow()) spdlog::warn("lmcfs: {} (inode {}): {}", what, ino, s.ToString());
      return ENOSPC;
    case Code::kReadOnly:
      if (LogNow())
        spdlog::error(
            "lmcfs: {} (inode {}): {}. The filesystem holding the store went read-only (an error, or "
            "a remount): files read as before, nothing can be written. Unmount lmcfs, check and repair "
            "that filesystem (fsck), mount it read-write, then mount lmcfs again",
            what, ino, s.ToString());
      return EROFS;
    case Code::kInvalidArgument:
    case Code::kCorruption:
    case Code::kIOError:
    default:
      counters.eio++;
      spdlog::error("lmcfs: {} (inode {}): {}", what, ino, s.ToString());
      return EIO;
  }
}

int FileData::LoadExtents() {
  if (extents_loaded_) return 0;
  std::map<uint64_t, ExtentRec> m;
  const auto scan = [&]() -> int {
    m.clear();
    bool bad = false;
    Status s = shared_.store->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(owner_.ino),
                                   [&](std::string_view k, std::string_view v) {
                                     auto key = store::ParseExtentKey(k);
                                     auto e = DecodeExtentRec(v);
                                     if (!key || !e) {
                                       bad = true;
                                       return false;
                                     }
                                     m.emplace(key->second, *e);
                                     return true;
                                   });
    if (!s.ok()) return shared_.ToErrno(s, "load extents", owner_.ino);
    if (bad) return shared_.ToErrno(Status::Corruption("undecodable extent"), "load extents", owner_.ino);
    return 0;
  };
  if (int err = scan()) return err;
  if (shared_.opts.read_only && owner_.IsReg()) {
    // A follower loads a file's extents at its first use, maybe after a
    // refresh applied the writing node's removal or rewrite of the file
    // since its record was loaded here: no extents (read as zeros) or
    // another version's, under this version's size. The scan saw the
    // index at one moment; the record read after it must still be the
    // version loaded (its size and mtime). A file removed since fails its
    // reads with ESTALE (ReadableExtents), as for a chunk gone (GetChunk).
    // A file changed in place since (appended to, rewritten), of which
    // nothing was read here yet, is read as the version the index holds
    // now, as an open after the change would (and as NFS reads): its
    // record is taken once a scan is known to be of it, the record read
    // before that scan being the same, byte for byte (a commit puts a
    // file's extents and record together).
    std::optional<std::string> before;
    for (int attempt = 0;; ++attempt) {
      auto v = shared_.store->Get(store::Cf::kInodes, InodeKey(owner_.ino));
      if (!v.ok() && !v.status().IsNotFound()) return shared_.ToErrno(v.status(), "load inode", owner_.ino);
      const std::optional<InodeRec> now = v.ok() ? DecodeInode(*v) : std::nullopt;
      if (now && now->size == owner_.rec.size && now->mtime_ns == owner_.rec.mtime_ns) break;
      if (!now || !S_ISREG(now->mode) || attempt == 3) {
        stale_ = true;
        break;
      }
      if (before && *before == *v) {
        spdlog::debug(
            "lmcfs: inode {} changed on the node that writes its store between its open here and its "
            "first read: read at size {} (opened at {})",
            owner_.ino, now->size, owner_.rec.size);
        owner_.rec = *now;
        break;
      }
      before = std::move(v).value();
      if (int err = scan()) return err;
    }
  }
  extents_ = std::move(m);
  extents_loaded_ = true;
  return 0;
}

int FileData::ReadableExtents() {
  if (int err = LoadExtents()) return err;
  if (!stale_) return 0;
  if (LogNow())
    spdlog::warn(
        "lmcfs: inode {} was removed by the node that writes its store after it was opened here, before "
        "its first read: reads of this open file fail with ESTALE; open its name again to read what that "
        "node holds now",
        owner_.ino);
  return ESTALE;
}

void FileData::InsertDirty(uint64_t off, const uint8_t* p, size_t n, bool stream) {
  if (n == 0) return;
  RemoveDirty(off, off + n);
  dirty_bytes_ += n;
  // Append to the segment ending exactly here when its block has room.
  auto it = dirty_.lower_bound(off);
  if (it != dirty_.begin()) {
    auto prev = std::prev(it);
    DirtySeg& x = prev->second;
    DirtyBlock& b = *x.blk;
    if (prev->first + x.len == off && x.start + x.len == b.used) {
      if (b.cap - b.used >= n) {
        AppendToDirtyBlock(b, p, n);
        x.len += n;
        return;
      }
      // The block is full and the stream goes on. The segment holds the
      // stream's bytes not cut into chunks yet (the layout parser hands
      // tensors on in pieces of a few chunks). A chunk split between two
      // blocks would be copied into a buffer of its own when it is cut
      // (ChunkInput: a fresh allocation, its pages faulted in). So the
      // chunk these bytes are the head of ends in this block when it has
      // room for the chunk's tail (the write is split there, and a stream
      // of equal writes keeps its blocks on chunk boundaries from then
      // on), else its head moves to the new block with the write (less
      // than a chunk copied, no allocation). A guess that misses costs a
      // copy when the chunk is cut, never bytes.
      const size_t cs = shared_.opts.chunk_size;
      if (stream && streaming_ && cs) {
        // The next chunks start a whole number of chunks after the
        // parser's regions end (a big tensor's start, or a piece of it)
        // when that is in the segment, else after the segment's start (a
        // cut): a chunk of headers or small tensors waits in the chunker
        // before a big tensor.
        uint64_t base = prev->first;
        const uint64_t covered = parser_->bytes_covered();
        if (kRegionPieceBytes % cs == 0 && covered > base && covered <= off) base = covered;
        const size_t move = static_cast<size_t>((off - base) % cs);
        const size_t need = cs - move;
        if (move > 0 && need < n && need <= b.cap - b.used) {
          AppendToDirtyBlock(b, p, need);
          x.len += need;
          SealTail();
          auto nb = NewDirtyBlock(n - need, true);
          AppendToDirtyBlock(*nb, p + need, n - need);
          dirty_.emplace_hint(it, off + need, DirtySeg{std::move(nb), 0, n - need});
          return;
        }
        if (move > 0 && move + n <= DirtyBlock::kDirtyBlockSize) {
          SealTail();
          auto nb = NewDirtyBlock(move + n, true);
          AppendToDirtyBlock(*nb, x.data() + (x.len - move), move);
          AppendToDirtyBlock(*nb, p, n);
          shared_.counters.dirty_carried_bytes += move;
          DirtySeg moved{std::move(nb), 0, move + n};
          if (x.len == move) {
            x = std::move(moved);
          } else {
            x.len -= move;
            dirty_.emplace_hint(it, off - move, std::move(moved));
          }
          return;
        }
      }
    }
  }
  // The stream goes on after bytes that left for the encoders: into the
  // rest of their block.
  if (tail_ && off == tail_end_ && tail_->cap - tail_->used >= n) {
    std::shared_ptr<DirtyBlock> b = std::move(tail_);
    const size_t start = b->used;
    AppendToDirtyBlock(*b, p, n);
    dirty_.emplace(off, DirtySeg{std::move(b), start, n});
    return;
  }
  SealTail();
  auto b = NewDirtyBlock(n, stream);
  AppendToDirtyBlock(*b, p, n);
  dirty_.emplace(off, DirtySeg{std::move(b), 0, n});
}

void FileData::SealTail() {
  if (!tail_) return;
  // Held elsewhere: by a slice (a job's input, a cached chunk), else it
  // goes back to the pool whole when dropped here.
  SealDirtyBlock(*tail_, tail_.use_count() > 1);
  tail_.reset();
}

void FileData::RemoveDirty(uint64_t a, uint64_t b) {
  if (a >= b || dirty_.empty()) return;
  auto it = FirstDirtyAfter(dirty_, a);
  while (it != dirty_.end() && it->first < b) {
    uint64_t s = it->first, e = s + it->second.size();
    DirtySeg seg = std::move(it->second);
    it = dirty_.erase(it);
    dirty_bytes_ -= seg.size();
    // The bytes that end at the block's `used` leave: no segment appends to
    // it any more, but a write at `e` still may (tail_). A full block has
    // no pages past its bytes to give back.
    if (e <= b && seg.start + seg.len == seg.blk->used && seg.blk->cap > seg.blk->used) {
      if (tail_ != seg.blk) SealTail();
      tail_ = seg.blk;
      tail_end_ = e;
    }
    if (s < a) {
      dirty_.emplace(s, seg.Slice(0, a - s));
      dirty_bytes_ += a - s;
    }
    if (e > b) {
      dirty_.emplace(b, seg.Slice(b - s, e - b));
      dirty_bytes_ += e - b;
      break;
    }
  }
}

// Replaces whatever extents cover [a, b) by `nw` (placed at a; its chunk
// reference already taken by the caller's AddChunk) or by nothing (zeros).
// Extents crossing a or b keep their outside parts, each one reference.
// Batch order matters: references of the remnants before the releases (a
// release to zero deletes the chunk), and extent deletes before puts of the
// same key.
void FileData::ReplaceRange(uint64_t a, uint64_t b, const ExtentRec* nw) {
  std::vector<std::pair<uint64_t, ExtentRec>> removed, remnants;
  auto it = FirstExtentAfter(extents_, a);
  while (it != extents_.end() && it->first < b) {
    uint64_t s = it->first, e = s + it->second.length;
    const ExtentRec& x = it->second;
    if (s < a) {
      ExtentRec l = x;
      l.length = static_cast<uint32_t>(a - s);
      remnants.emplace_back(s, l);
    }
    if (e > b) {
      ExtentRec r = x;
      r.chunk_offset = static_cast<uint32_t>(x.chunk_offset + (b - s));
      r.length = static_cast<uint32_t>(e - b);
      remnants.emplace_back(b, r);
    }
    removed.emplace_back(s, x);
    it = extents_.erase(it);
  }
  store::Batch& batch = pending_;
  for (auto& [off, r] : remnants) batch.Ref(r.key);
  for (auto& [off, x] : removed) {
    batch.Unref(x.key);
    batch.Delete(store::Cf::kExtents, store::ExtentKey(owner_.ino, off));
    owner_.rec.stored -= std::min(owner_.rec.stored, x.Stored());
  }
  for (auto& [off, r] : remnants) {
    batch.Put(store::Cf::kExtents, store::ExtentKey(owner_.ino, off), EncodeExtentRec(r));
    extents_[off] = r;
    owner_.rec.stored += r.Stored();
  }
  if (nw) {
    batch.Put(store::Cf::kExtents, store::ExtentKey(owner_.ino, a), EncodeExtentRec(*nw));
    extents_[a] = *nw;
    owner_.rec.stored += nw->Stored();
  }
  if (!removed.empty() || nw) owner_.rec_dirty = true;
  if (!removed.empty()) shared_.counters.removals++;
}

int FileData::GetChunk(const ExtentRec& e, store::ChunkBytes* out) {
  if ((*out = shared_.cache.Get(e.key))) {
    shared_.counters.cache_hits++;
    return 0;
  }
  // Being decoded ahead (or just decoded): wait for it rather than decode
  // it twice. A decode put its chunk in the cache before it ended.
  shared_.readahead.Wait(e.key);
  if ((*out = shared_.cache.Get(e.key))) {
    shared_.counters.cache_hits++;
    return 0;
  }
  shared_.counters.cache_misses++;
  // The chunk may exist only in this inode's pending batch, or the one at
  // the committer.
  if (pending_chunks_ || !committing_.empty()) {
    if (int err = Commit(false)) return err;
  }
  uint8_t* w;
  store::ChunkBytes buf = store::NewChunkBytes(e.decoded_len, &w);
  auto r = shared_.store->ReadChunk(e.key, w, buf->size(), Scratch().ws);
  if (!r.ok() && r.status().IsNotFound() && shared_.opts.read_only) {
    // A follower: the node that writes the store released the chunk (the
    // file was removed or written over there) since this inode was loaded,
    // and the store caught up with that node's journal before saying so.
    // NFS's answer to the same case.
    if (LogNow())
      spdlog::warn(
          "lmcfs: inode {} was removed or rewritten by the node that writes its store after it was "
          "opened here (its chunk {} is gone): reads of this open file fail with ESTALE; open it again "
          "to read what that node holds now",
          owner_.ino, e.key.ToHex());
    return ESTALE;
  }
  if (!r.ok()) return shared_.ToErrno(r.status(), "read chunk " + e.key.ToHex(), owner_.ino);
  if (*r != e.decoded_len)
    return shared_.ToErrno(Status::Corruption("chunk " + e.key.ToHex() + " has an unexpected length"),
                           "read chunk", owner_.ino);
  shared_.counters.cpu_decode_chunks++;
  shared_.counters.cpu_decode_bytes += *r;
  shared_.cache.Put(e.key, buf);
  *out = std::move(buf);
  return 0;
}

// The file's current bytes [a, b): zeros, then extents, then dirty bytes.
int FileData::View(uint64_t a, uint64_t b, uint8_t* out) {
  std::memset(out, 0, b - a);
  if (int err = ReadableExtents()) return err;
  auto it = FirstExtentAfter(extents_, a);
  for (; it != extents_.end() && it->first < b; ++it) {
    uint64_t s = std::max(a, it->first), e = std::min(b, it->first + it->second.length);
    if (s >= e) continue;
    ExtentRec x = it->second;  // copy: GetChunk may commit, never reshapes the map
    store::ChunkBytes c;
    if (int err = GetChunk(x, &c)) return err;
    std::memcpy(out + (s - a), c->data() + x.chunk_offset + (s - it->first), e - s);
  }
  // Chunks at the encoders, in submission order (a later one is newer).
  for (const auto& j : inflight_) {
    uint64_t s = std::max(a, j->begin), e = std::min(b, j->end);
    if (s < e) std::memcpy(out + (s - a), j->buf->data() + (s - j->begin), e - s);
  }
  for (auto d = FirstDirtyAfter(dirty_, a); d != dirty_.end() && d->first < b; ++d) {
    uint64_t s = std::max(a, d->first), e = std::min(b, d->first + d->second.size());
    if (s < e) std::memcpy(out + (s - a), d->second.data() + (s - d->first), e - s);
  }
  return 0;
}

// When dirty bytes cover all of [a, b), they are the file's bytes there:
// copies them to out (no zero fill) and returns true.
bool FileData::CopyDirty(uint64_t a, uint64_t b, uint8_t* out) const {
  auto it = dirty_.upper_bound(a);
  if (it == dirty_.begin()) return false;
  --it;
  uint64_t pos = a;
  for (; pos < b && it != dirty_.end() && it->first <= pos; ++it) {
    uint64_t e = std::min(b, it->first + it->second.size());
    if (e <= pos) break;
    std::memcpy(out + (pos - a), it->second.data() + (pos - it->first), e - pos);
    pos = e;
  }
  return pos == b;
}

int FileData::ChunkInput(uint64_t a, uint64_t b, store::ChunkBytes* out) {
  auto it = dirty_.upper_bound(a);
  if (it != dirty_.begin()) {
    --it;
    const DirtySeg& seg = it->second;
    if (it->first + seg.size() >= b) {
      *out = store::SliceChunkBytes(seg.blk, seg.data() + (a - it->first), b - a);
      return 0;
    }
  }
  uint8_t* w;
  *out = store::NewChunkBytes(b - a, &w);
  shared_.counters.chunk_input_copies++;
  if (CopyDirty(a, b, w)) return 0;
  return View(a, b, w);
}

// Hands each range [a, b) of the file's current bytes to the encoders as
// one chunk that will replace whatever covers it; zeros will store nothing.
// The bytes leave `dirty` now and live in the job (reads see them there)
// until ApplyDone/Drain applies the job, in submission order.
int FileData::MaterializeRanges(const std::vector<CutSpec>& specs) {
  // Nothing to cut (a close of a file nothing was written to): no scan of
  // the extents (on a follower, that load is its first read's to make).
  if (specs.empty()) return 0;
  if (int err = LoadExtents()) return err;
  for (const CutSpec& s : specs) {
    const uint64_t end = std::min(s.end, owner_.rec.size);
    if (s.begin < end) {
      auto job = std::make_shared<EncodeJob>();
      job->ino = owner_.ino;
      job->name_hint = owner_.name_hint;
      job->parent_hint = owner_.parent_hint;
      job->dir_name_hint = owner_.dir_name_hint;
      job->spec = s.spec;
      job->dtype = s.dtype;
      job->begin = s.begin;
      job->end = end;
      if (int err = ChunkInput(s.begin, end, &job->buf)) return err;
      job->delta = shared_.delta.get();
      if (shared_.opts.dedup_per_owner) job->key_owner = owner_.rec.uid;
      job->store = shared_.store;
      // The input, and a frame that is at most about as large.
      job->charge = 2 * (end - s.begin);
      shared_.inflight_bytes += job->charge;
      inflight_.push_back(job);
      shared_.encoders.Submit(std::move(job));
    }
    RemoveDirty(s.begin, s.end);
  }
  return 0;
}

// Puts a failed job's bytes back into `dirty` where nothing newer covers
// them (newer dirty bytes, or a later job at the encoders), so that reads
// stay right and the next flush encodes them again.
void FileData::Restore(const EncodeJob& job) {
  std::vector<std::pair<uint64_t, uint64_t>> keep = {{job.begin, job.end}};
  auto cut = [&](uint64_t s, uint64_t e) {
    std::vector<std::pair<uint64_t, uint64_t>> next;
    for (auto [x, y] : keep) {
      if (e <= x || s >= y) {
        next.emplace_back(x, y);
        continue;
      }
      if (x < s) next.emplace_back(x, s);
      if (e < y) next.emplace_back(e, y);
    }
    keep = std::move(next);
  };
  for (auto& [off, seg] : dirty_) cut(off, off + seg.size());
  bool later = false;
  for (const auto& j : inflight_) {
    if (later) cut(j->begin, j->end);
    if (j.get() == &job) later = true;
  }
  for (auto [x, y] : keep) InsertDirty(x, job.buf->data() + (x - job.begin), y - x, false);
}

// Whether chunk `key` commits no later than a chunk added to pending_ now:
// it is added in pending_ or in a batch at the committer (this inode's,
// committed in order), or it is indexed (and then pinned by whoever asks).
bool FileData::ComesFirst(const store::ChunkKey& key) {
  auto adds = [&](const store::Batch& b) {
    for (const auto& op : b.ops())
      if (op.kind == store::Batch::OpKind::kAdd && op.key == key) return true;
    return false;
  };
  if (adds(pending_)) return true;
  for (const auto& t : committing_)
    if (adds(t->batch)) return true;
  return shared_.store->GetChunkInfo(key).ok();
}

// A chunk encoded against a base pinned ahead (BaseChoice::pending) whose
// base no longer comes first (its bytes were dropped before the pin, e.g.
// the file was truncated and rewritten): encoded again, standalone.
Status FileData::DropPendingBase(EncodeJob& job) {
  if (!job.base_key || !job.base_pending || ComesFirst(*job.base_key)) return Status::Ok();
  spdlog::debug("lmcfs: ino {} offset {}: base {} pinned ahead is gone; encoding standalone", owner_.ino,
                job.begin, job.base_key->ToHex());
  std::string frame(MaxEncodedSize(job.buf->size()), '\0');
  Workspace ws;
  auto n = EncodeChunk(job.buf->data(), job.buf->size(), EncodeParams{DType::kF32, nullptr},
                       reinterpret_cast<uint8_t*>(frame.data()), frame.size(), ws);
  if (!n.ok()) return n.status();
  frame.resize(*n);
  job.frame = std::move(frame);
  job.seal.reset();
  job.delta->Release(*job.base_key);
  job.base_key.reset();
  job.base_pending = false;
  return Status::Ok();
}

InodeRec FileData::Durable(InodeRec r) const {
  if (owner_.IsReg()) r.size = std::min(r.size, std::max(size_floor_, data_end_));
  return r;
}

int FileData::ApplyJob(EncodeJob& job) {
  if (Status s = DropPendingBase(job); !s.ok()) job.status = s;
  if (!job.status.ok()) {
    Restore(job);
    return shared_.ToErrno(job.status, "encode chunk at offset " + std::to_string(job.begin), owner_.ino);
  }
  data_end_ = std::max(data_end_, job.end);
  if (job.zero) {
    ReplaceRange(job.begin, job.end, nullptr);
    return 0;
  }
  ExtentRec e;
  e.length = static_cast<uint32_t>(job.end - job.begin);
  e.key = job.key;
  // A chunk the store held already is charged its stored frame, as a dedup
  // hit. The frame may change before this file commits (a re-encoding, the
  // commit storing it anew, or another file storing this file's own chunk
  // first): Commit rechecks it (RecheckCommitted).
  e.frame_len = job.match ? job.match->frame_len : static_cast<uint32_t>(job.frame.size());
  e.decoded_len = e.length;
  if (shared_.delta) {
    ChunkOrigin origin{owner_.ino,         owner_.name_hint, &job.spec,
                       owner_.parent_hint, job.key_owner,    owner_.dir_name_hint};
    shared_.delta->Record(origin, job.key, job.base_key, job.buf, &pending_);
  }
  applied_.emplace_back(job.begin, e.key);
  if (job.match)
    pending_.AddMatchedChunk(e.key, *job.match, job.buf, job.key_owner);
  else
    pending_.AddChunk(e.key, std::move(job.frame), e.decoded_len, job.base_key, job.key_owner, job.seal);
  pending_chunks_ = true;
  ReplaceRange(job.begin, job.end, &e);
  shared_.cache.Put(e.key, std::move(job.buf));
  shared_.counters.chunks_written++;
  shared_.counters.bytes_written += e.length;
  if (pending_.frame_bytes() >= shared_.opts.batch_limit) return CommitAsync();
  return 0;
}

int FileData::ApplyHead(Until until) {
  int first = 0;
  while (!inflight_.empty()) {
    if (until == Until::kUnderBudget && shared_.inflight_bytes <= shared_.opts.write_budget) break;
    std::shared_ptr<EncodeJob> job = inflight_.front();
    if (until == Until::kNotDone) {
      std::lock_guard lk(job->mu);
      if (!job->done) break;
    } else if (until == Until::kUnderBudget) {
      NsTimer t(shared_.counters.write_budget_wait_ns);
      job->Wait();
    } else {
      job->Wait();
    }
    inflight_.pop_front();
    int err = ApplyJob(*job);
    shared_.inflight_bytes -= job->charge;
    if (err && !first) first = err;
  }
  return first;
}

void FileData::KillStream() {
  streaming_ = false;
  parser_.reset();
  chunker_.reset();
}

// Feeds the parser the dirty bytes contiguous from stream_pos, and cuts the
// chunks the chunker completes.
int FileData::AdvanceStream() {
  for (;;) {
    auto it = dirty_.upper_bound(stream_pos_);
    if (it == dirty_.begin()) break;
    --it;
    uint64_t end = it->first + it->second.size();
    if (end <= stream_pos_) break;
    parser_->Feed(reinterpret_cast<const uint8_t*>(it->second.data()) + (stream_pos_ - it->first),
                  end - stream_pos_);
    stream_pos_ = end;
  }
  std::vector<ChunkSpec> specs;
  for (const Region& r : parser_->TakeRegions()) chunker_->Add(r, &specs);
  if (specs.empty()) return 0;
  // Each completed chunk goes to the encoders at once.
  return MaterializeRanges(ToCuts(specs));
}

int FileData::FinishStream() {
  if (!streaming_) return 0;
  parser_->Finish();
  std::vector<ChunkSpec> specs;
  for (const Region& r : parser_->TakeRegions()) chunker_->Add(r, &specs);
  chunker_->Finish(&specs);
  KillStream();
  return MaterializeRanges(ToCuts(specs));
}

// Cuts every dirty range into chunks aligned to chunk_size in the file.
int FileData::MaterializeDirty() {
  const uint64_t cs = shared_.opts.chunk_size;
  // Ranges: contiguous dirty bytes, cut at multiples of chunk_size.
  std::vector<CutSpec> q;
  uint64_t a = 0, b = 0;
  auto cut = [&] {
    while (a < b) {
      uint64_t limit = std::min(b, (a / cs + 1) * cs);
      CutSpec c;
      c.begin = a;
      c.end = limit;
      c.spec.offset = a;
      c.spec.length = static_cast<uint32_t>(limit - a);
      q.push_back(std::move(c));
      a = limit;
    }
  };
  for (auto& [off, seg] : dirty_) {
    if (off != b) {
      cut();
      a = off;
    }
    b = off + seg.size();
  }
  cut();
  return MaterializeRanges(q);
}

int FileData::Write(uint64_t off, const uint8_t* p, size_t n) {
  if (n == 0) return 0;
  if (off + n < off || off + n > (uint64_t{1} << 62)) return EFBIG;
  if (int err = LoadExtents()) return err;
  // A commit of this file's data failed for want of space: this write is
  // refused unless what is pending commits now, so that a writer on a full
  // disk learns it at once and its bytes do not pile up in memory.
  if (write_error_ == ENOSPC) {
    if (int err = Commit(false)) return err;
    write_error_ = 0;
  }
  // An encoder error of an earlier chunk: this write's bytes are buffered
  // (and the failed chunk's are back in dirty); the next flush reports it.
  if (int err = ApplyDone()) write_error_ = err;
  ReapCommitted();
  if (!streaming_ && off == 0 && extents_.empty() && dirty_.empty() && inflight_.empty()) {
    streaming_ = true;
    stream_pos_ = 0;
    parser_ = LayoutParser::Create();
    ChunkerOptions co;
    co.chunk_size = shared_.opts.chunk_size;
    chunker_ = std::make_unique<Chunker>(co);
  }
  InsertDirty(off, p, n, off == last_write_end_);
  last_write_end_ = off + n;
  owner_.rec.size = std::max(owner_.rec.size, off + n);
  owner_.rec.mtime_ns = owner_.rec.ctime_ns = NowNs();
  owner_.rec_dirty = true;
  if (streaming_) {
    if (int err = AdvanceStream()) return err;
  }
  if (dirty_bytes_ > shared_.opts.dirty_limit) {
    // Out-of-order or random writes piling up: give up the stream's typed
    // chunking and cut everything now, so memory stays bounded.
    if (int err = FinishStream()) return err;
    if (int err = MaterializeDirty()) return err;
  }
  if (int err = Backpressure()) write_error_ = err;
  return 0;
}

void FileData::Prefetch(uint64_t a, uint64_t b, uint64_t need_end) {
  if (LoadExtents()) return;
  // Uncached chunks under the read itself (now) and after it (ahead).
  std::vector<ExtentRec> now, ahead;
  auto it = FirstExtentAfter(extents_, a);
  for (; it != extents_.end() && it->first < b; ++it) {
    const ExtentRec& e = it->second;
    std::vector<ExtentRec>& list = it->first < need_end ? now : ahead;
    if (!list.empty() && list.back().key == e.key) continue;
    if (shared_.cache.Get(e.key)) continue;
    list.push_back(e);
  }
  if (now.empty() && ahead.empty()) return;
  if (shared_.gpu.reads()) {
    // With the GPU: the chunks ahead as one batch in the background, once
    // they are worth its transfers (gpu_min_batch_bytes, or half the
    // window where the cache is smaller) or reach the end of the file (the
    // reader consumes the last batch meanwhile); the chunks this read needs
    // and no batch holds, here on the CPU.
    auto in_flight = [&](const ExtentRec& e) { return shared_.readahead.InFlight(e.key); };
    std::erase_if(now, in_flight);
    std::erase_if(ahead, in_flight);
    uint64_t ahead_bytes = 0;
    for (const ExtentRec& e : ahead) ahead_bytes += e.decoded_len;
    const bool batch = !ahead.empty() && (ahead_bytes >= GpuReadBatchBytes() || b >= owner_.rec.size);
    if (!batch && now.empty()) return;
    if ((pending_chunks_ || !committing_.empty()) && Commit(false)) return;
    if (batch) {
      std::vector<std::pair<store::ChunkKey, uint32_t>> chunks;
      chunks.reserve(ahead.size());
      for (const ExtentRec& e : ahead) chunks.emplace_back(e.key, e.decoded_len);
      shared_.readahead.StartBatch(std::move(chunks), &shared_.gpu, owner_.ino);
    }
    DecodeNow(now);
    return;
  }
  // The chunks may be only in this inode's pending batch, or the one at the
  // committer.
  if ((pending_chunks_ || !committing_.empty()) && Commit(false)) return;
  for (const ExtentRec& e : ahead) shared_.readahead.Start(e.key, e.decoded_len);
  // Those being decoded ahead already, GetChunk waits for.
  std::erase_if(now, [&](const ExtentRec& e) { return shared_.readahead.InFlight(e.key); });
  DecodeNow(now);
}

void FileData::DecodeNow(const std::vector<ExtentRec>& todo) {
  if (todo.empty()) return;
  ThreadPool::Shared().ParallelFor(todo.size(), 0, [&](size_t i, size_t) {
    if (shared_.cache.Get(todo[i].key)) return;  // decoded ahead meanwhile
    DecodeIntoCache(shared_.store, &shared_.cache, &shared_.counters, todo[i].key, todo[i].decoded_len);
  });
}

size_t FileData::PrepareRead(uint64_t off, size_t n) {
  // A follower's first read loads the extents first: a file changed in
  // place since its open here is read at its size now (LoadExtents). An
  // error is the caller's again at its own load (ReadableExtents).
  if (shared_.opts.read_only && !extents_loaded_) (void)LoadExtents();
  if (off >= owner_.rec.size) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, owner_.rec.size - off));
  // Sequential reads decode this read's chunks and the next ones ahead in
  // parallel (two per read-ahead thread), so cp and torch.load use every
  // core while pack reads wait for the disk.
  const bool sequential = off == last_read_end_;
  const uint64_t prev_start = last_read_start_;
  last_read_start_ = off;
  last_read_end_ = off + n;
  if (sequential) {
    readers_ = shared_.cache.NoteReader(owner_.ino);
    // The chunks the last read finished: evicted first from now on, before
    // the chunks decoded ahead of readers that have yet to read them.
    if (off > 0 && !LoadExtents()) {
      for (auto it = FirstExtentAfter(extents_, prev_start);
           it != extents_.end() && it->first + it->second.length <= off; ++it)
        shared_.cache.Demote(it->second.key);
    }
    Prefetch(off, std::min(owner_.rec.size, off + n + ReadAheadWindow()), off + n);
  }
  return n;
}

uint64_t FileData::ReadAheadWindow() const {
  const uint64_t chunk = shared_.opts.chunk_size;
  // Chunks decoded ahead wait in the cache: at most half of it over all
  // the files read at once, so that none is evicted before its read comes
  // (8 files read at once, a window of half the cache each: 1.20-1.35
  // decodes a chunk; docs/BENCHMARKS.md).
  const uint64_t half_cache =
      std::max<uint64_t>(shared_.cache.capacity() / 2 / std::max<size_t>(1, readers_), chunk);
  const uint64_t ahead =
      std::min<uint64_t>(chunk * 2 * std::max<size_t>(2, shared_.readahead.threads()), half_cache);
  // With the GPU, two batches of gpu_min_batch_bytes (the reader consumes
  // one while the next decodes), as far as half the cache allows: a window
  // as large as the cache made each batch evict the unread chunks of the
  // one before it (decoded again on the CPU).
  if (!shared_.gpu.reads()) return ahead;
  return std::max(ahead, std::min<uint64_t>(2 * uint64_t{shared_.gpu.min_batch_bytes()}, half_cache));
}

uint64_t FileData::GpuReadBatchBytes() const {
  return std::max<uint64_t>(std::min<uint64_t>(shared_.gpu.min_batch_bytes(), ReadAheadWindow() / 2),
                            shared_.opts.chunk_size);
}

int FileData::Read(uint64_t off, size_t n, std::string* out) {
  out->clear();
  n = PrepareRead(off, n);
  if (n == 0) return 0;
  out->resize(n);
  return View(off, off + n, reinterpret_cast<uint8_t*>(out->data()));
}

// Data is what three maps hold, which may overlap one another: the
// committed extents, the chunks at the encoders and the written bytes; a
// hole is a range of [0, size) that none of them covers (reads give zeros).
int FileData::Seek(uint64_t off, bool data, bool holes, uint64_t* out) {
  // A follower's file changed in place since its open here is seen at its
  // size now, as its reads see it (PrepareRead).
  if (shared_.opts.read_only && holes && !extents_loaded_) {
    if (int err = ReadableExtents()) return err;
  }
  const uint64_t size = owner_.rec.size;
  if (off >= size) return ENXIO;
  if (!holes) {
    *out = data ? off : size;
    return 0;
  }
  if (int err = ReadableExtents()) return err;
  if (data) {
    // The first start of a data range at or after off (clamped to off).
    uint64_t first = size;
    auto e = FirstExtentAfter(extents_, off);
    if (e != extents_.end()) first = std::max(off, e->first);
    auto d = FirstDirtyAfter(dirty_, off);
    if (d != dirty_.end()) first = std::min(first, std::max(off, d->first));
    for (const auto& j : inflight_)
      if (j->end > off) first = std::min(first, std::max(off, j->begin));
    if (first >= size) return ENXIO;
    *out = first;
    return 0;
  }
  // From off, past every data range that covers the position, to the
  // first position none covers.
  uint64_t pos = off;
  while (pos < size) {
    uint64_t end = pos;
    auto e = FirstExtentAfter(extents_, pos);
    if (e != extents_.end() && e->first <= pos) end = std::max(end, e->first + e->second.length);
    auto d = FirstDirtyAfter(dirty_, pos);
    if (d != dirty_.end() && d->first <= pos) end = std::max(end, d->first + d->second.size());
    for (const auto& j : inflight_)
      if (j->begin <= pos && j->end > pos) end = std::max(end, j->end);
    if (end == pos) break;
    pos = end;
  }
  *out = std::min(pos, size);
  return 0;
}

int FileData::ReadPieces(uint64_t off, size_t n, std::vector<Filesystem::ReadPiece>* pieces) {
  pieces->clear();
  n = PrepareRead(off, n);
  if (n == 0) return 0;
  if (int err = ReadableExtents()) return err;
  const uint64_t a = off, b = off + n;
  // Dirty bytes or chunks at the encoders over the range: one copy (View).
  bool layered = false;
  for (const auto& j : inflight_) layered |= j->begin < b && a < j->end;
  if (auto d = FirstDirtyAfter(dirty_, a); d != dirty_.end() && d->first < b) layered = true;
  if (layered) {
    uint8_t* w;
    store::ChunkBytes copy = store::NewChunkBytes(n, &w);
    if (int err = View(a, b, w)) return err;
    pieces->push_back({w, n, std::move(copy)});
    return 0;
  }
  uint64_t pos = a;
  for (auto it = FirstExtentAfter(extents_, a); it != extents_.end() && it->first < b; ++it) {
    const uint64_t s = std::max(a, it->first), e = std::min(b, it->first + it->second.length);
    if (s >= e) continue;
    if (s > pos) pieces->push_back({nullptr, s - pos, nullptr});
    ExtentRec x = it->second;  // copy: GetChunk may commit, never reshapes the map
    store::ChunkBytes c;
    if (int err = GetChunk(x, &c)) return err;
    const uint8_t* p = c->data() + x.chunk_offset + (s - it->first);
    pieces->push_back({p, e - s, std::move(c)});
    pos = e;
  }
  if (pos < b) pieces->push_back({nullptr, b - pos, nullptr});
  return 0;
}

int FileData::Truncate(uint64_t size) {
  if (size > (uint64_t{1} << 62)) return EFBIG;
  if (size == 0) {
    KillStream();
    if (int err = DropUncommitted()) return err;
  }
  if (int err = LoadExtents()) return err;
  // Jobs at the encoders replace ranges when applied: apply them first.
  if (int err = Drain()) return err;
  if (size < owner_.rec.size) {
    if (streaming_ && stream_pos_ > size) KillStream();
    RemoveDirty(size, UINT64_MAX);
    ReplaceRange(size, UINT64_MAX, nullptr);
  }
  owner_.rec.size = size;
  size_floor_ = size;
  data_end_ = std::min(data_end_, size);
  owner_.rec.mtime_ns = owner_.rec.ctime_ns = NowNs();
  owner_.rec_dirty = true;
  return 0;
}

int FileData::PunchHole(uint64_t a, uint64_t b) {
  if (int err = LoadExtents()) return err;
  // Jobs at the encoders replace ranges when applied: apply them first.
  if (int err = Drain()) return err;
  b = std::min(b, owner_.rec.size);
  if (a >= b) return 0;
  if (streaming_ && stream_pos_ > a) KillStream();
  RemoveDirty(a, b);
  ReplaceRange(a, b, nullptr);
  owner_.rec.mtime_ns = owner_.rec.ctime_ns = NowNs();
  owner_.rec_dirty = true;
  return 0;
}

int FileData::WaitCommits(size_t keep) {
  while (committing_.size() > keep) {
    std::shared_ptr<CommitTicket> t = std::move(committing_.front());
    committing_.pop_front();
    t->Wait();
    if (t->status.ok()) {
      TakeBackCommitted(*t);
      continue;
    }
    t->Unqueue();
    store::Batch back = std::move(t->batch);
    for (auto& later : committing_) {
      later->Wait();
      later->Unqueue();
      back.Absorb(std::move(later->batch));
    }
    committing_.clear();
    back.Absorb(std::move(pending_));
    pending_ = std::move(back);
    pending_chunks_ = true;
    owner_.rec_dirty = true;
    return shared_.ToErrno(t->status, "commit", owner_.ino);
  }
  return 0;
}

void FileData::ReapCommitted() {
  while (!committing_.empty()) {
    CommitTicket& t = *committing_.front();
    {
      std::lock_guard lk(t.mu);
      if (!t.done || !t.status.ok()) return;  // a failure is WaitCommits' to put back
    }
    TakeBackCommitted(t);
    committing_.pop_front();
  }
}

void FileData::TakeBackCommitted(CommitTicket& t) {
  // Done: the committer no longer reads the batch, and the next ticket may
  // still hold this one (prev), so its frames go back to the pool now.
  t.batch.Clear();
  t.Unqueue();
  shared_.counters.commits++;
  applied_committed_ = std::max(applied_committed_, t.applied_end);
}

int FileData::CommitAsync() {
  if (owner_.purged) return 0;
  ReapCommitted();
  {
    NsTimer t(shared_.counters.commit_wait_ns);
    if (int err = WaitCommits(CommitTicket::kMaxQueuedPerInode - 1)) return err;
    // The frames at the committer over all inodes stay within
    // commit_queue_limit, plus a batch a writer: over it, a writer waits
    // for its own oldest batch there (never for another inode's, whose
    // writer may be waiting itself). Without it they grew with the number
    // of writers, kMaxQueuedPerInode batches each, whenever the store was
    // slower than the encoders.
    while (!committing_.empty() &&
           shared_.committing_bytes.load() + pending_.frame_bytes() > shared_.opts.commit_queue_limit) {
      if (int err = WaitCommits(committing_.size() - 1)) return err;
    }
  }
  // The chunks of the batches committed since the last hand-off: their
  // frame lengths that changed go out with this batch.
  if (applied_committed_ > applied_first_) RecheckCommitted(applied_committed_ - applied_first_);
  pending_.Put(store::Cf::kInodes, InodeKey(owner_.ino), EncodeInode(Durable(owner_.rec)));
  auto t = std::make_shared<CommitTicket>();
  t->applied_end = applied_first_ + applied_.size();
  t->queued_bytes = pending_.frame_bytes();
  t->queued = &shared_.committing_bytes;
  shared_.committing_bytes += t->queued_bytes;
  t->batch = std::move(pending_);
  pending_.Clear();
  if (!committing_.empty()) t->prev = committing_.back();
  pending_chunks_ = false;
  owner_.rec_dirty = false;
  committing_.push_back(t);
  shared_.committer.Submit(std::move(t));
  return 0;
}

void FileData::SettleQueued() {
  if (int err = WaitCommits(); err && !write_error_) write_error_ = err;
}

int FileData::Commit(bool sync) {
  if (owner_.purged) return 0;
  // A batch that failed at the committer is back in pending_ and committed
  // below; its error is reported by the next Finalize all the same.
  SettleQueued();
  // Nothing left to commit: every chunk applied went out in a batch, all
  // settled now, and only those batches' checks can be left to do.
  if (pending_.empty() && !owner_.rec_dirty && !sync &&
      (applied_.empty() || RecheckCommitted(applied_.size()) == 0))
    return 0;
  pending_.Put(store::Cf::kInodes, InodeKey(owner_.ino), EncodeInode(Durable(owner_.rec)));
  Status s = shared_.store->Commit(pending_, sync);
  if (!s.ok()) return shared_.ToErrno(s, "commit", owner_.ino);
  shared_.counters.commits++;
  pending_.Clear();
  pending_chunks_ = false;
  owner_.rec_dirty = false;
  // Every chunk applied so far is committed now (the queued batches
  // settled above, the rest just now).
  if (!applied_.empty() && RecheckCommitted(applied_.size()) > 0 && Commit(false) != 0)
    spdlog::warn(
        "lmcfs: inode {}: recording the new frame lengths of chunks stored anew failed; st_blocks "
        "stays as it was",
        owner_.ino);
  return 0;
}

uint64_t FileData::RecheckCommitted(size_t n) {
  n = std::min(n, applied_.size());
  ChunkKeySet stored_anew;
  for (size_t i = 0; i < n; ++i) {
    const auto& [off, key] = applied_[i];
    auto it = extents_.find(off);
    if (it == extents_.end() || it->second.key != key) continue;  // overwritten since
    if (shared_.FrameLenNow(key, it->second.frame_len) != it->second.frame_len) stored_anew.insert(key);
  }
  applied_.erase(applied_.begin(), applied_.begin() + static_cast<std::ptrdiff_t>(n));
  applied_first_ += n;
  applied_committed_ = std::max(applied_committed_, applied_first_);
  // Rare: every extent naming them (a write may have split one since).
  return stored_anew.empty() ? 0 : SetFrameLensOf(stored_anew);
}

void FileData::SetFrameLen(uint64_t off, ExtentRec& x, uint32_t frame_len) {
  owner_.rec.stored -= std::min(owner_.rec.stored, x.Stored());
  x.frame_len = frame_len;
  owner_.rec.stored += x.Stored();
  owner_.rec_dirty = true;
  pending_.Put(store::Cf::kExtents, store::ExtentKey(owner_.ino, off), EncodeExtentRec(x));
}

void FileData::RefreshFrameLen(uint64_t off, const store::ChunkKey& key, uint32_t frame_len) {
  if (owner_.purged || !owner_.IsReg() || LoadExtents() != 0) return;
  auto it = extents_.find(off);
  if (it == extents_.end() || it->second.key != key || it->second.frame_len == frame_len) return;
  SetFrameLen(off, it->second, frame_len);
  if (Commit(false) != 0)
    spdlog::warn("lmcfs: inode {}: recording the new frame length of {} failed; st_blocks stays as it was",
                 owner_.ino, key.ToHex());
}

uint64_t FileData::SetFrameLensOf(const ChunkKeySet& keys) {
  if (owner_.purged || !owner_.IsReg() || !extents_loaded_) return 0;  // else all in the store
  uint64_t changed = 0;
  for (auto& [off, x] : extents_) {
    if (!keys.count(x.key)) continue;
    const uint32_t now = shared_.FrameLenNow(x.key, x.frame_len);
    if (now == x.frame_len) continue;
    SetFrameLen(off, x, now);
    changed++;
  }
  return changed;
}

uint64_t FileData::RefreshKeys(const ChunkKeySet& keys) {
  const uint64_t changed = SetFrameLensOf(keys);
  if (!changed) return 0;
  if (Commit(false) != 0)
    spdlog::warn(
        "lmcfs: inode {}: recording the new frame lengths of re-encoded chunks failed; st_blocks "
        "stays as it was",
        owner_.ino);
  return changed;
}

int FileData::Finalize(bool sync) {
  if (owner_.purged) return 0;
  int err = FinishStream();
  if (!err) err = MaterializeDirty();
  if (!err) err = Drain();
  if (!err) err = Commit(sync);
  // Everything written left dirty_: its last block's pages past its bytes
  // go back (or the block to the pool, when the jobs let go of it).
  SealTail();
  // An error of an earlier write (encoder, background commit) is reported
  // here once, after its bytes were retried.
  const int reported = write_error_;
  write_error_ = 0;
  return err ? err : reported;
}

int FileData::CloneFrom(FileData& src, uint64_t soff, uint64_t doff, uint64_t len) {
  if (int err = src.ReadableExtents()) return err;
  if (int err = LoadExtents()) return err;
  // This file's stream cannot continue past bytes that did not go through
  // it, and its jobs must not land on the cloned range later.
  if (int err = FinishStream()) return err;
  if (int err = Drain()) return err;
  RemoveDirty(doff, doff + len);
  ReplaceRange(doff, doff + len, nullptr);
  const uint64_t send = soff + len;
  auto it = FirstExtentAfter(src.extents_, soff);
  // Each cloned extent is one more reference; the chunks stay referenced by
  // src's committed extents meanwhile, so no count can reach zero here.
  for (; it != src.extents_.end() && it->first < send; ++it) {
    uint64_t s = std::max(soff, it->first), e = std::min(send, it->first + it->second.length);
    if (s >= e) continue;
    ExtentRec x = it->second;
    x.chunk_offset = static_cast<uint32_t>(x.chunk_offset + (s - it->first));
    x.length = static_cast<uint32_t>(e - s);
    // The frame length the index has now: src's may predate a re-encoding
    // whose refresh has not reached src yet (see RefreshKeys).
    x.frame_len = shared_.FrameLenNow(x.key, x.frame_len);
    uint64_t at = doff + (s - soff);
    pending_.Ref(x.key);
    pending_.Put(store::Cf::kExtents, store::ExtentKey(owner_.ino, at), EncodeExtentRec(x));
    extents_[at] = x;
    owner_.rec.stored += x.Stored();
  }
  owner_.rec.size = std::max(owner_.rec.size, doff + len);
  data_end_ = std::max(data_end_, doff + len);
  owner_.rec.mtime_ns = owner_.rec.ctime_ns = NowNs();
  owner_.rec_dirty = true;
  return Commit(false);
}

void FileData::DropJobs() {
  // Jobs still at the encoders are dropped (the encoder keeps its
  // reference until it finishes; nothing of them is applied). A delta base
  // the policy gave one is released: here if it is done, else by the
  // encoder when it is.
  for (auto& j : inflight_) {
    shared_.inflight_bytes -= j->charge;
    std::unique_lock jl(j->mu);
    if (!j->done) {
      j->dropped = true;
    } else if (j->base_key) {
      jl.unlock();
      j->delta->Release(*j->base_key);
      j->base_key.reset();
    }
  }
  inflight_.clear();
}

int FileData::DropUncommitted() {
  dirty_.clear();
  dirty_bytes_ = 0;
  DropJobs();
  SettleQueued();
  store::Batch keep;
  bool dropped = false;
  for (const store::Batch::Op& op : pending_.ops()) {
    using Kind = store::Batch::OpKind;
    const bool data = op.kind == Kind::kAdd || op.kind == Kind::kRef || op.kind == Kind::kUnref ||
                      op.cf == store::Cf::kExtents || op.cf == store::Cf::kInodes;
    if (op.kind == Kind::kUnpin)
      keep.Unpin(op.key);
    else if (op.kind == Kind::kPut && !data)
      keep.Put(op.cf, op.cf_key, op.value);
    else if (op.kind == Kind::kDelete && !data)
      keep.Delete(op.cf, op.cf_key);
    else
      dropped = true;
  }
  if (dropped) {
    spdlog::info(
        "lmcfs: inode {}: dropping its uncommitted data ({} bytes of frames), discarded by a "
        "truncate or delete",
        owner_.ino, pending_.frame_bytes());
  }
  pending_ = std::move(keep);
  pending_chunks_ = false;
  write_error_ = 0;
  if (!dropped) return 0;
  // Extents as committed (the pending ones named chunks never committed),
  // and the stored bytes they hold.
  extents_.clear();
  extents_loaded_ = false;
  if (int err = LoadExtents()) return err;
  owner_.rec.stored = 0;
  for (const auto& [off, e] : extents_) owner_.rec.stored += e.Stored();
  owner_.rec_dirty = true;
  return 0;
}

int FileData::Purge(store::Batch* b) {
  if (owner_.purged) return 0;
  shared_.counters.removals++;
  KillStream();
  if (int err = DropUncommitted()) return err;
  if (int err = LoadExtents()) return err;
  // What the pending batch kept (xattrs, lineage, pin ends) commits with
  // the purge; this inode's xattrs among it are deleted below.
  const std::string xp = XattrPrefix(owner_.ino);
  std::vector<std::string> pending_xattrs;
  for (const store::Batch::Op& op : pending_.ops())
    if (op.cf == store::Cf::kMeta && op.cf_key.starts_with(xp)) pending_xattrs.push_back(op.cf_key);
  b->Absorb(std::move(pending_));
  pending_.Clear();
  for (const std::string& k : pending_xattrs) b->Delete(store::Cf::kMeta, k);
  for (auto& [off, e] : extents_) {
    b->Unref(e.key);
    b->Delete(store::Cf::kExtents, store::ExtentKey(owner_.ino, off));
  }
  b->Delete(store::Cf::kInodes, InodeKey(owner_.ino));
  b->Delete(store::Cf::kMeta, OrphanKey(owner_.ino));
  Status s = shared_.store->Scan(store::Cf::kMeta, xp, [&](std::string_view k, std::string_view) {
    b->Delete(store::Cf::kMeta, k);
    return true;
  });
  if (!s.ok()) return shared_.ToErrno(s, "purge xattrs", owner_.ino);
  return 0;
}

}  // namespace lmc::fs
