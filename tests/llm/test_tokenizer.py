"""The guest's byte-level BPE tokenizer (user/llm/tokenizer.c, docs/tokenizer.md) against
Hugging Face's `tokenizers` as the reference.

user/tests/tokcheck.c is compiled unchanged on the host against user/host/shim.c with the
model library (user/llm/, whose tokenizer is user/llm/tokenizer.c and
user/llm/unicode_classes.c). The reference is a `tokenizers.Tokenizer` built from the same
vocab and merges with SmolLM2's pre-tokenizer (Digits(individual_digits=True) then
ByteLevel(add_prefix_space=False, use_regex=True)), the ByteLevel decoder, and the GGUF's
control tokens as special added tokens. A synthetic tokenizer (merges learnt here
from a small text) needs no GGUF; the SmolLM2 tests skip when its GGUF is not found.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from nexos.model.tokenizer import (
    HEADER_FIELDS,
    HEADER_SIZE,
    TYPE_CONTROL,
    TYPE_NORMAL,
    TYPE_USER_DEFINED,
    ChatStrings,
    TokenizerError,
    TokenizerSpec,
    build_blob,
    byte_to_unicode,
    chatml_strings,
    read_blob_header,
    read_gguf_tokenizer,
    token_bytes,
    write_tokenizer_file,
)
from support import SMOLLM2_GGUF, needs_smollm2, shared_dir, shared_once

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CORPUS: list[str] = json.loads((DATA / "tokenizer_corpus.json").read_text(encoding="utf-8"))
PROMPT_1K = (DATA / "tokenizer_prompt_1k.txt").read_text(encoding="utf-8")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")


def pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                             use_regex=True)])


def reference(spec: TokenizerSpec) -> Tokenizer:
    """Hugging Face's tokenizer of spec: BPE over the vocab and merges, SmolLM2's
    pre-tokenizer, the ByteLevel decoder; control tokens special, user-defined ones not."""
    vocab: dict[str, int] = {}
    for i, t in enumerate(spec.tokens):
        vocab.setdefault(t, i)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=spec.merges))
    tk.pre_tokenizer = pre_tokenizer()
    tk.decoder = decoders.ByteLevel()
    added = [(spec.tokens[i], ty) for i, ty in enumerate(spec.token_types)
             if ty in (TYPE_CONTROL, TYPE_USER_DEFINED)]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in added if ty == TYPE_CONTROL])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in added if ty == TYPE_USER_DEFINED])
    return tk


# ---------------------------------------------------------------- the host build


@pytest.fixture(scope="session")
def tokcheck(host_programs: Path) -> Path:
    """user/tests/tokcheck.c built for the host (docs/tokenizer.md)."""
    return host_programs / "tokcheck"


def batch(tokcheck: Path, blob: Path, texts: list[bytes], tmp: Path,
          mode: str = "--batch", *flags: str) -> list[str]:
    """Run tokcheck's batch mode over texts (hex lines); its output lines."""
    f = tmp / "batch.hex"
    f.write_text("".join(t.hex() + "\n" for t in texts))
    p = subprocess.run([str(tokcheck), str(blob), *flags, mode, str(f)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len(texts)
    return lines


def encode_c(tokcheck: Path, blob: Path, texts: list[str], tmp: Path
             ) -> list[tuple[list[int], bytes]]:
    """(ids, decoded bytes) of each text by the C tokenizer."""
    out = []
    for line in batch(tokcheck, blob, [t.encode("utf-8") for t in texts], tmp):
        ids, dec = line.split(" ")
        out.append(([int(i) for i in ids.split(",")] if ids else [], bytes.fromhex(dec)))
    return out


def check_against_reference(tokcheck: Path, blob: Path, ref: Tokenizer, texts: list[str],
                            tmp: Path) -> None:
    """The C ids equal the reference's, and decode gives the text back, for every text."""
    got = encode_c(tokcheck, blob, texts, tmp)
    for text, (ids, dec) in zip(texts, got):
        want = ref.encode(text).ids
        assert ids == want, (text, ids, want)
        assert dec == text.encode("utf-8"), text
        assert ref.decode(want, skip_special_tokens=False) == text


def fuzz_texts(seed: int, n: int) -> list[str]:
    """Random texts from pieces that stress the pre-tokenizer's rules."""
    pool = (list("abcXYZ019 '\t\n\r.,!?-_()<>|\"") + [
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "  ", "   ", " \n",
        "é", "ß", "Ж", "λ", "中文", "한", "😀", "👍🏽", "\u00a0", "\u2003", "\u3000", "\u0085",
        "\u0663", "\u2167", "½", "²", "\u0301", "\u200d", "\u200b", "\x00", "\x1c", "\x7f",
        "<|im_start|>", "<|im_end|>", "<|im", "|>", "<s>", "<s>x", "hello", " world", "123",
    ])
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(0, 30))) for _ in range(n)]


