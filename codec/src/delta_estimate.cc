#include "lmc/delta_estimate.h"

#include <algorithm>

#include "lmc/transform.h"

namespace lmc {

DeltaEstimate EstimateDelta(DType t, const uint8_t* data, const uint8_t* base, size_t n,
                            const DeltaEstimateOptions& opts) {
  DeltaEstimate est;
  if (n == 0) return est;
  thread_local std::vector<uint8_t> sample_data, sample_base, scratch;
  const uint8_t* d = data;
  const uint8_t* b = base;
  size_t m = n;
  if (n > opts.sample_bytes && opts.window_bytes > 0) {
    // Windows aligned to the element width so the byte planes line up.
    const size_t w = std::max<size_t>(1, ShapeFor(t, 64).width);
    const size_t win = std::max(w, opts.window_bytes / w * w);
    const size_t windows = std::max<size_t>(1, opts.sample_bytes / win);
    const size_t stride = (n - win) / std::max<size_t>(1, windows - 1) / w * w;
    sample_data.resize(windows * win);
    sample_base.resize(windows * win);
    for (size_t i = 0; i < windows; ++i) {
      const size_t off = std::min(i * stride, (n - win) / w * w);
      std::copy_n(data + off, win, sample_data.data() + i * win);
      std::copy_n(base + off, win, sample_base.data() + i * win);
    }
    d = sample_data.data();
    b = sample_base.data();
    m = windows * win;
  }
  scratch.resize(m);
  est.sampled = m;
  est.standalone_bits = GroupedEntropyBits(t, d, m, nullptr, scratch.data());
  est.delta_bits = GroupedEntropyBits(t, d, m, b, scratch.data());
  est.prefer_delta = est.delta_bits < (1.0 - opts.margin) * est.standalone_bits;
  return est;
}

EntropyBound ChunkEntropyBound(DType t, const uint8_t* data, const uint8_t* base, size_t n) {
  std::vector<uint8_t> scratch(n);
  EntropyBound b;
  b.standalone_bytes = GroupedEntropyBits(t, data, n, nullptr, scratch.data()) / 8.0;
  b.delta_bytes = base ? GroupedEntropyBits(t, data, n, base, scratch.data()) / 8.0 : b.standalone_bytes;
  return b;
}

}  // namespace lmc
