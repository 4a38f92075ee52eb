#pragma once

// Accel operators inside a graph capture that records work (the host
// runtime's: see csrc/runtime/GraphRecording.h).
//
// Graph capture's operator side, on the operator floor beside csrc/aten: the
// alias fallback and the copy kernel hand a call to it while a capture
// records, and its replay steps run the call through the fallback again.
// The graphs themselves (csrc/runtime/Graph.h) and the recording of streams
// (csrc/runtime/GraphRecording.h) are the runtime interface's: each runtime
// implements them below it (runtime/cuda/CudaGraph, runtime/host/HostGraph).
//
// While the current stream of an operator's accel device is being recorded,
// the operator does not run: its results are worked out by its Meta kernel
// (sizes, strides, dtype), fresh results get accel memory that nothing has
// written yet (as a CUDA capture's outputs), results that alias arguments
// are views of those arguments, and the capture gets a step that, at each
// replay, runs the operator on the same accel memory through the target's
// kernel and copies fresh results into the memory handed out at capture.
// Operators that the capture cannot record (no Meta kernel, results whose
// shape or value depends on device data, tensor kinds other than strided)
// fail the capture with an error naming the operator. Arguments that the
// Meta kernel refuses (shapes that do not broadcast, ...) raise its error and
// leave the capture going, as a CUDA kernel refusing its arguments does.

#include <csrc/runtime/GraphRecording.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_accel {

// Records `op` with the arguments on `stack` (run through the target's
// kernel for `target_key`) if the call's stream is being recorded, leaving
// its results on the stack; returns false, touching nothing, otherwise.
bool recordIfCapturing(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey target_key);

// The same for a copy between `dst` and `src` (at least one of them accel),
// which `copy` performs at each replay. Copies from or to host memory are
// recorded only when CUDA could capture them (non_blocking, pinned memory);
// others would wait for the capture's work and fail it.
using CopyFunction = void (*)(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);
bool recordCopyIfCapturing(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, CopyFunction copy);

} // namespace torch_accel
