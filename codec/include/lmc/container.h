// The .lmc file container written by `lmc compress` (docs/FORMAT.md,
// ".lmc container"): a header, one length-prefixed frame per chunk, an end
// marker and a trailer with the total size and a checksum of the whole
// file. Written and read strictly sequentially, so pipes work both ways;
// chunks are encoded and decoded in parallel in batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lmc/chunker.h"
#include "lmc/layout.h"
#include "lmc/status.h"

namespace lmc {

class ThreadPool;
class GpuCodec;  // lmc/gpu.h

// The codec's formats this build writes and reads, for --version: "frame
// versions 1-5, .lmc container 1".
std::string CodecFormats();

// Reads up to n bytes; returns 0 at end of input.
using ReadFn = std::function<Result<size_t>(uint8_t* buf, size_t n)>;
// Writes all n bytes or fails.
using WriteFn = std::function<Status(const uint8_t* buf, size_t n)>;

// Batches on a GpuCodec (`lmc compress|decompress --gpu`) take up to this
// many decoded bytes of chunks at once, and at least the CPU's batch.
inline constexpr size_t kContainerGpuBatchBytes = size_t{64} << 20;

struct CompressOptions {
  uint32_t chunk_size = kDefaultChunkSize;
  size_t threads = 0;          // 0: every core of the pool
  ThreadPool* pool = nullptr;  // null: ThreadPool::Shared()
  // Encode every batch of chunks with one GpuCodec::EncodeBatch call
  // (kGpu-profile frames; the container is the same). A batch the device
  // fails is encoded on the CPU, and so is everything after it. Not owned;
  // used by this call only. null: the CPU.
  GpuCodec* gpu = nullptr;
};

struct CompressStats {
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t chunks = 0;
  Format format = Format::kUnknown;
  // Input bytes per dtype the chunks were coded as.
  std::map<DType, uint64_t> bytes_by_dtype;
  uint64_t gpu_chunks = 0;          // chunks the GPU encoded (CompressOptions::gpu)
  uint64_t gpu_failed_batches = 0;  // device failures (0 or 1: the rest went to the CPU)
  std::string gpu_failure;          // the failure's status, when there was one
  // Frames the GPU wrote that did not decode back on it
  // (GpuCodecOptions::verify_encode): the CPU encoded those chunks, and
  // everything after them (the GPU is not used again by this call).
  uint64_t gpu_verify_failures = 0;
};

Status CompressStream(const ReadFn& in, const WriteFn& out, const CompressOptions& opts,
                      CompressStats* stats = nullptr);

struct DecompressOptions {
  size_t threads = 0;
  ThreadPool* pool = nullptr;
  // Decode batches of frames with GpuCodec::DecodeBatch, as
  // CompressOptions::gpu (same checks; a device failure moves the batch
  // and the rest to the CPU). null: the CPU.
  GpuCodec* gpu = nullptr;
};

struct DecompressStats {
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t chunks = 0;
  uint64_t gpu_chunks = 0;          // frames the GPU decoded
  uint64_t gpu_failed_batches = 0;  // device failures (0 or 1)
  std::string gpu_failure;
};

// Verifies every frame's checksum and the trailer's whole-file checksum; a
// mismatch, truncation or trailing data is Corruption. Output written
// before an error is detected must be discarded by the caller.
Status DecompressStream(const ReadFn& in, const WriteFn& out, const DecompressOptions& opts,
                        DecompressStats* stats = nullptr);

// The chunks CompressStream would cut an in-memory file into.
std::vector<ChunkSpec> PlanChunks(const uint8_t* p, size_t n, const ChunkerOptions& opts,
                                  Format* format = nullptr);

// True when the first bytes are a .lmc container's magic.
bool IsContainer(const uint8_t* p, size_t n);

// In-memory compression and decompression, buffer to buffer with no extra
// copy of the data (the container bytes are the same as CompressStream's).
// `out` is resized to fit; its storage is reused across calls.
Status CompressBufferInto(const uint8_t* p, size_t n, const CompressOptions& opts, std::vector<uint8_t>* out,
                          CompressStats* stats = nullptr);
Status DecompressBufferInto(const uint8_t* p, size_t n, const DecompressOptions& opts,
                            std::vector<uint8_t>* out, DecompressStats* stats = nullptr);
// The same, returning a new vector.
Result<std::vector<uint8_t>> CompressBuffer(const uint8_t* p, size_t n, const CompressOptions& opts,
                                            CompressStats* stats = nullptr);
Result<std::vector<uint8_t>> DecompressBuffer(const uint8_t* p, size_t n, const DecompressOptions& opts = {});

}  // namespace lmc
