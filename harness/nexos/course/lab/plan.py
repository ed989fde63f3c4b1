"""Which grade checks grade a lab, in which configurations (docs/lab.md).

A check is a *lab check* of a configuration when its outcome there depends on the lab's
mechanism: a starter tree fails it, the solution passes it. For lazy and cow that is the case
only in kernels built with the lab's flag on; with the flag off the stub is never reached (or
behaves as the eager policy does), so every check there is a *non-lab check*, which a starter
tree passes too. mmap and swap have no flag: every configuration maps files and, booted with a
swap disk, pages out, so each has its lab check in all four. Grading a submission runs both:
the lab checks score the mechanism, the non-lab checks catch a submission that broke the rest
of the kernel.
"""

from __future__ import annotations

from nexos.course.grade import CHECK_NAMES, DEFAULT_CHECK_NAMES
from nexos.course.lab.markers import LABS
from nexos.machine.config import DEFAULT_MEMSIZE, BuildConfig, matrix

LAB_CHOICES: dict[str, tuple[str, ...]] = {"lazy": ("lazy",), "cow": ("cow",),
                                            "mmap": ("mmap",), "swap": ("swap",),
                                            "all": LABS}

# The checks that exercise a lab's mechanism in a kernel with its flag on, and why:
#   lazy  lazytests          exact lazy page and fault counts (docs/testing.md)
#         smolprobe-verdict  LAZY_STYLE: the KV reservation maps nothing
#   cow   cowtests           exact share/copy/reuse counts (docs/testing.md)
#         smolprobe-parallel the branches of --samples 4 copy fewer pages than an eager fork
#   mmap  mmaptests          the stubbed mmap returns -1, so every one of its tests fails
#   swap  swaptest           it boots with a swap disk (grade.py's check_swapsize); with no
#                            free slot reclaim pages nothing out, so no test gets more than RAM
# Everything else (usertests -q, smolprobe-numbers and -errors, cowtests under the lazy
# lab, ...) passes on an eager kernel as well, so it cannot tell a starter tree from the
# solution.
MECHANISM: dict[str, tuple[str, ...]] = {
    "lazy": ("lazytests", "smolprobe-verdict"),
    "cow": ("cowtests", "smolprobe-parallel"),
    "mmap": ("mmaptests",),
    "swap": ("swaptest",),
}

# The checks every plan runs, in grade.py's order. The opt-in checks of a plain `nexos grade`
# join a plan only as lab checks: smolprobe-parallel where COW is on (cow lab), mmaptests and
# swaptest in every configuration (mmap lab, swap lab). mmaptests is no non-lab check of the
# lazy and cow labs: their stubs take away parts mmap uses (cowfault() copies MAP_PRIVATE file
# pages in every configuration, userpte() faults untouched file pages in for copyin/copyout),
# so those starter trees fail it. swaptest is none either: it wants the lazy policy's counts
# with LAZY_ALLOC=1 (a lazy starter fails it) and sizes its fork for a COW fork. The default
# checks boot without a swap disk, where reclaim does nothing: the swap lab's stubs are never
# reached there, so its starter passes them.
BASE_CHECKS: tuple[str, ...] = DEFAULT_CHECK_NAMES

Plan = list[tuple[BuildConfig, list[str]]]


class LabError(ValueError):
    """An unknown lab name."""


def labs_of(lab: str) -> tuple[str, ...]:
    """The labs that `lab` (lazy, cow, mmap, swap or all) stands for."""
    if lab not in LAB_CHOICES:
        raise LabError(f"unknown lab {lab!r} (choose from {', '.join(LAB_CHOICES)})")
    return LAB_CHOICES[lab]


def flag_on(one_lab: str, cfg: BuildConfig) -> bool:
    """Whether cfg has the mechanism of one lab: LAZY_ALLOC for lazy, COW_ALLOC for cow;
    mmap is in every configuration (LAZY_ALLOC only picks when a file page is mapped), and
    so is swap (its check brings the disk)."""
    if one_lab == "lazy":
        return bool(cfg.lazy)
    if one_lab == "cow":
        return bool(cfg.cow)
    return True


def _ordered(names: set[str]) -> list[str]:
    return [n for n in CHECK_NAMES if n in names]


def lab_checks(lab: str, cfg: BuildConfig) -> list[str]:
    """The lab checks of cfg: they fail in a starter tree and pass with the solution."""
    return _ordered({c for x in labs_of(lab) if flag_on(x, cfg) for c in MECHANISM[x]})


def nonlab_checks(lab: str, cfg: BuildConfig) -> list[str]:
    """The non-lab checks of cfg: a starter tree passes them (so must a submission)."""
    mine = set(lab_checks(lab, cfg))
    return [c for c in BASE_CHECKS if c not in mine]


def lab_plan(lab: str, memsize: int = DEFAULT_MEMSIZE) -> Plan:
    """Grading `lab`: every configuration with all the checks it runs (lab and non-lab), in
    grade order. This is what `nexos grade --lab LAB` runs."""
    return [(cfg, _ordered(set(lab_checks(lab, cfg)) | set(nonlab_checks(lab, cfg))))
            for cfg in matrix(memsize)]


def mechanism_plan(lab: str, memsize: int = DEFAULT_MEMSIZE) -> Plan:
    """Only the lab checks, for the configurations that have any."""
    plan = [(cfg, lab_checks(lab, cfg)) for cfg in matrix(memsize)]
    return [(cfg, names) for cfg, names in plan if names]


def nonlab_plan(lab: str, memsize: int = DEFAULT_MEMSIZE) -> Plan:
    """Only the non-lab checks: what a starter tree of `lab` passes in each configuration."""
    return [(cfg, nonlab_checks(lab, cfg)) for cfg in matrix(memsize)]

