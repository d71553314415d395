// fs::Filesystem driven directly (no mount): namespace, data pipeline,
// persistence across reopen, reference counts (fsck), and a randomized
// comparison against an in-memory model.
#include "lmc/fs/filesystem.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core_test_util.h"
#include "fault_env.h"
#include "file_data.h"
#include "lmc/bytes.h"
#include "lmc/codec.h"
#include "lmc/fs/delta_policy.h"
#include "lmc/fs/inspect.h"
#include "lmc/store/store.h"

namespace lmc::fs {
namespace {

// A delta policy for pipeline tests: ChooseBase blocks while the gate is
// closed (holding chunks at the encoders, like a sync point), counts calls,
// and can offer a base (a wrong-length one, to make the encoder fail).
class GatePolicy : public DeltaPolicy {
 public:
  explicit GatePolicy(bool open = true) : open_(open) {}
  void Open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Waits until at least n encoders are inside ChooseBase (or passed it).
  bool WaitCalls(int n) {
    for (int i = 0; i < 2000 && calls.load() < n; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return calls.load() >= n;
  }
  std::optional<BaseChoice> ChooseBase(const ChunkOrigin& origin, const uint8_t*, size_t n) override {
    calls++;
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return open_; });
    names.push_back(std::string(origin.file_name));
    if (bad_base) return BaseChoice{{}, store::CopyChunkBytes(std::vector<uint8_t>(n + 1).data(), n + 1)};
    if (base && (base->widened_offset || base->bytes->size() == n)) {
      offered++;
      return *base;
    }
    return std::nullopt;
  }
  void Record(const ChunkOrigin& origin, const store::ChunkKey& key, const std::optional<store::ChunkKey>& b,
              const store::ChunkBytes&, store::Batch*) override {
    std::lock_guard lk(mu_);
    recorded.push_back({std::string(origin.file_name), key, b, std::string(origin.dir_name)});
  }
  void Release(const store::ChunkKey&) override { released++; }
  void Named(uint64_t ino, std::string_view name, uint64_t parent, std::string_view dir_name,
             store::Batch*) override {
    std::lock_guard lk(mu_);
    named.push_back({ino, std::string(name), parent, std::string(dir_name)});
  }
  void Forget(uint64_t ino) override {
    std::lock_guard lk(mu_);
    forgotten.push_back(ino);
  }

  struct Rec {
    std::string name;
    store::ChunkKey key;
    std::optional<store::ChunkKey> base;
    std::string dir;  // ChunkOrigin::dir_name
  };
  std::atomic<int> calls{0};
  std::atomic<int> offered{0};   // ChooseBase calls that returned `base`
  std::atomic<int> released{0};  // bases handed back for chunks never recorded
  std::atomic<bool> bad_base{false};
  std::optional<BaseChoice> base;  // offered for chunks of its length (any, when widened)
  std::vector<std::string> names;  // guarded by mu_
  std::vector<Rec> recorded;       // guarded by mu_
  struct Naming {
    uint64_t ino = 0;
    std::string name;
    uint64_t parent = 0;
    std::string dir;
    bool operator==(const Naming&) const = default;
  };
  std::vector<Naming> named;        // guarded by mu_
  std::vector<uint64_t> forgotten;  // guarded by mu_
  std::mutex& mu() { return mu_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_;
};

class FsCore : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lmcfs_core_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    opts_.chunk_size = 64 << 10;
    opts_.dirty_limit = 1 << 20;
    opts_.batch_limit = 256 << 10;
    opts_.cache_bytes = 512 << 10;
    Reopen(false);
  }
  void TearDown() override {
    Close();
    std::filesystem::remove_all(dir_);
  }
  void Close() {
    if (gate_open_) gate_open_();  // a failed test must not leave encoders held
    gate_open_ = nullptr;
    if (fs_) {
      fs_->SetAttrListener(nullptr);  // a test's listener may be gone (a failed assertion)
      EXPECT_TRUE(fs_->Shutdown().ok());
    }
    fs_.reset();
    store_.reset();
  }
  void Reopen(bool close = true) {
    if (close) Close();
    store::StoreOptions so;
    so.env = env_;
    auto s = store::Store::Open(dir_, so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto f = Filesystem::Open(store_.get(), dir_, opts_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  uint64_t CreateFile(uint64_t parent, const std::string& name) {
    struct stat st;
    EXPECT_EQ(fs_->Create(parent, name, 0644, {1000, 1000}, &st), 0);
    return st.st_ino;
  }
  std::string ReadAll(uint64_t ino) {
    struct stat st;
    EXPECT_EQ(fs_->GetAttr(ino, &st), 0);
    std::string out;
    EXPECT_EQ(fs_->Read(ino, 0, static_cast<size_t>(st.st_size), &out), 0);
    return out;
  }
  void ExpectFsckClean() {
    store::FsckOptions fo;
    auto r = store_->Fsck(fo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string msgs;
    for (auto& m : r->Messages()) msgs += m + "\n";
    EXPECT_EQ(r->errors(), 0u) << msgs;
  }
  // Releases ino, reopens the store and the filesystem: the file reads
  // `model` and fsck finds nothing wrong.
  void ExpectSurvivesReopen(uint64_t ino, const std::string& model) {
    ASSERT_EQ(fs_->Release(ino, true), 0);
    Reopen();
    EXPECT_EQ(ReadAll(ino), model);
    ExpectFsckClean();
  }
  // Closes a store opened on a test's FaultEnv before the env goes.
  void CloseFaultEnv() {
    Close();
    env_ = nullptr;
  }
  // Installs a GatePolicy (owned by the filesystem) and returns it.
  GatePolicy* InstallGate(bool open) {
    auto p = std::make_unique<GatePolicy>(open);
    GatePolicy* raw = p.get();
    fs_->SetDeltaPolicy(std::move(p));
    gate_open_ = [raw] { raw->Open(); };
    return raw;
  }
  // Rewrites the chunks of file `ino` (whose bytes are `data`) coded as
  // fp32, as a rebase or gc may code them: another frame length than the
  // file's extents name. Returns their keys; nobody is told.
  void ChunkStoredByAnotherFileBeforeTheCommit(uint64_t batch_limit, bool zeros_after);
  // Once the encoders coded the first 3 chunks written (the model's, by
  // the file being written), a.bin stores `model` and its chunks are
  // coded as fp32, as a rebase or gc may code them (another frame
  // length); a.bin is told, as gc tells the files it re-encoded (the
  // other file's extents are not applied yet).
  void StoreRecodedOnceEncoded(const std::string& model) {
    for (int i = 0; i < 2000 && fs_->counters().cpu_encode_chunks.load() < 3; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GE(fs_->counters().cpu_encode_chunks.load(), 3u);
    const uint64_t a = CreateFile(kRootIno, "a.bin");
    ASSERT_EQ(fs_->Write(a, 0, model.data(), model.size()), 0);
    ASSERT_EQ(fs_->Flush(a), 0);
    ASSERT_EQ(fs_->Release(a, true), 0);
    ASSERT_TRUE(fs_->ChunksReencoded(RecodeAsF32(a, model)).ok());
  }
  // Writes `data` from offset 0 in writes of 1 MiB (as FUSE hands on a
  // large write), then flushes.
  void WriteInMiBs(uint64_t ino, const std::string& data) {
    constexpr size_t kWrite = 1 << 20;
    for (size_t off = 0; off < data.size(); off += kWrite)
      ASSERT_EQ(fs_->Write(ino, off, data.data() + off, std::min(kWrite, data.size() - off)), 0);
    ASSERT_EQ(fs_->Flush(ino), 0);
  }
  std::vector<store::ChunkKey> RecodeAsF32(uint64_t ino, const std::string& data) {
    return RecodeAs(ino, data, DType::kF32);
  }
  std::vector<store::ChunkKey> RecodeAs(uint64_t ino, const std::string& data, DType dtype) {
    std::vector<store::ChunkKey> keys;
    store::Batch batch;
    EXPECT_TRUE(store_
                    ->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ino),
                           [&](std::string_view k, std::string_view v) {
                             auto x = DecodeExtentRec(v);
                             if (!x || k.size() != 16) return true;
                             EncodeParams params;
                             params.dtype = dtype;
                             std::vector<uint8_t> frame(MaxEncodedSize(x->length));
                             Workspace ws;
                             auto n = EncodeChunk(
                                 reinterpret_cast<const uint8_t*>(data.data()) + LoadBE64(k.data() + 8),
                                 x->length, params, frame.data(), frame.size(), ws);
                             EXPECT_TRUE(n.ok());
                             if (!n.ok()) return false;
                             EXPECT_NE(*n, x->frame_len);
                             frame.resize(*n);
                             batch.RewriteChunk(x->key, frame);
                             keys.push_back(x->key);
                             return true;
                           })
                    .ok());
    EXPECT_TRUE(store_->Commit(batch).ok());
    return keys;
  }
  uint64_t ExtentCount(uint64_t ino) {
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; i++) prefix[i] = static_cast<char>(ino >> (56 - 8 * i));
    uint64_t n = 0;
    EXPECT_TRUE(store_
                    ->Scan(store::Cf::kExtents, prefix,
                           [&](auto, auto) {
                             n++;
                             return true;
                           })
                    .ok());
    return n;
  }

  std::string dir_;
  store::Env* env_ = nullptr;  // the store's Env (nullptr: the default)
  std::function<void()> gate_open_;
  FsOptions opts_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Filesystem> fs_;
};

using testing::Bf16Like;
using testing::Safetensors;
using testing::SafetensorsOf;

// The delta policy learns the name of each file's directory (a file role
// may keep it: Megatron's mp_rank_NN/model_optim_rng.pt), whether the file
// was created there, renamed there, or found by lookup after a reopen.
TEST_F(FsCore, DeltaPolicySeesEachFilesDirectoryName) {
  GatePolicy* gate = InstallGate(true);
  struct stat st;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "mp_rank_07", 0755, {1000, 1000}, &st), 0);
  const uint64_t dir = st.st_ino;
  const std::string data = Bf16Like(4 * (64 << 10), 3);
  // Writes `data` into ino and commits it; the directory names recorded.
  auto dirs_of = [&](uint64_t ino) {
    {
      std::lock_guard lk(gate->mu());
      gate->recorded.clear();
    }
    EXPECT_EQ(fs_->Write(ino, 0, data.data(), data.size()), 0);
    EXPECT_EQ(fs_->Flush(ino), 0);
    std::set<std::string> dirs;
    std::lock_guard lk(gate->mu());
    for (const auto& r : gate->recorded) dirs.insert(r.dir);
    return dirs;
  };
  const uint64_t a = CreateFile(dir, "model_optim_rng.pt");
  EXPECT_EQ(dirs_of(a), std::set<std::string>{"mp_rank_07"});
  const uint64_t b = CreateFile(kRootIno, "b.pt");
  EXPECT_EQ(dirs_of(b), std::set<std::string>{""});  // the root has no name
  ASSERT_EQ(fs_->Rename(kRootIno, "b.pt", dir, "b.pt", 0), 0);
  EXPECT_EQ(dirs_of(b), std::set<std::string>{"mp_rank_07"});
  ASSERT_EQ(fs_->Release(a, true), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  Reopen();
  gate = InstallGate(true);
  ASSERT_EQ(fs_->Lookup(kRootIno, "mp_rank_07", &st), 0);
  ASSERT_EQ(fs_->Lookup(dir, "model_optim_rng.pt", &st), 0);
  ASSERT_EQ(fs_->Open(st.st_ino, O_WRONLY), 0);
  EXPECT_EQ(dirs_of(st.st_ino), std::set<std::string>{"mp_rank_07"});
  ASSERT_EQ(fs_->Release(st.st_ino, true), 0);
}

// An atomic save (safetensors' save_file: .tmpXXXXXX written, then renamed
// over the target) names its file only after its data is written: the
// policy hears each new name (rename, exchange, link) after the file's data
// was finalized, so it can key the held-back lineage by it; and hears when
// an inode leaves the table.
TEST_F(FsCore, DeltaPolicyHearsEachNewNameAndEachForgottenInode) {
  GatePolicy* gate = InstallGate(true);
  struct stat st;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "checkpoint-100", 0755, {1000, 1000}, &st), 0);
  const uint64_t dir = st.st_ino;
  const std::string data = Bf16Like(4 * (64 << 10), 5);
  const uint64_t t = CreateFile(dir, ".tmpAb12Cd");
  ASSERT_EQ(fs_->Write(t, 0, data.data(), data.size()), 0);
  // No flush: the rename itself must apply every chunk before naming.
  ASSERT_EQ(fs_->Rename(dir, ".tmpAb12Cd", dir, "model.safetensors", 0), 0);
  {
    std::lock_guard lk(gate->mu());
    EXPECT_EQ(gate->recorded.size(), 4u);
    for (const auto& r : gate->recorded) EXPECT_EQ(r.name, ".tmpAb12Cd");
    ASSERT_EQ(gate->named.size(), 1u);
    EXPECT_EQ(gate->named[0], (GatePolicy::Naming{t, "model.safetensors", dir, "checkpoint-100"}));
    gate->named.clear();
  }
  const uint64_t u = CreateFile(kRootIno, "other.pt");
  ASSERT_EQ(fs_->Rename(dir, "model.safetensors", kRootIno, "other.pt", RENAME_EXCHANGE), 0);
  ASSERT_EQ(fs_->Link(t, dir, "hard.safetensors", &st), 0);
  {
    std::lock_guard lk(gate->mu());
    EXPECT_EQ(gate->named, (std::vector<GatePolicy::Naming>{{t, "other.pt", kRootIno, ""},
                                                            {u, "model.safetensors", dir, "checkpoint-100"},
                                                            {t, "hard.safetensors", dir, "checkpoint-100"}}));
    EXPECT_TRUE(gate->forgotten.empty());
  }
  // Unlinked and closed: purged, and forgotten by the policy.
  ASSERT_EQ(fs_->Unlink(dir, "model.safetensors"), 0);
  ASSERT_EQ(fs_->Release(u, true), 0);
  fs_->Forget(u, 1);
  std::lock_guard lk(gate->mu());
  EXPECT_EQ(gate->forgotten, std::vector<uint64_t>{u});
}

