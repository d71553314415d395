// Histograms of streams whose bytes are nearly all a few values (the
// exponent planes of floats): the likely values counted with vector
// compares, every other byte one at a time. See HistogramRunsLikely.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "lmc/transform.h"
#include "transform_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LMC_HIST_X86 1
#endif

namespace lmc {
namespace {

using internal::HistogramIsa;

HistogramIsa BestIsa() {
#if LMC_HIST_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("popcnt")) return HistogramIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt")) return HistogramIsa::kAvx2;
#endif
  return HistogramIsa::kScalar;
}

std::atomic<HistogramIsa> g_isa{BestIsa()};

constexpr int K = kLikelySymbols;

// Adds the histogram of p[0, n) to out, one byte at a time.
void CountScalar(const uint8_t* p, size_t n, uint32_t out[256]) {
  for (size_t i = 0; i < n; ++i) ++out[p[i]];
}

#if LMC_HIST_X86
// Adds the histogram of p[0, n) to out. Per 64-byte vector: one compare per
// likely value, whose mask's bits are counted (popcnt), and the bytes no
// compare matched counted one at a time. The counts of a value are exact
// whatever the data: a byte is either one of the K distinct likely values
// (counted by its compare only) or none of them (counted by the loop only).
[[gnu::target("avx512bw,popcnt,bmi")]] void CountAvx512(const uint8_t* p, size_t n, const uint8_t likely[K],
                                                        uint32_t out[256]) {
  __m512i c[K];
  for (int k = 0; k < K; ++k) c[k] = _mm512_set1_epi8(static_cast<char>(likely[k]));
  uint64_t count[K] = {};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(p + i);
    __mmask64 any = 0;
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) {
      const __mmask64 m = _mm512_cmpeq_epi8_mask(v, c[k]);
      count[k] += static_cast<uint64_t>(__builtin_popcountll(m));
      any |= m;
    }
    for (uint64_t miss = ~static_cast<uint64_t>(any); miss != 0; miss &= miss - 1)
      ++out[p[i + static_cast<size_t>(__builtin_ctzll(miss))]];
  }
  CountScalar(p + i, n - i, out);
  for (int k = 0; k < K; ++k) out[likely[k]] += static_cast<uint32_t>(count[k]);
}

// The same on 32-byte vectors: the masks from movemask.
[[gnu::target("avx2,popcnt,bmi")]] void CountAvx2(const uint8_t* p, size_t n, const uint8_t likely[K],
                                                  uint32_t out[256]) {
  __m256i c[K];
  for (int k = 0; k < K; ++k) c[k] = _mm256_set1_epi8(static_cast<char>(likely[k]));
  uint64_t count[K] = {};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    __m256i any = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) {
      const __m256i e = _mm256_cmpeq_epi8(v, c[k]);
      count[k] += static_cast<uint64_t>(__builtin_popcount(static_cast<uint32_t>(_mm256_movemask_epi8(e))));
      any = _mm256_or_si256(any, e);
    }
    for (uint32_t miss = ~static_cast<uint32_t>(_mm256_movemask_epi8(any)); miss != 0; miss &= miss - 1)
      ++out[p[i + static_cast<size_t>(__builtin_ctz(miss))]];
  }
  CountScalar(p + i, n - i, out);
  for (int k = 0; k < K; ++k) out[likely[k]] += static_cast<uint32_t>(count[k]);
}
#endif

}  // namespace

bool PickLikely(const uint32_t sample[256], uint8_t likely[kLikelySymbols]) {
  uint64_t total = 0;
  for (int s = 0; s < 256; ++s) total += sample[s];
  if (total == 0) return false;
  // Most frequent first, ties by value, so the pick is deterministic: the
  // values the sample holds sorted (a few dozen in an exponent plane), then
  // those it lacks in ascending order, as a stable sort of all 256 would.
  uint8_t order[256];
  int present = 0, absent = 255;
  for (int s = 0; s < 256; ++s) order[sample[s] ? present++ : absent--] = static_cast<uint8_t>(s);
  std::reverse(order + present, order + 256);
  std::stable_sort(order, order + present, [&](uint8_t a, uint8_t b) { return sample[a] > sample[b]; });
  uint64_t covered = 0;
  for (int k = 0; k < K; ++k) {
    likely[k] = order[k];
    covered += sample[order[k]];
  }
  const int need = internal::LikelyCoverageNeeded();
  return need <= 100 && covered * 100 >= total * static_cast<uint64_t>(need);
}

void HistogramRunsLikely(const uint8_t* p, const size_t cuts[5], const uint8_t likely[kLikelySymbols],
                         uint32_t runs[4][256], uint32_t hist[256]) {
  const HistogramIsa isa = g_isa.load(std::memory_order_relaxed);
  if (isa == HistogramIsa::kScalar) {
    HistogramRuns(p, cuts, runs, hist);
    return;
  }
  // K distinct values, whatever the caller passed: a value listed twice
  // would be counted twice. Repeats give way to the smallest unlisted values.
  uint8_t v[K];
  bool listed[256] = {};
  int m = 0;
  for (int k = 0; k < K; ++k)
    if (!listed[likely[k]]) listed[likely[k]] = true, v[m++] = likely[k];
  for (int s = 0; m < K; ++s)
    if (!listed[s]) listed[s] = true, v[m++] = static_cast<uint8_t>(s);
  std::memset(runs, 0, 4 * 256 * sizeof(uint32_t));
  for (int j = 0; j < 4; ++j) {
    const uint8_t* q = p + cuts[j];
    const size_t n = cuts[j + 1] - cuts[j];
#if LMC_HIST_X86
    if (isa == HistogramIsa::kAvx512)
      CountAvx512(q, n, v, runs[j]);
    else
      CountAvx2(q, n, v, runs[j]);
#else
    CountScalar(q, n, runs[j]);
#endif
  }
  for (int s = 0; s < 256; ++s) hist[s] = runs[0][s] + runs[1][s] + runs[2][s] + runs[3][s];
}

namespace internal {
HistogramIsa SetHistogramIsa(HistogramIsa isa) {
  // Never one the CPU lacks: the best it has at most.
  const HistogramIsa best = BestIsa();
  return g_isa.exchange(static_cast<int>(isa) > static_cast<int>(best) ? best : isa);
}
HistogramIsa BestHistogramIsa() { return BestIsa(); }
int LikelyCoverageNeeded() {
  // Each byte outside the likely values costs a scalar count and often a
  // mispredicted branch; where the scalar loop (3-4 GB/s on the
  // development machine) and the vector one cross on a 512 KiB stream of
  // 16 values and others spread over 140 (docs/BENCHMARKS.md, "Exponent
  // planes"): about 75% for AVX-512, 90% for AVX2. Taken with a margin.
  switch (g_isa.load(std::memory_order_relaxed)) {
    case HistogramIsa::kAvx512:
      return 85;
    case HistogramIsa::kAvx2:
      return 95;
    case HistogramIsa::kScalar:
      break;
  }
  return 101;  // never: HistogramRunsLikely would be HistogramRuns
}
}  // namespace internal

}  // namespace lmc
