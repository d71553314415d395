#include "lmc/store/chunk_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lmc/hash.h"

namespace lmc::store {

namespace {
// OpenSSL initialized without its exit handler: with one, OPENSSL_cleanup
// could run at exit before the static thread pool joins its workers (the
// handlers run in reverse order of registration, and the pool may be made
// before the first digest), and the workers' per-thread state, freed by a
// thread-exit destructor that cleanup has already removed, was then
// reported as leaked by LeakSanitizer. Without it, a worker's state is
// freed when the worker exits, and what is left at exit stays reachable.
bool InitOpenSsl() { return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1; }
}  // namespace

ChunkKey ChunkKey::Of(const uint8_t* p, size_t n, KeyOwner owner) {
  static const bool initialized = InitOpenSsl();
  (void)initialized;
  // EVP_sha256 is a static method table; the digest cannot fail for it
  // short of memory exhaustion, which we treat like new's failure.
  ChunkKey k;
  unsigned int len = 0;
  if (!owner) {
    if (EVP_Digest(p, n, k.bytes.data(), &len, EVP_sha256(), nullptr) != 1 || len != kSize) std::abort();
    return k;
  }
  uint8_t prefix[sizeof kOwnerKeyTag + 4];
  std::memcpy(prefix, kOwnerKeyTag, sizeof kOwnerKeyTag);
  StoreLE32(prefix + sizeof kOwnerKeyTag, *owner);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx, prefix, sizeof prefix) != 1 || EVP_DigestUpdate(ctx, p, n) != 1 ||
      EVP_DigestFinal_ex(ctx, k.bytes.data(), &len) != 1 || len != kSize)
    std::abort();
  EVP_MD_CTX_free(ctx);
  return k;
}

KeyScheme KeyScheme::Xxh3(const std::array<uint8_t, kSecretSize>& secret) {
  KeyScheme k;
  k.hash_ = Hash::kXxh3;
  k.secret_ = secret;
  return k;
}

std::array<uint8_t, KeyScheme::kSecretSize> KeyScheme::NewSecret() {
  static_assert(kSecretSize == XXH3_SECRET_DEFAULT_SIZE);
  std::array<uint8_t, kSecretSize> s{};
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t r = ::getrandom(s.data() + got, s.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) std::abort();  // the kernel's generator cannot fail once seeded
    got += static_cast<size_t>(r);
  }
  return s;
}

ChunkKey KeyScheme::Of(const uint8_t* p, size_t n, KeyOwner owner) const {
  if (hash_ == Hash::kSha256) return ChunkKey::Of(p, n, owner);
  hash::Hash128 h;
  if (!owner) {
    h = hash::Xxh3_128WithSecret(p, n, secret_.data(), secret_.size());
  } else {
    uint8_t prefix[sizeof kOwnerKeyTag + 4];
    std::memcpy(prefix, kOwnerKeyTag, sizeof kOwnerKeyTag);
    StoreLE32(prefix + sizeof kOwnerKeyTag, *owner);
    hash::Xxh3Stream state(secret_.data(), secret_.size());
    state.Update(prefix, sizeof prefix);
    state.Update(p, n);
    h = state.Digest128();
  }
  ChunkKey k;
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH128_hash_t{h.low64, h.high64});
  static_assert(sizeof c.digest == 16);
  std::memcpy(k.bytes.data(), c.digest, 16);
  StoreLE64(k.bytes.data() + 16, n);
  return k;
}

std::string HexOf(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

bool ParseHex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < 2 * n; ++i) {
    const char c = hex[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    out[i / 2] = static_cast<uint8_t>((out[i / 2] << 4) | d);
  }
  return true;
}

std::optional<ChunkKey> ChunkKey::FromHex(std::string_view hex) {
  ChunkKey k;
  if (!ParseHex(hex, k.bytes.data(), kSize)) return std::nullopt;
  return k;
}

std::string ChunkKey::ToHex() const { return HexOf(bytes.data(), kSize); }

}  // namespace lmc::store
