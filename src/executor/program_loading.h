// The start of an executor's initialize(), shared by CudaExecutor and
// ModuleExecutor: bind the program to the executor's cell cache, then load
// the methods it will run.
//
// Thread-safety: not thread-safe; the engine thread initializes.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "cache/cell_cache.h"
#include "program/program.h"

namespace cellm::executor {

// Binds `cache`, then loads `methods` in order, stopping at the first
// failure, which is logged naming the step (the bind or the method). True
// when everything loaded.
bool bind_and_load(program::Program& program, std::shared_ptr<cache::CellCache> cache,
                   std::span<const std::string_view> methods);

}  // namespace cellm::executor
