// The one place lmcfs turns integers into bytes and back: every on-disk,
// on-wire and codec format writes its fixed-width fields through these
// helpers (docs/FORMAT.md states each field's byte order).
//
// Little-endian fields are one unaligned memcpy, which compilers turn into a
// single load or store, so the codec's hot loops may call them freely.
// Big-endian fields add one byte swap. The memcpy form assumes a
// little-endian host, checked below; every host lmcfs builds for is one.
//
// `p` points at raw bytes (uint8_t or char); any alignment.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace lmc {

#if __cplusplus >= 202002L  // the CUDA sources include this as C++17
static_assert(std::endian::native == std::endian::little,
              "lmc/bytes.h stores integers with memcpy: little-endian hosts only");
#endif

namespace bytes_internal {
template <typename U>
inline constexpr bool kCodable = std::is_unsigned_v<U> &&
                                 (sizeof(U) == 1 || sizeof(U) == 2 || sizeof(U) == 4 || sizeof(U) == 8);

template <typename U>
inline U ByteSwap(U v) {
  if constexpr (sizeof(U) == 1)
    return v;
  else if constexpr (sizeof(U) == 2)
    return __builtin_bswap16(v);
  else if constexpr (sizeof(U) == 4)
    return __builtin_bswap32(v);
  else
    return __builtin_bswap64(v);
}
}  // namespace bytes_internal

// Little-endian U (an unsigned integer of 1, 2, 4 or 8 bytes) at p.
template <typename U>
inline U LoadLE(const void* p) {
  static_assert(bytes_internal::kCodable<U>);
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}
template <typename U>
inline void StoreLE(void* p, U v) {
  static_assert(bytes_internal::kCodable<U>);
  std::memcpy(p, &v, sizeof(U));
}

// Big-endian U at p.
template <typename U>
inline U LoadBE(const void* p) {
  return bytes_internal::ByteSwap(LoadLE<U>(p));
}
template <typename U>
inline void StoreBE(void* p, U v) {
  StoreLE<U>(p, bytes_internal::ByteSwap(v));
}

inline uint16_t LoadLE16(const void* p) { return LoadLE<uint16_t>(p); }
inline uint32_t LoadLE32(const void* p) { return LoadLE<uint32_t>(p); }
inline uint64_t LoadLE64(const void* p) { return LoadLE<uint64_t>(p); }
inline void StoreLE16(void* p, uint16_t v) { StoreLE(p, v); }
inline void StoreLE32(void* p, uint32_t v) { StoreLE(p, v); }
inline void StoreLE64(void* p, uint64_t v) { StoreLE(p, v); }
inline uint64_t LoadBE64(const void* p) { return LoadBE<uint64_t>(p); }
inline void StoreBE64(void* p, uint64_t v) { StoreBE(p, v); }

// Little-endian integer of n bytes (0..8) at p, zero-extended.
inline uint64_t LoadLEBytes(const void* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}
// Big-endian integer of n bytes (1..8) at p, zero-extended.
inline uint64_t LoadBEBytes(const void* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(reinterpret_cast<char*>(&v) + (8 - n), p, n);
  return bytes_internal::ByteSwap(v);
}
// The low n bytes (1..8) of v, big-endian, at p.
inline void StoreBEBytes(void* p, uint64_t v, size_t n) {
  const uint64_t be = bytes_internal::ByteSwap(v);
  std::memcpy(p, reinterpret_cast<const char*>(&be) + (8 - n), n);
}

// Appending to a byte string.
template <typename U>
inline void AppendLE(std::string* s, U v) {
  char b[sizeof(U)];
  StoreLE(b, v);
  s->append(b, sizeof b);
}
inline void AppendLE32(std::string* s, uint32_t v) { AppendLE(s, v); }
inline void AppendLE64(std::string* s, uint64_t v) { AppendLE(s, v); }
// The low n bytes (1..8) of v, big-endian.
inline void AppendBEBytes(std::string* s, uint64_t v, size_t n) {
  char b[8];
  StoreBEBytes(b, v, n);
  s->append(b, n);
}
inline void AppendBE64(std::string* s, uint64_t v) { AppendBEBytes(s, v, 8); }

}  // namespace lmc
