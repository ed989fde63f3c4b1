"""Regenerate tests/transcripts/*.txt: what smolprobe really prints, in every run mode.

    .venv/bin/python scripts/transcripts.py [--host] [--guest] [--out DIR] [--only NAME]

--host (the default when neither is given) builds user/smolprobe/ unchanged for Linux
(tests/host) and runs every mode of docs/smolprobe.md ("Output") on synthetic checkpoints
it makes deterministically (`nexos model synth`). --guest boots each kernel configuration in
QEMU (QemuSession; each configuration is built first, `make ... llm` with the real model
as /model.bin, the default, under the build lock the tests use) and runs smolprobe at the
NexOS shell. Each file starts with one `# ` header line saying how it was made; see
tests/transcripts/README.md.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))

from nexos.machine.build import build_one, default_model  # noqa: E402
from nexos.machine.config import BuildConfig  # noqa: E402
from nexos.machine.elf import ElfImage, read_elf  # noqa: E402
from nexos.machine.qemu import QemuSession  # noqa: E402
from nexos.model.gguf_import import import_gguf  # noqa: E402
from nexos.model.synth import synthesize  # noqa: E402
from nexos.model.tokenizer import SMOLLM2_GGUF, find_smollm2_gguf, tokenizer_blob  # noqa: E402

TRANSCRIPTS = REPO / "tests" / "transcripts"
SEED = "--prompt-tokens 1,2,3 --gen-len 10"
HEADER = "# scripts/transcripts.py"
TOKENIZE_TEXT = "Hello, world! café"   # --tokenize: ASCII and a UTF-8 accent
# the --perplexity text: the opening of the Gettysburg Address, as in tests/llm/test_perplexity.py
GETTYSBURG = ("Four score and seven years ago our fathers brought forth on this continent, "
              "a new nation, conceived in Liberty, and dedicated to the proposition that all "
              "men are created equal. Now we are engaged in a great civil war, testing "
              "whether that nation, or any nation so conceived and so dedicated, can long "
              "endure.")


@dataclass(frozen=True)
class Model:
    """A synthetic checkpoint (`nexos model synth --preset P --seed S --weight-type W`), or
    with `gguf` the real SmolLM2-135M-Instruct imported from its GGUF, tokenizer included
    (`nexos model import --gguf`; same geometry as the smollm-135m preset)."""

    name: str
    preset: str
    seed: int = 0
    weight_type: str = "int8"
    gguf: bool = False

    def describe(self) -> str:
        if self.gguf:
            return f"nexos model import --gguf {SMOLLM2_GGUF} (--preset {self.preset} geometry)"
        return (f"nexos model synth --preset {self.preset} --seed {self.seed} "
                f"--weight-type {self.weight_type}")

    def make(self, path: Path) -> bool:
        """Write the checkpoint to path (unless it is there); False without the GGUF."""
        if path.is_file():
            return True
        if not self.gguf:
            synthesize(path, preset=self.preset, seed=self.seed, weight_type=self.weight_type)
            return True
        gguf = find_smollm2_gguf()
        if gguf is None:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        import_gguf(gguf, path, tokenizer=tokenizer_blob(gguf))
        return True


SMALL = Model("small", "small")
SMOLLM = Model("smollm-135m", "smollm-135m")
SMOLLM2 = Model("smollm2", "smollm-135m", gguf=True)
# the guest's real model: the Makefile's DEFAULT_MODEL (also what bench/smolprobe_real.py uses)
SMOLLM2_GUEST = default_model(REPO)


@dataclass(frozen=True)
class HostCase:
    """One host run: `smolprobe --model <model>.bin <args>`, stdout and stderr together."""

    name: str
    model: Model
    args: str


@dataclass(frozen=True)
class GuestCase:
    """One guest run: a fresh boot of `config`, then `smolprobe <args>` at the shell."""

    name: str
    config: BuildConfig
    args: str
    timeout: float = 900.0
    model: Model = SMOLLM2  # the image's /model.bin: the Makefile's default, the real model


@dataclass(frozen=True)
class ConsoleCase:
    """One boot of `config` (plain fs.img): the boot text up to the first prompt goes to
    console-boot-<config>.txt, each command's output to console-<name>-<config>.txt."""

    config: BuildConfig
    commands: tuple[tuple[str, str], ...]  # (name, shell command)
    timeout: float = 900.0


