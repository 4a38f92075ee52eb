#pragma once

// torch_accel's public header for C++ programs without Python: they link
// accel's core, torch_accel/lib/libtorch_accel.so (see examples/aoti and
// docs/compile.md, "A C++ program without Python").
//
// Loading the core registers accel: the device name "accel" for PrivateUse1,
// its device guard, allocator, operators and AOTInductor model runner. What
// Python does on the first accel call (torch.accel's lazy initialisation) a
// program does with torch_accel::init().

namespace torch_accel {

// Initialises accel in this process: checks that an accel device exists (and
// that the process is no child forked after accel initialised), starts the
// runtime, and registers the operators that depend on the runtime's target.
// Call it before any accel work. Idempotent and thread-safe; throws
// c10::Error with accel's message where accel cannot initialise.
void init();

} // namespace torch_accel
