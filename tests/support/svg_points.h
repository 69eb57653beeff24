#pragma once
// Reading the points back from the inline SVG charts of Lithe's HTML reports (svg_chart.h):
// every <circle> with its series, exact x and y, and whether it is drawn highlighted.

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace lithe::test {

struct SvgPoint {
  std::string series;
  double x = 0;
  double y = 0;
  bool highlighted = false;
  std::string tooltip;
};

/// Every <circle> under `node`, depth first.
inline void collect_svg_points(const boost::property_tree::ptree& node,
                               std::vector<SvgPoint>& out) {
  for (const auto& [name, child] : node) {
    if (name == "circle") {
      const auto& a = child.get_child("<xmlattr>");
      out.push_back({a.get<std::string>("data-series"), std::stod(a.get<std::string>("data-x")),
                     std::stod(a.get<std::string>("data-y")), a.get<std::string>("r") == "7",
                     child.get<std::string>("title", "")});
    } else if (name != "<xmlattr>") {
      collect_svg_points(child, out);
    }
  }
}

/// The `index`-th <svg> element of an HTML page, parsed (boost's XML parser throws on
/// malformed XML), and its points. Throws std::out_of_range when there are fewer charts.
inline std::vector<SvgPoint> svg_points(const std::string& html, size_t index,
                                        boost::property_tree::ptree* tree_out = nullptr) {
  size_t begin = html.find("<svg");
  for (size_t i = 0; i < index && begin != std::string::npos; ++i) {
    begin = html.find("<svg", begin + 1);
  }
  const size_t end = begin == std::string::npos ? begin : html.find("</svg>", begin);
  if (end == std::string::npos) {
    throw std::out_of_range("the page has no chart " + std::to_string(index));
  }
  std::istringstream svg(html.substr(begin, end + 6 - begin));
  boost::property_tree::ptree tree;
  boost::property_tree::read_xml(svg, tree);
  std::vector<SvgPoint> points;
  collect_svg_points(tree.get_child("svg"), points);
  if (tree_out != nullptr) {
    *tree_out = tree;
  }
  return points;
}

}  // namespace lithe::test
