// Canonical, length-limited Huffman: the pieces shared by the CPU coder
// (huffman.cc) and the GPU kernels (codec/cuda/gpu_codec.cu), host-device
// (hd.h). docs/FORMAT.md, "Huffman stream" and "Blocked Huffman stream".
#pragma once

#include "hd/hd.h"

namespace lmc::hd {

inline constexpr int kHuffMaxLen = 11;
inline constexpr int kHuffTableSize = 1 << kHuffMaxLen;
// Blocked streams: 2^k symbols per block, k in [kMinBlockLog2, kMaxBlockLog2];
// a block's bit count (at most 2^12 * 11 < 2^16) is a u16.
inline constexpr int kMinBlockLog2 = 8;
inline constexpr int kMaxBlockLog2 = 12;

// An aligned 32-bit little-endian load and store (p % 4 == 0).
LMC_HD uint32_t LoadAligned32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
#endif
}
LMC_HD void StoreAligned32(uint8_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  p[0] = static_cast<uint8_t>(v), p[1] = static_cast<uint8_t>(v >> 8), p[2] = static_cast<uint8_t>(v >> 16),
  p[3] = static_cast<uint8_t>(v >> 24);
#endif
}
LMC_HD bool Aligned4(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3) == 0; }
// An aligned 16-byte little-endian load (into two 64-bit halves) and store
// (of four 32-bit words), p % 16 == 0: one vector access each on a GPU.
LMC_HD void LoadAligned128(const uint8_t* p, uint64_t* lo, uint64_t* hi) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  *lo = static_cast<uint64_t>(v.y) << 32 | v.x;
  *hi = static_cast<uint64_t>(v.w) << 32 | v.z;
#else
  *lo = static_cast<uint64_t>(LoadAligned32(p + 4)) << 32 | LoadAligned32(p);
  *hi = static_cast<uint64_t>(LoadAligned32(p + 12)) << 32 | LoadAligned32(p + 8);
#endif
}
LMC_HD void StoreAligned128(uint8_t* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(a, b, c, d);
#else
  StoreAligned32(p, a);
  StoreAligned32(p + 4, b);
  StoreAligned32(p + 8, c);
  StoreAligned32(p + 12, d);
#endif
}
// The low 32 bits of hi:lo shifted right by sh (sh < 32): one funnel shift
// on a GPU.
LMC_HD uint32_t FunnelRight(uint32_t lo, uint32_t hi, uint32_t sh) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, sh);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(hi) << 32 | lo) >> sh);
#endif
}

// An array whose element j is p[j * stride]: one thread's array among
// `stride` threads' interleaved, so that a warp's threads reading their
// element j read side by side (coalesced), as in the local memory such
// arrays replace.
template <typename T>
struct Strided {
  T* p;
  uint64_t stride;
  LMC_HD T& operator[](int64_t j) const { return p[static_cast<uint64_t>(j) * stride]; }
};

// HuffBuildLengths' working arrays, 15.9 KiB: sorted[256] (count << 8 |
// symbol, ascending), weight[2][512], is_leaf[kHuffMaxLen][512]. A kernel
// thread's come from device memory its caller allocates, interleaved with
// the other threads' (HuffBuildStrided): as local arrays, their size would
// be reserved by the driver for every thread the card can hold, about 4.4 GB
// on an H100 or H200 (132 SMs x 2048 threads), for as long as the process
// keeps its CUDA context. The CPU's are on its stack (HuffBuildScratch).
struct HuffBuildScratch {
  uint64_t sorted_[256];
  uint64_t weight_[2][512];
  uint8_t leaf_[kHuffMaxLen][512];
  LMC_HD uint64_t* sorted() { return sorted_; }
  LMC_HD uint64_t* weight(int level) { return weight_[level]; }
  LMC_HD uint8_t* is_leaf(int level) { return leaf_[level]; }
};
// Thread i's arrays among `stride` threads': u64 and u8 point at thread i's
// first element of kU64 and kU8 interleaved arrays.
struct HuffBuildStrided {
  static constexpr uint64_t kU64 = 256 + 2 * 512, kU8 = uint64_t{kHuffMaxLen} * 512;
  uint64_t* u64;
  uint8_t* u8;
  uint64_t stride;
  LMC_HD Strided<uint64_t> sorted() const { return {u64, stride}; }
  LMC_HD Strided<uint64_t> weight(int level) const {
    return {u64 + (256 + 512 * uint64_t(level)) * stride, stride};
  }
  LMC_HD Strided<uint8_t> is_leaf(int level) const { return {u8 + 512 * uint64_t(level) * stride, stride}; }
};

