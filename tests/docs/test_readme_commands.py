"""Every command the README shows, run as the README writes it (with its default options)
against the real kernel in QEMU.

The `nexos` lines are read out of README.md itself, so a README edit that breaks one fails
here. Commands that call make run under the configurations' build locks (tests/conftest.py):
the builds are made first by the build_kernel fixture, so make finds them up to date, and no
other pytest worker runs make in the same folder meanwhile. `make clean` runs in a copy of the
checkout, since it would remove the builds other tests boot.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pexpect
import pytest
from safetensors.numpy import save_file

from nexos.machine.config import BuildConfig, llm_cpus, matrix
from nexos.machine.qemu import QemuSession
from nexos.parse import parse_smolprobe
from nexos.programs.kvcache import KvShape, active_pages_est
from nexos.programs.serve import PRESSURE_MEMSIZE, PRESSURE_WORKLOADS
from support import (
    HF_CONFIG,
    boot_to_shell,
    build_locks,
    copy_checkout,
    hf_weights,
    make_qemu,
    shell_smolprobe,
)

pytestmark = pytest.mark.qemu

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def readme_line(prefix: str) -> list[str]:
    """The README's code line that starts with `prefix`, split as the shell would."""
    lines = [x.strip() for x in README.splitlines() if x.strip().startswith(prefix)]
    assert lines, f"the README shows no line starting with {prefix!r}"
    return shlex.split(lines[0].split("  #")[0])


def guest_line(prefix: str) -> str:
    """The README's shell line (`$ ...`) that starts with `prefix`, as typed at the prompt."""
    lines = [x.strip() for x in README.splitlines() if x.strip().startswith(prefix)]
    assert lines, f"the README shows no line starting with {prefix!r}"
    return lines[0][2:]


def nexos_argv(words: list[str]) -> list[str]:
    """`nexos ...` or `.venv/bin/nexos ...` from the README as this interpreter's `-m nexos`."""
    assert words[0].endswith("nexos"), words
    return [sys.executable, "-m", "nexos", *words[1:]]


