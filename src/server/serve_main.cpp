#include "server/serve_main.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>

#include "app/engine.h"
#include "core/log.h"
#include "server/engine_service.h"
#include "server/http_server.h"

namespace cellm::server {
namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

int run_serve(const ServeArgs& args) {
  // Writes to a client that hung up must fail with EPIPE, not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  // Every thread started from here inherits the mask; only the signal thread
  // below takes SIGINT/SIGTERM, synchronously, so stop() never runs in a
  // signal handler.
  const sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ServerOptions options;
  options.host = args.host;
  options.port = args.port;
  options.max_queue = args.max_queue;
  options.body_limit = args.body_limit;
  options.model_name = args.served_model_name;
  options.drain_timeout = std::chrono::seconds(args.drain_timeout_s);
  Server server(options);
  if (Status s = server.bind(); !s.is_ok()) {
    std::fprintf(stderr, "cellm serve: %s\n", s.to_string().c_str());
    return 1;
  }
  // Printed (not only logged) so scripts can find the port when it was 0.
  std::fprintf(stderr, "cellm serve: listening on http://%s:%d (loading %s)\n", args.host.c_str(),
               server.port(), args.model.string().c_str());
  std::fflush(stderr);

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
      timespec timeout{0, 100 * 1000 * 1000};
      const int sig = sigtimedwait(&signals, nullptr, &timeout);
      if (sig <= 0) continue;
      if (++received == 1) {
        std::fprintf(stderr, "cellm serve: %s received, draining (signal again to exit now)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        request_stop();
      } else {
        std::fprintf(stderr, "cellm serve: second signal, exiting without draining\n");
        std::_Exit(130);
      }
    }
  });

  std::unique_ptr<app::Engine> engine;
  std::shared_ptr<GenerationService> service;
  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    app::EngineOptions eo;
    eo.model = args.model;
    eo.backend = args.backend;
    eo.max_sessions = args.max_sessions;
    eo.max_session_tokens = args.max_session_tokens;
    // Snapshots occupy sessions: at most a quarter of them (see engine_service.h).
    eo.prefix_cache_entries = std::min(args.prefix_cache_entries, args.max_sessions / 4);
    const auto t0 = std::chrono::steady_clock::now();
    Result<std::unique_ptr<app::Engine>> loaded =
        app::Engine::load(eo, [](const app::LoadProgress& p) {
          std::fprintf(stderr, "cellm serve: [%3.0f%%] %s\n", p.fraction * 100.0, p.stage.c_str());
        });
    if (!loaded.ok()) {
      std::fprintf(stderr, "cellm serve: loading %s failed: %s\n", args.model.string().c_str(),
                   loaded.status().to_string().c_str());
      server.set_load_failed(std::string(loaded.status().message()));
      load_failed.store(true);
      request_stop();
      return;
    }
    engine = std::move(*loaded);
    EngineServiceOptions so;
    so.prefix_cache_entries = eo.prefix_cache_entries;
    service = make_engine_service(*engine, so);
    server.set_service(service);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "cellm serve: ready in %.1f s: model %s on %s, context %d tokens, %d sessions, "
                 "prefix cache %s\n",
                 secs, engine->model_name().c_str(), engine->backend_name().c_str(),
                 engine->max_session_tokens(), engine->max_sessions(),
                 service->prefix_caching() ? "on" : "off");
    std::fflush(stderr);
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
  if (!served.is_ok()) {
    std::fprintf(stderr, "cellm serve: %s\n", served.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "cellm serve: stopped\n");
  return load_failed.load() ? 1 : 0;
}

}  // namespace cellm::server
