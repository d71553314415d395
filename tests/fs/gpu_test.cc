// The GPU codec in the write and read pipelines (docs/ARCHITECTURE.md, "GPU
// codec in the mount"), without a GPU: a FakeGpuCodec (the CPU codec behind
// the GpuCodec interface, able to fail a batch as a device would) handed to
// the encoder pool and to fs::Filesystem.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../fake_gpu_codec.h"
#include "core_test_util.h"
#include "encoder.h"
#include "gpu_path.h"
#include "gpu_pipeline.h"  // OpenHostEmulatedCodec
#include "lmc/codec.h"
#include "lmc/fs/delta_policy.h"
#include "lmc/fs/filesystem.h"
#include "lmc/fs/snapshots.h"
#include "lmc/store/chunk_cache.h"
#include "lmc/store/store.h"
#include "lmc/thread_pool.h"

namespace lmc::fs {
namespace {

using lmc::testing::FakeGpuCodec;
using testing::Bf16Like;
using testing::Safetensors;

constexpr size_t kChunk = 64 << 10;

// A delta policy that holds the first ChooseBase call (so the one CPU
// encoder thread is busy and the queue fills for the GPU feeder) until
// Open(), and offers `base` to chunks of its length whose inode is
// base_ino (0: any).
class FirstCallGate : public DeltaPolicy {
 public:
  void Open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void SetBase(std::optional<BaseChoice> b) {
    std::lock_guard lk(mu_);
    base = std::move(b);
  }
  bool WaitCalls(int n) {
    for (int i = 0; i < 5000 && calls.load() < n; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return calls.load() >= n;
  }
  std::optional<BaseChoice> ChooseBase(const ChunkOrigin& origin, const uint8_t*, size_t n) override {
    if (calls++ == 0) {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return open_; });
    }
    std::lock_guard lk(mu_);
    if (bad_base_ino && origin.ino == bad_base_ino)
      return BaseChoice{{}, store::CopyChunkBytes(std::vector<uint8_t>(n + 1).data(), n + 1)};
    if (base && base->bytes->size() == n && (base_ino == 0 || origin.ino == base_ino)) {
      offered++;
      return *base;
    }
    return std::nullopt;
  }
  void Record(const ChunkOrigin&, const store::ChunkKey&, const std::optional<store::ChunkKey>& b,
              const store::ChunkBytes&, store::Batch*) override {
    if (b) recorded_with_base++;
  }
  void Release(const store::ChunkKey&) override { released++; }

  std::atomic<int> calls{0}, offered{0}, released{0}, recorded_with_base{0};
  std::optional<BaseChoice> base;  // guarded by mu_ once encoders run
  uint64_t base_ino = 0;
  uint64_t bad_base_ino = 0;  // offered a base of the wrong length (the encode fails)

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A delta base of these bytes (the policy's choice), named as `keys` names them.
BaseChoice BaseOf(const std::string& bytes, const store::KeyScheme& keys = store::KeyScheme()) {
  return BaseChoice{keys.Of(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                    store::CopyChunkBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())};
}

template <typename Pred>
bool WaitFor(Pred p, int ms = 10000) {
  for (int i = 0; i < ms && !p(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return p();
}

// ------------------------------------------------------------ the encoder pool

class FsGpuPool : public ::testing::Test {
 protected:
  // The pool's feeder waits for more than one chunk of kChunk bytes: the
  // first job (kChunk) can only go to the CPU thread, and each later one
  // (2 * kChunk) is a batch on its own, so none waits for company.
  static constexpr size_t kMinBatch = kChunk + 1;
  std::shared_ptr<EncodeJob> Job(uint64_t ino, const std::string& bytes, DeltaPolicy* delta) {
    auto j = std::make_shared<EncodeJob>();
    j->ino = ino;
    j->begin = 0;
    j->end = bytes.size();
    j->buf = store::CopyChunkBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (ino % 2) j->dtype = DType::kBF16;  // the others are detected
    j->delta = delta;
    return j;
  }
  // Holds the pool's one CPU thread in the gate with a first job of kChunk
  // bytes (never the feeder's; returned), then submits jobs for inodes 2..9
  // of 2 * kChunk bytes (all zeros for zero_ino), which only the feeder can
  // take while the thread is held. nullptr if the thread did not get there.
  std::shared_ptr<EncodeJob> HoldCpuThenSubmit(EncoderPool& pool, FirstCallGate& gate, uint64_t zero_ino,
                                               std::vector<std::shared_ptr<EncodeJob>>* jobs) {
    auto first = Job(1, Bf16Like(kChunk, 1), &gate);
    pool.Submit(first);
    if (!gate.WaitCalls(1)) return nullptr;
    for (uint64_t i = 2; i <= 9; i++) {
      std::string bytes =
          i == zero_ino ? std::string(2 * kChunk, '\0') : Bf16Like(2 * kChunk, static_cast<uint32_t>(i));
      jobs->push_back(Job(i, bytes, &gate));
      pool.Submit(jobs->back());
    }
    return first;
  }
  static bool Done(EncodeJob& j) {
    std::lock_guard lk(j.mu);
    return j.done;
  }
  static bool AllDone(const std::vector<std::shared_ptr<EncodeJob>>& jobs) {
    for (const auto& j : jobs)
      if (!Done(*j)) return false;
    return true;
  }
  // The job's frame decodes (against its base, if any) to its bytes, and
  // its key is their SHA-256.
  static void ExpectRoundTrip(const EncodeJob& j, const std::optional<BaseChoice>& base) {
    ASSERT_TRUE(j.status.ok()) << j.status.ToString();
    ASSERT_FALSE(j.zero);
    EXPECT_EQ(j.key, store::ChunkKey::Of(j.buf->data(), j.buf->size()));
    // Sealed by whoever encoded it (CPU thread or GPU feeder), for this frame.
    ASSERT_TRUE(j.seal.has_value());
    const store::RecordSeal want =
        store::SealRecord(j.key, {reinterpret_cast<const uint8_t*>(j.frame.data()), j.frame.size()},
                          static_cast<uint32_t>(j.buf->size()), j.key_owner);
    EXPECT_EQ(j.seal->checksum, want.checksum);
    EXPECT_EQ(j.seal->frame_len, want.frame_len);
    EXPECT_EQ(j.seal->decoded_len, want.decoded_len);
    std::vector<uint8_t> out(j.buf->size());
    Workspace ws;
    const uint8_t* b = j.base_key ? base->bytes->data() : nullptr;
    auto r = DecodeChunk(reinterpret_cast<const uint8_t*>(j.frame.data()), j.frame.size(), b,
                         b ? j.buf->size() : 0, out.data(), out.size(), ws);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(out, std::vector<uint8_t>(j.buf->begin(), j.buf->end()));
  }
  FsCounters counters_;
};

TEST_F(FsGpuPool, QueuedChunksGoToTheGpuInBatchesBesideTheCpuThreads) {
  FakeGpuCodec fake;
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_);
  FirstCallGate gate;
  gate.base = BaseOf(Bf16Like(2 * kChunk, 99));
  gate.base_ino = 7;
  {
    EncoderPool pool(1, &gpu, &counters_);
    std::vector<std::shared_ptr<EncodeJob>> jobs;
    auto first = HoldCpuThenSubmit(pool, gate, /*zero_ino=*/4, &jobs);
    ASSERT_TRUE(first);
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); }))
        << "the feeder did not encode the queued jobs while the CPU thread was held";
    EXPECT_FALSE(Done(*first));
    for (auto& j : jobs) {
      if (j->ino == 4) {
        EXPECT_TRUE(j->zero);  // a hole: nothing to encode
        continue;
      }
      ExpectRoundTrip(*j, gate.base);
      EXPECT_EQ(j->base_key.has_value(), j->ino == 7) << j->ino;
    }
    EXPECT_EQ(counters_.gpu_encode_chunks.load(), 7u);
    EXPECT_EQ(counters_.gpu_encode_bytes.load(), 7 * 2 * kChunk);
    EXPECT_EQ(counters_.cpu_encode_chunks.load(), 0u);
    EXPECT_GE(fake.calls(), 1u);  // one batch per wake-up: whatever was queued
    EXPECT_LE(fake.calls(), 8u);
    EXPECT_EQ(fake.stats().encode_chunks, 7u);
    EXPECT_EQ(counters_.gpu_batches.load(), fake.calls());
    gate.Open();
    ASSERT_TRUE(WaitFor([&] { return Done(*first); }));
    ExpectRoundTrip(*first, gate.base);
    EXPECT_EQ(counters_.cpu_encode_chunks.load(), 1u);
  }
  EXPECT_EQ(gate.released.load(), 0);
  EXPECT_TRUE(gpu.active());
  EXPECT_EQ(counters_.gpu_failed_batches.load(), 0u);
}

