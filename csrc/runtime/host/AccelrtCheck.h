#pragma once

#include <accelrt/accelrt.h>
#include <c10/util/Exception.h>

// Turns an accelrt error into a RuntimeError that names the failed call, as
// C10_CUDA_CHECK does for CUDA.
#define TORCH_ACCEL_ACCELRT_CHECK(EXPR)                                                                                \
  do {                                                                                                                 \
    const accelrtError_t torch_accel_err = (EXPR);                                                                     \
    TORCH_CHECK(                                                                                                       \
        torch_accel_err == accelrtSuccess,                                                                             \
        "accel (host runtime) error: ",                                                                                \
        accelrtGetErrorString(torch_accel_err),                                                                        \
        " (",                                                                                                          \
        accelrtGetErrorName(torch_accel_err),                                                                          \
        " from ",                                                                                                      \
        #EXPR,                                                                                                         \
        ")");                                                                                                          \
  } while (0)
