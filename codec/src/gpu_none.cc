// The codec's GPU entry points in a build without CUDA.
#include "lmc/gpu.h"

namespace lmc {

bool GpuAvailable() { return false; }
std::string GpuDescription() { return "none (built without CUDA)"; }
Status GpuSplitStreams(DType, const uint8_t*, size_t, const uint8_t*, uint8_t*) {
  return Status::Unsupported("lmc was built without CUDA");
}
Status GpuMergeStreams(DType, const uint8_t*, size_t, const uint8_t*, uint8_t*) {
  return Status::Unsupported("lmc was built without CUDA");
}
Result<std::unique_ptr<GpuCodec>> GpuCodec::Open(const GpuCodecOptions&) {
  return Status::Unsupported("lmc was built without CUDA (no nvcc at build time)");
}

}  // namespace lmc
