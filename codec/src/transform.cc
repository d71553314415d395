#include "lmc/transform.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "lmc/bytes.h"

namespace lmc {
namespace {

bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}

// Split for element type U (little-endian in memory). kRot: rotate left by 1.
template <typename U, bool kRot, bool kXor>
void SplitT(const uint8_t* src, size_t elems, const uint8_t* base, uint8_t* dst) {
  constexpr size_t w = sizeof(U);
  for (size_t i = 0; i < elems; ++i) {
    U v = LoadLE<U>(src + i * w);
    if constexpr (kXor) v ^= LoadLE<U>(base + i * w);
    if constexpr (kRot) v = std::rotl(v, 1);
    for (size_t b = 0; b < w; ++b) dst[b * elems + i] = static_cast<uint8_t>(v >> (8 * (w - 1 - b)));
  }
}

template <typename U, bool kRot, bool kXor>
void MergeT(const uint8_t* const* streams, size_t elems, const uint8_t* base, uint8_t* dst) {
  constexpr size_t w = sizeof(U);
  const uint8_t* s[w];
  for (size_t b = 0; b < w; ++b) s[b] = streams[b];
  for (size_t i = 0; i < elems; ++i) {
    U v = 0;
    for (size_t b = 0; b < w; ++b) v |= static_cast<U>(s[b][i]) << (8 * (w - 1 - b));
    if constexpr (kRot) v = std::rotr(v, 1);
    if constexpr (kXor) v ^= LoadLE<U>(base + i * w);
    StoreLE<U>(dst + i * w, v);
  }
}

template <typename U, bool kRot>
void SplitDispatch(const uint8_t* src, size_t elems, const uint8_t* base, uint8_t* dst) {
  if (base)
    SplitT<U, kRot, true>(src, elems, base, dst);
  else
    SplitT<U, kRot, false>(src, elems, nullptr, dst);
}
template <typename U, bool kRot>
void MergeDispatch(const uint8_t* const* s, size_t elems, const uint8_t* base, uint8_t* dst) {
  if (base)
    MergeT<U, kRot, true>(s, elems, base, dst);
  else
    MergeT<U, kRot, false>(s, elems, nullptr, dst);
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
  StreamShape s = ShapeFor(t, n);
  const bool rot = IsFloat(t);
  switch (s.width) {
    case 1:
      XorCopy(src, n, base, dst);
      return;
    case 2:
      rot ? SplitDispatch<uint16_t, true>(src, s.elems, base, dst)
          : SplitDispatch<uint16_t, false>(src, s.elems, base, dst);
      break;
    case 4:
      rot ? SplitDispatch<uint32_t, true>(src, s.elems, base, dst)
          : SplitDispatch<uint32_t, false>(src, s.elems, base, dst);
      break;
    case 8:
      rot ? SplitDispatch<uint64_t, true>(src, s.elems, base, dst)
          : SplitDispatch<uint64_t, false>(src, s.elems, base, dst);
      break;
  }
  size_t done = s.width * s.elems;
  XorCopy(src + done, s.tail, base ? base + done : nullptr, dst + done);
}

void MergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst) {
  StreamShape s = ShapeFor(t, n);
  const uint8_t* ptrs[9];
  for (size_t i = 0; i < s.count(); ++i) ptrs[i] = streams + s.offset(i);
  MergeStreams(t, ptrs, n, base, dst);
}

void MergeStreams(DType t, const uint8_t* const* streams, size_t n, const uint8_t* base, uint8_t* dst) {
  StreamShape s = ShapeFor(t, n);
  const bool rot = IsFloat(t);
  switch (s.width) {
    case 1:
      XorCopy(streams[0], n, base, dst);
      return;
    case 2:
      rot ? MergeDispatch<uint16_t, true>(streams, s.elems, base, dst)
          : MergeDispatch<uint16_t, false>(streams, s.elems, base, dst);
      break;
    case 4:
      rot ? MergeDispatch<uint32_t, true>(streams, s.elems, base, dst)
          : MergeDispatch<uint32_t, false>(streams, s.elems, base, dst);
      break;
    case 8:
      rot ? MergeDispatch<uint64_t, true>(streams, s.elems, base, dst)
          : MergeDispatch<uint64_t, false>(streams, s.elems, base, dst);
      break;
  }
  size_t done = s.width * s.elems;
  if (s.tail) XorCopy(streams[s.width], s.tail, base ? base + done : nullptr, dst + done);
}

void Histogram(const uint8_t* p, size_t n, uint32_t hist[256]) {
  uint32_t quarters[4][256];
  HistogramQuarters(p, n, quarters, hist);
}

void HistogramQuarters(const uint8_t* p, size_t n, uint32_t quarters[4][256], uint32_t hist[256]) {
  // Eight tables, two per quarter, so that runs of one symbol do not
  // serialise on one counter.
  uint32_t h[8][256] = {};
  const size_t q = n / 4;
  const uint8_t *a = p, *b = p + q, *c = p + 2 * q, *d = p + 3 * q;
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
  for (; i < q; ++i) {
    ++h[0][a[i]];
    ++h[1][b[i]];
    ++h[2][c[i]];
    ++h[3][d[i]];
  }
  for (size_t k = 4 * q; k < n; ++k) ++h[3][p[k]];  // quarter 3 holds the rest
  for (int s = 0; s < 256; ++s) {
    for (int j = 0; j < 4; ++j) quarters[j][s] = h[j][s] + h[j + 4][s];
    hist[s] = quarters[0][s] + quarters[1][s] + quarters[2][s] + quarters[3][s];
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
