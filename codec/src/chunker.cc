#include "lmc/chunker.h"

#include <algorithm>

namespace lmc {

void Chunker::Emit(const ChunkSpec& c, std::vector<ChunkSpec>* out) {
  out->push_back(c);
  emitted_end_ = c.offset + c.length;
}

void Chunker::FlushMixed(std::vector<ChunkSpec>* out) {
  if (mixed_.length == 0) return;
  if (!mixed_uniform_) mixed_.dtype = DType::kBytes;
  Emit(mixed_, out);
  mixed_ = ChunkSpec{};
  mixed_uniform_ = true;
}

void Chunker::Add(const Region& r, std::vector<ChunkSpec>* out) {
  uint64_t off = r.offset, left = r.length;
  if (left == 0) return;
  if (r.is_tensor && left >= opts_.small_region) {
    FlushMixed(out);
    const bool continues = in_tensor_ && r.offset == tensor_end_ && r.name == tensor_name_ &&
                           r.dtype == tensor_dtype_ && (tensor_end_ - tensor_start_) % kRegionPieceBytes == 0;
    if (!continues) {
      tensor_start_ = r.offset;
      tensor_name_ = r.name;
      tensor_dtype_ = r.dtype;
    }
    in_tensor_ = true;
    tensor_end_ = r.offset + r.length;
    while (left > 0) {
      uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(left, opts_.chunk_size));
      ChunkSpec c;
      c.offset = off;
      c.length = n;
      c.dtype = r.dtype;
      c.tensor_chunk = true;
      c.region_name = r.name;
      c.region_length = tensor_end_ - tensor_start_;
      c.region_offset = off - tensor_start_;
      Emit(c, out);
      off += n;
      left -= n;
    }
    return;
  }
  // Small or non-tensor region: pack into the mixed chunk.
  in_tensor_ = false;
  while (left > 0) {
    if (mixed_.length == 0) {
      mixed_.offset = off;
      mixed_.dtype = r.dtype;
      mixed_uniform_ = true;
    } else if (mixed_.dtype != r.dtype) {
      mixed_uniform_ = false;
    }
    uint32_t room = opts_.chunk_size - mixed_.length;
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(left, room));
    mixed_.length += n;
    off += n;
    left -= n;
    if (mixed_.length == opts_.chunk_size) FlushMixed(out);
  }
}

void Chunker::Finish(std::vector<ChunkSpec>* out) { FlushMixed(out); }

}  // namespace lmc
