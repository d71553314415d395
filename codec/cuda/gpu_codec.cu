// The batched GPU codec (lmc/gpu.h, GpuCodec): the pipeline of
// codec/src/gpu_pipeline.h on a CUDA backend. Each kernel body runs one
// thread per index; the histogram is the one CUDA-only kernel (shared-memory
// counts, one set per warp, merged into the stream's histogram).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "gpu_pipeline.h"

namespace lmc {
namespace gpu {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::IOError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

template <typename Body, typename Args>
__global__ void BodyKernel(Args a, size_t count) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < count) Body::Run(a, i);
}

// XXH3 block deltas, 16 threads per 1024-byte block (one per stripe), the
// stripes' sums reduced with shuffles: reads are coalesced, the secret is in
// shared memory. Same result as Body::Run (Xxh3BlockDelta).
template <typename Body, typename Args>
__global__ void HashKernel(Args a, size_t blocks, uint64_t* deltas) {
  __shared__ uint64_t secret[hd::xxh3_detail::kSecretLen / 8];
  if (threadIdx.x < hd::xxh3_detail::kSecretLen / 8) {
    const uint8_t* s = hd::xxh3_detail::Secret() + 8 * threadIdx.x;
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(s[b]) << (8 * b);
    secret[threadIdx.x] = v;
  }
  __syncthreads();
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t blk = t / 16;
  const unsigned stripe = t % 16;
  uint64_t d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t* p = blk < blocks ? Body::Block(a, blk) : nullptr;
  if (p) {
    const uint8_t* q = p + 64 * stripe;
    const bool aligned = (reinterpret_cast<uintptr_t>(q) & 15) == 0;
    uint64_t v[8];
    if (aligned) {
      for (int i = 0; i < 4; ++i) {
        const uint4 w = reinterpret_cast<const uint4*>(q)[i];
        v[2 * i] = static_cast<uint64_t>(w.y) << 32 | w.x;
        v[2 * i + 1] = static_cast<uint64_t>(w.w) << 32 | w.z;
      }
    } else {
      for (int i = 0; i < 8; ++i) v[i] = hd::xxh3_detail::Load64(q + 8 * i);
    }
    for (int i = 0; i < 8; ++i) {
      const uint64_t k = v[i] ^ secret[stripe + i];
      d[i ^ 1] += v[i];
      d[i] += (k & 0xffffffffu) * (k >> 32);
    }
  }
  for (int off = 8; off >= 1; off >>= 1)
    for (int i = 0; i < 8; ++i) d[i] += __shfl_xor_sync(0xffffffffu, d[i], off);
  if (p && stripe == 0)
    for (int i = 0; i < 8; ++i) deltas[8 * blk + i] = d[i];
}

// The XXH3 chain with 8 threads an item, thread l carrying accumulator lane
// l (the scramble works lane by lane); lane 0 gathers the lanes and
// finishes. Same result as Body::Run (RunChain).
template <typename Body, typename Args>
__global__ void ChainKernel(Args a, size_t count) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t i = t / 8;
  const unsigned lane = t % 8;
  const uint8_t* p = nullptr;
  uint64_t n = 0, hash0 = 0;
  const bool live = i < count && Body::Item(a, i, &p, &n, &hash0);
  uint64_t init[8];
  hd::Xxh3InitAcc(init);
  uint64_t acc = init[lane];
  const uint64_t key = hd::xxh3_detail::Load64(hd::xxh3_detail::Secret() + hd::xxh3_detail::kSecretLen -
                                               hd::kXxh3StripeLen + 8 * lane);
  const size_t nb = live ? hd::Xxh3FullBlocks(n) : 0;
  const uint64_t* d = a.deltas + 8 * hash0 + lane;
  for (size_t k = 0; k < nb; ++k) {
    acc += d[8 * k];
    acc ^= acc >> 47;
    acc ^= key;
    acc *= hd::xxh3_detail::kP32_1;
  }
  uint64_t all[8];
  const unsigned base = threadIdx.x & ~7u;
  for (int l = 0; l < 8; ++l) all[l] = __shfl_sync(0xffffffffu, acc, base % 32 + l);
  if (live && lane == 0) Body::Done(a, i, hd::Xxh3FinishLong(all, p, n));
}

