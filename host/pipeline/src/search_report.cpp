#include "lithe/host/pipeline/search_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "lithe/host/pipeline/svg_chart.h"

namespace lithe::host {
namespace {

// Whether the search chose among several pruners (its trials name theirs then).
bool several_pruners(const SearchResult& result) {
  std::set<std::string> pruners;
  for (const SearchTrial& t : result.trials) {
    pruners.insert(t.algorithm);
  }
  return pruners.size() > 1;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Accuracy against one resource's ratio to the dense model.
ChartSpec accuracy_chart(const SearchResult& result, ResourceKind kind, const std::string& what,
                         const ResourceBudget& budget) {
  const bool several = several_pruners(result);
  ChartSpec chart;
  if (budget.kind == kind && budget.relative) {  // the budget as a line where it is a share
    chart.reference_x = budget.value;
    chart.reference_x_label = "budget " + shortest_decimal(budget.value) + "x";
  }
  chart.title = "Accuracy against " + what + " (sped-up models)";
  chart.x_label = what + " / dense";
  chart.y_label = "top-1 accuracy";
  ChartSeries trials;
  trials.name = "trials";
  trials.connect = false;
  for (const SearchTrial& t : result.trials) {
    if (!t.accuracy.has_value()) {
      continue;
    }
    const double x = t.use.ratio(kind, result.dense);
    trials.points.emplace_back(x, *t.accuracy);
    const bool chosen = result.best.has_value() && *result.best == t.index;
    trials.tooltips.push_back("trial " + std::to_string(t.index) + " (" + trial_label(t, several) +
                              ")" +
                              (chosen ? ", chosen" : "") + ": " + what + " " +
                              shortest_decimal(x) + "x, accuracy " +
                              shortest_decimal(*t.accuracy));
    trials.highlighted.push_back(chosen);
  }
  ChartSeries front;
  front.name = "Pareto front";
  for (const int64_t index : pareto_front(result, kind)) {
    const SearchTrial& t = result.trials[index];
    front.points.emplace_back(t.use.ratio(kind, result.dense), *t.accuracy);
    front.tooltips.push_back("trial " + std::to_string(index) + " on the front");
  }
  ChartSeries dense;
  dense.name = "dense";
  dense.connect = false;
  dense.points.emplace_back(1.0, result.dense_accuracy);
  dense.tooltips.push_back("dense model: accuracy " + shortest_decimal(result.dense_accuracy));
  chart.series = {std::move(trials), std::move(front), std::move(dense)};
  return chart;
}

// The dense model, the chosen trial, both charts and the table of trials.
std::string search_section(const SearchResult& result, const SearchReportInfo& info) {
  std::string body = "<p>Model <code>" +
                     xml_escape(info.model) + "</code>, pruner <code>" +
                     xml_escape(info.algorithm) + "</code>, budget <b>" +
                     xml_escape(info.budget.describe()) + "</b>, strategy " +
                     xml_escape(info.strategy) + ", " + std::to_string(result.trials.size()) +
                     " trials (" + fixed(info.seconds, 1) + " s in this run). Dense model: " +
                     std::to_string(result.dense.flops) + " FLOPs, " +
                     std::to_string(result.dense.params) + " parameters, " +
                     fixed(result.dense.latency_ms, 3) + " ms, accuracy " +
                     shortest_decimal(result.dense_accuracy) + ".</p>\n";
  if (result.best.has_value()) {
    const SearchTrial& b = result.trials[*result.best];
    const double flops = b.use.ratio(ResourceKind::kFlops, result.dense);
    const double latency = b.use.ratio(ResourceKind::kLatency, result.dense);
    body += "<p>Chosen: trial " + std::to_string(b.index) + ", accuracy <b>" +
            shortest_decimal(*b.accuracy) + "</b>, FLOPs " + fixed(flops, 4) + "x, latency " +
            fixed(latency, 4) + "x of the dense model: FLOPs " +
            (flops < latency ? "over" : "under") + "state the speedup by " +
            fixed(100.0 * std::fabs(flops - latency) / std::max(latency, 1e-12), 1) +
            "% (latency is measured on this machine, alternating with the dense "
            "model).</p>\n";
  } else {
    body += "<p><b>No trial fits the budget.</b></p>\n";
  }
  body += svg_chart(accuracy_chart(result, ResourceKind::kFlops, "FLOPs", info.budget));
  body += svg_chart(accuracy_chart(result, ResourceKind::kLatency, "latency", info.budget));
  body += "<table>\n<caption>Trials (sparsity per layer: ";
  for (size_t i = 0; i < result.layers.size(); ++i) {
    body += (i == 0 ? "" : ", ") + xml_escape(result.layers[i]);
  }
  body += ")</caption>\n<tr><th>trial</th><th>origin</th><th>fits</th><th>FLOPs</th><th>"
          "params</th><th>latency</th><th>accuracy</th><th>sparsities</th></tr>\n";
  const bool several = several_pruners(result);
  for (const SearchTrial& t : result.trials) {
    std::string sparsities;
    for (size_t i = 0; i < t.sparsities.size(); ++i) {
      sparsities += (i == 0 ? "" : " ") + fixed(t.sparsities[i], 3);
    }
    const bool chosen = result.best.has_value() && *result.best == t.index;
    body += std::string("<tr") + (chosen ? " class=\"chosen\"" : "") + "><td>" +
            std::to_string(t.index) + (chosen ? " (chosen)" : "") + "</td><td>" +
            trial_label(t, several) +
            "</td><td>" + (t.feasible ? "yes" : "no") + "</td><td>" +
            fixed(t.use.ratio(ResourceKind::kFlops, result.dense), 4) + "x</td><td>" +
            fixed(t.use.ratio(ResourceKind::kParams, result.dense), 4) + "x</td><td>" +
            fixed(t.use.ratio(ResourceKind::kLatency, result.dense), 4) + "x</td><td>" +
            (t.accuracy.has_value() ? shortest_decimal(*t.accuracy) : "-") + "</td><td>" +
            sparsities + "</td></tr>\n";
  }
  body += "</table>\n";
  return body;
}

}  // namespace

std::string search_html(const SearchResult& result, const SearchReportInfo& info) {
  return html_page("Search: " + info.model,
                   "<h1>Search to a measured budget</h1>\n" + search_section(result, info));
}

std::string auto_compress_html(const AutoCompressResult& result, const SearchReportInfo& info) {
  std::string body =
      "<h1>AutoCompress to a measured budget</h1>\n<p>Model <code>" + xml_escape(info.model) +
      "</code>, base pruner <code>" + xml_escape(info.algorithm) + "</code> (ADMM's base_algo), "
      "budget <b>" + xml_escape(info.budget.describe()) + "</b>, " +
      std::to_string(result.rounds.size()) + " rounds (" + fixed(info.seconds, 1) +
      " s in this run). Dense model: " + std::to_string(result.dense.flops) + " FLOPs, " +
      std::to_string(result.dense.params) + " parameters, accuracy " +
      shortest_decimal(result.dense_accuracy) + ".</p>\n<table>\n<caption>Rounds: each searched "
      "per-layer sparsities for its budget, trained toward them with ADMM and sped up"
      "</caption>\n<tr><th>round</th><th>budget</th><th>FLOPs</th><th>params</th><th>latency"
      "</th><th>accuracy</th></tr>\n";
  for (size_t i = 0; i < result.rounds.size(); ++i) {
    const AutoCompressRound& r = result.rounds[i];
    body += "<tr><td>" + std::to_string(i + 1) + "</td><td>" + xml_escape(r.budget.describe()) +
            "</td><td>" + fixed(r.use.ratio(ResourceKind::kFlops, result.dense), 4) +
            "x</td><td>" + fixed(r.use.ratio(ResourceKind::kParams, result.dense), 4) +
            "x</td><td>" + fixed(r.use.ratio(ResourceKind::kLatency, result.dense), 4) +
            "x</td><td>" + shortest_decimal(r.accuracy) + "</td></tr>\n";
  }
  body += "</table>\n";
  for (size_t i = 0; i < result.rounds.size(); ++i) {
    SearchReportInfo round = info;
    round.model = i == 0 ? info.model : "the model of round " + std::to_string(i);
    round.budget = result.rounds[i].budget;
    round.seconds = 0;
    body += "<h2>Round " + std::to_string(i + 1) + "</h2>\n<p>FLOPs and parameters against the "
            "model the round started from; latency against the dense model.</p>\n" +
            search_section(result.rounds[i].search, round);
  }
  return html_page("AutoCompress: " + info.model, body);
}

}  // namespace lithe::host
