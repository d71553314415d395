// The GPU codec's CUDA kernels and their launch geometry, shared by the
// CUDA backend (gpu_codec.cu) and the host SIMT emulator of the tests
// (tests/codec/simt.h, gpu_simt_test.cc), which runs these same kernels
// with a thread per CUDA thread, warps and barriers emulated: the
// kernels' collective logic (shuffles, ballots, shared memory) is checked
// in CI without a GPU. Each kernel computes what a body of gpu_pipeline.h
// computes (the host backend's loop), the histogram what Histogram does.
//
// Included by one translation unit a binary, after gpu_pipeline.h and,
// outside nvcc, after the emulator's definitions of CUDA's built-ins.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gpu_pipeline.h"

namespace lmc {
namespace gpu {
namespace {

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

// The launch of Body's kernel over count indices (one Backend::Launch):
// be.Kernel(grid, block, kernel, args...) launches kernel on grid x block
// threads.
template <typename Body, typename Args, typename B>
void LaunchBody(B& be, size_t count, const Args& a) {
  constexpr unsigned kThreads = 128;
  const auto grid = [](size_t threads, size_t per) {
    return static_cast<unsigned>((threads + per - 1) / per);
  };
  if constexpr (std::is_same_v<Body, HashBlocksEncBody> || std::is_same_v<Body, HashBlocksDecBody>) {
    be.Kernel(grid(16 * count, kThreads), kThreads, HashKernel<Body, Args>, a, count, a.deltas);
  } else if constexpr (std::is_same_v<Body, ChainEncBody> || std::is_same_v<Body, VerifyBody>) {
    be.Kernel(grid(8 * count, kThreads), kThreads, ChainKernel<Body, Args>, a, count);
  } else if constexpr (std::is_same_v<Body, PairedMissesBody>) {
    be.Kernel(grid(count, kThreads), kThreads, PairedMissesKernel, a, count);
  } else if constexpr (std::is_same_v<Body, RansEncodeBody>) {
    be.Kernel(grid(count, kRansWarps), 32 * kRansWarps, RansEncodeKernel, a);
  } else if constexpr (std::is_same_v<Body, RansDecodeBody>) {
    be.Kernel(grid(count, kRansWarps), 32 * kRansWarps, RansDecodeKernel, a);
  } else if constexpr (HuffDecodeMode<Body>::value >= 0) {
    // count is a multiple of kDecodeGroup (DecodeOnDevice's task groups).
    be.Kernel(static_cast<unsigned>(count / kDecodeGroup), kDecodeGroup,
              HuffDecodeKernel<HuffDecodeMode<Body>::value>, a);
  } else {
    be.Kernel(grid(count, kThreads), kThreads, BodyKernel<Body, Args>, a, count);
  }
}

// The tiles of the histogram kernel: (stream << 40 | offset), kHistTile
// bytes each.
inline std::vector<uint64_t> HistTiles(const EncStream* host, size_t count) {
  std::vector<uint64_t> tiles;
  for (size_t s = 0; s < count; ++s)
    for (uint64_t k = 0; k < host[s].n; k += kHistTile) tiles.push_back(uint64_t{s} << 40 | k);
  return tiles;
}
inline constexpr unsigned kHistThreads = 256;

}  // namespace
}  // namespace gpu
}  // namespace lmc
