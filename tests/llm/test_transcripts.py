"""smolprobe's real output (tests/transcripts/, made by scripts/transcripts.py) against the
parser and the schema of docs/smolprobe.md ("Output").

(a) every transcript parses, and its typed values agree with what its own lines, its command
and the model's geometry imply; (b) the host transcripts are what the program prints today
(regenerated, timing values aside); (c) in QEMU, the seed, a --samples 4 run and two errors
still print the checked-in lines and page numbers: exactly, but for the figures that count
the program's own image or the page tables its place in memory needs, which are derived
from the binary's size (tests/transcripts/README.md, "What a guest rerun compares").
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.elf import read_elf
from nexos.machine.limits import PAGE_SIZE as PAGE
from nexos.machine.limits import SMOLPROBE_TEXT_GEN
from nexos.machine.qemu import QemuSession
from nexos.model import generate
from nexos.model.synth import preset_config, synthesize
from nexos.model.tokenizer import find_smollm2_gguf
from nexos.parse import PREFIX, SmolprobeResult, parse_smolprobe
from nexos.programs.kvcache import KvShape, active_pages_est, expected_verdict, max_kv_pages
from nexos.programs.kvcache import saved_percent as floor_saved_percent
from support import SharedRuns

REPO = Path(__file__).resolve().parents[2]
TRANSCRIPTS = REPO / "tests" / "transcripts"
SCRIPT = REPO / "scripts" / "transcripts.py"
# the values that measure time, not memory: the only ones a rerun may change
TIMING_KEYS = ("load_ms", "decode_ms", "tokens_per_s", "peak_int8_macs_per_s",
               "matvec_int8_macs_per_s", "ratio", "peak_plain", "peak_packed", "w_gate",
               "classifier", "matvec_q4_1_macs_per_s", "first_token_ms", "prefill_ms",
               "prefill_tokens_per_s", "decode_tokens_per_s")
TIMING_RE = re.compile(r"\b(" + "|".join(TIMING_KEYS) + r")=[^\s,]+")


@dataclass(frozen=True)
class Transcript:
    """One transcript file: its header (how it was made) and the program's output."""

    name: str
    where: str                  # host | guest
    config: BuildConfig | None  # the guest kernel's flags
    exit_status: int | None     # host only (the NexOS shell has no `$?`)
    preset: str                 # the synthetic model's geometry
    args: tuple[str, ...]       # smolprobe's arguments, without --model
    body: str
    header: str = ""            # the `# ` line
    image_pages: int | None = None  # guest: the pages exec() mapped for _smolprobe
                                    # (nexos.machine.elf)

    @property
    def lazy(self) -> bool:
        return self.config is None or self.config.lazy == 1  # the host shim is lazy

    @property
    def cow(self) -> bool:
        return self.config is not None and self.config.cow == 1  # the host has no COW

    def flag(self, name: str) -> str | None:
        """The value after --name in the command, or None."""
        a = list(self.args)
        return a[a.index(name) + 1] if name in a else None

    @property
    def text(self) -> str | None:
        """The --prompt, --chat or --perplexity text, or None."""
        return self.flag("--prompt") or self.flag("--chat") or self.scored

    @property
    def scored(self) -> str | None:
        """The --perplexity text (scored, nothing generated), or None."""
        return self.flag("--perplexity")

    @property
    def gen_len(self) -> int:
        if self.scored:
            return 0
        return int(self.flag("--gen-len") or (SMOLPROBE_TEXT_GEN if self.text else -1))


def read_transcript(path: Path) -> Transcript:
    """Split a transcript into its `# ` header (see tests/transcripts/README.md) and body."""
    text = path.read_text()
    header, _, body = text.partition("\n")
    assert header.startswith("# scripts/transcripts.py"), path
    parts = header.split(" | ")
    where = "host" if parts[0].endswith("--host") else "guest"
    config = None if where == "host" else BuildConfig.parse(parts[1].split()[1])
    status = next((int(p[5:]) for p in parts if p.startswith("exit=")), None)
    preset = re.search(r"--preset (\S+)", header)
    args = shlex.split(parts[-1].removeprefix("$ "))[1:]
    if "--model" in args:
        at = args.index("--model")
        args = args[:at] + args[at + 2:]
    assert preset, header
    image = re.search(r"user/_smolprobe: (\d+) image pages", header)
    assert (image is not None) == (where == "guest"), header  # scripts/transcripts.py writes it
    return Transcript(path.stem, where, config, status, preset[1], tuple(args), body, header,
                      int(image[1]) if image else None)


