// The batched GPU codec (lmc/gpu.h, GpuCodec): the pipeline of
// codec/src/gpu_pipeline.h on a CUDA backend. Each kernel body runs one
// thread per index; the histogram is the one CUDA-only kernel (shared-memory
// counts, one set per warp, merged into the stream's histogram).
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "gpu_pipeline.h"

namespace lmc {
namespace gpu {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::IOError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

template <typename Body, typename Args>
__global__ void BodyKernel(Args a, size_t count) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < count) Body::Run(a, i);
}

constexpr uint32_t kHistTile = 1 << 16;
constexpr int kHistCopies = 8;

__global__ void HistKernel(EncStream* streams, const uint64_t* tiles, const uint8_t* sbuf) {
  __shared__ uint32_t h[kHistCopies][256];
  for (int t = threadIdx.x; t < kHistCopies * 256; t += blockDim.x) h[t / 256][t % 256] = 0;
  __syncthreads();
  const uint64_t tile = tiles[blockIdx.x];
  EncStream& s = streams[tile >> 40];
  const uint64_t off = tile & ((uint64_t{1} << 40) - 1);
  const uint64_t end = off + kHistTile < s.n ? off + kHistTile : s.n;
  uint32_t* mine = h[(threadIdx.x / 32) % kHistCopies];
  const uint8_t* p = sbuf + s.buf;
  for (uint64_t k = off + threadIdx.x; k < end; k += blockDim.x) atomicAdd(&mine[p[k]], 1u);
  __syncthreads();
  for (int t = threadIdx.x; t < 256; t += blockDim.x) {
    uint32_t v = 0;
    for (int c = 0; c < kHistCopies; ++c) v += h[c][t];
    if (v) atomicAdd(&s.hist[t], v);
  }
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
    return *this;
  }
  ~CudaBackend() {
    for (auto& s : slabs_) cudaFree(s.base);
    for (int k = 0; k < 2; ++k) {
      if (pinned_[k]) cudaFreeHost(pinned_[k]);
      if (events_[k]) cudaEventDestroy(events_[k]);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(int device) {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "set device"));
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"));
    for (int k = 0; k < 2; ++k) {
      LMC_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&pinned_[k], kPinned), "pinned buffer"));
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&events_[k], cudaEventDisableTiming), "event"));
    }
    cudaDeviceProp p;
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&p, device), "device properties"));
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    name_ = "CUDA " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", " + p.name;
    return Status::Ok();
  }

  uint8_t* Alloc(size_t n) {
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
    if (cudaMalloc(&s.base, s.size) != cudaSuccess) {
      cudaGetLastError();  // not sticky; the caller reports the failure
      return nullptr;
    }
    s.used = n;
    slabs_.push_back(s);
    return s.base;
  }
  void Reset() {
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
  Status ToHostSync(void* h, const void* d, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    return CudaStatus(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "copy out");
  }
  Status ToDeviceSync(void* d, const void* h, size_t n) {
    LMC_RETURN_IF_ERROR(Sync());
    return CudaStatus(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "copy in");
  }
  Status Zero(void* d, size_t n) { return CudaStatus(cudaMemsetAsync(d, 0, n, stream_), "memset"); }

  template <typename Body, typename Args>
  Status Launch(size_t count, const Args& a) {
    if (count == 0) return Status::Ok();
    constexpr unsigned kThreads = 128;
    const size_t blocks = (count + kThreads - 1) / kThreads;
    if (profile_) cudaEventRecord(prof_[0], stream_);
    BodyKernel<Body, Args><<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(a, count);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "kernel launch"));
    if (profile_) {
      cudaEventRecord(prof_[1], stream_);
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(prof_[1]), "kernel"));
      float ms = 0;
      cudaEventElapsedTime(&ms, prof_[0], prof_[1]);
      std::string name = typeid(Body).name();
      times_[name] += ms;
    }
    return Status::Ok();
  }

  Status Histograms(EncStream* dev, const EncStream* host, size_t count, const uint8_t* sbuf) {
    std::vector<uint64_t> tiles;
    for (size_t s = 0; s < count; ++s)
      for (uint64_t k = 0; k < host[s].n; k += kHistTile) tiles.push_back(uint64_t{s} << 40 | k);
    if (tiles.empty()) return Status::Ok();
    auto* dt = reinterpret_cast<uint64_t*>(Alloc(8 * tiles.size()));
    if (!dt) return Status::IOError("GPU: out of device memory for histogram tiles");
    LMC_RETURN_IF_ERROR(ToDevice(dt, tiles.data(), 8 * tiles.size()));
    if (profile_) cudaEventRecord(prof_[0], stream_);
    HistKernel<<<static_cast<unsigned>(tiles.size()), 256, 0, stream_>>>(dev, dt, sbuf);
    LMC_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "histogram launch"));
    if (profile_) {
      cudaEventRecord(prof_[1], stream_);
      LMC_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(prof_[1]), "kernel"));
      float ms = 0;
      cudaEventElapsedTime(&ms, prof_[0], prof_[1]);
      times_["HistKernel"] += ms;
    }
    return Status::Ok();
  }

  Status Sync() {
    LMC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "kernel"));
    return CudaStatus(cudaGetLastError(), "kernel");
  }
  std::string Describe() const { return name_; }
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
  std::string name_;
  bool profile_ = false;
  cudaEvent_t prof_[2] = {nullptr, nullptr};
  std::map<std::string, double> times_;
};

}  // namespace
}  // namespace gpu

Result<std::unique_ptr<GpuCodec>> GpuCodec::Open(const GpuCodecOptions& o) {
  if (!GpuAvailable()) return Status::Unsupported("no usable CUDA device: " + GpuDescription());
  gpu::CudaBackend be;
  LMC_RETURN_IF_ERROR(be.Init(o.device));
  if (o.profile) be.EnableProfile();
  return std::unique_ptr<GpuCodec>(std::make_unique<gpu::BatchCodec<gpu::CudaBackend>>(std::move(be), o));
}

}  // namespace lmc
