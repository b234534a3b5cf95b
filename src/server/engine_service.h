// The production GenerationService: a RunnerService over a loaded app::Engine
// (its runner, tokenizer, chat template, stop tokens and limits), with
// streaming text through text::StreamingDetokenizer.
//
// Thread-safety: as GenerationService. The Engine must outlive the service
// and every job it started (stop the Server first).
#pragma once

#include <cstdint>
#include <memory>

#include "app/engine.h"
#include "server/generation_service.h"

namespace cellm::server {

struct EngineServiceOptions {
  // Used when the engine keeps no PrefixCache of its own (its snapshots then
  // take request sessions), capped at a quarter of the engine's sessions; 0
  // disables caching. An engine's own cache has sessions of its own.
  std::int32_t prefix_cache_entries = 16;
};

std::shared_ptr<GenerationService> make_engine_service(app::Engine& engine,
                                                       const EngineServiceOptions& options = {});

}  // namespace cellm::server
