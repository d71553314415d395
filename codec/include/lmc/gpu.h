// Optional CUDA path of the codec (built when nvcc is found at configure
// time, see LMC_CUDA in CMakeLists.txt). Every function works in every
// build: without CUDA, or without a usable GPU at run time, GpuAvailable()
// is false, GpuCodec::Open and the others return Unsupported, and callers
// use the CPU path. The CPU codec is the reference the GPU path is tested
// against (docs/FORMAT.md, "GPU profile").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lmc/dtype.h"
#include "lmc/status.h"

namespace lmc {

// True when this build has the CUDA path and a CUDA device is usable.
bool GpuAvailable();
// "CUDA 13.0, NVIDIA H100 80GB HBM3" or why there is none.
std::string GpuDescription();

// SplitStreams / MergeStreams (transform.h) computed on the GPU, on host
// buffers (copied to and from the device). Same contract and output bytes as
// the CPU functions.
Status GpuSplitStreams(DType t, const uint8_t* src, size_t n, const uint8_t* base, uint8_t* dst);
Status GpuMergeStreams(DType t, const uint8_t* streams, size_t n, const uint8_t* base, uint8_t* dst);

// One chunk to encode. src/base/dst are host pointers for EncodeBatch and
// device pointers for EncodeBatchDevice. The frame written is byte-identical
// to EncodeChunk(src, n, {dtype, base, .profile = EncodeProfile::kGpu}),
// with widened_base_offset and base_len when given.
struct GpuEncodeItem {
  const uint8_t* src = nullptr;
  size_t n = 0;
  DType dtype = DType::kBytes;
  const uint8_t* base = nullptr;  // optional XOR base of n bytes
  uint8_t* dst = nullptr;         // MaxEncodedSize(n) bytes suffice
  size_t cap = 0;
  // With base: `base` is a bf16 chunk of base_len bytes (an fp32 master's
  // twin) and the operand its values from this element on, widened, as
  // EncodeParams::widened_base_offset (the rounding predicted where that
  // mispredicts fewer upper halves, as EncodeParams::predict_rounding's
  // default). An item whose range is not inside the base is the CPU's,
  // which reports it.
  std::optional<uint32_t> widened_base_offset{};
  size_t base_len = 0;
  // --- out ---
  size_t len = 0;  // frame size
  Status status;   // per-chunk result (InvalidArgument for a bad item)
};

// One frame to decode. Pointers as for GpuEncodeItem. Decodes every frame
// the CPU decodes (all versions and coders), with the same checks: a
// malformed frame or checksum mismatch gives Corruption in `status`.
struct GpuDecodeItem {
  const uint8_t* frame = nullptr;
  size_t len = 0;  // bytes available at frame
  const uint8_t* base = nullptr;
  size_t base_len = 0;
  uint8_t* dst = nullptr;
  size_t cap = 0;
  // --- out ---
  size_t out_len = 0;
  Status status;
};

// What a GpuCodec has done since it was opened.
struct GpuCodecStats {
  uint64_t encode_chunks = 0, encode_bytes = 0;  // decoded bytes in
  uint64_t decode_chunks = 0, decode_bytes = 0;  // decoded bytes out
  uint64_t decode_fused_chunks = 0;              // of decode_chunks: by the fused decoder (fuse_merge)
  uint64_t batches = 0;
  // GpuCodecOptions::verify_encode: of encode_chunks, those whose frames
  // the device decoded back before the call returned; and the frames that
  // did not decode back, whose chunks the CPU encoded instead (not in
  // encode_chunks). A failure means a faulty device or a device codec bug.
  uint64_t encode_verified_chunks = 0;
  uint64_t encode_verify_failures = 0;
};

struct GpuCodecOptions {
  int device = 0;
  // Largest batch of decoded bytes staged on the device at once; a larger
  // call is cut into batches of this size, run one after another.
  size_t batch_bytes = size_t{128} << 20;
  // Time every kernel (synchronising after each): for profile() only.
  bool profile = false;
  // Host-memory calls: lanes (each a stream with its own device memory and
  // pinned staging) that take pieces of a call in turn, so that one piece's
  // host copies and transfers overlap another's kernels; and the smallest
  // piece a call is cut into for that (docs/ARCHITECTURE.md, "GPU codec").
  // Device-memory calls use one lane.
  int lanes = 4;
  size_t min_piece_bytes = size_t{8} << 20;
  // Decode: where a 2-byte frame's high bytes are a blocked Huffman stream
  // and its low bytes raw (bf16 weights), the Huffman decoder writes the
  // elements itself instead of a decoded stream that a merge pass then
  // reads back (docs/ARCHITECTURE.md, "GPU codec"). Off: for A-B runs.
  bool fuse_merge = true;
  // With fuse_merge: that decoder also sums the XXH3 block deltas of what
  // it writes, so that the checksum pass need not read those bytes back.
  bool fuse_hash = true;
  // Blocked Huffman's block size, log2 of the symbols a block, 9-12 (else
  // Open says InvalidArgument): what the encoder writes
  // (EncodeParams::huffman_block_log2 of its frames). The device decodes
  // every size from 9 to 12 whatever this says (the plan reads each
  // stream's; a device frame's streams after the first, whose coder
  // headers the plan does not gather, are planned at this size, and one of
  // another goes to the CPU). Smaller blocks: more decoding threads, 2 bytes
  // a block more (docs/FORMAT.md, 5.3).
  int huffman_block_log2 = 12;
  // Encode: before a call returns, the device decodes every frame it wrote,
  // from device memory, with the decoder's checks down to the frame's XXH3
  // checksum (taken by the encoder from the chunk's own bytes); a frame that
  // does not decode back is replaced by the CPU's encoding of its chunk and
  // counted in encode_verify_failures. So a device fault or a kernel bug
  // costs speed, never a chunk that cannot be read (docs/ARCHITECTURE.md,
  // "GPU codec"). Off: for A-B runs of the encoder alone.
  bool verify_encode = true;
};

// Batched LMC codec on one CUDA device. Not thread-safe: one caller at a
// time (the mount keeps one per device behind a mutex).
//
// A batch call returns a non-OK status only when the device failed (a CUDA
// error): then no item's result is valid and the caller must redo the batch
// on the CPU. Per-item problems (bad input, corrupt frames) are in the items.
class GpuCodec {
 public:
  // Unsupported when the build has no CUDA or no device is usable.
  static Result<std::unique_ptr<GpuCodec>> Open(const GpuCodecOptions& o = {});
  virtual ~GpuCodec() = default;

