// Layout parsers (codec/src/layout*.cc): real fixtures written by
// scripts/make_fixtures.py, hand-built files, and hostile input.

#include "lmc/layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace lmc {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes ReadFile(const std::string& name) {
  std::ifstream f(std::string(LMC_TEST_DATA_DIR) + "/" + name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The contract: contiguous, ordered, non-empty, from 0 to exactly n.
::testing::AssertionResult IsCover(const std::vector<Region>& r, uint64_t n) {
  uint64_t at = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].offset != at)
      return ::testing::AssertionFailure()
             << "region " << i << " starts at " << r[i].offset << ", expected " << at;
    if (r[i].length == 0) return ::testing::AssertionFailure() << "region " << i << " empty";
    at += r[i].length;
  }
  if (at != n) return ::testing::AssertionFailure() << "cover ends at " << at << ", not " << n;
  return ::testing::AssertionSuccess();
}

bool SameRegions(const std::vector<Region>& a, const std::vector<Region>& b) { return a == b; }

// Feeds in pieces of the given sizes (cycled), checking the streaming
// contract after every Feed: regions are only emitted for fed bytes.
std::vector<Region> FeedInPieces(const Bytes& data, const std::vector<size_t>& sizes,
                                 Format* format = nullptr) {
  auto p = LayoutParser::Create();
  std::vector<Region> all;
  size_t at = 0, k = 0;
  while (at < data.size()) {
    size_t n = std::min(sizes[k++ % sizes.size()], data.size() - at);
    p->Feed(data.data() + at, n);
    at += n;
    auto r = p->TakeRegions();
    all.insert(all.end(), r.begin(), r.end());
    EXPECT_EQ(p->bytes_fed(), at);
    EXPECT_LE(p->bytes_covered(), at);
    EXPECT_EQ(p->bytes_covered(), all.empty() ? 0 : all.back().offset + all.back().length);
  }
  p->Finish();
  auto r = p->TakeRegions();
  all.insert(all.end(), r.begin(), r.end());
  EXPECT_EQ(p->bytes_covered(), data.size());
  if (format) *format = p->format();
  return all;
}

// Whole-buffer parse, checked to be a cover and identical under byte-by-byte
// and irregular feeding.
std::vector<Region> ParseChecked(const Bytes& data, Format* format = nullptr) {
  Format f1;
  auto whole = ParseLayout(data.data(), data.size(), &f1);
  EXPECT_TRUE(IsCover(whole, data.size()));
  Format f2;
  auto bytewise = FeedInPieces(data, {1}, &f2);
  EXPECT_TRUE(SameRegions(whole, bytewise)) << "byte-at-a-time feeding differs";
  EXPECT_EQ(f1, f2);
  auto irregular = FeedInPieces(data, {3, 1, 17, 4096, 2, 65536, 5});
  EXPECT_TRUE(SameRegions(whole, irregular)) << "irregular feeding differs";
  if (format) *format = f1;
  return whole;
}

std::vector<Region> Tensors(const std::vector<Region>& r) {
  std::vector<Region> t;
  for (const auto& x : r)
    if (x.is_tensor) t.push_back(x);
  return t;
}

