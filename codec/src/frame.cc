// Chunk frames: encode = regroup by dtype, code each stream, write the
// header; decode = the reverse, then verify the decoded checksum.
#include <algorithm>
#include <cstring>
#include <string>

#include "entropy.h"
#include "frame_format.h"
#include "hd/frame_hd.h"
#include "hd/huffman_hd.h"
#include "huffman.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/hash.h"
#include "lmc/transform.h"

namespace lmc {

using namespace frame;  // NOLINT: constants of this file's format

const char* CoderName(Coder c) {
  switch (c) {
    case Coder::kRaw:
      return "raw";
    case Coder::kConst:
      return "const";
    case Coder::kHuffman:
      return "huffman";
    case Coder::kRans:
      return "rans";
    case Coder::kHuffmanBlocked:
      return "huffman-blocked";
    case Coder::kRansX32:
      return "rans-x32";
  }
  return "invalid";
}

Workspace::Workspace() = default;
Workspace::~Workspace() = default;

uint8_t* Workspace::Scratch(size_t n) {
  if (n > cap_ || !buf_) {
    size_t want = n < 4096 ? 4096 : n;
    buf_.reset(new uint8_t[want]);
    cap_ = want;
  }
  return buf_.get();
}

uint64_t Checksum64(const uint8_t* p, size_t n) { return hash::Xxh3_64(p, n); }

namespace {
// Bytes per range of the fused passes below: a multiple of every element
// width, small enough to stay in L1/L2 between the transform and the hash.
constexpr size_t kFusedRange = size_t{64} << 10;

// op(a, b) over ranges [a, b) that cover [0, n), each followed by the hash
// of hashed[a, b) while it is in cache: returns Checksum64(hashed, n). op
// is SplitStreamsRange (hashed: its input) or MergeStreamsRange (its output).
template <typename Op>
uint64_t InRangesWithChecksum(size_t n, const uint8_t* hashed, Op op) {
  if (n <= kFusedRange) {
    op(0, n);
    return Checksum64(hashed, n);
  }
  hash::Xxh3Stream st;
  for (size_t a = 0; a < n; a += kFusedRange) {
    const size_t b = std::min(n, a + kFusedRange);
    op(a, b);
    st.Update(hashed + a, b - a);
  }
  return st.Digest64();
}
}  // namespace

size_t MaxEncodedSize(size_t n) { return n + HeaderSize(kMaxStreams, true); }

void WidenBf16(const uint8_t* bf16, size_t offset, size_t n_out, uint8_t* out) {
  const uint8_t* in = bf16 + 2 * offset;
  for (size_t i = 0; i < n_out; ++i) {
    out[4 * i] = 0;
    out[4 * i + 1] = 0;
    out[4 * i + 2] = in[2 * i];
    out[4 * i + 3] = in[2 * i + 1];
  }
}

namespace {
// The XOR operand of an fp32 chunk of n bytes against bf16[base_len] from
// element `offset`: widened into this thread's buffer. InvalidArgument when
// the range is not inside the base.
Status CheckTwinRange(const uint8_t* bf16, size_t base_len, uint64_t offset, size_t n) {
  if (bf16 == nullptr || n % 4 != 0 || offset + n / 4 > base_len / 2)
    return Status::InvalidArgument("a widened-base frame needs a bf16 base chunk holding elements [" +
                                   std::to_string(offset) + ", " + std::to_string(offset + n / 4) + ")");
  return Status::Ok();
}

Result<const uint8_t*> WidenedOperand(const uint8_t* bf16, size_t base_len, uint64_t offset, size_t n) {
  LMC_RETURN_IF_ERROR(CheckTwinRange(bf16, base_len, offset, n));
  thread_local std::vector<uint8_t> widened;
  if (widened.size() < n) widened.resize(n);
  WidenBf16(bf16, offset, n / 4, widened.data());
  return widened.data();
}

// The fp32 values of a rounding-predicted frame: dst holds the merged
// planes (the values XOR the operand); their upper halves are XORed with
// the prediction from the bf16 twins tw and their own lower halves.
void UndoPrediction(const uint8_t* tw, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n / 4; ++i) {
    StoreLE32(dst + 4 * i, MergePaired(LoadLE32(dst + 4 * i), LoadLE16(tw + 2 * i), true));
  }
}
}  // namespace

