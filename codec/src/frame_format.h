// Constants of the chunk frame (docs/FORMAT.md, "Frame"). Internal.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace lmc::frame
