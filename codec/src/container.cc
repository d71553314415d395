#include "lmc/container.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "frame_format.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/gpu.h"
#include "lmc/hash.h"
#include "lmc/thread_pool.h"

namespace lmc {
namespace {

// docs/FORMAT.md, ".lmc container".
constexpr uint8_t kMagic[4] = {'L', 'M', 'C', 'Z'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 16;
constexpr size_t kTrailerSize = 28;  // size u64, xxh3 u64, chunks u64, crc u32
constexpr size_t kReadSize = 8 << 20;
constexpr size_t kChunksPerThread = 4;  // chunks in flight per thread per batch
// The compressor's CPU batches are larger: each batch ends with one thread
// finishing its last chunk while the others wait, and two threads over
// one went from 1.63-1.69x to 1.74-1.77x on bf16 weights with 16 chunks per
// thread instead of 4. Bounded in bytes, since every chunk in flight holds
// a frame buffer of its worst case.
constexpr size_t kCompressChunksPerThread = 16;
constexpr size_t kCompressBatchBytes = 64 << 20;
// The trailer's file checksum is XXH3-64 over the frames' own decoded
// checksums (frame bytes 12-19) in file order: each frame's checksum covers
// its bytes, and this one covers their order, so hashing the data a second
// time would add nothing.
constexpr size_t kFrameChecksumOffset = 12;

// The header and trailer checksums: the low 32 bits of XXH3-64.
uint32_t Xxh3Low32(const uint8_t* p, size_t n) { return static_cast<uint32_t>(hash::Xxh3_64(p, n)); }

// Codec scratch kept across calls, process-wide and bounded: a Workspace
// grows to the chunk size and a frame buffer to a frame's worst case, and
// fresh ones cost a page fault per 4 KiB on their first use: a `lmc bench
// -r 10 -T 2` run of a 43 MiB file took 181,000 page faults, and its
// two-thread compress ran at 3,050 MB/s where a driver making the same
// calls with memory reused ran at 3,700 (docs/BENCHMARKS.md, "Two
// threads"). What is kept is at most kMaxKeptBytes (a 1 GiB chunk's
// buffers are freed, not kept).
class ScratchCache {
 public:
  static ScratchCache& Instance() {
    static ScratchCache* cache = new ScratchCache;  // never destroyed: used from pool threads
    return *cache;
  }

  std::unique_ptr<Workspace> TakeWorkspace() {
    std::lock_guard<std::mutex> l(mu_);
    if (ws_.empty()) return std::make_unique<Workspace>();
    std::unique_ptr<Workspace> w = std::move(ws_.back());
    ws_.pop_back();
    kept_ -= w->capacity();
    return w;
  }
  void GiveWorkspace(std::unique_ptr<Workspace> w) {
    if (!w) return;
    std::lock_guard<std::mutex> l(mu_);
    if (kept_ + w->capacity() > kMaxKeptBytes) return;
    kept_ += w->capacity();
    ws_.push_back(std::move(w));
  }
  std::vector<uint8_t> TakeFrame() {
    std::lock_guard<std::mutex> l(mu_);
    if (frames_.empty()) return {};
    std::vector<uint8_t> f = std::move(frames_.back());
    frames_.pop_back();
    kept_ -= f.capacity();
    return f;
  }
  void GiveFrame(std::vector<uint8_t>&& f) {
    std::lock_guard<std::mutex> l(mu_);
    if (f.capacity() == 0 || kept_ + f.capacity() > kMaxKeptBytes) return;
    kept_ += f.capacity();
    frames_.push_back(std::move(f));
  }

 private:
  static constexpr size_t kMaxKeptBytes = 64 << 20;
  std::mutex mu_;
  std::vector<std::unique_ptr<Workspace>> ws_;
  std::vector<std::vector<uint8_t>> frames_;
  size_t kept_ = 0;  // capacity of everything in ws_ and frames_
};

// Per-slot codec scratch for one Compress/Decompress call, taken from and
// given back to the ScratchCache.
struct Slots {
  explicit Slots(size_t n) : ws(n) {
    for (auto& w : ws) w = ScratchCache::Instance().TakeWorkspace();
  }
  ~Slots() {
    for (auto& w : ws) ScratchCache::Instance().GiveWorkspace(std::move(w));
  }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;
  std::vector<std::unique_ptr<Workspace>> ws;
};

// Reads exactly n bytes unless input ends first; returns bytes read.
Result<size_t> ReadFull(const ReadFn& in, uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    LMC_ASSIGN_OR_RETURN(size_t r, in(buf + got, n - got));
    if (r == 0) break;
    got += r;
  }
  return got;
}

// The input bytes not yet handed to the encoder: a buffer that grows to the
// largest span in flight and is reused, without zero-filling (a vector's
// resize would clear every 8 MiB read).
class Window {
 public:
  uint64_t start() const { return start_; }  // file offset of data()[0]
  const uint8_t* data() const { return buf_.get() + begin_; }
  size_t size() const { return end_ - begin_; }
  // Room for n more bytes at the end; returns where to write them.
  uint8_t* Reserve(size_t n) {
    if (end_ + n > cap_) {
      size_t live = size();
      if (live + n > cap_) {
        size_t cap = std::max(live + n, cap_ * 2);
        std::unique_ptr<uint8_t[]> nb(new uint8_t[cap]);
        if (live) std::memcpy(nb.get(), data(), live);
        buf_ = std::move(nb);
        cap_ = cap;
      } else if (live) {
        std::memmove(buf_.get(), data(), live);
      }
      begin_ = 0;
      end_ = live;
    }
    return buf_.get() + end_;
  }
  void Commit(size_t n) { end_ += n; }
  // Drops bytes before file offset `off`.
  void DropBefore(uint64_t off) {
    begin_ += static_cast<size_t>(off - start_);
    start_ = off;
  }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0, begin_ = 0, end_ = 0;
  uint64_t start_ = 0;
};

}  // namespace

std::string CodecFormats() {
  return "frame versions 1-" + std::to_string(frame::kVersion) + ", .lmc container " +
         std::to_string(kVersion);
}

bool IsContainer(const uint8_t* p, size_t n) { return n >= 4 && std::memcmp(p, kMagic, 4) == 0; }

namespace {
// Chunks per GPU batch: kContainerGpuBatchBytes of them, and at least the
// CPU's batch.
size_t GpuBatchChunks(size_t threads, uint32_t chunk_size) {
  const size_t cpu = threads * kChunksPerThread;
  return chunk_size ? std::max(cpu, kContainerGpuBatchBytes / chunk_size) : cpu;
}
}  // namespace

namespace {

// Writes a .lmc stream: the header, batches of chunks encoded in parallel
// and emitted in order, then the trailer. Shared by the streaming and the
// in-memory compressors, which differ only in where chunk bytes live.
class FrameWriter {
 public:
  FrameWriter(const CompressOptions& opts, WriteFn out)
      : pool_(opts.pool ? *opts.pool : ThreadPool::Shared()),
        threads_(
            std::max<size_t>(1, opts.threads == 0 ? pool_.size() : std::min(opts.threads, pool_.size()))),
        slots_(threads_),
        out_(std::move(out)),
        gpu_(opts.gpu),
        gpu_batch_(GpuBatchChunks(threads_, opts.chunk_size)),
        cpu_batch_(std::max(threads_ * kChunksPerThread,
                            std::min(threads_ * kCompressChunksPerThread,
                                     kCompressBatchBytes / std::max<size_t>(opts.chunk_size, 1)))) {}
  ~FrameWriter() {
    for (auto& f : frames_) ScratchCache::Instance().GiveFrame(std::move(f));
  }
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;

