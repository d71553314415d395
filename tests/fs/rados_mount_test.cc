// A store in Ceph RADOS through real mounts (suite RadosMount, label ceph:
// the single-host cluster of scripts/ceph-dev.sh; skips without one).
// Node A mounts rados:lmcfs/NAME and PyTorch saves checkpoints into it with
// fsync; node A's daemon is killed (kill -9, as a node dies); node B (its
// own local index directory) is refused while A's lease lives, then takes
// the store over with -o takeover: every fsync'd file reads back
// byte-identical there, lmcfs-fsck finds the store clean, and lmcfs-stat
// reads it by its name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lmc/store/rados.h"
#include "mount_util.h"

namespace {

using lmc::testing::IsLmcfsMounted;
using lmc::testing::Shell;
using lmc::testing::StartMount;
using lmc::testing::StopMount;

constexpr char kRadosSaveScript[] = R"(
import os, sys, torch
torch.manual_seed(3)
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
for step in (10, 20, 30):
    loss = m(torch.randn(32, 512)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    for d in sys.argv[1:]:
        p = f'{d}/ckpt_{step}.pt'
        with open(p, 'wb') as f:
            torch.save({'model': m.state_dict(), 'optim': opt.state_dict(), 'step': step}, f)
            f.flush(); os.fsync(f.fileno())
)";

class RadosMount : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = lmc::testing::NoCephCluster(); !why.empty()) GTEST_SKIP() << why;
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not available";
    if (Shell("python3 -c 'import torch' 2>/dev/null") != 0) GTEST_SKIP() << "python3 with torch is missing";
    std::string tmpl = "/tmp/lmcfs_RadosMount_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    ns_ = "mnt-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}() % 100000);
    store_ = "rados:lmcfs/" + ns_;
    for (const char* d : {"a", "b", "plain", "mnt_a", "mnt_b"})
      std::filesystem::create_directories(root_ + "/" + d);
  }
  void TearDown() override {
    if (root_.empty()) return;
    for (auto& [mnt, pid] : {std::pair{root_ + "/mnt_a", pid_a_}, std::pair{root_ + "/mnt_b", pid_b_}}) {
      if (pid > 0) {
        Shell("fusermount3 -u -z " + mnt + " 2>/dev/null");
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    if (HasFailure()) Shell("tail -n 25 " + root_ + "/log_a " + root_ + "/log_b >&2");
    for (const std::string& ns : union_stores_.empty() ? std::vector<std::string>{ns_} : union_stores_) {
      Shell("rados -p lmcfs -N " + ns + " ls 2>/dev/null | while read -r o; do rados -p lmcfs -N " + ns +
            " rm \"$o\"; done");
      std::error_code ec2;
      std::filesystem::remove_all(lmc::store::LocalDirOf("rados:lmcfs/" + ns), ec2);
    }
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
    std::filesystem::remove_all(lmc::store::LocalDirOf(store_), ec);  // the tools' local index
  }
  std::string Options(const std::string& node, const std::string& extra = "") const {
    std::string o =
        "log_file=" + root_ + "/log_" + node + ",log_level=info,lease=4,local_dir=" + root_ + "/" + node;
    return extra.empty() ? o : o + "," + extra;
  }

  // Nodes A and B mount the union of stores NS-a and NS-b at mnt_a and
  // mnt_b, each writing its own (A first).
  void MountUnion() {
    const std::string a = ns_ + "-a", b = ns_ + "-b";
    const std::string spec = "rados:lmcfs/" + a + "," + b;
    union_stores_ = {a, b};
    pid_a_ = StartMount(LMC_MOUNT_BIN, spec, root_ + "/mnt_a", Options("a", "rw=" + a));
    ASSERT_GT(pid_a_, 0);
    pid_b_ = StartMount(LMC_MOUNT_BIN, spec, root_ + "/mnt_b", Options("b", "rw=" + b));
    ASSERT_GT(pid_b_, 0);
  }

  // Node B mounts the store read-write (with `writer_options`), then node
  // A follows it (a read-only mount).
  void MountWriterAndFollower(const std::string& writer_options = "") {
    pid_b_ = StartMount(LMC_MOUNT_BIN, store_, root_ + "/mnt_b", Options("b", writer_options));
    ASSERT_GT(pid_b_, 0);
    pid_a_ = StartMount(LMC_MOUNT_BIN, store_, root_ + "/mnt_a", Options("a", "ro"));
    ASSERT_GT(pid_a_, 0);
  }

  // Writes a Python script into the test's directory; returns its path.
  std::string Script(const std::string& name, const char* text) {
    const std::string path = root_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    EXPECT_TRUE(f) << path;
    if (f) {
      std::fputs(text, f);
      std::fclose(f);
    }
    return path;
  }
  // Unmounts both nodes' mounts (each flushes and closes its stores).
  void StopBoth() {
    StopMount(root_ + "/mnt_a", pid_a_);
    pid_a_ = -1;
    StopMount(root_ + "/mnt_b", pid_b_);
    pid_b_ = -1;
  }

  std::string root_, ns_, store_;
  pid_t pid_a_ = -1, pid_b_ = -1;
  std::vector<std::string> union_stores_;  // the stores a union test made
};

TEST_F(RadosMount, NodeKilledMidSeriesAnotherTakesOverByteIdentical) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b", plain = root_ + "/plain";
  pid_a_ = StartMount(LMC_MOUNT_BIN, store_, mnt_a, Options("a"));
  ASSERT_GT(pid_a_, 0);
  const std::string script = Script("save.py", kRadosSaveScript);
  ASSERT_EQ(Shell("python3 " + script + " " + mnt_a + " " + plain), 0);
  ASSERT_EQ(Shell("head -c 3000000 /dev/urandom > " + plain + "/random.bin && cp " + plain + "/random.bin " +
                  mnt_a + "/ && sync " + mnt_a + "/random.bin"),
            0);
  // Node A dies: its daemon is killed, nothing is flushed or unlocked.
  kill(pid_a_, SIGKILL);
  waitpid(pid_a_, nullptr, 0);
  pid_a_ = -1;
  Shell("fusermount3 -u -z " + mnt_a + " 2>/dev/null");

  // Without takeover node B is refused, naming the holder.
  const std::string refused = root_ + "/refused.txt";
  EXPECT_NE(Shell(std::string(LMC_MOUNT_BIN) + " " + store_ + " " + mnt_b + " -o " + Options("b") + " 2>" +
                  refused),
            0);
  EXPECT_EQ(Shell("grep -q 'held by' " + refused), 0) << "the refusal names the holder";
  EXPECT_EQ(Shell("grep -q takeover " + refused), 0) << "the refusal says what to do";

  const auto t0 = std::chrono::steady_clock::now();
  pid_b_ = StartMount(LMC_MOUNT_BIN, store_, mnt_b, Options("b", "takeover"));
  ASSERT_GT(pid_b_, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("takeover: %.2f s (lease 4 s)\n", took);
  for (const char* f : {"ckpt_10.pt", "ckpt_20.pt", "ckpt_30.pt", "random.bin"})
    EXPECT_EQ(Shell("cmp " + plain + "/" + f + " " + mnt_b + "/" + f), 0) << f << " after the takeover";
  // The checkpoint loads with torch on the new node.
  EXPECT_EQ(Shell("python3 -c \"import torch; assert torch.load('" + mnt_b + "/ckpt_30.pt')['step'] == 30\""),
            0);
  EXPECT_EQ(Shell("grep -q 'fenced the previous holder' " + root_ + "/log_b"), 0) << "node A was fenced";
  StopMount(mnt_b, pid_b_);
  pid_b_ = -1;
  const std::string tools = LMC_TOOLS_BIN_DIR;
  EXPECT_EQ(Shell(tools + "/lmcfs-fsck " + store_), 0);
  EXPECT_EQ(Shell(tools + "/lmcfs-stat " + store_ + " > " + root_ + "/stat.txt"), 0);
}

// Two nodes, each writing its own store and seeing the other's through a
// union: ranks write their shards of one checkpoint into the same
// directory on different nodes; each node lists and reads both within a
// second of the other's fsync, byte-identical; the other node's files are
// read-only here; a name both hold shows the local node's file and is
// reported on the root's user.lmcfs.union.
TEST_F(RadosMount, UnionShowsEveryNodesShardsWithinASecond) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b", plain = root_ + "/plain";
  const std::string a = ns_ + "-a", b = ns_ + "-b";
  // Node A mounts before B's store exists: B joins A's union when it appears.
  MountUnion();
  if (HasFatalFailure()) return;
  const std::string script = Script("shard.py", R"(
import os, sys, torch
rank, out, plain = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(rank)
m = torch.nn.Linear(1024, 1024)
for d in (out, plain):
    os.makedirs(f'{d}/step100', exist_ok=True)
    p = f'{d}/step100/rank{rank}.pt'
    with open(p, 'wb') as f:
        torch.save(m.state_dict(), f)
        f.flush(); os.fsync(f.fileno())
)");
  ASSERT_EQ(Shell("python3 " + script + " 0 " + mnt_a + " " + plain), 0);
  ASSERT_EQ(Shell("python3 " + script + " 1 " + mnt_b + " " + plain), 0);
  // Node A sees rank 1's shard (written on B), and a file B closes now
  // within a second of its fsync.
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return std::filesystem::exists(mnt_a + "/step100/rank1.pt"); },
                                      std::chrono::seconds(5), std::chrono::milliseconds(20)))
      << "node A does not see node B's shard after 5 s";
  ASSERT_EQ(Shell("echo done > " + mnt_b + "/step100/done && sync " + mnt_b + "/step100/done"), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const bool seen = lmc::testing::WaitUntil(
      [&] { return Shell("grep -qx done " + mnt_a + "/step100/done 2>/dev/null") == 0; },
      std::chrono::seconds(5), std::chrono::milliseconds(10));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(seen) << "node A does not see a file node B closed after 5 s";
  std::printf("node A read a file node B closed %.0f ms after its fsync\n", ms);
  // Within a second (the follower's poll) plus slack for a loaded machine.
  EXPECT_LT(ms, 1500) << "seen later than a second";
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return std::filesystem::exists(mnt_b + "/step100/rank0.pt"); },
                                      std::chrono::seconds(5), std::chrono::milliseconds(20)));
  for (const std::string& m : {mnt_a, mnt_b})
    for (const char* f : {"step100/rank0.pt", "step100/rank1.pt"})
      EXPECT_EQ(Shell("cmp " + plain + "/" + f + " " + m + "/" + f), 0) << m << "/" + std::string(f);
  EXPECT_EQ(Shell("ls " + mnt_a + "/step100 | wc -l | grep -qx 3"), 0);
  // B's file is read-only on A; A's own can be removed there.
  EXPECT_NE(Shell("rm " + mnt_a + "/step100/rank1.pt 2>/dev/null"), 0);
  EXPECT_NE(Shell("sh -c 'echo x >> " + mnt_a + "/step100/rank1.pt' 2>/dev/null"), 0);
  // A name both nodes write: each node shows its own, and reports the other.
  ASSERT_EQ(Shell("echo from-a > " + mnt_a + "/same.txt && sync " + mnt_a + "/same.txt"), 0);
  ASSERT_EQ(Shell("echo from-b > " + mnt_b + "/same.txt && sync " + mnt_b + "/same.txt"), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Shell("grep -qx from-a " + mnt_a + "/same.txt"), 0);
  EXPECT_EQ(Shell("grep -qx from-b " + mnt_b + "/same.txt"), 0);
  Shell("ls " + mnt_a + " > /dev/null");
  EXPECT_EQ(Shell("python3 -c \"import os; print(os.getxattr('" + mnt_a +
                  "', 'user.lmcfs.union').decode())\" | grep -q same.txt"),
            0)
      << "the shadowed name is reported";
  EXPECT_EQ(Shell(std::string(LMC_TOOLS_BIN_DIR) + "/lmcfs-stat " + mnt_a + " | grep -q 'same.txt (" + a +
                  "; hidden in " + b + ")'"),
            0)
      << "and lmcfs-stat says which";
  // Retention through the union: each node's lmcfs-gc rotates the store it
  // writes and says which it may not; after both ran, the old checkpoints
  // are gone from every view.
  for (int step = 101; step <= 103; ++step) {
    const std::string d = "/step" + std::to_string(step);
    ASSERT_EQ(Shell("mkdir -p " + mnt_a + d + " && echo a > " + mnt_a + d + "/rank0 && sync " + mnt_a + d +
                    "/rank0"),
              0);
    ASSERT_EQ(Shell("mkdir -p " + mnt_b + d + " && echo b > " + mnt_b + d + "/rank1 && sync " + mnt_b + d +
                    "/rank1"),
              0);
  }
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return std::filesystem::exists(mnt_a + "/step103/rank1"); },
                                      std::chrono::seconds(5), std::chrono::milliseconds(20)));
  const std::string gc =
      std::string(LMC_TOOLS_BIN_DIR) + "/lmcfs-gc -q --pattern 'step*' --keep-last 2 --yes ";
  ASSERT_EQ(Shell(gc + mnt_a + " > " + root_ + "/gc_a.txt 2>&1"), 0) << "lmcfs-gc on node A";
  EXPECT_EQ(Shell("grep -q 'read-only here' " + root_ + "/gc_a.txt"), 0)
      << "it says which stores it may not rotate";
  EXPECT_FALSE(std::filesystem::exists(mnt_a + "/step100/rank0.pt"))
      << "A's part of an old checkpoint is gone";
  EXPECT_TRUE(std::filesystem::exists(mnt_a + "/step100/rank1.pt")) << "B's part is B's to rotate";
  EXPECT_TRUE(std::filesystem::exists(mnt_a + "/step103/rank0"));
  ASSERT_EQ(Shell(gc + mnt_b + " > " + root_ + "/gc_b.txt 2>&1"), 0) << "lmcfs-gc on node B";
  EXPECT_TRUE(lmc::testing::WaitUntil(
      [&] {
        return !std::filesystem::exists(mnt_a + "/step100") && !std::filesystem::exists(mnt_a + "/step101");
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50)))
      << "after both nodes rotated, node A shows no old checkpoint";
  EXPECT_EQ(Shell("cmp " + plain + "/step100/rank1.pt " + mnt_b + "/step100/rank1.pt 2>/dev/null"), 1 + 1)
      << "gone on B too";
  StopBoth();
}

