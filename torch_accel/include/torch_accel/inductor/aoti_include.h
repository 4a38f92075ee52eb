// What the C++ wrapper of a model AOTInductor compiles for accel includes
// (torch_accel/_inductor/cpp_wrapper.py): PyTorch's AOTInductor headers and
// accel's C shim. See docs/compile.md, "cpp_wrapper and AOTInductor".
#pragma once

#include <torch/csrc/inductor/aoti_include/common.h>
#ifdef USE_CUDA
// The CUDA runtime: Triton kernels launched as for cuda (compile options are
// cuda's there, which define USE_CUDA).
#include <torch/csrc/inductor/cpp_wrapper/device_internal/cuda.h>
#endif

#include "c_shim_accel.h"
#include "constant_view.h"
