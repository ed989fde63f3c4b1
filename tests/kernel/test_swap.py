"""Swap: the second virtio disk and everything around it. Without QEMU: `make SWAPSIZE=`, the
boot line's `swap=`, BuildConfig.swapsize, QemuSession's private swap disk (on the fake QEMU)
and `--swap` of `nexos run`/`grade`. Booted for real, in all four configurations on the
smallest machine (MIN_MEMSIZE of RAM, four times that of swap): swaptest as the swap lab's
grade check runs it (a process uses 2x RAM and gets every word back; a cold region two
processes share goes to swap rather than a working set) and the other test programs with
swap in the machine; and the fuzzer and usertests on the debug kernel of `make
KDEBUG=pageout`, where every copy's page is paged out again right after its fault."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import nexos.course.cli as course_cli
from nexos.cli import cli
from nexos.course.grade import grade_config, select_checks, swap_check_config
from nexos.machine.build import make_command
from nexos.machine.config import BuildConfig, ConfigError, matrix
from nexos.machine.qemu import BootMismatch, QemuSession, kill_all
from nexos.parse import find_panic, parse_boot_line
from support import SMALL_MEMSIZE, SMALL_SWAPSIZE, boot_to_shell, copy_checkout, make_qemu

MATRIX = [(0, 0), (0, 1), (1, 0), (1, 1)]
IDS = [f"lazy{a}-cow{b}" for a, b in MATRIX]
# The smallest machine keeps the fills short (2x RAM is 128 MiB of writes and reads); a disk
# of 4x RAM holds the copying fork of 1.5x RAM with room (docs/testing.md, "swaptest").
MEMSIZE, SWAPSIZE = SMALL_MEMSIZE, SMALL_SWAPSIZE


# --------------------------------------------------------------------------- the boot line

@pytest.mark.parametrize("line, swap", [
    ("nexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=2 mem=128M swap=512M", 512),
    ("nexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=2 mem=128M swap=0M", 0),
    ("nexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=2 mem=128M", 0),  # a kernel from before swap
])
def test_boot_line_swap(line, swap):
    b = parse_boot_line(f"xv6 booting\n{line}\ninit: starting sh\n")
    assert (b.lazy, b.cow, b.cpus, b.mem, b.swap, b.line) == (1, 0, 2, 128, swap, line)


# --------------------------------------------------------------------------- BuildConfig

def test_swapsize_is_boot_only():
    plain, swapped = BuildConfig(1, 0, 128), BuildConfig(1, 0, 128, swapsize=512)
    assert swapped.swapsize == 512 and plain.swapsize == 0
    assert (swapped.name, swapped.make_vars()) == (plain.name, plain.make_vars())
    assert swapped.build_dir(Path("/r")) == plain.build_dir(Path("/r"))
    assert BuildConfig.parse("lazy1-cow0-mem128", swapsize=512) == swapped
    assert {c.swapsize for c in matrix(128, swapsize=64)} == {64}


@pytest.mark.parametrize("bad", [-1, 4097, 100000])
def test_swapsize_range(bad):
    with pytest.raises(ConfigError, match="SWAPSIZE must be between 0 and 4096 MiB"):
        BuildConfig(1, 1, swapsize=bad)


# --------------------------------------------------------------------------- the Makefile

def make_n(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-n", *args], cwd=repo, capture_output=True, text=True,
                          timeout=120)


def qemu_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr
    return [ln for ln in p.stdout.splitlines() if "qemu-system-riscv64" in ln][-1]


@pytest.mark.parametrize("target", ["qemu", "qemu-llm", "qemu-gdb"])
def test_make_swapsize_adds_a_sparse_second_disk(repo, target):
    p = make_n(repo, target, "LAZY_ALLOC=1", "COW_ALLOC=0", "SWAPSIZE=64")
    assert "truncate -s 64M build/lazy1-cow0/swap-64M.img" in p.stdout
    assert ("-drive file=build/lazy1-cow0/swap-64M.img,if=none,format=raw,id=x1 "
            "-device virtio-blk-device,drive=x1,bus=virtio-mmio-bus.1") in qemu_line(p)
    # SWAPSIZE=0 is the command line of a machine without swap, exactly
    none = qemu_line(make_n(repo, target, "LAZY_ALLOC=1", "COW_ALLOC=0"))
    assert qemu_line(make_n(repo, target, "LAZY_ALLOC=1", "COW_ALLOC=0", "SWAPSIZE=0")) == none
    assert "id=x1" not in none and "swap" not in none


@pytest.mark.parametrize("bad", ["x", "-1", "4097", "1.5", ""])
def test_make_swapsize_is_checked(repo, bad):
    p = make_n(repo, "qemu", f"SWAPSIZE={bad}")
    assert p.returncode != 0
    assert f"SWAPSIZE must be a number of MiB between 0 and 4096, not '{bad}'" in p.stderr


# --------------------------------------------------------------------------- QemuSession

@pytest.fixture
def swap_dir(tmp_path: Path) -> Path:
    """An empty folder for the sessions' swap disks (the fake QEMU's files are in tmp_path)."""
    d = tmp_path / "swap"
    d.mkdir()
    return d


def fake_session(fq, config: BuildConfig, swap_dir: Path | None) -> QemuSession:
    return QemuSession(fq["kernel"], fq["image"], config, qemu=fq["qemu"], boot_timeout=20,
                       lifetime=60, swap_dir=swap_dir)


def test_each_session_has_its_own_swap_disk(fake_qemu, swap_dir):
    """Two sessions at once, one thread each as grade runs them (QEMU dies with the thread
    that started it): a sparse file each, of the size asked for, on bus 1; the boot line's
    swap= is checked; close() removes it."""
    cfg = BuildConfig(1, 1, swapsize=64)
    both_up = threading.Barrier(2, timeout=60)
    seen: list[tuple[Path, int, int, str, str, int]] = []
    errors: list[BaseException] = []

    def boot() -> None:
        try:
            with fake_session(fake_qemu, cfg, swap_dir) as s:
                both_up.wait()  # both QEMUs run now, each with its disk
                f = s.swap_image
                assert f is not None and s.boot is not None
                st = f.stat()
                seen.append((f, st.st_size, st.st_blocks, " ".join(s.command_line()),
                             s.run("echo up", timeout=10).output, s.boot.swap))
                both_up.wait()
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=boot) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(seen) == 2 and seen[0][0] != seen[1][0]
    for f, size, blocks, cmd, echoed, swap in seen:
        assert f.parent.parent == swap_dir and f.name == "swap-64M.img"
        assert (size, blocks) == (64 << 20, 0)  # sparse
        assert (f"-drive file={f},if=none,format=raw,id=x1 "
                "-device virtio-blk-device,drive=x1,bus=virtio-mmio-bus.1") in cmd
        assert (echoed, swap) == ("up\n", 64)
    assert list(swap_dir.iterdir()) == []


def test_no_swap_no_disk(fake_qemu, swap_dir):
    with fake_session(fake_qemu, BuildConfig(1, 1), swap_dir) as s:
        assert s.swap_image is None and "id=x1" not in " ".join(s.command_line())
        assert s.boot is not None and s.boot.swap == 0
    assert list(swap_dir.iterdir()) == []


def test_reboot_gets_a_fresh_swap_disk(fake_qemu, swap_dir):
    with fake_session(fake_qemu, BuildConfig(1, 1, swapsize=8), swap_dir) as s:
        first = s.swap_image
        assert first is not None
        first.write_bytes(b"x" * 4096)  # as if the guest had paged something out
        s.reboot()
        assert s.swap_image is not None and s.swap_image != first and not first.exists()
        assert s.swap_image.stat().st_size == 8 << 20 and s.boot.swap == 8
    assert list(swap_dir.iterdir()) == []


def test_default_swap_folder_is_the_temp_dir(fake_qemu, swap_dir, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(swap_dir))
    with fake_session(fake_qemu, BuildConfig(1, 1, swapsize=4), None) as s:
        assert s.swap_image is not None and s.swap_image.parent.parent == swap_dir
    assert list(swap_dir.iterdir()) == []


def test_for_config_puts_the_swap_disk_under_build(fake_qemu):
    repo = fake_qemu["repo"]
    s = QemuSession.for_config(BuildConfig(1, 1, swapsize=4), repo, qemu=fake_qemu["qemu"],
                               boot_timeout=20, lifetime=60)
    with s:
        assert s.swap_image is not None and s.swap_image.parent.parent == repo / "build"
        assert s.swap_image.parent.name.startswith("nexos-swap-")  # what make clean removes
    assert not list((repo / "build").glob("nexos-swap-*"))


def test_a_kernel_without_swap_is_a_mismatch(fake_qemu, swap_dir, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_NO_SWAP", "1")
    s = fake_session(fake_qemu, BuildConfig(1, 1, swapsize=64), swap_dir)
    with pytest.raises(BootMismatch) as e:
        s.start()
    assert "swap=64M (this kernel prints no swap=: it has no swap support)" in str(e.value)
    assert s.pid is None and list(swap_dir.iterdir()) == []


def test_swap_size_mismatch(fake_qemu):
    """A kernel that found another size of swap than the session asked for is refused."""
    s = fake_session(fake_qemu, BuildConfig(1, 1, swapsize=32), None)
    boot = parse_boot_line("nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem=512M swap=64M")
    with pytest.raises(BootMismatch, match="does not match .* swap=32M$"):
        s._check_boot(boot)


def test_kill_all_removes_swap_disks(fake_qemu, swap_dir):
    s = fake_session(fake_qemu, BuildConfig(1, 1, swapsize=4), swap_dir).start()
    try:
        kill_all()  # what a signal or atexit does before the process ends
        assert list(swap_dir.iterdir()) == []
    finally:
        s.close()


# --------------------------------------------------------------------------- the CLI

@pytest.fixture
def graded(repo, monkeypatch):
    """graded(*args) -> the configurations `nexos grade --no-build ARGS` would grade."""
    seen: list[list[BuildConfig]] = []

    def record(repo, plan, *args, **kwargs):
        seen.append([cfg for cfg, _ in plan])
        return []
    monkeypatch.setattr(course_cli, "grade_all", record)
    monkeypatch.setenv("NEXOS_REPO", str(repo))

    def grade(*args: str) -> list[BuildConfig]:
        r = CliRunner().invoke(cli, ["grade", "--no-build", *args])
        assert r.exit_code == 0, r.output
        return seen.pop()
    return grade


def test_grade_swap_reaches_every_boot(graded):
    assert [c.swapsize for c in graded()] == [0, 0, 0, 0]
    assert [c.swapsize for c in graded("--swap", "512", "--mem", "128")] == [512] * 4
    cfgs = graded("--swap", "64", "--lab", "lazy", "--configs", "lazy1-cow0")
    assert [(c.name, c.swapsize) for c in cfgs] == [("lazy1-cow0", 64)]


@pytest.mark.parametrize("cmd", ["run", "grade"])
def test_swap_option_help_and_range(repo, monkeypatch, cmd):
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    r = CliRunner().invoke(cli, [cmd, "--help"])
    assert r.exit_code == 0 and "--swap MiB" in r.output
    extra = ["--", "echo"] if cmd == "run" else []
    r = CliRunner().invoke(cli, [cmd, "--no-build", "--swap", "4097", *extra])
    assert r.exit_code == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("nexos: error: ") and "--swap" in lines[0]


def test_run_swap_on_the_fake_console(fake_qemu, monkeypatch):
    monkeypatch.setenv("NEXOS_QEMU", fake_qemu["qemu"])
    monkeypatch.setenv("NEXOS_REPO", str(fake_qemu["repo"]))
    r = CliRunner().invoke(cli, ["run", "--no-build", "--swap", "16", "--", "echo hi"])
    assert r.exit_code == 0, r.output
    assert "mem=512M swap=16M" in r.stderr and "hi" in r.stdout
    assert not list((fake_qemu["repo"] / "build").glob("nexos-swap-*"))


# --------------------------------------------------------------------------- the real kernel

def swap_config(lazy: int, cow: int, build_kernel) -> BuildConfig:
    """The configuration at MEMSIZE with SWAPSIZE of swap, its kernel built (the build is
    the one without swap: the kernel finds the disk at boot)."""
    build_kernel(BuildConfig(lazy, cow, memsize=MEMSIZE))
    return BuildConfig(lazy, cow, memsize=MEMSIZE, swapsize=SWAPSIZE)


@pytest.mark.parametrize("swapsize", [SWAPSIZE, 0])
def test_boot_line_says_the_swap(build_kernel, repo, swapsize):
    build_kernel(BuildConfig(1, 1, memsize=MEMSIZE))
    cfg = BuildConfig(1, 1, memsize=MEMSIZE, swapsize=swapsize)
    with QemuSession.for_config(cfg, repo, lifetime=300) as s:
        assert s.boot is not None
        assert s.boot.line == f"nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem={MEMSIZE}M " \
                              f"swap={swapsize}M"
        out = s.run("swaptest" if swapsize == 0 else "swaptest -q nosuch", timeout=60).output
    if swapsize == 0:  # nothing to test, said in one line, and no verdict to count
        assert out.strip().splitlines() == [
            "swaptest: no swap (swap_slots=0): nothing to test; boot with a swap disk "
            "(make qemu SWAPSIZE=MiB, nexos run --swap MiB)"]
    else:
        assert out.strip().splitlines() == [
            "swaptest: no test named nosuch (pattern, bigsbrk, fork, exit, sharedcold, "
            "sharedfile, full)",
            "SOME TESTS FAILED"]


@pytest.mark.qemu  # make qemu boots the kernel (no kernel fixture says so)
def test_make_qemu_with_swapsize_boots_with_swap(tmp_path):
    """In a copy of the checkout (`make qemu` boots fs.img read-write, and QEMU's image lock
    would stop other tests' boots of a shared one): the kernel finds the disk make made."""
    tree = copy_checkout(tmp_path, share_models=True)
    with make_qemu(["qemu", "LAZY_ALLOC=1", "COW_ALLOC=1", f"MEMSIZE={MEMSIZE}", "SWAPSIZE=64",
                    f"PYTHON={sys.executable}"], tree, timeout=600) as child:
        boot_to_shell(child, f"nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem={MEMSIZE}M swap=64M")
        child.sendline("echo swapped")
        child.expect(r"swapped\r\n\$ ")
    img = tree / "build" / "lazy1-cow1" / "swap-64M.img"
    assert img.stat().st_size == 64 << 20


HEADER_RE = re.compile(r"^swaptest: total_pages=(\d+) swap_slots=(\d+) swap_slots_used=(\d+) "
                       r"lazy_alloc=(\d) cow_alloc=(\d)$", re.M)
TEST_RE = re.compile(r"^test (\w+): OK (.*)$", re.M)


def ok_lines(out: str) -> dict[str, dict[str, str]]:
    """{test: {key: value}} from swaptest's OK lines (`a=1 b=2->3`)."""
    return {m[1]: dict(kv.split("=", 1) for kv in m[2].split()) for m in TEST_RE.finditer(out)}


def moved(v: str) -> tuple[int, int]:
    a, _, b = v.partition("->")
    return int(a), int(b)


def check_sharedcold(kv: dict[str, str], cow: int) -> None:
    """sharedcold's numbers at MEMSIZE: a 90/128-of-RAM region the parent and its sleeping
    child share, a 40/128 working set walked six times. With COW_ALLOC=1 reclaim must have
    written shared pages (each once for both PTEs); in every configuration the last walk
    read (next to) nothing back. The walks' times are printed, never judged here
    (bench/swap_shared.py reads them)."""
    pages, ws = int(kv["pages"]), int(kv["ws_pages"])
    assert (pages, ws) == (MEMSIZE * 256 * 90 // 128, MEMSIZE * 256 * 40 // 128), kv
    assert kv["bad_words"] == "0" and len(kv["walk_ms"].split(",")) == 6, kv
    assert (int(kv["shared_outs"]) > 0) == bool(cow), kv
    assert int(kv["shared_outs"]) <= int(kv["swap_outs"]), kv
    assert int(kv["last_walk_ins"]) <= ws // 8, kv


def check_sharedfile(kv: dict[str, str], ram: int) -> None:
    """sharedfile's numbers: a 512-page file a parent and its sleeping child map, under a
    heap of 1.5x RAM: reclaim dropped none of its pages while both mapped it (the child saw
    every page still mapped, or the test fails), and dropped them once the parent's mapping
    was the only one; every byte read back right."""
    assert int(kv["file_pages"]) == 512 and int(kv["heap_pages"]) == 3 * ram // 2, kv
    assert int(kv["dropped_shared"]) == 0, kv
    assert 0 < int(kv["dropped_alone"]) <= 512 and kv["bad_bytes"] == "0", kv


def balanced(name: str, kv: dict[str, str]) -> None:
    """Every frame and slot back: a frame more free is a slot more used (a sleeping
    process's page that reclaim moved to swap), nothing else."""
    (f0, f1), (s0, s1) = moved(kv["free_pages"]), moved(kv["swap_slots_used"])
    assert f1 - f0 == s1 - s0, f"{name}: {kv}"


@pytest.mark.long
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=IDS)
def test_swaptest(build_kernel, repo, tmp_path, lazy, cow):
    """swaptest as the swap lab's grade runs it (its swaptest check, on the machine
    swap_check_config picks: MEMSIZE of RAM and SWAPSIZE of swap) passes with full points in
    this checkout, the lab's solution; its numbers, read from the check's transcript, are
    the properties below."""
    cfg = BuildConfig(lazy, cow, memsize=MEMSIZE)
    build_kernel(cfg)
    machine = swap_check_config(cfg)
    assert machine == BuildConfig(lazy, cow, memsize=MEMSIZE, swapsize=SWAPSIZE)
    (r,) = grade_config(repo, cfg, select_checks(["swaptest"]), transcript_dir=tmp_path)
    out = (tmp_path / f"{machine.name}-swap{SWAPSIZE}.log").read_text()
    assert find_panic(out) is None, out[-3000:]
    assert r.passed and r.points == r.max_points == 15, r
    head = HEADER_RE.search(out)
    assert head, out
    ram, slots = int(head[1]), int(head[2])
    assert (int(head[4]), int(head[5])) == (lazy, cow)
    assert slots == SWAPSIZE * 256  # one 4 KiB slot per page of the disk
    t = ok_lines(out)
    assert set(t) == {"pattern", "bigsbrk", "fork", "exit", "sharedcold", "sharedfile",
                      "full"}, out
    p = t["pattern"]
    assert (int(p["pages"]), int(p["ram_pages"])) == (2 * ram, ram)
    assert int(p["words"]) == 2 * ram * 512 and p["bad_words"] == "0"
    assert int(p["swap_outs"]) >= ram - ram // 8  # at least what never fit in RAM
    assert int(p["swap_ins"]) > 0 and int(p["swapped"]) > 0
    b = t["bigsbrk"]  # one sbrk of 1.5x RAM (LAZY_ALLOC=0 maps it all in that call)
    assert int(b["pages"]) == 3 * ram // 2 and b["bad_words"] == "0"
    assert int(b["swap_outs"]) > 0
    f = t["fork"]
    assert int(f["pages"]) == 3 * ram // 2 and f["bad_words"] == "0" and int(f["swap_outs"]) > 0
    assert int(t["exit"]["pages"]) == 2 * ram and int(t["exit"]["swap_outs"]) > 0
    assert int(t["full"]["status"]) == (-1 if lazy else 8)
    check_sharedcold(t["sharedcold"], cow)
    check_sharedfile(t["sharedfile"], ram)
    for name, kv in t.items():
        balanced(name, kv)
    assert "test leakcheck: OK" in out


SWAP_PROGRAMS = (("usertests -q", 900), ("lazytests", 900), ("cowtests", 900),
                 ("stress -n 300 -t 60 -s 7", 600))


@pytest.mark.long
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=IDS)
def test_programs_pass_with_swap(build_kernel, repo, lazy, cow):
    """The other test programs in a machine that has swap: what they size from free memory
    (the out-of-memory tests) must still run out, and nothing may leak."""
    cfg = swap_config(lazy, cow, build_kernel)
    failures = []
    with QemuSession.for_config(cfg, repo, lifetime=4000) as s:
        for cmd, limit in SWAP_PROGRAMS:
            out = s.run(cmd, timeout=limit).output
            assert find_panic(out) is None, f"{cmd}: kernel panic\n{out[-3000:]}"
            lines = [ln for ln in out.strip().splitlines() if ln.strip()]
            if not lines or lines[-1] != "ALL TESTS PASSED":
                failures.append(f"{cmd}:\n{out[-2000:]}")
    assert not failures, "\n\n".join(failures)