TEST_F(FsCore, PipelineReadsAndOverwritesSeeInFlightChunks) {
  GatePolicy* gate = InstallGate(false);
  uint64_t ino = CreateFile(kRootIno, "inflight.bin");
  // Past the layout parser's detection window, so the stream cuts chunks.
  std::string model = Bf16Like(20 * (64 << 10) + 1000, 11);
  for (size_t off = 0; off < model.size(); off += 32 << 10)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, std::min<size_t>(32 << 10, model.size() - off)), 0);
  // Writes returned while every encoder is held: the chunks are in flight.
  ASSERT_TRUE(gate->WaitCalls(1));
  EXPECT_EQ(fs_->counters().chunks_written.load(), 0u);
  EXPECT_EQ(ReadAll(ino), model);
  // Overwrite inside an in-flight chunk, and across two of them.
  std::string p1(5000, 'A'), p2(70000, 'B');
  ASSERT_EQ(fs_->Write(ino, 70000, p1.data(), p1.size()), 0);
  model.replace(70000, p1.size(), p1);
  ASSERT_EQ(fs_->Write(ino, 3 * (64 << 10) - 1000, p2.data(), p2.size()), 0);
  model.replace(3 * (64 << 10) - 1000, p2.size(), p2);
  std::string part;
  ASSERT_EQ(fs_->Read(ino, 69000, 7000, &part), 0);
  EXPECT_EQ(part, model.substr(69000, 7000));
  EXPECT_EQ(ReadAll(ino), model);
  EXPECT_EQ(fs_->counters().chunks_written.load(), 0u);
  gate->Open();
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_GE(fs_->counters().chunks_written.load(), 8u);
  EXPECT_EQ(ReadAll(ino), model);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  Reopen();
  EXPECT_EQ(ReadAll(ino), model);
  ExpectFsckClean();
}

TEST_F(FsCore, PipelineTruncateWhileEncoding) {
  GatePolicy* gate = InstallGate(false);
  uint64_t ino = CreateFile(kRootIno, "trunc.bin");
  std::string model = Bf16Like(20 * (64 << 10), 12);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_TRUE(gate->WaitCalls(1));
  // Truncate into the second chunk while the chunks are held at the
  // encoders; it waits for them, so release them from another thread.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate->Open();
  });
  struct stat a {
  }, out;
  a.st_size = 100000;
  ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
  opener.join();
  model.resize(100000);
  EXPECT_EQ(ReadAll(ino), model);
  a.st_size = 300000;  // grow again: zeros, not the old bytes
  ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
  model.resize(300000, '\0');
  EXPECT_EQ(ReadAll(ino), model);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  Reopen();
  EXPECT_EQ(ReadAll(ino), model);
  ExpectFsckClean();
}

TEST_F(FsCore, PipelineFsyncIsDurableWithoutShutdown) {
  uint64_t ino = CreateFile(kRootIno, "durable.bin");
  std::string model = Bf16Like(20 * (64 << 10) + 123, 13);
  for (size_t off = 0; off < model.size(); off += 100000)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, std::min<size_t>(100000, model.size() - off)), 0);
  std::string patch(3000, 'Z');  // and a random write
  ASSERT_EQ(fs_->Write(ino, 500000, patch.data(), patch.size()), 0);
  model.replace(500000, patch.size(), patch);
  ASSERT_EQ(fs_->Fsync(ino, false), 0);
  // Crash: no flush, no Shutdown; what fsync made durable must be there.
  fs_.reset();
  store_.reset();
  Reopen(false);
  EXPECT_EQ(ReadAll(ino), model);
  ExpectFsckClean();
}

// A crash while a file is being written sequentially, with some of its
// batches committed in the background: the file comes back as a prefix of
// what was written, never at its full size with a tail of zeros that were
// never written (the inode's size is committed no further than its
// applied chunks: FileData::Durable; found by scripts/crash_run.py).
TEST_F(FsCore, CrashMidWriteLeavesAPrefixNeverZeros) {
  uint64_t ino = CreateFile(kRootIno, "partial.bin");
  // Incompressible bytes, so that a few chunks fill a batch (batch_limit
  // 256 KiB) and batches commit as the writer goes.
  std::string model(80 * (64 << 10) + 777, '\0');
  std::mt19937_64 rng(29);
  for (auto& c : model) c = static_cast<char>(rng());
  for (size_t off = 0; off < model.size(); off += 50000) {
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, std::min<size_t>(50000, model.size() - off)), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the encoders keep up
  }
  // Crash: no flush, no Shutdown; only the background commits happened.
  fs_.reset();
  store_.reset();
  Reopen(false);
  const std::string got = ReadAll(ino);
  ASSERT_LE(got.size(), model.size());
  EXPECT_GT(got.size(), 0u) << "some batches were committed in the background";
  EXPECT_LT(got.size(), model.size()) << "the tail was still buffered at the crash";
  EXPECT_TRUE(got == model.substr(0, got.size()))
      << "the file is not a prefix of what was written (" << got.size() << " bytes back)";
  ExpectFsckClean();
}

// An atomic save as safetensors' save_file does it: a temporary file
// ftruncate'd to the full size, written, renamed over the target, closed
// last. A crash right after the rename (before the close's flush) must not
// leave the target at full size over bytes never committed.
TEST_F(FsCore, CrashAfterRenameOverLeavesTheWholeFileNeverAHole) {
  const std::string model = Bf16Like(6 * (64 << 10) + 999, 41);
  struct stat st;
  ASSERT_EQ(fs_->Create(kRootIno, ".tmpSAVE", 0600, {0, 0}, &st), 0);
  const uint64_t ino = st.st_ino;
  struct stat sz = {};
  sz.st_size = static_cast<off_t>(model.size());
  ASSERT_EQ(fs_->SetAttr(ino, sz, kSetSize, &st), 0);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Rename(kRootIno, ".tmpSAVE", kRootIno, "model.safetensors", 0), 0);
  // Crash: no close, no flush, no Shutdown.
  fs_.reset();
  store_.reset();
  Reopen(false);
  struct stat got_st;
  ASSERT_EQ(fs_->Lookup(kRootIno, "model.safetensors", &got_st), 0) << "the rename was committed";
  EXPECT_EQ(ReadAll(got_st.st_ino), model) << "the renamed file holds what was written, not a hole";
  ExpectFsckClean();
}

