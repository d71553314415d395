// The batched GPU codec (lmc/gpu.h, GpuCodec): the pipeline of
// codec/src/gpu_pipeline.h on a CUDA backend, with the kernels of
// gpu_kernels.cuh (which the tests also run on the host's SIMT emulator).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "gpu_kernels.cuh"
#include "gpu_pipeline.h"

namespace lmc {
namespace gpu {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::IOError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Device memory as slabs handed out by a bump pointer; Reset recycles them.
class CudaBackend {
 public:
  CudaBackend() = default;
  CudaBackend(CudaBackend&& o) noexcept { *this = std::move(o); }
  CudaBackend& operator=(CudaBackend&& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(slabs_, o.slabs_);
    std::swap(pinned_, o.pinned_);
    std::swap(events_, o.events_);
    std::swap(name_, o.name_);
    std::swap(profile_, o.profile_);
    std::swap(prof_, o.prof_);
    std::swap(times_, o.times_);
    std::swap(staging_, o.staging_);
    std::swap(staging_size_, o.staging_size_);
    std::swap(device_, o.device_);
    std::swap(turn_, o.turn_);
    std::swap(exact_, o.exact_);
    std::swap(entry_, o.entry_);
    std::swap(alloc_error_, o.alloc_error_);
    return *this;
  }
  ~CudaBackend() {
    for (auto& s : slabs_) cudaFree(s.base);
    for (int k = 0; k < 2; ++k) {
      if (pinned_[k]) cudaFreeHost(pinned_[k]);
      if (events_[k]) cudaEventDestroy(events_[k]);
    }
    if (staging_) cudaFreeHost(staging_);
    if (entry_) cudaEventDestroy(entry_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(int device) {
    device_ = device;
    // LMC_GPU_EXACT_ALLOC=1 (scripts/gpu_check.sh's sanitizer steps): one
    // cudaMalloc an array, freed at Reset, so that compute-sanitizer's
    // memcheck sees each array's bounds (inside a slab it cannot).
    const char* exact = std::getenv("LMC_GPU_EXACT_ALLOC");
    exact_ = exact && std::strcmp(exact, "1") == 0;
    LMC_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "set device"));
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"));
    for (int k = 0; k < 2; ++k) {
      LMC_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&pinned_[k], kPinned), "pinned buffer"));
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&events_[k], cudaEventDisableTiming), "event"));
    }
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&entry_, cudaEventDisableTiming), "event"));
    cudaDeviceProp p;
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&p, device), "device properties"));
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    name_ = "CUDA " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", " + p.name;
    return Status::Ok();
  }

  uint8_t* Alloc(size_t n) {
    if (exact_) {
      Slab s;
      s.size = s.used = n ? n : 1;
      if (const cudaError_t e = cudaMalloc(&s.base, s.size); e != cudaSuccess) {
        cudaGetLastError();
        alloc_error_ = e;
        return nullptr;
      }
      slabs_.push_back(s);
      return s.base;
    }
    n = (n + 255) & ~size_t{255};
    if (n == 0) n = 256;
    for (auto& s : slabs_) {
      if (s.size - s.used >= n) {
        uint8_t* p = s.base + s.used;
        s.used += n;
        return p;
      }
    }
    Slab s;
    s.size = std::max(n, kSlab);
    if (const cudaError_t e = cudaMalloc(&s.base, s.size); e != cudaSuccess) {
      // Not sticky when it is the allocation's own; an earlier kernel's
      // fault (sticky) shows again at the next Sync, which reports it.
      cudaGetLastError();
      alloc_error_ = e;
      return nullptr;
    }
    s.used = n;
    slabs_.push_back(s);
    return s.base;
  }
  void Reset() {
    if (exact_) {
      cudaStreamSynchronize(stream_);  // nothing in flight still uses them
      for (auto& s : slabs_) cudaFree(s.base);
      slabs_.clear();
      return;
    }
    for (auto& s : slabs_) s.used = 0;
  }

  // Host to device through two pinned buffers: the host copy into one
  // overlaps the DMA out of the other.
  Status ToDevice(void* d, const void* h, size_t n) {
    auto* dp = static_cast<uint8_t*>(d);
    auto* hp = static_cast<const uint8_t*>(h);
    for (size_t off = 0; off < n; off += kPinned) {
      const size_t k = std::min(kPinned, n - off);
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[turn_]), "staging wait"));
      std::memcpy(pinned_[turn_], hp + off, k);
      LMC_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(dp + off, pinned_[turn_], k, cudaMemcpyHostToDevice, stream_), "copy in"));
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[turn_], stream_), "event"));
      turn_ ^= 1;
    }
    return Status::Ok();
  }
  // Device to host: the DMA of one piece overlaps the host copy of the last.
  Status ToHost(void* h, const void* d, size_t n) {
    auto* hp = static_cast<uint8_t*>(h);
    auto* dp = static_cast<const uint8_t*>(d);
    size_t pending = 0, pending_off = 0;
    int pending_buf = -1;
    for (size_t off = 0;; off += kPinned) {
      const size_t k = off < n ? std::min(kPinned, n - off) : 0;
      if (k) {
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[turn_]), "staging wait"));
        LMC_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(pinned_[turn_], dp + off, k, cudaMemcpyDeviceToHost, stream_), "copy out"));
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[turn_], stream_), "event"));
      }
      if (pending_buf >= 0) {
        LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[pending_buf]), "copy out wait"));
        std::memcpy(hp + pending_off, pinned_[pending_buf], pending);
      }
      if (!k) break;
      pending = k, pending_off = off, pending_buf = turn_;
      turn_ ^= 1;
    }
    return Status::Ok();
  }
  uint8_t* Pinned(size_t n) {
    if (n > staging_size_) {
      if (staging_) {
        cudaStreamSynchronize(stream_);  // no copy out of it is still in flight
        cudaFreeHost(staging_);
      }
      staging_ = nullptr;
      staging_size_ = 0;
      if (const cudaError_t e = cudaMallocHost(&staging_, n); e != cudaSuccess) {
        cudaGetLastError();
        alloc_error_ = e;
        return nullptr;
      }
      staging_size_ = n;
    }
    return staging_;
  }
  Status ToDeviceAsync(void* d, const void* h, size_t n) {
    return CudaStatus(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream_), "copy in");
  }
  Status ToHostAsync(void* h, const void* d, size_t n) {
    return CudaStatus(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, stream_), "copy out");
  }
  Status ToHostSync(void* h, const void* d, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    return CudaStatus(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "copy out");
  }
  Status ToDeviceSync(void* d, const void* h, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    // On the codec's stream, then waited for: a cudaMemcpy from pageable
    // memory may return before its DMA ends, and the caller reads the
    // outputs once the call returns.
    LMC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream_), "copy in"));
    return Sync();
  }
  Status Zero(void* d, size_t n) { return CudaStatus(cudaMemsetAsync(d, 0, n, stream_), "memset"); }
  // A frame the encoder has just written (the host backend injects faults
  // here; the device is left as it is).
  void AfterEncode(uint8_t*, size_t) {}

  // One kernel on grid x block threads of the codec's stream
  // (gpu_kernels.cuh's LaunchBody picks the kernel and its geometry).
  template <typename... P, typename... A>
  void Kernel(unsigned grid, unsigned block, void (*kernel)(P...), const A&... args) {
    kernel<<<grid, block, 0, stream_>>>(args...);
  }

  template <typename Body, typename Args>
  Status Launch(size_t count, const Args& a) {
    if (count == 0) return Status::Ok();
    // A stale error of an earlier unchecked call (profiling events, a
    // transform) is not this launch's; a sticky one survives this and shows
    // at the next Sync.
    (void)cudaGetLastError();
    if (profile_) cudaEventRecord(prof_[0], stream_);
    LaunchBody<Body>(*this, count, a);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "kernel launch"));
    return ProfileStop(typeid(Body).name());
  }

  Status Histograms(EncStream* dev, uint32_t* hist, const EncStream* host, size_t count,
                    const uint8_t* sbuf) {
    const std::vector<uint64_t> tiles = HistTiles(host, count);
    if (tiles.empty()) return Status::Ok();
    auto* dt = reinterpret_cast<uint64_t*>(Alloc(8 * tiles.size()));
    if (!dt) return Status::IOError("GPU: out of device memory for histogram tiles");
    LMC_RETURN_IF_ERROR(ToDevice(dt, tiles.data(), 8 * tiles.size()));
    if (profile_) cudaEventRecord(prof_[0], stream_);
    Kernel(static_cast<unsigned>(tiles.size()), kHistThreads, HistKernel, dev, hist, dt, sbuf);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "histogram launch"));
    return ProfileStop("HistKernel");
  }

  // With profile_: waits for the kernel launched since prof_[0] was
  // recorded and adds its time under `name`.
  Status ProfileStop(const std::string& name) {
    if (!profile_) return Status::Ok();
    cudaEventRecord(prof_[1], stream_);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(prof_[1]), "kernel"));
    float ms = 0;
    cudaEventElapsedTime(&ms, prof_[0], prof_[1]);
    times_[name] += ms;
    return Status::Ok();
  }

  // Lanes run on threads of their own; the current device is per thread.
  Status Bind() { return CudaStatus(cudaSetDevice(device_), "set device"); }
  // The codec's stream is non-blocking: without this, its kernels would not
  // wait for copies the caller queued on the legacy default stream (a
  // cudaMemcpy from pageable memory may return before its DMA ends).
  Status WaitForDefaultStream() {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(entry_, cudaStreamLegacy), "event"));
    return CudaStatus(cudaStreamWaitEvent(stream_, entry_, 0), "stream wait");
  }
  // Why the last Alloc or Pinned call failed.
  std::string AllocError() const {
    return alloc_error_ == cudaSuccess ? "" : cudaGetErrorString(alloc_error_);
  }
  Status Sync() {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "kernel"));
    return CudaStatus(cudaGetLastError(), "kernel");
  }
  std::string Describe() const { return name_; }
  void HostTime(const char* what, std::chrono::steady_clock::time_point since) {
    if (profile_)
      times_[what] +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
  }
  void EnableProfile() {
    profile_ = true;
    cudaEventCreate(&prof_[0]);
    cudaEventCreate(&prof_[1]);
  }
  std::string Profile() const {
    std::string r;
    for (const auto& [k, v] : times_) r += k + " " + std::to_string(v) + " ms\n";
    return r;
  }

 private:
  static constexpr size_t kSlab = size_t{256} << 20;
  static constexpr size_t kPinned = size_t{8} << 20;
  struct Slab {
    uint8_t* base = nullptr;
    size_t size = 0, used = 0;
  };
  cudaStream_t stream_ = nullptr;
  std::vector<Slab> slabs_;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t events_[2] = {nullptr, nullptr};
  int turn_ = 0;
  int device_ = 0;
  cudaError_t alloc_error_ = cudaSuccess;
  cudaEvent_t entry_ = nullptr;  // WaitForDefaultStream
  bool exact_ = false;
  std::string name_;
  bool profile_ = false;
  cudaEvent_t prof_[2] = {nullptr, nullptr};
  std::map<std::string, double> times_;
  uint8_t* staging_ = nullptr;
  size_t staging_size_ = 0;
};

}  // namespace
}  // namespace gpu

Result<std::unique_ptr<GpuCodec>> GpuCodec::Open(const GpuCodecOptions& o) {
  if (!GpuAvailable()) return Status::Unsupported("no usable CUDA device: " + GpuDescription());
  LMC_RETURN_IF_ERROR(gpu::CheckGpuCodecOptions(o));
  std::vector<gpu::CudaBackend> lanes(static_cast<size_t>(std::max(1, o.lanes)));
  for (auto& be : lanes) {
    LMC_RETURN_IF_ERROR(be.Init(o.device));
    if (o.profile) be.EnableProfile();
  }
  return std::unique_ptr<GpuCodec>(std::make_unique<gpu::BatchCodec<gpu::CudaBackend>>(std::move(lanes), o));
}

}  // namespace lmc
