// Frame-level pieces shared by the CPU codec and the GPU kernels,
// host-device (hd.h): the coder choice of the GPU profile and the byte-plane
// transform of one element. docs/FORMAT.md, "Frame", "Encode profiles".
#pragma once

#include <cmath>

#include "hd/hd.h"
#include "hd/huffman_hd.h"
#include "hd/rans_hd.h"

namespace lmc::hd {

// Coder values (lmc::Coder).
inline constexpr uint8_t kCoderRaw = 0, kCoderConst = 1, kCoderHuffman = 2, kCoderRans = 3,
                         kCoderHuffmanBlocked = 4, kCoderRansX32 = 5;

// The GPU profile's choice for a stream of n symbols with histogram hist
// (docs/FORMAT.md 5.4): const for one symbol; else blocked Huffman
// (2^block_log2-symbol blocks), or rANS (32 states from kRansX32MinSymbols on, else
// 4) with the frequencies of RansNormalizeGpu where its estimated size
// beats the Huffman size by more than a sixteenth, as the CPU profile
// chooses; raw when the choice saves less than 1/128 of the stream. `len`
// receives the code lengths when the choice is blocked Huffman, `freq` the
// frequencies when it is rANS. Returns the coder and sets *size to the
// payload size: exact for Huffman, the estimate for rANS (whose encoder
// still falls back to raw when the stream comes out at n bytes or more).
// `huff` and `rans_v`: working space (HuffBuildLengths', RansNormalizeGpu's:
// device memory in a kernel, HuffBuildScratch says why).
template <typename HuffScratch, typename RansValues>
LMC_HD uint8_t GpuProfileCoder(const uint32_t hist[256], size_t n, uint8_t len[256], uint32_t freq[256],
                               size_t* size, int block_log2, HuffScratch& huff, RansValues rans_v) {
  *size = n;
  if (n == 0) return kCoderRaw;
  int distinct = 0;
  for (int s = 0; s < 256; ++s) distinct += hist[s] != 0;
  if (distinct == 1) {
    *size = 1;
    return kCoderConst;
  }
  // Streams too close to uniform are raw without building a code: the
  // entropy bounds every code's size from below (rANS's estimate included).
  // The margin keeps the decision the same on every processor despite
  // rounding in log2.
  double entropy = 0;
  for (int s = 0; s < 256; ++s)
    if (hist[s])
      entropy -= static_cast<double>(hist[s]) * log2(static_cast<double>(hist[s]) / static_cast<double>(n));
  if (entropy / 8 >= static_cast<double>(n - n / 128) + 64 + static_cast<double>(n) / 1000) return kCoderRaw;
  HuffBuildLengths(hist, len, huff);
  uint64_t bits = 0;
  for (int s = 0; s < 256; ++s) bits += uint64_t{hist[s]} * len[s];
  const size_t blocked = HuffBlockedHeader(HuffShapeOf(len).table_bytes, HuffBlocks(n, block_log2)) +
                         static_cast<size_t>((bits + 7) / 8);
  const int states = n >= kRansX32MinSymbols ? 32 : 4;
  const int k = RansNormalizeGpu(hist, n, freq, rans_v);
  const size_t rans = static_cast<size_t>(RansEstimateGpu(hist, freq, k, states));
  uint8_t coder = kCoderHuffmanBlocked;
  size_t best = blocked;
  // rANS decodes at about half Huffman's speed: only where it pays clearly
  // (skewed streams near or below 1 bit/symbol, where Huffman's 1-bit floor
  // costs up to 10x).
  if (rans + blocked / 16 < blocked) {
    coder = states == 32 ? kCoderRansX32 : kCoderRans;
    best = rans;
  }
  if (best + n / 128 >= n) return kCoderRaw;
  *size = best;
  return coder;
}

// The same on the CPU, with the working space on the stack.
inline uint8_t GpuProfileCoder(const uint32_t hist[256], size_t n, uint8_t len[256], uint32_t freq[256],
                               size_t* size, int block_log2) {
  HuffBuildScratch huff;
  uint64_t rans_v[256];
  return GpuProfileCoder(hist, n, len, freq, size, block_log2, huff, static_cast<uint64_t*>(rans_v));
}

LMC_HD bool DTypeIsFloat(uint8_t t) { return t == 10 || t == 11 || t == 12 || t == 13; }
// Element width of a dtype value (section 2); 0 for invalid values.
LMC_HD uint32_t DTypeWidthOf(uint8_t t) {
  if (t <= 3 || t == 14 || t == 15) return 1;
  if (t == 4 || t == 5 || t == 10 || t == 11) return 2;
  if (t == 6 || t == 7 || t == 12) return 4;
  if (t == 8 || t == 9 || t == 13) return 8;
  return 0;
}

// The transform of element i (section 3): its w bytes at src (XORed with
// base when given), rotated left by one bit for floats, returned as a
// little-endian integer whose byte w-1-b goes to stream b.
// Loads the w-byte little-endian element at p; one load where aligned
// (device code).
LMC_HD uint64_t LoadElement(const uint8_t* p, uint32_t w, bool aligned) {
#if defined(__CUDA_ARCH__)
  if (aligned) {
    if (w == 2) return *reinterpret_cast<const uint16_t*>(p);
    if (w == 4) return *reinterpret_cast<const uint32_t*>(p);
    if (w == 8) return *reinterpret_cast<const uint64_t*>(p);
  }
#else
  (void)aligned;
#endif
  uint64_t v = 0;
  for (uint32_t b = 0; b < w; ++b) v |= uint64_t{p[b]} << (8 * b);
  return v;
}

LMC_HD uint64_t SplitElement(const uint8_t* src, const uint8_t* base, uint32_t w, bool rot,
                             bool aligned = false) {
  uint64_t v = LoadElement(src, w, aligned);
  if (base) v ^= LoadElement(base, w, aligned);
  if (rot) {
    const uint32_t bits = 8 * w;
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    v = ((v << 1) | (v >> (bits - 1))) & mask;
  }
  return v;
}
// The inverse: v (byte w-1-b from stream b) rotated back, XORed with base,
// stored little-endian at dst.
LMC_HD void MergeElement(uint64_t v, const uint8_t* base, uint32_t w, bool rot, uint8_t* dst,
                         bool aligned = false) {
  if (rot) {
    const uint32_t bits = 8 * w;
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    v = ((v >> 1) | (v << (bits - 1))) & mask;
  }
  if (base) {
    uint64_t x = 0;
    for (uint32_t b = 0; b < w; ++b) x |= uint64_t{base[b]} << (8 * b);
    v ^= x;
  }
#if defined(__CUDA_ARCH__)
  if (aligned) {  // one store of the element's width
    if (w == 2) return void(*reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(v));
    if (w == 4) return void(*reinterpret_cast<uint32_t*>(dst) = static_cast<uint32_t>(v));
    if (w == 8) return void(*reinterpret_cast<uint64_t*>(dst) = v);
  }
#else
  (void)aligned;
#endif
  for (uint32_t b = 0; b < w; ++b) dst[b] = static_cast<uint8_t>(v >> (8 * b));
}

}  // namespace lmc::hd
