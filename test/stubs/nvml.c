/* A stand-in for the driver's NVML (libnvidia-ml.so.1) for tests on machines
 * without a GPU: the few functions torch.cuda and torch_accel call to count
 * GPUs and read their UUIDs. Built by test/test_cuda_visible_devices.py and
 * found first through LD_LIBRARY_PATH.
 *
 *   STUB_NVML_UUIDS  the UUIDs of the GPUs it reports, comma-separated, in
 *                    NVML's order (unset or empty: no GPU)
 *   STUB_NVML_FAIL   "init": nvmlInit fails; "uuid": nvmlDeviceGetUUID fails
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_UNKNOWN = 999 };

static int failing(const char* what) {
  const char* fail = getenv("STUB_NVML_FAIL");
  return fail != NULL && strcmp(fail, what) == 0;
}

/* The index-th UUID of STUB_NVML_UUIDS into `out` (when not NULL); returns
 * its length, or -1 if there are not that many. */
static int uuid_at(unsigned int index, char* out, size_t size) {
  const char* uuids = getenv("STUB_NVML_UUIDS");
  if (uuids == NULL || *uuids == '\0') {
    return -1;
  }
  for (unsigned int i = 0; i < index; ++i) {
    uuids = strchr(uuids, ',');
    if (uuids == NULL) {
      return -1;
    }
    ++uuids;
  }
  size_t length = strcspn(uuids, ",");
  if (out != NULL) {
    if (length + 1 > size) {
      return -1;
    }
    memcpy(out, uuids, length);
    out[length] = '\0';
  }
  return (int)length;
}

int nvmlInit_v2(void) {
  return failing("init") ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

int nvmlInit(void) {
  return nvmlInit_v2();
}

int nvmlShutdown(void) {
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  unsigned int n = 0;
  while (uuid_at(n, NULL, 0) >= 0) {
    ++n;
  }
  *count = n;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (uuid_at(index, NULL, 0) < 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = (void*)(uintptr_t)(index + 1);
  return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  if (failing("uuid") || device == NULL) {
    return NVML_ERROR_UNKNOWN;
  }
  return uuid_at((unsigned int)((uintptr_t)device - 1), uuid, length) < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}