// Huffman decoding, one thread per block of symbols, kDecodeGroup threads a
// CUDA block, all of one stream: the stream's table is loaded into shared
// memory once. Same result as HuffDecodeBody<Mode>::Run; one instantiation
// per DecodeMode, each over its own range of tasks.
template <int Mode>
__global__ void HuffDecodeKernel(DecArgs a) {
  __shared__ uint16_t single[hd::kHuffTableSize];
  const size_t i = a.task_first + blockIdx.x * static_cast<size_t>(kDecodeGroup) + threadIdx.x;
  const uint32_t t = a.task_huff[a.task_first + blockIdx.x * static_cast<uint64_t>(kDecodeGroup)];
  const DecStream& s = a.streams[a.huff_streams[t]];
  // One decision for the block: another block may mark the frame bad
  // meanwhile, and threads that read the flag apart would leave parts of the
  // table unloaded for the others.
  const bool bad = __syncthreads_or(a.frames[s.frame].bad != 0) != 0;
  if (!bad) {
    const uint16_t* gs = a.single + uint64_t{t} * hd::kHuffTableSize;
    for (int t = threadIdx.x; t < hd::kHuffTableSize; t += blockDim.x) single[t] = gs[t];
  }
  __syncthreads();
  if (!bad) DecodeTask<Mode>(a, i, single);
}

// rANS decoding, one warp a stream (kRansWarps streams a CUDA block), lane
// j carrying state j of K (4 or 32): each round the K lanes decode symbols
// r .. r+K-1 together, and those whose state fell below 2^16 take the next
// words in lane order, which is the scalar order (a ballot of the lanes
// that need one, each taking the word at its rank among them). The slot ->
// symbol table is built in shared memory from the stream's cumulative
// frequencies. Same result as RansDecodeBody::Run.
constexpr unsigned kRansWarps = 4;

__global__ void RansDecodeKernel(DecArgs a) {
  __shared__ uint8_t slot_symbol[kRansWarps][hd::kRansProbScale];
  __shared__ uint16_t freq[kRansWarps][256], cum[kRansWarps][256];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t r = blockIdx.x * static_cast<size_t>(kRansWarps) + warp;
  if (r >= a.nr) return;  // the whole warp: r is the same for its lanes
  const DecStream& s = a.streams[a.rans_streams[r]];
  DecFrame& f = a.frames[s.frame];
  // Another warp may mark the frame bad meanwhile: the lanes decide as one,
  // since the ballots below need the whole warp.
  if (__any_sync(0xffffffffu, f.bad != 0)) return;
  const RansTable& t = a.rans[r];
  for (unsigned c = lane; c < 256; c += 32) {
    freq[warp][c] = t.freq[c];
    cum[warp][c] = t.cum[c];
  }
  __syncwarp();
  for (unsigned slot = lane; slot < hd::kRansProbScale; slot += 32)
    slot_symbol[warp][slot] = hd::RansSymbolAt(cum[warp], slot);
  __syncwarp();
  const uint32_t k = t.states;
  const uint8_t* words = f.frame + s.off + t.start.words;
  uint8_t* out = a.dbuf + s.buf;
  uint32_t x = lane < k ? t.start.x[lane] : hd::kRansLow;
  uint64_t w = 0;
  bool ok = true;
  for (uint64_t i0 = 0; i0 < s.n; i0 += k) {
    const bool live = lane < k && i0 + lane < s.n;
    bool need = false;
    if (live) need = hd::RansStep(x, slot_symbol[warp], freq[warp], cum[warp], out + i0 + lane);
    const unsigned mask = __ballot_sync(0xffffffffu, need);
    if (need) {
      const uint64_t at = w + __popc(mask & ((1u << lane) - 1));
      if (at < t.start.nwords) {
        x = x << 16 | hd::RansWord(words, at);
      } else {
        ok = false;
      }
    }
    w += __popc(mask);
  }
  ok = ok && x == hd::kRansLow && w == t.start.nwords;
  if (!__all_sync(0xffffffffu, ok) && lane == 0) MarkBad(f);
}

