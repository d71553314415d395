#include "lmc/transform.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "lmc/bytes.h"
#include "transform_internal.h"

namespace lmc {
namespace {

bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}

// Elements [e0, e1) of a split for element type U (little-endian in
// memory) into the streams out[0..w): byte b of an element (high byte
// first) goes to out[b][i]. kRot: rotate left by 1; kXor: XOR the base
// element first. The scalar reference of the vector kernels below.
template <typename U, bool kRot, bool kXor>
void SplitT(const uint8_t* src, size_t e0, size_t e1, const uint8_t* base, uint8_t* const* out) {
  constexpr size_t w = sizeof(U);
  for (size_t i = e0; i < e1; ++i) {
    U v = LoadLE<U>(src + i * w);
    if constexpr (kXor) v ^= LoadLE<U>(base + i * w);
    if constexpr (kRot) v = std::rotl(v, 1);
    for (size_t b = 0; b < w; ++b) out[b][i] = static_cast<uint8_t>(v >> (8 * (w - 1 - b)));
  }
}

template <typename U, bool kRot, bool kXor>
void MergeT(const uint8_t* const* s, size_t e0, size_t e1, const uint8_t* base, uint8_t* dst) {
  constexpr size_t w = sizeof(U);
  for (size_t i = e0; i < e1; ++i) {
    U v = 0;
    for (size_t b = 0; b < w; ++b) v |= static_cast<U>(s[b][i]) << (8 * (w - 1 - b));
    if constexpr (kRot) v = std::rotr(v, 1);
    if constexpr (kXor) v ^= LoadLE<U>(base + i * w);
    StoreLE<U>(dst + i * w, v);
  }
}

// AVX2 kernels for 2- and 4-byte elements, 32 elements per step; the
// elements left over go through the scalar loop. They compute exactly what
// SplitT / MergeT compute (transform_test compares them on every dtype,
// length and alignment).
#define LMC_AVX2 [[gnu::target("avx2")]]

LMC_AVX2 inline __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
LMC_AVX2 inline void Store(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

template <bool kRot, bool kXor>
LMC_AVX2 void Split16Avx2(const uint8_t* src, size_t e0, size_t e1, const uint8_t* base,
                          uint8_t* const* out) {
  // Per 128-bit lane: the low bytes of its 8 elements, then their high bytes.
  const __m256i bytes = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                         10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  size_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    __m256i a = Load(src + 2 * i), b = Load(src + 2 * i + 32);
    if constexpr (kXor) {
      a = _mm256_xor_si256(a, Load(base + 2 * i));
      b = _mm256_xor_si256(b, Load(base + 2 * i + 32));
    }
    if constexpr (kRot) {
      a = _mm256_or_si256(_mm256_slli_epi16(a, 1), _mm256_srli_epi16(a, 15));
      b = _mm256_or_si256(_mm256_slli_epi16(b, 1), _mm256_srli_epi16(b, 15));
    }
    // Quadwords (low 0-7, high 0-7, low 8-15, high 8-15) -> (low 0-15, high 0-15).
    a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a, bytes), 0xD8);
    b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, bytes), 0xD8);
    Store(out[0] + i, _mm256_permute2x128_si256(a, b, 0x31));  // high bytes
    Store(out[1] + i, _mm256_permute2x128_si256(a, b, 0x20));  // low bytes
  }
  SplitT<uint16_t, kRot, kXor>(src, i, e1, base, out);
}

template <bool kRot, bool kXor>
LMC_AVX2 void Merge16Avx2(const uint8_t* const* s, size_t e0, size_t e1, const uint8_t* base, uint8_t* dst) {
  size_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    const __m256i hi = Load(s[0] + i), lo = Load(s[1] + i);
    const __m256i ul = _mm256_unpacklo_epi8(lo, hi);  // elements 0-7 | 16-23
    const __m256i uh = _mm256_unpackhi_epi8(lo, hi);  // elements 8-15 | 24-31
    __m256i o0 = _mm256_permute2x128_si256(ul, uh, 0x20), o1 = _mm256_permute2x128_si256(ul, uh, 0x31);
    if constexpr (kRot) {
      o0 = _mm256_or_si256(_mm256_srli_epi16(o0, 1), _mm256_slli_epi16(o0, 15));
      o1 = _mm256_or_si256(_mm256_srli_epi16(o1, 1), _mm256_slli_epi16(o1, 15));
    }
    if constexpr (kXor) {
      o0 = _mm256_xor_si256(o0, Load(base + 2 * i));
      o1 = _mm256_xor_si256(o1, Load(base + 2 * i + 32));
    }
    Store(dst + 2 * i, o0);
    Store(dst + 2 * i + 32, o1);
  }
  MergeT<uint16_t, kRot, kXor>(s, i, e1, base, dst);
}

