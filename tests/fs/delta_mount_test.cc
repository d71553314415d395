// Incremental snapshots through a real mount (suites Mount*, label
// integration): a training series written by torch.save and safetensors'
// save_file straight into lmcfs; every file byte-identical (sha256 against
// the same script run in a plain directory) before and after remount and
// after deleting older checkpoints in every order; the delta chain limit
// read back from the store index, with reverse deltas (the default: the
// newest save standalone, older ones re-encoded against it in the
// background) and forward deltas; keep-last-K rotation with gc (dead-base
// rewrite + compaction) between saves reaching a steady state; one tensor
// saved in two formats stored once; checkpoints sharded by rank (a PyTorch
// DCP series from two ranks, Megatron's rank directories), each tensor
// against its own prior version.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "lmc/fs/inspect.h"
#include "lmc/store/extent.h"
#include "lmc/store/store.h"
#include "mount_util.h"

namespace {

namespace fsys = std::filesystem;

// Trains a small MLP with AdamW (lr 1e-4) per SEED and saves, after each
// of STEPS steps, ckpt_step_N.pt (model + optimizer, torch.save) and
// model_step_N.safetensors (save_file) into OUT/s<SEED>/. Deterministic.
constexpr char kTrainScript[] = R"(
import os, sys, torch
from safetensors.torch import save_file
out, steps = sys.argv[1], int(sys.argv[2])
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
for seed in map(int, sys.argv[3:]):
    d = f'{out}/s{seed}'
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for s in range(steps):
        x = torch.randn(64, 256)
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        n = (s + 1) * 100
        torch.save({'model': m.state_dict(), 'optim': opt.state_dict()}, f'{d}/ckpt_step_{n}.pt')
        save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f'{d}/model_step_{n}.safetensors')
)";

