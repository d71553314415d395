// The batched GPU codec's pipeline (docs/ARCHITECTURE.md, "GPU codec"),
// written once over a Backend that supplies device memory, copies and
// launches: codec/cuda/gpu_codec.cu instantiates it with CUDA, and
// gpu_emulator.cc with a host backend that runs every kernel body in a loop
// on the CPU, so that CI checks the pipeline's logic (tables, offsets,
// kernel bodies) on machines without a GPU.
//
// A kernel is a struct with `static LMC_HD void Run(const Args&, size_t i)`
// run for i in [0, count). Bodies use only hd/ functions and the Atomic*
// helpers below; everything else (planning, tables) is host code.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "frame_format.h"
#include "hd/frame_hd.h"
#include "hd/huffman_hd.h"
#include "hd/rans_hd.h"
#include "hd/xxh3.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/gpu.h"
#include "lmc/thread_pool.h"
#include "lmc/transform.h"

namespace lmc::gpu {

LMC_HD void AtomicOr32(uint32_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  atomicOr(p, v);
#else
  *p |= v;  // the host backend runs bodies one at a time
#endif
}
LMC_HD void AtomicAdd32(uint32_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;  // the host backend runs bodies one at a time
#endif
}
// Paired fp32 chunks and frames (a bf16 twin as the base, widened;
// docs/FORMAT.md, "Frame"): none, the twin widened, the rounding predicted.
inline constexpr uint8_t kPairedNone = 0, kPairedWidened = 1, kPairedPredicted = 2;
// Element e of a bf16 twin (any alignment).
LMC_HD uint32_t TwinAt(const uint8_t* twin, uint64_t e) {
  return static_cast<uint32_t>(hd::LoadElement(twin + 2 * e, 2, false));
}

// The entry a flat index belongs to: the largest k < count with
// first[k] <= i (first non-decreasing, first[0] == 0; empty entries are
// skipped). The host plans only the per-entry firsts (O(items), not
// O(bytes)); OwnerFillBody turns them into per-index arrays on the device.
LMC_HD uint32_t Owner(const uint64_t* first, uint32_t count, uint64_t i) {
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (first[mid] <= i)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// owner[i] = Owner(first, count, i) for i < total: the per-index lookup
// arrays, filled on the device from the per-entry firsts, one search an
// index, so that the kernels that run a thread per few bytes do one load.
struct OwnerArgs {
  const uint64_t* first;
  uint32_t count;
  uint32_t* owner;
};
struct OwnerFillBody {
  static LMC_HD void Run(const OwnerArgs& a, size_t i) { a.owner[i] = Owner(a.first, a.count, i); }
};

struct EdgeOr {
  LMC_HD void operator()(uint32_t* w, uint32_t v) const { AtomicOr32(w, v); }
};

// Chunks below this size are coded by the CPU within the same call (same
// frames: the GPU profile); the block-parallel hash needs n > 240 anyway.
inline constexpr size_t kMinGpuChunk = 4096;
inline constexpr uint32_t kTileElems = 4096;  // elements per split/merge tile
inline constexpr uint32_t kRawTile = 16384;   // bytes per raw-copy tile
// Blocked Huffman's block sizes (log2 of the symbols a block) the device
// codes: GpuCodecOptions::huffman_block_log2. The fused decoder needs a
// block to start on a hash block (2 * 2^k bytes a multiple of 1024).
inline constexpr int kMinGpuBlockLog2 = 9;
static_assert(kMinGpuBlockLog2 >= hd::kMinBlockLog2 && (2 << kMinGpuBlockLog2) % hd::kXxh3BlockLen == 0,
              "a fused block must start on a hash block");

// ---------------------------------------------------------------- encode

struct EncChunk {
  const uint8_t* src;
  const uint8_t* base;
  uint8_t* out;  // where the frame goes
  uint64_t n;
  uint64_t elems;
  uint32_t w, tail, nstreams, stream0;
  uint64_t hash0;  // first hash block of this chunk in the delta array
  uint64_t frame_len;
  uint64_t sum;  // XXH3-64 of the chunk
  // A paired fp32 chunk: its bf16 twin from the chunk's first element on,
  // the twin's offset in its own chunk (for the header), and the upper
  // halves the two operands miss (PairedMissesBody), which decide
  // `paired` (PairedChoiceBody).
  const uint8_t* twin;
  uint32_t twin_offset;
  uint32_t misses_predicted, misses_widened;
  uint8_t dtype, rot, aligned, paired;  // aligned: src and base aligned to the element width
};

struct EncStream {
  uint32_t chunk;
  uint64_t n;
  uint64_t buf;           // offset of the stream bytes in the streams buffer
  uint64_t scratch_word;  // first word of its payload scratch
  uint64_t block0;        // first block in the block tables
  uint32_t blocks;
  uint8_t coder;
  uint32_t hdr;      // bytes of the coder's own header (lengths, log2, block table)
  uint64_t size;     // payload bytes in the frame (hdr included)
  uint64_t out_off;  // offset of the payload in the frame
  uint64_t bits;     // Huffman bits
  uint64_t payload;  // rANS: offset of the payload (header on) in the stream's scratch bytes
};

struct EncArgs {
  EncChunk* chunks;
  EncStream* streams;
  uint32_t nc, ns;  // chunks, streams
  uint32_t* hist;   // 256 per stream
  uint32_t* codes;  // 256 per stream: Huffman codes, or rANS frequencies
  uint8_t* lens;    // 256 per stream
  // PlanBody's working space, the streams' interleaved (hd::Strided):
  // HuffBuildStrided::kU64 + 256 values and kU8 bytes a stream.
  uint64_t* plan_u64;
  uint8_t* plan_u8;
  uint8_t* sbuf;            // regrouped streams
  uint32_t* scratch;        // Huffman payload words, or a rANS stream's bytes
  uint64_t* deltas;         // 8 per hash block
  uint64_t* chunk_hash0;    // first hash block of each chunk
  uint64_t* chunk_tile0;    // first split tile of each chunk
  uint64_t* stream_block0;  // first Huffman block slot of each stream
  uint64_t* stream_raw0;    // first copy tile of each stream
  uint32_t* tile_chunk;     // chunk of each split tile (OwnerFillBody)
  uint32_t* hash_chunk;     // chunk of each hash block
  uint32_t* block_stream;   // stream of each block slot
  uint32_t* raw_stream;     // stream of each copy tile
  uint32_t* block_bits;
  uint64_t* block_start;
  uint32_t log2;  // blocked Huffman: log2 of the symbols a block
};

inline constexpr uint32_t kPerThread = 8;  // elements per thread of SplitBody and MergeBody

LMC_HD uint64_t LoadAligned64(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint64_t*>(p);
#else
  return uint64_t{hd::LoadAligned32(p)} | uint64_t{hd::LoadAligned32(p + 4)} << 32;
#endif
}
LMC_HD void StoreAligned64(uint8_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint64_t*>(p) = v;
#else
  hd::StoreAligned32(p, static_cast<uint32_t>(v));
  hd::StoreAligned32(p + 4, static_cast<uint32_t>(v >> 32));
#endif
}

// Where thread i of a split or merge works: its chunk or frame (owner), the
// first element of its tile, its index j in the tile and its first element.
struct TilePos {
  uint32_t owner, j;
  uint64_t first, e0;
};
LMC_HD TilePos TileOf(const uint32_t* tile_owner, const uint64_t* owner_tile0, size_t i) {
  constexpr uint32_t kThreads = kTileElems / kPerThread;
  const uint64_t tile = i / kThreads;
  TilePos t;
  t.owner = tile_owner[tile];
  t.first = (tile - owner_tile0[t.owner]) * kTileElems;
  t.j = static_cast<uint32_t>(i % kThreads);
  t.e0 = t.first + kPerThread * t.j;
  return t;
}

// Bytes of a and b picked by the nibbles of sel (0-3: a's, 4-7: b's), as
// CUDA's __byte_perm (one instruction there).
LMC_HD uint32_t BytePerm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t x = static_cast<uint64_t>(b) << 32 | a;
  uint32_t r = 0;
  for (uint32_t k = 0; k < 4; ++k)
    r |= static_cast<uint32_t>((x >> (8 * ((sel >> (4 * k)) & 7))) & 0xff) << (8 * k);
  return r;
#endif
}
// Each 16-bit lane rotated left (Rotl16) or right (Rotr16) by one bit: the
// float rotation (hd::SplitElement, hd::MergeElement) of two bf16 or f16
// elements at once.
LMC_HD uint32_t Rotl16(uint32_t x) { return ((x << 1) & 0xfffefffeu) | ((x >> 15) & 0x00010001u); }
LMC_HD uint32_t Rotr16(uint32_t x) { return ((x >> 1) & 0x7fff7fffu) | ((x << 15) & 0x80008000u); }

// Paired chunks: how many upper halves each operand misses, counted over
// the chunk (the same tiles as SplitBody's), and the choice the CPU makes
// from them (frame.cc, PredictedTwinOperand): the prediction when it
// misses fewer. The CUDA kernel sums a warp's counts before its atomics.
struct PairedMissesBody {  // i: tile * (kTileElems / kPerThread) + j: elements 8j .. 8j+7 of the tile
  // Counts of thread i; false for threads of chunks not paired.
  static LMC_HD bool Count(const EncArgs& a, size_t i, uint32_t* chunk, uint32_t* predicted,
                           uint32_t* widened) {
    const TilePos t = TileOf(a.tile_chunk, a.chunk_tile0, i);
    const EncChunk& c = a.chunks[t.owner];
    *chunk = t.owner;
    *predicted = *widened = 0;
    if (!c.paired) return false;
    for (uint64_t e = t.e0; e < t.e0 + kPerThread && e < c.elems; ++e) {
      const uint32_t v = static_cast<uint32_t>(hd::LoadElement(c.src + 4 * e, 4, c.aligned != 0));
      const uint32_t b = TwinAt(c.twin, e);
      *predicted += (v >> 16) != frame::PredictedUpper(b, v & 0xffffu);
      *widened += (v >> 16) != b;
    }
    return true;
  }
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    uint32_t chunk, predicted, widened;
    if (!Count(a, i, &chunk, &predicted, &widened)) return;
    if (predicted) AtomicAdd32(&a.chunks[chunk].misses_predicted, predicted);
    if (widened) AtomicAdd32(&a.chunks[chunk].misses_widened, widened);
  }
};
struct PairedChoiceBody {  // i: chunk
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncChunk& c = a.chunks[i];
    if (!c.paired) return;
    c.paired = c.misses_predicted < c.misses_widened ? kPairedPredicted : kPairedWidened;
  }
};

struct SplitBody {  // i: tile * (kTileElems / kPerThread) + j: elements 8j .. 8j+7 of the tile
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const TilePos t = TileOf(a.tile_chunk, a.chunk_tile0, i);
    const EncChunk c = a.chunks[t.owner];  // by value: stores below cannot change it
    const uint64_t first = t.first, e0 = t.e0;
    const uint32_t j = t.j;
    if (c.w == 2 && !c.base && e0 + kPerThread <= c.elems &&
        (reinterpret_cast<uintptr_t>(c.src + 2 * e0) & 7) == 0) {
      // bf16 and f16, eight whole elements: two 8-byte loads, byte
      // permutes, two 8-byte stores; no arrays (they would live in local
      // memory on a GPU).
      const uint64_t x0 = LoadAligned64(c.src + 2 * e0), x1 = LoadAligned64(c.src + 2 * e0 + 8);
      uint32_t w[4] = {static_cast<uint32_t>(x0), static_cast<uint32_t>(x0 >> 32), static_cast<uint32_t>(x1),
                       static_cast<uint32_t>(x1 >> 32)};
      if (c.rot)
        for (uint32_t q = 0; q < 4; ++q) w[q] = Rotl16(w[q]);
      const uint32_t hi0 = BytePerm(w[0], w[1], 0x7531), hi1 = BytePerm(w[2], w[3], 0x7531);
      const uint32_t lo0 = BytePerm(w[0], w[1], 0x6420), lo1 = BytePerm(w[2], w[3], 0x6420);
      StoreAligned64(a.sbuf + a.streams[c.stream0].buf + e0, static_cast<uint64_t>(hi1) << 32 | hi0);
      StoreAligned64(a.sbuf + a.streams[c.stream0 + 1].buf + e0, static_cast<uint64_t>(lo1) << 32 | lo0);
    } else if (e0 < c.elems) {
      General(a, t.owner, e0);
    }
    // The tail (n % w bytes, XOR only) by the first threads of tile 0.
    if (first == 0 && j < c.tail) {
      const uint64_t at = c.w * c.elems + j;
      a.sbuf[a.streams[c.stream0 + c.w].buf + j] = c.base ? (c.src[at] ^ c.base[at]) : c.src[at];
    }
  }
  // The k <= kPerThread elements of a paired chunk from e0 (out of line:
  // the other chunks' split keeps its registers).
  static LMC_HD_NOINLINE void Paired(const EncChunk& c, uint64_t e0, uint32_t k, uint64_t* v) {
    for (uint32_t q = 0; q < k; ++q)
      v[q] =
          frame::SplitPaired(static_cast<uint32_t>(hd::LoadElement(c.src + 4 * (e0 + q), 4, c.aligned != 0)),
                             TwinAt(c.twin, e0 + q), c.paired == kPairedPredicted);
  }
  // Any width, base or alignment. Its arrays live in local memory on a
  // GPU; the fast path above uses none.
  static LMC_HD void General(const EncArgs& a, uint32_t chunk, uint64_t e0) {
    const EncChunk c = a.chunks[chunk];  // by value: stores below cannot change it
    uint64_t buf[frame::kMaxStreams];
    for (uint32_t b = 0; b < c.w; ++b) buf[b] = a.streams[c.stream0 + b].buf;
    const uint32_t k = c.elems - e0 < kPerThread ? static_cast<uint32_t>(c.elems - e0) : kPerThread;
    uint64_t v[kPerThread];
    if (c.paired) {
      Paired(c, e0, k, v);
    } else {
      for (uint32_t q = 0; q < k; ++q)
        v[q] = hd::SplitElement(c.src + (e0 + q) * c.w, c.base ? c.base + (e0 + q) * c.w : nullptr, c.w,
                                c.rot != 0, c.aligned != 0);
    }
    for (uint32_t b = 0; b < c.w; ++b) {
      const uint32_t shift = 8 * (c.w - 1 - b);
      uint8_t* out = a.sbuf + buf[b] + e0;  // buf is 16-aligned, e0 a multiple of 8
      if (k == kPerThread) {
        uint64_t word = 0;
        for (uint32_t q = 0; q < kPerThread; ++q) word |= ((v[q] >> shift) & 0xff) << (8 * q);
        StoreAligned64(out, word);
      } else {
        for (uint32_t q = 0; q < k; ++q) out[q] = static_cast<uint8_t>(v[q] >> shift);
      }
    }
  }
};

