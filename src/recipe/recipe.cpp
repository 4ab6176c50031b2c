// Recipe definitions (recipe.h): the named recipes' defaults, spec-string parsing with ":key=value"
// overrides, the per-GEMM operand quantization, and a printable description.
#include "recipe/recipe.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/error.h"
#include "numerics/hopper_accum.h"

namespace fp8train::recipe {

std::string_view gemm_kind_name(GemmKind k) {
  switch (k) {
    case GemmKind::Fprop: return "fprop";
    case GemmKind::Dgrad: return "dgrad";
    case GemmKind::Wgrad: return "wgrad";
  }
  return "?";
}

std::string_view linear_role_name(LinearRole r) {
  switch (r) {
    case LinearRole::AttnQDown:
      return "attn_q_down";
    case LinearRole::AttnQUp:
      return "attn_q_up";
    case LinearRole::AttnKvDown:
      return "attn_kv_down";
    case LinearRole::AttnKvUp:
      return "attn_kv_up";
    case LinearRole::AttnOut:
      return "attn_out";
    case LinearRole::DenseUp:
      return "dense_up";
    case LinearRole::DenseDown:
      return "dense_down";
    case LinearRole::SharedExpertUp:
      return "shared_expert_up";
    case LinearRole::SharedExpertDown:
      return "shared_expert_down";
    case LinearRole::ExpertUp:
      return "expert_up";
    case LinearRole::ExpertDown:
      return "expert_down";
    case LinearRole::MtpProj:
      return "mtp_proj";
  }
  return "?";
}

std::string_view wgrad_input_name(WgradInput w) {
  switch (w) {
    case WgradInput::Plain:
      return "plain";
    case WgradInput::Colwise:
      return "colwise";
    case WgradInput::Retile:
      return "retile";
  }
  return "?";
}

WgradInput parse_wgrad_input(std::string_view name) {
  for (WgradInput w : {WgradInput::Plain, WgradInput::Colwise, WgradInput::Retile})
    if (name == wgrad_input_name(w)) return w;
  FP8T_FAIL("unknown Wgrad input form '{}' (expected plain, colwise or retile)", name);
}

std::string_view recipe_kind_name(RecipeKind k) {
  switch (k) {
    case RecipeKind::Fp32: return "fp32";
    case RecipeKind::Bf16: return "bf16";
    case RecipeKind::Fp8DeepSeek: return "fp8-deepseek";
    case RecipeKind::Fp8Tensorwise: return "fp8-tensorwise";
    case RecipeKind::Int8Blockwise: return "int8-blockwise";
  }
  return "?";
}

std::vector<std::string> recipe_names() {
  return {"fp32", "bf16", "fp8-deepseek", "fp8-tensorwise", "int8-blockwise"};
}

RecipeConfig make_recipe(std::string_view name) {
  RecipeConfig c;
  c.spec = std::string(name);
  if (name == "fp32") {
    c.kind = RecipeKind::Fp32;
  } else if (name == "bf16") {
    c.kind = RecipeKind::Bf16;
  } else if (name == "fp8-deepseek") {
    c.kind = RecipeKind::Fp8DeepSeek;
    c.accum = quant::AccumMode::Hopper;
    c.promote_interval = 128;
    c.act_format = quant::Format::E4M3;
    c.grad_format = quant::Format::E4M3;
    c.wgrad_input = WgradInput::Colwise;
    c.attn_out_e5m6 = true;
    c.swiglu_fp8 = true;
    c.recompute_swiglu = true;
    c.moe_dispatch_fp8 = true;
    c.recompute_norm = true;
    c.recompute_mla_up = true;
    c.moment_dtype = "bf16";
  } else if (name == "fp8-tensorwise") {
    c.kind = RecipeKind::Fp8Tensorwise;
    c.accum = quant::AccumMode::Hopper;
    c.promote_interval = 128;
    c.act_format = quant::Format::E4M3;
    c.grad_format = quant::Format::E5M2;
    c.wgrad_input = WgradInput::Colwise;
  } else if (name == "int8-blockwise") {
    c.kind = RecipeKind::Int8Blockwise;
    c.accum = quant::AccumMode::Exact;
    c.act_format = quant::Format::INT8;
    c.grad_format = quant::Format::INT8;
    c.stochastic_grads = true;
    c.wgrad_input = WgradInput::Colwise;
  } else {
    FP8T_FAIL("unknown recipe '{}' (expected fp32, bf16, fp8-deepseek, fp8-tensorwise or int8-blockwise)", name);
  }
  return c;
}

namespace {
bool parse_bool(std::string_view key, std::string_view v) {
  if (v == "on" || v == "true" || v == "1" || v == "yes") return true;
  if (v == "off" || v == "false" || v == "0" || v == "no") return false;
  FP8T_FAIL("recipe option '{}': '{}' is not a boolean (use on/off)", key, v);
}

int64_t parse_int(std::string_view key, std::string_view v, int64_t lo, int64_t hi) {
  int64_t out = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  FP8T_CHECK(ec == std::errc() && ptr == v.data() + v.size(), "recipe option '{}': '{}' is not an integer", key, v);
  FP8T_CHECK(out >= lo && out <= hi, "recipe option '{}': {} is outside [{}, {}]", key, out, lo, hi);
  return out;
}
}  // namespace

void set_recipe_option(RecipeConfig& c, std::string_view key, std::string_view v) {
  const bool quantized = c.quantized_gemms();
  auto need_quantized = [&] {
    FP8T_CHECK(quantized, "recipe option '{}' applies to the fp8/int8 recipes only, not '{}'", key,
               recipe_kind_name(c.kind));
  };
  if (key == "accum") {
    need_quantized();
    c.accum = quant::parse_accum_mode(v);
  } else if (key == "promote") {
    need_quantized();
    if (v == "never") {
      c.promote_interval = num::kNeverPromote;
    } else {
      const int64_t p = parse_int(key, v, 32, 1 << 20);
      FP8T_CHECK(p % 32 == 0, "recipe option 'promote': {} is not a multiple of 32 (or 'never')", p);
      c.promote_interval = static_cast<int>(p);
    }
  } else if (key == "pow2") {
    need_quantized();
    c.pow2_scales = parse_bool(key, v);
  } else if (key == "dgrad_block") {
    need_quantized();
    FP8T_CHECK(!c.per_tensor(), "recipe option 'dgrad_block' needs block scales; fp8-tensorwise is per tensor");
    c.dgrad_block128 = parse_bool(key, v);
  } else if (key == "grad") {
    need_quantized();
    const quant::Format f = quant::parse_format(v);
    FP8T_CHECK(!c.int8() && (f == quant::Format::E4M3 || f == quant::Format::E5M2),
               "recipe option 'grad': '{}' is not usable here (fp8 recipes take e4m3 or e5m2)", v);
    c.grad_format = f;
  } else if (key == "stochastic") {
    FP8T_CHECK(c.int8(), "recipe option 'stochastic' applies to int8-blockwise only");
    c.stochastic_grads = parse_bool(key, v);
  } else if (key == "amax_len") {
    FP8T_CHECK(c.per_tensor(), "recipe option 'amax_len' applies to fp8-tensorwise only");
    c.amax_history = static_cast<int>(parse_int(key, v, 1, 1 << 20));
  } else if (key == "amax_algo") {
    FP8T_CHECK(c.per_tensor(), "recipe option 'amax_algo' applies to fp8-tensorwise only");
    if (v == "max") {
      c.amax_algorithm = quant::AmaxAlgorithm::Max;
    } else if (v == "most_recent") {
      c.amax_algorithm = quant::AmaxAlgorithm::MostRecent;
    } else {
      FP8T_FAIL("recipe option 'amax_algo': '{}' (expected max or most_recent)", v);
    }
  } else if (key == "wgrad_x") {
    need_quantized();
    const WgradInput w = parse_wgrad_input(v);
    FP8T_CHECK(w != WgradInput::Plain, "recipe option 'wgrad_x': a quantized Wgrad takes colwise or retile");
    c.wgrad_input = w;
  } else if (key == "attn_out_e5m6") {
    need_quantized();
    c.attn_out_e5m6 = parse_bool(key, v);
  } else if (key == "swiglu_fp8") {
    c.swiglu_fp8 = parse_bool(key, v);
  } else if (key == "recompute_swiglu") {
    c.recompute_swiglu = parse_bool(key, v);
  } else if (key == "dispatch_fp8") {
    c.moe_dispatch_fp8 = parse_bool(key, v);
  } else if (key == "recompute_norm") {
    c.recompute_norm = parse_bool(key, v);
  } else if (key == "recompute_mla_up") {
    c.recompute_mla_up = parse_bool(key, v);
  } else if (key == "moments") {
    FP8T_CHECK(v == "fp32" || v == "bf16", "recipe option 'moments': '{}' (expected fp32 or bf16)", v);
    c.moment_dtype = std::string(v);
    c.moment_dtype_set = true;
  } else if (key == "seed") {
    c.seed = static_cast<uint64_t>(parse_int(key, v, 0, INT64_MAX));
  } else {
    FP8T_FAIL(
        "unknown recipe option '{}' (known: accum, promote, pow2, dgrad_block, grad, stochastic, amax_len, "
        "amax_algo, wgrad_x, attn_out_e5m6, swiglu_fp8, recompute_swiglu, dispatch_fp8, recompute_norm, "
        "recompute_mla_up, moments, seed)",
        key);
  }
}

RecipeConfig parse_recipe(std::string_view spec) {
  FP8T_CHECK(!spec.empty(), "empty recipe name");
  const size_t colon = spec.find(':');
  RecipeConfig c = make_recipe(spec.substr(0, colon));
  size_t pos = colon;
  while (pos != std::string_view::npos) {
    const size_t next = spec.find(':', pos + 1);
    const std::string_view item = spec.substr(pos + 1, next == std::string_view::npos ? next : next - pos - 1);
    const size_t eq = item.find('=');
    FP8T_CHECK(eq != std::string_view::npos && eq > 0,
               "recipe '{}': override '{}' is not key=value", spec, item);
    set_recipe_option(c, item.substr(0, eq), item.substr(eq + 1));
    pos = next;
  }
  c.spec = std::string(spec);
  return c;
}

GemmOperands gemm_operands(const RecipeConfig& c, GemmKind kind) {
  FP8T_CHECK(c.quantized_gemms(), "gemm_operands: recipe '{}' does not quantize its GEMMs", c.spec);
  GemmOperands g;
  g.gemm.mode = c.accum;
  g.gemm.promote_interval = c.promote_interval;
  const quant::ScaleMode mode = c.pow2_scales ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  const quant::Granularity tile = c.per_tensor() ? quant::Granularity::tensor() : quant::Granularity::tile_1x128();
  const quant::Granularity block =
      c.per_tensor() ? quant::Granularity::tensor() : quant::Granularity::block_128x128();
  const quant::Rounding grad_rounding =
      c.int8() && c.stochastic_grads ? quant::Rounding::Stochastic : quant::Rounding::Nearest;
  switch (kind) {
    case GemmKind::Fprop:
      g.a = {c.act_format, tile, mode, quant::Rounding::Nearest, 0};
      g.b = {c.act_format, block, mode, quant::Rounding::Nearest, 0};
      break;
    case GemmKind::Dgrad:
      g.a = {c.grad_format, c.dgrad_block128 ? block : tile, mode, grad_rounding, 0};
      g.b = {c.act_format, block, mode, quant::Rounding::Nearest, 0};
      break;
    case GemmKind::Wgrad:
      g.a = {c.grad_format, tile, mode, grad_rounding, 0};
      g.b = {c.act_format, tile, mode, quant::Rounding::Nearest, 0};
      break;
  }
  return g;
}

LinearRecipe linear_recipe(const RecipeConfig& c, LinearRole role) {
  LinearRecipe r;
  r.quantized = c.quantized_gemms();
  if (!r.quantized) return r;
  r.fprop = gemm_operands(c, GemmKind::Fprop);
  r.dgrad = gemm_operands(c, GemmKind::Dgrad);
  r.wgrad = gemm_operands(c, GemmKind::Wgrad);
  r.wgrad_input = c.wgrad_input;
  if (role == LinearRole::AttnOut && c.attn_out_e5m6) {
    r.has_input_storage = true;
    r.input_storage = {quant::Format::E5M6, quant::Granularity::tile_1x128(), quant::ScaleMode::PowerOfTwo,
                       quant::Rounding::Nearest, 0};
  }
  // Dispatch in FP8 moves per-token 1×128 tiles with power-of-two scales (a per-tensor recipe has no per-token
  // scales to dispatch, so it keeps its own operands).
  if (c.moe_dispatch_fp8 && !c.per_tensor()) {
    if (role == LinearRole::ExpertUp) {
      r.dispatched_input = true;
      r.fprop.a.scale_mode = quant::ScaleMode::PowerOfTwo;
    }
    if (role == LinearRole::ExpertDown) {
      r.dispatched_grad = true;
      r.dgrad.a.scale_mode = quant::ScaleMode::PowerOfTwo;
      r.dgrad.a.granularity = quant::Granularity::tile_1x128();  // the dispatched tensor's own tiles
    }
  }
  return r;
}

quant::QuantSpec swiglu_storage_spec(const RecipeConfig& c) {
  return {quant::Format::E4M3, quant::Granularity::tile_1x128(),
          c.pow2_scales ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax, quant::Rounding::Nearest, 0};
}

std::string describe_recipe(const RecipeConfig& c) {
  std::string out = fmt::format("recipe {} ({})\n", c.spec, recipe_kind_name(c.kind));
  if (c.kind == RecipeKind::Fp32) {
    out += "  gemms: fp32 inputs, fp32 accumulation (OpenBLAS)\n";
  } else if (c.kind == RecipeKind::Bf16) {
    out += "  gemms: bf16 operands, fp32 accumulation\n";
  } else {
    for (GemmKind k : {GemmKind::Fprop, GemmKind::Dgrad, GemmKind::Wgrad}) {
      const GemmOperands g = gemm_operands(c, k);
      auto operand = [](const quant::QuantSpec& q) {
        return fmt::format("{} {}{}{}", quant::format_name(q.format), q.granularity.name(),
                           q.scale_mode == quant::ScaleMode::PowerOfTwo ? " pow2" : "",
                           q.rounding == quant::Rounding::Stochastic ? " stochastic" : "");
      };
      const std::string promote = g.gemm.promote_interval == num::kNeverPromote
                                      ? std::string("never")
                                      : std::to_string(g.gemm.promote_interval);
      out += fmt::format("  {}: a {} x b {}, accumulation {}{}\n", gemm_kind_name(k), operand(g.a), operand(g.b),
                         quant::accum_mode_name(g.gemm.mode),
                         g.gemm.mode == quant::AccumMode::Hopper ? ", promote every " + promote : "");
    }
    if (c.per_tensor())
      out += fmt::format("  delayed scaling: amax history {} ({})\n", c.amax_history,
                         c.amax_algorithm == quant::AmaxAlgorithm::Max ? "max" : "most_recent");
  }
  out +=
      fmt::format("  activations, their gradients and compute weights: {}; master weights and weight gradients: f32\n",
                  dtype_name(c.compute_dtype()));
  if (c.quantized_gemms())
    out += fmt::format("  wgrad input: {}{}\n", wgrad_input_name(c.wgrad_input),
                       c.attn_out_e5m6 ? "; attention output (W_O input) kept as e5m6 pow2 1x128" : "");
  out += fmt::format("  moe swiglu input kept: {}\n", c.swiglu_fp8 ? "e4m3 1x128" : dtype_name(c.compute_dtype()));
  out += fmt::format("  recomputed in backward: swiglu output {}, rmsnorm output {}, mla up-projections {}\n",
                     c.recompute_swiglu ? "yes" : "no", c.recompute_norm ? "yes" : "no",
                     c.recompute_mla_up ? "yes" : "no");
  out += fmt::format("  moe dispatch: {}, combine: {}\n",
                     c.moe_dispatch_fp8 && c.quantized_gemms() && !c.per_tensor() ? "fp8 pow2 1x128" : "unquantized",
                     dtype_name(c.compute_dtype()));
  out += fmt::format("  adamw moments: {}\n", c.moment_dtype);
  return out;
}

}  // namespace fp8train::recipe