void PutLE(Bytes* b, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

Bytes Safetensors(const std::string& json, size_t data_len, uint8_t fill = 0x3c) {
  Bytes b;
  PutLE(&b, json.size(), 8);
  b.insert(b.end(), json.begin(), json.end());
  b.insert(b.end(), data_len, fill);
  return b;
}

Bytes RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Normal-distributed weights in the given float format.
Bytes Weights(DType t, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  Bytes b;
  for (size_t i = 0; i < count; ++i) {
    float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (t == DType::kF32) {
      PutLE(&b, u, 4);
    } else if (t == DType::kBF16) {
      PutLE(&b, u >> 16, 2);
    } else {  // f16, by truncation: good enough for statistics
      uint32_t sign = (u >> 16) & 0x8000;
      int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
      uint32_t h = exp <= 0 ? sign : sign | (static_cast<uint32_t>(exp) << 10) | ((u >> 13) & 0x3ff);
      PutLE(&b, h, 2);
    }
  }
  return b;
}

// --- Real fixtures -------------------------------------------------------------

struct Expected {
  std::string format;
  std::vector<Region> tensors;
};

std::map<std::string, Expected> Manifest() {
  std::map<std::string, Expected> m;
  std::ifstream f(std::string(LMC_TEST_DATA_DIR) + "/layout_manifest.tsv");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string col;
    while (std::getline(ss, col, '\t')) cols.push_back(col);
    if (cols.size() != 6) {
      ADD_FAILURE() << "bad manifest line: " << line;
      continue;
    }
    auto& e = m[cols[0]];
    e.format = cols[1];
    auto dt = DTypeFromName(cols[3]);
    EXPECT_TRUE(dt.has_value()) << cols[3];
    e.tensors.push_back(
        {std::stoull(cols[4]), std::stoull(cols[5]), dt.value_or(DType::kBytes), true, cols[2]});
  }
  // Files without tensors have one line with an empty name... none: list them here.
  m["arrays_deflate.npz"].format = "zip";
  return m;
}

TEST(LayoutFixtures, MatchGroundTruth) {
  auto manifest = Manifest();
  ASSERT_GE(manifest.size(), 6u) << "run scripts/make_fixtures.py";
  for (const auto& [file, expected] : manifest) {
    SCOPED_TRACE(file);
    Bytes data = ReadFile(file);
    ASSERT_FALSE(data.empty());
    Format format;
    auto regions = ParseChecked(data, &format);
    EXPECT_EQ(FormatName(format), expected.format);
    auto tensors = Tensors(regions);
    ASSERT_EQ(tensors.size(), expected.tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& got = tensors[i];
      const auto& want = expected.tensors[i];
      EXPECT_EQ(got.name, want.name);
      EXPECT_EQ(got.offset, want.offset) << want.name;
      EXPECT_EQ(got.length, want.length) << want.name;
      EXPECT_EQ(DTypeName(got.dtype), DTypeName(want.dtype)) << want.name;
    }
  }
}

TEST(LayoutFixtures, TorchZipHeadersAreBytes) {
  Bytes data = ReadFile("torch_adamw.pt");
  auto regions = ParseLayout(data.data(), data.size());
  bool saw_pkl = false;
  for (const auto& r : regions) {
    if (!r.is_tensor) {
      EXPECT_EQ(r.dtype, DType::kBytes) << r.name << " at " << r.offset;
    }
    if (r.name.size() >= 8 && r.name.substr(r.name.size() - 8) == "data.pkl") saw_pkl = true;
  }
  EXPECT_TRUE(saw_pkl);
  // The central directory and end record close the file as bytes.
  EXPECT_FALSE(regions.back().is_tensor);
}

// PyTorch DCP's .distcp files: torch.save archives end to end (one a
// tensor, each storage "data/0"). Every archive's storages are tensors of
// their pickle's dtype, and each has a name of its own: "data/<key>" in
// the first archive, "<n>:data/<key>" in the n-th after it.
TEST(LayoutFixtures, ConcatenatedTorchArchivesNameEachStorageApart) {
  const Bytes one = ReadFile("torch_adamw.pt");
  const auto single = Tensors(ParseLayout(one.data(), one.size()));
  ASSERT_GT(single.size(), 1u);
  Bytes three;
  for (int i = 0; i < 3; ++i) three.insert(three.end(), one.begin(), one.end());
  Format f;
  const auto t = Tensors(ParseChecked(three, &f));
  EXPECT_EQ(f, Format::kTorchZip);
  ASSERT_EQ(t.size(), 3 * single.size());
  std::set<std::string> names;
  for (size_t a = 0; a < 3; ++a) {
    for (size_t i = 0; i < single.size(); ++i) {
      const Region& x = t[a * single.size() + i];
      SCOPED_TRACE(x.name);
      EXPECT_EQ(x.offset, single[i].offset + a * one.size());
      EXPECT_EQ(x.length, single[i].length);
      EXPECT_EQ(x.dtype, single[i].dtype);
      EXPECT_EQ(x.name, a ? std::to_string(a) + ":" + single[i].name : single[i].name);
      names.insert(x.name);
    }
  }
  // Chunks of one storage share its name; no two storages do.
  std::set<std::string> storages;
  for (const Region& x : single) storages.insert(x.name);
  EXPECT_EQ(names.size(), 3 * storages.size());
}