template <bool kRot, bool kXor>
LMC_AVX2 void Split32Avx2(const uint8_t* src, size_t e0, size_t e1, const uint8_t* base,
                          uint8_t* const* out) {
  // Per lane: byte j of its 4 elements in dword j; then quadword j of the
  // vector is byte j of its 8 elements.
  const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1,
                                         5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i dwords = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = Load(src + 4 * i + 32 * k);
      if constexpr (kXor) v[k] = _mm256_xor_si256(v[k], Load(base + 4 * i + 32 * k));
      if constexpr (kRot) v[k] = _mm256_or_si256(_mm256_slli_epi32(v[k], 1), _mm256_srli_epi32(v[k], 31));
      v[k] = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v[k], bytes), dwords);
    }
    // A 4x4 transpose of quadwords: stream of byte j = quadword j of v[0..4).
    const __m256i ab_lo = _mm256_unpacklo_epi64(v[0], v[1]), ab_hi = _mm256_unpackhi_epi64(v[0], v[1]);
    const __m256i cd_lo = _mm256_unpacklo_epi64(v[2], v[3]), cd_hi = _mm256_unpackhi_epi64(v[2], v[3]);
    Store(out[3] + i, _mm256_permute2x128_si256(ab_lo, cd_lo, 0x20));  // byte 0
    Store(out[2] + i, _mm256_permute2x128_si256(ab_hi, cd_hi, 0x20));  // byte 1
    Store(out[1] + i, _mm256_permute2x128_si256(ab_lo, cd_lo, 0x31));  // byte 2
    Store(out[0] + i, _mm256_permute2x128_si256(ab_hi, cd_hi, 0x31));  // byte 3
  }
  SplitT<uint32_t, kRot, kXor>(src, i, e1, base, out);
}

template <bool kRot, bool kXor>
LMC_AVX2 void Merge32Avx2(const uint8_t* const* s, size_t e0, size_t e1, const uint8_t* base, uint8_t* dst) {
  size_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    const __m256i b3 = Load(s[0] + i), b2 = Load(s[1] + i), b1 = Load(s[2] + i), b0 = Load(s[3] + i);
    const __m256i t0 = _mm256_unpacklo_epi8(b0, b1), t1 = _mm256_unpackhi_epi8(b0, b1);
    const __m256i t2 = _mm256_unpacklo_epi8(b2, b3), t3 = _mm256_unpackhi_epi8(b2, b3);
    const __m256i u0 = _mm256_unpacklo_epi16(t0, t2);  // elements 0-3 | 16-19
    const __m256i u1 = _mm256_unpackhi_epi16(t0, t2);  // 4-7 | 20-23
    const __m256i u2 = _mm256_unpacklo_epi16(t1, t3);  // 8-11 | 24-27
    const __m256i u3 = _mm256_unpackhi_epi16(t1, t3);  // 12-15 | 28-31
    __m256i o[4] = {_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u2, u3, 0x20),
                    _mm256_permute2x128_si256(u0, u1, 0x31), _mm256_permute2x128_si256(u2, u3, 0x31)};
    for (int k = 0; k < 4; ++k) {
      if constexpr (kRot) o[k] = _mm256_or_si256(_mm256_srli_epi32(o[k], 1), _mm256_slli_epi32(o[k], 31));
      if constexpr (kXor) o[k] = _mm256_xor_si256(o[k], Load(base + 4 * i + 32 * k));
      Store(dst + 4 * i + 32 * k, o[k]);
    }
  }
  MergeT<uint32_t, kRot, kXor>(s, i, e1, base, dst);
}
#undef LMC_AVX2