  size_t batch() const { return gpu_ ? gpu_batch_ : cpu_batch_; }

  Status WriteHeader(uint32_t chunk_size) {
    uint8_t hdr[kHeaderSize] = {};
    std::memcpy(hdr, kMagic, 4);
    hdr[4] = kVersion;
    StoreLE32(hdr + 8, chunk_size);
    StoreLE32(hdr + 12, Xxh3Low32(hdr, 12));
    return Emit(hdr, kHeaderSize);
  }

  // Encodes chunks[0, count), whose bytes are at data + (offset - data_start),
  // in parallel, and emits their frames in order.
  Status Encode(const ChunkSpec* chunks, size_t count, const uint8_t* data, uint64_t data_start) {
    if (count == 0) return Status::Ok();
    if (gpu_) return EncodeOnGpu(chunks, count, data, data_start);
    if (direct_ && threads_ == 1) return EncodeDirect(chunks, count, data, data_start);
    TakeFrames(count);
    sizes_.assign(count, Status::Aborted("not encoded"));
    if (ready_size_ < count) {
      ready_ = std::make_unique<std::atomic<bool>[]>(count);
      ready_size_ = count;
    }
    for (size_t i = 0; i < count; ++i) ready_[i].store(false, std::memory_order_relaxed);
    emitted_.store(0, std::memory_order_relaxed);
    emit_status_ = Status::Ok();
    emit_status_ok_.store(true);
    pool_.ParallelFor(count, threads_, [&](size_t i, size_t slot) {
      const ChunkSpec& c = chunks[i];
      auto& f = frames_[i];
      size_t need = MaxEncodedSize(c.length);
      if (f.size() < need) f.resize(need);
      sizes_[i] = EncodeChunk(data + (c.offset - data_start), c.length, EncodeParams{c.dtype, nullptr},
                              f.data(), f.size(), *slots_.ws[slot]);
      ready_[i].store(true, std::memory_order_release);
      TryEmitInOrder(chunks, count);
    });
    // Every frame is encoded: emit what the workers left.
    std::lock_guard<std::mutex> l(emit_mu_);
    return EmitReadyLocked(chunks, count);
  }

