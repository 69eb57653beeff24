#pragma once
/// \file
/// Reading a number a user typed (an option value, a CSV cell): all of the text, finite, or
/// nothing, so that every caller words its own error with the option or the cell.

#include <optional>
#include <string>

namespace lithe::host {

/// The finite double that fills all of `text` ("0.5", "2.5e6"); nullopt for empty text, a
/// leading space, trailing characters, "nan", "inf" or a value out of range.
std::optional<double> parse_finite_number(const std::string& text);

}  // namespace lithe::host