struct HashBlocksEncBody {  // i: hash block
  // The block's 1024 bytes (the CUDA backend hashes it with 16 threads).
  static LMC_HD const uint8_t* Block(const EncArgs& a, size_t i) {
    const EncChunk& c = a.chunks[a.hash_chunk[i]];
    return c.src + (i - c.hash0) * hd::kXxh3BlockLen;
  }
  static LMC_HD void Run(const EncArgs& a, size_t i) { hd::Xxh3BlockDelta(Block(a, i), a.deltas + 8 * i); }
};

struct PlanBody {  // i: stream
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncStream& s = a.streams[i];
    uint8_t* len = a.lens + 256 * i;
    size_t size = 0;
    const uint64_t ns = a.ns;
    hd::HuffBuildStrided huff{a.plan_u64 + i, a.plan_u8 + i, ns};
    const hd::Strided<uint64_t> rans_v{a.plan_u64 + hd::HuffBuildStrided::kU64 * ns + i, ns};
    s.coder = hd::GpuProfileCoder(a.hist + 256 * i, s.n, len, a.codes + 256 * i, &size,
                                  static_cast<int>(a.log2), huff, rans_v);
    s.size = size;
    s.hdr = 0;
    if (s.coder == hd::kCoderHuffmanBlocked) {
      hd::HuffBuildCodes(len, a.codes + 256 * i);
      s.hdr = static_cast<uint32_t>(hd::HuffBlockedHeader(hd::HuffShapeOf(len).table_bytes, s.blocks));
    }
  }
};

// Block slot i of the encode: its stream, its index b in the stream, its
// first symbol and count. False for streams not coded blocked Huffman and
// for each stream's spare slot.
struct BlockSlot {
  uint32_t si, count;
  uint64_t b, first;
};
LMC_HD bool HuffBlockSlot(const EncArgs& a, size_t i, BlockSlot* o) {
  o->si = a.block_stream[i];
  const EncStream& s = a.streams[o->si];
  o->b = i - s.block0;
  if (s.coder != hd::kCoderHuffmanBlocked || o->b >= s.blocks) return false;
  o->first = o->b << a.log2;
  const uint64_t left = s.n - o->first;
  o->count = static_cast<uint32_t>(left < (uint64_t{1} << a.log2) ? left : (uint64_t{1} << a.log2));
  return true;
}

struct BlockBitsBody {  // i: block
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    BlockSlot k;
    if (!HuffBlockSlot(a, i, &k)) return;
    const EncStream& s = a.streams[k.si];
    a.block_bits[i] = hd::HuffBlockBits(a.sbuf + s.buf + k.first, k.count, a.codes + 256 * k.si);
  }
};

struct ScanBody {  // i: stream
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncStream& s = a.streams[i];
    if (s.coder != hd::kCoderHuffmanBlocked) return;
    uint64_t pos = 0;
    for (uint32_t b = 0; b < s.blocks; ++b) {
      a.block_start[s.block0 + b] = pos;
      pos += a.block_bits[s.block0 + b];
    }
    a.block_start[s.block0 + s.blocks] = pos;  // one spare slot per stream
    s.bits = pos;
  }
};

struct HuffEncodeBody {  // i: block
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    BlockSlot k;
    if (!HuffBlockSlot(a, i, &k)) return;
    const EncStream& s = a.streams[k.si];
    hd::HuffEncodeBlockWords(a.sbuf + s.buf + k.first, k.count, a.codes + 256 * k.si, a.block_start[i],
                             a.block_bits[i], a.scratch + s.scratch_word, EdgeOr{});
  }
};

// rANS streams (coders 3 and 5), coded backwards from the last symbol as
// the CPU coder does, into the stream's scratch (RansScratchBytes, over n):
// the words from the end down, then the states and the header in front of
// them, so that the payload is contiguous. Symbol i is coded by state i mod
// K; a round's states that shift out a word (RansEncodeNeedsWord) put
// them in lane order below the words of the rounds after it, which is the
// order the decoder takes them in. The CUDA kernel runs a stream on one
// warp, a lane a state (ballot and popcount); RansEncodeBody runs the
// same rounds one lane after another. A stream whose payload would come
// to n bytes or more is stored raw, as on the CPU.
struct RansEncodeSpan {
  uint8_t* buf;          // the scratch bytes
  uint64_t room;         // bytes for words: the scratch less the header and states
  uint32_t header;       // header bytes
  uint32_t states;       // K
  int k;                 // symbols in the table
  const uint32_t* freq;  // every symbol of the stream is present: its histogram made them
};
LMC_HD uint64_t RansScratchBytes(const EncStream& s) { return 4 * (s.n / 4 + 4); }
// False for streams not coded rANS.
LMC_HD bool RansEncodeBegin(const EncArgs& a, size_t i, RansEncodeSpan* sp) {
  const EncStream& s = a.streams[i];
  if (s.coder != hd::kCoderRans && s.coder != hd::kCoderRansX32) return false;
  sp->buf = reinterpret_cast<uint8_t*>(a.scratch + s.scratch_word);
  sp->states = s.coder == hd::kCoderRansX32 ? 32 : 4;
  sp->freq = a.codes + 256 * i;
  sp->k = 0;
  for (int c = 0; c < 256; ++c) sp->k += sp->freq[c] != 0;
  sp->header = hd::RansHeaderSize(sp->freq, sp->k);
  const uint64_t cap = RansScratchBytes(s), fixed = sp->header + 4 * uint64_t{sp->states};
  sp->room = cap > fixed ? cap - fixed : 0;
  return true;
}
// After the rounds (`words` words; ok false when they did not fit the
// room): the payload's size, or 0 when the stream goes raw (n bytes or
// more, as on the CPU). RansEncodeSet records it in the stream; the
// payload then starts `size` bytes before the scratch's end, where the
// caller writes the header and the states.
LMC_HD uint64_t RansEncodedSize(const RansEncodeSpan& sp, uint64_t n, uint64_t words, bool ok) {
  const uint64_t size = sp.header + 4 * uint64_t{sp.states} + 2 * words;
  return ok && size < n ? size : 0;
}
LMC_HD void RansEncodeSet(EncStream& s, uint64_t size) {
  if (!size) {
    s.coder = hd::kCoderRaw;
    s.size = s.n;
  } else {
    s.size = size;
    s.payload = RansScratchBytes(s) - size;
  }
}
// The low `bytes` bytes of x, little-endian (a word: 2, a state: 4).
LMC_HD void RansPut(uint8_t* p, uint32_t x, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = static_cast<uint8_t>(x >> (8 * b));
}

struct RansEncodeBody {  // i: stream
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    RansEncodeSpan sp;
    if (!RansEncodeBegin(a, i, &sp)) return;
    EncStream& s = a.streams[i];
    uint32_t cum[256];
    for (uint32_t c = 0, sum = 0; c < 256; ++c) {
      cum[c] = sum;
      sum += sp.freq[c];
    }
    const uint8_t* src = a.sbuf + s.buf;
    uint8_t* end = sp.buf + RansScratchBytes(s);
    const uint32_t k = sp.states;
    uint32_t x[hd::kRansMaxStates];
    for (uint32_t j = 0; j < k; ++j) x[j] = hd::kRansLow;
    uint64_t words = 0;
    bool ok = true;
    for (uint64_t r = (s.n - 1) / k * k;; r -= k) {
      const uint32_t live = s.n - r < k ? static_cast<uint32_t>(s.n - r) : k;
      bool need[hd::kRansMaxStates];
      uint32_t c = 0;
      for (uint32_t j = 0; j < live; ++j) {
        need[j] = hd::RansEncodeNeedsWord(x[j], sp.freq[src[r + j]]);
        c += need[j];
      }
      if (2 * (words + c) > sp.room) {
        ok = false;
        break;
      }
      for (uint32_t j = 0, rank = 0; j < live; ++j) {
        const uint8_t sym = src[r + j];
        if (need[j]) {
          RansPut(end - 2 * (words + c - rank++), x[j], 2);
          x[j] >>= 16;
        }
        x[j] = hd::RansEncodeCode(x[j], sp.freq[sym], cum[sym]);
      }
      words += c;
      if (r == 0) break;
    }
    const uint64_t size = RansEncodedSize(sp, s.n, words, ok);
    RansEncodeSet(s, size);
    if (!size) return;
    uint8_t* p = end - size;
    hd::RansWriteHeader(sp.freq, sp.k, p);
    for (uint32_t j = 0; j < k; ++j) RansPut(p + sp.header + 4 * j, x[j], 4);
  }
};

// The XXH3 chain over a chunk's block deltas and the finish: the checksum.
// Body supplies Item (the bytes, their size and first hash block; false to
// skip) and Done (what to do with the sum). The CUDA backend runs the chain
// with 8 threads an item, one per accumulator lane.
template <typename Body, typename Args>
LMC_HD void RunChain(const Args& a, size_t i) {
  const uint8_t* p;
  uint64_t n, hash0;
  if (!Body::Item(a, i, &p, &n, &hash0)) return;
  uint64_t acc[8];
  hd::Xxh3InitAcc(acc);
  const size_t nb = hd::Xxh3FullBlocks(n);
  for (size_t k = 0; k < nb; ++k) {
    const uint64_t* d = a.deltas + 8 * (hash0 + k);
    for (int l = 0; l < 8; ++l) acc[l] += d[l];
    hd::Xxh3Scramble(acc);
  }
  Body::Done(a, i, hd::Xxh3FinishLong(acc, p, n));
}

struct ChainEncBody {  // i: chunk. Its checksum.
  static LMC_HD bool Item(const EncArgs& a, size_t i, const uint8_t** p, uint64_t* n, uint64_t* hash0) {
    const EncChunk& c = a.chunks[i];
    *p = c.src, *n = c.n, *hash0 = c.hash0;
    return true;
  }
  static LMC_HD void Done(const EncArgs& a, size_t i, uint64_t sum) { a.chunks[i].sum = sum; }
  static LMC_HD void Run(const EncArgs& a, size_t i) { RunChain<ChainEncBody>(a, i); }
};

struct LayoutBody {  // i: chunk. Header, coder headers.
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncChunk& c = a.chunks[i];
    uint8_t* o = c.out;
    uint64_t pos = frame::HeaderSize(c.nstreams, c.paired != kPairedNone);
    uint8_t coders[frame::kMaxStreams];
    uint64_t sizes[frame::kMaxStreams];
    for (uint32_t j = 0; j < c.nstreams; ++j) {
      EncStream& s = a.streams[c.stream0 + j];
      s.out_off = pos;
      coders[j] = s.coder;
      sizes[j] = s.size;
      uint8_t* p = o + pos;
      if (s.coder == hd::kCoderConst) {
        p[0] = a.sbuf[s.buf];
      } else if (s.coder == hd::kCoderHuffmanBlocked) {
        const uint8_t* len = a.lens + 256 * (uint64_t{c.stream0} + j);
        const hd::HuffTableShape shape = hd::HuffShapeOf(len);
        const uint32_t lb = hd::HuffWriteLengths(len, shape, p);
        p[lb] = static_cast<uint8_t>(a.log2);
        for (uint32_t b = 0; b < s.blocks; ++b) {
          const uint32_t bits = a.block_bits[s.block0 + b];
          p[lb + 1 + 2 * b] = static_cast<uint8_t>(bits);
          p[lb + 2 + 2 * b] = static_cast<uint8_t>(bits >> 8);
        }
      }
      pos += s.size;
    }
    frame::WriteHeader(o, c.dtype, c.base != nullptr || c.paired, static_cast<uint32_t>(c.n), c.sum,
                       c.nstreams, coders, sizes, c.paired != kPairedNone, c.twin_offset,
                       c.paired == kPairedPredicted);
    c.frame_len = pos;
  }
};

inline constexpr uint32_t kCopyBytes = 4;  // bytes per thread of CopyStreamBody

// Raw streams, Huffman and rANS payloads into the frames. i: tile *
// (kRawTile / kCopyBytes) + j, bytes kCopyBytes*j .. of the tile.
struct CopyStreamBody {
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const uint64_t tile = i / (kRawTile / kCopyBytes);
    const uint32_t si = a.raw_stream[tile];
    const EncStream& s = a.streams[si];
    const uint64_t k0 = (tile - a.stream_raw0[si]) * kRawTile + kCopyBytes * (i % (kRawTile / kCopyBytes));
    const uint8_t* src;
    uint64_t len;
    uint8_t* dst = a.chunks[s.chunk].out + s.out_off;
    if (s.coder == hd::kCoderRaw) {
      src = a.sbuf + s.buf;
      len = s.n;
    } else if (s.coder == hd::kCoderHuffmanBlocked) {
      src = reinterpret_cast<const uint8_t*>(a.scratch + s.scratch_word);
      len = (s.bits + 7) / 8;
      dst += s.hdr;
    } else if (s.coder == hd::kCoderRans || s.coder == hd::kCoderRansX32) {
      src = reinterpret_cast<const uint8_t*>(a.scratch + s.scratch_word) + s.payload;
      len = s.size;
    } else {
      return;
    }
    for (uint32_t b = 0; b < kCopyBytes; ++b)
      if (k0 + b < len) dst[k0 + b] = src[k0 + b];
  }
};

