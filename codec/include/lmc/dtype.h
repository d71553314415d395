// Element types the codec understands. The numeric values are written into
// frames (docs/FORMAT.md, "Frame header") and must never be renumbered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lmc {

enum class DType : uint8_t {
  kBytes = 0,  // unknown / opaque: one byte stream
  kBool = 1,
  kI8 = 2,
  kU8 = 3,
  kI16 = 4,
  kU16 = 5,
  kI32 = 6,
  kU32 = 7,
  kI64 = 8,
  kU64 = 9,
  kF16 = 10,
  kBF16 = 11,
  kF32 = 12,
  kF64 = 13,
  kF8E4M3 = 14,
  kF8E5M2 = 15,
};
inline constexpr int kNumDTypes = 16;

// Bytes per element (1 for kBytes).
size_t DTypeWidth(DType t);
// Short lower-case name: "bf16", "f32", "bytes", ...
std::string_view DTypeName(DType t);
// Parses DTypeName() output and common aliases ("bfloat16", "float32").
std::optional<DType> DTypeFromName(std::string_view name);
// Safetensors' dtype strings: "BF16", "F32", "F8_E4M3", "BOOL", ...
std::optional<DType> DTypeFromSafetensors(std::string_view s);
// True when the raw byte value `v` is a valid DType.
bool DTypeValid(uint8_t v);
inline bool DTypeIsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64 ||
         t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

}  // namespace lmc