// Python prelude of the sharded-save tests: the MLP + AdamW of kTrainScript
// (deterministic per seed), a training step, and rank r's half of a tensor.
constexpr char kShardPrelude[] = R"(
import os, sys, torch
def mlp_and_adamw(seed, blocks=0):
    """An MLP, or with blocks > 0 a stack of that many identical layers."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if blocks:
        m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(blocks)])
    else:
        m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    return m, torch.optim.AdamW(m.parameters(), lr=1e-4)
def train_step(m, opt):
    loss = m(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
def half(t, r):
    f = t.reshape(-1)
    return f[f.numel() * r // 2:f.numel() * (r + 1) // 2].clone()
def saves(m, opt, out, dir_of_step, steps=3):
    """Trains a step, then yields (step, directory made for it), `steps` times."""
    for step in range(1, steps + 1):
        train_step(m, opt)
        d = f'{out}/{dir_of_step(step)}'
        os.makedirs(d, exist_ok=True)
        yield step, d
)";

class MountDeltaTest : public lmc::testing::MountTest {
 protected:
  MountDeltaTest() { options_.mount_options = DeltaOptions(mode_); }

  void SetUp() override {
    if (!PythonHas("torch, safetensors"))
      GTEST_SKIP() << "python3 with torch and safetensors is not installed";
    MountTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    WriteScript("train.py", kTrainScript);
  }

  // Mount options for delta mode MODE ("on": reverse deltas, "forward").
  static std::string DeltaOptions(const std::string& mode) {
    return "delta=" + mode + ",delta_chain=" + std::to_string(kChain);
  }
  // Remounts in delta mode MODE, with EXTRA options after it (",name=value").
  void RemountDelta(const std::string& mode, const std::string& extra = "") {
    mode_ = mode;
    Remount(DeltaOptions(mode) + extra);
  }

  // gc as lmcfs-gc runs it: dead bases re-encoded, then compaction.
  void Gc() {
    Unmount();
    auto s = OpenStore();
    ASSERT_TRUE(s);
    auto r = s->RewriteDeadBases({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    lmc::store::CompactOptions co;
    co.live_fraction_threshold = 0.9;
    ASSERT_TRUE(s->Compact(co).ok());
    ExpectFsckClean(*s);
    s.reset();
    Mount();
  }
  // Series s<seed> for each seed, in the plain directory and on the mount.
  void Train(int steps, const std::string& seeds) {
    for (const std::string& d : {plain_, mnt_})
      ASSERT_EQ(Python(root_ + "/train.py", d + " " + std::to_string(steps) + " " + seeds), 0);
  }

  // Runs `script` (output directory, then `args`) into the mount and into
  // the plain directory; the files must be byte-identical; waits for the
  // rebases.
  void RunInBoth(const std::string& script, const std::string& args = "") {
    const std::string tail = args.empty() ? "" : " " + args;
    ASSERT_EQ(Python(script, mnt_ + tail), 0);
    ASSERT_EQ(Python(script, plain_ + tail), 0);
    ExpectSame("");
    WaitRebases();
  }
  // Reverse deltas at work on a series: every file of `older` (paths in
  // the mount) holds more than a tenth of its stored bytes in delta
  // frames, every file of `newest` none.
  void ExpectDeltaSeries(const std::vector<std::string>& older, const std::vector<std::string>& newest) {
    for (const std::string& f : older)
      EXPECT_GT(Xattr(P(f), "delta_bytes"), Xattr(P(f), "stored_bytes") / 10) << f;
    for (const std::string& f : newest) EXPECT_EQ(Xattr(P(f), "delta_bytes"), 0u) << f;
  }

  // The series test, for delta mode mode_: deletes `deleted` (steps) in
  // every order.
  void SeriesInEveryDeleteOrder(std::vector<int> deleted);

  static constexpr int kChain = 2;
  std::string mode_ = "on";  // the delta mode mounted
};

void MountDeltaTest::SeriesInEveryDeleteOrder(std::vector<int> p) {
  // Six series (one per order of deleting three of four saves).
  std::vector<std::vector<int>> orders;
  std::sort(p.begin(), p.end());
  do orders.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  Train(4, "0 1 2 3 4 5");
  for (size_t o = 0; o < orders.size(); ++o) ExpectSame("s" + std::to_string(o));
  // Observability: with forward deltas the first save is all standalone
  // frames and later ones carry delta frames; with reverse deltas (once the
  // background work is done) the newest is all standalone and the older
  // ones carry delta frames. The split adds up to the stored bytes.
  const bool reverse = mode_ == "on";
  if (reverse) WaitRebases();
  // Series share lineage by file role across directories (s1's first save
  // follows s0's last), so the standalone newest save is the last series'.
  const std::string first = P("s0/ckpt_step_100.pt"), last = P("s5/ckpt_step_400.pt");
  const std::string standalone = reverse ? last : first, delta = reverse ? first : last;
  EXPECT_EQ(Xattr(standalone, "delta_bytes"), 0u);
  EXPECT_GT(Xattr(delta, "delta_bytes"), 0u);
  const uint64_t split = Xattr(delta, "delta_bytes") + Xattr(delta, "standalone_bytes");
  const uint64_t stored = Xattr(delta, "stored_bytes");
  EXPECT_LE(split, stored + 64);  // rounding per extent
  EXPECT_GE(split + 64, stored);
  // A save in the middle is the base of a neighbour's chunks: that is not
  // sharing. What it does share is its model weights (a third of the file:
  // the rest is AdamW's two moments), also in model_step_200.safetensors.
  const std::string mid = P("s0/ckpt_step_200.pt");
  EXPECT_GT(Xattr(mid, "dedup_bytes"), fsys::file_size(mid) / 4);
  EXPECT_LT(Xattr(mid, "dedup_bytes"), fsys::file_size(mid) / 2);

  // The index: deltas were chosen, and no chain is longer than the limit.
  Unmount();
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    uint64_t chunks = 0, deltas = 0;
    int max_depth = 0;
    ASSERT_TRUE(s->Scan(lmc::store::Cf::kExtents, "", [&](std::string_view, std::string_view v) {
                   auto x = lmc::store::DecodeExtent(v);
                   if (!x || x->hole()) return true;
                   auto info = s->GetChunkInfo(x->chunk);
                   EXPECT_TRUE(info.ok());
                   if (!info.ok()) return true;
                   chunks++;
                   if (info->base) deltas++;
                   max_depth = std::max<int>(max_depth, info->delta_depth);
                   // The real chain, base by base.
                   int depth = 0;
                   for (auto b = info->base; b; ++depth) {
                     auto bi = s->GetChunkInfo(*b);
                     EXPECT_TRUE(bi.ok());
                     if (!bi.ok()) break;
                     b = bi->base;
                   }
                   EXPECT_LE(depth, kChain);
                   return true;
                 }).ok());
    EXPECT_GT(chunks, 0u);
    EXPECT_GT(deltas, 0u) << "no chunk was stored as a delta";
    EXPECT_LE(max_depth, kChain);
    ExpectFsckClean(*s);
  }
  Mount();
  for (size_t o = 0; o < orders.size(); ++o) ExpectSame("s" + std::to_string(o));

  // Delete the older saves in each order; what is left stays identical.
  for (size_t o = 0; o < orders.size(); ++o) {
    const std::string sub = "s" + std::to_string(o);
    for (int step : orders[o]) {
      for (const std::string& d : {plain_ + "/" + sub, P(sub)}) {
        ASSERT_EQ(Sh("rm " + d + "/ckpt_step_" + std::to_string(step * 100) + ".pt " + d + "/model_step_" +
                     std::to_string(step * 100) + ".safetensors"),
                  0);
      }
      ExpectSame(sub);
    }
  }
  Gc();
  for (size_t o = 0; o < orders.size(); ++o) ExpectSame("s" + std::to_string(o));
}

// Reverse deltas: older saves depend on newer ones, so deleting the newer
// ones (keeping the first) is the case that leaves dead bases.
TEST_F(MountDeltaTest, MountSeriesIsIdenticalWithinTheChainLimitInEveryDeleteOrder) {
  SeriesInEveryDeleteOrder({2, 3, 4});
}

TEST_F(MountDeltaTest, MountForwardSeriesIsIdenticalWithinTheChainLimitInEveryDeleteOrder) {
  RemountDelta("forward");
  SeriesInEveryDeleteOrder({1, 2, 3});
}

TEST_F(MountDeltaTest, MountKeepLastKRotationWithGcReachesASteadyState) {
  constexpr int kSaves = 8, kKeep = 2;
  // The series, trained once in a plain directory; each save is copied in
  // (cp), the oldest beyond K deleted, then gc runs.
  ASSERT_EQ(Python(root_ + "/train.py", root_ + " " + std::to_string(kSaves) + " 7"), 0);
  const std::string series = root_ + "/s7";
  std::vector<uint64_t> live;
  for (int i = 1; i <= kSaves; ++i) {
    const std::string f = "ckpt_step_" + std::to_string(i * 100) + ".pt";
    ASSERT_EQ(Sh("cp " + series + "/" + f + " " + mnt_ + "/ && cp " + series + "/" + f + " " + plain_ + "/"),
              0);
    if (i > kKeep) {
      const std::string old = "ckpt_step_" + std::to_string((i - kKeep) * 100) + ".pt";
      ASSERT_EQ(Sh("rm " + mnt_ + "/" + old + " " + plain_ + "/" + old), 0);
    }
    Gc();
    ExpectSame("");
    Unmount();
    {
      auto s = OpenStore();
      ASSERT_TRUE(s);
      live.push_back(s->Stats().live_bytes);
    }
    Mount();
  }
  const uint64_t one = fsys::file_size(series + "/ckpt_step_100.pt");
  std::printf("checkpoint %llu bytes; live bytes after each save + gc:",
              static_cast<unsigned long long>(one));
  for (uint64_t l : live) std::printf(" %llu", static_cast<unsigned long long>(l));
  std::printf("\n");
  for (int i = kKeep; i < kSaves; ++i) {
    // Never more than K standalone copies' worth (they compress).
    EXPECT_LE(live[i], kKeep * one) << "save " << i + 1;
  }
  // Steady: the last saves cost no more than the first full rotation.
  EXPECT_LE(live[kSaves - 1], live[kKeep] * 11 / 10);
  EXPECT_LE(live[kSaves - 2], live[kKeep] * 11 / 10);
}

TEST_F(MountDeltaTest, MountSameTensorSavedAsPtAndSafetensorsIsStoredOnce) {
  const std::string script = WriteScript("two.py", R"(
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(3)
t = torch.randn(640 * 1024)  # 2.5 MiB of f32: chunks of 1 MiB, 1 MiB, 0.5 MiB
torch.save(t, sys.argv[1] + '/t.pt')
save_file({'t': t}, sys.argv[1] + '/t.safetensors')
)");
  ASSERT_EQ(Python(script, mnt_), 0);
  ASSERT_EQ(Python(script, plain_), 0);
  ExpectSame("");
  // Every byte of the tensor (2.5 MiB) sits in chunks the other file shares.
  EXPECT_GE(Xattr(P("t.pt"), "dedup_bytes"), 640u * 1024 * 4);
  EXPECT_GE(Xattr(P("t.safetensors"), "dedup_bytes"), 640u * 1024 * 4);
  struct stat a, b;
  ASSERT_EQ(stat(P("t.pt").c_str(), &a), 0);
  ASSERT_EQ(stat(P("t.safetensors").c_str(), &b), 0);
  Unmount();
  auto s = OpenStore();
  ASSERT_TRUE(s);
  auto chunks_of = [&](uint64_t ino) {
    std::set<lmc::store::ChunkKey> keys;
    std::string prefix = lmc::store::ExtentKey(ino, 0).substr(0, 8);
    EXPECT_TRUE(s->Scan(lmc::store::Cf::kExtents, prefix, [&](std::string_view, std::string_view v) {
                   auto x = lmc::store::DecodeExtent(v);
                   if (x && !x->hole()) keys.insert(x->chunk);
                   return true;
                 }).ok());
    return keys;
  };
  auto ka = chunks_of(a.st_ino), kb = chunks_of(b.st_ino);
  std::vector<lmc::store::ChunkKey> shared;
  std::set_intersection(ka.begin(), ka.end(), kb.begin(), kb.end(), std::back_inserter(shared));
  EXPECT_GE(shared.size(), 3u) << "the tensor's three chunks are not shared";
  for (const auto& k : shared) EXPECT_EQ(s->GetChunkInfo(k)->refcount, 2u);
  ExpectFsckClean(*s);
  s.reset();
  Mount();
  ExpectSame("");
}

// PyTorch DCP (torch.distributed.checkpoint) from two ranks (gloo, one
// process each): each save is a directory with a .distcp file a rank (a
// torch.save archive per tensor end to end, each with its storage
// "data/0") and a .metadata. Every tensor must find its own prior version:
// the layout names the n-th archive's storage "<n>:data/0", and the file
// role keeps the rank (__<rank>_0.distcp). With one name for all, each
// tensor's chunk was matched to whichever tensor of its shape came last (a
// weight to an Adam moment), and with one role for both ranks to the other
// rank's shard: older saves kept almost no delta frames.
TEST_F(MountDeltaTest, MountDcpSeriesFindsEachTensorsPriorVersion) {
  const std::string script = WriteScript("dcp.py", std::string(kShardPrelude) + R"(
import os, sys, warnings
warnings.filterwarnings('ignore')
import torch.distributed as dist, torch.multiprocessing as mp
import torch.distributed.checkpoint as dcp
def rank_main(rank, out, rendezvous):
    dist.init_process_group('gloo', init_method='file://' + rendezvous, rank=rank, world_size=2)
    # Both ranks train the same model; each saves its half of every tensor.
    m, opt = mlp_and_adamw(5)
    def shard(name, t):
        return f'{name}.shard{rank}', half(t, rank)
    for step in range(1, 4):
        train_step(m, opt)
        st = dict(shard(f'model.{k}', v) for k, v in m.state_dict().items())
        for i, s in opt.state_dict()['state'].items():
            st.update(shard(f'optim.{i}.{k}', v) for k, v in s.items() if torch.is_tensor(v) and v.dim())
        os.makedirs(f'{out}/step-{step}', exist_ok=True)
        dcp.save(st, checkpoint_id=f'{out}/step-{step}')
    dist.destroy_process_group()
if __name__ == '__main__':  # the ranks import this file
    out, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    rendezvous = os.path.join(scratch, 'rendezvous')
    if os.path.exists(rendezvous):
        os.remove(rendezvous)
    mp.spawn(rank_main, args=(out, rendezvous), nprocs=2)
)");
  ASSERT_EQ(Python(script, mnt_ + " " + root_ + "/dcp-scratch"), 0);
  ASSERT_EQ(Python(script, plain_ + " " + root_ + "/dcp-scratch"), 0);
  WaitRebases();
  // .metadata differs from run to run (a save id); the tensor files may not.
  const std::string load = WriteScript("dcp_load.py", R"(
import sys, warnings
warnings.filterwarnings('ignore')
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
a, b = sys.argv[1], sys.argv[2]
meta = dcp.FileSystemReader(a).read_metadata()
keys = [k for k, v in meta.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)]
assert len(keys) == 24, keys
def load(d):
    st = {k: torch.empty(meta.state_dict_metadata[k].size, dtype=meta.state_dict_metadata[k].properties.dtype)
          for k in keys}
    dcp.load(st, checkpoint_id=d)
    return st
x, y = load(a), load(b)
for k in keys:
    assert torch.equal(x[k], y[k]), k
)");
  const std::vector<std::string> files = {"__0_0.distcp", "__1_0.distcp"};
  auto check = [&] {
    for (int step = 1; step <= 3; ++step) {
      const std::string d = "/step-" + std::to_string(step);
      for (const std::string& f : files)
        EXPECT_EQ(Sh("cmp " + mnt_ + d + "/" + f + " " + plain_ + d + "/" + f), 0) << d << "/" << f;
      EXPECT_EQ(Python(load, mnt_ + d + " " + plain_ + d), 0) << d;
    }
  };
  check();
  // Reverse deltas: the newest save standalone, the older ones in good
  // part delta frames against their successors, each tensor against
  // itself (27% and 63% of their stored bytes here; 0.3-0.4% when all
  // were "data/0", and 0.4% for two of the four when both ranks had one
  // role).
  for (const std::string& f : files) {
    EXPECT_EQ(Xattr(P("step-3/" + f), "delta_bytes"), 0u) << f;
    for (const char* d : {"step-1", "step-2"}) {
      const std::string p = P(std::string(d) + "/" + f);
      EXPECT_GT(Xattr(p, "delta_bytes"), Xattr(p, "stored_bytes") / 10) << d << "/" << f;
    }
  }
  Remount();
  check();
}

// Megatron's legacy layout: iter_<step>/mp_rank_<tp>/model_optim_rng.pt,
// each tensor-parallel rank a shard of every tensor under the same names.
// The rank directory is part of the file role, so each rank's file finds
// its own prior version (with the role "model_optim_rng.pt" for both, each
// rank's tensors were matched to the other rank's, and older saves kept
// 0.1% of their bytes in delta frames).
TEST_F(MountDeltaTest, MountMegatronRankDirectoriesAreRolesOfTheirOwn) {
  const std::string script = WriteScript("megatron.py", std::string(kShardPrelude) + R"(
m, opt = mlp_and_adamw(7)
for step, it in saves(m, opt, sys.argv[1], lambda step: f'iter_{step:07d}'):
    for r in range(2):
        d = f'{it}/mp_rank_{r:02d}'
        os.makedirs(d, exist_ok=True)
        state = {'model': {k: half(v, r) for k, v in m.state_dict().items()},
                 'optimizer': {i: {k: half(v, r) for k, v in s.items() if torch.is_tensor(v) and v.dim()}
                               for i, s in opt.state_dict()['state'].items()},
                 'iteration': step}
        torch.save(state, f'{d}/model_optim_rng.pt')
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
  for (const std::string r : {"/mp_rank_00/model_optim_rng.pt", "/mp_rank_01/model_optim_rng.pt"})
    ExpectDeltaSeries({"iter_0000001" + r, "iter_0000002" + r}, {"iter_0000003" + r});
  Remount();
  ExpectSame("");
}

// Atomic saves: safetensors' save_file writes .tmpXXXXXX and renames it
// over model.safetensors; many training scripts torch.save to NAME.tmp and
// os.replace it. The chunks are written under the temporary name, which
// is no role: their lineage is recorded under the name the file is renamed
// to (with the temporary name, no save of model.safetensors ever found its
// prior version).
TEST_F(MountDeltaTest, MountAtomicSavesFindTheirPriorVersions) {
  const std::string script = WriteScript("atomic.py", std::string(kShardPrelude) + R"(
from safetensors.torch import save_file
m, opt = mlp_and_adamw(3)
for step, d in saves(m, opt, sys.argv[1], lambda step: f'checkpoint-{step}'):
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f'{d}/model.safetensors')
    torch.save(opt.state_dict(), f'{d}/optimizer.pt.tmp')
    os.replace(f'{d}/optimizer.pt.tmp', f'{d}/optimizer.pt')
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
  // (The AdamW moments after one step are not close enough to those after
  // two for a delta: checkpoint-1/optimizer.pt is left out.)
  ExpectDeltaSeries(
      {"checkpoint-1/model.safetensors", "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt"},
      {"checkpoint-3/model.safetensors", "checkpoint-3/optimizer.pt"});
  Remount();
  ExpectSame("");
}

// The Hugging Face Trainer itself: a small GPT-2 trained for six steps,
// a checkpoint every two (model.safetensors by save_pretrained, an atomic
// save; optimizer.pt, scheduler.pt, rng_state.pth by torch.save). Every
// file byte-identical to a plain directory's (but training_args.bin, which
// holds the output path), and the older model files delta frames on their
// successors (0 when their lineage was recorded under the temporary name).
TEST_F(MountDeltaTest, MountHuggingFaceTrainerSeries) {
  if (!PythonHas("transformers, accelerate"))
    GTEST_SKIP() << "transformers and accelerate are not installed (scripts/install-deps.sh installs them)";
  const std::string script = WriteScript("trainer.py", R"(
import os, sys, warnings
warnings.filterwarnings('ignore')
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed
from transformers.utils import logging
logging.set_verbosity_error()
set_seed(5)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64))
g = torch.Generator().manual_seed(5)
data = [{'input_ids': ids, 'labels': ids} for ids in torch.randint(0, 1000, (64, 32), generator=g)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=6, save_steps=2, per_device_train_batch_size=8,
                         learning_rate=1e-4, report_to=[], use_cpu=True, seed=5, data_seed=5, logging_steps=100,
                         disable_tqdm=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=data).train()
)");
  ASSERT_EQ(Python(script, mnt_ + "/out"), 0);
  ASSERT_EQ(Python(script, plain_ + "/out"), 0);
  auto expect_same = [&] {
    for (const char* d : {"checkpoint-2", "checkpoint-4", "checkpoint-6"})
      for (const char* f :
           {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}) {
        const std::string rel = std::string("/out/") + d + "/" + f;
        EXPECT_EQ(Sh("cmp " + mnt_ + rel + " " + plain_ + rel), 0) << rel;
      }
  };
  expect_same();
  WaitRebases();
  ExpectDeltaSeries({"out/checkpoint-2/model.safetensors", "out/checkpoint-4/model.safetensors"},
                    {"out/checkpoint-6/model.safetensors"});
  Remount();
  expect_same();
}

// A chunk that two files share (a copy) and that is then re-encoded as a
// delta through one of them: both files count its new frame. The store
// tells the file whose lineage record names the chunk; the other extents
// are found by a scan of the extents once the rebases are done (without
// it, the copy kept counting the standalone frame: 3,485,600 stored bytes
// against 2,712,593 in its frames), also when the file the copy was made
// from is gone.
TEST_F(MountDeltaTest, MountCopiesOfAReencodedChunkCountItsNewFrame) {
  const std::string script = WriteScript("copies.py", R"(
import os, shutil, sys, torch
from safetensors.torch import save_file
out = sys.argv[1]
torch.manual_seed(1)
w = torch.randn(1024, 1024)
save_file({'w': w}, f'{out}/model-1.safetensors')
shutil.copyfile(f'{out}/model-1.safetensors', f'{out}/copy.safetensors')
w[:16] += 1  # the first 1 MiB chunk changes, the other three stay
save_file({'w': w}, f'{out}/model-2.safetensors')
# The same, with the first save deleted before the second: the copy is the
# chunk's only extent.
v = torch.randn(1024, 1024)
save_file({'v': v}, f'{out}/other-1.safetensors')
shutil.copyfile(f'{out}/other-1.safetensors', f'{out}/kept.safetensors')
os.remove(f'{out}/other-1.safetensors')
v[:16] += 1
save_file({'v': v}, f'{out}/other-2.safetensors')
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
  EXPECT_EQ(Xattr(P("model-2.safetensors"), "delta_bytes"), 0u);
  for (const char* f : {"model-1.safetensors", "copy.safetensors", "kept.safetensors"}) {
    const uint64_t frames = Xattr(P(f), "delta_bytes") + Xattr(P(f), "standalone_bytes");
    EXPECT_GT(Xattr(P(f), "delta_bytes"), 0u) << f;
    EXPECT_LE(Xattr(P(f), "stored_bytes"), frames + 64) << f;  // rounding per extent
    EXPECT_GE(Xattr(P(f), "stored_bytes") + 64, frames) << f;
  }
  EXPECT_EQ(Xattr(P("copy.safetensors"), "stored_bytes"), Xattr(P("model-1.safetensors"), "stored_bytes"));
  Remount();
  EXPECT_EQ(Xattr(P("copy.safetensors"), "stored_bytes"), Xattr(P("model-1.safetensors"), "stored_bytes"));
  ExpectSame("");
}

// The kernel keeps a file's attributes for a second (fuse_ops.h), and a
// rebase shrinks an older save's stored size after its writer is gone:
// the daemon tells the kernel, so that a stat right after the rebase shows
// the new st_blocks. Each older save is stat'ed while the next one is
// still open (its chunks uncommitted, so no rebase has run), then again
// once the rebases are done.
TEST_F(MountDeltaTest, MountStatShowsEachRebaseAtOnce) {
  const std::string script = WriteScript("rebases.py", R"(
import os, sys, time, torch
from safetensors.torch import save
out = sys.argv[1]
try:
    os.getxattr(out, 'user.lmcfs.pending_rebases'); mount = True
except OSError:
    mount = False  # the plain directory: the same files, nothing to check
def stored(p): return int(os.getxattr(p, 'user.lmcfs.stored_bytes'))
def path(v): return f'{out}/model-{v}.safetensors'
torch.manual_seed(3)
w = torch.randn(1024, 1024)
shrunk = 0
for v in range(1, 5):
    w[:16] += 0.5  # the first chunk changes, the other three stay
    with open(path(v), 'wb') as f:
        f.write(save({'w': w}))
        before = [os.stat(path(u)).st_blocks for u in range(1, v)]
    if not mount: continue
    t = time.monotonic()
    while int(os.getxattr(out, 'user.lmcfs.pending_rebases')) and time.monotonic() - t < 60: pass
    for u in range(1, v):
        st = os.stat(path(u))
        assert st.st_blocks == (stored(path(u)) + 511) // 512, (v, u, st.st_blocks, stored(path(u)))
        shrunk += st.st_blocks < before[u - 1]
# Saves 1 and 2 become deltas; 3 stays standalone (delta_chain=2).
assert shrunk == 2 or not mount, f'{shrunk} rebases shrank a file, not 2: the test saw too little'
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
  EXPECT_GT(Xattr(P("model-1.safetensors"), "delta_bytes"), 0u);
}

// Garbage collection re-encodes the chunks of an older save whose delta
// bases a removal left dead; their frames grow, and the files' stored
// bytes must follow: st_blocks (what du adds up) must equal what
// lmcfs-stat computes from the chunk index. Three saves of a tensor whose
// first chunk changes each time: saves 1 and 2 hold that chunk as a delta
// on the next save's (delta_chain=2).
class MountDeltaGcTest : public MountDeltaTest {
 protected:
  void SetUp() override {
    MountDeltaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    options_.wait_for_control_socket = true;
    RemountDelta(mode_, ExtraOptions());
    const std::string script = WriteScript("saves.py", R"(
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(5)
w = torch.randn(1024, 1024)
for v in range(1, 4):
    w[:16] += 0.5  # the first chunk changes, the other three stay
    save_file({'w': w}, f'{sys.argv[1]}/model-{v}.safetensors')
)");
    ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
    ASSERT_GT(Xattr(P("model-2.safetensors"), "delta_bytes"), 0u);
    ASSERT_GT(Xattr(P("model-1.safetensors"), "delta_bytes"), 0u);
    ASSERT_NO_FATAL_FAILURE(
        ExpectDuFollows({"model-1.safetensors", "model-2.safetensors", "model-3.safetensors"}));
  }
  virtual std::string ExtraOptions() const = 0;

  // Runs a tool; returns its output (stdout and stderr).
  std::string Tool(const std::string& name, const std::string& args) {
    const std::string out = root_ + "/tool.out";
    EXPECT_EQ(Sh(std::string(LMC_TOOLS_BIN_DIR) + "/" + name + " " + args + " >" + out + " 2>&1"), 0)
        << ReadFile(out);
    return ReadFile(out);
  }
  // Each file's st_blocks and stored_bytes against the chunk index, as
  // lmcfs-stat sees it.
  void ExpectDuFollows(const std::vector<std::string>& files) {
    nlohmann::json j = nlohmann::json::parse(Tool("lmcfs-stat", mnt_ + " --json"), nullptr, false);
    ASSERT_TRUE(j.is_object());
    std::map<std::string, uint64_t> stored;
    for (const auto& e : j["entries"]) stored[e["path"].get<std::string>()] = e["stored"].get<uint64_t>();
    for (const std::string& f : files) {
      struct stat st;
      ASSERT_EQ(stat(P(f).c_str(), &st), 0) << f;
      EXPECT_EQ(static_cast<uint64_t>(st.st_blocks), (stored["/" + f] + 511) / 512) << f;
      EXPECT_EQ(Xattr(P(f), "stored_bytes"), stored["/" + f]) << f;
    }
  }
  uint64_t Blocks(const std::string& f) {
    struct stat st;
    EXPECT_EQ(stat(P(f).c_str(), &st), 0) << f;
    return static_cast<uint64_t>(st.st_blocks);
  }
  void Remove(const std::string& f) { ASSERT_EQ(Sh("rm " + P(f) + " " + plain_ + "/" + f), 0); }
};

// Only the explicit runs re-encode.
class MountDeltaExplicitGcTest : public MountDeltaGcTest {
  std::string ExtraOptions() const override { return ",gc=off"; }
};

// lmcfs-gc on the mountpoint (the daemon refreshes its inodes and tells
// the kernel), then on the unmounted store (the tool rewrites the records).
TEST_F(MountDeltaExplicitGcTest, MountDuFollowsGcReencodingOlderSaves) {
  // Online: model-3's changed chunk is now only model-2's delta base.
  uint64_t before = Blocks("model-2.safetensors");
  Remove("model-3.safetensors");
  Tool("lmcfs-gc", mnt_);
  EXPECT_EQ(Xattr(P("model-2.safetensors"), "delta_bytes"), 0u);
  EXPECT_GT(Blocks("model-2.safetensors"), before)
      << "the re-encoded chunk did not grow: the test saw nothing";
  ExpectDuFollows({"model-1.safetensors", "model-2.safetensors"});

  // Offline: model-2's changed chunk is now only model-1's delta base.
  before = Blocks("model-1.safetensors");
  Remove("model-2.safetensors");
  Unmount();
  Tool("lmcfs-gc", store_);
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    ExpectFsckClean(*s);
  }
  Mount();
  EXPECT_EQ(Xattr(P("model-1.safetensors"), "delta_bytes"), 0u);
  EXPECT_GT(Blocks("model-1.safetensors"), before)
      << "the re-encoded chunk did not grow: the test saw nothing";
  ExpectDuFollows({"model-1.safetensors"});
  ExpectSame("");
}

// A gc cut short between its rewrite's commit and the refresh (a crash):
// the refresh records it left make the next mount refresh those files, or
// lmcfs-gc on the unmounted store; they go once it has.
TEST_F(MountDeltaExplicitGcTest, TheFilesACrashedGcLeftStaleAreRefreshedNextTime) {
  auto records = [](lmc::store::Store& s) {
    uint64_t n = 0;
    EXPECT_TRUE(s.Scan(lmc::store::Cf::kMeta, "reencode-refresh/", [&](std::string_view, std::string_view) {
                   n++;
                   return true;
                 }).ok());
    return n;
  };
  // The rewrite commits; the refresh never happens. `stale` is the file
  // left with its old stored size.
  auto crashed_gc = [&](const std::string& stale) {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    auto run = lmc::fs::RewriteDeadBasesRefreshing(
        s.get(),
        [](const std::vector<lmc::store::ChunkKey>&) -> lmc::Result<uint64_t> {
          return lmc::Status::IOError("crash");
        },
        nullptr);
    ASSERT_TRUE(run.report.ok()) << run.report.status().ToString();
    ASSERT_GT(run.report->rewritten, 0u);
    EXPECT_FALSE(run.refreshed.ok());
    EXPECT_EQ(records(*s), run.report->rewritten);
    auto tree = lmc::fs::CheckTree(s.get());
    ASSERT_TRUE(tree.ok());
    ASSERT_EQ(tree->stale_stored.size(), 1u);
    EXPECT_EQ(tree->stale_stored[0].path, "/" + stale);
  };
  auto expect_done = [&] {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    EXPECT_EQ(records(*s), 0u);
    auto tree = lmc::fs::CheckTree(s.get());
    ASSERT_TRUE(tree.ok());
    EXPECT_TRUE(tree->stale_stored.empty());
    ExpectFsckClean(*s);
  };
  // The next mount refreshes model-2 (model-3 held its delta base).
  uint64_t before = Blocks("model-2.safetensors");
  Remove("model-3.safetensors");
  Unmount();
  ASSERT_NO_FATAL_FAILURE(crashed_gc("model-2.safetensors"));
  Mount();
  EXPECT_EQ(Xattr(P("model-2.safetensors"), "delta_bytes"), 0u);
  EXPECT_GT(Blocks("model-2.safetensors"), before) << "the mount did not refresh what the gc left";
  ExpectDuFollows({"model-1.safetensors", "model-2.safetensors"});
  Unmount();
  expect_done();
  // lmcfs-gc on the unmounted store refreshes model-1 (model-2 held its base).
  Mount();
  before = Blocks("model-1.safetensors");
  Remove("model-2.safetensors");
  Unmount();
  ASSERT_NO_FATAL_FAILURE(crashed_gc("model-1.safetensors"));
  Tool("lmcfs-gc", store_);
  expect_done();
  Mount();
  EXPECT_GT(Blocks("model-1.safetensors"), before) << "lmcfs-gc did not refresh what the gc left";
  ExpectDuFollows({"model-1.safetensors"});
  ExpectSame("");
}

// The daemon's own reclamation (gc=auto, the default) does the same when
// the mount goes idle after a removal.
class MountDeltaAutoGcTest : public MountDeltaGcTest {
  std::string ExtraOptions() const override { return ""; }
};

TEST_F(MountDeltaAutoGcTest, MountDuFollowsReclamationReencodingOlderSaves) {
  const uint64_t before = Blocks("model-2.safetensors");
  Remove("model-3.safetensors");
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return Xattr(P("model-2.safetensors"), "delta_bytes") == 0; },
                                      std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << "the idle mount did not re-encode model-2's delta within 60 s";
  EXPECT_GT(Blocks("model-2.safetensors"), before)
      << "the re-encoded chunk did not grow: the test saw nothing";
  ExpectDuFollows({"model-1.safetensors", "model-2.safetensors"});
  ExpectSame("");
}

// DeepSpeed itself (PyPI's deepspeed on its CPU accelerator, gloo): a
// pipeline of identical blocks (PipelineModule; GPT-NeoX and
// Megatron-DeepSpeed train this way) with ZeRO stage 1 saves three
// checkpoints, global_step<N>/layer_<idx>-model_states.pt a layer, each
// with the same tensor names and shapes, then ds_to_universal turns each
// into a universal checkpoint, <dir>/zero/<parameter>/{fp32,exp_avg,
// exp_avg_sq,step}.pt: the same four names for every parameter. The layer
// number and the parameter's directory are part of the file role, so each
// file finds its own prior version (with the roles layer_#-model_states.pt
// and fp#.pt every file was matched to another layer's, and no older file
// held a delta frame).
TEST_F(MountDeltaTest, MountDeepSpeedPipelineAndUniversalCheckpoints) {
  if (!PythonHas("deepspeed"))
    GTEST_SKIP() << "deepspeed is not installed (scripts/install-deps.sh installs it)";
  const std::string script = WriteScript("deepspeed_run.py", R"(
import contextlib, io, os, sys, warnings
warnings.filterwarnings('ignore')
out, scratch = sys.argv[1], sys.argv[2]
os.makedirs(scratch, exist_ok=True)
rendezvous = os.path.join(scratch, 'rendezvous')
if os.path.exists(rendezvous):
    os.remove(rendezvous)
# One process; DeepSpeed wants the launcher's variables (the rendezvous is a
# file: the port is never opened).
os.environ.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', LOCAL_WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',
                  MASTER_PORT='29500')
import torch, deepspeed
from deepspeed.checkpoint import ds_to_universal
from deepspeed.pipe import PipelineModule, LayerSpec
torch.manual_seed(9)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
deepspeed.init_distributed(dist_backend='gloo', init_method='file://' + rendezvous, rank=0, world_size=1)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)
    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))
net = PipelineModule(layers=[LayerSpec(Block) for _ in range(3)], num_stages=1,
                     loss_fn=lambda y, t: (y - t).pow(2).mean())
cfg = {'train_batch_size': 8, 'train_micro_batch_size_per_gpu': 8, 'steps_per_print': 10**6,
       'optimizer': {'type': 'AdamW', 'params': {'lr': 1e-4}}, 'zero_optimization': {'stage': 1}}
engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
def batches():
    while True:
        x = torch.randn(8, 256)
        yield x, x * 0.5
it = batches()
for step in range(1, 4):
    engine.train_batch(data_iter=it)
    tag = f'global_step{step}'
    # ds_to_universal needs this state, which Megatron-DeepSpeed writes.
    engine.save_checkpoint(out, tag=tag, client_state={'universal_checkpoint_info': {'universal_checkpoint_version': 0.4}})
    sys.argv = ['ds_to_universal', '--input_folder', f'{out}/{tag}', '--output_folder', f'{out}/{tag}_universal',
                '--num_extract_workers', '1', '--num_merge_workers', '1']
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        ds_to_universal.main(ds_to_universal.parse_arguments())
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script, root_ + "/ds-scratch"));
  std::vector<std::string> roles;
  for (int layer = 0; layer < 3; ++layer) {
    roles.push_back("/layer_0" + std::to_string(layer) + "-model_states.pt");
    // The weights' fp32 copies (after one step the first moments are not
    // close enough to the next ones for a delta).
    for (const char* fc : {".fc1.weight", ".fc2.weight"})
      roles.push_back("_universal/zero/" + std::to_string(layer) + fc + "/fp32.pt");
  }
  for (const std::string& f : roles)
    ExpectDeltaSeries({"global_step1" + f, "global_step2" + f}, {"global_step3" + f});
  Remount();
  ExpectSame("");
}

// DeepSpeed's pipeline files name the tensor-parallel rank too,
// layer_<idx>-model_<tp>-model_states.pt, each rank a shard of the layer's
// tensors under the same names: every digit of the name is kept.
TEST_F(MountDeltaTest, MountDeepSpeedTensorParallelLayerFilesAreRolesOfTheirOwn) {
  const std::string script = WriteScript("deepspeed_tp.py", std::string(kShardPrelude) + R"(
m, opt = mlp_and_adamw(9, blocks=3)
for step, d in saves(m, opt, sys.argv[1], lambda step: f'global_step{step}'):
    for i, layer in enumerate(m):
        for tp in range(2):
            torch.save({k: half(v, tp) for k, v in layer.state_dict().items()},
                       f'{d}/layer_{i + 1:02d}-model_{tp:02d}-model_states.pt')
)");
  ASSERT_NO_FATAL_FAILURE(RunInBoth(script));
  for (int layer = 1; layer <= 3; ++layer) {
    for (int tp = 0; tp < 2; ++tp) {
      const std::string f =
          "/layer_0" + std::to_string(layer) + "-model_0" + std::to_string(tp) + "-model_states.pt";
      ExpectDeltaSeries({"global_step1" + f, "global_step2" + f}, {"global_step3" + f});
    }
  }
}

TEST_F(MountDeltaTest, MountExplicitBaseDirectoryIsTheBaseOfFineTunedSaves) {
  RemountDelta("on", ",delta_base=base");
  const std::string script = WriteScript("finetune.py", R"(
import os, sys, torch
from safetensors.torch import save_file
out = sys.argv[1]
os.makedirs(out + '/base', exist_ok=True)
os.makedirs(out + '/run', exist_ok=True)
torch.manual_seed(11)
torch.use_deterministic_algorithms(True)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
save_file({k: v.contiguous() for k, v in m.state_dict().items()}, out + '/base/model.safetensors')
opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
for s in range(1, 3):
    loss = m(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f'{out}/run/finetuned-{s}.safetensors')
)");
  ASSERT_EQ(Python(script, mnt_), 0);
  ASSERT_EQ(Python(script, plain_), 0);
  ExpectSame("");
  WaitRebases();
  // The fine-tuned saves share no file role with the base model: only the
  // explicit base directory makes them deltas, all against the base model.
  EXPECT_EQ(Xattr(P("base/model.safetensors"), "delta_bytes"), 0u);
  for (const char* f : {"/run/finetuned-1.safetensors", "/run/finetuned-2.safetensors"}) {
    EXPECT_GT(Xattr(mnt_ + f, "delta_bytes"), Xattr(mnt_ + f, "stored_bytes") / 2) << f;
  }
  Unmount();
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    int max_depth = 0;
    ASSERT_TRUE(s->Scan(lmc::store::Cf::kExtents, "", [&](std::string_view, std::string_view v) {
                   auto x = lmc::store::DecodeExtent(v);
                   if (x && !x->hole())
                     max_depth = std::max<int>(max_depth, s->GetChunkInfo(x->chunk)->delta_depth);
                   return true;
                 }).ok());
    EXPECT_EQ(max_depth, 1) << "every delta is against the base model";
    ExpectFsckClean(*s);
  }
  Mount();
  ExpectSame("");
}

}  // namespace
