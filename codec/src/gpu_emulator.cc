// The GPU pipeline on a host backend (gpu_pipeline.h): every kernel body run
// in a loop on the CPU, so that tests without a GPU run the same planning,
// tables and bodies as the CUDA backend.
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gpu_pipeline.h"

namespace lmc::gpu {
namespace {

// The injected faults' counters, shared by the lanes.
struct FaultState {
  EmulatedFaults plan;
  std::atomic<uint64_t> launches{0}, allocs{0}, frames{0};
};

class HostBackend {
 public:
  HostBackend() = default;
  explicit HostBackend(std::shared_ptr<FaultState> f) : faults_(std::move(f)) {}

  uint8_t* Alloc(size_t n) {
    if (faults_ && faults_->plan.fail_alloc && ++faults_->allocs == faults_->plan.fail_alloc) {
      alloc_error_ = "emulated: out of device memory";
      return nullptr;
    }
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
    if (faults_ && (faults_->plan.fail_launch || faults_->plan.throw_launch)) {
      const uint64_t k = ++faults_->launches;
      if (k == faults_->plan.fail_launch) return Status::IOError("emulated: kernel launch failed");
      if (k == faults_->plan.throw_launch) throw std::bad_alloc();
    }
    for (size_t i = 0; i < count; ++i) Body::Run(a, i);
    return Status::Ok();
  }
  Status Histograms(EncStream*, uint32_t* hist, const EncStream* host, size_t count, const uint8_t* sbuf) {
    for (size_t s = 0; s < count; ++s) Histogram(sbuf + host[s].buf, host[s].n, hist + 256 * s);
    return Status::Ok();
  }
  // A frame the encoder has just written to device memory (EncodeOneBatch).
  void AfterEncode(uint8_t* frame, size_t len) {
    if (!faults_ || !faults_->plan.flip_frame || !len) return;
    if (++faults_->frames == faults_->plan.flip_frame)
      frame[std::min<size_t>(len - 1, len * faults_->plan.flip_at_permille / 1000)] ^= 0x10;
  }
  Status Sync() { return Status::Ok(); }
  Status Bind() { return Status::Ok(); }
  std::string AllocError() const { return alloc_error_; }
  Status WaitForDefaultStream() { return Status::Ok(); }
  void HostTime(const char*, std::chrono::steady_clock::time_point) {}
  std::string Describe() const { return "host emulation of the GPU pipeline"; }
  std::string Profile() const { return ""; }

 private:
  std::shared_ptr<FaultState> faults_;
  std::string alloc_error_;
  std::vector<std::unique_ptr<uint8_t[]>> allocs_;
  std::vector<uint8_t> pinned_;
};

}  // namespace

std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o) {
  return OpenHostEmulatedCodec(o, {});
}

std::unique_ptr<GpuCodec> OpenHostEmulatedCodec(const GpuCodecOptions& o, const EmulatedFaults& faults) {
  if (!CheckGpuCodecOptions(o).ok()) return nullptr;
  auto state = std::make_shared<FaultState>();
  state->plan = faults;
  std::vector<HostBackend> lanes;
  for (int l = 0; l < std::max(1, o.lanes); ++l) lanes.emplace_back(state);
  return std::make_unique<BatchCodec<HostBackend>>(std::move(lanes), o);
}

}  // namespace lmc::gpu