// Node B saves over a name node A has just looked up (a new file renamed
// onto it, as every atomic save does): node A opens the new file as soon
// as its listing shows B's later change. Before A's follower told the
// kernel of the names it changed, A's kernel kept the name leading to the
// removed file for its entry timeout (a second), and opening a name that
// exists failed with ENOENT meanwhile.
TEST_F(RadosMount, ANameAnotherNodeSavedOverOpensTheNewFileAtOnce) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  MountUnion();
  if (HasFatalFailure()) return;
  const std::string script = Script("saveover.py", R"(
import os, sys, time
a, b = sys.argv[1], sys.argv[2]
def save(name, data):
    tmp = f'{b}/.{name}.tmp'
    with open(tmp, 'wb') as f:
        f.write(data); f.flush(); os.fsync(f.fileno())
    os.rename(tmp, f'{b}/{name}')
    fd = os.open(b, os.O_RDONLY); os.fsync(fd); os.close(fd)
def read(path):
    with open(path, 'rb') as f:
        return f.read()
def wait(what, timeout):
    t0 = time.monotonic(); errors = []
    while time.monotonic() - t0 < timeout:
        try:
            if what(): return time.monotonic() - t0, errors
        except OSError as e:
            errors.append(e.strerror)
        time.sleep(0.005)
    sys.exit(f'not within {timeout} s; errors meanwhile: {sorted(set(errors))}')
v1, v2 = os.urandom(300000), os.urandom(200000)
save('latest.pt', v1)
wait(lambda: read(f'{a}/latest.pt') == v1, 5)  # A's kernel now holds the name
save('latest.pt', v2)
with open(f'{b}/marker', 'wb') as f:
    f.flush(); os.fsync(f.fileno())
wait(lambda: 'marker' in os.listdir(a), 5)  # A has applied B's save
took, errors = wait(lambda: read(f'{a}/latest.pt') == v2, 5)
print(f'node A opened the new file {took * 1000:.0f} ms after its listing showed the save; '
      f'{len(errors)} failed opens meanwhile {sorted(set(errors))}')
if took > 0.4 or errors:
    sys.exit('node A kept the name of the removed file')
)");
  EXPECT_EQ(Shell("python3 " + script + " " + mnt_a + " " + mnt_b), 0);
  StopBoth();
}

