// The HTML report of `lithe search`: both charts parse as XML and carry every evaluated trial
// at its exact resource ratio and accuracy, the Pareto front and the dense model; the chosen
// trial is the one drawn highlighted; the table has every trial, infeasible ones included.
#include "lithe/host/pipeline/search_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/svg_points.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;

SearchResult sample_result() {
  SearchResult r;
  r.layers = {"conv1", "block<2>"};
  r.dense = {1000, 500, 2.0, 2.0};
  r.dense_accuracy = 0.9;
  const auto add = [&](int64_t flops, double latency, std::optional<double> accuracy) {
    SearchTrial t;
    t.index = static_cast<int64_t>(r.trials.size());
    t.origin = t.index == 0 ? "uniform" : "annealing";
    t.direction = {1, 1};
    t.sparsities = {0.5, 0.25};
    t.use = {flops, 400, latency, 2.0};
    t.accuracy = accuracy;
    t.feasible = accuracy.has_value();
    r.trials.push_back(t);
  };
  add(480, 1.5, 0.81);         // 0
  add(450, 1.2, 0.84);         // 1: chosen
  add(700, 1.8, std::nullopt); // 2: does not fit
  add(300, 1.3, 0.7);          // 3
  r.best = 1;
  return r;
}

TEST(SearchReportTest, ChartsCarryEveryEvaluatedTrialAndMarkTheChosenOne) {
  const SearchResult result = sample_result();
  ResourceBudget budget;  // FLOPs 0.5x: a dashed line on the FLOPs chart only
  const std::string html = search_html(result, {"m.pt", "l1_filter", budget, "annealing", 12.0});
  const size_t second_chart = html.find("<svg", html.find("<svg") + 1);
  EXPECT_LT(html.find("data-reference-x=\"0.5\""), second_chart);
  EXPECT_EQ(html.find("data-reference-x", second_chart), std::string::npos);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  for (const auto& [chart, kind] :
       {std::pair{0, ResourceKind::kFlops}, std::pair{1, ResourceKind::kLatency}}) {
    std::vector<test::SvgPoint> points;
    ASSERT_NO_THROW(points = test::svg_points(html, chart)) << "chart " << chart;
    std::vector<test::SvgPoint> trials;
    std::vector<double> front_x;
    int dense = 0;
    for (const test::SvgPoint& p : points) {
      if (p.series == "trials") {
        trials.push_back(p);
      } else if (p.series == "Pareto front") {
        front_x.push_back(p.x);
      } else if (p.series == "dense") {
        ++dense;
        EXPECT_EQ(p.x, 1.0);
        EXPECT_EQ(p.y, 0.9);
      }
    }
    ASSERT_EQ(trials.size(), 3U) << "every evaluated trial, not the one that does not fit";
    size_t k = 0;
    for (const SearchTrial& t : result.trials) {
      if (!t.accuracy) {
        continue;
      }
      EXPECT_EQ(trials[k].x, t.use.ratio(kind, result.dense));
      EXPECT_EQ(trials[k].y, *t.accuracy);
      EXPECT_EQ(trials[k].highlighted, t.index == 1);
      EXPECT_THAT(trials[k].tooltip, HasSubstr("trial " + std::to_string(t.index)));
      ++k;
    }
    EXPECT_EQ(dense, 1);
    // FLOPs: 3 (0.3, 0.7) then 1 (0.45, 0.84); latency: 1 (0.6) only (3 is slower and worse).
    if (kind == ResourceKind::kFlops) {
      EXPECT_EQ(front_x, (std::vector<double>{0.3, 0.45}));
    } else {
      EXPECT_EQ(front_x, (std::vector<double>{0.6}));
    }
  }
  EXPECT_THROW((void)test::svg_points(html, 2), std::out_of_range);  // two charts
  EXPECT_THAT(html, HasSubstr("Chosen: trial 1, accuracy <b>0.84</b>, FLOPs 0.4500x, latency "
                              "0.6000x of the dense model: FLOPs overstate the speedup by "
                              "25.0%"));
  EXPECT_THAT(html, HasSubstr("<td>2</td><td>annealing</td><td>no</td><td>0.7000x</td>"));
  EXPECT_THAT(html, HasSubstr("conv1, block&lt;2&gt;"));
}

TEST(SearchReportTest, ASearchWithoutAFittingTrialSaysSo) {
  SearchResult result = sample_result();
  result.best.reset();
  const std::string html = search_html(result, {"m.pt", "l1_filter", {}, "random", 1.0});
  EXPECT_THAT(html, HasSubstr("No trial fits the budget."));
  for (const test::SvgPoint& p : test::svg_points(html, 0)) {
    EXPECT_FALSE(p.highlighted);
  }
}

}  // namespace
}  // namespace lithe::host
