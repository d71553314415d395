#include "lmc/dtype.h"

#include <array>
#include <cctype>
#include <string>

namespace lmc {
namespace {

struct Info {
  DType t;
  size_t width;
  std::string_view name;
};

constexpr std::array<Info, kNumDTypes> kInfo = {{
    {DType::kBytes, 1, "bytes"},
    {DType::kBool, 1, "bool"},
    {DType::kI8, 1, "i8"},
    {DType::kU8, 1, "u8"},
    {DType::kI16, 2, "i16"},
    {DType::kU16, 2, "u16"},
    {DType::kI32, 4, "i32"},
    {DType::kU32, 4, "u32"},
    {DType::kI64, 8, "i64"},
    {DType::kU64, 8, "u64"},
    {DType::kF16, 2, "f16"},
    {DType::kBF16, 2, "bf16"},
    {DType::kF32, 4, "f32"},
    {DType::kF64, 8, "f64"},
    {DType::kF8E4M3, 1, "f8e4m3"},
    {DType::kF8E5M2, 1, "f8e5m2"},
}};

std::string Lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

bool DTypeValid(uint8_t v) { return v < kNumDTypes; }

size_t DTypeWidth(DType t) {
  auto i = static_cast<size_t>(t);
  return i < kInfo.size() ? kInfo[i].width : 1;
}

std::string_view DTypeName(DType t) {
  auto i = static_cast<size_t>(t);
  return i < kInfo.size() ? kInfo[i].name : "invalid";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  std::string n = Lower(name);
  for (const auto& i : kInfo)
    if (i.name == n) return i.t;
  if (n == "bfloat16") return DType::kBF16;
  if (n == "float16" || n == "half") return DType::kF16;
  if (n == "float32" || n == "float") return DType::kF32;
  if (n == "float64" || n == "double") return DType::kF64;
  if (n == "int8") return DType::kI8;
  if (n == "uint8") return DType::kU8;
  if (n == "int16") return DType::kI16;
  if (n == "int32") return DType::kI32;
  if (n == "int64") return DType::kI64;
  return std::nullopt;
}

std::optional<DType> DTypeFromSafetensors(std::string_view s) {
  static constexpr std::array<std::pair<std::string_view, DType>, 15> kMap = {{
      {"BOOL", DType::kBool},
      {"I8", DType::kI8},
      {"U8", DType::kU8},
      {"I16", DType::kI16},
      {"U16", DType::kU16},
      {"I32", DType::kI32},
      {"U32", DType::kU32},
      {"I64", DType::kI64},
      {"U64", DType::kU64},
      {"F16", DType::kF16},
      {"BF16", DType::kBF16},
      {"F32", DType::kF32},
      {"F64", DType::kF64},
      {"F8_E4M3", DType::kF8E4M3},
      {"F8_E5M2", DType::kF8E5M2},
  }};
  for (const auto& [k, v] : kMap)
    if (k == s) return v;
  return std::nullopt;
}

}  // namespace lmc
