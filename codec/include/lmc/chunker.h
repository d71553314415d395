// Cuts a file's typed regions (from the LayoutParser) into codec chunks
// (docs/ARCHITECTURE.md, "Chunking").
//
// Tensor regions of at least `small_region` bytes are cut into chunks of
// `chunk_size` bytes counted from the tensor's first byte, so identical
// tensors at different file offsets give identical chunks (dedup) and each
// chunk has one dtype. Smaller regions (headers, biases, norms) are packed
// together into "mixed" chunks of up to chunk_size bytes, coded with the
// dtype they share, or as bytes when they differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmc/dtype.h"
#include "lmc/layout.h"

namespace lmc {

// 1 MiB: see docs/BENCHMARKS.md ("Chunk size") for the measurement behind it.
inline constexpr uint32_t kDefaultChunkSize = 1u << 20;

struct ChunkerOptions {
  uint32_t chunk_size = kDefaultChunkSize;
  uint32_t small_region = 64 * 1024;  // regions below this are packed together
};

struct ChunkSpec {
  uint64_t offset = 0;  // in the file
  uint32_t length = 0;
  DType dtype = DType::kBytes;
  // Lineage fields (docs/ARCHITECTURE.md, "Incremental snapshots"): for a
  // chunk cut from one tensor region, the region's name (tensor name, zip
  // member or storage key from the LayoutParser; may be empty when the
  // format has none), its length, and this chunk's offset from the
  // tensor's first byte. The layout emits tensors longer than 4 MiB in
  // pieces (kRegionPieceBytes); the chunker joins them again, so
  // region_offset counts from the tensor's start and region_length is the
  // tensor's length up to the end of the current piece (the whole tensor
  // for its last piece; the same for the same tensor in every save). For a
  // mixed (packed small regions / header) chunk: region_name empty,
  // region_length 0, region_offset 0; `tensor_chunk` tells the two apart.
  bool tensor_chunk = false;
  std::string region_name;
  uint64_t region_length = 0;
  uint64_t region_offset = 0;
};

class Chunker {
 public:
  explicit Chunker(ChunkerOptions opts = {}) : opts_(opts) {}
  // Regions must be contiguous and in order. Appends completed chunks.
  void Add(const Region& r, std::vector<ChunkSpec>* out);
  // Flushes the pending mixed chunk.
  void Finish(std::vector<ChunkSpec>* out);
  // End of the bytes handed out in chunks so far.
  uint64_t emitted_end() const { return emitted_end_; }

 private:
  void FlushMixed(std::vector<ChunkSpec>* out);
  void Emit(const ChunkSpec& c, std::vector<ChunkSpec>* out);

  ChunkerOptions opts_;
  ChunkSpec mixed_{};
  // The tensor whose piece gave the last tensor chunks (continued by the
  // next piece: same name and dtype, contiguous, previous pieces whole).
  bool in_tensor_ = false;
  std::string tensor_name_;
  DType tensor_dtype_ = DType::kBytes;
  uint64_t tensor_start_ = 0, tensor_end_ = 0;
  bool mixed_uniform_ = true;
  uint64_t emitted_end_ = 0;
};

}  // namespace lmc
