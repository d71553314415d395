// fp32 values and their bf16 twins (the fp32 master weights of
// mixed-precision training and the bf16 weights rounded from them): the
// rounding, a fingerprint to find a twin by content, and a sampled check
// that two ranges are twins. Used by the mount's pairing
// (fs/snapshots/src/pairing.h) and by `lmc bound --pair`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace lmc {

// Values a fingerprint covers.
inline constexpr size_t kFingerprintElems = 64;

// fp32 bits rounded to bf16 bits, to nearest even as torch's
// .to(torch.bfloat16) does; a NaN stays a NaN (quiet bit set).
uint16_t RoundToBf16(uint32_t f32);

// Fingerprint of kFingerprintElems bf16 values (little-endian bytes at p):
// XXH3-64 of them; nullopt when they are all equal (zeros, ones: too common
// to tell tensors apart).
std::optional<uint64_t> Bf16Fingerprint(const uint8_t* p);
// The same of kFingerprintElems fp32 values, rounded to bf16 first.
std::optional<uint64_t> Fp32Fingerprint(const uint8_t* p);

// Whether the fp32 values f32[0, n) look like the bf16 values from element
// `offset` of bf16 (which holds at least offset + n values) widened: on
// 256 values spread over the range, the upper 16 bits of at least 95% are
// within one step of their twin (rounding to nearest, stochastic, or
// truncation all qualify).
bool TwinsMatch(const uint8_t* f32, size_t n, const uint8_t* bf16, size_t offset);

// The element offsets of a bf16 tensor chunk of `elems` values at which an
// fp32 chunk of the twin tensor starts, as many as leave room for a
// fingerprint; returns how many (0 to 2). Tensor-aligned chunking cuts both
// tensors every chunk_size bytes from their first value: fp32 chunks start
// every chunk_size / 4 values, so in a bf16 chunk at 0 and chunk_size / 4
// (its middle when it is whole; a shorter last chunk too).
size_t TwinOffsets(size_t elems, size_t chunk_size, size_t out[2]);

}  // namespace lmc
