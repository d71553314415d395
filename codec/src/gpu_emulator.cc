// The GPU pipeline on a host backend (gpu_pipeline.h): every kernel body run
// in a loop on the CPU, so that tests without a GPU run the same planning,
// tables and bodies as the CUDA backend.
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gpu_host_memory.h"
#include "gpu_pipeline.h"

namespace lmc::gpu {
namespace {

// The injected faults' counters, shared by the lanes.
struct FaultState {
  EmulatedFaults plan;
  std::atomic<uint64_t> launches{0}, allocs{0}, frames{0};
};

class HostBackend : public HostMemory {
 public:
  HostBackend() = default;
  explicit HostBackend(std::shared_ptr<FaultState> f) : faults_(std::move(f)) {}

  uint8_t* Alloc(size_t n) {
    if (faults_ && faults_->plan.fail_alloc && ++faults_->allocs == faults_->plan.fail_alloc) {
      alloc_error_ = "emulated: out of device memory";
      return nullptr;
    }
    return HostMemory::Alloc(n);
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
  std::string AllocError() const { return alloc_error_; }
  void HostTime(const char*, std::chrono::steady_clock::time_point) {}
  std::string Describe() const { return "host emulation of the GPU pipeline"; }
  std::string Profile() const { return ""; }

 private:
  std::shared_ptr<FaultState> faults_;
  std::string alloc_error_;
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
