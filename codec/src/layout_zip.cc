// Zip walker for torch.save archives (and DeepSpeed / Megatron checkpoints,
// which are torch.save archives) and npz files. It follows the local file
// headers in file order, which is how both writers lay members out:
//
//   local header  "PK\3\4" ver flags method time date crc csize usize nlen xlen
//                 name, extra (zip64 sizes in extra id 0x0001; torch pads
//                 with extra so that member data is 64-byte aligned)
//   member data   csize bytes
//   [descriptor]  when flags bit 3: ["PK\7\8"] crc csize usize (8-byte sizes for zip64)
//   ... central directory "PK\1\2", zip64 end "PK\6\6", locator "PK\6\7", end "PK\5\6"
//
// torch: "<archive>/data.pkl" comes first and maps storage keys to dtypes;
// stored members "<archive>/data/<key>" are the storages. npz: stored
// "<name>.npy" members hold an npy header and the array.
//
// Archives may follow one another: PyTorch DCP's .distcp files are one
// torch.save archive per tensor, end to end, each with its storage "data/0".
// A storage's region is named "data/<key>" in the first archive and
// "<n>:data/<key>" in the n-th after it, so that every tensor of such a
// file has a name of its own: the name is what finds a chunk's prior
// version (fs lineage keys), and with one name for all each tensor would
// be matched to whichever tensor of its shape came last.

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc::layout {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kDescriptorSig = 0x08074b50;
constexpr uint32_t kNoSize = 0xFFFFFFFF;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<archive>/data/<key>" or "data/<key>" -> key.
bool StorageKey(std::string_view name, std::string* key) {
  size_t at;
  if (name.substr(0, 5) == "data/") {
    at = 5;
  } else {
    size_t p = name.rfind("/data/");
    if (p == std::string_view::npos) return false;
    at = p + 6;
  }
  std::string_view k = name.substr(at);
  if (k.empty() || k.find('/') != std::string_view::npos) return false;
  *key = std::string(k);
  return true;
}

// Replaces 0xFFFFFFFF sizes by those of the zip64 extra field. False when a
// size stays unknown. *zip64 tells whether the field is there at all (then a
// data descriptor has 8-byte sizes).
bool ApplyZip64(std::string_view extra, uint64_t* usize, uint64_t* csize, bool* zip64) {
  *zip64 = false;
  size_t i = 0;
  while (extra.size() - i >= 4) {
    uint64_t id = LoadLE16(extra.data() + i);
    uint64_t len = LoadLE16(extra.data() + i + 2);
    i += 4;
    if (len > extra.size() - i) break;
    if (id == 0x0001) {
      *zip64 = true;
      std::string_view d = extra.substr(i, static_cast<size_t>(len));
      size_t off = 0;
      // The local header's zip64 record holds both sizes, uncompressed first.
      if (*usize == kNoSize || d.size() >= 16) {
        if (d.size() < off + 8) return false;
        *usize = LoadLE64(d.data() + off);
        off += 8;
      }
      if (*csize == kNoSize || d.size() >= 16) {
        if (d.size() < off + 8) return false;
        *csize = LoadLE64(d.data() + off);
      }
      return true;
    }
    i += static_cast<size_t>(len);
  }
  return *usize != kNoSize && *csize != kNoSize;
}

// Bytes a scan keeps beyond the positions it tests: the longest descriptor
// (24) and the "PK" of the record after it.
constexpr size_t kScanSlack = 26;
constexpr size_t kScanStep = size_t{64} << 10;

// Length of a data descriptor at v[at] for a member of `len` bytes, or 0.
// torch.save (miniz) writes every member this way, with sizes 0 in the local
// header. The descriptor's compressed size must equal `len` and, when
// visible, another zip record must follow; the width matching the local
// header (8-byte sizes with a zip64 extra) is tried first.
size_t DescriptorAt(std::string_view v, size_t at, uint64_t len, bool zip64, bool require_sig) {
  auto form = [&](bool sig, bool wide) -> size_t {
    size_t n = (sig ? 4 : 0) + 4 + (wide ? 16 : 8);
    if (at > v.size() || v.size() - at < n) return 0;
    if (sig && LoadLE32(v.data() + at) != kDescriptorSig) return 0;
    if (LoadLEBytes(v.data() + at + n - (wide ? 16 : 8), wide ? 8 : 4) != len) return 0;
    if (v.size() - at >= n + 2 && v.substr(at + n, 2) != "PK") return 0;
    return n;
  };
  for (bool wide : {zip64, !zip64}) {
    if (size_t n = form(true, wide)) return n;
    if (!require_sig) {
      if (size_t n = form(false, wide)) return n;
    }
  }
  return 0;
}

// First position in [from, limit) of v where a signed descriptor for a
// member of (base + position) bytes starts, or npos.
size_t FindDescriptor(std::string_view v, size_t from, size_t limit, uint64_t base, bool zip64) {
  for (size_t p = from; p < limit;) {
    const void* hit = std::memchr(v.data() + p, 'P', limit - p);
    if (!hit) break;
    p = static_cast<size_t>(static_cast<const char*>(hit) - v.data());
    if (DescriptorAt(v, p, base + p, zip64, /*require_sig=*/true)) return p;
    ++p;
  }
  return std::string_view::npos;
}

}  // namespace

