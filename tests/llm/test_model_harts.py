"""The model's speed paths, booted for real on the real SmolLM2-135M: a prompt fed in
blocks (forward_block, --prefill-block), matvecs split across two harts (--harts,
docs/harts.md) and --chat's prompt cache (the K/V rows of the last prompt's prefix read
from /chat.kv) give the same greedy tokens and the same final logits, bit for bit, as one
position at a time on one hart, and map the same KV pages; in both policies of each flag
(lazy0-cow0 and lazy1-cow1: the helpers are forked, so COW decides how they share).
Bad values of the new options are one error line each. The K/V rows themselves are held
equal on the host (tests/llm/test_smolprobe_q.py, --test-kv-hash)."""

from __future__ import annotations

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import find_panic, parse_smolprobe
from support import needs_smollm2

pytestmark = pytest.mark.qemu

# The two corners hold each flag's two policies: the answer is arithmetic, the same in all
# four configurations, and the other two add no path of their own (the four configurations
# run the model on two harts in tests/serve/test_smolserve.py).
MATRIX = [(0, 0), (1, 1)]
# the logits' hash, not the 49152 numbers (seconds over the UART a run): bit for bit either way
CHAT = 'smolprobe --chat "What is the capital of France?" --print-tokens --print-logits-hash'
NO_CACHE = "--prompt-cache none"


@needs_smollm2
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=[f"lazy{a}-cow{b}" for a, b in MATRIX])
def test_blocks_and_harts_give_the_same_answer(build_kernel, repo, lazy, cow):
    build_kernel(BuildConfig(lazy, cow), llm=True)
    with QemuSession.for_config(BuildConfig(lazy, cow, cpus=2), repo, llm=True) as s:
        runs = {}
        # "cache saved" is both speed paths at once (the defaults: blocks and every hart),
        # its rows saved to /chat.kv on the way; "cache reused" reads them back. Its
        # answer is decoded a position at a time on both harts, so the final logits it
        # hashes are the harts' path alone. Blocks alone (one hart, nothing forked) only
        # where lazy sbrk makes their page counts a question; the eager kernel maps the
        # whole reservation either way.
        ways = {"one": f"--harts 1 --prefill-block 1 {NO_CACHE}",
                **({"blocks": f"--harts 1 {NO_CACHE}"} if lazy else {}),
                "cache saved": "", "cache reused": ""}   # --chat's default: /chat.kv
        for name, opts in ways.items():
            out = s.run(f"{CHAT} {opts}", timeout=600).output
            assert find_panic(out) is None, out
            r = parse_smolprobe(out)
            assert r.error is None and r.timing is not None and r.summary is not None, out
            runs[name] = r
        first = runs["one"]
        assert first.text is not None and "Paris" in first.text
        assert first.logits_hash is not None and first.logits_hash.n == 49152
        for name, r in runs.items():
            assert (r.tokens, r.logits_hash) == (first.tokens, first.logits_hash), name
            assert r.summary == first.summary, name
        assert [r.timing.harts for r in runs.values()] == [1, 1, 2, 2][1 - lazy:]
        caches = [r.prompt_cache for r in runs.values()]
        assert caches[:-2] == [None] * (len(runs) - 2)
        assert [(c.reused_tokens, c.saved_tokens) for c in caches[-2:] if c] == [(0, 37), (36, 0)]
        # the default is every hart the kernel runs
        seed = parse_smolprobe(s.run("smolprobe --prompt-tokens 1,2,3 --gen-len 10").output)
        assert seed.timing is not None and seed.timing.harts == 2
        assert seed.summary is not None and seed.summary.actual_mapped_pages == (
            2880 if lazy == 0 else 180)


@needs_smollm2
def test_bad_harts_and_blocks_are_one_error_line(build_kernel, repo):
    build_kernel(BuildConfig(1, 1), llm=True)
    cases = {"--harts 3": "--harts 3: the kernel runs 2 harts",
             "--harts 0": "--harts: 0 is out of range",
             "--harts -1": "--harts: -1 is out of range",
             "--prefill-block 0": "--prefill-block: 0 is out of range",
             "--prefill-block 65": "--prefill-block: 65 is out of range",
             "--samples 2 --harts 2": "--harts N > 1 does not go with --samples"}
    with QemuSession.for_config(BuildConfig(1, 1, cpus=2), repo, llm=True) as s:
        for opts, msg in cases.items():
            out = s.run(f"smolprobe --prompt-tokens 1,2 --gen-len 2 {opts}").output
            assert find_panic(out) is None and "usertrap" not in out, out
            errors = [ln for ln in out.splitlines() if ln.startswith("[smolprobe] error: ")]
            assert len(errors) == 1 and msg in errors[0], (opts, out)
