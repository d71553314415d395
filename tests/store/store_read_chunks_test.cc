// Store::ReadChunks: several chunks in few calls of a batch decoder (the GPU
// codec in the mount), round by round up the delta chains, with ReadChunk's
// checks and a CPU decode when the batch decoder fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "lmc/codec.h"
#include "store_test_util.h"

namespace lmc::store {
namespace {

using testing::KeyOf;
using testing::OpenOrDie;
using testing::RandomBytes;
using testing::TempDir;

constexpr size_t kChunk = 64 << 10;

// With `base`: a delta on it; with `widened_at` too, an fp32 frame on the
// bf16 chunk `base` from that element on (a master on its twin).
std::vector<uint8_t> Frame(const std::vector<uint8_t>& d, DType t, const std::vector<uint8_t>* base = nullptr,
                           std::optional<uint32_t> widened_at = std::nullopt) {
  std::vector<uint8_t> f(MaxEncodedSize(d.size()));
  Workspace ws;
  EncodeParams p;
  p.dtype = t;
  p.base = base ? base->data() : nullptr;
  p.widened_base_offset = widened_at;
  p.base_len = base && widened_at ? base->size() : 0;
  auto r = EncodeChunk(d.data(), d.size(), p, f.data(), f.size(), ws);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  f.resize(r.ok() ? *r : 0);
  return f;
}

// Smooth data (compressible), so frames are real LMC frames.
std::vector<uint8_t> Data(size_t n, uint8_t seed) {
  std::vector<uint8_t> v = RandomBytes(n, seed);
  for (size_t i = 0; i < n; i += 2) v[i + 1] = 0x3c;
  return v;
}

std::vector<uint8_t> Flipped(std::vector<uint8_t> v, size_t every) {
  for (size_t i = 0; i < v.size(); i += every) v[i] ^= 1;
  return v;
}

// A batch decoder like the GPU codec's, on the CPU: counts what it gets
// (items a call, items with a base), fails the call numbered fail_call
// (1-based; 0: none; -1: all) as a device would (no item valid).
struct CountingDecoder {
  int calls = 0;
  int fail_call = 0;
  size_t items = 0, with_base = 0;
  std::vector<size_t> per_call;
  FrameBatchDecoder Fn() {
    return [this](GpuDecodeItem* it, size_t count) -> Status {
      calls++;
      items += count;
      per_call.push_back(count);
      for (size_t i = 0; i < count; i++) with_base += it[i].base != nullptr;
      if (fail_call == -1 || fail_call == calls) return Status::IOError("device failed");
      Workspace ws;
      for (size_t i = 0; i < count; i++) {
        auto r = DecodeChunk(it[i].frame, it[i].len, it[i].base, it[i].base_len, it[i].dst, it[i].cap, ws);
        it[i].status = r.ok() ? Status::Ok() : r.status();
        it[i].out_len = r.ok() ? *r : 0;
      }
      return Status::Ok();
    };
  }
};

// Chunks 0-5 standalone; 6 a delta on 0 and 7 a delta on 6 (a chain of
// two); 8 a bf16 chunk and 9, 10 the two fp32 halves of its master, deltas
// on it (widened base); and a chunk the reads ask for that is absent.
class StoreReadChunks : public ::testing::Test {
 protected:
  static constexpr size_t kStandalone = 6, kDelta = 6, kDelta2 = 7, kTwin = 8, kMaster = 9;

