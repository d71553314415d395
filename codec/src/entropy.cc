#include "entropy.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "hd/huffman_hd.h"
#include "huffman.h"
#include "lmc/transform.h"
#include "rans.h"

namespace lmc {

bool RansCanPay(const uint32_t hist[256], size_t n, size_t huff) {
  // rans::EstimatedSize is at least the header, 4 bytes a state and the
  // words' bits, which are sum hist[s] * -log2(freq[s] / 2^kProbBits) minus
  // 8 a state: at least n * H bits (Gibbs: the normalized frequencies are
  // a distribution), so it is at least n * H / 8 bytes. With that floor,
  // rANS is taken only if floor + huff / 16 < huff. The margin covers the
  // rounding of the sum.
  const double floor_bytes = EntropyBits(hist, n) / 8 * (1 - 1e-9) - 1;
  return floor_bytes + static_cast<double>(huff / 16) < static_cast<double>(huff);
}

Coder ChooseCoder(const uint32_t hist[256], size_t n, Coder huffman, int block_log2) {
  if (n == 0) return Coder::kRaw;
  int distinct = 0;
  for (int s = 0; s < 256; ++s) distinct += hist[s] != 0;
  if (distinct == 1) return Coder::kConst;
  size_t huff =
      huffman == Coder::kHuffman ? huff::EncodedSize(hist, n) : huff::BlockedEncodedSize(hist, n, block_log2);
  Coder best = huffman;
  size_t best_size = huff;
  // rANS decodes at about half Huffman's speed: take it only where it pays
  // clearly (skewed streams near or below 1 bit/symbol, where Huffman's
  // 1-bit floor costs up to 10x), not for the ~2% it gains on exponents.
  // Its estimate normalizes the histogram (up to thousands of passes over
  // the symbols on a flat one); skipped where the stream's entropy alone,
  // a floor under it, already rules rANS out, so the choice is the same.
  if (RansCanPay(hist, n, huff)) {
    // 32 states for long streams: about 1.5x the speed for 112 bytes more.
    const bool x32 = n >= kRansX32MinSymbols;
    size_t rans = rans::EstimatedSize(hist, n, x32 ? 32 : 4);
    if (rans + huff / 16 < huff) {
      best = x32 ? Coder::kRansX32 : Coder::kRans;
      best_size = rans;
    }
  }
  if (best_size + n / 128 >= n) return Coder::kRaw;
  return best;
}

namespace {
constexpr size_t kBlocks = 32, kBlock = 512;  // 16 Ki symbols
std::atomic<size_t> g_sample_minimum{64 * 1024};
}  // namespace

size_t internal::SetSampleMinimum(size_t bytes) {
  return g_sample_minimum.exchange(std::max(bytes, kBlocks * kBlock), std::memory_order_relaxed);
}

bool SampleSaysRaw(const uint8_t* p, size_t n, uint32_t sample[256]) {
  uint32_t own[256];
  uint32_t* hist = sample ? sample : own;
  std::memset(hist, 0, 256 * sizeof(uint32_t));
  if (n < g_sample_minimum.load(std::memory_order_relaxed)) return false;
  size_t stride = n / kBlocks;
  // Four tables: a run of one symbol (an exponent plane is mostly a few)
  // would otherwise wait on each increment of the same counter.
  uint32_t part[4][256] = {};
  for (size_t b = 0; b < kBlocks; ++b) {
    const uint8_t* q = p + b * stride;
    for (size_t i = 0; i < kBlock; i += 4) {
      ++part[0][q[i]];
      ++part[1][q[i + 1]];
      ++part[2][q[i + 2]];
      ++part[3][q[i + 3]];
    }
  }
  for (int s = 0; s < 256; ++s) hist[s] = part[0][s] + part[1][s] + part[2][s] + part[3][s];
  const size_t m = kBlocks * kBlock;
  int distinct = 0;
  for (int s = 0; s < 256; ++s) distinct += hist[s] != 0;
  // Miller-Madow: the plug-in entropy of a sample is biased low by about
  // (K-1) / (2 m ln 2) bits per symbol.
  double bits = EntropyBits(hist, m) / m + (distinct - 1) / (2.0 * m * 0.6931471805599453);
  // Raw is chosen below 1/128 savings, i.e. above 7.9375 bits/symbol; a
  // Huffman code costs a little over the entropy, so 7.96 is safely raw.
  return bits >= 7.96;
}

Result<EncodedStream> EncodeStream(const uint8_t* src, size_t n, const uint32_t hist[256],
                                   const uint32_t (*quarters)[256], const uint32_t* rans_freq, Coder coder,
                                   int block_log2, uint8_t* dst, size_t cap) {
  if (cap < n && coder == Coder::kRaw) return Status::InvalidArgument("stream buffer too small");
  switch (coder) {
    case Coder::kConst:
      if (n == 0 || cap < 1) break;
      dst[0] = src[0];
      return EncodedStream{Coder::kConst, 1};
    case Coder::kHuffman:
    case Coder::kRans:
    case Coder::kRansX32: {
      // Bound the coder's output by the raw size: if it cannot beat raw,
      // it fails with InvalidArgument and the stream is stored raw.
      size_t limit = cap < n ? cap : n;
      const int states = coder == Coder::kRansX32 ? 32 : 4;
      Result<size_t> r = coder == Coder::kHuffman ? (quarters ? huff::Encode(src, n, quarters, dst, limit)
                                                              : huff::Encode(src, n, hist, dst, limit))
                         : rans_freq    ? rans::EncodeWithFrequencies(src, n, rans_freq, states, dst, limit)
                         : states == 32 ? rans::EncodeX32(src, n, hist, dst, limit)
                                        : rans::Encode(src, n, hist, dst, limit);
      if (r.ok() && *r < n) return EncodedStream{coder, *r};
      break;
    }
    case Coder::kHuffmanBlocked: {
      size_t limit = cap < n ? cap : n;
      Result<size_t> r = quarters ? huff::EncodeBlocked(src, n, quarters, block_log2, dst, limit)
                                  : huff::EncodeBlocked(src, n, hist, block_log2, dst, limit);
      if (r.ok() && *r < n) return EncodedStream{coder, *r};
      break;
    }
    case Coder::kRaw:
      break;
  }
  if (cap < n) return Status::InvalidArgument("stream buffer too small");
  std::memcpy(dst, src, n);
  return EncodedStream{Coder::kRaw, n};
}

Status DecodeStream(Coder coder, const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
  switch (coder) {
    case Coder::kRaw:
      if (len != n) return Status::Corruption("raw stream size does not match its decoded size");
      std::memcpy(dst, src, n);
      return Status::Ok();
    case Coder::kConst:
      if (len != 1 || n == 0) return Status::Corruption("bad constant stream");
      std::memset(dst, src[0], n);
      return Status::Ok();
    case Coder::kHuffman:
      return huff::Decode(src, len, dst, n);
    case Coder::kRans:
      return rans::Decode(src, len, dst, n);
    case Coder::kRansX32:
      return rans::DecodeX32(src, len, dst, n);
    case Coder::kHuffmanBlocked:
      return huff::DecodeBlocked(src, len, dst, n);
  }
  return Status::Corruption("unknown stream coder");
}

}  // namespace lmc
