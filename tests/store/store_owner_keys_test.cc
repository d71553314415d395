// Owner-scoped chunk keys (dedup=uid; docs/FORMAT.md, "Chunk keys"): the
// same bytes of two owners are two chunks, the same owner's are one; the
// record and index entry carry the owner, so reads and fsck verify the key
// as it was made; the store's CONFIG goes to format 2 with the first one.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <string>
#include <vector>

#include "format.h"
#include "lmc/store/store.h"
#include "store_config_text.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

void AddOwnedChunk(Batch& b, uint64_t inode, const std::vector<uint8_t>& data, KeyOwner owner) {
  const ChunkKey k = ChunkKey::Of(data.data(), data.size(), owner);
  b.AddChunk(k, TestFrame(data), static_cast<uint32_t>(data.size()), std::nullopt, owner);
  Extent e;
  e.length = static_cast<uint32_t>(data.size());
  e.chunk = k;
  b.Put(Cf::kExtents, ExtentKey(inode, 0), EncodeExtent(e));
}

// Computed here with OpenSSL's incremental API, not through ChunkKey::Of.
TEST(OwnerKeys, KeyIsSha256OfTagOwnerAndBytes) {
  const std::vector<uint8_t> d = RandomBytes(1000, 7);
  uint8_t prefix[20] = {'l', 'm', 'c', 'f', 's', ' ', 'o',  'w',  'n', 'e',
                        'r', ' ', 'k', 'e', 'y', 0,   0xe8, 0x03, 0,   0};  // uid 1000, little-endian
  ChunkKey want;
  unsigned len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ASSERT_EQ(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr), 1);
  ASSERT_EQ(EVP_DigestUpdate(ctx, prefix, sizeof prefix), 1);
  ASSERT_EQ(EVP_DigestUpdate(ctx, d.data(), d.size()), 1);
  ASSERT_EQ(EVP_DigestFinal_ex(ctx, want.bytes.data(), &len), 1);
  EVP_MD_CTX_free(ctx);
  EXPECT_EQ(ChunkKey::Of(d.data(), d.size(), 1000u), want);
  EXPECT_NE(ChunkKey::Of(d.data(), d.size(), 1001u), want);
  EXPECT_NE(ChunkKey::Of(d.data(), d.size(), 0u), KeyOf(d));  // root's scope is not the shared one
}

TEST(OwnerKeys, RecordAndEntryCarryTheOwner) {
  const ChunkKey key = KeyOf(RandomBytes(10, 1));
  const std::vector<uint8_t> frame = RandomBytes(100, 2);
  for (KeyOwner owner : {KeyOwner{}, KeyOwner{0u}, KeyOwner{4000000000u}}) {
    uint8_t h[fmt::kRecordHeaderSize];
    fmt::EncodeRecordHeader(h, key, frame.data(), 100, 5000, owner);
    auto r = fmt::ParseRecordHeader(h);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->owner, owner);
    fmt::ChunkEntry e;
    e.pack_id = 3;
    e.frame_len = 100;
    e.decoded_len = 5000;
    e.refcount = 1;
    e.owner = owner;
    auto back = fmt::DecodeChunkEntry(key, fmt::EncodeChunkEntry(key, e));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->owner, owner);
  }
  // An owner without the flag, or a flag bit this version does not know, is corruption.
  uint8_t h[fmt::kRecordHeaderSize];
  fmt::EncodeRecordHeader(h, key, frame.data(), 100, 5000, std::nullopt);
  h[48] = 1;
  EXPECT_EQ(fmt::ParseRecordHeader(h).status().code(), Code::kCorruption);
  fmt::EncodeRecordHeader(h, key, frame.data(), 100, 5000, 7u);
  h[4] |= 2;
  EXPECT_EQ(fmt::ParseRecordHeader(h).status().code(), Code::kCorruption);
}

TEST(OwnerKeys, TwoOwnersStoreTheSameBytesTwiceOneOwnerOnce) {
  TempDir t;
  const std::vector<uint8_t> d = RandomBytes(20000, 42);
  // A store without the index journal is created as format 1 (older lmcfs
  // read it) and raised to 2 by its first owner-scoped key.
  StoreOptions o = TestOptions();
  o.journal_new_stores = false;
  {
    auto s = OpenOrDie(t.store(), o);
    ASSERT_TRUE(s);
    Batch shared;
    AddFileChunk(shared, 1, d);
    ASSERT_TRUE(s->Commit(shared).ok());
    EXPECT_NE(ConfigOf(t.store()).find("format_version=1\n"), std::string::npos) << ConfigOf(t.store());

    Batch a, a2, b;
    AddOwnedChunk(a, 2, d, 1000u);
    AddOwnedChunk(a2, 3, d, 1000u);
    AddOwnedChunk(b, 4, d, 1001u);
    for (Batch* x : {&a, &a2, &b}) ASSERT_TRUE(s->Commit(*x).ok());
    const StoreStats st = s->Stats();
    EXPECT_EQ(st.chunks_stored, 3u);  // shared, uid 1000, uid 1001
    EXPECT_EQ(st.dedup_hits, 1u);     // uid 1000's second file
    EXPECT_NE(ConfigOf(t.store()).find("format_version=2\n"), std::string::npos) << ConfigOf(t.store());
  }
  // Reopened (format 2 is read), every key reads back verified, and fsck,
  // which hashes every chunk, finds nothing.
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  for (KeyOwner owner : {KeyOwner{}, KeyOwner{1000u}, KeyOwner{1001u}}) {
    auto got = ReadAll(*s, ChunkKey::Of(d.data(), d.size(), owner));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, d);
    EXPECT_EQ(s->GetChunkInfo(ChunkKey::Of(d.data(), d.size(), owner))->refcount, owner == 1000u ? 2u : 1u);
  }
  auto f = s->Fsck({});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->errors(), 0u);
}

// The owner is part of what is verified: a chunk filed under another
// owner than its key was made with does not read back as good bytes.
TEST(OwnerKeys, KeyVerifiedWithAnotherOwnerIsCorruption) {
  TempDir t;
  const std::vector<uint8_t> d = RandomBytes(5000, 3);
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  const ChunkKey k = ChunkKey::Of(d.data(), d.size(), 5u);
  Batch b;
  // The key is uid 5's, but the op claims uid 6: the record and entry say 6.
  b.AddChunk(k, TestFrame(d), static_cast<uint32_t>(d.size()), std::nullopt, 6u);
  ASSERT_TRUE(s->Commit(b).ok());
  std::vector<uint8_t> out(d.size());
  Workspace ws;
  auto r = s->ReadChunk(k, out.data(), out.size(), ws);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("do not hash to the chunk key"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace lmc::store::testing
