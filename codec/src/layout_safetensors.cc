// safetensors: u64 LE header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, "__metadata__": {..}}
// then the data; offsets are relative to the end of the header.

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc::layout {
namespace {

struct Tensor {
  std::string name;
  DType dtype;
  uint64_t begin;
  uint64_t end;
};

bool ReadUnsigned(const nlohmann::json& j, uint64_t* v) {
  if (!j.is_number_unsigned()) return false;
  *v = j.get<uint64_t>();
  return true;
}

// The tensors of a header, sorted by offset, or false when the header is not
// one we can trust (every extent is checked against dtype and shape).
bool ParseHeader(std::string_view text, std::vector<Tensor>* out) {
  try {
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return false;
    for (const auto& [name, info] : doc.items()) {
      if (name == "__metadata__") continue;
      if (!info.is_object()) return false;
      auto dt = info.find("dtype");
      auto shape = info.find("shape");
      auto offsets = info.find("data_offsets");
      if (dt == info.end() || shape == info.end() || offsets == info.end()) return false;
      if (!dt->is_string() || !shape->is_array() || !offsets->is_array() || offsets->size() != 2)
        return false;
      Tensor t{name, DType::kBytes, 0, 0};
      if (!ReadUnsigned((*offsets)[0], &t.begin) || !ReadUnsigned((*offsets)[1], &t.end)) return false;
      if (t.begin > t.end || t.end > kMaxExtent) return false;
      uint64_t numel = 1;
      for (const auto& d : *shape) {
        uint64_t v;
        if (!ReadUnsigned(d, &v) || v > kMaxExtent) return false;
        numel = v == 0 ? 0 : (numel > kMaxExtent / v ? kMaxExtent + 1 : numel * v);
        if (numel > kMaxExtent) return false;
      }
      if (auto known = DTypeFromSafetensors(dt->get<std::string>())) {
        t.dtype = *known;
        if (numel * DTypeWidth(t.dtype) != t.end - t.begin) return false;
      }
      // Unknown dtype strings (F4, F8_E8M0, ...) keep their extent as bytes.
      out->push_back(std::move(t));
    }
  } catch (...) {
    return false;
  }
  std::sort(out->begin(), out->end(), [](const Tensor& a, const Tensor& b) { return a.begin < b.begin; });
  uint64_t prev_end = 0;
  for (const auto& t : *out) {
    if (t.begin < prev_end) return false;  // overlap
    prev_end = std::max(prev_end, t.end);
  }
  return true;
}

}  // namespace

ParseTask ParseSafetensors(LayoutContext& c) {
  std::string_view len_bytes = co_await c.Read(8);
  if (len_bytes.size() < 8) co_return;
  uint64_t header_len = LoadLE64(len_bytes.data());
  if (header_len < 2 || header_len > kHeaderCap) co_return;
  std::string_view header = co_await c.Read(static_cast<size_t>(header_len));
  if (header.size() < header_len) co_return;
  std::vector<Tensor> tensors;
  bool ok = ParseHeader(header, &tensors);
  c.Plan(8 + header_len, DType::kBytes, false, {});
  if (!ok) co_return;
  const uint64_t data_start = 8 + header_len;
  for (auto& t : tensors) {
    uint64_t start = data_start + t.begin;
    if (start > c.planned_end()) c.Plan(start - c.planned_end(), DType::kBytes, false, {});
    c.Plan(t.end - t.begin, t.dtype, true, std::move(t.name));
  }
  // Bytes after the last tensor: statistics.
}

}  // namespace lmc::layout
