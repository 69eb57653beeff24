#pragma once
/// \file
/// Charts for the reports of `lithe sensitivity` and the searches: self-contained SVG (no
/// script, no external resource), one element per data point carrying its exact values
/// (`data-series`, `data-x`, `data-y`, and a `<title>` tooltip), so that a reader can hover and
/// a test can read every point back.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lithe::host {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  ///< (x, y), drawn in this order
  bool connect = true;                            ///< a line through the points
  /// One tooltip per point (empty: "<name>: x, y").
  std::vector<std::string> tooltips;
  /// Drawn larger and outlined (e.g. the chosen model); empty: none.
  std::vector<bool> highlighted;
};

struct ChartSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  /// A dashed horizontal line (e.g. the unpruned model's metric).
  std::optional<double> reference_y;
  std::string reference_label;
  /// A dashed vertical line (e.g. a search's budget), `data-reference-x` in the SVG.
  std::optional<double> reference_x;
  std::string reference_x_label;
};

/// An `<svg>` element (with its xmlns) of width × height pixels: axes with ticks, the series
/// in distinct colours with a legend. Non-finite values are left out.
std::string svg_chart(const ChartSpec& spec, int width = 720, int height = 420);

/// Text with &, <, >, " and ' escaped for XML and HTML.
std::string xml_escape(const std::string& text);

/// The shortest decimal that reads back as the same double (Python's repr).
std::string shortest_decimal(double value);

/// A whole HTML page: `title`, a small built-in style sheet, and `body` (HTML, as given).
std::string html_page(const std::string& title, const std::string& body);

}  // namespace lithe::host
