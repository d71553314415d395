// Twins of fp32 and bf16 values: see lmc/twin.h.
#include "lmc/twin.h"

#include "lmc/bytes.h"
#include "lmc/hash.h"

namespace lmc {

uint16_t RoundToBf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: quiet
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

namespace {
std::optional<uint64_t> HashIfVaried(const uint16_t* v) {
  bool varied = false;
  for (size_t i = 1; i < kFingerprintElems && !varied; ++i) varied = v[i] != v[0];
  if (!varied) return std::nullopt;
  return hash::Xxh3_64(v, kFingerprintElems * 2);
}
}  // namespace

std::optional<uint64_t> Bf16Fingerprint(const uint8_t* p) {
  uint16_t v[kFingerprintElems];
  for (size_t i = 0; i < kFingerprintElems; ++i) v[i] = static_cast<uint16_t>(LoadLE16(p + 2 * i));
  return HashIfVaried(v);
}

std::optional<uint64_t> Fp32Fingerprint(const uint8_t* p) {
  uint16_t v[kFingerprintElems];
  for (size_t i = 0; i < kFingerprintElems; ++i) v[i] = RoundToBf16(LoadLE32(p + 4 * i));
  return HashIfVaried(v);
}

bool TwinsMatch(const uint8_t* f32, size_t n, const uint8_t* bf16, size_t offset) {
  if (n == 0) return false;
  constexpr size_t kSamples = 256;
  const size_t samples = n < kSamples ? n : kSamples;
  size_t close = 0;
  for (size_t s = 0; s < samples; ++s) {
    const size_t i = s * n / samples;
    const uint32_t hi = LoadLE32(f32 + 4 * i) >> 16;
    const uint32_t b = LoadLE16(bf16 + 2 * (offset + i));
    close += (hi >= b ? hi - b : b - hi) <= 1;
  }
  return close * 100 >= samples * 95;
}

size_t TwinOffsets(size_t elems, size_t chunk_size, size_t out[2]) {
  size_t k = 0;
  if (elems >= kFingerprintElems) out[k++] = 0;
  const size_t second = chunk_size / 4;
  if (chunk_size % 4 == 0 && second > 0 && elems >= second + kFingerprintElems) out[k++] = second;
  return k;
}

}  // namespace lmc