HOST_CASES = (
    HostCase("host-single", SMALL, SEED),
    HostCase("host-single-smollm", SMOLLM, SEED),
    HostCase("host-trace", SMALL, SEED + " --trace"),
    HostCase("host-print", SMALL, SEED + " --print-tokens --print-logits"),
    HostCase("host-bench", SMALL, "--bench"),
    HostCase("host-single-bench", SMALL, SEED + " --bench"),
    HostCase("host-samples3", SMALL, SEED + " --samples 3"),
    HostCase("host-samples3-killed", SMALL, SEED + " --samples 3 --test-kill-branch 1"),
    HostCase("host-error-no-branch", SMALL, SEED + " --samples 1 --test-kill-branch 0"),
    HostCase("host-error-seq-len", SMALL, "--prompt-tokens 1,2,3 --gen-len 1000"),
    HostCase("host-error-flag", SMALL, SEED + " --no-such-flag"),
    HostCase("host-error-no-tokenizer", SMALL, '--prompt "The capital of France is"'),
    HostCase("host-prompt-smollm2", SMOLLM2,
             '--prompt "The capital of France is" --gen-len 12 --print-tokens'),
    HostCase("host-chat-smollm2", SMOLLM2, '--chat "What is the capital of France?"'),
    HostCase("host-perplexity-smollm2", SMOLLM2, f'--perplexity "{GETTYSBURG}"'),
    HostCase("host-tokenize-smollm2", SMOLLM2, f'--tokenize --prompt "{TOKENIZE_TEXT}"'),
)
REAL_MEM = BuildConfig(1, 0, memsize=768)  # the real model's guest: room for 98 MB

GUEST_CASES = (
    GuestCase("guest-seed-lazy1-cow0", BuildConfig(1, 0), SEED),
    GuestCase("guest-seed-lazy0-cow0", BuildConfig(0, 0), SEED),
    GuestCase("guest-samples4-lazy1-cow1", BuildConfig(1, 1), SEED + " --samples 4"),
    GuestCase("guest-samples4-lazy1-cow0", BuildConfig(1, 0), SEED + " --samples 4"),
    # eager sbrk and fork, 2048 slots (90 MiB of KV a copy): the fourth fork fails in 512 MiB
    GuestCase("guest-samples6-oom-lazy0-cow0", BuildConfig(0, 0),
              SEED + " --seq-len 2048 --samples 6"),
    GuestCase("guest-samples6-lazy1-cow0", BuildConfig(1, 0), SEED + " --samples 6"),
    # the guest's smolprobe has no test hooks: they are in the host test build only
    GuestCase("guest-error-test-hook-lazy1-cow1", BuildConfig(1, 1),
              SEED + " --samples 2 --test-kill-branch 0"),
    GuestCase("guest-error-lazy1-cow1", BuildConfig(1, 1),
              "--prompt-tokens 1,2,3 --gen-len 1000000"),
    GuestCase("guest-chat-lazy1-cow0-mem768", REAL_MEM,
              '--chat "What is the capital of France?"', model=SMOLLM2),
    GuestCase("guest-prompt-lazy1-cow0-mem768", REAL_MEM,
              '--prompt "The capital of France is" --gen-len 12 --print-tokens',
              model=SMOLLM2),
    GuestCase("guest-perplexity-lazy1-cow0-mem768", REAL_MEM, f'--perplexity "{GETTYSBURG}"',
              model=SMOLLM2),
    # the mapped model: the lazy kernel reads the tokenizer's pages, the eager one all of them
    GuestCase("guest-tokenize-lazy1-cow0", BuildConfig(1, 0),
              f'--tokenize --prompt "{TOKENIZE_TEXT}"'),
    GuestCase("guest-tokenize-lazy0-cow0", BuildConfig(0, 0),
              f'--tokenize --prompt "{TOKENIZE_TEXT}"'),
)


CONSOLE_CASES = (
    ConsoleCase(BuildConfig(1, 1), (("lazytests", "lazytests"), ("cowtests", "cowtests"),
                                    ("no-such-program", "nosuchprogram"))),
)


def host_header(case: HostCase, status: int) -> str:
    return (f"{HEADER} --host | tests/host build of user/smolprobe/ | exit={status} | "
            f"model {case.model.name}.bin: {case.model.describe()} | "
            f"$ smolprobe --model {case.model.name}.bin {case.args}")


def guest_header(case: GuestCase, program: ElfImage) -> str:
    """The header of a guest transcript. It names the image pages of the smolprobe binary
    that ran (`user/_smolprobe: N image pages (text T, data D)`, nexos.machine.elf): the figures
    that count the program's own pages are checked against the binary's size, so that a
    rerun with a bigger or smaller binary can still be compared (tests/transcripts/README.md)."""
    image = "fs-llm.img" if case.model.gguf else "fs-llm-synth.img"
    return (f"{HEADER} --guest | QEMU {case.config.name} {image} | "
            f"model /model.bin: {case.model.describe()} | "
            f"user/_smolprobe: {program.describe()} | $ smolprobe {case.args}")


def console_header(config: BuildConfig, what: str) -> str:
    return f"{HEADER} --guest | QEMU {config.name} fs.img | {what}"


def build_host(out: Path) -> Path:
    """make -C tests/host OUT=out; the smolprobe binary."""
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "host"), f"OUT={out}"],
                   check=True, stdout=subprocess.DEVNULL)
    return out / "smolprobe"


