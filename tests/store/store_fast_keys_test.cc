// Stores of format 4 (the default for a new store): chunk keys are XXH3-128
// under the store's own random secret (docs/FORMAT.md, "Chunk keys"), and a
// dedup hit is shared only after its bytes compare equal to the stored
// chunk's, so that a key naming two contents (a collision) fails the batch
// instead of making one chunk stand for another.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format.h"
#include "lmc/store/store.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

StoreOptions FastOptions() {
  StoreOptions o = TestOptions();
  o.fast_keys_new_stores = true;
  return o;
}

std::string ConfigOf(const std::string& store) {
  auto text = ReadFileToString(Env::Default(), store + "/" + fmt::kConfigName);
  EXPECT_TRUE(text.ok());
  return text.ok() ? *text : "";
}

// Adds `data` under `key` (normally s.keys().Of(data)), with an extent of
// inode `ino` at offset 0; raw: hand the store the decoded bytes too.
void AddAs(Batch& b, const ChunkKey& key, uint64_t ino, const std::vector<uint8_t>& data, bool raw) {
  auto f = TestFrame(data);
  b.AddChunk(key, std::string(f.begin(), f.end()), static_cast<uint32_t>(data.size()), std::nullopt,
             std::nullopt, raw ? CopyChunkBytes(data.data(), data.size()) : nullptr);
  Extent e;
  e.length = static_cast<uint32_t>(data.size());
  e.chunk = key;
  b.Put(Cf::kExtents, ExtentKey(ino, 0), EncodeExtent(e));
}

TEST(FastKeys, NewStoreIsFormat4WithASecretOfItsOwn) {
  TempDir t1, t2;
  const std::vector<uint8_t> d = RandomBytes(5000, 1);
  ChunkKey k1, k2;
  {
    auto s1 = OpenOrDie(t1.store(), FastOptions());
    auto s2 = OpenOrDie(t2.store(), FastOptions());
    ASSERT_TRUE(s1 && s2);
    EXPECT_EQ(s1->keys().hash(), KeyScheme::Hash::kXxh3);
    k1 = s1->keys().Of(d.data(), d.size());
    k2 = s2->keys().Of(d.data(), d.size());
    // Two stores, two secrets: the same bytes have two keys, neither SHA-256.
    EXPECT_NE(k1, k2);
    EXPECT_NE(k1, KeyOf(d));
    // The key's tail: the length, then zeros; the owner scope changes the digest.
    EXPECT_EQ(LoadLE64(k1.bytes.data() + 16), d.size());
    EXPECT_EQ(LoadLE64(k1.bytes.data() + 24), 0u);
    EXPECT_NE(s1->keys().Of(d.data(), d.size(), 1000u), k1);
    EXPECT_NE(s1->keys().Of(d.data(), d.size(), 1000u), s1->keys().Of(d.data(), d.size(), 1001u));
    // One byte more changes the digest, not only the length field.
    std::vector<uint8_t> d2 = d;
    d2.back() ^= 1;
    EXPECT_NE(std::memcmp(s1->keys().Of(d2.data(), d2.size()).bytes.data(), k1.bytes.data(), 16), 0);
  }
  const std::string config = ConfigOf(t1.store());
  EXPECT_NE(config.find("format_version=4\n"), std::string::npos) << config;
  EXPECT_NE(config.find("hash=xxh3-128\n"), std::string::npos) << config;
  EXPECT_NE(config.find("hash_secret="), std::string::npos) << config;
  // Reopened, the store names the same bytes by the same key.
  auto s1 = OpenOrDie(t1.store(), FastOptions());
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->keys().Of(d.data(), d.size()), k1);
}

TEST(FastKeys, Sha256WhenAskedAndForStoresThatHaveIt) {
  TempDir t;
  {
    auto s = OpenOrDie(t.store(), TestOptions());  // fast_keys_new_stores = false
    ASSERT_TRUE(s);
    EXPECT_EQ(s->keys().hash(), KeyScheme::Hash::kSha256);
    EXPECT_FALSE(s->keys().verify_hits());
  }
  EXPECT_NE(ConfigOf(t.store()).find("hash=sha256\n"), std::string::npos);
  auto s = OpenOrDie(t.store(), FastOptions());  // an existing store keeps its hash
  ASSERT_TRUE(s);
  const std::vector<uint8_t> d = RandomBytes(100, 2);
  EXPECT_EQ(s->keys().Of(d.data(), d.size()), KeyOf(d));
}

