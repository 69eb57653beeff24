#pragma once
/// \file
/// Symbol visibility of liblithe_kernels. The library builds with -fvisibility=hidden; only the
/// functions marked here are exported (its CUDA kernels use the CUDA runtime libtorch links, so
/// a program or plugin using the kernels needs no CUDA toolkit of its own).

#if defined(_WIN32)
#define LITHE_KERNELS_API __declspec(dllexport)
#else
#define LITHE_KERNELS_API __attribute__((visibility("default")))
#endif