// Paired chunks' miss counts, a warp's summed with shuffles before lane
// 0's atomics: a warp's 32 threads lie in one tile (kTileElems /
// kPerThread threads, a multiple of 32), so in one chunk, and count is a
// whole number of tiles. Same result as PairedMissesBody::Run.
__global__ void PairedMissesKernel(EncArgs a, size_t count) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  uint32_t chunk = 0, predicted = 0, widened = 0;
  const bool live = i < count && PairedMissesBody::Count(a, i, &chunk, &predicted, &widened);
  for (unsigned off = 16; off >= 1; off >>= 1) {
    predicted += __shfl_xor_sync(0xffffffffu, predicted, off);
    widened += __shfl_xor_sync(0xffffffffu, widened, off);
  }
  if (live && threadIdx.x % 32 == 0) {
    if (predicted) atomicAdd(&a.chunks[chunk].misses_predicted, predicted);
    if (widened) atomicAdd(&a.chunks[chunk].misses_widened, widened);
  }
}
static_assert((kTileElems / kPerThread) % 32 == 0);

// rANS encoding, one warp a stream (kRansWarps streams a CUDA block), lane
// j carrying state j of K (4 or 32), from the last round down: the lanes
// whose state shifts out a word write it at their rank among them (a
// ballot), below the words of the rounds after, which is the order the
// decoder takes them in. The frequencies and their running sums are in
// shared memory (a lane sums 8 symbols, the lanes' sums scanned with
// shuffles). Launched for every stream; the warps of streams not coded
// rANS return at once. Same result as RansEncodeBody::Run.
__global__ void RansEncodeKernel(EncArgs a) {
  __shared__ uint16_t freq[kRansWarps][256], cum[kRansWarps][256];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t i = blockIdx.x * static_cast<size_t>(kRansWarps) + warp;
  if (i >= a.ns) return;  // the whole warp
  RansEncodeSpan sp;
  if (!RansEncodeBegin(a, i, &sp)) return;  // the whole warp: the stream's coder
  uint32_t f8[8], own = 0;
  for (int c = 0; c < 8; ++c) {
    f8[c] = sp.freq[8 * lane + c];
    own += f8[c];
  }
  uint32_t below = own;  // inclusive scan of the lanes' sums
  for (unsigned d = 1; d < 32; d <<= 1) {
    const uint32_t v = __shfl_up_sync(0xffffffffu, below, d);
    if (lane >= d) below += v;
  }
  below -= own;
  for (int c = 0; c < 8; ++c) {
    freq[warp][8 * lane + c] = static_cast<uint16_t>(f8[c]);
    cum[warp][8 * lane + c] = static_cast<uint16_t>(below);
    below += f8[c];
  }
  __syncwarp();
  EncStream& s = a.streams[i];
  const uint64_t n = s.n;
  const uint8_t* src = a.sbuf + s.buf;
  uint8_t* end = sp.buf + RansScratchBytes(s);
  const uint32_t k = sp.states;
  uint32_t x = hd::kRansLow;
  uint64_t words = 0;
  bool ok = true;
  for (uint64_t r = (n - 1) / k * k;; r -= k) {
    const bool live = lane < k && r + lane < n;
    const uint8_t sym = live ? src[r + lane] : 0;
    const uint32_t f = freq[warp][sym];
    const bool need = live && hd::RansEncodeNeedsWord(x, f);
    const unsigned mask = __ballot_sync(0xffffffffu, need);
    const uint32_t c = __popc(mask);
    if (2 * (words + c) > sp.room) {  // the same for every lane
      ok = false;
      break;
    }
    if (need) {
      RansPut(end - 2 * (words + c - __popc(mask & ((1u << lane) - 1))), x, 2);
      x >>= 16;
    }
    if (live) x = hd::RansEncodeCode(x, f, cum[warp][sym]);
    words += c;
    if (r == 0) break;
  }
  // Every lane has read s (RansEncodeBegin, n, end) before lane 0 writes it.
  __syncwarp();
  const uint64_t size = RansEncodedSize(sp, n, words, ok);
  if (lane == 0) RansEncodeSet(s, size);
  if (!size) return;  // raw
  uint8_t* p = end - size;
  if (lane < k) RansPut(p + sp.header + 4 * lane, x, 4);
  if (lane == 0) hd::RansWriteHeader(sp.freq, sp.k, p);
}

