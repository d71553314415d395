// The batched GPU codec (lmc/gpu.h, GpuCodec). Work in progress: the
// kernels land in this file.
#include "lmc/gpu.h"

namespace lmc {

Result<std::unique_ptr<GpuCodec>> GpuCodec::Open(const GpuCodecOptions&) {
  return Status::Unsupported("the batched GPU codec is not built yet");
}

}  // namespace lmc
