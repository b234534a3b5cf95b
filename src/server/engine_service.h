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

// The engine's runner keeps the prefix cache (EngineOptions::prefix_cache_entries).
std::shared_ptr<GenerationService> make_engine_service(app::Engine& engine);

}  // namespace cellm::server
