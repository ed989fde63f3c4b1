"""The sizes of a user program's image, read from its ELF file (no tools needed).

exec() (kernel/exec.c; docs/memory.md, "Page tables") maps every loadable segment eagerly,
each from the end of the one before it, starting at address 0: so a program's image takes
the pages [0, PGROUNDUP(end of the last segment)), text and data alike, and its guard page,
stack and heap come right after. `image_pages` is that count; it is what memstat's
`mapped_pages` holds for the program before it touches its heap (the stack aside).

Only what NexOS's user programs use is read: 64-bit little-endian ELF (RISC-V), program
headers of type PT_LOAD, and the section table for the names of a few sections.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from nexos.machine.limits import PAGE_SIZE as PAGE

PT_LOAD = 1
PF_X, PF_W = 1, 2
SHT_NOBITS = 8


class ElfError(ValueError):
    """The file is not a 64-bit little-endian ELF file, or its tables do not fit in it."""


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD program header: where it goes and how big it is in memory."""

    vaddr: int
    memsz: int
    filesz: int
    flags: int

    @property
    def end(self) -> int:
        """The first address past the segment."""
        return self.vaddr + self.memsz

    @property
    def pages(self) -> int:
        """Pages the segment's bytes touch (its first page to its last)."""
        if self.memsz == 0:
            return 0
        return (self.end - 1) // PAGE - self.vaddr // PAGE + 1

    @property
    def writable(self) -> bool:
        return bool(self.flags & PF_W)


@dataclass(frozen=True)
class Section:
    """One section header: its name, address and size in memory."""

    name: str
    addr: int
    size: int
    nobits: bool  # SHT_NOBITS (.bss): no bytes in the file


@dataclass(frozen=True)
class ElfImage:
    """What exec() maps of one ELF file."""

    path: Path
    segments: tuple[Segment, ...]
    sections: tuple[Section, ...]

    @property
    def end(self) -> int:
        """The first address past the last loadable segment."""
        return max((s.end for s in self.segments), default=0)

    @property
    def image_pages(self) -> int:
        """Pages exec() maps for the program: [0, PGROUNDUP(end)), see the module's text."""
        return -(-self.end // PAGE)

    @property
    def text_pages(self) -> int:
        """Pages of the read-only segments (text and read-only data)."""
        return sum(s.pages for s in self.segments if not s.writable)

    @property
    def data_pages(self) -> int:
        """Pages of the writable segments (data and bss)."""
        return sum(s.pages for s in self.segments if s.writable)

    def section(self, name: str) -> Section | None:
        """The section called name, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def describe(self) -> str:
        """One line for a transcript header, e.g. `22 image pages (text 21, data 1)`."""
        return (f"{self.image_pages} image pages (text {self.text_pages}, "
                f"data {self.data_pages})")


def _table(data: bytes, off: int, entsize: int, count: int, need: int) -> list[bytes]:
    """count entries of entsize bytes at off; ElfError when they do not fit."""
    if count and (entsize < need or off + entsize * count > len(data)):
        raise ElfError("an ELF table runs past the end of the file")
    return [data[off + i * entsize: off + (i + 1) * entsize] for i in range(count)]


def read_elf(path: Path) -> ElfImage:
    """The loadable segments and the sections of the ELF file at path."""
    data = Path(path).read_bytes()
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 54)
    segments = []
    for ph in _table(data, phoff, phentsize, phnum, 56):
        ptype, flags, _off, vaddr, _paddr, filesz, memsz = struct.unpack_from("<IIQQQQQ", ph)
        if ptype == PT_LOAD:
            segments.append(Segment(vaddr, memsz, filesz, flags))
    raw = [struct.unpack_from("<IIQQQQ", sh) for sh in _table(data, shoff, shentsize, shnum, 64)]
    names = b""
    if 0 < shstrndx < len(raw):
        _n, _t, _f, _a, stroff, strsize = raw[shstrndx]
        names = data[stroff:stroff + strsize]
    sections = []
    for name_off, stype, _flags, addr, _off, size in raw:
        name = names[name_off:names.find(b"\0", name_off)].decode(errors="replace")
        sections.append(Section(name, addr, size, stype == SHT_NOBITS))
    return ElfImage(Path(path), tuple(sorted(segments, key=lambda s: s.vaddr)),
                    tuple(sections))


def image_pages(path: Path) -> int:
    """Pages exec() maps for the program at path (read_elf(path).image_pages)."""
    return read_elf(path).image_pages
