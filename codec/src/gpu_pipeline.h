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
#include <cstring>
#include <string>
#include <vector>

#include "frame_format.h"
#include "hd/frame_hd.h"
#include "hd/huffman_hd.h"
#include "hd/xxh3.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/gpu.h"
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
  *p += v;
#endif
}
struct EdgeOr {
  LMC_HD void operator()(uint32_t* w, uint32_t v) const { AtomicOr32(w, v); }
};

// Chunks below this size are coded by the CPU within the same call (same
// frames: the GPU profile); the block-parallel hash needs n > 240 anyway.
inline constexpr size_t kMinGpuChunk = 4096;
inline constexpr uint32_t kTileElems = 4096;  // elements per split/merge tile
inline constexpr uint32_t kRawTile = 16384;   // bytes per raw-copy tile
inline constexpr int kLog2 = hd::kDefaultBlockLog2;

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
  uint8_t dtype, rot, pad[6];
};

struct EncStream {
  uint32_t chunk, index;
  uint64_t n;
  uint64_t buf;           // offset of the stream bytes in the streams buffer
  uint64_t scratch_word;  // first word of its payload scratch
  uint64_t block0;        // first block in the block tables
  uint32_t blocks;
  uint32_t hist[256];
  uint32_t codes[256];
  uint8_t len[256];
  uint8_t coder;
  uint32_t hdr;      // bytes of the coder's own header (lengths, log2, block table)
  uint64_t size;     // payload bytes in the frame (hdr included)
  uint64_t out_off;  // offset of the payload in the frame
  uint64_t bits;     // Huffman bits
};

struct EncArgs {
  EncChunk* chunks;
  EncStream* streams;
  uint8_t* sbuf;         // regrouped streams
  uint32_t* scratch;     // Huffman payload words
  uint64_t* deltas;      // 8 per hash block
  uint32_t* hash_chunk;  // chunk of each hash block
  uint32_t* block_stream;
  uint32_t* block_bits;
  uint64_t* block_start;
  uint64_t* tiles;      // split tiles: chunk << 40 | first element
  uint64_t* raw_tiles;  // stream << 40 | first byte
};

struct SplitBody {  // i: tile * kTileElems + j
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const uint64_t t = a.tiles[i / kTileElems];
    const EncChunk& c = a.chunks[t >> 40];
    const uint64_t e = (t & ((uint64_t{1} << 40) - 1)) + i % kTileElems;
    const EncStream* s = a.streams + c.stream0;
    if (e < c.elems) {
      const uint64_t v =
          hd::SplitElement(c.src + e * c.w, c.base ? c.base + e * c.w : nullptr, c.w, c.rot != 0);
      for (uint32_t b = 0; b < c.w; ++b)
        a.sbuf[s[b].buf + e] = static_cast<uint8_t>(v >> (8 * (c.w - 1 - b)));
    }
    // The tail (n % w bytes, XOR only) by the first threads of tile 0.
    if ((t & ((uint64_t{1} << 40) - 1)) == 0 && i % kTileElems < c.tail) {
      const uint64_t k = c.w * c.elems + i % kTileElems;
      a.sbuf[s[c.w].buf + i % kTileElems] = c.base ? (c.src[k] ^ c.base[k]) : c.src[k];
    }
  }
};

struct HashBlocksEncBody {  // i: hash block
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const EncChunk& c = a.chunks[a.hash_chunk[i]];
    hd::Xxh3BlockDelta(c.src + (i - c.hash0) * hd::kXxh3BlockLen, a.deltas + 8 * i);
  }
};

struct PlanBody {  // i: stream
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncStream& s = a.streams[i];
    size_t size = 0;
    s.coder = hd::GpuProfileCoder(s.hist, s.n, s.len, &size);
    s.size = size;
    s.hdr = 0;
    if (s.coder == hd::kCoderHuffmanBlocked) {
      hd::HuffBuildCodes(s.len, s.codes);
      s.hdr = static_cast<uint32_t>(hd::HuffBlockedHeader(hd::HuffShapeOf(s.len).table_bytes, s.blocks));
    }
  }
};

struct BlockBitsBody {  // i: block
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const EncStream& s = a.streams[a.block_stream[i]];
    const uint64_t b = i - s.block0;
    if (s.coder != hd::kCoderHuffmanBlocked || b >= s.blocks) return;
    const uint64_t first = b << kLog2;
    const uint64_t left = s.n - first;
    const uint32_t count =
        static_cast<uint32_t>(left < (uint64_t{1} << kLog2) ? left : (uint64_t{1} << kLog2));
    a.block_bits[i] = hd::HuffBlockBits(a.sbuf + s.buf + first, count, s.codes);
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
    const EncStream& s = a.streams[a.block_stream[i]];
    const uint64_t b = i - s.block0;
    if (s.coder != hd::kCoderHuffmanBlocked || b >= s.blocks) return;
    const uint64_t first = b << kLog2;
    const uint64_t left = s.n - first;
    const uint32_t count =
        static_cast<uint32_t>(left < (uint64_t{1} << kLog2) ? left : (uint64_t{1} << kLog2));
    hd::HuffEncodeBlockWords(a.sbuf + s.buf + first, count, s.codes, a.block_start[s.block0 + b + 0],
                             a.block_bits[i], a.scratch + s.scratch_word, EdgeOr{});
  }
};

