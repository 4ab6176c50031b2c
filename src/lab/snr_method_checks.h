// Emulated roundings used by experiment 7 (the method checks; see snr_method_checks.cpp): the published
// simulation's IEEE-style E4M3 and its FP8 running sum, next to this study's OCP encoders.
#pragma once

namespace fp8train::lab {

// Rounds x to an E4M3 grid (3 mantissa bits, smallest normal 2^-6, subnormal quantum 2^-9) and clamps the
// magnitude to max_value: max_value 448 with RNE ties is OCP E4M3 (num::e4m3_encode, satfinite) for inputs
// within ±448; 240 with ties away from zero is the IEEE-style E4M3 of the published study.
double round_e4m3_variant(double x, double max_value, bool ties_away);

// Rounds x to `bits` fraction bits after the leading one (round to nearest even), without a range limit:
// the precision of an FP8 accumulator (bits = 3) with nothing else modelled.
double round_to_mantissa_bits(double x, int bits);

}  // namespace fp8train::lab
