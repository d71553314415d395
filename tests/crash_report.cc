// Linked into every test binary (tests/CMakeLists.txt): a fatal signal
// prints the crashing thread's stack to stderr before the default action
// ends the process, so that a crash CI sees once (a flaky test) leaves its
// place in the ctest log instead of only "SEGFAULT". Left out of the
// sanitizer builds, whose own handlers report more.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace {

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

void Say(const char* s) {
  ssize_t r = ::write(2, s, std::strlen(s));
  (void)r;
}

void OnFatalSignal(int sig) {
  Say("\n*** test binary: fatal signal ");
  Say(sig == SIGSEGV  ? "SIGSEGV"
      : sig == SIGBUS ? "SIGBUS"
      : sig == SIGFPE ? "SIGFPE"
      : sig == SIGILL ? "SIGILL"
                      : "SIGABRT");
  Say("; the crashing thread's stack (addr2line -e BINARY -f -C OFFSET for lines):\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  // SA_RESETHAND restored the default action: the signal ends the process
  // as it would have, with its status and core.
  ::raise(sig);
}

struct InstallFatalSignalReport {
  InstallFatalSignalReport() {
    // backtrace() loads libgcc_s on its first call, which allocates: make
    // that call here, not in the handler.
    void* one[1];
    backtrace(one, 1);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnFatalSignal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
  }
} install_fatal_signal_report;

#endif

}  // namespace
