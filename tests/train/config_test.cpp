// Config: presets, JSON and flag layering, the exact error sentences for unknown keys / wrong types /
// out-of-range values, cross-key checks, the JSON round trip and the printed table; the one rule for the
// optimizer moments of a recipe; warnings; differences between two configs; defaults in the flags' help; the MTP
// weight and router-bias speed schedules (DeepSeek-V3's, the constants by default, errors naming key and piece).
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "../common/error_of.h"
#include "common/error.h"
#include "optim/adamw.h"
#include "train/config.h"

using namespace fp8train;
using namespace fp8train::train;

namespace {
bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }
using test_util::error_of;
}  // namespace

TEST(Config, PresetsAreValid) {
  for (const std::string& name : preset_names()) {
    const TrainConfig c = preset_config(name);
    EXPECT_NO_THROW(validate_config(c)) << name;
    EXPECT_EQ(c.preset, name);
  }
  EXPECT_PRED2(contains, error_of([] { preset_config("huge"); }), "unknown preset 'huge'");
  // The presets grow in width x depth (tiny and small may share a width).
  const auto size = [](const char* n) { return preset_config(n).model.hidden_size * preset_config(n).model.n_layers; };
  EXPECT_GT(size("base"), size("small"));
  EXPECT_GT(size("small"), size("tiny"));
}

TEST(Config, JsonThenFlagsOverrideThePreset) {
  TrainConfig c = preset_config("tiny");
  ConfigSources sources;
  apply_config_json(c, nlohmann::json::parse(R"({"optim": {"lr": 0.01, "moment_dtype": "fp32"},
                                                 "model": {"hidden_size": 64}, "train": {"steps": 7}})"),
                    "config file 'x.json'", &sources);
  EXPECT_EQ(c.lr, 0.01);
  EXPECT_EQ(c.moment_dtype, "fp32");
  EXPECT_EQ(c.model.hidden_size, 64);
  EXPECT_EQ(c.steps, 7);
  apply_config_flag(c, "steps", "11", &sources);
  apply_config_flag(c, "lr", "2e-3", &sources);
  apply_config_flag(c, "data", "file.txt", &sources);
  apply_config_flag(c, "tie-embeddings", "true", &sources);
  EXPECT_EQ(c.steps, 11);
  EXPECT_EQ(c.lr, 2e-3);
  EXPECT_EQ(c.data_path, "file.txt");
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(sources.at("train.steps"), "flag");
  EXPECT_EQ(sources.at("optim.moment_dtype"), "file");
  const std::string table = config_table(c, sources);
  EXPECT_PRED2(contains, table, "optim.moment_dtype");
  EXPECT_PRED2(contains, table, "fp32");
  EXPECT_PRED2(contains, table, "train.steps");
}

TEST(Config, ErrorsNameTheKey) {
  TrainConfig c = preset_config("tiny");
  const auto json_error = [&](const char* text) {
    return error_of([&] { apply_config_json(c, nlohmann::json::parse(text), "config file 'x.json'", nullptr); });
  };
  EXPECT_PRED2(contains, json_error(R"({"optim": {"lrr": 1}})"), "unknown config key 'optim.lrr'");
  EXPECT_PRED2(contains, json_error(R"({"optimizer": {"lr": 1}})"), "unknown config key 'optimizer'");
  EXPECT_PRED2(contains, json_error(R"({"optim": {"lr": -1}})"), "'optim.lr' must be in [");
  EXPECT_PRED2(contains, json_error(R"({"train": {"steps": 1.5}})"), "'train.steps' must be an integer");
  EXPECT_PRED2(contains, json_error(R"({"optim": {"moment_dtype": "fp16"}})"), "'optim.moment_dtype' must be one of recipe, fp32, bf16");
  EXPECT_PRED2(contains, json_error(R"({"optim": {"lr": "fast"}})"), "'optim.lr' must be a number");
  EXPECT_PRED2(contains, json_error(R"([1])"), "must be a JSON object");
  EXPECT_PRED2(contains, error_of([&] { apply_config_flag(c, "steps", "12x", nullptr); }), "--steps must be an integer");
  EXPECT_PRED2(contains, error_of([&] { apply_config_flag(c, "batch-size", "0", nullptr); }), "'train.batch_size' must be in");
  TrainConfig bad = preset_config("tiny");
  bad.final_lr = 1.0;
  EXPECT_PRED2(contains, error_of([&] { validate_config(bad); }), "'optim.final_lr'");
  bad = preset_config("tiny");
  bad.model.num_experts_per_tok = 100;
  EXPECT_PRED2(contains, error_of([&] { validate_config(bad); }), "'model.num_experts_per_tok'");
  bad = preset_config("tiny");
  bad.recipe = "fp4";
  EXPECT_PRED2(contains, error_of([&] { validate_config(bad); }), "config key 'train.recipe': unknown recipe 'fp4'");
  bad = preset_config("tiny");
  bad.micro_batch_size = bad.batch_size + 1;
  EXPECT_PRED2(contains, error_of([&] { validate_config(bad); }), "'train.micro_batch_size'");
}