bool PredictedTwinOperand(const uint8_t* src, size_t n, const uint8_t* tw, uint8_t* operand) {
  size_t predicted_misses = 0, plain_misses = 0;
  for (size_t i = 0; i < n / 4; ++i) {
    const uint32_t v = LoadLE32(src + 4 * i), b = LoadLE16(tw + 2 * i);
    const uint32_t p = PredictedUpper(b, v & 0xffffu);
    predicted_misses += (v >> 16) != p;
    plain_misses += (v >> 16) != b;
    StoreLE32(operand + 4 * i, p << 16);
  }
  return predicted_misses < plain_misses;
}

Result<size_t> EncodeChunk(const uint8_t* src, size_t n, const EncodeParams& params, uint8_t* dst, size_t cap,
                           Workspace& ws) {
  if (n > kMaxChunkSize) return Status::InvalidArgument("chunk larger than 1 GiB");
  if (!DTypeValid(static_cast<uint8_t>(params.dtype))) return Status::InvalidArgument("invalid dtype");
  const int block_log2 = params.huffman_block_log2;
  if (block_log2 < hd::kMinBlockLog2 || block_log2 > hd::kMaxBlockLog2)
    return Status::InvalidArgument("Huffman block size 2^" + std::to_string(block_log2) +
                                   " out of range (2^" + std::to_string(hd::kMinBlockLog2) + " to 2^" +
                                   std::to_string(hd::kMaxBlockLog2) + " symbols)");
  const bool widened = params.base && params.widened_base_offset;
  if (widened && (params.dtype != DType::kF32 || n % 4 != 0))
    return Status::InvalidArgument("a widened bf16 base needs an fp32 chunk");
  const uint8_t* operand = params.base;
  bool predicted = false;
  if (widened) {
    const uint32_t offset = *params.widened_base_offset;
    LMC_RETURN_IF_ERROR(CheckTwinRange(params.base, params.base_len, offset, n));
    if (params.predict_rounding) {
      thread_local std::vector<uint8_t> op;
      if (op.size() < n) op.resize(n);
      predicted = PredictedTwinOperand(src, n, params.base + 2 * uint64_t{offset}, op.data());
      if (predicted) operand = op.data();
    }
    // The plain widened base only when the prediction is not taken.
    if (!predicted) {
      LMC_ASSIGN_OR_RETURN(operand, WidenedOperand(params.base, params.base_len, offset, n));
    }
  }
  StreamShape shape = ShapeFor(params.dtype, n);
  const size_t ns = shape.count();
  const size_t hsize = HeaderSize(ns, widened);
  if (cap < hsize) return Status::InvalidArgument("output buffer too small for a frame header");

  uint8_t* streams = ws.Scratch(n);
  // Predicted: the planes of the 32-bit words as they are (no float
  // rotation), so that the zero upper halves make zero planes.
  const DType split_as = predicted ? DType::kU32 : params.dtype;
  const uint64_t checksum = InRangesWithChecksum(
      n, src, [&](size_t a, size_t b) { SplitStreamsRange(split_as, src, n, operand, streams, a, b); });

  uint8_t coders[kMaxStreams];
  uint64_t sizes[kMaxStreams];
  size_t pos = hsize;
  for (size_t i = 0; i < ns; ++i) {
    const uint8_t* s = streams + shape.offset(i);
    size_t m = shape.size(i);
    uint32_t hist[256];
    uint32_t quarters[4][256];
    uint32_t rans_freq[256];
    Coder want = Coder::kRaw;
    bool have_quarters = false, gpu = params.profile == EncodeProfile::kGpu;
    if (gpu) {
      // The GPU encoder's choice and rANS table, from the full histogram
      // (hd/frame_hd.h).
      Histogram(s, m, hist);
      uint8_t len[256];
      size_t size = 0;
      want = static_cast<Coder>(hd::GpuProfileCoder(hist, m, len, rans_freq, &size, block_log2));
    } else if (uint32_t sample[256]; !SampleSaysRaw(s, m, sample)) {
      // The histograms of the runs the chosen Huffman coder's writers code.
      const Coder huffman =
          params.profile == EncodeProfile::kCpuQuarters ? Coder::kHuffman : Coder::kHuffmanBlocked;
      size_t cuts[5];
      if (huffman == Coder::kHuffman)
        QuarterCuts(m, cuts);
      else
        huff::BlockedCuts(m, block_log2, cuts);
      // Exponent planes are nearly all a few values: counted by vector
      // compares where the sample says so (the same counts either way).
      if (uint8_t likely[kLikelySymbols]; PickLikely(sample, likely))
        HistogramRunsLikely(s, cuts, likely, quarters, hist);
      else
        HistogramRuns(s, cuts, quarters, hist);
      have_quarters = true;
      want = ChooseCoder(hist, m, huffman, block_log2);
    }
    LMC_ASSIGN_OR_RETURN(EncodedStream es,
                         EncodeStream(s, m, hist, have_quarters ? quarters : nullptr,
                                      gpu ? rans_freq : nullptr, want, block_log2, dst + pos, cap - pos));
    coders[i] = static_cast<uint8_t>(es.coder);
    sizes[i] = es.size;
    pos += es.size;
  }
  WriteHeader(dst, static_cast<uint8_t>(params.dtype), params.base != nullptr, static_cast<uint32_t>(n),
              checksum, static_cast<uint32_t>(ns), coders, sizes, widened,
              widened ? *params.widened_base_offset : 0, predicted);
  return pos;
}