// Optimal code lengths limited to kHuffMaxLen bits by package-merge
// (Larmore and Hirschberg). Symbols with hist 0 get length 0; a lone symbol
// gets length 1. Returns the number of symbols with a code. Deterministic:
// symbols are ordered by (count, symbol), a total order, so every caller
// (CPU or GPU) gets the same lengths for the same histogram.
// W: HuffBuildScratch or HuffBuildStrided.
template <typename W>
LMC_HD_NOINLINE int HuffBuildLengths(const uint32_t hist[256], uint8_t len[256], W& w) {
  const auto sorted = w.sorted();
  int k = 0;
  for (int s = 0; s < 256; ++s) {
    len[s] = 0;
    if (hist[s]) sorted[k++] = uint64_t{hist[s]} << 8 | static_cast<uint64_t>(s);
  }
  if (k == 0) return 0;
  if (k == 1) {
    len[sorted[0] & 0xff] = 1;
    return 1;
  }
  // Shell sort (Ciura's gaps): no library, no recursion, fine for 256 keys.
  const int gaps[] = {132, 57, 23, 10, 4, 1};
  for (int gi = 0; gi < 6; ++gi) {
    const int gap = gaps[gi];
    for (int i = gap; i < k; ++i) {
      const uint64_t v = sorted[i];
      int j = i;
      while (j >= gap && sorted[j - gap] > v) {
        sorted[j] = sorted[j - gap];
        j -= gap;
      }
      sorted[j] = v;
    }
  }
  // Level 0 is the list of leaves (weight 2^-L); level i+1 merges the leaves
  // with the pairs of level i. is_leaf[i][t] records the order of the merge
  // so that the selection can be traced back without storing packages.
  int size = k;
  {
    const auto w0 = w.weight(0);
    const auto leaf0 = w.is_leaf(0);
    for (int t = 0; t < k; ++t) {
      w0[t] = sorted[t] >> 8;
      leaf0[t] = 1;
    }
  }
  for (int level = 1; level < kHuffMaxLen; ++level) {
    const auto prev = w.weight((level - 1) & 1);
    const auto cur = w.weight(level & 1);
    const auto is_leaf = w.is_leaf(level);
    const int packages = size / 2;
    int a = 0, b = 0, t = 0;
    while (a < k || b < packages) {
      const uint64_t pw = b < packages ? prev[2 * b] + prev[2 * b + 1] : ~uint64_t{0};
      if (a < k && (sorted[a] >> 8) <= pw) {
        cur[t] = sorted[a] >> 8;
        is_leaf[t++] = 1;
        ++a;
      } else {
        cur[t] = pw;
        is_leaf[t++] = 0;
        ++b;
      }
    }
    size = t;
  }
  // Select the 2k-2 cheapest items of the top level; every selected leaf
  // occurrence adds one bit to that symbol's length.
  int take = 2 * k - 2;
  uint8_t depth[256];
  for (int t = 0; t < 256; ++t) depth[t] = 0;
  for (int level = kHuffMaxLen - 1; level >= 0 && take > 0; --level) {
    const auto is_leaf = w.is_leaf(level);
    int leaves = 0;
    for (int t = 0; t < take; ++t) leaves += is_leaf[t];
    for (int t = 0; t < leaves; ++t) ++depth[t];
    take = 2 * (take - leaves);
  }
  for (int t = 0; t < k; ++t) len[sorted[t] & 0xff] = depth[t];
  return k;
}

// The same on the CPU, with the arrays on the stack.
inline int HuffBuildLengths(const uint32_t hist[256], uint8_t len[256]) {
  HuffBuildScratch w;
  return HuffBuildLengths(hist, len, w);
}

