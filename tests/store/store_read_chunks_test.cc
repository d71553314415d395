// Store::ReadChunks: several chunks in one call, the standalone frames
// through one batch decoder (the GPU codec in the mount), with ReadChunk's
// checks and a CPU decode when the batch decoder fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "lmc/codec.h"
#include "store_test_util.h"

namespace lmc::store {
namespace {

using testing::KeyOf;
using testing::OpenOrDie;
using testing::RandomBytes;
using testing::TempDir;

std::vector<uint8_t> Frame(const std::vector<uint8_t>& d, const std::vector<uint8_t>* base = nullptr) {
  std::vector<uint8_t> f(MaxEncodedSize(d.size()));
  Workspace ws;
  EncodeParams p;
  p.dtype = DType::kBF16;
  p.base = base ? base->data() : nullptr;
  auto r = EncodeChunk(d.data(), d.size(), p, f.data(), f.size(), ws);
  EXPECT_TRUE(r.ok());
  f.resize(r.ok() ? *r : 0);
  return f;
}

// Smooth data (compressible), so frames are real LMC frames.
std::vector<uint8_t> Data(size_t n, uint8_t seed) {
  std::vector<uint8_t> v = RandomBytes(n, seed);
  for (size_t i = 0; i < n; i += 2) v[i + 1] = 0x3c;
  return v;
}

// A batch decoder like the GPU codec's, on the CPU: counts what it gets,
// fails when told (a device failure: no item valid).
struct CountingDecoder {
  int calls = 0;
  size_t items = 0;
  bool fail = false;
  FrameBatchDecoder Fn() {
    return [this](GpuDecodeItem* it, size_t count) -> Status {
      calls++;
      items += count;
      if (fail) return Status::IOError("device failed");
      Workspace ws;
      for (size_t i = 0; i < count; i++) {
        EXPECT_EQ(it[i].base, nullptr);  // deltas never reach the batch
        auto r = DecodeChunk(it[i].frame, it[i].len, nullptr, 0, it[i].dst, it[i].cap, ws);
        it[i].status = r.ok() ? Status::Ok() : r.status();
        it[i].out_len = r.ok() ? *r : 0;
      }
      return Status::Ok();
    };
  }
};

class StoreReadChunks : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
    o.verify_content_hash = true;
    store_ = OpenOrDie(dir_.store(), o);
    ASSERT_TRUE(store_);
    Batch b;
    for (uint8_t i = 0; i < 6; i++) {
      data_.push_back(Data(64 << 10, i));
      b.AddChunk(KeyOf(data_.back()), Frame(data_.back()), 64 << 10);
    }
    // A delta on chunk 0, and a chunk the reads ask for that is absent.
    data_.push_back(data_[0]);
    for (size_t i = 0; i < data_.back().size(); i += 101) data_.back()[i] ^= 1;
    b.AddChunk(KeyOf(data_.back()), Frame(data_.back(), &data_[0]), 64 << 10, KeyOf(data_[0]));
    ASSERT_TRUE(store_->Commit(b).ok());
    missing_ = Data(64 << 10, 99);
  }
  // Reads every chunk (and the missing one) in one call.
  std::vector<ChunkRead> ReadAllOnce(const FrameBatchDecoder& dec) {
    std::vector<ChunkRead> reads(data_.size() + 1);
    out_.assign(reads.size(), std::vector<uint8_t>(64 << 10));
    for (size_t i = 0; i < reads.size(); i++) {
      reads[i].key = KeyOf(i < data_.size() ? data_[i] : missing_);
      reads[i].dst = out_[i].data();
      reads[i].cap = out_[i].size();
    }
    Workspace ws;
    store_->ReadChunks(reads, ws, dec);
    return reads;
  }
  void ExpectResults(const std::vector<ChunkRead>& reads) {
    for (size_t i = 0; i < data_.size(); i++) {
      ASSERT_TRUE(reads[i].result.ok()) << i << ": " << reads[i].result.status().ToString();
      EXPECT_EQ(*reads[i].result, data_[i].size());
      EXPECT_EQ(out_[i], data_[i]) << i;
    }
    EXPECT_TRUE(reads.back().result.status().IsNotFound());
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::vector<std::vector<uint8_t>> data_;
  std::vector<uint8_t> missing_;
  std::vector<std::vector<uint8_t>> out_;
};

TEST_F(StoreReadChunks, StandaloneFramesGoThroughOneBatchDeltasThroughReadChunk) {
  CountingDecoder dec;
  auto reads = ReadAllOnce(dec.Fn());
  ExpectResults(reads);
  EXPECT_EQ(dec.calls, 1);
  EXPECT_EQ(dec.items, 6u);
  for (size_t i = 0; i < 6; i++) EXPECT_TRUE(reads[i].batched) << i;
  EXPECT_FALSE(reads[6].batched);  // the delta
  // batch_only: the delta is left to the caller, and so is its base, which
  // the store's base cache holds since the read above.
  {
    CountingDecoder d2;
    std::vector<ChunkRead> r2(data_.size());
    for (size_t i = 0; i < r2.size(); i++) {
      r2[i].key = KeyOf(data_[i]);
      r2[i].dst = out_[i].data();
      r2[i].cap = out_[i].size();
    }
    Workspace ws;
    store_->ReadChunks(r2, ws, d2.Fn(), /*batch_only=*/true);
    for (size_t i = 1; i < 6; i++) EXPECT_TRUE(r2[i].batched && !r2[i].deferred) << i;
    EXPECT_TRUE(r2[0].deferred);
    EXPECT_TRUE(r2[6].deferred);
    EXPECT_EQ(r2[6].result.status().code(), Code::kAborted);  // untouched
  }
  // Without a decoder: one ReadChunk each, same bytes.
  reads = ReadAllOnce({});
  ExpectResults(reads);
  for (const auto& r : reads) EXPECT_FALSE(r.batched);
}

TEST_F(StoreReadChunks, AFailedBatchIsDecodedOnTheCpu) {
  CountingDecoder dec;
  dec.fail = true;
  auto reads = ReadAllOnce(dec.Fn());
  ExpectResults(reads);
  EXPECT_EQ(dec.calls, 1);
  for (const auto& r : reads) EXPECT_FALSE(r.batched || r.redone);
}

TEST_F(StoreReadChunks, AWrongBatchResultIsDecodedAgainOnTheCpu) {
  const uint64_t before = store_->Stats().corruptions;
  // A decoder that garbles chunk 2's bytes and refuses chunk 3's frame: the
  // CPU decodes both again, and nothing is corrupt.
  CountingDecoder inner;
  FrameBatchDecoder wrong = [&](GpuDecodeItem* it, size_t count) {
    Status s = inner.Fn()(it, count);
    for (size_t i = 0; i < count; i++) {
      if (it[i].dst == out_[2].data()) it[i].dst[0] ^= 1;
      if (it[i].dst == out_[3].data()) it[i].status = Status::Corruption("frame checksum mismatch");
    }
    return s;
  };
  auto reads = ReadAllOnce(wrong);
  ExpectResults(reads);
  EXPECT_FALSE(reads[2].batched);
  EXPECT_FALSE(reads[3].batched);
  EXPECT_TRUE(reads[2].redone);
  EXPECT_TRUE(reads[3].redone);
  EXPECT_TRUE(reads[4].batched);
  EXPECT_FALSE(reads[4].redone);
  EXPECT_EQ(store_->Stats().corruptions, before);
}

TEST_F(StoreReadChunks, ACorruptRecordIsCorruptionAndCounted) {
  const uint64_t before = store_->Stats().corruptions;
  auto info = store_->GetChunkInfo(KeyOf(data_[2]));
  ASSERT_TRUE(info.ok());
  store_.reset();
  // One byte inside chunk 2's frame: its record checksum no longer holds.
  char name[64];
  std::snprintf(name, sizeof name, "/packs/pack-%016llx.lmp", static_cast<unsigned long long>(info->pack_id));
  const std::string pack = dir_.store() + name;
  std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << pack;
  f.seekg(static_cast<std::streamoff>(info->offset + 100));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(info->offset + 100));
  f.write(&c, 1);
  f.close();
  StoreOptions o;
  o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
  o.verify_content_hash = true;
  store_ = OpenOrDie(dir_.store(), o);
  ASSERT_TRUE(store_);
  CountingDecoder dec;
  auto reads = ReadAllOnce(dec.Fn());
  EXPECT_EQ(reads[2].result.status().code(), Code::kCorruption) << reads[2].result.status().ToString();
  EXPECT_TRUE(reads[3].result.ok());
  EXPECT_EQ(dec.items, 5u);  // the corrupt record never reaches the batch
  EXPECT_EQ(store_->Stats().corruptions, before + 1);
}

TEST(StoreReadChunksOtherCodec, AStoreWithAnotherFrameCodecNeverCallsTheBatchDecoder) {
  TempDir dir;
  auto s = OpenOrDie(dir.store(), testing::TestOptions());
  ASSERT_TRUE(s);
  auto d = RandomBytes(4096, 3);
  Batch b;
  b.AddChunk(KeyOf(d), testing::TestFrame(d), 4096);
  ASSERT_TRUE(s->Commit(b).ok());
  CountingDecoder dec;
  std::vector<uint8_t> out(4096);
  std::vector<ChunkRead> reads(1);
  reads[0].key = KeyOf(d);
  reads[0].dst = out.data();
  reads[0].cap = out.size();
  Workspace ws;
  s->ReadChunks(reads, ws, dec.Fn());
  ASSERT_TRUE(reads[0].result.ok());
  EXPECT_EQ(out, d);
  EXPECT_EQ(dec.calls, 0);
}

}  // namespace
}  // namespace lmc::store