// ---------------------------------------------------------------- decode

struct DecFrame {
  const uint8_t* frame;
  const uint8_t* base;
  uint8_t* out;
  uint64_t n, elems;
  uint64_t checksum;
  uint64_t hash0;
  uint32_t w, tail, nstreams, stream0;
  uint64_t size;  // frame bytes
  uint32_t bad;   // set by any stage that finds a problem
  // aligned: out is aligned to the element width; fused, fused_hash: see FusedSink.
  uint8_t rot, aligned, fused, fused_hash;
  uint8_t paired;       // kPaired*: a widened-base frame, its operand from `twin`
  const uint8_t* twin;  // paired: the bf16 twin from the frame's first element on
};

struct DecStream {
  uint32_t frame;
  uint8_t coder, log2, pad[2];
  uint32_t tasks;    // task slots reserved (a multiple of kDecodeGroup)
  uint64_t start0;   // its block start bits: starts[start0 .. start0 + blocks]
  uint64_t n;        // decoded symbols
  uint64_t off;      // payload offset in the frame
  uint64_t len;      // payload bytes
  uint64_t buf;      // decoded stream offset in the decode buffer (Huffman)
  uint64_t task0;    // first task slot
  uint64_t table;    // index of its decode tables (and of huff_streams)
  uint64_t payload;  // offset of the bit payload within the stream payload
};

// A rANS stream's tables and start (RansParseBody), for its decoder.
struct RansTable {
  uint16_t freq[256];
  uint16_t cum[256];  // sum of freq below each symbol
  hd::RansStart start;
  uint32_t states;  // 4 (coder 3) or 32 (coder 5)
};

struct DecArgs {
  DecFrame* frames;
  DecStream* streams;
  uint32_t nf, nh;           // frames, Huffman streams
  uint32_t* huff_streams;    // stream index of each Huffman stream
  uint64_t* huff_task0;      // first task slot of each Huffman stream
  uint32_t* task_huff;       // Huffman stream of each task slot (OwnerFillBody)
  uint32_t* tile_frame;      // frame of each merge tile
  uint32_t* hash_frame;      // frame of each hash block
  uint64_t* starts;          // per Huffman stream: the start bit of each block, and the end
  hd::HuffCanonical* canon;  // per Huffman stream
  uint16_t* single;          // kHuffTableSize per Huffman stream
  uint8_t* dbuf;             // decoded Huffman streams
  uint64_t* frame_tile0;     // first merge tile of each frame
  uint64_t* frame_hash0;     // first hash block of each frame
  uint64_t* deltas;
  uint64_t task_first;     // HuffDecodeBody: the first task of the launch
  uint32_t nr;             // rANS streams
  uint32_t* rans_streams;  // stream index of each rANS stream
  RansTable* rans;         // per rANS stream (RansParseBody)
};

LMC_HD void MarkBad(DecFrame& f) { AtomicOr32(&f.bad, 1); }

// Huffman task slots come in groups of kDecodeGroup (one CUDA block), each
// group within one stream, so that a block can hold its stream's table in
// shared memory.
inline constexpr uint32_t kDecodeGroup = 128;

struct ParseBody {  // i: Huffman stream. Checks the coder header; canonical code and block starts.
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    DecStream& s = a.streams[a.huff_streams[i]];
    DecFrame& f = a.frames[s.frame];
    const uint8_t* p = f.frame + s.off;
    uint8_t lens[256];
    int min_len = 0, max_len = 0;
    const uint32_t lb = hd::HuffParseLengths(p, s.len, lens, &min_len, &max_len);
    if (!lb) return MarkBad(f);
    uint64_t total = 0;
    uint64_t* st = a.starts + s.start0;
    if (s.coder == hd::kCoderHuffmanBlocked) {
      if (s.len < lb + 1u) return MarkBad(f);
      const int log2 = p[lb];
      // The block size the plan reserved threads for (read at planning,
      // or the codec's own); any other (valid or not) goes to the CPU.
      if (log2 != s.log2) return MarkBad(f);
      const uint32_t blocks = hd::HuffBlocks(s.n, log2);
      if (s.len < lb + 1 + 2 * uint64_t{blocks}) return MarkBad(f);
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t bits = uint64_t{p[lb + 1 + 2 * b]} | uint64_t{p[lb + 2 + 2 * b]} << 8;
        const uint64_t first = uint64_t{b} << log2;
        const uint64_t count = s.n - first < (uint64_t{1} << log2) ? s.n - first : (uint64_t{1} << log2);
        if (bits < count * min_len || bits > count * max_len) return MarkBad(f);
        st[b] = total;
        total += bits;
      }
      st[blocks] = total;
      s.payload = lb + 1 + 2 * uint64_t{blocks};
    } else {  // version-1 Huffman: four quarters with end offsets
      if (s.len < lb + 16u) return MarkBad(f);
      const uint64_t q = s.n / 4;
      uint64_t prev = 0;
      st[0] = 0;
      for (int j = 0; j < 4; ++j) {
        const uint8_t* e = p + lb + 4 * j;
        const uint64_t end =
            uint64_t{e[0]} | uint64_t{e[1]} << 8 | uint64_t{e[2]} << 16 | uint64_t{e[3]} << 24;
        const uint64_t count = j == 3 ? s.n - 3 * q : q;
        if (end < prev || end - prev < count * min_len || end - prev > count * max_len) return MarkBad(f);
        st[j + 1] = end;
        prev = end;
      }
      total = prev;
      s.log2 = 0;
      s.payload = lb + 16;
    }
    const uint64_t plen = s.len - s.payload;
    if ((total + 7) / 8 != plen) return MarkBad(f);
    if ((total & 7) && (p[s.payload + plen - 1] >> (total & 7))) return MarkBad(f);
    hd::HuffBuildCanonical(lens, a.canon + s.table);
  }
};

struct SingleTableBody {  // i: table * kHuffTableSize + window
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const size_t t = i / hd::kHuffTableSize;
    const DecStream& s = a.streams[a.huff_streams[t]];
    if (a.frames[s.frame].bad) return;
    a.single[i] = hd::HuffSingleEntryAt(a.canon[t], static_cast<uint32_t>(i % hd::kHuffTableSize));
  }
};

// rANS streams (coders 3 and 5): a stream's symbol i is decoded by state
// i mod K, and a state that falls below 2^16 takes the next word, in symbol
// order (docs/FORMAT.md 5.2). The CUDA kernel runs a stream on one warp, a
// lane a state, each round's lanes taking their words in lane order
// (ballot and popcount); these bodies run the same rounds one lane after
// another.
struct RansParseBody {  // i: rANS stream. Checks the header; frequencies, states.
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const DecStream& s = a.streams[a.rans_streams[i]];
    DecFrame& f = a.frames[s.frame];
    const uint8_t* p = f.frame + s.off;
    RansTable& t = a.rans[i];
    int k = 0;
    t.states = s.coder == hd::kCoderRansX32 ? 32 : 4;
    // Straight into the table: a local array of 256 would be reserved for
    // every thread the card holds (HuffBuildScratch says why).
    const uint32_t header = hd::RansParseHeader(p, s.len, t.freq, &k);
    if (hd::RansReadStart(p, s.len, header, k, static_cast<int>(t.states), &t.start)) return MarkBad(f);
    uint32_t cum = 0;
    for (int c = 0; c < 256; ++c) {
      t.cum[c] = static_cast<uint16_t>(cum);
      cum += t.freq[c];
    }
  }
};

// The stream's n symbols in rounds of K: lane j of the round from symbol r
// decodes symbol r + j; the lanes that need a word take the next ones in
// lane order. *w counts the words taken (past nwords: a truncated stream,
// which leaves *ok false).
LMC_HD void RansRounds(const RansTable& t, const uint8_t* slot_symbol, const uint8_t* words, uint32_t* x,
                       uint8_t* out, uint64_t n, uint64_t* w, bool* ok) {
  const uint32_t k = t.states;
  for (uint64_t r = 0; r < n; r += k) {
    for (uint32_t j = 0; j < k && r + j < n; ++j) {
      if (!hd::RansStep(x[j], slot_symbol, t.freq, t.cum, out + r + j)) continue;
      if (*w < t.start.nwords) {
        x[j] = x[j] << 16 | hd::RansWord(words, *w);
      } else {
        *ok = false;
      }
      ++*w;
    }
  }
}

struct RansDecodeBody {  // i: rANS stream, decoded into the decode buffer
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const DecStream& s = a.streams[a.rans_streams[i]];
    DecFrame& f = a.frames[s.frame];
    if (f.bad) return;
    const RansTable& t = a.rans[i];
    uint8_t slot_symbol[hd::kRansProbScale];
    for (uint32_t slot = 0; slot < hd::kRansProbScale; ++slot)
      slot_symbol[slot] = hd::RansSymbolAt(t.cum, slot);
    uint32_t x[hd::kRansMaxStates];
    for (uint32_t j = 0; j < t.states; ++j) x[j] = t.start.x[j];
    uint64_t w = 0;
    bool ok = true;
    RansRounds(t, slot_symbol, f.frame + s.off + t.start.words, x, a.dbuf + s.buf, s.n, &w, &ok);
    for (uint32_t j = 0; j < t.states; ++j) ok &= x[j] == hd::kRansLow;
    if (!ok || w != t.start.nwords) MarkBad(f);
  }
};

// The fused decoder's sink (DecodeOnDevice sets DecFrame::fused): a
// 2-byte frame without a base whose high bytes (stream 0) are a blocked
// Huffman stream and whose low bytes (stream 1) are raw, with its output
// 16-aligned. The thread that decodes a block of high bytes reads the same
// elements' low bytes from the frame and writes the elements themselves,
// rotated back, 16 at a time: the decoded stream never goes through memory
// and MergeBody skips the frame (but for its tail bytes). Same bytes as the
// decoded stream followed by MergeBody.
//
// With DecFrame::fused_hash it also sums the XXH3 block deltas
// (hd::Xxh3BlockDelta) of the whole 1024-byte blocks it writes, from the
// words it stores, so that HashBlocksDecBody need not read the output back.
// A block of 2^k elements starts on a hash block (k >= kMinGpuBlockLog2), and
// every whole hash block of a 2-byte frame lies below its tail byte and
// below its last count % 16 elements (Put1's), so Put16 sees all of them.
template <bool kHash>
struct FusedSink {
  uint8_t* out;        // element `first` of the frame's output
  const uint8_t* low;  // its low byte in the raw stream
  const uint8_t* end;  // the frame's end: aligned words are read only below it
  bool rot;
  uint64_t* deltas;      // kHash: the deltas of the hash block `out` starts
  uint32_t hash_blocks;  // kHash: whole hash blocks of the frame from there that this block holds
  uint64_t d[8];         // the current hash block's sums
  // Word j (0-7) of the stripe `stripe` of the current hash block.
  template <int J>
  LMC_HD void Acc(uint64_t v, uint32_t stripe) {
    const uint64_t k = v ^ hd::Xxh3SecretWord(static_cast<int>(stripe) + J);
    d[J ^ 1] += v;
    d[J] += (k & 0xffffffffu) * (k >> 32);
  }
  // Bytes 2i .. 2i+31 from out (the words v0-v3) into the sums.
  LMC_HD void Hash(uint32_t i, uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3) {
    const uint32_t b = 2 * i, hb = b / hd::kXxh3BlockLen;
    if (hb >= hash_blocks) return;
    const uint32_t m = b / 32 % 32, stripe = m / 2;  // 32 bytes a call, 2 calls a stripe
    if (m == 0) {
      LMC_UNROLL
      for (int k = 0; k < 8; ++k) d[k] = 0;
    }
    if ((m & 1) == 0) {  // the same in every thread of a warp (same i): no divergence
      Acc<0>(v0, stripe), Acc<1>(v1, stripe), Acc<2>(v2, stripe), Acc<3>(v3, stripe);
    } else {
      Acc<4>(v0, stripe), Acc<5>(v1, stripe), Acc<6>(v2, stripe), Acc<7>(v3, stripe);
    }
    if (m == 31) {
      LMC_UNROLL
      for (int k = 0; k < 8; ++k) deltas[8 * hb + k] = d[k];
    }
  }
  LMC_HD bool Aligned16() const { return (reinterpret_cast<uintptr_t>(out) & 15) == 0; }
  // Low bytes i .. i+15 as four words, the first lowest: StreamWord8's
  // aligned loads, 16 bytes at a time and for a raw stream only (two
  // StreamWord8 calls cost the fused kernels 8 more registers a thread on
  // sm_90, 64 against 56).
  LMC_HD void Low16(uint32_t i, uint32_t l[4]) const {
    const uint8_t* q = low + i;
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(q) & 3);
    const uint8_t* w = q - mis;  // the frame's bytes before q are its own (header, stream 0)
    if (w + 20 <= end) {         // five aligned words hold the 16 bytes
      uint32_t x[5];
      LMC_UNROLL
      for (int k = 0; k < 5; ++k) x[k] = hd::LoadAligned32(w + 4 * k);
      LMC_UNROLL
      for (int k = 0; k < 4; ++k) l[k] = hd::FunnelRight(x[k], x[k + 1], 8 * mis);
      return;
    }
    for (int k = 0; k < 4; ++k)
      l[k] = uint32_t{q[4 * k]} | uint32_t{q[4 * k + 1]} << 8 | uint32_t{q[4 * k + 2]} << 16 |
             uint32_t{q[4 * k + 3]} << 24;
  }
  LMC_HD void Put16(uint32_t i, uint32_t h0, uint32_t h1, uint32_t h2, uint32_t h3) {
    uint32_t l[4];
    Low16(i, l);
    const uint32_t h[4] = {h0, h1, h2, h3};
    uint32_t w[8];
    LMC_UNROLL
    for (int k = 0; k < 4; ++k) {  // elements 4k .. 4k+3: (low, high) byte pairs
      w[2 * k] = BytePerm(l[k], h[k], 0x5140);
      w[2 * k + 1] = BytePerm(l[k], h[k], 0x7362);
    }
    if (rot) {
      LMC_UNROLL
      for (int k = 0; k < 8; ++k) w[k] = Rotr16(w[k]);
    }
    hd::StoreAligned128(out + 2 * i, w[0], w[1], w[2], w[3]);
    hd::StoreAligned128(out + 2 * i + 16, w[4], w[5], w[6], w[7]);
    if constexpr (kHash)
      Hash(i, uint64_t{w[1]} << 32 | w[0], uint64_t{w[3]} << 32 | w[2], uint64_t{w[5]} << 32 | w[4],
           uint64_t{w[7]} << 32 | w[6]);
  }
  LMC_HD void Put1(uint32_t i, uint32_t s) const {
    uint32_t v = s << 8 | low[i];
    if (rot) v = Rotr16(v);  // the high half is 0 and stays 0
    out[2 * i] = static_cast<uint8_t>(v);
    out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
  }
};