// Canonical codes (DEFLATE rule), bit-reversed for LSB-first output:
// entry = reversed code << 8 | len (0 for symbols without a code).
LMC_HD void HuffBuildCodes(const uint8_t len[256], uint32_t codes[256]) {
  int count[kHuffMaxLen + 1];
  for (int l = 0; l <= kHuffMaxLen; ++l) count[l] = 0;
  for (int s = 0; s < 256; ++s) ++count[len[s] <= kHuffMaxLen ? len[s] : 0];
  count[0] = 0;
  uint32_t next[kHuffMaxLen + 2];
  next[0] = next[1] = 0;
  for (int l = 1; l <= kHuffMaxLen; ++l) next[l + 1] = (next[l] + count[l]) << 1;
  for (int s = 0; s < 256; ++s) {
    const int l = len[s];
    if (!l) {
      codes[s] = 0;
      continue;
    }
    const uint32_t c = next[l]++;
    uint32_t rev = 0;
    for (int b = 0; b < l; ++b) rev |= ((c >> b) & 1) << (l - 1 - b);
    codes[s] = rev << 8 | static_cast<uint32_t>(l);
  }
}

// lo, hi and the header bytes of the code-length table (section 5.1).
struct HuffTableShape {
  int lo = 0, hi = 0;
  uint32_t table_bytes = 0;  // nibbles: ceil((hi - lo + 1) / 2)
};
LMC_HD HuffTableShape HuffShapeOf(const uint8_t len[256]) {
  HuffTableShape t;
  while (t.lo < 255 && !len[t.lo]) ++t.lo;
  t.hi = 255;
  while (t.hi > t.lo && !len[t.hi]) --t.hi;
  t.table_bytes = static_cast<uint32_t>(t.hi - t.lo + 2) / 2;
  return t;
}
// Writes lo, hi and the nibbles; returns the bytes written (2 + table_bytes).
LMC_HD uint32_t HuffWriteLengths(const uint8_t len[256], const HuffTableShape& t, uint8_t* dst) {
  dst[0] = static_cast<uint8_t>(t.lo);
  dst[1] = static_cast<uint8_t>(t.hi);
  for (uint32_t i = 0; i < t.table_bytes; ++i) {
    const int s0 = t.lo + 2 * static_cast<int>(i), s1 = s0 + 1;
    const uint8_t a = len[s0], b = s1 <= t.hi ? len[s1] : 0;
    dst[2 + i] = static_cast<uint8_t>(a | b << 4);
  }
  return 2 + t.table_bytes;
}

// Parses lo, hi and the nibbles at src[0, len) and checks them (section 5.1
// validity: lengths <= 11, lo and hi coded, a lone symbol of length 1, else
// a complete code). Returns the bytes parsed, or 0 when malformed.
LMC_HD uint32_t HuffParseLengths(const uint8_t* src, size_t len, uint8_t lens[256], int* min_len,
                                 int* max_len) {
  if (len < 2) return 0;
  const int lo = src[0], hi = src[1];
  if (lo > hi) return 0;
  const int count = hi - lo + 1;
  const uint32_t table_bytes = static_cast<uint32_t>(count + 1) / 2;
  if (len < 2 + table_bytes) return 0;
  for (int s = 0; s < 256; ++s) lens[s] = 0;
  if ((count & 1) && (src[2 + table_bytes - 1] >> 4)) return 0;  // unused nibble must be 0
  uint32_t kraft = 0;
  int present = 0;
  *min_len = kHuffMaxLen;
  *max_len = 0;
  for (int i = 0; i < count; ++i) {
    const int l = (src[2 + i / 2] >> (4 * (i & 1))) & 0xf;
    if (l > kHuffMaxLen) return 0;
    lens[lo + i] = static_cast<uint8_t>(l);
    if (l) {
      ++present;
      kraft += 1u << (kHuffMaxLen - l);
      if (l < *min_len) *min_len = l;
      if (l > *max_len) *max_len = l;
    }
  }
  if (!lens[lo] || !lens[hi]) return 0;
  if (present == 1) {
    if (lens[lo] != 1) return 0;
  } else if (kraft != kHuffTableSize) {
    return 0;  // incomplete or oversubscribed
  }
  return 2 + table_bytes;
}

