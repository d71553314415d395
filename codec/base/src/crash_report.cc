#include "lmc/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace lmc {

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
namespace {

const char* g_who = "";
const char* g_advice = nullptr;

// Only async-signal-safe calls from here on: write(2), backtrace (its
// library already loaded, see Install), raise.
void Say(const char* s) {
  ssize_t r = ::write(2, s, std::strlen(s));
  (void)r;
}

void OnFatalSignal(int sig) {
  Say("\n*** ");
  Say(g_who);
  Say(": fatal signal ");
  Say(sig == SIGSEGV  ? "SIGSEGV"
      : sig == SIGBUS ? "SIGBUS"
      : sig == SIGFPE ? "SIGFPE"
      : sig == SIGILL ? "SIGILL"
                      : "SIGABRT");
  Say("; the crashing thread's stack (addr2line -e BINARY -f -C OFFSET gives source lines):\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  if (g_advice) {
    Say(g_advice);
    Say("\n");
  }
  // SA_RESETHAND restored the default action: the signal ends the process
  // as it would have without this report.
  ::raise(sig);
}

}  // namespace
#endif

void InstallFatalSignalReport(const char* who, const char* advice) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  g_who = who;
  g_advice = advice;
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
#else
  (void)who;
  (void)advice;
#endif
}

}  // namespace lmc
