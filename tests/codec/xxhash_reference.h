// libxxhash's own inline XXH3: the reference the hash tests compare with.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
// As in codec/src/hash_unit.inc: GCC 12 warns inside its avx512fintrin.h
// when the inline XXH3 is compiled for AVX-512 (-march=native on such a
// CPU). Where the functions are inlined, so for the rest of the file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>
