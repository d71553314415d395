// Canonical, length-limited Huffman coder (docs/FORMAT.md, "Huffman stream").
//
// Stream layout (all integers little-endian):
//   [0]      lo: smallest symbol with a code
//   [1]      hi: largest symbol with a code (lo <= hi)
//   [2, 2+m) code lengths of symbols lo..hi, 4 bits each, m = ceil((hi-lo+1)/2):
//            symbol lo+2i in the low nibble of byte i, lo+2i+1 in the high
//            nibble; 0 = no code, 1..11 = code length; an unused last high
//            nibble is 0
//   [+0,+16) end[0..3]: uint32, bit offset in the payload where sub-stream j
//            ends (sub-stream j starts at end[j-1], sub-stream 0 at 0)
//   [+16,..) payload: ceil(end[3]/8) bytes, nothing after it
//
// The n symbols are split into four quarters: quarter j (j < 3) holds symbols
// [j*q, (j+1)*q) with q = n/4, quarter 3 the rest. They are coded one after
// the other into a single LSB-first bit string (bit b of the payload is bit
// b%8 of byte b/8), each code written with its first (most significant)
// canonical bit first; the unused top bits of the last byte are 0. The four
// end offsets let the decoder run four independent bit readers.
//
// Codes are canonical: sorted by (length, symbol), consecutive values.
// Lengths are optimal under the 11-bit limit (package-merge). A code with a
// single symbol has length 1 (Kraft sum 1/2); with two or more symbols the
// Kraft sum must be exactly 1.
#include "huffman.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "hd/huffman_hd.h"
#include "lmc/bytes.h"
#include "lmc/transform.h"

namespace lmc::huff {
namespace {

constexpr int kTableSize = 1 << kMaxCodeLen;
constexpr size_t kEndsBytes = 16;
// Bit offsets are uint32: 2^28 symbols of at most 11 bits fit.
constexpr size_t kMaxSymbols = size_t{1} << 28;
// Bits a refilled reader is guaranteed to hold (64 - 7).
constexpr int kSymbolsPerRefill = 5;  // 5 * 11 = 55 <= 57

// Optimal length-limited code lengths (package-merge), shared with the
// GPU encoder so both write the same tables (hd/huffman_hd.h).
int BuildLengths(const uint32_t hist[256], uint8_t len[256]) { return hd::HuffBuildLengths(hist, len); }

struct TableShape {
  int lo = 0, hi = 0;
  size_t header = 0;  // bytes before the payload
};

TableShape ShapeOf(const uint8_t len[256]) {
  TableShape t;
  t.lo = 0;
  while (t.lo < 255 && !len[t.lo]) ++t.lo;
  t.hi = 255;
  while (t.hi > t.lo && !len[t.hi]) --t.hi;
  t.header = 2 + static_cast<size_t>(t.hi - t.lo + 2) / 2 + kEndsBytes;
  return t;
}

// Canonical codes, bit-reversed for LSB-first output: entry = code << 8 | len.
void BuildCodes(const uint8_t len[256], uint32_t codes[256]) { hd::HuffBuildCodes(len, codes); }

// Decoding table entry: symbol << 8 | code length.
using Entry = uint16_t;

// Parses the code-length table at src[0, len) into `lens`; returns the
// header size (payload offset) or 0 when malformed.
size_t ParseLengths(const uint8_t* src, size_t len, uint8_t lens[256], int* min_len, int* max_len) {
  const uint32_t table = hd::HuffParseLengths(src, len, lens, min_len, max_len);
  if (!table || len < table + kEndsBytes) return 0;
  return table + kEndsBytes;
}

// Fills the 2^11-entry decoding table. Slots no code reaches (only with a
// lone symbol) decode as length 11, which the end-offset check then rejects.
void BuildDecodeTable(const uint8_t lens[256], Entry table[kTableSize]) {
  hd::HuffBuildDecodeTable(lens, table);
}

// A multi-symbol entry: bits 0-23 up to three symbols (first in the low
// byte), bits 24-29 the bits their codes take, bits 30-31 how many.
using MultiEntry = uint32_t;

// For every 11-bit window, the longest run of up to 3 whole codes at its
// start (at least one: the single-symbol entry, even a length-11 filler).
void BuildMultiTable(const Entry single[kTableSize], MultiEntry multi[kTableSize]) {
  for (uint32_t t = 0; t < kTableSize; ++t) multi[t] = hd::HuffMultiEntry(single, t);
}

// The 11 bits of payload[0, plen) from bit `pos` on; bytes past plen read
// as zero.
inline uint32_t Window(const uint8_t* payload, size_t plen, uint64_t pos) {
  const uint64_t byte = pos >> 3;
  uint64_t v = 0;
  if (byte + 8 <= plen) {
    v = LoadLE64(payload + byte);
  } else if (byte < plen) {
    v = LoadLEBytes(payload + byte, static_cast<size_t>(plen - byte));
  }
  return static_cast<uint32_t>(v >> (pos & 7)) & (kTableSize - 1);
}

// Slow, bounds-checked decoding of dst[0, count) for one reader at bit
// position *bp of payload[0, plen): bytes past plen read as zero.
void DecodeTail(const Entry* table, const uint8_t* payload, size_t plen, uint64_t* bp, uint8_t* dst,
                size_t count) {
  uint64_t pos = *bp;
  for (size_t i = 0; i < count; ++i) {
    const Entry e = table[Window(payload, plen, pos)];
    dst[i] = static_cast<uint8_t>(e >> 8);
    pos += e & 0xff;
  }
  *bp = pos;
}

}  // namespace

size_t MaxEncodedSize(size_t n) { return 2 + 128 + kEndsBytes + (n * kMaxCodeLen + 7) / 8; }

size_t EncodedSize(const uint32_t hist[256], size_t /*n*/) {
  uint8_t len[256];
  BuildLengths(hist, len);
  uint64_t bits = 0;
  for (int s = 0; s < 256; ++s) bits += uint64_t{hist[s]} * len[s];
  return ShapeOf(len).header + static_cast<size_t>((bits + 7) / 8);
}

namespace {

// One of the four bit writers of Encode: an LSB-first bit string that starts
// at bit `bits` of *out and must never store at or past `limit`.
struct Lane {
  const uint8_t* src;
  size_t left;  // symbols still to code
  uint8_t* out;
  uint8_t* limit;
  uint64_t acc;  // pending bits, count in `bits` (< 8 between rounds)
  uint64_t bits;
  // Blocked streams: every `block` symbols (a multiple of kPerRound) the
  // lane stores the bits of the block it finished in `table` (u16 each) and
  // starts the next. Null for the 4-sub-stream coder.
  uint8_t* table = nullptr;
  const uint8_t* payload = nullptr;  // bit positions count from here
  size_t block = 0;
  size_t done = 0;        // symbols coded
  uint64_t block_at = 0;  // bit position where the current block began

