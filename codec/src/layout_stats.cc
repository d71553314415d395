// Statistical fallback: fixed-size blocks typed by DetectDType, for files of
// unknown layout and for whatever a format parser could not explain.

#include <algorithm>
#include <array>
#include <vector>

#include "layout_internal.h"
#include "lmc/layout.h"
#include "lmc/transform.h"

namespace lmc {

DType DetectDType(const uint8_t* data, size_t n) {
  // Too little data for the histograms to mean anything.
  constexpr size_t kMinSample = 256;
  n = std::min(n, layout::kSampleBytes) & ~size_t{3};
  if (data == nullptr || n < kMinSample) return DType::kBytes;
  std::vector<uint8_t> scratch(n);
  // Splitting into more streams never costs order-0 entropy, so a wider
  // grouping must beat the narrower one by a margin to be believed.
  constexpr double kWiden = 0.97;
  DType best = DType::kBytes;
  double best_bits = GroupedEntropyBits(DType::kBytes, data, n, nullptr, scratch.data());

  // bf16 and f16 regroup identically (2 streams, rotated by one bit); they
  // differ in what the high stream holds: 8 exponent bits for bf16, 5
  // exponent and 3 mantissa bits for f16, whose entropy is higher.
  double bits16 = GroupedEntropyBits(DType::kBF16, data, n, nullptr, scratch.data());
  if (bits16 < best_bits * kWiden) {
    uint32_t hist[256];
    Histogram(scratch.data(), n / 2, hist);
    double high_bits_per_byte = EntropyBits(hist, n / 2) / static_cast<double>(n / 2);
    constexpr double kF16HighStreamBits = 4.75;
    best = high_bits_per_byte < kF16HighStreamBits ? DType::kBF16 : DType::kF16;
    best_bits = bits16;
  }
  double bits32 = GroupedEntropyBits(DType::kF32, data, n, nullptr, scratch.data());
  if (bits32 < best_bits * kWiden) best = DType::kF32;
  return best;
}

namespace layout {

ParseTask ParseStats(LayoutContext& c) {
  // Line the read position up with the end of the plan: skip bytes already
  // planned, or plan bytes a parser consumed without explaining.
  if (c.planned_end() > c.pos()) co_await c.Skip(c.planned_end() - c.pos());
  if (c.planned_end() < c.pos()) c.Plan(c.pos() - c.planned_end(), DType::kBytes, false, {});
  while (true) {
    std::string_view sample = co_await c.Read(kSampleBytes);
    if (sample.empty()) co_return;
    DType t = DetectDType(reinterpret_cast<const uint8_t*>(sample.data()), sample.size());
    uint64_t len = sample.size();
    if (sample.size() == kSampleBytes) len += co_await c.Skip(kStatsBlock - kSampleBytes);
    c.Plan(len, t, false, {});
  }
}

}  // namespace layout
}  // namespace lmc
