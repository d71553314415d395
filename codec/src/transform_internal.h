// Test hooks of transform.cc (not part of the codec's interface).
#pragma once

namespace lmc::internal {

// Whether SplitStreams / MergeStreams use their AVX2 kernels (the default
// where the CPU has AVX2) or only the scalar reference; `on` is ignored
// without AVX2. Returns the previous setting. For tests that compare the two.
bool SetTransformAvx2(bool on);

}  // namespace lmc::internal