// How a Huffman stream's tasks decode: into the decoded-stream buffer, or
// fused (a fused frame's stream 0: FusedSink), with or without the hash
// sums. The host groups the tasks by mode and launches a kernel for each,
// so that the plain decoder does not carry the fused one's registers.
enum DecodeMode : int { kDecodePlain = 0, kDecodeFused = 1, kDecodeFusedHash = 2, kDecodeModes = 3 };

// One task: block j of a stream (or quarter j of a version-1 stream), with
// the stream's table wherever it is (global memory here, shared memory
// in the CUDA kernel).
template <int Mode>
LMC_HD void DecodeTask(const DecArgs& a, size_t i, const uint16_t* single) {
  const uint32_t si = a.huff_streams[a.task_huff[i]];
  const DecStream& s = a.streams[si];
  DecFrame& f = a.frames[s.frame];
  if (f.bad) return;
  const uint64_t j = i - s.task0;
  uint64_t first, count;
  if (s.coder == hd::kCoderHuffmanBlocked) {
    first = j << s.log2;
    if (first >= s.n) return;
    count = s.n - first < (uint64_t{1} << s.log2) ? s.n - first : (uint64_t{1} << s.log2);
  } else {
    if (j >= 4) return;
    const uint64_t q = s.n / 4;
    first = j * q;
    count = j == 3 ? s.n - 3 * q : q;
  }
  const uint64_t* st = a.starts + s.start0;
  const uint8_t* payload = f.frame + s.off + s.payload;
  const int mode =
      f.fused && si == f.stream0 ? (f.fused_hash ? kDecodeFusedHash : kDecodeFused) : kDecodePlain;
  if (mode != Mode) return MarkBad(f);  // never: the host groups tasks by mode
  bool ok;
  if constexpr (Mode == kDecodePlain) {
    ok = hd::HuffDecodeRangeWords(payload, s.len - s.payload, st[j], st[j + 1], single,
                                  a.dbuf + s.buf + first, static_cast<uint32_t>(count));
  } else {
    FusedSink<Mode == kDecodeFusedHash> sink{f.out + 2 * first,
                                             f.frame + a.streams[si + 1].off + first,
                                             f.frame + f.size,
                                             f.rot != 0,
                                             nullptr,
                                             0,
                                             {}};
    if constexpr (Mode == kDecodeFusedHash) {
      const uint64_t k0 = 2 * first / hd::kXxh3BlockLen, full = hd::Xxh3FullBlocks(f.n);
      const uint64_t held = 2 * count / hd::kXxh3BlockLen;
      sink.deltas = a.deltas + 8 * (f.hash0 + k0);
      sink.hash_blocks = static_cast<uint32_t>(k0 >= full ? 0 : (full - k0 < held ? full - k0 : held));
    }
    ok = hd::HuffDecodeRange(payload, s.len - s.payload, st[j], st[j + 1], single, sink,
                             static_cast<uint32_t>(count));
  }
  if (!ok) MarkBad(f);
}

template <int Mode>
struct HuffDecodeBody {  // i: task - a.task_first, the tasks of one mode
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const uint64_t t = a.task_huff[a.task_first + i];
    DecodeTask<Mode>(a, a.task_first + i, a.single + t * hd::kHuffTableSize);
  }
};

// What MergeBody needs of a stream, held in registers.
struct MergeStream {
  uint8_t coder;
  const uint8_t* p;    // raw: its bytes in the frame; Huffman: its decoded bytes; const: the symbol
  const uint8_t* end;  // raw: the frame's end (aligned words are read only below it)
};

// Bytes k .. k+7 of a stream (n >= k + 8, k a multiple of 8), lowest first.
LMC_HD uint64_t StreamWord8(const MergeStream& s, uint64_t k) {
  if (s.coder == hd::kCoderConst) return 0x0101010101010101ull * s.p[0];
  if (s.coder != hd::kCoderRaw) return LoadAligned64(s.p + k);  // decoded buffer: 16-aligned
  const uint8_t* q = s.p + k;
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(q) & 3);
  const uint8_t* w = q - mis;    // the frame's bytes before q are its own (header, streams)
  if (mis && w + 12 <= s.end) {  // three aligned words hold the 8 bytes
    const uint64_t lo = uint64_t{hd::LoadAligned32(w)} | uint64_t{hd::LoadAligned32(w + 4)} << 32;
    const uint64_t hi = hd::LoadAligned32(w + 8);
    return lo >> (8 * mis) | hi << (64 - 8 * mis);
  }
  if (!mis) return uint64_t{hd::LoadAligned32(q)} | uint64_t{hd::LoadAligned32(q + 4)} << 32;
  uint64_t v = 0;
  for (int b = 0; b < 8; ++b) v |= uint64_t{q[b]} << (8 * b);
  return v;
}
LMC_HD uint8_t StreamByte1(const MergeStream& s, uint64_t k) {
  return s.coder == hd::kCoderConst ? s.p[0] : s.p[k];
}

// Stream b of frame f, for MergeBody.
LMC_HD MergeStream MergeStreamOf(const DecArgs& a, const DecFrame& f, uint32_t b) {
  const DecStream& d = a.streams[f.stream0 + b];
  MergeStream m;
  m.coder = d.coder;
  m.p = d.coder == hd::kCoderRaw || d.coder == hd::kCoderConst ? f.frame + d.off : a.dbuf + d.buf;
  m.end = f.frame + f.size;
  return m;
}

struct MergeBody {  // i: tile * (kTileElems / kPerThread) + j: elements 8j .. 8j+7 of the tile
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const TilePos t = TileOf(a.tile_frame, a.frame_tile0, i);
    const DecFrame f = a.frames[t.owner];  // by value: stores below cannot change it
    if (f.bad) return;
    const uint64_t first = t.first, e0 = t.e0;
    const uint32_t j = t.j;
    uint8_t* out = f.out + e0 * f.w;
    if (f.fused) {
      // The decoder wrote the elements (FusedSink); only the tail is left.
    } else if (f.w == 2 && !f.base && e0 + kPerThread <= f.elems &&
               (reinterpret_cast<uintptr_t>(out) & 7) == 0) {
      // bf16 and f16, eight whole elements: the high and low bytes as two
      // words, interleaved by byte permutes into two 8-byte stores; no
      // arrays (they would live in local memory on a GPU).
      const uint64_t hi = StreamWord8(MergeStreamOf(a, f, 0), e0),
                     lo = StreamWord8(MergeStreamOf(a, f, 1), e0);
      const uint32_t h0 = static_cast<uint32_t>(hi), h1 = static_cast<uint32_t>(hi >> 32);
      const uint32_t l0 = static_cast<uint32_t>(lo), l1 = static_cast<uint32_t>(lo >> 32);
      uint32_t w[4] = {BytePerm(l0, h0, 0x5140), BytePerm(l0, h0, 0x7362), BytePerm(l1, h1, 0x5140),
                       BytePerm(l1, h1, 0x7362)};
      if (f.rot)
        for (uint32_t q = 0; q < 4; ++q) w[q] = Rotr16(w[q]);
      StoreAligned64(out, static_cast<uint64_t>(w[1]) << 32 | w[0]);
      StoreAligned64(out + 8, static_cast<uint64_t>(w[3]) << 32 | w[2]);
    } else if (e0 < f.elems) {
      General(a, t.owner, e0);
    }
    if (first == 0 && j < f.tail) {
      const uint64_t at = f.w * f.elems + j;
      const uint8_t x = StreamByte1(MergeStreamOf(a, f, f.w), j);
      f.out[at] = f.base ? static_cast<uint8_t>(x ^ f.base[at]) : x;
    }
  }
  // Any width, base or alignment (as SplitBody::General).
  static LMC_HD void General(const DecArgs& a, uint32_t frame, uint64_t e0) {
    const DecFrame f = a.frames[frame];  // by value: stores below cannot change it
    MergeStream s[frame::kMaxStreams];
    for (uint32_t b = 0; b < f.w; ++b) s[b] = MergeStreamOf(a, f, b);
    const uint32_t k = f.elems - e0 < kPerThread ? static_cast<uint32_t>(f.elems - e0) : kPerThread;
    uint64_t v[kPerThread];
    for (uint32_t q = 0; q < kPerThread; ++q) v[q] = 0;
    for (uint32_t b = 0; b < f.w; ++b) {
      const uint32_t shift = 8 * (f.w - 1 - b);
      if (k == kPerThread) {
        const uint64_t w8 = StreamWord8(s[b], e0);
        for (uint32_t q = 0; q < kPerThread; ++q) v[q] |= ((w8 >> (8 * q)) & 0xff) << shift;
      } else {
        for (uint32_t q = 0; q < k; ++q) v[q] |= uint64_t{StreamByte1(s[b], e0 + q)} << shift;
      }
    }
    if (f.paired) {  // fp32 (w = 4) against the twin
      for (uint32_t q = 0; q < k; ++q)
        hd::MergeElement(frame::MergePaired(static_cast<uint32_t>(v[q]), TwinAt(f.twin, e0 + q),
                                            f.paired == kPairedPredicted),
                         nullptr, 4, false, f.out + 4 * (e0 + q), f.aligned != 0);
      return;
    }
    for (uint32_t q = 0; q < k; ++q)
      hd::MergeElement(v[q], f.base ? f.base + (e0 + q) * f.w : nullptr, f.w, f.rot != 0,
                       f.out + (e0 + q) * f.w, f.aligned != 0);
  }
};

struct HashBlocksDecBody {                                          // i: hash block
  static LMC_HD const uint8_t* Block(const DecArgs& a, size_t i) {  // null: frame already bad
    const DecFrame& f = a.frames[a.hash_frame[i]];
    return f.bad ? nullptr : f.out + (i - f.hash0) * hd::kXxh3BlockLen;
  }
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const uint8_t* p = Block(a, i);
    if (p) hd::Xxh3BlockDelta(p, a.deltas + 8 * i);
  }
};

struct VerifyBody {  // i: frame. The decoded bytes against the frame's checksum.
  static LMC_HD bool Item(const DecArgs& a, size_t i, const uint8_t** p, uint64_t* n, uint64_t* hash0) {
    const DecFrame& f = a.frames[i];
    *p = f.out, *n = f.n, *hash0 = f.hash0;
    return !f.bad;
  }
  static LMC_HD void Done(const DecArgs& a, size_t i, uint64_t sum) {
    if (sum != a.frames[i].checksum) a.frames[i].bad = 1;
  }
  static LMC_HD void Run(const DecArgs& a, size_t i) { RunChain<VerifyBody>(a, i); }
};

struct GatherArgs {
  const uint8_t** frames;
  uint64_t* lens;
  uint8_t* out;
  uint64_t head;
};
struct GatherBody {  // i: frame * head + byte
  static LMC_HD void Run(const GatherArgs& a, size_t i) {
    const size_t f = i / a.head, k = i % a.head;
    a.out[i] = k < a.lens[f] ? a.frames[f][k] : 0;
  }
};

// ---------------------------------------------------------------- driver

// Backend interface (duck-typed), one operation a line:
// - uint8_t* Alloc(size_t): device memory, kept until Reset(); nullptr on failure.
// - void Reset(): recycles what Alloc gave.
// - Status ToDevice(void* d, const void* h, size_t n), ToHost(void* h, const void* d, size_t n).
// - uint8_t* Pinned(size_t n): host staging memory (page-locked on CUDA), valid until the next call.
// - Status ToDeviceAsync(void* d, const void* pinned, size_t n), ToHostAsync(void* pinned, const void* d,
//   size_t n): copies that complete by the next Sync().
// - Status Zero(void* d, size_t n).
// - template <class Body, class Args> Status Launch(size_t count, const Args&).
// - Status Histograms(EncStream* dev, uint32_t* hist, const EncStream* host, size_t count, const uint8_t*
// sbuf):
//   256 counts a stream into hist (zeroed).
// - Status Sync().
// - Status Bind(): makes the backend's device current on the calling thread (lanes run on threads of
//   their own).
// - std::string AllocError(): why the last Alloc or Pinned failed (the runtime's words), or "".
// - Status WaitForDefaultStream(): later work waits for what the caller queued on the legacy default
//   stream (device calls' inputs).
// - void HostTime(const char* what, steady_clock::time_point since): host time, when profiling.

// A failed allocation, with the runtime's reason where it gave one (an
// earlier kernel's fault reads as a failed allocation otherwise).
template <typename B>
Status OutOfMemory(const B& backend, const char* what) {
  const std::string why = backend.AllocError();
  return Status::IOError(why.empty() ? std::string(what) : std::string(what) + " (" + why + ")");
}

template <typename T, typename B>
T* AllocArray(B& backend, size_t count) {
  return reinterpret_cast<T*>(backend.Alloc(sizeof(T) * (count ? count : 1)));
}

