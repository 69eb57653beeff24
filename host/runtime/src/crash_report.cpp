// The fatal-signal reporter: one line naming the plugin call that was running.
#include "lithe/host/runtime/crash_report.h"

#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace lithe::host {
namespace {

// The running plugin call, NUL-terminated; `active` says whether one runs. Written by the
// thread calling into plugins, read by the handler: a torn read can at worst garble the line.
constexpr size_t kRecordSize = detail::PluginCallRecord::kSize;
char g_record[kRecordSize];

// Appends `text` to the record at `length`, bounded; returns the new length.
size_t append_record(size_t length, const char* text, size_t size) {
  const size_t n = std::min(size, kRecordSize - 1 - length);
  std::memcpy(g_record + length, text, n);
  return length + n;
}
std::atomic<bool> g_active{false};
std::atomic<bool> g_installed{false};

void write_text(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0) {
      return;
    }
    text += written;
    length -= static_cast<size_t>(written);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (abort)";
    default: return "fatal signal";
  }
}

// The instruction address at the time of the signal, or null where unknown.
void* faulting_code(void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  if (uc == nullptr) {
    return nullptr;
  }
#if defined(__x86_64__)
  return reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return reinterpret_cast<void*>(uc->uc_mcontext.pc);
#else
  return nullptr;
#endif
}

void on_fatal_signal(int sig, siginfo_t*, void* context) {
  write_text("lithe: fatal ");
  write_text(signal_name(sig));
  if (g_active.load(std::memory_order_acquire)) {
    write_text(" while running ");
    write_text(g_record);
  } else {
    write_text(" outside any plugin call");
  }
  Dl_info info{};
  void* pc = faulting_code(context);
  if (pc != nullptr && ::dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
    write_text("; the faulting code is in ");
    write_text(info.dli_fname);
  }
  write_text("\n");
  // Die of the same signal, as without the handler (status, core dump).
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(sig, &fallback, nullptr);
  ::raise(sig);
}

}  // namespace

void install_crash_reporter() {
  if (g_installed.exchange(true)) {
    return;
  }
  // An alternate stack, so that a stack overflow can still be reported. Never freed: the
  // handler may run at any time until exit.
  const size_t stack_size = std::max<size_t>(SIGSTKSZ, 64 * 1024);
  stack_t stack{};
  stack.ss_sp = std::malloc(stack_size);
  stack.ss_size = stack_size;
  if (stack.ss_sp != nullptr) {
    ::sigaltstack(&stack, nullptr);
  }
  struct sigaction action {};
  action.sa_sigaction = &on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    ::sigaction(sig, &action, nullptr);
  }
}

namespace detail {

PluginCallRecord::PluginCallRecord(const std::string& context, const char* call) {
  if (g_active.load(std::memory_order_relaxed)) {
    std::memcpy(previous_, g_record, kRecordSize);
    had_previous_ = true;
  }
  g_active.store(false, std::memory_order_release);
  size_t length = append_record(0, context.data(), context.size());
  if (call != nullptr) {
    length = append_record(length, ", in ", 5);
    length = append_record(length, call, std::strlen(call));
    length = append_record(length, "()", 2);
  }
  g_record[length] = '\0';
  g_active.store(true, std::memory_order_release);
}

PluginCallRecord::~PluginCallRecord() {
  g_active.store(false, std::memory_order_release);
  if (had_previous_) {
    std::memcpy(g_record, previous_, kRecordSize);
    g_active.store(true, std::memory_order_release);
  }
}

}  // namespace detail
}  // namespace lithe::host
