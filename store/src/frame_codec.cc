#include "lmc/store/store.h"

namespace lmc::store {
namespace {

class LmcCodec final : public FrameCodec {
 public:
  Result<size_t> Decode(const uint8_t* frame, size_t len, const uint8_t* base, size_t base_len, uint8_t* dst,
                        size_t cap, Workspace& ws) const override {
    return lmc::DecodeChunk(frame, len, base, base_len, dst, cap, ws);
  }
};

}  // namespace

const FrameCodec* LmcFrameCodec() {
  static const LmcCodec codec;
  return &codec;
}

}  // namespace lmc::store
