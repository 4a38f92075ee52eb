"""The patch registry (torch_accel/_patches.py).

Every patch torch_accel makes to PyTorch or Triton is declared in one registry
with the hash of the source it was written against: an upgrade that changes
that source fails here, so each such patch is reviewed.
"""

import importlib
import pkgutil

import pytest
import torch

import torch_accel
from torch_accel import _patches


def _import_every_module() -> None:
    # The patches are declared by the modules of their areas, most of them
    # imported only when torch.compile needs them.
    for module in pkgutil.walk_packages(torch_accel.__path__, "torch_accel."):
        importlib.import_module(module.name)


@pytest.mark.parametrize("name", sorted(_patches.SOURCE_SHA256))
def test_patched_source_is_the_one_the_patch_was_written_for(name):
    assert _patches.source_sha256(_patches.original(name)) == _patches.SOURCE_SHA256[name], (
        f"{name} is not the source the patch declaring it in torch_accel was written for: review that patch "
        "against it, then record its new hash in torch_accel/_patches.py"
    )


def test_every_patch_is_declared_with_a_hash():
    _import_every_module()
    declared = _patches.declared()
    assert set(declared) == set(_patches.SOURCE_SHA256)
    # Each name is declared by one patch, which names it.
    assert all(name in patch.names for name, patch in declared.items())


def test_a_patch_applies_once_and_keeps_the_original():
    from torch_accel import _profiler_patches

    name = "torch.autograd.profiler.profile.__init__"
    # Applied at import: the constructor is the patch's, the original recorded.
    patched = torch.autograd.profiler.profile.__init__
    assert patched is not _patches.original(name)
    assert _patches.original(name) is _patches._originals[name]
    _patches.apply(_profiler_patches.profile_without_device)
    assert torch.autograd.profiler.profile.__init__ is patched


def test_a_patch_must_name_hashed_code():
    with pytest.raises(KeyError, match="torch.nn.functional.relu is patched without a hash"):
        _patches.patch("torch.nn.functional.relu")
    with pytest.raises(ValueError, match="patched twice"):
        _patches.patch("torch.autograd.profiler.profile.__init__")(lambda original: None)
