// Host side of the opt-in kernel timeline (kernels/kernel_trace.cuh): which
// launch owns which slot of the device tables, and the report at exit.
// Slots are handed out in launch order, kSlots per process: a captured graph
// keeps its capture's slots (each replay overwrites them, so the report holds
// the last replay), while eager launches past kSlots go untraced.
// The report goes to stderr, one line per traced launch:
//   ktrace <TAB> slot <TAB> label <TAB> then, for marks 0..7, "blocks min max"
// (globaltimer nanoseconds over the blocks that wrote the mark; 0 0 0 when
// none did).
//
// Thread-safety: take_slot() may be called from any thread.
#pragma once

#include <string>

namespace cellm::cuda::trace {

// 84 MB of device memory per traced kernel file.
inline constexpr int kSlots = 2048;  // traced launches per process
inline constexpr int kBlocks = 640;  // blocks per launch (later ones unrecorded)
inline constexpr int kMarks = 8;     // per block: entry, after the wait, 5 phases, exit
inline constexpr int kEntryMark = 0;
inline constexpr int kWaitMark = 1;        // the programmatic-launch wait returned
inline constexpr int kFirstPhaseMark = 2;  // a kernel's own phases: 2..kExitMark - 1
inline constexpr int kExitMark = kMarks - 1;
inline constexpr long long kTableEntries = static_cast<long long>(kSlots) * kBlocks * kMarks;

// The next slot for a launch that writes into `table` (a __device__ array of
// kTableEntries made by CELLM_TRACE_TABLE), or -1 when all are taken. The
// first call registers the report at exit. Only built with the option.
int take_slot(const void* table, std::string label);

}  // namespace cellm::cuda::trace
