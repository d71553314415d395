// rANS streams (coders 3 and 5): the pieces shared by the CPU coder
// (rans.cc) and the GPU decoder (gpu_pipeline.h, codec/cuda/gpu_codec.cu),
// host-device (hd.h). docs/FORMAT.md, "rANS stream".
#pragma once

#include "hd/hd.h"

namespace lmc::hd {

inline constexpr int kRansProbBits = 12;
inline constexpr uint32_t kRansProbScale = 1u << kRansProbBits;
inline constexpr uint32_t kRansLow = 1u << 16;  // states live in [kRansLow, 2^32)
inline constexpr int kRansMaxStates = 32;
// Streams of at least this many symbols take 32 states (coder 5), shorter
// ones 4 (coder 3): about 1.5x the speed for 112 bytes more.
inline constexpr uint64_t kRansX32MinSymbols = 64 << 10;

// Parses the symbol set and frequencies at src[0, len): freq[s] for every
// byte s (0 where absent), *k_out the number of symbols. Returns the header
// size, or 0 when malformed (symbols not increasing, a bitmap whose
// popcount is not k, a varint out of range, a sum other than 4096).
template <typename Freq>  // uint32_t, or uint16_t (a frequency is at most kRansProbScale)
LMC_HD uint32_t RansParseHeader(const uint8_t* src, uint64_t len, Freq freq[256], int* k_out) {
  static_assert(sizeof(Freq) >= 2, "frequencies up to 4096");
  if (len < 1) return 0;
  const int k = src[0] + 1;
  uint64_t p = 1;
  for (int s = 0; s < 256; ++s) freq[s] = 0;
  // Frequencies follow the symbols in increasing symbol order; the symbol
  // set is read twice (once to check it, once with the frequencies) so
  // that no array of symbols is needed.
  if (k < 32) {
    if (len < p + static_cast<uint64_t>(k)) return 0;
    for (int i = 1; i < k; ++i)
      if (src[p + i] <= src[p + i - 1]) return 0;
  } else {
    if (len < p + 32) return 0;
    int count = 0;
    for (int b = 0; b < 32; ++b) {
      uint32_t v = src[p + b];
      while (v) {
        count += static_cast<int>(v & 1);
        v >>= 1;
      }
    }
    if (count != k) return 0;
  }
  const uint64_t set = p;
  p += k < 32 ? static_cast<uint64_t>(k) : 32;
  uint32_t sum = 0;
  int s = -1;
  for (int i = 0; i < k; ++i) {
    if (k < 32) {
      s = src[set + i];
    } else {
      do ++s;
      while (!(src[set + (s >> 3)] >> (s & 7) & 1));
    }
    if (p >= len) return 0;
    uint32_t v = src[p++];
    if (v & 0x80) {
      if (p >= len) return 0;
      const uint32_t hi = src[p++];
      v = (v & 0x7f) | hi << 7;
      if (hi == 0 || v >= kRansProbScale) return 0;
    }
    freq[s] = static_cast<Freq>(v + 1);
    sum += v + 1;
  }
  if (sum != kRansProbScale) return 0;
  *k_out = k;
  return static_cast<uint32_t>(p);
}

// What a decoder of a stream needs after its header: the states, where the
// words start, how many there are.
struct RansStart {
  uint32_t x[kRansMaxStates];
  uint64_t words;   // offset of the first word in the stream
  uint64_t nwords;  // 16-bit words
};
// Reads it for a stream of `states` states whose header (RansParseHeader:
// its size, 0 when malformed, and k symbols) ends at `header`, with the
// checks of the decoding rule: a header, the states and an even number of
// word bytes; with one symbol no word and every state 2^16, with more
// every state at least 2^16. Returns null when they hold, else what is
// wrong (the CPU decoder's Corruption message; the GPU marks the frame bad).
LMC_HD const char* RansReadStart(const uint8_t* src, uint64_t len, uint32_t header, int k, int states,
                                 RansStart* st) {
  const uint64_t sb = 4 * static_cast<uint64_t>(states);
  if (!header || len - header < sb) return "rans: bad header";
  for (int j = 0; j < states; ++j) {
    const uint8_t* q = src + header + 4 * j;
    st->x[j] = uint32_t{q[0]} | uint32_t{q[1]} << 8 | uint32_t{q[2]} << 16 | uint32_t{q[3]} << 24;
  }
  st->words = header + sb;
  const uint64_t bytes = len - st->words;
  if (bytes & 1) return "rans: odd word stream";
  st->nwords = bytes / 2;
  for (int j = 0; j < states; ++j) {
    if (k == 1 && (st->x[j] != kRansLow || bytes != 0)) return "rans: bad single-symbol stream";
    if (st->x[j] < kRansLow) return "rans: bad initial state";
  }
  return nullptr;
}

// The symbol whose slot range holds `slot`, from the cumulative
// frequencies cum[s] (sum of freq below s; absent symbols have freq 0): the
// largest s with cum[s] <= slot.
LMC_HD uint8_t RansSymbolAt(const uint16_t cum[256], uint32_t slot) {
  int lo = 0, hi = 255;  // the answer is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cum[mid] <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // An absent symbol's cum is that of the next present one (4096 after the
  // last), which is above any slot the present one before it holds.
  return static_cast<uint8_t>(lo);
}

// One decoding step of a state (docs/FORMAT.md 5.2): the symbol of its
// slot, and the state after it. True when the state needs the next word.
LMC_HD bool RansStep(uint32_t& x, const uint8_t* slot_symbol, const uint16_t freq[256],
                     const uint16_t cum[256], uint8_t* out) {
  const uint32_t slot = x & (kRansProbScale - 1);
  const uint8_t s = slot_symbol[slot];
  *out = s;
  x = uint32_t{freq[s]} * (x >> kRansProbBits) + slot - cum[s];
  return x < kRansLow;
}

// Word `i` of a stream whose words start at p (any alignment).
LMC_HD uint32_t RansWord(const uint8_t* p, uint64_t i) {
  return uint32_t{p[2 * i]} | uint32_t{p[2 * i + 1]} << 8;
}

// ---------------------------------------------------------------- encoding

// Bytes of the header (symbol set and frequencies) of a table of k symbols,
// and its writer: the one implementation, for the CPU coder (rans.cc) and
// the GPU encoder (gpu_pipeline.h).
LMC_HD uint32_t RansHeaderSize(const uint32_t freq[256], int k) {
  uint32_t size = 1 + (k < 32 ? static_cast<uint32_t>(k) : 32);
  for (int s = 0; s < 256; ++s)
    if (freq[s]) size += freq[s] - 1 < 128 ? 1 : 2;
  return size;
}
LMC_HD uint32_t RansWriteHeader(const uint32_t freq[256], int k, uint8_t* dst) {
  uint8_t* p = dst;
  *p++ = static_cast<uint8_t>(k - 1);
  if (k < 32) {
    for (int s = 0; s < 256; ++s)
      if (freq[s]) *p++ = static_cast<uint8_t>(s);
  } else {
    for (int b = 0; b < 32; ++b) p[b] = 0;
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
  return static_cast<uint32_t>(p - dst);
}

// One encoding step of a state with a symbol of frequency f (2 <= k, so
// f < 4096) starting at cum: whether the state first shifts out its low 16
// bits as a word (RansEncodeNeedsWord), and the coding itself, the inverse
// of RansStep: x' = (x / f) * 4096 + x % f + cum.
LMC_HD bool RansEncodeNeedsWord(uint32_t x, uint32_t f) {
  return x >= (uint64_t{kRansLow} >> kRansProbBits << 16) * f;
}
LMC_HD uint32_t RansEncodeCode(uint32_t x, uint32_t f, uint32_t cum) {
  return (x / f << kRansProbBits) + x % f + cum;
}

// log2(f) in fixed point with 24 fraction bits, truncated, f in [1, 2^13]:
// the integer part from the bit length, the fraction bits by repeated
// squaring of the mantissa. Integer arithmetic only, so that every
// processor gets the same value.
LMC_HD uint32_t RansLog2Q24(uint32_t f) {
  int e = 0;
  while (f >> (e + 1)) ++e;
  uint64_t m = uint64_t{f} << (31 - e);  // the mantissa in [1, 2), 31 fraction bits
  uint32_t r = static_cast<uint32_t>(e) << 24;
  for (int b = 23; b >= 0; --b) {
    m = m * m >> 31;
    if (m >> 32) {
      m >>= 1;
      r |= 1u << b;
    }
  }
  return r;
}

// The GPU profile's frequencies (docs/FORMAT.md 5.4): hist (summing to n)
// normalised to sum to 4096 with every present symbol at least 1, by
// rounding n-proportional values and then moving single units where they
// cost least, gains and losses compared exactly in integers
// (RansLog2Q24), so that the CPU and a GPU build the same table. The CPU
// profile's normaliser (rans.cc) also searches unit swaps afterwards; this
// one stops once the sum holds. Returns the number of present symbols.
// `v`: 256 values of working space, v[s] (uint64_t*, or a kernel's
// Strided<uint64_t> in device memory: HuffBuildScratch says why).
template <typename V>
LMC_HD int RansNormalizeGpu(const uint32_t hist[256], uint64_t n, uint32_t freq[256], V v) {
  int k = 0;
  int64_t sum = 0;
  for (int s = 0; s < 256; ++s) {
    freq[s] = 0;
    if (!hist[s]) continue;
    ++k;
    uint64_t f = (uint64_t{hist[s]} * kRansProbScale + n / 2) / n;
    f = f < 1 ? 1 : f > kRansProbScale - 1 ? kRansProbScale - 1 : f;
    freq[s] = static_cast<uint32_t>(f);
    sum += static_cast<int64_t>(f);
  }
  if (k == 1) {
    for (int s = 0; s < 256; ++s)
      if (hist[s]) freq[s] = kRansProbScale;
    return 1;
  }
  // The bits over the whole stream (times 2^24) that one unit more of s
  // saves (while the sum is short) or one unit less costs (while it is
  // over), kept for every symbol and updated for the one that moves; ties
  // go to the lowest symbol. The direction never changes on the way.
  const bool up = sum < static_cast<int64_t>(kRansProbScale);
  auto value = [&](int s) -> uint64_t {
    const uint32_t f = freq[s];
    if (!up && f == 1) return ~uint64_t{0};  // cannot go lower
    return uint64_t{hist[s]} *
           (up ? RansLog2Q24(f + 1) - RansLog2Q24(f) : RansLog2Q24(f) - RansLog2Q24(f - 1));
  };
  for (int s = 0; s < 256; ++s) v[s] = freq[s] ? value(s) : 0;
  while (sum != static_cast<int64_t>(kRansProbScale)) {
    int best = -1;
    for (int s = 0; s < 256; ++s) {
      if (!freq[s]) continue;
      if (best < 0 || (up ? v[s] > v[best] : v[s] < v[best])) best = s;
    }
    freq[best] += up ? 1 : static_cast<uint32_t>(-1);
    sum += up ? 1 : -1;
    v[best] = value(best);
  }
  return k;
}

// The same on the CPU, with the working space on the stack.
inline int RansNormalizeGpu(const uint32_t hist[256], uint64_t n, uint32_t freq[256]) {
  uint64_t v[256];
  return RansNormalizeGpu(hist, n, freq, static_cast<uint64_t*>(v));
}

// The encoded size of a stream of `states` states with the frequencies of
// RansNormalizeGpu, estimated as the CPU's rans::EstimatedSize does (the
// header, the states, and words for the code lengths less the 8 bits a
// final state holds beyond its floor), in integers.
LMC_HD uint64_t RansEstimateGpu(const uint32_t hist[256], const uint32_t freq[256], int k, int states) {
  uint64_t q24 = 0;  // bits times 2^24
  for (int s = 0; s < 256; ++s)
    if (hist[s]) q24 += uint64_t{hist[s]} * ((uint64_t{kRansProbBits} << 24) - RansLog2Q24(freq[s]));
  const uint64_t bits = (q24 + (uint64_t{1} << 24) - 1) >> 24;
  const uint64_t floor_bits = 8 * static_cast<uint64_t>(states);
  const uint64_t word_bits = bits > floor_bits ? bits - floor_bits : 0;
  return RansHeaderSize(freq, k) + 4 * static_cast<uint64_t>(states) + 2 * ((word_bits + 15) / 16);
}

}  // namespace lmc::hd
