// npy: "\x93NUMPY", major, minor, header length (u16 LE for v1, u32 LE for
// v2/v3), a Python dict literal padded with spaces and '\n', then the array.

#include <cctype>
#include <string>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc::layout {
namespace {

// A tiny cursor over the dict literal; every step is bounds-checked.
class DictScanner {
 public:
  explicit DictScanner(std::string_view s) : s_(s) {}
  void SkipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char ch) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == ch) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Quoted(std::string* out) {
    SkipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    char q = s_[i_++];
    size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  bool Word(std::string* out) {
    SkipSpace();
    size_t b = i_;
    while (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_]))) ++i_;
    *out = std::string(s_.substr(b, i_ - b));
    return i_ > b;
  }
  // Shape tuple "(a, b, )" -> element count, capped at kMaxExtent.
  bool Shape(uint64_t* numel) {
    if (!Eat('(')) return false;
    *numel = 1;
    while (true) {
      if (Eat(')')) return true;
      std::string w;
      if (!Word(&w) || w.size() > 20) return false;
      if (w.back() == 'L') w.pop_back();  // Python 2 longs
      if (w.empty()) return false;
      uint64_t v = 0;
      for (char ch : w) {
        if (ch < '0' || ch > '9') return false;
        v = v * 10 + static_cast<uint64_t>(ch - '0');
        if (v > kMaxExtent) return false;
      }
      *numel = v == 0 ? 0 : (*numel > kMaxExtent / v ? kMaxExtent + 1 : *numel * v);
      if (*numel > kMaxExtent) return false;
      if (!Eat(',')) return Eat(')');
    }
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

bool DTypeFromDescr(std::string_view d, DType* t) {
  if (d.size() < 3) return false;
  char order = d[0];
  std::string_view code = d.substr(1);
  bool one_byte = code.size() == 2 && code[1] == '1';
  if (order == '>' && !one_byte) return false;  // big-endian: not our element order
  if (order != '<' && order != '|' && order != '=' && order != '>') return false;
  struct Entry {
    std::string_view code;
    DType t;
  };
  static constexpr Entry kMap[] = {
      {"f2", DType::kF16}, {"f4", DType::kF32}, {"f8", DType::kF64}, {"i1", DType::kI8},
      {"i2", DType::kI16}, {"i4", DType::kI32}, {"i8", DType::kI64}, {"u1", DType::kU8},
      {"u2", DType::kU16}, {"u4", DType::kU32}, {"u8", DType::kU64}, {"b1", DType::kBool},
  };
  for (const auto& e : kMap) {
    if (e.code == code) {
      *t = e.t;
      return true;
    }
  }
  return false;
}

}  // namespace

size_t NpyPrefixSize(std::string_view head) {
  if (head.size() < 8 || head.substr(0, 6) != std::string_view("\x93NUMPY", 6)) return 0;
  uint8_t major = static_cast<uint8_t>(head[6]);
  if (major == 1) return 10;
  if (major == 2 || major == 3) return 12;
  return 0;
}

uint64_t NpyDictLength(std::string_view prefix) {
  return prefix.size() >= 12 ? LoadLE32(prefix.data() + 8) : LoadLE16(prefix.data() + 8);
}

bool ParseNpyDict(std::string_view dict, NpyArray* out) {
  DictScanner s(dict);
  if (!s.Eat('{')) return false;
  bool have_descr = false, have_shape = false;
  uint64_t numel = 0;
  while (!s.Eat('}')) {
    std::string key;
    if (!s.Quoted(&key) || !s.Eat(':')) return false;
    if (key == "descr") {
      std::string descr;
      if (!s.Quoted(&descr) || !DTypeFromDescr(descr, &out->dtype)) return false;
      have_descr = true;
    } else if (key == "shape") {
      if (!s.Shape(&numel)) return false;
      have_shape = true;
    } else if (key == "fortran_order") {
      // Either order is one contiguous run of elements.
      std::string w;
      if (!s.Word(&w) || (w != "True" && w != "False")) return false;
    } else {
      return false;
    }
    if (!s.Eat(',')) {
      if (!s.Eat('}')) return false;
      break;
    }
  }
  if (!have_descr || !have_shape) return false;
  out->data_bytes = numel * DTypeWidth(out->dtype);
  return true;
}

ParseTask ParseNpy(LayoutContext& c) {
  std::string_view head = co_await c.Peek(8);
  size_t prefix_size = NpyPrefixSize(head);
  if (prefix_size == 0) co_return;
  std::string_view prefix = co_await c.Read(prefix_size);
  if (prefix.size() < prefix_size) co_return;
  uint64_t dict_len = NpyDictLength(prefix);
  if (dict_len > kHeaderCap) co_return;
  std::string_view dict = co_await c.Read(static_cast<size_t>(dict_len));
  if (dict.size() < dict_len) co_return;
  NpyArray arr;
  bool ok = ParseNpyDict(dict, &arr);
  c.Plan(prefix_size + dict_len, DType::kBytes, false, {});
  if (!ok) co_return;
  c.Plan(arr.data_bytes, arr.dtype, true, {});
}

}  // namespace lmc::layout
