// Constants of the chunk frame (docs/FORMAT.md, "Frame"). Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lmc/codec.h"

namespace lmc::frame {

inline constexpr uint8_t kMagic[4] = {'L', 'M', 'C', 'F'};
inline constexpr uint8_t kVersion = 1;
inline constexpr uint8_t kFlagXorDelta = 0x01;
inline constexpr uint8_t kKnownFlags = kFlagXorDelta;
inline constexpr size_t kFixedHeader = 20;   // magic .. checksum
inline constexpr size_t kStreamEntry = 5;    // coder u8 + encoded size u32
inline constexpr size_t kHeaderCrc = 4;      // low 32 bits of XXH3-64 of the header
inline constexpr size_t kMaxStreams = StreamList::kCapacity;  // 8 byte planes + tail

inline constexpr size_t HeaderSize(size_t n_streams) {
  return kFixedHeader + kStreamEntry * n_streams + kHeaderCrc;
}

inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace lmc::frame
