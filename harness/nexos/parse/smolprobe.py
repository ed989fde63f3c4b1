"""smolprobe's output (docs/smolprobe.md, "Output"): its schema, its typed records, and the
checks that tie a run's lines together.

The lines are read by the shared machinery of nexos.parse.core against SCHEMA: a line of an
unknown kind, with other keys or values of another type, out of its run mode's order, or a
missing required line is a ParseError naming it. The typed part (SmolprobeResult) is
filled from the checked records; the cross-line checks (trace steps, branch order, counts)
follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nexos.parse.core import (
    DECIMAL,
    ERROR,
    FLOATS,
    INT,
    INTS,
    LOADING,
    MANY,
    NAME,
    PERCENT,
    Keys,
    Modes,
    ParseError,
    Record,
    Schema,
    Value,
    read_run,
)

# --------------------------------------------------------------------------- the schema
#
# The output schema is docs/smolprobe.md, "Output": every line kind, its keys in order and
# their types, and for each run mode the lines it prints, in order. This section is that
# schema as data (LINE_KEYS, MODE_LINES, the rest of SCHEMA); nexos.parse.core holds a run
# to it.

VERDICTS = ("LAZY_STYLE", "EAGER_STYLE", "MIXED")
PARALLEL_VERDICTS = ("COW_STYLE", "EAGER_FORK_STYLE")
WEIGHT_SOURCES = ("mapped", "read")  # the weights line: docs/smolprobe.md "The weights"

LINE_KEYS: Keys = {
    "model": (("weights", NAME), ("version", INT), ("layers", INT), ("dim", INT),
              ("vocab", INT), ("tokenizer", INT)),
    "weights": (("source", WEIGHT_SOURCES), ("file_pages", INT)),
    "prompt": (("tokens", INTS),),
    "request": (("prompt_tokens", INT), ("gen_tokens", INT)),
    "tokenized": (("prompt_tokens", INT), ("file_pages", INT)),
    "kv_capacity": (("max_pages", INT), ("active_pages_est", INT)),
    "parallel_request": (("samples", INT), ("temperature", DECIMAL), ("seed", INT)),
    "trace": (("step", INT), ("pos", INT), ("kv_mapped_pages", INT)),
    "SUMMARY": (("max_kv_pages", INT), ("actual_mapped_pages", INT), ("saved_pages", INT),
                ("saved_percent", PERCENT)),
    "reserve_phase": (("virtual_pages", INT), ("mapped_pages", INT), ("used_pages", INT)),
    "prefill_phase": (("positions", INT), ("mapped_pages", INT), ("used_pages", INT)),
    "decode_phase": (("mapped_pages", INT), ("used_pages", INT), ("active_pages_est", INT)),
    "verdict": (("verdict", VERDICTS + PARALLEL_VERDICTS),),
    "generated": (("tokens", INT), ("stopped_at_eos", INT)),
    "timing": (("load_ms", INT), ("decode_ms", INT), ("tokens_per_s", DECIMAL),
               ("first_token_ms", INT), ("prefill_ms", INT), ("prefill_tokens_per_s", DECIMAL),
               ("decode_tokens_per_s", DECIMAL), ("harts", INT)),
    "perplexity": (("tokens", INT), ("nll", DECIMAL), ("ppl", DECIMAL)),
    "prompt_cache": (("reused_tokens", INT), ("saved_tokens", INT)),
    "tokens": (("tokens", INTS),),
    "logits": (("logits", FLOATS),),
    "logits_hash": (("n", INT), ("fnv", INT)),
    "fork_phase": (("branches", INT), ("shared_pages_at_fork", INT), ("prefix_kv_pages", INT),
                   ("requested", INT), ("parent_mapped_pages", INT),
                   ("parent_released_kv", INT)),
    "branch": (("tokens", INTS), ("cow_copies", INT), ("cow_reuses", INT),
               ("new_kv_pages", INT), ("state_pages", INT), ("state_copies", INT),
               ("state_reuses", INT), ("kv_copies", INT), ("kv_reuses", INT),
               ("fork_pages", INT), ("decode_ms", INT)),
    "PARALLEL_SUMMARY": (("branches", INT), ("eager_copy_pages", INT),
                         ("actual_copied_pages", INT), ("saved_pages", INT),
                         ("saved_percent", PERCENT)),
    "branches_phase": (("used_pages", INT), ("private_pages", INT), ("parent_copies", INT)),
    "bench": (("peak_int8_macs_per_s", INT), ("matvec_int8_macs_per_s", INT),
              ("ratio", PERCENT)),
    "bench_detail": (("peak_plain", INT), ("peak_packed", INT), ("w_gate", INT),
                     ("classifier", INT), ("rounds", INT)),
    "bench_q4_1": (("matvec_q4_1_macs_per_s", INT), ("peak_int8_macs_per_s", INT),
                   ("ratio", PERCENT)),
}

# Lines of fixed text (no key=value pairs); groups become Record fields.
FIXED_LINES: dict[str, re.Pattern[str]] = {
    "loading": LOADING,
    "running": re.compile(r"running decode\.\.\."),
    "branch_killed": re.compile(r"branch (?P<index>\d+) killed before reporting "
                                r"\(exit status (?P<exit_status>-?\d+)\); "
                                r"its pages went back to the kernel"),
    "branch_unstarted": re.compile(r"branch (?P<index>\d+) could not be started"),
    "fork_failed": re.compile(r"fork of branch (?P<index>\d+) failed: (?P<reason>.+)"),
    "error": ERROR,
    "text": re.compile(r"text:( .*)?"),  # the generated text, escaped (unescape_text)
}

# The text after the key=value pairs, where a line kind has one.
TRAILERS = {"parallel_request": "(branch i samples with seed+i)"}

FORK_FAILURE_REASONS = ("out of memory (COW_ALLOC=0 copies every page)",
                        "out of memory or processes", "no file descriptor for its pipe")

MODE_LINES: Modes = {
    "single": (
        (("loading",), 1, 1), (("model",), 0, 1), (("weights",), 0, 1), (("prompt",), 0, 1),
        (("request",), 1, 1),
        (("kv_capacity",), 1, 1), (("running",), 1, 1), (("trace",), 0, MANY),
        (("generated",), 0, 1), (("SUMMARY",), 1, 1), (("reserve_phase",), 1, 1),
        (("decode_phase",), 1, 1), (("verdict",), 1, 1), (("prompt_cache",), 0, 1),
        (("timing",), 1, 1),
        (("text",), 0, 1), (("tokens",), 0, 1), (("logits",), 0, 1), (("logits_hash",), 0, 1),
        (("bench",), 0, 1), (("bench_detail",), 0, 1), (("bench_q4_1",), 0, 1)),
    "samples": (
        (("loading",), 1, 1), (("model",), 0, 1), (("weights",), 0, 1), (("request",), 1, 1),
        (("kv_capacity",), 1, 1), (("parallel_request",), 1, 1), (("running",), 1, 1),
        (("reserve_phase",), 1, 1),
        (("prefill_phase",), 1, 1), (("fork_phase",), 1, 1),
        (("branch", "branch_killed"), 0, MANY), (("branch_unstarted",), 0, 1),
        (("fork_failed",), 0, 1), (("PARALLEL_SUMMARY",), 1, 1), (("branches_phase",), 1, 1),
        (("verdict",), 1, 1), (("timing",), 1, 1), (("bench",), 0, 1),
        (("bench_detail",), 0, 1), (("bench_q4_1",), 0, 1)),
    "perplexity": (
        (("loading",), 1, 1), (("model",), 0, 1), (("weights",), 0, 1), (("prompt",), 1, 1),
        (("request",), 1, 1), (("kv_capacity",), 1, 1), (("running",), 1, 1),
        (("SUMMARY",), 1, 1),
        (("reserve_phase",), 1, 1), (("decode_phase",), 1, 1), (("verdict",), 1, 1),
        (("timing",), 1, 1), (("perplexity",), 1, 1)),
    "bench": ((("loading",), 1, 1), (("model",), 0, 1), (("weights",), 0, 1),
              (("bench",), 1, 1),
              (("bench_detail",), 1, 1),
              (("bench_q4_1",), 0, 1)),
    "tokenize": ((("loading",), 1, 1), (("model",), 1, 1), (("prompt",), 1, 1),
                 (("tokenized",), 1, 1)),
}

SCHEMA = Schema("smolprobe", LINE_KEYS, FIXED_LINES, MODE_LINES, TRAILERS,
                bare=frozenset({"verdict", "tokens", "logits"}),  # `verdict=X ...`
                explained=frozenset({"verdict"}),  # verdict=X then its explanation
                words={"branch": 1})               # `branch i tokens=...`
PREFIX = SCHEMA.prefix  # "[smolprobe] "


# --------------------------------------------------------------------------- typed records

@dataclass(frozen=True)
class Request:
    prompt_tokens: int
    gen_tokens: int


@dataclass(frozen=True)
class Tokenized:
    """`tokenized` (--tokenize): the prompt's length, and the model file's pages mapped."""

    prompt_tokens: int
    file_pages: int


@dataclass(frozen=True)
class KvCapacity:
    max_pages: int
    active_pages_est: int


@dataclass(frozen=True)
class ParallelRequest:
    """`parallel_request`: branch i samples with seed+i at this temperature."""

    samples: int
    temperature: float
    seed: int


@dataclass(frozen=True)
class Summary:
    max_kv_pages: int
    actual_mapped_pages: int
    saved_pages: int
    saved_percent: int


@dataclass(frozen=True)
class Phase:
    """reserve_phase or decode_phase. virtual_pages only on reserve, active_pages_est on decode."""

    mapped_pages: int
    used_pages: int
    virtual_pages: int | None = None
    active_pages_est: int | None = None


@dataclass(frozen=True)
class PrefillPhase:
    """`prefill_phase` of a --samples run: the parent fed the prompt's `positions` rows."""

    positions: int
    mapped_pages: int
    used_pages: int


