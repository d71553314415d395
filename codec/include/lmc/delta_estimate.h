// Cheap choice between a standalone frame and an XOR-delta frame for one
// chunk (docs/ARCHITECTURE.md, "Incremental snapshots", "Choosing a base").
//
// The codec codes each regrouped byte stream with an order-0 entropy coder,
// so the order-0 entropy of the streams (transform.h, GroupedEntropyBits) is
// a close predictor of the frame size. The estimate computes it on a strided
// sample of the chunk, for the data alone and for data XOR base, instead of
// encoding twice. Thread-safe (no shared state); allocates only its scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lmc/dtype.h"

namespace lmc {

struct DeltaEstimateOptions {
  size_t sample_bytes = 64 * 1024;  // bytes sampled per chunk (whole chunk if smaller)
  size_t window_bytes = 4 * 1024;   // sampled in windows of this size, evenly spaced
  // An XOR delta is chosen only when its estimate is below
  // (1 - margin) x the standalone estimate: a delta costs a base read on
  // every decode, so it must pay for itself.
  double margin = 0.02;
};

struct DeltaEstimate {
  double standalone_bits = 0;  // order-0 bits of the sample's streams
  double delta_bits = 0;       // the same for sample XOR base sample
  size_t sampled = 0;          // bytes sampled
  bool prefer_delta = false;   // delta_bits < (1 - margin) * standalone_bits
};

// data and base: n bytes each (same length), of dtype t.
DeltaEstimate EstimateDelta(DType t, const uint8_t* data, const uint8_t* base, size_t n,
                            const DeltaEstimateOptions& opts = {});

// Order-0 bounds of one whole chunk in bytes (no sampling): standalone, and
// XOR against base (base may be null: then delta = standalone). What the
// benchmark's bound script (`lmc bound`) reports.
struct EntropyBound {
  double standalone_bytes = 0;
  double delta_bytes = 0;
  double min_bytes() const { return delta_bytes < standalone_bytes ? delta_bytes : standalone_bytes; }
};
EntropyBound ChunkEntropyBound(DType t, const uint8_t* data, const uint8_t* base, size_t n);

}  // namespace lmc
