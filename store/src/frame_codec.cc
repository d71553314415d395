#include "lmc/layout.h"
#include "lmc/store/store.h"

namespace lmc::store {
namespace {

class LmcCodec final : public FrameCodec {
 public:
  Result<size_t> Decode(const uint8_t* frame, size_t len, const uint8_t* base, size_t base_len, uint8_t* dst,
                        size_t cap, Workspace& ws) const override {
    return lmc::DecodeChunk(frame, len, base, base_len, dst, cap, ws);
  }
  Result<std::string> EncodeStandalone(const uint8_t* p, size_t n, Workspace& ws) const override {
    std::string frame(lmc::MaxEncodedSize(n), '\0');
    EncodeParams params;
    params.dtype = lmc::DetectDType(p, n);
    LMC_ASSIGN_OR_RETURN(size_t len, lmc::EncodeChunk(p, n, params, reinterpret_cast<uint8_t*>(frame.data()),
                                                      frame.size(), ws));
    frame.resize(len);
    return frame;
  }
};

}  // namespace

const FrameCodec* LmcFrameCodec() {
  static const LmcCodec codec;
  return &codec;
}

}  // namespace lmc::store
