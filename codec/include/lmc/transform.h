// Dtype-aware byte regrouping (docs/FORMAT.md, "Transforms").
//
// A chunk of n bytes of dtype t with element width w is split into w byte
// streams of n/w bytes each, plus a tail stream of n%w raw bytes when n is
// not a multiple of w. The streams are laid out back to back in one buffer
// of n bytes: stream i at offset i*(n/w), the tail at w*(n/w).
//
// Floats are rotated left by one bit first, so the sign moves to the lowest
// bit and the exponent starts at the top: stream 0 of bf16 and f32 is
// exactly the 8 exponent bits. Integers are split high byte first.
// With a base buffer (same length), the element is XORed with the base
// element before the rotation (the incremental-snapshot delta).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lmc/dtype.h"

namespace lmc {

struct StreamShape {
  size_t width;  // number of regular streams (element width)
  size_t elems;  // bytes per regular stream
  size_t tail;   // bytes in the tail stream (0: no tail stream)
  size_t count() const { return width + (tail ? 1 : 0); }
  size_t size(size_t i) const { return i < width ? elems : tail; }
  size_t offset(size_t i) const { return i * elems; }
};

StreamShape ShapeFor(DType t, size_t n);

// src (n bytes) [^ base] -> regrouped streams in dst (n bytes). base may be null.
void SplitStreams(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst);
// Inverse of SplitStreams.
void MergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst);
// The same with each stream at its own address (streams[i] holds
// ShapeFor(t, n).size(i) bytes), so the decoder can merge raw streams
// straight from the frame without copying them.
void MergeStreams(DType t, const uint8_t* const* streams, size_t n, const uint8_t* base, uint8_t* dst);
// Bytes [from, to) of the chunk only: from a multiple of the element
// width, to a multiple of it or n (the tail stream goes with the range
// that ends at n). Pointers are the whole chunk's, as above. Ranges that
// cover [0, n) between them compute what one SplitStreams / MergeStreams
// computes, so a caller can hash or code each range while it is in cache.
void SplitStreamsRange(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst, size_t from,
                       size_t to);
void MergeStreamsRange(DType t, const uint8_t* const* streams, size_t n, const uint8_t* base, uint8_t* dst,
                       size_t from, size_t to);

// Histogram of a byte stream.
void Histogram(const uint8_t* p, size_t n, uint32_t hist[256]);
// Histogram of a byte stream and of each of its four quarters as the
// Huffman coder splits it (quarter j < 3 is [j*(n/4), (j+1)*(n/4)), quarter
// 3 the rest), in one pass.
void HistogramQuarters(const uint8_t* p, size_t n, uint32_t quarters[4][256], uint32_t hist[256]);
// Those quarters as the cuts of HistogramRuns.
void QuarterCuts(size_t n, size_t cuts[5]);
// The same for four runs p[cuts[j], cuts[j + 1]) (cuts[0] = 0, cuts[4] = n,
// ascending) of lengths within a few thousand of each other, as the blocked
// Huffman coder splits a stream.
void HistogramRuns(const uint8_t* p, const size_t cuts[5], uint32_t runs[4][256], uint32_t hist[256]);
// HistogramRuns, faster where nearly every byte is one of a few values (the
// exponent planes of floats): the kLikelySymbols values `likely` are
// counted with vector compares (AVX-512BW or AVX2, where the CPU has
// them), every other byte one at a time. The result is HistogramRuns'
// for any `likely` (a value listed twice is counted once); only the speed
// depends on how many bytes are likely. PickLikely chooses them.
inline constexpr int kLikelySymbols = 16;
void HistogramRunsLikely(const uint8_t* p, const size_t cuts[5], const uint8_t likely[kLikelySymbols],
                         uint32_t runs[4][256], uint32_t hist[256]);
// The kLikelySymbols most frequent values of a sample's histogram (ties by
// value); true when they cover enough of the sample that
// HistogramRunsLikely beats HistogramRuns on this CPU (85% with AVX-512,
// 95% with AVX2; never without either).
bool PickLikely(const uint32_t sample[256], uint8_t likely[kLikelySymbols]);
// Order-0 Shannon entropy of a histogram, in bits for the whole stream.
double EntropyBits(const uint32_t hist[256], size_t n);

// Sum of the order-0 entropies of the regrouped streams of src [^ base], in
// bits: the "entropy bound" of the benchmark targets. `scratch` must hold n bytes.
double GroupedEntropyBits(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* scratch);

}  // namespace lmc
