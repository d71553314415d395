// Interleaved rANS coder (docs/FORMAT.md, "rANS stream").
//
// Stream layout (all integers little-endian):
//   [0]       k-1: number of distinct symbols minus one (k in 1..256)
//   symbols   k < 32: k symbol bytes, strictly increasing;
//             k >= 32: 32-byte bitmap, symbol s present iff bit s%8 of byte s/8
//   freqs     k frequencies in symbol order, each f-1 as a 1- or 2-byte
//             varint (7 bits per byte, low bits first, top bit = more
//             follows; 2-byte form only for f-1 >= 128). Frequencies are
//             >= 1 and sum to exactly 4096 (kProbBits = 12).
//   states    K x uint32: initial decoder states x[0..K-1], each >= 2^16
//   words     16-bit words, read in order by the decoder
//
// K is 4 (coder 3, kRans) or 32 (coder 5, kRansX32). Symbol i is coded by
// state i%K. Decoding symbol i with state x:
//   slot = x & 4095; s = symbol with cum[s] <= slot < cum[s] + f[s]
//   x = f[s] * (x >> 12) + slot - cum[s]
//   if x < 2^16: x = x << 16 | next word
// where cum[s] is the sum of the frequencies of the symbols below s. After
// the last symbol every state must be 2^16 and every word consumed. With
// k == 1 (f = 4096) the states never change and there are no words.
//
// Why 32 states: each symbol's word position depends on the previous
// symbol's, so a scalar coder runs at about 3 cycles per symbol whatever
// K is; 32 states let 8 symbols at a time go through AVX2 registers, their
// words compressed out of (encoder) or expanded into (decoder) the lanes
// that renormalise, in lane order, which is exactly the scalar order.
#include "rans.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "hd/rans_hd.h"
#include "lmc/bytes.h"

