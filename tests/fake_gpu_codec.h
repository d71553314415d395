// A GpuCodec test double: the interface of lmc/gpu.h implemented with the
// CPU codec (EncodeChunk with EncodeProfile::kGpu, DecodeChunk), so the
// GPU paths of the container, the mount and the tools run in CI without a
// GPU. It can fail the N-th batch call as a device would (a non-OK status,
// items left invalid) or refuse items of one size, and counts what it was
// given.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "lmc/codec.h"
#include "lmc/gpu.h"

namespace lmc::testing {

class FakeGpuCodec : public GpuCodec {
 public:
  // fail_batch: the 1-based batch call (encode and decode counted together)
  // that fails with a device error; 0: none.
  explicit FakeGpuCodec(uint64_t fail_batch = 0) : fail_batch_(fail_batch) {}

  Status EncodeBatch(GpuEncodeItem* items, size_t count) override {
    auto lk = Enter();
    Status s = Fail(count);
    if (s.ok()) {
      for (size_t i = 0; i < count; i++) {
        GpuEncodeItem& it = items[i];
        EncodeParams p;
        p.dtype = it.dtype;
        p.base = it.base;
        p.profile = EncodeProfile::kGpu;
        p.widened_base_offset = it.widened_base_offset;
        p.base_len = it.base_len;
        paired_items_ += it.widened_base_offset.has_value();
        if (refuse_n && it.n == refuse_n) {
          it.status = Status::InvalidArgument("refused by the test");
          continue;
        }
        auto r = EncodeChunk(it.src, it.n, p, it.dst, it.cap, ws_);
        it.status = r.ok() ? Status::Ok() : r.status();
        it.len = r.ok() ? *r : 0;
        if (r.ok()) {
          stats_.encode_chunks++;
          stats_.encode_bytes += it.n;
        }
      }
      stats_.batches++;
    }
    return s;
  }

  Status DecodeBatch(GpuDecodeItem* items, size_t count) override {
    {
      // HoldDecodes: wait here (outside the codec's lock) until released.
      std::unique_lock hl(hold_mu_);
      held_decodes_ += hold_;
      hold_cv_.notify_all();
      hold_cv_.wait(hl, [&] { return !hold_; });
    }
    auto lk = Enter();
    Status s = Fail(count);
    if (s.ok()) {
      for (size_t i = 0; i < count; i++) {
        GpuDecodeItem& it = items[i];
        decode_items_with_base_ += it.base != nullptr;
        auto r = DecodeChunk(it.frame, it.len, it.base, it.base_len, it.dst, it.cap, ws_);
        it.status = r.ok() ? Status::Ok() : r.status();
        it.out_len = r.ok() ? *r : 0;
        if (r.ok()) {
          stats_.decode_chunks++;
          stats_.decode_bytes += it.out_len;
        }
      }
      stats_.batches++;
    }
    return s;
  }

  Status EncodeBatchDevice(GpuEncodeItem*, size_t) override {
    return Status::Unsupported("the fake GPU codec has no device memory");
  }
  Status DecodeBatchDevice(GpuDecodeItem*, size_t) override {
    return Status::Unsupported("the fake GPU codec has no device memory");
  }

  GpuCodecStats stats() const override {
    std::lock_guard lk(mu_);
    return stats_;
  }
  std::string description() const override { return "fake GPU codec (CPU)"; }

  // Encode items of this many bytes get a per-item error (the batch runs).
  size_t refuse_n = 0;

  uint64_t calls() const { return calls_.load(); }
  uint64_t items_seen() const { return items_seen_.load(); }
  // Encode items with a widened (bf16 twin) base.
  uint64_t paired_items() const { return paired_items_.load(); }
  // Decode items with a base (deltas, fp32 masters on their twins).
  uint64_t decode_items_with_base() const { return decode_items_with_base_.load(); }
  bool overlapped() const { return overlapped_.load(); }

  // Decode batches wait on entry while held (a device busy for as long as
  // the test wants); HeldDecodes counts the calls that waited.
  void HoldDecodes() {
    std::lock_guard lk(hold_mu_);
    hold_ = true;
  }
  void ReleaseDecodes() {
    {
      std::lock_guard lk(hold_mu_);
      hold_ = false;
    }
    hold_cv_.notify_all();
  }
  uint64_t HeldDecodes() {
    std::lock_guard lk(hold_mu_);
    return held_decodes_;
  }
  // Waits up to `ms` for n decode calls to be held.
  bool WaitHeldDecodes(uint64_t n, int ms = 10000) {
    std::unique_lock lk(hold_mu_);
    return hold_cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return held_decodes_ >= n; });
  }

 private:
  // The real codec is not thread-safe: a caller that finds another inside
  // is recorded (overlapped()), then waits.
  std::unique_lock<std::mutex> Enter() {
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock()) {
      overlapped_ = true;
      lk.lock();
    }
    return lk;
  }
  // Counts the call; a failing one scribbles over nothing and says "device".
  Status Fail(size_t count) {
    const uint64_t n = ++calls_;
    items_seen_ += count;
    if (fail_batch_ && n == fail_batch_)
      return Status::IOError(
          "CUDA error 700 (an illegal memory access was encountered), injected by the test");
    return Status::Ok();
  }

  const uint64_t fail_batch_;
  mutable std::mutex mu_;
  Workspace ws_;
  GpuCodecStats stats_;
  std::atomic<uint64_t> calls_{0}, items_seen_{0}, paired_items_{0}, decode_items_with_base_{0};
  std::atomic<bool> overlapped_{false};
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_ = false;          // guarded by hold_mu_
  uint64_t held_decodes_ = 0;  // guarded by hold_mu_
};

}  // namespace lmc::testing
