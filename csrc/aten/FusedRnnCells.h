#pragma once

namespace torch_accel {

// Registers accel kernels for the fused LSTM/GRU cell operators when the
// target has none (see FusedRnnCells.cpp). Called once, at accel
// initialisation (the runtime, hence the target, is known).
void provideFusedRnnCellsTheTargetLacks();

} // namespace torch_accel