// Decided at static initialisation; __builtin_cpu_init first, since this
// may run before libgcc's own constructor that fills in the CPU features.
std::atomic<bool> g_avx2{(__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0)};

template <typename U, bool kRot, bool kXor>
void SplitPick(const uint8_t* src, size_t e0, size_t e1, const uint8_t* base, uint8_t* const* out) {
  if (g_avx2.load(std::memory_order_relaxed)) {
    if constexpr (sizeof(U) == 2) return Split16Avx2<kRot, kXor>(src, e0, e1, base, out);
    if constexpr (sizeof(U) == 4) return Split32Avx2<kRot, kXor>(src, e0, e1, base, out);
  }
  SplitT<U, kRot, kXor>(src, e0, e1, base, out);
}
template <typename U, bool kRot, bool kXor>
void MergePick(const uint8_t* const* s, size_t e0, size_t e1, const uint8_t* base, uint8_t* dst) {
  if (g_avx2.load(std::memory_order_relaxed)) {
    if constexpr (sizeof(U) == 2) return Merge16Avx2<kRot, kXor>(s, e0, e1, base, dst);
    if constexpr (sizeof(U) == 4) return Merge32Avx2<kRot, kXor>(s, e0, e1, base, dst);
  }
  MergeT<U, kRot, kXor>(s, e0, e1, base, dst);
}

template <typename U>
void SplitDispatch(bool rot, const uint8_t* src, size_t e0, size_t e1, const uint8_t* base,
                   uint8_t* const* out) {
  if (rot)
    base ? SplitPick<U, true, true>(src, e0, e1, base, out)
         : SplitPick<U, true, false>(src, e0, e1, base, out);
  else
    base ? SplitPick<U, false, true>(src, e0, e1, base, out)
         : SplitPick<U, false, false>(src, e0, e1, base, out);
}
template <typename U>
void MergeDispatch(bool rot, const uint8_t* const* s, size_t e0, size_t e1, const uint8_t* base,
                   uint8_t* dst) {
  if (rot)
    base ? MergePick<U, true, true>(s, e0, e1, base, dst) : MergePick<U, true, false>(s, e0, e1, base, dst);
  else
    base ? MergePick<U, false, true>(s, e0, e1, base, dst) : MergePick<U, false, false>(s, e0, e1, base, dst);
}

void XorCopy(const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst) {
  if (n == 0) return;  // src may be null (an empty chunk)
  if (!base) {
    std::memcpy(dst, src, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = src[i] ^ base[i];
}

}  // namespace

StreamShape ShapeFor(DType t, size_t n) {
  size_t w = DTypeWidth(t);
  return StreamShape{w, n / w, n % w};
}

void SplitStreams(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst) {
  SplitStreamsRange(t, src, n, base, dst, 0, n);
}

void SplitStreamsRange(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst, size_t from,
                       size_t to) {
  const StreamShape s = ShapeFor(t, n);
  const bool rot = IsFloat(t);
  if (s.width == 1) {
    XorCopy(src + from, to - from, base ? base + from : nullptr, dst + from);
    return;
  }
  uint8_t* out[8];
  for (size_t b = 0; b < s.width; ++b) out[b] = dst + s.offset(b);
  const size_t e0 = from / s.width, e1 = std::min(to / s.width, s.elems);
  switch (s.width) {
    case 2:
      SplitDispatch<uint16_t>(rot, src, e0, e1, base, out);
      break;
    case 4:
      SplitDispatch<uint32_t>(rot, src, e0, e1, base, out);
      break;
    case 8:
      SplitDispatch<uint64_t>(rot, src, e0, e1, base, out);
      break;
  }
  const size_t done = s.width * s.elems;
  if (to == n && s.tail) XorCopy(src + done, s.tail, base ? base + done : nullptr, dst + done);
}

void MergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst) {
  StreamShape s = ShapeFor(t, n);
  const uint8_t* ptrs[9];
  for (size_t i = 0; i < s.count(); ++i) ptrs[i] = streams + s.offset(i);
  MergeStreamsRange(t, ptrs, n, base, dst, 0, n);
}

