#pragma once
/// \file
/// Lithe 1.3 header name, kept for one minor version (removed in 1.5): include `lithe/host/io/file_io.h`, `lithe/host/io/mask_file.h`, `lithe/host/model/apply_compression_results.h`
/// instead (ARCHITECTURE.md lists the areas).
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/apply_compression_results.h"
