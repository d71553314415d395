#pragma once

namespace lmc::fs {
// mount.lmcfs [STORE] MOUNTPOINT [-o opts] [-f]; returns the exit code.
int MountMain(int argc, char** argv);
}  // namespace lmc::fs
