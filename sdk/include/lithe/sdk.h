#pragma once
/// \file
/// Umbrella header: everything a plugin author includes. Brings in ATen for tensor math.

#include <ATen/ATen.h>

#include "lithe/sdk/context.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/sdk/global_sparsity.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/log.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk/plugin.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk/registry.h"
#include "lithe/sdk/search_target.h"
#include "lithe/sdk/version.h"
