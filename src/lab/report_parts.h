// Internal pieces of the SNR report (src/lab only): selecting rows, medians, number formatting, and the
// HTML of each experiment's section (figures + readings + tables). report_html() in snr_report.cpp
// assembles them into the page.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lab/snr_study.h"

namespace fp8train::lab::report {

using RowFilter = std::function<bool(const SnrRow&)>;

// snr_db (or accum_snr_db) of the rows of `experiment` that pass `where`, in row order.
std::vector<double> snr_values(const std::vector<SnrRow>& rows, int experiment, const RowFilter& where,
                               bool accumulation_only = false);
// Median of the same values (NaN when none).
double median_snr(const std::vector<SnrRow>& rows, int experiment, const RowFilter& where,
                  bool accumulation_only = false);
double median_of(std::vector<double> values);

// "29.4" (one decimal), "n/a" for NaN, "∞" for +Inf.
std::string db(double value);
// Escaped text for HTML.
std::string html(const std::string& text);

bool same(double a, double b);  // exact match of grid values (NaN == NaN)

// One experiment's section: <section> with heading, figures, readings and tables. Empty when the rows hold
// nothing of that experiment.
std::string section_length(const std::vector<SnrRow>& rows, int& figure);
std::string section_correlation(const std::vector<SnrRow>& rows, int& figure);
std::string section_promotion(const std::vector<SnrRow>& rows, int& figure);
std::string section_outliers(const std::vector<SnrRow>& rows, int& figure);
std::string section_formats(const std::vector<SnrRow>& rows, int& figure);
std::string section_gemm(const std::vector<SnrRow>& rows, const SnrStudyConfig& config, int& figure);

// The key findings as <li> items (numbers taken from the rows).
std::string key_findings(const std::vector<SnrRow>& rows);

// A figure block: the SVG, a caption and the reading paragraph.
std::string figure_block(int number, const std::string& svg, const std::string& caption, const std::string& reading);

}  // namespace fp8train::lab::report
