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
// Huffman (coder 4); a frame is written as version 2 only when a stream uses
// it, so frames without it stay readable by older lmcfs.
inline constexpr uint8_t kVersion = 2;
inline constexpr uint8_t kFlagXorDelta = 0x01;
inline constexpr uint8_t kKnownFlags = kFlagXorDelta;
inline constexpr size_t kFixedHeader = 20;                    // magic .. checksum
inline constexpr size_t kStreamEntry = 5;                     // coder u8 + encoded size u32
inline constexpr size_t kHeaderCrc = 4;                       // low 32 bits of XXH3-64 of the header
inline constexpr size_t kMaxStreams = StreamList::kCapacity;  // 8 byte planes + tail

inline constexpr size_t HeaderSize(size_t n_streams) {
  return kFixedHeader + kStreamEntry * n_streams + kHeaderCrc;
}

// Writes a frame's header (docs/FORMAT.md, "Frame") at o, after its
// streams are coded: the version is 2 when a stream is blocked Huffman,
// else 1; the header checksum last. The one writer of the header, for the
// CPU encoder (frame.cc) and the GPU's (gpu_pipeline.h, LayoutBody).
LMC_HD void WriteHeader(uint8_t* o, uint8_t dtype, bool delta, uint32_t n, uint64_t checksum, uint32_t ns,
                        const uint8_t* coders, const uint64_t* sizes) {
  auto le = [](uint8_t* p, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
  };
  uint8_t version = 1;
  for (uint32_t j = 0; j < ns; ++j) {
    if (coders[j] == 4) version = 2;  // Coder::kHuffmanBlocked
    uint8_t* e = o + kFixedHeader + j * kStreamEntry;
    e[0] = coders[j];
    le(e + 1, sizes[j], 4);
  }
  o[0] = 'L', o[1] = 'M', o[2] = 'C', o[3] = 'F';
  o[4] = version;
  o[5] = dtype;
  o[6] = delta ? kFlagXorDelta : 0;
  o[7] = static_cast<uint8_t>(ns);
  le(o + 8, n, 4);
  le(o + 12, checksum, 8);
  const size_t hsize = HeaderSize(ns);
  le(o + hsize - kHeaderCrc, static_cast<uint32_t>(hd::Xxh3_64(o, hsize - kHeaderCrc)), 4);
}

}  // namespace lmc::frame