@dataclass(frozen=True)
class Timing:
    load_ms: int
    decode_ms: int
    tokens_per_s: float
    first_token_ms: int   # from the start of loading to the first token's logits
    prefill_ms: int       # from the start of the feed to the first token's logits
    prefill_tokens_per_s: float  # prompt positions per second in that time
    decode_tokens_per_s: float   # generated positions per second after it
    harts: int            # harts the model's matvecs ran on


@dataclass(frozen=True)
class PromptCache:
    """`prompt_cache` (--prompt-cache, --chat's default): prompt positions whose K/V rows
    came from the cache file, and those this run saved in it."""

    reused_tokens: int
    saved_tokens: int


@dataclass(frozen=True)
class LogitsHash:
    """`logits_hash` (--print-logits-hash): the FNV-1a hash of the final logits' n float32
    values, byte by byte as they lie in memory; equal hashes, the same logits bit for bit."""

    n: int
    fnv: int


@dataclass(frozen=True)
class Weights:
    """`weights`: how the weights came in (mapped from a version 3 file, or read) and the
    page-cache pages the process maps once they have."""

    source: str
    file_pages: int


@dataclass(frozen=True)
class TraceStep:
    step: int
    pos: int
    kv_mapped_pages: int


@dataclass(frozen=True)
class ForkPhase:
    branches: int               # processes forked
    shared_pages_at_fork: int
    prefix_kv_pages: int
    requested: int              # --samples N
    parent_mapped_pages: int
    parent_released_kv: int     # 1: the parent gave its KV reservation back


