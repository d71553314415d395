// fio, an outside data-integrity tool, against a real mount: sequential,
// random, mixed-size and overwriting writes, each block stamped with a
// checksummed header and verified by reading it back (verify=crc32c), then
// verified again after a remount (verify_only), and the store checked by
// lmcfs-fsck.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "mount_util.h"

namespace lmc::fs {
namespace {

using lmc::testing::MountTest;

// Every job writes its own 32 MiB file; the last two (one group each, in
// order) write one file and then overwrite parts of it, so only the second
// one's blocks are what the file holds at the end.
constexpr const char* kJobs = R"([global]
ioengine=psync
verify=crc32c
verify_fatal=1
do_verify=1
size=32m

[seq-1m]
rw=write
bs=1m

[seq-3m-tensors]
rw=write
bs=3m
fsync_on_close=1

[rand-mixed-sizes]
rw=randwrite
bsrange=4k-2m

[overwrite-4k-64k]
rw=randwrite
bsrange=4k-64k
overwrite=1

[randrw]
rw=randrw
bs=128k
overwrite=1

[layout-then-overwrite]
stonewall
filename=layout.dat
rw=write
bs=3m

[overwrite-the-layout]
stonewall
filename=layout.dat
rw=randwrite
bsrange=4k-1m
overwrite=1
)";

using MountFio = MountTest;

TEST_F(MountFio, WritesVerifyAndVerifyAgainAfterARemount) {
  if (Sh("command -v fio >/dev/null") != 0)
    GTEST_SKIP() << "fio is not installed (scripts/install-deps.sh installs it)";
  const std::string jobs = WriteScript("verify.fio", kJobs);
  const std::string out = root_ + "/fio.out";
  // Through the mount: every job writes, then reads back and checks.
  ASSERT_EQ(Sh("cd " + mnt_ + " && fio " + jobs + " --output=" + out), 0) << ReadFile(out);
  const std::string report = ReadFile(out);
  size_t jobs_ok = 0;
  for (size_t at = report.find("err= 0"); at != std::string::npos; at = report.find("err= 0", at + 1))
    jobs_ok++;
  EXPECT_EQ(jobs_ok, 7u) << report;

  // From the store, in a new daemon: the files still hold what was
  // written (the overwritten layout.dat checked by its second job only).
  Remount();
  const std::string out2 = root_ + "/fio2.out";
  std::string sections;
  for (const char* s :
       {"seq-1m", "seq-3m-tensors", "rand-mixed-sizes", "overwrite-4k-64k", "randrw", "overwrite-the-layout"})
    sections += std::string(" --section=") + s;
  EXPECT_EQ(Sh("cd " + mnt_ + " && fio " + jobs + " --verify_only" + sections + " --output=" + out2), 0)
      << ReadFile(out2);
  const std::string fsck = root_ + "/fsck.out";
  EXPECT_EQ(Sh(std::string(LMC_TOOLS_BIN_DIR) + "/lmcfs-fsck " + mnt_ + " >" + fsck + " 2>&1"), 0)
      << ReadFile(fsck);
}

}  // namespace
}  // namespace lmc::fs