def transcript(name: str) -> Transcript:
    return read_transcript(TRANSCRIPTS / f"{name}.txt")


# the smolprobe transcripts: the files scripts/transcripts.py made (console-*.txt hold other
# programs' output, for tests/harness/test_parse.py; other scripts' files, e.g. smolserve's, are not
# smolprobe's)
ALL = sorted(p.stem for p in TRANSCRIPTS.glob("*.txt") if not p.stem.startswith("console-")
             and p.read_text().startswith("# scripts/transcripts.py"))


def shape_of(t: Transcript) -> KvShape:
    cfg = preset_config(t.preset)
    seq = int(t.flag("--seq-len") or min(256, cfg.max_seq_len))
    return KvShape(cfg.n_layers, cfg.n_kv_heads, cfg.dim // cfg.n_heads, seq)


def kv_pages(shape: KvShape, lo: int, hi: int) -> set[int]:
    """Page numbers (in the reservation) that rows [lo, hi) of every region span."""
    row = shape.kv_dim * 4
    pages: set[int] = set()
    for r in range(2 * shape.n_layers):
        if hi > lo:
            start = r * shape.region_bytes
            pages |= set(range((start + lo * row) // PAGE, (start + hi * row - 1) // PAGE + 1))
    return pages


def expected_mode(t: Transcript) -> str:
    if t.exit_status == 1 or "error" in t.name:
        return "error"
    if t.flag("--samples"):
        return "samples"
    if "--tokenize" in t.args:
        return "tokenize"
    if t.scored:
        return "perplexity"
    return "single" if t.flag("--prompt-tokens") or t.text else "bench"


# --------------------------------------------------------------------------- (a) parsing

def test_tokenize_reads_the_tokenizer_not_the_weights():
    """--tokenize on the lazy kernel maps the model but touches only its header and
    tokenizer; the eager kernel's mmap maps every page of the file (at least 90 MB of the
    98 MB model). Both encode the text as the host build does."""
    lazy, eager, host = (parse_smolprobe(transcript(n).body) for n in (
        "guest-tokenize-lazy1-cow0", "guest-tokenize-lazy0-cow0", "host-tokenize-smollm2"))
    assert lazy.prompt == eager.prompt == host.prompt and host.prompt
    assert lazy.tokenized and eager.tokenized
    assert eager.tokenized.file_pages * PAGE >= 90_000_000
    assert 0 < lazy.tokenized.file_pages * 10 < eager.tokenized.file_pages


def test_every_mode_has_a_transcript():
    modes = {expected_mode(transcript(n)) for n in ALL}
    assert modes == {"single", "samples", "perplexity", "bench", "tokenize", "error"}
    assert {transcript(n).where for n in ALL} == {"host", "guest"}


@pytest.mark.parametrize("name", ALL)
def test_transcript_parses_into_its_mode(name):
    check_transcript(transcript(name))


def check_transcript(t: Transcript) -> None:
    """Everything one run's output must satisfy, from its own lines, its command and the
    model's geometry (a checked-in transcript, or a guest rerun's fresh output)."""
    r = parse_smolprobe(t.body)
    assert r.mode == expected_mode(t)
    lines = [ln for ln in t.body.splitlines() if PREFIX in ln]
    assert len(r.records) == sum(ln.count(PREFIX) for ln in lines)  # every record is read
    if t.exit_status is not None:
        assert (t.exit_status == 0) == r.ok
    if r.mode == "error":
        assert lines[-1] == PREFIX + "error: " + r.error
    if r.request or r.bench or r.tokenized:   # the model loaded: the model line names it
        cfg = preset_config(t.preset)
        assert r.model is not None
        assert (r.model.layers, r.model.dim, r.model.vocab) == (cfg.n_layers, cfg.dim,
                                                                cfg.vocab_size)
        real = "--gguf" in t.header
        assert r.model.weights == ("q8_0+q4_1" if real else "int8")
        # the host reads the checkpoint make imported (version 2, or 1 for the synthetic
        # one); a guest maps its prepared form from the image (version 3)
        version = 3 if t.where == "guest" else 2 if real else 1
        assert (r.model.version, r.model.tokenizer) == (version, int(real))
        # the mapped (prepared) file prints where its weights came from; --tokenize does not
        assert (r.weights is None) == (r.tokenized is not None)
        if r.weights is not None:
            assert r.weights.source == ("mapped" if version == 3 else "read")
            # a guest maps every page of the file (MAP_POPULATE); the host shim counts none
            assert (r.weights.file_pages > 0) == (t.where == "guest")
    if r.tokenized:   # --tokenize: the prompt line, and the mapped file's pages it touched
        assert r.prompt is not None and r.tokenized.prompt_tokens == len(r.prompt)
        # the shim counts no file pages; a guest maps at least the header's
        assert (r.tokenized.file_pages == 0) == (t.where == "host")
    prompt = t.flag("--prompt-tokens")
    if r.request:
        if t.text:   # encoded by the model's tokenizer: the prompt line lists the ids
            assert prompt is None and r.prompt is not None
            assert r.request.prompt_tokens == len(r.prompt)
        else:
            assert prompt is not None and r.prompt is None
            assert r.request.prompt_tokens == len(prompt.split(","))
        assert r.request.gen_tokens == t.gen_len
        shape = shape_of(t)
        total = r.request.prompt_tokens + r.request.gen_tokens
        if total <= shape.seq_len:
            assert r.kv_capacity is not None
            assert r.kv_capacity.max_pages == max_kv_pages(shape)
            assert r.kv_capacity.active_pages_est == active_pages_est(shape, total)
    if r.summary:
        check_single(t, r)
    if r.fork:
        check_samples(t, r)
    if "--bench" in t.args and r.ok:
        check_bench(r)
    if t.where == "guest":
        assert layouts(t, r), (f"{t.name}: used_pages - mapped_pages {table_pages(r)} are the "
                               "page tables of no place of the KV reservation")


def fed_rows(r: SmolprobeResult) -> int:
    """K/V rows a single request wrote: prompt + generated, but for an eos it stopped at
    (not fed)."""
    assert r.request is not None
    if r.generated is not None:
        g = r.generated
        return r.request.prompt_tokens + g.tokens - g.stopped_at_eos
    return r.request.prompt_tokens + r.request.gen_tokens


def check_single(t: Transcript, r: SmolprobeResult) -> None:
    assert r.request and r.kv_capacity and r.reserve and r.decode and r.timing
    s, mx = r.summary, r.kv_capacity.max_pages
    assert s is not None
    assert s.max_kv_pages == mx == r.reserve.virtual_pages
    assert s.actual_mapped_pages == r.reserve.mapped_pages + r.decode.mapped_pages
    assert s.saved_pages == mx - s.actual_mapped_pages
    assert s.saved_percent == floor_saved_percent(mx, s.actual_mapped_pages)
    assert r.verdict == expected_verdict(r.reserve.mapped_pages, mx)
    total = r.request.prompt_tokens + r.request.gen_tokens
    fed = fed_rows(r)
    stops = "--chat" in t.args or "--stop-at-eos" in t.args
    assert (r.generated is not None) == bool((t.text and not t.scored) or stops)
    if r.generated is not None:
        g = r.generated
        assert g.stopped_at_eos in (0, 1) and (g.stopped_at_eos == 0 or stops)
        assert g.tokens == r.request.gen_tokens or g.stopped_at_eos
    assert r.decode.active_pages_est == active_pages_est(shape_of(t), fed)
    if fed == total:
        assert r.decode.active_pages_est == r.kv_capacity.active_pages_est
    if t.lazy:   # nothing mapped by the reservation; decode maps exactly the rows' pages
        assert r.reserve.mapped_pages == 0
        assert r.decode.mapped_pages == r.decode.active_pages_est
    else:        # the eager kernel maps the whole reservation at once
        assert (r.reserve.mapped_pages, r.decode.mapped_pages) == (mx, 0)
    if t.where == "host":  # no page tables in the shim: used = mapped
        assert (r.reserve.used_pages, r.decode.used_pages) == (
            r.reserve.mapped_pages, r.decode.mapped_pages)
    if "--trace" in t.args:
        assert [(x.step, x.pos) for x in r.trace] == [(i, i) for i in range(fed)]
        mapped = [x.kv_mapped_pages for x in r.trace]
        assert mapped == sorted(mapped) and mapped[-1] == s.actual_mapped_pages
    else:
        assert r.trace == []
    assert (r.text is not None) == bool(t.text and not t.scored)
    assert (r.perplexity is not None) == bool(t.scored)
    if r.perplexity is not None:   # every fed token but the first is scored
        assert r.perplexity.tokens == r.request.prompt_tokens == fed >= 2
        assert r.perplexity.nll > 0 and r.perplexity.ppl > 1
    if "--chat" in t.args and "France" in (t.text or ""):
        assert "Paris" in (r.text or "")   # the real model's answer, as it printed it
    assert (r.tokens is not None) == ("--print-tokens" in t.args)
    assert (r.logits is not None) == ("--print-logits" in t.args)
    if r.logits is not None:
        assert len(r.logits) == preset_config(t.preset).vocab_size


def check_samples(t: Transcript, r: SmolprobeResult) -> None:
    f, pr, req = r.fork, r.parallel_request, r.request
    assert f and pr and req and r.prefill and r.reserve and r.parallel and r.branches_phase
    shape = shape_of(t)
    P, G = req.prompt_tokens, req.gen_tokens
    assert pr.samples == f.requested == int(t.flag("--samples") or 0)
    assert pr.seed == int(t.flag("--seed") or 0)
    assert pr.temperature == float(t.flag("--temperature") or 0.8)
    assert r.prefill.positions == P
    assert f.prefix_kv_pages == active_pages_est(shape, P)
    assert r.reserve.mapped_pages == (0 if t.lazy else max_kv_pages(shape))
    assert r.prefill.mapped_pages == (f.prefix_kv_pages if t.lazy else 0)
    # one line per forked branch, in order: reported or killed
    kill = t.flag("--test-kill-branch")
    assert [k.index for k in r.killed] == ([int(kill)] if kill is not None else [])
    assert all(k.exit_status == -1 for k in r.killed)
    assert sorted([b.index for b in r.branches] + [k.index for k in r.killed]) == list(
        range(f.branches))
    if f.branches < f.requested:
        assert [x.index for x in r.fork_failed] == [f.branches]
        assert "COW_ALLOC=0" in r.fork_failed[0].reason and not t.cow
    else:
        assert r.fork_failed == []
    # the counters against the layout: W = rows [P, P+G), M = mapped at the fork
    written = kv_pages(shape, P, P + G)
    mapped = kv_pages(shape, 0, P) if t.lazy else kv_pages(shape, 0, shape.seq_len)
    last = f.branches - 1
    for b in r.branches:
        assert b.fork_pages == f.parent_mapped_pages
        assert b.cow_copies == b.state_copies + b.kv_copies
        assert b.cow_reuses == b.state_reuses + b.kv_reuses
        assert b.new_kv_pages == len(written - mapped)
        if t.cow:
            assert b.state_copies + b.state_reuses == b.state_pages
            shared = len(written & mapped)
            assert (b.kv_copies, b.kv_reuses) == ((0, shared) if b.index == last else (shared, 0))
        else:
            assert (b.cow_copies, b.cow_reuses) == (0, 0)
    p = r.parallel
    assert p.branches == len(r.branches)
    assert p.eager_copy_pages == f.parent_mapped_pages * p.branches
    fork_copied = 0 if t.cow else sum(b.fork_pages for b in r.branches)
    assert p.actual_copied_pages == (sum(b.cow_copies for b in r.branches)
                                     + r.branches_phase.parent_copies + fork_copied)
    assert p.saved_pages == p.eager_copy_pages - p.actual_copied_pages
    assert p.saved_percent == (floor_saved_percent(p.eager_copy_pages, p.actual_copied_pages)
                               if p.eager_copy_pages else 0)
    assert r.branches_phase.private_pages == p.actual_copied_pages + sum(
        b.new_kv_pages for b in r.branches)
    assert r.parallel_verdict == ("COW_STYLE" if t.cow else "EAGER_FORK_STYLE")
    if not t.cow:
        assert f.shared_pages_at_fork == 0
    if p.branches == 0:
        assert r.mode == "error" and r.error and "no branch could run" in r.error


def check_bench(r: SmolprobeResult) -> None:
    b, d = r.bench, r.bench_detail
    assert b and d
    assert b.peak_int8_macs_per_s == max(d.peak_plain, d.peak_packed)
    assert b.ratio == 100 * b.matvec_int8_macs_per_s // b.peak_int8_macs_per_s
    assert d.rounds >= 1
    q = r.bench_q4_1
    if q is not None:
        assert q.peak_int8_macs_per_s == b.peak_int8_macs_per_s
        assert q.ratio == 100 * q.matvec_q4_1_macs_per_s // q.peak_int8_macs_per_s


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host transcripts' checkpoint, made as scripts/transcripts.py makes it."""
    t = transcript("host-print")
    path = tmp_path_factory.mktemp("model") / "small.bin"
    synthesize(path, preset=t.preset, seed=0, weight_type="int8")
    return path


@pytest.mark.parametrize("name", ["host-print", "host-samples3", "host-samples3-killed"])
def test_host_tokens_are_the_reference_tokens(name, small_model):
    t = transcript(name)
    r = parse_smolprobe(t.body)
    assert r.request
    prompt = [int(x) for x in (t.flag("--prompt-tokens") or "").split(",")]
    if r.tokens is not None:
        assert list(r.tokens) == generate(small_model, prompt, r.request.gen_tokens).tokens
    for b in r.branches:
        ref = generate(small_model, prompt, r.request.gen_tokens, temperature=0.8,
                       seed=b.index)
        assert list(b.tokens) == ref.tokens


# --------------------------------------------------------------------------- (b) host reruns

def normalised(text: str) -> str:
    """The transcript with the values that measure time replaced by `*`."""
    return TIMING_RE.sub(r"\1=*", text)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")
def test_host_transcripts_are_what_smolprobe_prints(tmp_path, request):
    # the real model as the script would import it: the session's import (conftest), made
    # once for every test of this worker that needs it
    real = (["--smollm2", str(request.getfixturevalue("smollm2_checkpoint"))]
            if find_smollm2_gguf() else [])
    subprocess.run([sys.executable, str(SCRIPT), "--host", "--out", str(tmp_path), *real],
                   check=True, capture_output=True, text=True, timeout=600)
    fresh = sorted(p.name for p in tmp_path.glob("*.txt"))
    checked_in = sorted(p.name for p in TRANSCRIPTS.glob("host-*.txt")
                        if find_smollm2_gguf() or "smollm2" not in p.name)  # real model
    assert fresh == checked_in
    for name in fresh:
        new, old = (tmp_path / name).read_text(), (TRANSCRIPTS / name).read_text()
        assert normalised(new) == normalised(old), (
            f"{name} is stale: run `.venv/bin/python scripts/transcripts.py --host`")


def test_normalising_touches_only_timing_values():
    body = transcript("host-single-bench").body
    norm = normalised(body)
    assert "load_ms=*" in norm and "tokens_per_s=*" in norm and "ratio=*" in norm
    kept = [ln for ln in body.splitlines() if not TIMING_RE.search(ln)]
    assert kept and all(ln in norm.splitlines() for ln in kept)


# --------------------------------------------------------------------------- page tables

# A phase's used_pages counts physical pages, page-table pages included (docs/smolprobe.md,
# "Numbers"); its mapped_pages only the leaves. With 4 KiB leaves one level-0 page-table page
# maps a 2 MiB span of 512 pages (Sv39; docs/memory.md, "Page tables"), so a lazy KV page
# that is the first mapped page of its span costs one more page. Which spans the KV pages
# reach depends on where the reservation begins in its span, and that place moves with the
# binary: exec() maps the image from address 0 and puts the guard page, the stack and then
# the heap right after it (kernel/exec.c), and smolprobe allocates the same buffers before
# the reservation and aligns the break to a page (docs/smolprobe.md, "What it does"), so the
# reservation sits a fixed number of pages above the image's end. No line prints that place,
# so the figures are checked against a model with two unknowns:
#   r = the reservation's first page within its span (0..511), which a binary with d more
#       image pages moves to (r + d) mod 512;
#   u = how many unmapped heap pages lie right below the reservation (a malloc chunk's
#       untouched tail, lazily never mapped), which no binary moves; the reservation's first
#       span already has its table (a page below the reservation in the span is mapped)
#       exactly when r > u.
# A guest transcript must fit some (r, u) (check_transcript); a rerun whose binary maps d
# more image pages must fit ((r + d) mod 512, u) for one of the old transcript's (r, u)
# (check_rerun_tables; with d == 0 that is the same figures).
SPAN = 512   # pages one level-0 page-table page maps


def span_counts(pages: Collection[int]) -> list[int]:
    """For r = 0..511: the 2 MiB spans that reservation pages `pages` reach when the
    reservation's first page is page r of its span."""
    if isinstance(pages, range):   # the whole reservation: contiguous
        return [(r + len(pages) - 1) // SPAN + 1 if pages else 0 for r in range(SPAN)]
    return [len({(r + p) // SPAN for p in pages}) for r in range(SPAN)]


def table_pages(r: SmolprobeResult) -> dict[str, int]:
    """The page-table pages each phase line shows: its used_pages beyond its mapped pages."""
    lines = {"reserve": r.reserve, "prefill": r.prefill, "decode": r.decode}
    return {k: v.used_pages - v.mapped_pages for k, v in lines.items() if v is not None}


@dataclass(frozen=True)
class KvSpans:
    """What the page-table model needs of one run, as lists indexed by r: the spans its KV
    pages reach in each phase line, and in a branch (the rows mapped at the fork and those
    its decode writes)."""

    phase: dict[str, list[int]]
    branch: list[int]

    @classmethod
    def of(cls, t: Transcript, r: SmolprobeResult) -> KvSpans:
        shape = shape_of(t)
        whole = range(max_kv_pages(shape))
        P = r.request.prompt_tokens if r.request else 0
        sets: dict[str, Collection[int]] = {}
        if r.reserve:   # eager sbrk maps the whole reservation at once, lazy none of it
            sets["reserve"] = whole if not t.lazy else ()
        if r.prefill:   # the parent feeds rows [0, P) before the forks
            sets["prefill"] = kv_pages(shape, 0, P) if t.lazy else ()
        if r.decode:    # a single request feeds its rows [0, fed)
            sets["decode"] = kv_pages(shape, 0, fed_rows(r)) if t.lazy else ()
        branch: Collection[int] = ()
        if r.fork and r.request:   # a branch maps rows [0, P) (or all, eager) and writes [P, P+G)
            branch = (kv_pages(shape, 0, P + r.request.gen_tokens) if t.lazy else whole)
        return cls({k: span_counts(v) for k, v in sets.items()}, span_counts(branch))

    def tables(self, r0: int, first_has_table: bool) -> dict[str, int]:
        """The page-table pages each phase maps when the reservation starts at page r0 of
        its span: one per span its pages reach, but the first (every phase that maps
        pages maps the reservation's page 0, row 0 of layer 0's keys) if it had its table
        already. A phase that maps nothing makes none: eager prefill and decode, lazy
        reserve."""
        return {k: c[r0] - first_has_table if c[r0] else 0 for k, c in self.phase.items()}

    def branch_shift(self, r0: int, d: int) -> int:
        """How many more page-table pages each branch holds when the reservation's first
        page moves from r0 by d pages. A branch's table is a copy of the parent's (fork walks
        the parent's level-0 tables, docs/memory.md "How fork walks the page table"): one
        table per 2 MiB span below the reservation's span (each holds mapped pages: the
        image, the stack, the heap) and one per span its KV pages reach; its decode adds the
        spans that only its new rows reach. The spans below grow by (r0 + d) // 512."""
        r1 = r0 + d
        return r1 // SPAN + self.branch[r1 % SPAN] - self.branch[r0]


@dataclass(frozen=True)
class Layout:
    """Solutions (r, u) of the model for one run: one r and the range of its u (all below
    r, the first span had its table, or all from r on, it had none)."""

    r: int
    us: range


def layouts(t: Transcript, r: SmolprobeResult) -> list[Layout]:
    """Every (r, u) for which the model gives the run's page-table pages (empty: none)."""
    spans, seen = KvSpans.of(t, r), table_pages(r)
    found = []
    for r0 in range(SPAN):
        for has in (False, True):
            if spans.tables(r0, has) == seen:
                us = range(0, r0) if has else range(r0, SPAN)
                if us:
                    found.append(Layout(r0, us))
    return found


def check_rerun_tables(old: Transcript, fresh: Transcript, tolerance: int) -> None:
    """The fresh run's page-table figures are the old run's with the reservation moved by
    the image's page difference d, for one (r, u) the old run fits: each phase's exactly,
    and branches_phase used_pages (image pages taken out: binary_free) within `tolerance`
    of the old one plus each branch's page-table shift."""
    d = (fresh.image_pages or 0) - (old.image_pages or 0)
    o, f = parse_smolprobe(old.body), parse_smolprobe(fresh.body)
    spans, seen = KvSpans.of(fresh, f), table_pages(f)
    solutions = layouts(old, o)
    assert solutions, f"{old.name}: its page-table figures fit no layout"
    tried = set()
    for lay in solutions:
        r1 = (lay.r + d) % SPAN
        for has in {lay.us.start < r1, lay.us[-1] < r1}:   # r1 > u, for the u of lay.us
            if (lay.r, has) in tried:
                continue
            tried.add((lay.r, has))
            if spans.tables(r1, has) != seen:
                continue
            if f.branches_phase is None or o.branches_phase is None or o.parallel is None:
                return
            n = o.parallel.branches
            used = [binary_free(x, y.used_pages, "branches_phase", "used_pages", n)
                    for x, y in ((old, o.branches_phase), (fresh, f.branches_phase))]
            if abs(int(used[1]) - int(used[0]) - n * spans.branch_shift(lay.r, d)) <= tolerance:
                return
    raise AssertionError(f"{fresh.name}: page-table pages {seen} (branches_phase "
                         f"{f.branches_phase}) fit no layout of the old run {table_pages(o)} "
                         f"moved by {d} image pages")


# --------------------------------------------------------------------------- (c) guest reruns

# Which of a COW branch's first writes to a non-KV page (its stack, say) is a copy and which
# a reuse depends on whether a later-forked sibling already shared that page when the branch
# wrote it: the scheduler decides that after each fork, so a rerun may move a page between
# the two counters (and so by a page or two the totals derived from them). Their sum, every
# KV counter and every other number must be the same.
COPY_OR_REUSE = (("cow_copies", "cow_reuses"), ("state_copies", "state_reuses"))
SCHEDULED_TOTALS = {"PARALLEL_SUMMARY": ("actual_copied_pages", "saved_pages"),
                    "branches_phase": ("used_pages", "private_pages", "parent_copies")}
# The figures that hold page-table pages: checked by check_rerun_tables, not compared here.
PAGE_TABLE_FIGURES = {("reserve_phase", "used_pages"), ("prefill_phase", "used_pages"),
                      ("decode_phase", "used_pages"), ("branches_phase", "used_pages")}
# A floor of a ratio of figures that count the image: check_samples checks its formula on
# both runs, on figures compared here.
RELATION_ONLY = {("PARALLEL_SUMMARY", "saved_percent")}


def image_coefficient(kind: str, key: str, t: Transcript, branches: int) -> int:
    """How many times the figure `kind.key` counts the program's image pages (the pages
    exec() maps for _smolprobe: nexos.machine.elf). The rest of each such figure is the stack and
    the heap, which no binary moves: the heap starts at a page boundary right after the
    image, guard page and stack (kernel/exec.c), and holds the same buffers. By
    docs/smolprobe.md's definitions (its "Fields" under --samples), case by case:"""
    if (kind, key) in (("fork_phase", "parent_mapped_pages"), ("branch", "fork_pages")):
        return 1    # the parent's mapped pages before the forks; a branch starts with them
    if (kind, key) == ("fork_phase", "shared_pages_at_fork"):
        # with COW every mapped page of the parent is shared after the forks but those it
        # wrote since (its stack), the image with them; without COW nothing is shared
        return 1 if t.cow else 0
    if (kind, key) == ("PARALLEL_SUMMARY", "eager_copy_pages"):
        return branches   # parent_mapped_pages x branches
    copied = 0 if t.cow else branches   # without COW each fork copied the whole image; with
    if (kind, key) == ("PARALLEL_SUMMARY", "actual_copied_pages"):   # it, none is written
        return copied     # (text is read-only; the data page a branch writes is one page)
    if (kind, key) == ("PARALLEL_SUMMARY", "saved_pages"):
        return branches - copied   # eager_copy_pages - actual_copied_pages
    if (kind, key) in (("branches_phase", "private_pages"), ("branches_phase", "used_pages")):
        return copied     # actual copies + new KV pages; used: those pages and page tables
    return 0


def binary_free(t: Transcript, value: object, kind: str, key: str, branches: int) -> object:
    """value without the image pages it counts: what no change of the binary's size moves."""
    assert t.image_pages is not None, t.name
    coefficient = image_coefficient(kind, key, t, branches)
    return value - coefficient * t.image_pages if coefficient else value  # type: ignore


def branches_of(r: SmolprobeResult) -> int:
    return r.parallel.branches if r.parallel else 0


def shape_of_records(t: Transcript) -> list[tuple[str, tuple[str, ...], dict[str, object]]]:
    """Every line's kind, words and values: timing values left out, the image pages taken
    out of the figures that count them, a branch's copy/reuse pairs as their sums, the totals
    that follow from them, the page-table figures and the relation-only ones left out."""
    r = parse_smolprobe(t.body)
    shapes = []
    for rec in r.records:
        dropped = TIMING_KEYS + SCHEDULED_TOTALS.get(rec.kind, ())
        values = {k: binary_free(t, v, rec.kind, k, branches_of(r))
                  for k, v in rec.fields.items() if k not in dropped
                  and (rec.kind, k) not in PAGE_TABLE_FIGURES | RELATION_ONLY}
        if rec.kind == "branch":
            for copies, reuses in COPY_OR_REUSE:
                values[copies + "+reuses"] = values.pop(copies) + values.pop(reuses)
        shapes.append((rec.kind, rec.words, values))
    return shapes


def scheduled_totals(t: Transcript) -> dict[str, int]:
    """The totals a rerun may move by a page per branch, image pages taken out."""
    r = parse_smolprobe(t.body)
    return {f"{rec.kind}.{k}": int(binary_free(t, rec.fields[k], rec.kind, k,  # type: ignore
                                               branches_of(r)))
            for rec in r.records for k in SCHEDULED_TOTALS.get(rec.kind, ())
            if (rec.kind, k) not in PAGE_TABLE_FIGURES}


def check_rerun(old: Transcript, fresh: Transcript) -> None:
    """fresh (the same command rerun, maybe with another binary) against old: every line
    and value the same but for timing, the image pages (taken out), the copy/reuse split of
    the scheduler (within a page per branch), and the page tables (check_rerun_tables)."""
    o, f = parse_smolprobe(old.body), parse_smolprobe(fresh.body)
    assert f.mode == o.mode, (f.mode, o.mode)
    new_shape, old_shape = shape_of_records(fresh), shape_of_records(old)
    differ = [(a, b) for a, b in zip(new_shape, old_shape) if a != b]
    assert new_shape == old_shape, f"{old.name}: rerun line != transcript line: {differ[:2]}"
    new_totals, old_totals = scheduled_totals(fresh), scheduled_totals(old)
    assert new_totals.keys() == old_totals.keys()
    for key, value in new_totals.items():
        assert abs(value - old_totals[key]) <= len(f.branches), (key, value, old_totals[key])
    check_rerun_tables(old, fresh, tolerance=len(f.branches))


def wanted(request: pytest.FixtureRequest, test: str, param: str) -> list[object]:
    """The values of parameter `param` of the collected (not deselected) items of `test`."""
    found = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "originalname", None) == test and callspec and param in callspec.params:
            found.append(callspec.params[param])
    return list(dict.fromkeys(found))


# The guest transcripts rerun, each in one boot per (configuration, memory size, image)
# with the others of its boot: smolprobe's output does not depend on what ran before it in
# that boot (it prints no free-page or pid figure; every figure is its own process's or a
# difference of snapshots it takes while nothing else runs).
RERUN = ("guest-seed-lazy1-cow0", "guest-samples4-lazy1-cow1",
         "guest-error-test-hook-lazy1-cow1", "guest-error-lazy1-cow1")


def boot_of(t: Transcript) -> str:
    """The boot a guest transcript needs: its configuration (memory size included) and
    image, as its header names them."""
    assert t.config is not None
    return t.header.split(" | ")[1].removeprefix("QEMU ")


@pytest.fixture(scope="session")
def guest_reruns(request: pytest.FixtureRequest, build_kernel,
                 tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """boot -> {"image_pages": the booted _smolprobe's, "outputs": {transcript: output}}."""
    names = wanted(request, "test_guest_rerun_matches_transcript", "name")

    def boot(key: str) -> object:
        ts = [transcript(n) for n in names if boot_of(transcript(n)) == key]
        cfg = ts[0].config
        assert cfg is not None and key == f"{cfg.name} fs-llm.img", key  # the default image
        build_kernel(cfg, llm=True)
        pages = read_elf(cfg.build_dir(REPO) / "user" / "_smolprobe").image_pages
        with QemuSession.for_config(cfg, REPO, llm=True) as qs:
            outputs = {t.name: qs.run("smolprobe " + shlex.join(t.args), timeout=900).output
                       for t in ts}
        return {"image_pages": pages, "outputs": outputs}

    return SharedRuns(tmp_path_factory, "guest-reruns",
                      dict.fromkeys(boot_of(transcript(n)) for n in names), boot)


@pytest.mark.qemu
@pytest.mark.parametrize("name", RERUN)
def test_guest_rerun_matches_transcript(name, guest_reruns):
    old = transcript(name)
    run = guest_reruns[boot_of(old)]
    assert isinstance(run, dict)
    fresh = replace(old, body=run["outputs"][name], image_pages=run["image_pages"])
    check_transcript(fresh)
    check_rerun(old, fresh)
