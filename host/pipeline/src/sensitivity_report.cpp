#include "lithe/host/pipeline/sensitivity_report.h"

#include <cstdio>

#include "lithe/host/pipeline/svg_chart.h"

namespace lithe::host {

std::string sensitivity_html(const SensitivityResult& result, const SensitivityReportInfo& info) {
  ChartSpec chart;
  chart.title = "Sensitivity of each layer pruned alone (" + info.algorithm + ")";
  chart.x_label = "sparsity of the layer";
  chart.y_label = info.metric;
  chart.reference_y = result.original;
  chart.reference_label = "unpruned " + shortest_decimal(result.original);
  for (const SensitivityRow& row : result.rows) {
    ChartSeries series;
    series.name = row.layer;
    for (const auto& [sparsity, value] : row.metrics) {
      series.points.emplace_back(sparsity, value);
      series.tooltips.push_back(row.layer + " at sparsity " + shortest_decimal(sparsity) + ": " +
                                info.metric + " " + shortest_decimal(value));
    }
    chart.series.push_back(std::move(series));
  }

  std::string body = "<h1>Sensitivity analysis</h1>\n<p>Model <code>" + xml_escape(info.model) +
                     "</code>, pruner <code>" + xml_escape(info.algorithm) + "</code>, " +
                     xml_escape(info.metric) + " on " + std::to_string(info.samples) +
                     " samples. Unpruned: <b>" + shortest_decimal(result.original) + "</b>. " +
                     std::to_string(result.evaluations) + " evaluations";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", info.seconds);
  body += std::string(" in ") + seconds + " s.</p>\n";
  body += "<p>Each curve is one layer pruned alone, every other layer untouched. A layer whose "
          "curve stays near the dashed line tolerates pruning; one that falls early does "
          "not.</p>\n";
  body += svg_chart(chart);
  body += "<table>\n<caption>" + xml_escape(info.metric) +
          " by layer and sparsity (a row ends where the early stop did)</caption>\n<tr><th>"
          "layer</th>";
  for (const double s : result.sparsities) {
    body += "<th>" + shortest_decimal(s) + "</th>";
  }
  body += "</tr>\n";
  for (const SensitivityRow& row : result.rows) {
    body += "<tr><td>" + xml_escape(row.layer) + "</td>";
    for (size_t k = 0; k < result.sparsities.size(); ++k) {
      body += "<td>" + (k < row.metrics.size() ? shortest_decimal(row.metrics[k].second) : "") +
              "</td>";
    }
    body += "</tr>\n";
  }
  body += "</table>\n";
  return html_page("Sensitivity: " + info.model, body);
}

}  // namespace lithe::host