inline bool StreamsOf(DType t, size_t n, uint32_t* w, uint64_t* elems, uint32_t* tail) {
  const uint32_t width = hd::DTypeWidthOf(static_cast<uint8_t>(t));
  if (!width) return false;
  *w = width;
  *elems = n / width;
  *tail = static_cast<uint32_t>(n % width);
  return true;
}

// Encodes the items whose pointers are in the backend's address space
// (device pointers, or staged copies). `gpu` selects the items to run on the
// device; the caller codes the others on the CPU. `twins_staged`: the
// bases of paired items are their twins' ranges already (staged copies),
// not whole twin chunks. `log2`: GpuCodecOptions::huffman_block_log2.
template <typename B>
Status EncodeOnDevice(B& be, GpuEncodeItem* items, const std::vector<size_t>& gpu,
                      std::vector<uint8_t*>& outs, bool twins_staged, int log2) {
  const size_t nc = gpu.size();
  if (nc == 0) return Status::Ok();
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<EncChunk> chunks(nc);
  std::vector<EncStream> streams;
  std::vector<uint64_t> chunk_hash0(nc + 1), chunk_tile0(nc + 1), stream_block0, stream_raw0;
  uint64_t sbytes = 0, swords = 0, blocks = 0, hashes = 0, tiles = 0, raws = 0;
  bool any_paired = false;
  for (size_t c = 0; c < nc; ++c) {
    const GpuEncodeItem& it = items[gpu[c]];
    EncChunk& ch = chunks[c];
    std::memset(&ch, 0, sizeof(ch));
    StreamsOf(it.dtype, it.n, &ch.w, &ch.elems, &ch.tail);
    ch.src = it.src;
    ch.base = it.base;
    if (it.widened_base_offset) {  // GpuEncodable: an fp32 chunk whose twin range is inside its base
      ch.base = nullptr;
      ch.paired = kPairedWidened;  // until PairedChoiceBody
      ch.twin_offset = *it.widened_base_offset;
      ch.twin = it.base + (twins_staged ? 0 : 2 * uint64_t{ch.twin_offset});
      any_paired = true;
    }
    ch.out = outs[c];
    ch.n = it.n;
    ch.dtype = static_cast<uint8_t>(it.dtype);
    ch.rot = hd::DTypeIsFloat(ch.dtype);
    ch.aligned = reinterpret_cast<uintptr_t>(it.src) % ch.w == 0 &&
                 (!ch.base || reinterpret_cast<uintptr_t>(ch.base) % ch.w == 0);
    ch.nstreams = ch.w + (ch.tail ? 1 : 0);
    ch.stream0 = static_cast<uint32_t>(streams.size());
    ch.hash0 = chunk_hash0[c] = hashes;
    hashes += hd::Xxh3FullBlocks(it.n);
    chunk_tile0[c] = tiles;
    tiles += (std::max<uint64_t>(ch.elems, 1) + kTileElems - 1) / kTileElems;
    for (uint32_t j = 0; j < ch.nstreams; ++j) {
      EncStream s;
      std::memset(&s, 0, sizeof(s));
      s.chunk = static_cast<uint32_t>(c);
      s.n = j < ch.w ? ch.elems : ch.tail;
      sbytes = (sbytes + 15) & ~uint64_t{15};  // aligned: word loads of symbols
      s.buf = sbytes;
      sbytes += s.n;
      s.scratch_word = swords;
      swords += s.n / 4 + 4;
      s.block0 = blocks;
      stream_block0.push_back(blocks);
      s.blocks = hd::HuffBlocks(s.n, log2);
      blocks += s.blocks + 1;  // a spare start slot per stream
      stream_raw0.push_back(raws);
      raws += (s.n + kRawTile - 1) / kRawTile;
      streams.push_back(s);
    }
  }
  chunk_hash0[nc] = hashes;
  chunk_tile0[nc] = tiles;
  const size_t ns = streams.size();
  stream_block0.push_back(blocks);
  stream_raw0.push_back(raws);
  EncArgs a;
  a.log2 = static_cast<uint32_t>(log2);
  a.nc = static_cast<uint32_t>(nc);
  a.ns = static_cast<uint32_t>(ns);
  a.chunks = AllocArray<EncChunk>(be, nc);
  a.streams = AllocArray<EncStream>(be, ns);
  a.hist = AllocArray<uint32_t>(be, 256 * ns);
  a.codes = AllocArray<uint32_t>(be, 256 * ns);
  a.lens = AllocArray<uint8_t>(be, 256 * ns);
  a.plan_u64 = AllocArray<uint64_t>(be, (hd::HuffBuildStrided::kU64 + 256) * ns);
  a.plan_u8 = AllocArray<uint8_t>(be, hd::HuffBuildStrided::kU8 * ns);
  a.sbuf = AllocArray<uint8_t>(be, sbytes);
  a.scratch = AllocArray<uint32_t>(be, swords);
  a.deltas = AllocArray<uint64_t>(be, 8 * hashes);
  a.chunk_hash0 = AllocArray<uint64_t>(be, nc + 1);
  a.chunk_tile0 = AllocArray<uint64_t>(be, nc + 1);
  a.stream_block0 = AllocArray<uint64_t>(be, ns + 1);
  a.stream_raw0 = AllocArray<uint64_t>(be, ns + 1);
  a.block_bits = AllocArray<uint32_t>(be, blocks);
  a.block_start = AllocArray<uint64_t>(be, blocks);
  a.tile_chunk = AllocArray<uint32_t>(be, tiles);
  a.hash_chunk = AllocArray<uint32_t>(be, hashes);
  a.block_stream = AllocArray<uint32_t>(be, blocks);
  a.raw_stream = AllocArray<uint32_t>(be, raws);
  if (!a.chunks || !a.streams || !a.hist || !a.codes || !a.lens || !a.plan_u64 || !a.plan_u8 || !a.sbuf ||
      !a.scratch || !a.deltas || !a.chunk_hash0 || !a.chunk_tile0 || !a.stream_block0 || !a.stream_raw0 ||
      !a.block_bits || !a.block_start || !a.tile_chunk || !a.hash_chunk || !a.block_stream || !a.raw_stream)
    return OutOfMemory(be, "GPU: out of device memory for an encode batch");
  LMC_RETURN_IF_ERROR(be.ToDevice(a.chunks, chunks.data(), sizeof(EncChunk) * nc));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.streams, streams.data(), sizeof(EncStream) * ns));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.chunk_hash0, chunk_hash0.data(), 8 * (nc + 1)));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.chunk_tile0, chunk_tile0.data(), 8 * (nc + 1)));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.stream_block0, stream_block0.data(), 8 * (ns + 1)));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.stream_raw0, stream_raw0.data(), 8 * (ns + 1)));
  be.HostTime("encode: host planning and table uploads", t_start);
  LMC_RETURN_IF_ERROR(be.Zero(a.hist, 4 * 256 * ns));
  LMC_RETURN_IF_ERROR(be.Zero(a.scratch, 4 * swords));
  LMC_RETURN_IF_ERROR(be.Zero(a.block_bits, 4 * blocks));
  LMC_RETURN_IF_ERROR(be.template Launch<OwnerFillBody>(tiles, OwnerArgs{a.chunk_tile0, a.nc, a.tile_chunk}));
  LMC_RETURN_IF_ERROR(
      be.template Launch<OwnerFillBody>(hashes, OwnerArgs{a.chunk_hash0, a.nc, a.hash_chunk}));
  LMC_RETURN_IF_ERROR(
      be.template Launch<OwnerFillBody>(blocks, OwnerArgs{a.stream_block0, a.ns, a.block_stream}));
  LMC_RETURN_IF_ERROR(be.template Launch<OwnerFillBody>(raws, OwnerArgs{a.stream_raw0, a.ns, a.raw_stream}));

  if (any_paired) {
    LMC_RETURN_IF_ERROR(be.template Launch<PairedMissesBody>(tiles * (kTileElems / kPerThread), a));
    LMC_RETURN_IF_ERROR(be.template Launch<PairedChoiceBody>(nc, a));
  }
  LMC_RETURN_IF_ERROR(be.template Launch<SplitBody>(tiles * (kTileElems / kPerThread), a));
  LMC_RETURN_IF_ERROR(be.template Launch<HashBlocksEncBody>(hashes, a));
  LMC_RETURN_IF_ERROR(be.Histograms(a.streams, a.hist, streams.data(), ns, a.sbuf));
  LMC_RETURN_IF_ERROR(be.template Launch<PlanBody>(ns, a));
  LMC_RETURN_IF_ERROR(be.template Launch<RansEncodeBody>(ns, a));
  LMC_RETURN_IF_ERROR(be.template Launch<BlockBitsBody>(blocks, a));
  LMC_RETURN_IF_ERROR(be.template Launch<ScanBody>(ns, a));
  LMC_RETURN_IF_ERROR(be.template Launch<HuffEncodeBody>(blocks, a));
  LMC_RETURN_IF_ERROR(be.template Launch<ChainEncBody>(nc, a));
  LMC_RETURN_IF_ERROR(be.template Launch<LayoutBody>(nc, a));
  LMC_RETURN_IF_ERROR(be.template Launch<CopyStreamBody>(raws * (kRawTile / kCopyBytes), a));
  LMC_RETURN_IF_ERROR(be.ToHost(chunks.data(), a.chunks, sizeof(EncChunk) * nc));  // frame lengths
  for (size_t c = 0; c < nc; ++c) {
    GpuEncodeItem& it = items[gpu[c]];
    it.len = chunks[c].frame_len;
    it.status =
        it.len <= it.cap ? Status::Ok() : Status::InvalidArgument("GPU: frame larger than its buffer");
  }
  be.HostTime("encode: whole EncodeOnDevice", t_start);
  return Status::Ok();
}

// What the host knows of a frame before decoding it on the device.
struct DecPlanItem {
  size_t item;
  FrameInfo fi;
  // Blocked Huffman streams: the block size (log2) read from the coder
  // header at planning, or 0 where the bytes at hand did not reach it (the
  // codec's own size is planned; ParseBody sends another to the CPU).
  uint8_t block_log2[frame::kMaxStreams] = {};
};

// Whether the decoder writes frame `fi`'s elements itself (FusedSink).
inline bool FusesMerge(const FrameInfo& fi, const uint8_t* out) {
  return !fi.xor_delta && fi.streams.size() >= 2 && hd::DTypeWidthOf(static_cast<uint8_t>(fi.dtype)) == 2 &&
         fi.streams[0].coder == Coder::kHuffmanBlocked && fi.streams[1].coder == Coder::kRaw &&
         (reinterpret_cast<uintptr_t>(out) & 15) == 0;
}

