#include "server/serve_main.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <thread>
#include <unistd.h>

#include "app/engine.h"
#include "app/model_path.h"
#include "core/log.h"
#include "server/access_control.h"
#include "server/engine_service.h"
#include "server/http_server.h"

namespace cellm::server {
namespace {

// Signals arrive on whichever thread the kernel picks (OpenBLAS and OpenMP
// start threads before main, so masking cannot steer them); the handler only
// writes the signal number into a pipe that the signal thread reads.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int saved = errno;
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

bool install_signal_handlers() {
  if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  return ::sigaction(SIGINT, &sa, nullptr) == 0 && ::sigaction(SIGTERM, &sa, nullptr) == 0;
}

// Waits up to `ms` for a signal number from the pipe; 0 when none came.
int next_signal(int ms) {
  pollfd p{g_signal_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return 0;
  unsigned char byte = 0;
  return ::read(g_signal_pipe[0], &byte, 1) == 1 ? byte : 0;
}

// A status line that `cellm serve` always prints, whatever the log level:
// "cellm serve: ..." as plain text, or one JSON log object under
// --log-format json so log collectors see one format.
template <class... Args>
void say(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  const std::string message = fmt::format(format, std::forward<Args>(args)...);
  if (log_format() == LogFormat::kJson) {
    log_always(level, "cellm serve: " + message);
  } else {
    std::fprintf(stderr, "cellm serve: %s\n", message.c_str());
    std::fflush(stderr);
  }
}

// The keys and origins of the access options, checked; an error says which
// option is wrong and how.
Status access_options(const ServeArgs& args, ServerOptions* options) {
  for (const std::string& key : args.api_keys) {
    if (Status s = validate_api_key(key); !s.is_ok()) {
      return invalid_argument("--api-key: {}", s.message());
    }
    options->api_keys.push_back(key);
  }
  if (!args.api_key_file.empty()) {
    Result<std::vector<std::string>> keys = read_api_key_file(args.api_key_file);
    if (!keys.ok()) return invalid_argument("--api-key-file: {}", keys.status().message());
    options->api_keys.insert(options->api_keys.end(), keys->begin(), keys->end());
  }
  for (const std::string& origin : args.cors_origins) {
    Result<std::string> o = normalize_cors_origin(origin);
    if (!o.ok()) return o.status();
    options->cors_origins.push_back(std::move(*o));
  }
  options->metrics_open = args.metrics_open;
  return Status::ok();
}

}  // namespace

int run_serve(const ServeArgs& args) {
  // Writes to a client that hung up must fail with EPIPE, not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  if (!install_signal_handlers()) {
    say(LogLevel::kError, "cannot install the SIGINT/SIGTERM handlers");
    return 1;
  }

  // MODEL (a path or a name; empty: $CELLM_MODEL, else smollm2) through the
  // search path of app/model_path.h. A miss is reported as a failed load, after
  // listening, like any other load error (/health then says why).
  const Result<std::filesystem::path> model =
      app::resolve_model(args.model.string(), app::ModelSearch::from_process());
  const std::string model_label = model.ok()           ? model->string()
                                  : args.model.empty() ? std::string("the default model")
                                                       : args.model.string();

  ServerOptions options;
  options.host = args.host;
  options.port = args.port;
  options.max_queue = args.max_queue;
  options.body_limit = args.body_limit;
  options.model_name = args.served_model_name;
  options.drain_timeout = std::chrono::seconds(args.drain_timeout_s);
  options.limits.default_max_tokens = args.max_tokens_default;
  if (Status s = access_options(args, &options); !s.is_ok()) {
    say(LogLevel::kError, "{}", s.message());
    return 1;
  }
  const bool open_to_all = options.api_keys.empty() && !is_loopback_host(args.host);
  Server server(options);
  if (Status s = server.bind(); !s.is_ok()) {
    say(LogLevel::kError, "{}", s.message());
    return 1;
  }
  if (open_to_all) {
    CELLM_LOG_WARN(
        "server: listening on {} without an API key: anyone who can reach this address can use "
        "the model; pass --api-key KEY or --api-key-file PATH, or --host 127.0.0.1",
        args.host);
  }
  // Printed (not only logged) so scripts can find the port when it was 0.
  say(LogLevel::kInfo, "listening on http://{}:{} (loading {}){}", args.host, server.port(),
      model_label, options.api_keys.empty() ? "" : ", API key required");

