// Constants of the chunk frame (docs/FORMAT.md, "Frame"). Internal.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hd/hd.h"
#include "hd/xxh3.h"
#include "lmc/codec.h"

namespace lmc::frame {

inline constexpr uint8_t kMagic[4] = {'L', 'M', 'C', 'F'};
// Version 1: coders raw, const, Huffman, rANS. Version 2 adds blocked
// Huffman (coder 4); version 3 the widened bf16 base (flag 0x02); version
// 4 the rounding-predicted widened base (flag 0x04); version 5 rANS with
// 32 states (coder 5). A frame is written with the lowest version its
// contents need, so frames without the newer features stay readable by
// older lmcfs.
inline constexpr uint8_t kVersion = 5;
inline constexpr uint8_t kFlagXorDelta = 0x01;
// With kFlagXorDelta: the XOR operand is a range of a bf16 chunk, each
// value widened to the fp32 bit pattern bf16 << 16 (a fp32 master against
// its bf16 twin); the range's first element is in the header (below).
inline constexpr uint8_t kFlagWidenedBase = 0x02;
// With kFlagWidenedBase: the operand's upper half is the bf16 value less
// one where the value's own lower half says round-to-nearest rounded it up
// (PredictedUpper), and the byte planes are split without the float
// rotation: a master rounded to nearest even XORs to zero in its upper
// half, which leaves its lower 16 bits, stored as they are.
inline constexpr uint8_t kFlagRoundingPredicted = 0x04;
inline constexpr uint8_t kKnownFlags = kFlagXorDelta | kFlagWidenedBase | kFlagRoundingPredicted;

// The fp32 upper half that rounds to bf16 bits `b` (round to nearest, ties
// to even) given the value's lower half `lo`: b, or b - 1 when lo is over
// one half (a tie, lo = 0x8000, is predicted as not rounded up).
LMC_HD uint32_t PredictedUpper(uint32_t b, uint32_t lo) { return (b - (lo > 0x8000u ? 1u : 0u)) & 0xffffu; }
// A paired fp32 element (a widened-base frame) whose bf16 twin is b: its
// value v as the streams hold it (XOR the twin widened and rotated as a
// float; or, with the rounding predicted, XOR the predicted upper half and
// not rotated), and back. For the GPU codec (gpu_pipeline.h) and the CPU's
// undoing of the prediction (frame.cc).
LMC_HD uint32_t SplitPaired(uint32_t v, uint32_t b, bool predicted) {
  if (predicted) return v ^ (PredictedUpper(b, v & 0xffffu) << 16);
  const uint32_t x = v ^ (b << 16);
  return x << 1 | x >> 31;
}
LMC_HD uint32_t MergePaired(uint32_t x, uint32_t b, bool predicted) {
  if (predicted) return x ^ (PredictedUpper(b, x & 0xffffu) << 16);
  return (x >> 1 | x << 31) ^ (b << 16);
}
inline constexpr size_t kBaseOffsetField = 4;  // u32 LE, after the stream table, with kFlagWidenedBase
inline constexpr size_t kFixedHeader = 20;     // magic .. checksum
inline constexpr size_t kStreamEntry = 5;      // coder u8 + encoded size u32
inline constexpr size_t kHeaderCrc = 4;        // low 32 bits of XXH3-64 of the header
inline constexpr size_t kMaxStreams = StreamList::kCapacity;  // 8 byte planes + tail

inline constexpr size_t HeaderSize(size_t n_streams, bool widened_base = false) {
  return kFixedHeader + kStreamEntry * n_streams + (widened_base ? kBaseOffsetField : 0) + kHeaderCrc;
}

// Writes a frame's header (docs/FORMAT.md, "Frame") at o, after its
// streams are coded: the version is 5 when a stream is rANS with 32
// states, else 4 with a rounding-predicted widened base, 3 with a widened
// base, 2 when a stream is blocked Huffman, else 1; the header checksum
// last. The one
// writer of the header, for the CPU encoder (frame.cc) and the GPU's
// (gpu_pipeline.h, LayoutBody).
LMC_HD void WriteHeader(uint8_t* o, uint8_t dtype, bool delta, uint32_t n, uint64_t checksum, uint32_t ns,
                        const uint8_t* coders, const uint64_t* sizes, bool widened_base = false,
                        uint32_t base_offset = 0, bool predicted = false) {
  auto le = [](uint8_t* p, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
  };
  uint8_t version = 1;
  bool x32 = false;
  for (uint32_t j = 0; j < ns; ++j) {
    if (coders[j] == 4) version = 2;  // Coder::kHuffmanBlocked
    x32 |= coders[j] == 5;            // Coder::kRansX32
    uint8_t* e = o + kFixedHeader + j * kStreamEntry;
    e[0] = coders[j];
    le(e + 1, sizes[j], 4);
  }
  if (widened_base) {
    version = predicted ? 4 : 3;
    le(o + kFixedHeader + ns * kStreamEntry, base_offset, 4);
  }
  if (x32) version = 5;
  o[0] = 'L', o[1] = 'M', o[2] = 'C', o[3] = 'F';
  o[4] = version;
  o[5] = dtype;
  o[6] = static_cast<uint8_t>((delta ? kFlagXorDelta : 0) | (widened_base ? kFlagWidenedBase : 0) |
                              (widened_base && predicted ? kFlagRoundingPredicted : 0));
  o[7] = static_cast<uint8_t>(ns);
  le(o + 8, n, 4);
  le(o + 12, checksum, 8);
  const size_t hsize = HeaderSize(ns, widened_base);
  le(o + hsize - kHeaderCrc, static_cast<uint32_t>(hd::Xxh3_64(o, hsize - kHeaderCrc)), 4);
}

}  // namespace lmc::frame
