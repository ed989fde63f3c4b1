"""The `nexos` command line end to end against the real kernel in QEMU (docs/harness.md).

Each test runs the console entry point (`python -m nexos`) as a subprocess, as a user or CI
would, on kernels that the build_kernel fixture made first (so the commands run --no-build
and never race another pytest worker's make). Nothing here fakes QEMU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig, matrix
from nexos.programs.kvcache import KvShape, active_pages_est, max_kv_pages
from support import children_of, copy_checkout, default_sigint, proc_alive

pytestmark = pytest.mark.qemu

EAGER, LAZY, COW = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(1, 1)


def nexos(repo: Path, *args: str, timeout: float = 600, cwd: Path | None = None, **env: str
          ) -> subprocess.CompletedProcess[str]:
    """Run `nexos ARGS` to completion; stdout and stderr captured as text."""
    e = {**os.environ, "NEXOS_REPO": str(repo), "COLUMNS": "120", **env}
    return subprocess.run([sys.executable, "-m", "nexos", *args], env=e, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          cwd=cwd)


def model_shape(build_dir: Path, seq_len: int = 256) -> KvShape:
    """The KV geometry of the checkpoint that make put on this build's LLM image."""
    model = Path((build_dir / "model.list").read_text().strip())
    return KvShape.from_checkpoint(model, seq_len)


# --------------------------------------------------------------------------- nexos run

def test_run_exit_status_follows_the_commands(build_kernel, repo):
    build_kernel(LAZY)
    ok = nexos(repo, "run", "--no-build", "--lazy", "1", "--cow", "0", "--", "echo hi there",
               "echo second")
    assert ok.returncode == 0, ok.stderr
    assert "hi there\n" in ok.stdout and "second\n" in ok.stdout
    assert "booted lazy1-cow0" in ok.stderr and "LAZY_ALLOC=1 COW_ALLOC=0" in ok.stderr

    bad = nexos(repo, "run", "--no-build", "--lazy", "1", "--cow", "0", "--", "nosuchprog",
                "echo after")
    assert bad.returncode == 1
    assert "exec nosuchprog failed" in bad.stdout
    assert "after\n" in bad.stdout  # later commands still run
    assert "`nosuchprog` failed: exec nosuchprog failed" in bad.stderr
    assert "Traceback" not in bad.stderr


def checkout_with_wrong_kernel(eager_dir: Path, tmp_path: Path) -> Path:
    """A fake checkout whose build/lazy1-cow1 (which the grade's small machine boots too)
    holds the eager (lazy0-cow0) kernel."""
    fake = tmp_path / "checkout"
    (fake / "kernel").mkdir(parents=True)
    (fake / "user").mkdir()
    folder = fake / "build" / "lazy1-cow1"
    folder.mkdir(parents=True)
    shutil.copy(eager_dir / "kernel", folder / "kernel")
    (folder / "fs.img").symlink_to(eager_dir / "fs.img")
    return fake


def test_run_rejects_a_kernel_built_with_other_flags(build_kernel, repo, tmp_path):
    """A stale or wrong build is an error: build/lazy1-cow1 holding the eager kernel."""
    fake = checkout_with_wrong_kernel(build_kernel(EAGER), tmp_path)
    r = nexos(fake, "run", "--no-build", "--lazy", "1", "--cow", "1", "--", "echo hi")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nexos: error: boot line"), r.stderr
    assert "LAZY_ALLOC=0 COW_ALLOC=0" in lines[0] and "requested LAZY_ALLOC=1" in lines[0]
    assert "hi" not in r.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_killed_nexos_run_leaves_no_qemu(build_kernel, repo, sig):
    """Kill `nexos run` while its command runs (`cat` reads the console forever): the
    timeout wrapper and QEMU must be gone soon after, whatever the signal."""
    build_kernel(LAZY)
    env = {**os.environ, "NEXOS_REPO": str(repo)}
    p = subprocess.Popen([sys.executable, "-m", "nexos", "run", "--no-build", "--lazy", "1",
                          "--cow", "0", "--", "cat"], env=env, text=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_sigint)
    try:
        line = p.stderr.readline()  # `nexos: booted ...` once the prompt is there
        assert "booted lazy1-cow0" in line, line
        qemu_side = [pid for w in children_of(p.pid) for pid in (w, *children_of(w))]
        assert len(qemu_side) == 2, "expected the timeout wrapper and QEMU"
        time.sleep(0.5)
        p.send_signal(sig)
        code = p.wait(timeout=30)
        if sig == signal.SIGINT:
            assert code == 130
            assert "interrupted; QEMU stopped" in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(proc_alive(x) for x in qemu_side):
        time.sleep(0.1)
    assert not [x for x in qemu_side if proc_alive(x)]


