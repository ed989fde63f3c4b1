"""Build configurations: which flags a kernel was built with and where it lives."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nexos.machine.limits import DEFAULT_MEMSIZE, MAX_CPUS, MAX_MEMSIZE, MAX_SWAPSIZE, MIN_MEMSIZE

DEFAULT_CPUS = 1
LLM_CPUS = 2  # harts the model's programs boot with where the host has the cores (make qemu-llm)


def host_cores() -> int:
    """The host's cores this process may run on, as `nproc` counts them (the Makefile's
    qemu-llm asks nproc): its CPU affinity, which taskset, a cgroup's cpuset or a batch
    scheduler may narrow below the machine's count. How many QEMUs run side by side by
    default (nexos grade --jobs) and how many harts a model's boot gets (llm_cpus)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):   # no affinity on this platform
        return os.cpu_count() or 1


def llm_cpus() -> int:
    """Harts for a boot that runs the model (nexos chat, nexos probe): LLM_CPUS where the
    host has that many cores, else 1 (smolprobe splits its matvecs across them, docs/harts.md;
    a guest hart without a host core only waits)."""
    return min(LLM_CPUS, host_cores())


DEFAULT_SWAPSIZE = 0  # MiB; no swap disk


class ConfigError(ValueError):
    """A configuration that cannot be built or booted (a user mistake)."""


@dataclass(frozen=True)
class BuildConfig:
    """One point of the flag matrix. `memsize`, `cpus` and `swapsize` only matter at boot (-m,
    -smp, the size in MiB of the swap disk; 0: none), not for the build: the kernel finds its
    RAM, harts and swap disk at boot, so every boot of one flag pair uses one build folder."""

    lazy: int
    cow: int
    memsize: int = DEFAULT_MEMSIZE
    cpus: int = DEFAULT_CPUS
    swapsize: int = DEFAULT_SWAPSIZE

    def __post_init__(self) -> None:
        if self.lazy not in (0, 1):
            raise ConfigError(f"LAZY_ALLOC must be 0 or 1, got {self.lazy!r}")
        if self.cow not in (0, 1):
            raise ConfigError(f"COW_ALLOC must be 0 or 1, got {self.cow!r}")
        if not MIN_MEMSIZE <= self.memsize <= MAX_MEMSIZE:
            raise ConfigError(f"MEMSIZE must be between {MIN_MEMSIZE} and {MAX_MEMSIZE} MiB, "
                              f"got {self.memsize!r}")
        if not 1 <= self.cpus <= MAX_CPUS:
            raise ConfigError(f"CPUS must be between 1 and {MAX_CPUS}, got {self.cpus!r}")
        if not 0 <= self.swapsize <= MAX_SWAPSIZE:
            raise ConfigError(f"SWAPSIZE must be between 0 and {MAX_SWAPSIZE} MiB, "
                              f"got {self.swapsize!r}")

    @property
    def folder(self) -> str:
        """The build folder's name under build/: lazy<L>-cow<C>, whatever the boot's sizes."""
        return f"lazy{self.lazy}-cow{self.cow}"

    @property
    def name(self) -> str:
        """The boot's name in tables, logs and --configs: the folder's, plus -mem<MiB> off
        the default RAM size."""
        if self.memsize != DEFAULT_MEMSIZE:
            return f"{self.folder}-mem{self.memsize}"
        return self.folder

    @property
    def label(self) -> str:
        """Short human label: eager/lazy x copy/cow."""
        return f"{'lazy' if self.lazy else 'eager'}+{'cow' if self.cow else 'copy'}"

    def make_vars(self) -> list[str]:
        """The variable assignments that select this configuration's build folder (MEMSIZE,
        CPUS and SWAPSIZE go to the boot alone: machine/qemu.py)."""
        return [f"LAZY_ALLOC={self.lazy}", f"COW_ALLOC={self.cow}"]

    def build_dir(self, repo: Path) -> Path:
        """Where make puts this configuration's kernel and images."""
        return repo / "build" / self.folder

    @classmethod
    def parse(cls, text: str, memsize: int = DEFAULT_MEMSIZE, cpus: int = DEFAULT_CPUS,
              swapsize: int = DEFAULT_SWAPSIZE) -> BuildConfig:
        """Parse `lazy1-cow0`, `lazy1-cow0-mem256` or `1,0` / `10` shorthands."""
        t = text.strip().lower()
        mem = memsize
        if "-mem" in t:
            t, _, m = t.partition("-mem")
            if not m.isdigit():
                raise ConfigError(f"bad configuration {text!r}")
            mem = int(m)
        if t.startswith("lazy") and "-cow" in t:
            lz, _, cw = t[4:].partition("-cow")
        elif "," in t:
            lz, _, cw = t.partition(",")
        elif len(t) == 2:
            lz, cw = t[0], t[1]
        else:
            raise ConfigError(
                f"bad configuration {text!r} (expected e.g. lazy1-cow0, 1,0 or 10)")
        if not (lz.strip().isdigit() and cw.strip().isdigit()):
            raise ConfigError(f"bad configuration {text!r}")
        return cls(int(lz), int(cw), mem, cpus, swapsize)


ALL_CONFIGS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (1, 0), (1, 1))


def matrix(memsize: int = DEFAULT_MEMSIZE, cpus: int = DEFAULT_CPUS,
           swapsize: int = DEFAULT_SWAPSIZE) -> list[BuildConfig]:
    """All four flag combinations."""
    return [BuildConfig(lz, cw, memsize, cpus, swapsize) for lz, cw in ALL_CONFIGS]


def find_repo(start: Path | None = None) -> Path:
    """The NexOS checkout: $NEXOS_REPO, else the nearest parent with a Makefile and kernel/."""
    env = os.environ.get("NEXOS_REPO")
    if env:
        p = Path(env).resolve()
        if not (p / "kernel").is_dir():
            raise ConfigError(f"NEXOS_REPO={env} is not a NexOS checkout (no kernel/ folder)")
        return p
    candidates = [start or Path.cwd(), Path(__file__).resolve().parent]
    for c in candidates:
        for d in [c.resolve(), *c.resolve().parents]:
            if (d / "kernel").is_dir() and (d / "user").is_dir():
                return d
    raise ConfigError("cannot find the NexOS checkout (run inside it or set NEXOS_REPO)")
