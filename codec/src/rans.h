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

// Worst-case output of Encode and EncodeX32.
size_t MaxEncodedSize(size_t n);

// Estimated output size in bytes (table header and `states` initial states
// included) from the histogram alone: n * cross-entropy of the normalised
// frequencies + table.
size_t EstimatedSize(const uint32_t hist[256], size_t n, int states = 4);

// Encodes src[0, n) (histogram precomputed, at least two distinct symbols)
// into dst. Returns bytes written; InvalidArgument when cap is too small.
// Allocates nothing.
Result<size_t> Encode(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap);

// Decodes exactly n symbols. Corruption on malformed input; never reads or
// writes out of bounds. Allocates nothing.
Status Decode(const uint8_t* src, size_t len, uint8_t* dst, size_t n);

// The same with 32 interleaved states (coder kRansX32): 112 bytes more of
// initial states, and whole rounds of 32 symbols go through AVX2 registers
// (where the CPU has AVX2 and FMA): about 1.5x the 4-state coder's speed
// (docs/BENCHMARKS.md, "rANS with 32 states").
Result<size_t> EncodeX32(const uint8_t* src, size_t n, const uint32_t hist[256], uint8_t* dst, size_t cap);
Status DecodeX32(const uint8_t* src, size_t len, uint8_t* dst, size_t n);

// Encodes with given frequencies (freq[s] for every byte s, summing to
// 4096, at least two present; a symbol of src absent from them is
// InvalidArgument) and `states` states, 4 (coder kRans) or 32 (kRansX32):
// the GPU profile's tables (hd::RansNormalizeGpu). Same stream layout.
Result<size_t> EncodeWithFrequencies(const uint8_t* src, size_t n, const uint32_t freq[256], int states,
                                     uint8_t* dst, size_t cap);

// Turns the vector paths of the 32-state coder on (where the CPU has them)
// or off (the scalar reference, which writes and reads the same bytes);
// returns the previous setting. For tests and benchmarks.
bool SetSimd(bool on);

}  // namespace lmc::rans
