// `cellm bench step`: decode and prefill timings against the device's own
// rooflines (see app/bench_step.h).
#include <cstdio>

#include "app/bench_step.h"
#include "cli/commands.h"

namespace cellm::cli {

Command add_bench(CLI::App& app) {
  auto opts = std::make_shared<app::StepBenchOptions>();
  auto quick = std::make_shared<bool>(false);
  CLI::App* bench = app.add_subcommand("bench", "measure the engine on this machine");
  bench->require_subcommand(1);
  CLI::App* step = bench->add_subcommand("step", "decode ms/step and prefill tokens/s");
  step->add_option("--model", opts->model,
                   "shape name (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, smollm2-135m, gemma3-270m; "
                   "random weights) or a model path")
      ->capture_default_str();
  step->add_option("--batch", opts->batches, "decode batch sizes")->delimiter(',');
  step->add_option("--context", opts->contexts, "decode contexts")->delimiter(',');
  step->add_option("--prompt", opts->prompts, "prefill prompt lengths")->delimiter(',');
  step->add_option("--steps", opts->steps, "timed decode steps per point")->capture_default_str();
  step->add_option("--json", opts->json_path, "append JSON lines to this file");
  step->add_flag("--quick", *quick, "batches 1,16,64 and contexts 512,2048 only");
  step->add_option("--warmup", opts->warmup_steps, "untimed decode steps before each point")
      ->capture_default_str();
  auto no_prefill = std::make_shared<bool>(false);
  step->add_flag("--no-prefill", *no_prefill, "decode points only (e.g. under a profiler)");
  return [opts, quick, no_prefill] {
    if (*quick) {
      opts->batches = {1, 16, 64};
      opts->contexts = {512, 2048};
      opts->prompts = {512, 2048};
    }
    if (*no_prefill) opts->prompts.clear();
    Status s = app::run_step_bench(*opts, stdout);
    if (!s.is_ok()) {
      std::fprintf(stderr, "cellm bench: %s\n", s.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace cellm::cli
