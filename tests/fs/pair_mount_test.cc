// fp32 masters stored against their bf16 twins through a real mount (suite
// Mount*, label integration; docs/ARCHITECTURE.md, "Pairing fp32 masters
// with their bf16 twins"). A small MLP trained with AdamW is saved the way
// mixed-precision trainers save: one torch.save of {bf16 model, fp32
// master, AdamW state}, and the same tensors split over model.safetensors
// (bf16) and optimizer.pt (fp32 master + AdamW), in either order. With
// pair=on each stores
// less than with pair=off; every file is byte-identical to the same save
// in a plain directory, after a remount, after deleting the bf16 twin, and
// after gc re-encodes what depended on it; fsck finds the store clean.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "lmc/fs/control.h"
#include "mount_util.h"

namespace {

namespace fsys = std::filesystem;

constexpr char kPairSaveScript[] = R"(
import os, sys, torch
from safetensors.torch import save_file
out = sys.argv[1]
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
for _ in range(3):
    loss = m(torch.randn(32, 512)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
bf16 = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()}
master = [p.detach().clone() for p in m.parameters()]
if sys.argv[2:] == ['optimizer_first']:
    os.makedirs(f'{out}/rev', exist_ok=True)
    torch.save({'fp32_from_fp16_params': master, 'state': opt.state_dict()}, f'{out}/rev/optimizer.pt')
    save_file(bf16, f'{out}/rev/model.safetensors')
    sys.exit(0)
torch.save({'model': bf16, 'optimizer': {'fp32_from_fp16_params': master, 'state': opt.state_dict()}},
           f'{out}/model_optim_rng.pt')
os.makedirs(f'{out}/split', exist_ok=True)
save_file(bf16, f'{out}/split/model.safetensors')
torch.save({'fp32_from_fp16_params': master, 'state': opt.state_dict()}, f'{out}/split/optimizer.pt')
)";

class MountPair : public lmc::testing::MountTest {
 protected:
  MountPair() {
    options_.mount_in_setup = false;
    options_.wait_for_control_socket = true;
  }

  // A number of lmcfs-stat's JSON (the first "key": value).
  uint64_t StatNumber(const std::string& key) {
    std::string stat;
    EXPECT_TRUE(
        lmc::fs::control::Call(lmc::fs::control::SocketPath(store_), R"({"op":"stat"})", {}, &stat).ok());
    const std::string k = "\"" + key + "\":";
    const size_t at = stat.find(k);
    return at == std::string::npos ? 0 : std::stoull(stat.substr(at + k.size()));
  }
  // The daemon's "paired" counter (daemon.delta.paired).
  uint64_t PairedCounter() { return StatNumber("paired"); }
  // The root's saved_derived (the first entry is the root).
  uint64_t SavedDerived() { return StatNumber("saved_derived"); }
  // Waits (up to a minute) until the daemon's background rebases are done.
  void WaitForRebases() {
    for (int i = 0; i < 600 && StatNumber("rebase_pending") > 0; ++i) usleep(100 * 1000);
    EXPECT_EQ(StatNumber("rebase_pending"), 0u);
  }

  void SetUp() override {
    if (!PythonHas("torch, safetensors"))
      GTEST_SKIP() << "python3 with torch and safetensors is not installed";
    MountTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    script_ = WriteScript("save.py", kPairSaveScript);
    ASSERT_EQ(Python(script_, plain_), 0);
  }

  // Saves into a fresh store mounted with `options`; the stored bytes of
  // the single-file save and of the split one.
  std::pair<uint64_t, uint64_t> SaveWith(const std::string& options) {
    if (IsMounted(mnt_)) Unmount();
    fsys::remove_all(store_);
    options_.mount_options = options;
    Mount();
    EXPECT_EQ(Python(script_, mnt_), 0);
    ExpectSame("");
    return {
        Xattr(P("model_optim_rng.pt"), "stored_bytes"),
        Xattr(P("split/model.safetensors"), "stored_bytes") + Xattr(P("split/optimizer.pt"), "stored_bytes")};
  }

  std::string script_;
};

