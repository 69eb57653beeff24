#pragma once
/// \file
/// Logging for plugins and the host. Messages go to a sink the host installs (stderr by
/// default); plugins never write to std::cout/std::cerr themselves.

#include <functional>
#include <string>

#include "lithe/sdk/error.h"
#include "lithe/sdk/export.h"

namespace lithe::sdk {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

using LogSink = std::function<void(LogLevel level, const std::string& message)>;

/// Messages above `level` are dropped before formatting. Default: kWarn.
LITHE_SDK_API void set_log_level(LogLevel level);
LITHE_SDK_API LogLevel log_level();
/// Replaces the sink (host use). An empty sink restores the stderr default.
LITHE_SDK_API void set_log_sink(LogSink sink);
/// Sends one message to the sink.
LITHE_SDK_API void log_message(LogLevel level, const std::string& message);

}  // namespace lithe::sdk

/// LITHE_LOG(kInfo, "pruned ", n, " weights"): formats only when the level is enabled.
#define LITHE_LOG(level, ...)                                                          \
  do {                                                                                 \
    if (::lithe::sdk::LogLevel::level <= ::lithe::sdk::log_level()) {                  \
      ::lithe::sdk::log_message(::lithe::sdk::LogLevel::level,                         \
                                ::lithe::sdk::detail::concat(__VA_ARGS__));            \
    }                                                                                  \
  } while (false)