@dataclass(frozen=True)
class Branch:
    """One `branch i tokens=...` line: a branch that reported. `fields` holds the keys
    beyond index, tokens and the three COW/KV counters, as printed (for JSON records)."""

    index: int
    tokens: tuple[int, ...]
    cow_copies: int
    cow_reuses: int
    new_kv_pages: int
    state_pages: int
    state_copies: int
    state_reuses: int
    kv_copies: int
    kv_reuses: int
    fork_pages: int
    decode_ms: int
    fields: dict[str, Value] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class KilledBranch:
    """`branch i killed before reporting (exit status s); ...`: smolprobe's own line."""

    index: int
    exit_status: int
    line: str


@dataclass(frozen=True)
class UnstartedBranch:
    """`branch i could not be started` (not expected; the later branches do not run)."""

    index: int
    line: str


@dataclass(frozen=True)
class ForkFailure:
    """`fork of branch k failed: <reason>`: smolprobe's own line."""

    index: int
    reason: str
    line: str


@dataclass(frozen=True)
class ParallelSummary:
    branches: int               # branches that reported
    eager_copy_pages: int
    actual_copied_pages: int
    saved_pages: int
    saved_percent: int


@dataclass(frozen=True)
class BranchesPhase:
    used_pages: int
    private_pages: int
    parent_copies: int


