// The HTML report of a sensitivity analysis: its SVG parses as XML and carries every trial as
// a point with its exact layer, sparsity and metric; the table holds every value; names that
// are not XML-safe are escaped; early-stopped rows are short in both.
#include "lithe/host/pipeline/sensitivity_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "lithe/host/pipeline/svg_chart.h"
#include "support/svg_points.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using boost::property_tree::ptree;

// (data-series, data-x, data-y) of every point.
std::vector<std::tuple<std::string, double, double>> triples(
    const std::vector<test::SvgPoint>& points) {
  std::vector<std::tuple<std::string, double, double>> out;
  for (const test::SvgPoint& p : points) {
    out.emplace_back(p.series, p.x, p.y);
  }
  return out;
}

SensitivityResult sample_result() {
  SensitivityResult r;
  r.original = 0.8588;
  r.sparsities = {0.25, 0.5, 0.75};
  r.rows = {{"conv1", {{0.25, 0.8501}, {0.5, 0.7713}, {0.75, 0.1}}},
            {"block<1>&\"x\"", {{0.25, 0.8577}, {0.5, 0.8012}}}};  // stopped early
  r.evaluations = 6;
  return r;
}

TEST(SensitivityReportTest, TheSvgParsesAndCarriesEveryTrialExactly) {
  const SensitivityResult result = sample_result();
  const std::string html = sensitivity_html(result, {"m.pt", "l1_filter", "top-1 accuracy",
                                                     10000, 2.5});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://", html.find("</svg>")), std::string::npos) << "no external link";
  ptree tree;
  std::vector<std::tuple<std::string, double, double>> points;
  ASSERT_NO_THROW(points = triples(test::svg_points(html, 0, &tree)))
      << "the SVG is not well-formed XML";
  std::vector<std::tuple<std::string, double, double>> expected;
  for (const SensitivityRow& row : result.rows) {
    for (const auto& [sparsity, value] : row.metrics) {
      expected.emplace_back(row.layer, sparsity, value);
    }
  }
  EXPECT_EQ(points, expected);  // the escaped name reads back as it was; values bit for bit
  EXPECT_EQ(tree.get<std::string>("svg.<xmlattr>.xmlns"), "http://www.w3.org/2000/svg");
  // The unpruned metric is the reference line.
  bool reference = false;
  for (const auto& [name, child] : tree.get_child("svg")) {
    if (name == "g" && child.get_optional<std::string>("<xmlattr>.data-reference")) {
      reference = child.get<std::string>("<xmlattr>.data-reference") == "0.8588";
    }
  }
  EXPECT_TRUE(reference);
  // The table: every value, the header, the short row left short.
  EXPECT_THAT(html, HasSubstr("<tr><th>layer</th><th>0.25</th><th>0.5</th><th>0.75</th></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>conv1</td><td>0.8501</td><td>0.7713</td><td>0.1</td>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>block&lt;1&gt;&amp;&quot;x&quot;</td><td>0.8577</td>"
                              "<td>0.8012</td><td></td></tr>"));
  EXPECT_THAT(html, HasSubstr("6 evaluations in 2.50 s"));
}

TEST(SvgChartTest, NonFiniteValuesAreLeftOutAndAnEmptyChartIsStillValid) {
  ChartSpec spec;
  spec.title = "t";
  ChartSeries series;
  series.name = "s";
  series.points = {{0.0, 1.0}, {1.0, std::numeric_limits<double>::quiet_NaN()}};
  spec.series = {series};
  std::istringstream one(svg_chart(spec));
  ptree tree;
  ASSERT_NO_THROW(boost::property_tree::read_xml(one, tree));
  std::vector<test::SvgPoint> points;
  test::collect_svg_points(tree.get_child("svg"), points);
  EXPECT_EQ(points.size(), 1U);
  std::istringstream empty(svg_chart(ChartSpec{}));
  EXPECT_NO_THROW(boost::property_tree::read_xml(empty, tree));
}

}  // namespace
}  // namespace lithe::host