// Single-symbol decoding table over 11-bit LSB-first windows: entry =
// symbol << 8 | length. Slots no code reaches (only with a lone symbol)
// decode as length 11, which the end-position check then rejects.
LMC_HD void HuffBuildDecodeTable(const uint8_t lens[256], uint16_t table[kHuffTableSize]) {
  uint32_t codes[256];
  HuffBuildCodes(lens, codes);
  for (int t = 0; t < kHuffTableSize; ++t) table[t] = kHuffMaxLen;
  for (int s = 0; s < 256; ++s) {
    const int l = lens[s];
    if (!l) continue;
    const uint16_t e = static_cast<uint16_t>(s << 8 | l);
    for (uint32_t t = codes[s] >> 8; t < static_cast<uint32_t>(kHuffTableSize); t += 1u << l) table[t] = e;
  }
}

// Multi-symbol entry for one 11-bit window: bits 0-23 up to three symbols
// (first in the low byte), bits 24-29 the bits their codes take, bits 30-31
// how many (a decoder advances its output by e >> 30 and its bit window by
// e >> 24, which a 64-bit shift instruction masks to 6 bits itself). At
// least one symbol (the single entry, even a filler).
LMC_HD uint32_t HuffMultiEntry(const uint16_t single[kHuffTableSize], uint32_t t) {
  uint32_t syms = 0, count = 0, used = 0;
  while (count < 3) {
    const uint16_t e = single[(t >> used) & (kHuffTableSize - 1)];
    const uint32_t l = e & 0xff;
    if (count > 0 && used + l > static_cast<uint32_t>(kHuffMaxLen)) break;
    syms |= static_cast<uint32_t>(e >> 8) << (8 * count);
    ++count;
    used += l;
    if (used >= static_cast<uint32_t>(kHuffMaxLen)) break;
  }
  return syms | used << 24 | count << 30;
}

// ---- Blocked streams (coder 4) ----

// Blocks of a stream of n symbols with 2^log2 symbols each.
LMC_HD uint32_t HuffBlocks(size_t n, int log2) {
  return static_cast<uint32_t>((n + (size_t{1} << log2) - 1) >> log2);
}
// Bytes before the payload: lo, hi, nibbles, log2, u16 per block.
LMC_HD size_t HuffBlockedHeader(uint32_t table_bytes, uint32_t blocks) {
  return 2 + size_t{table_bytes} + 1 + 2 * size_t{blocks};
}
// The most bytes before the block table (256 symbols' nibbles: 128 bytes).
inline constexpr size_t kHuffMaxBlockedHead = 2 + 128 + 1;

// Bits block b's symbols take: the sum of their code lengths.
LMC_HD uint32_t HuffBlockBits(const uint8_t* sym, uint32_t count, const uint32_t codes[256]) {
  uint32_t bits = 0, i = 0;
  if (Aligned4(sym)) {  // four symbols a load
    for (; i + 4 <= count; i += 4) {
      const uint32_t w = LoadAligned32(sym + i);
      bits += (codes[w & 0xff] & 0xff) + (codes[(w >> 8) & 0xff] & 0xff) + (codes[(w >> 16) & 0xff] & 0xff) +
              (codes[w >> 24] & 0xff);
    }
  }
  for (; i < count; ++i) bits += codes[sym[i]] & 0xff;
  return bits;
}

// The plain OR for host code where one thread writes all blocks.
struct PlainOr {
  LMC_HD void operator()(uint32_t* w, uint32_t v) const { *w |= v; }
};

// Writes the codes of sym[0, count) as an LSB-first bit string starting at
// bit `start` of the little-endian 32-bit word array `words` (zeroed
// beforehand). Words wholly inside [start, start + bits) are stored; the
// first and last word, which a neighbouring block may share, are combined
// with `edge_or` (atomicOr on a GPU). `bits` is HuffBlockBits of the block.
template <typename EdgeOr>
LMC_HD void HuffEncodeBlockWords(const uint8_t* sym, uint32_t count, const uint32_t codes[256],
                                 uint64_t start, uint32_t bits, uint32_t* words, EdgeOr edge_or) {
  if (bits == 0) return;
  const uint64_t first_word = start >> 5, last_word = (start + bits - 1) >> 5;
  uint64_t w = first_word;
  uint64_t acc = 0;            // pending bits, oldest lowest
  uint32_t nacc = start & 31;  // the first word's bits below start are zero
  uint32_t i = 0;
  uint32_t quad = 0;  // symbols of the current aligned load, lowest next
  const bool aligned = Aligned4(sym);
  for (; i < count; ++i) {
    uint32_t s;
    if (aligned && (i & 3) == 0 && i + 4 <= count) quad = LoadAligned32(sym + i);
    if (aligned && (i & ~3u) + 4 <= count) {
      s = quad & 0xff;
      quad >>= 8;
    } else {
      s = sym[i];
    }
    const uint32_t e = codes[s];
    acc |= static_cast<uint64_t>(e >> 8) << nacc;
    nacc += e & 0xff;
    if (nacc >= 32) {
      const uint32_t v = static_cast<uint32_t>(acc);
      if (w == first_word || w == last_word)
        edge_or(words + w, v);
      else
        words[w] = v;
      ++w;
      acc >>= 32;
      nacc -= 32;
    }
  }
  if (nacc) edge_or(words + w, static_cast<uint32_t>(acc));  // the last word: always an edge
}