TEST(Config, JsonRoundTripReproducesTheConfig) {
  TrainConfig c = preset_config("small");
  c.lr = 1.25e-3;
  c.data_path = "a b.txt";
  c.model.mtp_depth = 2;
  const nlohmann::json j = config_to_json(c);
  TrainConfig d = preset_config("tiny");
  apply_config_json(d, j, "saved", nullptr);
  d.preset = j.at("preset").get<std::string>();
  EXPECT_EQ(config_to_json(d), j);
  EXPECT_EQ(d.lr, 1.25e-3);
  EXPECT_EQ(d.model.mtp_depth, 2);
}

TEST(Config, LrScheduleFollowsTheStepFractions) {
  TrainConfig c = preset_config("tiny");
  c.steps = 1000;
  c.warmup_steps = 10;
  c.decay_start = 0.5;
  c.decay_end = 0.9;
  const auto s = c.lr_schedule();
  EXPECT_EQ(s.warmup_steps, 10);
  EXPECT_EQ(s.decay_start, 500);
  EXPECT_EQ(s.decay_end, 900);
  EXPECT_EQ(s.at(950), c.final_lr);
}

TEST(Config, MtpLambdaAndBiasUpdateSpeedSchedules) {
  TrainConfig c = preset_config("tiny");
  c.steps = 1000;
  // Empty (the default): the constant model keys, every step.
  EXPECT_EQ(c.mtp_lambda_schedule, "");
  EXPECT_EQ(c.bias_update_speed_schedule, "");
  for (int64_t step : {0, 500, 999}) {
    EXPECT_EQ(c.mtp_lambda_by_step().at(step), c.model.mtp_lambda);
    EXPECT_EQ(c.bias_update_speed_by_step().at(step), c.model.bias_update_speed);
  }
  // DeepSeek-V3's: λ 0.3 for 10T of 14.8T tokens then 0.1; γ 0.001 for 14.3T then 0.
  ConfigSources sources;
  apply_config_flag(c, "mtp-lambda-schedule", "0.3,0.1@0.676", &sources);
  apply_config_flag(c, "bias-update-speed-schedule", "0.001,0@0.966", &sources);
  EXPECT_EQ(sources.at("train.mtp_lambda_schedule"), "flag");
  EXPECT_NO_THROW(validate_config(c));
  EXPECT_EQ(c.mtp_lambda_by_step().at(675), 0.3);
  EXPECT_EQ(c.mtp_lambda_by_step().at(676), 0.1);
  EXPECT_EQ(c.bias_update_speed_by_step().at(965), 0.001);
  EXPECT_EQ(c.bias_update_speed_by_step().at(966), 0.0);
  // Saved with the config and read back from it.
  const nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j["train"]["mtp_lambda_schedule"], "0.3,0.1@0.676");
  TrainConfig d = preset_config("tiny");
  apply_config_json(d, nlohmann::json::parse(R"({"train": {"bias_update_speed_schedule": "0.01,0@0.5"}})"), "file",
                    nullptr);
  EXPECT_EQ(d.bias_update_speed_schedule, "0.01,0@0.5");

  // Bad texts: validation names the key, then the piece and what is wrong with it.
  const auto error_of_schedule = [](const std::string& flag, const std::string& text) {
    TrainConfig bad = preset_config("tiny");
    apply_config_flag(bad, flag, text, nullptr);
    return error_of([&] { validate_config(bad); });
  };
  EXPECT_EQ(error_of_schedule("mtp-lambda-schedule", "0.3,0.1@1.5"),
            "config key 'train.mtp_lambda_schedule': piece '0.1@1.5': the start must be in [0, 1)");
  EXPECT_EQ(error_of_schedule("mtp-lambda-schedule", "0.3,,0.1@0.5"),
            "config key 'train.mtp_lambda_schedule': piece 2 of '0.3,,0.1@0.5' is empty (expected VALUE or "
            "VALUE@START)");
  EXPECT_EQ(error_of_schedule("mtp-lambda-schedule", "0.3,high@0.5"),
            "config key 'train.mtp_lambda_schedule': piece 'high@0.5': the value 'high' is not a number");
  EXPECT_EQ(error_of_schedule("mtp-lambda-schedule", "0.3,0.2@0.6,0.1@0.6"),
            "config key 'train.mtp_lambda_schedule': piece '0.1@0.6': the start must come after the previous "
            "piece's (0.6)");
  EXPECT_EQ(error_of_schedule("mtp-lambda-schedule", "11"),
            "config key 'train.mtp_lambda_schedule': piece '11': the value must be in [0, 10]");
  EXPECT_EQ(error_of_schedule("bias-update-speed-schedule", "0.001,2@0.5"),
            "config key 'train.bias_update_speed_schedule': piece '2@0.5': the value must be in [0, 1]");
  EXPECT_EQ(error_of_schedule("bias-update-speed-schedule", "0.001,0@-0.5"),
            "config key 'train.bias_update_speed_schedule': piece '0@-0.5': the start must be in [0, 1)");
  EXPECT_EQ(error_of_schedule("bias-update-speed-schedule", "0.001,0"),
            "config key 'train.bias_update_speed_schedule': piece '0': every piece after the first needs its "
            "start, as VALUE@START");
}