TEST(LayoutFixtures, TruncatedAtManyLengths) {
  for (const char* file : {"torch_adamw.pt", "model.safetensors", "array.npy", "arrays.npz",
                           "arrays_deflate.npz", "tiny.gguf"}) {
    SCOPED_TRACE(file);
    Bytes full = ReadFile(file);
    ASSERT_FALSE(full.empty());
    std::vector<size_t> lengths;
    for (size_t n = 0; n < std::min<size_t>(full.size(), 700); n += 1) lengths.push_back(n);
    for (size_t n = 700; n < full.size(); n += 97) lengths.push_back(n);
    for (size_t n : lengths) {
      Bytes cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      auto whole = ParseLayout(cut.data(), cut.size());
      ASSERT_TRUE(IsCover(whole, n)) << "length " << n;
      if (n % 13 == 0) {
        auto pieces = FeedInPieces(cut, {1, 7, 300});
        ASSERT_TRUE(SameRegions(whole, pieces)) << "length " << n;
      }
    }
  }
}

TEST(LayoutFixtures, CorruptedHeaders) {
  std::mt19937_64 rng(42);
  for (const char* file : {"torch_adamw.pt", "model.safetensors", "array.npy", "arrays.npz", "tiny.gguf"}) {
    SCOPED_TRACE(file);
    Bytes full = ReadFile(file);
    ASSERT_FALSE(full.empty());
    for (int trial = 0; trial < 300; ++trial) {
      Bytes b = full;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        // Mostly in the first KiB, where the headers are.
        size_t at = rng() % 4 ? rng() % std::min<size_t>(b.size(), 1024) : rng() % b.size();
        b[at] = static_cast<uint8_t>(rng());
      }
      auto whole = ParseLayout(b.data(), b.size());
      ASSERT_TRUE(IsCover(whole, b.size())) << "trial " << trial;
      if (trial % 10 == 0) {
        ASSERT_TRUE(SameRegions(whole, FeedInPieces(b, {1, 5, 1000}))) << "trial " << trial;
      }
    }
  }
}

// --- Safetensors ---------------------------------------------------------------

TEST(LayoutSafetensors, RegionsInOrderWithGaps) {
  // b (f32, 2x2) first in the data even though listed second; 8 bytes of gap.
  std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},)"
      R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  Bytes file = Safetensors(json, 30 + 5);
  Format f;
  auto r = ParseChecked(file, &f);
  EXPECT_EQ(f, Format::kSafetensors);
  uint64_t h = 8 + json.size();
  ASSERT_GE(r.size(), 5u);
  EXPECT_EQ(r[0].offset, 0u);
  EXPECT_EQ(r[0].length, h);
  EXPECT_FALSE(r[0].is_tensor);
  EXPECT_EQ(r[1].name, "b");
  EXPECT_EQ(r[1].offset, h);
  EXPECT_EQ(r[1].length, 16u);
  EXPECT_EQ(r[1].dtype, DType::kF32);
  EXPECT_TRUE(r[1].is_tensor);
  EXPECT_EQ(r[2].offset, h + 16);  // the gap
  EXPECT_EQ(r[2].length, 8u);
  EXPECT_FALSE(r[2].is_tensor);
  EXPECT_EQ(r[3].name, "a");
  EXPECT_EQ(r[3].dtype, DType::kBF16);
  EXPECT_EQ(r[3].length, 6u);
  EXPECT_FALSE(r[4].is_tensor);  // trailing bytes
}