namespace lmc::rans {
namespace {

static_assert(kProbBits == hd::kRansProbBits);
constexpr uint32_t kProbScale = hd::kRansProbScale;
constexpr uint32_t kLow = hd::kRansLow;  // states live in [kLow, 2^32)
constexpr size_t kMaxHeader = 1 + 32 + 2 * 256;

#if defined(__x86_64__)
std::atomic<bool> g_simd{
    (__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0)};
#else
std::atomic<bool> g_simd{false};
#endif

// log2(f) for f in [0, 4096]; entry 0 unused.
struct Log2Values {
  double v[kProbScale + 1];
  Log2Values() {
    v[0] = 0;
    for (uint32_t f = 1; f <= kProbScale; ++f) v[f] = std::log2(static_cast<double>(f));
  }
};
const double* Log2Table() {
  static const Log2Values table;
  return table.v;
}

// Normalises `hist` to frequencies summing to 4096 with every present symbol
// >= 1, minimising sum hist[s] * -log2(f[s]/4096): proportional rounding,
// then greedy unit moves (largest gain / smallest loss first), then unit
// swaps between symbols while one lowers the cost. The cost is separable
// and convex in f, so a state no swap improves is optimal.
// Returns the number of present symbols.
int Normalize(const uint32_t hist[256], uint32_t freq[256]) {
  uint64_t total = 0;
  int k = 0;
  int present[256];
  for (int s = 0; s < 256; ++s) {
    freq[s] = 0;
    if (hist[s]) {
      total += hist[s];
      present[k++] = s;
    }
  }
  if (k == 0) return 0;
  if (k == 1) {
    freq[present[0]] = kProbScale;
    return 1;
  }
  const double* lg = Log2Table();
  int64_t sum = 0;
  for (int i = 0; i < k; ++i) {
    const int s = present[i];
    uint64_t f = (uint64_t{hist[s]} * kProbScale + total / 2) / total;
    f = std::clamp<uint64_t>(f, 1, kProbScale - 1);
    freq[s] = static_cast<uint32_t>(f);
    sum += static_cast<int64_t>(f);
  }
  // Gain of f -> f+1 and loss of f -> f-1, in bits over the whole stream.
  auto gain = [&](int s) { return hist[s] * (lg[freq[s] + 1] - lg[freq[s]]); };
  auto loss = [&](int s) { return freq[s] > 1 ? hist[s] * (lg[freq[s]] - lg[freq[s] - 1]) : 1e300; };
  while (sum < static_cast<int64_t>(kProbScale)) {
    int best = present[0];
    for (int i = 1; i < k; ++i)
      if (gain(present[i]) > gain(best)) best = present[i];
    ++freq[best];
    ++sum;
  }
  while (sum > static_cast<int64_t>(kProbScale)) {
    int best = present[0];
    for (int i = 1; i < k; ++i)
      if (loss(present[i]) < loss(best)) best = present[i];
    --freq[best];
    --sum;
  }
  for (int iter = 0; iter < 4096; ++iter) {
    int up = present[0], down = present[0];
    for (int i = 1; i < k; ++i) {
      const int s = present[i];
      if (gain(s) > gain(up)) up = s;
      if (loss(s) < loss(down)) down = s;
    }
    if (up == down || gain(up) <= loss(down) * (1 + 1e-12)) break;
    ++freq[up];
    --freq[down];
  }
  return k;
}

// Encoder tables, by symbol: for the scalar path, x' = x + bias + q * cmpl
// with q = x / f from a 64-bit reciprocal (below); for the vector path, f
// and cum packed (f | cum << 13, 0 for absent symbols) and 1/f.
struct EncSymbol {
  uint64_t rcp = 0;  // 0: symbol absent from the histogram
  uint64_t bound = 0;
  uint32_t bias = 0;
  uint32_t cmpl = 0;
};
struct EncTables {
  EncSymbol sym[256];
  uint32_t packed[256];
  double inv[256];
  int dom = 0;  // the most frequent symbol (the vector path)
};

// `vector`: also the vector path's packed and inv (the 32-state coder).
void BuildEncTables(const uint32_t freq[256], bool vector, EncTables* t) {
  // Coding x with symbol s is x' = (x / f) * 4096 + x % f + start, computed
  // without a division as x' = x + bias + q * (4096 - f), q = x / f taken as
  // the high half of x * rcp with rcp = floor(2^64 / f) + 1 (exact for
  // x * f < 2^64). f = 1 uses rcp = 2^64 - 1, which gives q = x - 1; bias
  // adds the missing 4095 back. Before coding, a state >= bound = 2^20 f
  // shifts out a word, so that x' < 2^32.
  uint32_t cum = 0;
  for (int s = 0; s < 256; ++s) {
    const uint32_t f = freq[s];
    t->packed[s] = 0;
    t->inv[s] = 0;
    t->sym[s] = EncSymbol{};
    if (!f) continue;
    EncSymbol& e = t->sym[s];
    e.rcp = f == 1 ? UINT64_MAX : UINT64_MAX / f + 1;
    e.bound = (uint64_t{kLow} >> kProbBits << 16) * f;
    e.bias = f == 1 ? cum + kProbScale - 1 : cum;
    e.cmpl = kProbScale - f;
    if (vector) {
      t->packed[s] = f | cum << 13;
      t->inv[s] = 1.0 / f;
      if (f > freq[t->dom]) t->dom = s;
    }
    cum += f;
  }
}

#if defined(__x86_64__)
#define LMC_RANS_AVX2 [[gnu::target("avx2,fma")]]

// For a mask of 8 lanes: the shuffle that gathers the low 16 bits of the
// chosen lanes (as 8 words in a 128-bit register) into the top words, in
// lane order (encoder), and the one that spreads the next words to the
// chosen lanes in order (decoder: word k to the lane of the k-th set bit,
// as 32-bit lanes of a 256-bit register).
struct ShuffleTables {
  alignas(16) uint8_t compress[256][16];
  alignas(32) uint32_t expand[256][8];
  ShuffleTables() {
    for (int m = 0; m < 256; ++m) {
      const int count = __builtin_popcount(static_cast<unsigned>(m));
      std::memset(compress[m], 0x80, 16);
      int k = 8 - count;  // first word slot of the right-aligned result
      for (int lane = 0; lane < 8; ++lane) {
        if (!(m >> lane & 1)) continue;
        compress[m][2 * k] = static_cast<uint8_t>(2 * lane);
        compress[m][2 * k + 1] = static_cast<uint8_t>(2 * lane + 1);
        ++k;
      }
      int next = 0;
      for (int lane = 0; lane < 8; ++lane)
        expand[m][lane] = (m >> lane & 1) ? static_cast<uint32_t>(next++) : 0;
    }
  }
};
const ShuffleTables& Shuffles() {
  static const ShuffleTables t;
  return t;
}

// Gathers (the masked forms, from zeroed registers: GCC 12 warns that the
// plain forms read an uninitialised source).
LMC_RANS_AVX2 inline __m256i Gather32(const uint32_t* base, __m256i idx) {
  return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(base), idx,
                                     _mm256_set1_epi32(-1), 4);
}
LMC_RANS_AVX2 inline __m256d GatherF64(const double* base, __m128i idx) {
  return _mm256_mask_i32gather_pd(_mm256_setzero_pd(), base, idx, _mm256_castsi256_pd(_mm256_set1_epi64x(-1)),
                                  8);
}

// Encodes whole rounds of 32 symbols, from src[i - 32, i) down, while the
// room below p holds a round's words plus the 16-byte stores' slack and
// every symbol is present; returns the i where it stopped. The states and
// p are updated as the scalar coder would.
//
// kDominant: the most frequent symbol (t.dom) has a frequency >= kDominantFreq
// (a plane of XOR deltas or predicted upper halves, nearly all one symbol):
// a group of 8 symbols all equal to it takes its entries from registers
// instead of gathers. (Below that frequency, too few groups are: the
// branch costs more than the gathers it saves.)
inline constexpr uint32_t kDominantFreq = kProbScale - 128;
template <bool kDominant>
LMC_RANS_AVX2 size_t EncodeRoundsAvx2(const uint8_t* src, size_t i, const EncTables& t, uint32_t* x,
                                      uint8_t*& p, const uint8_t* lo) {
  const ShuffleTables& sh = Shuffles();
  __m256i st[4];
  for (int g = 0; g < 4; ++g) st[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * g));
  const __m256i m13 = _mm256_set1_epi32(0x1fff);
  const __m256i scale = _mm256_set1_epi32(static_cast<int>(kProbScale));
  const __m256i sign = _mm256_set1_epi32(INT32_MIN);
  const __m256d two31 = _mm256_set1_pd(2147483648.0);
  const __m256d eps = _mm256_set1_pd(1.0 / (1 << 20));
  // Low 16 bits of each 32-bit lane into the low 8 bytes of each 128-bit half.
  const __m256i pack16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4,
                                          5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i dom_sym = _mm256_set1_epi32(t.dom);
  const __m256i dom_packed = _mm256_set1_epi32(static_cast<int>(t.packed[t.dom]));
  const __m256d dom_inv = _mm256_set1_pd(t.inv[t.dom]);
  while (i >= 32 && p - lo >= 2 * 32 + 16) {
    const uint8_t* s0 = src + i - 32;
    __m256i sym[4], e[4];
    bool absent = false, all_dom[4];
    for (int g = 0; g < 4; ++g) {
      sym[g] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s0 + 8 * g)));
      all_dom[g] =
          kDominant && _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(sym[g], dom_sym))) == 0xff;
      e[g] = all_dom[g] ? dom_packed : Gather32(t.packed, sym[g]);
      absent |=
          _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(e[g], _mm256_setzero_si256()))) != 0;
    }
    if (absent) break;
    // States 31..24 first, as the scalar coder goes down from the end.
    for (int g = 3; g >= 0; --g) {
      const __m256i f = _mm256_and_si256(e[g], m13);
      const __m256i cum = _mm256_srli_epi32(e[g], 13);
      const __m256i bound = _mm256_slli_epi32(f, 20);
      __m256i x8 = st[g];
      const __m256i need = _mm256_cmpeq_epi32(_mm256_max_epu32(x8, bound), x8);  // x >= bound
      const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
      const __m256i w = _mm256_shuffle_epi8(x8, pack16);
      const __m128i words = _mm_unpacklo_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
      const __m128i out =
          _mm_shuffle_epi8(words, _mm_load_si128(reinterpret_cast<const __m128i*>(sh.compress[mask])));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p - 16), out);
      p -= 2 * __builtin_popcount(mask);
      x8 = _mm256_blendv_epi8(x8, _mm256_srli_epi32(x8, 16), need);
      // q = floor(x / f) as floor(x * (1/f) + 2^-20) in doubles: x < 2^32 and
      // q < 2^20, so the product is within 2^-32 of x / f, whose fraction is
      // 0 or at least 1/4096: the bias keeps exact quotients from rounding
      // down and cannot carry a fraction to the next integer.
      const __m256i xs = _mm256_xor_si256(x8, sign);
      const __m256d xl = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(xs)), two31);
      const __m256d xh = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(xs, 1)), two31);
      const __m256d il = all_dom[g] ? dom_inv : GatherF64(t.inv, _mm256_castsi256_si128(sym[g]));
      const __m256d ih = all_dom[g] ? dom_inv : GatherF64(t.inv, _mm256_extracti128_si256(sym[g], 1));
      const __m128i ql = _mm256_cvttpd_epi32(_mm256_fmadd_pd(xl, il, eps));
      const __m128i qh = _mm256_cvttpd_epi32(_mm256_fmadd_pd(xh, ih, eps));
      const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(ql), qh, 1);
      const __m256i cmpl = _mm256_sub_epi32(scale, f);
      x8 = _mm256_add_epi32(_mm256_add_epi32(x8, cum), _mm256_mullo_epi32(q, cmpl));
      st[g] = x8;
    }
    i -= 32;
  }
  for (int g = 0; g < 4; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 8 * g), st[g]);
  return i;
}

