"""Expected KV-cache page counts (docs/smolprobe.md), computed from the model shape.

The KV cache is one page-aligned sbrk reservation laid out as key[layer][seq][kv_dim] then
value[layer][seq][kv_dim], float32. That is 2*n_layers regions of seq_len*kv_dim*4 bytes each;
region r starts at byte r*seq_len*kv_dim*4 of the reservation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

PAGE = 4096
FLOAT_BYTES = 4


@dataclass(frozen=True)
class KvShape:
    """The model dimensions that decide the KV-cache layout (SmolLM-135M defaults)."""

    n_layers: int = 30
    n_kv_heads: int = 3
    head_dim: int = 64
    seq_len: int = 256  # smolprobe's runtime_seq_len

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
    def from_checkpoint(cls, path: Path, seq_len: int = 256) -> KvShape:
        """Read the dimensions from a NexOS checkpoint header (docs/checkpoint.md)."""
        head = Path(path).read_bytes()[:64]
        if len(head) < 60 or head[:8] != b"NEXOSLM\0":
            raise ValueError(f"{path}: not a NexOS checkpoint (bad magic)")
        dim, _hidden, n_layers, n_heads, n_kv_heads = struct.unpack_from("<5I", head, 12)
        return cls(n_layers, n_kv_heads, dim // n_heads, seq_len)


def max_kv_pages(shape: KvShape) -> int:
    """Pages of the whole reservation: ceil(2*n_layers*seq_len*kv_dim*4 / 4096)."""
    total = 2 * shape.n_layers * shape.region_bytes
    return -(-total // PAGE)


def active_pages_est(shape: KvShape, rows: int) -> int:
    """Pages that rows [0, rows) span, summed over the 2*n_layers regions."""
    if rows <= 0:
        return 0
    rows = min(rows, shape.seq_len)
    row_bytes = shape.kv_dim * FLOAT_BYTES
    pages = 0
    for r in range(2 * shape.n_layers):
        start = r * shape.region_bytes
        end = start + rows * row_bytes  # exclusive
        pages += (end - 1) // PAGE - start // PAGE + 1
    return pages


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