// Node A opens a log node B is writing and reads it only after B appended
// to it (a job's log or metrics file followed from another node): A reads
// whole versions of the file, the one B had written at A's open, then, once
// the kernel asks for the file's attributes again (a second), the rest.
// Until 2026-12-07 A's first read failed with ESTALE.
TEST_F(RadosMount, AFileAnotherNodeAppendsToReadsOnAfterItsOpenHere) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  MountUnion();
  if (HasFatalFailure()) return;
  const std::string script = Script("append.py", R"(
import os, sys, time
a, b = sys.argv[1], sys.argv[2]
part1, part2 = os.urandom(300000), os.urandom(200000)
with open(f'{b}/train.log', 'wb') as w:
    w.write(part1); w.flush(); os.fsync(w.fileno())
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        try:
            if os.stat(f'{a}/train.log').st_size == len(part1): break
        except OSError:
            pass
        time.sleep(0.01)
    r = open(f'{a}/train.log', 'rb')
    w.write(part2); w.flush(); os.fsync(w.fileno())
    with open(f'{b}/marker', 'wb') as m:
        m.flush(); os.fsync(m.fileno())
t0 = time.monotonic()
while 'marker' not in os.listdir(a):
    if time.monotonic() - t0 > 5: sys.exit('node A did not see the marker within 5 s')
    time.sleep(0.01)
first = r.read()
if first != (part1 + part2)[:len(first)] or len(first) < len(part1):
    sys.exit(f'first read: {len(first)} bytes, not a prefix of the file of at least {len(part1)}')
time.sleep(1.5)  # the kernel's attributes of the file expire
rest = r.read()
got = first + rest
r.close()
print(f'node A read {len(first)} bytes, then {len(rest)} more after the attributes expired')
if got != part1 + part2:
    sys.exit(f'read {len(got)} bytes in all, not the {len(part1 + part2)} node B wrote')
)");
  // lmcfs-stat on node A counts the reads of B's file (its follower's
  // filesystem's figures, summed with A's own; A's own were all it showed).
  const std::string figures = Script("figures.py", R"(
import json, subprocess, sys
tool, mnt, before = sys.argv[1:4]
d = json.loads(subprocess.run([tool, '--json', mnt], check=True, capture_output=True).stdout)['daemon']
now = [d['read_calls'], d['cpu_decode_bytes']]
if sys.argv[4] == 'save':
    open(before, 'w').write(json.dumps(now))
else:
    was = json.loads(open(before).read())
    print(f'node A: {now[0] - was[0]} reads, {now[1] - was[1]} bytes decoded')
    sys.exit(0 if now[0] - was[0] >= 1 and now[1] - was[1] >= 300000 else 1)
)");
  const std::string stat =
      "python3 " + figures + " " + LMC_TOOLS_BIN_DIR + "/lmcfs-stat " + mnt_a + " " + root_ + "/figures ";
  ASSERT_EQ(Shell(stat + "save"), 0);
  EXPECT_EQ(Shell("python3 " + script + " " + mnt_a + " " + mnt_b), 0);
  EXPECT_EQ(Shell(stat + "check"), 0) << "lmcfs-stat on node A does not count its reads of B's file";
  StopBoth();
}