// Decodes whole rounds of 32 symbols into dst[i, i + 32) while n allows
// and the words left hold a round's worst case plus the 16-byte loads'
// slack; returns the i where it stopped. States and p are updated as the
// scalar decoder would.
//
// kDominant: the stream has a symbol of frequency >= kDominantFreq (a
// plane of XOR deltas or predicted upper halves, nearly all zeros), whose
// table entries (dom: (f - 1) << 20 | symbol, from slot dom_cum on) are
// computed instead of gathered when the 8 slots of a group all fall in
// its range: the same entries, most groups without a gather.
template <bool kDominant>
LMC_RANS_AVX2 size_t DecodeRoundsAvx2(const uint32_t* table, uint32_t* x, const uint8_t*& p,
                                      const uint8_t* end, uint8_t* dst, size_t i, size_t n, uint32_t dom = 0,
                                      uint32_t dom_cum = 0) {
  const ShuffleTables& sh = Shuffles();
  __m256i st[4];
  for (int g = 0; g < 4; ++g) st[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * g));
  const __m256i m12 = _mm256_set1_epi32(static_cast<int>(kProbScale - 1));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8,
                                         12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i dom_entry = _mm256_set1_epi32(static_cast<int>(dom));
  const __m256i dom_start = _mm256_set1_epi32(static_cast<int>(dom_cum));
  const __m256i dom_last = _mm256_set1_epi32(static_cast<int>(dom >> 20));  // f - 1: the last slot offset
  while (i + 32 <= n && end - p >= 2 * 32 + 16) {
    for (int g = 0; g < 4; ++g) {
      __m256i x8 = st[g];
      // table[slot] = (f - 1) << 20 | (slot - cum) << 8 | symbol
      const __m256i slot = _mm256_and_si256(x8, m12);
      __m256i e;
      if constexpr (kDominant) {
        const __m256i rel = _mm256_sub_epi32(slot, dom_start);  // as unsigned: <= f - 1 inside the range
        const __m256i in = _mm256_cmpeq_epi32(_mm256_min_epu32(rel, dom_last), rel);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(in)) == 0xff) {
          e = _mm256_add_epi32(dom_entry, _mm256_slli_epi32(rel, 8));
        } else {
          e = Gather32(table, slot);
        }
      } else {
        e = Gather32(table, slot);
      }
      const __m256i f = _mm256_add_epi32(_mm256_srli_epi32(e, 20), one);
      const __m256i r = _mm256_and_si256(_mm256_srli_epi32(e, 8), m12);
      x8 = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x8, kProbBits)), r);
      const __m256i sy = _mm256_shuffle_epi8(e, bytes);
      const uint32_t lo4 = static_cast<uint32_t>(_mm256_extract_epi32(sy, 0));
      const uint32_t hi4 = static_cast<uint32_t>(_mm256_extract_epi32(sy, 4));
      std::memcpy(dst + i + 8 * g, &lo4, 4);
      std::memcpy(dst + i + 8 * g + 4, &hi4, 4);
      const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(x8, 16), zero);  // x < 2^16
      const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m256i spread = _mm256_permutevar8x32_epi32(
          w, _mm256_load_si256(reinterpret_cast<const __m256i*>(sh.expand[mask])));
      x8 = _mm256_blendv_epi8(x8, _mm256_or_si256(_mm256_slli_epi32(x8, 16), spread), need);
      p += 2 * __builtin_popcount(mask);
      st[g] = x8;
    }
    i += 32;
  }
  for (int g = 0; g < 4; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 8 * g), st[g]);
  return i;
}
#endif  // __x86_64__