def run(argv: list[str], cwd: Path = ROOT, timeout: float = 1200, columns: int = 100
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("NEXOS_REPO", None)  # the README's commands find the checkout from cwd
    return subprocess.run(argv, cwd=cwd, env=env, text=True, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_nexos_build_with_defaults(build_kernel):
    cfg = BuildConfig(1, 1)
    build_kernel(cfg)
    with build_locks([cfg]):
        r = run(nexos_argv(["nexos", "build"]))
    assert r.returncode == 0, r.stderr
    assert re.search(r"^lazy1-cow1: .*build/lazy1-cow1 \(", r.stdout, re.M), r.stdout


def test_readme_nexos_run_line(build_kernel):
    words = readme_line("nexos run ")
    cfg = BuildConfig(1, 1)
    build_kernel(cfg)
    with build_locks([cfg]):
        r = run(nexos_argv(words))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert r.stdout.count("ALL TESTS PASSED") == 2, r.stdout[-2000:]
    assert "booted lazy1-cow1" in r.stderr


def test_readme_nexos_probe_line(build_kernel):
    words = readme_line("nexos probe ")
    cfg = BuildConfig(1, 0)  # probe's default --cow is 0
    build_kernel(cfg, llm=True)
    with build_locks([cfg]):
        r = run(nexos_argv(words))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "LAZY_STYLE" in r.stdout and "2880" in r.stdout, r.stdout


def test_readme_demo_nexos_compare_table(build_kernel):
    """The demo with its defaults: the human table, both kernels, both verdicts."""
    configs = [BuildConfig(0, 0), BuildConfig(1, 0)]
    for c in configs:
        build_kernel(c, llm=True)
    with build_locks(configs):
        r = run(nexos_argv(["nexos", "compare"]))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {m[1]: m[0] for m in re.finditer(r"^(lazy\d-cow\d) .*$", r.stdout, re.M)}
    assert set(rows) == {"lazy0-cow0", "lazy1-cow0"}, r.stdout
    assert "EAGER_STYLE" in rows["lazy0-cow0"] and "2880" in rows["lazy0-cow0"]
    assert "LAZY_STYLE" in rows["lazy1-cow0"] and "2700 (93%)" in rows["lazy1-cow0"]


@pytest.mark.long
def test_readme_grade_junit_all_configurations(readme_grade):
    """`nexos grade --junit report.xml` as the README's Grading section shows it: all four
    configurations, every default check, full points on our kernel."""
    assert "`nexos grade --junit report.xml`" in README
    r = readme_grade
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    root = ET.fromstring(r.junit)
    suites = {s.get("name") for s in root.iter("testsuite")}
    assert suites == {c.name for c in matrix()}
    assert root.get("failures") == "0" and int(root.get("tests", "0")) >= 4 * 6


def test_readme_model_import_then_make_qemu_llm_model(tmp_path):
    """`nexos model import --config ... --weights ... --out X` and `make qemu-llm MODEL=X`:
    a small Llama checkpoint written with the safetensors package, imported, put on the
    image, and run by smolprobe in the guest."""
    import_words = readme_line(".venv/bin/nexos model import ")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(HF_CONFIG))
    save_file(hf_weights(seed=1, tied=True), str(hf / "model.safetensors"))
    out = tmp_path / "smollm-real.bin"
    argv = nexos_argv([import_words[0], *import_words[1:]])
    argv = [{"config.json": str(hf / "config.json"),
             "model.safetensors": str(hf / "model.safetensors"),
             "build/models/smollm-real.bin": str(out)}.get(a, a) for a in argv]
    r = run(argv)
    assert r.returncode == 0, r.stderr
    assert out.is_file()

    make_words = readme_line("make qemu-llm MODEL=")
    # in a copy of the checkout: this image never replaces the default model on the images
    # other tests boot
    tree = copy_checkout(tmp_path, share_models=True)
    make_args = [a if not a.startswith("MODEL=") else f"MODEL={out}" for a in make_words[1:]]
    with build_locks([], shared=True):   # it prepares a model of its own under build/models
        with make_qemu([*make_args, f"PYTHON={sys.executable}"], tree, timeout=600) as child:
            boot_to_shell(child, f"nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus={llm_cpus()} mem=512M")
            res = shell_smolprobe(child, "smolprobe --prompt-tokens 1,2,3 --gen-len 10")
    # the imported model's geometry: 2 layers, 2 KV heads of 16, 128 positions by default
    assert res.verdict == "LAZY_STYLE" and res.reserve.mapped_pages == 0
    assert res.summary.max_kv_pages < 2880


def test_make_qemu_boots_the_shell(tmp_path):
    """In a copy of the checkout: `make qemu` boots fs.img read-write, which would stop the
    other tests' read-only boots of the shared image (QEMU's image lock)."""
    tree = copy_checkout(tmp_path, share_models=True)
    with make_qemu(["qemu", "LAZY_ALLOC=1", "COW_ALLOC=1", f"PYTHON={sys.executable}"], tree,
                   timeout=600) as child:
        boot_to_shell(child, "nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem=512M")
        child.sendline("echo readme")
        child.expect(r"readme\r\n\$ ")


def test_make_qemu_gdb_waits_for_the_debugger(build_kernel, tmp_path):
    """`make qemu-gdb` says how to attach and leaves QEMU stopped at the first instruction
    with a gdb server on the port it wrote into .gdbinit (in a copy of the checkout, so that
    the .gdbinit it writes stays out of the tree)."""
    tree = copy_checkout(tmp_path)
    with make_qemu(["qemu-gdb"], tree, timeout=600) as child:
        child.expect(r"now run 'gdb-multiarch build/lazy1-cow1/kernel'")
        port = int((tree / ".gdbinit").read_text().split(":")[-1])
        for _ in range(50):  # the server is up once QEMU has started
            if ss_listening(port):
                break
            child.expect([pexpect.TIMEOUT], timeout=0.2)
        assert ss_listening(port), f"no gdb server on port {port}"
        assert "nexos: LAZY_ALLOC" not in child.before  # stopped before the kernel ran


def ss_listening(port: int) -> bool:
    """Whether some process listens on TCP `port` (reads /proc/net/tcp: no tools needed)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def test_make_clean_removes_builds_and_keeps_models(tmp_path):
    tree = copy_checkout(tmp_path)
    models = tree / "build" / "models"
    models.mkdir(parents=True)
    (models / "kept.bin").write_bytes(b"model")
    env = {**os.environ}
    r = subprocess.run(["make", "LAZY_ALLOC=0", "COW_ALLOC=1", f"PYTHON={sys.executable}"],
                       cwd=tree, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tree / "build/lazy0-cow1/kernel").is_file()
    r = subprocess.run(["make", "clean"], cwd=tree, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert not (tree / "build/lazy0-cow1").exists() and not (tree / "build/host").exists()
    assert (models / "kept.bin").read_bytes() == b"model"


def test_readme_text_commands_in_the_guest(build_kernel):
    """The README's `smolprobe --chat` and `--prompt` lines at the shell of a lazy kernel with
    the default (real) model: the answer names Paris, and the pages mapped are the tokens'."""
    chat, prompt = (guest_line(f"$ smolprobe --{flag} ") for flag in ("chat", "prompt"))
    cfg = BuildConfig(1, 0)
    build_kernel(cfg, llm=True)
    with QemuSession.for_config(cfg, ROOT, llm=True) as s:
        outs = [s.run(cmd, timeout=600).output for cmd in (chat, prompt)]
    answer, completion = (parse_smolprobe(o) for o in outs)
    assert answer.text is not None and "Paris" in answer.text, outs[0]
    assert completion.text is not None and completion.request.gen_tokens == 8, outs[1]
    for r in (answer, completion):
        assert r.verdict == "LAZY_STYLE" and r.reserve.mapped_pages == 0


@pytest.mark.long
def test_readme_nexos_serve_line(build_kernel):
    """The README's `nexos serve` line, with no workload: it says it runs the README's
    workload (32 requests of up to 2048 tokens); both kernels serve every request; the lazy
    copy-on-write one runs all 32 at once, the eager one at most 7 (its workers' sbrk maps a
    90 MiB reservation each: 6 fit in 512 MiB beside the 98 MB model at best, and a 7th the
    free pages seemed to allow at its admit may still be refused its reservation), every
    page it reserved mapped."""
    words = readme_line("$ nexos serve")[1:]
    assert words == ["nexos", "serve"], words
    configs = [BuildConfig(0, 0), BuildConfig(1, 1)]
    for c in configs:
        build_kernel(c, llm=True)
    with build_locks(configs):
        r = run(nexos_argv(words), timeout=2400, columns=200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == ("nexos serve: no workload given: --requests 32 "
                                        "--max-len 2048 (the README's)"), r.stdout
    # kernel, at once, queue waits, recomputed, done, ...: the table's columns
    rows = {m[1]: m[2].split()
            for m in re.finditer(r"^\s*(lazy\d-cow\d) +(.*)$", r.stdout, re.M)}
    assert set(rows) == {"lazy0-cow0", "lazy1-cow1"}, r.stdout
    for cells in rows.values():
        assert cells[3] == "32/32" and cells[-1] == "yes", r.stdout
    assert int(rows["lazy1-cow1"][0]) == 32 and int(rows["lazy0-cow0"][0]) <= 7, r.stdout
    assert rows["lazy0-cow0"][4] == rows["lazy0-cow0"][5], r.stdout   # reserved = mapped


def test_readme_nexos_serve_swap_line(build_kernel):
    """The README's `nexos serve --swap 512` line: the short, medium and long workloads on
    lazy1-cow1 in PRESSURE_MEMSIZE, each on a boot without swap and one with a 512 MiB swap disk.
    Every request completes both ways with the same answers; without swap workers are
    killed and recomputed, with swap none is, and pages go out and come back."""
    words = readme_line("$ nexos serve --swap")[1:]
    assert words == ["nexos", "serve", "--swap", "512"], words
    cfg = BuildConfig(1, 1, PRESSURE_MEMSIZE, 2)
    build_kernel(cfg, llm=True)
    with build_locks([cfg]):
        r = run(nexos_argv(words), timeout=2400, columns=100)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "every request completed, with the same answers without swap and with" in r.stdout
    # workload, kernel | no swap: done, recomputed, tokens, secs | swap: done, recomputed,
    # out, in, secs
    rows = {m[1]: m[2].split() for m in re.finditer(
        r"^\s*(short|medium|long) +lazy1-cow1 +(.*)$", r.stdout, re.M)}
    assert list(rows) == ["short", "medium", "long"], r.stdout
    want = {label: n for label, n, _ in PRESSURE_WORKLOADS}
    for label, cells in rows.items():
        n = want[label]
        assert cells[0] == cells[4] == f"{n}/{n}", r.stdout
        assert cells[5] == "0" and int(cells[6]) > 0 and int(cells[7]) > 0, r.stdout
        # every workload outgrows memory (the short one too: its answers keep it resident
        # long enough to overlap the others): kills and recomputes without swap
        assert int(cells[1]) > 0 and int(cells[2]) > 0, r.stdout


def test_readme_nexos_chat_line(build_kernel):
    """The README's `nexos chat` line: the answer names Paris; the line under it carries the
    KV pages the run really mapped, which are the pages its tokens span."""
    words = readme_line("nexos chat ")
    cfg = BuildConfig(1, 0)
    shape = KvShape.from_checkpoint(
        Path((build_kernel(cfg, llm=True) / "model.list").read_text().strip()), 256)
    with build_locks([cfg]):
        r = run(nexos_argv(words))
    assert r.returncode == 0, r.stdout + r.stderr
    answer, figures = r.stdout.strip().split("\n", 1)
    assert "Paris" in answer
    m = re.search(r"(\d+) prompt \+ (\d+) answer tokens .* (\d+) of 2880 reserved KV pages",
                  " ".join(figures.split()))
    assert m, figures
    prompt, gen, mapped = map(int, m.groups())
    assert mapped == active_pages_est(shape, prompt + gen)
