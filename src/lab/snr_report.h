// Outputs of the SNR study: results.csv (one row per sample and configuration) and report.html (one
// self-contained page: inline SVG figures, a reading of each figure in numbers, tables of medians and a
// methods section).
//
// results.csv columns (empty = not applicable; numbers printed with fixed precision so that a seed gives
// the same bytes on every run):
//   experiment, sample, data, sigma, rho, measured_rho, outlier_factor, length, format, scaling, rounding,
//   accumulation, promote_interval (N_C; "never"), recipe, snr_db, accum_snr_db, calc_diff
#pragma once
#include <string>
#include <vector>

#include "lab/snr_study.h"

namespace fp8train::lab {

inline constexpr const char* kSnrCsvHeader =
    "experiment,sample,data,sigma,rho,measured_rho,outlier_factor,length,format,scaling,rounding,accumulation,"
    "promote_interval,recipe,snr_db,accum_snr_db,calc_diff";

std::string results_csv(const std::vector<SnrRow>& rows);
std::string report_html(const std::vector<SnrRow>& rows, const SnrStudyConfig& config);

// Writes DIR/results.csv and DIR/report.html, each to a temporary name in DIR first and then renamed, so a
// reader never sees a half-written file. Creates DIR (and parents) when missing; throws fp8train::Error
// when DIR exists but is not a directory or a file cannot be written.
void write_snr_outputs(const std::string& dir, const std::vector<SnrRow>& rows, const SnrStudyConfig& config);

// Creates DIR (and parents) when missing; throws fp8train::Error when it exists but is not a directory or
// cannot be created. write_snr_outputs calls it; a caller may call it first to fail before a long run.
void prepare_output_dir(const std::string& dir);

}  // namespace fp8train::lab