// Encodes with the normalised frequencies freq (k present symbols, k >= 2:
// one symbol is the const coder's).
template <int K>
Result<size_t> EncodeK(const uint8_t* src, size_t n, const uint32_t freq[256], int k, uint8_t* dst,
                       size_t cap) {
  constexpr size_t kStatesBytes = 4 * K;
  if (n == 0) return Status::InvalidArgument("rans: no symbols");
  const size_t header = hd::RansHeaderSize(freq, k);
  if (cap < header + kStatesBytes) return Status::InvalidArgument("rans: output buffer too small");
  hd::RansWriteHeader(freq, k, dst);
  EncTables tables;
  BuildEncTables(freq, K == 32, &tables);
  const EncSymbol* sym = tables.sym;

  // Words are written backwards from the end of dst, then moved down.
  uint8_t* const lo = dst + header + kStatesBytes;
  uint8_t* p = dst + cap;
  auto code = [](uint32_t& x, const EncSymbol& e) {
    const auto q = static_cast<uint32_t>(static_cast<unsigned __int128>(x) * e.rcp >> 64);
    x = x + e.bias + q * e.cmpl;
  };
  // Branch-free renormalise and code; needs 2 bytes of room below p.
  auto put = [&p, &code](uint32_t& x, const EncSymbol& e) {
    const uint32_t r = x >= e.bound;
    StoreLE16(p - 2, static_cast<uint16_t>(x));
    p -= 2 * r;
    x >>= 16 * r;
    code(x, e);
  };
  uint32_t x[K];
  for (int j = 0; j < K; ++j) x[j] = kLow;
  size_t i = n;
#if defined(__x86_64__)
  const bool simd = K == 32 && g_simd.load(std::memory_order_relaxed);
#endif
  while (i > 0) {
#if defined(__x86_64__)
    // (k >= 2: with one symbol, f = 4096 and its bound 2^32 does not fit
    // the vector path's 32-bit lanes.)
    if (simd && k >= 2 && i % K == 0 && i >= 32 && p - lo >= 2 * 32 + 16) {
      const size_t before = i;
      i = freq[tables.dom] >= kDominantFreq ? EncodeRoundsAvx2<true>(src, i, tables, x, p, lo)
                                            : EncodeRoundsAvx2<false>(src, i, tables, x, p, lo);
      if (i != before) continue;  // else: an absent symbol or no room: the checked path below
    }
#endif
    if (i % K == 0 && p - lo >= 2 * K) {
      // Fast path: a whole round, states K-1..0, room checked once.
      if constexpr (K == 4) {
        const EncSymbol& e3 = sym[src[i - 1]];
        const EncSymbol& e2 = sym[src[i - 2]];
        const EncSymbol& e1 = sym[src[i - 3]];
        const EncSymbol& e0 = sym[src[i - 4]];
        if (!(e0.rcp && e1.rcp && e2.rcp && e3.rcp)) break;
        put(x[3], e3);
        put(x[2], e2);
        put(x[1], e1);
        put(x[0], e0);
      } else {
        const EncSymbol* e[K];
        bool present = true;
        for (int j = 0; j < K; ++j) {
          e[j] = &sym[src[i - K + j]];
          present &= e[j]->rcp != 0;
        }
        if (!present) break;
        for (int j = K - 1; j >= 0; --j) put(x[j], *e[j]);
      }
      i -= K;
      continue;
    }
    --i;
    const EncSymbol& e = sym[src[i]];
    if (!e.rcp) break;
    uint32_t& st = x[i % K];
    if (st >= e.bound) {
      if (p - lo < 2) return Status::InvalidArgument("rans: output buffer too small");
      p -= 2;
      StoreLE16(p, static_cast<uint16_t>(st));
      st >>= 16;
    }
    code(st, e);
  }
  if (i > 0) return Status::InvalidArgument("rans: a symbol of the data is absent from the table");
  for (int j = 0; j < K; ++j) StoreLE32(dst + header + 4 * j, x[j]);
  const size_t words = static_cast<size_t>(dst + cap - p);
  std::memmove(lo, p, words);
  return header + kStatesBytes + words;
}