TEST(LayoutSafetensors, RegionsEmittedAsSoonAsFed) {
  std::string json = R"({"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]},)"
                     R"("b":{"dtype":"F32","shape":[100],"data_offsets":[400,800]}})";
  Bytes file = Safetensors(json, 800);
  uint64_t h = 8 + json.size();
  auto p = LayoutParser::Create();
  p->Feed(file.data(), h);
  EXPECT_EQ(p->bytes_covered(), h);  // the header, at once
  p->Feed(file.data() + h, 399);
  EXPECT_EQ(p->bytes_covered(), h);  // a is not complete
  p->Feed(file.data() + h + 399, 1);
  EXPECT_EQ(p->bytes_covered(), h + 400);
  auto r = p->TakeRegions();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].name, "a");
  p->Feed(file.data() + h + 400, 400);
  EXPECT_EQ(p->bytes_covered(), file.size());
  p->Finish();
  EXPECT_EQ(p->bytes_covered(), file.size());
}

TEST(LayoutSafetensors, BigTensorsAreSplitAtFourMiB) {
  const uint64_t n = 9u << 20;
  std::string json = R"({"w":{"dtype":"BF16","shape":[)" + std::to_string(n / 2) + R"(],"data_offsets":[0,)" +
                     std::to_string(n) + "]}}";
  Bytes file = Safetensors(json, n);
  uint64_t h = 8 + json.size();
  auto p = LayoutParser::Create();
  p->Feed(file.data(), h + (4u << 20) + 1);
  EXPECT_EQ(p->bytes_covered(), h + (4u << 20));
  p->Feed(file.data() + h + (4u << 20) + 1, file.size() - h - (4u << 20) - 1);
  p->Finish();
  auto r = p->TakeRegions();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1].length, 4u << 20);
  EXPECT_EQ(r[2].length, 4u << 20);
  EXPECT_EQ(r[3].length, 1u << 20);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(r[i].name, "w");
    EXPECT_EQ(r[i].dtype, DType::kBF16);
    EXPECT_TRUE(r[i].is_tensor);
  }
  auto whole = ParseLayout(file.data(), file.size());
  EXPECT_TRUE(SameRegions(whole, r));
  // Truncated inside the tensor: the last piece ends at EOF.
  auto cut = ParseLayout(file.data(), h + (6u << 20));
  ASSERT_TRUE(IsCover(cut, h + (6u << 20)));
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[2].length, 2u << 20);
}

TEST(LayoutSafetensors, LyingHeadersFallBackToStatistics) {
  const std::vector<std::string> bad = {
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,15]}})",   // size mismatch
      R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})",  // negative dim
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})",   // reversed
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
      R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]}})",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,1.5e3]}})",
      R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})",
      R"({"a":{"dtype":7,"shape":[4],"data_offsets":[0,16]}})",
      R"({"a":[1,2,3]})",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})",  // truncated JSON
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})",
  };
  for (const auto& json : bad) {
    SCOPED_TRACE(json);
    Bytes file = Safetensors(json, 64);
    Format f;
    auto r = ParseChecked(file, &f);
    EXPECT_EQ(f, Format::kSafetensors);
    EXPECT_TRUE(Tensors(r).empty());
    EXPECT_EQ(r[0].length, 8 + json.size());  // the header is still one region
  }
}

TEST(LayoutSafetensors, AbsurdHeaderLength) {
  Bytes file;
  PutLE(&file, uint64_t{1} << 62, 8);
  file.push_back('{');
  Bytes tail = RandomBytes(5000, 1);
  file.insert(file.end(), tail.begin(), tail.end());
  Format f;
  ParseChecked(file, &f);
  EXPECT_EQ(f, Format::kUnknown);
  // Plausible length but the file ends inside the header.
  Bytes short_file;
  PutLE(&short_file, 1000, 8);
  std::string j = R"({"a":{"dtype":"F32")";
  short_file.insert(short_file.end(), j.begin(), j.end());
  ParseChecked(short_file, &f);
  EXPECT_EQ(f, Format::kSafetensors);
}

TEST(LayoutSafetensors, TensorBeyondEndIsTruncated) {
  std::string json = R"({"a":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}})";
  Bytes file = Safetensors(json, 10);
  auto r = ParseChecked(file);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].length, 10u);
  EXPECT_TRUE(r[1].is_tensor);
}

