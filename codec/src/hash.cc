// lmc/hash.h: XXH3 on AVX2 where the CPU has it. This file's own unit is
// compiled with the build's flags (SSE2 on x86-64 without -march); the AVX2
// and AVX-512 units are in hash_avx2.cc and hash_avx512.cc.
#define LMC_HASH_UNIT kBaseUnit
#include <atomic>
#include <cstring>

#include "hash_unit.inc"

namespace lmc::hash {
namespace {

using internal::HashUnitOps;

// Whether this CPU (and its OS, which must save the wider registers: GCC's
// and Clang's checks include XGETBV, as xxhash's own dispatcher's do) runs u.
bool Supported(const HashUnitOps* u) {
#if defined(LMC_HASH_X86)
  __builtin_cpu_init();
  if (u == &internal::kAvx512Unit) return __builtin_cpu_supports("avx512f");
  if (u == &internal::kAvx2Unit) return __builtin_cpu_supports("avx2");
#endif
  return u == &internal::kBaseUnit;
}

// AVX2 where the CPU has it, not AVX-512: on the development machine (AMD
// EPYC, AVX-512) AVX-512 hashes a chunk in cache 1.45x as fast as AVX2 but
// one from memory, as a chunk's key is, at two thirds of AVX2's speed
// (lmc_profile_bench --hash; docs/BENCHMARKS.md, "XXH3 on AVX2").
const HashUnitOps* Default() {
#if defined(LMC_HASH_X86)
  if (Supported(&internal::kAvx2Unit)) return &internal::kAvx2Unit;
#endif
  return &internal::kBaseUnit;
}

// Chosen on first use (a function's static: hashes in other files' static
// initializers see it chosen). Every unit keeps XXH3_state_t alike (its
// layout does not depend on the unit), so a stream may outlive a change of
// unit.
std::atomic<const HashUnitOps*>& Current() {
  static std::atomic<const HashUnitOps*> unit{Default()};
  return unit;
}

const HashUnitOps& Ops() { return *Current().load(std::memory_order_relaxed); }

}  // namespace

uint64_t Xxh3_64(const void* p, size_t n) { return Ops().xxh3_64(p, n); }

uint64_t Xxh3_64WithSeed(const void* p, size_t n, uint64_t seed) { return Ops().xxh3_64_seed(p, n, seed); }

Hash128 Xxh3_128WithSecret(const void* p, size_t n, const void* secret, size_t secret_len) {
  if (secret == nullptr || secret_len < XXH3_SECRET_SIZE_MIN) std::abort();  // a programming error
  return Ops().xxh3_128_secret(p, n, secret, secret_len);
}

Xxh3Stream::Xxh3Stream() { Ops().reset(state_, nullptr, 0); }

Xxh3Stream::Xxh3Stream(const void* secret, size_t secret_len) {
  if (secret == nullptr) std::abort();
  Ops().reset(state_, secret, secret_len);
}

void Xxh3Stream::Update(const void* p, size_t n) { Ops().update(state_, p, n); }
uint64_t Xxh3Stream::Digest64() const { return Ops().digest64(state_); }
Hash128 Xxh3Stream::Digest128() const { return Ops().digest128(state_); }

namespace internal {

const char* HashUnit() { return Ops().name; }

bool SetHashUnit(const char* name) {
  const HashUnitOps* units[] = {
#if defined(LMC_HASH_X86)
    &kAvx512Unit,
    &kAvx2Unit,
#endif
    &kBaseUnit
  };
  for (const HashUnitOps* u : units) {
    if (std::strcmp(u->name, name) == 0 && Supported(u)) {
      Current().store(u, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

}  // namespace internal
}  // namespace lmc::hash