@dataclass(frozen=True)
class Bench:
    peak_int8_macs_per_s: int
    matvec_int8_macs_per_s: int
    ratio: int                  # percent


@dataclass(frozen=True)
class BenchDetail:
    peak_plain: int
    peak_packed: int
    w_gate: int
    classifier: int
    rounds: int


@dataclass(frozen=True)
class ModelInfo:
    weights: str                # the weight types in file order of first use: q8_0+q4_1
    version: int                # checkpoint format version
    layers: int
    dim: int
    vocab: int
    tokenizer: int              # 1: the checkpoint carries a tokenizer


@dataclass(frozen=True)
class Generated:
    tokens: int                 # tokens really generated (<= gen_tokens)
    stopped_at_eos: int         # 1: the request ended at <|im_end|> (--stop-at-eos, --chat)


@dataclass(frozen=True)
class Perplexity:
    """`perplexity` of a --perplexity run (docs/smolprobe.md, "Perplexity")."""

    tokens: int                 # N, the tokens of the text (N - 1 of them scored)
    nll: float                  # the sum of the N - 1 next-token NLLs, in nats
    ppl: float                  # expf(nll / (N - 1))


TEXT_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
TEXT_ESCAPE_RE = re.compile(r"\\(x[0-9a-f]{2}|[\\nrt])")


