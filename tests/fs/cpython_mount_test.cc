// CPython's own test suites of its file and OS modules, an outside POSIX
// check, run in a real mount: os, posix, io, fileio, file, shutil,
// tempfile, mmap, zipfile (torch.save's container), tarfile (NeMo's .nemo
// container; nested directories, links, sparse members), pathlib, glob,
// stat, fcntl; 2,902 tests of files, directories, links, modes, times,
// xattrs, locks, mappings, copies and renames. They run first in the plain
// directory beside the mount (the disk /tmp is on), then with their
// working directory and TMPDIR in the mount: every test must pass there,
// and a test may be skipped there only where it is skipped on the disk too
// (a test that skips itself for a missing feature, say xattrs or hard
// links, would otherwise pass unnoticed), or where it refused a Unix
// socket path for its length (the runs' paths differ in length).
#include <gtest/gtest.h>

#include <string>

#include "mount_util.h"

namespace lmc::fs {
namespace {

using lmc::testing::MountTest;

using MountCPython = MountTest;

constexpr const char* kModules =
    "test_os test_posix test_io test_fileio test_file test_shutil test_tempfile test_mmap test_zipfile "
    "test_tarfile test_pathlib test_glob test_stat test_fcntl";

// Compares regrtest's JUnit reports: every test of the mount's run passed
// or was skipped, each skip also happened on the disk, and both ran the
// same tests. Prints what differs.
constexpr const char* kCompare = R"py(import sys
import xml.etree.ElementTree as ET

def cases(path):
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            out[tc.get("name")] = "failed"
        elif tc.find("skipped") is not None:
            out[tc.get("name")] = "skipped: " + (tc.find("skipped").text or "").strip()
        else:
            out[tc.get("name")] = "passed"
    return out

disk, mount = cases(sys.argv[1]), cases(sys.argv[2])
bad = []
for name, got in sorted(mount.items()):
    want = disk.get(name)
    # A socket path's length is the path string's, not the filesystem's:
    # the two runs' paths differ by their directory names and the pids in
    # them, so a bind refused for length alone is no difference.
    if got.startswith("skipped: cannot bind Unix socket: AF_UNIX path too long"):
        continue
    if got == "failed" or (got != "passed" and got != want):
        bad.append(f"{name}: {got} in the mount, {want} on the disk")
for name in sorted(set(disk) - set(mount)):
    bad.append(f"{name}: not run in the mount")
print(f"{len(mount)} tests in the mount, {sum(v == 'passed' for v in mount.values())} passed, "
      f"{sum(v.startswith('skipped') for v in mount.values())} skipped")
print("\n".join(bad))
sys.exit(1 if bad or len(mount) < 1000 else 0)
)py";

TEST_F(MountCPython, FileAndOsSuitesPassAsOnTheDisk) {
  if (Sh("python3 -c 'import test.test_os, test.libregrtest' 2>/dev/null") != 0)
    GTEST_SKIP() << "CPython's test suites are not installed (scripts/install-deps.sh installs "
                    "libpythonX.Y-testsuite)";
  auto run = [&](const std::string& dir, const std::string& name) {
    const std::string xml = root_ + "/" + name + ".xml", log = root_ + "/" + name + ".log";
    // A short working directory: test_pathlib binds a Unix socket at
    // DIR/c/test_python_PID/test_python_worker_PID/@test_PID_tmp/mysock
    // (UTF-8 suffixes included), and an AF_UNIX path holds at most 108
    // bytes; with "cpython" there, the mount's path fit only with short
    // pids.
    Sh("mkdir -p " + dir + "/c");
    const int rc = Sh("cd " + dir + "/c && TMPDIR=" + dir + "/c python3 -m test -j2 " + kModules +
                      " --junit-xml " + xml + " >" + log + " 2>&1");
    return std::make_pair(rc, xml);
  };
  const auto [disk_rc, disk_xml] = run(plain_, "disk");
  ASSERT_EQ(disk_rc, 0) << "the suites fail on the disk already:\n" << ReadFile(root_ + "/disk.log");
  const auto [mount_rc, mount_xml] = run(mnt_, "mount");
  EXPECT_EQ(mount_rc, 0) << ReadFile(root_ + "/mount.log");
  const std::string compare = WriteScript("compare.py", kCompare), out = root_ + "/compare.out";
  EXPECT_EQ(Sh("python3 " + compare + " " + disk_xml + " " + mount_xml + " >" + out + " 2>&1"), 0)
      << ReadFile(out);
  // The suites cleaned up after themselves through the mount.
  EXPECT_EQ(Sh("test -z \"$(ls -A " + mnt_ + "/c)\""), 0);
  const std::string fsck = root_ + "/fsck.out";
  EXPECT_EQ(Sh(std::string(LMC_TOOLS_BIN_DIR) + "/lmcfs-fsck " + mnt_ + " >" + fsck + " 2>&1"), 0)
      << ReadFile(fsck);
}

}  // namespace
}  // namespace lmc::fs