  // Emits, in order, the frames that are ready, on the calling worker while
  // the others keep encoding: emitting after the whole batch left every
  // other thread idle for its copies (two threads compressed at 1.2-1.5x
  // one). Never waits: a worker that finds the emitter busy goes back to
  // encoding, and whoever holds it re-checks after letting go, so a frame
  // that became ready meanwhile is not left for the end of the batch.
  void TryEmitInOrder(const ChunkSpec* chunks, size_t count) {
    for (;;) {
      if (!emit_mu_.try_lock()) return;
      (void)EmitReadyLocked(chunks, count);
      emit_mu_.unlock();
      const size_t next = emitted_.load(std::memory_order_acquire);
      if (next >= count || !ready_[next].load(std::memory_order_acquire) || !emit_status_ok_.load()) return;
    }
  }

  // With emit_mu_ held: emits frames from emitted_ on while they are ready;
  // stops at the first one that failed to encode and returns its error.
  Status EmitReadyLocked(const ChunkSpec* chunks, size_t count) {
    size_t i = emitted_.load(std::memory_order_relaxed);
    while (emit_status_.ok() && i < count && ready_[i].load(std::memory_order_acquire)) {
      emit_status_ = EmitFrames(chunks + i, 1, i);
      if (emit_status_.ok()) emitted_.store(++i, std::memory_order_release);
    }
    emit_status_ok_.store(emit_status_.ok());
    if (emit_status_.ok() && i < count) return Status::Aborted("frame not encoded");
    return emit_status_;
  }

  // One EncodeBatch call for the batch; a device failure encodes it (and
  // everything after it) on the CPU.
  Status EncodeOnGpu(const ChunkSpec* chunks, size_t count, const uint8_t* data, uint64_t data_start) {
    TakeFrames(count);
    std::vector<GpuEncodeItem> items(count);
    for (size_t i = 0; i < count; ++i) {
      const ChunkSpec& c = chunks[i];
      auto& f = frames_[i];
      size_t need = MaxEncodedSize(c.length);
      if (f.size() < need) f.resize(need);
      items[i].src = data + (c.offset - data_start);
      items[i].n = c.length;
      items[i].dtype = c.dtype;
      items[i].dst = f.data();
      items[i].cap = f.size();
    }
    const uint64_t verify_failures = gpu_->stats().encode_verify_failures;
    Status s = gpu_->EncodeBatch(items.data(), count);
    if (!s.ok()) {
      stats_.gpu_failed_batches++;
      stats_.gpu_failure = s.ToString();
      gpu_ = nullptr;
      return Encode(chunks, count, data, data_start);
    }
    sizes_.clear();
    for (const GpuEncodeItem& it : items)
      sizes_.push_back(it.status.ok() ? Result<size_t>(it.len) : it.status);
    // Frames that did not decode back on the device were encoded again on
    // the CPU by the codec (its items are right); a device that writes such
    // frames is not used again.
    const uint64_t failed = gpu_->stats().encode_verify_failures - verify_failures;
    if (failed) {
      stats_.gpu_verify_failures += failed;
      gpu_ = nullptr;
    }
    stats_.gpu_chunks += count - failed;
    return EmitFrames(chunks, count);
  }

