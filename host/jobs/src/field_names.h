#pragma once
// Shorthand for the jobs' messages: F("output") is field_ref("output").

#include <string>
#include <string_view>

#include "lithe/host/jobs/field_error.h"

namespace lithe::host::job_text {

inline std::string F(std::string_view name) { return field_ref(name); }

}  // namespace lithe::host::job_text