// The same save closed normally: the rename commits the source's buffered
// bytes first, and the inode record it writes must count them in its
// stored bytes (st_blocks), also after a remount. Before, the rename wrote
// the record as it was before that commit (0 stored bytes here) and no
// later commit wrote it again; lmcfs-fsck's stored-bytes check found it.
TEST_F(FsCore, ARenameThatCommitsTheSourceRecordsItsStoredBytes) {
  const std::string model = Bf16Like(6 * (64 << 10) + 999, 42);
  struct stat st;
  ASSERT_EQ(fs_->Create(kRootIno, ".tmpSAVE", 0600, {0, 0}, &st), 0);
  const uint64_t ino = st.st_ino;
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Rename(kRootIno, ".tmpSAVE", kRootIno, "model.safetensors", 0), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  struct stat before;
  ASSERT_EQ(fs_->GetAttr(ino, &before), 0);
  ASSERT_GT(before.st_blocks, 0);
  Reopen();
  struct stat after;
  ASSERT_EQ(fs_->GetAttr(ino, &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks);
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_TRUE(check->stale_stored.empty())
      << check->stale_stored[0].path << " records " << check->stale_stored[0].recorded << ", holds "
      << check->stale_stored[0].actual;
  EXPECT_EQ(ReadAll(ino), model);
}

// A dedup hit whose chunk every other file released before this file's
// commit is stored anew by that commit (encoded standalone, another frame
// length than the one matched): the file's extents and stored bytes take
// the new length. Found by scripts/soak_run.py with 4 writers (a safetensors
// header shared by saves of the same step).
TEST_F(FsCore, ADedupHitStoredAnewAtCommitRecordsItsNewFrameLength) {
  opts_.batch_limit = 64 << 20;  // b.bin commits only when flushed
  Reopen();
  const std::string model = Bf16Like(3 * (64 << 10), 31);
  const uint64_t a = CreateFile(kRootIno, "a.bin");
  ASSERT_EQ(fs_->Write(a, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  ASSERT_EQ(fs_->Release(a, true), 0);
  // a.bin's chunks coded as fp32 (as a rebase or gc may have coded them:
  // another frame length than a fresh standalone encoding).
  RecodeAsF32(a, model);
  // b.bin's encoders match a.bin's chunks (more than dirty_limit written
  // behind them, so that they are encoded before the flush)...
  const uint64_t b = CreateFile(kRootIno, "b.bin");
  const std::string data = model + Bf16Like(24 * (64 << 10), 32);
  ASSERT_EQ(fs_->Write(b, 0, data.data(), data.size()), 0);
  for (int i = 0; i < 2000 && fs_->counters().matched_chunks.load() < 3; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fs_->counters().matched_chunks.load(), 3u);
  // ...which are gone before b.bin commits.
  ASSERT_EQ(fs_->Unlink(kRootIno, "a.bin"), 0);
  fs_->Forget(a, 1);
  const uint64_t before = store_->Stats().encoded_at_commit;
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  ASSERT_EQ(store_->Stats().encoded_at_commit, before + 3) << "the store did not store the matches anew";
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  for (const auto& st : check->stale_stored)
    ADD_FAILURE() << st.path << " records " << st.recorded << " stored bytes, holds " << st.actual;
  EXPECT_EQ(ReadAll(b), data);
}

// The other way round: a chunk this file encoded itself (nothing in the
// store to match yet) that another file stored, coded otherwise, before
// this file's commit. The commit takes a reference on that record, so the
// file holds that record's frame length, not the one it encoded. Once
// with b.bin committed only when flushed, once with every chunk a batch
// of its own and zeros after the model (holes: no batch after the model's
// last chunk, so the flush finds nothing left to commit, only that
// batch's chunk to check).
void FsCore::ChunkStoredByAnotherFileBeforeTheCommit(uint64_t batch_limit, bool zeros_after) {
  opts_.batch_limit = batch_limit;
  Reopen();
  const std::string model = Bf16Like(3 * (64 << 10), 33);
  // b.bin's encoders code the model's chunks themselves (more than
  // dirty_limit written behind them)...
  const uint64_t b = CreateFile(kRootIno, "b.bin");
  const std::string data =
      model + (zeros_after ? std::string(24 * (64 << 10), '\0') : Bf16Like(24 * (64 << 10), 34));
  ASSERT_EQ(fs_->Write(b, 0, data.data(), data.size()), 0);
  // ...then a.bin stores the same chunks, coded otherwise.
  ASSERT_NO_FATAL_FAILURE(StoreRecodedOnceEncoded(model));
  const uint64_t dedup = store_->Stats().dedup_hits;
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  ASSERT_GE(store_->Stats().dedup_hits, dedup + 3) << "b.bin's commit did not find a.bin's chunks";
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  for (const auto& st : check->stale_stored)
    ADD_FAILURE() << st.path << " records " << st.recorded << " stored bytes, holds " << st.actual;
  EXPECT_EQ(ReadAll(b), data);
}

TEST_F(FsCore, AChunkStoredByAnotherFileBeforeTheCommitRecordsThatFrameLength) {
  ChunkStoredByAnotherFileBeforeTheCommit(64 << 20, false);
}

TEST_F(FsCore, AChunkStoredByAnotherFileBeforeItsBatchRecordsThatFrameLength) {
  ChunkStoredByAnotherFileBeforeTheCommit(1, true);
}

// A file written for long without a flush: the chunks of each batch the
// committer finished are checked against the index when the next batch
// goes to it, so the stored bytes the store records for the file are
// right from batch to batch (a crash before the close leaves none stale),
// and the chunks left to check are a few batches', not the whole file's.
TEST_F(FsCore, ALongWriteRecordsTheFrameLengthsOfItsCommittedBatchesBeforeItsFlush) {
  const std::string model = Bf16Like(3 * (64 << 10), 36);
  const uint64_t b = CreateFile(kRootIno, "b.bin");
  const std::string data = model + Bf16Like(80 * (64 << 10), 37);
  constexpr size_t kPiece = 64 << 10;
  size_t written = 0;
  auto write_to = [&](size_t end) {
    for (; written < end; written += kPiece) {
      ASSERT_EQ(fs_->Write(b, written, data.data() + written, kPiece), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the encoders go on
    }
  };
  // b.bin's encoders code the model's chunks themselves (more than
  // dirty_limit written behind them, in one write); no write since
  // applies them.
  ASSERT_EQ(fs_->Write(b, 0, data.data(), 24 * kPiece), 0);
  written = 24 * kPiece;
  // a.bin stores the same chunks, coded otherwise: b.bin's batch takes a
  // reference on those records when it is committed.
  ASSERT_NO_FATAL_FAILURE(StoreRecodedOnceEncoded(model));
  // b.bin writes on, never flushed: its batches go to the committer, the
  // first with the model's chunks...
  const uint64_t dedup = store_->Stats().dedup_hits;
  write_to(40 * kPiece);
  for (int i = 0; i < 2000 && store_->Stats().dedup_hits < dedup + 3; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(store_->Stats().dedup_hits, dedup + 3) << "b.bin's batches did not find a.bin's chunks";
  // ...and more after it was committed.
  write_to(data.size());
  std::vector<StaleStored> stale;
  for (int i = 0; i < 200; i++) {
    auto check = CheckTree(store_.get());
    ASSERT_TRUE(check.ok()) << check.status().ToString();
    stale = check->stale_stored;
    if (stale.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const auto& st : stale)
    ADD_FAILURE() << st.path << " records " << st.recorded << " stored bytes, holds " << st.actual
                  << " before its flush";
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_TRUE(check->stale_stored.empty());
  EXPECT_EQ(ReadAll(b), data);
}

// A sequential save in writes of 1 MiB, its tensor's chunks not on the
// writes' boundaries: no chunk lies across two write blocks, so every chunk
// goes to the encoders as a slice of its block, none as a copy. The first
// block fills exactly (8 writes): the head of the chunk it ends in moves to
// the next block (less than a chunk). From there on each block starts on a
// chunk boundary: a write is split where its chunk ends, and nothing more
// moves.
TEST_F(FsCore, ASequentialSaveHandsEveryChunkToTheEncodersAsASliceOfOneBlock) {
  opts_.dirty_limit = 64 << 20;  // the stream's pieces stay buffered until cut
  Reopen();
  const size_t tensor = 3 * DirtyBlock::kDirtyBlockSize + 5 * (64 << 10);
  const std::string file = Safetensors("BF16", tensor / 2, Bf16Like(tensor, 39));
  ASSERT_NE((file.size() - tensor) % opts_.chunk_size, 0u) << "the tensor must not start on a write boundary";
  const uint64_t ino = CreateFile(kRootIno, "model.safetensors");
  ASSERT_NO_FATAL_FAILURE(WriteInMiBs(ino, file));
  const FsCounters& c = fs_->counters();
  EXPECT_EQ(c.chunk_input_copies.load(), 0u);
  EXPECT_GT(c.dirty_carried_bytes.load(), 0u);
  EXPECT_LT(c.dirty_carried_bytes.load(), opts_.chunk_size);
  EXPECT_GE(c.chunks_written.load(), tensor / opts_.chunk_size);
  EXPECT_EQ(ReadAll(ino), file);
  ExpectSurvivesReopen(ino, file);
}

// The same with tensors of odd lengths, small ones between big ones, so
// that tensors end inside the bytes a full block holds and a chunk of
// small tensors waits for the next big one: the next chunk starts where
// the parser's regions end (the big tensor's start), not a whole number of
// chunks after the block's last cut (the small tensors' chunk).
TEST_F(FsCore, TensorsEndingInsideABlockLeaveNoChunkAcrossTwoBlocks) {
  opts_.dirty_limit = 64 << 20;
  Reopen();
  // Big tensors with small ones between them (packed into a chunk of
  // their own, which waits for the next big tensor).
  const std::vector<size_t> lengths = {
      (5 << 20) + 1234, 1000, (3 << 20) + 10 * 1024 + 6, (9 << 20) + 4096, 30000, 512, (2 << 20) + 70000,
      (7 << 20) + 2,    2222, (6 << 20) + 33334};
  std::vector<std::string> tensors;
  for (size_t i = 0; i < lengths.size(); i++)
    tensors.push_back(Bf16Like(lengths[i], 40 + static_cast<uint32_t>(i)));
  const std::string file = SafetensorsOf("BF16", 2, tensors);
  const uint64_t ino = CreateFile(kRootIno, "model.safetensors");
  ASSERT_NO_FATAL_FAILURE(WriteInMiBs(ino, file));
  EXPECT_EQ(fs_->counters().chunk_input_copies.load(), 0u);
  EXPECT_EQ(ReadAll(ino), file);
  ExpectSurvivesReopen(ino, file);
}

// A file whose chunks are applied but not committed yet (dedup hits on
// another file's chunks, its batch not full) when those chunks are
// re-encoded (gc, a rebase): the store's extents do not name it yet, so
// only the walk of the inodes in memory (RefreshCached) gives it the new
// frame lengths, and its st_blocks is right before its flush too.
TEST_F(FsCore, AFileWhoseChunksAreNotCommittedYetTakesTheirReencodedFrameLengths) {
  opts_.batch_limit = 64 << 20;  // b.bin commits only when flushed
  Reopen();
  constexpr size_t kChunk = 64 << 10;
  const std::string model = Bf16Like(3 * kChunk, 38);
  const uint64_t a = CreateFile(kRootIno, "a.bin");
  ASSERT_EQ(fs_->Write(a, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  ASSERT_EQ(fs_->Release(a, true), 0);
  auto blocks = [&](uint64_t ino) {
    struct stat st;
    EXPECT_EQ(fs_->GetAttr(ino, &st), 0);
    return st.st_blocks;
  };
  const blkcnt_t a_before = blocks(a);
  // b.bin's encoders match a.bin's chunks (more than dirty_limit written
  // behind them); the next write applies them. Zeros after the model are
  // holes: nothing else adds to b.bin's stored bytes.
  const uint64_t b = CreateFile(kRootIno, "b.bin");
  const std::string data = model + std::string(25 * kChunk, '\0');
  ASSERT_EQ(fs_->Write(b, 0, data.data(), data.size() - kChunk), 0);
  for (int i = 0; i < 2000 && fs_->counters().matched_chunks.load() < 3; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fs_->counters().matched_chunks.load(), 3u);
  // A match is counted just before its job is marked done, and a write
  // applies only done jobs: under TSan the last one could still be
  // finishing. The same last bytes are written again until all three are
  // applied (the content does not change).
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(fs_->Write(b, data.size() - kChunk, data.data() + data.size() - kChunk, kChunk), 0);
    if (blocks(b) == a_before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(blocks(b), a_before) << "b.bin's matches are not applied: this test needs them applied";
  ASSERT_EQ(ExtentCount(b), 0u) << "b.bin committed: this test needs its extents in memory only";
  // a.bin's chunks coded as plain bytes (a frame length far from the
  // bf16 coding's), and the files using them told.
  auto n = fs_->ChunksReencoded(RecodeAs(a, model, DType::kBytes));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const blkcnt_t a_after = blocks(a);
  ASSERT_NE(a_after, a_before) << "the re-encoding did not change a.bin's st_blocks";
  EXPECT_EQ(blocks(b), a_after) << "b.bin kept the frame lengths of before the re-encoding";
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  EXPECT_EQ(blocks(b), a_after);
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  for (const auto& st : check->stale_stored)
    ADD_FAILURE() << st.path << " records " << st.recorded << " stored bytes, holds " << st.actual;
  EXPECT_EQ(ReadAll(b), data);
}

// A copy (copy_file_range) of a file whose chunks were re-encoded and
// whose extents do not know it yet (the refresh comes after the commit):
// the copy takes each chunk's frame length from the index, not from the
// source's extent.
TEST_F(FsCore, ACloneTakesTheFrameLengthTheIndexHasNotTheSources) {
  const std::string model = Bf16Like(3 * (64 << 10), 35);
  const uint64_t a = CreateFile(kRootIno, "a.bin");
  ASSERT_EQ(fs_->Write(a, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  RecodeAsF32(a, model);  // nobody told: a.bin's extents keep the old lengths
  const uint64_t b = CreateFile(kRootIno, "b.bin");
  uint64_t copied = 0;
  ASSERT_EQ(fs_->CopyRange(a, 0, b, 0, model.size(), &copied), 0);
  ASSERT_EQ(copied, model.size());
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  bool source_stale = false;
  for (const auto& st : check->stale_stored) {
    if (st.path == "/a.bin") source_stale = true;
    if (st.path == "/b.bin")
      ADD_FAILURE() << st.path << " records " << st.recorded << " stored bytes, holds " << st.actual;
  }
  EXPECT_TRUE(source_stale) << "a.bin was told after all: this test needs its extents stale";
  EXPECT_EQ(ReadAll(b), model);
  ASSERT_EQ(fs_->Release(a, true), 0);
}

// Refreshing the stored bytes of the files using re-encoded chunks (after
// gc, ChunksReencoded) loads inodes the kernel may have forgotten: those
// are refreshed, then go out of the table again, with their extent maps;
// an inode the kernel holds stays.
TEST_F(FsCore, RefreshingAFileTheKernelForgotLeavesItOutOfMemory) {
  auto cached = [&] {
    for (const auto& [n, v] : fs_->MemoryCounters())
      if (n == "inodes_cached") return v;
    ADD_FAILURE() << "no inodes_cached";
    return uint64_t{0};
  };
  std::map<uint64_t, std::string> data;
  std::vector<store::ChunkKey> keys;
  for (const char* name : {"a.bin", "b.bin"}) {
    const uint64_t ino = CreateFile(kRootIno, name);
    data[ino] = Bf16Like(4 * (64 << 10), static_cast<int>(ino));
    ASSERT_EQ(fs_->Write(ino, 0, data[ino].data(), data[ino].size()), 0);
    ASSERT_EQ(fs_->Flush(ino), 0);
    ASSERT_EQ(fs_->Release(ino, true), 0);
  }
  const uint64_t a = data.begin()->first, b = data.rbegin()->first;
  struct stat want;
  ASSERT_EQ(fs_->GetAttr(a, &want), 0);
  fs_->Forget(a, 1);  // the kernel forgot a.bin; it still holds b.bin
  // a.bin's first extent records a frame 1000 bytes shorter than the index
  // has (as before a re-encoding grew it), and its inode the sum with it.
  uint64_t shrunk = 0;
  {
    store::Batch batch;
    ASSERT_TRUE(store_
                    ->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(a),
                           [&](std::string_view k, std::string_view v) {
                             auto x = DecodeExtentRec(v);
                             if (!x) return true;
                             const uint64_t was = x->Stored();
                             x->frame_len -= 1000;
                             shrunk = was - x->Stored();
                             batch.Put(store::Cf::kExtents, std::string(k), EncodeExtentRec(*x));
                             return false;
                           })
                    .ok());
    ASSERT_GT(shrunk, 0u);
    auto v = store_->Get(store::Cf::kInodes, InodeKey(a));
    ASSERT_TRUE(v.ok());
    auto r = DecodeInode(*v);
    r->stored -= shrunk;
    batch.Put(store::Cf::kInodes, InodeKey(a), EncodeInode(*r));
    ASSERT_TRUE(store_->Commit(batch).ok());
  }
  for (uint64_t ino : {a, b})
    ASSERT_TRUE(store_
                    ->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ino),
                           [&](std::string_view, std::string_view v) {
                             if (auto x = DecodeExtentRec(v)) keys.push_back(x->key);
                             return true;
                           })
                    .ok());
  const uint64_t before = cached();
  auto n = fs_->ChunksReencoded(keys);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);  // a.bin's first extent; b.bin's were right
  EXPECT_EQ(cached(), before) << "a.bin stayed in memory after its refresh";
  struct stat st;
  ASSERT_EQ(fs_->GetAttr(a, &st), 0);  // loaded again, from the refreshed records
  EXPECT_EQ(st.st_blocks, want.st_blocks);
  auto check = CheckTree(store_.get());
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->stale_stored.empty());
  for (const auto& [ino, d] : data) EXPECT_EQ(ReadAll(ino), d);
}

// A delta policy whose Flush does what the rebase thread may do while
// Shutdown (holding the namespace lock) waits for it: tell the filesystem,
// from its own thread, of a re-encoded chunk of a file the kernel forgot.
class RefreshOnFlushPolicy : public DeltaPolicy {
 public:
  struct Place {
    uint64_t ino, offset;
    store::ChunkKey key;
  };
  std::optional<BaseChoice> ChooseBase(const ChunkOrigin&, const uint8_t*, size_t) override {
    return std::nullopt;
  }
  void Record(const ChunkOrigin&, const store::ChunkKey&, const std::optional<store::ChunkKey>&,
              const store::ChunkBytes&, store::Batch*) override {}
  void Release(const store::ChunkKey&) override {}
  void SetRebaseListener(RebaseListener fn) override { listener_ = std::move(fn); }
  void Flush() override {
    if (!listener_ || !place) return;
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    std::thread t([fn = listener_, p = *place, done] {
      fn(p.ino, p.offset, p.key);
      done->set_value();
    });
    told = f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (told)
      t.join();
    else
      t.detach();  // deadlocked: the test fails
  }
  std::optional<Place> place;
  bool told = false;

 private:
  RebaseListener listener_;
};

TEST_F(FsCore, ShutdownWaitingForARefreshOfAForgottenFileEnds) {
  auto p = std::make_unique<RefreshOnFlushPolicy>();
  RefreshOnFlushPolicy* policy = p.get();
  fs_->SetDeltaPolicy(std::move(p));
  const uint64_t ino = CreateFile(kRootIno, "a.bin");
  const std::string model = Bf16Like(4 * (64 << 10), 9);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  fs_->Forget(ino, 1);  // out of the inode table
  ASSERT_TRUE(store_
                  ->Scan(store::Cf::kExtents, store::ExtentKeyPrefix(ino),
                         [&](std::string_view k, std::string_view v) {
                           // The first extent: key = inode (BE8) + offset (BE8).
                           if (auto x = DecodeExtentRec(v); x && k.size() == 16)
                             policy->place = RefreshOnFlushPolicy::Place{ino, LoadBE64(k.data() + 8), x->key};
                           return false;
                         })
                  .ok());
  ASSERT_TRUE(policy->place.has_value());
  EXPECT_TRUE(fs_->Shutdown().ok());
  EXPECT_TRUE(policy->told) << "the refresh waited for the namespace lock Shutdown holds";
  fs_.reset();
  Reopen();
  EXPECT_EQ(ReadAll(ino), model);
}

// The free dirty blocks kept for the next writes (a process-wide pool)
// hold no more than the write budget: a mount with write_buffer=24M keeps
// at most 3 blocks of 8 MiB, not the default's 32.
TEST_F(FsCore, TheWriteBudgetBoundsTheFreeBlockPool) {
  auto counter = [&](const std::string& name) {
    for (const auto& [n, v] : fs_->MemoryCounters())
      if (n == name) return v;
    ADD_FAILURE() << "no " << name;
    return uint64_t{0};
  };
  opts_.write_budget = 24 << 20;
  Reopen();
  EXPECT_EQ(counter("write_block_pool_capacity"), uint64_t{24} << 20);
  std::vector<uint64_t> inos;
  std::vector<std::string> models;
  for (int f = 0; f < 4; f++) {
    inos.push_back(CreateFile(kRootIno, "f" + std::to_string(f) + ".bin"));
    models.push_back(Bf16Like(20 << 20, 60 + f));
  }
  for (size_t off = 0; off < models[0].size(); off += 1 << 20)
    for (int f = 0; f < 4; f++) ASSERT_EQ(fs_->Write(inos[f], off, models[f].data() + off, 1 << 20), 0);
  for (int f = 0; f < 4; f++) {
    ASSERT_EQ(fs_->Fsync(inos[f], false), 0);
    ASSERT_EQ(fs_->Release(inos[f], true), 0);
  }
  EXPECT_LE(counter("write_block_pool_bytes"), uint64_t{24} << 20);
  for (int f = 0; f < 4; f++) EXPECT_EQ(ReadAll(inos[f]), models[f]);
  opts_.write_budget = FsOptions{}.write_budget;
  Reopen();
  EXPECT_EQ(counter("write_block_pool_capacity"), uint64_t{256} << 20);
}

// A batch that reaches batch_limit commits on the committer thread: the
// pack fdatasync runs there, never on the writer's thread, and the writer,
// held by nothing else, goes on until kMaxQueuedPerInode of its batches
// wait behind the held sync (a 2 MiB write budget makes it apply its jobs,
// and so hand off batches, as it writes).
TEST_F(FsCore, PipelineCommitRunsOffTheWritersThread) {
  store::testing::FaultEnv env;
  env_ = &env;
  opts_.batch_limit = 1 << 20;
  opts_.write_budget = 2 << 20;
  Reopen();
  uint64_t ino = CreateFile(kRootIno, "async.bin");
  std::string model = Bf16Like(32 << 20, 31);  // about 20 batches of 1 MiB of frames
  env.HoldSyncs(true);
  std::atomic<size_t> written{0};
  std::thread::id writer_id;
  std::thread writer([&] {
    writer_id = std::this_thread::get_id();
    for (size_t off = 0; off < model.size(); off += 64 << 10) {
      EXPECT_EQ(fs_->Write(ino, off, model.data() + off, 64 << 10), 0);
      written = off + (64 << 10);
    }
  });
  const bool held = env.WaitForHeldSyncsFor(1, std::chrono::seconds(20));
  EXPECT_TRUE(held) << "no batch was committed while writing " << model.size() << " bytes";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Finishing would take ~20 commits; one is held: the writer waits (for
  // its queue at the committer), and the sync was not on its thread.
  EXPECT_LT(written.load(), model.size());
  for (std::thread::id t : env.HeldThreads()) EXPECT_NE(t, writer_id);
  env.HoldSyncs(false);
  writer.join();
  // The writer's time waiting for its queued commits is counted (each of
  // its ~20 hand-offs; how much of the held sync it waited for depends on
  // how far it got meanwhile: under TSan, not always that far).
  EXPECT_GT(fs_->counters().commit_wait_ns.load(), 0u);
  ASSERT_EQ(fs_->Fsync(ino, false), 0);
  EXPECT_EQ(ReadAll(ino), model);
  ExpectSurvivesReopen(ino, model);
  CloseFaultEnv();
}

// The frames at the committer over all files stay within
// commit_queue_limit, plus a batch a writer: with the store stalled (a
// held pack sync), four writers hand off batches until each waits for its
// own oldest, not kMaxQueuedPerInode each. They finish once it moves, and
// the count returns to zero as the batches are taken back.
TEST_F(FsCore, FramesAtTheCommitterStayWithinTheirBoundOverAllWriters) {
  store::testing::FaultEnv env;
  env_ = &env;
  opts_.batch_limit = 1 << 20;
  opts_.commit_queue_limit = 1 << 20;
  opts_.write_budget = 4 << 20;
  Reopen();
  constexpr int kWriters = 4;
  std::vector<uint64_t> inos;
  std::vector<std::string> models;
  for (int w = 0; w < kWriters; w++) {
    inos.push_back(CreateFile(kRootIno, "rank" + std::to_string(w) + ".bin"));
    models.push_back(Bf16Like(24 << 20, 40 + w));  // about 16 batches each
  }
  env.HoldSyncs(true);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; w++)
    writers.emplace_back([&, w] {
      for (size_t off = 0; off < models[w].size(); off += 256 << 10)
        EXPECT_EQ(fs_->Write(inos[w], off, models[w].data() + off, 256 << 10), 0);
    });
  ASSERT_TRUE(env.WaitForHeldSyncsFor(1, std::chrono::seconds(20)));
  auto queued = [&] {
    for (const auto& [name, v] : fs_->MemoryCounters())
      if (name == "commit_queue_bytes") return v;
    ADD_FAILURE() << "no commit_queue_bytes";
    return uint64_t{0};
  };
  // A batch is 1 MiB of frames and at most one frame (of a 1 MiB chunk,
  // MaxEncodedSize at most) more; each writer has at most one at the
  // committer once over the bound.
  const uint64_t bound = kWriters * ((1u << 20) + MaxEncodedSize(1 << 20));
  uint64_t most = 0;
  for (int i = 0; i < 20; i++) {
    most = std::max(most, queued());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, bound);
  env.HoldSyncs(false);
  for (auto& t : writers) t.join();
  for (int w = 0; w < kWriters; w++) {
    ASSERT_EQ(fs_->Fsync(inos[w], false), 0);
    EXPECT_EQ(ReadAll(inos[w]), models[w]);
  }
  EXPECT_EQ(queued(), 0u);
  for (uint64_t ino : inos) ASSERT_EQ(fs_->Release(ino, true), 0);
  Reopen();
  for (int w = 0; w < kWriters; w++) EXPECT_EQ(ReadAll(inos[w]), models[w]);
  ExpectFsckClean();
  CloseFaultEnv();
}

// A batch that fails at the committer goes back, with the inode's batches
// queued behind it, in front of the pending one: the next commit stores
// them all in order, nothing is lost, and the failure is reported once, by
// the next flush.
TEST_F(FsCore, PipelineFailedBackgroundCommitIsRetriedAndReported) {
  store::testing::FaultEnv env;
  env_ = &env;
  Reopen();
  uint64_t ino = CreateFile(kRootIno, "retry.bin");
  std::string model = Bf16Like(128 * (64 << 10) + 999, 32);
  // The first pack sync, a background commit's: the batches queued behind
  // it fail with it and go back too.
  env.FailSyncs(1);
  for (size_t off = 0; off < model.size(); off += 64 << 10)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, std::min<size_t>(64 << 10, model.size() - off)), 0);
  EXPECT_EQ(fs_->Flush(ino), EIO);
  EXPECT_EQ(ReadAll(ino), model);
  EXPECT_EQ(fs_->Flush(ino), 0);
  ExpectSurvivesReopen(ino, model);
  CloseFaultEnv();
}

// Files whose data hit a full disk (issue 16, "Full disk"): once a commit
// failed with ENOSPC the next write is refused with ENOSPC (not buffered);
// truncating one to 0 and unlinking the other (open, then closed) drop
// what they could not commit instead of committing it first, so both work
// on the still-full disk, and only committed extents are released.
TEST_F(FsCore, FilesThatHitAFullDiskCanBeTruncatedAndUnlinked) {
  store::testing::FaultEnv env;
  env_ = &env;
  opts_.batch_limit = 1 << 20;
  opts_.write_budget = 2 << 20;  // jobs applied (and batches handed off) as it writes
  Reopen();
  const uint64_t a = CreateFile(kRootIno, "a.bin"), b = CreateFile(kRootIno, "b.bin");
  const std::string model = Bf16Like(32 << 20, 41);
  for (uint64_t ino : {a, b}) {
    ASSERT_EQ(fs_->Write(ino, 0, model.data(), 2 << 20), 0);
    ASSERT_EQ(fs_->Flush(ino), 0);
  }
  env.NoSpaceAfter(0);
  for (uint64_t ino : {a, b}) {
    int err = 0;
    for (size_t off = 2 << 20; off < model.size() && err == 0; off += 64 << 10)
      err = fs_->Write(ino, off, model.data() + off, 64 << 10);
    EXPECT_EQ(err, ENOSPC) << "a write after the failed commit was taken";
    EXPECT_EQ(fs_->Flush(ino), ENOSPC);
  }
  ASSERT_GT(ExtentCount(a), 0u);
  ASSERT_EQ(fs_->Open(a, O_WRONLY | O_TRUNC), 0);
  EXPECT_EQ(ExtentCount(a), 0u);
  EXPECT_EQ(ReadAll(a), "");
  ASSERT_EQ(fs_->Unlink(kRootIno, "b.bin"), 0);
  EXPECT_EQ(fs_->Flush(b), 0);  // unlinked: nothing to make durable
  ASSERT_EQ(fs_->Release(b, true), 0);
  fs_->Forget(b, 1);
  EXPECT_EQ(ExtentCount(b), 0u);
  ExpectFsckClean();
  env.NoSpaceAfter(-1);
  ASSERT_EQ(fs_->Write(a, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  EXPECT_EQ(ReadAll(a), model);
  ExpectFsckClean();
  for (int i = 0; i < 2; ++i) ASSERT_EQ(fs_->Release(a, true), 0);
  CloseFaultEnv();
}

// Written bytes land in 8 MiB blocks that chunks are sliced from: writes of
// odd sizes across block boundaries, overwrites of bytes already sliced
// into chunks at the encoders, and a hole, read back exactly.
TEST_F(FsCore, WritesAcrossDirtyBlocksReadBackExactly) {
  opts_.dirty_limit = 64 << 20;
  Reopen();
  GatePolicy* gate = InstallGate(false);  // chunks stay at the encoders, sliced
  uint64_t ino = CreateFile(kRootIno, "blocks.bin");
  std::string model = Bf16Like(20 << 20, 33);
  const size_t piece = (1 << 20) + 4097;
  for (size_t off = 0; off < model.size(); off += piece)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, std::min(piece, model.size() - off)), 0);
  std::string patch = Bf16Like(3 << 20, 34);  // over the first block boundary
  const size_t at = (8 << 20) - (1 << 20) - 5;
  ASSERT_EQ(fs_->Write(ino, at, patch.data(), patch.size()), 0);
  model.replace(at, patch.size(), patch);
  const size_t far = model.size() + (5 << 20) + 3;  // past a hole
  ASSERT_EQ(fs_->Write(ino, far, patch.data(), 1000), 0);
  model.resize(far, '\0');
  model.append(patch.data(), 1000);
  EXPECT_EQ(ReadAll(ino), model);  // dirty, at the encoders
  gate->Open();
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_EQ(ReadAll(ino), model);
  ExpectSurvivesReopen(ino, model);
}

// Each tensor of a torch.save starts a dirty block (its last chunk leaves
// the block when the tensor ends), and the chunk cache keeps the chunks as
// slices of their blocks: the blocks hold the pages of their written bytes
// only, not 8 MiB each.
TEST_F(FsCore, ChunksKeptByTheCacheHoldOnlyTheirOwnPages) {
  opts_.chunk_size = 1 << 20;
  opts_.dirty_limit = 64 << 20;
  opts_.cache_bytes = 64 << 20;
  Reopen();
  const uint64_t before = DirtyBlockBytes();
  uint64_t ino = CreateFile(kRootIno, "tensors.bin");
  const size_t piece = 3 << 20, pieces = 6;
  std::string model = Bf16Like(piece * pieces, 35);
  for (size_t off = 0; off < model.size(); off += piece)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, piece), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  // The written bytes and at most two pages a block more; 8 MiB a block
  // (48 MiB) without the pages given back.
  const uint64_t alive = DirtyBlockBytes() - before;
  EXPECT_GE(alive, model.size());
  EXPECT_LE(alive, model.size() + pieces * 8192);
  EXPECT_EQ(ReadAll(ino), model);
  ExpectSurvivesReopen(ino, model);
}

// A stream's tensors share dirty blocks: the bytes after a tensor whose
// last chunk left for the encoders go on in the rest of its block, while
// they fit. (A block sealed at each tensor's end gave its pages back, and
// the pool's next use of it faulted them in again.) The chunks the cache
// keeps are slices of the blocks, so the pieces a read returns show where
// the bytes were written.
TEST_F(FsCore, AStreamsTensorsShareTheirDirtyBlocks) {
  opts_.chunk_size = 1 << 20;
  opts_.cache_bytes = 64 << 20;
  Reopen();
  uint64_t ino = CreateFile(kRootIno, "tensors.bin");
  const size_t piece = 3 << 20, pieces = 4;
  std::string model = Bf16Like(piece * pieces, 36);
  for (size_t off = 0; off < model.size(); off += piece)
    ASSERT_EQ(fs_->Write(ino, off, model.data() + off, piece), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  std::vector<Filesystem::ReadPiece> got;
  ASSERT_EQ(fs_->ReadPieces(ino, 0, model.size(), &got), 0);
  ASSERT_EQ(got.size(), model.size() >> 20);  // a chunk each, from the cache
  std::string back;
  for (const auto& p : got) {
    ASSERT_NE(p.data, nullptr);
    ASSERT_EQ(p.size, size_t{1} << 20);
    back.append(reinterpret_cast<const char*>(p.data), p.size);
  }
  EXPECT_EQ(back, model);
  auto follows = [&](size_t chunk) { return got[chunk].data == got[chunk - 1].data + (1 << 20); };
  EXPECT_TRUE(follows(1) && follows(2));  // within a write
  EXPECT_TRUE(follows(3));                // the second tensor after the first, in its block
  EXPECT_FALSE(follows(6));               // the third does not fit the 2 MiB left: a new block
  EXPECT_TRUE(follows(9));                // the fourth after it
  ExpectSurvivesReopen(ino, model);
}

TEST_F(FsCore, PipelineBackpressureBlocksWritersAtTheBudget) {
  opts_.write_budget = 64 << 10;  // one chunk's input
  Reopen();
  GatePolicy* gate = InstallGate(false);
  uint64_t ino = CreateFile(kRootIno, "budget.bin");
  std::string model = Bf16Like(16 * (64 << 10), 14);
  std::atomic<bool> finished{false};
  std::thread writer([&] {
    for (size_t off = 0; off < model.size(); off += 64 << 10)
      EXPECT_EQ(fs_->Write(ino, off, model.data() + off, 64 << 10), 0);
    finished = true;
  });
  ASSERT_TRUE(gate->WaitCalls(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The writer waits for its oldest chunk, which the gate holds.
  EXPECT_FALSE(finished.load());
  gate->Open();
  writer.join();
  EXPECT_TRUE(finished.load());
  // Counted as the writer's time waiting for the write budget (lmcfs-stat).
  EXPECT_GE(fs_->counters().write_budget_wait_ns.load(), 200'000'000u);
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_EQ(ReadAll(ino), model);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  Reopen();
  EXPECT_EQ(ReadAll(ino), model);
}

TEST_F(FsCore, PipelineEncoderErrorSurfacesOnFlushAndKeepsBytes) {
  GatePolicy* gate = InstallGate(true);
  gate->bad_base = true;  // every encode fails: a base of the wrong length
  uint64_t ino = CreateFile(kRootIno, "err.bin");
  std::string model = Bf16Like(4 * (64 << 10) + 77, 15);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  EXPECT_EQ(fs_->Flush(ino), EIO);
  EXPECT_GE(fs_->counters().eio.load(), 1u);
  // Nothing lost, nothing altered: the bytes are still readable...
  EXPECT_EQ(ReadAll(ino), model);
  EXPECT_EQ(fs_->Flush(ino), EIO);  // ...and still not stored
  // Every failed encode handed its base back (a real policy unpins it).
  EXPECT_GE(gate->released.load(), 2);
  EXPECT_EQ(gate->released.load(), gate->calls.load());
  // Once encoding works again, the next flush stores them.
  gate->bad_base = false;
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_EQ(ReadAll(ino), model);
  ExpectSurvivesReopen(ino, model);
}

TEST_F(FsCore, PipelineChunkDroppedAtTheEncoderReleasesItsBase) {
  GatePolicy* gate = InstallGate(false);
  std::string v1 = Bf16Like(64 << 10, 21);
  gate->base = BaseChoice{store_->keys().Of(reinterpret_cast<const uint8_t*>(v1.data()), v1.size()),
                          store::CopyChunkBytes(reinterpret_cast<const uint8_t*>(v1.data()), v1.size())};
  uint64_t ino = CreateFile(kRootIno, "dropped.bin");
  // Past the layout parser's detection window, so the stream cuts chunks
  // (64 KiB each: the base's length) and the encoders hold them.
  std::string model = Bf16Like(20 * (64 << 10) + 1000, 22);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_TRUE(gate->WaitCalls(1));
  // Unlinked and closed while its chunk is still being encoded: the purge
  // drops the job, and the encoder hands the base back when it finishes.
  ASSERT_EQ(fs_->Unlink(kRootIno, "dropped.bin"), 0);
  fs_->Forget(ino, 1);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_EQ(gate->released.load(), 0);
  gate->Open();
  // Every chunk the purge dropped passes the gate, gets the base, and hands
  // it back; none is recorded.
  int stable = 0;
  for (int i = 0; i < 5000 && stable < 200; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stable = gate->released.load() == gate->offered.load() ? stable + 1 : 0;
  }
  EXPECT_GE(gate->offered.load(), 1);
  EXPECT_EQ(gate->released.load(), gate->offered.load());
  {
    std::lock_guard lk(gate->mu());
    EXPECT_TRUE(gate->recorded.empty());
  }
  ExpectFsckClean();
}

// A paired chunk's base pinned ahead (BaseChoice::pending) that never
// comes (here: a key nothing adds): the inode encodes the chunk standalone
// when it applies it, hands the base back, and nothing fails.
TEST_F(FsCore, PairedChunkWhoseBasePinnedAheadIsGoneIsStoredStandalone) {
  GatePolicy* gate = InstallGate(true);
  constexpr size_t kChunk = 64 << 10;
  std::string model(4 * kChunk, '\0');
  std::mt19937 rng(5);
  std::normal_distribution<float> w(0.0f, 0.02f);
  for (size_t i = 0; i < model.size(); i += 4) {
    const float f = w(rng);
    std::memcpy(model.data() + i, &f, 4);
  }
  std::vector<uint8_t> bf16(kChunk / 2);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint8_t>(rng());
  BaseChoice b{store::ChunkKey::Of(bf16.data(), bf16.size()),
               store::CopyChunkBytes(bf16.data(), bf16.size())};
  b.widened_offset = 0;
  b.pending = true;
  gate->base = b;
  uint64_t ino = CreateFile(kRootIno, "master.bin");
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_GE(gate->offered.load(), 1);
  EXPECT_EQ(gate->released.load(), gate->offered.load());
  {
    std::lock_guard lk(gate->mu());
    for (const auto& r : gate->recorded) EXPECT_FALSE(r.base.has_value()) << r.name;
  }
  EXPECT_EQ(ReadAll(ino), model);
  ExpectSurvivesReopen(ino, model);
  ExpectFsckClean();
}

TEST_F(FsCore, PipelineDeltaSeamPassesBaseAndName) {
  GatePolicy* gate = InstallGate(true);
  uint64_t a = CreateFile(kRootIno, "v1.bin");
  std::string v1 = Bf16Like(64 << 10, 16);
  ASSERT_EQ(fs_->Write(a, 0, v1.data(), v1.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  ASSERT_EQ(fs_->Release(a, true), 0);
  // v2 differs from v1 in a few bytes; offer v1's chunk as its base.
  std::string v2 = v1;
  for (size_t i = 0; i < v2.size(); i += 4096) v2[i] ^= 1;
  gate->base = BaseChoice{store_->keys().Of(reinterpret_cast<const uint8_t*>(v1.data()), v1.size()),
                          store::CopyChunkBytes(reinterpret_cast<const uint8_t*>(v1.data()), v1.size())};
  uint64_t b = CreateFile(kRootIno, "tmp.bin");
  ASSERT_EQ(fs_->Rename(kRootIno, "tmp.bin", kRootIno, "v2.bin", 0), 0);
  ASSERT_EQ(fs_->Write(b, 0, v2.data(), v2.size()), 0);
  ASSERT_EQ(fs_->Flush(b), 0);
  ASSERT_EQ(fs_->Release(b, true), 0);
  ASSERT_EQ(gate->recorded.size(), 2u);
  EXPECT_EQ(gate->recorded[0].name, "v1.bin");
  EXPECT_FALSE(gate->recorded[0].base.has_value());
  EXPECT_EQ(gate->recorded[1].name, "v2.bin");  // the name after the rename
  ASSERT_TRUE(gate->recorded[1].base.has_value());
  EXPECT_EQ(*gate->recorded[1].base, gate->base->key);
  Reopen();
  EXPECT_EQ(ReadAll(a), v1);
  EXPECT_EQ(ReadAll(b), v2);  // decoded against its base
  ExpectFsckClean();
}

// statfs's inode figures are what df -i needs: used (f_files - f_ffree)
// is the number of inodes, free the rest of a 2^32 capacity.
TEST_F(FsCore, StatFsCountsInodes) {
  auto used = [&] {
    struct statvfs v;
    EXPECT_EQ(fs_->StatFs(&v), 0);
    EXPECT_EQ(v.f_favail, v.f_ffree);
    EXPECT_GE(v.f_files, v.f_ffree);
    return v.f_files - v.f_ffree;
  };
  EXPECT_EQ(used(), 1u);  // the root
  struct stat st;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "d", 0755, {1000, 1000}, &st), 0);
  std::vector<uint64_t> inos;
  for (int i = 0; i < 5; i++) inos.push_back(CreateFile(st.st_ino, "f" + std::to_string(i)));
  for (uint64_t ino : inos) ASSERT_EQ(fs_->Release(ino, true), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the once-a-second recount
  EXPECT_EQ(used(), 7u);
  ASSERT_EQ(fs_->Unlink(st.st_ino, "f0"), 0);
  fs_->Forget(inos[0], 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(used(), 6u);
  Reopen();
  EXPECT_EQ(used(), 6u);
}

// fallocate with ext4's semantics: mode 0 extends (zeros, stored as
// nothing), KEEP_SIZE changes nothing, PUNCH_HOLE makes a hole inside the
// file (chunks cut across), ZERO_RANGE does too and may extend; the rest is
// EOPNOTSUPP. Every state reads back exactly, also after a reopen.
TEST_F(FsCore, FallocateModes) {
  uint64_t ino = CreateFile(kRootIno, "f.bin");
  std::string want = Bf16Like(3 * (64 << 10) + 500, 31);
  ASSERT_EQ(fs_->Write(ino, 0, want.data(), want.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  // A hole across a chunk boundary, then one in the bytes not yet flushed.
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 50000, 40000), 0);
  std::fill(want.begin() + 50000, want.begin() + 90000, '\0');
  EXPECT_EQ(ReadAll(ino), want);
  std::string more = Bf16Like(10000, 32);
  ASSERT_EQ(fs_->Write(ino, want.size(), more.data(), more.size()), 0);
  want += more;
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, want.size() - 6000, 100000), 0);
  std::fill(want.end() - 6000, want.end(), '\0');  // up to the end of the file, size kept
  EXPECT_EQ(ReadAll(ino), want);
  // Mode 0 extends; KEEP_SIZE past the end changes nothing.
  ASSERT_EQ(fs_->Fallocate(ino, 0, want.size() - 10, 70000), 0);
  want.resize(want.size() - 10 + 70000, '\0');
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_KEEP_SIZE, 0, want.size() + (1 << 20)), 0);
  EXPECT_EQ(ReadAll(ino), want);
  // ZERO_RANGE inside and past the end.
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_ZERO_RANGE, 1000, 2000), 0);
  std::fill(want.begin() + 1000, want.begin() + 3000, '\0');
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_ZERO_RANGE, want.size() - 100, 300), 0);
  std::fill(want.end() - 100, want.end(), '\0');
  want.resize(want.size() + 200, '\0');
  EXPECT_EQ(ReadAll(ino), want);
  // What fallocate(2) refuses.
  EXPECT_EQ(fs_->Fallocate(ino, FALLOC_FL_PUNCH_HOLE, 0, 10), EOPNOTSUPP);
  EXPECT_EQ(fs_->Fallocate(ino, FALLOC_FL_COLLAPSE_RANGE, 0, 4096), EOPNOTSUPP);
  EXPECT_EQ(fs_->Fallocate(ino, 0, 0, 0), EINVAL);
  EXPECT_EQ(fs_->Fallocate(kRootIno, 0, 0, 10), EISDIR);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  ExpectSurvivesReopen(ino, want);
  ExpectFsckClean();
}

