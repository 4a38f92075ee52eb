// torch_accel::init(), the initialisation that Python's torch.accel._lazy_init
// runs through torch_accel._C._init (csrc/python/Module.cpp), for programs
// without Python too (torch_accel/include/torch_accel/accel.h). Python adds its
// own steps around it: torch.<target>'s lazy initialisation before, and the
// fork handler after.
#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/FusedRnnCells.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>
#include <torch_accel/include/torch_accel/accel.h>

#include <ATen/Context.h>

namespace torch_accel {

void init() {
  checkNotInBadFork();
  checkDeviceAvailable();
  // The PrivateUse1 hooks' init (AccelHooks.cpp), hence the runtime's, once.
  at::globalContext().lazyInitDevice(kAccel);
  // Both run once; they need the runtime's target.
  preferTargetKernels();
  provideFusedRnnCellsTheTargetLacks();
}

} // namespace torch_accel
