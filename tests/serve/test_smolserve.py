"""smolserve (docs/smolserve.md): a KV-cache server inside NexOS, in all four configurations.

Every expected number is computed here: the KV page counts from the checkpoint's geometry
and docs/kvcache.md's layout (nexos.programs.kvcache), the generated workload from its seed (the
same xorshift64* draw as user/smolserve/workload.c, written again below), the admission decisions
from the kernel's own figures on the admit/queue lines (docs/smolserve.md, "Admission").
The only literals are seed32's request sizes (docs/smolserve.md, "Workloads"). Workloads
are short (a few tokens each, small max lengths except seed32's) so the file runs in a few
minutes on two shared cores.

The parser tests at the end read transcripts made by scripts/serve_transcripts.py and need
no QEMU; the others boot the real kernel (the `build_kernel` fixture marks them `qemu`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from nexos.machine.build import host_program
from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import ParseError, parse_serve
from nexos.programs.kvcache import PAGE, KvShape, distinct_kv_pages, max_kv_pages
from nexos.programs.serve import check_workload, serve_command, workload_commands
from nexos.records import ServeEvent, ServeRecord, ServeResult
from support import BY_DESIGN, SharedRuns

REPO = Path(__file__).resolve().parents[2]
TRANSCRIPTS = REPO / "tests" / "transcripts"
CONFIGS = [BuildConfig(lz, cw, cpus=2) for lz, cw in ((0, 0), (0, 1), (1, 0), (1, 1))]
SEED32 = "smolserve --workload seed32"
GEN = ("--requests", "4", "--max-len", "32", "--long-len", "4", "--seed", "3")
KILLED = serve_command([*GEN, "--test-kill", "R1"])
QUEUE_ARGS = (6, 2048, 1, 0)  # requests, max_len, long_len, seed: 6 whole reservations
QUEUE = serve_command(["--requests", "6", "--max-len", "2048", "--long-len", "1"])
FILL_ARGS = QUEUE_ARGS
FILL = serve_command(["--requests", "6", "--max-len", "2048", "--long-len", "1",
                      "--test-fill", "1"])
# a shared prefix: four requests beginning with the same 8 ids, then each prefilled alone
PREFIX_ARGS = (4, 64, 4, 0, 8)  # requests, max_len, long_len, seed, prefix_len
PREFIX_FLAGS = ["--requests", "4", "--max-len", "64", "--long-len", "4", "--prefix-len", "8"]
PREFIX = serve_command(PREFIX_FLAGS)
PREFIX_ALONE = serve_command([*PREFIX_FLAGS, "--share-prefix", "0"])
# chat-style requests share the chat template's head; a token request a prefix of its own.
# A host file, typed in as `nexos serve --workload` types one (chat_file_commands).
CHAT_WORKLOAD = ('# two chat messages, a token request\r\nC1 96 "What is the capital of France?"'
                 ' gen=4\r\nC2  96\t"Name a colour."  gen=4\n\nT 64 1,2,3:4 gen=1')
CHAT = "smolserve --workload /c.txt"
CHAT_CHECK = "smolserve --check-workload /c.txt"   # prints the lines the harness typed
CHAT_ALONE = "smolserve --workload /c.txt --share-prefix 0"
RUN_TIMEOUT = 600.0
# one-line errors, run on lazy1-cow1 after the workloads (the file is written first)
BAD_FILE = "echo A 16 1,x gen=2 > /bad.txt"
ERRORS = {
    "smolserve --requests 0 --max-len 8": "--requests",
    "smolserve --workload /nope": "no such built-in workload or file",
    "smolserve --workload /bad.txt": "/bad.txt:1:",
    "smolserve --check-workload /bad.txt": "/bad.txt:1:",
    "smolserve --requests 2 --max-len 1000000": "max_seq_len",
    "smolserve --workload seed32 --test-kill Z": "--test-kill",
}


# ------------------------------------------------------------------------ the workloads

@dataclass(frozen=True)
class Req:
    id: str
    max_len: int
    prompt: int
    gen: int


def seed32() -> list[Req]:
    """`--workload seed32` (docs/smolserve.md): A max 2048, prompt 7, 1 + 2 generated;
    B 512, 3, 1 + 1."""
    return [Req("A", 2048, 7, 1 + 2), Req("B", 512, 3, 1 + 1)]


def generated(n: int, max_len: int, long_len: int, seed: int, prefix_len: int = 0
              ) -> list[Req]:
    """smolserve's generated workload (docs/smolserve.md "Workloads"), drawn the same way;
    `prompt` counts the shared prefix's prefix_len ids too."""
    mask = 2**64 - 1
    st = (seed * 0x9E3779B97F4A7C15 + 1) & mask

    def rnd() -> int:
        nonlocal st
        st ^= st >> 12
        st ^= (st << 25) & mask
        st ^= st >> 27
        return (st * 2685821657736338717) & mask

    short = max(1, long_len // 4)
    out = []
    for i in range(n):
        own = 1 + rnd() % 4
        own = own if prefix_len + own < max_len else max_len - 1 - prefix_len
        prompt = prefix_len + own
        for _ in range(own):
            rnd()
        if rnd() % 8 == 0 and long_len > short:
            gen = short + 1 + rnd() % (long_len - short)
        else:
            gen = 1 + rnd() % short
        out.append(Req(f"R{i}", max_len, prompt, min(gen, max_len - prompt)))
    return out


def model_file_pages() -> int:
    """Pages of the file the LLM image carries as /model.bin: the prepared form of the
    checkpoint its model.list names (Makefile: build/models/prepared/<name>)."""
    listed = REPO / "build" / CONFIGS[-1].name / "model.list"
    prepared = REPO / "build" / "models" / "prepared" / Path(listed.read_text().strip()).name
    return -(-prepared.stat().st_size // PAGE)


def shape(max_len: int) -> KvShape:
    """The KV layout of a max_len reservation, from the checkpoint the LLM image carries as
    /model.bin (the build records which); SmolLM-135M's geometry before any build."""
    listed = REPO / "build" / CONFIGS[-1].name / "model.list"
    model = Path(listed.read_text().strip()) if listed.is_file() else None
    base = KvShape.from_checkpoint(model) if model and model.is_file() else KvShape()
    return base.with_seq_len(max_len)


# ------------------------------------------------------------------------ the checks

def check_requests(res: ServeResult, work: list[Req], lazy: int, filled: bool = False) -> None:
    """Every request line equals what the geometry and the workload give (with `filled`, a
    first attempt that survived --test-fill mapped its whole reservation)."""
    assert [r.id for r in res.requests] == [w.id for w in work]
    for line, w in zip(res.requests, work):
        s = shape(w.max_len)
        used = w.prompt + w.gen
        reserved = max_kv_pages(s)
        assert reserved == -(-2 * s.n_layers * w.max_len * s.kv_dim * 4 // PAGE)
        want = dict(max_len=w.max_len, prompt=w.prompt, generated=w.gen,
                    reserved_slots=w.max_len, used_slots=used,
                    internal_waste_slots=w.max_len - used, reserved_kv_pages=reserved,
                    mapped_kv_pages=distinct_kv_pages(s, used) if lazy and not (
                        filled and line.attempts == 1) else reserved,
                    needed_kv_pages=distinct_kv_pages(s, used))
        assert {k: getattr(line, k) for k in want} == want, line


def check_summary(res: ServeResult) -> None:
    """SERVE_SUMMARY and memory from the request and event lines; nothing lost or leaked."""
    s, m = res.summary, res.memory
    assert s is not None and m is not None and res.start is not None
    reserved = sum(r.reserved_kv_pages for r in res.requests)
    mapped = sum(r.mapped_kv_pages for r in res.requests)
    needed = sum(r.needed_kv_pages for r in res.requests)
    admits = [e for e in res.events if e.kind == "admit"]
    assert s.requests == s.completed == len(res.requests) == res.start.requests
    assert sorted(e.id for e in res.events if e.kind == "finish") == sorted(
        r.id for r in res.requests)
    assert s.reserved_kv_pages == reserved and s.mapped_kv_pages == mapped
    assert s.waste_percent == (100 * max(mapped - needed, 0) // mapped if mapped else 0)
    assert s.peak_concurrent == max(e.running for e in admits)
    assert s.queued == len({e.id for e in res.events if e.kind == "queue"})
    assert s.recomputed == sum(e.kind == "recompute" for e in res.events)
    assert s.peak_used_pages >= max(e.used_pages for e in res.events)
    for r in res.requests:
        assert r.attempts == sum(e.kind == "admit" and e.id == r.id for e in admits)
    assert m.baseline_free_pages == res.start.free_pages
    if res.pressure_summary is None:
        assert m.final_free_pages == m.baseline_free_pages
    # under overcommit the page cache and swap move free pages: the leak is net of them
    assert m.leaked_pages == 0


def expected_est(prev: ServeEvent | None, req: Req) -> int:
    """est_pages for req after the admit line prev (docs/smolserve.md "Admission")."""
    if prev is None:
        return 0
    assert prev.fork_pages is not None and prev.reserve_mapped_pages is not None
    assert prev.reserved_kv_pages
    res = max_kv_pages(shape(req.max_len))
    return prev.fork_pages + -(-prev.reserve_mapped_pages * res // prev.reserved_kv_pages)


def check_admission(res: ServeResult, work: list[Req], lazy: int, cow: int) -> None:
    """Every admit and watermark-queue decision follows the rule, on the kernel's figures."""
    assert res.start is not None
    base, grow = res.start.watermark_base_pages, res.start.grow_pages
    in_use = res.start.total_pages - res.start.free_pages  # the server: mostly the weights
    # (the page cache's pages of the mapped model)
    assert base == res.start.total_pages // 64
    assert grow == -(-32 * res.start.kv_bytes_per_slot // PAGE)
    s = shape(1)
    assert res.start.kv_bytes_per_slot == 2 * s.n_layers * s.kv_dim * 4
    # the weights are the page cache's pages of the model file, one copy however many
    # workers run, in every configuration
    weights = model_file_pages()
    assert all(e.pagecache_pages == weights for e in res.events if e.kind == "admit"), weights
    by_id = {w.id: w for w in work}
    prev: ServeEvent | None = None
    for e in res.events:
        if e.kind not in ("admit", "queue"):
            continue
        assert e.free_pages is not None and e.est_pages is not None
        assert e.est_pages == expected_est(prev, by_id[e.id]), e
        if not lazy and prev is not None:   # eager: the whole reservation counts
            assert e.est_pages >= max_kv_pages(shape(by_id[e.id].max_len)), e
        if e.kind == "admit":
            assert e.watermark_pages == base + e.running * grow
            assert e.running == 1 or e.free_pages - e.est_pages >= e.watermark_pages, e
            # eager sbrk maps the whole reservation, lazy none of it
            assert e.reserve_mapped_pages == (0 if lazy else e.reserved_kv_pages)
            # the mapped weights are shared in every configuration: no fork copies them. A
            # COW fork takes page tables only (a leaf table per 512 of the server's pages,
            # the upper levels, a margin); a copying fork copies the anonymous pages too
            assert e.fork_pages is not None and e.fork_pages < in_use // 10, e
            tables = in_use // 512 + 16
            assert (e.fork_pages <= tables) == bool(cow), (e, tables)
            prev = e
        elif e.reason == "watermark":
            assert e.watermark_pages == base + (e.running + 1) * grow
            assert e.running > 0 and e.free_pages - e.est_pages < e.watermark_pages, e


def check_run(res: ServeResult, work: list[Req], cfg: BuildConfig) -> None:
    assert res.error is None
    assert res.start is not None
    assert (res.start.lazy_alloc, res.start.cow_alloc, res.start.ncpu) == (
        cfg.lazy, cfg.cow, cfg.cpus)
    check_requests(res, work, cfg.lazy)
    check_summary(res)
    check_admission(res, work, cfg.lazy, cfg.cow)


# ------------------------------------------------------------------------ the guest runs

def chat_file_commands(folder: Path) -> list[str]:
    """The shell commands that write CHAT_WORKLOAD to /c.txt, made as `nexos serve
    --workload FILE` makes them: checked by smolserve built for the host, its lines typed
    between the NexOS shell's quotes (nexos.programs.serve)."""
    work = folder / "c.txt"
    work.write_text(CHAT_WORKLOAD)
    lines = check_workload(work, host_program(REPO, "build/host/smolserve"))
    return workload_commands(lines, "/c.txt")


def boot_commands(cfg: BuildConfig, chat_file: Sequence[str]) -> tuple[str, ...]:
    """What one boot of cfg runs, in order: seed32 and the killed generated run; the
    queueing run on lazy0-cow0 and lazy1-cow1, the fill run, the errors and the chat file
    (`chat_file`: the commands that write it) on lazy1-cow1. Every check reads one
    command's output, whose figures are its own (the free pages it starts with and ends
    with, checked against each other): none needs a fresh kernel."""
    extra = {(0, 0): (QUEUE,),
             (1, 1): (QUEUE, FILL, BAD_FILE, *ERRORS, *chat_file, CHAT_CHECK, CHAT,
                      CHAT_ALONE)}
    return (SEED32, KILLED, PREFIX, PREFIX_ALONE, *extra.get((cfg.lazy, cfg.cow), ()))


@pytest.fixture(scope="session")
def serve_runs(request: pytest.FixtureRequest, build_kernel,
               tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """configuration name -> {command: output}: one boot per configuration for the whole
    test run, shared by the pytest-xdist workers (SharedRuns), made for the configurations
    the collected tests use."""
    names = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "served" in callspec.params:
            names.add(callspec.params["served"].name)
        if getattr(item, "originalname", None) == "test_errors_are_one_line":
            names.add(CONFIGS[-1].name)

    def boot(name: str) -> dict[str, str]:
        cfg = next(c for c in CONFIGS if c.name == name)
        build_kernel(cfg, llm=True)
        chat_file = chat_file_commands(tmp_path_factory.mktemp("chat"))
        with QemuSession.for_config(cfg, REPO, llm=True) as s:
            return {cmd: s.run(cmd, timeout=RUN_TIMEOUT).output
                    for cmd in boot_commands(cfg, chat_file)}

    return SharedRuns(tmp_path_factory, "smolserve", [c.name for c in CONFIGS if c.name in names],
                      boot)


@pytest.fixture(scope="module", params=CONFIGS, ids=[c.name for c in CONFIGS])
def served(request: pytest.FixtureRequest, serve_runs: SharedRuns
           ) -> tuple[BuildConfig, dict[str, str]]:
    """A configuration and the outputs of its boot (boot_commands)."""
    cfg: BuildConfig = request.param
    outputs = serve_runs[cfg.name]
    assert isinstance(outputs, dict)
    return cfg, outputs


def test_seed32_figures_and_admission(served: tuple[BuildConfig, dict[str, str]]) -> None:
    cfg, outputs = served
    res = parse_serve(outputs[SEED32])
    check_run(res, seed32(), cfg)
    a, b = res.requests
    assert (a.used_slots, a.internal_waste_slots) == (7 + 1 + 2, 2048 - 10)
    assert (b.used_slots, b.internal_waste_slots) == (3 + 1 + 1, 512 - 5)


def test_eager_fits_only_whole_reservations(served: tuple[BuildConfig, dict[str, str]]
                                            ) -> None:
    """Six requests of 2048 slots, more than free memory holds as whole reservations: eager
    sbrk admits a worker only when a whole reservation is free; lazy sbrk with COW admits
    all six at once."""
    cfg, outputs = served
    if QUEUE not in outputs:
        pytest.skip(BY_DESIGN + "the queueing run is made on lazy0-cow0 and lazy1-cow1")
    res = parse_serve(outputs[QUEUE])
    work = generated(*QUEUE_ARGS)
    check_run(res, work, cfg)
    assert res.start is not None and res.summary is not None and res.memory is not None
    whole = max_kv_pages(shape(2048))
    assert len(work) * whole > res.memory.baseline_free_pages, "six must not fit at once"
    if cfg.lazy:
        assert res.summary.peak_concurrent == len(work) and res.summary.queued == 0
    else:
        # The rule, checked at each admission. Whether a later request also had to wait
        # depends on timing: these workers generate one token, and one that finished early
        # gives its reservation back before the next admission (the README's 32-request
        # run, test_readme_nexos_serve_line, is the one that shows the queue).
        admits = [e for e in res.events if e.kind == "admit"]
        assert len(admits) == len(work), admits
        assert all(e.free_pages is not None and e.free_pages >= whole for e in admits), admits


def kv_pages(s: KvShape, lo: int, hi: int) -> set[int]:
    """The pages (of the reservation) that rows [lo, hi) of every region touch."""
    row = s.kv_dim * 4
    return {p for r in range(2 * s.n_layers) for p in range(
        (r * s.region_bytes + lo * row) // PAGE, (r * s.region_bytes + hi * row - 1) // PAGE + 1)
        } if hi > lo else set()


def test_shared_prefix_is_prefilled_once_and_shared_by_cow(
        served: tuple[BuildConfig, dict[str, str]]) -> None:
    """Four requests that begin with the same 8 ids: the server prefills them once and
    forks every worker from that; with COW each worker shares the prefix's KV pages and
    copies only those it writes into, without COW its fork copies them all. The answers are
    the ones each request gets prefilled alone (docs/smolserve.md, "Shared prefixes")."""
    cfg, outputs = served
    work = generated(*PREFIX_ARGS)
    shared, alone = parse_serve(outputs[PREFIX]), parse_serve(outputs[PREFIX_ALONE])
    check_run(alone, work, cfg)
    assert shared.error is None and shared.summary is not None
    check_summary(shared)
    s, n = shape(64), PREFIX_ARGS[-1]
    mapped_set = kv_pages(s, 0, n) if cfg.lazy else set(range(max_kv_pages(s)))
    (px,) = shared.prefixes
    assert (px.id, px.tokens, px.requests, px.max_len, px.reserved_kv_pages,
            px.mapped_kv_pages) == ("P0", n, len(work), 64, max_kv_pages(s), len(mapped_set))
    for line, lone, w in zip(shared.requests, alone.requests, work, strict=True):
        assert (line.id, line.generated, line.answer_fnv) == (lone.id, lone.generated,
                                                              lone.answer_fnv) == (
            w.id, w.gen, lone.answer_fnv)
        assert (lone.prefix_tokens, lone.shared_kv_pages, lone.copied_kv_pages) == (0, 0, 0)
        written = kv_pages(s, n, w.prompt + w.gen)
        copied = len(written & mapped_set) if cfg.cow else len(mapped_set)
        assert (line.prefix_tokens, line.copied_kv_pages, line.shared_kv_pages) == (
            n, copied, len(mapped_set) - copied if cfg.cow else 0), line
        assert line.mapped_kv_pages == len(written - mapped_set) + copied, line
    p = shared.prefix_summary
    assert p is not None and alone.prefix_summary is not None
    prompts = sum(w.prompt for w in work)
    assert (p.prefixes, p.sharing_requests, p.prefill_tokens, p.prefill_tokens_saved) == (
        1, len(work), prompts - (len(work) - 1) * n, (len(work) - 1) * n)
    assert alone.prefix_summary.prefill_tokens == prompts
    assert p.prefix_kv_pages == px.mapped_kv_pages
    assert p.shared_kv_pages == sum(r.shared_kv_pages for r in shared.requests)
    assert p.copied_kv_pages == sum(r.copied_kv_pages for r in shared.requests)
    assert p.kv_pages_saved == p.shared_kv_pages - p.prefix_kv_pages
    assert (p.kv_pages_saved > 0) == bool(cfg.cow)
    assert "usertrap" not in outputs[PREFIX] and "panic" not in outputs[PREFIX]


def test_chat_requests_share_the_template_head(serve_runs: SharedRuns) -> None:
    """A workload file of two chat messages and a token request with a prefix of its own:
    two prefixes (the chat template's head, shared by both messages; 1,2,3); the same
    answers as with --share-prefix 0."""
    outputs = serve_runs[CONFIGS[-1].name]
    assert isinstance(outputs, dict)
    typed = {c: out for c, out in outputs.items() if c.startswith("echo ") and "/c.txt" in c}
    assert len(typed) == 3 and not any(out.strip() for out in typed.values()), typed
    # the guest's parser reads back exactly the lines the host's printed and the shell wrote
    assert outputs[CHAT_CHECK].strip().splitlines() == [
        c.split("'")[1] for c in typed], outputs[CHAT_CHECK]
    shared, alone = parse_serve(outputs[CHAT]), parse_serve(outputs[CHAT_ALONE])
    assert shared.error is None and alone.error is None, outputs[CHAT]
    check_summary(shared)
    check_summary(alone)
    head, own = shared.prefixes
    assert (head.requests, own.tokens, own.requests) == (2, 3, 1)
    c1, c2, t = shared.requests
    assert head.tokens > 10 and c1.prefix_tokens == c2.prefix_tokens == head.tokens
    assert t.prefix_tokens == 3 and c1.prompt > head.tokens and c2.prompt > head.tokens
    assert [(r.prompt, r.generated, r.answer_fnv) for r in shared.requests] == [
        (r.prompt, r.generated, r.answer_fnv) for r in alone.requests]
    assert not alone.prefixes and all(r.prefix_tokens == 0 for r in alone.requests)
    assert shared.prefix_summary is not None
    assert shared.prefix_summary.prefill_tokens_saved == head.tokens


def test_killed_worker_is_recomputed(served: tuple[BuildConfig, dict[str, str]]) -> None:
    cfg, outputs = served
    res = parse_serve(outputs[KILLED])
    check_run(res, generated(4, 32, 4, 3), cfg)
    rec = [e for e in res.events if e.kind == "recompute"]
    assert [(e.id, e.attempt, e.status) for e in rec] == [("R1", 1, -1)]
    assert {r.id: r.attempts for r in res.requests}["R1"] == 2
    assert "usertrap" not in outputs[KILLED] and "panic" not in outputs[KILLED]


def test_out_of_memory_kills_are_recomputed(served: tuple[BuildConfig, dict[str, str]]
                                            ) -> None:
    """Lazy sbrk admits all six 2048-slot requests; filled, they need more pages than the
    guest has, so the kernel kills some in their page faults and the server runs them
    again. Nothing is lost and every page comes back."""
    cfg, outputs = served
    if FILL not in outputs:
        pytest.skip(BY_DESIGN + "the fill run is made on lazy1-cow1 only")
    out = outputs[FILL]
    res = parse_serve(out)
    work = generated(*FILL_ARGS)
    assert res.start is not None and res.summary is not None
    s = shape(2048)
    assert len(work) * max_kv_pages(s) > res.start.free_pages  # they cannot all fill
    assert res.error is None
    check_requests(res, work, cfg.lazy, filled=True)
    check_summary(res)
    check_admission(res, work, cfg.lazy, cfg.cow)
    kills = [ln for ln in out.splitlines() if "usertrap: " in ln]
    rec = [e for e in res.events if e.kind == "recompute"]
    # every recompute is a kill; a kill need not be one: the OOM killer may pick a worker
    # that has just delivered its answer and not yet begun exit() (docs/smolserve.md)
    assert rec and len(rec) == res.summary.recomputed <= len(kills)
    assert all(e.status == -1 for e in rec)
    assert res.summary.peak_concurrent == len(work)


def test_serving_plot_is_readable(served: tuple[BuildConfig, dict[str, str]],
                                  tmp_path: Path) -> None:
    import matplotlib.image

    from nexos.programs.plot import write_serve_plot

    cfg, outputs = served
    rec = ServeRecord(cfg.name, cfg.lazy, cfg.cow, cfg.cpus, SEED32, 0.0, None,
                      parse_serve(outputs[SEED32]))
    png = write_serve_plot([rec], tmp_path)
    img = matplotlib.image.imread(png)
    assert img.shape[0] > 200 and img.shape[1] > 200


def test_errors_are_one_line(serve_runs: SharedRuns) -> None:
    outputs = serve_runs[CONFIGS[-1].name]   # lazy1-cow1's boot (boot_commands)
    assert isinstance(outputs, dict)
    for cmd, why in ERRORS.items():
        out = outputs[cmd]
        res = parse_serve(out)
        assert res.error is not None and why in res.error, out
        assert out.count("[smolserve] error:") == 1
        assert "usertrap" not in out and "panic" not in out


def test_nexos_serve_json_carries_every_figure(build_kernel) -> None:
    for cfg in (CONFIGS[0], CONFIGS[-1]):
        build_kernel(cfg, llm=True)
    p = subprocess.run([sys.executable, "-m", "nexos", "serve", "--workload", "seed32",
                        "--no-build", "--json"], cwd=REPO, capture_output=True, text=True,
                       timeout=2 * RUN_TIMEOUT)
    assert p.returncode == 0, p.stderr
    records = json.loads(p.stdout)
    assert [r["config"] for r in records] == ["lazy0-cow0", "lazy1-cow1"]
    for r, cfg in zip(records, (CONFIGS[0], CONFIGS[-1])):
        assert r["problem"] is None and r["error"] is None and r["cpus"] == 2
        assert set(r["summary"]) == {
            "requests", "completed", "peak_concurrent", "queued", "recomputed",
            "reserved_kv_pages", "mapped_kv_pages", "waste_percent", "peak_used_pages",
            "tokens_per_s"}
        assert set(r["memory"]) == {"baseline_free_pages", "final_free_pages", "leaked_pages"}
        for line, w in zip(r["requests"], seed32()):
            s = shape(w.max_len)
            used = w.prompt + w.gen
            assert line["used_slots"] == used
            assert line["reserved_kv_pages"] == max_kv_pages(s)
            assert line["mapped_kv_pages"] == (distinct_kv_pages(s, used) if cfg.lazy
                                               else max_kv_pages(s))
        kinds = {e["kind"] for e in r["events"]}
        assert {"admit", "finish"} <= kinds
        assert all({"t_ms", "running", "used_pages"} <= set(e) for e in r["events"])


# ------------------------------------------------------------------------ the parser

def transcript(name: str) -> tuple[str, str]:
    """(header, console text) of tests/transcripts/<name>.txt."""
    header, _, body = (TRANSCRIPTS / f"{name}.txt").read_text(encoding="utf-8").partition("\n")
    assert header.startswith("# scripts/serve_transcripts.py guest ")
    return header, body


@pytest.mark.parametrize("name", sorted(p.stem for p in TRANSCRIPTS.glob("serve-*.txt")))
def test_parser_reads_every_transcript(name: str) -> None:
    header, body = transcript(name)
    res = parse_serve(body)
    if "error" in name:
        assert res.error is not None and res.summary is None
        return
    assert res.summary is not None and res.memory is not None
    lazy, cow = int(name[-6]), int(name[-1])
    assert res.start is not None and (res.start.lazy_alloc, res.start.cow_alloc) == (lazy, cow)
    check_summary(res)


def test_parser_transcript_figures(build_kernel) -> None:  # type: ignore[no-untyped-def]
    """The figures of real runs add up; the admits' page-cache pages are the model file's
    (model_file_pages reads what the LLM image of the last configuration carries: built
    first)."""
    build_kernel(CONFIGS[-1], llm=True)
    _, body = transcript("serve-seed32-lazy0-cow0")
    res = parse_serve(body)
    check_run(res, seed32(), BuildConfig(0, 0, cpus=2))
    _, body = transcript("serve-generated-lazy1-cow0")
    check_run(parse_serve(body), generated(4, 64, 4, 1), BuildConfig(1, 0, cpus=2))
    _, body = transcript("serve-queue-lazy0-cow0")
    res = parse_serve(body)
    check_run(res, generated(*QUEUE_ARGS), BuildConfig(0, 0, cpus=2))
    assert res.summary is not None and res.summary.queued > 0
    _, body = transcript("serve-killed-lazy1-cow1")
    res = parse_serve(body)
    assert [e.kind for e in res.events].count("recompute") == 1
    assert res.to_json()["summary"]["recomputed"] == 1  # type: ignore[index]


@pytest.mark.parametrize("mangle", [
    lambda t: t.replace("peak_concurrent=", "peak="),
    lambda t: t.replace(" recomputed=0", ""),
    lambda t: t.replace("waste_percent=99%", "waste_percent=99"),
    lambda t: t.replace("[smolserve] memory", "[smolserve] memoir"),
    lambda t: t.split("[smolserve] SERVE_SUMMARY")[0],
    lambda t: t.replace("reason=watermark", "reason=tired"),
])
def test_parser_rejects_broken_output(mangle) -> None:  # type: ignore[no-untyped-def]
    _, body = transcript("serve-queue-lazy0-cow0")
    with pytest.raises(ParseError):
        parse_serve(mangle(body))
