// A report of a fatal signal: the crashing thread's stack, written to
// stderr (a daemon's log file: mount.lmcfs points its stderr there), then
// the signal's default action (the exit status and core it would have had).
// Not installed in the sanitizer builds, whose own handlers report more.
#pragma once

namespace lmc {

// Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT.
// `who` names the program in the report's first line; `advice`, if not
// null, follows the stack (what the user should do next). Both must live
// as long as the process (string literals).
void InstallFatalSignalReport(const char* who, const char* advice = nullptr);

}  // namespace lmc
