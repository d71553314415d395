// XXH3 as AVX2 (compiled with -mavx2: codec/CMakeLists.txt); called only
// where the CPU has AVX2 (hash.cc). XXH_VECTOR is set, not left to
// xxhash.h's choice from the target macros: with -march=native on an
// AVX-512 machine it would pick AVX-512 here too.
#if !defined(__AVX2__)
#error "hash_avx2.cc must be compiled with -mavx2"
#endif
#define XXH_VECTOR XXH_AVX2
#define LMC_HASH_UNIT kAvx2Unit
#include "hash_unit.inc"