// Seeks every boundary of `ino` from 0 with SEEK_DATA and SEEK_HOLE, as cp
// and tar do: the ranges [begin, end) of data it finds; every byte between
// them must read as zero.
std::vector<std::pair<uint64_t, uint64_t>> SeekMap(Filesystem& fs, uint64_t ino) {
  struct stat st;
  EXPECT_EQ(fs.GetAttr(ino, &st), 0);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string bytes;
  EXPECT_EQ(fs.Read(ino, 0, size, &bytes), 0);
  std::vector<std::pair<uint64_t, uint64_t>> data;
  uint64_t pos = 0;
  while (pos < size) {
    uint64_t d = 0, h = 0;
    const int e = fs.Seek(ino, pos, SEEK_DATA, &d);
    if (e == ENXIO) {
      d = size;
    } else {
      EXPECT_EQ(e, 0);
      EXPECT_GE(d, pos);
    }
    for (uint64_t i = pos; i < d && i < size; ++i)
      if (bytes[i]) {
        ADD_FAILURE() << "byte " << i << " reads " << int(bytes[i]) << " inside a hole";
        break;
      }
    if (d >= size) break;
    EXPECT_EQ(fs.Seek(ino, d, SEEK_HOLE, &h), 0);
    EXPECT_GT(h, d);
    EXPECT_LE(h, size);
    data.emplace_back(d, h);
    pos = h;
  }
  return data;
}