// gpu=on (GpuPath::first): the feeder takes whatever is queued, and the
// CPU threads (four here, idle) take nothing while the GPU keeps up. The
// fake codec answers at once, so no batch of 64 MiB ever waits behind the
// feeder.
TEST_F(FsGpuPool, GpuFirstSendsEveryChunkToTheGpu) {
  FakeGpuCodec fake;
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_, /*first=*/true);
  std::vector<std::shared_ptr<EncodeJob>> jobs;
  {
    EncoderPool pool(4, &gpu, &counters_);
    for (uint64_t i = 1; i <= 12; i++) {
      jobs.push_back(Job(i, Bf16Like(kChunk, static_cast<uint32_t>(i)), nullptr));
      pool.Submit(jobs.back());
    }
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); }));
  }
  for (auto& j : jobs) ExpectRoundTrip(*j, std::nullopt);
  EXPECT_EQ(counters_.gpu_encode_chunks.load(), 12u);
  EXPECT_EQ(counters_.cpu_encode_chunks.load(), 0u);
  EXPECT_EQ(fake.stats().encode_chunks, 12u);
}

// Paired fp32 masters (a bf16 twin chunk as the widened base) go to the GPU
// with the other chunks, their base and offset with them, and their frames
// decode against the twin.
TEST_F(FsGpuPool, PairedMastersGoToTheGpuWithTheirTwins) {
  FakeGpuCodec fake;
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_, /*first=*/true);
  // The twin: kChunk / 2 bf16 values; each master of kChunk bytes covers
  // the second half of them, rounded to nearest from its own values.
  const std::string twin = Bf16Like(kChunk, 80);
  BaseChoice pair = BaseOf(twin);
  pair.widened_offset = kChunk / 4;
  struct Offer : DeltaPolicy {
    std::optional<BaseChoice> base;
    std::optional<BaseChoice> ChooseBase(const ChunkOrigin&, const uint8_t*, size_t) override { return base; }
    void Record(const ChunkOrigin&, const store::ChunkKey&, const std::optional<store::ChunkKey>&,
                const store::ChunkBytes&, store::Batch*) override {}
    void Release(const store::ChunkKey&) override {}
  } offer;
  offer.base = pair;
  std::vector<std::shared_ptr<EncodeJob>> jobs;
  {
    EncoderPool pool(4, &gpu, &counters_);
    std::mt19937 rng(81);
    for (uint64_t i = 1; i <= 6; i++) {
      std::string master(kChunk, '\0');
      for (size_t e = 0; e < kChunk / 4; e++) {
        const uint32_t b = static_cast<uint8_t>(twin[2 * (kChunk / 4 + e)]) |
                           static_cast<uint32_t>(static_cast<uint8_t>(twin[2 * (kChunk / 4 + e) + 1])) << 8;
        const uint32_t lo = rng() & 0xffff;
        const uint32_t v = (lo > 0x8000 ? (b - 1) & 0xffff : b) << 16 | lo;  // rounds to b
        std::memcpy(master.data() + 4 * e, &v, 4);
      }
      auto j = std::make_shared<EncodeJob>();
      j->ino = 100 + i;
      j->end = master.size();
      j->buf = store::CopyChunkBytes(reinterpret_cast<const uint8_t*>(master.data()), master.size());
      j->dtype = DType::kF32;
      j->delta = &offer;
      jobs.push_back(j);
      pool.Submit(j);
    }
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); }));
  }
  EXPECT_EQ(counters_.gpu_encode_chunks.load(), 6u);
  EXPECT_EQ(counters_.cpu_encode_chunks.load(), 0u);
  EXPECT_EQ(fake.paired_items(), 6u);
  Workspace ws;
  for (auto& j : jobs) {
    ASSERT_TRUE(j->status.ok()) << j->status.ToString();
    ASSERT_TRUE(j->base_key);
    auto fi = ReadFrameInfo(reinterpret_cast<const uint8_t*>(j->frame.data()), j->frame.size());
    ASSERT_TRUE(fi.ok());
    EXPECT_TRUE(fi->widened_base);
    EXPECT_TRUE(fi->predicted);
    EXPECT_EQ(fi->base_offset, kChunk / 4);
    std::vector<uint8_t> out(kChunk);
    auto r = DecodeChunk(reinterpret_cast<const uint8_t*>(j->frame.data()), j->frame.size(),
                         pair.bytes->data(), pair.bytes->size(), out.data(), out.size(), ws);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(out, std::vector<uint8_t>(j->buf->begin(), j->buf->end()));
  }
}

