// Helpers of the filesystem core's tests (no mount).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace lmc::fs::testing {

// n bytes of bf16-like weights (the high halves of N(0, 0.02) floats):
// compressible, detected as bf16, different per seed.
inline std::string Bf16Like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 0.02f);
  std::string s(n, '\0');
  for (size_t i = 0; i + 1 < n; i += 2) {
    float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    s[i] = static_cast<char>(u >> 16);
    s[i + 1] = static_cast<char>(u >> 24);
  }
  return s;
}

}  // namespace lmc::fs::testing
