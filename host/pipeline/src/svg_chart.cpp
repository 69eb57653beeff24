#include "lithe/host/pipeline/svg_chart.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace lithe::host {
namespace {

// Colour-blind-safe palette (Okabe-Ito), repeated past eight series.
constexpr std::array<const char*, 8> kColours = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                 "#E69F00", "#56B4E9", "#F0E442", "#000000"};

std::string number(double value, int decimals) {
  std::array<char, 64> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%.*f", decimals, value);
  return buffer.data();
}

// Tick positions: a 1, 2 or 5 × 10^k step giving about `count` ticks over [low, high].
std::vector<double> ticks(double low, double high, int count) {
  const double raw = (high - low) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (raw <= step) {
      break;
    }
  }
  std::vector<double> out;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) {
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

int decimals_for(const std::vector<double>& tick_values) {
  if (tick_values.size() < 2) {
    return 2;
  }
  const double step = tick_values[1] - tick_values[0];
  return std::clamp(static_cast<int>(std::ceil(-std::log10(step))), 0, 6);
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string shortest_decimal(double value) {
  std::array<char, 32> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  std::string text(buffer.data(), ec == std::errc() ? end : buffer.data());
  if (text.find_first_of(".eEn") == std::string::npos) {
    text += ".0";  // Python prints integral floats with ".0"
  }
  return text;
}

std::string svg_chart(const ChartSpec& spec, int width, int height) {
  double x_low = std::numeric_limits<double>::infinity();
  double x_high = -x_low;
  double y_low = x_low;
  double y_high = -x_low;
  const auto include = [&](double x, double y) {
    x_low = std::min(x_low, x);
    x_high = std::max(x_high, x);
    y_low = std::min(y_low, y);
    y_high = std::max(y_high, y);
  };
  for (const ChartSeries& s : spec.series) {
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) {
        include(x, y);
      }
    }
  }
  if (spec.reference_y && std::isfinite(*spec.reference_y)) {
    y_low = std::min(y_low, *spec.reference_y);
    y_high = std::max(y_high, *spec.reference_y);
  }
  if (spec.reference_x && std::isfinite(*spec.reference_x) && std::isfinite(x_low)) {
    x_low = std::min(x_low, *spec.reference_x);
    x_high = std::max(x_high, *spec.reference_x);
  }
  if (!std::isfinite(x_low)) {  // nothing to draw: a unit square
    x_low = y_low = 0.0;
    x_high = y_high = 1.0;
  }
  const auto pad = [](double& low, double& high) {
    const double span = high - low;
    const double margin = span > 0 ? span * 0.05 : std::max(std::fabs(low) * 0.05, 0.5);
    low -= margin;
    high += margin;
  };
  pad(x_low, x_high);
  pad(y_low, y_high);

  const int left = 70;
  const int right = 190;  // room for the legend
  const int top = 40;
  const int bottom = 55;
  const double plot_w = width - left - right;
  const double plot_h = height - top - bottom;
  const auto px = [&](double x) { return left + (x - x_low) / (x_high - x_low) * plot_w; };
  const auto py = [&](double y) { return top + (1.0 - (y - y_low) / (y_high - y_low)) * plot_h; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(width) + "\" height=\"" + std::to_string(height) +
                    "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                    std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>" + xml_escape(spec.title) + "</title>\n";
  svg += "<text x=\"" + std::to_string(width / 2) + "\" y=\"22\" text-anchor=\"middle\" "
         "font-size=\"15\">" + xml_escape(spec.title) + "</text>\n";
  // Axes, ticks, grid.
  svg += "<g stroke=\"#888\" fill=\"none\"><rect x=\"" + number(left, 1) + "\" y=\"" +
         number(top, 1) + "\" width=\"" + number(plot_w, 1) + "\" height=\"" +
         number(plot_h, 1) + "\"/></g>\n";
  const std::vector<double> x_ticks = ticks(x_low, x_high, 6);
  const std::vector<double> y_ticks = ticks(y_low, y_high, 6);
  svg += "<g font-size=\"11\" fill=\"#333\">\n";
  for (const double t : x_ticks) {
    const std::string x = number(px(t), 1);
    svg += "<line x1=\"" + x + "\" y1=\"" + number(top, 1) + "\" x2=\"" + x + "\" y2=\"" +
           number(top + plot_h, 1) + "\" stroke=\"#eee\"/><text x=\"" + x + "\" y=\"" +
           number(top + plot_h + 16, 1) + "\" text-anchor=\"middle\">" +
           number(t, decimals_for(x_ticks)) + "</text>\n";
  }
  for (const double t : y_ticks) {
    const std::string y = number(py(t), 1);
    svg += "<line x1=\"" + number(left, 1) + "\" y1=\"" + y + "\" x2=\"" +
           number(left + plot_w, 1) + "\" y2=\"" + y + "\" stroke=\"#eee\"/><text x=\"" +
           number(left - 6, 1) + "\" y=\"" + y + "\" dy=\"4\" text-anchor=\"end\">" +
           number(t, decimals_for(y_ticks)) + "</text>\n";
  }
  svg += "</g>\n";
  svg += "<text x=\"" + number(left + plot_w / 2, 1) + "\" y=\"" + std::to_string(height - 12) +
         "\" text-anchor=\"middle\">" + xml_escape(spec.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16 " + number(top + plot_h / 2, 1) +
         ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(spec.y_label) + "</text>\n";
  if (spec.reference_y && std::isfinite(*spec.reference_y)) {
    const std::string y = number(py(*spec.reference_y), 1);
    svg += "<g data-reference=\"" + shortest_decimal(*spec.reference_y) + "\"><line x1=\"" +
           number(left, 1) + "\" y1=\"" + y + "\" x2=\"" + number(left + plot_w, 1) +
           "\" y2=\"" + y + "\" stroke=\"#555\" stroke-dasharray=\"5 4\"/><text x=\"" +
           number(left + plot_w - 4, 1) + "\" y=\"" + y + "\" dy=\"-5\" text-anchor=\"end\" "
           "fill=\"#555\">" + xml_escape(spec.reference_label) + "</text></g>\n";
  }  if (spec.reference_x && std::isfinite(*spec.reference_x)) {
    const std::string x = number(px(*spec.reference_x), 1);
    svg += "<g data-reference-x=\"" + shortest_decimal(*spec.reference_x) + "\"><line x1=\"" +
           x + "\" y1=\"" + number(top, 1) + "\" x2=\"" + x + "\" y2=\"" +
           number(top + plot_h, 1) + "\" stroke=\"#555\" stroke-dasharray=\"5 4\"/><text x=\"" +
           x + "\" y=\"" + number(top + 12, 1) + "\" dx=\"4\" fill=\"#555\">" +
           xml_escape(spec.reference_x_label) + "</text></g>\n";
  }

  // Series: a line, then a circle per point with its exact values.
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const ChartSeries& s = spec.series[i];
    const char* colour = kColours[i % kColours.size()];
    svg += "<g data-series-index=\"" + std::to_string(i) + "\" fill=\"" + colour +
           "\" stroke=\"" + colour + "\">\n";
    std::string path;
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) {
        path += (path.empty() ? "" : " ") + number(px(x), 2) + "," + number(py(y), 2);
      }
    }
    if (s.connect && !path.empty()) {
      svg += "<polyline fill=\"none\" stroke-width=\"2\" points=\"" + path + "\"/>\n";
    }
    for (size_t k = 0; k < s.points.size(); ++k) {
      const auto [x, y] = s.points[k];
      if (!std::isfinite(x) || !std::isfinite(y)) {
        continue;
      }
      const bool big = k < s.highlighted.size() && s.highlighted[k];
      const std::string tip = k < s.tooltips.size() && !s.tooltips[k].empty()
                                  ? s.tooltips[k]
                                  : s.name + ": " + shortest_decimal(x) + ", " +
                                        shortest_decimal(y);
      svg += "<circle cx=\"" + number(px(x), 2) + "\" cy=\"" + number(py(y), 2) + "\" r=\"" +
             (big ? "7\" stroke=\"#000\" stroke-width=\"2\"" : "3.5\"") + " data-series=\"" +
             xml_escape(s.name) + "\" data-x=\"" + shortest_decimal(x) + "\" data-y=\"" +
             shortest_decimal(y) + "\"><title>" + xml_escape(tip) + "</title></circle>\n";
    }
    svg += "</g>\n";
    // Legend entry.
    const double ly = top + 8 + 18.0 * static_cast<double>(i);
    svg += "<g><rect x=\"" + number(left + plot_w + 16, 1) + "\" y=\"" + number(ly - 8, 1) +
           "\" width=\"12\" height=\"12\" fill=\"" + colour + "\"/><text x=\"" +
           number(left + plot_w + 34, 1) + "\" y=\"" + number(ly + 2, 1) + "\">" +
           xml_escape(s.name) + "</text></g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string html_page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" +
         xml_escape(title) +
         "</title>\n<style>\n"
         "body { font-family: sans-serif; margin: 2em; color: #222; }\n"
         "table { border-collapse: collapse; margin: 1em 0; }\n"
         "th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }\n"
         "th:first-child, td:first-child { text-align: left; }\n"
         "caption { text-align: left; font-weight: bold; margin-bottom: 4px; }\n"
         "</style>\n</head>\n<body>\n" + body + "</body>\n</html>\n";
}

}  // namespace lithe::host
