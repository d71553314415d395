// Unaligned loads and stores of little-endian integers, shared by the
// entropy coders. Internal to lmc_codec. The formats are little-endian
// (docs/FORMAT.md) and so is every host lmc builds for.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace lmc {

static_assert(std::endian::native == std::endian::little, "little-endian host assumed");

template <typename U>
inline U LoadLE(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}
template <typename U>
inline void StoreLE(uint8_t* p, U v) {
  std::memcpy(p, &v, sizeof(U));
}

inline uint16_t Load16(const uint8_t* p) { return LoadLE<uint16_t>(p); }
inline uint32_t Load32(const uint8_t* p) { return LoadLE<uint32_t>(p); }
inline uint64_t Load64(const uint8_t* p) { return LoadLE<uint64_t>(p); }
inline void Store16(uint8_t* p, uint16_t v) { StoreLE(p, v); }
inline void Store32(uint8_t* p, uint32_t v) { StoreLE(p, v); }
inline void Store64(uint8_t* p, uint64_t v) { StoreLE(p, v); }

}  // namespace lmc
