// Streaming checkpoint layout parser (docs/ARCHITECTURE.md, "Layouts").
//
// Fed a file's bytes in order, it emits typed regions {offset, length,
// dtype, name} as soon as they are known, so that chunks can be cut at
// tensor boundaries and coded by dtype. Regions are emitted in order, are
// contiguous, non-empty, and start at offset 0: after Finish() they cover
// exactly the bytes fed. The parser is only a hint: any input, including a
// malformed or lying header, yields a valid cover (falling back to
// statistical dtype detection), and losslessness never depends on it.
//
// Emission. A region is emitted only once all of its bytes have been fed
// (or at Finish(), cut at the last byte fed), so a consumer may hold bytes
// until they are covered. Regions longer than 4 MiB are emitted in pieces
// cut at multiples of 4 MiB from the region's start (same name, dtype and
// is_tensor), each as soon as it is complete: the lag behind bytes_fed() is
// at most one piece or one smaller region. The regions do not depend on how
// the input is split across Feed() calls. Headers (safetensors JSON, torch
// data.pkl, GGUF metadata, npy dicts) are buffered up to 64 MiB; tensor data
// never is. Feed() after Finish() is ignored.
//
// Formats: safetensors, torch.save zip archives, npz/zip, npy, GGUF v2/v3.
// Everything else, and whatever a parser cannot explain, is cut into 1 MiB
// blocks typed by DetectDType() (is_tensor false). See codec/src/layout*.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmc/dtype.h"

namespace lmc {

enum class Format : uint8_t {
  kUnknown = 0,  // statistics only
  kSafetensors = 1,
  kTorchZip = 2,  // torch.save zip archive (data.pkl + data/N)
  kZip = 3,       // other zip (npz, ...)
  kGGUF = 4,
  kNpy = 5,
};
std::string_view FormatName(Format f);

// Pieces of long regions (see above): every piece but the last of a region
// is exactly this long, cut at multiples of it from the region's start.
inline constexpr uint64_t kRegionPieceBytes = uint64_t{4} << 20;

struct Region {
  uint64_t offset = 0;
  uint64_t length = 0;
  DType dtype = DType::kBytes;
  bool is_tensor = false;  // tensor payload (true) or header/metadata bytes
  std::string name;        // tensor name, zip member or storage key; may be empty
  bool operator==(const Region&) const = default;
};

class LayoutParser {
 public:
  // A parser that detects the format from the first bytes.
  static std::unique_ptr<LayoutParser> Create();
  virtual ~LayoutParser() = default;

  // Feeds the next n bytes of the file. Never fails.
  virtual void Feed(const uint8_t* data, size_t n) = 0;
  // Marks end of file; all remaining bytes get regions.
  virtual void Finish() = 0;
  // Moves out the regions completed since the last call.
  virtual std::vector<Region> TakeRegions() = 0;
  // Bytes fed so far, and the end of the last region emitted.
  virtual uint64_t bytes_fed() const = 0;
  virtual uint64_t bytes_covered() const = 0;
  virtual Format format() const = 0;
};

// Parses a whole in-memory file.
std::vector<Region> ParseLayout(const uint8_t* data, size_t n, Format* format = nullptr);

// Statistical element-type detection for data of unknown layout: the dtype
// among {bytes, bf16, f16, f32} whose regrouped streams have the lowest
// order-0 entropy on (a sample of) the data.
DType DetectDType(const uint8_t* data, size_t n);

}  // namespace lmc
