#pragma once

#include <csrc/runtime/Graph.h>

#include <c10/core/Stream.h>

#include <memory>

namespace torch_accel {

// Host runtime graphs: captures that record the work of the capturing stream
// (see GraphRecording.h) and replay it by running each recorded step again.
std::unique_ptr<Graph> newHostGraph(bool keep_graph);

// A pool id of its own for graphs to share ({0, n}, as CUDA's graph_pool_handle).
c10::MempoolId_t hostGraphPoolHandle();

} // namespace torch_accel