# ---------------------------------------------------------------- a synthetic tokenizer

SYNTH_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a synthetic test assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

SYNTH_TEXT = (
    "the cat sat on the mat. the dog ate the bone; then the cat and the dog slept.\n"
    "    def f(x):\n        return x * 2  # twice\n"
    "don't they'll we're I'm it's 12345 67890 café naïve 中文中文 😀😀\n\t\t  \n"
)


def learn_merges(text: str, n: int) -> list[tuple[str, str]]:
    """n BPE merges learnt from text: the most frequent adjacent pair (ties: the
    greatest pair) merged in every word, n times."""
    words = Counter(tuple(p) for p, _ in pre_tokenizer().pre_tokenize_str(text))
    merges: list[tuple[str, str]] = []
    for _ in range(n):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


def synthetic_spec() -> TokenizerSpec:
    """Five added tokens (<s>x user-defined, the others control; <s> and <s>x overlap),
    the 256 byte tokens, learnt merges, and merges where rank order is not word order."""
    b2u = byte_to_unicode()
    added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "<s>x"]
    tokens = added + [b2u[b] for b in range(256)]
    types = [TYPE_CONTROL] * 4 + [TYPE_USER_DEFINED] + [TYPE_NORMAL] * 256
    merges = [("q", "q"), ("x", "y"), ("w", "xy"), ("y", "z"), ("x", "yz")]
    merges += [m for m in learn_merges(SYNTH_TEXT, 150) if m not in merges]
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
            types.append(TYPE_NORMAL)
    return TokenizerSpec(tokens, types, merges, bos=1, eos=2,
                         chat=chatml_strings(SYNTH_TEMPLATE))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Tokenizer, TokenizerSpec]:
    spec = synthetic_spec()
    blob = tmp_path_factory.mktemp("synth") / "synth.tok"
    blob.write_bytes(build_blob(spec))
    return blob, reference(spec), spec


SYNTH_CASES = [
    "qqq", "qqqq", "qqqqq", "wxyz", "xyz", "wxy", "<s>", "<s>x", "<s>xy", "a<s>b", "<s<s>>",
    "the cat", "then the dog", "12345", "don't", "café 中文", "", "x", " ", "  \n  ",
    "<|im_start|>user\nthe cat<|im_end|>\n",
]


def test_synthetic_equals_reference(tokcheck, synth, tmp_path):
    blob, ref, _ = synth
    check_against_reference(tokcheck, blob, ref, SYNTH_CASES + CORPUS, tmp_path)


def test_synthetic_fuzz_equals_reference(tokcheck, synth, tmp_path):
    blob, ref, _ = synth
    check_against_reference(tokcheck, blob, ref, fuzz_texts(1, 400), tmp_path)


