// Host-device functions: the per-thread and per-block logic of the GPU codec
// (bit readers and writers, table builds and lookups, block partitioning,
// offset tables, checksums) written once, compiled by nvcc for the device
// and by the host compiler for the CPU codec and its unit tests, so that CI
// tests on machines without a GPU the same code the kernels run.
// Rules for code under codec/src/hd/: no allocation, no exceptions, no
// standard library beyond <cstdint>/<cstddef>, fixed-size arrays only.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define LMC_HD __host__ __device__ __forceinline__
#define LMC_HD_NOINLINE __host__ __device__
#if defined(__CUDA_ARCH__)
#define LMC_UNROLL _Pragma("unroll")
#else
#define LMC_UNROLL
#endif
#else
#define LMC_UNROLL
#define LMC_HD inline
#define LMC_HD_NOINLINE inline
#endif
