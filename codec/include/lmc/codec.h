// The LMC chunk codec: one independent, self-describing, checksummed frame
// per chunk (docs/FORMAT.md, "Frame"). Chunks share nothing, so any number
// of threads encode and decode at once, each with its own Workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lmc/dtype.h"
#include "lmc/status.h"

namespace lmc {

// Largest chunk a frame can hold (decoded size is a u32 and streams must
// stay addressable with 32-bit offsets).
inline constexpr size_t kMaxChunkSize = size_t{1} << 30;

// Entropy coder of one stream (docs/FORMAT.md, "Stream coders"). Values are
// written into frames.
enum class Coder : uint8_t {
  kRaw = 0,      // stored as is
  kConst = 1,    // one symbol repeated
  kHuffman = 2,  // canonical, length-limited, 4 interleaved bit streams
  kRans = 3,     // 4-way interleaved rANS, 12-bit probabilities (< 1 bit/symbol)
  // Canonical, length-limited Huffman in independent blocks of 2^k symbols
  // with a table of block bit lengths (frame version 2): thousands of
  // decoders per chunk for GPUs, CPU threads and SIMD lanes.
  kHuffmanBlocked = 4,
  // rANS as kRans with 32 interleaved states (frame version 5): whole
  // rounds of 32 symbols go through vector registers, about 1.5x kRans's speed,
  // for 112 bytes more per stream; chosen for streams of 64 Ki symbols or
  // more.
  kRansX32 = 5,
};
const char* CoderName(Coder c);

// Per-thread scratch memory. Grows to the largest chunk seen and is reused,
// so steady-state encode and decode allocate nothing. Not thread-safe: one
// Workspace per thread.
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // Returns a buffer of at least n bytes, valid until the next call.
  uint8_t* Scratch(size_t n);
  // Bytes held (0 before the first Scratch call).
  size_t capacity() const { return cap_; }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0;
};

// Which coders the encoder may choose (docs/FORMAT.md, "Encode profiles").
// Every profile's frames decode everywhere; the profile only narrows the
// encoder's choices.
enum class EncodeProfile : uint8_t {
  kCpu = 0,  // raw, const, blocked Huffman, rANS: frames the GPU decodes block-parallel
  kGpu = 1,  // raw, const, blocked Huffman, rANS (integer-normalised tables); what the GPU encoder writes
  // kCpu as lmc wrote it before blocked Huffman (Huffman in 4 sub-streams,
  // version-1 frames where no other feature needs more): for tests and
  // benchmarks of the frames that older stores hold.
  kCpuQuarters = 2,
};

struct EncodeParams {
  DType dtype = DType::kBytes;
  // Optional XOR base of the same length as the input (incremental delta).
  // The decoder must be given the same base bytes.
  const uint8_t* base = nullptr;
  EncodeProfile profile = EncodeProfile::kCpu;
  // With `base`: `base` is a bf16 chunk of base_len bytes (an fp32 master's
  // twin), and the XOR operand is its values from element
  // `widened_base_offset` on, widened to fp32 (WidenBf16) by the encoder;
  // the frame records the offset, and the decoder is given the same chunk.
  std::optional<uint32_t> widened_base_offset{};
  size_t base_len = 0;  // with widened_base_offset
  // With widened_base_offset: may the encoder predict the rounding
  // (docs/FORMAT.md, "Frame", flag 0x04)? It does when that mispredicts
  // fewer upper halves than the plain widened base (round to nearest:
  // almost none; truncation: the plain base is exact). Off: tests.
  bool predict_rounding = true;
  // Blocked Huffman streams (docs/FORMAT.md, 5.3): log2 of the symbols a
  // block, 8-12 (else InvalidArgument). Smaller blocks give a GPU more
  // decoders (a thread a block) for 2 bytes a block more; the mount and
  // lmc write 12. A GPU codec writes the size of its
  // GpuCodecOptions::huffman_block_log2 (and decodes 2^9 to 2^12).
  int huffman_block_log2 = 12;
};

// Worst-case frame size for a chunk of n bytes; EncodeChunk never needs
// more. Frames of incompressible data are at most a few dozen bytes larger
// than n.
size_t MaxEncodedSize(size_t n);

