// XXH3 as AVX2 (compiled with -mavx2: codec/CMakeLists.txt); called only
// where the CPU has AVX2 (hash.cc).
#define LMC_HASH_UNIT kAvx2Unit
#define LMC_HASH_VECTOR XXH_AVX2
#include "hash_unit.inc"
