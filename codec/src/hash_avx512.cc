// XXH3 as AVX-512 (compiled with -mavx512f: codec/CMakeLists.txt); called
// only where the CPU has AVX-512F (hash.cc), and by default never
// (lmc/hash.h says why).
#if !defined(__AVX512F__)
#error "hash_avx512.cc must be compiled with -mavx512f"
#endif
#define XXH_VECTOR XXH_AVX512
#define LMC_HASH_UNIT kAvx512Unit
#include "hash_unit.inc"