  uint64_t position() const { return static_cast<uint64_t>(out - payload) * 8 + bits; }
  // Called with `done` symbols coded and `pending` (< 8) bits not yet
  // stored at `at`: ends the block there if `done` is a block boundary.
  void Mark(const uint8_t* at, uint64_t pending) {
    if (table == nullptr || done == 0 || done % block != 0) return;
    const uint64_t pos = static_cast<uint64_t>(at - payload) * 8 + pending;
    StoreLE16(table + 2 * (done / block - 1), static_cast<uint16_t>(pos - block_at));
    block_at = pos;
  }
};

// Symbols per round of the fast loop, and the most a round advances out:
// (7 pending + 4 * 11) / 8 = 6 bytes, whatever the data.
constexpr size_t kPerRound = 4;
constexpr size_t kRoundAdvance = 6;

// Rounds the fast loop may run on `l`: each stores 8 bytes at out, so the
// stores stay below limit.
inline size_t SafeRounds(const Lane& l) {
  const size_t room = static_cast<size_t>(l.limit - l.out);
  if (room < 8) return 0;
  return std::min(l.left / kPerRound, (room - 8) / kRoundAdvance + 1);
}

// Codes the rest of lane `l` one symbol at a time, storing whole bytes only
// (checked against limit); leaves < 8 bits pending. False on overflow.
bool FinishLane(Lane& l, const uint32_t codes[256]) {
  uint64_t acc = l.acc, bits = l.bits;
  uint8_t* out = l.out;
  for (size_t i = 0; i < l.left; ++i, ++l.done) {
    if (i > 0) l.Mark(out, bits);  // a boundary at i = 0 is the fast loop's
    const uint32_t e = codes[l.src[i]];
    acc |= static_cast<uint64_t>(e >> 8) << bits;
    bits += e & 0xff;
    while (bits >= 8) {
      if (out >= l.limit) return false;
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      bits -= 8;
    }
  }
  l.src += l.left;
  l.left = 0;
  l.acc = acc, l.bits = bits, l.out = out;
  return true;
}

// Codes lanes x and y together while both have room. The fast loop keeps
// pending bits at the top of the accumulator (oldest lowest), and codes in
// `top` as code << (64 - len) | len: a code costs a shift by the entry
// (only its low 6 bits count), an OR, and an add of the entry to the bit
// count (only its low byte counts). The len bits ORed in at the bottom are
// shifted away below the pending bits: with at most 7 + 4 * 11 = 51 pending
// bits they never reach bit 13.
//
// kPairs: `top` is indexed by two symbols at once (PairCodes), the first in
// the low byte of a little-endian 16-bit load, and holds their two codes
// as one of up to 22 bits: a round is two lookups, not four. With at most
// 7 + 2 * 22 = 51 pending bits the len bits stay below bit 13 as well.
template <bool kPairs>
[[gnu::always_inline]] inline void RunPairBody(Lane& x, Lane& y, const uint64_t* top) {
  for (;;) {
    size_t rounds = std::min(SafeRounds(x), SafeRounds(y));
    // Blocked lanes stop at block boundaries (both lanes began at one and
    // run in step) to mark them.
    if (x.table) rounds = std::min(rounds, (x.block - x.done % x.block) / kPerRound);
    if (y.table) rounds = std::min(rounds, (y.block - y.done % y.block) / kPerRound);
    if (rounds == 0) break;
    const uint8_t *s0 = x.src, *s1 = y.src;
    uint8_t *o0 = x.out, *o1 = y.out;
    // Pending bits from the bit writer (bottom-aligned) to the top.
    uint64_t a0 = x.bits ? x.acc << (64 - x.bits) : 0, a1 = y.bits ? y.acc << (64 - y.bits) : 0;
    uint64_t p0 = x.bits, p1 = y.bits;
    for (size_t r = 0; r < rounds; ++r) {
#define LMC_HUFF_PUT(J, U)           \
  {                                  \
    const uint64_t e = top[s##J[U]]; \
    a##J = (a##J >> (e & 63)) | e;   \
    p##J += e;                       \
  }
#define LMC_HUFF_FLUSH(J)                                \
  {                                                      \
    const uint64_t nb = p##J & 0xff; /* >= 4: 4 codes */ \
    StoreLE64(o##J, a##J >> ((64 - nb) & 63));           \
    o##J += nb >> 3;                                     \
    p##J = nb & 7;                                       \
    s##J += kPerRound;                                   \
  }
#define LMC_HUFF_PUT2(J, U)                         \
  {                                                 \
    const uint64_t e = top[LoadLE16(s##J + 2 * U)]; \
    a##J = (a##J >> (e & 63)) | e;                  \
    p##J += e;                                      \
  }
      // clang-format off
      if constexpr (kPairs) {
        LMC_HUFF_PUT2(0, 0) LMC_HUFF_PUT2(1, 0)
        LMC_HUFF_PUT2(0, 1) LMC_HUFF_PUT2(1, 1)
      } else {
        LMC_HUFF_PUT(0, 0) LMC_HUFF_PUT(1, 0)
        LMC_HUFF_PUT(0, 1) LMC_HUFF_PUT(1, 1)
        LMC_HUFF_PUT(0, 2) LMC_HUFF_PUT(1, 2)
        LMC_HUFF_PUT(0, 3) LMC_HUFF_PUT(1, 3)
      }
      LMC_HUFF_FLUSH(0)
      LMC_HUFF_FLUSH(1)
      // clang-format on
#undef LMC_HUFF_FLUSH
#undef LMC_HUFF_PUT2
#undef LMC_HUFF_PUT
    }
    x.src = s0, y.src = s1, x.out = o0, y.out = o1;
    x.bits = p0, y.bits = p1;
    x.acc = p0 ? a0 >> (64 - p0) : 0;
    y.acc = p1 ? a1 >> (64 - p1) : 0;
    x.left -= kPerRound * rounds;
    y.left -= kPerRound * rounds;
    x.done += kPerRound * rounds;
    y.done += kPerRound * rounds;
    if (x.left) x.Mark(x.out, x.bits);  // the lane's last block: by its caller
    if (y.left) y.Mark(y.out, y.bits);
  }
}

// `pairs`: `top` is a PairCodes table, else the 256 single codes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__BMI2__)
// Variable shifts without BMI2 must go through %cl, which costs a move per
// code; the BMI2 build of the loop (shlx/shrx) runs about 1.4x faster.
[[gnu::target("bmi2")]] void RunPairBmi2(Lane& x, Lane& y, const uint64_t* top, bool pairs) {
  pairs ? RunPairBody<true>(x, y, top) : RunPairBody<false>(x, y, top);
}
void RunPairBase(Lane& x, Lane& y, const uint64_t* top, bool pairs) {
  pairs ? RunPairBody<true>(x, y, top) : RunPairBody<false>(x, y, top);
}
void RunPair(Lane& x, Lane& y, const uint64_t* top, bool pairs) {
  static const bool bmi2 = __builtin_cpu_supports("bmi2");
  bmi2 ? RunPairBmi2(x, y, top, pairs) : RunPairBase(x, y, top, pairs);
}
#else
void RunPair(Lane& x, Lane& y, const uint64_t* top, bool pairs) {
  pairs ? RunPairBody<true>(x, y, top) : RunPairBody<false>(x, y, top);
}
#endif

// The fast loop's codes in `top` form (code << (64 - len) | len, 0 for a
// symbol without one), of single symbols.
void SingleCodes(const uint32_t codes[256], uint64_t top[256]) {
  for (int c = 0; c < 256; ++c) {
    const uint64_t l = codes[c] & 0xff;
    top[c] = l ? static_cast<uint64_t>(codes[c] >> 8) << (64 - l) | l : 0;
  }
}

// The same for pairs of symbols, indexed by a | b << 8 for symbol a then
// b: a table of 2^16 entries, one a thread (thread_local), of which only
// the pairs of symbols with codes are written; every other entry is 0,
// which codes nothing, so a histogram that does not match the data is
// caught as with single codes (the bit count comes out wrong) and never
// stores past a lane's limit. The entries of the previous code are
// cleared before the next is written, so a code of P symbols costs 2 P^2
// stores: taken where that is small against n, and where the pairs fit
// in L1 (at most kMaxSymbols symbols).
class PairCodes {
 public:
  // The table for `codes`, or null where building it would not pay for
  // a stream of n symbols.
  const uint64_t* For(const uint32_t codes[256], size_t n) {
    uint8_t sym[256];
    size_t p = 0;
    for (int c = 0; c < 256; ++c)
      if (codes[c] & 0xff) sym[p++] = static_cast<uint8_t>(c);
    if (p > kMaxSymbols || n < kMinSymbolsPerEntry * (p * p + count_ * count_)) return nullptr;
    if (!table_) {
      // calloc: the zero pages of a fresh mapping, made resident only
      // where written (a code's rows of 2 KiB each).
      table_.reset(static_cast<uint64_t*>(std::calloc(size_t{1} << 16, sizeof(uint64_t))));
      if (!table_) return nullptr;
    }
    uint64_t* t = table_.get();
    for (size_t i = 0; i < count_; ++i)
      for (size_t j = 0; j < count_; ++j) t[set_[i] | set_[j] << 8] = 0;
    for (size_t i = 0; i < p; ++i) {
      const uint32_t a = codes[sym[i]];
      const uint64_t la = a & 0xff;
      for (size_t j = 0; j < p; ++j) {
        const uint32_t b = codes[sym[j]];
        const uint64_t l = la + (b & 0xff);  // <= 22
        const uint64_t code = uint64_t{b >> 8} << la | (a >> 8);
        t[sym[i] | sym[j] << 8] = code << (64 - l) | l;
      }
      set_[i] = sym[i];
    }
    count_ = p;
    return t;
  }

 private:
  // A stream below this many symbols per entry to write codes one at a time.
  static constexpr size_t kMinSymbolsPerEntry = 8;
  // Codes of more symbols one at a time too: the pairs of 48 symbols fill
  // 18 KiB of the table, which stays in L1 beside the 2 KiB of single
  // codes. Allowing more (up to about 180) made ckpt-step200.pt's encode slower, not
  // faster (docs/BENCHMARKS.md, "Exponent planes").
  static constexpr size_t kMaxSymbols = 48;
  struct Free {
    void operator()(uint64_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint64_t, Free> table_;
  uint8_t set_[kMaxSymbols];  // the symbols of the last code's pairs
  size_t count_ = 0;
};

std::atomic<bool> g_pair_codes{true};
std::atomic<uint64_t> g_pair_coded{0};

// The codes for the fast loop: pairs where they pay (`*pairs` true), else
// single codes in `single`.
const uint64_t* FastCodes(const uint32_t codes[256], size_t n, uint64_t single[256], bool* pairs) {
  thread_local PairCodes pair_codes;
  const uint64_t* t = g_pair_codes.load(std::memory_order_relaxed) ? pair_codes.For(codes, n) : nullptr;
  *pairs = t != nullptr;
  if (t) {
    g_pair_coded.fetch_add(1, std::memory_order_relaxed);
    return t;
  }
  SingleCodes(codes, single);
  return single;
}

}  // namespace

Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t quarters[4][256], uint8_t* dst,
                      size_t cap) {
  if (n == 0 || n > kMaxSymbols) return Status::InvalidArgument("huffman: symbol count out of range");
  const size_t q = n / 4;
  uint32_t hist[256];
  for (int s = 0; s < 256; ++s) hist[s] = quarters[0][s] + quarters[1][s] + quarters[2][s] + quarters[3][s];
  for (int j = 0; j < 4; ++j) {
    uint64_t total = 0;
    for (int s = 0; s < 256; ++s) total += quarters[j][s];
    if (total != (j == 3 ? n - 3 * q : q))
      return Status::InvalidArgument("huffman: histogram does not sum to n");
  }

  uint8_t len[256];
  BuildLengths(hist, len);
  // Bit offset where each quarter ends: the four writers start at known
  // positions, so they run independently.
  uint64_t end_bit[4];
  uint64_t acc_bits = 0;
  for (int j = 0; j < 4; ++j) {
    for (int s = 0; s < 256; ++s) acc_bits += uint64_t{quarters[j][s]} * len[s];
    end_bit[j] = acc_bits;
  }
  const uint64_t expect_bits = end_bit[3];
  const TableShape shape = ShapeOf(len);
  const size_t plen = static_cast<size_t>((expect_bits + 7) / 8);
  const size_t size = shape.header + plen;
  if (cap < size) return Status::InvalidArgument("huffman: output buffer too small");

  dst[0] = static_cast<uint8_t>(shape.lo);
  dst[1] = static_cast<uint8_t>(shape.hi);
  const size_t table_bytes = static_cast<size_t>(shape.hi - shape.lo + 2) / 2;
  std::memset(dst + 2, 0, table_bytes);
  for (int s = shape.lo; s <= shape.hi; ++s) {
    const int i = s - shape.lo;
    dst[2 + i / 2] |= static_cast<uint8_t>(len[s] << (4 * (i & 1)));
  }
  uint8_t* ends = dst + 2 + table_bytes;
  for (int j = 0; j < 4; ++j) StoreLE32(ends + 4 * j, static_cast<uint32_t>(end_bit[j]));

  uint32_t codes[256];
  BuildCodes(len, codes);
  uint8_t* const payload = dst + shape.header;
  // A byte where quarter j ends and quarter j+1 begins is shared: writer j+1
  // stores it with zeros below its start bit, writer j never stores it and
  // ORs its pending bits in at the end. Cleared first in case no writer
  // stores it at all (tiny quarters).
  for (int j = 0; j < 3; ++j)
    if (end_bit[j] & 7) payload[end_bit[j] / 8] = 0;
  Lane lane[4];
  for (int j = 0; j < 4; ++j) {
    const uint64_t start = j == 0 ? 0 : end_bit[j - 1];
    lane[j].src = src + j * q;
    lane[j].left = j == 3 ? n - 3 * q : q;
    lane[j].out = payload + start / 8;
    lane[j].limit = payload + (j == 3 ? plen : end_bit[j] / 8);
    lane[j].acc = 0;
    lane[j].bits = start & 7;
  }

  // Fast loop: two writers interleaved (four spill registers), lanes 0 and
  // 1, then 2 and 3.
  uint64_t single[256];
  bool pairs;
  const uint64_t* top = FastCodes(codes, n, single, &pairs);
  RunPair(lane[0], lane[1], top, pairs);
  RunPair(lane[2], lane[3], top, pairs);

  // Only a histogram that does not match the data fails from here on.
  const Status mismatch = Status::InvalidArgument("huffman: histogram does not match the data");
  for (int j = 0; j < 4; ++j) {
    Lane& l = lane[j];
    if (!FinishLane(l, codes)) return mismatch;
    if (static_cast<uint64_t>(l.out - payload) * 8 + l.bits != end_bit[j]) return mismatch;
  }
  if (lane[3].bits) *lane[3].out++ = static_cast<uint8_t>(lane[3].acc);  // out < limit: bits < end_bit[3]
  for (int j = 0; j < 3; ++j)
    if (lane[j].bits) payload[end_bit[j] / 8] |= static_cast<uint8_t>(lane[j].acc);
  return size;
}

Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap) {
  if (n == 0 || n > kMaxSymbols) return Status::InvalidArgument("huffman: symbol count out of range");
  uint32_t quarters[4][256];
  uint32_t total[256];
  HistogramQuarters(src, n, quarters, total);
  if (std::memcmp(total, hist, sizeof(total)) != 0)
    return Status::InvalidArgument("huffman: histogram does not match the data");
  return Encode(src, n, quarters, dst, cap);
}

namespace {

// R bit readers decoding at once: reader j decodes from bit bp[j] of
// payload[0, plen) into out[j] and must not store at or past stop[j].
template <int R>
struct Readers {
  uint64_t bp[R];
  uint8_t* out[R];
  uint8_t* stop[R];
};

// With kLog, each reader notes where it was at the start of every other
// fast round (and of every batch of rounds), as bit position << 20 | output
// offset from `base` (below 2^20: DecodeRuns covers at most 2^8 blocks of at
// most 2^12 symbols), in the slot of the block (2^shift symbols) its output
// is in, so that its last note
// in a block lies at most 30 symbols before the block's end (a round
// decodes 5 to 15 symbols). DecodeRuns checks the block table with it.
// Every other round: a note a round cost about 10% of the decoder's speed
// with six readers, every fourth round no less than every other.
struct RoundLog {
  static constexpr int kOutBits = 20;
  int shift;  // log2 of the symbols a block
  const uint8_t* base;
  uint64_t* note;
};

// The fast loop of R readers: each round refills every reader with one
// 8-byte load and does 5 lookups on each (5 * 11 = 55 bits <= the 57 a
// refill guarantees), writing at most 5 * 3 symbols plus one spare byte of
// the last 4-byte store. The readers' lookups interleave, so R independent
// chains of table loads are in flight: four for the 4-sub-stream layout,
// more where blocks allow (DecodeRuns). It returns when a reader has fewer
// than kRoom bytes of room or a reader's next load would leave the payload;
// the caller finishes from there. Stores stay inside each reader's
// [out, stop). The loops over readers are unrolled, so that the readers'
// state lives in registers.
constexpr size_t kRoom = kSymbolsPerRefill * 3 + 1;

template <int R, bool kLog>
[[gnu::always_inline]] inline void FastRounds(const MultiEntry multi[kTableSize], const uint8_t* payload,
                                              size_t plen, Readers<R>& rd, const RoundLog& log) {
  if (plen < 8) return;
  // The last bit position at which an 8-byte load stays inside the payload.
  const uint64_t limit = (uint64_t{plen} - 8) * 8 + 7;
  uint64_t bp[R];
  uint8_t* o[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) bp[j] = rd.bp[j], o[j] = rd.out[j];
  for (;;) {
    uint64_t maxbp = 0;
    size_t minroom = ~size_t{0};
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      maxbp = std::max(maxbp, bp[j]);
      minroom = std::min(minroom, static_cast<size_t>(rd.stop[j] - o[j]));
    }
    if (minroom < kRoom || maxbp > limit) break;
    // Rounds that certainly fit, by the worst case of 55 bits and 15
    // symbols per round, so the inner loop has no checks.
    const size_t rounds =
        std::min(static_cast<size_t>((limit - maxbp) / (kSymbolsPerRefill * kMaxCodeLen)) + 1,
                 (minroom - kRoom) / (kSymbolsPerRefill * 3) + 1);
    for (size_t r = 0; r < rounds; ++r) {
      if (kLog && r % 2 == 0) {
#pragma GCC unroll 8
        for (int j = 0; j < R; ++j) {
          const size_t at = static_cast<size_t>(o[j] - log.base);
          log.note[at >> log.shift] = bp[j] << RoundLog::kOutBits | at;
        }
      }
      // Bit 63 is a marker: it is never among the <= 55 bits used, and
      // after the shifts its distance from the top is the bits consumed.
      constexpr uint64_t kMarker = uint64_t{1} << 63;
      uint64_t b[R];
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) b[j] = LoadLE64(payload + (bp[j] >> 3)) >> (bp[j] & 7) | kMarker;
#pragma GCC unroll 5
      for (int k = 0; k < kSymbolsPerRefill; ++k) {
#pragma GCC unroll 8
        for (int j = 0; j < R; ++j) {
          const MultiEntry e = multi[b[j] & (kTableSize - 1)];
          StoreLE32(o[j], e);
          o[j] += e >> 30;
          b[j] >>= (e >> 24) & 63;  // one shrx: the mask is the instruction's own
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) bp[j] += static_cast<uint64_t>(std::countl_zero(b[j]));
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) rd.bp[j] = bp[j], rd.out[j] = o[j];
}

// Four readers at once, each to its stop, which it must reach exactly at
// bit end[j]: the 4-sub-stream coder's decoder.
bool DecodeFour(const MultiEntry multi[kTableSize], const Entry table[kTableSize], const uint8_t* payload,
                size_t plen, Readers<4>& rd, const uint64_t end[4]) {
  FastRounds<4, false>(multi, payload, plen, rd, RoundLog{0, nullptr, nullptr});
  for (int j = 0; j < 4; ++j)
    DecodeTail(table, payload, plen, &rd.bp[j], rd.out[j], static_cast<size_t>(rd.stop[j] - rd.out[j]));
  const uint64_t bp0 = rd.bp[0], bp1 = rd.bp[1], bp2 = rd.bp[2], bp3 = rd.bp[3];
  return bp0 == end[0] && bp1 == end[1] && bp2 == end[2] && bp3 == end[3];
}

}  // namespace

Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  if (n > kMaxSymbols) return Status::InvalidArgument("huffman: symbol count out of range");
  uint8_t lens[256];
  int min_len = 0, max_len = 0;
  const size_t header = ParseLengths(src, len, lens, &min_len, &max_len);
  if (!header) return Status::Corruption("huffman: bad code-length table");

  uint64_t end[4];
  for (int j = 0; j < 4; ++j) end[j] = LoadLE32(src + header - kEndsBytes + 4 * j);
  const uint8_t* payload = src + header;
  const size_t plen = len - header;
  if ((end[3] + 7) / 8 != plen) return Status::Corruption("huffman: payload size mismatch");
  const size_t q = n / 4;
  uint64_t start = 0;
  for (int j = 0; j < 4; ++j) {
    const uint64_t count = j == 3 ? n - 3 * q : q;
    if (end[j] < start || end[j] - start < count * min_len || end[j] - start > count * max_len) {
      return Status::Corruption("huffman: sub-stream size out of range");
    }
    start = end[j];
  }
  if (end[3] & 7) {
    if (payload[plen - 1] >> (end[3] & 7)) return Status::Corruption("huffman: nonzero padding");
  }

  Entry table[kTableSize];
  BuildDecodeTable(lens, table);

  // Multi-symbol table: one lookup of 11 bits yields up to 3 symbols whose
  // codes fit in those bits together (exponent streams average under 3 bits
  // per code, so most lookups yield 2-3 symbols).
  MultiEntry multi[kTableSize];
  BuildMultiTable(table, multi);

  Readers<4> rd = {{0, end[0], end[1], end[2]},
                   {dst, dst + q, dst + 2 * q, dst + 3 * q},
                   {dst + q, dst + 2 * q, dst + 3 * q, dst + n}};
  if (!DecodeFour(multi, table, payload, plen, rd, end))
    return Status::Corruption("huffman: sub-stream does not end where declared");
  return Status::Ok();
}

}  // namespace lmc::huff

// ---- Blocked streams (docs/FORMAT.md, "Blocked Huffman stream") ----

namespace lmc::huff {

size_t BlockedEncodedSize(const uint32_t hist[256], size_t n, int log2) {
  uint8_t len[256];
  BuildLengths(hist, len);
  uint64_t bits = 0;
  for (int s = 0; s < 256; ++s) bits += uint64_t{hist[s]} * len[s];
  return hd::HuffBlockedHeader(hd::HuffShapeOf(len).table_bytes, hd::HuffBlocks(n, log2)) +
         static_cast<size_t>((bits + 7) / 8);
}

void BlockedCuts(size_t n, int log2, size_t cuts[5]) {
  const uint32_t blocks = hd::HuffBlocks(n, log2);
  for (uint32_t j = 0; j <= 4; ++j) cuts[j] = std::min(n, size_t{blocks * j / 4} << log2);
}

namespace {
Status CheckBlockedArgs(size_t n, int log2) {
  if (n == 0 || n > kMaxSymbols) return Status::InvalidArgument("huffman: symbol count out of range");
  if (log2 < hd::kMinBlockLog2 || log2 > hd::kMaxBlockLog2)
    return Status::InvalidArgument("huffman: block size out of range");
  return Status::Ok();
}
}  // namespace

Result<size_t> EncodeBlocked(const uint8_t* src, size_t n, const uint32_t runs[4][256], int log2,
                             uint8_t* dst, size_t cap) {
  LMC_RETURN_IF_ERROR(CheckBlockedArgs(n, log2));
  size_t cuts[5];
  BlockedCuts(n, log2, cuts);
  uint32_t hist[256];
  for (int c = 0; c < 256; ++c) hist[c] = runs[0][c] + runs[1][c] + runs[2][c] + runs[3][c];
  for (int j = 0; j < 4; ++j) {
    uint64_t total = 0;
    for (int c = 0; c < 256; ++c) total += runs[j][c];
    if (total != cuts[j + 1] - cuts[j])
      return Status::InvalidArgument("huffman: histogram does not sum to n");
  }
  uint8_t len[256];
  BuildLengths(hist, len);
  uint32_t codes[256];
  BuildCodes(len, codes);
  const hd::HuffTableShape shape = hd::HuffShapeOf(len);
  const uint32_t blocks = hd::HuffBlocks(n, log2);
  const size_t header = hd::HuffBlockedHeader(shape.table_bytes, blocks);
  // Where each run ends: the four writers start at known bit positions.
  uint64_t end_bit[4], total = 0;
  for (int j = 0; j < 4; ++j) {
    for (int c = 0; c < 256; ++c) total += uint64_t{runs[j][c]} * len[c];
    end_bit[j] = total;
  }
  const size_t plen = static_cast<size_t>((total + 7) / 8);
  if (cap < header || cap - header < plen) return Status::InvalidArgument("huffman: output buffer too small");
  hd::HuffWriteLengths(len, shape, dst);
  dst[2 + shape.table_bytes] = static_cast<uint8_t>(log2);
  uint8_t* const table = dst + 2 + shape.table_bytes + 1;

  // The payload is the codes of all symbols in order, coded by four writers
  // that start at the runs' first blocks, as Encode's quarters; each stores
  // its blocks' bit counts as it crosses their ends. A byte shared by two
  // runs is cleared first (see Encode).
  uint8_t* const payload = dst + header;
  for (int j = 0; j < 3; ++j)
    if (end_bit[j] & 7) payload[end_bit[j] / 8] = 0;
  Lane lane[4];
  for (int j = 0; j < 4; ++j) {
    const uint64_t start = j == 0 ? 0 : end_bit[j - 1];
    Lane& l = lane[j];
    l.src = src + cuts[j];
    l.left = cuts[j + 1] - cuts[j];
    l.out = payload + start / 8;
    l.limit = payload + (j == 3 ? plen : end_bit[j] / 8);
    l.acc = 0;
    l.bits = start & 7;
    l.table = table + 2 * (cuts[j] >> log2);
    l.payload = payload;
    l.block = size_t{1} << log2;
    l.block_at = start;
  }
  uint64_t single[256];
  bool pairs;
  const uint64_t* top = FastCodes(codes, n, single, &pairs);
  RunPair(lane[0], lane[1], top, pairs);
  RunPair(lane[2], lane[3], top, pairs);
  const Status mismatch = Status::InvalidArgument("huffman: histogram does not match the data");
  for (int j = 0; j < 4; ++j) {
    Lane& l = lane[j];
    if (!FinishLane(l, codes)) return mismatch;
    if (l.position() != end_bit[j]) return mismatch;
    if (l.done == 0) continue;
    const uint64_t bits = end_bit[j] - l.block_at;  // the run's last block
    if (bits > 0xffff) return mismatch;
    StoreLE16(l.table + 2 * ((l.done - 1) >> log2), static_cast<uint16_t>(bits));
  }
  if (lane[3].bits) *lane[3].out++ = static_cast<uint8_t>(lane[3].acc);  // out < limit: bits < end_bit[3]
  for (int j = 0; j < 3; ++j)
    if (lane[j].bits) payload[end_bit[j] / 8] |= static_cast<uint8_t>(lane[j].acc);
  return header + plen;
}

Result<size_t> EncodeBlocked(const uint8_t* src, size_t n, const uint32_t hist[256], int log2, uint8_t* dst,
                             size_t cap) {
  LMC_RETURN_IF_ERROR(CheckBlockedArgs(n, log2));
  size_t cuts[5];
  BlockedCuts(n, log2, cuts);
  uint32_t runs[4][256];
  uint32_t total[256];
  HistogramRuns(src, cuts, runs, total);
  if (std::memcmp(total, hist, sizeof(total)) != 0)
    return Status::InvalidArgument("huffman: histogram does not match the data");
  return EncodeBlocked(src, n, runs, log2, dst, cap);
}

namespace {

// Blocks one DecodeRuns call covers at most (its notes are on the stack),
// and its readers: six chains of table loads in flight decode faster than
// four on this codec's x86 machines, eight no faster than six (the
// readers' state no longer fits the registers); docs/BENCHMARKS.md, "The
// CPU profile writes blocked Huffman".
constexpr uint32_t kRunBlocks = 256;
constexpr int kRunReaders = 6;

// The bit position `count` symbols after bit `pos`, storing nothing: the
// multi-symbol table while three or more are left, then the single one.
// Bytes past plen read as zero, as in DecodeTail.
uint64_t SkipSymbols(const MultiEntry multi[kTableSize], const Entry table[kTableSize],
                     const uint8_t* payload, size_t plen, uint64_t pos, size_t count) {
  while (count >= 3) {
    const MultiEntry e = multi[Window(payload, plen, pos)];
    count -= e >> 30;
    pos += (e >> 24) & 63;
  }
  for (; count > 0; --count) pos += table[Window(payload, plen, pos)] & 0xff;
  return pos;
}

// Decodes nb (<= kRunBlocks) consecutive blocks of 2^log2 symbols, n
// symbols in all, into dst; block b's codes run from bit starts[b] to
// starts[b + 1]. kRunReaders readers each decode a run of whole blocks
// straight through, with the fast loop. That the blocks inside a run end
// where the table says (the GPU's per-block decoders start there) is
// checked after: from a reader's last note in block b - 1 (RoundLog), at
// most 30 symbols are decoded again to the start of block b, whose bit the
// table gives. A reader whose run is done copies one still running (the
// same bits into the same bytes), so the fast loop always has kRunReaders.
// True when every run and block ends where declared.
bool DecodeRuns(const MultiEntry multi[kTableSize], const Entry table[kTableSize], const uint8_t* payload,
                size_t plen, const uint64_t* starts, uint32_t nb, int log2, uint8_t* dst, size_t n) {
  constexpr uint64_t kNone = ~uint64_t{0};
  static_assert(kRunBlocks << hd::kMaxBlockLog2 <= 1u << RoundLog::kOutBits);
  uint64_t notes[kRunBlocks];
  std::fill_n(notes, nb, kNone);
  constexpr int R = kRunReaders;
  uint32_t first[R + 1];
  Readers<R> rd;
  uint64_t end[R];
  bool done[R] = {};
  for (uint32_t j = 0; j <= R; ++j) first[j] = nb * j / R;
  for (uint32_t j = 0; j < R; ++j) {
    rd.bp[j] = starts[first[j]];
    rd.out[j] = dst + std::min(n, size_t{first[j]} << log2);
    rd.stop[j] = dst + std::min(n, size_t{first[j + 1]} << log2);
    end[j] = starts[first[j + 1]];
  }
  const uint64_t limit = plen >= 8 ? (uint64_t{plen} - 8) * 8 + 7 : 0;
  const RoundLog log{log2, dst, notes};
  for (;;) {
    FastRounds<R, true>(multi, payload, plen, rd, log);
    int live = -1;
    for (int j = 0; j < R; ++j) {
      if (done[j]) continue;
      const size_t left = static_cast<size_t>(rd.stop[j] - rd.out[j]);
      if (left >= kRoom && rd.bp[j] <= limit && plen >= 8) {
        live = j;
        continue;
      }
      DecodeTail(table, payload, plen, &rd.bp[j], rd.out[j], left);
      rd.out[j] += left;
      if (rd.bp[j] != end[j]) return false;
      done[j] = true;
    }
    if (live < 0) break;
    for (int j = 0; j < R; ++j) {
      if (!done[j]) continue;
      rd.bp[j] = rd.bp[live], rd.out[j] = rd.out[live], rd.stop[j] = rd.stop[live], end[j] = end[live];
      done[j] = false;
    }
  }
  for (uint32_t b = 1, j = 1; b < nb; ++b) {
    while (j < R && first[j] < b) ++j;
    if (j < R && first[j] == b) continue;  // a run began here: checked by the run before ending here
    uint64_t at_bit = starts[b - 1];
    size_t at_out = size_t{b - 1} << log2;
    if (notes[b - 1] != kNone) {
      at_bit = notes[b - 1] >> RoundLog::kOutBits;
      at_out = notes[b - 1] & ((1u << RoundLog::kOutBits) - 1);
    }
    if (SkipSymbols(multi, table, payload, plen, at_bit, (size_t{b} << log2) - at_out) != starts[b])
      return false;
  }
  return true;
}

}  // namespace

Status DecodeBlocked(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  if (n > kMaxSymbols) return Status::InvalidArgument("huffman: symbol count out of range");
  uint8_t lens[256];
  int min_len = 0, max_len = 0;
  const uint32_t lengths = hd::HuffParseLengths(src, len, lens, &min_len, &max_len);
  if (!lengths || len < size_t{lengths} + 1) return Status::Corruption("huffman: bad code-length table");
  const int log2 = src[lengths];
  if (log2 < hd::kMinBlockLog2 || log2 > hd::kMaxBlockLog2)
    return Status::Corruption("huffman: bad block size");
  const uint32_t blocks = hd::HuffBlocks(n, log2);
  const size_t header = size_t{lengths} + 1 + 2 * size_t{blocks};
  if (len < header) return Status::Corruption("huffman: block table truncated");
  const uint8_t* table_bytes = src + lengths + 1;
  const size_t per = size_t{1} << log2;
  // Checks every block's bit count against its symbol count, and that the
  // payload holds exactly their sum.
  uint64_t total = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint64_t bits = LoadLE16(table_bytes + 2 * b);
    const uint64_t count = std::min(per, n - (size_t{b} << log2));
    if (bits < count * min_len || bits > count * max_len)
      return Status::Corruption("huffman: block size out of range");
    total += bits;
  }
  const uint8_t* payload = src + header;
  const size_t plen = len - header;
  if ((total + 7) / 8 != plen) return Status::Corruption("huffman: payload size mismatch");
  if ((total & 7) && (payload[plen - 1] >> (total & 7)))
    return Status::Corruption("huffman: nonzero padding");
  if (n == 0) return Status::Ok();

  Entry table[kTableSize];
  BuildDecodeTable(lens, table);
  MultiEntry multi[kTableSize];
  BuildMultiTable(table, multi);
  // Runs of up to kRunBlocks blocks, each decoded as kRunReaders runs of
  // whole blocks with the boundaries between checked after (DecodeRuns).
  uint64_t starts[kRunBlocks + 1];
  starts[0] = 0;
  for (uint32_t first = 0; first < blocks; first += kRunBlocks) {
    const uint32_t nb = std::min(blocks - first, kRunBlocks);
    for (uint32_t b = 0; b < nb; ++b) starts[b + 1] = starts[b] + LoadLE16(table_bytes + 2 * (first + b));
    const size_t at = size_t{first} << log2;
    if (!DecodeRuns(multi, table, payload, plen, starts, nb, log2, dst + at,
                    std::min(n - at, size_t{nb} << log2)))
      return Status::Corruption("huffman: block does not end where declared");
    starts[0] = starts[nb];
  }
  return Status::Ok();
}

namespace internal {
bool SetPairCodes(bool on) { return g_pair_codes.exchange(on); }
uint64_t PairCodedStreams() { return g_pair_coded.load(std::memory_order_relaxed); }
}  // namespace internal

}  // namespace lmc::huff