void MergeStreams(DType t, const uint8_t* const* streams, size_t n, const uint8_t* base, uint8_t* dst) {
  MergeStreamsRange(t, streams, n, base, dst, 0, n);
}

void MergeStreamsRange(DType t, const uint8_t* const* streams, size_t n, const uint8_t* base, uint8_t* dst,
                       size_t from, size_t to) {
  const StreamShape s = ShapeFor(t, n);
  const bool rot = IsFloat(t);
  if (s.width == 1) {
    XorCopy(streams[0] ? streams[0] + from : nullptr, to - from, base ? base + from : nullptr, dst + from);
    return;
  }
  const size_t e0 = from / s.width, e1 = std::min(to / s.width, s.elems);
  switch (s.width) {
    case 2:
      MergeDispatch<uint16_t>(rot, streams, e0, e1, base, dst);
      break;
    case 4:
      MergeDispatch<uint32_t>(rot, streams, e0, e1, base, dst);
      break;
    case 8:
      MergeDispatch<uint64_t>(rot, streams, e0, e1, base, dst);
      break;
  }
  const size_t done = s.width * s.elems;
  if (to == n && s.tail) XorCopy(streams[s.width], s.tail, base ? base + done : nullptr, dst + done);
}

namespace internal {
bool SetTransformAvx2(bool on) { return g_avx2.exchange(on && __builtin_cpu_supports("avx2")); }
}  // namespace internal

void Histogram(const uint8_t* p, size_t n, uint32_t hist[256]) {
  uint32_t quarters[4][256];
  HistogramQuarters(p, n, quarters, hist);
}

void QuarterCuts(size_t n, size_t cuts[5]) {
  const size_t q = n / 4;
  cuts[0] = 0, cuts[1] = q, cuts[2] = 2 * q, cuts[3] = 3 * q, cuts[4] = n;  // quarter 3 holds the rest
}

void HistogramQuarters(const uint8_t* p, size_t n, uint32_t quarters[4][256], uint32_t hist[256]) {
  size_t cuts[5];
  QuarterCuts(n, cuts);
  HistogramRuns(p, cuts, quarters, hist);
}

void HistogramRuns(const uint8_t* p, const size_t cuts[5], uint32_t runs[4][256], uint32_t hist[256]) {
  // Eight tables, two per run, so that runs of one symbol do not serialise
  // on one counter; the four runs interleaved over their common length.
  uint32_t h[8][256] = {};
  const uint8_t *a = p + cuts[0], *b = p + cuts[1], *c = p + cuts[2], *d = p + cuts[3];
  size_t q = cuts[4] - cuts[3];
  for (int j = 0; j < 3; ++j) q = std::min(q, cuts[j + 1] - cuts[j]);
  size_t i = 0;
  for (; i + 2 <= q; i += 2) {
    ++h[0][a[i]];
    ++h[1][b[i]];
    ++h[2][c[i]];
    ++h[3][d[i]];
    ++h[4][a[i + 1]];
    ++h[5][b[i + 1]];
    ++h[6][c[i + 1]];
    ++h[7][d[i + 1]];
  }
  for (int j = 0; j < 4; ++j)  // what is left of each run
    for (size_t k = cuts[j] + i; k < cuts[j + 1]; ++k) ++h[j][p[k]];
  for (int s = 0; s < 256; ++s) {
    for (int j = 0; j < 4; ++j) runs[j][s] = h[j][s] + h[j + 4][s];
    hist[s] = runs[0][s] + runs[1][s] + runs[2][s] + runs[3][s];
  }
}

double EntropyBits(const uint32_t hist[256], size_t n) {
  if (n == 0) return 0;
  double bits = 0, dn = static_cast<double>(n);
  for (int s = 0; s < 256; ++s)
    if (hist[s]) bits -= hist[s] * std::log2(hist[s] / dn);
  return bits;
}

double GroupedEntropyBits(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* scratch) {
  SplitStreams(t, src, n, base, scratch);
  StreamShape s = ShapeFor(t, n);
  double bits = 0;
  for (size_t i = 0; i < s.count(); ++i) {
    uint32_t h[256];
    Histogram(scratch + s.offset(i), s.size(i), h);
    bits += EntropyBits(h, s.size(i));
  }
  return bits;
}

}  // namespace lmc
