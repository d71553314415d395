// XXH3-64 (seed 0, the default 192-byte secret) as host-device code: the
// same function as libxxhash's XXH3_64bits(p, n), written from the
// algorithm's description, so that GPU kernels can compute the checksums
// the CPU codec writes (frame.cc's Checksum64) and unit tests can compare
// the two on machines without a GPU (tests/codec/xxh3_hd_test.cc).
//
// Inputs longer than 240 bytes are hashed in 1024-byte blocks of 16
// 64-byte stripes. A stripe's contribution to the eight accumulators does
// not depend on the accumulators (it is a sum of terms of the data and the
// secret alone), so one block's contributions add up to a delta that can be
// computed independently of every other block, in parallel; only the
// scramble after each block is sequential. The long path is exposed in
// those pieces (Xxh3FullBlocks, Xxh3BlockDelta, Xxh3InitAcc, Xxh3Scramble,
// Xxh3FinishLong) and Xxh3_64 itself is built from them.
//
// Rules: codec/src/hd/hd.h. Loads are little-endian and make no assumption
// on the alignment of the input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hd/hd.h"

namespace lmc::hd {

inline constexpr size_t kXxh3StripeLen = 64;
inline constexpr size_t kXxh3BlockLen = 1024;  // 16 stripes per block with the default secret

namespace xxh3_detail {

inline constexpr size_t kSecretLen = 192;
inline constexpr size_t kStripesPerBlock = (kSecretLen - kXxh3StripeLen) / 8;  // 16
inline constexpr size_t kMidMax = 240;  // longest input of the short paths

inline constexpr uint64_t kP32_1 = 0x9E3779B1u;
inline constexpr uint64_t kP32_2 = 0x85EBCA77u;
inline constexpr uint64_t kP32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t kP64_1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kP64_2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kP64_3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kP64_4 = 0x85EBCA77C2B2AE63ull;
inline constexpr uint64_t kP64_5 = 0x27D4EB2F165667C5ull;
inline constexpr uint64_t kMx1 = 0x165667919E3779F9ull;
inline constexpr uint64_t kMx2 = 0x9FB21C651E98DF25ull;

// The default secret (XXH3's kSecret).
#define LMC_XXH3_SECRET_BYTES                                                                             \
  {                                                                                                       \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, \
        0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb,   \
        0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8,   \
        0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c,   \
        0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71,   \
        0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8,   \
        0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a,   \
        0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea,   \
        0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17,   \
        0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b,   \
        0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45,   \
        0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,         \
  }

// Device code cannot read a host constexpr array; it reads a copy in
// constant memory (every thread of a warp reads the same secret bytes at
// the same time: a broadcast). static: one copy per translation unit, which
// links with or without relocatable device code.
#if defined(__CUDACC__)
alignas(8) static __constant__ uint8_t kSecretDevice[kSecretLen] = LMC_XXH3_SECRET_BYTES;
#endif
inline constexpr uint8_t kSecretHost[kSecretLen] = LMC_XXH3_SECRET_BYTES;
#undef LMC_XXH3_SECRET_BYTES

LMC_HD const uint8_t* Secret() {
#if defined(__CUDA_ARCH__)
  return kSecretDevice;
#else
  return kSecretHost;
#endif
}

LMC_HD uint32_t Load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

LMC_HD uint64_t Load64(const uint8_t* p) {
  return static_cast<uint64_t>(Load32(p)) | (static_cast<uint64_t>(Load32(p + 4)) << 32);
}

LMC_HD uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

LMC_HD uint32_t Swap32(uint32_t x) {
  return ((x & 0xffu) << 24) | ((x & 0xff00u) << 8) | ((x >> 8) & 0xff00u) | (x >> 24);
}

LMC_HD uint64_t Swap64(uint64_t x) {
  return (static_cast<uint64_t>(Swap32(static_cast<uint32_t>(x))) << 32) |
         Swap32(static_cast<uint32_t>(x >> 32));
}

// The 128-bit product a * b, its two halves xored together.
LMC_HD uint64_t MulFold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ static_cast<uint64_t>(__umul64hi(a, b));
#else
  __extension__ typedef unsigned __int128 U128;
  const U128 r = static_cast<U128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
#endif
}

LMC_HD uint64_t Xxh64Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP64_2;
  h ^= h >> 29;
  h *= kP64_3;
  return h ^ (h >> 32);
}