// SEEK_DATA and SEEK_HOLE: holes are what is stored as nothing (never
// written, punched, all-zero chunks, the size extended); bytes written but
// not yet stored, and chunks at the encoders, are data; while a handle
// that may write is open the whole file is data, since pages a writer
// dirtied through a shared mapping are the kernel's until written back.
TEST_F(FsCore, SeekDataAndHoleFindWhatIsStoredAsNothing) {
  constexpr uint64_t K = 1024, C = 64 * K;  // C: the chunk size
  uint64_t ino = CreateFile(kRootIno, "sparse.bin");
  const std::string a = Bf16Like(2 * C, 41), b = Bf16Like(C, 42), c = Bf16Like(16 * K, 43);
  const std::string zeros(C, '\0');
  ASSERT_EQ(fs_->Write(ino, 0, a.data(), a.size()), 0);
  ASSERT_EQ(fs_->Write(ino, 4 * C, b.data(), b.size()), 0);  // [2C, 4C) never written
  ASSERT_EQ(fs_->Write(ino, 5 * C, zeros.data(), zeros.size()), 0);
  ASSERT_EQ(fs_->Write(ino, 6 * C, c.data(), c.size()), 0);
  ASSERT_EQ(fs_->Fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 16 * K, 32 * K), 0);
  struct stat in {
  }, st;
  in.st_size = static_cast<off_t>(10 * C);
  ASSERT_EQ(fs_->SetAttr(ino, in, kSetSize, &st), 0);
  uint64_t pos = 0;
  // The writer's handle is open: all data, the end the only hole.
  EXPECT_EQ(fs_->Seek(ino, 20 * K, SEEK_DATA, &pos), 0);
  EXPECT_EQ(pos, 20 * K);
  EXPECT_EQ(fs_->Seek(ino, 0, SEEK_HOLE, &pos), 0);
  EXPECT_EQ(pos, 10 * C);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);

  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {0, 16 * K}, {48 * K, 2 * C}, {4 * C, 5 * C}, {6 * C, 6 * C + 16 * K}};
  EXPECT_EQ(SeekMap(*fs_, ino), want);
  EXPECT_EQ(fs_->Seek(ino, 6 * C + 16 * K, SEEK_DATA, &pos), ENXIO);
  EXPECT_EQ(fs_->Seek(ino, 10 * C - 1, SEEK_HOLE, &pos), 0);
  EXPECT_EQ(pos, 10 * C - 1);
  EXPECT_EQ(fs_->Seek(ino, 10 * C, SEEK_HOLE, &pos), ENXIO);
  EXPECT_EQ(fs_->Seek(ino, 10 * C, SEEK_DATA, &pos), ENXIO);
  EXPECT_EQ(fs_->Seek(ino, 0, SEEK_END, &pos), EINVAL);
  EXPECT_EQ(fs_->Seek(kRootIno, 0, SEEK_DATA, &pos), EISDIR);
  // A reader's handle changes nothing; the same map from the store.
  ASSERT_EQ(fs_->Open(ino, O_RDONLY), 0);
  EXPECT_EQ(SeekMap(*fs_, ino), want);
  ASSERT_EQ(fs_->Release(ino, false), 0);
  Reopen();
  EXPECT_EQ(SeekMap(*fs_, ino), want);

  // Bytes written but not stored: some still buffered, the rest at the
  // encoders (held there), both data.
  GatePolicy* gate = InstallGate(false);
  const std::string d = Bf16Like(20 * C + 1000, 44);
  uint64_t f = CreateFile(kRootIno, "pending.bin");
  ASSERT_EQ(fs_->Release(f, true), 0);
  for (uint64_t off = 0; off < d.size(); off += 32 * K)
    ASSERT_EQ(fs_->Write(f, 3 * C + off, d.data() + off, std::min<size_t>(32 * K, d.size() - off)), 0);
  ASSERT_TRUE(gate->WaitCalls(1));
  EXPECT_EQ(fs_->counters().chunks_written.load(), 0u);
  const std::vector<std::pair<uint64_t, uint64_t>> pending = {{3 * C, 3 * C + d.size()}};
  EXPECT_EQ(SeekMap(*fs_, f), pending);
  gate->Open();
  ASSERT_EQ(fs_->Flush(f), 0);
  EXPECT_GE(fs_->counters().chunks_written.load(), 20u);
  EXPECT_EQ(SeekMap(*fs_, f), pending);
  ExpectFsckClean();
}