// Node A follows node B's store (a read-only mount) and is stopped (SIGSTOP:
// a node swapping, paused by its scheduler, or cut off for a while) while
// B saves over a file, removes one and writes forty more with
// journal_snapshot=1K: B's index snapshots delete every journal segment A
// had read from, so A cannot replay its way forward. Once A runs again it
// catches up from B's snapshot (its log says so), reads every file as B
// wrote it, no longer lists the removed one, and follows B's next save.
// Before the catch-up (7bd99e3) A logged "open the store again" at every
// refresh and saw nothing new until it was mounted again.
TEST_F(RadosMount, AFollowerStoppedWhileTheWriterSnapshotsCatchesUpFromTheSnapshot) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b", plain = root_ + "/plain";
  MountWriterAndFollower("journal_snapshot=1K");
  if (HasFatalFailure()) return;
  const std::string script = Script("save.py", R"(
import os, random, sys
b, plain, phase = sys.argv[1:4]
def put(name, seed, size, over=False):
    data = random.Random(seed).randbytes(size)
    with open(f'{plain}/{name}', 'wb') as f:
        f.write(data)
    path = f'{b}/{name}'
    w = path + '.tmp' if over else path
    with open(w, 'wb') as f:
        f.write(data); f.flush(); os.fsync(f.fileno())
    if over:
        os.rename(w, path)
if phase == 'before':
    put('latest.bin', 1, 3 << 20); put('keep.bin', 2, 1 << 20); put('gone.bin', 3, 1 << 20)
elif phase == 'while':
    put('latest.bin', 4, 3 << 20, over=True)
    os.remove(f'{b}/gone.bin'); os.remove(f'{plain}/gone.bin')
    for i in range(40):
        put(f'step_{i:02}.bin', 10 + i, 96 << 10)
else:
    put('after.bin', 99, 1 << 20)
fd = os.open(b, os.O_RDONLY); os.fsync(fd); os.close(fd)
)");
  const std::string save = "python3 " + script + " " + mnt_b + " " + plain + " ";
  const std::string same = "diff -rq " + plain + " " + mnt_a + " >/dev/null 2>&1";
  ASSERT_EQ(Shell(save + "before"), 0);
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return Shell(same) == 0; }, std::chrono::seconds(5),
                                      std::chrono::milliseconds(20)))
      << "node A does not read node B's first files after 5 s";
  // The journal segments node A has read from.
  const std::string segments = "rados -p lmcfs -N " + ns_ + " ls | grep 'seg-' | sort";
  ASSERT_EQ(Shell(segments + " > " + root_ + "/segs_read"), 0);
  ASSERT_NE(std::filesystem::file_size(root_ + "/segs_read"), 0u)
      << "node B's journal holds no segment after its first saves (a snapshot took them all); this test "
         "needs node A to have read from one";
  ASSERT_EQ(kill(pid_a_, SIGSTOP), 0);
  const int saved = Shell(save + "while");
  const bool gone = lmc::testing::WaitUntil(
      [&] { return Shell(segments + " | comm -12 - " + root_ + "/segs_read | grep -q .") != 0; },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  ASSERT_EQ(kill(pid_a_, SIGCONT), 0);
  ASSERT_EQ(saved, 0);
  ASSERT_TRUE(gone) << "node B's snapshots left a journal segment node A had read from";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(lmc::testing::WaitUntil([&] { return Shell(same) == 0; }, std::chrono::seconds(10),
                                      std::chrono::milliseconds(50)))
      << "node A does not read what node B saved while it was stopped, 10 s after it runs again";
  std::printf("node A read all of node B's files %.0f ms after it ran again\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(Shell("grep -q 'caught up from its snapshot' " + root_ + "/log_a"), 0)
      << "node A's log does not say it caught up from the snapshot";
  EXPECT_NE(Shell("grep -q 'open the store again' " + root_ + "/log_a"), 0);
  EXPECT_FALSE(std::filesystem::exists(mnt_a + "/gone.bin"));
  // And on from there.
  ASSERT_EQ(Shell(save + "after"), 0);
  EXPECT_TRUE(lmc::testing::WaitUntil([&] { return Shell(same) == 0; }, std::chrono::seconds(5),
                                      std::chrono::milliseconds(20)))
      << "node A does not follow node B's save after the catch-up";
  EXPECT_EQ(Shell("diff -rq " + plain + " " + mnt_b), 0);
  StopBoth();
}

// Node B saves a checkpoint, node A reads it into its page cache, then B
// saves the next one: B's rebase re-encodes the first as deltas against
// the second, which changes only the first's stored size. Node A's
// follower hears of the new stored size and keeps the pages it cached of
// the first checkpoint (its bytes did not change). Before, every extent a
// refresh named dropped its file's pages: each save on B made A read the
// checkpoint before it again, from RADOS, through its new delta chain.
TEST_F(RadosMount, AFollowerKeepsThePagesOfACheckpointTheWriterRebased) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  if (Shell("command -v fincore >/dev/null") != 0) GTEST_SKIP() << "fincore (util-linux) is missing";
  MountUnion();
  if (HasFatalFailure()) return;
  const std::string script = Script("rebased.py", R"(
import hashlib, os, subprocess, sys, time, torch
a, b = sys.argv[1], sys.argv[2]
torch.manual_seed(5)
w = {f'layer{i}.weight': torch.randn(512, 1024) for i in range(4)}
def save(name):
    with open(f'{b}/{name}', 'wb') as f:
        torch.save(w, f); f.flush(); os.fsync(f.fileno())
def digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()
def resident(path):
    out = subprocess.run(['fincore', '--bytes', '--noheadings', '--output', 'RES', path],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])
def stored(path):
    return int(os.getxattr(path, 'user.lmcfs.stored_bytes'))
def wait(what, timeout, why):
    t0 = time.monotonic()
    while not what():
        if time.monotonic() - t0 > timeout: sys.exit(why)
        time.sleep(0.02)
save('ckpt-1.pt')
want = digest(f'{b}/ckpt-1.pt')
size = os.path.getsize(f'{b}/ckpt-1.pt')
wait(lambda: os.path.exists(f'{a}/ckpt-1.pt') and digest(f'{a}/ckpt-1.pt') == want, 10, "A never read B's save")
if resident(f'{a}/ckpt-1.pt') < size // 2: sys.exit('A did not cache what it read')
before = stored(f'{b}/ckpt-1.pt')
for t in w.values():
    t.add_(torch.randn_like(t) * 1e-4)  # a training step's change
save('ckpt-2.pt')
wait(lambda: int(os.getxattr(b, 'user.lmcfs.pending_rebases')) == 0, 60, "B's rebases never drained")
after = stored(f'{b}/ckpt-1.pt')
if after >= before: sys.exit(f'B did not rebase ckpt-1.pt ({before} -> {after} stored bytes)')
wait(lambda: stored(f'{a}/ckpt-1.pt') == after, 10, 'A never heard of the rebase')
kept = resident(f'{a}/ckpt-1.pt')
t0 = time.monotonic()
same = digest(f'{a}/ckpt-1.pt') == want
took = time.monotonic() - t0
print(f'ckpt-1.pt: {size} bytes, stored {before} -> {after} on B; node A kept {kept} bytes of its pages '
      f'and read it again in {took * 1000:.1f} ms')
if not same: sys.exit('A reads other bytes')
if kept < size // 2: sys.exit('A dropped the pages of a file whose bytes did not change')
)");
  EXPECT_EQ(Shell("python3 " + script + " " + mnt_a + " " + mnt_b), 0);
  StopBoth();
}

