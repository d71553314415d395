// The mount's GPU codec (gpu_path.h).
#include "gpu_path.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "ns_timer.h"

namespace lmc::fs {

GpuPath::GpuPath(GpuCodec* codec, std::string none_reason, size_t min_batch_bytes, size_t batch_bytes,
                 FsCounters* counters, bool first)
    : codec_(codec),
      min_batch_bytes_(min_batch_bytes),
      batch_bytes_(std::max(batch_bytes, min_batch_bytes)),
      first_(first),
      counters_(*counters),
      active_(codec != nullptr),
      state_(codec ? "" : std::move(none_reason)) {}

template <typename Fn>
Status GpuPath::Run(size_t count, const std::string& what, Fn&& call) {
  std::lock_guard lk(mu_);
  if (!active()) return Status::Aborted("the GPU codec is off");
  Status s;
  try {
    s = call();
  } catch (const std::exception& e) {
    s = Status::IOError(std::string("exception from the GPU codec: ") + e.what());
  }
  if (s.ok()) {
    counters_.gpu_batches++;
    return s;
  }
  active_.store(false, std::memory_order_release);
  state_ = s.ToString();
  counters_.gpu_failed_batches++;
  counters_.gpu_fallback_chunks += count;
  spdlog::warn(
      "lmcfs: GPU codec failed {} ({}); the GPU is off for the rest of this mount, that batch and all "
      "later work run on the CPU, nothing is lost",
      what, s.ToString());
  return s;
}

Status GpuPath::EncodeBatch(GpuEncodeItem* items, size_t count, const std::string& what) {
  uint64_t failed = 0;
  Status s = Run(count, "encoding " + what, [&] {
    NsTimer t(counters_.gpu_encode_call_ns);
    const uint64_t before = codec_->stats().encode_verify_failures;
    Status st = codec_->EncodeBatch(items, count);
    failed = codec_->stats().encode_verify_failures - before;
    return st;
  });
  if (s.ok() && failed) {
    // GpuCodecOptions::verify_encode: frames that did not decode back on
    // the device; the codec encoded those chunks again on the CPU, so the
    // items are right. A device that writes such frames is not trusted
    // with more.
    std::lock_guard lk(mu_);
    counters_.gpu_verify_failures += failed;
    if (active()) {
      active_.store(false, std::memory_order_release);
      state_ = std::to_string(failed) + " frame(s) it wrote did not decode back on it";
      spdlog::warn(
          "lmcfs: the GPU wrote {} frame(s) that did not decode back on it while encoding {} (a faulty "
          "device or a GPU codec bug); the CPU encoded those chunks, nothing is lost; the GPU is off for "
          "the rest of this mount. Check the device (nvidia-smi -q, Xid lines in the kernel log) and report "
          "it with this log; mount with gpu=off to keep it off",
          failed, what);
    }
  }
  return s;
}

Status GpuPath::DecodeBatch(GpuDecodeItem* items, size_t count, const std::string& what) {
  return Run(count, "decoding " + what, [&] {
    NsTimer t(counters_.gpu_decode_call_ns);
    return codec_->DecodeBatch(items, count);
  });
}

std::string GpuPath::State() const {
  std::lock_guard lk(mu_);
  if (!codec_) return "none (" + state_ + ")";
  if (active()) return codec_->description() + " (active)";
  return codec_->description() + " (off after a device failure: " + state_ + ")";
}

}  // namespace lmc::fs