// Canonical decoding data of a code, from which any table entry can be
// computed alone (so that a GPU builds a table with one thread per entry).
struct HuffCanonical {
  uint16_t first[kHuffMaxLen + 1];   // first canonical code of each length
  uint16_t count[kHuffMaxLen + 1];   // codes of each length
  uint16_t offset[kHuffMaxLen + 1];  // index in `sorted` of the first symbol of each length
  uint8_t sorted[256];               // symbols ordered by (length, symbol)
};
LMC_HD void HuffBuildCanonical(const uint8_t lens[256], HuffCanonical* c) {
  for (int l = 0; l <= kHuffMaxLen; ++l) c->count[l] = 0;
  for (int s = 0; s < 256; ++s)
    if (lens[s] && lens[s] <= kHuffMaxLen) ++c->count[lens[s]];
  uint32_t code = 0, at = 0;
  c->first[0] = 0, c->offset[0] = 0, c->count[0] = 0;
  for (int l = 1; l <= kHuffMaxLen; ++l) {
    code = (code + (l > 1 ? c->count[l - 1] : 0)) << (l > 1 ? 1 : 0);
    c->first[l] = static_cast<uint16_t>(code);
    c->offset[l] = static_cast<uint16_t>(at);
    for (int s = 0; s < 256; ++s)
      if (lens[s] == l) c->sorted[at++] = static_cast<uint8_t>(s);
  }
}
// HuffBuildDecodeTable's entry for the 11-bit LSB-first window x.
LMC_HD uint16_t HuffSingleEntryAt(const HuffCanonical& c, uint32_t x) {
  uint32_t r = 0;  // the window's bits, first code bit highest
  for (int b = 0; b < kHuffMaxLen; ++b) r |= ((x >> b) & 1) << (kHuffMaxLen - 1 - b);
  for (int l = 1; l <= kHuffMaxLen; ++l) {
    const uint32_t v = (r >> (kHuffMaxLen - l)) - c.first[l];
    if (v < c.count[l]) return static_cast<uint16_t>(c.sorted[c.offset[l] + v] << 8 | l);
  }
  return kHuffMaxLen;  // no code: the filler of HuffBuildDecodeTable
}

// Where HuffDecodeRange puts the symbols it decodes. Put16(i, a, b, c, d):
// symbols i .. i+15 (i a multiple of 16, called in increasing i), four a
// word, the first in the low byte of a; called only when Aligned16().
// Put1(i, s): symbol i alone (the last count % 16, or every symbol when not
// Aligned16()). This one stores them at out[i]; the GPU's fused decoder
// (gpu_pipeline.h) writes whole elements instead, and may keep state.
struct HuffByteSink {
  uint8_t* out;
  LMC_HD bool Aligned16() const { return (reinterpret_cast<uintptr_t>(out) & 15) == 0; }
  LMC_HD void Put16(uint32_t i, uint32_t a, uint32_t b, uint32_t c, uint32_t d) const {
    StoreAligned128(out + i, a, b, c, d);
  }
  LMC_HD void Put1(uint32_t i, uint32_t s) const { out[i] = static_cast<uint8_t>(s); }
};