// --- Zip -----------------------------------------------------------------------

void LocalHeader(Bytes* b, const std::string& name, uint16_t flags, uint16_t method, uint32_t csize,
                 const Bytes& extra = {}) {
  PutLE(b, 0x04034b50, 4);
  PutLE(b, 20, 2);
  PutLE(b, flags, 2);
  PutLE(b, method, 2);
  PutLE(b, 0, 4);  // time, date
  PutLE(b, 0, 4);  // crc
  PutLE(b, csize, 4);
  PutLE(b, csize, 4);
  PutLE(b, name.size(), 2);
  PutLE(b, extra.size(), 2);
  b->insert(b->end(), name.begin(), name.end());
  b->insert(b->end(), extra.begin(), extra.end());
}

void Descriptor(Bytes* b, uint64_t size) {
  PutLE(b, 0x08074b50, 4);
  PutLE(b, 0, 4);  // crc
  PutLE(b, size, 4);
  PutLE(b, size, 4);
}

void CentralEnd(Bytes* b) {
  PutLE(b, 0x06054b50, 4);
  b->insert(b->end(), 18, 0);
}

TEST(LayoutZip, TorchStoragesWithoutPickleAreDetected) {
  // As torch.save writes them (sizes in descriptors), but data.pkl is cut
  // short by an unknown opcode: the storages' sizes come from scanning for
  // their descriptors, their dtypes from statistics. The big one is planned
  // in 4 MiB pieces while it streams by.
  for (size_t count : {size_t{20000}, size_t{(9u << 20) / 2}}) {
    SCOPED_TRACE(count);
    Bytes b;
    Bytes pkl = {0x80, 0x02, 0xff, 'P', 'K', 0x07, 0x08};
    LocalHeader(&b, "archive/data.pkl", 8, 0, 0);
    b.insert(b.end(), pkl.begin(), pkl.end());
    Descriptor(&b, pkl.size());
    Bytes w = Weights(DType::kBF16, count, 3);
    LocalHeader(&b, "archive/data/0", 8, 0, 0);
    uint64_t data_at = b.size();
    b.insert(b.end(), w.begin(), w.end());
    Descriptor(&b, w.size());
    LocalHeader(&b, "archive/version", 8, 0, 0);
    b.insert(b.end(), {'3', '\n'});
    Descriptor(&b, 2);
    CentralEnd(&b);
    Format f;
    auto r = ParseChecked(b, &f);
    EXPECT_EQ(f, Format::kTorchZip);
    auto t = Tensors(r);
    ASSERT_EQ(t.size(), (w.size() + (4u << 20) - 1) / (4u << 20));
    EXPECT_EQ(t[0].offset, data_at);
    EXPECT_EQ(t.back().offset + t.back().length, data_at + w.size());
    for (const auto& x : t) {
      EXPECT_EQ(x.name, "data/0");
      EXPECT_EQ(x.dtype, DType::kBF16);
      EXPECT_TRUE(x.length == (4u << 20) || &x == &t.back());
    }
    // The last descriptor and the end record, parsed as such, end the file.
    EXPECT_EQ(r.back().length, 16u + 22u);
    EXPECT_EQ(r[r.size() - 2].name, "archive/version");
  }
}

TEST(LayoutZip, DataDescriptorWithoutSignatureOrMissing) {
  Bytes w = Weights(DType::kF32, 50000, 4);
  Bytes b;
  LocalHeader(&b, "stream.bin", 8, 0, 0);
  uint64_t data_at = b.size();
  b.insert(b.end(), w.begin(), w.end());
  // No descriptor: the member runs to the end of the file.
  Format f;
  auto r = ParseChecked(b, &f);
  EXPECT_EQ(f, Format::kZip);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].length, data_at);
  EXPECT_EQ(r[1].name, "stream.bin");
  EXPECT_EQ(r[1].length, w.size());
}

