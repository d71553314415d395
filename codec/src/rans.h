// Interleaved rANS coder for one byte stream (docs/FORMAT.md, "rANS
// stream"). Reaches well below 1 bit/symbol for skewed streams such as XOR
// deltas of slowly changing exponents. Internal to lmc_codec.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lmc/status.h"

namespace lmc::rans {

// Probability precision: frequencies are normalised to sum to 2^kProbBits.
inline constexpr int kProbBits = 12;

size_t MaxEncodedSize(size_t n);

// Estimated output size in bytes (table header included) from the
// histogram alone: n * cross-entropy of the normalised frequencies + table.
size_t EstimatedSize(const uint32_t hist[256], size_t n);

// Encodes src[0, n) (histogram precomputed, at least two distinct symbols)
// into dst. Returns bytes written; InvalidArgument when cap is too small.
// Allocates nothing.
Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap);

// Decodes exactly n symbols. Corruption on malformed input; never reads or
// writes out of bounds. Allocates nothing.
Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n);

}  // namespace lmc::rans
