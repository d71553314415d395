// libFuzzer target for the chunk decoder and the .lmc container reader.
// Any input must decode or fail cleanly (ASan catches out-of-bounds
// accesses); and any input, encoded as a chunk of any dtype with or without
// a base, must decode back to itself.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/thread_pool.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lmc::Workspace ws;
  static lmc::ThreadPool pool(1);
  // 1. Arbitrary bytes as a frame, with and without a base.
  std::vector<uint8_t> frame(data, data + size);  // exact size: overreads are caught
  std::vector<uint8_t> out(1 << 16), base(1 << 16, 0x5a);
  for (size_t blen : {size_t{0}, base.size()}) {
    lmc::Result<lmc::FrameInfo> fi = lmc::ReadFrameInfo(frame.data(), frame.size());
    size_t b = fi.ok() ? std::min<size_t>(fi->decoded_size, blen) : 0;
    (void)lmc::DecodeChunk(frame.data(), frame.size(), blen ? base.data() : nullptr, b, out.data(),
                           out.size(), ws);
  }
  // 2. Arbitrary bytes as a container.
  lmc::DecompressOptions dopt;
  dopt.pool = &pool;
  std::vector<uint8_t> dec;
  (void)lmc::DecompressBufferInto(frame.data(), frame.size(), dopt, &dec);
  // 3. Round trip: the input as a chunk of the dtype its first byte picks,
  // delta-coded against a shifted copy of itself when the second byte says so.
  if (size >= 2) {
    lmc::DType t = static_cast<lmc::DType>(data[0] % lmc::kNumDTypes);
    bool delta = data[1] & 1;
    const uint8_t* src = data + 2;
    size_t n = size - 2;
    std::vector<uint8_t> bbuf(n);
    for (size_t i = 0; i < n; ++i) bbuf[i] = src[(i + 1) % n] ^ static_cast<uint8_t>(i);
    std::vector<uint8_t> enc(lmc::MaxEncodedSize(n)), back(n);
    lmc::Result<size_t> e = lmc::EncodeChunk(src, n, lmc::EncodeParams{t, delta ? bbuf.data() : nullptr},
                                             enc.data(), enc.size(), ws);
    if (!e.ok()) abort();
    lmc::Result<size_t> d = lmc::DecodeChunk(enc.data(), *e, delta ? bbuf.data() : nullptr, delta ? n : 0,
                                             back.data(), back.size(), ws);
    if (!d.ok() || *d != n || std::memcmp(back.data(), src, n) != 0) abort();
  }
  return 0;
}