// Node A follows node B's store (a read-only mount) while B writes three
// files and removes two: B's puncher gives the removed files' blocks back,
// and A's figures say so within seconds (its pack bytes on disk are B's),
// and A leaves the reclaiming to B. Before, A counted every pack whole (it
// read none of B's holes) and kept packs B's compaction had deleted, so df
// on A showed several times what the store held; and A's reclaimer, seeing
// those dead bytes, tried to compact the read-only store and logged an
// error at every pass.
TEST_F(RadosMount, AFollowerCountsTheWritersHolesAndReclaimsNothing) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  MountWriterAndFollower();
  if (HasFatalFailure()) return;
  const std::string script = Script("holes.py", R"PY(
import os, random, subprocess, sys, time, json
a, b, stat = sys.argv[1:4]
for i in range(3):
    with open(f'{b}/f{i}', 'wb') as f:
        f.write(random.Random(i).randbytes(6 << 20)); f.flush(); os.fsync(f.fileno())
os.remove(f'{b}/f0'); os.remove(f'{b}/f1')
fd = os.open(b, os.O_RDONLY); os.fsync(fd); os.close(fd)
def fig(m, name): return int(os.getxattr(m, f'user.lmcfs.{name}'))
def wait(what, timeout, why):
    t0 = time.monotonic()
    while not what():
        if time.monotonic() - t0 > timeout: sys.exit(why)
        time.sleep(0.05)
wait(lambda: sorted(os.listdir(a)) == ['f2'], 10, "A never saw B's removals")
wait(lambda: fig(b, 'punched_bytes') >= 8 << 20, 10, "B's puncher gave back less than 8 MiB of 12")
t0 = time.monotonic()
wait(lambda: fig(a, 'pack_disk_bytes') == fig(b, 'pack_disk_bytes'), 15,
     f"A's pack bytes on disk are {fig(a, 'pack_disk_bytes')}, B's {fig(b, 'pack_disk_bytes')} "
     f"(B punched {fig(b, 'punched_bytes')})")
print(f"A's pack bytes on disk came to B's ({fig(b, 'pack_disk_bytes')}; {fig(a, 'pack_bytes')} committed) "
      f"{time.monotonic() - t0:.2f} s after it saw the removals")
time.sleep(1)  # a few of A's reclamation polls
d = json.loads(subprocess.run([stat, '--json', a], check=True, capture_output=True).stdout)['daemon']
if d['reclaim_enabled'] != 0 or d['reclaim_passes'] != 0 or d['reclaim_errors'] != 0:
    sys.exit(f"A reclaims: enabled {d['reclaim_enabled']}, {d['reclaim_passes']} passes, "
             f"{d['reclaim_errors']} errors")
)PY");
  EXPECT_EQ(Shell("python3 " + script + " " + mnt_a + " " + mnt_b + " " + LMC_TOOLS_BIN_DIR + "/lmcfs-stat"),
            0);
  StopBoth();
  EXPECT_NE(Shell("grep -qF '[error]' " + root_ + "/log_a"), 0) << "node A logged an error";
}