template <int K>
Status DecodeK(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  uint32_t freq[256];
  int k = 0;
  const uint32_t header = hd::RansParseHeader(src, len, freq, &k);
  // The same checks as the GPU decoder's (hd/rans_hd.h).
  hd::RansStart start;
  if (const char* bad = hd::RansReadStart(src, len, header, k, K, &start)) return Status::Corruption(bad);
  uint32_t x[K];
  for (int j = 0; j < K; ++j) x[j] = start.x[j];
  const uint8_t* p = src + start.words;
  const uint8_t* end = src + len;

  if (k == 1) {
    // f = 4096: coding is the identity (no words, unchanged states).
    int s = 0;
    while (!freq[s]) ++s;
    std::memset(dst, s, n);
    return Status::Ok();
  }

  // slot -> symbol, and slot -> f << 16 | (slot - cum).
  uint8_t slot_symbol[kProbScale];
  uint32_t slot_step[kProbScale];
  {
    uint32_t slot = 0;
    for (int s = 0; s < 256; ++s) {
      for (uint32_t r = 0; r < freq[s]; ++r, ++slot) {
        slot_symbol[slot] = static_cast<uint8_t>(s);
        slot_step[slot] = freq[s] << 16 | r;
      }
    }
  }
  auto step = [&slot_symbol, &slot_step](uint32_t& st, uint8_t* out) {
    const uint32_t slot = st & (kProbScale - 1);
    const uint32_t e = slot_step[slot];
    *out = slot_symbol[slot];
    st = (e >> 16) * (st >> kProbBits) + (e & 0xffff);
  };

  size_t i = 0;
#if defined(__x86_64__)
  const bool simd = K == 32 && g_simd.load(std::memory_order_relaxed) && n >= 32;
  uint32_t dom = 0, dom_cum = 0;  // the most frequent symbol, and its first slot
  for (uint32_t s = 1, cum = freq[0]; s < 256; cum += freq[s++])
    if (freq[s] > freq[dom]) dom = s, dom_cum = cum;
  // slot -> (f - 1) << 20 | (slot - cum) << 8 | symbol: one gather a lane.
  uint32_t packed[kProbScale];
  if (simd)
    for (uint32_t slot = 0; slot < kProbScale; ++slot)
      packed[slot] =
          ((slot_step[slot] >> 16) - 1) << 20 | (slot_step[slot] & 0xffff) << 8 | slot_symbol[slot];
#endif
  // Whole rounds while the words from q on hold a round's worst case (and
  // the vector loads' slack) before qend: the vector rounds, then the
  // scalar fast loop, branch-free (renormalisation is data-dependent: a
  // state below 2^16 takes the next word, others take nothing).
  auto rounds = [&](const uint8_t*& q, const uint8_t* qend) {
#if defined(__x86_64__)
    if (simd && freq[dom] >= kDominantFreq) {
      i = DecodeRoundsAvx2<true>(packed, x, q, qend, dst, i, n, (freq[dom] - 1) << 20 | dom, dom_cum);
    } else if (simd) {
      i = DecodeRoundsAvx2<false>(packed, x, q, qend, dst, i, n);
    }
#endif
    while (i + K <= n && qend - q >= 2 * K) {
      for (int j = 0; j < K; ++j) {
        uint32_t& st = x[j];
        step(st, dst + i + j);
        const uint32_t r = st < kLow;
        st = st << (16 * r) | (LoadLE16(q) & (0u - r));
        q += 2 * r;
      }
      i += K;
    }
  };
  rounds(p, end);
  // A skewed stream (XOR deltas, zero planes) may have fewer words left
  // than a round's worst case long before its last round: the rounds go on
  // over a copy of those words padded with zeros, which a valid stream
  // never takes (a stream that does is truncated, caught below), instead
  // of symbol by symbol. (With the dominant symbol's rounds this makes
  // such streams decode about 2x as fast; either alone, not at all:
  // docs/BENCHMARKS.md, "rANS decoding of nearly constant streams".)
  alignas(16) uint8_t pad[4 * K + 16];
  if (i + K <= n) {
    const size_t left = static_cast<size_t>(end - p);  // under 2 K: the scalar loop stopped
    std::memcpy(pad, p, left);
    std::memset(pad + left, 0, sizeof(pad) - left);
    const uint8_t* q = pad;
    rounds(q, pad + left + 2 * K + 16);
    if (q > pad + left) return Status::Corruption("rans: truncated word stream");
    p = q;
    end = pad + left;
  }
  // Checked tail, one symbol at a time.
  for (; i < n; ++i) {
    uint32_t& st = x[i % K];
    step(st, dst + i);
    if (st < kLow) {
      if (end - p < 2) return Status::Corruption("rans: truncated word stream");
      st = st << 16 | LoadLE16(p);
      p += 2;
    }
  }
  if (p != end) return Status::Corruption("rans: final state mismatch");
  for (int j = 0; j < K; ++j)
    if (x[j] != kLow) return Status::Corruption("rans: final state mismatch");
  return Status::Ok();
}

}  // namespace