struct LayoutBody {  // i: chunk. Checksum, header, coder headers.
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    EncChunk& c = a.chunks[i];
    uint64_t acc[8];
    hd::Xxh3InitAcc(acc);
    const size_t nb = hd::Xxh3FullBlocks(c.n);
    for (size_t k = 0; k < nb; ++k) {
      const uint64_t* d = a.deltas + 8 * (c.hash0 + k);
      for (int l = 0; l < 8; ++l) acc[l] += d[l];
      hd::Xxh3Scramble(acc);
    }
    const uint64_t sum = hd::Xxh3FinishLong(acc, c.src, c.n);
    const size_t hsize = frame::HeaderSize(c.nstreams);
    uint8_t* o = c.out;
    uint64_t pos = hsize;
    uint8_t version = 1;
    for (uint32_t j = 0; j < c.nstreams; ++j) {
      EncStream& s = a.streams[c.stream0 + j];
      s.out_off = pos;
      if (s.coder == hd::kCoderHuffmanBlocked) version = 2;
      uint8_t* e = o + frame::kFixedHeader + j * frame::kStreamEntry;
      e[0] = s.coder;
      const uint32_t sz = static_cast<uint32_t>(s.size);
      for (int k = 0; k < 4; ++k) e[1 + k] = static_cast<uint8_t>(sz >> (8 * k));
      uint8_t* p = o + pos;
      if (s.coder == hd::kCoderConst) {
        p[0] = a.sbuf[s.buf];
      } else if (s.coder == hd::kCoderHuffmanBlocked) {
        const hd::HuffTableShape shape = hd::HuffShapeOf(s.len);
        const uint32_t lb = hd::HuffWriteLengths(s.len, shape, p);
        p[lb] = static_cast<uint8_t>(kLog2);
        for (uint32_t b = 0; b < s.blocks; ++b) {
          const uint32_t bits = a.block_bits[s.block0 + b];
          p[lb + 1 + 2 * b] = static_cast<uint8_t>(bits);
          p[lb + 2 + 2 * b] = static_cast<uint8_t>(bits >> 8);
        }
      }
      pos += s.size;
    }
    o[0] = 'L', o[1] = 'M', o[2] = 'C', o[3] = 'F';
    o[4] = version;
    o[5] = c.dtype;
    o[6] = c.base ? frame::kFlagXorDelta : 0;
    o[7] = static_cast<uint8_t>(c.nstreams);
    for (int k = 0; k < 4; ++k) o[8 + k] = static_cast<uint8_t>(c.n >> (8 * k));
    for (int k = 0; k < 8; ++k) o[12 + k] = static_cast<uint8_t>(sum >> (8 * k));
    const uint32_t crc = static_cast<uint32_t>(hd::Xxh3_64(o, hsize - frame::kHeaderCrc));
    for (int k = 0; k < 4; ++k) o[hsize - frame::kHeaderCrc + k] = static_cast<uint8_t>(crc >> (8 * k));
    c.frame_len = pos;
  }
};

struct CopyPayloadBody {  // i: block. Huffman payload bytes, scratch -> frame.
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const EncStream& s = a.streams[a.block_stream[i]];
    const uint64_t b = i - s.block0;
    if (s.coder != hd::kCoderHuffmanBlocked || b >= s.blocks) return;
    const uint64_t from = a.block_start[s.block0 + b] / 8;
    const uint64_t to = b + 1 == s.blocks ? (s.bits + 7) / 8 : a.block_start[s.block0 + b + 1] / 8;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(a.scratch + s.scratch_word);
    uint8_t* dst = a.chunks[s.chunk].out + s.out_off + s.hdr;
    for (uint64_t k = from; k < to; ++k) dst[k] = src[k];
  }
};

