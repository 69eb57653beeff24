#pragma once
/// \file
/// Lithe 1.3 header name, kept for one minor version (removed in 1.5): include `lithe/host/io/staged_file.h`
/// instead (ARCHITECTURE.md lists the areas).
#include "lithe/host/io/staged_file.h"