size_t MaxEncodedSize(size_t n) {
  // A symbol costs at most 12 + log2(17/16) bits (states stay >= 16 f), so
  // the words take at most 1.52 n bytes; the states 4 bytes each, at most 32.
  return kMaxHeader + 4 * 32 + n / 16 * 25 + 32;
}

size_t EstimatedSize(const uint32_t hist[256], size_t /*n*/, int states) {
  uint32_t freq[256];
  const int k = Normalize(hist, freq);
  const size_t states_bytes = 4 * static_cast<size_t>(states);
  if (k == 0) return 1 + states_bytes;
  const double* lg = Log2Table();
  double bits = 0;
  for (int s = 0; s < 256; ++s)
    if (hist[s]) bits += hist[s] * (kProbBits - lg[freq[s]]);
  // The final states hold about 8 bits each beyond their 16-bit floor
  // (they range over [2^16, 2^32)), which no word carries.
  const double words_bits = std::max(0.0, bits - 8.0 * states);
  return hd::RansHeaderSize(freq, k) + states_bytes + 2 * static_cast<size_t>(std::ceil(words_bits / 16));
}

namespace {
template <int K>
Result<size_t> EncodeHist(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  uint64_t total = 0;
  for (int s = 0; s < 256; ++s) total += hist[s];
  if (total != n) return Status::InvalidArgument("rans: histogram does not sum to n");
  uint32_t freq[256];
  const int k = Normalize(hist, freq);
  return EncodeK<K>(src, n, freq, k, dst, cap);
}
}  // namespace

Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  return EncodeHist<4>(src, n, hist, dst, cap);
}
Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n) { return DecodeK<4>(src, len, dst, n); }
Result<size_t> EncodeX32(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  return EncodeHist<32>(src, n, hist, dst, cap);
}
Status DecodeX32(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  return DecodeK<32>(src, len, dst, n);
}

Result<size_t> EncodeWithFrequencies(const uint8_t* src, size_t n, const uint32_t freq[256], int states,
                                     uint8_t* dst, size_t cap) {
  int k = 0;
  uint32_t sum = 0;
  for (int s = 0; s < 256; ++s) {
    k += freq[s] != 0;
    sum += freq[s];
  }
  if (k < 2 || sum != kProbScale)
    return Status::InvalidArgument("rans: frequencies are not a table of 2+ symbols");
  if (states == 32) return EncodeK<32>(src, n, freq, k, dst, cap);
  if (states == 4) return EncodeK<4>(src, n, freq, k, dst, cap);
  return Status::InvalidArgument("rans: states must be 4 or 32");
}

bool SetSimd(bool on) {
#if defined(__x86_64__)
  const bool can = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool can = false;
#endif
  return g_simd.exchange(on && can);
}

}  // namespace lmc::rans
