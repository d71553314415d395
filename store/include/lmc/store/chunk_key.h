// ChunkKey: the content address of a chunk, a hash of its decoded bytes
// (docs/FORMAT.md, "Chunk store", "Chunk keys"): SHA-256 (stores of format
// 1-3), or XXH3-128 under the store's own random secret (format 4), where
// the store compares the bytes of every dedup hit before it shares a chunk
// (Store, commit), so that no accidental or crafted collision can make one
// chunk stand for another.
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

// Lowercase hex of p[0, n), two digits a byte.
std::string HexOf(const uint8_t* p, size_t n);
// Parses exactly 2 * n hex digits (either case) into out[0, n); false when
// the length or a digit is wrong.
bool ParseHex(std::string_view hex, uint8_t* out, size_t n);

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

// How a store names chunk contents (CONFIG "hash=", docs/FORMAT.md, "Chunk
// keys"). Copyable; Of is thread-safe.
class KeyScheme {
 public:
  enum class Hash : uint8_t { kSha256, kXxh3 };
  static constexpr size_t kSecretSize = 192;  // XXH3's default secret size

  // SHA-256 keys (ChunkKey::Of).
  KeyScheme() = default;
  // XXH3-128 keys under `secret` (the store's CONFIG).
  static KeyScheme Xxh3(const std::array<uint8_t, kSecretSize>& secret);
  // A fresh random secret (getrandom) for a new store.
  static std::array<uint8_t, kSecretSize> NewSecret();

  Hash hash() const { return hash_; }
  // Whether a key may name two contents (a fast hash): a dedup hit must
  // then compare the bytes before the chunk is shared.
  bool verify_hits() const { return hash_ != Hash::kSha256; }
  const std::array<uint8_t, kSecretSize>& secret() const { return secret_; }
  // The key of p[0, n), owner-scoped as ChunkKey::Of. XXH3 keys: bytes
  // [0, 16) the XXH3-128 digest (canonical, big-endian) of kOwnerKeyTag,
  // the owner (u32 LE) and p[0, n) with an owner, of p[0, n) without;
  // [16, 24) n (u64 LE); [24, 32) zero.
  ChunkKey Of(const uint8_t* p, size_t n, KeyOwner owner = std::nullopt) const;

 private:
  Hash hash_ = Hash::kSha256;
  std::array<uint8_t, kSecretSize> secret_{};
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const {
    return static_cast<size_t>(LoadLE64(k.bytes.data()));  // already uniformly distributed
  }
};

}  // namespace lmc::store