struct CopyRawBody {  // i: raw tile * kRawTile + j
  static LMC_HD void Run(const EncArgs& a, size_t i) {
    const uint64_t t = a.raw_tiles[i / kRawTile];
    const EncStream& s = a.streams[t >> 40];
    if (s.coder != hd::kCoderRaw) return;
    const uint64_t k = (t & ((uint64_t{1} << 40) - 1)) + i % kRawTile;
    if (k < s.n) a.chunks[s.chunk].out[s.out_off + k] = a.sbuf[s.buf + k];
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
  uint32_t bad;  // set by any stage that finds a problem
  uint8_t rot, pad[3];
};

struct DecStream {
  uint32_t frame, index;
  uint8_t coder, log2, pad[2];
  uint32_t tasks;    // task slots reserved
  uint64_t n;        // decoded symbols
  uint64_t off;      // payload offset in the frame
  uint64_t len;      // payload bytes
  uint64_t buf;      // decoded stream offset in the decode buffer (Huffman)
  uint64_t task0;    // first task slot; block starts live at starts[task0 ..]
  uint64_t table;    // index of its decode tables
  uint64_t payload;  // offset of the bit payload within the stream payload
};

struct DecArgs {
  DecFrame* frames;
  DecStream* streams;
  uint32_t* huff_streams;  // stream index of each Huffman stream
  uint32_t* task_stream;
  uint64_t* starts;  // per task: start bit (and one spare)
  uint16_t* single;  // kHuffTableSize per Huffman stream
  uint32_t* multi;
  uint8_t* dbuf;    // decoded Huffman streams
  uint64_t* tiles;  // merge tiles: frame << 40 | first element
  uint64_t* deltas;
  uint32_t* hash_frame;
};

LMC_HD void MarkBad(DecFrame& f) { AtomicOr32(&f.bad, 1); }

struct ParseBody {  // i: Huffman stream. Checks the coder header, builds tables and block starts.
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    DecStream& s = a.streams[a.huff_streams[i]];
    DecFrame& f = a.frames[s.frame];
    const uint8_t* p = f.frame + s.off;
    uint8_t lens[256];
    int min_len = 0, max_len = 0;
    const uint32_t lb = hd::HuffParseLengths(p, s.len, lens, &min_len, &max_len);
    if (!lb) return MarkBad(f);
    uint64_t total = 0;
    uint64_t* st = a.starts + s.task0;
    if (s.coder == hd::kCoderHuffmanBlocked) {
      if (s.len < lb + 1u) return MarkBad(f);
      const int log2 = p[lb];
      if (log2 < hd::kMinBlockLog2 || log2 > hd::kMaxBlockLog2) return MarkBad(f);
      const uint32_t blocks = hd::HuffBlocks(s.n, log2);
      if (blocks + 1 > s.tasks + 1 || s.len < lb + 1 + 2 * uint64_t{blocks}) return MarkBad(f);
      s.log2 = static_cast<uint8_t>(log2);
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t bits = uint64_t{p[lb + 1 + 2 * b]} | uint64_t{p[lb + 2 + 2 * b]} << 8;
        const uint64_t first = uint64_t{b} << log2;
        const uint64_t count = s.n - first < (uint64_t{1} << log2) ? s.n - first : (uint64_t{1} << log2);
        if (bits < count * min_len || bits > count * max_len) return MarkBad(f);
        st[b] = total;
        total += bits;
      }
      for (uint32_t b = blocks; b <= s.tasks; ++b) st[b] = total;
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
    uint16_t* single = a.single + s.table * hd::kHuffTableSize;
    uint32_t* multi = a.multi + s.table * hd::kHuffTableSize;
    hd::HuffBuildDecodeTable(lens, single);
    for (uint32_t t = 0; t < static_cast<uint32_t>(hd::kHuffTableSize); ++t)
      multi[t] = hd::HuffMultiEntry(single, t);
  }
};

struct HuffDecodeBody {  // i: task
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const DecStream& s = a.streams[a.task_stream[i]];
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
    const uint64_t* st = a.starts + s.task0;
    const uint8_t* payload = f.frame + s.off + s.payload;
    if (!hd::HuffDecodeRange(payload, s.len - s.payload, st[j], st[j + 1],
                             a.multi + s.table * hd::kHuffTableSize, a.single + s.table * hd::kHuffTableSize,
                             a.dbuf + s.buf + first, static_cast<uint32_t>(count)))
      MarkBad(f);
  }
};

LMC_HD uint8_t StreamByte(const DecArgs& a, const DecFrame& f, const DecStream& s, uint64_t k) {
  if (s.coder == hd::kCoderRaw) return f.frame[s.off + k];
  if (s.coder == hd::kCoderConst) return f.frame[s.off];
  return a.dbuf[s.buf + k];
}

struct MergeBody {  // i: tile * kTileElems + j
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const uint64_t t = a.tiles[i / kTileElems];
    DecFrame& f = a.frames[t >> 40];
    if (f.bad) return;
    const uint64_t first = t & ((uint64_t{1} << 40) - 1);
    const uint64_t e = first + i % kTileElems;
    const DecStream* s = a.streams + f.stream0;
    if (e < f.elems) {
      uint64_t v = 0;
      for (uint32_t b = 0; b < f.w; ++b) v |= uint64_t{StreamByte(a, f, s[b], e)} << (8 * (f.w - 1 - b));
      hd::MergeElement(v, f.base ? f.base + e * f.w : nullptr, f.w, f.rot != 0, f.out + e * f.w);
    }
    if (first == 0 && i % kTileElems < f.tail) {
      const uint64_t k = i % kTileElems, at = f.w * f.elems + k;
      const uint8_t x = StreamByte(a, f, s[f.w], k);
      f.out[at] = f.base ? static_cast<uint8_t>(x ^ f.base[at]) : x;
    }
  }
};