// Encodes src[0, n) into dst (cap bytes; cap >= MaxEncodedSize(n) always
// suffices). Returns the frame size.
Result<size_t> EncodeChunk(const uint8_t* src, size_t n, const EncodeParams& params, uint8_t* dst, size_t cap,
                           Workspace& ws);

struct StreamInfo {
  Coder coder;
  uint32_t encoded_size;  // bytes of payload in the frame
  uint32_t decoded_size;  // bytes of the regrouped stream
};

// A frame's stream table, held inline: parsing a frame allocates nothing.
class StreamList {
 public:
  static constexpr size_t kCapacity = 9;  // 8 byte planes + tail
  size_t size() const { return n_; }
  void resize(size_t n) { n_ = n <= kCapacity ? n : kCapacity; }
  StreamInfo& operator[](size_t i) { return s_[i]; }
  const StreamInfo& operator[](size_t i) const { return s_[i]; }
  const StreamInfo* begin() const { return s_; }
  const StreamInfo* end() const { return s_ + n_; }

 private:
  StreamInfo s_[kCapacity] = {};
  size_t n_ = 0;
};

struct FrameInfo {
  uint8_t version = 0;
  DType dtype = DType::kBytes;
  bool xor_delta = false;     // needs the base buffer to decode
  bool widened_base = false;  // with xor_delta: the base is a bf16 chunk, widened from base_offset
  bool predicted = false;     // with widened_base: the rounding is predicted (version 4)
  uint32_t base_offset = 0;   // first bf16 element of the base range
  uint32_t decoded_size = 0;  // bytes of the chunk
  uint32_t frame_size = 0;    // bytes of the whole frame
  uint32_t header_size = 0;   // bytes before the first stream payload
  uint64_t checksum = 0;      // XXH3-64 of the decoded chunk
  StreamList streams;
};

// What a frame's first kFramePeekBytes bytes say (magic, version, dtype,
// flags), for callers that read no more of it (the store's figures and its
// base cache). Corruption on a bad magic, dtype or flags.
inline constexpr size_t kFramePeekBytes = 8;
struct FrameKind {
  DType dtype = DType::kBytes;
  bool xor_delta = false;
  bool widened_base = false;
};
Result<FrameKind> PeekFrame(const uint8_t* frame, size_t len);

// Parses and checks a frame's header (magic, version, header checksum,
// sizes). `len` may exceed the frame; frame_size tells where it ends.
Result<FrameInfo> ReadFrameInfo(const uint8_t* frame, size_t len);

// The XOR operand of a fp32 chunk paired with a bf16 chunk: for each of the
// n_out fp32 values, the bf16 value at bf16[offset + i] as the fp32 bit
// pattern (bf16 << 16). out holds 4 * n_out bytes.
void WidenBf16(const uint8_t* bf16, size_t offset, size_t n_out, uint8_t* out);

// The rounding-predicted XOR operand (docs/FORMAT.md, "Frame", flag 0x04)
// of the fp32 values f32[0, n) (n bytes) against their bf16 twins bf16[0,
// n / 4): for each value, the upper half that round to nearest even gives
// the twin from the value's own lower half, shifted up 16 bits, into out (n
// bytes). Returns whether it mispredicts fewer upper halves than the plain
// widened twins do (the encoder's choice).
bool PredictedTwinOperand(const uint8_t* f32, size_t n, const uint8_t* bf16, uint8_t* out);

// Decodes a frame into dst (dst_cap >= decoded_size). `base` must be the
// base used to encode when the frame is a delta (base_len == decoded_size),
// or, for a widened base, the bf16 chunk it was widened from
// (base_len >= 2 * (base_offset + decoded_size / 4)); it is ignored
// otherwise. Verifies the decoded checksum. Any malformed or
// corrupted input yields Corruption, never a crash or an out-of-bounds access.
Result<size_t> DecodeChunk(const uint8_t* frame, size_t len, const uint8_t* base, size_t base_len,
                           uint8_t* dst, size_t dst_cap, Workspace& ws);

// XXH3-64 of a buffer: the frame's decoded checksum.
uint64_t Checksum64(const uint8_t* p, size_t n);

}  // namespace lmc
