// libFuzzer target for the chunk decoder and the .lmc container reader.
// Any input must decode or fail cleanly (ASan catches out-of-bounds
// accesses); and any input, encoded as a chunk of any dtype with or without
// a base (by the CPU profile, or the 4-sub-stream one of older stores; in
// Huffman blocks of 2^8 to 2^12 symbols), must decode back to itself. The GPU codec's pipeline (its host
// emulation: the planning and kernel bodies the CUDA backend runs) must
// give the CPU decoder's status and bytes for those frames (half of the
// inputs), and for the GPU profile's frame of the input with one payload
// byte changed (a malformed stream behind a valid header, which the device
// path parses and decodes before any checksum).
// Streams are sampled from 16 KiB here, not from 64 KiB as in the codec, so
// that inputs within CI's 70,000-byte limit reach what a sample opens: the
// likely values' vector histograms and, on their codes, the pair coder.
// (A histogram that is wrong costs a frame only ratio: the Huffman coder
// refuses it and the stream is stored raw. So those histograms are also
// checked directly against the scalar loop's, on every input.)
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "entropy.h"
#include "gpu_pipeline.h"
#include "huffman.h"
#include "lmc/codec.h"
#include "lmc/container.h"
#include "lmc/gpu.h"
#include "lmc/thread_pool.h"
#include "lmc/transform.h"
#include "transform_internal.h"

