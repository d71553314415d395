// Shared helpers for codec tests: deterministic data that looks like
// checkpoint tensors.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace lmc::testing {

// bf16 values of a N(0, sigma) weight tensor.
inline std::vector<uint8_t> Bf16Weights(size_t count, uint32_t seed, float sigma = 0.02f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<uint8_t> out(count * 2);
  for (size_t i = 0; i < count; ++i) {
    float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t h = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

inline std::vector<uint8_t> F32Weights(size_t count, uint32_t seed, float sigma = 0.02f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<uint8_t> out(count * 4);
  for (size_t i = 0; i < count; ++i) {
    float f = nd(rng);
    std::memcpy(&out[i * 4], &f, 4);
  }
  return out;
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// A copy of `w` (bf16) where a fraction of the elements moved by one ulp:
// what a later checkpoint of slowly training weights looks like.
inline std::vector<uint8_t> Perturb(const std::vector<uint8_t>& w, size_t width, double frac, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution pick(frac);
  std::vector<uint8_t> out = w;
  for (size_t i = 0; i + width <= out.size(); i += width)
    if (pick(rng)) out[i] ^= 1;
  return out;
}

}  // namespace lmc::testing
