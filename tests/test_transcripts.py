"""smolprobe's real output (tests/transcripts/, made by scripts/transcripts.py) against the
parser and the schema of docs/smolprobe.md ("Output").

(a) every transcript parses, and its typed values agree with what its own lines, its command
and the model's geometry imply; (b) the host transcripts are what the program prints today
(regenerated, timing values aside); (c) in QEMU, the seed and a --samples 4 run still print
the checked-in lines and page numbers.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nexos.config import BuildConfig
from nexos.kvcache import KvShape, active_pages_est, expected_verdict, max_kv_pages
from nexos.kvcache import saved_percent as floor_saved_percent
from nexos.model import generate
from nexos.model.synth import preset_config, synthesize
from nexos.model.tokenizer import find_smollm2_gguf
from nexos.parse import PREFIX, SmolprobeResult, parse_smolprobe
from nexos.qemu import QemuSession

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO / "tests" / "transcripts"
SCRIPT = REPO / "scripts" / "transcripts.py"
PAGE = 4096
# the values that measure time, not memory: the only ones a rerun may change
TIMING_KEYS = ("load_ms", "decode_ms", "tokens_per_s", "peak_int8_macs_per_s",
               "matvec_int8_macs_per_s", "ratio", "peak_plain", "peak_packed", "w_gate",
               "classifier", "matvec_q4_1_macs_per_s")
TEXT_GEN_LEN = 64  # smolprobe's --gen-len with --prompt/--chat when not given
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
        return int(self.flag("--gen-len") or (TEXT_GEN_LEN if self.text else -1))


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
    return Transcript(path.stem, where, config, status, preset[1], tuple(args), body, header)


def transcript(name: str) -> Transcript:
    return read_transcript(TRANSCRIPTS / f"{name}.txt")


# the smolprobe transcripts: the files scripts/transcripts.py made (console-*.txt hold other
# programs' output, for tests/test_parse.py; other scripts' files, e.g. smolserve's, are not
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
    if t.scored:
        return "perplexity"
    return "single" if t.flag("--prompt-tokens") or t.text else "bench"


# --------------------------------------------------------------------------- (a) parsing

def test_every_mode_has_a_transcript():
    modes = {expected_mode(transcript(n)) for n in ALL}
    assert modes == {"single", "samples", "perplexity", "bench", "error"}
    assert {transcript(n).where for n in ALL} == {"host", "guest"}


@pytest.mark.parametrize("name", ALL)
def test_transcript_parses_into_its_mode(name):
    t = transcript(name)
    r = parse_smolprobe(t.body)
    assert r.mode == expected_mode(t)
    lines = [ln for ln in t.body.splitlines() if PREFIX in ln]
    assert len(r.records) == sum(ln.count(PREFIX) for ln in lines)  # every record is read
    if t.exit_status is not None:
        assert (t.exit_status == 0) == r.ok
    if r.mode == "error":
        assert lines[-1] == PREFIX + "error: " + r.error
    if r.request or r.bench:   # the model loaded: the model line names it
        cfg = preset_config(t.preset)
        assert r.model is not None
        assert (r.model.layers, r.model.dim, r.model.vocab) == (cfg.n_layers, cfg.dim,
                                                                cfg.vocab_size)
        real = "--gguf" in t.header
        assert r.model.weights == ("q8_0+q4_1" if real else "int8")
        assert (r.model.version, r.model.tokenizer) == ((2, 1) if real else (1, 0))
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
    fed = total   # K/V rows written; a request that stops at its eos does not feed it
    stops = "--chat" in t.args or "--stop-at-eos" in t.args
    assert (r.generated is not None) == bool((t.text and not t.scored) or stops)
    if r.generated is not None:
        g = r.generated
        assert g.stopped_at_eos in (0, 1) and (g.stopped_at_eos == 0 or stops)
        fed = r.request.prompt_tokens + g.tokens - g.stopped_at_eos
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
def test_host_transcripts_are_what_smolprobe_prints(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--host", "--out", str(tmp_path)],
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


# --------------------------------------------------------------------------- (c) guest reruns

# Which of a COW branch's first writes to a non-KV page (its stack, say) is a copy and which
# a reuse depends on whether a later-forked sibling already shared that page when the branch
# wrote it: the scheduler decides that after each fork, so a rerun may move a page between
# the two counters (and so by a page or two the totals derived from them). Their sum, every
# KV counter and every other number must be the same.
COPY_OR_REUSE = (("cow_copies", "cow_reuses"), ("state_copies", "state_reuses"))
SCHEDULED_TOTALS = {"PARALLEL_SUMMARY": ("actual_copied_pages", "saved_pages", "saved_percent"),
                    "branches_phase": ("used_pages", "private_pages", "parent_copies")}


def shape_of_records(r: SmolprobeResult) -> list[tuple[str, tuple[str, ...], dict[str, object]]]:
    """Every line's kind, words and values: timing values left out, a branch's copy/reuse
    pairs as their sums, the totals that follow from them left out (see above)."""
    shapes = []
    for rec in r.records:
        dropped = TIMING_KEYS + SCHEDULED_TOTALS.get(rec.kind, ())
        values = {k: v for k, v in rec.fields.items() if k not in dropped}
        if rec.kind == "branch":
            for copies, reuses in COPY_OR_REUSE:
                values[copies + "+reuses"] = values.pop(copies) + values.pop(reuses)
        shapes.append((rec.kind, rec.words, values))
    return shapes


def scheduled_totals(r: SmolprobeResult) -> dict[str, int]:
    return {f"{rec.kind}.{k}": int(rec.fields[k]) for rec in r.records
            for k in SCHEDULED_TOTALS.get(rec.kind, ())}


@pytest.mark.qemu
@pytest.mark.parametrize("name", ["guest-seed-lazy1-cow0", "guest-samples4-lazy1-cow1",
                                  "guest-error-test-hook-lazy1-cow1"])
def test_guest_rerun_matches_transcript(name, build_kernel):
    t = transcript(name)
    assert t.config is not None
    build_kernel(t.config, llm=True)
    with QemuSession.for_config(t.config, REPO, llm=True) as qs:
        out = qs.run("smolprobe " + shlex.join(t.args), timeout=900).output
    fresh, old = parse_smolprobe(out), parse_smolprobe(t.body)
    assert fresh.mode == old.mode
    assert shape_of_records(fresh) == shape_of_records(old)
    new_totals, old_totals = scheduled_totals(fresh), scheduled_totals(old)
    assert new_totals.keys() == old_totals.keys()
    for key, value in new_totals.items():
        assert abs(value - old_totals[key]) <= len(fresh.branches), (key, value, old_totals[key])