  // Emits frames_[first, first + count) (sizes_) in order; chunks[0] is
  // the chunk of frames_[first].
  Status EmitFrames(const ChunkSpec* chunks, size_t count, size_t first = 0) {
    for (size_t k = 0; k < count; ++k) {
      const size_t i = first + k;
      if (!sizes_[i].ok()) return sizes_[i].status();
      uint8_t len[4];
      StoreLE32(len, static_cast<uint32_t>(*sizes_[i]));
      LMC_RETURN_IF_ERROR(Emit(len, 4));
      LMC_RETURN_IF_ERROR(Emit(frames_[i].data(), *sizes_[i]));
      whole_.Update(frames_[i].data() + kFrameChecksumOffset, 8);
      stats_.bytes_by_dtype[chunks[k].dtype] += chunks[k].length;
      stats_.input_bytes += chunks[k].length;
      ++stats_.chunks;
    }
    return Status::Ok();
  }

  Status WriteTrailer() {
    uint8_t tr[4 + kTrailerSize];
    StoreLE32(tr, 0);  // end marker
    StoreLE64(tr + 4, stats_.input_bytes);
    StoreLE64(tr + 12, whole_.Digest64());
    StoreLE64(tr + 20, stats_.chunks);
    StoreLE32(tr + 28, Xxh3Low32(tr + 4, 24));
    return Emit(tr, sizeof(tr));
  }

  CompressStats& stats() { return stats_; }

  // Output is a vector with capacity for every frame's worst case (the
  // in-memory compressor), grown as frames land: with one thread, frames
  // are encoded straight into it, with no copy and no per-call frame
  // buffers.
  void SetDirect(std::vector<uint8_t>* out, size_t* pos) {
    direct_ = out;
    direct_pos_ = pos;
  }

 private:
  Status EncodeDirect(const ChunkSpec* chunks, size_t count, const uint8_t* data, uint64_t data_start) {
    for (size_t i = 0; i < count; ++i) {
      const ChunkSpec& c = chunks[i];
      size_t& pos = *direct_pos_;
      const size_t need = pos + 4 + MaxEncodedSize(c.length);
      if (direct_->size() < need) direct_->resize(need);
      uint8_t* f = direct_->data() + pos + 4;
      LMC_ASSIGN_OR_RETURN(
          size_t size, EncodeChunk(data + (c.offset - data_start), c.length, EncodeParams{c.dtype, nullptr},
                                   f, need - pos - 4, *slots_.ws[0]));
      StoreLE32(direct_->data() + pos, static_cast<uint32_t>(size));
      pos += 4 + size;
      stats_.output_bytes += 4 + size;
      whole_.Update(f + kFrameChecksumOffset, 8);
      stats_.bytes_by_dtype[c.dtype] += c.length;
      stats_.input_bytes += c.length;
      ++stats_.chunks;
    }
    return Status::Ok();
  }

  Status Emit(const uint8_t* p, size_t n) {
    stats_.output_bytes += n;
    return out_(p, n);
  }

  // At least `count` frame buffers, from the ScratchCache.
  void TakeFrames(size_t count) {
    while (frames_.size() < count) frames_.push_back(ScratchCache::Instance().TakeFrame());
  }