// A writer (node B) and a follower (node A) of one store on one host each
// keep their own control channel: lmcfs-stat on each mountpoint answers
// for that mount, lmcfs-stat of the store's name for the writer, lmcfs-gc
// on the follower is refused with what to do and on the writer runs, and
// the writer's channel outlives the follower's unmount. Before, both
// daemons listened on the store's one socket: the follower, mounted last,
// took it (lmcfs-stat on B showed A's figures, lmcfs-gc on B reached A and
// failed), and its unmount removed it, leaving B with no channel.
TEST_F(RadosMount, AWriterAndAFollowerOnOneNodeEachKeepTheirControlChannel) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  MountWriterAndFollower();
  if (HasFatalFailure()) return;
  ASSERT_EQ(Shell("head -c 3000000 /dev/urandom > " + mnt_b + "/f && sync " + mnt_b + "/f"), 0);
  const std::string tools = LMC_TOOLS_BIN_DIR;
  const std::string check = Script("daemon.py", R"PY(
import json, subprocess, sys
tool, target, read_only, min_written = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = json.loads(subprocess.run([tool, '--json', target], check=True, capture_output=True).stdout)['daemon']
print(f"{target}: read_only {d.get('read_only')}, {d['write_bytes']} bytes written")
sys.exit(0 if d.get('read_only', 0) == read_only and d['write_bytes'] >= min_written else 1)
)PY");
  const std::string stat = "python3 " + check + " " + tools + "/lmcfs-stat ";
  EXPECT_EQ(Shell(stat + mnt_b + " 0 3000000"), 0) << "lmcfs-stat on B does not answer for B";
  EXPECT_EQ(Shell(stat + mnt_a + " 1 0"), 0) << "lmcfs-stat on A does not answer for A";
  EXPECT_EQ(Shell(stat + store_ + " 0 3000000"), 0) << "lmcfs-stat of the store does not ask its writer";
  EXPECT_NE(Shell(tools + "/lmcfs-gc -q " + mnt_a + " > " + root_ + "/gc_a.txt 2>&1"), 0);
  EXPECT_EQ(Shell("grep -q 'run lmcfs-gc on the mountpoint of the node that mounts it read-write' " + root_ +
                  "/gc_a.txt"),
            0)
      << "lmcfs-gc on the follower does not say what to do";
  EXPECT_EQ(Shell(tools + "/lmcfs-gc -q " + mnt_b + " > /dev/null"), 0) << "lmcfs-gc on the writer";
  StopMount(mnt_a, pid_a_);
  pid_a_ = -1;
  EXPECT_EQ(Shell(stat + mnt_b + " 0 3000000"), 0) << "B lost its channel when A unmounted";
  StopBoth();
  EXPECT_NE(Shell("grep -qF '[error]' " + root_ + "/log_a"), 0) << "node A logged an error";
}

