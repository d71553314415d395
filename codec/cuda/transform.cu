// CUDA byte-plane transforms: the same bytes as codec/src/transform.cc (the
// reference), one thread per element. docs/FORMAT.md, "Transforms".
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "lmc/gpu.h"

namespace lmc {
namespace {

template <typename U>
__device__ U RotL1(U v) {
  return static_cast<U>((v << 1) | (v >> (sizeof(U) * 8 - 1)));
}
template <typename U>
__device__ U RotR1(U v) {
  return static_cast<U>((v >> 1) | (v << (sizeof(U) * 8 - 1)));
}

template <typename U>
__global__ void SplitKernel(const uint8_t* src, const uint8_t* base, uint8_t* dst, size_t elems, bool rot) {
  constexpr int w = sizeof(U);
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= elems) return;
  U v = 0;
  for (int b = 0; b < w; ++b) v |= static_cast<U>(src[i * w + b]) << (8 * b);
  if (base) {
    U x = 0;
    for (int b = 0; b < w; ++b) x |= static_cast<U>(base[i * w + b]) << (8 * b);
    v ^= x;
  }
  if (rot) v = RotL1(v);
  for (int b = 0; b < w; ++b) dst[b * elems + i] = static_cast<uint8_t>(v >> (8 * (w - 1 - b)));
}

template <typename U>
__global__ void MergeKernel(const uint8_t* streams, const uint8_t* base, uint8_t* dst, size_t elems,
                            bool rot) {
  constexpr int w = sizeof(U);
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= elems) return;
  U v = 0;
  for (int b = 0; b < w; ++b) v |= static_cast<U>(streams[b * elems + i]) << (8 * (w - 1 - b));
  if (rot) v = RotR1(v);
  if (base) {
    U x = 0;
    for (int b = 0; b < w; ++b) x |= static_cast<U>(base[i * w + b]) << (8 * b);
    v ^= x;
  }
  for (int b = 0; b < w; ++b) dst[i * w + b] = static_cast<uint8_t>(v >> (8 * b));
}

__global__ void XorKernel(const uint8_t* src, const uint8_t* base, uint8_t* dst, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = base ? (src[i] ^ base[i]) : src[i];
}

bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}

Status CudaError(cudaError_t e, const char* what) {
  return Status::IOError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Device buffers freed on scope exit.
struct DevBuf {
  uint8_t* p = nullptr;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

template <bool kSplit>
Status Run(DType t, const uint8_t* in, size_t n, const uint8_t* base, uint8_t* out) {
  if (!GpuAvailable()) return Status::Unsupported("no usable CUDA device");
  if (n == 0) return Status::Ok();
  DevBuf din, dbase, dout;
  cudaError_t e;
  if ((e = cudaMalloc(&din.p, n)) != cudaSuccess) return CudaError(e, "malloc");
  if ((e = cudaMalloc(&dout.p, n)) != cudaSuccess) return CudaError(e, "malloc");
  if ((e = cudaMemcpy(din.p, in, n, cudaMemcpyHostToDevice)) != cudaSuccess) return CudaError(e, "copy");
  if (base) {
    if ((e = cudaMalloc(&dbase.p, n)) != cudaSuccess) return CudaError(e, "malloc");
    if ((e = cudaMemcpy(dbase.p, base, n, cudaMemcpyHostToDevice)) != cudaSuccess)
      return CudaError(e, "copy");
  }
  const size_t w = DTypeWidth(t), elems = n / w, tail = n % w;
  const bool rot = IsFloat(t);
  const int threads = 256;
  auto blocks = [&](size_t k) { return static_cast<unsigned>((k + threads - 1) / threads); };
  if (w == 1) {
    XorKernel<<<blocks(n), threads>>>(din.p, dbase.p, dout.p, n);
  } else if (elems > 0) {
#define LMC_LAUNCH(U)                                                               \
  if (kSplit)                                                                       \
    SplitKernel<U><<<blocks(elems), threads>>>(din.p, dbase.p, dout.p, elems, rot); \
  else                                                                              \
    MergeKernel<U><<<blocks(elems), threads>>>(din.p, dbase.p, dout.p, elems, rot);
    if (w == 2) {
      LMC_LAUNCH(uint16_t)
    } else if (w == 4) {
      LMC_LAUNCH(uint32_t)
    } else {
      LMC_LAUNCH(uint64_t)
    }
#undef LMC_LAUNCH
  }
  if (w > 1 && tail) {
    size_t done = w * elems;
    XorKernel<<<1, threads>>>(din.p + done, dbase.p ? dbase.p + done : nullptr, dout.p + done, tail);
  }
  if ((e = cudaGetLastError()) != cudaSuccess) return CudaError(e, "launch");
  if ((e = cudaMemcpy(out, dout.p, n, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return CudaError(e, "copy back");
  return Status::Ok();
}

}  // namespace

bool GpuAvailable() {
  static const bool ok = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return ok;
}

std::string GpuDescription() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("none (") + cudaGetErrorString(e) + ")";
  if (n == 0) return "none (no CUDA device)";
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  return "CUDA " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", " + p.name;
}

Status GpuSplitStreams(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst) {
  return Run<true>(t, src, n, base, dst);
}
Status GpuMergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst) {
  return Run<false>(t, streams, n, base, dst);
}

}  // namespace lmc
