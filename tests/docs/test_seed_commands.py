"""The seed exercise's exact commands (README; docs/smolprobe.md, "The seed run"):
`make qemu-llm LAZY_ALLOC=1 COW_ALLOC=1`, then `smolprobe --prompt-tokens 1,2,3 --gen-len 10`
(and its alias) at the NexOS shell.

They run in a fresh copy of the checkout (its build/models shared), so the build there is a
clean one, as after `make clean`, and the image it boots read-write is its own."""

from __future__ import annotations

import pytest

from nexos.machine.config import llm_cpus
from support import boot_to_shell, copy_checkout, make_qemu, shell_smolprobe

pytestmark = pytest.mark.qemu  # make qemu-llm boots the kernel (no kernel fixture says so)


def test_make_qemu_llm_then_smolprobe(tmp_path):
    # In a copy of the checkout (sharing build/models): `make qemu-llm` boots its image
    # read-write, and QEMU's image lock would refuse other tests' boots of a shared one.
    tree = copy_checkout(tmp_path, share_models=True)
    with make_qemu(["qemu-llm", "LAZY_ALLOC=1", "COW_ALLOC=1"], tree) as child:
        # qemu-llm boots two harts where the host has two cores; smolprobe uses them all
        boot_to_shell(child, f"nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus={llm_cpus()} mem=512M")
        res = shell_smolprobe(child, "smolprobe --prompt-tokens 1,2,3 --gen-len 10")
        child.expect(r"\$ ")
        alias = shell_smolprobe(child, "smol_probe --prompt-tokens 1,2,3 --gen-len 10")
    for r in (res, alias):
        assert (r.summary.max_kv_pages, r.kv_capacity.active_pages_est) == (2880, 180)
        assert (r.reserve.mapped_pages, r.decode.mapped_pages) == (0, 180)
        assert (r.summary.saved_percent, r.verdict) == (93, "LAZY_STYLE")
        assert r.timing is not None and r.timing.harts == llm_cpus()