# --------------------------------------------------------------------------- nexos compare

def test_compare_json_eager_vs_lazy_figures(build_kernel, repo):
    """The main demo's figures are the formulas of docs/kvcache.md computed here from the
    checkpoint's geometry: eager maps the whole reservation at sbrk, lazy maps exactly the
    pages that the prompt+gen rows span."""
    dirs = {c: build_kernel(c, llm=True) for c in (EAGER, LAZY)}
    prompt, gen = (5, 6, 7, 8), 7
    r = nexos(repo, "compare", "--no-build", "--json", "--prompt-tokens",
              ",".join(map(str, prompt)), "--gen-len", str(gen))
    assert r.returncode == 0, r.stderr + r.stdout
    recs = {x["config"]: x for x in json.loads(r.stdout)}
    assert set(recs) == {"lazy0-cow0", "lazy1-cow0"}
    shape = model_shape(dirs[LAZY])
    mx, active = max_kv_pages(shape), active_pages_est(shape, len(prompt) + gen)
    assert mx > active > 0

    eager = recs["lazy0-cow0"]
    assert eager["problem"] is None and eager["error"] is None
    assert eager["max_kv_pages"] == mx == eager["reserve_virtual_pages"]
    assert eager["reserve_mapped_pages"] == mx
    assert eager["reserve_used_pages"] >= mx  # plus page-table pages
    assert eager["decode_mapped_pages"] == 0
    assert eager["actual_mapped_pages"] == mx and eager["saved_pages"] == 0
    assert eager["verdict"] == "EAGER_STYLE"

    lazy = recs["lazy1-cow0"]
    assert lazy["problem"] is None and lazy["error"] is None
    assert lazy["max_kv_pages"] == mx
    assert lazy["reserve_mapped_pages"] == 0 and lazy["reserve_used_pages"] == 0
    assert lazy["decode_mapped_pages"] == active == lazy["active_pages_est"]
    assert lazy["decode_used_pages"] >= active
    assert lazy["saved_pages"] == mx - active
    assert lazy["saved_percent"] == 100 * (mx - active) // mx
    assert lazy["verdict"] == "LAZY_STYLE"


def test_compare_samples_adds_the_parallel_runs(build_kernel, repo):
    """`compare --samples 4`: the single request on eager and lazy (their sbrk verdicts),
    and the --samples run on the lazy kernel with COW off and on (the fork verdicts)."""
    for c in (EAGER, LAZY, COW):
        build_kernel(c, llm=True)
    r = nexos(repo, "compare", "--no-build", "--json", "--samples", "4", timeout=1800)
    assert r.returncode == 0, r.stderr + r.stdout
    recs = json.loads(r.stdout)
    single = {x["config"]: x for x in recs if x["samples"] is None}
    parallel = {x["config"]: x for x in recs if x["samples"] == 4}
    assert len(recs) == 4 and set(single) == {"lazy0-cow0", "lazy1-cow0"}
    assert set(parallel) == {"lazy1-cow0", "lazy1-cow1"}
    assert single["lazy0-cow0"]["verdict"] == "EAGER_STYLE"
    assert single["lazy1-cow0"]["verdict"] == "LAZY_STYLE"
    for x in recs:
        assert x["problem"] is None and x["error"] is None, x
    cow, copying = parallel["lazy1-cow1"]["parallel"], parallel["lazy1-cow0"]["parallel"]
    assert cow["verdict"] == "COW_STYLE" and copying["verdict"] == "EAGER_FORK_STYLE"
    for p in (cow, copying):
        assert p["branches"] == 4
        assert p["saved_pages"] == p["eager_copy_pages"] - p["actual_copied_pages"]
        assert len(p["branch_lines"]) == p["forked"] - len(p["killed"])
        assert p["forked"] == 4 or p["fork_failures"]  # a copying fork may run out of memory
        assert p["cow_copies"] == sum(b["cow_copies"] for b in p["branch_lines"])
    assert cow["forked"] == 4 and not cow["killed"]
    # COW copies what the branches write (their state, the prompt's last KV page); the
    # weights, mapped, are shared by both kernels and counted by neither
    assert 0 < cow["actual_copied_pages"] < cow["eager_copy_pages"]
    assert cow["shared_pages_at_fork"] > 0 and copying["shared_pages_at_fork"] == 0
    assert copying["cow_copies"] == 0
    assert copying["actual_copied_pages"] >= copying["eager_copy_pages"]


