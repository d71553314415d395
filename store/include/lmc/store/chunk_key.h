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

// Whom dedup may share a chunk with (mount option dedup=, docs/ARCHITECTURE.md,
// "Store permissions"): nullopt, every file of the store (dedup=all); a
// uid, only files of that owner (dedup=uid), so that the stored size of a
// file of one user never tells whether another user's files hold its bytes.
using KeyOwner = std::optional<uint32_t>;

// The 16 bytes that, with the owner's uid (u32 LE), prefix the bytes an
// owner-scoped key hashes (docs/FORMAT.md, "Chunk keys").
inline constexpr uint8_t kOwnerKeyTag[16] = {'l', 'm', 'c', 'f', 's', ' ', 'o', 'w',
                                             'n', 'e', 'r', ' ', 'k', 'e', 'y', 0};

struct ChunkKey {
  static constexpr size_t kSize = 32;
  std::array<uint8_t, kSize> bytes{};

  // SHA-256 of p[0, n) (OpenSSL EVP, SHA extensions where the CPU has them);
  // with an owner, SHA-256 of kOwnerKeyTag, the owner (u32 LE), then p[0, n):
  // the same bytes of two owners have two keys.
  static ChunkKey Of(const uint8_t* p, size_t n, KeyOwner owner = std::nullopt);
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
