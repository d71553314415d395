// GGUF v2/v3 (llama.cpp):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 type, value },     string = u64 len + bytes
//   n_tensors x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset },
//   padding to general.alignment (default 32), then the data section;
//   tensor offsets are relative to the data section.

#include <algorithm>
#include <string>
#include <vector>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc::layout {
namespace {

// GGUF metadata value types.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Size of a fixed-size value type, 0 for string, array and unknown types.
uint64_t ScalarSize(uint64_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

struct GgmlType {
  uint32_t id;
  DType dtype;     // kBytes for quantized blocks
  uint32_t block;  // elements per block
  uint32_t bytes;  // bytes per block
};

// ggml.h's type ids with their block geometry (ggml.c's type_traits).
constexpr GgmlType kGgmlTypes[] = {
    {0, DType::kF32, 1, 4},        {1, DType::kF16, 1, 2},        {2, DType::kBytes, 32, 18},
    {3, DType::kBytes, 32, 20},    {6, DType::kBytes, 32, 22},    {7, DType::kBytes, 32, 24},
    {8, DType::kBytes, 32, 34},    {9, DType::kBytes, 32, 36},    {10, DType::kBytes, 256, 84},
    {11, DType::kBytes, 256, 110}, {12, DType::kBytes, 256, 144}, {13, DType::kBytes, 256, 176},
    {14, DType::kBytes, 256, 210}, {15, DType::kBytes, 256, 292}, {16, DType::kBytes, 256, 66},
    {17, DType::kBytes, 256, 74},  {18, DType::kBytes, 256, 98},  {19, DType::kBytes, 256, 50},
    {20, DType::kBytes, 32, 18},   {21, DType::kBytes, 256, 110}, {22, DType::kBytes, 256, 82},
    {23, DType::kBytes, 256, 136}, {24, DType::kI8, 1, 1},        {25, DType::kI16, 1, 2},
    {26, DType::kI32, 1, 4},       {27, DType::kI64, 1, 8},       {28, DType::kF64, 1, 8},
    {29, DType::kBytes, 256, 56},  {30, DType::kBF16, 1, 2},      {34, DType::kBytes, 256, 54},
    {35, DType::kBytes, 256, 66},
};

const GgmlType* FindGgmlType(uint64_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

struct TensorInfo {
  std::string name;
  uint64_t offset;
  uint64_t size;  // 0: unknown (unknown type or shape not a whole number of blocks)
  DType dtype;
};

constexpr uint64_t kMaxKeyLen = 1 << 16;
constexpr uint64_t kMaxDims = 16;

}  // namespace

ParseTask ParseGguf(LayoutContext& c) {
  std::string_view h = co_await c.Read(24);
  if (h.size() < 24) co_return;
  uint64_t version = LoadLE32(h.data() + 4);
  if (version != 2 && version != 3) co_return;
  uint64_t n_tensors = LoadLE64(h.data() + 8);
  uint64_t n_kv = LoadLE64(h.data() + 16);
  uint64_t alignment = 32;

  // Every step consumes at least one byte, and the walk stops at kHeaderCap,
  // so lying counts end it instead of looping.
  for (uint64_t i = 0; i < n_kv; ++i) {
    if (c.pos() > kHeaderCap) co_return;
    std::string_view v = co_await c.Read(8);
    if (v.size() < 8) co_return;
    uint64_t key_len = LoadLE64(v.data());
    if (key_len > kMaxKeyLen) co_return;
    v = co_await c.Read(static_cast<size_t>(key_len) + 4);
    if (v.size() < key_len + 4) co_return;
    bool is_alignment = v.substr(0, key_len) == "general.alignment";
    uint64_t type = LoadLE32(v.data() + key_len);
    if (type == kString) {
      v = co_await c.Read(8);
      if (v.size() < 8) co_return;
      uint64_t len = LoadLE64(v.data());
      if (len > kHeaderCap || co_await c.Skip(len) < len) co_return;
    } else if (type == kArray) {
      v = co_await c.Read(12);
      if (v.size() < 12) co_return;
      uint64_t elem_type = LoadLE32(v.data());
      uint64_t count = LoadLE64(v.data() + 4);
      if (elem_type == kString) {
        for (uint64_t k = 0; k < count; ++k) {
          if (c.pos() > kHeaderCap) co_return;
          v = co_await c.Read(8);
          if (v.size() < 8) co_return;
          uint64_t len = LoadLE64(v.data());
          if (len > kHeaderCap || co_await c.Skip(len) < len) co_return;
        }
      } else {
        uint64_t width = ScalarSize(elem_type);
        if (width == 0 || count > kHeaderCap / width) co_return;  // nested arrays: give up
        if (co_await c.Skip(count * width) < count * width) co_return;
      }
    } else {
      uint64_t width = ScalarSize(type);
      if (width == 0) co_return;
      v = co_await c.Read(width);
      if (v.size() < width) co_return;
      if (is_alignment && type == kU32) {
        alignment = LoadLE32(v.data());
        if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20)) co_return;
      }
    }
  }

  std::vector<TensorInfo> tensors;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    if (c.pos() > kHeaderCap) co_return;
    std::string_view v = co_await c.Read(8);
    if (v.size() < 8) co_return;
    uint64_t name_len = LoadLE64(v.data());
    if (name_len > kMaxKeyLen) co_return;
    v = co_await c.Read(static_cast<size_t>(name_len) + 4);
    if (v.size() < name_len + 4) co_return;
    TensorInfo t{std::string(v.substr(0, name_len)), 0, 0, DType::kBytes};
    uint64_t n_dims = LoadLE32(v.data() + name_len);
    if (n_dims > kMaxDims) co_return;
    v = co_await c.Read(static_cast<size_t>(n_dims) * 8 + 12);
    if (v.size() < n_dims * 8 + 12) co_return;
    uint64_t numel = 1;
    for (uint64_t d = 0; d < n_dims; ++d) {
      uint64_t dim = LoadLE64(v.data() + d * 8);
      if (dim > kMaxExtent) co_return;
      numel = dim == 0 ? 0 : (numel > kMaxExtent / dim ? kMaxExtent + 1 : numel * dim);
      if (numel > kMaxExtent) co_return;
    }
    uint64_t type = LoadLE32(v.data() + n_dims * 8);
    t.offset = LoadLE64(v.data() + n_dims * 8 + 4);
    if (t.offset > kMaxExtent) co_return;
    if (const GgmlType* g = FindGgmlType(type)) {
      t.dtype = g->dtype;
      if (numel % g->block == 0) t.size = numel / g->block * g->bytes;
    }
    tensors.push_back(std::move(t));
  }

  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  c.Plan(data_start, DType::kBytes, false, {});
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& t = tensors[i];
    uint64_t start = data_start + t.offset;
    if (start < c.planned_end()) co_return;  // overlap: the rest is statistics
    uint64_t size = t.size;
    if (size == 0) {
      // Unknown geometry: up to the next tensor, if there is one.
      if (i + 1 == tensors.size()) co_return;
      size = tensors[i + 1].offset - t.offset;
    }
    if (start > c.planned_end()) c.Plan(start - c.planned_end(), DType::kBytes, false, {});
    c.Plan(size, t.dtype, true, std::move(t.name));
  }
}

}  // namespace lmc::layout
