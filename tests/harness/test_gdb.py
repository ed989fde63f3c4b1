"""`make qemu-gdb` + `make gdb` (docs/kernel.md, "Debugging"): a real gdb-multiarch, in batch
mode, attaches to the kernel QEMU holds at its first instruction, breaks in vmfault when a
lazytests process faults, and reads the backtrace and `p->pid`; the kernel's own report of
that fault (its `usertrap:` line) names the same pid and address. In a copy of the checkout,
so that the .gdbinit make writes stays out of the tree."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from support import boot_to_shell, copy_checkout, make_qemu

pytestmark = pytest.mark.qemu

# Stop at the first fault of a process named lazytests (the shell and init fault too, at
# boot), print what a student looks at there, and let the kernel go on.
GDB_SCRIPT = """set pagination off
break vmfault if p->name[0] == 'l' && p->name[1] == 'a' && p->name[2] == 'z'
continue
bt
printf "GDB pid=%d va=0x%lx name=%s\\n", p->pid, va, p->name
print p->pid
delete
detach
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether some process listens on TCP `port` (from /proc/net/tcp: no connection, which
    QEMU's one-client gdb server would take)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        if any(r.split()[3] == "0A" and int(r.split()[1].rsplit(":", 1)[1], 16) == port
               for r in rows):
            return True
    return False


def test_gdb_breaks_in_vmfault_on_a_lazy_fault(build_kernel, tmp_path):
    tree = copy_checkout(tmp_path, share_models=True)
    script = tmp_path / "vmfault.gdb"
    script.write_text(GDB_SCRIPT)
    port = free_port()
    # LAZY_ALLOC=1 COW_ALLOC=0: lazytests' first fault is badfault's load above the heap
    # (no COW fault of the parent's stack comes before it)
    flags = ["LAZY_ALLOC=1", "COW_ALLOC=0", f"GDBPORT={port}", f"PYTHON={sys.executable}"]
    with make_qemu(["qemu-gdb", *flags], tree, timeout=600) as qemu:
        qemu.expect(r"now run 'gdb-multiarch build/lazy1-cow0/kernel' \(or: make gdb\)")
        for _ in range(100):
            if listening(port):
                break
            qemu.expect([pexpect.TIMEOUT], timeout=0.2)
        assert listening(port), f"no gdb server on port {port}"
        assert (tree / ".gdbinit").read_text().splitlines() == [
            "set confirm off", "set architecture riscv:rv64", "file build/lazy1-cow0/kernel",
            f"target remote 127.0.0.1:{port}"]
        gdb = subprocess.Popen(["make", "gdb", f"GDBARGS=-batch -x {script}"], cwd=tree,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               stdin=subprocess.DEVNULL)
        try:
            boot_to_shell(qemu, "nexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=1 mem=512M")
            qemu.sendline("lazytests badfault")
            out, _ = gdb.communicate(timeout=300)
        finally:
            if gdb.poll() is None:
                gdb.kill()
        qemu.expect(r"usertrap: pid (\d+) \(lazytests\) killed: [^\r\n]*stval (0x[0-9a-f]+)")
        trap_pid, trap_va = int(qemu.match[1]), int(qemu.match[2], 16)
        qemu.expect_exact("test badfault: OK")
        qemu.expect_exact("ALL TESTS PASSED")
    assert gdb.returncode == 0, out
    m = re.search(r"GDB pid=(\d+) va=(0x[0-9a-f]+) name=lazytests", out)
    assert m, out
    assert int(m[1]) == trap_pid and int(m[2], 16) == trap_va, out
    assert re.search(rf"^\$1 = {trap_pid}$", out, re.M), out   # print p->pid
    frames = re.findall(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(\w+)", out, re.M)
    names = [f[1] for f in frames]
    assert names[:1] == ["vmfault"] and "usertrap" in names, out  # a fault from user code
    assert "Breakpoint 1, vmfault" in out, out
    # the build keeps debug information: gdb knows the breakpoint's file and line
    assert re.search(r"Breakpoint 1 at 0x[0-9a-f]+: file kernel/fault\.c, line \d+\.", out), out
