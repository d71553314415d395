// The incremental-snapshot policy without a mount: lineage keys, base
// choice, chain limit, pinned bases racing an unlink, and keep-last-K
// rotation with gc reaching a steady state, driven as the write pipeline
// drives it (ChooseBase, encode, AddChunk, Record, commit).
#include "delta.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "lineage.h"
#include "lmc/codec.h"
#include "lmc/fs/control.h"
#include "lmc/fs/inspect.h"
#include "lmc/fs/snapshots.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"
#include "lmc/twin.h"

namespace lmc::fs {
namespace {

TEST(LineageTest, StepNumbersGoShardNumbersStay) {
  EXPECT_EQ(NormalizeFileName("ckpt_step_2000.pt"), "ckpt_step_#.pt");
  EXPECT_EQ(NormalizeFileName("ckpt_step_1000.pt"), NormalizeFileName("ckpt_step_2000.pt"));
  EXPECT_EQ(NormalizeFileName("model-00001-of-00002.safetensors"), "model-00001-of-00002.safetensors");
  EXPECT_NE(NormalizeFileName("model-00001-of-00002.safetensors"),
            NormalizeFileName("model-00002-of-00002.safetensors"));
  EXPECT_EQ(NormalizeFileName("mp_rank_00_model_states.pt"), "mp_rank_00_model_states.pt");
  EXPECT_EQ(NormalizeFileName("zero_pp_rank_3_mp_rank_00_optim_states.pt"),
            "zero_pp_rank_3_mp_rank_00_optim_states.pt");
  EXPECT_EQ(NormalizeFileName("epoch=3-step=500.ckpt"), "epoch=#-step=#.ckpt");
  EXPECT_EQ(NormalizeFileName("global_step1200"), "global_step#");
  EXPECT_EQ(NormalizeFileName("RANK7-shard2.bin"), "RANK7-shard2.bin");
  EXPECT_EQ(NormalizeFileName("latest.pt"), "latest.pt");
  // PyTorch DCP: rank and file index, no step.
  EXPECT_EQ(NormalizeFileName("__1_0.distcp"), "__1_0.distcp");
  EXPECT_NE(NormalizeFileName("__0_0.distcp"), NormalizeFileName("__1_0.distcp"));
  EXPECT_NE(NormalizeFileName("__0_0.distcp"), NormalizeFileName("__0_1.distcp"));
  // Megatron's rank directories: tensor, pipeline (and expert) rank.
  EXPECT_EQ(NormalizeFileName("mp_rank_00_001"), "mp_rank_00_001");
  // DeepSpeed's pipeline layers (layer, tensor-parallel rank) and experts.
  EXPECT_EQ(NormalizeFileName("layer_03-model_01-model_states.pt"), "layer_03-model_01-model_states.pt");
  EXPECT_NE(NormalizeFileName("layer_03-model_00-model_states.pt"),
            NormalizeFileName("layer_03-model_01-model_states.pt"));
  EXPECT_EQ(NormalizeFileName("layer_1_expert_5_mp_rank_00_model_states.pt"),
            "layer_1_expert_5_mp_rank_00_model_states.pt");
  EXPECT_EQ(NormalizeFileName("module-pipe_02-model_00"), "module-pipe_02-model_#");
  EXPECT_EQ(NormalizeFileName("decoder_layer3_step100.pt"), "decoder_layer3_step#.pt");
  EXPECT_EQ(NormalizeFileName(""), "");
}

TEST(LineageTest, DirectoriesThatNameAShardAreInTheRole) {
  EXPECT_EQ(FileRole("model_optim_rng.pt", "mp_rank_01"), "mp_rank_01/model_optim_rng.pt");
  EXPECT_NE(FileRole("model_optim_rng.pt", "mp_rank_00"), FileRole("model_optim_rng.pt", "mp_rank_01"));
  EXPECT_NE(FileRole("model_optim_rng.pt", "mp_rank_00_000"),
            FileRole("model_optim_rng.pt", "mp_rank_00_001"));
  EXPECT_EQ(FileRole("ckpt_step_100.pt", "rank3"), "rank3/ckpt_step_#.pt");
  // Step directories and unknown ones stay out of it.
  EXPECT_EQ(FileRole("model.safetensors", "checkpoint-100"), "model.safetensors");
  EXPECT_EQ(FileRole("model_optim_rng.pt", "iter_0000100"), "model_optim_rng.pt");
  // DCP files: always with their directory, step numbers normalized away.
  EXPECT_EQ(FileRole("__0_0.distcp", "step-200"), "step-#/__0_0.distcp");
  EXPECT_EQ(FileRole("__0_0.distcp", "step-100"), FileRole("__0_0.distcp", "step-200"));
  EXPECT_NE(FileRole("__0_0.distcp", "pytorch_model_fsdp_0"), FileRole("__0_0.distcp", "optimizer_0"));
  EXPECT_EQ(FileRole("x.pt", ""), "x.pt");
  ChunkSpec s;
  s.offset = 0;
  s.length = 65536;
  EXPECT_EQ(LineageKey("x.pt", s, std::nullopt, "checkpoint-5"), LineageKey("x.pt", s));
  EXPECT_NE(LineageKey("x.pt", s, std::nullopt, "mp_rank_00"),
            LineageKey("x.pt", s, std::nullopt, "mp_rank_01"));
}

// Directories named after a parameter (DeepSpeed's universal checkpoints,
// zero/<parameter>/fp32.pt): the whole name, every digit kept.
TEST(LineageTest, ParameterDirectoriesAreInTheRoleWhole) {
  struct Case {
    const char* file = "";
    const char* dir = "";
    const char* role = "";
  };
  const Case cases[] = {
      {"fp32.pt", "model.layers.0.mlp.fc1.weight", "model.layers.0.mlp.fc1.weight/fp#.pt"},
      {"fp32.pt", "model.layers.0.mlp.fc2.weight", "model.layers.0.mlp.fc2.weight/fp#.pt"},
      {"fp32.pt", "model.layers.1.mlp.fc1.weight", "model.layers.1.mlp.fc1.weight/fp#.pt"},
      {"exp_avg.pt", "lm_head.weight", "lm_head.weight/exp_avg.pt"},
      {"exp_avg.pt", "0.bias", "0.bias/exp_avg.pt"},
      {"fp32.pt", "backbone.layers.2.mixer.A_log", "backbone.layers.2.mixer.A_log/fp#.pt"},
      // Not parameter names: steps, versions, other characters, empty parts.
      {"model.pt", "checkpoint.step100", "model.pt"},
      {"model.pt", "release.2", "model.pt"},
      {"model.pt", "v1.2.3", "model.pt"},
      {"model.pt", "run-3.lr.weight", "model.pt"},
      {"model.pt", "a..weight", "model.pt"},
      {"model.pt", ".weight", "model.pt"},
  };
  for (const Case& c : cases) EXPECT_EQ(FileRole(c.file, c.dir), c.role) << c.dir << "/" << c.file;
}

// Atomic savers' temporary files: their lineage waits for the final name.
TEST(LineageTest, TemporaryNamesOfAtomicSaves) {
  for (const char* n : {".tmpbCBqnA", ".tmpbCBqnA.safetensors", "tmpa8_k2x9q", "tmpa8_k2x9q.pt",
                        "model.pt.tmp", "model.safetensors.tmp.12345", "ckpt.temp", "model.bin.part",
                        "x.partial", "model.safetensors.incomplete"})
    EXPECT_TRUE(IsTemporaryName(n)) << n;
  for (const char* n : {"model.safetensors", "tmp.pt", ".tmp", "tmpfile.pt", ".tmpab", "temp_model.pt",
                        "model-00001-of-00002.safetensors", "tmp", "parts.pt", "a.tmp.", ".tmp.x"})
    EXPECT_FALSE(IsTemporaryName(n)) << n;
}

TEST(LineageTest, KeysSeparateTensorsDtypesOffsetsAndRoles) {
  ChunkSpec a;
  a.offset = 4096;
  a.length = 65536;
  a.dtype = DType::kBF16;
  a.tensor_chunk = true;
  a.region_name = "layer.0.weight";
  a.region_length = 1 << 20;
  a.region_offset = 65536;
  const std::string k = LineageKey("ckpt_step_100.pt", a);
  ChunkSpec moved = a;
  moved.offset = 9999;  // the tensor moved in the file: same lineage
  EXPECT_EQ(LineageKey("ckpt_step_200.pt", moved), k);
  ChunkSpec b = a;
  b.region_name = "layer.1.weight";
  EXPECT_NE(LineageKey("ckpt_step_100.pt", b), k);
  b = a;
  b.dtype = DType::kF32;
  EXPECT_NE(LineageKey("ckpt_step_100.pt", b), k);
  b = a;
  b.region_offset = 0;
  EXPECT_NE(LineageKey("ckpt_step_100.pt", b), k);
  EXPECT_NE(LineageKey("other.pt", a), k);
  ChunkSpec m;  // mixed chunk: keyed by file offset
  m.offset = 0;
  m.length = 5000;
  const std::string km = LineageKey("x_1.pt", m);
  EXPECT_EQ(LineageKey("x_2.pt", m), km);
  m.offset = 1;
  EXPECT_NE(LineageKey("x_2.pt", m), km);
  EXPECT_EQ(km.rfind(kLineagePrefix, 0), 0u);
}

// The fixture's chunk size and chunks per tensor.
constexpr uint32_t kTestChunk = 64 << 10;
constexpr int kTestChunks = 4;

// f32 weights that drift a little per step, like an optimizer update.
std::vector<uint8_t> Weights(size_t n_floats, int step, uint32_t tensor_seed) {
  std::mt19937 rng(tensor_seed);
  std::normal_distribution<float> w0(0.0f, 0.02f);
  std::vector<float> w(n_floats);
  for (auto& x : w) x = w0(rng);
  std::mt19937 rs(tensor_seed * 7919u + 1);
  std::normal_distribution<float> upd(0.0f, 1e-4f);
  for (int s = 0; s < step; ++s)
    for (auto& x : w) x *= 1.0f + upd(rs);
  std::vector<uint8_t> out(n_floats * 4);
  std::memcpy(out.data(), w.data(), out.size());
  return out;
}

class DeltaPolicyTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kChunk = kTestChunk;
  static constexpr int kChunks = kTestChunks;

