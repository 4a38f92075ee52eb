"""Memory pools and pluggable allocators (docs/random-and-memory.md#memory-pools-and-pluggable-allocators).

torch.cuda's semantics: allocations routed to a MemPool (use_mem_pool, a graph
captured with pool=pool.id) take their memory from it, memory freed in it stays
reserved in it for its later allocations, and the pool's deletion gives it back.
The statistics and snapshots count pool memory as CUDA's allocator does; the
figures are compared as deltas, since the CUDA runtime's caching allocator rounds
sizes and caches other memory.
"""

import os
import subprocess
import textwrap
import threading

import pytest
import torch

import torch_accel
from torch_accel._core import capabilities
from torch_accel.memory import AccelPluggableAllocator, MemPool, change_current_allocator, use_mem_pool

from conftest import run_python

MiB = 1 << 20


def _blocks(segments):
    """Every block of `segments` by address: (state, size, segment_pool_id)."""
    out = {}
    for segment in segments:
        address = segment["address"]
        for block in segment["blocks"]:
            out[address] = (block["state"], block["size"], segment["segment_pool_id"])
            address += block["size"]
    return out


def _stat(key):
    return torch_accel.memory_stats().get(key, 0)


@pytest.fixture(autouse=True)
def _no_cached_pool_memory():
    yield
    torch_accel.empty_cache()


def test_pool_ids_use_count_and_routing_of_this_thread():
    pool = MemPool()
    assert isinstance(pool.id, tuple) and len(pool.id) == 2 and pool.id[0] == 0 and pool.id[1] > 0
    assert pool.id != MemPool().id != torch_accel.graph_pool_handle()
    assert pool.device == torch_accel.current_device() and pool.allocator is None
    assert pool.use_count() == 1
    with use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.empty(MiB, dtype=torch.uint8, device="accel")
        from_a_thread = []
        thread = threading.Thread(target=lambda: from_a_thread.append(torch.empty(MiB, dtype=torch.uint8, device="accel")))
        thread.start()
        thread.join()
    outside = torch.empty(MiB, dtype=torch.uint8, device="accel")
    assert pool.use_count() == 1
    blocks = _blocks(pool.snapshot())
    assert blocks.get(inside.data_ptr(), ("", 0, None))[0] == "active_allocated"
    assert blocks[inside.data_ptr()][2] == pool.id
    # Only this thread's allocations went to the pool.
    assert from_a_thread[0].data_ptr() not in blocks and outside.data_ptr() not in blocks
    everything = _blocks(torch_accel.memory_snapshot())
    assert everything[inside.data_ptr()][2] == pool.id and everything[outside.data_ptr()][2] == (0, 0)


def test_freed_pool_memory_stays_reserved_and_serves_the_pools_next_allocations():
    pool = MemPool()
    allocated, reserved = torch_accel.memory_allocated(), torch_accel.memory_reserved()
    with use_mem_pool(pool):
        weights = [torch.randn(256, 1024, device="accel") for _ in range(4)]
    nbytes = sum(w.nbytes for w in weights)
    pool_bytes = sum(segment["total_size"] for segment in pool.snapshot())
    assert torch_accel.memory_allocated() - allocated == nbytes
    assert torch_accel.memory_reserved() - reserved == pool_bytes >= nbytes
    segments = _stat("num_device_alloc")
    del weights
    # Freed in the pool: no longer allocated, still reserved, in the pool's snapshot as inactive.
    assert torch_accel.memory_allocated() == allocated
    assert torch_accel.memory_reserved() - reserved == pool_bytes
    assert {state for state, _, _ in _blocks(pool.snapshot()).values()} == {"inactive"}
    # The device-wide empty_cache() keeps a pool's memory while the pool lives.
    torch_accel.empty_cache()
    assert torch_accel.memory_reserved() - reserved == pool_bytes
    with use_mem_pool(pool):
        again = [torch.ones(256, 1024, device="accel") for _ in range(4)]
    # The pool's memory served them: no new segment.
    assert _stat("num_device_alloc") == segments
    assert {w.data_ptr() for w in again} <= set(_blocks(pool.snapshot()))
    assert all(torch.equal(w.cpu(), torch.ones(256, 1024)) for w in again)
    del again