  ThreadPool& pool_;
  size_t threads_;
  Slots slots_;
  WriteFn out_;
  GpuCodec* gpu_;  // null: the CPU (also after a device failure)
  size_t gpu_batch_;
  size_t cpu_batch_;
  hash::Xxh3Stream whole_;
  CompressStats stats_;
  std::vector<std::vector<uint8_t>> frames_;  // reused across batches
  std::vector<Result<size_t>> sizes_;
  // In-order emission while a CPU batch encodes (TryEmitInOrder).
  std::mutex emit_mu_;
  std::unique_ptr<std::atomic<bool>[]> ready_;  // frame i encoded
  size_t ready_size_ = 0;
  std::atomic<size_t> emitted_{0};  // frames of the batch emitted
  Status emit_status_;              // guarded by emit_mu_
  std::atomic<bool> emit_status_ok_{true};
  std::vector<uint8_t>* direct_ = nullptr;
  size_t* direct_pos_ = nullptr;
};

Status CheckChunkSize(uint32_t chunk_size) {
  if (chunk_size == 0 || chunk_size > kMaxChunkSize)
    return Status::InvalidArgument("chunk size must be between 1 byte and 1 GiB");
  return Status::Ok();
}

}  // namespace

Status CompressStream(const ReadFn& in, const WriteFn& out, const CompressOptions& opts,
                      CompressStats* stats) {
  LMC_RETURN_IF_ERROR(CheckChunkSize(opts.chunk_size));
  FrameWriter fw(opts, out);
  LMC_RETURN_IF_ERROR(fw.WriteHeader(opts.chunk_size));

  auto parser = LayoutParser::Create();
  Chunker chunker(ChunkerOptions{opts.chunk_size, ChunkerOptions{}.small_region});
  Window window;
  std::vector<ChunkSpec> pending;
  uint64_t fed = 0;

  auto flush = [&]() -> Status {
    if (pending.empty()) return Status::Ok();
    LMC_RETURN_IF_ERROR(fw.Encode(pending.data(), pending.size(), window.data(), window.start()));
    window.DropBefore(pending.back().offset + pending.back().length);
    pending.clear();
    return Status::Ok();
  };
  // The parser is only a hint: a region that does not continue the cover
  // exactly (a parser bug) retires it, and the rest is coded as bytes.
  uint64_t covered = 0;
  bool parser_ok = true;
  auto take_regions = [&]() {
    if (parser_ok) {
      for (const Region& r : parser->TakeRegions()) {
        if (r.offset != covered || r.length == 0 || r.offset + r.length > fed) {
          parser_ok = false;
          break;
        }
        chunker.Add(r, &pending);
        covered += r.length;
      }
    }
    if (!parser_ok && covered < fed) {
      Region rest;
      rest.offset = covered;
      rest.length = fed - covered;
      chunker.Add(rest, &pending);
      covered = fed;
    }
  };

  for (;;) {
    uint8_t* dst = window.Reserve(kReadSize);
    LMC_ASSIGN_OR_RETURN(size_t got, ReadFull(in, dst, kReadSize));
    window.Commit(got);
    if (got == 0) break;
    fed += got;
    parser->Feed(dst, got);
    take_regions();
    if (pending.size() >= fw.batch()) LMC_RETURN_IF_ERROR(flush());
  }
  parser->Finish();
  take_regions();
  if (covered != fed) {  // the parser left bytes uncovered
    parser_ok = false;
    take_regions();
  }
  chunker.Finish(&pending);
  LMC_RETURN_IF_ERROR(flush());
  LMC_RETURN_IF_ERROR(fw.WriteTrailer());
  fw.stats().format = parser->format();
  if (stats) *stats = std::move(fw.stats());
  return Status::Ok();
}

Status CompressBufferInto(const uint8_t* p, size_t n, const CompressOptions& opts, std::vector<uint8_t>* out,
                          CompressStats* stats) {
  LMC_RETURN_IF_ERROR(CheckChunkSize(opts.chunk_size));
  Format fmt = Format::kUnknown;
  std::vector<ChunkSpec> chunks =
      PlanChunks(p, n, ChunkerOptions{opts.chunk_size, ChunkerOptions{}.small_region}, &fmt);
  // Reserved, not resized: resizing to the worst case zero-filled it on
  // every call (a tenth of a call's time for fp32 weights, which reuse the
  // vector); the vector grows as frames land, within this capacity.
  size_t bound = kHeaderSize + 4 + kTrailerSize;
  for (const ChunkSpec& c : chunks) bound += 4 + MaxEncodedSize(c.length);
  out->reserve(bound);
  size_t pos = 0;
  FrameWriter fw(opts, [out, &pos](const uint8_t* b, size_t k) {
    if (out->size() < pos + k) out->resize(pos + k);
    std::memcpy(out->data() + pos, b, k);
    pos += k;
    return Status::Ok();
  });
  LMC_RETURN_IF_ERROR(fw.WriteHeader(opts.chunk_size));
  fw.SetDirect(out, &pos);
  for (size_t i = 0; i < chunks.size(); i += fw.batch())
    LMC_RETURN_IF_ERROR(fw.Encode(chunks.data() + i, std::min(fw.batch(), chunks.size() - i), p, 0));
  LMC_RETURN_IF_ERROR(fw.WriteTrailer());
  out->resize(pos);
  fw.stats().format = fmt;
  if (stats) *stats = std::move(fw.stats());
  return Status::Ok();
}

Status DecompressStream(const ReadFn& in, const WriteFn& out, const DecompressOptions& opts,
                        DecompressStats* stats) {
  ThreadPool& pool = opts.pool ? *opts.pool : ThreadPool::Shared();
  size_t threads = opts.threads == 0 ? pool.size() : std::min(opts.threads, pool.size());
  if (threads == 0) threads = 1;
  DecompressStats st;
  uint8_t hdr[kHeaderSize];
  LMC_ASSIGN_OR_RETURN(size_t got, ReadFull(in, hdr, kHeaderSize));
  st.input_bytes += got;
  if (got < 4 || std::memcmp(hdr, kMagic, 4) != 0)
    return Status::InvalidArgument("not an .lmc file (bad magic)");
  if (got < kHeaderSize) return Status::Corruption(".lmc file truncated in its header");
  if (LoadLE32(hdr + 12) != Xxh3Low32(hdr, 12)) return Status::Corruption(".lmc header checksum mismatch");
  if (hdr[4] != kVersion)
    return Status::Unsupported(".lmc version " + std::to_string(hdr[4]) +
                               " is newer than this lmc; upgrade lmcfs");

  Slots slots(threads);
  hash::Xxh3Stream whole;
  GpuCodec* gpu = opts.gpu;
  const size_t batch = gpu ? GpuBatchChunks(threads, LoadLE32(hdr + 8)) : threads * kChunksPerThread;
  std::vector<std::vector<uint8_t>> frames(batch), outs(batch);
  std::vector<Result<size_t>> sizes;
  size_t n_pending = 0;

  // One DecodeBatch call; false when the device failed (then the CPU decodes
  // this batch and the rest).
  auto decode_on_gpu = [&]() -> bool {
    std::vector<GpuDecodeItem> items(n_pending);
    for (size_t i = 0; i < n_pending; ++i) {
      items[i].frame = frames[i].data();
      items[i].len = frames[i].size();
      items[i].dst = outs[i].data();
      items[i].cap = outs[i].size();
    }
    Status s = gpu->DecodeBatch(items.data(), n_pending);
    if (!s.ok()) {
      st.gpu_failed_batches++;
      st.gpu_failure = s.ToString();
      gpu = nullptr;
      return false;
    }
    for (size_t i = 0; i < n_pending; ++i)
      sizes[i] = items[i].status.ok() ? Result<size_t>(items[i].out_len) : items[i].status;
    st.gpu_chunks += n_pending;
    return true;
  };
  auto flush = [&]() -> Status {
    if (n_pending == 0) return Status::Ok();
    sizes.assign(n_pending, Status::Aborted("not decoded"));
    if (!gpu || !decode_on_gpu()) {
      pool.ParallelFor(n_pending, threads, [&](size_t i, size_t slot) {
        sizes[i] = DecodeChunk(frames[i].data(), frames[i].size(), nullptr, 0, outs[i].data(), outs[i].size(),
                               *slots.ws[slot]);
      });
    }
    for (size_t i = 0; i < n_pending; ++i) {
      if (!sizes[i].ok())
        return Status(sizes[i].status().code() == Code::kCorruption
                          ? Status::Corruption("chunk " + std::to_string(st.chunks) + ": " +
                                               sizes[i].status().message())
                          : sizes[i].status());
      whole.Update(frames[i].data() + kFrameChecksumOffset, 8);
      LMC_RETURN_IF_ERROR(out(outs[i].data(), *sizes[i]));
      st.output_bytes += *sizes[i];
      ++st.chunks;
    }
    n_pending = 0;
    return Status::Ok();
  };

  for (;;) {
    uint8_t len_buf[4];
    LMC_ASSIGN_OR_RETURN(got, ReadFull(in, len_buf, 4));
    st.input_bytes += got;
    if (got < 4) return Status::Corruption(".lmc file truncated (no end marker): incomplete copy?");
    uint32_t len = LoadLE32(len_buf);
    if (len == 0) break;
    if (len > MaxEncodedSize(kMaxChunkSize)) return Status::Corruption(".lmc frame length too large");
    auto& f = frames[n_pending];
    f.resize(len);
    LMC_ASSIGN_OR_RETURN(got, ReadFull(in, f.data(), len));
    st.input_bytes += got;
    if (got < len) return Status::Corruption(".lmc file truncated inside a frame");
    LMC_ASSIGN_OR_RETURN(FrameInfo fi, ReadFrameInfo(f.data(), len));
    if (fi.frame_size != len) return Status::Corruption(".lmc frame length does not match its header");
    if (fi.xor_delta) return Status::Corruption(".lmc frame is a delta, which .lmc files never hold");
    outs[n_pending].resize(fi.decoded_size);
    if (++n_pending == batch) LMC_RETURN_IF_ERROR(flush());
  }
  LMC_RETURN_IF_ERROR(flush());
  uint8_t tr[kTrailerSize];
  LMC_ASSIGN_OR_RETURN(got, ReadFull(in, tr, kTrailerSize));
  st.input_bytes += got;
  if (got < kTrailerSize) return Status::Corruption(".lmc file truncated in its trailer");
  if (LoadLE32(tr + 24) != Xxh3Low32(tr, 24)) return Status::Corruption(".lmc trailer checksum mismatch");
  if (LoadLE64(tr) != st.output_bytes || LoadLE64(tr + 16) != st.chunks)
    return Status::Corruption(".lmc trailer size does not match the frames (chunks lost?)");
  if (LoadLE64(tr + 8) != whole.Digest64())
    return Status::Corruption(".lmc file checksum mismatch (frames reordered or replaced)");
  uint8_t extra;
  LMC_ASSIGN_OR_RETURN(got, ReadFull(in, &extra, 1));
  if (got != 0) return Status::Corruption(".lmc file has trailing data after its trailer");
  if (stats) *stats = st;
  return Status::Ok();
}

std::vector<ChunkSpec> PlanChunks(const uint8_t* p, size_t n, const ChunkerOptions& opts, Format* format) {
  std::vector<ChunkSpec> out;
  Chunker chunker(opts);
  uint64_t covered = 0;
  bool ok = true;
  for (const Region& r : ParseLayout(p, n, format)) {
    if (!ok || r.offset != covered || r.length == 0 || r.offset + r.length > n) {
      ok = false;
      break;
    }
    chunker.Add(r, &out);
    covered += r.length;
  }
  if (covered < n) {
    Region rest;
    rest.offset = covered;
    rest.length = n - covered;
    chunker.Add(rest, &out);
  }
  chunker.Finish(&out);
  return out;
}

Result<std::vector<uint8_t>> CompressBuffer(const uint8_t* p, size_t n, const CompressOptions& opts,
                                            CompressStats* stats) {
  std::vector<uint8_t> outv;
  LMC_RETURN_IF_ERROR(CompressBufferInto(p, n, opts, &outv, stats));
  return outv;
}

Status DecompressBufferInto(const uint8_t* p, size_t n, const DecompressOptions& opts,
                            std::vector<uint8_t>* out, DecompressStats* stats) {
  // Pass 1: walk and check the frame headers to place every chunk.
  if (n < 4 || std::memcmp(p, kMagic, 4) != 0) return Status::InvalidArgument("not an .lmc file (bad magic)");
  if (n < kHeaderSize) return Status::Corruption(".lmc file truncated in its header");
  if (LoadLE32(p + 12) != Xxh3Low32(p, 12)) return Status::Corruption(".lmc header checksum mismatch");
  if (p[4] != kVersion)
    return Status::Unsupported(".lmc version " + std::to_string(p[4]) +
                               " is newer than this lmc; upgrade lmcfs");
  struct Job {
    size_t frame, len;
    uint64_t out, decoded;
  };
  std::vector<Job> jobs;
  hash::Xxh3Stream whole;
  size_t pos = kHeaderSize;
  uint64_t total = 0;
  for (;;) {
    if (n - pos < 4) return Status::Corruption(".lmc file truncated (no end marker): incomplete copy?");
    uint32_t len = LoadLE32(p + pos);
    pos += 4;
    if (len == 0) break;
    if (len > n - pos) return Status::Corruption(".lmc file truncated inside a frame");
    LMC_ASSIGN_OR_RETURN(FrameInfo fi, ReadFrameInfo(p + pos, len));
    if (fi.frame_size != len) return Status::Corruption(".lmc frame length does not match its header");
    if (fi.xor_delta) return Status::Corruption(".lmc frame is a delta, which .lmc files never hold");
    jobs.push_back({pos, len, total, fi.decoded_size});
    whole.Update(p + pos + kFrameChecksumOffset, 8);
    total += fi.decoded_size;
    pos += len;
  }
  if (n - pos < kTrailerSize) return Status::Corruption(".lmc file truncated in its trailer");
  const uint8_t* tr = p + pos;
  if (LoadLE32(tr + 24) != Xxh3Low32(tr, 24)) return Status::Corruption(".lmc trailer checksum mismatch");
  if (LoadLE64(tr) != total || LoadLE64(tr + 16) != jobs.size())
    return Status::Corruption(".lmc trailer size does not match the frames (chunks lost?)");
  if (LoadLE64(tr + 8) != whole.Digest64())
    return Status::Corruption(".lmc file checksum mismatch (frames reordered or replaced)");
  if (pos + kTrailerSize != n) return Status::Corruption(".lmc file has trailing data after its trailer");

  // Pass 2: decode every frame straight into place: in parallel on the
  // CPU, or in one DecodeBatch call (the codec cuts it into device batches).
  out->resize(total);
  DecompressStats st;
  st.input_bytes = n;
  st.output_bytes = total;
  st.chunks = jobs.size();
  std::vector<Status> errs(jobs.size());
  bool decoded = false;
  if (opts.gpu && !jobs.empty()) {
    std::vector<GpuDecodeItem> items(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      items[i].frame = p + jobs[i].frame;
      items[i].len = jobs[i].len;
      items[i].dst = out->data() + jobs[i].out;
      items[i].cap = static_cast<size_t>(jobs[i].decoded);
    }
    Status s = opts.gpu->DecodeBatch(items.data(), items.size());
    if (s.ok()) {
      decoded = true;
      st.gpu_chunks = jobs.size();
      for (size_t i = 0; i < jobs.size(); ++i)
        if (!items[i].status.ok())
          errs[i] = Status::Corruption("chunk " + std::to_string(i) + ": " + items[i].status.message());
    } else {
      st.gpu_failed_batches = 1;
      st.gpu_failure = s.ToString();
    }
  }
  if (!decoded) {
    ThreadPool& pool = opts.pool ? *opts.pool : ThreadPool::Shared();
    size_t threads =
        std::max<size_t>(1, opts.threads == 0 ? pool.size() : std::min(opts.threads, pool.size()));
    Slots slots(threads);
    pool.ParallelFor(jobs.size(), threads, [&](size_t i, size_t slot) {
      const Job& j = jobs[i];
      Result<size_t> r = DecodeChunk(p + j.frame, j.len, nullptr, 0, out->data() + j.out,
                                     static_cast<size_t>(total - j.out), *slots.ws[slot]);
      if (!r.ok()) errs[i] = Status::Corruption("chunk " + std::to_string(i) + ": " + r.status().message());
    });
  }
  for (const Status& e : errs) LMC_RETURN_IF_ERROR(e);
  if (stats) *stats = std::move(st);
  return Status::Ok();
}

Result<std::vector<uint8_t>> DecompressBuffer(const uint8_t* p, size_t n, const DecompressOptions& opts) {
  std::vector<uint8_t> outv;
  LMC_RETURN_IF_ERROR(DecompressBufferInto(p, n, opts, &outv));
  return outv;
}

}  // namespace lmc
