// lmcfs-gc, lmcfs-stat and lmcfs-fsck as functions: each main() only
// adapts, and tests run them in-process. Output goes to `out`, messages and
// the progress bar to `err` (the bar only when err is a terminal's stderr).
#pragma once

#include <ostream>
#include <string>

namespace lmc::tools {

// Exit codes: 0 done, 1 failed, 2 usage.
int GcMain(int argc, char** argv, std::ostream& out, std::ostream& err);
// Exit codes: 0 done, 1 failed, 2 usage.
int StatMain(int argc, char** argv, std::ostream& out, std::ostream& err);
// The text lmcfs-stat prints (in path order) for a stat document
// (docs/FORMAT.md, "Control protocol", stat result).
void PrintStat(const std::string& doc, bool bytes, std::ostream& out);
// fsck(8) exit codes (lmc/store/store.h, FsckExit).
int FsckMain(int argc, char** argv, std::ostream& out, std::ostream& err);

// For a tool's main(): the libraries' log lines (spdlog's default logger,
// stdout otherwise) go to stderr, so stdout holds only the tool's output
// (--json documents included).
void LogToStderr();

}  // namespace lmc::tools