def test_probe_json_is_one_record(build_kernel, repo):
    build_kernel(COW, llm=True)
    r = nexos(repo, "probe", "--no-build", "--lazy", "1", "--cow", "1", "--json", "--",
              "--prompt-tokens", "4,5", "--gen-len", "2")
    assert r.returncode == 0, r.stderr + r.stdout
    rec = json.loads(r.stdout)
    assert rec["config"] == "lazy1-cow1" and rec["command"] == (
        "smolprobe --prompt-tokens 4,5 --gen-len 2")
    assert rec["verdict"] == "LAZY_STYLE" and rec["problem"] is None
    assert rec["actual_mapped_pages"] == rec["expected_active_pages_est"]


# --------------------------------------------------------------------------- nexos grade

def junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return {f"{c.get('classname')}/{c.get('name')}": c for c in root.iter("testcase")}


def test_grade_one_configuration_junit_and_points(build_kernel, repo, tmp_path):
    build_kernel(LAZY, llm=True)
    junit, js = tmp_path / "grade.xml", tmp_path / "grade.json"
    checks = "lazytests,smolprobe-verdict,smolprobe-errors"
    r = nexos(repo, "grade", "--no-build", "--configs", "lazy1-cow0", "--checks", checks,
              "--junit", str(junit), "--json", str(js))
    assert r.returncode == 0, r.stdout + r.stderr
    cases = junit_cases(junit)
    assert set(cases) == {f"lazy1-cow0/{c}" for c in checks.split(",")}
    assert not any(c.find("failure") is not None for c in cases.values())
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures")) == ("3", "0")
    data = json.loads(js.read_text())
    assert data["passed"] is True
    assert data["points"] == data["max_points"] == 15 + 10 + 5
    assert "30/30" in r.stdout


def test_grade_wrong_kernel_fails_every_check_with_evidence(build_kernel, tmp_path):
    """A kernel that does not match its configuration fails each check (the rest still
    run), the JUnit XML carries the failures, and the exit status is non-zero."""
    fake = checkout_with_wrong_kernel(build_kernel(EAGER), tmp_path)
    junit = tmp_path / "grade.xml"
    r = nexos(fake, "grade", "--no-build", "--configs", "lazy1-cow1",
              "--checks", "usertests,lazytests", "--junit", str(junit))
    assert r.returncode == 1
    cases = junit_cases(junit)
    assert set(cases) == {"lazy1-cow1/usertests", "lazy1-cow1/lazytests"}
    for c in cases.values():
        f = c.find("failure")
        assert f is not None and "does not match" in f.get("message", "")
    assert "0/35" in r.stdout


@pytest.mark.long
def test_grade_parallel_check_in_every_configuration(build_kernel, repo, tmp_path):
    """The opt-in smolprobe-parallel check passes on all four kernels."""
    for c in (BuildConfig(0, 0), BuildConfig(0, 1), BuildConfig(1, 0), BuildConfig(1, 1)):
        build_kernel(c, llm=True)
    js = tmp_path / "grade.json"
    r = nexos(repo, "grade", "--no-build", "--checks", "smolprobe-parallel", "--json", str(js),
              timeout=3600)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(js.read_text())
    assert [(c["config"], c["name"]) for c in data["checks"]] == [
        (name, "smolprobe-parallel") for name in
        ("lazy0-cow0", "lazy0-cow1", "lazy1-cow0", "lazy1-cow1")]
    assert data["passed"] is True and data["points"] == data["max_points"] == 40


# --------------------------------------------------------------------------- nexos plot

PLOTS = ("kv_pages_vs_tokens.png", "saved_vs_seq_len.png", "pages_vs_branches.png",
         "serve_concurrency.png")