TEST(FastKeys, ADamagedSecretOrAHashTheFormatCannotHaveIsRefused) {
  TempDir t;
  { ASSERT_TRUE(OpenOrDie(t.store(), FastOptions())); }
  std::string config = ConfigOf(t.store());
  const size_t at = config.find("hash_secret=");
  ASSERT_NE(at, std::string::npos);
  std::string bad = config;
  bad[at + 12] = 'g';
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), t.store(), "CONFIG", bad).ok());
  auto s = Store::Open(t.store(), FastOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsCorruption()) << s.status().ToString();
  EXPECT_NE(s.status().message().find("hash_secret"), std::string::npos) << s.status().ToString();

  bad = config;
  bad.erase(at, config.find('\n', at) + 1 - at);
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), t.store(), "CONFIG", bad).ok());
  s = Store::Open(t.store(), FastOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("hash_secret"), std::string::npos) << s.status().ToString();

  bad = config;
  bad.replace(config.find("format_version=4"), 16, "format_version=3");
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), t.store(), "CONFIG", bad).ok());
  s = Store::Open(t.store(), FastOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsCorruption()) << s.status().ToString();
}

// Equal bytes: the hit is compared and shared, whether the stored chunk is
// committed or written by the same group, with or without the raw bytes.
TEST(FastKeys, EqualBytesAreComparedThenShared) {
  for (bool raw : {false, true}) {
    SCOPED_TRACE(raw ? "raw bytes given" : "frames decoded");
    TempDir t;
    auto s = OpenOrDie(t.store(), FastOptions());
    ASSERT_TRUE(s);
    const std::vector<uint8_t> d = RandomBytes(4096, 3);
    const ChunkKey k = s->keys().Of(d.data(), d.size());
    Batch b;
    AddAs(b, k, 1, d, raw);
    AddAs(b, k, 2, d, raw);  // a hit on a record of this same batch
    ASSERT_TRUE(s->Commit(b).ok());
    Batch b2;
    AddAs(b2, k, 3, d, raw);  // a hit on a committed record
    ASSERT_TRUE(s->Commit(b2).ok());
    EXPECT_EQ(s->GetChunkInfo(k)->refcount, 3u);
    EXPECT_EQ(s->Stats().dedup_hits, 2u);
    EXPECT_EQ(s->Stats().dedup_verified, 2u);
    EXPECT_EQ(*ReadAll(*s, k), d);
    auto rep = s->Fsck(FsckOptions{});
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_EQ(rep->errors(), 0u);
  }
}

// Two contents under one key (a collision, made here by reusing a key):
// the batch that brings the second fails, nothing of it is stored, and the
// first still reads back; other batches of the same group commit.
TEST(FastKeys, ACollisionFailsTheBatchAndSharesNothing) {
  for (bool raw : {false, true}) {
    for (bool same_batch : {false, true}) {
      SCOPED_TRACE(std::string(raw ? "raw" : "decoded") + (same_batch ? ", same batch" : ", committed"));
      TempDir t;
      auto s = OpenOrDie(t.store(), FastOptions());
      ASSERT_TRUE(s);
      const std::vector<uint8_t> a = RandomBytes(4096, 4), other = RandomBytes(4096, 5);
      const ChunkKey k = s->keys().Of(a.data(), a.size());
      Batch first;
      AddAs(first, k, 1, a, raw);
      if (!same_batch) ASSERT_TRUE(s->Commit(first).ok());
      Batch second;
      if (same_batch) second = std::move(first);
      AddAs(second, k, 2, other, raw);
      Status st = s->Commit(second);
      ASSERT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find("hash collision"), std::string::npos) << st.ToString();
      EXPECT_FALSE(s->Get(Cf::kExtents, ExtentKey(2, 0)).ok());
      if (same_batch) {
        EXPECT_FALSE(s->GetChunkInfo(k).ok());  // the whole batch failed
        continue;
      }
      EXPECT_EQ(s->GetChunkInfo(k)->refcount, 1u);
      EXPECT_EQ(*ReadAll(*s, k), a);
      // A different length under the key is refused before any read.
      std::vector<uint8_t> longer = a;
      longer.push_back(0);
      Batch third;
      AddAs(third, k, 3, longer, raw);
      st = s->Commit(third);
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
      EXPECT_EQ(s->GetChunkInfo(k)->refcount, 1u);
      auto rep = s->Fsck(FsckOptions{});
      ASSERT_TRUE(rep.ok()) << rep.status().ToString();
      EXPECT_EQ(rep->errors(), 0u);
    }
  }
}

// fsck decodes every chunk and checks it against its XXH3 key: a record
// filed under another chunk's key is found.
TEST(FastKeys, FsckChecksTheXxh3Keys) {
  TempDir t;
  auto s = OpenOrDie(t.store(), FastOptions());
  ASSERT_TRUE(s);
  const std::vector<uint8_t> a = RandomBytes(3000, 6), b = RandomBytes(3000, 7);
  Batch batch;
  AddAs(batch, s->keys().Of(a.data(), a.size()), 1, a, false);
  AddAs(batch, s->keys().Of(a.data(), a.size(), 77u), 2, b, false);  // b under a's key of another scope
  ASSERT_TRUE(s->Commit(batch).ok());
  auto rep = s->Fsck(FsckOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->errors(), 1u);
}

}  // namespace
}  // namespace lmc::store::testing
