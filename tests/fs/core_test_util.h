// Helpers of the filesystem core's tests (no mount).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lmc::fs::testing {

// n bytes of bf16-like weights (the high halves of N(0, 0.02) floats):
// compressible, detected as bf16, different per seed.
inline std::string Bf16Like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 0.02f);
  std::string s(n, '\0');
  for (size_t i = 0; i + 1 < n; i += 2) {
    float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    s[i] = static_cast<char>(u >> 16);
    s[i + 1] = static_cast<char>(u >> 24);
  }
  return s;
}

// A safetensors file of the tensors' bytes in order (named t0, t1, ...,
// or w for a single tensor), all of one dtype of elem_size bytes.
inline std::string SafetensorsOf(const char* dtype, size_t elem_size,
                                 const std::vector<std::string>& tensors) {
  std::string h = "{";
  uint64_t at = 0;
  for (size_t i = 0; i < tensors.size(); i++) {
    const std::string name = tensors.size() == 1 ? "w" : "t" + std::to_string(i);
    h += (i ? ",\"" : "\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" +
         std::to_string(tensors[i].size() / elem_size) + "],\"data_offsets\":[" + std::to_string(at) + "," +
         std::to_string(at + tensors[i].size()) + "]}";
    at += tensors[i].size();
  }
  h += "}";
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>(h.size() >> (8 * i));
  f += h;
  for (const std::string& t : tensors) f += t;
  return f;
}

// A one-tensor safetensors file: header, then the tensor's bytes.
inline std::string Safetensors(const char* dtype, size_t elems, const std::string& bytes) {
  return SafetensorsOf(dtype, elems ? bytes.size() / elems : 1, {bytes});
}

// The whole pages inside [p, p+n): how many there are, and how many of
// them are resident (mincore reads no byte). A page no longer mapped (a
// heap given back whole) is not resident; any other mincore error sets
// `error`.
struct PageCount {
  size_t whole = 0, resident = 0;
  bool error = false;
};
inline PageCount CountPages(const void* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  PageCount c;
  for (uintptr_t a = lo; a < hi; a += page) {
    ++c.whole;
    unsigned char v = 0;
    if (mincore(reinterpret_cast<void*>(a), page, &v) == 0) {
      c.resident += v & 1;
    } else if (errno != ENOMEM) {
      c.error = true;
    }
  }
  return c;
}

// The inode numbers an attribute listener (FsOps::SetAttrListener) was
// told of, from any thread; Take returns them in order and forgets them
// (TakeData: those told with data = true). Must outlive the listener's
// installation.
class AttrNotices {
 public:
  std::function<void(uint64_t, bool)> Listener() {
    return [this](uint64_t ino, bool data) {
      std::lock_guard l(mu_);
      told_.push_back(ino);
      if (data) data_.push_back(ino);
    };
  }
  std::vector<uint64_t> Take() {
    std::lock_guard l(mu_);
    return std::exchange(told_, {});
  }
  std::vector<uint64_t> TakeData() {
    std::lock_guard l(mu_);
    return std::exchange(data_, {});
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> told_, data_;
};

// What an FsOps's entry listener told: (directory inode, name), in order.
class EntryNotices {
 public:
  std::function<void(uint64_t, std::string_view)> Listener() {
    return [this](uint64_t parent, std::string_view name) {
      std::lock_guard l(mu_);
      told_.emplace_back(parent, std::string(name));
    };
  }
  std::vector<std::pair<uint64_t, std::string>> Take() {
    std::lock_guard l(mu_);
    return std::exchange(told_, {});
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<uint64_t, std::string>> told_;
};

}  // namespace lmc::fs::testing