@pytest.mark.long
def test_plot_defaults_write_readable_pngs(build_kernel, repo, tmp_path):
    """`nexos plot` with its default options (run in an empty folder: the default --out is
    build/plots/ there) writes the four charts; matplotlib reads them back."""
    import matplotlib.image

    for c in matrix():  # the serving chart runs smolserve on all four kernels
        build_kernel(c, llm=True)
    r = nexos(repo, "plot", "--no-build", timeout=3600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "build" / "plots"
    assert sorted(p.name for p in out.iterdir()) == sorted(PLOTS)
    for name in PLOTS:
        png = out / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 20_000
        pixels = matplotlib.image.imread(png)
        # 7 inches wide at 120 dpi; 4.5 high, or 6.5 for the serving chart's two panels
        assert pixels.shape[:2] == ((780, 840) if name == "serve_concurrency.png" else (540, 840))
        assert pixels.std() > 0.05  # lines and text, not a blank canvas
        assert f"wrote {Path('build/plots') / name}" in r.stdout


HIDDEN_OK = """#include "kernel/types.h"
#include "user/user.h"
int main(void) { printf("hidden check 1: OK\\nALL TESTS PASSED\\n"); exit(0); }
"""
HIDDEN_BAD = """#include "kernel/types.h"
#include "user/user.h"
int main(void) { printf("hidden check 2: FAILED\\nSOME TESTS FAILED\\n"); exit(1); }
"""


def test_grade_hidden_programs_via_extra_uprogs(tmp_path):
    """A course's hidden tests: single C files outside the tree, built onto the image with
    EXTRA_UPROGS and graded by their verdict line. In a copy of the checkout, so that the
    extra programs never land on the images other tests boot."""
    ok, bad = tmp_path / "hidden_ok.c", tmp_path / "hidden_bad.c"
    ok.write_text(HIDDEN_OK)
    bad.write_text(HIDDEN_BAD)
    junit = tmp_path / "grade.xml"
    tree = copy_checkout(tmp_path, share_models=True)
    r = nexos(tree, "grade", "--mem", "256", "--configs", "lazy1-cow1", "--checks", "",
              "--hidden", f"{ok}:7", "--hidden", str(bad), "--junit", str(junit),
              timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    cases = junit_cases(junit)
    assert set(cases) == {"lazy1-cow1-mem256/hidden_ok", "lazy1-cow1-mem256/hidden_bad"}
    assert cases["lazy1-cow1-mem256/hidden_ok"].find("failure") is None
    f = cases["lazy1-cow1-mem256/hidden_bad"].find("failure")
    assert f is not None and "hidden check 2: FAILED" in f.get("message", "")
    assert "7/17" in r.stdout


# --------------------------------------------------------------------------- text in, text out

def test_probe_passes_a_text_prompt_through(build_kernel, repo):
    build_kernel(LAZY, llm=True)
    r = nexos(repo, "probe", "--no-build", "--json", "--", "--prompt", "The capital of France is",
              "--gen-len", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads(r.stdout)
    assert rec["command"] == "smolprobe --prompt 'The capital of France is' --gen-len 4"
    assert rec["verdict"] == "LAZY_STYLE" and rec["reserve_mapped_pages"] == 0
    shape = model_shape(build_kernel(LAZY, llm=True))
    assert rec["expected_active_pages_est"] == rec["active_pages_est"] > 0
    assert rec["expected_max_kv_pages"] == max_kv_pages(shape)


def test_compare_a_text_prompt(build_kernel, repo):
    """`nexos compare --prompt TEXT`: both kernels encode the same text; the expected pages
    follow from the token count smolprobe printed."""
    dirs = {c: build_kernel(c, llm=True) for c in (EAGER, LAZY)}
    r = nexos(repo, "compare", "--no-build", "--json", "--prompt", "The capital of France is",
              "--gen-len", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    recs = {x["config"]: x for x in json.loads(r.stdout)}
    shape = model_shape(dirs[LAZY])
    lazy, eager = recs["lazy1-cow0"], recs["lazy0-cow0"]
    assert eager["verdict"] == "EAGER_STYLE" and lazy["verdict"] == "LAZY_STYLE"
    assert lazy["expected_active_pages_est"] == lazy["active_pages_est"]
    assert lazy["decode_mapped_pages"] == lazy["active_pages_est"] > 0
    assert eager["reserve_mapped_pages"] == max_kv_pages(shape)
    bad = nexos(repo, "compare", "--no-build", "--prompt", "Hi", "--samples", "2")
    assert bad.returncode == 2 and "--samples takes --prompt-tokens" in bad.stderr