LMC_HD uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= kMx1;
  return h ^ (h >> 32);
}

LMC_HD uint64_t Rrmxmx(uint64_t h, uint64_t len) {
  h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
  h *= kMx2;
  h ^= (h >> 35) + len;
  h *= kMx2;
  return h ^ (h >> 28);
}

// 16 input bytes against 16 secret bytes.
LMC_HD uint64_t Mix16(const uint8_t* p, const uint8_t* s) {
  return MulFold64(Load64(p) ^ Load64(s), Load64(p + 8) ^ Load64(s + 8));
}

LMC_HD uint64_t Len0(const uint8_t* s) { return Xxh64Avalanche(Load64(s + 56) ^ Load64(s + 64)); }

LMC_HD uint64_t Len1To3(const uint8_t* p, size_t n, const uint8_t* s) {
  const uint32_t combined = (static_cast<uint32_t>(p[0]) << 16) | (static_cast<uint32_t>(p[n >> 1]) << 24) |
                            static_cast<uint32_t>(p[n - 1]) | (static_cast<uint32_t>(n) << 8);
  const uint64_t flip = Load32(s) ^ Load32(s + 4);
  return Xxh64Avalanche(combined ^ flip);
}

LMC_HD uint64_t Len4To8(const uint8_t* p, size_t n, const uint8_t* s) {
  const uint64_t flip = Load64(s + 8) ^ Load64(s + 16);
  const uint64_t in = Load32(p + n - 4) + (static_cast<uint64_t>(Load32(p)) << 32);
  return Rrmxmx(in ^ flip, n);
}

LMC_HD uint64_t Len9To16(const uint8_t* p, size_t n, const uint8_t* s) {
  const uint64_t lo = Load64(p) ^ (Load64(s + 24) ^ Load64(s + 32));
  const uint64_t hi = Load64(p + n - 8) ^ (Load64(s + 40) ^ Load64(s + 48));
  return Avalanche(n + Swap64(lo) + hi + MulFold64(lo, hi));
}

// 17..128 bytes: pairs of 16-byte words from both ends, inward.
LMC_HD uint64_t Len17To128(const uint8_t* p, size_t n, const uint8_t* s) {
  uint64_t acc = n * kP64_1;
  if (n > 32) {
    if (n > 64) {
      if (n > 96) {
        acc += Mix16(p + 48, s + 96);
        acc += Mix16(p + n - 64, s + 112);
      }
      acc += Mix16(p + 32, s + 64);
      acc += Mix16(p + n - 48, s + 80);
    }
    acc += Mix16(p + 16, s + 32);
    acc += Mix16(p + n - 32, s + 48);
  }
  acc += Mix16(p, s);
  acc += Mix16(p + n - 16, s + 16);
  return Avalanche(acc);
}

// 129..240 bytes: the first eight 16-byte words, an avalanche, the
// remaining whole words against the secret from offset 3, and the last 16
// bytes against the secret at offset 119.
LMC_HD uint64_t Len129To240(const uint8_t* p, size_t n, const uint8_t* s) {
  uint64_t acc = n * kP64_1;
  for (size_t i = 0; i < 8; ++i) acc += Mix16(p + 16 * i, s + 16 * i);
  acc = Avalanche(acc);
  const size_t rounds = n / 16;
  for (size_t i = 8; i < rounds; ++i) acc += Mix16(p + 16 * i, s + 16 * (i - 8) + 3);
  acc += Mix16(p + n - 16, s + 136 - 17);
  return Avalanche(acc);
}

// One 64-byte stripe against secret s (8 bytes further per stripe).
// Adds to acc; the added amount does not depend on acc.
LMC_HD void Stripe(uint64_t acc[8], const uint8_t* p, const uint8_t* s) {
  for (int i = 0; i < 8; ++i) {
    const uint64_t v = Load64(p + 8 * i);
    const uint64_t k = v ^ Load64(s + 8 * i);
    acc[i ^ 1] += v;
    acc[i] += (k & 0xffffffffu) * (k >> 32);
  }
}

}  // namespace xxh3_detail

// Word k (< kSecretLen / 8) of the secret: Load64(Secret() + 8 * k), one
// aligned load on a GPU (a broadcast where a warp's threads ask for the
// same word).
LMC_HD uint64_t Xxh3SecretWord(int k) {
#if defined(__CUDA_ARCH__)
  return reinterpret_cast<const uint64_t*>(xxh3_detail::kSecretDevice)[k];
#else
  return xxh3_detail::Load64(xxh3_detail::kSecretHost + 8 * k);
#endif
}

