/* Preloaded by tools/sanitized_run.py under gcc's AddressSanitizer + UBSan
 * (make asan), after libasan and libubsan: points UBSan's reports at
 * TORCH_ACCEL_UBSAN_LOG_PATH.
 *
 * gcc links UBSan's runtime (libubsan) apart from ASan's (libasan). Both carry
 * the sanitizers' common code and export __sanitizer_set_report_path; libasan
 * comes first, so libubsan's own call of it (with UBSAN_OPTIONS's log_path)
 * reaches libasan's copy, and UBSan's reports go to stderr whatever log_path
 * says: lost in a subprocess whose output a test captures and whose failure it
 * expects. dlsym on libubsan's handle finds libubsan's own copy. */
#include <dlfcn.h>
#include <stdlib.h>

__attribute__((constructor)) static void set_ubsan_report_path(void) {
  const char* path = getenv("TORCH_ACCEL_UBSAN_LOG_PATH");
  void* ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (path == NULL || ubsan == NULL) {
    return;
  }
  void (*set_report_path)(const char*) = (void (*)(const char*))dlsym(ubsan, "__sanitizer_set_report_path");
  if (set_report_path != NULL) {
    set_report_path(path);
  }
}