TEST(LayoutZip, Zip64SizesAndCompressedMembers) {
  Bytes b;
  Bytes payload = RandomBytes(300, 5);
  Bytes extra;
  PutLE(&extra, 0x0001, 2);
  PutLE(&extra, 16, 2);
  PutLE(&extra, payload.size(), 8);
  PutLE(&extra, payload.size(), 8);
  LocalHeader(&b, "x.bin", 0, 0, 0xFFFFFFFF, extra);
  b.insert(b.end(), payload.begin(), payload.end());
  LocalHeader(&b, "y.npy", 0, 8, 40);  // deflated: opaque
  Bytes z = RandomBytes(40, 6);
  b.insert(b.end(), z.begin(), z.end());
  auto r = ParseChecked(b);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1].name, "x.bin");
  EXPECT_EQ(r[1].length, 300u);
  EXPECT_EQ(r[3].name, "y.npy");
  EXPECT_EQ(r[3].length, 40u);
}

TEST(LayoutZip, LyingSizesStayCovered) {
  Bytes b;
  LocalHeader(&b, "archive/data.pkl", 0, 0, 0x7FFFFFFF);  // far beyond the file
  Bytes tail = RandomBytes(1000, 7);
  b.insert(b.end(), tail.begin(), tail.end());
  ParseChecked(b);
  Bytes c;
  LocalHeader(&c, "a.npy", 0, 0, 12);  // npy header longer than the member
  Bytes npy = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x7f, '{', '}'};
  c.insert(c.end(), npy.begin(), npy.end());
  LocalHeader(&c, "b.bin", 0, 0, 3);
  c.insert(c.end(), {1, 2, 3});
  auto r = ParseChecked(c);
  ASSERT_GE(r.size(), 4u);
  EXPECT_EQ(r[1].name, "a.npy");
  EXPECT_EQ(r[1].length, 12u);
  EXPECT_EQ(r[3].name, "b.bin");
}

// --- npy -----------------------------------------------------------------------

Bytes Npy(const std::string& dict, size_t data_len, uint8_t major = 1) {
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  PutLE(&b, dict.size(), major == 1 ? 2 : 4);
  b.insert(b.end(), dict.begin(), dict.end());
  b.insert(b.end(), data_len, 7);
  return b;
}

TEST(LayoutNpy, Versions) {
  for (uint8_t major : {1, 2, 3}) {
    std::string dict = "{'descr': '<i8', 'fortran_order': True, 'shape': (3, 5), }    \n";
    Bytes file = Npy(dict, 120, major);
    Format f;
    auto r = ParseChecked(file, &f);
    EXPECT_EQ(f, Format::kNpy);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[1].dtype, DType::kI64);
    EXPECT_EQ(r[1].length, 120u);
  }
  auto r = ParseChecked(Npy("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", 1));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].dtype, DType::kBool);
}

TEST(LayoutNpy, UnsupportedDescrIsNotATensor) {
  for (const char* dict : {"{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }",
                           "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }",
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }",
                           "{'descr': '<f4', 'shape': (4,", "{'descr': '|O', 'shape': (4,), }"}) {
    SCOPED_TRACE(dict);
    auto r = ParseChecked(Npy(dict, 16));
    EXPECT_TRUE(Tensors(r).empty());
  }
}

// --- GGUF ----------------------------------------------------------------------

Bytes GgufHead(uint64_t n_tensors, uint64_t n_kv) {
  Bytes b = {'G', 'G', 'U', 'F'};
  PutLE(&b, 3, 4);
  PutLE(&b, n_tensors, 8);
  PutLE(&b, n_kv, 8);
  return b;
}

void GgufString(Bytes* b, const std::string& s) {
  PutLE(b, s.size(), 8);
  b->insert(b->end(), s.begin(), s.end());
}