def test_vllm_style_weights_in_a_pool_freed_and_allocated_again(target):
    # Weights are loaded in a pool, the pool's memory is given back (the weights
    # and the pool go), and weights are allocated again, in a new pool.
    torch.manual_seed(0)
    reference = torch.nn.Linear(512, 512)
    # empty_cache: the CUDA runtime's allocator caches the memory freed outside pools.
    torch_accel.empty_cache()
    reserved = torch_accel.memory_reserved()
    for _ in range(2):
        pool = MemPool()
        with use_mem_pool(pool):
            model = torch.nn.Linear(512, 512).to("accel")
            model.load_state_dict(reference.state_dict())
        assert {p.data_ptr() for p in model.parameters()} <= set(_blocks(pool.snapshot()))
        x = torch.randn(8, 512)
        out = model(x.to("accel"))
        expected = reference.to(target)(x.to(target))
        assert torch.equal(out.to(target), expected)
        del model, out
        assert pool.use_count() == 1
        del pool
        # The pool's memory went back with it.
        torch_accel.empty_cache()
        assert torch_accel.memory_reserved() == reserved


def test_tensors_outliving_their_pool_free_into_it_until_empty_cache():
    torch_accel.empty_cache()
    reserved = torch_accel.memory_reserved()
    pool = MemPool()
    with use_mem_pool(pool):
        x = torch.full((MiB,), 3.0, device="accel")
    del pool
    # x still owns its memory.
    assert torch.equal(x.cpu(), torch.full((MiB,), 3.0))
    del x
    assert torch_accel.memory_reserved() > reserved
    torch_accel.empty_cache()
    assert torch_accel.memory_reserved() == reserved


def test_nested_pools_route_to_the_innermost():
    outer, inner = MemPool(), MemPool()
    with use_mem_pool(outer):
        a = torch.empty(1000, device="accel")
        with use_mem_pool(inner):
            b = torch.empty(1000, device="accel")
            assert (outer.use_count(), inner.use_count()) == (2, 2)
        c = torch.empty(1000, device="accel")
    assert {a.data_ptr(), c.data_ptr()} <= set(_blocks(outer.snapshot()))
    assert set(_blocks(inner.snapshot())) == {b.data_ptr()}


def test_graph_captures_into_a_mem_pool():
    pool = MemPool()
    x = torch.arange(1000.0, device="accel")
    graph = torch_accel.Graph()
    with torch_accel.graph(graph, pool=pool.id):
        y = x * 2
    # The graph holds a use of the pool until it goes, and its results live in it.
    assert pool.use_count() == 2
    assert y.data_ptr() in _blocks(pool.snapshot())
    x.fill_(1.0)
    graph.replay()
    torch_accel.synchronize()
    assert torch.equal(y.cpu(), torch.full((1000,), 2.0))
    graph.reset()
    assert pool.use_count() == 1


def test_mem_pool_rejects_bad_arguments(two_devices):
    with pytest.raises(TypeError, match="torch.accel.MemPool"):
        MemPool(allocator=3)
    with pytest.raises(TypeError, match="torch.accel.use_mem_pool"):
        with use_mem_pool((0, 1)):
            pass
    with pytest.raises(TypeError, match="memory pool id"):
        torch_accel.memory_snapshot(mempool_id="pool")
    pool = MemPool()
    with pytest.raises(ValueError, match="belongs to accel:0"):
        with use_mem_pool(pool, device=1):
            pass
    assert pool.use_count() == 1


@pytest.mark.skipif(torch_accel.runtime() != "host", reason="the host runtime's ledger; on CUDA, CUDA's allocator checks")
def test_host_ledger_refusals_name_the_pool(two_devices):
    # Below torch.accel.MemPool/use_mem_pool (which check first): the runtime's
    # own refusals, each naming the pool by its id, none taking a use.
    unknown = (99, 7)
    with pytest.raises(RuntimeError, match=r"^accel: memory pool \(99, 7\) has no use to release"):
        torch_accel._C._mem_pool_release(0, unknown)
    with pytest.raises(RuntimeError, match=r"^accel: memory pool \(99, 7\) does not exist \(or was released\)"):
        torch_accel._C._begin_allocate_current_thread_to_pool(0, unknown)
    with pytest.raises(RuntimeError, match=r"^accel: memory pool \(99, 7\) has no allocations routed to it"):
        torch_accel._C._end_allocate_to_pool(0, unknown)
    pool = MemPool()
    name = rf"accel: memory pool \({pool.id[0]}, {pool.id[1]}\)"
    with pytest.raises(ValueError, match=f"^{name} belongs to accel:0 and cannot serve allocations on accel:1"):
        torch_accel._C._begin_allocate_current_thread_to_pool(1, pool.id)
    assert pool.use_count() == 1
    # A released pool's id, taken up again on another device.
    torch_accel._C._mem_pool_create(0, unknown, None, False, False)
    torch_accel._C._mem_pool_release(0, unknown)
    with pytest.raises(ValueError, match=r"^accel: memory pool \(99, 7\) belongs to accel:0 and cannot serve allocations on accel:1"):
        torch_accel._C._mem_pool_create(1, unknown, None, False, False)
    assert torch_accel._C._mem_pool_use_count(0, unknown) == 0


