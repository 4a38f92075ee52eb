"""The breadth of torch.distributed on accel (issue 17.5).

One multi-process run (test/_distributed_breadth_worker.py, one process per
rank, rank r on accel:r, launched by test_distributed.py's run_ranks) runs
every scenario on accel and on cpu in the same ranks: async collectives on a
non-default stream, new_group/new_subgroups, a 1-D DeviceMesh, DTensor
(distribute_tensor, redistribute, full_tensor), FSDP2 fully_shard training
with a MixedPrecisionPolicy, tensor parallelism and distributed checkpoints.
On the host runtime accel runs cpu's kernels and Gloo, so accel's results are
cpu's bit for bit; on the CUDA runtime (cuda kernels, NCCL) they agree with
cpu's to rounding.

Distributed checkpoints are resharded across process counts: this process
(no process group) saves a checkpoint the ranks load sharded, and loads the
checkpoint the ranks saved sharded.
"""

import os

import pytest
import torch

import torch_accel
from test_distributed import assert_no_failure, is_failure, run_ranks, world_size

HERE_WORKER = "_distributed_breadth_worker.py"


def _one_process_state(size: int) -> dict:
    import _distributed_breadth_worker as worker

    return {
        "weight": worker._values(0, "dcp_one_w", (4 * size, 3)),
        "bias": worker._values(0, "dcp_one_b", (5,)),
        "step": torch.tensor(3),
    }


def _run_breadth_worker(output_dir, size: int, *args: str) -> list[dict]:
    """test_distributed.py's launcher, running this file's worker over ``size`` ranks."""
    import test_distributed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(test_distributed, "WORKER", os.path.join(test_distributed.HERE, HERE_WORKER))
        patch.setattr(test_distributed, "world_size", lambda: size)
        if torch_accel.runtime() == "host":
            patch.setenv("TORCH_ACCEL_HOST_DEVICES", str(max(size, torch_accel.device_count())))
        return run_ranks("accel", output_dir, *args)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    import torch.distributed.checkpoint as dcp

    output_dir = tmp_path_factory.mktemp("breadth_ranks")
    # A checkpoint saved by one process, on accel, for the ranks to load sharded.
    state = {name: value.to("accel") for name, value in _one_process_state(world_size()).items()}
    dcp.save(state, checkpoint_id=output_dir / "dcp_one_process")
    results = _run_breadth_worker(output_dir, world_size())
    for rank_results in results:
        rank_results["output_dir"] = output_dir
    return results


def _leaves(value, path=""):
    """(path, leaf) pairs of a worker result: {"tensor", "device"} dicts, strings, numbers."""
    if isinstance(value, dict) and "tensor" in value and "device" in value:
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def check_scenario(ranks: list[dict], name: str, **tolerance) -> None:
    """accel's results are cpu's: bitwise where accel runs cpu's kernels (host
    runtime), else to rounding (assert_close, with ``tolerance`` if given)."""
    bitwise = ranks[0]["target"] == "cpu"
    for rank, results in enumerate(ranks):
        accel, cpu = results[name]["accel"], results[name]["cpu"]
        assert_no_failure(cpu, f"{name} on cpu (rank {rank})")
        assert_no_failure(accel, f"{name} on accel (rank {rank})")
        accel_leaves, cpu_leaves = list(_leaves(accel)), list(_leaves(cpu))
        assert [p for p, _ in accel_leaves] == [p for p, _ in cpu_leaves], name
        assert accel_leaves, f"{name} returned nothing"
        for (path, a), (_, c) in zip(accel_leaves, cpu_leaves):
            what = f"{name}{path} (rank {rank})"
            if not isinstance(a, dict):
                assert a == c, what
                continue
            assert a["device"] == f"accel:{rank}", f"{what} is on {a['device']}"
            assert a["tensor"].dtype == c["tensor"].dtype, what
            if bitwise:
                assert torch.equal(a["tensor"], c["tensor"]), f"{what}: {a['tensor']} != {c['tensor']}"
            else:
                torch.testing.assert_close(a["tensor"], c["tensor"], msg=what, **tolerance)