TEST(LayoutGguf, HugeCountsEndAtEof) {
  for (uint64_t n : {uint64_t{1} << 62, ~uint64_t{0}}) {
    Bytes b = GgufHead(n, n);
    GgufString(&b, "k");
    PutLE(&b, 9, 4);  // array
    PutLE(&b, 8, 4);  // of strings
    PutLE(&b, n, 8);  // lying count
    for (int i = 0; i < 100; ++i) GgufString(&b, "tok");
    Format f;
    ParseChecked(b, &f);
    EXPECT_EQ(f, Format::kGGUF);
    Bytes c = GgufHead(n, 0);  // tensor infos only
    for (int i = 0; i < 50; ++i) {
      GgufString(&c, "t");
      PutLE(&c, 2, 4);
      PutLE(&c, n, 8);
      PutLE(&c, 3, 8);
      PutLE(&c, 0, 4);
      PutLE(&c, n, 8);
    }
    ParseChecked(c);
  }
}

TEST(LayoutGguf, OverlappingTensorsFallBack) {
  Bytes b = GgufHead(2, 0);
  for (int i = 0; i < 2; ++i) {
    GgufString(&b, "t" + std::to_string(i));
    PutLE(&b, 1, 4);
    PutLE(&b, 64, 8);
    PutLE(&b, 0, 4);        // f32: 256 bytes
    PutLE(&b, i * 128, 8);  // overlaps the first
  }
  b.resize(((b.size() + 31) / 32) * 32, 0);
  Bytes w = Weights(DType::kF32, 200, 9);
  b.insert(b.end(), w.begin(), w.end());
  auto r = ParseChecked(b);
  auto t = Tensors(r);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "t0");
}

// --- Statistics ----------------------------------------------------------------

TEST(LayoutStats, DetectDType) {
  for (DType t : {DType::kBF16, DType::kF32, DType::kF16}) {
    Bytes w = Weights(t, 30000, 11);
    EXPECT_EQ(DTypeName(DetectDType(w.data(), w.size())), DTypeName(t));
  }
  Bytes noise = RandomBytes(65536, 12);
  EXPECT_EQ(DetectDType(noise.data(), noise.size()), DType::kBytes);
  std::string text;
  while (text.size() < 50000) text += "the quick brown fox jumps over the lazy dog; ";
  EXPECT_EQ(DetectDType(reinterpret_cast<const uint8_t*>(text.data()), text.size()), DType::kBytes);
  EXPECT_EQ(DetectDType(nullptr, 0), DType::kBytes);
  EXPECT_EQ(DetectDType(noise.data(), 3), DType::kBytes);
}

TEST(LayoutStats, UnknownFilesAreBlocks) {
  Bytes b = Weights(DType::kBF16, (3u << 20) / 2 + 1000, 13);  // 3 MiB + 2000 bytes
  Format f;
  auto r = ParseChecked(b, &f);
  EXPECT_EQ(f, Format::kUnknown);
  ASSERT_EQ(r.size(), 4u);
  for (const auto& x : r) {
    EXPECT_EQ(x.dtype, DType::kBF16);
    EXPECT_FALSE(x.is_tensor);
  }
  EXPECT_EQ(r[3].length, 2000u);
}

TEST(LayoutStats, RandomAndTinyInputs) {
  for (size_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 100, 70000}) {
    Bytes b = RandomBytes(n, n);
    auto r = ParseChecked(b);
    EXPECT_EQ(r.empty(), n == 0);
  }
  // Magic numbers followed by garbage.
  for (std::string magic : {std::string("GGUF"), std::string("\x93NUMPY", 6), std::string("PK\x03\x04", 4)}) {
    for (size_t n : {0, 3, 20, 40, 200, 5000}) {
      Bytes b(magic.begin(), magic.end());
      Bytes tail = RandomBytes(n, n + 100);
      b.insert(b.end(), tail.begin(), tail.end());
      ParseChecked(b);
    }
  }
}

TEST(LayoutStats, FinishTwiceAndFeedAfterFinish) {
  auto p = LayoutParser::Create();
  Bytes b = RandomBytes(1000, 14);
  p->Feed(b.data(), b.size());
  p->Finish();
  p->Finish();
  p->Feed(b.data(), b.size());
  auto r = p->TakeRegions();
  EXPECT_TRUE(IsCover(r, 1000));
  EXPECT_EQ(p->bytes_fed(), 1000u);
}

}  // namespace
}  // namespace lmc
