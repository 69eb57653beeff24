#pragma once
/// \file
/// SDK versioning. A plugin records both values below at compile time; the host refuses a plugin
/// whose API version differs from its own, or whose ABI tag is not byte-for-byte identical.

#include <cstdint>  // also defines _GLIBCXX_USE_CXX11_ABI under libstdc++
#include <torch/version.h>

/// Integer API version of the SDK. Bumped whenever a plugin-implemented class (WeightMasker,
/// Pruner, Quantizer, QuantGrad, FilterScorer) changes its virtual functions, a field of an SDK
/// struct changes, or the plugin entry struct changes. Virtual functions appended to the
/// host-implemented interfaces (CompressionContext, Registry) only raise the minor version:
/// older plugins keep working with a newer host. Equals the major version of the `Lithe` CMake
/// package.
#define LITHE_SDK_API_VERSION 1

#define LITHE_DETAIL_STR2(x) #x
#define LITHE_DETAIL_STR(x) LITHE_DETAIL_STR2(x)

#if defined(__clang__)
#define LITHE_DETAIL_COMPILER_FAMILY "clang"
#elif defined(__GNUC__)
#define LITHE_DETAIL_COMPILER_FAMILY "gcc"
#elif defined(_MSC_VER)
#define LITHE_DETAIL_COMPILER_FAMILY "msvc"
#else
#define LITHE_DETAIL_COMPILER_FAMILY "unknown"
#endif

#if defined(_GLIBCXX_USE_CXX11_ABI)
#define LITHE_DETAIL_CXX11_ABI LITHE_DETAIL_STR(_GLIBCXX_USE_CXX11_ABI)
#else
#define LITHE_DETAIL_CXX11_ABI "na"
#endif

/// Minor version of the SDK: raised when host-implemented interfaces gain functions. A plugin
/// may call every function of its own minor version, so a host accepts plugins of its minor
/// version or older and refuses newer ones (see the ABI tag).
#define LITHE_SDK_MINOR_VERSION 10

/// Human-readable SDK version (semantic versioning; major == LITHE_SDK_API_VERSION), built from
/// the two numbers so that it cannot disagree with them (the top-level CMakeLists.txt checks
/// that the project version is the same).
#define LITHE_SDK_VERSION_STRING \
  LITHE_DETAIL_STR(LITHE_SDK_API_VERSION) "." LITHE_DETAIL_STR(LITHE_SDK_MINOR_VERSION) ".0"

/// The part of the ABI tag after the SDK version: libtorch version, compiler family and
/// libstdc++'s dual ABI, e.g. ";torch1.13.0;gcc;cxx11abi1".
#define LITHE_DETAIL_ABI_TOOLCHAIN                                                          \
  ";torch" LITHE_DETAIL_STR(TORCH_VERSION_MAJOR) "." LITHE_DETAIL_STR(                      \
      TORCH_VERSION_MINOR) "." LITHE_DETAIL_STR(TORCH_VERSION_PATCH) ";"                     \
      LITHE_DETAIL_COMPILER_FAMILY ";cxx11abi" LITHE_DETAIL_CXX11_ABI

/// Everything that must agree between host and plugin for C++ types (at::Tensor, std::string,
/// std::function, exceptions) to cross the boundary safely, plus the SDK version the plugin was
/// built against. Example: "lithe1.1;torch1.13.0;gcc;cxx11abi1". The host requires the toolchain
/// part verbatim and a plugin SDK version of the same major and an equal or older minor ("lithe1"
/// is 1.0). Hosts of SDK 1.0 compare the whole tag verbatim, so they refuse 1.1 plugins, whose
/// calls into 1.1 host functions they could not serve.
#define LITHE_SDK_ABI_TAG                                                                   \
  "lithe" LITHE_DETAIL_STR(LITHE_SDK_API_VERSION) "." LITHE_DETAIL_STR(                     \
      LITHE_SDK_MINOR_VERSION) LITHE_DETAIL_ABI_TOOLCHAIN
