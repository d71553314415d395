// The mount's GPU codec (FsOptions::gpu; docs/ARCHITECTURE.md, "GPU codec
// in the mount"): one device, one batch at a time, shared by the encoder
// pool's GPU feeder (encoder.h) and read-ahead (file_data.cc), and switched
// off for good by the first device failure.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "lmc/fs/filesystem.h"
#include "lmc/gpu.h"
#include "lmc/status.h"

namespace lmc::fs {

class GpuPath {
 public:
  // codec may be nullptr (no GPU; none_reason says why). Not owned.
  GpuPath(GpuCodec* codec, std::string none_reason, size_t min_batch_bytes, size_t batch_bytes,
          FsCounters* counters, bool first = false);
  GpuPath(const GpuPath&) = delete;
  GpuPath& operator=(const GpuPath&) = delete;

  // A codec is present and has not failed. Thread-safe; may turn false at
  // any time (another caller's batch failed).
  bool active() const { return active_.load(std::memory_order_acquire); }
  size_t min_batch_bytes() const { return min_batch_bytes_; }
  size_t batch_bytes() const { return batch_bytes_; }
  bool first() const { return first_; }  // FsOptions::gpu_first
  // Read-ahead decodes its batches here: with gpu=on (first) only, as on the
  // one GPU machine measured no host-memory decode call of up to 64 MiB beat
  // all its CPU cores (docs/BENCHMARKS.md, "GPU codec"); gpu=auto reads on
  // the CPU.
  bool reads() const { return active() && first_; }

  // One batch on the device, one caller at a time (the codec is not
  // thread-safe). OK: per-item results are in the items. Not OK: nothing
  // in the items is valid and the caller redoes the batch on the CPU;
  // either the GPU is off (Aborted, nothing logged) or this batch is the
  // device failure that switched it off (logged once as a warning, counted
  // in gpu_failed_batches and gpu_fallback_chunks). `what` names the work
  // for that log line ("encoding 12 chunks of inode 5").
  Status EncodeBatch(GpuEncodeItem* items, size_t count, const std::string& what);
  Status DecodeBatch(GpuDecodeItem* items, size_t count, const std::string& what);

  // The path in words (Filesystem::GpuState).
  std::string State() const;

 private:
  template <typename Fn>
  Status Run(size_t count, const std::string& what, Fn&& call);

  GpuCodec* const codec_;
  const size_t min_batch_bytes_, batch_bytes_;
  const bool first_;
  FsCounters& counters_;
  std::atomic<bool> active_;
  mutable std::mutex mu_;  // one batch at a time; guards state_
  std::string state_;      // why there is no GPU, or why it went off
};

}  // namespace lmc::fs