// gpu=on with a device failure: the failed batch is encoded on the CPU by
// the feeder, which then stops; the CPU threads take the rest at once.
TEST_F(FsGpuPool, GpuFirstFallsBackToTheCpuThreadsWhenTheDeviceFails) {
  FakeGpuCodec fake(/*fail_batch=*/1);
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_, /*first=*/true);
  std::vector<std::shared_ptr<EncodeJob>> jobs;
  {
    EncoderPool pool(2, &gpu, &counters_);
    for (uint64_t i = 1; i <= 12; i++) {
      jobs.push_back(Job(i, Bf16Like(kChunk, static_cast<uint32_t>(i + 20)), nullptr));
      pool.Submit(jobs.back());
    }
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); })) << "jobs stranded after the GPU went off";
  }
  for (auto& j : jobs) ExpectRoundTrip(*j, std::nullopt);
  EXPECT_FALSE(gpu.active());
  EXPECT_EQ(counters_.gpu_failed_batches.load(), 1u);
  EXPECT_EQ(counters_.gpu_encode_chunks.load(), 0u);
  EXPECT_EQ(counters_.cpu_encode_chunks.load(), 12u);
}

// A frame changed on the device after the encoder wrote it (the emulated
// GPU pipeline, its 3rd frame's middle byte flipped): the codec decodes
// every frame back on the device before the call returns, finds that one
// bad and encodes its chunk on the CPU, so every job's frame decodes to its
// bytes; the path counts it, says why in its state, and turns the GPU off
// for the rest of the mount (the CPU threads take the rest). With the
// check off (verify_encode=false), the changed frame would have reached
// its job: one job's frame does not decode.
TEST_F(FsGpuPool, AFrameThatDoesNotDecodeBackIsEncodedOnTheCpuAndTheGpuGoesOff) {
  for (bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verify_encode" : "no check");
    FsCounters counters;
    GpuCodecOptions o;
    o.verify_encode = verify;
    gpu::EmulatedFaults faults;
    faults.flip_frame = 3;
    auto codec = gpu::OpenHostEmulatedCodec(o, faults);
    GpuPath gpu(codec.get(), "", kMinBatch, 64 << 20, &counters, /*first=*/true);
    std::vector<std::shared_ptr<EncodeJob>> jobs;
    {
      EncoderPool pool(1, &gpu, &counters);
      for (uint64_t i = 1; i <= 12; i++) {
        jobs.push_back(Job(i, Bf16Like(kChunk, static_cast<uint32_t>(i + 40)), nullptr));
        pool.Submit(jobs.back());
      }
      ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); })) << "jobs stranded";
    }
    size_t unreadable = 0;
    Workspace ws;
    for (auto& j : jobs) {
      ASSERT_TRUE(j->status.ok()) << j->status.ToString();
      std::vector<uint8_t> out(j->buf->size());
      auto r = DecodeChunk(reinterpret_cast<const uint8_t*>(j->frame.data()), j->frame.size(), nullptr, 0,
                           out.data(), out.size(), ws);
      unreadable += !r.ok() || out != std::vector<uint8_t>(j->buf->begin(), j->buf->end());
    }
    EXPECT_EQ(counters.gpu_failed_batches.load(), 0u);
    if (verify) {
      for (auto& j : jobs) ExpectRoundTrip(*j, std::nullopt);
      EXPECT_EQ(unreadable, 0u);
      EXPECT_EQ(codec->stats().encode_verify_failures, 1u);
      EXPECT_EQ(counters.gpu_verify_failures.load(), 1u);
      EXPECT_FALSE(gpu.active());
      EXPECT_NE(gpu.State().find("did not decode back"), std::string::npos) << gpu.State();
    } else {
      EXPECT_EQ(unreadable, 1u);
      EXPECT_EQ(counters.gpu_verify_failures.load(), 0u);
      EXPECT_TRUE(gpu.active());
    }
    EXPECT_EQ(counters.gpu_encode_chunks.load() + counters.cpu_encode_chunks.load(), jobs.size());
    EXPECT_GE(counters.gpu_encode_chunks.load(), 3u);
  }
}

TEST_F(FsGpuPool, AFailedBatchIsEncodedOnTheCpuAndTheGpuStaysOff) {
  FakeGpuCodec fake(/*fail_batch=*/1);
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_);
  FirstCallGate gate;
  gate.base = BaseOf(Bf16Like(2 * kChunk, 98));
  gate.base_ino = 3;
  gate.bad_base_ino = 5;
  {
    EncoderPool pool(1, &gpu, &counters_);
    std::vector<std::shared_ptr<EncodeJob>> jobs;
    auto first = HoldCpuThenSubmit(pool, gate, /*zero_ino=*/0, &jobs);
    ASSERT_TRUE(first);
    // The first batch fails: the feeder encodes it on the CPU and stops;
    // the rest waits for the CPU thread.
    ASSERT_TRUE(WaitFor([&] { return counters_.gpu_failed_batches.load() == 1; }));
    ASSERT_TRUE(WaitFor([&] { return Done(*jobs[0]); }));
    EXPECT_FALSE(gpu.active());
    EXPECT_GE(counters_.gpu_fallback_chunks.load(), 1u);
    gate.Open();
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs) && Done(*first); }));
    EXPECT_EQ(fake.calls(), 1u);
    for (auto& j : jobs) {
      if (j->ino == 5) {
        EXPECT_EQ(j->status.code(), Code::kInvalidArgument);  // the wrong-length base
        EXPECT_FALSE(j->base_key.has_value());                // handed back
        continue;
      }
      ExpectRoundTrip(*j, gate.base);
      EXPECT_EQ(j->base_key.has_value(), j->ino == 3);
    }
    EXPECT_EQ(gate.released.load(), 1);
    EXPECT_EQ(counters_.gpu_encode_chunks.load(), 0u);
    EXPECT_EQ(counters_.cpu_encode_chunks.load(), 8u);  // 9 jobs, one failed
    // Later work never reaches the device.
    std::vector<std::shared_ptr<EncodeJob>> more;
    for (uint64_t i = 11; i <= 18; i++) {
      more.push_back(Job(i, Bf16Like(2 * kChunk, static_cast<uint32_t>(i)), nullptr));
      pool.Submit(more.back());
    }
    for (auto& j : more) j->Wait();
    for (auto& j : more) ExpectRoundTrip(*j, std::nullopt);
    EXPECT_EQ(fake.calls(), 1u);
    EXPECT_EQ(counters_.cpu_encode_chunks.load(), 16u);
  }
  EXPECT_NE(gpu.State().find("off after a device failure"), std::string::npos) << gpu.State();
  EXPECT_NE(gpu.State().find("injected by the test"), std::string::npos) << gpu.State();
}

