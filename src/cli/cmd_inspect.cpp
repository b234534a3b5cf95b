// `cellm inspect MODEL`: architecture, parameters, bytes per dtype, tensors,
// and the memory a program needs for a context and session count.
#include <cstdio>

#include "cli/commands.h"
#include "cli/generate.h"
#include "model/inspect.h"

namespace cellm::cli {

Command add_inspect(CLI::App& app) {
  struct Args {
    std::string model;
    model::InspectOptions options;
    bool no_tensors = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("inspect", "describe a model and the memory it needs");
  cmd->add_option("model", args->model, "Hugging Face folder or .gguf file")->required();
  cmd->add_option("--context", args->options.context, "tokens per session (0: the model's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--sessions", args->options.sessions, "concurrent sessions")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_kv_dtype_option(*cmd, args->options.kv_dtype);
  cmd->add_flag("--no-tensors", args->no_tensors, "omit the tensor list");
  return [args] {
    args->options.list_tensors = !args->no_tensors;
    auto report = model::inspect_model(args->model, args->options);
    if (!report.ok()) {
      std::fprintf(stderr, "cellm: %s\n", report.status().to_string().c_str());
      return 1;
    }
    std::fputs(report->c_str(), stdout);
    return 0;
  };
}

}  // namespace cellm::cli
