/* Compiled as C99 by `make test` and linked into the test binary.
 *
 * 1. Checks that the public header is valid C.
 * 2. Passes enum arguments that are legal in C (any int) but outside the value range of the C++
 *    enums, so the tests can check unknown error codes and memcpy kinds without C++ undefined
 *    behaviour in the test itself. */
#include "accelrt/accelrt.h"

const char* accelrt_test_error_string(int code);
const char* accelrt_test_error_name(int code);
accelrtError_t accelrt_test_memcpy(void* dst, const void* src, size_t count, int kind);
int accelrt_test_c_types(void);

const char* accelrt_test_error_string(int code) {
  return accelrtGetErrorString((accelrtError_t)code);
}

const char* accelrt_test_error_name(int code) {
  return accelrtGetErrorName((accelrtError_t)code);
}

accelrtError_t accelrt_test_memcpy(void* dst, const void* src, size_t count, int kind) {
  return accelrtMemcpy(dst, src, count, (accelrtMemcpyKind)kind);
}

/* Uses every public type from C; returns 1. */
int accelrt_test_c_types(void) {
  accelrtStream_t stream = 0;
  accelrtEvent_t event = 0;
  accelrtPointerAttributes attributes;
  accelrtDeviceProp prop;
  accelrtMemoryStats stats;
  accelrtHostFn_t fn = 0;
  accelrtMemoryType type = accelrtMemoryTypeUnregistered;
  accelrtMemcpyKind kind = accelrtMemcpyDefault;
  accelrtError_t err = accelrtSuccess;
  (void)stream;
  (void)event;
  (void)fn;
  (void)type;
  (void)kind;
  (void)err;
  return sizeof(attributes) > 0 && sizeof(prop.name) == 256 && sizeof(stats) > 0 && accelrtEventDisableTiming == 2u &&
         accelrtStreamNonBlocking == 1u;
}
