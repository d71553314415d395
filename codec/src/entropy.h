// Per-stream coder choice and dispatch (docs/FORMAT.md, "Stream coders").
// Internal to lmc_codec.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hd/rans_hd.h"
#include "lmc/codec.h"
#include "lmc/status.h"

namespace lmc {

// The coder for a stream with histogram `hist` of n symbols, chosen from the
// histogram alone (never by trying coders): kConst for one symbol; else the
// smallest of Huffman (exact size; blocked, kHuffmanBlocked, or in four
// sub-streams, kHuffman, as `huffman` says) and rANS (estimated; taken only
// when it saves more than 1/16 over Huffman, since it codes at half the
// speed; with 32 states from kRansX32MinSymbols on); kRaw when that saves
// less than 1/128 of the stream.
inline constexpr size_t kRansX32MinSymbols = hd::kRansX32MinSymbols;
// `block_log2`: the blocked coder's block size (EncodeParams::huffman_block_log2).
Coder ChooseCoder(const uint32_t hist[256], size_t n, Coder huffman, int block_log2);

// False when rANS cannot be chosen for a stream with histogram `hist` of n
// symbols whose Huffman size is `huff` bytes: the stream's order-0 entropy,
// a floor under rans::EstimatedSize, is already within huff / 16 of huff.
// ChooseCoder skips the rANS estimate then; its choice is the same.
bool RansCanPay(const uint32_t hist[256], size_t n, size_t huff);

// True when a sample of the stream shows it is so close to uniform that no
// coder would beat the raw threshold of ChooseCoder, so the full histogram
// can be skipped (sign+mantissa streams of floats). Only for n >= 64 KiB
// (internal::SetSampleMinimum);
// smaller streams always return false. `sample` (may be null): where the
// stream was sampled, its sample's histogram (16 Ki symbols), else zeros.
bool SampleSaysRaw(const uint8_t* p, size_t n, uint32_t sample[256] = nullptr);

namespace internal {
// Test hook: the stream size from which SampleSaysRaw samples (64 KiB by
// default; at least 16 KiB, where its 32 blocks of 512 symbols stop
// overlapping). The fuzz target lowers it so that its inputs, at most
// 70,000 bytes in CI, reach the paths a sample opens (PickLikely,
// HistogramRunsLikely). Returns the previous setting; not for concurrent
// encoders.
size_t SetSampleMinimum(size_t bytes);
}  // namespace internal

// Worst-case payload of EncodeStream for n bytes.
inline size_t MaxStreamPayload(size_t n) { return n; }

// Encodes src[0,n) into dst (cap bytes), trying `coder` first and falling
// back to kRaw when its output would not be smaller than n. Returns the
// coder actually used and the payload size. cap >= n always suffices.
struct EncodedStream {
  Coder coder;
  size_t size;
};
// `quarters` (may be null) saves the Huffman coders a pass over the data:
// for kHuffman the histograms of HistogramQuarters, for kHuffmanBlocked
// those of HistogramRuns at huff::BlockedCuts (block_log2).
// `rans_freq` (may be null): for kRans and kRansX32, the frequencies to
// code with (the GPU profile's, hd::RansNormalizeGpu); null normalises
// hist as the CPU profile does. `block_log2`: kHuffmanBlocked's block size.
Result<EncodedStream> EncodeStream(const uint8_t* src, size_t n, const uint32_t hist[256],
                                   const uint32_t (*quarters)[256], const uint32_t* rans_freq, Coder coder,
                                   int block_log2, uint8_t* dst, size_t cap);

// Decodes a stream payload of `len` bytes into exactly n bytes of dst.
Status DecodeStream(Coder coder, const uint8_t* src, size_t len, uint8_t* dst, size_t n);

}  // namespace lmc