namespace {

// The emulated GPU decoder against the CPU's on one frame: the same status
// code, and the same bytes when it decodes.
// Its device entry point reads the frame in place (the host one stages it
// into padded buffers), from a copy of exactly its size: ASan sees any read
// past its end.
void GpuDecodesAsTheCpu(const std::vector<uint8_t>& frame_in, const uint8_t* base, size_t base_len,
                        size_t cap, lmc::Workspace& ws) {
  static std::unique_ptr<lmc::GpuCodec> gpu = lmc::gpu::OpenHostEmulatedCodec();
  const std::vector<uint8_t> frame(frame_in.begin(), frame_in.end());
  std::vector<uint8_t> out(cap, 0xEE), ref(cap);
  lmc::GpuDecodeItem it;
  it.frame = frame.data();
  it.len = frame.size();
  it.base = base;
  it.base_len = base_len;
  it.dst = out.data();
  it.cap = out.size();
  if (!gpu->DecodeBatchDevice(&it, 1).ok()) abort();  // only a device failure fails the call
  lmc::Result<size_t> r =
      lmc::DecodeChunk(frame.data(), frame.size(), base, base_len, ref.data(), ref.size(), ws);
  if (it.status.code() != r.status().code()) abort();
  if (r.ok() && (it.out_len != *r || std::memcmp(out.data(), ref.data(), *r) != 0)) abort();
}

// The emulated GPU encoder (its device entry point, on exact-size copies)
// writes the CPU's GPU-profile frame `want` byte for byte, and decodes it
// back itself: the plan, Huffman and rANS bodies on fuzzed data.
// `base_len` (0: n) and `widened`: a paired chunk's bf16 twin and offset.
// `block_log2`: the codec's Huffman block size (9-12), as `want`'s.
void GpuEncodesAsTheCpu(lmc::DType t, const uint8_t* src, size_t n, const uint8_t* base,
                        const std::vector<uint8_t>& want, size_t base_len = 0,
                        std::optional<uint32_t> widened = std::nullopt, int block_log2 = 12) {
  static std::unique_ptr<lmc::GpuCodec> codecs[13];
  std::unique_ptr<lmc::GpuCodec>& gpu = codecs[block_log2];
  if (!gpu) {
    lmc::GpuCodecOptions o;
    o.huffman_block_log2 = block_log2;
    gpu = lmc::gpu::OpenHostEmulatedCodec(o);
  }
  if (!base_len) base_len = n;
  const std::vector<uint8_t> in(src, src + n), b(base ? base : src, base ? base + base_len : src);
  std::vector<uint8_t> out(lmc::MaxEncodedSize(n));
  lmc::GpuEncodeItem it;
  it.src = in.data();
  it.n = n;
  it.dtype = t;
  it.base = base ? b.data() : nullptr;
  it.base_len = base_len;
  it.widened_base_offset = widened;
  it.dst = out.data();
  it.cap = out.size();
  // The encode check (verify_encode) decodes the frame back on the
  // emulated device: with no fault injected, a frame it refuses is a
  // disagreement between the device's encoder and decoder.
  const uint64_t verify_failures = gpu->stats().encode_verify_failures;
  if (!gpu->EncodeBatchDevice(&it, 1).ok() || !it.status.ok()) abort();
  if (gpu->stats().encode_verify_failures != verify_failures) abort();
  if (it.len != want.size() || std::memcmp(out.data(), want.data(), it.len) != 0) abort();
}

// The likely values' run histograms count what the scalar loop counts, on
// every vector unit this CPU has, for any data and any list of likely
// values (repeats included): the input's first 16 bytes are the list, the
// rest the stream, cut into runs as a blocked stream of 2^9 symbols a block
// (several runs even for short inputs). The stream is the fuzzer's own
// exact-size buffer, so ASan sees a read past its end.
void LikelyCountsAsTheScalarLoop(const uint8_t* data, size_t size) {
  if (size < lmc::kLikelySymbols) return;
  const uint8_t* likely = data;
  const uint8_t* s = data + lmc::kLikelySymbols;
  const size_t m = size - lmc::kLikelySymbols;
  size_t cuts[5];
  lmc::huff::BlockedCuts(m, 9, cuts);
  uint32_t want_runs[4][256], want[256];
  lmc::HistogramRuns(s, cuts, want_runs, want);
  using lmc::internal::HistogramIsa;
  const HistogramIsa best = lmc::internal::BestHistogramIsa();
  for (int i = static_cast<int>(HistogramIsa::kAvx2); i <= static_cast<int>(best); ++i) {
    lmc::internal::SetHistogramIsa(static_cast<HistogramIsa>(i));
    uint32_t runs[4][256], hist[256];
    lmc::HistogramRunsLikely(s, cuts, likely, runs, hist);
    if (std::memcmp(runs, want_runs, sizeof(runs)) != 0 || std::memcmp(hist, want, sizeof(hist)) != 0)
      abort();
  }
  lmc::internal::SetHistogramIsa(best);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  lmc::internal::SetSampleMinimum(16 * 1024);
  return 0;
}

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
    if (size >= 2 && (data[1] & 2))
      GpuDecodesAsTheCpu(frame, blen ? base.data() : nullptr, b, out.size(), ws);
  }
  LikelyCountsAsTheScalarLoop(data, size);
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
    // The CPU profile, or for a quarter of the inputs the 4-sub-stream
    // Huffman that older stores hold.
    // Blocked Huffman in blocks of 2^12 down to 2^8 symbols, as the first
    // byte's upper half picks.
    const auto profile = (data[1] & 12) == 12 ? lmc::EncodeProfile::kCpuQuarters : lmc::EncodeProfile::kCpu;
    const int block_log2 = 12 - (data[0] >> 4) % 5;
    lmc::EncodeParams params{t, delta ? bbuf.data() : nullptr, profile};
    params.huffman_block_log2 = block_log2;
    lmc::Result<size_t> e = lmc::EncodeChunk(src, n, params, enc.data(), enc.size(), ws);
    if (!e.ok()) abort();
    lmc::Result<size_t> d = lmc::DecodeChunk(enc.data(), *e, delta ? bbuf.data() : nullptr, delta ? n : 0,
                                             back.data(), back.size(), ws);
    if (!d.ok() || *d != n || std::memcmp(back.data(), src, n) != 0) abort();
    // The GPU profile's frame (blocked Huffman or rANS, fused decoding for
    // 2-byte dtypes), as the emulated GPU encoder writes it, and decoded
    // whole and with one byte of its payload changed; for half of
    // the inputs (the emulated pipeline is slower than the CPU decoder, and
    // the fuzz run has a fixed time).
    if (!(data[1] & 2)) return 0;
    std::vector<uint8_t> g(lmc::MaxEncodedSize(n));
    lmc::EncodeParams gp{t, delta ? bbuf.data() : nullptr, lmc::EncodeProfile::kGpu};
    gp.huffman_block_log2 = block_log2;
    lmc::Result<size_t> ge = lmc::EncodeChunk(src, n, gp, g.data(), g.size(), ws);
    if (!ge.ok()) abort();
    g.resize(*ge);
    const uint8_t* gb = delta ? bbuf.data() : nullptr;
    // (2^8 blocks: the device neither writes nor decodes them.)
    if (block_log2 >= 9) GpuEncodesAsTheCpu(t, src, n, gb, g, 0, std::nullopt, block_log2);
    GpuDecodesAsTheCpu(g, gb, delta ? n : 0, n, ws);
    lmc::Result<lmc::FrameInfo> gi = lmc::ReadFrameInfo(g.data(), g.size());
    if (gi.ok() && g.size() > gi->header_size) {
      const size_t at = gi->header_size + (size_t{data[1]} << 8 | src[0]) % (g.size() - gi->header_size);
      g[at] ^= static_cast<uint8_t>(1u << (data[1] >> 5));
      GpuDecodesAsTheCpu(g, gb, delta ? n : 0, n, ws);
    }
    // 4. As a paired fp32 master against a bf16 twin (the first n / 2 bytes
    // of the shifted copy, from a small offset): the GPU profile's frame as
    // the emulated GPU encoder writes it, decoded whole and changed.
    if (n % 4 == 0 && n >= 4 && (data[1] & 16)) {
      const uint32_t offset = src[0] % 4;
      std::vector<uint8_t> twin(2 * offset + n / 2);
      for (size_t i = 0; i < twin.size(); ++i) twin[i] = bbuf[i % n];
      lmc::EncodeParams pp{lmc::DType::kF32, twin.data(), lmc::EncodeProfile::kGpu};
      pp.widened_base_offset = offset;
      pp.base_len = twin.size();
      std::vector<uint8_t> pf(lmc::MaxEncodedSize(n));
      lmc::Result<size_t> pe = lmc::EncodeChunk(src, n, pp, pf.data(), pf.size(), ws);
      if (!pe.ok()) abort();
      pf.resize(*pe);
      GpuEncodesAsTheCpu(lmc::DType::kF32, src, n, twin.data(), pf, twin.size(), offset);
      GpuDecodesAsTheCpu(pf, twin.data(), twin.size(), n, ws);
      pf[pf.size() - 1 - src[n - 1] % (pf.size() / 2)] ^= 0x40;
      GpuDecodesAsTheCpu(pf, twin.data(), twin.size(), n, ws);
    }
  }
  return 0;
}
