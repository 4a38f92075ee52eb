"""Inductor's wrapper code generation for accel.

Inductor generates two things for a graph: kernels (by a Scheduling: C++ on
the host runtime, Triton on the CUDA runtime and with TORCH_ACCEL_INDUCTOR=triton) and a Python wrapper that
allocates buffers, guards devices and calls the kernels. The kernels need
nothing accel-specific: accel memory is host memory or CUDA memory, exactly
what they read and write. The wrapper does, and this module provides it:

- ``AccelWrapperCodegen``: allocates buffers on the accel device they belong
  to (torch_accel._C._empty_strided, as cheap as cpu's and cuda's allocation
  in generated code) and calls C++ kernels on accel buffers the way Inductor calls them on
  cpu buffers (PythonWrapperCodegen only knows how to call non-Triton kernels
  for cpu, cuda and mps). Triton kernel calls are PythonWrapperCodegen's own.
- ``AccelHostDeviceOpOverrides`` / ``AccelCudaDeviceOpOverrides``: the
  snippets the wrapper uses to get the raw stream a Triton kernel launches on
  (the accel current stream), to guard and set the device and to synchronise,
  all through torch.accel.
- ``AccelCodegenIdentity``: keys Inductor's FX graph cache on accel's runtime,
  the kernels it generates and its code generation.

Imported only by registration, when Inductor sets up its backends.
"""

import os
from typing import Any, Optional

import torch
from torch._inductor import config, ir
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.cuda.device_op_overrides import CUDADeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files
from torch._inductor.virtualized import V

from .._core import DEVICE_TYPE
# How generated code names torch_accel._C._empty_strided (see make_allocation).
_EMPTY_STRIDED_ACCEL = "from torch_accel._C import _empty_strided as empty_strided_accel"


class _AccelWrapperMixin:
    """What accel changes in PythonWrapperCodegen, for graphs and subgraphs alike."""

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        if device.type != DEVICE_TYPE or device.index is None or is_pinned or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)  # type: ignore[misc]
        # As PythonWrapperCodegen allocates for cpu and cuda (without the
        # dispatcher: torch._C._dynamo.guards._empty_strided_cpu/_cuda), with
        # torch_accel._C._empty_strided, which also names the device: the
        # host runtime has no device guards in the wrapper (accel is not a
        # GPU type there).
        shape_code = self.codegen_python_shape_tuple(shape)  # type: ignore[attr-defined]
        allocation_code = self.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)  # type: ignore[attr-defined]
        stride_code = self.codegen_python_shape_tuple(stride)  # type: ignore[attr-defined]
        line = f"{name} = empty_strided_accel({allocation_code}, {stride_code}, {dtype}, {device.index})"
        if shape_code != allocation_code:
            line += f".as_strided({shape_code}, {stride_code})"
        return line

    def _generate_kernel_call_helper(
        self, kernel_name: str, call_args: Any, *, device: Optional[torch.device] = None, triton: bool = True, **kwargs: Any
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == DEVICE_TYPE:
            # A C++ kernel (CppScheduling): a plain function of the buffers'
            # data pointers, called as for cpu, since accel memory is host memory.
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # type: ignore[attr-defined]
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)  # type: ignore[misc]


class AccelSubgraphWrapperCodegen(_AccelWrapperMixin, SubgraphPythonWrapperCodegen):
    pass


class AccelWrapperCodegen(_AccelWrapperMixin, PythonWrapperCodegen):
    def write_header(self) -> None:
        super().write_header()
        self.header.writeline(_EMPTY_STRIDED_ACCEL)
        self.kernel_autotune_defs.writeline(_EMPTY_STRIDED_ACCEL)

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Optional[ir.GraphPartitionSignature] = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return AccelSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return AccelWrapperCodegen()


class _AccelPythonOps:
    """The Python snippets of a DeviceOpOverrides, through torch.accel (either runtime).

    The wrapper runs the guard, set_device and stream snippets on every call
    of a compiled graph: as cuda's (torch.cuda._DeviceGuard,
    torch._C._cuda_getCurrentRawStream), they are C functions and a C type
    of torch_accel._C that take an int, with no Python frame between the
    wrapper and the runtime."""

    def import_get_raw_stream_as(self, name: str) -> str:
        # The raw handle of the accel current stream: on the CUDA runtime the
        # cudaStream_t of the current CUDA stream, so Triton launches on it.
        return f"from torch_accel._C import _get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.accel._C._set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.accel.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.accel._DeviceGuard({device_idx})"


class AccelHostDeviceOpOverrides(_AccelPythonOps, CpuDeviceOpOverrides):
    """Host runtime: C++ kernels, as for cpu (C++ snippets are cpu's)."""


class AccelCudaDeviceOpOverrides(_AccelPythonOps, CUDADeviceOpOverrides):
    """Triton kernels, as for cuda (the CUDA runtime, or Triton's interpreter
    on the host runtime: the wrapper is the same). The C++ snippets (cpp_wrapper,
    AOTInductor) are CUDA's, which name cuda devices; they are not supported for
    accel (see registration)."""


def device_op_overrides(kernels: str) -> DeviceOpOverrides:
    """The snippets for a wrapper calling ``kernels`` ("cpp" or "triton") on accel."""
    return AccelCudaDeviceOpOverrides() if kernels == "triton" else AccelHostDeviceOpOverrides()


class AccelCodegenIdentity(CustomGraphModulePass):
    """A graph pass that changes nothing: its uuid keys Inductor's FX graph cache.

    The cache key covers torch's sources, not torch_accel's, and not the
    runtime or the kernels generated (TORCH_ACCEL_INDUCTOR): without this,
    code compiled for accel on one runtime (C++ kernels over host memory)
    could be loaded on the other, or code generated by an older torch_accel
    after an upgrade.
    """

    def __init__(self, config: Any) -> None:
        self.config = config  # a codegen_config.CodegenConfig
        self.runtime = config.runtime

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        pass

    def uuid(self) -> bytes:
        # Every module of this package: the code generation and the patches of Inductor.
        here = os.path.dirname(os.path.abspath(__file__))
        sources = tuple(sorted(os.path.join(here, name) for name in os.listdir(here) if name.endswith(".py")))
        return get_hash_for_files(sources, extra=f"{self.config.runtime}-{self.config.kernels}")
