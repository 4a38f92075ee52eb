// Planted defects for `tools/sanitized_run.py check-planted` (make asan, make
// tsan): a Python module, never part of torch_accel, whose functions each
// commit one defect that the sanitizers must report, so that a run that
// misses one (a lost LD_PRELOAD, report path or option) fails. The functions
// are not inlined, so that their names appear in the reports' stacks.
#include <Python.h>

#include <cstdlib>
#include <thread>

namespace {

// Read by the defects, so that the compiler cannot fold them away.
volatile int planted_index = 8;
volatile int planted_size = 8; // not known to the compiler: ASan, not UBSan's object-size check, reports
volatile int planted_operand = 2147483647;
int planted_counter = 0; // written by two threads with no synchronisation

__attribute__((noinline)) int heap_buffer_overflow_impl() {
  int* block = static_cast<int*>(std::malloc(planted_size * sizeof(int)));
  block[planted_index] = 1; // one past the end
  const int value = block[0];
  std::free(block);
  return value;
}

__attribute__((noinline)) int signed_overflow_impl() {
  int value = planted_operand;
  return value + planted_index; // INT_MAX + 8
}

__attribute__((noinline)) void data_race_impl() {
  auto bump = [] {
    for (int i = 0; i < 1000; ++i) {
      planted_counter = planted_counter + 1;
    }
  };
  std::thread first(bump);
  std::thread second(bump);
  first.join();
  second.join();
}

PyObject* heap_buffer_overflow(PyObject*, PyObject*) {
  return PyLong_FromLong(heap_buffer_overflow_impl());
}

PyObject* signed_overflow(PyObject*, PyObject*) {
  return PyLong_FromLong(signed_overflow_impl());
}

PyObject* data_race(PyObject*, PyObject*) {
  data_race_impl();
  return PyLong_FromLong(planted_counter);
}

PyMethodDef methods[] = {
    {"heap_buffer_overflow", heap_buffer_overflow, METH_NOARGS, "writes past the end of a heap block"},
    {"signed_overflow", signed_overflow, METH_NOARGS, "overflows a signed int"},
    {"data_race", data_race, METH_NOARGS, "two threads write one int without synchronisation"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "planted_defects", nullptr, -1, methods};

} // namespace

PyMODINIT_FUNC PyInit_planted_defects() {
  return PyModule_Create(&module);
}
