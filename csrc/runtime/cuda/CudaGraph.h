#pragma once

#include <csrc/runtime/Graph.h>

#include <c10/core/Stream.h>

#include <memory>

namespace torch_accel {

// CUDA runtime graphs: at::cuda::CUDAGraph, capturing the CUDA stream behind
// the current accel stream (they are the same stream), with the caching
// allocator's private pools (accel memory is that allocator's memory).
std::unique_ptr<Graph> newCudaGraph(bool keep_graph);

// Whether the CUDA stream behind accel `stream` is capturing; false, without
// creating one, where its device has no CUDA context yet.
bool isCudaStreamCapturing(const c10::Stream& stream);

} // namespace torch_accel