  void SetUp() override {
    char tmpl[] = "/tmp/lmcfs_delta_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    store::StoreOptions so;
    so.verify_content_hash = true;
    auto s = store::Store::Open(dir_, so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    policy_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void MakePolicy(DeltaOptions o) {
    o.chunk_size = kChunk;  // as the chunker cut (WriteTensor)
    policy_ = std::make_unique<SnapshotDeltaPolicy>(store_.get(), o);
  }
  // The records a gc leaves until the files using its re-encoded chunks
  // are told (RewriteDeadBasesRefreshing).
  uint64_t ReencodeRefreshRecords() {
    uint64_t n = 0;
    EXPECT_TRUE(store_
                    ->Scan(store::Cf::kMeta, "reencode-refresh/",
                           [&](std::string_view, std::string_view) {
                             n++;
                             return true;
                           })
                    .ok());
    return n;
  }
  static DeltaOptions Forward() {
    DeltaOptions o;
    o.mode = DeltaMode::kForward;
    return o;
  }

  struct Written {
    std::vector<store::ChunkKey> keys;
    std::vector<std::vector<uint8_t>> data;
    std::vector<uint64_t> offsets;  // file offsets of the chunks
  };
  // Writes "file" `name` (inode ino): one tensor of kChunks chunks, as the
  // pipeline would; `between` runs after ChooseBase and before the commit.
  // Without `commit`, the batch is dropped, or left in *uncommitted.
  Written WriteFile(uint64_t ino, const std::string& name, int step,
                    const std::function<void()>& between = {}, bool commit = true, uint64_t parent = 0,
                    store::Batch* uncommitted = nullptr) {
    return WriteTensor(ino, name, DType::kF32, Weights(kChunks * kChunk / 4, step, 42), between, commit,
                       parent, uncommitted);
  }
  // The same for any tensor: `bytes` of `dtype` at file offset 128, cut
  // into chunks of kChunk bytes (the last one shorter).
  Written WriteTensor(uint64_t ino, const std::string& name, DType dtype, const std::vector<uint8_t>& bytes,
                      const std::function<void()>& between = {}, bool commit = true, uint64_t parent = 0,
                      store::Batch* uncommitted = nullptr) {
    Written w;
    store::Batch batch;
    Workspace ws;
    for (size_t at = 0; at < bytes.size(); at += kChunk) {
      const size_t len = std::min<size_t>(kChunk, bytes.size() - at);
      ChunkSpec spec;
      spec.offset = 128 + at;
      spec.length = static_cast<uint32_t>(len);
      spec.dtype = dtype;
      spec.tensor_chunk = true;
      spec.region_name = "w";
      spec.region_length = bytes.size();
      spec.region_offset = at;
      std::vector<uint8_t> d(bytes.begin() + at, bytes.begin() + at + len);
      ChunkOrigin origin{ino, name, &spec, parent};
      auto base = policy_->ChooseBase(origin, d.data(), d.size());
      if (between) between();
      std::vector<uint8_t> frame(MaxEncodedSize(d.size()));
      EncodeParams p;
      p.dtype = spec.dtype;
      if (base) {
        p.base = base->bytes->data();
        p.widened_base_offset = base->widened_offset;
        p.base_len = base->bytes->size();
      }
      auto n = EncodeChunk(d.data(), d.size(), p, frame.data(), frame.size(), ws);
      EXPECT_TRUE(n.ok());
      frame.resize(*n);
      const store::ChunkKey key = store_->keys().Of(d.data(), d.size());
      std::optional<store::ChunkKey> bk;
      if (base) bk = base->key;
      batch.AddChunk(key, frame, static_cast<uint32_t>(len), bk);
      store::Extent e;
      e.length = len;
      e.chunk = key;
      batch.Put(store::Cf::kExtents, store::ExtentKey(ino, spec.offset), store::EncodeExtent(e));
      policy_->Record(origin, key, bk, store::CopyChunkBytes(d.data(), d.size()), &batch);
      w.keys.push_back(key);
      w.data.push_back(std::move(d));
      w.offsets.push_back(spec.offset);
    }
    if (!commit) {
      if (uncommitted) *uncommitted = std::move(batch);
      return w;
    }
    Status st = store_->Commit(batch);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return w;
  }
  void DeleteFile(uint64_t ino, const Written& w) {
    store::Batch b;
    for (size_t i = 0; i < w.keys.size(); ++i) {
      b.Unref(w.keys[i]);
      b.Delete(store::Cf::kExtents, store::ExtentKey(ino, w.offsets[i]));
    }
    ASSERT_TRUE(store_->Commit(b).ok());
  }
  void ExpectReads(const Written& w) {
    Workspace ws;
    for (size_t i = 0; i < w.keys.size(); ++i) {
      std::vector<uint8_t> out(w.data[i].size());
      auto n = store_->ReadChunk(w.keys[i], out.data(), out.size(), ws);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      EXPECT_EQ(out, w.data[i]);
    }
  }
  // Records of the meta column family under `prefix`.
  int MetaRecords(std::string_view prefix) {
    int n = 0;
    EXPECT_TRUE(store_
                    ->Scan(store::Cf::kMeta, prefix,
                           [&](std::string_view, std::string_view) {
                             n++;
                             return true;
                           })
                    .ok());
    return n;
  }
  void ExpectFsckClean() {
    auto f = store_->Fsck({});
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->errors(), 0u) << (f->Messages().empty() ? "" : f->Messages()[0]);
  }

  void Rotation(DeltaMode mode);

  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<SnapshotDeltaPolicy> policy_;
};

TEST_F(DeltaPolicyTest, NextStepIsStoredAsDeltaWithinTheChainLimit) {
  DeltaOptions o = Forward();
  o.max_chain = 2;
  MakePolicy(o);
  std::vector<Written> files;
  for (int step = 0; step < 6; ++step)
    files.push_back(WriteFile(10 + step, "ckpt_step_" + std::to_string(step * 100) + ".pt", step));
  // Depths follow 0,1,2,0,1,2: a keyframe once the chain would exceed 2.
  const int want[] = {0, 1, 2, 0, 1, 2};
  for (int step = 0; step < 6; ++step) {
    for (const auto& k : files[step].keys) {
      auto info = store_->GetChunkInfo(k);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->delta_depth, want[step]) << "step " << step;
      EXPECT_LE(info->delta_depth, o.max_chain);
    }
  }
  EXPECT_GT(policy_->counters().delta.load(), 0u);
  EXPECT_GT(policy_->counters().keyframes.load(), 0u);
  // Deltas are smaller than the keyframe they follow.
  EXPECT_LT(store_->GetChunkInfo(files[1].keys[0])->frame_len,
            store_->GetChunkInfo(files[0].keys[0])->frame_len);
  for (const auto& f : files) ExpectReads(f);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, OffMeansStandalone) {
  DeltaOptions o;
  o.mode = DeltaMode::kOff;
  MakePolicy(o);
  WriteFile(1, "ckpt_step_1.pt", 0);
  auto w = WriteFile(2, "ckpt_step_2.pt", 1);
  for (const auto& k : w.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
}

TEST_F(DeltaPolicyTest, UnrelatedDataOfTheSameShapeIsNotADelta) {
  MakePolicy(Forward());
  WriteFile(1, "a_1.pt", 0);
  // Same lineage, different weights entirely (another seed).
  store::Batch batch;
  ChunkSpec spec;
  spec.offset = 128;
  spec.length = kChunk;
  spec.dtype = DType::kF32;
  spec.tensor_chunk = true;
  spec.region_name = "w";
  spec.region_length = kChunks * kChunk;
  auto other = Weights(kChunk / 4, 0, 777);
  auto base = policy_->ChooseBase(ChunkOrigin{2, "a_2.pt", &spec}, other.data(), other.size());
  EXPECT_FALSE(base.has_value());
  EXPECT_EQ(policy_->counters().estimate_said_no.load(), 1u);
}

TEST_F(DeltaPolicyTest, BaseUnlinkedBetweenChoiceAndCommitDoesNotFailTheCommit) {
  MakePolicy(Forward());
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  // Between ChooseBase (which pinned the base) and the commit, the base's
  // file is deleted: its chunks lose their last reference.
  bool deleted = false;
  auto second = WriteFile(2, "ckpt_step_2.pt", 1, [&] {
    if (!deleted) DeleteFile(1, first);
    deleted = true;
  });
  // Chunk 0 chose its base before the unlink (pinned: still a delta); the
  // later chunks found theirs gone and went standalone.
  EXPECT_TRUE(store_->GetChunkInfo(second.keys[0])->base.has_value());
  for (int i = 1; i < kChunks; ++i) EXPECT_FALSE(store_->GetChunkInfo(second.keys[i])->base.has_value());
  EXPECT_EQ(policy_->counters().base_gone.load(), uint64_t{kChunks - 1});
  ExpectReads(second);
  ExpectFsckClean();
  EXPECT_EQ(store_->PinnedDeadChunks(), 0u);
}

// keep-last-K rotation with gc after every save, in both delta modes.
void DeltaPolicyTest::Rotation(DeltaMode mode) {
  DeltaOptions o;
  o.mode = mode;
  o.max_chain = 4;
  MakePolicy(o);
  constexpr int kKeep = 3, kSaves = 12;
  std::vector<Written> files;
  std::vector<uint64_t> live;
  for (int step = 0; step < kSaves; ++step) {
    files.push_back(WriteFile(100 + step, "ckpt_step_" + std::to_string(step) + ".pt", step));
    policy_->Flush();
    if (step >= kKeep) DeleteFile(100 + step - kKeep, files[step - kKeep]);
    auto r = store_->RewriteDeadBases({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    live.push_back(store_->Stats().live_bytes);
    for (int k = std::max(0, step - kKeep + 1); k <= step; ++k) ExpectReads(files[k]);
  }
  ExpectFsckClean();
  // Live bytes hold K checkpoints: bounded by K standalone copies, and not
  // growing once the rotation runs (allow the keyframe cycle's wobble).
  const uint64_t standalone = live[0];  // one save, all keyframes
  for (int step = kKeep; step < kSaves; ++step) EXPECT_LE(live[step], kKeep * standalone) << step;
  EXPECT_LE(live[kSaves - 1], live[kKeep + 2] * 12 / 10);
  EXPECT_LT(live[kSaves - 1], kKeep * standalone) << "deltas saved nothing";
}

TEST_F(DeltaPolicyTest, KeepLastKRotationWithGcReachesASteadyState) { Rotation(DeltaMode::kForward); }
TEST_F(DeltaPolicyTest, ReverseKeepLastKRotationWithGcReachesASteadyState) { Rotation(DeltaMode::kReverse); }

TEST_F(DeltaPolicyTest, ReverseKeepsTheNewestStandaloneAndRebasesThePriorVersion) {
  DeltaOptions o;  // reverse is the default
  ASSERT_EQ(o.mode, DeltaMode::kReverse);
  o.max_chain = 2;
  MakePolicy(o);
  std::vector<Written> files;
  for (int step = 0; step < 7; ++step) {
    files.push_back(WriteFile(10 + step, "ckpt_step_" + std::to_string(step * 100) + ".pt", step));
    // Written standalone: reading the newest decodes one frame per chunk.
    for (const auto& k : files.back().keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value()) << step;
    policy_->Flush();
    EXPECT_EQ(policy_->Pending(), 0u);
    for (const auto& k : files.back().keys) EXPECT_EQ(store_->GetChunkInfo(k)->delta_depth, 0) << step;
  }
  // Each prior version is a delta on the next save unless that would put a
  // chunk more than 2 deltas deep: v2 and v5 stay keyframes.
  const int want[] = {2, 1, 0, 2, 1, 0, 0};
  for (int step = 0; step < 7; ++step) {
    for (int i = 0; i < kChunks; ++i) {
      auto info = store_->GetChunkInfo(files[step].keys[i]);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->delta_depth, want[step]) << "step " << step;
      if (want[step] > 0) {
        ASSERT_TRUE(info->base.has_value());
        EXPECT_EQ(*info->base, files[step + 1].keys[i]) << "step " << step;
        EXPECT_LT(info->frame_len, store_->GetChunkInfo(files[6].keys[i])->frame_len) << "delta not smaller";
      }
    }
    ExpectReads(files[step]);
  }
  EXPECT_EQ(policy_->counters().rebased.load(), 4u * kChunks);
  EXPECT_EQ(policy_->counters().rebase_keyframes.load(), 2u * kChunks);
  EXPECT_EQ(policy_->counters().rebase_errors.load(), 0u);
  EXPECT_EQ(policy_->counters().delta.load(), 0u) << "reverse mode wrote a forward delta";
  ExpectFsckClean();
  // Deleting the newest save keeps every older one readable (their bases
  // stay while they depend on them).
  DeleteFile(16, files[6]);
  DeleteFile(15, files[5]);
  for (int step = 0; step < 5; ++step) ExpectReads(files[step]);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, ReverseRebasesQueuedAtACrashAreDoneByTheNextMount) {
  auto queued = [&] { return MetaRecords("rebase/"); };
  DeltaOptions o;
  o.background = false;  // the mount goes away before its rebase thread gets to the work
  MakePolicy(o);
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  EXPECT_EQ(queued(), kChunks);  // persisted with the second save's chunks
  for (const auto& k : first.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  // The next mount's policy finds the records and does the work.
  MakePolicy({});
  policy_->Flush();
  for (int i = 0; i < kChunks; ++i) EXPECT_EQ(store_->GetChunkInfo(first.keys[i])->base, second.keys[i]);
  EXPECT_EQ(policy_->counters().rebased.load(), static_cast<uint64_t>(kChunks));
  EXPECT_EQ(queued(), 0);
  ExpectReads(first);
  ExpectReads(second);
  ExpectFsckClean();
  // A skipped item's record goes too: queue one whose prior version is gone.
  MakePolicy(o);
  auto third = WriteFile(3, "ckpt_step_3.pt", 2);
  DeleteFile(1, first);   // (the older saves depend on the second's chunks)
  DeleteFile(2, second);  // the prior versions of the third save: gone
  EXPECT_EQ(queued(), kChunks);
  MakePolicy({});
  policy_->Flush();
  EXPECT_EQ(queued(), 0);
  EXPECT_EQ(policy_->counters().rebased.load(), 0u);
  ExpectReads(third);
}

// A rebase shrinks a prior version's frames in its commit; the files'
// stored bytes follow when the listener (the filesystem) is told, after
// it. A refresh record, written with the rebase and deleted once the
// listener was told, carries the places over a crash between the two:
// the next mount's listener is told of them when it is installed.
TEST_F(DeltaPolicyTest, ReverseRebasesKeepARefreshRecordUntilTheListenerIsTold) {
  auto records = [&] { return MetaRecords("rebase-refresh/"); };
  MakePolicy({});
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  policy_->Flush();
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(store_->GetChunkInfo(first.keys[i])->base, second.keys[i]);
  // No listener yet (as after a crash between the commit and the telling).
  EXPECT_EQ(records(), kChunks);
  std::set<std::tuple<uint64_t, uint64_t, store::ChunkKey>> told;
  auto listen = [&](uint64_t ino, uint64_t off, const store::ChunkKey& key) { told.emplace(ino, off, key); };
  MakePolicy({});  // the next mount
  policy_->SetRebaseListener(listen);
  std::set<std::tuple<uint64_t, uint64_t, store::ChunkKey>> want;
  for (int i = 0; i < kChunks; ++i) want.emplace(1, first.offsets[i], first.keys[i]);
  EXPECT_EQ(told, want);
  EXPECT_EQ(records(), 0);
  // With a listener: told after the commit, and no record left.
  told.clear();
  auto third = WriteFile(3, "ckpt_step_3.pt", 2);
  policy_->Flush();
  want.clear();
  for (int i = 0; i < kChunks; ++i) want.emplace(2, second.offsets[i], second.keys[i]);
  EXPECT_EQ(told, want);
  EXPECT_EQ(records(), 0);
  ExpectReads(first);
  ExpectReads(second);
  ExpectReads(third);
  ExpectFsckClean();
}

// A rebased chunk that another file shares (a copy of the prior version):
// that file's extent is found by the idle scan after the commit
// (ReconcileShared). The chunk's re-encode record, put with the rebase,
// stays until then, so a crash before the scan leaves it for the next
// mount (RefreshLeftOver); a chunk no other file shares keeps none.
TEST_F(DeltaPolicyTest, ReverseRebasesOfSharedChunksKeepARecordUntilTheCopiesAreTold) {
  MakePolicy({});
  std::mutex mu;
  std::set<std::tuple<uint64_t, uint64_t, store::ChunkKey>> told;
  uint64_t records_while_copy_told = 0;
  policy_->SetRebaseListener([&](uint64_t ino, uint64_t off, const store::ChunkKey& key) {
    const uint64_t n = ino == 9 ? ReencodeRefreshRecords() : 0;
    std::lock_guard l(mu);
    told.emplace(ino, off, key);
    records_while_copy_told = std::max(records_while_copy_told, n);
  });
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  {
    store::Batch copy;  // inode 9: a cp of the first save
    for (int i = 0; i < kChunks; ++i) {
      copy.Ref(first.keys[i]);
      store::Extent e;
      e.length = first.data[i].size();
      e.chunk = first.keys[i];
      copy.Put(store::Cf::kExtents, store::ExtentKey(9, first.offsets[i]), store::EncodeExtent(e));
    }
    ASSERT_TRUE(store_->Commit(copy).ok());
  }
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  policy_->Flush();
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(store_->GetChunkInfo(first.keys[i])->base, second.keys[i]);
  {
    std::lock_guard l(mu);
    for (int i = 0; i < kChunks; ++i) {
      EXPECT_TRUE(told.count({1, first.offsets[i], first.keys[i]})) << "the place, chunk " << i;
      EXPECT_TRUE(told.count({9, first.offsets[i], first.keys[i]})) << "the copy, chunk " << i;
    }
    EXPECT_EQ(records_while_copy_told, static_cast<uint64_t>(kChunks))
        << "the shared chunks' records were gone before the copy was told";
  }
  EXPECT_EQ(ReencodeRefreshRecords(), 0u) << "left after the copy was told";
  // The second save's chunks, which nobody else holds, leave no record.
  auto third = WriteFile(3, "ckpt_step_3.pt", 2);
  policy_->Flush();
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(store_->GetChunkInfo(second.keys[i])->base, third.keys[i]);
  EXPECT_EQ(ReencodeRefreshRecords(), 0u);
  ExpectReads(first);
  ExpectReads(second);
  ExpectReads(third);
}

// A new version that was committed and is gone again (its file overwritten
// or removed before the rebase thread got to it) is given up at once: its
// rebase record says it was committed. Waiting for it would hold the
// queue, and whatever waits for it to drain (gc and trimming wait for an
// idle mount), for 30 s.
TEST_F(DeltaPolicyTest, ReverseRebaseOnANewVersionGoneSinceIsGivenUpAtOnce) {
  DeltaOptions o;
  o.background = false;  // the rebases wait until the second save is gone
  MakePolicy(o);
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  ASSERT_EQ(MetaRecords("rebase/"), kChunks);
  DeleteFile(2, second);
  for (const auto& k : second.keys) ASSERT_TRUE(store_->GetChunkInfo(k).status().IsNotFound());
  MakePolicy({});  // the rebase thread finds the records (no Flush: it would drop them anyway)
  const auto t0 = std::chrono::steady_clock::now();
  while (policy_->Pending() != 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(policy_->Pending(), 0u) << "the rebase thread is still waiting for a chunk that is gone";
  EXPECT_EQ(policy_->counters().rebase_skipped.load(), static_cast<uint64_t>(kChunks));
  EXPECT_EQ(policy_->counters().rebase_dropped.load(), 0u);
  EXPECT_EQ(MetaRecords("rebase/"), 0);
  for (const auto& k : first.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  ExpectReads(first);
  ExpectFsckClean();
}

// The rebase thread looks for an item's new chunk, then (not found) for
// the item's record, and the two reads are not one snapshot: the writer's
// commit landing between them shows the record without the chunk, which
// also means "committed and gone since". The chunk is read again before
// the item is given up, so the prior version still becomes a delta.
TEST_F(DeltaPolicyTest, ReverseRebaseWhoseNewVersionCommitsBetweenItsReadsIsDone) {
  MakePolicy({});
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  policy_->Flush();
  std::promise<void> written;
  std::shared_future<void> ready = written.get_future().share();
  store::Batch second_batch;
  std::atomic<int> calls{0};
  policy_->TestBetweenRebaseReads([&] {
    if (calls++ != 0) return;
    ready.wait();  // the writer's batch is whole
    EXPECT_TRUE(store_->Commit(second_batch).ok());
  });
  auto second = WriteFile(2, "ckpt_step_2.pt", 1, {}, /*commit=*/false, 0, &second_batch);
  written.set_value();
  policy_->Flush();
  EXPECT_GE(calls.load(), 1) << "no item read its new chunk before the commit";
  EXPECT_EQ(policy_->counters().rebase_skipped.load(), 0u);
  EXPECT_EQ(policy_->counters().rebased.load(), static_cast<uint64_t>(kChunks));
  for (size_t i = 0; i < first.keys.size(); ++i) {
    auto info = store_->GetChunkInfo(first.keys[i]);
    ASSERT_TRUE(info.ok());
    ASSERT_TRUE(info->base.has_value()) << "chunk " << i << " was left standalone";
    EXPECT_EQ(*info->base, second.keys[i]);
  }
  ExpectReads(first);
  ExpectReads(second);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, ReverseRebaseOfANewChunkThatNeverCommitsIsDropped) {
  MakePolicy({});
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  WriteFile(2, "ckpt_step_2.pt", 1, {}, /*commit=*/false);
  policy_->Flush();  // the new chunks are not in the store: nothing to rebase on
  EXPECT_EQ(policy_->Pending(), 0u);
  EXPECT_EQ(policy_->counters().rebase_dropped.load(), static_cast<uint64_t>(kChunks));
  for (const auto& k : first.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  ExpectReads(first);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, ReversePriorVersionDeletedBeforeTheRebaseIsSkipped) {
  MakePolicy({});
  auto first = WriteFile(1, "latest.pt", 0);
  // latest.pt rewritten: the queued rebases find their prior versions gone.
  bool deleted = false;
  auto second = WriteFile(2, "latest.pt", 1, [&] {
    if (!deleted) DeleteFile(1, first);
    deleted = true;
  });
  policy_->Flush();
  for (const auto& k : first.keys) EXPECT_TRUE(store_->GetChunkInfo(k).status().IsNotFound());
  for (const auto& k : second.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  EXPECT_EQ(policy_->counters().rebased.load(), 0u);
  ExpectReads(second);
  ExpectFsckClean();
}

// bf16 values of fp32 values (round to nearest even, as torch does).
std::vector<uint8_t> RoundedToBf16(const std::vector<uint8_t>& f32) {
  std::vector<uint8_t> out(f32.size() / 2);
  for (size_t i = 0; i < f32.size() / 4; ++i) {
    uint32_t u;
    std::memcpy(&u, &f32[4 * i], 4);
    const uint16_t h = RoundToBf16(u);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

// An fp32 master tensor with a few special values past its fingerprint
// (NaN with a payload, -0, infinity, a subnormal): 3.5 chunks, so that
// its last chunk is shorter and starts inside its twin's shorter last
// chunk (4 chunks, and 2 of its bf16 twin).
std::vector<uint8_t> Master(uint32_t seed) {
  auto m = Weights((kTestChunks - 1) * kTestChunk / 4 + kTestChunk / 8, 0, seed);
  const uint32_t special[] = {0x7fc01234u, 0x80000000u, 0x7f800000u, 0x00000005u};
  for (size_t i = 0; i < 4; ++i) std::memcpy(&m[4 * (100 + 997 * i)], &special[i], 4);
  return m;
}

TEST_F(DeltaPolicyTest, MasterWrittenBeforeItsTwinIsReencodedAgainstIt) {
  MakePolicy({});  // reverse deltas (the rebaser), pair=on: the defaults
  // optimizer.pt first (the fp32 master: 4 chunks), then model.safetensors
  // (its bf16 twin: 2 chunks of twice as many values).
  const auto master_bytes = Master(7);
  auto master = WriteTensor(1, "optimizer.pt", DType::kF32, master_bytes);
  std::vector<uint32_t> alone;
  for (const auto& k : master.keys) alone.push_back(store_->GetChunkInfo(k)->frame_len);
  auto twin = WriteTensor(2, "model.safetensors", DType::kBF16, RoundedToBf16(master_bytes));
  ASSERT_EQ(twin.keys.size(), 2u);
  policy_->Flush();
  EXPECT_EQ(policy_->counters().pair_later_queued.load(), static_cast<uint64_t>(kChunks));
  EXPECT_EQ(policy_->counters().paired_later.load(), static_cast<uint64_t>(kChunks));
  for (int i = 0; i < kChunks; ++i) {
    auto info = store_->GetChunkInfo(master.keys[i]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->base, twin.keys[i / 2]) << i;
    EXPECT_TRUE(*store_->DerivedFromTwin(master.keys[i])) << i;
    // The master's upper half is given by the twin: its frame shrinks by
    // at least a fifth.
    EXPECT_LT(info->frame_len, alone[i] * 4 / 5) << i;
  }
  for (const auto& k : twin.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  EXPECT_EQ(MetaRecords("rebase-pair/"), 0);  // done: the queued items' records are gone
  ExpectReads(master);
  ExpectReads(twin);
  ExpectFsckClean();
  // The twin's file goes: the master still reads (its base stays).
  DeleteFile(2, twin);
  ExpectReads(master);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, PairRebasesQueuedAtACrashAreDoneByTheNextMount) {
  DeltaOptions o;
  o.background = false;
  MakePolicy(o);
  const auto master_bytes = Master(11);
  auto master = WriteTensor(1, "optimizer.pt", DType::kF32, master_bytes);
  auto twin = WriteTensor(2, "model.safetensors", DType::kBF16, RoundedToBf16(master_bytes));
  for (const auto& k : master.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  MakePolicy({});
  policy_->Flush();
  EXPECT_EQ(policy_->counters().paired_later.load(), static_cast<uint64_t>(kChunks));
  for (int i = 0; i < kChunks; ++i) EXPECT_EQ(store_->GetChunkInfo(master.keys[i])->base, twin.keys[i / 2]);
  ExpectReads(master);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, AMasterWhoseValuesDoNotMatchItsFingerprintsTwinStaysStandalone) {
  MakePolicy({});
  const auto master_bytes = Master(13);
  auto master = WriteTensor(1, "optimizer.pt", DType::kF32, master_bytes);
  // The bf16 tensor starts with the master's values (the fingerprints
  // match) and goes on with other values.
  auto other = RoundedToBf16(Master(14));
  const auto lead = RoundedToBf16(master_bytes);
  for (size_t c = 0; c < other.size(); c += kChunk / 2)
    std::memcpy(&other[c], &lead[c], 2 * kFingerprintElems);
  auto twin = WriteTensor(2, "model.safetensors", DType::kBF16, other);
  policy_->Flush();
  EXPECT_EQ(policy_->counters().pair_later_queued.load(), static_cast<uint64_t>(kChunks));
  EXPECT_EQ(policy_->counters().paired_later.load(), 0u);
  EXPECT_EQ(policy_->counters().pair_refused.load(), static_cast<uint64_t>(kChunks));
  for (const auto& k : master.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  ExpectReads(master);
  ExpectReads(twin);
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, ExplicitBaseDirectoryGivesEveryLaterFileTheSameBase) {
  DeltaOptions o;  // reverse deltas, plus delta_base
  ASSERT_TRUE(ParseDeltaOption("delta_base", "/base-model/", &o).value());
  EXPECT_EQ(o.base_dir, "base-model");
  EXPECT_FALSE(ParseDeltaOption("delta_base", "../x", &o).ok());
  EXPECT_FALSE(ParseDeltaOption("delta_base", "/", &o).ok());
  MakePolicy(o);
  constexpr uint64_t kBaseDir = 77, kRunDir = 5;
  policy_->SetPathResolver([](const std::string& p) -> std::optional<uint64_t> {
    if (p == "base-model") return kBaseDir;
    return std::nullopt;
  });
  // The base model, in the base directory: standalone.
  auto base = WriteFile(1, "model.safetensors", 0, {}, true, kBaseDir);
  for (const auto& k : base.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  // Fine-tuned saves elsewhere, under another name: deltas on the base model
  // (not on each other, and the earlier save is not rebased).
  auto ft1 = WriteFile(2, "ft_step_1.pt", 1, {}, true, kRunDir);
  auto ft2 = WriteFile(3, "ft_step_2.pt", 2, {}, true, kRunDir);
  policy_->Flush();
  for (const auto* w : {&ft1, &ft2}) {
    for (int i = 0; i < kChunks; ++i) {
      auto info = store_->GetChunkInfo(w->keys[i]);
      ASSERT_TRUE(info.ok());
      ASSERT_TRUE(info->base.has_value());
      EXPECT_EQ(*info->base, base.keys[i]);
      EXPECT_EQ(info->delta_depth, 1);
    }
    ExpectReads(*w);
  }
  EXPECT_EQ(policy_->counters().explicit_base.load(), 2u * kChunks);
  EXPECT_EQ(policy_->counters().rebased.load(), 0u);
  // The base model itself stays standalone.
  for (const auto& k : base.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  ExpectFsckClean();
}

TEST_F(DeltaPolicyTest, GcHookRewritesDependantsOfDeadBasesAndReports) {
  MakePolicy(Forward());
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  ASSERT_TRUE(store_->GetChunkInfo(second.keys[0])->base.has_value());
  DeleteFile(1, first);
  std::vector<std::string> events;
  // The files using the re-encoded chunks are told which ones (the mount
  // refreshes their st_blocks); what that returns is reported.
  std::set<store::ChunkKey> told;
  auto hook = control::DeadBaseGcHook([&](const std::vector<store::ChunkKey>& keys) -> Result<uint64_t> {
    told.insert(keys.begin(), keys.end());
    return uint64_t{keys.size() + 1000};
  });
  ASSERT_TRUE(hook(*store_, [&](const std::string& e) { events.push_back(e); }).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().find("\"done\":true"), std::string::npos) << events.back();
  EXPECT_NE(events.back().find("\"rewritten\":" + std::to_string(kChunks)), std::string::npos)
      << events.back();
  EXPECT_NE(events.back().find("\"extents_refreshed\":" + std::to_string(kChunks + 1000)), std::string::npos)
      << events.back();
  EXPECT_EQ(told, std::set<store::ChunkKey>(second.keys.begin(), second.keys.end()));
  // Told: no refresh record stays for a later mount.
  EXPECT_EQ(ReencodeRefreshRecords(), 0u);
  for (const auto& k : first.keys) EXPECT_TRUE(store_->GetChunkInfo(k).status().IsNotFound());
  for (const auto& k : second.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  ExpectReads(second);
  ExpectFsckClean();
}

// A refresh that fails (or a crash before it) leaves a record per
// re-encoded chunk, committed with the rewrite; RefreshLeftOver tells them
// later, then they go.
TEST_F(DeltaPolicyTest, GcRefreshRecordsStayUntilTheFilesAreTold) {
  MakePolicy(Forward());
  auto first = WriteFile(1, "ckpt_step_1.pt", 0);
  auto second = WriteFile(2, "ckpt_step_2.pt", 1);
  DeleteFile(1, first);
  const std::set<store::ChunkKey> want(second.keys.begin(), second.keys.end());
  std::set<store::ChunkKey> told;
  auto failing = [&](const std::vector<store::ChunkKey>& keys) -> Result<uint64_t> {
    told.insert(keys.begin(), keys.end());
    return Status::IOError("refresh failed");
  };
  auto hook = control::DeadBaseGcHook(failing);
  Status st = hook(*store_, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("lmcfs-fsck --repair"), std::string::npos) << st.ToString();
  EXPECT_EQ(told, want);
  EXPECT_EQ(ReencodeRefreshRecords(), static_cast<uint64_t>(kChunks));
  for (const auto& k : second.keys) EXPECT_FALSE(store_->GetChunkInfo(k)->base.has_value());
  // Failing again: the records stay.
  told.clear();
  EXPECT_FALSE(RefreshLeftOver(store_.get(), failing).ok());
  EXPECT_EQ(told, want);
  EXPECT_EQ(ReencodeRefreshRecords(), static_cast<uint64_t>(kChunks));
  // Told: they go, and nothing is told twice.
  told.clear();
  auto ok = [&](const std::vector<store::ChunkKey>& keys) -> Result<uint64_t> {
    told.insert(keys.begin(), keys.end());
    return uint64_t{keys.size()};
  };
  auto n = RefreshLeftOver(store_.get(), ok);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, static_cast<uint64_t>(kChunks));
  EXPECT_EQ(told, want);
  EXPECT_EQ(ReencodeRefreshRecords(), 0u);
  told.clear();
  n = RefreshLeftOver(store_.get(), ok);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(told.empty());
  ExpectReads(second);
  ExpectFsckClean();
}

}  // namespace
}  // namespace lmc::fs