TEST_F(MountPair, MastersCostLessWithTheirTwinsAndSurviveTheirDeletion) {
  const auto [one_off, split_off] = SaveWith("pair=off");
  EXPECT_EQ(Xattr(P("split/optimizer.pt"), "derived_bytes"), 0u);
  // gc=off: the masters' dead bases are rewritten below, offline; the
  // daemon's background reclamation would do it first on a slow run (TSan).
  const auto [one_on, split_on] = SaveWith("pair=on,gc=off");
  // The masters' frames are their own category of stored bytes, in the
  // xattrs and in lmcfs-stat's savings.
  const uint64_t derived = Xattr(P("split/optimizer.pt"), "derived_bytes");
  EXPECT_GT(derived, 0u);
  EXPECT_LE(derived, Xattr(P("split/optimizer.pt"), "delta_bytes"));
  EXPECT_GT(SavedDerived(), 0u);
  EXPECT_GE(PairedCounter(), 4u);  // the two weight matrices' masters, at least
  // The fp32 master (a quarter of the bytes) costs about two thirds of
  // what it cost alone: at least 5% of the whole save.
  EXPECT_LT(one_on, one_off * 95 / 100) << one_on << " vs " << one_off;
  EXPECT_LT(split_on, split_off * 95 / 100) << split_on << " vs " << split_off;
  EXPECT_GT(Xattr(P("split/optimizer.pt"), "delta_bytes"), 0u);

  Remount();
  ExpectSame("");
  // The bf16 twins go (both files hold them: they are shared chunks): the
  // masters still read back, also after gc has re-encoded them standalone
  // and compacted.
  ASSERT_EQ(Sh("rm " + P("split/model.safetensors") + " " + P("model_optim_rng.pt")), 0);
  EXPECT_TRUE(FileEquals(P("split/optimizer.pt"), ReadFile(plain_ + "/split/optimizer.pt")));
  Unmount();
  {
    auto s = OpenStore();
    ASSERT_TRUE(s);
    auto r = s->RewriteDeadBases({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->rewritten, 0u);
    lmc::store::CompactOptions co;
    co.live_fraction_threshold = 0.9;
    ASSERT_TRUE(s->Compact(co).ok());
    ExpectFsckClean(*s);
  }
  Mount();
  EXPECT_TRUE(FileEquals(P("split/optimizer.pt"), ReadFile(plain_ + "/split/optimizer.pt")));
  EXPECT_EQ(Xattr(P("split/optimizer.pt"), "delta_bytes"), 0u);
}

// optimizer.pt first, model.safetensors after it: the masters are stored
// alone, then re-encoded against their twins once those are written.
TEST_F(MountPair, MastersWrittenBeforeTheirTwinsAreReencodedAgainstThem) {
  ASSERT_EQ(Python(script_, plain_ + " optimizer_first"), 0);
  auto save = [&](const std::string& options) {
    if (IsMounted(mnt_)) Unmount();
    fsys::remove_all(store_);
    options_.mount_options = options;
    Mount();
    EXPECT_EQ(Python(script_, mnt_ + " optimizer_first"), 0);
    WaitForRebases();
    ExpectSame("rev");
    return Xattr(P("rev/optimizer.pt"), "stored_bytes") + Xattr(P("rev/model.safetensors"), "stored_bytes");
  };
  const uint64_t off = save("pair=off");
  EXPECT_EQ(StatNumber("paired_later"), 0u);
  const uint64_t on = save("pair=on,gc=off");
  EXPECT_EQ(PairedCounter(), 0u);             // nothing was paired as it was written
  EXPECT_GE(StatNumber("paired_later"), 4u);  // the two weight matrices' masters, at least
  const uint64_t derived = Xattr(P("rev/optimizer.pt"), "derived_bytes");
  EXPECT_GT(derived, 0u);
  EXPECT_LE(derived, Xattr(P("rev/optimizer.pt"), "delta_bytes"));
  EXPECT_LT(on, off * 95 / 100) << on << " vs " << off;

  Remount();
  ExpectSame("rev");
  // Either twin may go: the master (the bf16 model stays whole), then the
  // model. (Deleting the twin that masters depend on: the test above.)
  ASSERT_EQ(Sh("rm " + P("rev/optimizer.pt")), 0);
  EXPECT_TRUE(FileEquals(P("rev/model.safetensors"), ReadFile(plain_ + "/rev/model.safetensors")));
  Remount();
  EXPECT_TRUE(FileEquals(P("rev/model.safetensors"), ReadFile(plain_ + "/rev/model.safetensors")));
  Unmount();
  auto s = OpenStore();
  ASSERT_TRUE(s);
  ExpectFsckClean(*s);
}

}  // namespace
