// Linked into every test binary (tests/CMakeLists.txt): a fatal signal
// prints the crashing thread's stack (lmc/crash_report.h) before the
// default action ends the process, so that a crash CI sees once (a flaky
// test) leaves its place in the ctest log instead of only "SEGFAULT".
#include "lmc/crash_report.h"

namespace {

struct InstallReport {
  InstallReport() { lmc::InstallFatalSignalReport("test binary"); }
} install_report;

}  // namespace
