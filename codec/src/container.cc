#include "lmc/container.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include <xxhash.h>

#include "frame_format.h"
#include "lmc/codec.h"
#include "lmc/thread_pool.h"

namespace lmc {
namespace {

using frame::GetU32;
using frame::GetU64;
using frame::PutU32;
using frame::PutU64;

// docs/FORMAT.md, ".lmc container".
constexpr uint8_t kMagic[4] = {'L', 'M', 'C', 'Z'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 16;
constexpr size_t kTrailerSize = 28;  // size u64, xxh3 u64, chunks u64, crc u32
constexpr size_t kReadSize = 8 << 20;
constexpr size_t kChunksPerThread = 4;  // chunks in flight per thread per batch

uint32_t Crc32Of(const uint8_t* p, size_t n) { return static_cast<uint32_t>(XXH3_64bits(p, n)); }

// Per-slot codec scratch for one Compress/Decompress call.
struct Slots {
  explicit Slots(size_t n) : ws(n) {
    for (auto& w : ws) w = std::make_unique<Workspace>();
  }
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

struct XxhState {
  XxhState() : s(XXH3_createState()) { XXH3_64bits_reset(s); }
  ~XxhState() { XXH3_freeState(s); }
  void Update(const uint8_t* p, size_t n) { XXH3_64bits_update(s, p, n); }
  uint64_t Digest() const { return XXH3_64bits_digest(s); }
  XXH3_state_t* s;
};

}  // namespace

bool IsContainer(const uint8_t* p, size_t n) { return n >= 4 && std::memcmp(p, kMagic, 4) == 0; }

Status CompressStream(const ReadFn& in, const WriteFn& out, const CompressOptions& opts,
                      CompressStats* stats) {
  if (opts.chunk_size == 0 || opts.chunk_size > kMaxChunkSize)
    return Status::InvalidArgument("chunk size must be between 1 byte and 1 GiB");
  ThreadPool& pool = opts.pool ? *opts.pool : ThreadPool::Shared();
  size_t threads = opts.threads == 0 ? pool.size() : std::min(opts.threads, pool.size() + 0);
  if (threads == 0) threads = 1;
  CompressStats st;
  uint64_t out_bytes = 0;
  auto emit = [&](const uint8_t* p, size_t n) -> Status {
    out_bytes += n;
    return out(p, n);
  };

  uint8_t hdr[kHeaderSize] = {};
  std::memcpy(hdr, kMagic, 4);
  hdr[4] = kVersion;
  PutU32(hdr + 8, opts.chunk_size);
  PutU32(hdr + 12, Crc32Of(hdr, 12));
  LMC_RETURN_IF_ERROR(emit(hdr, kHeaderSize));

  auto parser = LayoutParser::Create();
  Chunker chunker(ChunkerOptions{opts.chunk_size, ChunkerOptions{}.small_region});
  Slots slots(threads);
  XxhState whole;

  std::vector<uint8_t> window;  // input bytes from file offset window_start
  uint64_t window_start = 0;
  std::vector<ChunkSpec> pending;
  std::vector<std::vector<uint8_t>> frames;
  std::vector<Result<size_t>> sizes;
  const size_t batch = threads * kChunksPerThread;

  // Encodes `pending` in parallel and writes the frames in order.
  auto flush = [&]() -> Status {
    if (pending.empty()) return Status::Ok();
    if (frames.size() < pending.size()) frames.resize(pending.size());
    sizes.assign(pending.size(), Status::Aborted("not encoded"));
    pool.ParallelFor(pending.size(), threads, [&](size_t i, size_t slot) {
      const ChunkSpec& c = pending[i];
      auto& f = frames[i];
      size_t need = MaxEncodedSize(c.length);
      if (f.size() < need) f.resize(need);
      const uint8_t* src = window.data() + (c.offset - window_start);
      sizes[i] = EncodeChunk(src, c.length, EncodeParams{c.dtype, nullptr}, f.data(), f.size(),
                             *slots.ws[slot]);
    });
    for (size_t i = 0; i < pending.size(); ++i) {
      if (!sizes[i].ok()) return sizes[i].status();
      uint8_t len[4];
      PutU32(len, static_cast<uint32_t>(*sizes[i]));
      LMC_RETURN_IF_ERROR(emit(len, 4));
      LMC_RETURN_IF_ERROR(emit(frames[i].data(), *sizes[i]));
      st.bytes_by_dtype[pending[i].dtype] += pending[i].length;
      ++st.chunks;
    }
    uint64_t end = pending.back().offset + pending.back().length;
    window.erase(window.begin(), window.begin() + static_cast<ptrdiff_t>(end - window_start));
    window_start = end;
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
        if (r.offset != covered || r.length == 0 || r.offset + r.length > st.input_bytes) {
          parser_ok = false;
          break;
        }
        chunker.Add(r, &pending);
        covered += r.length;
      }
    }
    if (!parser_ok && covered < st.input_bytes) {
      Region rest;
      rest.offset = covered;
      rest.length = st.input_bytes - covered;
      chunker.Add(rest, &pending);
      covered = st.input_bytes;
    }
  };

