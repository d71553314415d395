// Test hooks of transform.cc (not part of the codec's interface).
#pragma once

namespace lmc::internal {

// Whether SplitStreams / MergeStreams use their AVX2 kernels (the default
// where the CPU has AVX2) or only the scalar reference; `on` is ignored
// without AVX2. Returns the previous setting. For tests that compare the two.
bool SetTransformAvx2(bool on);

// The vector unit of HistogramRunsLikely: the best the CPU has by default.
// kScalar makes it call HistogramRuns. SetHistogramIsa never sets one the
// CPU lacks (it takes the best below); returns the previous setting.
enum class HistogramIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
HistogramIsa SetHistogramIsa(HistogramIsa isa);
HistogramIsa BestHistogramIsa();
// The share of a sample (percent) the likely values must cover for
// PickLikely to take them, on the unit set now; above 100 for kScalar.
int LikelyCoverageNeeded();

}  // namespace lmc::internal
