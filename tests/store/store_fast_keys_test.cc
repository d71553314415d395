// Stores of format 4 (the default for a new store): chunk keys are XXH3-128
// under the store's own random secret (docs/FORMAT.md, "Chunk keys"), and a
// dedup hit is shared only after its bytes compare equal to the stored
// chunk's, so that a key naming two contents (a collision) fails the batch
// instead of making one chunk stand for another.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format.h"
#include "lmc/codec.h"
#include "lmc/store/store.h"
#include "store_config_text.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

StoreOptions FastOptions() {
  StoreOptions o = TestOptions();
  o.fast_keys_new_stores = true;
  return o;
}

// Adds `data` under `key` (normally s.keys().Of(data)), with an extent of
// inode `ino` at offset 0: as a frame, or, with `match`, as a chunk that
// MatchChunk found (its bytes, no frame).
void AddAs(Batch& b, const ChunkKey& key, uint64_t ino, const std::vector<uint8_t>& data,
           const ChunkMatch* match = nullptr) {
  if (match) {
    b.AddMatchedChunk(key, *match, CopyChunkBytes(data.data(), data.size()));
  } else {
    auto f = TestFrame(data);
    b.AddChunk(key, std::string(f.begin(), f.end()), static_cast<uint32_t>(data.size()));
  }
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

// MatchChunk: absent, equal (with the record's place), or another chunk
// under the key.
TEST(FastKeys, MatchChunkComparesTheStoredBytes) {
  TempDir t;
  auto s = OpenOrDie(t.store(), FastOptions());
  ASSERT_TRUE(s);
  const std::vector<uint8_t> d = RandomBytes(4096, 3), other = RandomBytes(4096, 9);
  const ChunkKey k = s->keys().Of(d.data(), d.size());
  Workspace ws;
  EXPECT_EQ(s->MatchChunk(k, d.data(), d.size(), ws)->kind, ChunkMatch::Kind::kAbsent);
  Batch b;
  AddAs(b, k, 1, d);
  ASSERT_TRUE(s->Commit(b).ok());
  auto m = s->MatchChunk(k, d.data(), d.size(), ws);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->kind, ChunkMatch::Kind::kEqual);
  EXPECT_EQ(m->pack_id, s->GetChunkInfo(k)->pack_id);
  EXPECT_EQ(m->offset, s->GetChunkInfo(k)->offset);
  EXPECT_EQ(m->frame_len, s->GetChunkInfo(k)->frame_len);
  EXPECT_EQ(s->MatchChunk(k, other.data(), other.size(), ws)->kind, ChunkMatch::Kind::kDiffers);
  EXPECT_EQ(s->MatchChunk(k, d.data(), d.size() - 1, ws)->kind, ChunkMatch::Kind::kDiffers);
}

// Equal bytes: the hit is compared and shared, whether the stored chunk is
// committed or written by the same group; a matched chunk whose record is
// the one compared is shared without another read.
TEST(FastKeys, EqualBytesAreComparedThenShared) {
  TempDir t;
  auto s = OpenOrDie(t.store(), FastOptions());
  ASSERT_TRUE(s);
  const std::vector<uint8_t> d = RandomBytes(4096, 3);
  const ChunkKey k = s->keys().Of(d.data(), d.size());
  Batch b;
  AddAs(b, k, 1, d);
  AddAs(b, k, 2, d);  // a hit on a record of this same batch
  ASSERT_TRUE(s->Commit(b).ok());
  Batch b2;
  AddAs(b2, k, 3, d);  // a hit on a committed record
  ASSERT_TRUE(s->Commit(b2).ok());
  Workspace ws;
  auto m = s->MatchChunk(k, d.data(), d.size(), ws);
  ASSERT_TRUE(m.ok() && m->kind == ChunkMatch::Kind::kEqual);
  Batch b3;
  AddAs(b3, k, 4, d, &*m);
  ChunkMatch elsewhere = *m;  // a record it no longer is at: compared again, from the bytes
  elsewhere.offset += 1;
  AddAs(b3, k, 5, d, &elsewhere);
  ASSERT_TRUE(s->Commit(b3).ok());
  EXPECT_EQ(s->GetChunkInfo(k)->refcount, 5u);
  EXPECT_EQ(s->Stats().dedup_hits, 4u);
  EXPECT_EQ(s->Stats().dedup_verified, 4u);
  EXPECT_EQ(s->Stats().chunks_stored, 1u);
  EXPECT_EQ(*ReadAll(*s, k), d);
  auto rep = s->Fsck(FsckOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->errors(), 0u);
}