def unescape_text(escaped: str) -> str:
    r"""The text of a `text:` line: smolprobe writes \\ \n \r \t, other control characters
    and the spaces that end the text as \xHH, so that the text stays on one line whole
    (docs/smolprobe.md)."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        return chr(int(e[1:], 16)) if e[0] == "x" else TEXT_ESCAPES[e]
    return TEXT_ESCAPE_RE.sub(one, escaped)


@dataclass(frozen=True)
class BenchQ41:
    matvec_q4_1_macs_per_s: int
    peak_int8_macs_per_s: int
    ratio: int                  # percent


MODES = ("single", "samples", "perplexity", "bench", "tokenize", "error")


@dataclass
class SmolprobeResult:
    """One smolprobe run. `mode` is single, samples, perplexity, bench, tokenize or error; on an
    error run `error` holds the message and the fields of the lines printed before it are
    set."""

    mode: str = ""
    model: ModelInfo | None = None          # which model the image carries
    weights: Weights | None = None          # how its weights came in
    prompt: tuple[int, ...] | None = None   # the encoded prompt (--prompt/--chat)
    tokenized: Tokenized | None = None      # --tokenize
    request: Request | None = None
    kv_capacity: KvCapacity | None = None
    parallel_request: ParallelRequest | None = None
    summary: Summary | None = None
    reserve: Phase | None = None
    prefill: PrefillPhase | None = None
    decode: Phase | None = None
    verdict: str | None = None       # LAZY_STYLE | EAGER_STYLE | MIXED
    verdict_text: str = ""           # the explanation after the verdict
    timing: Timing | None = None
    prompt_cache: PromptCache | None = None  # --prompt-cache, --chat
    perplexity: Perplexity | None = None  # --perplexity
    generated: Generated | None = None  # --prompt/--chat/--stop-at-eos
    text: str | None = None             # the generated text (--prompt/--chat), unescaped
    tokens: tuple[int, ...] | None = None
    logits: tuple[float, ...] | None = None
    logits_hash: LogitsHash | None = None  # --print-logits-hash
    trace: list[TraceStep] = field(default_factory=list)
    fork: ForkPhase | None = None
    branches: list[Branch] = field(default_factory=list)
    killed: list[KilledBranch] = field(default_factory=list)
    unstarted: list[UnstartedBranch] = field(default_factory=list)
    fork_failed: list[ForkFailure] = field(default_factory=list)
    parallel: ParallelSummary | None = None
    branches_phase: BranchesPhase | None = None
    parallel_verdict: str | None = None  # COW_STYLE | EAGER_FORK_STYLE
    parallel_verdict_text: str = ""
    bench: Bench | None = None
    bench_detail: BenchDetail | None = None
    bench_q4_1: BenchQ41 | None = None
    error: str | None = None
    records: list[Record] = field(default_factory=list)  # every line, in order

    @property
    def ok(self) -> bool:
        return self.error is None


# --------------------------------------------------------------------------- lines -> records

# Lines printed once whose fields are a record's, key for key: kind -> (SmolprobeResult
# attribute, record type). The schema has typed every field already.
ONCE_LINES: dict[str, tuple[str, type]] = {
    "request": ("request", Request), "tokenized": ("tokenized", Tokenized),
    "kv_capacity": ("kv_capacity", KvCapacity),
    "parallel_request": ("parallel_request", ParallelRequest),
    "SUMMARY": ("summary", Summary), "reserve_phase": ("reserve", Phase),
    "prefill_phase": ("prefill", PrefillPhase), "decode_phase": ("decode", Phase),
    "timing": ("timing", Timing), "prompt_cache": ("prompt_cache", PromptCache),
    "weights": ("weights", Weights), "fork_phase": ("fork", ForkPhase),
    "PARALLEL_SUMMARY": ("parallel", ParallelSummary),
    "branches_phase": ("branches_phase", BranchesPhase), "bench": ("bench", Bench),
    "bench_detail": ("bench_detail", BenchDetail), "bench_q4_1": ("bench_q4_1", BenchQ41),
    "model": ("model", ModelInfo), "perplexity": ("perplexity", Perplexity),
    "generated": ("generated", Generated), "logits_hash": ("logits_hash", LogitsHash),
}
# Lines printed any number of times, likewise: kind -> (list attribute, record type). A
# record type with a `line` field also gets the whole line.
MANY_LINES: dict[str, tuple[str, type]] = {
    "trace": ("trace", TraceStep), "branch_killed": ("killed", KilledBranch),
    "branch_unstarted": ("unstarted", UnstartedBranch),
    "fork_failed": ("fork_failed", ForkFailure),
}


def _record(typ: type, rec: Record) -> object:
    extra = {"line": rec.line} if "line" in typ.__dataclass_fields__ else {}
    return typ(**rec.fields, **extra)


def _branch(rec: Record) -> Branch:
    """`branch i tokens=... cow_copies=...`: the index is the line's word, the rest are kept
    as printed too (for JSON records)."""
    f = dict(rec.fields)
    tokens = f.pop("tokens")
    assert isinstance(tokens, tuple), rec.line
    extra = {k: v for k, v in f.items() if k not in ("cow_copies", "cow_reuses", "new_kv_pages")}
    return Branch(int(rec.words[0]), tuple(int(t) for t in tokens), **f,  # type: ignore[arg-type]
                  fields=extra)


def _verdict(res: SmolprobeResult, rec: Record) -> None:
    v, text = str(rec.fields["verdict"]), str(rec.fields["text"])
    if v in PARALLEL_VERDICTS:  # the schema allows only these and VERDICTS
        res.parallel_verdict, res.parallel_verdict_text = v, text
    else:
        res.verdict, res.verdict_text = v, text


# The lines that are not a record key for key: kind -> what it sets.
SPECIAL_LINES = {
    "error": lambda res, rec: setattr(res, "error", str(rec.fields["message"])),
    "verdict": _verdict,
    "tokens": lambda res, rec: setattr(res, "tokens", tuple(int(t) for t in rec.fields["tokens"])),
    "logits": lambda res, rec: setattr(res, "logits",
                                       tuple(float(t) for t in rec.fields["logits"])),
    "prompt": lambda res, rec: setattr(res, "prompt", rec.fields["tokens"]),
    "branch": lambda res, rec: res.branches.append(_branch(rec)),
    # "" when the text is empty
    "text": lambda res, rec: setattr(res, "text", unescape_text(rec.line[len("text: "):])),
}


def _apply(res: SmolprobeResult, rec: Record) -> None:
    """Fill the typed part of `res` that `rec` describes."""
    if rec.kind in ONCE_LINES:
        attr, typ = ONCE_LINES[rec.kind]
        setattr(res, attr, _record(typ, rec))
    elif rec.kind in MANY_LINES:
        attr, typ = MANY_LINES[rec.kind]
        getattr(res, attr).append(_record(typ, rec))
    elif rec.kind in SPECIAL_LINES:
        SPECIAL_LINES[rec.kind](res, rec)


# --------------------------------------------------------------------------- run modes

def classify(records: list[Record]) -> str:
    """The run mode: error if an error line is there, else by the request lines."""
    kinds = {r.kind for r in records}
    if "error" in kinds:
        return "error"
    if "parallel_request" in kinds:
        return "samples"
    if "perplexity" in kinds:
        return "perplexity"
    if "request" in kinds:
        return "single"
    if "tokenized" in kinds:
        return "tokenize"
    if "bench" in kinds:
        return "bench"
    return ""


def _shape(records: list[Record], text: str) -> str:
    """The mode whose line order the run's lines must follow (an error run's, those before
    the error); ParseError when no line says which."""
    mode = classify([r for r in records if r.kind != "error"])
    if not mode and all(r.kind != "error" for r in records):
        raise ParseError("smolprobe output has no request, parallel_request, bench or "
                         "tokenized line",
                         text)
    return mode or "single"  # only `loading` (or nothing): the start every mode shares


def _check_single(res: SmolprobeResult, complete: bool, text: str) -> None:
    if res.request is None:
        return
    total = res.request.prompt_tokens + res.request.gen_tokens
    for i, t in enumerate(res.trace):
        if (t.step, t.pos) != (i, i):
            raise ParseError(f"trace line {i} has step={t.step} pos={t.pos}, expected {i}", text)
    if res.trace and complete and len(res.trace) != total:
        raise ParseError(f"{len(res.trace)} trace lines for {total} fed positions", text)
    gen = res.request.gen_tokens
    if res.generated is not None:
        if res.generated.tokens > gen or (not res.generated.stopped_at_eos
                                          and res.generated.tokens != gen):
            raise ParseError(f"generated tokens={res.generated.tokens} for gen_tokens={gen}"
                             f" (stopped_at_eos={res.generated.stopped_at_eos})", text)
        gen = res.generated.tokens
    if res.tokens is not None and len(res.tokens) != gen:
        raise ParseError(f"tokens= lists {len(res.tokens)} ids, {gen} generated", text)
    if res.logits_hash and res.model and res.logits_hash.n != res.model.vocab:
        raise ParseError(f"logits_hash n={res.logits_hash.n} for vocab={res.model.vocab}", text)
    if res.prompt is not None and len(res.prompt) != res.request.prompt_tokens:
        raise ParseError(f"prompt tokens= lists {len(res.prompt)} ids, prompt_tokens="
                         f"{res.request.prompt_tokens}", text)
    if res.parallel_verdict:
        raise ParseError(f"a single run cannot have verdict={res.parallel_verdict}", text)


def _check_perplexity(res: SmolprobeResult, text: str) -> None:
    """A complete --perplexity run: it scores the N prompt tokens and generates none."""
    assert res.request is not None and res.perplexity is not None and res.prompt is not None
    n = res.perplexity.tokens
    if (res.request.prompt_tokens, res.request.gen_tokens, len(res.prompt)) != (n, 0, n):
        raise ParseError(f"perplexity tokens={n} for prompt_tokens="
                         f"{res.request.prompt_tokens} gen_tokens={res.request.gen_tokens} "
                         f"and {len(res.prompt)} prompt ids", text)
    if n < 2:
        raise ParseError(f"perplexity tokens={n}: scoring needs at least 2", text)


def _check_samples(res: SmolprobeResult, complete: bool, text: str) -> None:
    if res.verdict:
        raise ParseError(f"a --samples run cannot have verdict={res.verdict}", text)
    order = [r for r in res.records if r.kind in ("branch", "branch_killed", "branch_unstarted")]
    for i, rec in enumerate(order):
        index = int(rec.words[0]) if rec.kind == "branch" else rec.fields["index"]
        if index != i:
            raise ParseError(f"branch lines out of order: branch {index} where branch {i} "
                             "belongs", PREFIX + rec.line)
    gen = res.request.gen_tokens if res.request else None
    for b in res.branches:
        if gen is not None and len(b.tokens) != gen:
            raise ParseError(f"branch {b.index} lists {len(b.tokens)} tokens, gen_tokens={gen}",
                             text)
    f = res.fork
    if f is None:
        return
    if len(order) > f.branches:
        raise ParseError(f"{len(order)} branch lines for {f.branches} forked branches", text)
    if complete and res.parallel and not res.unstarted and len(order) != f.branches:
        raise ParseError(f"{len(order)} branch lines for {f.branches} forked branches", text)
    for ff in res.fork_failed:
        if ff.index != f.branches:
            raise ParseError(f"fork of branch {ff.index} failed, but fork_phase says "
                             f"branches={f.branches}", PREFIX + ff.line)
    if complete and res.parallel and f.branches < f.requested and not res.fork_failed:
        raise ParseError(f"fork_phase branches={f.branches} of requested={f.requested}, but "
                         "no `fork of branch k failed` line", text)
    if res.parallel and res.parallel.branches != len(res.branches):
        raise ParseError(f"PARALLEL_SUMMARY branches={res.parallel.branches}, but "
                         f"{len(res.branches)} branches reported", text)


def parse_smolprobe(text: str, require_complete: bool = True) -> SmolprobeResult:
    """Parse one smolprobe run's console output against docs/smolprobe.md, "Output".

    Every `[smolprobe] ` line must be of a known kind with its keys; the run is classified
    (`mode`) and its lines must come in its mode's order. With require_complete every line
    the mode requires must be there; without, the output may stop early (a run cut short).
    An error run (`[smolprobe] error: ...`, always the last line) returns with `error` set:
    the lines before it must be the start of a run. ParseError names what is wrong.
    """
    records, shape, complete = read_run(SCHEMA, text, lambda recs: _shape(recs, text),
                                        require_complete)
    res = SmolprobeResult(mode=classify(records), records=records)
    for rec in records:
        _apply(res, rec)
    if shape == "single":
        _check_single(res, complete, text)
    elif shape == "perplexity":
        _check_perplexity(res, text)
    elif shape == "samples":
        _check_samples(res, complete, text)
    if complete and res.bench and res.bench_detail is None:
        raise ParseError("a `bench` line without its `bench_detail` line", text)
    return res