// Node B rewrites a file in place, with the same size, and sets its
// mtime back (as `cp -p` or `rsync -t` over an old copy can): node A,
// which read the file into its page cache, reads the new bytes at once.
// Its follower's refresh tells A's kernel that the file's bytes changed;
// the kernel's own check (FUSE_CAP_AUTO_INVAL_DATA) compares only mtime and
// size, and kept the old pages.
TEST_F(RadosMount, AFollowerDropsWhatItCachedOfAFileAnotherNodeRewrote) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b", plain = root_ + "/plain";
  MountUnion();
  if (HasFatalFailure()) return;
  const std::string script = Script("rewrite.py", R"(
import os, random, sys
mode, path, copy, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
data = random.Random(seed).randbytes(4 << 20)
with open(copy, 'wb') as f:
    f.write(data)
st = os.stat(path) if mode == 'rewrite' else None
with open(path, 'r+b' if st else 'wb') as f:
    f.write(data); f.flush(); os.fsync(f.fileno())
if st:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with open(path, 'rb') as f:
        os.fsync(f.fileno())
)");
  ASSERT_EQ(Shell("python3 " + script + " new " + mnt_b + "/f.bin " + plain + "/v1 1"), 0);
  ASSERT_TRUE(
      lmc::testing::WaitUntil([&] { return Shell("cmp -s " + plain + "/v1 " + mnt_a + "/f.bin") == 0; },
                              std::chrono::seconds(5), std::chrono::milliseconds(20)))
      << "node A does not read node B's file after 5 s";
  const std::string mtime = "stat -c %y " + mnt_a + "/f.bin";
  ASSERT_EQ(Shell(mtime + " > " + root_ + "/mtime1"), 0);
  ASSERT_EQ(Shell("python3 " + script + " rewrite " + mnt_b + "/f.bin " + plain + "/v2 2"), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const bool seen =
      lmc::testing::WaitUntil([&] { return Shell("cmp -s " + plain + "/v2 " + mnt_a + "/f.bin") == 0; },
                              std::chrono::seconds(5), std::chrono::milliseconds(10));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(seen) << "node A still reads the old bytes 5 s after node B rewrote the file";
  std::printf("node A read node B's rewrite %.0f ms after its fsync\n", ms);
  EXPECT_LT(ms, 1500) << "seen later than a second";
  EXPECT_EQ(Shell(mtime + " | cmp -s - " + root_ + "/mtime1"), 0) << "the same mtime, as B set it back";
  EXPECT_EQ(Shell("cmp -s " + plain + "/v2 " + mnt_b + "/f.bin"), 0);
  StopBoth();
}