  for (;;) {
    size_t old = window.size();
    window.resize(old + kReadSize);
    LMC_ASSIGN_OR_RETURN(size_t got, ReadFull(in, window.data() + old, kReadSize));
    window.resize(old + got);
    if (got == 0) break;
    whole.Update(window.data() + old, got);
    st.input_bytes += got;
    parser->Feed(window.data() + old, got);
    take_regions();
    if (pending.size() >= batch) LMC_RETURN_IF_ERROR(flush());
  }
  parser->Finish();
  take_regions();
  if (covered != st.input_bytes) {  // the parser left bytes uncovered
    parser_ok = false;
    take_regions();
  }
  chunker.Finish(&pending);
  LMC_RETURN_IF_ERROR(flush());

  uint8_t tr[4 + kTrailerSize];
  PutU32(tr, 0);  // end marker
  PutU64(tr + 4, st.input_bytes);
  PutU64(tr + 12, whole.Digest());
  PutU64(tr + 20, st.chunks);
  PutU32(tr + 28, Crc32Of(tr + 4, 24));
  LMC_RETURN_IF_ERROR(emit(tr, sizeof(tr)));
  st.format = parser->format();
  st.output_bytes = out_bytes;
  if (stats) *stats = std::move(st);
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
  if (GetU32(hdr + 12) != Crc32Of(hdr, 12)) return Status::Corruption(".lmc header checksum mismatch");
  if (hdr[4] != kVersion)
    return Status::Unsupported(".lmc version " + std::to_string(hdr[4]) +
                               " is newer than this lmc; upgrade lmcfs");

  Slots slots(threads);
  XxhState whole;
  const size_t batch = threads * kChunksPerThread;
  std::vector<std::vector<uint8_t>> frames(batch), outs(batch);
  std::vector<Result<size_t>> sizes;
  size_t n_pending = 0;

  auto flush = [&]() -> Status {
    if (n_pending == 0) return Status::Ok();
    sizes.assign(n_pending, Status::Aborted("not decoded"));
    pool.ParallelFor(n_pending, threads, [&](size_t i, size_t slot) {
      sizes[i] = DecodeChunk(frames[i].data(), frames[i].size(), nullptr, 0, outs[i].data(),
                             outs[i].size(), *slots.ws[slot]);
    });
    for (size_t i = 0; i < n_pending; ++i) {
      if (!sizes[i].ok())
        return Status(sizes[i].status().code() == Code::kCorruption
                          ? Status::Corruption("chunk " + std::to_string(st.chunks) + ": " +
                                               sizes[i].status().message())
                          : sizes[i].status());
      whole.Update(outs[i].data(), *sizes[i]);
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
    uint32_t len = GetU32(len_buf);
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
  if (GetU32(tr + 24) != Crc32Of(tr, 24)) return Status::Corruption(".lmc trailer checksum mismatch");
  if (GetU64(tr) != st.output_bytes || GetU64(tr + 16) != st.chunks)
    return Status::Corruption(".lmc trailer size does not match the frames (chunks lost?)");
  if (GetU64(tr + 8) != whole.Digest()) return Status::Corruption(".lmc whole-file checksum mismatch");
  uint8_t extra;
  LMC_ASSIGN_OR_RETURN(got, ReadFull(in, &extra, 1));
  if (got != 0) return Status::Corruption(".lmc file has trailing data after its trailer");
  if (stats) *stats = st;
  return Status::Ok();
}

std::vector<ChunkSpec> PlanChunks(const uint8_t* p, size_t n, const ChunkerOptions& opts,
                                  Format* format) {
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

namespace {
ReadFn MemReader(const uint8_t* p, size_t n) {
  auto pos = std::make_shared<size_t>(0);
  return [p, n, pos](uint8_t* buf, size_t want) -> Result<size_t> {
    size_t k = std::min(want, n - *pos);
    std::memcpy(buf, p + *pos, k);
    *pos += k;
    return k;
  };
}
}  // namespace

Result<std::vector<uint8_t>> CompressBuffer(const uint8_t* p, size_t n, const CompressOptions& opts,
                                            CompressStats* stats) {
  std::vector<uint8_t> outv;
  outv.reserve(n / 2 + 64);
  LMC_RETURN_IF_ERROR(CompressStream(
      MemReader(p, n),
      [&](const uint8_t* b, size_t k) {
        outv.insert(outv.end(), b, b + k);
        return Status::Ok();
      },
      opts, stats));
  return outv;
}

Result<std::vector<uint8_t>> DecompressBuffer(const uint8_t* p, size_t n,
                                              const DecompressOptions& opts) {
  std::vector<uint8_t> outv;
  LMC_RETURN_IF_ERROR(DecompressStream(
      MemReader(p, n),
      [&](const uint8_t* b, size_t k) {
        outv.insert(outv.end(), b, b + k);
        return Status::Ok();
      },
      opts));
  return outv;
}

}  // namespace lmc