Result<FrameKind> PeekFrame(const uint8_t* p, size_t len) {
  if (len < kFramePeekBytes) return Status::Corruption("frame truncated in its header");
  if (std::memcmp(p, kMagic, 4) != 0) return Status::Corruption("not an LMC frame (bad magic)");
  if (!DTypeValid(p[5])) return Status::Corruption("frame has an invalid dtype");
  if (p[6] & ~kKnownFlags) return Status::Corruption("frame has unknown flags");
  return FrameKind{static_cast<DType>(p[5]), (p[6] & kFlagXorDelta) != 0, (p[6] & kFlagWidenedBase) != 0};
}

Result<FrameInfo> ReadFrameInfo(const uint8_t* p, size_t len) {
  if (len < kFixedHeader + kHeaderCrc) return Status::Corruption("frame truncated in its header");
  if (std::memcmp(p, kMagic, 4) != 0) return Status::Corruption("not an LMC frame (bad magic)");
  FrameInfo fi;
  fi.version = p[4];
  if (fi.version == 0) return Status::Corruption("frame has version 0");
  if (fi.version > kVersion)
    return Status::Unsupported("frame version " + std::to_string(fi.version) +
                               " is newer than this lmc (reads versions 1-5); upgrade lmcfs");
  if (!DTypeValid(p[5])) return Status::Corruption("frame has an invalid dtype");
  fi.dtype = static_cast<DType>(p[5]);
  if (p[6] & ~kKnownFlags) return Status::Corruption("frame has unknown flags");
  fi.xor_delta = p[6] & kFlagXorDelta;
  fi.widened_base = p[6] & kFlagWidenedBase;
  if (fi.widened_base && (!fi.xor_delta || fi.version < 3 || fi.dtype != DType::kF32))
    return Status::Corruption("frame has a widened base but is not an fp32 delta of version 3");
  fi.predicted = p[6] & kFlagRoundingPredicted;
  if (fi.predicted && (!fi.widened_base || fi.version < 4))
    return Status::Corruption(
        "frame predicts the rounding but has no widened base or is older than version 4");
  size_t ns = p[7];
  if (ns == 0 || ns > kMaxStreams) return Status::Corruption("frame has a bad stream count");
  size_t hsize = HeaderSize(ns, fi.widened_base);
  if (len < hsize) return Status::Corruption("frame truncated in its stream table");
  if (LoadLE32(p + hsize - kHeaderCrc) != static_cast<uint32_t>(hash::Xxh3_64(p, hsize - kHeaderCrc)))
    return Status::Corruption("frame header checksum mismatch");
  fi.decoded_size = LoadLE32(p + 8);
  fi.checksum = LoadLE64(p + 12);
  if (fi.widened_base) fi.base_offset = LoadLE32(p + kFixedHeader + ns * kStreamEntry);
  if (fi.decoded_size > kMaxChunkSize) return Status::Corruption("frame decoded size too large");
  StreamShape shape = ShapeFor(fi.dtype, fi.decoded_size);
  if (shape.count() != ns) return Status::Corruption("frame stream count does not match its dtype");
  uint64_t total = hsize;
  fi.streams.resize(ns);
  for (size_t i = 0; i < ns; ++i) {
    const uint8_t* e = p + kFixedHeader + i * kStreamEntry;
    const uint8_t last = fi.version >= 5   ? hd::kCoderRansX32
                         : fi.version >= 2 ? hd::kCoderHuffmanBlocked
                                           : hd::kCoderRans;
    if (e[0] > last) return Status::Corruption("frame has an unknown coder");
    fi.streams[i] = {static_cast<Coder>(e[0]), LoadLE32(e + 1), static_cast<uint32_t>(shape.size(i))};
    total += fi.streams[i].encoded_size;
  }
  if (total > kMaxChunkSize + hsize) return Status::Corruption("frame size too large");
  fi.header_size = static_cast<uint32_t>(hsize);
  fi.frame_size = static_cast<uint32_t>(total);
  if (len < total) return Status::Corruption("frame truncated in its payload");
  return fi;
}

