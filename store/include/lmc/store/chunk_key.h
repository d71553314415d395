// ChunkKey: the content address of a chunk, SHA-256 of its decoded bytes
// (docs/FORMAT.md, "Chunk store", "Chunk keys"). 256 bits so that no accidental or
// crafted collision can make one chunk stand for another.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "lmc/bytes.h"

namespace lmc::store {

struct ChunkKey {
  static constexpr size_t kSize = 32;
  std::array<uint8_t, kSize> bytes{};

  // SHA-256 of p[0, n) (OpenSSL EVP, SHA extensions where the CPU has them).
  static ChunkKey Of(const uint8_t* p, size_t n);
  // From 32 raw bytes (e.g. an index key).
  static ChunkKey FromBytes(const uint8_t* p) {
    ChunkKey k;
    std::memcpy(k.bytes.data(), p, kSize);
    return k;
  }
  // From 64 hex digits; nullopt when malformed.
  static std::optional<ChunkKey> FromHex(std::string_view hex);
  std::string ToHex() const;
  // The 32 raw bytes as a string_view (index keys).
  std::string_view view() const { return {reinterpret_cast<const char*>(bytes.data()), kSize}; }
  bool operator==(const ChunkKey&) const = default;
  auto operator<=>(const ChunkKey&) const = default;
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const {
    return static_cast<size_t>(LoadLE64(k.bytes.data()));  // already uniformly distributed
  }
};

}  // namespace lmc::store
