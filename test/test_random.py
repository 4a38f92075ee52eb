"""accel random number generation: per-device default generators, seeding,
states, and the same numbers as the target device's generators."""

import pytest
import torch

import torch_accel

from conftest import run_python


RANDOM_OPS = {
    "rand": lambda d, g: torch.rand(5, device=d, generator=g),
    "randn": lambda d, g: torch.randn(2, 3, device=d, generator=g),
    "randint": lambda d, g: torch.randint(0, 100, (6,), device=d, generator=g),
    "randperm": lambda d, g: torch.randperm(10, device=d, generator=g),
    "normal_": lambda d, g: torch.empty(4, device=d).normal_(2.0, 3.0, generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((8,), 0.3, device=d), generator=g),
    "multinomial": lambda d, g: torch.multinomial(torch.ones(6, device=d), 3, generator=g),
    "exponential_": lambda d, g: torch.empty(4, device=d).exponential_(generator=g),
}


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_accel_generator_matches_target_generator(name, target):
    op = RANDOM_OPS[name]
    accel_gen = torch.Generator(device="accel").manual_seed(42)
    target_gen = torch.Generator(device=target).manual_seed(42)
    assert accel_gen.device.type == "accel"
    first = op("accel", accel_gen)
    assert first.device.type == "accel"
    assert torch.equal(first.to(target), op(target, target_gen))
    # The generators advance alike.
    assert torch.equal(op("accel", accel_gen).to(target), op(target, target_gen))


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_default_generator_matches_after_seeding(name, target):
    op = RANDOM_OPS[name]
    torch.manual_seed(7)
    accel = op("accel", None)
    torch.manual_seed(7)
    assert torch.equal(accel.to(target), op(target, None))


def test_dropout_draws_from_accel_state(target):
    x = torch.ones(64, device="accel")
    torch_accel.manual_seed(3)
    first = torch.nn.functional.dropout(x, 0.5)
    # Reseeding the target device alone changes nothing for accel.
    torch_accel.manual_seed(3)
    if target == "cpu":
        torch.default_generator.manual_seed(99)
    else:
        torch.cuda.manual_seed(99)
    again = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(first.cpu(), again.cpu())
    assert 0 < (first == 0).sum().item() < 64


def test_accel_stream_is_independent_of_the_target_default_generator(target):
    torch_accel.manual_seed(11)
    a = torch.rand(4, device="accel")
    torch_accel.manual_seed(11)
    torch.rand(100, device=target)  # draws from the target's generator only
    b = torch.rand(4, device="accel")
    assert torch.equal(a.cpu(), b.cpu())


def test_rng_state_roundtrip():
    state = torch_accel.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(5, device="accel")
    torch_accel.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(5, device="accel").cpu())


def test_per_device_generators_are_independent(two_devices):
    torch_accel.manual_seed_all(5)
    a0 = torch.rand(3, device="accel:0")
    a1 = torch.rand(3, device="accel:1")
    assert torch.equal(a0.cpu(), a1.cpu())  # same seed, separate streams
    torch_accel.manual_seed_all(5)
    with torch_accel.device(1):
        torch_accel.manual_seed(6)  # current device only
    assert torch.equal(torch.rand(3, device="accel:0").cpu(), a0.cpu())
    assert not torch.equal(torch.rand(3, device="accel:1").cpu(), a1.cpu())
    states = torch_accel.get_rng_state_all()
    assert len(states) == torch_accel.device_count()
    torch_accel.set_rng_state_all(states)


def test_seed_and_initial_seed():
    torch_accel.manual_seed(123)
    assert torch_accel.initial_seed() == 123
    torch_accel.seed()
    assert torch_accel.initial_seed() != 123
    torch_accel.seed_all()
    seeds = {g.initial_seed() for g in torch_accel.default_generators}
    assert len(seeds) == 1


def test_default_generators_are_accel_generators():
    generators = torch_accel.default_generators
    assert len(generators) == torch_accel.device_count()
    assert [g.device for g in generators] == [torch.device("accel", i) for i in range(len(generators))]


def test_manual_seed_before_init_is_applied_at_init():
    proc = run_python(
        """
        import torch, torch_accel
        torch.manual_seed(99)          # queued for accel
        assert not torch_accel.is_initialized()
        a = torch.rand(3, device="accel").cpu()
        torch.manual_seed(99)
        b = torch.rand(3, device=torch_accel._target_device_type()).cpu()
        assert torch.equal(a, b), (a, b)
        assert torch_accel.initial_seed() == 99
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_generator_of_another_device_type_is_rejected():
    with pytest.raises(RuntimeError, match="Expected a 'accel' device type for generator but found 'cpu'"):
        torch.rand(3, device="accel", generator=torch.Generator())


def test_rng_state_of_a_missing_device():
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        torch_accel.get_rng_state(torch_accel.device_count())