def test_decode_skip_special_equals_reference(tokcheck, synth, tmp_path):
    """TOK_SKIP_SPECIAL leaves out control tokens and keeps user-defined ones (<s>x), as
    the reference's decode(skip_special_tokens=True) does."""
    blob, ref, _ = synth
    texts = ["<|im_start|>user\nthe cat<|im_end|>\n", "a<s>b<s>xc<|endoftext|>"] + CORPUS
    lines = batch(tokcheck, blob, [t.encode() for t in texts], tmp_path, "--batch",
                  "--skip-special")
    for text, line in zip(texts, lines):
        ids = ref.encode(text).ids
        assert bytes.fromhex(line.split(" ")[1]) == ref.decode(ids).encode(), text
    assert bytes.fromhex(lines[1].split(" ")[1]) == b"ab<s>xc"


def test_synthetic_chat_reads_the_template(tokcheck, synth):
    blob, ref, spec = synth
    assert spec.chat is not None
    assert spec.chat.default_system == "You are a synthetic test assistant."
    p = subprocess.run([str(tokcheck), str(blob), "--chat", "hi"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    want = spec.chat.render("hi")
    assert want == ("<|im_start|>system\nYou are a synthetic test assistant.<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert p.stdout.split("tokcheck text=", 1)[1] == want + "\n"
    ids = p.stdout.split("tokcheck ids=", 1)[1].split("\n", 1)[0]
    assert [int(i) for i in ids.split(",")] == ref.encode(want).ids
    p = subprocess.run([str(tokcheck), str(blob), "--chat", "--system", "Be brief.", "hi"],
                       capture_output=True, text=True)
    assert p.stdout.split("tokcheck text=", 1)[1] == spec.chat.render("hi", "Be brief.") + "\n"
    assert "system\nBe brief.<|im_end|>" in p.stdout


def test_invalid_utf8_and_every_byte_round_trip(tokcheck, synth, tmp_path):
    """Any bytes encode (invalid UTF-8 counts as punctuation) and decode back exactly."""
    blob, _, _ = synth
    rng = random.Random(7)
    texts = [bytes(range(256)), b"\xff\xfe\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80", b"\xe4\xb8",
             b"\x00\x00 \x00a"] + [rng.randbytes(rng.randrange(1, 200)) for _ in range(200)]
    for text, line in zip(texts, batch(tokcheck, blob, texts, tmp_path)):
        ids, dec = line.split(" ")
        assert bytes.fromhex(dec) == text
        assert len(ids.split(",")) <= len(text)


# ---------------------------------------------------------------- the pre-tokenizer


def sample_code_points() -> list[int]:
    """Every assigned code point of this Python's Unicode (not private use, not a
    surrogate), and every 97th of the rest (unassigned and private use)."""
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        cat = unicodedata.category(chr(cp))
        if cat not in ("Cn", "Co") or cp % 97 == 0:
            out.append(cp)
    return out


def test_pre_tokenizer_classes_every_code_point(tokcheck, synth, tmp_path):
    """The C pieces equal Hugging Face's for every assigned code point next to letters,
    punctuation, spaces, tabs and digits. Code points unassigned in this Python's Unicode
    are not compared: the reference may know them from a newer Unicode."""
    blob, _, _ = synth
    pt = pre_tokenizer()

    def snippet(c: int) -> str:
        ch = chr(c)
        return f"a{ch}.{ch} {ch}\t{ch}1{ch}{ch}  "

    cps = [c for c in sample_code_points()
           if unicodedata.category(chr(c)) != "Cn" or c < 0x80]
    chunks = ["".join(snippet(c) for c in cps[i:i + 2048]) for i in range(0, len(cps), 2048)]
    lines = batch(tokcheck, blob, [c.encode("utf-8") for c in chunks], tmp_path, "--pieces")
    for text, line in zip(chunks, lines):
        want = [len(text[a:b].encode("utf-8")) for _, (a, b) in pt.pre_tokenize_str(text)]
        got = [int(k) for k in line.split(",")]
        if got != want:  # find the code point for the message
            for c in cps:
                s = snippet(c)
                w = [len(s[a:b].encode()) for _, (a, b) in pt.pre_tokenize_str(s)]
                g = batch(tokcheck, blob, [s.encode()], tmp_path, "--pieces")[0]
                assert [int(k) for k in g.split(",")] == w, (hex(c), g, w)
        assert got == want


def test_pre_tokenizer_rules(tokcheck, synth, tmp_path):
    """Hand-picked pieces: the examples of docs/tokenizer.md."""
    blob, _, _ = synth
    cases = {
        "don't they'll I'M": ["don", "'t", " they", "'ll", " I", "'", "M"],
        "a   1": ["a", "   ", "1"],
        " 123": [" ", "1", "2", "3"],
        "x\n\n  y  ": ["x", "\n\n ", " y", "  "],
        "hi  \tthere": ["hi", "  ", "\t", "there"],
        "...'s": ["...'", "s"],
        " 's": [" '", "s"],
        "<|im_start|>hi": ["<|im_start|>", "hi"],
        "a<s>xb": ["a", "<s>x", "b"],
    }
    texts = list(cases)
    lines = batch(tokcheck, blob, [t.encode() for t in texts], tmp_path, "--pieces")
    for text, line in zip(texts, lines):
        lens = [int(k) for k in line.split(",")]
        pieces, at = [], 0
        for k in lens:
            pieces.append(text.encode()[at:at + k].decode())
            at += k
        assert pieces == cases[text], text


def test_pre_tokenizer_fuzz_equals_reference(tokcheck, synth, tmp_path):
    """C pieces equal Hugging Face's on random texts (without added tokens, which the
    reference pre-tokenizer alone does not know)."""
    blob, _, _ = synth
    pt = pre_tokenizer()
    texts = [t.replace("<", "") for t in fuzz_texts(5, 800)]
    lines = batch(tokcheck, blob, [t.encode() for t in texts], tmp_path, "--pieces")
    for text, line in zip(texts, lines):
        want = [len(text[a:b].encode()) for _, (a, b) in pt.pre_tokenize_str(text)]
        assert ([int(k) for k in line.split(",")] if line else []) == want, text


def test_unicode_table_is_current():
    """user/llm/unicode_classes.c is what scripts/gen_unicode.py makes from this Python's
    unicodedata (skipped under a Python with another Unicode version)."""
    text = (ROOT / "user/llm/unicode_classes.c").read_text()
    version = text.split('uni_version[] = "', 1)[1].split('"', 1)[0]
    if version != unicodedata.unidata_version:
        pytest.skip(f"the table is Unicode {version}, this Python has "
                    f"{unicodedata.unidata_version}")
    p = subprocess.run([sys.executable, str(ROOT / "scripts/gen_unicode.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


# ---------------------------------------------------------------- the blob


def test_byte_alphabet_and_token_bytes():
    b2u = byte_to_unicode()
    assert sorted(b2u) == list(range(256)) and len(set(b2u.values())) == 256
    assert all(not c.isspace() for c in b2u.values())
    assert b2u[ord(" ")] == "Ġ" and b2u[ord("\n")] == "Ċ" and b2u[ord("a")] == "a"
    assert token_bytes("Ġthe") == b" the" and token_bytes("<|im_start|>") == b"<|im_start|>"
    assert token_bytes("ä½ł") == "你".encode()
    assert token_bytes("日本") == "日本".encode()  # outside the alphabet: its own UTF-8


def test_chatml_strings_errors():
    with pytest.raises(TokenizerError):
        chatml_strings("{{ messages }}")
    with pytest.raises(TokenizerError):
        chatml_strings(SYNTH_TEMPLATE.replace("'<|im_start|>system\n", "'<|x|>system\n"))


def test_blob_header_and_checks(synth, tmp_path):
    blob, _, spec = synth
    raw = blob.read_bytes()
    h = read_blob_header(raw)
    assert h["header_size"] == HEADER_SIZE and h["total_size"] == len(raw)
    assert h["n_vocab"] == len(spec.tokens) and h["n_merges"] == len(spec.merges)
    assert h["bos"] == 1 and h["eos"] == 2 and h["im_start"] == 1 and h["im_end"] == 2
    assert h["n_special"] == 5 and h["n_chat"] == 7
    assert all(h[k] % 4 == 0 for k in HEADER_FIELDS if k.startswith("off_"))
    with pytest.raises(TokenizerError):
        read_blob_header(raw[:-4])
    with pytest.raises(TokenizerError):
        read_blob_header(raw[:-8] + bytes(4) + raw[-4:])


def _with_checksum(raw: bytearray) -> bytes:
    """raw with its checksum recomputed (so that only the structural checks can object)."""
    h = 0x811C9DC5
    for (w,) in struct.iter_unpack("<I", bytes(raw[HEADER_SIZE:])):
        h = ((h ^ w) * 0x01000193) & 0xFFFFFFFF
    struct.pack_into("<I", raw, 8 + 4 * HEADER_FIELDS.index("checksum"), h)
    return bytes(raw)


def _loads(tokcheck: Path, data: bytes, tmp: Path) -> subprocess.CompletedProcess[str]:
    f = tmp / "t.tok"
    f.write_bytes(data)
    return subprocess.run([str(tokcheck), str(f), "abc <|im_end|> d"], capture_output=True,
                          text=True, timeout=30)


def test_loader_rejects_bad_blobs(tokcheck, synth, tmp_path):
    """Each corruption is one clear error line and status 1."""
    blob, _, _ = synth
    raw = blob.read_bytes()
    h = read_blob_header(raw)

    def word(name: str, value: int) -> bytes:
        b = bytearray(raw)
        struct.pack_into("<I", b, 8 + 4 * HEADER_FIELDS.index(name), value)
        return bytes(b)

    merges = bytearray(raw)
    struct.pack_into("<I", merges, h["off_merges"] + 4, h["n_vocab"])
    index = bytearray(raw)
    struct.pack_into("<I", index, h["off_index"] + 8, 0xFFFF)
    hslot = bytearray(raw)
    struct.pack_into("<I", hslot, h["off_hash"], h["n_merges"] + 1)
    cases = {
        "magic": b"XEXOSTOK" + raw[8:], "version": word("version", 2),
        "truncated": raw[:-4], "extended": raw + bytes(4), "short": raw[:50],
        "empty": b"", "checksum": raw[:-8] + b"\1\0\0\0" + raw[-4:],
        "vocab": word("n_vocab", 1 << 30), "hash_cap": word("hash_cap", 1000),
        "off": word("off_merges", len(raw)), "misaligned": word("off_hash", h["off_hash"] + 2),
        "bos": word("bos", h["n_vocab"]), "pretok": word("pretok", 9),
        "merge-id": _with_checksum(merges), "index": _with_checksum(index),
        "hash-slot": _with_checksum(hslot),
    }
    for what, data in cases.items():
        p = _loads(tokcheck, data, tmp_path)
        assert p.returncode == 1, (what, p.returncode, p.stdout)
        assert p.stderr.startswith("tokcheck: tokenizer: "), (what, p.stderr)
        assert len(p.stderr.splitlines()) == 1, what
    missing = subprocess.run([str(tokcheck), str(tmp_path / "nope.tok"), "x"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "cannot open" in missing.stderr


def test_loader_survives_random_header_words(tokcheck, synth, tmp_path):
    """Random values in any header word: a clean error or a working tokenizer, never a
    crash (a signal) or a hang."""
    blob, _, _ = synth
    raw = blob.read_bytes()
    rng = random.Random(3)
    for _ in range(60):
        b = bytearray(raw)
        i = rng.randrange(len(HEADER_FIELDS))
        v = rng.choice([0, 1, 3, 0xFFFFFFFF, 0x80000000, rng.randrange(1 << 32),
                        rng.randrange(len(raw) + 64)])
        struct.pack_into("<I", b, 8 + 4 * i, v)
        p = _loads(tokcheck, bytes(b), tmp_path)
        assert p.returncode in (0, 1), (HEADER_FIELDS[i], v, p.returncode)


def test_build_blob_refuses_a_merge_outside_the_vocab():
    with pytest.raises(TokenizerError):
        build_blob(TokenizerSpec(["a"], [TYPE_NORMAL], [("a", "b")], 0, 0))


# ---------------------------------------------------------------- SmolLM2's tokenizer

@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Tokenizer, TokenizerSpec]:
    """SmolLM2's tokenizer blob, `tokenizers`' reference of it, and the GGUF's tokenizer
    spec: made once per session for every worker."""
    assert SMOLLM2_GGUF is not None

    def make() -> tuple[Path, Tokenizer, TokenizerSpec]:
        spec = read_gguf_tokenizer(SMOLLM2_GGUF)
        blob = shared_dir(tmp_path_factory) / "smollm2.tok"
        size = write_tokenizer_file(SMOLLM2_GGUF, blob)
        assert size == blob.stat().st_size
        return blob, reference(spec), spec
    return shared_once(tmp_path_factory, "smollm2-tokenizer", make)


@needs_smollm2
def test_smollm2_corpus_equals_reference(tokcheck, smollm2, tmp_path):
    blob, ref, _ = smollm2
    texts = CORPUS + ["".join(CORPUS), "\n".join(CORPUS), PROMPT_1K]
    check_against_reference(tokcheck, blob, ref, texts, tmp_path)


@needs_smollm2
def test_smollm2_fuzz_equals_reference(tokcheck, smollm2, tmp_path):
    blob, ref, _ = smollm2
    check_against_reference(tokcheck, blob, ref, fuzz_texts(2, 500), tmp_path)


@needs_smollm2
def test_smollm2_capital_of_france(tokcheck, smollm2, tmp_path):
    blob, ref, spec = smollm2
    assert spec.chat is not None
    prompt = spec.chat.render("What is the capital of France?")
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n")
    got = encode_c(tokcheck, blob, ["The capital of France is", prompt], tmp_path)
    assert got[0][0] == ref.encode("The capital of France is").ids == [504, 3575, 282, 4649, 314]
    assert got[1][0] == ref.encode(prompt).ids
    p = subprocess.run([str(tokcheck), str(blob), "--chat", "What is the capital of France?"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ids = p.stdout.split("tokcheck ids=", 1)[1].split("\n", 1)[0]
    assert [int(i) for i in ids.split(",")] == got[1][0]
    assert got[1][0][0] == 1 and got[1][0][-4:] == [1, 520, 9531, 198]  # ...assistant\n


@needs_smollm2
def test_smollm2_blob_header(smollm2):
    blob, _, spec = smollm2
    h = read_blob_header(blob.read_bytes())
    assert (h["n_vocab"], h["n_merges"], h["n_special"]) == (49152, 48900, 17)
    assert (h["bos"], h["eos"], h["im_start"], h["im_end"]) == (1, 2, 1, 2)
    assert spec.chat == ChatStrings("<|im_start|>", "\n", "<|im_end|>\n",
                                    "You are a helpful AI assistant named SmolLM, trained by "
                                    "Hugging Face")


@needs_smollm2
def test_smollm2_encode_speed(tokcheck, smollm2, capsys):
    """A 1 KB prompt encodes in well under a millisecond on the host (docs/tokenizer.md
    quotes the numbers; the guest under QEMU is ~20x slower)."""
    blob, _, _ = smollm2
    runs = {}
    for name, text in {"prompt_1k": PROMPT_1K, "spaces_1k": " " * 1024,
                       "punct_1k": "!?" * 512, "cjk_1k": "中" * 341}.items():
        p = subprocess.run([str(tokcheck), str(blob), "--bench", "200", text],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        kv = dict(w.split("=") for w in p.stdout.split()[2:])
        runs[name] = int(kv["us_per_encode"])
    with capsys.disabled():
        print(f"\n[tokenizer] host us per encode: {runs}")
    assert runs["prompt_1k"] < 5000 and max(runs.values()) < 20000


# ---------------------------------------------------------------- in the guest

# Shell-safe texts (printable ASCII, no " or \) from the corpus: prose, digit runs,
# contractions, punctuation runs, runs of spaces; and UTF-8 text, which the console and the
# shell pass through byte for byte (Latin accents, CJK, typographic quotes and dashes).
GUEST_TEXTS = [t for t in CORPUS if t and t.isascii() and t.isprintable() and '"' not in t
               and "\\" not in t and len(t) <= 80][:24]
GUEST_TEXTS += ["café 中文", "naïve résumé — “quoted”", "日本語のテキスト"]


def guest_runs(build_kernel, commands: list[str]) -> list[str]:
    """Each command's output in one boot of the lazy1-cow0 kernel with the default real
    model as /model.bin (carriage returns removed)."""
    from nexos.machine.config import BuildConfig
    from nexos.machine.qemu import QemuSession

    cfg = BuildConfig(1, 0)
    build_kernel(cfg, llm=True)  # the default real model is the image's /model.bin
    with QemuSession.for_config(cfg, ROOT, llm=True) as qs:
        return [qs.run(c, timeout=600).output.replace("\r", "") for c in commands]


@pytest.mark.long
@pytest.mark.qemu
@needs_smollm2
def test_guest_prompt_tokens_equal_reference(build_kernel, smollm2, smollm2_checkpoint):
    """smolprobe --tokenize in the guest encodes as `tokenizers` does (its prompt line, which
    --prompt runs print from the same code: the test below checks theirs), reading only the
    header's and the tokenizer's pages of the mapped model on this lazy kernel."""
    from nexos.parse import parse_smolprobe

    _, ref, _ = smollm2
    assert len(GUEST_TEXTS) >= 12
    kinds = {"digits": "1234567", "contraction": "don't", "punctuation": "!!!???...,,,;;;:::",
             "spaces": "several    spaces     here"}
    assert set(kinds.values()) <= set(GUEST_TEXTS)
    outs = guest_runs(build_kernel, [f'smolprobe --tokenize --prompt "{t}"'
                                     for t in GUEST_TEXTS])
    model_pages = -(-smollm2_checkpoint.stat().st_size // 4096)  # the image's /model.bin
    for text, out in zip(GUEST_TEXTS, outs, strict=True):
        r = parse_smolprobe(out)
        assert r.ok and r.mode == "tokenize" and r.prompt is not None, out
        assert list(r.prompt) == ref.encode(text).ids, text
        assert r.tokenized is not None and r.tokenized.prompt_tokens == len(r.prompt)
        assert 0 < r.tokenized.file_pages < model_pages // 10, out  # the weights stay unread


@pytest.mark.qemu
@needs_smollm2
def test_guest_text_line_equals_reference_decode(build_kernel, smollm2):
    """The `text:` line of a guest --prompt run is what `tokenizers` decodes from the
    generated ids (control tokens skipped)."""
    from nexos.parse import parse_smolprobe

    _, ref, _ = smollm2
    prompts = ["Once upon a time", "The capital of France is", "1, 2, 3, 4,"]
    outs = guest_runs(build_kernel, [f'smolprobe --prompt "{p}" --gen-len 16 --print-tokens'
                                     for p in prompts])
    for p, out in zip(prompts, outs, strict=True):
        r = parse_smolprobe(out)
        assert r.ok and r.tokens is not None and r.text is not None, out
        assert list(r.prompt or ()) == ref.encode(p).ids
        assert r.text == ref.decode(list(r.tokens), skip_special_tokens=True), p