// A matched chunk whose every reference went before the commit: the store
// encodes its bytes (LMC codec) and stores them; a codec that cannot encode
// fails the batch with a message saying so.
TEST(FastKeys, AMatchedChunkThatLeftTheStoreIsEncodedAtTheCommit) {
  for (bool lmc : {true, false}) {
    SCOPED_TRACE(lmc ? "LMC codec" : "test codec");
    TempDir t;
    StoreOptions o = FastOptions();
    if (lmc) o.codec = nullptr;
    auto s = OpenOrDie(t.store(), o);
    ASSERT_TRUE(s);
    std::vector<uint8_t> d(64 << 10);
    for (size_t i = 0; i < d.size(); i++) d[i] = static_cast<uint8_t>((i * 2654435761u) >> 11);
    const ChunkKey k = s->keys().Of(d.data(), d.size());
    Batch b;
    if (lmc) {
      std::vector<uint8_t> frame(MaxEncodedSize(d.size()));
      Workspace ews;
      auto n = EncodeChunk(d.data(), d.size(), EncodeParams{}, frame.data(), frame.size(), ews);
      ASSERT_TRUE(n.ok());
      frame.resize(*n);
      b.AddChunk(k, frame, static_cast<uint32_t>(d.size()));
    } else {
      AddAs(b, k, 1, d);
    }
    ASSERT_TRUE(s->Commit(b).ok());
    Workspace ws;
    auto m = s->MatchChunk(k, d.data(), d.size(), ws);
    ASSERT_TRUE(m.ok() && m->kind == ChunkMatch::Kind::kEqual);
    Batch drop;
    drop.Unref(k);
    ASSERT_TRUE(s->Commit(drop).ok());
    ASSERT_FALSE(s->GetChunkInfo(k).ok());
    Batch again;
    AddAs(again, k, 2, d, &*m);
    Status st = s->Commit(again);
    if (!lmc) {
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find("left the store"), std::string::npos) << st.ToString();
      continue;
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(s->Stats().encoded_at_commit, 1u);
    EXPECT_EQ(*ReadAll(*s, k), d);
  }
}

// Two contents under one key (a collision, made here by reusing a key):
// the batch that brings the second fails, nothing of it is stored, and the
// first still reads back.
TEST(FastKeys, ACollisionFailsTheBatchAndSharesNothing) {
  for (bool matched : {false, true}) {
    for (bool same_batch : {false, true}) {
      if (matched && same_batch) continue;  // a match is of a committed record
      SCOPED_TRACE(std::string(matched ? "matched elsewhere" : "frame") +
                   (same_batch ? ", same batch" : ", committed"));
      TempDir t;
      const std::vector<uint8_t> a = RandomBytes(4096, 4), other = RandomBytes(4096, 5);
      auto s = OpenOrDie(t.store(), FastOptions());
      ASSERT_TRUE(s);
      const ChunkKey k = s->keys().Of(a.data(), a.size());
      Batch first;
      AddAs(first, k, 1, a);
      if (!same_batch) {
        ASSERT_TRUE(s->Commit(first).ok());
      }
      Batch second;
      if (same_batch) second = std::move(first);
      ChunkMatch stale;  // a record the chunk is not at
      stale.kind = ChunkMatch::Kind::kEqual;
      AddAs(second, k, 2, other, matched ? &stale : nullptr);
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
      AddAs(third, k, 3, longer);
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
  AddAs(batch, s->keys().Of(a.data(), a.size()), 1, a);
  AddAs(batch, s->keys().Of(a.data(), a.size(), 77u), 2, b);  // b under a's key of another scope
  ASSERT_TRUE(s->Commit(batch).ok());
  auto rep = s->Fsck(FsckOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->errors(), 1u);
}

}  // namespace
}  // namespace lmc::store::testing
