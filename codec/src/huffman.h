// Canonical, length-limited Huffman coder for one byte stream
// (docs/FORMAT.md, "Huffman stream"). Internal to lmc_codec.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lmc/status.h"

namespace lmc::huff {

// Longest code. 11 bits keeps the decode table (2^11 entries) in L1.
inline constexpr int kMaxCodeLen = 11;

// Worst-case size of Encode's output for n symbols.
size_t MaxEncodedSize(size_t n);

// Exact size in bytes Encode would produce for a stream with histogram
// `hist` of n symbols (table header included), computed from the histogram
// alone (no pass over the data). Used to choose a coder without encoding.
size_t EncodedSize(const uint32_t hist[256], size_t n);

// Encodes src[0, n) (histograms of its four quarters precomputed by the
// caller with HistogramQuarters, at least two distinct symbols) into dst.
// Returns bytes written; InvalidArgument when cap is too small or the
// histograms do not match the data. Allocates nothing but, once a thread,
// the table of its pair codes (512 KiB of address space, resident only
// where written; see PairCodes in huffman.cc). The four quarters are
// coded by four independent writers, since their start bits are known.
Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t quarters[4][256], uint8_t* dst,
                      size_t cap);
// The same from the whole stream's histogram (recomputes the quarters).
Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap);

// Decodes exactly n symbols from src[0, len) into dst. Any malformed input
// gives Corruption; never reads or writes out of bounds. Allocates nothing.
Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n);

// Blocked streams (coder 4, docs/FORMAT.md, "Blocked Huffman stream"):
// the same codes, cut into blocks of 2^log2 symbols with a u16 bit count
// per block, so that any number of decoders can start at block boundaries.
// Exact size from the histogram alone.
size_t BlockedEncodedSize(const uint32_t hist[256], size_t n, int log2);
// Encodes src[0, n) (histogram precomputed, at least two distinct symbols,
// log2 in [8, 12]). InvalidArgument when cap is too small or the histogram
// does not match the data. Allocates nothing.
Result<size_t> EncodeBlocked(const uint8_t* src, size_t n, const uint32_t hist[256], int log2, uint8_t* dst,
                             size_t cap);
// Where the blocked encoder cuts n symbols into four runs of whole blocks
// (cuts[0] = 0, cuts[4] = n), which its four writers code.
void BlockedCuts(size_t n, int log2, size_t cuts[5]);
// The same from the histograms of those runs (HistogramRuns at
// BlockedCuts): no pass over the data before coding. The bytes are the same.
Result<size_t> EncodeBlocked(const uint8_t* src, size_t n, const uint32_t runs[4][256], int log2,
                             uint8_t* dst, size_t cap);
// Decodes exactly n symbols; Corruption on malformed input, never out of
// bounds. Allocates nothing.
Status DecodeBlocked(const uint8_t* src, size_t len, uint8_t* dst, size_t n);

namespace internal {
// Test hooks: whether the encoders' fast loop may code symbol pairs (the
// default; frames are the same bytes either way), and how many streams
// it has coded with them since the process started.
bool SetPairCodes(bool on);
uint64_t PairCodedStreams();
}  // namespace internal

}  // namespace lmc::huff