template <typename Body>
struct HuffDecodeMode {
  static constexpr int value = -1;
};
template <int Mode>
struct HuffDecodeMode<HuffDecodeBody<Mode>> {
  static constexpr int value = Mode;
};

constexpr uint32_t kHistTile = 1 << 16;
constexpr int kHistCopies = 8;

__global__ void HistKernel(const EncStream* streams, uint32_t* hist, const uint64_t* tiles,
                           const uint8_t* sbuf) {
  __shared__ uint32_t h[kHistCopies][256];
  for (int t = threadIdx.x; t < kHistCopies * 256; t += blockDim.x) h[t / 256][t % 256] = 0;
  __syncthreads();
  const uint64_t tile = tiles[blockIdx.x];
  const uint64_t si = tile >> 40;
  const EncStream& s = streams[si];
  const uint64_t off = tile & ((uint64_t{1} << 40) - 1);
  const uint64_t end = off + kHistTile < s.n ? off + kHistTile : s.n;
  uint32_t* mine = h[(threadIdx.x / 32) % kHistCopies];
  const uint8_t* p = sbuf + s.buf;  // 16-aligned; off a multiple of kHistTile
  // Four bytes a thread a step (p + off is 16-aligned), counted in this
  // warp's copy of the table. (Aggregating equal bytes across a warp with
  // __match_any_sync was measured 3.5x slower: docs/BENCHMARKS.md.)
  for (uint64_t k = off + 4 * threadIdx.x; k < end; k += 4 * blockDim.x) {
    if (k + 4 <= end) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(p + k);
      atomicAdd(&mine[w & 0xff], 1u);
      atomicAdd(&mine[(w >> 8) & 0xff], 1u);
      atomicAdd(&mine[(w >> 16) & 0xff], 1u);
      atomicAdd(&mine[w >> 24], 1u);
    } else {
      for (uint64_t b = k; b < end; ++b) atomicAdd(&mine[p[b]], 1u);
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < 256; t += blockDim.x) {
    uint32_t v = 0;
    for (int c = 0; c < kHistCopies; ++c) v += h[c][t];
    if (v) atomicAdd(&hist[256 * si + t], v);
  }
}