// Decodes `count` symbols from bits [start, end) of a payload of `plen`
// bytes with the single-symbol table, as one GPU thread decodes a block.
// Built for a warp whose threads each decode their own block: every step is
// the same instructions in every thread (one symbol a step, no branch on
// how many symbols a lookup gave), the payload is read 16 aligned bytes at
// a time one group ahead of use (its load latency hidden), and where `out`
// is 16-aligned the symbols go out 16 at a time, in unrolled groups with
// fixed byte positions. Nothing outside payload[0, plen) is read (the first
// and last groups byte by byte) and nothing past symbol `count` put. True
// when the code words take exactly end - start bits (the check that catches
// every malformed range).
template <typename Sink>
LMC_HD bool HuffDecodeRange(const uint8_t* payload, size_t plen, uint64_t start, uint64_t end,
                            const uint16_t* single, Sink& sink, uint32_t count) {
  if (end < start || end - start > 0xffffffffu) return false;
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(payload) & 15);
  const uint8_t* base = payload - mis;
  const uint8_t* limit = payload + plen;
  auto load = [&](uint64_t g, uint64_t* lo, uint64_t* hi) {
    const uint8_t* p = base + 16 * g;
    if (p >= payload && p + 16 <= limit) {
      LoadAligned128(p, lo, hi);
      return;
    }
    *lo = *hi = 0;  // the first or the last group: only the payload's bytes
    for (uint32_t b = 0; b < 16; ++b)
      if (p + b >= payload && p + b < limit)
        (b < 8 ? *lo : *hi) |= static_cast<uint64_t>(p[b]) << (8 * (b & 7));
  };
  const uint64_t pos = start + 8 * mis;
  uint64_t g = pos >> 7;        // the group in (qlo, qhi)
  uint64_t qlo, qhi, nlo, nhi;  // the words after nxt in this group (qn of them), and the next group
  load(g, &qlo, &qhi);
  load(g + 1, &nlo, &nhi);
  uint32_t qn = 4;  // never 0 between steps
  auto refill = [&] {
    if (qn == 0) {  // on to the loaded group; the one after it starts loading
      qlo = nlo, qhi = nhi, qn = 4;
      load(++g + 1, &nlo, &nhi);
    }
  };
  auto pop = [&]() -> uint32_t {
    const uint32_t w = static_cast<uint32_t>(qlo);
    qlo = (qlo >> 32) | (qhi << 32);
    qhi >>= 32;
    --qn;
    refill();
    return w;
  };
  for (uint32_t skip = (pos >> 5) & 3; skip; --skip) pop();
  // The bit window: bits `off` (< 32) onwards of nxt:cur.
  uint32_t cur = pop(), nxt = pop(), off = static_cast<uint32_t>(pos & 31);
  uint32_t bits = 0;  // bits the code words took
  auto next = [&]() -> uint32_t {
    const uint16_t e = single[FunnelRight(cur, nxt, off) & (kHuffTableSize - 1)];
    const uint32_t used = e & 0xff;
    bits += used;
    off += used;  // < 32 + kHuffMaxLen
    // Past cur: the window moves one word on, with selects rather than a
    // branch (threads of a warp cross words at different steps).
    const bool adv = off >= 32;
    off &= 31;
    cur = adv ? nxt : cur;
    nxt = adv ? static_cast<uint32_t>(qlo) : nxt;
    qlo = adv ? (qlo >> 32) | (qhi << 32) : qlo;
    qhi = adv ? qhi >> 32 : qhi;
    qn -= adv ? 1 : 0;
    refill();
    return e >> 8;
  };
  uint32_t i = 0;
  if (sink.Aligned16()) {
    for (; i + 16 <= count; i += 16) {
      uint32_t w[4] = {0, 0, 0, 0};
      LMC_UNROLL
      for (uint32_t q = 0; q < 16; ++q) w[q / 4] |= next() << (8 * (q % 4));
      sink.Put16(i, w[0], w[1], w[2], w[3]);
    }
  }
  for (; i < count; ++i) sink.Put1(i, next());
  return bits == end - start;
}
// HuffDecodeRange into out[0, count).
LMC_HD bool HuffDecodeRangeWords(const uint8_t* payload, size_t plen, uint64_t start, uint64_t end,
                                 const uint16_t* single, uint8_t* out, uint32_t count) {
  HuffByteSink sink{out};
  return HuffDecodeRange(payload, plen, start, end, single, sink, count);
}

}  // namespace lmc::hd