struct HashBlocksDecBody {  // i: hash block
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    const DecFrame& f = a.frames[a.hash_frame[i]];
    if (f.bad) return;
    hd::Xxh3BlockDelta(f.out + (i - f.hash0) * hd::kXxh3BlockLen, a.deltas + 8 * i);
  }
};

struct VerifyBody {  // i: frame
  static LMC_HD void Run(const DecArgs& a, size_t i) {
    DecFrame& f = a.frames[i];
    if (f.bad) return;
    uint64_t acc[8];
    hd::Xxh3InitAcc(acc);
    const size_t nb = hd::Xxh3FullBlocks(f.n);
    for (size_t k = 0; k < nb; ++k) {
      const uint64_t* d = a.deltas + 8 * (f.hash0 + k);
      for (int l = 0; l < 8; ++l) acc[l] += d[l];
      hd::Xxh3Scramble(acc);
    }
    if (hd::Xxh3FinishLong(acc, f.out, f.n) != f.checksum) f.bad = 1;
  }
};

// ---------------------------------------------------------------- driver

// Backend interface (duck-typed):
//   uint8_t* Alloc(size_t)   device memory, kept until Reset(); nullptr on failure
//   void Reset()             frees (or recycles) what Alloc gave
//   Status ToDevice(void* d, const void* h, size_t n) / ToHost(void* h, const void* d, size_t n)
//   Status Zero(void* d, size_t n)
//   template <class Body, class Args> Status Launch(size_t count, const Args&)
//   Status Histograms(EncStream* dev_streams, const EncStream* host_streams, size_t count, const uint8_t*
//   sbuf) Status Sync() bool device_memory()     whether item pointers of the *Device calls are device
//   pointers
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
// device; the caller codes the others on the CPU.
template <typename B>
Status EncodeOnDevice(B& be, GpuEncodeItem* items, const std::vector<size_t>& gpu,
                      std::vector<uint8_t*>& outs) {
  const size_t nc = gpu.size();
  if (nc == 0) return Status::Ok();
  std::vector<EncChunk> chunks(nc);
  std::vector<EncStream> streams;
  std::vector<uint32_t> hash_chunk, block_stream;
  std::vector<uint64_t> tiles, raw_tiles;
  uint64_t sbytes = 0, swords = 0, blocks = 0;
  for (size_t c = 0; c < nc; ++c) {
    const GpuEncodeItem& it = items[gpu[c]];
    EncChunk& ch = chunks[c];
    std::memset(&ch, 0, sizeof(ch));
    StreamsOf(it.dtype, it.n, &ch.w, &ch.elems, &ch.tail);
    ch.src = it.src;
    ch.base = it.base;
    ch.out = outs[c];
    ch.n = it.n;
    ch.dtype = static_cast<uint8_t>(it.dtype);
    ch.rot = hd::DTypeIsFloat(ch.dtype);
    ch.nstreams = ch.w + (ch.tail ? 1 : 0);
    ch.stream0 = static_cast<uint32_t>(streams.size());
    ch.hash0 = hash_chunk.size();
    for (size_t k = 0; k < hd::Xxh3FullBlocks(it.n); ++k) hash_chunk.push_back(static_cast<uint32_t>(c));
    for (uint64_t e = 0; e < std::max<uint64_t>(ch.elems, 1); e += kTileElems)
      tiles.push_back(uint64_t{c} << 40 | e);
    for (uint32_t j = 0; j < ch.nstreams; ++j) {
      EncStream s;
      std::memset(&s, 0, sizeof(s));
      s.chunk = static_cast<uint32_t>(c);
      s.index = j;
      s.n = j < ch.w ? ch.elems : ch.tail;
      s.buf = sbytes;
      sbytes += s.n;
      s.scratch_word = swords;
      swords += s.n / 4 + 4;
      s.block0 = blocks;
      s.blocks = hd::HuffBlocks(s.n, kLog2);
      for (uint32_t b = 0; b < s.blocks; ++b) block_stream.push_back(static_cast<uint32_t>(streams.size()));
      blocks += s.blocks + 1;  // a spare start slot per stream
      block_stream.push_back(static_cast<uint32_t>(streams.size()));
      for (uint64_t k = 0; k < s.n; k += kRawTile) raw_tiles.push_back(uint64_t{streams.size()} << 40 | k);
      streams.push_back(s);
    }
  }
  EncArgs a;
  a.chunks = AllocArray<EncChunk>(be, nc);
  a.streams = AllocArray<EncStream>(be, streams.size());
  a.sbuf = AllocArray<uint8_t>(be, sbytes);
  a.scratch = AllocArray<uint32_t>(be, swords);
  a.deltas = AllocArray<uint64_t>(be, 8 * hash_chunk.size());
  a.hash_chunk = AllocArray<uint32_t>(be, hash_chunk.size());
  a.block_stream = AllocArray<uint32_t>(be, block_stream.size());
  a.block_bits = AllocArray<uint32_t>(be, block_stream.size());
  a.block_start = AllocArray<uint64_t>(be, block_stream.size());
  a.tiles = AllocArray<uint64_t>(be, tiles.size());
  a.raw_tiles = AllocArray<uint64_t>(be, raw_tiles.size());
  if (!a.chunks || !a.streams || !a.sbuf || !a.scratch || !a.deltas || !a.hash_chunk || !a.block_stream ||
      !a.block_bits || !a.block_start || !a.tiles || !a.raw_tiles)
    return Status::IOError("GPU: out of device memory for an encode batch");
  LMC_RETURN_IF_ERROR(be.ToDevice(a.chunks, chunks.data(), sizeof(EncChunk) * nc));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.streams, streams.data(), sizeof(EncStream) * streams.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.hash_chunk, hash_chunk.data(), 4 * hash_chunk.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.block_stream, block_stream.data(), 4 * block_stream.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.tiles, tiles.data(), 8 * tiles.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.raw_tiles, raw_tiles.data(), 8 * raw_tiles.size()));
  LMC_RETURN_IF_ERROR(be.Zero(a.scratch, 4 * swords));
  LMC_RETURN_IF_ERROR(be.Zero(a.block_bits, 4 * block_stream.size()));

  LMC_RETURN_IF_ERROR(be.template Launch<SplitBody>(tiles.size() * kTileElems, a));
  LMC_RETURN_IF_ERROR(be.template Launch<HashBlocksEncBody>(hash_chunk.size(), a));
  LMC_RETURN_IF_ERROR(be.Histograms(a.streams, streams.data(), streams.size(), a.sbuf));
  LMC_RETURN_IF_ERROR(be.template Launch<PlanBody>(streams.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<BlockBitsBody>(block_stream.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<ScanBody>(streams.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<HuffEncodeBody>(block_stream.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<LayoutBody>(nc, a));
  LMC_RETURN_IF_ERROR(be.template Launch<CopyPayloadBody>(block_stream.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<CopyRawBody>(raw_tiles.size() * kRawTile, a));
  LMC_RETURN_IF_ERROR(be.ToHost(chunks.data(), a.chunks, sizeof(EncChunk) * nc));  // frame lengths
  for (size_t c = 0; c < nc; ++c) {
    GpuEncodeItem& it = items[gpu[c]];
    it.len = chunks[c].frame_len;
    it.status =
        it.len <= it.cap ? Status::Ok() : Status::InvalidArgument("GPU: frame larger than its buffer");
  }
  return Status::Ok();
}

// What the host knows of a frame before decoding it on the device.
struct DecPlanItem {
  size_t item;
  FrameInfo fi;
};

template <typename B>
Status DecodeOnDevice(B& be, GpuDecodeItem* items, const std::vector<DecPlanItem>& plan,
                      const std::vector<const uint8_t*>& frames, const std::vector<uint8_t*>& outs,
                      std::vector<bool>& bad) {
  const size_t nf = plan.size();
  bad.assign(nf, false);
  if (nf == 0) return Status::Ok();
  std::vector<DecFrame> fr(nf);
  std::vector<DecStream> streams;
  std::vector<uint32_t> huff, task_stream, hash_frame;
  std::vector<uint64_t> tiles;
  uint64_t dbytes = 0, tasks = 0, tables = 0;
  for (size_t f = 0; f < nf; ++f) {
    const FrameInfo& fi = plan[f].fi;
    const GpuDecodeItem& it = items[plan[f].item];
    DecFrame& d = fr[f];
    std::memset(&d, 0, sizeof(d));
    StreamsOf(fi.dtype, fi.decoded_size, &d.w, &d.elems, &d.tail);
    d.frame = frames[f];
    d.base = fi.xor_delta ? it.base : nullptr;
    d.out = outs[f];
    d.n = fi.decoded_size;
    d.checksum = fi.checksum;
    d.nstreams = static_cast<uint32_t>(fi.streams.size());
    d.stream0 = static_cast<uint32_t>(streams.size());
    d.rot = hd::DTypeIsFloat(static_cast<uint8_t>(fi.dtype));
    d.hash0 = hash_frame.size();
    for (size_t k = 0; k < hd::Xxh3FullBlocks(d.n); ++k) hash_frame.push_back(static_cast<uint32_t>(f));
    for (uint64_t e = 0; e < std::max<uint64_t>(d.elems, 1); e += kTileElems)
      tiles.push_back(uint64_t{f} << 40 | e);
    uint64_t off = fi.header_size;
    for (uint32_t j = 0; j < d.nstreams; ++j) {
      const StreamInfo& si = fi.streams[j];
      DecStream s;
      std::memset(&s, 0, sizeof(s));
      s.frame = static_cast<uint32_t>(f);
      s.index = j;
      s.coder = static_cast<uint8_t>(si.coder);
      s.n = si.decoded_size;
      s.off = off;
      s.len = si.encoded_size;
      off += si.encoded_size;
      if (s.coder == hd::kCoderHuffman || s.coder == hd::kCoderHuffmanBlocked) {
        s.buf = dbytes;
        dbytes += s.n;
        s.tasks = s.coder == hd::kCoderHuffman ? 4 : hd::HuffBlocks(s.n, hd::kMinBlockLog2);
        s.task0 = tasks;
        for (uint32_t k = 0; k < s.tasks; ++k) task_stream.push_back(static_cast<uint32_t>(streams.size()));
        tasks += s.tasks;
        task_stream.push_back(static_cast<uint32_t>(streams.size()));  // the spare start slot
        ++tasks;
        s.table = tables++;
        huff.push_back(static_cast<uint32_t>(streams.size()));
      }
      streams.push_back(s);
    }
  }
  DecArgs a;
  a.frames = AllocArray<DecFrame>(be, nf);
  a.streams = AllocArray<DecStream>(be, streams.size());
  a.huff_streams = AllocArray<uint32_t>(be, huff.size());
  a.task_stream = AllocArray<uint32_t>(be, task_stream.size());
  a.starts = AllocArray<uint64_t>(be, task_stream.size() + 1);
  a.single = AllocArray<uint16_t>(be, tables * hd::kHuffTableSize);
  a.multi = AllocArray<uint32_t>(be, tables * hd::kHuffTableSize);
  a.dbuf = AllocArray<uint8_t>(be, dbytes);
  a.tiles = AllocArray<uint64_t>(be, tiles.size());
  a.deltas = AllocArray<uint64_t>(be, 8 * hash_frame.size());
  a.hash_frame = AllocArray<uint32_t>(be, hash_frame.size());
  if (!a.frames || !a.streams || !a.huff_streams || !a.task_stream || !a.starts || !a.single || !a.multi ||
      !a.dbuf || !a.tiles || !a.deltas || !a.hash_frame)
    return Status::IOError("GPU: out of device memory for a decode batch");
  LMC_RETURN_IF_ERROR(be.ToDevice(a.frames, fr.data(), sizeof(DecFrame) * nf));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.streams, streams.data(), sizeof(DecStream) * streams.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.huff_streams, huff.data(), 4 * huff.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.task_stream, task_stream.data(), 4 * task_stream.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.tiles, tiles.data(), 8 * tiles.size()));
  LMC_RETURN_IF_ERROR(be.ToDevice(a.hash_frame, hash_frame.data(), 4 * hash_frame.size()));

  LMC_RETURN_IF_ERROR(be.template Launch<ParseBody>(huff.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<HuffDecodeBody>(task_stream.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<MergeBody>(tiles.size() * kTileElems, a));
  LMC_RETURN_IF_ERROR(be.template Launch<HashBlocksDecBody>(hash_frame.size(), a));
  LMC_RETURN_IF_ERROR(be.template Launch<VerifyBody>(nf, a));
  LMC_RETURN_IF_ERROR(be.ToHost(fr.data(), a.frames, sizeof(DecFrame) * nf));
  for (size_t f = 0; f < nf; ++f) bad[f] = fr[f].bad != 0;
  return Status::Ok();
}

// ---------------------------------------------------------------- GpuCodec

// GpuCodec over a backend: cuts calls into batches, stages host memory,
// sends what the device path does not take (small chunks, coders it does not
// decode, anything malformed) to the CPU codec, so that every item gets
// exactly the CPU's frame or Status.
template <typename B>
class BatchCodec final : public GpuCodec {
 public:
  BatchCodec(B backend, GpuCodecOptions o) : be_(std::move(backend)), o_(o) {}

  Status EncodeBatch(GpuEncodeItem* items, size_t count) override { return Encode(items, count, false); }
  Status DecodeBatch(GpuDecodeItem* items, size_t count) override { return Decode(items, count, false); }
  Status EncodeBatchDevice(GpuEncodeItem* items, size_t count) override { return Encode(items, count, true); }
  Status DecodeBatchDevice(GpuDecodeItem* items, size_t count) override { return Decode(items, count, true); }
  GpuCodecStats stats() const override { return stats_; }
  std::string description() const override { return be_.Describe(); }
  std::string profile() const override { return be_.Profile(); }

 private:
  static bool GpuEncodable(const GpuEncodeItem& it) {
    return it.n >= kMinGpuChunk && it.n <= kMaxChunkSize && DTypeValid(static_cast<uint8_t>(it.dtype)) &&
           it.src && it.dst && it.cap >= MaxEncodedSize(it.n);
  }

  // The CPU codec on host copies of a device item (or the item itself).
  void EncodeOnCpu(GpuEncodeItem& it, bool device) {
    EncodeParams p{it.dtype, it.base, EncodeProfile::kGpu};
    if (!device) {
      auto r = EncodeChunk(it.src, it.n, p, it.dst, it.cap, ws_);
      it.status = r.status();
      it.len = r.ok() ? *r : 0;
      return;
    }
    std::vector<uint8_t> src(it.n), base(it.base ? it.n : 0), out(MaxEncodedSize(it.n));
    Status st = it.n ? be_.ToHostSync(src.data(), it.src, it.n) : Status::Ok();
    if (st.ok() && it.base && it.n) st = be_.ToHostSync(base.data(), it.base, it.n);
    if (!st.ok()) {
      it.status = st;
      return;
    }
    p.base = it.base ? base.data() : nullptr;
    auto r = EncodeChunk(src.data(), it.n, p, out.data(), out.size(), ws_);
    it.status = r.status();
    it.len = 0;
    if (!r.ok()) return;
    if (*r > it.cap) {
      it.status = Status::InvalidArgument("output buffer too small for the frame");
      return;
    }
    it.len = *r;
    it.status = be_.ToDeviceSync(it.dst, out.data(), *r);
  }

  Status Encode(GpuEncodeItem* items, size_t count, bool device) {
    size_t i = 0;
    while (i < count) {
      // One batch: items until batch_bytes of input.
      std::vector<size_t> gpu;
      size_t bytes = 0;
      for (; i < count && (gpu.empty() || bytes + items[i].n <= o_.batch_bytes); ++i) {
        GpuEncodeItem& it = items[i];
        if (!GpuEncodable(it)) {
          EncodeOnCpu(it, device);
          continue;
        }
        gpu.push_back(i);
        bytes += it.n;
      }
      if (gpu.empty()) continue;
      be_.Reset();
      std::vector<uint8_t*> outs(gpu.size());
      std::vector<GpuEncodeItem> staged;
      std::vector<size_t> out_off(gpu.size());
      if (device) {
        for (size_t c = 0; c < gpu.size(); ++c) outs[c] = items[gpu[c]].dst;
        LMC_RETURN_IF_ERROR(EncodeOnDevice(be_, items, gpu, outs));
      } else {
        // Stage the inputs; frames come back from a staging area.
        size_t in_bytes = 0, out_bytes = 0;
        for (size_t g : gpu) {
          in_bytes += items[g].n * (items[g].base ? 2 : 1);
          out_bytes += MaxEncodedSize(items[g].n);
        }
        uint8_t* din = be_.Alloc(in_bytes);
        uint8_t* dout = be_.Alloc(out_bytes);
        if (!din || !dout) return Status::IOError("GPU: out of device memory for an encode batch");
        staged.resize(gpu.size());
        std::vector<size_t> idx(gpu.size());
        size_t ip = 0, op = 0;
        for (size_t c = 0; c < gpu.size(); ++c) {
          const GpuEncodeItem& it = items[gpu[c]];
          staged[c] = it;
          staged[c].src = din + ip;
          LMC_RETURN_IF_ERROR(be_.ToDevice(din + ip, it.src, it.n));
          ip += it.n;
          if (it.base) {
            staged[c].base = din + ip;
            LMC_RETURN_IF_ERROR(be_.ToDevice(din + ip, it.base, it.n));
            ip += it.n;
          }
          outs[c] = dout + op;
          out_off[c] = op;
          staged[c].dst = dout + op;
          op += MaxEncodedSize(it.n);
          idx[c] = c;
        }
        LMC_RETURN_IF_ERROR(EncodeOnDevice(be_, staged.data(), idx, outs));
        for (size_t c = 0; c < gpu.size(); ++c) {
          GpuEncodeItem& it = items[gpu[c]];
          it.status = staged[c].status;
          it.len = staged[c].len;
          if (it.status.ok()) LMC_RETURN_IF_ERROR(be_.ToHost(it.dst, outs[c], it.len));
        }
      }
      LMC_RETURN_IF_ERROR(be_.Sync());
      stats_.batches++;
      for (size_t g : gpu) {
        stats_.encode_chunks++;
        stats_.encode_bytes += items[g].n;
      }
    }
    return Status::Ok();
  }

  void DecodeOnCpu(GpuDecodeItem& it, bool device) {
    if (!device) {
      auto r = DecodeChunk(it.frame, it.len, it.base, it.base_len, it.dst, it.cap, ws_);
      it.status = r.status();
      it.out_len = r.ok() ? *r : 0;
      return;
    }
    std::vector<uint8_t> frame(it.len), base(it.base ? it.base_len : 0);
    Status st = it.len ? be_.ToHostSync(frame.data(), it.frame, it.len) : Status::Ok();
    if (st.ok() && it.base && it.base_len) st = be_.ToHostSync(base.data(), it.base, it.base_len);
    if (!st.ok()) {
      it.status = st;
      return;
    }
    std::vector<uint8_t> out(it.cap);
    auto r = DecodeChunk(frame.data(), frame.size(), it.base ? base.data() : nullptr, it.base_len, out.data(),
                         out.size(), ws_);
    it.status = r.status();
    it.out_len = r.ok() ? *r : 0;
    if (r.ok() && *r) it.status = be_.ToDeviceSync(it.dst, out.data(), *r);
  }

  Status Decode(GpuDecodeItem* items, size_t count, bool device) {
    size_t i = 0;
    while (i < count) {
      std::vector<DecPlanItem> plan;
      size_t bytes = 0;
      for (; i < count && (plan.empty() || bytes <= o_.batch_bytes); ++i) {
        GpuDecodeItem& it = items[i];
        // The header, on the host, decides the path.
        uint8_t head[frame::HeaderSize(frame::kMaxStreams)];
        const uint8_t* hp = it.frame;
        if (device) {
          const size_t k = std::min(it.len, sizeof(head));
          if (!it.frame || (k && !be_.ToHostSync(head, it.frame, k).ok())) {
            DecodeOnCpu(it, device);
            continue;
          }
          hp = head;
        }
        Result<FrameInfo> fi =
            it.frame ? ReadFrameInfo(hp, it.len) : Result<FrameInfo>(Status::InvalidArgument("null frame"));
        bool ok = fi.ok() && fi->decoded_size >= kMinGpuChunk && it.dst && it.cap >= fi->decoded_size &&
                  (!fi->xor_delta || (it.base && it.base_len == fi->decoded_size));
        if (ok) {
          for (const StreamInfo& s : fi->streams) ok &= s.coder != Coder::kRans;
          // A raw stream's size is checked here, as the CPU does.
          for (const StreamInfo& s : fi->streams)
            ok &= s.coder != Coder::kRaw || s.encoded_size == s.decoded_size;
          for (const StreamInfo& s : fi->streams) ok &= s.coder != Coder::kConst || s.encoded_size == 1;
        }
        if (!ok) {
          DecodeOnCpu(it, device);
          continue;
        }
        plan.push_back({i, *fi});
        bytes += fi->decoded_size;
      }
      if (plan.empty()) continue;
      be_.Reset();
      std::vector<const uint8_t*> frames(plan.size());
      std::vector<uint8_t*> outs(plan.size());
      std::vector<GpuDecodeItem> staged;
      if (device) {
        for (size_t f = 0; f < plan.size(); ++f) {
          frames[f] = items[plan[f].item].frame;
          outs[f] = items[plan[f].item].dst;
        }
      } else {
        size_t in_bytes = 0, out_bytes = 0;
        for (const auto& p : plan) {
          in_bytes += p.fi.frame_size + (p.fi.xor_delta ? p.fi.decoded_size : 0);
          out_bytes += p.fi.decoded_size;
        }
        uint8_t* din = be_.Alloc(in_bytes);
        uint8_t* dout = be_.Alloc(out_bytes);
        if (!din || !dout) return Status::IOError("GPU: out of device memory for a decode batch");
        staged.resize(plan.size());
        size_t ip = 0, op = 0;
        for (size_t f = 0; f < plan.size(); ++f) {
          const GpuDecodeItem& it = items[plan[f].item];
          staged[f] = it;
          LMC_RETURN_IF_ERROR(be_.ToDevice(din + ip, it.frame, plan[f].fi.frame_size));
          frames[f] = din + ip;
          ip += plan[f].fi.frame_size;
          if (plan[f].fi.xor_delta) {
            LMC_RETURN_IF_ERROR(be_.ToDevice(din + ip, it.base, plan[f].fi.decoded_size));
            staged[f].base = din + ip;
            ip += plan[f].fi.decoded_size;
          }
          outs[f] = dout + op;
          op += plan[f].fi.decoded_size;
        }
      }
      // DecodeOnDevice reads base pointers from the items it is given.
      std::vector<DecPlanItem> local(plan.size());
      std::vector<GpuDecodeItem> tmp(plan.size());
      for (size_t f = 0; f < plan.size(); ++f) {
        tmp[f] = device ? items[plan[f].item] : staged[f];
        local[f] = {f, plan[f].fi};
      }
      std::vector<bool> bad;
      LMC_RETURN_IF_ERROR(DecodeOnDevice(be_, tmp.data(), local, frames, outs, bad));
      for (size_t f = 0; f < plan.size(); ++f) {
        GpuDecodeItem& it = items[plan[f].item];
        if (bad[f]) {
          // The CPU decoder gives the exact reason (or, were the device
          // wrong, the right bytes).
          DecodeOnCpu(it, device);
          continue;
        }
        it.out_len = plan[f].fi.decoded_size;
        it.status = Status::Ok();
        if (!device) LMC_RETURN_IF_ERROR(be_.ToHost(it.dst, outs[f], it.out_len));
        stats_.decode_chunks++;
        stats_.decode_bytes += it.out_len;
      }
      LMC_RETURN_IF_ERROR(be_.Sync());
      stats_.batches++;
    }
    return Status::Ok();
  }

  B be_;
  GpuCodecOptions o_;
  GpuCodecStats stats_;
  Workspace ws_;
};

// The pipeline on a host backend (every kernel body run in a loop on the
// CPU): for tests of the pipeline's logic where no GPU is present. Same
// frames and results as the CUDA backend, at CPU speed.
std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o = {});

}  // namespace lmc::gpu