// Device memory as slabs handed out by a bump pointer; Reset recycles them.
class CudaBackend {
 public:
  CudaBackend() = default;
  CudaBackend(CudaBackend&& o) noexcept { *this = std::move(o); }
  CudaBackend& operator=(CudaBackend&& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(slabs_, o.slabs_);
    std::swap(pinned_, o.pinned_);
    std::swap(events_, o.events_);
    std::swap(name_, o.name_);
    std::swap(profile_, o.profile_);
    std::swap(prof_, o.prof_);
    std::swap(times_, o.times_);
    std::swap(staging_, o.staging_);
    std::swap(staging_size_, o.staging_size_);
    std::swap(device_, o.device_);
    std::swap(turn_, o.turn_);
    std::swap(exact_, o.exact_);
    std::swap(entry_, o.entry_);
    std::swap(alloc_error_, o.alloc_error_);
    return *this;
  }
  ~CudaBackend() {
    for (auto& s : slabs_) cudaFree(s.base);
    for (int k = 0; k < 2; ++k) {
      if (pinned_[k]) cudaFreeHost(pinned_[k]);
      if (events_[k]) cudaEventDestroy(events_[k]);
    }
    if (staging_) cudaFreeHost(staging_);
    if (entry_) cudaEventDestroy(entry_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(int device) {
    device_ = device;
    // LMC_GPU_EXACT_ALLOC=1 (scripts/gpu_check.sh's sanitizer steps): one
    // cudaMalloc an array, freed at Reset, so that compute-sanitizer's
    // memcheck sees each array's bounds (inside a slab it cannot).
    const char* exact = std::getenv("LMC_GPU_EXACT_ALLOC");
    exact_ = exact && std::strcmp(exact, "1") == 0;
    LMC_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "set device"));
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"));
    for (int k = 0; k < 2; ++k) {
      LMC_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&pinned_[k], kPinned), "pinned buffer"));
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&events_[k], cudaEventDisableTiming), "event"));
    }
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&entry_, cudaEventDisableTiming), "event"));
    cudaDeviceProp p;
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&p, device), "device properties"));
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    name_ = "CUDA " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", " + p.name;
    return Status::Ok();
  }

  uint8_t* Alloc(size_t n) {
    if (exact_) {
      Slab s;
      s.size = s.used = n ? n : 1;
      if (const cudaError_t e = cudaMalloc(&s.base, s.size); e != cudaSuccess) {
        cudaGetLastError();
        alloc_error_ = e;
        return nullptr;
      }
      slabs_.push_back(s);
      return s.base;
    }
    n = (n + 255) & ~size_t{255};
    if (n == 0) n = 256;
    for (auto& s : slabs_) {
      if (s.size - s.used >= n) {
        uint8_t* p = s.base + s.used;
        s.used += n;
        return p;
      }
    }
    Slab s;
    s.size = std::max(n, kSlab);
    if (const cudaError_t e = cudaMalloc(&s.base, s.size); e != cudaSuccess) {
      // Not sticky when it is the allocation's own; an earlier kernel's
      // fault (sticky) shows again at the next Sync, which reports it.
      cudaGetLastError();
      alloc_error_ = e;
      return nullptr;
    }
    s.used = n;
    slabs_.push_back(s);
    return s.base;
  }
  void Reset() {
    if (exact_) {
      cudaStreamSynchronize(stream_);  // nothing in flight still uses them
      for (auto& s : slabs_) cudaFree(s.base);
      slabs_.clear();
      return;
    }
    for (auto& s : slabs_) s.used = 0;
  }

  // Host to device through two pinned buffers: the host copy into one
  // overlaps the DMA out of the other.
  Status ToDevice(void* d, const void* h, size_t n) {
    auto* dp = static_cast<uint8_t*>(d);
    auto* hp = static_cast<const uint8_t*>(h);
    for (size_t off = 0; off < n; off += kPinned) {
      const size_t k = std::min(kPinned, n - off);
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[turn_]), "staging wait"));
      std::memcpy(pinned_[turn_], hp + off, k);
      LMC_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(dp + off, pinned_[turn_], k, cudaMemcpyHostToDevice, stream_), "copy in"));
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[turn_], stream_), "event"));
      turn_ ^= 1;
    }
    return Status::Ok();
  }
  // Device to host: the DMA of one piece overlaps the host copy of the last.
  Status ToHost(void* h, const void* d, size_t n) {
    auto* hp = static_cast<uint8_t*>(h);
    auto* dp = static_cast<const uint8_t*>(d);
    size_t pending = 0, pending_off = 0;
    int pending_buf = -1;
    for (size_t off = 0;; off += kPinned) {
      const size_t k = off < n ? std::min(kPinned, n - off) : 0;
      if (k) {
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[turn_]), "staging wait"));
        LMC_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(pinned_[turn_], dp + off, k, cudaMemcpyDeviceToHost, stream_), "copy out"));
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[turn_], stream_), "event"));
      }
      if (pending_buf >= 0) {
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[pending_buf]), "copy out wait"));
        std::memcpy(hp + pending_off, pinned_[pending_buf], pending);
      }
      if (!k) break;
      pending = k, pending_off = off, pending_buf = turn_;
      turn_ ^= 1;
    }
    return Status::Ok();
  }
  uint8_t* Pinned(size_t n) {
    if (n > staging_size_) {
      if (staging_) {
        cudaStreamSynchronize(stream_);  // no copy out of it is still in flight
        cudaFreeHost(staging_);
      }
      staging_ = nullptr;
      staging_size_ = 0;
      if (const cudaError_t e = cudaMallocHost(&staging_, n); e != cudaSuccess) {
        cudaGetLastError();
        alloc_error_ = e;
        return nullptr;
      }
      staging_size_ = n;
    }
    return staging_;
  }
  Status ToDeviceAsync(void* d, const void* h, size_t n) {
    return CudaStatus(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream_), "copy in");
  }
  Status ToHostAsync(void* h, const void* d, size_t n) {
    return CudaStatus(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, stream_), "copy out");
  }
  Status ToHostSync(void* h, const void* d, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    return CudaStatus(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "copy out");
  }
  Status ToDeviceSync(void* d, const void* h, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    // On the codec's stream, then waited for: a cudaMemcpy from pageable
    // memory may return before its DMA ends, and the caller reads the
    // outputs once the call returns.
    LMC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream_), "copy in"));
    return Sync();
  }
  Status Zero(void* d, size_t n) { return CudaStatus(cudaMemsetAsync(d, 0, n, stream_), "memset"); }
  // A frame the encoder has just written (the host backend injects faults
  // here; the device is left as it is).
  void AfterEncode(uint8_t*, size_t) {}

  template <typename Body, typename Args>
  Status Launch(size_t count, const Args& a) {
    if (count == 0) return Status::Ok();
    // A stale error of an earlier unchecked call (profiling events, a
    // transform) is not this launch's; a sticky one survives this and shows
    // at the next Sync.
    (void)cudaGetLastError();
    constexpr unsigned kThreads = 128;
    const size_t blocks = (count + kThreads - 1) / kThreads;
    if (profile_) cudaEventRecord(prof_[0], stream_);
    if constexpr (std::is_same_v<Body, HashBlocksEncBody> || std::is_same_v<Body, HashBlocksDecBody>) {
      const size_t threads = 16 * count;
      HashKernel<Body, Args>
          <<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(a, count,
                                                                                                 a.deltas);
    } else if constexpr (std::is_same_v<Body, ChainEncBody> || std::is_same_v<Body, VerifyBody>) {
      const size_t threads = 8 * count;
      ChainKernel<Body, Args>
          <<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(a, count);
    } else if constexpr (std::is_same_v<Body, PairedMissesBody>) {
      PairedMissesKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(a, count);
    } else if constexpr (std::is_same_v<Body, RansEncodeBody>) {
      RansEncodeKernel<<<static_cast<unsigned>((count + kRansWarps - 1) / kRansWarps), 32 * kRansWarps, 0,
                         stream_>>>(a);
    } else if constexpr (std::is_same_v<Body, RansDecodeBody>) {
      RansDecodeKernel<<<static_cast<unsigned>((count + kRansWarps - 1) / kRansWarps), 32 * kRansWarps, 0,
                         stream_>>>(a);
    } else if constexpr (HuffDecodeMode<Body>::value >= 0) {
      // count is a multiple of kDecodeGroup (DecodeOnDevice's task groups).
      HuffDecodeKernel<HuffDecodeMode<Body>::value>
          <<<static_cast<unsigned>(count / kDecodeGroup), kDecodeGroup, 0, stream_>>>(a);
    } else {
      BodyKernel<Body, Args><<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(a, count);
    }
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "kernel launch"));
    return ProfileStop(typeid(Body).name());
  }

  Status Histograms(EncStream* dev, uint32_t* hist, const EncStream* host, size_t count,
                    const uint8_t* sbuf) {
    std::vector<uint64_t> tiles;
    for (size_t s = 0; s < count; ++s)
      for (uint64_t k = 0; k < host[s].n; k += kHistTile) tiles.push_back(uint64_t{s} << 40 | k);
    if (tiles.empty()) return Status::Ok();
    auto* dt = reinterpret_cast<uint64_t*>(Alloc(8 * tiles.size()));
    if (!dt) return Status::IOError("GPU: out of device memory for histogram tiles");
    LMC_RETURN_IF_ERROR(ToDevice(dt, tiles.data(), 8 * tiles.size()));
    if (profile_) cudaEventRecord(prof_[0], stream_);
    HistKernel<<<static_cast<unsigned>(tiles.size()), 256, 0, stream_>>>(dev, hist, dt, sbuf);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "histogram launch"));
    return ProfileStop("HistKernel");
  }

  // With profile_: waits for the kernel launched since prof_[0] was
  // recorded and adds its time under `name`.
  Status ProfileStop(const std::string& name) {
    if (!profile_) return Status::Ok();
    cudaEventRecord(prof_[1], stream_);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(prof_[1]), "kernel"));
    float ms = 0;
    cudaEventElapsedTime(&ms, prof_[0], prof_[1]);
    times_[name] += ms;
    return Status::Ok();
  }

  // Lanes run on threads of their own; the current device is per thread.
  Status Bind() { return CudaStatus(cudaSetDevice(device_), "set device"); }
  // The codec's stream is non-blocking: without this, its kernels would not
  // wait for copies the caller queued on the legacy default stream (a
  // cudaMemcpy from pageable memory may return before its DMA ends).
  Status WaitForDefaultStream() {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(entry_, cudaStreamLegacy), "event"));
    return CudaStatus(cudaStreamWaitEvent(stream_, entry_, 0), "stream wait");
  }
  // Why the last Alloc or Pinned call failed.
  std::string AllocError() const {
    return alloc_error_ == cudaSuccess ? "" : cudaGetErrorString(alloc_error_);
  }
  Status Sync() {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "kernel"));
    return CudaStatus(cudaGetLastError(), "kernel");
  }
  std::string Describe() const { return name_; }
  void HostTime(const char* what, std::chrono::steady_clock::time_point since) {
    if (profile_)
      times_[what] +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
  }
  void EnableProfile() {
    profile_ = true;
    cudaEventCreate(&prof_[0]);
    cudaEventCreate(&prof_[1]);
  }
  std::string Profile() const {
    std::string r;
    for (const auto& [k, v] : times_) r += k + " " + std::to_string(v) + " ms\n";
    return r;
  }

 private:
  static constexpr size_t kSlab = size_t{256} << 20;
  static constexpr size_t kPinned = size_t{8} << 20;
  struct Slab {
    uint8_t* base = nullptr;
    size_t size = 0, used = 0;
  };
  cudaStream_t stream_ = nullptr;
  std::vector<Slab> slabs_;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t events_[2] = {nullptr, nullptr};
  int turn_ = 0;
  int device_ = 0;
  cudaError_t alloc_error_ = cudaSuccess;
  cudaEvent_t entry_ = nullptr;  // WaitForDefaultStream
  bool exact_ = false;
  std::string name_;
  bool profile_ = false;
  cudaEvent_t prof_[2] = {nullptr, nullptr};
  std::map<std::string, double> times_;
  uint8_t* staging_ = nullptr;
  size_t staging_size_ = 0;
};

}  // namespace
}  // namespace gpu

Result<std::unique_ptr<GpuCodec>> GpuCodec::Open(const GpuCodecOptions& o) {
  if (!GpuAvailable()) return Status::Unsupported("no usable CUDA device: " + GpuDescription());
  LMC_RETURN_IF_ERROR(gpu::CheckGpuCodecOptions(o));
  std::vector<gpu::CudaBackend> lanes(static_cast<size_t>(std::max(1, o.lanes)));
  for (auto& be : lanes) {
    LMC_RETURN_IF_ERROR(be.Init(o.device));
    if (o.profile) be.EnableProfile();
  }
  return std::unique_ptr<GpuCodec>(std::make_unique<gpu::BatchCodec<gpu::CudaBackend>>(std::move(lanes), o));
}

}  // namespace lmc