  void SetUp() override {
    store_ = Open();
    ASSERT_TRUE(store_);
    Batch b;
    for (uint8_t i = 0; i < kStandalone; i++) {
      data_.push_back(Data(kChunk, i));
      b.AddChunk(KeyOf(data_.back()), Frame(data_.back(), DType::kBF16), kChunk);
    }
    data_.push_back(Flipped(data_[0], 101));
    b.AddChunk(KeyOf(data_[kDelta]), Frame(data_[kDelta], DType::kBF16, &data_[0]), kChunk, KeyOf(data_[0]));
    data_.push_back(Flipped(data_[kDelta], 37));
    b.AddChunk(KeyOf(data_[kDelta2]), Frame(data_[kDelta2], DType::kBF16, &data_[kDelta]), kChunk,
               KeyOf(data_[kDelta]));
    // The master and its twin (bf16 rounded to nearest even), 64 KiB each half.
    std::mt19937 rng(5);
    std::normal_distribution<float> w(0.0f, 0.02f);
    std::vector<uint8_t> twin(kChunk);
    std::vector<std::vector<uint8_t>> halves(2, std::vector<uint8_t>(kChunk));
    for (size_t i = 0; i < kChunk / 2; i++) {
      const float f = w(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      std::memcpy(halves[i / (kChunk / 4)].data() + 4 * (i % (kChunk / 4)), &u, 4);
      const uint16_t h = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
      std::memcpy(twin.data() + 2 * i, &h, 2);
    }
    data_.push_back(twin);
    b.AddChunk(KeyOf(twin), Frame(twin, DType::kBF16), kChunk);
    for (uint32_t h = 0; h < 2; h++) {
      data_.push_back(halves[h]);
      b.AddChunk(KeyOf(halves[h]), Frame(halves[h], DType::kF32, &twin, h * uint32_t{kChunk / 4}), kChunk,
                 KeyOf(twin));
    }
    ASSERT_TRUE(store_->Commit(b).ok());
    missing_ = Data(kChunk, 99);
  }
  std::unique_ptr<Store> Open(bool base_cache = true) {
    StoreOptions o;
    o.fast_keys_new_stores = false;  // SHA-256 keys: the chunks are named by KeyOf
    o.verify_content_hash = true;
    if (!base_cache) o.base_cache_bytes = 0;
    return OpenOrDie(dir_.store(), o);
  }
  // Reads chunks `which` (all, and the missing one, by default) in one call.
  std::vector<ChunkRead> Read(const FrameBatchDecoder& dec, std::vector<size_t> which = {},
                              bool batch_only = false) {
    if (which.empty()) {
      for (size_t i = 0; i <= data_.size(); i++) which.push_back(i);
    }
    which_ = which;
    std::vector<ChunkRead> reads(which.size());
    out_.assign(reads.size(), std::vector<uint8_t>(kChunk));
    for (size_t i = 0; i < reads.size(); i++) {
      reads[i].key = KeyOf(which[i] < data_.size() ? data_[which[i]] : missing_);
      reads[i].dst = out_[i].data();
      reads[i].cap = out_[i].size();
    }
    Workspace ws;
    store_->ReadChunks(reads, ws, dec, batch_only);
    return reads;
  }
  void ExpectResults(const std::vector<ChunkRead>& reads) {
    for (size_t i = 0; i < reads.size(); i++) {
      if (which_[i] == data_.size()) {
        EXPECT_TRUE(reads[i].result.status().IsNotFound());
        continue;
      }
      ASSERT_TRUE(reads[i].result.ok()) << which_[i] << ": " << reads[i].result.status().ToString();
      EXPECT_EQ(*reads[i].result, kChunk);
      EXPECT_EQ(out_[i], data_[which_[i]]) << which_[i];
    }
  }
  // Flips one byte inside chunk i's frame: its record checksum no longer
  // holds. Reopens the store.
  void CorruptRecord(size_t i) {
    auto info = store_->GetChunkInfo(KeyOf(data_[i]));
    ASSERT_TRUE(info.ok());
    store_.reset();
    char name[64];
    std::snprintf(name, sizeof name, "/packs/pack-%016llx.lmp",
                  static_cast<unsigned long long>(info->pack_id));
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
    store_ = Open();
    ASSERT_TRUE(store_);
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::vector<std::vector<uint8_t>> data_;
  std::vector<uint8_t> missing_;
  std::vector<size_t> which_;
  std::vector<std::vector<uint8_t>> out_;
};

TEST_F(StoreReadChunks, StandaloneFramesThenDeltasRoundByRound) {
  CountingDecoder dec;
  auto reads = Read(dec.Fn());
  ExpectResults(reads);
  // Round 1: the 7 standalone frames; 2: the delta on chunk 0 and the two
  // masters on their twin; 3: the delta on that delta.
  EXPECT_EQ(dec.per_call, (std::vector<size_t>{7, 3, 1}));
  EXPECT_EQ(dec.with_base, 4u);
  for (size_t i = 0; i < data_.size(); i++) EXPECT_TRUE(reads[i].batched && !reads[i].redone) << i;
  // The bases read (0, 6, the twin) and the delta read directly (7) are in
  // the base cache now, as ReadChunk would leave them; with batch_only they
  // are left to the caller, and the masters take their twin from the cache:
  // one round.
  {
    CountingDecoder d2;
    auto r2 = Read(d2.Fn(), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, /*batch_only=*/true);
    for (size_t i : {0, 6, 7, 8}) {
      EXPECT_TRUE(r2[i].deferred) << i;
      EXPECT_EQ(r2[i].result.status().code(), Code::kAborted);  // untouched
    }
    for (size_t i : {1, 2, 3, 4, 5, 9, 10}) EXPECT_TRUE(r2[i].batched && !r2[i].deferred) << i;
    EXPECT_EQ(d2.per_call, (std::vector<size_t>{7}));
    EXPECT_EQ(d2.with_base, 2u);
    EXPECT_EQ(out_[9], data_[9]);
  }
  // Without a decoder: one ReadChunk each, same bytes.
  reads = Read({});
  ExpectResults(reads);
  for (const auto& r : reads) EXPECT_FALSE(r.batched);
}

TEST_F(StoreReadChunks, ADeltaReadAloneDecodesItsChainRoundByRound) {
  store_.reset();
  store_ = Open(/*base_cache=*/false);
  ASSERT_TRUE(store_);
  const uint64_t misses = store_->Stats().base_cache_misses;
  CountingDecoder dec;
  auto reads = Read(dec.Fn(), {kDelta2});
  ExpectResults(reads);
  EXPECT_TRUE(reads[0].batched);
  EXPECT_EQ(dec.per_call, (std::vector<size_t>{1, 1, 1}));  // chunk 0, then 6, then 7
  EXPECT_EQ(dec.with_base, 2u);
  EXPECT_EQ(store_->Stats().base_cache_misses, misses + 2);
  // A master alone: its twin first, then the master against all of it.
  size_t base_len = 0;
  CountingDecoder inner;
  FrameBatchDecoder look = [&](GpuDecodeItem* it, size_t count) {
    for (size_t i = 0; i < count; i++)
      if (it[i].base) base_len = it[i].base_len;
    return inner.Fn()(it, count);
  };
  reads = Read(look, {kMaster + 1});
  ExpectResults(reads);
  EXPECT_TRUE(reads[0].batched);
  EXPECT_EQ(inner.per_call, (std::vector<size_t>{1, 1}));
  EXPECT_EQ(base_len, kChunk);
  // With the base cache, the bases decoded on the way stay there, as
  // ReadChunk's path leaves them: read next, they come from it.
  store_.reset();
  store_ = Open();
  ASSERT_TRUE(store_);
  CountingDecoder d2;
  reads = Read(d2.Fn(), {kDelta2});
  ExpectResults(reads);
  EXPECT_EQ(d2.per_call, (std::vector<size_t>{1, 1, 1}));
  CountingDecoder d3;
  reads = Read(d3.Fn(), {0, kDelta, 1}, /*batch_only=*/true);
  EXPECT_TRUE(reads[0].deferred && reads[1].deferred);
  EXPECT_TRUE(reads[2].batched);
  EXPECT_EQ(d3.items, 1u);
}

TEST_F(StoreReadChunks, AFailedBatchIsDecodedOnTheCpu) {
  CountingDecoder dec;
  dec.fail_call = -1;
  auto reads = Read(dec.Fn());
  ExpectResults(reads);
  EXPECT_EQ(dec.calls, 3);  // every round asks (the mount's GpuPath answers at once once off)
  for (const auto& r : reads) EXPECT_FALSE(r.batched || r.redone);
}

TEST_F(StoreReadChunks, AFailedRoundIsDecodedOnTheCpuAndTheNextRoundStillGoesToTheBatch) {
  CountingDecoder dec;
  dec.fail_call = 2;  // the deltas on chunk 0 and on the twin
  auto reads = Read(dec.Fn());
  ExpectResults(reads);
  for (size_t i : {kDelta, kMaster, kMaster + 1}) EXPECT_FALSE(reads[i].batched || reads[i].redone) << i;
  EXPECT_TRUE(reads[kDelta2].batched);  // on the CPU-decoded delta
  EXPECT_TRUE(reads[0].batched);
}

TEST_F(StoreReadChunks, AWrongBatchResultIsDecodedAgainOnTheCpu) {
  const uint64_t before = store_->Stats().corruptions;
  // A decoder that garbles chunk 2's and the delta 6's bytes and refuses
  // chunk 3's frame: the CPU decodes them again, and nothing is corrupt.
  CountingDecoder inner;
  FrameBatchDecoder wrong = [&](GpuDecodeItem* it, size_t count) {
    Status s = inner.Fn()(it, count);
    for (size_t i = 0; i < count; i++) {
      if (it[i].dst == out_[2].data() || it[i].dst == out_[kDelta].data()) it[i].dst[0] ^= 1;
      if (it[i].dst == out_[3].data()) it[i].status = Status::Corruption("frame checksum mismatch");
    }
    return s;
  };
  auto reads = Read(wrong);
  ExpectResults(reads);
  for (size_t i : {size_t{2}, size_t{3}, kDelta}) EXPECT_TRUE(!reads[i].batched && reads[i].redone) << i;
  EXPECT_TRUE(reads[4].batched);
  EXPECT_FALSE(reads[4].redone);
  EXPECT_TRUE(reads[kDelta2].batched);  // on the redone delta's bytes
  EXPECT_EQ(store_->Stats().corruptions, before);
  // A base no read names (decoded into the store's own buffer), garbled:
  // bases are not hashed (ReadChunk's path does not either), so the delta
  // decodes to bytes that fail its frame checksum, on the CPU too, and
  // ReadChunk's path reads the chain again: right bytes, nothing corrupt.
  store_.reset();
  store_ = Open(/*base_cache=*/false);
  ASSERT_TRUE(store_);
  CountingDecoder inner2;
  int call = 0;
  FrameBatchDecoder wrong_base = [&](GpuDecodeItem* it, size_t count) {
    Status s = inner2.Fn()(it, count);
    if (++call == 1) it[0].dst[100] ^= 4;
    return s;
  };
  reads = Read(wrong_base, {kDelta});
  ExpectResults(reads);
  EXPECT_FALSE(reads[0].batched);
  EXPECT_EQ(inner2.per_call, (std::vector<size_t>{1, 1}));
  EXPECT_EQ(store_->Stats().corruptions, 0u);
}

TEST_F(StoreReadChunks, ACorruptRecordIsCorruptionAndCounted) {
  const uint64_t before = store_->Stats().corruptions;
  CorruptRecord(2);
  CountingDecoder dec;
  auto reads = Read(dec.Fn());
  EXPECT_EQ(reads[2].result.status().code(), Code::kCorruption) << reads[2].result.status().ToString();
  EXPECT_TRUE(reads[3].result.ok());
  EXPECT_EQ(dec.items, 10u);  // the corrupt record never reaches the batch
  EXPECT_EQ(store_->Stats().corruptions, before + 1);
}

TEST_F(StoreReadChunks, ACorruptBaseFailsItsDeltasWithCorruptionAndTheRestReads) {
  CorruptRecord(0);
  for (bool with_base_read : {true, false}) {
    CountingDecoder dec;
    auto reads = with_base_read ? Read(dec.Fn()) : Read(dec.Fn(), {kDelta2, 1, kMaster});
    for (size_t i = 0; i < reads.size(); i++) {
      const size_t c = which_[i];
      if (c == 0 || c == kDelta || c == kDelta2) {
        EXPECT_EQ(reads[i].result.status().code(), Code::kCorruption)
            << c << ": " << reads[i].result.status().ToString();
      } else if (c < data_.size()) {
        EXPECT_TRUE(reads[i].result.ok() && out_[i] == data_[c]) << c;
      }
    }
    // Neither the delta nor its delta reach the batch (the second time, the
    // master takes its twin from the base cache).
    EXPECT_EQ(dec.items, with_base_read ? 8u : 2u) << with_base_read;
  }
  EXPECT_GT(store_->Stats().corruptions, 0u);
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