TEST(Config, TheRecipeDecidesTheMomentDtypeUnlessTheConfigDoes) {
  TrainConfig c = preset_config("tiny");
  EXPECT_EQ(c.moment_dtype, "recipe");
  const auto moments = [&](const std::string& recipe, const std::string& setting) {
    c.recipe = recipe;
    c.moment_dtype = setting;
    validate_config(c);
    return resolved_moment_dtype(c);
  };
  EXPECT_EQ(moments("fp32", "recipe"), "fp32");
  EXPECT_EQ(moments("bf16", "recipe"), "fp32");
  EXPECT_EQ(moments("fp8-deepseek", "recipe"), "bf16");
  EXPECT_EQ(moments("fp8-deepseek:moments=fp32", "recipe"), "fp32");
  EXPECT_EQ(moments("bf16", "bf16"), "bf16");  // an explicit setting over the recipe's default
  EXPECT_EQ(moments("fp8-deepseek:moments=bf16", "bf16"), "bf16");  // agreeing is fine
  EXPECT_EQ(std::string(optim::moment_dtype_name(c.adamw().moment_dtype)), "bf16");
  EXPECT_PRED2(contains, error_of([&] { moments("bf16:moments=bf16", "fp32"); }),
               "config key 'optim.moment_dtype' is 'fp32' but the recipe 'bf16:moments=bf16' asks for moments=bf16");
  // Resolving writes the dtype into the config (what config.json and the checkpoint record) and names the source.
  c.recipe = "fp8-deepseek";
  c.moment_dtype = "recipe";
  ConfigSources sources;
  resolve_moment_dtype(c, &sources);
  EXPECT_EQ(c.moment_dtype, "bf16");
  EXPECT_EQ(sources.at("optim.moment_dtype"), "recipe");
}

TEST(Config, WarnsOfARunNoLongerThanItsWarmup) {
  TrainConfig c = preset_config("tiny");
  EXPECT_TRUE(config_warnings(c).empty());
  c.steps = 20;
  c.warmup_steps = 30;
  const auto w = config_warnings(c);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_PRED2(contains, w[0], "'optim.warmup_steps' = 30");
  EXPECT_PRED2(contains, w[0], "peak learning rate");
}

TEST(Config, DifferencesNameTheKeys) {
  TrainConfig a = preset_config("tiny"), b = a;
  b.lr = 1e-4;
  b.model.n_layers = 3;
  b.out = "elsewhere";
  const nlohmann::json ja = config_to_json(a), jb = config_to_json(b);
  EXPECT_EQ(config_differences(ja, jb), (std::vector<std::string>{"model.n_layers", "train.out", "optim.lr"}));
  EXPECT_EQ(config_differences(ja, jb, {"train.out"}), (std::vector<std::string>{"model.n_layers", "optim.lr"}));
  nlohmann::json old = ja;  // a config saved before a key existed
  old["train"].erase("keep_last");
  EXPECT_EQ(config_differences(ja, old), (std::vector<std::string>{"train.keep_last"}));
  // Keys added later: a config without them ran on the CPU with constant MTP weight and bias speed.
  nlohmann::json before = config_to_json(a);
  for (const char* k : {"device", "mtp_lambda_schedule", "bias_update_speed_schedule"}) before["train"].erase(k);
  nlohmann::json now = before;
  now["train"]["device"] = "cpu";
  now["train"]["mtp_lambda_schedule"] = "";
  now["train"]["bias_update_speed_schedule"] = "";
  EXPECT_TRUE(config_differences(before, now).empty());
  EXPECT_TRUE(config_differences(now, before).empty());
  now["train"]["device"] = "cuda";
  now["train"]["mtp_lambda_schedule"] = "0.3,0.1@0.5";
  EXPECT_EQ(config_differences(before, now),
            (std::vector<std::string>{"train.device", "train.mtp_lambda_schedule"}));
  EXPECT_EQ(config_value_text(jb, "optim.lr"), "0.0001");
  EXPECT_EQ(config_value_text(old, "train.keep_last"), "(missing)");
  EXPECT_TRUE(config_key_changes_training("optim.lr"));
  EXPECT_FALSE(config_key_changes_training("train.save_every"));
}

TEST(Config, FlagHelpShowsTheDefaults) {
  std::map<std::string, std::string> help;
  for (const ConfigFlag& f : config_flags()) help[f.flag] = f.help;
  EXPECT_PRED2(contains, help.at("lr"), "default 0.003 (small preset; tiny: 0.01, base: 0.001)");
  EXPECT_PRED2(contains, help.at("beta1"), "default 0.9]");
  EXPECT_PRED2(contains, help.at("data"), "default (none)");
  EXPECT_PRED2(contains, help.at("keep-last"), "default 3");
}