// `fuse`, `fuse_hash`: GpuCodecOptions::fuse_merge and fuse_hash. *fused:
// the frames it took that way. `log2`: the block size planned for blocked
// Huffman streams whose plan entry does not name one
// (GpuCodecOptions::huffman_block_log2); a stream of another is bad, for
// the CPU.
template <typename B>
Status DecodeOnDevice(B& be, GpuDecodeItem* items, const std::vector<DecPlanItem>& plan,
                      const std::vector<const uint8_t*>& frames, const std::vector<uint8_t*>& outs,
                      std::vector<bool>& bad, bool fuse, bool fuse_hash, int log2, std::vector<bool>* fused) {
  const size_t nf = plan.size();
  bad.assign(nf, false);
  fused->assign(nf, false);
  if (nf == 0) return Status::Ok();
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<DecFrame> fr(nf);
  std::vector<DecStream> streams;
  std::vector<uint32_t> huff, rans;
  std::vector<uint64_t> huff_task0, frame_tile0(nf + 1), frame_hash0(nf + 1);
  uint64_t dbytes = 0, tasks = 0, tables = 0, nstarts = 0, hashes = 0, tiles = 0, fused_hashes = 0;
  std::vector<uint32_t> by_mode[kDecodeModes];  // Huffman streams by DecodeMode
  for (size_t f = 0; f < nf; ++f) {
    const FrameInfo& fi = plan[f].fi;
    const GpuDecodeItem& it = items[plan[f].item];
    DecFrame& d = fr[f];
    std::memset(&d, 0, sizeof(d));
    StreamsOf(fi.dtype, fi.decoded_size, &d.w, &d.elems, &d.tail);
    d.frame = frames[f];
    d.base = fi.xor_delta && !fi.widened_base ? it.base : nullptr;
    if (fi.widened_base) {  // PlanDecode: the twin range lies inside the base
      d.paired = fi.predicted ? kPairedPredicted : kPairedWidened;
      d.twin = it.base + 2 * uint64_t{fi.base_offset};
    }
    d.out = outs[f];
    d.n = fi.decoded_size;
    d.checksum = fi.checksum;
    d.size = fi.frame_size;
    d.nstreams = static_cast<uint32_t>(fi.streams.size());
    d.stream0 = static_cast<uint32_t>(streams.size());
    d.rot = hd::DTypeIsFloat(static_cast<uint8_t>(fi.dtype));
    d.aligned = (reinterpret_cast<uintptr_t>(outs[f]) % d.w) == 0;
    d.fused = fuse && FusesMerge(fi, outs[f]);
    d.fused_hash = d.fused && fuse_hash;
    (*fused)[f] = d.fused != 0;
    // Hash blocks: HashBlocksDecBody's first (frame_hash0, its owner map),
    // then those the fused decoder sums (numbered below, after the loop).
    d.hash0 = frame_hash0[f] = hashes;
    if (d.fused_hash)
      fused_hashes += hd::Xxh3FullBlocks(d.n);
    else
      hashes += hd::Xxh3FullBlocks(d.n);
    frame_tile0[f] = tiles;
    // A fused frame's merge tiles: one for its tail bytes, if any.
    tiles += d.fused ? (d.tail ? 1 : 0) : (std::max<uint64_t>(d.elems, 1) + kTileElems - 1) / kTileElems;
    uint64_t off = fi.header_size;
    for (uint32_t j = 0; j < d.nstreams; ++j) {
      const StreamInfo& si = fi.streams[j];
      DecStream s;
      std::memset(&s, 0, sizeof(s));
      s.frame = static_cast<uint32_t>(f);
      s.coder = static_cast<uint8_t>(si.coder);
      s.n = si.decoded_size;
      s.off = off;
      s.len = si.encoded_size;
      off += si.encoded_size;
      const bool huffman = s.coder == hd::kCoderHuffman || s.coder == hd::kCoderHuffmanBlocked;
      const bool rans_coder = s.coder == hd::kCoderRans || s.coder == hd::kCoderRansX32;
      const bool direct = d.fused && j == 0;     // a fused frame's stream 0 goes straight to the output
      if ((huffman && !direct) || rans_coder) {  // decoded into the decode buffer
        dbytes = (dbytes + 15) & ~uint64_t{15};  // aligned: 4-byte stores of symbols, 8-byte merge loads
        s.buf = dbytes;
        dbytes += s.n;
      }
      if (huffman) {
        const uint8_t k = plan[f].block_log2[j];
        s.log2 = s.coder == hd::kCoderHuffman ? 0 : k ? k : static_cast<uint8_t>(log2);
        const uint32_t blocks = s.coder == hd::kCoderHuffman ? 4 : hd::HuffBlocks(s.n, s.log2);
        s.tasks = (blocks + kDecodeGroup - 1) / kDecodeGroup * kDecodeGroup;
        s.start0 = nstarts;
        nstarts += blocks + 1;
        by_mode[direct ? (d.fused_hash ? kDecodeFusedHash : kDecodeFused) : kDecodePlain].push_back(
            static_cast<uint32_t>(streams.size()));
      } else if (rans_coder) {
        rans.push_back(static_cast<uint32_t>(streams.size()));
      }
      streams.push_back(s);
    }
  }
  // Huffman streams (tables, task slots) in mode order: one launch a mode.
  uint64_t mode_task0[kDecodeModes + 1];
  for (int m = 0; m < kDecodeModes; ++m) {
    mode_task0[m] = tasks;
    for (uint32_t k : by_mode[m]) {
      DecStream& s = streams[k];
      s.task0 = tasks;
      huff_task0.push_back(tasks);
      tasks += s.tasks;
      s.table = tables++;
      huff.push_back(k);
    }
  }
  mode_task0[kDecodeModes] = tasks;
  frame_hash0[nf] = hashes;
  frame_tile0[nf] = tiles;
  huff_task0.push_back(tasks);
  for (size_t f = 0, next = hashes; f < nf; ++f) {
    if (!fr[f].fused_hash) continue;
    fr[f].hash0 = next;
    next += hd::Xxh3FullBlocks(fr[f].n);
  }
  DecArgs a;
  a.task_first = 0;
  a.nf = static_cast<uint32_t>(nf);
  a.nh = static_cast<uint32_t>(huff.size());
  a.frames = AllocArray<DecFrame>(be, nf);
  a.streams = AllocArray<DecStream>(be, streams.size());
  a.huff_streams = AllocArray<uint32_t>(be, huff.size());
  a.huff_task0 = AllocArray<uint64_t>(be, huff_task0.size());
  a.starts = AllocArray<uint64_t>(be, nstarts);
  a.canon = AllocArray<hd::HuffCanonical>(be, tables);
  a.single = AllocArray<uint16_t>(be, tables * hd::kHuffTableSize);
  a.dbuf = AllocArray<uint8_t>(be, dbytes);
  a.frame_tile0 = AllocArray<uint64_t>(be, nf + 1);
  a.frame_hash0 = AllocArray<uint64_t>(be, nf + 1);
  a.task_huff = AllocArray<uint32_t>(be, tasks);
  a.tile_frame = AllocArray<uint32_t>(be, tiles);
  a.hash_frame = AllocArray<uint32_t>(be, hashes);
  a.deltas = AllocArray<uint64_t>(be, 8 * (hashes + fused_hashes));
  a.nr = static_cast<uint32_t>(rans.size());
  a.rans_streams = AllocArray<uint32_t>(be, rans.size());
  a.rans = AllocArray<RansTable>(be, rans.size());
  if (!a.frames || !a.streams || !a.huff_streams || !a.huff_task0 || !a.starts || !a.canon || !a.single ||
      !a.dbuf || !a.frame_tile0 || !a.frame_hash0 || !a.deltas || !a.task_huff || !a.tile_frame ||
      !a.hash_frame || !a.rans_streams || !a.rans)
    return OutOfMemory(be, "GPU: out of device memory for a decode batch");
  LMC_RETURN_IF_ERROR(be.ToDevice(a.frames, fr.data(), sizeof(DecFrame) * nf));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.streams, streams.data(), sizeof(DecStream) * streams.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.huff_streams, huff.data(), 4 * huff.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.huff_task0, huff_task0.data(), 8 * huff_task0.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.rans_streams, rans.data(), 4 * rans.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.frame_tile0, frame_tile0.data(), 8 * (nf + 1)));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.frame_hash0, frame_hash0.data(), 8 * (nf + 1)));

  be.HostTime("decode: host planning and table uploads", t_start);
  LMC_RETURN_IF_ERROR(be.template Launch<OwnerFillBody>(tasks, OwnerArgs{a.huff_task0, a.nh, a.task_huff}));
  LMC_RETURN_IF_ERROR(be.template Launch<OwnerFillBody>(tiles, OwnerArgs{a.frame_tile0, a.nf, a.tile_frame}));
  LMC_RETURN_IF_ERROR(
      be.template Launch<OwnerFillBody>(hashes, OwnerArgs{a.frame_hash0, a.nf, a.hash_frame}));
  LMC_RETURN_IF_ERROR(be.template Launch<ParseBody>(huff.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<SingleTableBody>(tables * hd::kHuffTableSize, a));
  for (int m = 0; m < kDecodeModes; ++m) {
    a.task_first = mode_task0[m];
    const uint64_t count = mode_task0[m + 1] - mode_task0[m];
    if (m == kDecodePlain) LMC_RETURN_IF_ERROR(be.template Launch<HuffDecodeBody<kDecodePlain>>(count, a));
    if (m == kDecodeFused) LMC_RETURN_IF_ERROR(be.template Launch<HuffDecodeBody<kDecodeFused>>(count, a));
    if (m == kDecodeFusedHash)
      LMC_RETURN_IF_ERROR(be.template Launch<HuffDecodeBody<kDecodeFusedHash>>(count, a));
  }
  LMC_RETURN_IF_ERROR(be.template Launch<RansParseBody>(rans.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<RansDecodeBody>(rans.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<MergeBody>(tiles * (kTileElems / kPerThread), a));
  LMC_RETURN_IF_ERROR(be.template Launch<HashBlocksDecBody>(hashes, a));
  LMC_RETURN_IF_ERROR(be.template Launch<VerifyBody>(nf, a));
  LMC_RETURN_IF_ERROR(be.ToHost(fr.data(), a.frames, sizeof(DecFrame) * nf));
  for (size_t f = 0; f < nf; ++f) bad[f] = fr[f].bad != 0;
  be.HostTime("decode: whole DecodeOnDevice", t_start);
  return Status::Ok();
}

// ---------------------------------------------------------------- GpuCodec

// GpuCodec over backends: cuts calls into batches, stages host memory,
// sends what the device path does not take (small chunks, coders it does not
// decode, anything malformed) to the CPU codec, so that every item gets
// exactly the CPU's frame or Status.
//
// Lanes. Each backend is a lane with its own stream, device memory and
// pinned staging. A host-memory call is cut into pieces that the lanes take
// in turn, lane 0 on the caller's thread and the others on threads of their
// own, so that one piece's host copies and transfers overlap another's
// kernels (one lane would run copy in, kernels and copy out one after
// another). Device-memory calls run on lane 0 alone.
template <typename B>
class BatchCodec final : public GpuCodec {
 public:
  BatchCodec(std::vector<B> backends, GpuCodecOptions o) : o_(o) {
    for (B& b : backends) {
      lanes_.push_back(std::make_unique<Lane>());
      lanes_.back()->be = std::move(b);
    }
  }

  Status EncodeBatch(GpuEncodeItem* items, size_t count) override { return Encode(items, count, false); }
  Status DecodeBatch(GpuDecodeItem* items, size_t count) override { return Decode(items, count, false); }
  Status EncodeBatchDevice(GpuEncodeItem* items, size_t count) override {
    LMC_RETURN_IF_ERROR(BindAndWaitForCaller());
    return Encode(items, count, true);
  }
  Status DecodeBatchDevice(GpuDecodeItem* items, size_t count) override {
    LMC_RETURN_IF_ERROR(BindAndWaitForCaller());
    return Decode(items, count, true);
  }
  GpuCodecStats stats() const override {
    std::lock_guard<std::mutex> l(stats_mu_);
    return stats_;
  }
  std::string description() const override { return lanes_[0]->be.Describe(); }
  std::string profile() const override {
    std::string r;
    for (const auto& l : lanes_) r += l->be.Profile();
    return r;
  }

 private:
  struct Lane {
    B be;
    Workspace ws;
  };

  // Staged buffers start 256-byte aligned, so that kernels use wide loads.
  static size_t Align(size_t n) { return (n + 255) & ~size_t{255}; }

  static bool GpuEncodable(const GpuEncodeItem& it) {
    // Paired: an fp32 chunk whose twin range lies inside its base (else the
    // CPU's EncodeChunk says what is wrong).
    const bool paired_ok =
        !it.widened_base_offset || (it.base && it.dtype == DType::kF32 && it.n % 4 == 0 &&
                                    uint64_t{*it.widened_base_offset} + it.n / 4 <= it.base_len / 2);
    return it.n >= kMinGpuChunk && it.n <= kMaxChunkSize && DTypeValid(static_cast<uint8_t>(it.dtype)) &&
           it.src && it.dst && it.cap >= MaxEncodedSize(it.n) && paired_ok;
  }
  // The base bytes a device batch stages for a chunk of n bytes against
  // `base` (none without one): the twin's range of a paired chunk (its
  // elements from twin_offset on), else n bytes.
  static std::pair<const uint8_t*, size_t> BaseSpan(const uint8_t* base, size_t n,
                                                    std::optional<uint32_t> twin_offset) {
    if (!base) return {nullptr, 0};
    if (twin_offset) return {base + 2 * uint64_t{*twin_offset}, n / 2};
    return {base, n};
  }
  static std::pair<const uint8_t*, size_t> EncodeBaseSpan(const GpuEncodeItem& it) {
    return BaseSpan(it.base, it.n, it.widened_base_offset);
  }

  // The most bytes of a host-memory batch for a call of `total` bytes:
  // enough pieces for every lane to have two (so that copies overlap
  // kernels), none below min_piece_bytes nor above batch_bytes.
  size_t PieceBytes(size_t total, bool device) const {
    if (device || lanes_.size() < 2) return o_.batch_bytes;
    const size_t want = (total + 2 * lanes_.size() - 1) / (2 * lanes_.size());
    return std::max<size_t>(1, std::min(o_.batch_bytes, std::max(o_.min_piece_bytes, want)));
  }

  // Runs units 0..count-1 on the lanes (lane 0 on this thread), each lane
  // taking the next unit when it is free. The first failure stops the
  // others from taking more and is returned.
  template <typename Fn>
  Status RunLanes(size_t count, bool device, Fn&& fn) {
    const size_t n = device ? 1 : std::min(lanes_.size(), count);
    if (n <= 1) {
      // The caller's thread: its current device may be another.
      LMC_RETURN_IF_ERROR(lanes_[0]->be.Bind());
      for (size_t u = 0; u < count; ++u) LMC_RETURN_IF_ERROR(fn(*lanes_[0], u));
      return Status::Ok();
    }
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::vector<Status> st(n);
    auto work = [&](size_t l) {
      Status s;
      try {  // an exception on a lane's own thread would end the process
        s = lanes_[l]->be.Bind();
        for (size_t u; s.ok() && !failed.load() && (u = next.fetch_add(1)) < count;) s = fn(*lanes_[l], u);
      } catch (const std::exception& e) {
        s = Status::IOError(std::string("GPU lane: ") + e.what());
      }
      if (!s.ok()) failed = true;
      st[l] = s;
    };
    std::vector<std::thread> threads;
    for (size_t l = 1; l < n; ++l) threads.emplace_back(work, l);
    work(0);
    for (auto& t : threads) t.join();
    for (const Status& s : st) LMC_RETURN_IF_ERROR(s);
    return Status::Ok();
  }

  // Device calls run on lane 0, on the caller's thread: its device made
  // current, and the lane's stream ordered after the caller's default
  // stream (inputs uploaded or written there).
  Status BindAndWaitForCaller() {
    LMC_RETURN_IF_ERROR(lanes_[0]->be.Bind());
    return lanes_[0]->be.WaitForDefaultStream();
  }

  // fn(), a batch on lane l; when it fails, what it left in flight (copies
  // out of the lane's pinned staging, kernels writing the outputs) ends
  // before the caller redoes the batch on the CPU or the lane's buffers are
  // reused. The wait's own error, if any, is the one fn returned or a later
  // symptom of it.
  template <typename Fn>
  static Status Settled(Lane& l, Fn&& fn) {
    Status s = fn();
    if (!s.ok()) (void)l.be.Sync();
    return s;
  }

  // One batch's chunks and bytes in the stats.
  void Count(bool encode, size_t chunks, uint64_t bytes, size_t fused = 0) {
    std::lock_guard<std::mutex> l(stats_mu_);
    if (encode) {
      stats_.encode_chunks += chunks;
      stats_.encode_bytes += bytes;
    } else {
      stats_.decode_chunks += chunks;
      stats_.decode_bytes += bytes;
      stats_.decode_fused_chunks += fused;
    }
    stats_.batches++;
  }

  // The CPU codec on host copies of a device item (or the item itself).
  void EncodeOnCpu(Lane& l, GpuEncodeItem& it, bool device) {
    EncodeParams p{it.dtype, it.base, EncodeProfile::kGpu};
    p.widened_base_offset = it.widened_base_offset;
    p.base_len = it.base_len;
    p.huffman_block_log2 = o_.huffman_block_log2;
    if (!device) {
      auto r = EncodeChunk(it.src, it.n, p, it.dst, it.cap, l.ws);
      it.status = r.status();
      it.len = r.ok() ? *r : 0;
      return;
    }
    const size_t base_len = it.widened_base_offset ? it.base_len : it.n;
    std::vector<uint8_t> src(it.n), base(it.base ? base_len : 0), out(MaxEncodedSize(it.n));
    Status st = it.n ? l.be.ToHostSync(src.data(), it.src, it.n) : Status::Ok();
    if (st.ok() && it.base && base_len) st = l.be.ToHostSync(base.data(), it.base, base_len);
    if (!st.ok()) {
      it.status = st;
      return;
    }
    p.base = it.base ? base.data() : nullptr;
    auto r = EncodeChunk(src.data(), it.n, p, out.data(), out.size(), l.ws);
    it.status = r.status();
    it.len = 0;
    if (!r.ok()) return;
    if (*r > it.cap) {
      it.status = Status::InvalidArgument("output buffer too small for the frame");
      return;
    }
    it.len = *r;
    it.status = l.be.ToDeviceSync(it.dst, out.data(), *r);
  }

  // Cuts the items the device takes (size(i) > 0: their decoded bytes)
  // into batches, in order, of at most `piece` bytes; *cpu gets the others.
  template <typename SizeFn>
  static std::vector<std::vector<size_t>> Batches(size_t count, size_t piece, SizeFn size,
                                                  std::vector<size_t>* cpu) {
    std::vector<std::vector<size_t>> batches;
    size_t bytes = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t n = size(i);
      if (n == 0) {
        cpu->push_back(i);
        continue;
      }
      if (batches.empty() || bytes + n > piece) {
        batches.emplace_back();
        bytes = 0;
      }
      batches.back().push_back(i);
      bytes += n;
    }
    return batches;
  }

  // The device batches and the CPU's items of one call on the lanes: unit
  // u < batches.size() is batch u, the one after it (when there are CPU
  // items) the CPU's.
  template <typename BatchFn, typename CpuFn>
  Status RunUnits(const std::vector<std::vector<size_t>>& batches, const std::vector<size_t>& cpu,
                  bool device, BatchFn&& batch, CpuFn&& on_cpu) {
    return RunLanes(batches.size() + (cpu.empty() ? 0 : 1), device, [&](Lane& l, size_t u) -> Status {
      if (u < batches.size()) return Settled(l, [&] { return batch(l, batches[u]); });
      for (size_t i : cpu) on_cpu(l, i);
      return Status::Ok();
    });
  }

  Status Encode(GpuEncodeItem* items, size_t count, bool device) {
    auto size = [&](size_t i) { return GpuEncodable(items[i]) ? items[i].n : size_t{0}; };
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) total += size(i);
    std::vector<size_t> cpu;
    const auto batches = Batches(count, PieceBytes(total, device), size, &cpu);
    return RunUnits(
        batches, cpu, device,
        [&](Lane& l, const std::vector<size_t>& b) { return EncodeOneBatch(l, items, b, device); },
        [&](Lane& l, size_t i) { EncodeOnCpu(l, items[i], device); });
  }

  Status EncodeOneBatch(Lane& l, GpuEncodeItem* items, const std::vector<size_t>& gpu, bool device) {
    B& be = l.be;
    be.Reset();
    std::vector<uint8_t*> outs(gpu.size());
    std::vector<bool> redo(gpu.size(), false);  // frames that did not decode back: the CPU's to encode
    if (device) {
      for (size_t c = 0; c < gpu.size(); ++c) outs[c] = items[gpu[c]].dst;
      LMC_RETURN_IF_ERROR(EncodeOnDevice(be, items, gpu, outs, false, o_.huffman_block_log2));
      for (size_t c = 0; c < gpu.size(); ++c)
        if (items[gpu[c]].status.ok()) be.AfterEncode(items[gpu[c]].dst, items[gpu[c]].len);
      if (o_.verify_encode) {
        std::vector<VerifyFrame> v(gpu.size());
        for (size_t c = 0; c < gpu.size(); ++c) {
          const GpuEncodeItem& it = items[gpu[c]];
          const size_t base_len = it.widened_base_offset ? it.base_len : it.n;
          v[c] = {it.status.ok(), it.dst, it.len, nullptr, it.base, base_len, base_len, false, it.n};
        }
        LMC_RETURN_IF_ERROR(VerifyOnDevice(l, v, true, &redo));
      }
    } else {
      // Host memory: the batch is gathered into one pinned buffer (host
      // copies in parallel), sent with one copy, and the frames come back
      // the same way.
      std::vector<size_t> in_off(gpu.size()), base_off(gpu.size()), out_off(gpu.size());
      size_t in_bytes = 0, out_bytes = 0;
      for (size_t c = 0; c < gpu.size(); ++c) {
        const GpuEncodeItem& it = items[gpu[c]];
        in_off[c] = in_bytes;
        in_bytes += Align(it.n);
        base_off[c] = in_bytes;
        in_bytes += Align(EncodeBaseSpan(it).second);
        out_off[c] = out_bytes;
        out_bytes += Align(MaxEncodedSize(it.n));
      }
      uint8_t* pin = be.Pinned(in_bytes + out_bytes);
      uint8_t* din = be.Alloc(in_bytes);
      uint8_t* dout = be.Alloc(out_bytes);
      if (!pin || !din || !dout) return OutOfMemory(be, "GPU: out of memory for an encode batch");
      Pool().ParallelFor(gpu.size(), 0, [&](size_t c, size_t) {
        const GpuEncodeItem& it = items[gpu[c]];
        std::memcpy(pin + in_off[c], it.src, it.n);
        const auto [base, base_len] = EncodeBaseSpan(it);
        if (base) std::memcpy(pin + base_off[c], base, base_len);
      });
      LMC_RETURN_IF_ERROR(be.ToDeviceAsync(din, pin, in_bytes));
      std::vector<GpuEncodeItem> staged(gpu.size());
      std::vector<size_t> idx(gpu.size());
      for (size_t c = 0; c < gpu.size(); ++c) {
        const GpuEncodeItem& it = items[gpu[c]];
        staged[c] = it;
        staged[c].src = din + in_off[c];
        staged[c].base = it.base ? din + base_off[c] : nullptr;
        staged[c].base_len = EncodeBaseSpan(it).second;
        staged[c].dst = outs[c] = dout + out_off[c];
        idx[c] = c;
      }
      LMC_RETURN_IF_ERROR(EncodeOnDevice(be, staged.data(), idx, outs, true, o_.huffman_block_log2));
      for (size_t c = 0; c < gpu.size(); ++c)
        if (staged[c].status.ok()) be.AfterEncode(outs[c], staged[c].len);
      size_t end = 0;
      for (size_t c = 0; c < gpu.size(); ++c) end = std::max(end, out_off[c] + staged[c].len);
      uint8_t* pout = pin + in_bytes;
      LMC_RETURN_IF_ERROR(be.ToHostAsync(pout, dout, end));
      LMC_RETURN_IF_ERROR(be.Sync());
      if (o_.verify_encode) {
        // The frames are still on the device (dout) and their heads on the
        // host (pout); the bases as staged (a twin's range only).
        std::vector<VerifyFrame> v(gpu.size());
        for (size_t c = 0; c < gpu.size(); ++c) {
          const GpuEncodeItem& it = items[gpu[c]];
          v[c] = {staged[c].status.ok(),
                  outs[c],
                  staged[c].len,
                  pout + out_off[c],
                  staged[c].base,
                  staged[c].base_len,
                  it.widened_base_offset ? it.base_len : it.n,
                  true,
                  it.n};
        }
        LMC_RETURN_IF_ERROR(VerifyOnDevice(l, v, false, &redo));
      }
      Pool().ParallelFor(gpu.size(), 0, [&](size_t c, size_t) {
        GpuEncodeItem& it = items[gpu[c]];
        it.status = staged[c].status;
        it.len = staged[c].len;
        if (it.status.ok() && !redo[c]) std::memcpy(it.dst, pout + out_off[c], it.len);
      });
    }
    LMC_RETURN_IF_ERROR(be.Sync());
    // Frames that did not decode back: the CPU encodes their chunks (the
    // items' own memory: host, or device through host copies).
    size_t failed = 0;
    uint64_t bytes = 0;
    for (size_t c = 0; c < gpu.size(); ++c) {
      if (!redo[c]) {
        bytes += items[gpu[c]].n;
        continue;
      }
      EncodeOnCpu(l, items[gpu[c]], device);
      failed++;
    }
    Count(true, gpu.size() - failed, bytes);
    if (o_.verify_encode) {
      std::lock_guard<std::mutex> lk(stats_mu_);
      stats_.encode_verified_chunks += gpu.size() - failed;
      stats_.encode_verify_failures += failed;
    }
    return Status::Ok();
  }

  // A frame the device has just written, for VerifyOnDevice.
  struct VerifyFrame {
    bool written;          // the encoder gave it an OK status (else nothing to check)
    const uint8_t* frame;  // device memory
    size_t len;
    const uint8_t* head;   // its bytes on the host, or null (device calls: gathered)
    const uint8_t* base;   // device memory: the base as the encoder read it
    size_t base_len;       // of `base`
    size_t plan_base_len;  // the item's own (PlanDecode's checks): a twin chunk's whole length, else n
    bool twin_staged;      // a paired chunk's base is its twin's range already
    size_t n;              // the chunk's bytes
  };

  // GpuCodecOptions::verify_encode: the device decodes the frames of one
  // encode batch from device memory, into scratch memory, with the
  // decoder's own checks (headers, coder headers, payload bounds, the
  // XXH3 checksum the encoder took of the chunk's bytes). (*redo)[c]: frame
  // c did not decode back, or its header does not plan as a frame the
  // device decodes (every frame the device writes does), so the caller has
  // the CPU encode that chunk. `device`: a device call, whose frames' heads
  // are gathered here (the lane's memory is recycled: the encode is done
  // with it).
  Status VerifyOnDevice(Lane& l, const std::vector<VerifyFrame>& v, bool device, std::vector<bool>* redo) {
    B& be = l.be;
    const size_t nf = v.size();
    redo->assign(nf, false);
    constexpr size_t kHead = frame::HeaderSize(frame::kMaxStreams, true) + hd::kHuffMaxBlockedHead;
    std::vector<uint8_t> heads;
    if (device) {
      std::vector<GpuDecodeItem> g(nf);
      for (size_t c = 0; c < nf; ++c) {
        g[c].frame = v[c].written ? v[c].frame : nullptr;
        g[c].len = v[c].len;
      }
      LMC_RETURN_IF_ERROR(GatherHeads(l, g.data(), nf, kHead, &heads));
    }
    size_t scratch_bytes = 0;
    for (const VerifyFrame& f : v) scratch_bytes += Align(f.n);
    uint8_t* scratch = be.Alloc(scratch_bytes);
    if (!scratch) return OutOfMemory(be, "GPU: out of device memory to check an encode batch");
    std::vector<GpuDecodeItem> dec;
    std::vector<DecPlanItem> plan;
    std::vector<const uint8_t*> frames;
    std::vector<uint8_t*> outs;
    std::vector<size_t> which;  // plan entry -> frame
    size_t off = 0;
    for (size_t c = 0; c < nf; ++c) {
      const VerifyFrame& f = v[c];
      uint8_t* out = scratch + off;
      off += Align(f.n);
      if (!f.written) continue;
      // Planned as a reader would plan the stored frame: its own base length.
      GpuDecodeItem it;
      it.frame = f.frame;
      it.len = f.len;
      it.base = f.base;
      it.base_len = f.plan_base_len;
      it.dst = out;
      it.cap = f.n;
      const uint8_t* head = device ? heads.data() + c * kHead : f.head;
      const size_t head_len = device ? std::min(kHead, f.len) : f.len;
      std::optional<DecPlanItem> p = PlanDecode(it, dec.size(), head, head_len);
      if (!p || p->fi.decoded_size != f.n || p->fi.frame_size != f.len) {
        (*redo)[c] = true;
        continue;
      }
      if (f.twin_staged) p->fi.base_offset = 0;  // the staged base is the twin's range
      it.base_len = f.base_len;
      dec.push_back(it);
      plan.push_back(std::move(*p));
      frames.push_back(f.frame);
      outs.push_back(out);
      which.push_back(c);
    }
    std::vector<bool> bad, fused;
    LMC_RETURN_IF_ERROR(DecodeOnDevice(be, dec.data(), plan, frames, outs, bad, o_.fuse_merge, o_.fuse_hash,
                                       o_.huffman_block_log2, &fused));
    for (size_t k = 0; k < which.size(); ++k)
      if (bad[k]) (*redo)[which[k]] = true;
    return Status::Ok();
  }

  void DecodeOnCpu(Lane& l, GpuDecodeItem& it, bool device) {
    if (!device) {
      auto r = DecodeChunk(it.frame, it.len, it.base, it.base_len, it.dst, it.cap, l.ws);
      it.status = r.status();
      it.out_len = r.ok() ? *r : 0;
      return;
    }
    std::vector<uint8_t> frame(it.len), base(it.base ? it.base_len : 0);
    Status st = it.len ? l.be.ToHostSync(frame.data(), it.frame, it.len) : Status::Ok();
    if (st.ok() && it.base && it.base_len) st = l.be.ToHostSync(base.data(), it.base, it.base_len);
    if (!st.ok()) {
      it.status = st;
      return;
    }
    std::vector<uint8_t> out(it.cap);
    auto r = DecodeChunk(frame.data(), frame.size(), it.base ? base.data() : nullptr, it.base_len, out.data(),
                         out.size(), l.ws);
    it.status = r.status();
    it.out_len = r.ok() ? *r : 0;
    if (r.ok() && *r) it.status = l.be.ToDeviceSync(it.dst, out.data(), *r);
  }

  // BaseSpan of frame fi (item it): only a delta's base is staged.
  static std::pair<const uint8_t*, size_t> DecodeBaseSpan(const FrameInfo& fi, const GpuDecodeItem& it) {
    if (!fi.xor_delta) return {nullptr, 0};
    return BaseSpan(it.base, fi.decoded_size,
                    fi.widened_base ? std::optional<uint32_t>(fi.base_offset) : std::nullopt);
  }

  // The header, read on the host (`head`: head_len bytes of the frame, all
  // of it or its start), decides the path: the plan entry of a frame the
  // device decodes, or nothing (the CPU decodes it).
  static std::optional<DecPlanItem> PlanDecode(const GpuDecodeItem& it, size_t i, const uint8_t* head,
                                               size_t head_len) {
    if (!it.frame) return std::nullopt;
    Result<FrameInfo> fi = ReadFrameInfo(head, it.len);
    bool ok = fi.ok() && fi->decoded_size >= kMinGpuChunk && it.dst && it.cap >= fi->decoded_size;
    if (ok && fi->widened_base) {
      // Paired fp32 (ReadFrameInfo: an f32 delta): the twin's range inside
      // the base, as the CPU checks (CheckTwinRange).
      ok = it.base && fi->decoded_size % 4 == 0 &&
           uint64_t{fi->base_offset} + fi->decoded_size / 4 <= it.base_len / 2;
    } else if (ok && fi->xor_delta) {
      ok = it.base && it.base_len == fi->decoded_size;
    }
    if (ok) {
      // A raw stream's size is checked here, as the CPU does.
      for (const StreamInfo& s : fi->streams)
        ok &= s.coder != Coder::kRaw || s.encoded_size == s.decoded_size;
      for (const StreamInfo& s : fi->streams) ok &= s.coder != Coder::kConst || s.encoded_size == 1;
    }
    if (!ok) return std::nullopt;
    DecPlanItem plan{i, *fi};
    // Blocked Huffman streams: their block size from the coder header where
    // the bytes at hand reach it (host frames: always; device frames: the
    // gathered head, which holds the first stream's). A size the device
    // does not decode (2^8: below a hash block) is the CPU's.
    uint64_t off = fi->header_size;
    for (size_t j = 0; j < fi->streams.size(); ++j) {
      const StreamInfo& s = fi->streams[j];
      if (s.coder == Coder::kHuffmanBlocked && off < head_len) {
        const size_t avail = static_cast<size_t>(std::min<uint64_t>(head_len - off, s.encoded_size));
        uint8_t lens[256];
        int lo = 0, hi = 0;
        const uint32_t lb = hd::HuffParseLengths(head + off, avail, lens, &lo, &hi);
        if (lb && lb < avail) {
          const int k = head[off + lb];
          if (k < kMinGpuBlockLog2 || k > hd::kMaxBlockLog2) return std::nullopt;
          plan.block_log2[j] = static_cast<uint8_t>(k);
        }
      }
      off += s.encoded_size;
    }
    return plan;
  }

  Status Decode(GpuDecodeItem* items, size_t count, bool device) {
    if (device) return DecodeDevice(items, count);
    // Host memory: plan every frame, then the lanes take the batches.
    std::vector<std::optional<DecPlanItem>> plans(count);
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      plans[i] = PlanDecode(items[i], i, items[i].frame, items[i].len);
      if (plans[i]) total += plans[i]->fi.decoded_size;
    }
    auto size = [&](size_t i) {
      return plans[i] ? static_cast<size_t>(plans[i]->fi.decoded_size) : size_t{0};
    };
    std::vector<size_t> cpu;
    const auto batches = Batches(count, PieceBytes(total, false), size, &cpu);
    return RunUnits(
        batches, cpu, false,
        [&](Lane& l, const std::vector<size_t>& b) {
          std::vector<DecPlanItem> plan;
          plan.reserve(b.size());
          for (size_t i : b) plan.push_back(std::move(*plans[i]));
          return DecodeOneBatch(l, items, plan, false);
        },
        [&](Lane& l, size_t i) { DecodeOnCpu(l, items[i], false); });
  }

  // Device frames, on lane 0: the headers of each batch come over in one
  // gather and one copy.
  Status DecodeDevice(GpuDecodeItem* items, size_t count) {
    Lane& l = *lanes_[0];  // bound by DecodeBatchDevice
    // The frame header and the first stream's coder header (its code
    // lengths and block size: PlanDecode).
    constexpr size_t kHead = frame::HeaderSize(frame::kMaxStreams, true) + hd::kHuffMaxBlockedHead;
    size_t i = 0;
    while (i < count) {
      std::vector<DecPlanItem> plan;
      size_t bytes = 0;
      std::vector<uint8_t> heads;
      const size_t first = i;
      size_t last = i, sum = 0;
      while (last < count && (last == i || sum <= o_.batch_bytes)) sum += items[last++].cap;
      LMC_RETURN_IF_ERROR(Settled(l, [&] { return GatherHeads(l, items + i, last - i, kHead, &heads); }));
      for (; i < count && (plan.empty() || bytes <= o_.batch_bytes); ++i) {
        if ((i - first + 1) * kHead > heads.size()) break;  // beyond the gathered heads
        auto p = PlanDecode(items[i], i, heads.data() + (i - first) * kHead, std::min(kHead, items[i].len));
        if (!p) {
          DecodeOnCpu(l, items[i], true);
          continue;
        }
        bytes += p->fi.decoded_size;
        plan.push_back(std::move(*p));
      }
      if (!plan.empty())
        LMC_RETURN_IF_ERROR(Settled(l, [&] { return DecodeOneBatch(l, items, plan, true); }));
    }
    return Status::Ok();
  }

  Status DecodeOneBatch(Lane& l, GpuDecodeItem* items, const std::vector<DecPlanItem>& plan, bool device) {
    B& be = l.be;
    be.Reset();
    std::vector<const uint8_t*> frames(plan.size());
    std::vector<uint8_t*> outs(plan.size());
    std::vector<GpuDecodeItem> staged;
    uint8_t *pin = nullptr, *pout = nullptr, *dout = nullptr;
    std::vector<size_t> host_out_off;
    size_t host_out_bytes = 0;
    if (device) {
      for (size_t f = 0; f < plan.size(); ++f) {
        frames[f] = items[plan[f].item].frame;
        outs[f] = items[plan[f].item].dst;
      }
    } else {
      std::vector<size_t> in_off(plan.size()), base_off(plan.size()), out_off(plan.size());
      size_t in_bytes = 0, out_bytes = 0;
      for (size_t f = 0; f < plan.size(); ++f) {
        in_off[f] = in_bytes;
        in_bytes += Align(plan[f].fi.frame_size);
        base_off[f] = in_bytes;
        in_bytes += Align(DecodeBaseSpan(plan[f].fi, items[plan[f].item]).second);
        out_off[f] = out_bytes;
        out_bytes += Align(plan[f].fi.decoded_size);
      }
      pin = be.Pinned(in_bytes + out_bytes);
      uint8_t* din = be.Alloc(in_bytes);
      dout = be.Alloc(out_bytes);
      if (!pin || !din || !dout) return OutOfMemory(be, "GPU: out of memory for a decode batch");
      pout = pin + in_bytes;
      Pool().ParallelFor(plan.size(), 0, [&](size_t f, size_t) {
        const GpuDecodeItem& it = items[plan[f].item];
        std::memcpy(pin + in_off[f], it.frame, plan[f].fi.frame_size);
        const auto [base, base_len] = DecodeBaseSpan(plan[f].fi, it);
        if (base) std::memcpy(pin + base_off[f], base, base_len);
      });
      LMC_RETURN_IF_ERROR(be.ToDeviceAsync(din, pin, in_bytes));
      staged.resize(plan.size());
      for (size_t f = 0; f < plan.size(); ++f) {
        staged[f] = items[plan[f].item];
        frames[f] = din + in_off[f];
        if (plan[f].fi.xor_delta) {
          staged[f].base = din + base_off[f];
          staged[f].base_len = DecodeBaseSpan(plan[f].fi, items[plan[f].item]).second;
        }
        outs[f] = dout + out_off[f];
      }
      host_out_off = std::move(out_off);
      host_out_bytes = out_bytes;
    }
    // DecodeOnDevice reads base pointers from the items it is given.
    std::vector<DecPlanItem> local(plan.size());
    std::vector<GpuDecodeItem> tmp(plan.size());
    for (size_t f = 0; f < plan.size(); ++f) {
      tmp[f] = device ? items[plan[f].item] : staged[f];
      local[f] = plan[f];
      local[f].item = f;
      if (!device) local[f].fi.base_offset = 0;  // a staged twin is its range already
    }
    std::vector<bool> bad, fused;
    LMC_RETURN_IF_ERROR(DecodeOnDevice(be, tmp.data(), local, frames, outs, bad, o_.fuse_merge, o_.fuse_hash,
                                       o_.huffman_block_log2, &fused));
    if (!device) {
      LMC_RETURN_IF_ERROR(be.ToHostAsync(pout, dout, host_out_bytes));
      LMC_RETURN_IF_ERROR(be.Sync());
      Pool().ParallelFor(plan.size(), 0, [&](size_t f, size_t) {
        if (!bad[f]) std::memcpy(items[plan[f].item].dst, pout + host_out_off[f], plan[f].fi.decoded_size);
      });
    }
    size_t chunks = 0, fused_chunks = 0;
    uint64_t bytes = 0;
    for (size_t f = 0; f < plan.size(); ++f) {
      GpuDecodeItem& it = items[plan[f].item];
      if (bad[f]) {
        // The CPU decoder gives the exact reason (or, were the device
        // wrong, the right bytes).
        DecodeOnCpu(l, it, device);
        continue;
      }
      it.out_len = plan[f].fi.decoded_size;
      it.status = Status::Ok();
      chunks++;
      fused_chunks += fused[f];
      bytes += it.out_len;
    }
    LMC_RETURN_IF_ERROR(be.Sync());
    Count(false, chunks, bytes, fused_chunks);
    return Status::Ok();
  }

  // Copies the first `head` bytes (fewer where len is shorter) of each
  // device frame into `out`, head bytes a frame.
  Status GatherHeads(Lane& l, const GpuDecodeItem* items, size_t count, size_t head,
                     std::vector<uint8_t>* out) {
    B& be = l.be;
    be.Reset();
    std::vector<const uint8_t*> ptr(count);
    std::vector<uint64_t> len(count);
    for (size_t k = 0; k < count; ++k) ptr[k] = items[k].frame, len[k] = items[k].frame ? items[k].len : 0;
    GatherArgs g;
    g.frames = AllocArray<const uint8_t*>(be, count);
    g.lens = AllocArray<uint64_t>(be, count);
    g.out = AllocArray<uint8_t>(be, count * head);
    g.head = head;
    if (!g.frames || !g.lens || !g.out) return OutOfMemory(be, "GPU: out of device memory for frame headers");
    LMC_RETURN_IF_ERROR(be.ToDevice(g.frames, ptr.data(), sizeof(void*) * count));
    LMC_RETURN_IF_ERROR(be.ToDevice(g.lens, len.data(), 8 * count));
    LMC_RETURN_IF_ERROR(be.template Launch<GatherBody>(count * head, g));
    out->assign(count * head, 0);
    LMC_RETURN_IF_ERROR(be.ToHost(out->data(), g.out, count * head));
    return be.Sync();
  }

  // Host copies in and out of the pinned staging buffers (shared by the
  // lanes: ParallelFor may be called from several threads at once).
  ThreadPool& Pool() {
    std::call_once(pool_once_, [this] {
      pool_ = std::make_unique<ThreadPool>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    });
    return *pool_;
  }

  std::vector<std::unique_ptr<Lane>> lanes_;
  GpuCodecOptions o_;
  std::once_flag pool_once_;
  std::unique_ptr<ThreadPool> pool_;
  mutable std::mutex stats_mu_;
  GpuCodecStats stats_;
};

