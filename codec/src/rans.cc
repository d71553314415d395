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
//   states    4 x uint32: initial decoder states x[0..3], each >= 2^16
//   words     16-bit words, read in order by the decoder
//
// Symbol i is coded by state i%4. Decoding symbol i with state x:
//   slot = x & 4095; s = symbol with cum[s] <= slot < cum[s] + f[s]
//   x = f[s] * (x >> 12) + slot - cum[s]
//   if x < 2^16: x = x << 16 | next word
// where cum[s] is the sum of the frequencies of the symbols below s. After
// the last symbol every state must be 2^16 and every word consumed. With
// k == 1 (f = 4096) the states never change and there are no words.
#include "rans.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "lmc/bytes.h"

namespace lmc::rans {
namespace {

constexpr uint32_t kProbScale = 1u << kProbBits;
constexpr uint32_t kLow = 1u << 16;  // states live in [kLow, 2^32)
constexpr int kStates = 4;
constexpr size_t kStatesBytes = 4 * kStates;
constexpr size_t kMaxHeader = 1 + 32 + 2 * 256;

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

size_t HeaderSize(const uint32_t freq[256], int k) {
  size_t size = 1 + (k < 32 ? static_cast<size_t>(k) : 32);
  for (int s = 0; s < 256; ++s)
    if (freq[s]) size += freq[s] - 1 < 128 ? 1 : 2;
  return size;
}

size_t WriteHeader(const uint32_t freq[256], int k, uint8_t* dst) {
  uint8_t* p = dst;
  *p++ = static_cast<uint8_t>(k - 1);
  if (k < 32) {
    for (int s = 0; s < 256; ++s)
      if (freq[s]) *p++ = static_cast<uint8_t>(s);
  } else {
    std::memset(p, 0, 32);
    for (int s = 0; s < 256; ++s)
      if (freq[s]) p[s >> 3] |= static_cast<uint8_t>(1u << (s & 7));
    p += 32;
  }
  for (int s = 0; s < 256; ++s) {
    if (!freq[s]) continue;
    const uint32_t v = freq[s] - 1;
    if (v < 128) {
      *p++ = static_cast<uint8_t>(v);
    } else {
      *p++ = static_cast<uint8_t>(0x80 | (v & 0x7f));
      *p++ = static_cast<uint8_t>(v >> 7);
    }
  }
  return static_cast<size_t>(p - dst);
}

// Parses the header; returns its size or 0 when malformed.
size_t ParseHeader(const uint8_t* src, size_t len, uint32_t freq[256], int* k_out) {
  if (len < 1) return 0;
  const int k = src[0] + 1;
  size_t p = 1;
  int symbols[256];
  if (k < 32) {
    if (len < p + static_cast<size_t>(k)) return 0;
    for (int i = 0; i < k; ++i) {
      symbols[i] = src[p + i];
      if (i > 0 && symbols[i] <= symbols[i - 1]) return 0;
    }
    p += static_cast<size_t>(k);
  } else {
    if (len < p + 32) return 0;
    int count = 0;
    for (int s = 0; s < 256; ++s)
      if (src[p + (s >> 3)] >> (s & 7) & 1) symbols[count++] = s;
    if (count != k) return 0;
    p += 32;
  }
  std::memset(freq, 0, 256 * sizeof(uint32_t));
  uint32_t sum = 0;
  for (int i = 0; i < k; ++i) {
    if (p >= len) return 0;
    uint32_t v = src[p++];
    if (v & 0x80) {
      if (p >= len) return 0;
      const uint32_t hi = src[p++];
      v = (v & 0x7f) | hi << 7;
      if (hi == 0 || v >= kProbScale) return 0;
    }
    freq[symbols[i]] = v + 1;
    sum += v + 1;
  }
  if (sum != kProbScale) return 0;
  *k_out = k;
  return p;
}

}  // namespace

size_t MaxEncodedSize(size_t n) {
  // A symbol costs at most 12 + log2(17/16) bits (states stay >= 16 f), so
  // the words take at most 1.52 n bytes.
  return kMaxHeader + kStatesBytes + n / 16 * 25 + 32;
}

size_t EstimatedSize(const uint32_t hist[256], size_t /*n*/) {
  uint32_t freq[256];
  const int k = Normalize(hist, freq);
  if (k == 0) return 1 + kStatesBytes;
  const double* lg = Log2Table();
  double bits = 0;
  for (int s = 0; s < 256; ++s)
    if (hist[s]) bits += hist[s] * (kProbBits - lg[freq[s]]);
  return HeaderSize(freq, k) + kStatesBytes + 2 * static_cast<size_t>(std::ceil(bits / 16));
}

Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  if (n == 0) return Status::InvalidArgument("rans: no symbols");
  uint64_t total = 0;
  for (int s = 0; s < 256; ++s) total += hist[s];
  if (total != n) return Status::InvalidArgument("rans: histogram does not sum to n");
  uint32_t freq[256];
  const int k = Normalize(hist, freq);
  const size_t header = HeaderSize(freq, k);
  if (cap < header + kStatesBytes) return Status::InvalidArgument("rans: output buffer too small");
  WriteHeader(freq, k, dst);

