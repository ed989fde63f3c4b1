"""Host side of the guest's `cksum` and `mkbig` programs, so tests can check guest data.

`cksum` is FNV-1a 64 over 8-byte little-endian words (a trailing partial word zero-padded).
FNV-1a is sequential, so large files are summed by a tiny C program compiled on first use.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MKBIG_MULT = 0x9E3779B97F4A7C15

_C_SOURCE = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 1; }
  static unsigned char buf[1 << 20];
  uint64_t h = 0xcbf29ce484222325ULL, total = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    total += n;
    while (n % 8) buf[n++] = 0;           /* only the last read can be short */
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w; memcpy(&w, buf + i, 8);
      h ^= w; h *= 0x100000001b3ULL;
    }
  }
  printf("%016llx %llu\n", (unsigned long long)h, (unsigned long long)total);
  return 0;
}
"""


def fnv_words(data: bytes) -> int:
    """FNV-1a 64 over little-endian words, in Python (for small inputs)."""
    if len(data) % 8:
        data += b"\0" * (8 - len(data) % 8)
    h = FNV_OFFSET
    for i in range(0, len(data), 8):
        h ^= int.from_bytes(data[i:i + 8], "little")
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv_file(path: Path, workdir: Path) -> int:
    """FNV-1a 64 of a (large) file, with the compiled helper."""
    exe = workdir / "fnvsum"
    if not exe.exists():
        src = workdir / "fnvsum.c"
        src.write_text(_C_SOURCE)
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe), str(path)], check=True, capture_output=True, text=True)
    return int(out.stdout.split()[0], 16)


def mkbig_bytes(mib: int, seed: int) -> bytes:
    """What the guest's `mkbig PATH MIB SEED` writes: word i = (i * MULT) ^ seed."""
    i = np.arange(mib * 1024 * 1024 // 8, dtype=np.uint64)
    with np.errstate(over="ignore"):
        words = (i * np.uint64(MKBIG_MULT)) ^ np.uint64(seed)
    return words.astype("<u8").tobytes()


def parse_cksum(output: str) -> tuple[int, int]:
    """(checksum, bytes) from the guest's `cksum <hex> <bytes> <path>` line."""
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "cksum":
            return int(parts[1], 16), int(parts[2])
    raise AssertionError(f"no cksum line in guest output:\n{output}")
