// One vector unit's XXH3 (lmc/hash.h): hash.cc compiles xxhash.h's inline
// functions with the build's flags, hash_avx2.cc and hash_avx512.cc with
// -mavx2 and -mavx512f (x86-64 only), each through hash_unit.inc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lmc/hash.h"

namespace lmc::hash::internal {

struct HashUnitOps {
  const char* name;  // "avx512", "avx2", "sse2", "neon", "scalar", ...
  uint64_t (*xxh3_64)(const void* p, size_t n);
  uint64_t (*xxh3_64_seed)(const void* p, size_t n, uint64_t seed);
  Hash128 (*xxh3_128_secret)(const void* p, size_t n, const void* secret, size_t secret_len);
  // secret == nullptr: XXH3's default secret. Aborts on a short secret.
  void (*reset)(void* state, const void* secret, size_t secret_len);
  void (*update)(void* state, const void* p, size_t n);
  uint64_t (*digest64)(const void* state);
  Hash128 (*digest128)(const void* state);
};

extern const HashUnitOps kBaseUnit;  // hash.cc: the build's own flags
#if defined(LMC_HASH_X86)
extern const HashUnitOps kAvx2Unit;    // hash_avx2.cc
extern const HashUnitOps kAvx512Unit;  // hash_avx512.cc
#endif

}  // namespace lmc::hash::internal