  // Host memory in and out: each piece of a call is gathered into one
  // pinned buffer, copied in, coded and copied out by one lane while the
  // other lanes do the same with other pieces.
  virtual Status EncodeBatch(GpuEncodeItem* items, size_t count) = 0;
  virtual Status DecodeBatch(GpuDecodeItem* items, size_t count) = 0;
  // Device memory in and out (a checkpoint still on the GPU): no host copy.
  // All items of one call must fit the device memory the codec may take.
  // The codec's stream waits for the work queued on the legacy default
  // stream before it reads the inputs; inputs written on another stream
  // must be complete (synchronized) before the call. Outputs are complete
  // when it returns.
  virtual Status EncodeBatchDevice(GpuEncodeItem* items, size_t count) = 0;
  virtual Status DecodeBatchDevice(GpuDecodeItem* items, size_t count) = 0;

  virtual GpuCodecStats stats() const = 0;
  virtual std::string description() const = 0;
  // With GpuCodecOptions::profile: milliseconds per kernel, one per line.
  virtual std::string profile() const { return ""; }
};

// The mount's GPU feeder takes a batch once this many bytes of chunks wait
// in the encoder queue with gpu=auto (docs/ARCHITECTURE.md, "GPU codec in
// the mount"); CPU encoder threads take the rest. The measured crossover:
// on an H100 with 16 CPU cores, host-memory encode calls of 32 MiB (4
// lanes) were the smallest to run faster than all the cores
// (docs/BENCHMARKS.md, "GPU codec", lmc_gpu_bench's "host calls" table).
inline constexpr size_t kGpuMinBatchBytes = size_t{32} << 20;

}  // namespace lmc