# --------------------------------------------------------------------------- a race, every time

@pytest.mark.long
@pytest.mark.qemu  # it builds its debug kernel itself (no kernel fixture says so)
@pytest.mark.parametrize("lazy,cow", [(1, 0), (0, 1)], ids=["lazy1-cow0", "lazy0-cow1"])
def test_copies_survive_a_pageout_after_their_fault(repo, lazy, cow):
    """A copy to or from user memory faults its page in; if the process is preempted before
    the copy, reclaim on another hart may page it out again (the fuzzer met it once in
    213 013 calls: memstat into a lazy heap page returned -1). The debug kernel of
    `make KDEBUG=pageout` pages out every page a copy has just faulted in, so each copy
    meets that race: the fuzzer and usertests must still pass, nothing leaked. A kernel
    whose copy does not fault the page in again fails the fuzzer at once here."""
    cfg = BuildConfig(lazy, cow, memsize=MEMSIZE, cpus=2, swapsize=64)
    build = subprocess.run([*make_command(repo, cfg, extra=("KDEBUG=pageout",))],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    d = repo / "build" / f"{cfg.folder}-kdebug-pageout"
    with QemuSession(d / "kernel", d / "fs.img", cfg, swap_dir=repo / "build",
                     lifetime=600) as s:
        fuzz = s.run("fuzz --seed 1 --procs 2 --seconds 3", timeout=120).output
        evicted = re.search(r"fuzz: done .* swap_outs=(\d+) swap_ins=(\d+)", fuzz)
        assert evicted and int(evicted[1]) > 0, f"no page was paged out:\n{fuzz[-2000:]}"
        for cmd, out in (("fuzz", fuzz), ("usertests", s.run("usertests", timeout=300).output)):
            assert find_panic(out) is None, f"{cmd}: kernel panic\n{out[-3000:]}"
            assert out.strip().splitlines()[-1] == "ALL TESTS PASSED", f"{cmd}:\n{out[-3000:]}"
