#pragma once
/// \file
/// Symbol visibility. Lithe libraries and plugins build with -fvisibility=hidden; these macros
/// mark what crosses a shared-library boundary.

#if defined(_WIN32)
#define LITHE_SDK_API __declspec(dllexport)
#define LITHE_PLUGIN_EXPORT __declspec(dllexport)
#else
/// Classes and functions exported by liblithe_sdk (vtables and typeinfo live there once).
#define LITHE_SDK_API __attribute__((visibility("default")))
/// The one symbol a plugin exports: lithe_get_plugin_info.
#define LITHE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
