// XXH3 (libxxhash) over long inputs, on AVX2 where the CPU has it.
//
// lmcfs builds without -march, so xxhash.h's inline functions compile for
// SSE2 only. Each chunk written is hashed twice (its key, from memory, and
// its frame checksum, in cache) and its frame once more (the pack record's
// checksum), and each chunk read twice (frame and record checksums). These
// functions run XXH3 compiled for AVX2 where CPUID has it, else for the
// build's own unit (an AVX-512 unit exists for benchmarks and tests: faster
// in cache, slower from memory on the development machine). On that
// machine, 1 MiB chunks: SSE2 34 GB/s in cache and 28 from memory, AVX2 56
// and 31, AVX-512 80 and 20 (lmc_profile_bench --hash). The values are
// XXH3's, whatever unit computes them: frames, records and keys written
// before and after are the same bytes.
//
// Thread-safe; no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmc::hash {

struct Hash128 {
  uint64_t low64, high64;
  bool operator==(const Hash128&) const = default;
};

// XXH3_64bits(p, n): XXH3-64 with its default secret and seed 0.
uint64_t Xxh3_64(const void* p, size_t n);

// XXH3_64bits_withSeed(p, n, seed).
uint64_t Xxh3_64WithSeed(const void* p, size_t n, uint64_t seed);

// XXH3_128bits_withSecret(p, n, secret, secret_len); secret_len >= 136
// (XXH3_SECRET_SIZE_MIN), else the process aborts (a programming error).
Hash128 Xxh3_128WithSecret(const void* p, size_t n, const void* secret, size_t secret_len);

// XXH3 of the bytes given to Update, in order, over any number of calls:
// Digest64 equals Xxh3_64 of their concatenation (default secret), and with
// a secret Digest128 equals Xxh3_128WithSecret. The secret is not copied: it
// must outlive the stream.
class Xxh3Stream {
 public:
  Xxh3Stream();
  Xxh3Stream(const void* secret, size_t secret_len);  // secret_len >= 136, else aborts

  void Update(const void* p, size_t n);
  uint64_t Digest64() const;
  Hash128 Digest128() const;

  // XXH3_state_t, held in place (static_assert'ed in hash.cc).
  static constexpr size_t kStateBytes = 640;

 private:
  alignas(64) unsigned char state_[kStateBytes];
};

namespace internal {
// The vector unit the functions above use: "avx2", "avx512" or the build's
// own ("sse2" on x86-64 without -march; "neon", "scalar", ...).
const char* HashUnit();
// Sets it for tests and benchmarks: a unit this CPU lacks, or an unknown
// name, leaves it unchanged. Returns whether it was set. Calls on other
// threads meanwhile run on either unit, with the same values.
bool SetHashUnit(const char* name);
}  // namespace internal

}  // namespace lmc::hash
