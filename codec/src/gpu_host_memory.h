// Device memory and copies for the GPU pipeline's host backends (the
// pipeline's backend interface, gpu_pipeline.h): "device" arrays are host
// allocations, one each, filled with a pattern (the device does not zero
// either, so a kernel that relies on zeroed memory fails on the host too),
// and every copy is a memcpy that has completed when it returns.
// gpu_emulator.cc runs kernel bodies in loops on them, the SIMT emulator of
// the tests (tests/codec/gpu_simt_test.cc) the CUDA kernels themselves.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "lmc/status.h"

namespace lmc::gpu {

class HostMemory {
 public:
  uint8_t* Alloc(size_t n) {
    auto p = std::make_unique_for_overwrite<uint8_t[]>(n ? n : 1);
    std::memset(p.get(), 0xA5, n ? n : 1);
    allocs_.push_back(std::move(p));
    return allocs_.back().get();
  }
  void Reset() { allocs_.clear(); }
  Status ToDevice(void* d, const void* h, size_t n) {
    if (n) std::memcpy(d, h, n);
    return Status::Ok();
  }
  Status ToHost(void* h, const void* d, size_t n) { return ToDevice(h, d, n); }
  Status ToHostSync(void* h, const void* d, size_t n) { return ToDevice(h, d, n); }
  Status ToDeviceSync(void* d, const void* h, size_t n) { return ToDevice(d, h, n); }
  uint8_t* Pinned(size_t n) {
    if (pinned_.size() < n) pinned_.resize(n);
    return pinned_.data();
  }
  Status ToDeviceAsync(void* d, const void* h, size_t n) { return ToDevice(d, h, n); }
  Status ToHostAsync(void* h, const void* d, size_t n) { return ToDevice(h, d, n); }
  Status Zero(void* d, size_t n) {
    if (n) std::memset(d, 0, n);
    return Status::Ok();
  }
  Status Sync() { return Status::Ok(); }
  Status Bind() { return Status::Ok(); }
  Status WaitForDefaultStream() { return Status::Ok(); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> allocs_;
  std::vector<uint8_t> pinned_;
};

}  // namespace lmc::gpu