  std::mutex stopper_mu;
  std::optional<std::thread> stopper;
  auto request_stop = [&] {
    std::lock_guard lock(stopper_mu);
    if (!stopper) stopper.emplace([&server] { server.stop(); });
  };

  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    int received = 0;
    while (!done.load()) {
      const int sig = next_signal(100);
      if (sig == 0) continue;
      if (++received == 1) {
        say(LogLevel::kInfo, "{} received, draining (signal again to exit now)",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
        request_stop();
      } else {
        say(LogLevel::kWarn, "second signal, exiting without draining");
        std::_Exit(130);
      }
    }
  });

  std::unique_ptr<app::Engine> engine;
  std::shared_ptr<GenerationService> service;
  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    if (!model.ok()) {
      say(LogLevel::kError, "loading {} failed: {}", model_label, model.status().to_string());
      server.set_load_failed(std::string(model.status().message()));
      load_failed.store(true);
      request_stop();
      return;
    }
    app::EngineOptions eo;
    eo.model = *model;
    eo.backend = args.backend;
    eo.max_sessions = args.max_sessions;
    eo.max_session_tokens = args.max_session_tokens;
    eo.prefill_chunk = args.prefill_chunk;
    eo.max_batch_tokens = args.max_batch_tokens;
    eo.speculate = args.speculate;
    eo.speculate_tokens = args.speculate_tokens;
    eo.draft_model = args.draft_model;
    eo.program.keep_quantized = args.keep_quantized;
    eo.quantize = args.quantize;
    eo.kv_dtype = args.kv_dtype;
    // Snapshots get sessions of their own beyond max_sessions (app/sizing.h).
    eo.prefix_cache_entries = args.prefix_cache_entries;
    const auto t0 = std::chrono::steady_clock::now();
    Result<std::unique_ptr<app::Engine>> loaded =
        app::Engine::load(eo, [](const app::LoadProgress& p) {
          say(LogLevel::kInfo, "[{:3.0f}%] {}", p.fraction * 100.0, p.stage);
        });
    if (!loaded.ok()) {
      say(LogLevel::kError, "loading {} failed: {}", model_label, loaded.status().to_string());
      server.set_load_failed(std::string(loaded.status().message()));
      load_failed.store(true);
      request_stop();
      return;
    }
    engine = std::move(*loaded);
    service = make_engine_service(*engine);
    server.set_service(service);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string sizing = engine->sizing_summary();
    say(LogLevel::kInfo,
        "ready in {:.1f} s: model {} on {}, {}; prefill chunk {}, {} tokens per step, prefix "
        "cache {}, requests without max_tokens stop after {}",
        secs, engine->model_name(), engine->backend_name(), sizing, engine->prefill_chunk(),
        engine->max_batch_tokens(), service->prefix_caching() ? "on" : "off",
        args.max_tokens_default > 0 ? std::to_string(args.max_tokens_default) + " tokens"
                                    : std::string("the context's room"));
  });

  const Status served = server.serve();
  // serve() returns once stop() closed the listener and every handler thread
  // has ended, so no job references the engine any more.
  request_stop();
  {
    std::lock_guard lock(stopper_mu);
    if (stopper && stopper->joinable()) stopper->join();
  }
  loader.join();  // a load in progress cannot be interrupted; wait for it
  done.store(true);
  signal_thread.join();
  service.reset();
  engine.reset();  // shuts the runner down
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (!served.is_ok()) {
    say(LogLevel::kError, "{}", served.to_string());
    return 1;
  }
  say(LogLevel::kInfo, "stopped");
  return load_failed.load() ? 1 : 0;
}

}  // namespace cellm::server