Result<size_t> DecodeChunk(const uint8_t* p, size_t len, const uint8_t* base, size_t base_len, uint8_t* dst,
                           size_t dst_cap, Workspace& ws) {
  LMC_ASSIGN_OR_RETURN(FrameInfo fi, ReadFrameInfo(p, len));
  const size_t n = fi.decoded_size;
  if (dst_cap < n) return Status::InvalidArgument("output buffer smaller than the chunk");
  const uint8_t* twin = nullptr;  // predicted: the bf16 values from the base offset
  if (fi.predicted) {
    // No operand up front: it needs the decoded lower halves (UndoPrediction).
    LMC_RETURN_IF_ERROR(CheckTwinRange(base, base_len, fi.base_offset, n));
    twin = base + 2 * uint64_t{fi.base_offset};
    base_len = n;
  } else if (fi.widened_base) {
    LMC_ASSIGN_OR_RETURN(base, WidenedOperand(base, base_len, fi.base_offset, n));
    base_len = n;
  }
  if (fi.xor_delta && (base == nullptr || base_len != n))
    return Status::InvalidArgument("delta frame needs its base chunk of the same size");
  StreamShape shape = ShapeFor(fi.dtype, n);
  uint8_t* scratch = ws.Scratch(n);
  const uint8_t* streams[kMaxStreams];
  size_t pos = fi.header_size;
  for (size_t i = 0; i < fi.streams.size(); ++i) {
    const StreamInfo& s = fi.streams[i];
    if (s.coder == Coder::kRaw) {
      // Merged straight from the frame: no copy.
      if (s.encoded_size != s.decoded_size)
        return Status::Corruption("stream " + std::to_string(i) + ": raw size mismatch");
      streams[i] = p + pos;
    } else {
      uint8_t* out = scratch + shape.offset(i);
      Status st = DecodeStream(s.coder, p + pos, s.encoded_size, out, s.decoded_size);
      if (!st.ok()) return Status::Corruption("stream " + std::to_string(i) + ": " + st.message());
      streams[i] = out;
    }
    pos += s.encoded_size;
  }
  uint64_t checksum;
  if (fi.predicted) {
    MergeStreams(DType::kU32, streams, n, nullptr, dst);
    UndoPrediction(twin, n, dst);
    checksum = Checksum64(dst, n);
  } else {
    const uint8_t* operand = fi.xor_delta ? base : nullptr;
    checksum = InRangesWithChecksum(
        n, dst, [&](size_t a, size_t b) { MergeStreamsRange(fi.dtype, streams, n, operand, dst, a, b); });
  }
  if (checksum != fi.checksum) return Status::Corruption("decoded chunk checksum mismatch");
  return n;
}

}  // namespace lmc