  // Coding x with symbol s is x' = (x / f) * 4096 + x % f + start, computed
  // without a division as x' = x + bias + q * (4096 - f), q = x / f taken as
  // the high half of x * rcp with rcp = floor(2^64 / f) + 1 (exact for
  // x * f < 2^64). f = 1 uses rcp = 2^64 - 1, which gives q = x - 1; bias
  // adds the missing 4095 back. Before coding, a state >= bound = 2^20 f
  // shifts out a word, so that x' < 2^32.
  struct EncSymbol {
    uint64_t rcp = 0;  // 0: symbol absent from the histogram
    uint64_t bound = 0;
    uint32_t bias = 0;
    uint32_t cmpl = 0;
  };
  EncSymbol sym[256];
  uint32_t cum = 0;
  for (int s = 0; s < 256; ++s) {
    const uint32_t f = freq[s];
    if (!f) continue;
    EncSymbol& e = sym[s];
    e.rcp = f == 1 ? UINT64_MAX : UINT64_MAX / f + 1;
    e.bound = (uint64_t{kLow} >> kProbBits << 16) * f;
    e.bias = f == 1 ? cum + kProbScale - 1 : cum;
    e.cmpl = kProbScale - f;
    cum += f;
  }
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
  uint32_t x[kStates] = {kLow, kLow, kLow, kLow};
  size_t i = n;
  while (i > 0) {
    if (i % kStates == 0 && p - lo >= 2 * kStates) {
      // Fast path: a whole round, states 3..0, room checked once.
      const EncSymbol& e3 = sym[src[i - 1]];
      const EncSymbol& e2 = sym[src[i - 2]];
      const EncSymbol& e1 = sym[src[i - 3]];
      const EncSymbol& e0 = sym[src[i - 4]];
      if (!(e0.rcp && e1.rcp && e2.rcp && e3.rcp)) break;
      put(x[3], e3);
      put(x[2], e2);
      put(x[1], e1);
      put(x[0], e0);
      i -= kStates;
      continue;
    }
    --i;
    const EncSymbol& e = sym[src[i]];
    if (!e.rcp) break;
    uint32_t& st = x[i % kStates];
    if (st >= e.bound) {
      if (p - lo < 2) return Status::InvalidArgument("rans: output buffer too small");
      p -= 2;
      StoreLE16(p, static_cast<uint16_t>(st));
      st >>= 16;
    }
    code(st, e);
  }
  if (i > 0) return Status::InvalidArgument("rans: histogram does not match the data");
  for (int j = 0; j < kStates; ++j) StoreLE32(dst + header + 4 * j, x[j]);
  const size_t words = static_cast<size_t>(dst + cap - p);
  std::memmove(lo, p, words);
  return header + kStatesBytes + words;
}

Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  uint32_t freq[256];
  int k = 0;
  const size_t header = ParseHeader(src, len, freq, &k);
  if (!header || len - header < kStatesBytes) return Status::Corruption("rans: bad header");
  uint32_t x0 = LoadLE32(src + header), x1 = LoadLE32(src + header + 4), x2 = LoadLE32(src + header + 8),
           x3 = LoadLE32(src + header + 12);
  const uint8_t* p = src + header + kStatesBytes;
  const uint8_t* const end = src + len;
  if (((end - p) & 1) != 0) return Status::Corruption("rans: odd word stream");

  if (k == 1) {
    // f = 4096: coding is the identity, so no words and unchanged states.
    if (p != end || x0 != kLow || x1 != kLow || x2 != kLow || x3 != kLow)
      return Status::Corruption("rans: bad single-symbol stream");
    int s = 0;
    while (!freq[s]) ++s;
    std::memset(dst, s, n);
    return Status::Ok();
  }
  if (x0 < kLow || x1 < kLow || x2 < kLow || x3 < kLow) return Status::Corruption("rans: bad initial state");

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

  size_t i = 0;
  // Fast loop, branch-free (renormalisation is data-dependent): a state
  // below 2^16 takes the next word, others take nothing.
  while (i + kStates <= n && end - p >= 8) {
#define LMC_RANS_STEP(J)                                   \
  {                                                        \
    const uint32_t slot = x##J & (kProbScale - 1);         \
    const uint32_t e = slot_step[slot];                    \
    dst[i + J] = slot_symbol[slot];                        \
    x##J = (e >> 16) * (x##J >> kProbBits) + (e & 0xffff); \
    const uint32_t r = x##J < kLow;                        \
    x##J = x##J << (16 * r) | (LoadLE16(p) & (0u - r));    \
    p += 2 * r;                                            \
  }
    LMC_RANS_STEP(0)
    LMC_RANS_STEP(1)
    LMC_RANS_STEP(2)
    LMC_RANS_STEP(3)
#undef LMC_RANS_STEP
    i += kStates;
  }
  // Checked tail, one symbol at a time.
  uint32_t x[kStates] = {x0, x1, x2, x3};
  for (; i < n; ++i) {
    uint32_t& st = x[i & (kStates - 1)];
    const uint32_t slot = st & (kProbScale - 1);
    const uint32_t e = slot_step[slot];
    dst[i] = slot_symbol[slot];
    st = (e >> 16) * (st >> kProbBits) + (e & 0xffff);
    if (st < kLow) {
      if (end - p < 2) return Status::Corruption("rans: truncated word stream");
      st = st << 16 | LoadLE16(p);
      p += 2;
    }
  }
  if (p != end || x[0] != kLow || x[1] != kLow || x[2] != kLow || x[3] != kLow)
    return Status::Corruption("rans: final state mismatch");
  return Status::Ok();
}

}  // namespace lmc::rans