def test_async_collectives_on_a_side_stream_match_cpu(ranks):
    check_scenario(ranks, "async_collectives")
    expected = {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"}
    if len(ranks) > 1:
        expected |= {"send_recv", "batch_isend_irecv"}
    assert set(ranks[0]["async_collectives"]["accel"]) == expected


def test_async_collectives_compute_the_collective(ranks):
    # Not only equal to cpu: the values each collective defines.
    import _distributed_breadth_worker as worker

    size = len(ranks)
    for rank, results in enumerate(ranks):
        got = {k: v["tensor"] for k, v in results["async_collectives"]["accel"].items()}
        summed = sum(worker._values(r, "all_reduce", (16,)) * 3 for r in range(size))
        torch.testing.assert_close(got["all_reduce"], summed * 2)
        gathered = torch.cat([worker._values(r, "all_gather", (3, 2)) + 1 for r in range(size)])
        assert torch.equal(got["all_gather_into_tensor"], gathered * 2)
        assert torch.equal(got["broadcast"], worker._values(size - 1, "broadcast", (7,)) * 5)
        if size > 1:
            assert torch.equal(got["send_recv"], worker._values((rank - 1) % size, "send_recv", (5,)) * 2)
            assert torch.equal(got["batch_isend_irecv"], worker._values((rank - 1) % size, "batch", (6,)) * 2)


def test_new_group_and_subgroups_match_cpu(ranks):
    check_scenario(ranks, "groups")
    assert "new_group_one" in ranks[0]["groups"]["accel"]


def test_split_group_refuses_accel_as_it_refuses_cpu(ranks):
    # torch 2.11's split_group takes the parent group's cuda backend only
    # (NCCL's ncclCommSplit): for Gloo on cpu and for accel it raises the same
    # error; accel follows cpu here, not cuda.
    for results in ranks:
        accel, cpu = results["split_group"]["accel"], results["split_group"]["cpu"]
        assert is_failure(cpu) and is_failure(accel)
        assert (accel["failure"], accel["message"]) == (cpu["failure"], cpu["message"])


def test_device_mesh_1d_matches_cpu(ranks):
    check_scenario(ranks, "device_mesh")
    for rank, results in enumerate(ranks):
        accel = results["device_mesh"]["accel"]
        assert (accel["local_rank"], accel["coordinate"], accel["size"]) == (rank, [rank], len(ranks))
        assert accel["mesh"] == list(range(len(ranks)))


def test_dtensor_matches_cpu(ranks):
    check_scenario(ranks, "dtensor")
    import _distributed_breadth_worker as worker

    size = len(ranks)
    full = worker._values(0, "dtensor", (4 * size, 6))
    for rank, results in enumerate(ranks):
        got = results["dtensor"]["accel"]
        assert torch.equal(got["full_tensor"]["tensor"], full)
        assert torch.equal(got["row_local"]["tensor"], full.chunk(size, 0)[rank])
        assert torch.equal(got["col_local"]["tensor"], full.chunk(size, 1)[rank])
        assert torch.equal(got["replicated_local"]["tensor"], full)
        summed = sum(worker._values(r, "dtensor_summand", (2 * size, 3)) for r in range(size))
        torch.testing.assert_close(got["summed"]["tensor"], summed)
        torch.testing.assert_close(got["scattered_local"]["tensor"], summed.chunk(size, 0)[rank])
        if size > 1:
            # Contracting two dims sharded alike leaves each rank a summand.
            assert got["product_placements"] == "(Partial(sum),)"


def test_fsdp2_mixed_precision_training_matches_cpu(ranks):
    # bf16 compute: on the CUDA runtime (cuda kernels against cpu's) to bf16 rounding.
    check_scenario(ranks, "fsdp", rtol=2e-2, atol=2e-2)
    for results in ranks:
        fsdp = results["fsdp"]["accel"]
        assert set(fsdp["param_dtypes"]) == {"torch.float32"}  # sharded params stay fp32
        # Training moved the parameters.
        assert fsdp["losses"][0]["tensor"].item() != fsdp["losses"][-1]["tensor"].item()
    # Every rank holds the same full parameters.
    for a, b in zip(ranks[0]["fsdp"]["accel"]["full_params"], ranks[-1]["fsdp"]["accel"]["full_params"]):
        assert torch.equal(a["tensor"], b["tensor"])


def test_fsdp2_cpu_offload_matches_cpu(ranks):
    check_scenario(ranks, "fsdp_cpu_offload")
    for results in ranks:
        # The sharded parameters live on cpu (in accel's pinned memory on accel).
        assert set(results["fsdp_cpu_offload"]["accel"]["param_devices"]) == {"cpu"}


def test_tensor_parallel_matches_cpu(ranks):
    check_scenario(ranks, "tensor_parallel")


def test_sequence_parallel_matches_cpu(ranks):
    check_scenario(ranks, "sequence_parallel")


def test_2d_mesh_with_fsdp2_and_tensor_parallel_matches_cpu(ranks):
    check_scenario(ranks, "mesh_2d")
    for rank, results in enumerate(ranks):
        got = results["mesh_2d"]["accel"]
        assert (got["coordinate"], got["shape"]) == ([0, rank], [1, len(ranks)])
        assert got["losses"][0]["tensor"].item() != got["losses"][-1]["tensor"].item()


def test_2x2_mesh_over_four_ranks_matches_cpu(tmp_path):
    # Four ranks, rank r on accel:r: the host runtime makes four devices; on
    # the CUDA runtime it takes four GPUs.
    if torch_accel.runtime() == "cuda" and torch_accel.device_count() < 4:
        pytest.skip("a 2 x 2 mesh needs four GPUs on the CUDA runtime")
    ranks = _run_breadth_worker(tmp_path, 4, "2x2")
    check_scenario(ranks, "mesh_2x2", rtol=2e-2, atol=2e-2)
    import _distributed_breadth_worker as worker

    full = worker._values(0, "mesh_2x2_full", (4, 6))
    for rank, results in enumerate(ranks):
        got = results["mesh_2x2"]["accel"]
        dp, tp = divmod(rank, 2)
        assert got["coordinate"] == [dp, tp]
        assert torch.equal(got["sharded_local"]["tensor"], full.chunk(2, 0)[dp].chunk(2, 1)[tp])
        assert torch.equal(got["regathered_local"]["tensor"], full.chunk(2, 0)[tp])
        assert torch.equal(got["full_tensor"]["tensor"], full)
        # Groups along "tp" are {0, 1} and {2, 3}; along "dp" {0, 2} and {1, 3}.
        along_tp = sum(worker._values(r, "mesh_2x2_tp", (4,)) for r in (2 * dp, 2 * dp + 1))
        along_dp = sum(worker._values(r, "mesh_2x2_dp", (4,)) for r in (tp, tp + 2))
        assert torch.equal(got["along_tp"]["tensor"], along_tp)
        assert torch.equal(got["along_dp"]["tensor"], along_dp)
    # FSDP2 + TP: every rank ends with the same full parameters.
    for results in ranks[1:]:
        for a, b in zip(results["mesh_2x2"]["accel"]["full_params"], ranks[0]["mesh_2x2"]["accel"]["full_params"]):
            assert torch.equal(a["tensor"], b["tensor"])


def test_dcp_loads_one_process_checkpoint_sharded(ranks):
    check_scenario(ranks, "checkpoint")
    size = len(ranks)
    expected = _one_process_state(size)
    for rank, results in enumerate(ranks):
        got = results["checkpoint"]["accel"]
        assert torch.equal(got["weight_local"]["tensor"], expected["weight"].chunk(size, 0)[rank])
        assert torch.equal(got["bias_local"]["tensor"], expected["bias"])
        assert got["step"]["tensor"].item() == 3


@pytest.mark.parametrize("saved_on", ["accel", "cpu"])
def test_dcp_ranks_checkpoint_loads_in_one_process(ranks, saved_on):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import _distributed_breadth_worker as worker

    assert_no_failure(ranks[0]["checkpoint"][saved_on], f"checkpoint on {saved_on}")
    assert not dist.is_initialized()
    size = len(ranks)
    state = {
        "weight": torch.zeros(4 * size, 3, device="accel"),
        "bias": torch.zeros(5, device="accel"),
        "step": torch.tensor(0, device="accel"),
    }
    dcp.load(state, checkpoint_id=ranks[0]["output_dir"] / f"dcp_{saved_on}")
    assert all(value.device.type == "accel" for value in state.values())
    assert torch.equal(state["weight"].cpu(), worker._values(0, "dcp_w", (4 * size, 3)))
    assert torch.equal(state["bias"].cpu(), worker._values(0, "dcp_b", (5,)))
    assert state["step"].item() == 7


def test_every_scenario_ran(ranks):
    names = ("async_collectives", "groups", "device_mesh", "dtensor", "fsdp", "fsdp_cpu_offload")
    for name in names + ("tensor_parallel", "sequence_parallel", "mesh_2d", "checkpoint"):
        assert not is_failure(ranks[0][name]["accel"]), name
    assert torch_accel.device_count() >= len(ranks)
