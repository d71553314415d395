// A delta on a base of another size (docs/FORMAT.md, "Frame", widened
// base): fp32 chunks stored as deltas on ranges of their bf16 twin, with
// the LMC codec. They read back exactly; the twin deleted, they still read
// (it stays as a dead base), and the dead-base rewrite makes them
// standalone and frees it; compaction and fsck agree throughout.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "lmc/codec.h"
#include "lmc/store/store.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

constexpr size_t kBf16Elems = 1 << 16;  // one bf16 chunk: 128 KiB
constexpr size_t kF32Elems = kBf16Elems / 2;

// With `twin`: an fp32 frame against the bf16 chunk `twin` from element `offset`.
std::vector<uint8_t> Frame(const std::vector<uint8_t>& src, DType t,
                           const std::vector<uint8_t>* twin = nullptr,
                           std::optional<uint32_t> offset = std::nullopt) {
  EncodeParams p{t, twin ? twin->data() : nullptr};
  p.widened_base_offset = offset;
  p.base_len = twin ? twin->size() : 0;
  std::vector<uint8_t> out(MaxEncodedSize(src.size()));
  Workspace ws;
  auto n = EncodeChunk(src.data(), src.size(), p, out.data(), out.size(), ws);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

struct Twins {
  std::vector<uint8_t> bf16;              // the bf16 chunk
  std::vector<std::vector<uint8_t>> f32;  // its two fp32 halves (the master)
};

Twins MakeTwins(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> w(0.0f, 0.02f);
  Twins t;
  t.bf16.resize(2 * kBf16Elems);
  for (int h = 0; h < 2; ++h) {
    std::vector<uint8_t> m(4 * kF32Elems);
    for (size_t i = 0; i < kF32Elems; ++i) {
      const float f = w(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      std::memcpy(m.data() + 4 * i, &u, 4);
      const uint16_t b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
      std::memcpy(t.bf16.data() + 2 * (h * kF32Elems + i), &b, 2);
    }
    t.f32.push_back(std::move(m));
  }
  return t;
}

std::string ExtentOf(const ChunkKey& k, size_t n) {
  Extent e;
  e.length = static_cast<uint32_t>(n);
  e.chunk = k;
  return EncodeExtent(e);
}

StoreOptions LmcOptions() {
  StoreOptions o = TestOptions();
  o.codec = nullptr;  // the LMC codec: widened frames need the real decoder
  return o;
}

TEST(StorePaired, Fp32HalvesOnTheirBf16TwinThroughDeleteRewriteAndCompaction) {
  TempDir t;
  const Twins tw = MakeTwins(9);
  auto s = OpenOrDie(t.store(), LmcOptions());
  ASSERT_TRUE(s);
  const ChunkKey kb = KeyOf(tw.bf16);
  std::vector<ChunkKey> kf;
  {
    Batch b;
    b.AddChunk(kb, Frame(tw.bf16, DType::kBF16), static_cast<uint32_t>(tw.bf16.size()));
    b.Put(Cf::kExtents, ExtentKey(1, 0), ExtentOf(kb, tw.bf16.size()));
    for (uint32_t h = 0; h < 2; ++h) {
      const auto frame = Frame(tw.f32[h], DType::kF32, &tw.bf16, h * kF32Elems);
      // The pairing pays: well under the standalone frame.
      EXPECT_LT(frame.size(), Frame(tw.f32[h], DType::kF32).size() * 3 / 4);
      kf.push_back(KeyOf(tw.f32[h]));
      b.AddChunk(kf.back(), frame, static_cast<uint32_t>(tw.f32[h].size()), kb);
      b.Put(Cf::kExtents, ExtentKey(2, h * tw.f32[h].size()), ExtentOf(kf.back(), tw.f32[h].size()));
    }
    ASSERT_TRUE(s->Commit(b).ok());
  }
  auto expect_all = [&](bool with_bf16) {
    for (int h = 0; h < 2; ++h) {
      auto got = ReadAll(*s, kf[h]);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, tw.f32[h]) << h;
    }
    if (with_bf16) {
      EXPECT_EQ(*ReadAll(*s, kb), tw.bf16);
    }
    auto f = s->Fsck({});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->errors(), 0u);
  };
  expect_all(true);
  EXPECT_EQ(s->GetChunkInfo(kb)->refcount, 3u);  // its file and two dependants
  EXPECT_EQ(s->GetChunkInfo(kf[1])->delta_depth, 1u);

  // The bf16 file goes: its chunk stays as the fp32 chunks' base.
  {
    Batch d;
    d.Unref(kb);
    d.Delete(Cf::kExtents, ExtentKey(1, 0));
    ASSERT_TRUE(s->Commit(d).ok());
  }
  expect_all(false);
  // The dead-base rewrite makes the fp32 chunks standalone and frees it.
  auto r = s->RewriteDeadBases({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dead_bases, 1u);
  EXPECT_EQ(r->rewritten, 2u);
  EXPECT_TRUE(s->GetChunkInfo(kb).status().IsNotFound());
  EXPECT_FALSE(s->GetChunkInfo(kf[0])->base.has_value());
  ASSERT_TRUE(s->Compact({}).ok());
  expect_all(false);
  s.reset();
  s = OpenOrDie(t.store(), LmcOptions());
  ASSERT_TRUE(s);
  expect_all(false);
}

// A master written standalone first, rebased on its twin afterwards (the
// master written before the model): RebaseChunk takes a widened frame on a
// base of another size when the base holds the values the frame names,
// and skips it when it does not.
TEST(StorePaired, StandaloneHalvesAreRebasedOnTheirTwinWhenItHoldsTheirValues) {
  TempDir t;
  const Twins tw = MakeTwins(21);
  auto s = OpenOrDie(t.store(), LmcOptions());
  ASSERT_TRUE(s);
  // The twin as a tensor's last chunk with 100 more values (of another
  // size than the halves), and its first half alone (the second half's
  // values are not in it).
  std::vector<uint8_t> twin = tw.bf16;
  for (int i = 0; i < 100; ++i) twin.insert(twin.end(), {static_cast<uint8_t>(i), 0x3c});
  const std::vector<uint8_t> short_twin(tw.bf16.begin(), tw.bf16.begin() + 2 * kF32Elems);
  const ChunkKey kb = KeyOf(twin), ks = KeyOf(short_twin);
  std::vector<ChunkKey> kf;
  {
    Batch b;
    for (uint32_t h = 0; h < 2; ++h) {
      kf.push_back(KeyOf(tw.f32[h]));
      b.AddChunk(kf.back(), Frame(tw.f32[h], DType::kF32), static_cast<uint32_t>(tw.f32[h].size()));
      b.Put(Cf::kExtents, ExtentKey(2, h * tw.f32[h].size()), ExtentOf(kf.back(), tw.f32[h].size()));
    }
    b.AddChunk(kb, Frame(twin, DType::kBF16), static_cast<uint32_t>(twin.size()));
    b.Put(Cf::kExtents, ExtentKey(1, 0), ExtentOf(kb, twin.size()));
    b.AddChunk(ks, Frame(short_twin, DType::kBF16), static_cast<uint32_t>(short_twin.size()));
    b.Put(Cf::kExtents, ExtentKey(3, 0), ExtentOf(ks, short_twin.size()));
    ASSERT_TRUE(s->Commit(b).ok());
  }
  {
    // The second half against the short twin: its values are not there.
    Batch r;
    r.RebaseChunk(kf[1], Frame(tw.f32[1], DType::kF32, &tw.bf16, kF32Elems), ks, 8);
    ASSERT_TRUE(s->Commit(r).ok());
    EXPECT_EQ(s->Stats().rebase_skipped, 1u);
    EXPECT_FALSE(s->GetChunkInfo(kf[1])->base.has_value());
  }
  {
    Batch r;
    for (uint32_t h = 0; h < 2; ++h)
      r.RebaseChunk(kf[h], Frame(tw.f32[h], DType::kF32, &twin, h * kF32Elems), kb, 8);
    ASSERT_TRUE(s->Commit(r).ok());
  }
  EXPECT_EQ(s->Stats().rebased, 2u);
  for (uint32_t h = 0; h < 2; ++h) {
    auto info = s->GetChunkInfo(kf[h]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->base, kb);
    EXPECT_TRUE(*s->DerivedFromTwin(kf[h]));
    auto got = ReadAll(*s, kf[h]);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, tw.f32[h]) << h;
  }
  EXPECT_EQ(s->GetChunkInfo(kb)->refcount, 3u);  // its file and the two halves
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u);
}

}  // namespace
}  // namespace lmc::store::testing