// Whether a codec can run with options o (GpuCodec::Open's check).
inline Status CheckGpuCodecOptions(const GpuCodecOptions& o) {
  if (o.huffman_block_log2 < kMinGpuBlockLog2 || o.huffman_block_log2 > hd::kMaxBlockLog2)
    return Status::InvalidArgument("GPU codec: Huffman block size 2^" + std::to_string(o.huffman_block_log2) +
                                   " out of range (2^" + std::to_string(kMinGpuBlockLog2) + " to 2^" +
                                   std::to_string(hd::kMaxBlockLog2) + " symbols)");
  return Status::Ok();
}

// The pipeline on a host backend (every kernel body run in a loop on the
// CPU): for tests of the pipeline's logic where no GPU is present. Same
// frames and results as the CUDA backend, at CPU speed, with
// GpuCodecOptions::lanes lanes. Null for options CheckGpuCodecOptions refuses.
std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o = {});

// Faults the host backend injects, for tests of the failure paths: the
// n-th kernel launch (counted from 1 over all lanes) fails, or throws
// std::bad_alloc, the n-th allocation fails, the n-th frame written is
// changed. 0: never.
struct EmulatedFaults {
  uint64_t fail_launch = 0;
  uint64_t throw_launch = 0;
  uint64_t fail_alloc = 0;
  // The n-th frame the device writes (counted from 1 over all lanes and
  // calls) has byte flip_at_permille / 1000 of its length flipped in device
  // memory right after the encoder wrote it, as a faulty device or a kernel
  // bug would leave it (what GpuCodecOptions::verify_encode is for).
  uint64_t flip_frame = 0;
  uint32_t flip_at_permille = 500;
};
std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o, const EmulatedFaults& faults);

}  // namespace lmc::gpu