// Number of whole 1024-byte blocks of a long input (n > 240) that are each
// followed by a scramble: (n - 1) / 1024. A final block that is exactly
// full (n a multiple of 1024) is not one of them: it is left to
// Xxh3FinishLong. 0 for n == 0.
LMC_HD size_t Xxh3FullBlocks(size_t n) { return n == 0 ? 0 : (n - 1) / kXxh3BlockLen; }

// The accumulators before the first block.
LMC_HD void Xxh3InitAcc(uint64_t acc[8]) {
  using namespace xxh3_detail;
  acc[0] = kP32_3;
  acc[1] = kP64_1;
  acc[2] = kP64_2;
  acc[3] = kP64_3;
  acc[4] = kP64_4;
  acc[5] = kP32_2;
  acc[6] = kP64_5;
  acc[7] = kP32_1;
}

// What block[0, 1024) adds to the accumulators (mod 2^64), independent of
// their value; delta is overwritten.
LMC_HD void Xxh3BlockDelta(const uint8_t* block, uint64_t delta[8]) {
  using namespace xxh3_detail;
  const uint8_t* s = Secret();
  for (int i = 0; i < 8; ++i) delta[i] = 0;
  for (size_t k = 0; k < kStripesPerBlock; ++k) Stripe(delta, block + k * kXxh3StripeLen, s + 8 * k);
}

// The scramble that follows each full block.
LMC_HD void Xxh3Scramble(uint64_t acc[8]) {
  using namespace xxh3_detail;
  const uint8_t* s = Secret() + kSecretLen - kXxh3StripeLen;
  for (int i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= Load64(s + 8 * i);
    acc[i] = a * kP32_1;
  }
}

// The end of a long input (n > 240), given the accumulators after the
// Xxh3FullBlocks(n) full blocks and their scrambles: the whole stripes of
// the last (partial or exactly full) block but its last byte, the input's
// last 64 bytes (overlapping them) against the secret at offset 121, and
// the merge of the accumulators. Reads p[min(1024 * Xxh3FullBlocks(n),
// n - 64), n) only: when the last block holds fewer than 64 bytes (n = 1024k
// + 1 .. 1024k + 63), the last stripe reaches back into the last full
// block. acc is clobbered.
LMC_HD uint64_t Xxh3FinishLong(uint64_t acc[8], const uint8_t* p, size_t n) {
  using namespace xxh3_detail;
  const uint8_t* s = Secret();
  const size_t done = Xxh3FullBlocks(n) * kXxh3BlockLen;
  const size_t stripes = (n - 1 - done) / kXxh3StripeLen;
  for (size_t k = 0; k < stripes; ++k) Stripe(acc, p + done + k * kXxh3StripeLen, s + 8 * k);
  Stripe(acc, p + n - kXxh3StripeLen, s + kSecretLen - kXxh3StripeLen - 7);
  // Merge: the accumulators in pairs against the secret from offset 11.
  uint64_t h = n * kP64_1;
  for (int i = 0; i < 4; ++i) {
    h += MulFold64(acc[2 * i] ^ Load64(s + 11 + 16 * i), acc[2 * i + 1] ^ Load64(s + 11 + 16 * i + 8));
  }
  return Avalanche(h);
}

// == XXH3_64bits(p, n).
LMC_HD uint64_t Xxh3_64(const uint8_t* p, size_t n) {
  using namespace xxh3_detail;
  const uint8_t* s = Secret();
  if (n <= 16) {
    if (n > 8) return Len9To16(p, n, s);
    if (n >= 4) return Len4To8(p, n, s);
    if (n > 0) return Len1To3(p, n, s);
    return Len0(s);
  }
  if (n <= 128) return Len17To128(p, n, s);
  if (n <= kMidMax) return Len129To240(p, n, s);
  uint64_t acc[8];
  Xxh3InitAcc(acc);
  const size_t blocks = Xxh3FullBlocks(n);
  for (size_t b = 0; b < blocks; ++b) {
    uint64_t d[8];
    Xxh3BlockDelta(p + b * kXxh3BlockLen, d);
    for (int i = 0; i < 8; ++i) acc[i] += d[i];
    Xxh3Scramble(acc);
  }
  return Xxh3FinishLong(acc, p, n);
}

}  // namespace lmc::hd
