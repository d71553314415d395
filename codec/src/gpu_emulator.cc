// The GPU pipeline on a host backend (gpu_pipeline.h): every kernel body run
// in a loop on the CPU, so that tests without a GPU run the same planning,
// tables and bodies as the CUDA backend.
#include <algorithm>
#include <memory>
#include <vector>

#include "gpu_pipeline.h"

namespace lmc::gpu {
namespace {

class HostBackend {
 public:
  uint8_t* Alloc(size_t n) {
    // Filled with a pattern, not zeros: the device does not zero either, so
    // a body that relies on zeroed memory fails here too.
    auto p = std::make_unique<uint8_t[]>(n ? n : 1);
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
  template <typename Body, typename Args>
  Status Launch(size_t count, const Args& a) {
    for (size_t i = 0; i < count; ++i) Body::Run(a, i);
    return Status::Ok();
  }
  Status Histograms(EncStream*, uint32_t* hist, const EncStream* host, size_t count, const uint8_t* sbuf) {
    for (size_t s = 0; s < count; ++s) Histogram(sbuf + host[s].buf, host[s].n, hist + 256 * s);
    return Status::Ok();
  }
  Status Sync() { return Status::Ok(); }
  Status Bind() { return Status::Ok(); }
  std::string AllocError() const { return ""; }
  Status WaitForDefaultStream() { return Status::Ok(); }
  void HostTime(const char*, std::chrono::steady_clock::time_point) {}
  std::string Describe() const { return "host emulation of the GPU pipeline"; }
  std::string Profile() const { return ""; }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> allocs_;
  std::vector<uint8_t> pinned_;
};

}  // namespace

std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o) {
  if (!CheckGpuCodecOptions(o).ok()) return nullptr;
  std::vector<HostBackend> lanes(static_cast<size_t>(std::max(1, o.lanes)));
  return std::make_unique<BatchCodec<HostBackend>>(std::move(lanes), o);
}

}  // namespace lmc::gpu
