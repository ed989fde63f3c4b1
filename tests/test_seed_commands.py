"""The seed document's exact commands: `make qemu-llm LAZY_ALLOC=1 COW_ALLOC=1`, then
`smolprobe --prompt-tokens 1,2,3 --gen-len 10` (and its alias) at the NexOS shell.

They run in a fresh copy of the checkout (its build/models shared), so the build there is a
clean one, as after `make clean`, and the image it boots read-write is its own."""

from __future__ import annotations

import os
import signal

import pexpect
import pytest

from conftest import copy_checkout
from nexos.parse import parse_smolprobe

pytestmark = pytest.mark.qemu  # make qemu-llm boots the kernel (no kernel fixture says so)


def quit_make_qemu(child: pexpect.spawn) -> None:
    """Quit QEMU with its console escape (Ctrl-A x), as a user would; if that does not end
    make, kill make and QEMU together (pexpect made make a process-group leader)."""
    try:
        child.sendcontrol("a")
        child.send("x")
        child.expect(pexpect.EOF, timeout=30)
    except (pexpect.ExceptionPexpect, OSError):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    child.close(force=True)


def test_make_qemu_llm_then_smolprobe(tmp_path):
    # In a copy of the checkout (sharing build/models): `make qemu-llm` boots its image
    # read-write, and QEMU's image lock would refuse other tests' boots of a shared one.
    tree = copy_checkout(tmp_path, share_models=True)
    child = pexpect.spawn("make", ["qemu-llm", "LAZY_ALLOC=1", "COW_ALLOC=1"],
                          cwd=str(tree), encoding="utf-8", timeout=900)
    try:
        child.expect(r"nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem=512M")
        child.expect(r"\$ ")
        child.sendline("smolprobe --prompt-tokens 1,2,3 --gen-len 10")
        child.expect(r"\[smolprobe\] timing [^\r\n]+\r\n")
        res = parse_smolprobe(child.before + child.after)
        child.expect(r"\$ ")
        child.sendline("smol_probe --prompt-tokens 1,2,3 --gen-len 10")
        child.expect(r"\[smolprobe\] timing [^\r\n]+\r\n")
        alias = parse_smolprobe(child.before + child.after)
    finally:
        quit_make_qemu(child)
    for r in (res, alias):
        assert (r.summary.max_kv_pages, r.kv_capacity.active_pages_est) == (2880, 180)
        assert (r.reserve.mapped_pages, r.decode.mapped_pages) == (0, 180)
        assert (r.summary.saved_percent, r.verdict) == (93, "LAZY_STYLE")