def run_host(binary: Path, workdir: Path, case: HostCase, smollm2: Path | None = None
             ) -> str | None:
    """The transcript text of one host case (header line, then everything printed); None
    when its model cannot be made (the real model without its GGUF). smollm2: the real
    model already imported as SMOLLM2.make would import it, used instead of importing."""
    ckpt = workdir / f"{case.model.name}.bin"
    if case.model.gguf and smollm2 is not None and not ckpt.exists():
        ckpt.symlink_to(smollm2.resolve())
    if not case.model.make(ckpt):
        return None
    cmd = [str(binary), "--model", ckpt.name, *shlex.split(case.args)]
    # one pipe for both streams: smolprobe's writes are unbuffered, so the order is kept
    proc = subprocess.run(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    return host_header(case, proc.returncode) + "\n" + proc.stdout


def locked_make(config: BuildConfig, *extra: str) -> None:
    """make for config (with the LLM image) under tests/support.py's build lock."""
    lock = REPO / "build" / f".lock-{config.folder}"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        res = build_one(REPO, config, llm=True, extra=("-j2", *extra))
    if not res.ok:
        raise SystemExit(f"make failed for {config.name}:\n{res.excerpt}")


def run_guest(case: GuestCase) -> str | None:
    """The transcript text of one guest case: what the shell command printed, CR removed.
    The configuration is built first: the real model as /model.bin (None without its
    GGUF), or for a synthetic case the image beside it, fs-llm-synth.img."""
    image = None
    if case.model.gguf:
        if not case.model.make(SMOLLM2_GUEST):
            return None
        locked_make(case.config, f"MODEL={SMOLLM2_GUEST}")
    else:
        locked_make(case.config, f"build/{case.config.folder}/fs-llm-synth.img")
        image = case.config.build_dir(REPO) / "fs-llm-synth.img"
    if image is None:
        session = QemuSession.for_config(case.config, REPO, llm=True)
    else:
        session = QemuSession(case.config.build_dir(REPO) / "kernel", image, case.config)
    program = read_elf(case.config.build_dir(REPO) / "user" / "_smolprobe")  # what boots
    with session as qs:
        res = qs.run(f"smolprobe {case.args}", timeout=case.timeout)
    body = res.output.replace("\r", "")
    return guest_header(case, program) + "\n" + body + ("" if body.endswith("\n") else "\n")


def run_console(case: ConsoleCase, only: set[str]) -> dict[str, str]:
    """The transcripts of one console case: file name -> text (boot, then each command)."""
    name = case.config.name
    texts = {}
    console = io.StringIO()
    with QemuSession.for_config(case.config, REPO, transcript=console) as qs:
        boot = console.getvalue().split("\n", 1)[1]  # after QEMU's command line
        texts[f"console-boot-{name}"] = console_header(case.config, "boot") + "\n" + boot
        for short, cmd in case.commands:
            if only and f"console-{short}-{name}" not in only:
                continue
            out = qs.run(cmd, timeout=case.timeout).output
            texts[f"console-{short}-{name}"] = console_header(case.config, "$ " + cmd) + "\n" + out
    return {k: v.replace("\r", "") + ("" if v.endswith("\n") else "\n") for k, v in texts.items()
            if not only or k in only}


def write_host(out: Path, only: set[str], smollm2: Path | None = None) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix="nexos-transcripts-") as tmp:
        work = Path(tmp)
        binary = build_host(work)
        for case in HOST_CASES:
            if only and case.name not in only:
                continue
            text = run_host(binary, work, case, smollm2)
            if text is None:
                print(f"skipped {case.name}: {SMOLLM2_GGUF} not found", file=sys.stderr)
                continue
            path = out / f"{case.name}.txt"
            path.write_text(text)
            written.append(path)
    return written


def write_guest(out: Path, only: set[str]) -> list[Path]:
    written = []
    for case in GUEST_CASES:
        if only and case.name not in only:
            continue
        text = run_guest(case)
        if text is None:
            print(f"skipped {case.name}: {SMOLLM2_GGUF} not found", file=sys.stderr)
            continue
        path = out / f"{case.name}.txt"
        path.write_text(text)
        written.append(path)
    for console in CONSOLE_CASES:
        if only and not any(n.startswith("console-") for n in only):
            continue
        for name, text in run_console(console, only).items():
            path = out / f"{name}.txt"
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", action="store_true", help="host-build transcripts (default)")
    ap.add_argument("--guest", action="store_true", help="QEMU transcripts")
    ap.add_argument("--out", type=Path, default=TRANSCRIPTS, help="output folder")
    ap.add_argument("--smollm2", type=Path, metavar="BIN",
                    help="--host: the real model already imported (nexos model import --gguf, "
                         "tokenizer included), instead of importing it again")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="only this transcript (file name without .txt); repeatable")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    only = set(a.only)
    written = []
    if a.host or not a.guest:
        written += write_host(a.out, only, a.smollm2)
    if a.guest:
        written += write_guest(a.out, only)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