# Pluggable allocators --------------------------------------------------------

_PLUGIN = r"""
#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>
#ifdef PLUGIN_CUDA
#include <cuda_runtime_api.h>
#endif

static long allocations, frees;
static size_t live_bytes;

void* plugin_alloc(ssize_t size, int device, void* stream) {
  void* ptr = NULL;
#ifdef PLUGIN_CUDA
  if (cudaMalloc(&ptr, (size_t)size) != cudaSuccess) return NULL;
#else
  if (posix_memalign(&ptr, 256, (size_t)size) != 0) return NULL;
#endif
  ++allocations;
  live_bytes += (size_t)size;
  return ptr;
}

void plugin_free(void* ptr, size_t size, int device, void* stream) {
#ifdef PLUGIN_CUDA
  cudaFree(ptr);
#else
  free(ptr);
#endif
  ++frees;
  live_bytes -= size;
}

long plugin_allocations(void) { return allocations; }
long plugin_frees(void) { return frees; }
size_t plugin_live_bytes(void) { return live_bytes; }
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """A pluggable allocator's shared library: host memory, or CUDA memory on the CUDA runtime."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "plugin.c").write_text(_PLUGIN)
    command = ["cc", "-shared", "-fPIC", "-O1", str(folder / "plugin.c"), "-o", str(folder / "plugin.so")]
    if not capabilities().host_memory:
        cuda_home = torch.utils.cpp_extension.CUDA_HOME
        command += ["-DPLUGIN_CUDA", f"-I{cuda_home}/include", f"-L{cuda_home}/lib64", f"-Wl,-rpath,{cuda_home}/lib64", "-lcudart"]
    subprocess.run(command, check=True, timeout=120)
    return str(folder / "plugin.so")


def _counters(path):
    import ctypes

    library = ctypes.CDLL(path)
    library.plugin_live_bytes.restype = ctypes.c_size_t
    return lambda: (library.plugin_allocations(), library.plugin_frees(), library.plugin_live_bytes())


def test_pool_with_a_pluggable_allocator(plugin):
    counters = _counters(plugin)
    allocator = AccelPluggableAllocator(plugin, "plugin_alloc", "plugin_free")
    pool = MemPool(allocator)
    assert pool.allocator is allocator
    before = counters()
    with use_mem_pool(pool):
        x = torch.arange(4096.0, device="accel")
        y = x * 2
    allocations, frees, live = counters()
    assert allocations > before[0] and frees == before[1]
    assert live - before[2] == sum(segment["total_size"] for segment in pool.snapshot())
    assert torch.equal(y.cpu(), torch.arange(4096.0) * 2)
    del x, y, pool
    # The pool's memory went back to the allocator that gave it.
    assert counters()[1] - before[1] == allocations - before[0]
    assert counters()[2] == before[2]


def test_pluggable_allocator_names_a_missing_function(plugin):
    with pytest.raises(AttributeError, match="no release function 'nonexistent'"):
        AccelPluggableAllocator(plugin, "plugin_alloc", "nonexistent")
    with pytest.raises(TypeError, match="AccelPluggableAllocator"):
        change_current_allocator(object())


def test_change_current_allocator_before_the_first_allocation(plugin):
    proc = run_python(
        f"""
        import ctypes, torch, torch_accel
        from torch_accel.memory import AccelPluggableAllocator, change_current_allocator
        allocator = AccelPluggableAllocator({plugin!r}, "plugin_alloc", "plugin_free")
        change_current_allocator(allocator)
        library = ctypes.CDLL({plugin!r})
        x = torch.arange(1000.0, device="accel")
        y = torch.nn.functional.relu(x - 500)
        assert library.plugin_allocations() >= 2, library.plugin_allocations()
        assert torch.equal(y.cpu(), torch.relu(torch.arange(1000.0) - 500))
        del x, y
        torch.accel.empty_cache()
        try:
            change_current_allocator(allocator)
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout


# Expandable segments -----------------------------------------------------------


def test_expandable_segments_as_cuda_reads_them():
    # PYTORCH_ALLOC_CONF gives them to the CUDA runtime's allocator (CUDA's own):
    # its segments are expandable. The host runtime maps every allocation
    # separately: it warns (test_memory.py) and its segments are not.
    proc = run_python(
        """
        import warnings, torch, torch_accel
        from torch_accel._core import capabilities
        warnings.simplefilter("ignore")
        x = torch.ones(1 << 20, device="accel")
        [segment] = [s for s in torch_accel.memory_snapshot() if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
        assert segment["is_expandable"] == (not capabilities().host_memory), segment
        assert torch_accel.memory._snapshot()["allocator_settings"]["expandable_segments"] is True
        print("ok")
        """,
        env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
