// XXH3 as AVX-512 (compiled with -mavx512f: codec/CMakeLists.txt); called
// only where the CPU has AVX-512F (hash.cc), and by default never
// (lmc/hash.h says why).
#if !defined(__AVX512F__)
#error "hash_avx512.cc must be compiled with -mavx512f"
#endif
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own avx512fintrin.h, where intrinsics that XXH3
// inlines start from an undefined register (self-initialized on purpose).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define XXH_VECTOR XXH_AVX512
#define LMC_HASH_UNIT kAvx512Unit
#include "hash_unit.inc"
