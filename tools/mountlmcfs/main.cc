#include "lmc/crash_report.h"
#include "mount_main.h"

int main(int argc, char** argv) {
  // A crash leaves its stack in the log (the daemon's stderr is its log
  // file) and says what to do.
  lmc::InstallFatalSignalReport(
      "mount.lmcfs",
      "mount.lmcfs: the filesystem daemon crashed. What was fsynced is in the store, which recovers on the "
      "next mount; writes not yet fsynced are lost. Unmount the dead mount point (fusermount3 -u "
      "MOUNTPOINT), mount the store again, and report this stack with the log.");
  return lmc::fs::MountMain(argc, argv);
}