// Node B saves over names the way training jobs do (each file a temporary
// fsync'd and renamed onto its name, in five step directories, one of them
// removed every seventh round) while three threads on node A list, stat,
// open and read everything there, as a job resuming or an evaluator
// reading the latest checkpoint does. Every file carries its own SHA-256:
// each read must be one whole version. A name gone between a listing and
// its open (ENOENT) and a file removed between its open and its first read
// (ESTALE) are answers; wrong bytes never are. Without FileData's check at
// the first read (f8cda5e), node A read files as all zeros at the opened
// version's size: 7 and 3 files in two runs of 20 s.
// LMC_STRESS_SECONDS sets the time (default 20 s).
TEST_F(RadosMount, AFollowerReadsWholeVersionsWhileAnotherNodeSavesOver) {
  const std::string mnt_a = root_ + "/mnt_a", mnt_b = root_ + "/mnt_b";
  MountUnion();
  if (HasFatalFailure()) return;
  const char* env = std::getenv("LMC_STRESS_SECONDS");
  const std::string seconds = env && *env ? env : "20";
  const std::string script = Script("stress.py", R"(
import errno, hashlib, os, random, sys, threading, time
a, b, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
stop = time.monotonic() + secs
lock = threading.Lock()
last = [time.monotonic()]
stats = dict(saves=0, rmdirs=0, lists=0, no_dir=0, reads=0, enoent=0, estale=0, bad=0)
failures = []
def count(what, n=1):
    with lock:
        stats[what] += n
        last[0] = time.monotonic()
def whole(data):
    return len(data) >= 32 and hashlib.sha256(data[32:]).digest() == data[:32]
def writer():
    rng = random.Random(1)
    step = 0
    try:
        while time.monotonic() < stop:
            step += 1
            d = f'{b}/step{step % 5}'
            os.makedirs(d, exist_ok=True)
            for name in ('latest.pt', 'model.safetensors', f'rank{step % 3}.bin'):
                body = rng.randbytes(rng.randrange(1000, 300000))
                tmp = f'{d}/.{name}.tmp'
                with open(tmp, 'wb') as f:
                    f.write(hashlib.sha256(body).digest() + body)
                    f.flush(); os.fsync(f.fileno())
                os.rename(tmp, f'{d}/{name}')
                count('saves')
            if step % 7 == 0:
                victim = f'{b}/step{(step + 2) % 5}'
                if os.path.isdir(victim):
                    for n in os.listdir(victim):
                        os.unlink(f'{victim}/{n}')
                    os.rmdir(victim)
                    count('rmdirs')
    except Exception as e:
        failures.append(f'node B: {e!r}')
def reader(seed):
    rng = random.Random(seed)
    try:
        while time.monotonic() < stop:
            d = f'{a}/step{rng.randrange(5)}'
            try:
                names = os.listdir(d)
            except FileNotFoundError:  # between B's rmdir and its next makedirs
                count('no_dir')
                continue
            count('lists')
            try:
                for n in names:
                    if n.startswith('.'):
                        continue
                    p = f'{d}/{n}'
                    os.stat(p)
                    with open(p, 'rb') as f:
                        data = f.read()
                    count('reads')
                    if not whole(data):
                        count('bad')
                        print(f'WRONG BYTES: {p}: {len(data)} bytes, {data.count(0)} of them zeros', flush=True)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    count('enoent')
                elif e.errno == errno.ESTALE:
                    count('estale')
                else:
                    raise
    except Exception as e:
        failures.append(f'node A: {e!r}')
threads = [threading.Thread(target=writer, daemon=True)]
threads += [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    time.sleep(0.5)
    if time.monotonic() - last[0] > 20:
        print(f'HANG: no operation finished in 20 s; {stats}', flush=True)
        os._exit(2)
print(f'{secs:.0f} s: {stats}', flush=True)
if failures:
    sys.exit(f'failed: {failures}')
if stats['bad']:
    sys.exit(f"node A read {stats['bad']} files as bytes no version of them held")
if stats['saves'] < 30 or stats['reads'] < 100:
    sys.exit('too little happened to tell anything')
)");
  EXPECT_EQ(Shell("python3 " + script + " " + mnt_a + " " + mnt_b + " " + seconds), 0);
  StopBoth();
}

}  // namespace