TEST_F(FsGpuPool, ChunksTheGpuRefusesAreEncodedOnTheCpu) {
  FakeGpuCodec fake;
  fake.refuse_n = 2 * kChunk;  // every queued job
  GpuPath gpu(&fake, "", kMinBatch, 64 << 20, &counters_);
  FirstCallGate gate;
  {
    EncoderPool pool(1, &gpu, &counters_);
    std::vector<std::shared_ptr<EncodeJob>> jobs;
    auto first = HoldCpuThenSubmit(pool, gate, /*zero_ino=*/0, &jobs);
    ASSERT_TRUE(first);
    ASSERT_TRUE(WaitFor([&] { return AllDone(jobs); }));
    for (auto& j : jobs) ExpectRoundTrip(*j, std::nullopt);
    EXPECT_EQ(counters_.gpu_fallback_chunks.load(), 8u);
    EXPECT_EQ(counters_.cpu_encode_chunks.load(), 8u);
    EXPECT_EQ(counters_.gpu_encode_chunks.load(), 0u);
    gate.Open();
  }
  EXPECT_TRUE(gpu.active());  // the device did not fail
  EXPECT_EQ(counters_.gpu_failed_batches.load(), 0u);
}

// ------------------------------------------------------------ the filesystem

class FsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lmcfs_gpu_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    opts_.chunk_size = kChunk;
    opts_.dirty_limit = 1 << 20;
    opts_.batch_limit = 256 << 10;
    opts_.cache_bytes = 4 << 20;
    opts_.encode_threads = 1;
    opts_.gpu_min_batch_bytes = 4 * kChunk;
    opts_.gpu_batch_bytes = 8 * kChunk;
  }
  void TearDown() override {
    Close();
    std::filesystem::remove_all(dir_);
  }
  void Open(GpuCodec* gpu) {
    opts_.gpu = gpu;
    auto s = store::Store::Open(dir_, {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto f = Filesystem::Open(store_.get(), dir_, opts_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  void Close() {
    ReleaseCpuThread();  // a failed test must not leave the encoder held
    gate_ = nullptr;
    if (fs_) {
      EXPECT_TRUE(fs_->Shutdown().ok());
    }
    fs_.reset();
    store_.reset();
  }
  FirstCallGate* InstallGate() {
    auto p = std::make_unique<FirstCallGate>();
    gate_ = p.get();
    fs_->SetDeltaPolicy(std::move(p));
    return gate_;
  }
  // Installs a gate and holds the one CPU encoder thread in it: a one-chunk
  // file (less than gpu_min_batch_bytes, so never the feeder's) is closed
  // on a thread of its own, which waits there. Chunks written next can
  // only be encoded by the GPU feeder until ReleaseCpuThread.
  FirstCallGate* HoldCpuThread() {
    FirstCallGate* gate = InstallGate();
    std::string one = Bf16Like(kChunk, 1);
    uint64_t ino = WriteFile("held.bin", one);
    holder_ = std::thread([this, ino] { CloseFile(ino); });
    EXPECT_TRUE(gate->WaitCalls(1));
    return gate;
  }
  void ReleaseCpuThread() {
    if (gate_) gate_->Open();
    if (holder_.joinable()) holder_.join();
  }
  // Streams `data` into a new file in 32 KiB writes (past the layout
  // parser's window, so chunks are cut and queued as it goes); leaves it open.
  uint64_t WriteFile(const std::string& name, const std::string& data) {
    struct stat st;
    EXPECT_EQ(fs_->Create(kRootIno, name, 0644, {1000, 1000}, &st), 0);
    for (size_t off = 0; off < data.size(); off += 32 << 10)
      EXPECT_EQ(fs_->Write(st.st_ino, off, data.data() + off, std::min<size_t>(32 << 10, data.size() - off)),
                0);
    return st.st_ino;
  }
  void CloseFile(uint64_t ino) {
    EXPECT_EQ(fs_->Flush(ino), 0);
    EXPECT_EQ(fs_->Release(ino, true), 0);
  }
  // Reads the whole file sequentially in 128 KiB reads (read-ahead runs).
  std::string ReadAll(const std::string& name) {
    struct stat st;
    EXPECT_EQ(fs_->Lookup(kRootIno, name, &st), 0);
    std::string all, part;
    for (uint64_t off = 0; off < static_cast<uint64_t>(st.st_size); off += part.size()) {
      EXPECT_EQ(fs_->Read(st.st_ino, off, 128 << 10, &part), 0);
      if (part.empty()) break;
      all += part;
    }
    fs_->Forget(st.st_ino, 1);
    return all;
  }
  void ExpectFsckClean() {
    auto r = store_->Fsck({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->errors(), 0u);
  }
  uint64_t C(const std::atomic<uint64_t>& x) { return x.load(); }
  // A fake that lives as long as the fixture (the filesystem, closed in
  // TearDown, uses it until then).
  FakeGpuCodec& NewFake(uint64_t fail_batch = 0) {
    fakes_.push_back(std::make_unique<FakeGpuCodec>(fail_batch));
    return *fakes_.back();
  }
  // Closes the filesystem and opens it again as gpu=on (read-ahead batches
  // go to the GPU) with a new fake.
  FakeGpuCodec& ReopenGpuFirst(uint64_t fail_batch = 0) {
    Close();
    opts_.gpu_first = true;
    FakeGpuCodec& fake = NewFake(fail_batch);
    Open(&fake);
    return fake;
  }

  std::string dir_;
  FsOptions opts_;
  FirstCallGate* gate_ = nullptr;
  std::thread holder_;
  std::vector<std::unique_ptr<FakeGpuCodec>> fakes_;  // outlive store_ and fs_
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FsGpu, WritesGoThroughGpuBatchesAndReadBackByteIdentical) {
  FakeGpuCodec& fake = NewFake();
  Open(&fake);
  // A chunk to offer as a delta base, committed first (one chunk: the CPU's).
  std::string base = Bf16Like(kChunk, 50);
  CloseFile(WriteFile("base.bin", base));
  FirstCallGate* gate = HoldCpuThread();
  gate->SetBase(BaseOf(base, store_->keys()));
  // The stream queues chunks as it goes (1 MiB layout blocks of 16 chunks);
  // the feeder takes them in batches of 4 to 8 chunks.
  std::string model = Bf16Like(48 * kChunk + 1000, 51);
  std::memset(model.data() + 10 * kChunk, 0, kChunk);  // a hole on the GPU path
  uint64_t ino = WriteFile("model.bin", model);
  ASSERT_TRUE(WaitFor([&] { return C(fs_->counters().gpu_encode_chunks) >= 8; }))
      << "GPU chunks: " << C(fs_->counters().gpu_encode_chunks);
  ReleaseCpuThread();
  CloseFile(ino);
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(C(c.cpu_encode_chunks) + C(c.gpu_encode_chunks), C(c.chunks_written));
  EXPECT_GE(C(c.gpu_encode_chunks), 8u);
  EXPECT_GE(C(c.cpu_encode_chunks), 2u);  // base.bin's chunk, and the held one
  EXPECT_LE(C(c.gpu_encode_bytes), C(c.gpu_encode_chunks) * kChunk);
  EXPECT_GE(C(c.gpu_batches), 2u);  // batches of at most 8 chunks
  EXPECT_EQ(C(c.gpu_failed_batches), 0u);
  EXPECT_GE(gate->recorded_with_base.load(), 8);  // deltas encoded on the GPU
  EXPECT_FALSE(fake.overlapped());
  // The feeder's time, by stage (FsCounters' *_ns; lmcfs-stat --json).
  EXPECT_GT(C(c.gpu_encode_call_ns), 0u);
  EXPECT_GT(C(c.gpu_feeder_prepare_ns), 0u);
  EXPECT_GT(C(c.gpu_feeder_finish_ns), 0u);
  EXPECT_GT(C(c.gpu_feeder_idle_ns), 0u);
  EXPECT_EQ(C(c.gpu_decode_call_ns), 0u);
  bool named = false;
  for (const auto& [k, v] : fs_->NamedCounters())
    if (k == "gpu_encode_call_ns") named = v == C(c.gpu_encode_call_ns);
  EXPECT_TRUE(named);
  EXPECT_EQ(ReadAll("model.bin"), model);

  // A plain file, then a fresh mount with gpu=auto: read-ahead decodes on
  // the CPU (the measured crossover: docs/BENCHMARKS.md, "GPU codec").
  gate->SetBase(std::nullopt);
  std::string plain = Bf16Like(40 * kChunk, 52);
  CloseFile(WriteFile("plain.bin", plain));
  Close();
  FakeGpuCodec& auto_fake = NewFake();
  Open(&auto_fake);
  EXPECT_EQ(ReadAll("plain.bin"), plain);
  EXPECT_EQ(C(fs_->counters().gpu_decode_chunks), 0u);
  EXPECT_EQ(auto_fake.stats().decode_chunks, 0u);
  EXPECT_EQ(C(fs_->counters().cpu_decode_chunks), 40u);
  // And with gpu=on (GPU first): read-ahead decodes batches on the GPU.
  FakeGpuCodec& fake2 = ReopenGpuFirst();
  EXPECT_EQ(ReadAll("plain.bin"), plain);
  // Deltas too: their base decoded in the same batch call before them, or
  // in the batch before that (the counters count chunks read, not the
  // bases decoded on the way).
  EXPECT_EQ(ReadAll("model.bin"), model);
  EXPECT_GE(fake2.decode_items_with_base(), 8u);
  EXPECT_EQ(ReadAll("base.bin"), base);
  EXPECT_EQ(ReadAll("held.bin"), Bf16Like(kChunk, 1));
  EXPECT_GT(C(fs_->counters().gpu_decode_chunks), 0u);
  EXPECT_LE(C(fs_->counters().gpu_decode_bytes), C(fs_->counters().gpu_decode_chunks) * kChunk);
  EXPECT_GE(fake2.stats().decode_chunks, C(fs_->counters().gpu_decode_chunks));
  EXPECT_LE(fake2.stats().decode_chunks, C(fs_->counters().gpu_decode_chunks) + 1);  // base.bin's one chunk
  EXPECT_GT(C(fs_->counters().cpu_decode_chunks), 0u);
  EXPECT_EQ(fs_->GpuState(), "fake GPU codec (CPU) (active)");
  std::string v;
  EXPECT_EQ(fs_->GetXattr(kRootIno, "user.lmcfs.gpu", &v), 0);
  EXPECT_EQ(v, "fake GPU codec (CPU) (active)");
  ExpectFsckClean();
}

// With pairing (the snapshot policy, pair=on), the fp32 masters of
// master.safetensors are stored as deltas on the bf16 chunks of
// model.safetensors; with gpu=on, reading the masters alone decodes their
// twins and then them on the GPU (Store::ReadChunks' rounds), and reading
// both files gives every byte back.
TEST_F(FsGpu, ReadAheadDecodesPairedMastersAfterTheirTwinsOnTheGpu) {
  Open(nullptr);
  InstallSnapshotPolicy(fs_.get(), DeltaOptions{});
  const size_t elems = 8 * kChunk / 4;  // 8 chunks of fp32, 4 of bf16
  std::string master(4 * elems, '\0'), twin(2 * elems, '\0');
  std::mt19937 rng(7);
  std::normal_distribution<float> w(0.0f, 0.02f);
  for (size_t i = 0; i < elems; ++i) {
    const float f = w(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    std::memcpy(master.data() + 4 * i, &u, 4);
    std::memcpy(twin.data() + 2 * i, &b, 2);
  }
  const std::string model_file = Safetensors("BF16", elems, twin);
  const std::string master_file = Safetensors("F32", elems, master);
  CloseFile(WriteFile("model.safetensors", model_file));
  CloseFile(WriteFile("master.safetensors", master_file));
  uint64_t paired = 0;
  for (const auto& [k, v] : fs_->DeltaCounters())
    if (k == "paired") paired = v;
  EXPECT_GE(paired, 6u) << "the masters were not paired with their twins";
  FakeGpuCodec& fake = ReopenGpuFirst();
  InstallSnapshotPolicy(fs_.get(), DeltaOptions{});
  EXPECT_EQ(ReadAll("master.safetensors"), master_file);
  // All but the masters under the first read (128 KiB: two chunks at
  // most), which that read decodes at once on the CPU while the rest go to
  // the GPU in the background.
  EXPECT_GE(fake.decode_items_with_base(), paired - 2);
  EXPECT_GE(C(fs_->counters().gpu_decode_chunks), paired - 2);
  EXPECT_EQ(ReadAll("model.safetensors"), model_file);
  ExpectFsckClean();
}

TEST_F(FsGpu, DeviceFailureWhileEncodingFallsBackToTheCpuAndLosesNothing) {
  FakeGpuCodec& fake = NewFake(/*fail_batch=*/1);
  Open(&fake);
  HoldCpuThread();
  std::string model = Bf16Like(48 * kChunk + 1000, 61);
  uint64_t ino = WriteFile("model.bin", model);
  ASSERT_TRUE(WaitFor([&] { return C(fs_->counters().gpu_failed_batches) == 1; }));
  ReleaseCpuThread();
  CloseFile(ino);
  // More after the failure: all on the CPU, the device is not asked again.
  std::string more = Bf16Like(32 * kChunk, 62);
  CloseFile(WriteFile("more.bin", more));
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(fake.calls(), 1u);
  EXPECT_EQ(C(c.gpu_failed_batches), 1u);
  EXPECT_GE(C(c.gpu_fallback_chunks), 4u);
  EXPECT_EQ(C(c.gpu_encode_chunks), 0u);
  EXPECT_EQ(C(c.cpu_encode_chunks), C(c.chunks_written));
  EXPECT_NE(fs_->GpuState().find("off after a device failure"), std::string::npos) << fs_->GpuState();
  // Named as lmcfs-stat sees them.
  bool found = false;
  for (const auto& [k, v] : fs_->NamedCounters())
    if (k == "gpu_failed_batches") found = v == 1;
  EXPECT_TRUE(found);
  EXPECT_EQ(ReadAll("model.bin"), model);
  EXPECT_EQ(ReadAll("more.bin"), more);
  EXPECT_EQ(C(c.gpu_decode_chunks), 0u);  // the GPU is off for reads too
  Close();
  Open(nullptr);
  EXPECT_EQ(ReadAll("model.bin"), model);
  EXPECT_EQ(ReadAll("more.bin"), more);
  ExpectFsckClean();
}

TEST_F(FsGpu, DeviceFailureWhileReadingAheadFallsBackToTheCpu) {
  Open(nullptr);
  std::string data = Bf16Like(40 * kChunk, 71);
  CloseFile(WriteFile("data.bin", data));
  FakeGpuCodec& fake = ReopenGpuFirst(/*fail_batch=*/1);
  EXPECT_EQ(ReadAll("data.bin"), data);
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(fake.calls(), 1u);
  EXPECT_EQ(C(c.gpu_failed_batches), 1u);
  EXPECT_GE(C(c.gpu_fallback_chunks), 4u);
  EXPECT_EQ(C(c.gpu_decode_chunks), 0u);
  EXPECT_EQ(C(c.cpu_decode_chunks), 40u);
  EXPECT_EQ(C(c.cpu_decode_bytes), 40 * kChunk);
  // Writes after it: the CPU only.
  std::string more = Bf16Like(16 * kChunk, 72);
  CloseFile(WriteFile("more.bin", more));
  EXPECT_EQ(fake.calls(), 1u);
  EXPECT_EQ(C(c.gpu_encode_chunks), 0u);
  EXPECT_EQ(ReadAll("more.bin"), more);
  ExpectFsckClean();
}

// gpu=on read-ahead runs its batches in the background (ReadAhead::
// StartBatch): a read returns with its own chunks (decoded at once on the
// CPU) while the batch for the chunks after it waits on the device; the
// reads that reach the batch's chunks wait for it rather than decode them
// again; each chunk is decoded once, and a batch starts again once
// gpu_min_batch_bytes of the window are neither cached nor in flight.
TEST_F(FsGpu, ReadAheadBatchesRunInTheBackgroundAndEachChunkIsDecodedOnce) {
  Open(nullptr);
  const std::string data = Bf16Like(40 * kChunk, 81);
  CloseFile(WriteFile("data.bin", data));
  FakeGpuCodec& fake = ReopenGpuFirst();
  fake.HoldDecodes();
  struct stat st;
  ASSERT_EQ(fs_->Lookup(kRootIno, "data.bin", &st), 0);
  std::string first;
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    EXPECT_EQ(fs_->Read(st.st_ino, 0, 2 * kChunk, &first), 0);
    returned = true;
  });
  const bool in_background = WaitFor([&] { return returned.load(); });
  EXPECT_TRUE(in_background) << "the first read waited for the read-ahead batch";
  EXPECT_TRUE(fake.WaitHeldDecodes(1)) << "no read-ahead batch reached the GPU";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the device busy
  fake.ReleaseDecodes();
  reader.join();
  EXPECT_EQ(first, data.substr(0, 2 * kChunk));
  EXPECT_EQ(C(fs_->counters().cpu_decode_chunks), 2u);  // the first read's own
  std::string all = first, part;
  for (uint64_t off = all.size(); off < data.size(); off += part.size()) {
    ASSERT_EQ(fs_->Read(st.st_ino, off, 128 << 10, &part), 0);
    ASSERT_FALSE(part.empty());
    all += part;
  }
  fs_->Forget(st.st_ino, 1);
  EXPECT_TRUE(all == data);
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(C(c.gpu_decode_chunks) + C(c.cpu_decode_chunks), 40u);
  EXPECT_EQ(C(c.gpu_decode_chunks), fake.stats().decode_chunks);
  EXPECT_GE(C(c.gpu_decode_chunks), 38u - 8u);  // at most the last window's tail on the CPU
  // The window (2 * gpu_min_batch_bytes = 8 chunks) is read in batches
  // of 4 or more chunks, never one batch for the file.
  EXPECT_GE(fake.calls(), 4u);
  EXPECT_LE(fake.calls(), 10u);
  EXPECT_EQ(C(c.gpu_failed_batches), 0u);
  EXPECT_FALSE(fake.overlapped());
  // The time in device calls holds the 20 ms the first one was held; the
  // batch tasks' time holds their calls.
  EXPECT_GE(C(c.gpu_decode_call_ns), 20'000'000u);
  EXPECT_GE(C(c.gpu_read_batch_ns), C(c.gpu_decode_call_ns));
  EXPECT_EQ(C(c.gpu_encode_call_ns), 0u);
}

// The GPU read window fits the cache twice over: with a cache of only 8
// chunks and batches of 4 (gpu_min_batch_bytes), a window of two batches
// would fill the cache, and each batch would evict the one before it
// while the reader still needs it (decoded again on the CPU). The window
// is capped at half the cache and the batch at half the window, so each
// chunk is decoded once.
TEST_F(FsGpu, ReadAheadBatchesFitTheCacheAndNoChunkIsDecodedTwice) {
  opts_.cache_bytes = 8 * kChunk;
  Open(nullptr);
  const std::string data = Bf16Like(40 * kChunk, 82);
  CloseFile(WriteFile("data.bin", data));
  ReopenGpuFirst();
  EXPECT_EQ(ReadAll("data.bin"), data);
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(C(c.gpu_decode_chunks) + C(c.cpu_decode_chunks), 40u)
      << "GPU " << C(c.gpu_decode_chunks) << ", CPU " << C(c.cpu_decode_chunks);
  EXPECT_GE(C(c.gpu_decode_chunks), 30u);
  EXPECT_EQ(C(c.gpu_failed_batches), 0u);
}

// Sequential readers of several files share the cache: their read-ahead
// windows divide half of it among them (ChunkCache::NoteReader), and a
// chunk a reader has read past is evicted first (ChunkCache::Demote), so
// the chunks decoded ahead are still there when their reads come: four
// readers of 32 chunks each, at once, through a cache of 16 chunks, and
// nearly every chunk is decoded once (a reader that starts before the
// others are counted reads ahead with a larger window at first, and a
// reader the scheduler starves may find its chunks evicted: 141 decodes
// once in a full `ctest -j3` on two cores; up to 25% again is allowed).
// With a window of half the cache each, and the chunks read past kept as
// the most recent, 209-311 decodes for the 128 chunks (six runs).
TEST_F(FsGpu, ConcurrentReadersShareTheCacheAndNearlyEachChunkIsDecodedOnce) {
  opts_.cache_bytes = 16 * kChunk;
  Open(nullptr);
  constexpr int kFiles = 4;
  std::vector<std::string> data;
  for (int i = 0; i < kFiles; ++i) {
    data.push_back(Bf16Like(32 * kChunk, 83 + i));
    CloseFile(WriteFile("r" + std::to_string(i) + ".bin", data.back()));
  }
  Close();
  Open(nullptr);
  std::vector<std::string> got(kFiles);
  std::vector<std::thread> readers;
  for (int i = 0; i < kFiles; ++i)
    readers.emplace_back([&, i] { got[i] = ReadAll("r" + std::to_string(i) + ".bin"); });
  for (auto& t : readers) t.join();
  for (int i = 0; i < kFiles; ++i) EXPECT_TRUE(got[i] == data[i]) << i;
  EXPECT_GE(C(fs_->counters().cpu_decode_chunks), kFiles * 32u);
  EXPECT_LE(C(fs_->counters().cpu_decode_chunks), kFiles * 32u * 5 / 4);
}

// Read-ahead on the CPU decodes the chunks after a sequential read in the
// background (ReadAhead): each chunk is decoded once, the reads that need a
// chunk being decoded wait for it, and readers of one file at once, each
// on its own thread, all get its bytes.
TEST_F(FsGpu, ReadAheadDecodesEachChunkOnceAndConcurrentReadersGetTheBytes) {
  Open(nullptr);
  std::string data = Bf16Like(48 * kChunk, 91);
  CloseFile(WriteFile("data.bin", data));
  Close();
  Open(nullptr);
  EXPECT_EQ(ReadAll("data.bin"), data);
  EXPECT_EQ(C(fs_->counters().cpu_decode_chunks), 48u);
  EXPECT_EQ(C(fs_->counters().cpu_decode_bytes), 48 * kChunk);
  Close();
  Open(nullptr);
  std::vector<std::string> got(4);
  std::vector<std::thread> readers;
  for (size_t i = 0; i < got.size(); ++i) readers.emplace_back([&, i] { got[i] = ReadAll("data.bin"); });
  for (auto& t : readers) t.join();
  for (const std::string& g : got) EXPECT_TRUE(g == data);
  EXPECT_GE(C(fs_->counters().cpu_decode_chunks), 48u);
  EXPECT_EQ(C(fs_->counters().cpu_decode_bytes) % kChunk, 0u);
  Close();  // with nothing left in flight
  Open(nullptr);
  // Closed right after a read that queued decodes ahead, which may still be
  // in flight (the sanitizer builds catch a decode outliving the cache).
  struct stat st;
  ASSERT_EQ(fs_->Lookup(kRootIno, "data.bin", &st), 0);
  std::string part;
  EXPECT_EQ(fs_->Read(st.st_ino, 0, 128 << 10, &part), 0);
  EXPECT_EQ(part, data.substr(0, 128 << 10));
  fs_->Forget(st.st_ino, 1);
  Close();
  // One read-ahead thread (every pack read waits for the decode before it)
  // and more threads than chunks in the window: the same bytes, each chunk
  // decoded once.
  for (unsigned threads : {1u, 16u}) {
    opts_.read_threads = threads;
    Open(nullptr);
    EXPECT_EQ(ReadAll("data.bin"), data) << threads << " read-ahead threads";
    EXPECT_EQ(C(fs_->counters().cpu_decode_chunks), 48u) << threads << " read-ahead threads";
    Close();
  }
  opts_.read_threads = 0;
}

// The stores of a union share one decoded-chunk cache and one read-ahead
// pool (FsOptions::shared_cache, read_pool): two filesystems over two
// stores, a file of the same name and size but other bytes in each, read
// in turns; each gets its own bytes, the cache stays within its one
// capacity, and a store that closes (its decodes ahead waited for) leaves
// the other reading. The two stores' keys differ anyway (each its own
// secret); that a tag keeps one key of two stores apart is
// ChunkCache.TagsKeepTheSameKeyOfDifferentStoresApartInOneCapacity.
TEST_F(FsGpu, StoresOfAUnionShareOneCacheAndOneReadAheadPool) {
  store::ChunkCache cache(2 << 20);
  ThreadPool pool(3);
  opts_.shared_cache = &cache;
  opts_.shared_cache_tag = 0;
  opts_.read_pool = &pool;
  Open(nullptr);
  const std::string dir_b = dir_ + "-b";
  auto sb = store::Store::Open(dir_b, {});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  FsOptions ob = opts_;
  ob.shared_cache_tag = 1;
  auto fb = Filesystem::Open(sb->get(), dir_b, ob);
  ASSERT_TRUE(fb.ok()) << fb.status().ToString();
  const std::string a = Bf16Like(24 * kChunk, 1), b = Bf16Like(24 * kChunk, 2);
  CloseFile(WriteFile("same.bin", a));
  struct stat st;
  ASSERT_EQ((*fb)->Create(kRootIno, "same.bin", 0644, {1000, 1000}, &st), 0);
  for (size_t off = 0; off < b.size(); off += 32 << 10)
    ASSERT_EQ((*fb)->Write(st.st_ino, off, b.data() + off, 32 << 10), 0);
  ASSERT_EQ((*fb)->Flush(st.st_ino), 0);
  ASSERT_EQ((*fb)->Release(st.st_ino, true), 0);
  struct stat sa, sbs;
  ASSERT_EQ(fs_->Lookup(kRootIno, "same.bin", &sa), 0);
  ASSERT_EQ((*fb)->Lookup(kRootIno, "same.bin", &sbs), 0);
  std::string got_a, got_b, part;
  for (uint64_t off = 0; off < a.size(); off += 128 << 10) {
    ASSERT_EQ(fs_->Read(sa.st_ino, off, 128 << 10, &part), 0);
    got_a += part;
    ASSERT_EQ((*fb)->Read(sbs.st_ino, off, 128 << 10, &part), 0);
    got_b += part;
  }
  EXPECT_TRUE(got_a == a) << "the first store's file";
  EXPECT_TRUE(got_b == b) << "the second store's file";
  EXPECT_LE(cache.bytes(), cache.capacity());
  (*fb)->Forget(sbs.st_ino, 1);
  EXPECT_TRUE((*fb)->Shutdown().ok());
  fb->reset();
  sb->reset();
  fs_->Forget(sa.st_ino, 1);
  EXPECT_TRUE(ReadAll("same.bin") == a) << "after the other store closed";
  Close();  // before the cache and the pool go
  opts_.shared_cache = nullptr;
  opts_.read_pool = nullptr;
  std::filesystem::remove_all(dir_b);
}

// The write pipeline's threads (encoders, committer) start with a
// filesystem's first write: a union's followers, which are never written,
// run none (about 3 threads each at 2 cores, 65 at 64).
TEST_F(FsGpu, WriteThreadsStartWithTheFirstWriteAndNeverForAReadOnlyFilesystem) {
  auto threads = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  (void)ThreadPool::Shared();  // the process's pool (decodes of a read), started on first use
  ThreadPool pool(2);
  opts_.read_pool = &pool;
  opts_.encode_threads = 3;
  Open(nullptr);
  const size_t opened = threads();
  const std::string data = Bf16Like(24 * kChunk, 7);  // past batch_limit: the committer runs
  CloseFile(WriteFile("first.bin", data));
  EXPECT_GE(threads(), opened + 3 + 1) << "3 encoders and the committer after the first write";
  EXPECT_TRUE(ReadAll("first.bin") == data);

  // A read-only filesystem over a second store holding a file.
  const std::string dir_b = dir_ + "-ro";
  {
    auto sw = store::Store::Open(dir_b, {});
    ASSERT_TRUE(sw.ok()) << sw.status().ToString();
    auto fw = Filesystem::Open(sw->get(), dir_b, opts_);
    ASSERT_TRUE(fw.ok()) << fw.status().ToString();
    struct stat st;
    ASSERT_EQ((*fw)->Create(kRootIno, "ro.bin", 0644, {1000, 1000}, &st), 0);
    ASSERT_EQ((*fw)->Write(st.st_ino, 0, data.data(), data.size()), 0);
    ASSERT_EQ((*fw)->Flush(st.st_ino), 0);
    ASSERT_EQ((*fw)->Release(st.st_ino, true), 0);
    (*fw)->Forget(st.st_ino, 1);
    EXPECT_TRUE((*fw)->Shutdown().ok());
  }
  store::StoreOptions so;
  auto sr = store::Store::Open(dir_b, so);
  ASSERT_TRUE(sr.ok()) << sr.status().ToString();
  FsOptions ro = opts_;
  ro.read_only = true;
  const size_t before = threads();
  auto fr = Filesystem::Open(sr->get(), dir_b, ro);
  ASSERT_TRUE(fr.ok()) << fr.status().ToString();
  struct stat st;
  ASSERT_EQ((*fr)->Lookup(kRootIno, "ro.bin", &st), 0);
  std::string got, part;
  for (uint64_t off = 0; off < data.size(); off += 128 << 10) {
    ASSERT_EQ((*fr)->Read(st.st_ino, off, 128 << 10, &part), 0);
    got += part;
  }
  EXPECT_TRUE(got == data);
  EXPECT_EQ(threads(), before) << "a read-only filesystem started threads of its own";
  (*fr)->Forget(st.st_ino, 1);
  EXPECT_TRUE((*fr)->Shutdown().ok());
  fr->reset();
  sr->reset();
  Close();  // before the pool goes
  opts_.read_pool = nullptr;
  std::filesystem::remove_all(dir_b);
}

TEST_F(FsGpu, WithoutAGpuEverythingRunsOnTheCpuAndTheStateSaysWhy) {
  opts_.gpu_none_reason = "gpu=off";
  Open(nullptr);
  EXPECT_EQ(fs_->GpuState(), "none (gpu=off)");
  std::string data = Bf16Like(20 * kChunk, 81);
  CloseFile(WriteFile("data.bin", data));
  EXPECT_EQ(ReadAll("data.bin"), data);
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(C(c.cpu_encode_chunks), 20u);
  EXPECT_EQ(C(c.cpu_encode_bytes), 20 * kChunk);
  EXPECT_EQ(C(c.gpu_encode_chunks) + C(c.gpu_decode_chunks) + C(c.gpu_batches), 0u);
  Close();
  opts_.gpu_none_reason = FsOptions{}.gpu_none_reason;
  Open(nullptr);
  EXPECT_EQ(fs_->GpuState(), "none (not requested)");
  EXPECT_EQ(ReadAll("data.bin"), data);
  EXPECT_EQ(C(fs_->counters().cpu_decode_chunks), 20u);
}

}  // namespace
}  // namespace lmc::fs
