// A frame's pack-record checksum computed by its maker (SealRecord, passed
// to Batch::AddChunk): used for the record it was sealed for, ignored for
// any other.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lmc/store/store.h"
#include "store_test_util.h"

namespace lmc::store::testing {
namespace {

struct Stored {
  ChunkKey key;
  std::vector<uint8_t> data;
};

// Commits `data` with the seal that `seal_of` makes for it; returns the key.
template <typename SealOf>
Stored CommitSealed(Store& s, uint32_t seed, SealOf seal_of) {
  Stored c;
  c.data = RandomBytes(40000, seed);
  c.key = s.keys().Of(c.data.data(), c.data.size());
  auto f = TestFrame(c.data);
  const RecordSeal seal = seal_of(c.key, std::span<const uint8_t>(f), static_cast<uint32_t>(c.data.size()));
  Batch b;
  b.AddChunk(c.key, std::string(f.begin(), f.end()), static_cast<uint32_t>(c.data.size()), std::nullopt,
             std::nullopt, seal);
  EXPECT_TRUE(s.Commit(b).ok());
  return c;
}

Status ReadBack(Store& s, const Stored& c) {
  std::vector<uint8_t> out(c.data.size());
  Workspace ws;
  auto r = s.ReadChunk(c.key, out.data(), out.size(), ws);
  if (!r.ok()) return r.status();
  EXPECT_EQ(out, c.data);
  return Status::Ok();
}

TEST(RecordSeal, ASealedRecordReadsBack) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  Stored c = CommitSealed(
      *s, 1, [](const ChunkKey& k, std::span<const uint8_t> f, uint32_t n) { return SealRecord(k, f, n); });
  EXPECT_TRUE(ReadBack(*s, c).ok());
}

// The seal is what the record carries: a wrong checksum sealed for this very
// record shows as corruption when read (so the commit did not compute its own).
TEST(RecordSeal, TheCommitUsesTheSealItIsGiven) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  Stored c = CommitSealed(*s, 2, [](const ChunkKey& k, std::span<const uint8_t> f, uint32_t n) {
    RecordSeal seal = SealRecord(k, f, n);
    seal.checksum ^= 1;
    return seal;
  });
  Status st = ReadBack(*s, c);
  EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
}

// A seal made for another record (another key, length or owner) is not used.
TEST(RecordSeal, ASealForAnotherRecordIsIgnored) {
  TempDir t;
  auto s = OpenOrDie(t.store(), TestOptions());
  ASSERT_TRUE(s);
  Stored a = CommitSealed(*s, 3, [](const ChunkKey& k, std::span<const uint8_t> f, uint32_t n) {
    ChunkKey other = k;
    other.bytes[0] ^= 1;
    RecordSeal seal = SealRecord(other, f, n);
    seal.key = other;
    return seal;
  });
  Stored b = CommitSealed(*s, 4, [](const ChunkKey& k, std::span<const uint8_t> f, uint32_t n) {
    RecordSeal seal = SealRecord(k, f, n + 1);
    seal.checksum ^= 1;
    return seal;
  });
  Stored c = CommitSealed(*s, 5, [](const ChunkKey& k, std::span<const uint8_t> f, uint32_t n) {
    return SealRecord(k, f, n, 1000u);
  });
  EXPECT_TRUE(ReadBack(*s, a).ok());
  EXPECT_TRUE(ReadBack(*s, b).ok());
  EXPECT_TRUE(ReadBack(*s, c).ok());
}

}  // namespace
}  // namespace lmc::store::testing
