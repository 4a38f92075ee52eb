/* A stand-in for the CUDA driver (libcuda.so.1) that records whether anything
 * initialised it: the CUDA runtime calls cuInit before it answers anything
 * (cudaGetDeviceCount included), so a test that finds no record knows that
 * nothing called into CUDA. (Loading the library is no sign: cuBLASLt loads
 * it when torch is imported.) cuInit reports that no device exists.
 * Built by test/test_cuda_visible_devices.py and found first through
 * LD_LIBRARY_PATH.
 *
 *   STUB_CUDA_INIT  a file to create when cuInit is called
 */

#include <stdio.h>
#include <stdlib.h>

enum { CUDA_ERROR_NO_DEVICE = 100 };

int cuInit(unsigned int flags) {
  (void)flags;
  const char* path = getenv("STUB_CUDA_INIT");
  if (path != NULL) {
    FILE* f = fopen(path, "w");
    if (f != NULL) {
      fclose(f);
    }
  }
  return CUDA_ERROR_NO_DEVICE;
}

int cuDriverGetVersion(int* version) {
  *version = 13000;
  return 0;
}
