"""Expected KV-cache page counts (docs/kvcache.md), computed from the model shape: the
Python twin of user/llm/kv.c, which tests/llm/test_kvcache.py holds equal to it.

The KV cache is one page-aligned sbrk reservation laid out as key[layer][seq][kv_dim] then
value[layer][seq][kv_dim], float32. That is 2*n_layers regions of seq_len*kv_dim*4 bytes each;
region r starts at byte r*seq_len*kv_dim*4 of the reservation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexos.machine.limits import PAGE_SIZE as PAGE
from nexos.machine.limits import SMOLPROBE_SEQ_LEN

FLOAT_BYTES = 4


@dataclass(frozen=True)
class KvShape:
    """The model dimensions that decide the KV-cache layout (SmolLM-135M defaults)."""

    n_layers: int = 30
    n_kv_heads: int = 3
    head_dim: int = 64
    seq_len: int = SMOLPROBE_SEQ_LEN  # smolprobe's default --seq-len

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def region_bytes(self) -> int:
        """Bytes of one (layer, K or V) region."""
        return self.seq_len * self.kv_dim * FLOAT_BYTES

    def with_seq_len(self, seq_len: int) -> KvShape:
        return KvShape(self.n_layers, self.n_kv_heads, self.head_dim, seq_len)

    @classmethod
    def from_checkpoint(cls, path: Path, seq_len: int = SMOLPROBE_SEQ_LEN) -> KvShape:
        """Read the dimensions from a NexOS checkpoint header (docs/checkpoint.md); raises
        nexos.model.CheckpointError for a file that is not one."""
        from nexos.model.format import read_header  # numpy: not on every command's path

        cfg = read_header(path)
        return cls(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, seq_len)


def max_kv_pages(shape: KvShape) -> int:
    """Pages of the whole reservation: ceil(2*n_layers*seq_len*kv_dim*4 / 4096)."""
    total = 2 * shape.n_layers * shape.region_bytes
    return -(-total // PAGE)


def _region_spans(shape: KvShape, rows: int) -> list[tuple[int, int]]:
    """The first and last page that rows [0, rows) of each region touch, region by region
    (rows clamped to [0, seq_len]; no spans for no rows)."""
    rows = max(0, min(rows, shape.seq_len))
    if rows == 0:
        return []
    row_bytes = shape.kv_dim * FLOAT_BYTES
    starts = (r * shape.region_bytes for r in range(2 * shape.n_layers))
    return [(s // PAGE, (s + rows * row_bytes - 1) // PAGE) for s in starts]


def active_pages_est(shape: KvShape, rows: int) -> int:
    """Pages that rows [0, rows) span, summed over the 2*n_layers regions (kv_region_pages:
    a page two regions share counts twice)."""
    return sum(last - first + 1 for first, last in _region_spans(shape, rows))


def distinct_kv_pages(shape: KvShape, rows: int) -> int:
    """Distinct pages that rows [0, rows) touch, each once (kv_distinct_pages): what the
    page table maps for them under lazy allocation."""
    pages: set[int] = set()
    for first, last in _region_spans(shape, rows):
        pages.update(range(first, last + 1))
    return len(pages)


def saved_percent(max_pages: int, actual: int) -> int:
    """floor(100 * saved / max), as smolprobe prints it."""
    return (100 * (max_pages - actual)) // max_pages if max_pages else 0


def expected_verdict(reserve_mapped: int, max_pages: int) -> str:
    """LAZY_STYLE when the reserve mapped <= 1% of max, EAGER_STYLE when >= 90%, else MIXED."""
    if 100 * reserve_mapped <= max_pages:
        return "LAZY_STYLE"
    if 10 * reserve_mapped >= 9 * max_pages:
        return "EAGER_STYLE"
    return "MIXED"