ParseTask ParseZip(LayoutContext& c) {
  // Plans what was read but not planned yet (headers, directory records).
  auto flush = [&c] {
    if (c.pos() > c.planned_end()) c.Plan(c.pos() - c.planned_end(), DType::kBytes, false, {});
  };
  TorchStorages storages;
  bool torch = false;
  bool first = true;
  uint64_t archive = 0;    // archives ended before this one
  bool after_end = false;  // an end record was the last record read
  while (true) {
    std::string_view sig_bytes = co_await c.Peek(4);
    if (sig_bytes.size() < 4) break;
    uint64_t sig = LoadLE32(sig_bytes.data());

    if (sig == kCentralSig) {
      std::string_view h = co_await c.Read(46);
      if (h.size() < 46) break;
      uint64_t rest = LoadLE16(h.data() + 28) + LoadLE16(h.data() + 30) + LoadLE16(h.data() + 32);
      if (co_await c.Skip(rest) < rest) break;
      continue;
    }
    if (sig == kZip64EndSig) {
      std::string_view h = co_await c.Read(12);
      if (h.size() < 12) break;
      uint64_t rest = LoadLE64(h.data() + 4);
      if (rest > kHeaderCap || co_await c.Skip(rest) < rest) break;
      continue;
    }
    if (sig == kZip64LocatorSig) {
      if ((co_await c.Read(20)).size() < 20) break;
      continue;
    }
    if (sig == kEndSig) {
      std::string_view h = co_await c.Read(22);
      if (h.size() < 22) break;
      uint64_t comment = LoadLE16(h.data() + 20);
      if (co_await c.Skip(comment) < comment) break;
      flush();
      after_end = true;
      continue;
    }
    if (sig != kLocalSig) break;
    if (after_end) {
      ++archive;
      after_end = false;
    }

    // Local file header. Its region also takes in the previous member's
    // data descriptor (one region, not two tiny ones).
    std::string_view h = co_await c.Read(30);
    if (h.size() < 30) break;
    const uint64_t flags = LoadLE16(h.data() + 6);
    const uint64_t method = LoadLE16(h.data() + 8);
    uint64_t csize = LoadLE32(h.data() + 18);
    uint64_t usize = LoadLE32(h.data() + 22);
    const size_t name_len = static_cast<size_t>(LoadLE16(h.data() + 26));
    const size_t extra_len = static_cast<size_t>(LoadLE16(h.data() + 28));
    std::string_view ne = co_await c.Read(name_len + extra_len);
    if (ne.size() < name_len + extra_len) break;
    const std::string name(ne.substr(0, name_len));
    bool zip64 = false;
    if (!ApplyZip64(ne.substr(name_len), &usize, &csize, &zip64)) break;
    flush();  // the header (and what came before it unplanned)
    if (csize > kMaxExtent) break;
    // Bit 3 with zero sizes: the length is only in the descriptor after the data.
    const bool deferred = (flags & 8) && csize == 0;

    if (first && EndsWith(name, "data.pkl")) {
      torch = true;
      c.set_format(Format::kTorchZip);
    }
    first = false;
    std::string key;
    const bool is_pickle = torch && method == 0 && EndsWith(name, "data.pkl");
    const bool is_storage = torch && method == 0 && StorageKey(name, &key);
    const bool is_npy = method == 0 && !deferred && !is_storage && EndsWith(name, ".npy");
    std::optional<uint64_t> len;
    if (!deferred) {
      len = csize;
    } else if (is_storage) {
      auto it = storages.find(key);
      if (it != storages.end() && it->second.sized) len = it->second.nbytes;
    }
    uint64_t member_len = len.value_or(0);

    if (is_pickle) {
      if (!len) {
        // Buffer the pickle while looking for its descriptor.
        size_t scanned = 0;
        while (true) {
          size_t window = scanned + kScanStep + kScanSlack;
          if (window > kHeaderCap) break;
          std::string_view v = co_await c.Peek(window);
          size_t limit = v.size() < window ? v.size() : v.size() - kScanSlack;
          size_t at = FindDescriptor(v, scanned, limit, 0, zip64);
          if (at != std::string_view::npos) {
            len = at;
            break;
          }
          if (v.size() < window) break;
          scanned = limit;
        }
      }
      if (!len || *len > kHeaderCap) break;
      member_len = *len;
      std::string_view pkl = co_await c.Read(static_cast<size_t>(member_len));
      if (pkl.size() < member_len) break;
      storages = ReadTorchPickle(pkl);
      c.Plan(member_len, DType::kBytes, false, name);
    } else if (is_npy && csize >= 10) {
      const uint64_t member_end = c.pos() + csize;
      std::string_view head = co_await c.Peek(8);
      size_t prefix_size = NpyPrefixSize(head);
      bool ok = prefix_size != 0 && prefix_size <= csize;
      NpyArray arr;
      if (ok) {
        std::string_view prefix = co_await c.Read(prefix_size);
        if (prefix.size() < prefix_size) break;
        uint64_t dict_len = NpyDictLength(prefix);
        uint64_t header_len = prefix_size + dict_len;
        ok = header_len <= csize && dict_len <= kHeaderCap;
        if (ok) {
          std::string_view dict = co_await c.Read(static_cast<size_t>(dict_len));
          if (dict.size() < dict_len) break;
          ok = ParseNpyDict(dict, &arr) && arr.data_bytes == csize - header_len;
          c.Plan(header_len, DType::kBytes, false, name);
        }
      }
      if (ok) {
        c.Plan(arr.data_bytes, arr.dtype, true, name.substr(0, name.size() - 4));
      } else {
        // The rest of the member (all of it, or all after its header): opaque.
        c.Plan(member_end - c.planned_end(), DType::kBytes, false, name);
      }
      uint64_t member_left = member_end - c.pos();
      if (co_await c.Skip(member_left) < member_left) break;
    } else {
      // Storages and opaque members.
      DType dtype = DType::kBytes;
      bool tensor = false;
      std::string region_name = name;
      if (is_storage) {
        tensor = true;
        region_name = archive ? std::to_string(archive) + ":data/" + key : "data/" + key;
        auto it = storages.find(key);
        if (it != storages.end() && it->second.typed) {
          dtype = it->second.dtype;
        } else {
          size_t want = static_cast<size_t>(std::min<uint64_t>(len.value_or(kSampleBytes), kSampleBytes));
          std::string_view sample = co_await c.Peek(want);
          dtype = DetectDType(reinterpret_cast<const uint8_t*>(sample.data()), sample.size());
        }
      }
      if (len) {
        c.Plan(*len, dtype, tensor, region_name);
        if (co_await c.Skip(*len) < *len) break;
      } else {
        // Stream through the member looking for its descriptor, planning
        // whole pieces as they pass so that nothing waits for the end.
        uint64_t scanned = 0;
        bool found = false;
        while (true) {
          std::string_view v = co_await c.Peek(kScanStep + kScanSlack);
          bool at_eof = v.size() < kScanStep + kScanSlack;
          size_t limit = at_eof ? v.size() : kScanStep;
          size_t at = FindDescriptor(v, 0, limit, scanned, zip64);
          size_t advance = at != std::string_view::npos ? at : limit;
          co_await c.Read(advance);
          scanned += advance;
          uint64_t planned = c.planned_end() - (c.pos() - scanned);
          while (planned + kPieceBytes <= scanned) {
            c.Plan(kPieceBytes, dtype, tensor, region_name);
            planned += kPieceBytes;
          }
          if (at != std::string_view::npos) {
            found = true;
            break;
          }
          if (at_eof) break;
        }
        c.Plan(c.pos() - c.planned_end(), dtype, tensor, region_name);
        if (!found) break;
        member_len = scanned;
      }
    }

    if (flags & 8) {
      std::string_view d = co_await c.Peek(kScanSlack);
      size_t n = DescriptorAt(d, 0, member_len, zip64, /*require_sig=*/false);
      if (n == 0) break;  // the member was not as long as we thought
      co_await c.Read(n);
    }
  }
  flush();
}

}  // namespace lmc::layout
