// Optional CUDA path of the codec (built when nvcc is found at configure
// time, see LMC_CUDA in CMakeLists.txt). Every function works in every
// build: without CUDA, or without a usable GPU at run time, GpuAvailable()
// is false and the others return Unsupported, and callers use the CPU path.
// The CPU path (transform.cc) is the reference the GPU path is tested
// against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lmc/dtype.h"
#include "lmc/status.h"

namespace lmc {

// True when this build has the CUDA path and a CUDA device is usable.
bool GpuAvailable();
// "CUDA 13.0, NVIDIA H100 80GB HBM3" or why there is none.
std::string GpuDescription();

// SplitStreams / MergeStreams (transform.h) computed on the GPU, on host
// buffers (copied to and from the device). Same contract and output bytes as
// the CPU functions.
Status GpuSplitStreams(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst);
Status GpuMergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst);

}  // namespace lmc