// The attribute listener (FsOps::SetAttrListener; the mount drops the
// kernel's cached attributes on each call) hears of what changed a stat
// of the file without the call that changed it being one the kernel
// drops its copy after (writes, truncates): the flush that stores the
// rest, an fsync, a copy's source committed, a release. Calls that change
// nothing tell nothing.
TEST_F(FsCore, AttrListenerHearsOfWhatTheKernelCannotSee) {
  testing::AttrNotices notices;
  ASSERT_TRUE(fs_->SetAttrListener(notices.Listener()));
  auto take = [&] { return notices.Take(); };
  auto blocks = [&](uint64_t ino) {
    struct stat st;
    EXPECT_EQ(fs_->GetAttr(ino, &st), 0);
    return st.st_blocks;
  };
  const uint64_t ino = CreateFile(kRootIno, "a.bin");
  const std::string a = Bf16Like(1 << 20, 51);
  ASSERT_EQ(fs_->Write(ino, 0, a.data(), a.size()), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{});  // the kernel drops its copy after a write itself
  const blkcnt_t written = blocks(ino);
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{ino});
  EXPECT_GT(blocks(ino), written);
  ASSERT_EQ(fs_->Flush(ino), 0);  // nothing left to store
  std::string out;
  ASSERT_EQ(fs_->Read(ino, 0, 4096, &out), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{});
  // Written again, then stored by an fsync, and by a copy's source.
  ASSERT_EQ(fs_->Write(ino, 1 << 20, a.data(), a.size()), 0);
  ASSERT_EQ(fs_->Fsync(ino, false), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{ino});
  ASSERT_EQ(fs_->Write(ino, 2 << 20, a.data(), a.size()), 0);
  const uint64_t dst = CreateFile(kRootIno, "b.bin");
  uint64_t copied = 0;
  ASSERT_EQ(fs_->CopyRange(ino, 0, dst, 0, 3 << 20, &copied), 0);
  EXPECT_EQ(copied, uint64_t{3} << 20);
  EXPECT_EQ(take(), std::vector<uint64_t>{ino});  // not dst: the kernel drops its copy itself
  // The last release of a writer whose bytes were never flushed.
  ASSERT_EQ(fs_->Write(ino, 3 << 20, a.data(), a.size()), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{ino});
  ASSERT_EQ(fs_->Release(dst, true), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{});
  // Nobody listening: the same calls, nobody told.
  ASSERT_TRUE(fs_->SetAttrListener(nullptr));
  ASSERT_EQ(fs_->Open(ino, O_WRONLY), 0);
  ASSERT_EQ(fs_->Write(ino, 4 << 20, a.data(), a.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_EQ(take(), std::vector<uint64_t>{});
}

TEST_F(FsCore, CreateWriteReadPersist) {
  uint64_t ino = CreateFile(kRootIno, "a.bin");
  std::string data = Bf16Like(1 << 20, 1);
  for (size_t off = 0; off < data.size(); off += 128 << 10)
    ASSERT_EQ(fs_->Write(ino, off, data.data() + off, 128 << 10), 0);
  EXPECT_EQ(ReadAll(ino), data);  // before flush: dirty + pending
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_EQ(ReadAll(ino), data);
  struct stat st;
  ASSERT_EQ(fs_->GetAttr(ino, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_LT(st.st_blocks * 512, static_cast<blkcnt_t>(data.size()));  // compressed
  EXPECT_EQ(st.st_uid, 1000u);
  Reopen();
  struct stat st2;
  ASSERT_EQ(fs_->Lookup(kRootIno, "a.bin", &st2), 0);
  EXPECT_EQ(st2.st_ino, st.st_ino);  // persistent inode numbers
  EXPECT_EQ(st2.st_blocks, st.st_blocks);
  EXPECT_EQ(ReadAll(ino), data);
  ExpectFsckClean();
}

// A new store keys chunks by XXH3 under its own secret: copies of a file
// share its chunks only after their bytes compared equal (the store's
// dedup_verified), before and after a remount; a chunk the store holds
// already is compared and not encoded (matched_chunks).
TEST_F(FsCore, CopiesShareChunksAfterTheirBytesCompare) {
  ASSERT_EQ(store_->keys().hash(), store::KeyScheme::Hash::kXxh3);
  const std::string data = Bf16Like(3 << 20, 7);
  auto write = [&](const std::string& name) {
    uint64_t ino = CreateFile(kRootIno, name);
    EXPECT_EQ(fs_->Write(ino, 0, data.data(), data.size()), 0);
    EXPECT_EQ(fs_->Fsync(ino, false), 0);
    EXPECT_EQ(fs_->Release(ino, true), 0);
    return ino;
  };
  const uint64_t a = write("a.bin");
  const store::StoreStats before = store_->Stats();
  const uint64_t encoded = fs_->counters().cpu_encode_chunks.load();
  EXPECT_EQ(fs_->counters().matched_chunks.load(), 0u);
  const uint64_t b = write("b.bin");
  const store::StoreStats after = store_->Stats();
  EXPECT_EQ(fs_->counters().cpu_encode_chunks.load(), encoded);  // b's chunks: all a's
  EXPECT_GT(fs_->counters().matched_chunks.load(), 0u);
  EXPECT_EQ(fs_->counters().matched_bytes.load(), data.size());
  EXPECT_GT(after.dedup_hits, before.dedup_hits);
  EXPECT_EQ(after.dedup_verified - before.dedup_verified, after.dedup_hits - before.dedup_hits);
  EXPECT_EQ(after.chunks_stored, before.chunks_stored);  // nothing new stored
  struct stat sa, sb;
  ASSERT_EQ(fs_->GetAttr(a, &sa), 0);
  ASSERT_EQ(fs_->GetAttr(b, &sb), 0);
  EXPECT_EQ(sb.st_blocks, sa.st_blocks);  // charged the stored frames, as any dedup hit
  Reopen();
  const uint64_t c = write("c.bin");
  EXPECT_EQ(ReadAll(a), data);
  EXPECT_EQ(ReadAll(b), data);
  EXPECT_EQ(ReadAll(c), data);
  EXPECT_GT(store_->Stats().dedup_verified, 0u);
  ExpectFsckClean();
}

TEST_F(FsCore, OverwritesTruncateAndHoles) {
  uint64_t ino = CreateFile(kRootIno, "f");
  std::string model = Bf16Like(300000, 2);
  ASSERT_EQ(fs_->Write(ino, 0, model.data(), model.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  // Patch inside committed chunks (zip writers patch headers).
  std::string patch(1000, 'P');
  ASSERT_EQ(fs_->Write(ino, 65000, patch.data(), patch.size()), 0);
  model.replace(65000, 1000, patch);
  EXPECT_EQ(ReadAll(ino), model);
  ASSERT_EQ(fs_->Flush(ino), 0);
  EXPECT_EQ(ReadAll(ino), model);
  // Shrink into the middle of a chunk, then grow: the gap reads zeros.
  struct stat a {
  }, out;
  a.st_size = 100001;
  ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
  model.resize(100001);
  a.st_size = 500000;
  ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
  model.resize(500000, '\0');
  EXPECT_EQ(ReadAll(ino), model);
  // A write far beyond the end leaves a hole that stores nothing.
  ASSERT_EQ(fs_->Write(ino, 10 << 20, "xyz", 3), 0);
  model.resize(10 << 20, '\0');
  model += "xyz";
  ASSERT_EQ(fs_->Fsync(ino, false), 0);
  EXPECT_EQ(ReadAll(ino), model);
  ASSERT_EQ(fs_->GetAttr(ino, &out), 0);
  EXPECT_LT(out.st_blocks * 512, 1 << 20);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  Reopen();
  EXPECT_EQ(ReadAll(ino), model);
  ExpectFsckClean();
}

TEST_F(FsCore, UnlinkWhileOpenKeepsDataUntilRelease) {
  uint64_t ino = CreateFile(kRootIno, "victim");
  std::string data = Bf16Like(200000, 3);
  ASSERT_EQ(fs_->Write(ino, 0, data.data(), data.size()), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Unlink(kRootIno, "victim"), 0);
  struct stat st;
  EXPECT_EQ(fs_->Lookup(kRootIno, "victim", &st), ENOENT);
  EXPECT_EQ(ReadAll(ino), data);
  ASSERT_EQ(fs_->Release(ino, true), 0);
  EXPECT_GT(ExtentCount(ino), 0u);  // the kernel still holds a lookup
  fs_->Forget(ino, 1);
  EXPECT_EQ(ExtentCount(ino), 0u);
  ExpectFsckClean();
}

TEST_F(FsCore, OrphanPurgedAtNextOpen) {
  uint64_t ino = CreateFile(kRootIno, "o");
  ASSERT_EQ(fs_->Write(ino, 0, "hello", 5), 0);
  ASSERT_EQ(fs_->Flush(ino), 0);
  ASSERT_EQ(fs_->Unlink(kRootIno, "o"), 0);
  // Simulate a crash: drop the Filesystem without Shutdown.
  fs_.reset();
  store_.reset();
  Reopen(false);
  EXPECT_EQ(ExtentCount(ino), 0u);
  ExpectFsckClean();
}

TEST_F(FsCore, RenameSemantics) {
  uint64_t a = CreateFile(kRootIno, "a");
  uint64_t b = CreateFile(kRootIno, "b");
  ASSERT_EQ(fs_->Write(a, 0, "AAAA", 4), 0);
  ASSERT_EQ(fs_->Write(b, 0, "BB", 2), 0);
  for (uint64_t i : {a, b}) {
    ASSERT_EQ(fs_->Flush(i), 0);
    ASSERT_EQ(fs_->Release(i, true), 0);
  }
  EXPECT_EQ(fs_->Rename(kRootIno, "a", kRootIno, "b", RENAME_NOREPLACE), EEXIST);
  ASSERT_EQ(fs_->Rename(kRootIno, "a", kRootIno, "b", RENAME_EXCHANGE), 0);
  struct stat st;
  ASSERT_EQ(fs_->Lookup(kRootIno, "b", &st), 0);
  EXPECT_EQ(st.st_ino, a);
  ASSERT_EQ(fs_->Rename(kRootIno, "b", kRootIno, "a", 0), 0);  // over the existing b inode
  ASSERT_EQ(fs_->Lookup(kRootIno, "a", &st), 0);
  EXPECT_EQ(st.st_ino, a);
  EXPECT_EQ(ReadAll(a), "AAAA");
  EXPECT_EQ(fs_->Lookup(kRootIno, "b", &st), ENOENT);
  // Directories: across parents, non-empty targets.
  struct stat d1, d2;
  ASSERT_EQ(fs_->Mkdir(kRootIno, "d1", 0755, {}, &d1), 0);
  ASSERT_EQ(fs_->Mkdir(kRootIno, "d2", 0755, {}, &d2), 0);
  ASSERT_EQ(fs_->Rename(kRootIno, "a", d1.st_ino, "a", 0), 0);
  EXPECT_EQ(fs_->Rename(kRootIno, "d2", kRootIno, "d1", 0), ENOTEMPTY);
  EXPECT_EQ(fs_->Rmdir(kRootIno, "d1"), ENOTEMPTY);
  ASSERT_EQ(fs_->Rename(kRootIno, "d1", d2.st_ino, "sub", 0), 0);
  ASSERT_EQ(fs_->GetAttr(d2.st_ino, &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);
  std::vector<DirEntry> ents;
  ASSERT_EQ(fs_->ReadDir(d2.st_ino, &ents), 0);
  ASSERT_EQ(ents.size(), 3u);
  EXPECT_EQ(ents[2].name, "sub");
  Reopen();
  ASSERT_EQ(fs_->Lookup(kRootIno, "d2", &st), 0);
  ASSERT_EQ(fs_->Lookup(st.st_ino, "sub", &st), 0);
  ASSERT_EQ(fs_->Lookup(st.st_ino, "a", &st), 0);
  EXPECT_EQ(ReadAll(st.st_ino), "AAAA");
  ExpectFsckClean();
}

TEST_F(FsCore, LinksSymlinksAttrs) {
  uint64_t a = CreateFile(kRootIno, "a");
  ASSERT_EQ(fs_->Release(a, true), 0);
  struct stat st;
  ASSERT_EQ(fs_->Link(a, kRootIno, "hard", &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(fs_->Symlink("a", kRootIno, "sym", {}, &st), 0);
  std::string t;
  ASSERT_EQ(fs_->Readlink(st.st_ino, &t), 0);
  EXPECT_EQ(t, "a");
  struct stat in {};
  in.st_mode = 0600;
  in.st_uid = 7;
  in.st_gid = 8;
  in.st_mtim = {12345, 678};
  ASSERT_EQ(fs_->SetAttr(a, in, kSetMode | kSetUid | kSetGid | kSetMtime, &st), 0);
  Reopen();
  ASSERT_EQ(fs_->Lookup(kRootIno, "hard", &st), 0);
  EXPECT_EQ(st.st_ino, a);
  EXPECT_EQ(st.st_mode, S_IFREG | 0600u);
  EXPECT_EQ(st.st_uid, 7u);
  EXPECT_EQ(st.st_gid, 8u);
  EXPECT_EQ(st.st_mtim.tv_sec, 12345);
  EXPECT_EQ(st.st_mtim.tv_nsec, 678);
  ASSERT_EQ(fs_->Unlink(kRootIno, "a"), 0);
  ASSERT_EQ(fs_->GetAttr(a, &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST_F(FsCore, CopyRangeSharesChunks) {
  uint64_t a = CreateFile(kRootIno, "a");
  std::string data = Bf16Like(600000, 5);
  ASSERT_EQ(fs_->Write(a, 0, data.data(), data.size()), 0);  // not flushed yet: CopyRange must
  uint64_t b = CreateFile(kRootIno, "b");
  ASSERT_EQ(fs_->Write(b, 0, "0123456789", 10), 0);
  uint64_t copied = 0;
  ASSERT_EQ(fs_->CopyRange(a, 1000, b, 5, 400000, &copied), 0);
  EXPECT_EQ(copied, 400000u);
  std::string want = "01234" + data.substr(1000, 400000);
  EXPECT_EQ(ReadAll(b), want);
  uint64_t chunks = fs_->counters().chunks_written.load();
  ASSERT_EQ(fs_->CopyRange(a, 0, b, 0, 10 << 20, &copied), 0);  // clipped at a's end
  EXPECT_EQ(copied, data.size());
  EXPECT_EQ(fs_->counters().chunks_written.load(), chunks);  // shared, not re-encoded
  EXPECT_EQ(ReadAll(b), data);
  for (uint64_t i : {a, b}) {
    ASSERT_EQ(fs_->Flush(i), 0);
    ASSERT_EQ(fs_->Release(i, true), 0);
  }
  ASSERT_EQ(fs_->Unlink(kRootIno, "a"), 0);
  fs_->Forget(a, 1);
  Reopen();
  EXPECT_EQ(ReadAll(b), data);
  ExpectFsckClean();
}

TEST_F(FsCore, Xattrs) {
  uint64_t a = CreateFile(kRootIno, "a");
  std::string data = Bf16Like(300000, 6);
  ASSERT_EQ(fs_->Write(a, 0, data.data(), data.size()), 0);
  ASSERT_EQ(fs_->Flush(a), 0);
  std::string v;
  ASSERT_EQ(fs_->GetXattr(a, "user.lmcfs.stored_bytes", &v), 0);
  struct stat st;
  ASSERT_EQ(fs_->GetAttr(a, &st), 0);
  EXPECT_LE((std::stoull(v) + 511) / 512, static_cast<uint64_t>(st.st_blocks));
  ASSERT_EQ(fs_->GetXattr(a, "user.lmcfs.ratio", &v), 0);
  EXPECT_LT(std::stod(v), 0.9);
  EXPECT_EQ(fs_->SetXattr(a, "user.lmcfs.ratio", "1", 0), EPERM);
  ASSERT_EQ(fs_->SetXattr(a, "user.k", "value", 0), 0);
  EXPECT_EQ(fs_->SetXattr(a, "user.k", "v2", XATTR_CREATE), EEXIST);
  EXPECT_EQ(fs_->SetXattr(a, "user.none", "v2", XATTR_REPLACE), ENODATA);
  std::string names;
  ASSERT_EQ(fs_->ListXattr(a, &names), 0);
  EXPECT_NE(names.find(std::string("user.k\0", 7)), std::string::npos);
  ASSERT_EQ(fs_->Release(a, true), 0);
  Reopen();
  ASSERT_EQ(fs_->GetXattr(a, "user.k", &v), 0);
  EXPECT_EQ(v, "value");
  ASSERT_EQ(fs_->RemoveXattr(a, "user.k"), 0);
  EXPECT_EQ(fs_->GetXattr(a, "user.k", &v), ENODATA);
}

// Random writes, truncates, flushes and reopens against a std::string
// model, with small chunks and a small dirty limit so that every path of
// the pipeline (stream, early cut, read-modify-write) runs.
TEST_F(FsCore, RandomOpsMatchModel) {
  // LMC_FS_SEED=n runs another sequence (the printed seed reproduces a failure).
  const char* env_seed = std::getenv("LMC_FS_SEED");
  const uint32_t seed = env_seed ? static_cast<uint32_t>(std::strtoul(env_seed, nullptr, 10)) : 20261125;
  std::printf("RandomOpsMatchModel seed=%u\n", seed);
  std::mt19937 rng(seed);
  std::map<uint64_t, std::string> model;
  std::vector<uint64_t> inos;
  for (int i = 0; i < 4; i++) {
    uint64_t ino = CreateFile(kRootIno, "f" + std::to_string(i));
    inos.push_back(ino);
    model[ino] = "";
  }
  std::string bf = Bf16Like(1 << 20, 9);
  for (int op = 0; op < 1500; op++) {
    uint64_t ino = inos[rng() % inos.size()];
    std::string& m = model[ino];
    int kind = static_cast<int>(rng() % 100);
    if (kind < 50) {
      uint64_t off = (rng() % 3 == 0) ? m.size() : rng() % (m.size() + 100000);
      size_t n = 1 + rng() % (rng() % 4 == 0 ? 300000 : 5000);
      std::string d = bf.substr(rng() % (bf.size() - n), n);
      ASSERT_EQ(fs_->Write(ino, off, d.data(), d.size()), 0);
      if (m.size() < off + n) m.resize(off + n, '\0');
      m.replace(off, n, d);
    } else if (kind < 60) {
      uint64_t size = rng() % (m.size() + 50000);
      struct stat a {
      }, out;
      a.st_size = static_cast<off_t>(size);
      ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
      m.resize(size, '\0');
    } else if (kind < 73) {
      // Sequential read of the whole file (prefetch path).
      std::string all, got;
      for (uint64_t off = 0; off < m.size(); off += got.size()) {
        ASSERT_EQ(fs_->Read(ino, off, 50000, &got), 0);
        ASSERT_FALSE(got.empty());
        all += got;
      }
      ASSERT_EQ(all, m) << "op " << op << " ino " << ino;
    } else if (kind < 80) {
      uint64_t off = rng() % (m.size() + 10);
      size_t n = rng() % 200000;
      std::string got;
      ASSERT_EQ(fs_->Read(ino, off, n, &got), 0);
      std::string want = off < m.size() ? m.substr(off, n) : "";
      ASSERT_EQ(got, want) << "op " << op << " ino " << ino << " off " << off;
    } else if (kind < 90) {
      ASSERT_EQ(kind < 87 ? fs_->Flush(ino) : fs_->Fsync(ino, false), 0);
    } else if (kind < 94) {
      uint64_t src = inos[rng() % inos.size()];
      std::string& sm = model[src];
      uint64_t soff = rng() % (sm.size() + 1000), doff = rng() % (m.size() + 100000);
      uint64_t len = rng() % 400000, copied = 0;
      ASSERT_EQ(fs_->CopyRange(src, soff, ino, doff, len, &copied), 0);
      uint64_t want = soff < sm.size() ? std::min<uint64_t>(len, sm.size() - soff) : 0;
      if (src == ino) want = std::min<uint64_t>(want, copied);  // same file: plain copy
      ASSERT_EQ(copied, want);
      if (copied) {
        std::string piece = sm.substr(soff, copied);
        if (m.size() < doff + copied) m.resize(doff + copied, '\0');
        m.replace(doff, copied, piece);
      }
    } else if (kind < 96) {
      for (uint64_t i : inos) ASSERT_EQ(fs_->Release(i, true), 0);
      Reopen();
      for (uint64_t i : inos) ASSERT_EQ(fs_->Open(i, O_RDWR), 0);
    } else {
      // truncate to 0 and rewrite sequentially (O_TRUNC checkpoint rewrite)
      struct stat a {
      }, out;
      ASSERT_EQ(fs_->SetAttr(ino, a, kSetSize, &out), 0);
      m.clear();
    }
  }
  for (uint64_t i : inos) {
    EXPECT_EQ(ReadAll(i), model[i]);
    ASSERT_EQ(fs_->Release(i, true), 0);
  }
  Reopen();
  for (uint64_t i : inos) EXPECT_EQ(ReadAll(i), model[i]);
  ExpectFsckClean();
}

}  // namespace
}  // namespace lmc::fs
