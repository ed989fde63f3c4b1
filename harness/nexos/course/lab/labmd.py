"""LAB.md: the students' page of a starter tree, made from its regions and the lab plan."""

from __future__ import annotations

from nexos.course.grade import SMALL_CHECK_MEMSIZE, SWAP_PER_RAM
from nexos.course.lab.markers import Region
from nexos.course.lab.plan import labs_of, mechanism_plan

TITLES = {"lazy": "Lazy allocation (`LAZY_ALLOC=1`)", "cow": "Copy-on-write fork (`COW_ALLOC=1`)",
          "mmap": "mmap and the page cache (every configuration)",
          "swap": "Swap and reclaim (every configuration, with `SWAPSIZE=MiB`)"}

TASKS = {
    "lazy": """\
`sbrk(n > 0)` must only raise `p->sz` when `LAZY_ALLOC=1`, and `sbrklazy(n > 0)` (`how ==
SBRK_LAZY` in `growproc()`) in every configuration; the first load or store on a
heap page then maps a zeroed page (`vmfault()` already sends those faults to
`lazyfault()`), and `copyin`/`copyout` fault such pages in as if user code had touched
them. Today every `sbrk` is eager and a fault on a missing page kills the process. The
contract, case by case, is in docs/memory.md ("Lazy allocation contract"); count each
mapped page in `p->lazy_faults` (memstat, same page).""",
    "cow": """\
`fork()` must share the parent's pages copy-on-write when `COW_ALLOC=1`: each writable page
becomes read-only + `PTE_COW` in parent and child, each child PTE owns one more page
reference, and the first store (or `copyout`) into such a page gives that PTE a private
writable page, by copying it or, when it is the last reference, by taking it over. Today
fork copies every page. `kalloc()`/`kfree()` already count references; `vmfault()` and
`userpte()` already send COW stores to `cowfault()`. The contract is in docs/memory.md
("Copy-on-write contract", "How fork walks the page table"); keep `p->cow_faults`,
`cow_copies`, `cow_reuses` and memstat's `shared_pages` exact (memstat, same page).""",
    "mmap": """\
`mmap()` must map a regular file's pages into the process and `munmap()` remove them, in
every configuration: with `LAZY_ALLOC=0` `sys_mmap()` maps every page at once, with
`LAZY_ALLOC=1` each page is mapped on its first touch (`vmfault()` already sends that fault,
and the first store to a file page, to `mmapfault()`). Each file page is one physical page
of the page cache, shared by every mapping of it: `pagecache_get()` reads it in on a miss,
`pagecache_trim()` drops the pages nobody maps any more. A `MAP_SHARED` page is mapped
read-only until its first store makes it writable (dirty); removing it writes it back to
the file (`writeback()`). Today `mmap()` returns -1. Given: the argument checks
(`mmapok()`), the address choice (`chooseaddr()`), fork (`mmap_fork()`), exit and exec
(`mmap_unmapall()`), the `MAP_PRIVATE` store (`cowfault()`) and the cache's chain helpers
(`lookup()`, `insert()`, `drop()`, `gethit()`). The contract is in docs/memory.md ("mmap
and the page cache": regions, the ownership rule, write-back, errors); keep memstat's
`file_pages` and `pagecache_pages` exact, and free every page when the last mapping goes.""",
    "swap": """\
With a second virtio disk (`SWAPSIZE=MiB`) user memory must outgrow RAM: when free pages run
low, reclaim pages user pages out to the disk's page-sized slots, and a fault on a paged-out
page reads it back. You write the slot table in kernel/swap.c (`swap_alloc()` hands out a free
slot with one reference, `swap_dup()` and `swap_put()` count the paged-out PTEs that name a
slot, the last `swap_put()` frees it, `swap_free_slots()` says how many are free), the clock's
choice in `uvmpageout()` (a resident user page with `PTE_A` set loses it, its second chance;
one still clear goes: a clean file page is dropped, an anonymous page whose PTE holds its only
reference is paged out: a slot, and a PTE that names it with `PTE_SWAPPED` and the page's
flags), the page-in in `swapfault()` (a new page, the slot read into it, the old flags back,
the slot's reference given back; reading the following slots in the same request is the
given solution's optimisation, one page is enough) and fork's share of a paged-out PTE in
`forkleaves()`. Today there is never a free slot, so reclaim pages nothing out and memory
runs out at RAM, as without swap. Given: the disk I/O (`swap_read()`, `writeout()`), the
clock's hand over every process and its locking (`reclaim()`, `visit()`), the walk of
`uvmpageout()`, the choke points that call reclaim (`vmreserve()`, and `oomretry()` for a
fault) and `vmfault()` sending a paged-out PTE to `swapfault()`, and the unmap of a
paged-out PTE (`uvmunmap()`). The contract is in docs/memory.md ("Swap and reclaim": slots,
the paged-out PTE, reclaim, the locks, out of swap); keep memstat's `swapped_pages`,
`swap_slots_used`, `swap_ins` and `swap_outs` exact, and give every frame and slot back when
a process shrinks or exits.""",
}

TESTS = {"lazy": "lazytests", "cow": "cowtests", "mmap": "mmaptests", "swap": "swaptest"}
# The machine the grade boots each lab's test program on (grade.py: lazytests, cowtests and
# swaptest on the small machine, mmaptests on the configuration's own).
FLAGS = {"lazy": f"LAZY_ALLOC=1 COW_ALLOC=0 MEMSIZE={SMALL_CHECK_MEMSIZE}",
         "cow": f"LAZY_ALLOC=0 COW_ALLOC=1 MEMSIZE={SMALL_CHECK_MEMSIZE}",
         "mmap": "LAZY_ALLOC=1 COW_ALLOC=0",
         "swap": (f"LAZY_ALLOC=1 COW_ALLOC=1 MEMSIZE={SMALL_CHECK_MEMSIZE} "
                  f"SWAPSIZE={SWAP_PER_RAM * SMALL_CHECK_MEMSIZE}")}
EXAMPLE = {"lazy": "sparse", "cow": "counts", "mmap": "shared",  # one test of each program
           "swap": "pattern"}
# The other configuration a lab without a flag must work in too.
ALSO = {"mmap": "and once more with `LAZY_ALLOC=0` (every page mapped by `sys_mmap()`).",
        "swap": "and once more with `LAZY_ALLOC=0 COW_ALLOC=0` (an eager `sbrk` pages out "
                "pages of the very call that maps them; fork copies)."}


def _where(regions: list[Region], one: str) -> list[str]:
    """One bullet per file: the functions whose marked parts are missing."""
    by_file: dict[str, list[str]] = {}
    for r in regions:
        if r.lab == one:
            name = f"`{r.function}()`" if r.function else f"line {r.begin}"
            names = by_file.setdefault(r.path, [])
            if name not in names:
                names.append(name)
    return [f"- `{path}`: {', '.join(names)}" for path, names in sorted(by_file.items())]


def _section(regions: list[Region], one: str) -> list[str]:
    return [f"## {TITLES[one]}", "", TASKS[one], "", "Where (each spot is marked "
            f"`// LAB {one}: TODO`; `grep -rn 'LAB {one}' kernel/`):", "",
            *_where(regions, one), "",
            "Try it:", "", "```", f"make qemu {FLAGS[one]}", f"$ {TESTS[one]}",
            f"$ {TESTS[one]} {EXAMPLE[one]}   # one test by name",
            "```", *_also(one), ""]


def _also(one: str) -> list[str]:
    """mmap and swap: the other policy too (both must work)."""
    return ["", ALSO[one]] if one in ALSO else []


def _intro(labs: tuple[str, ...]) -> list[str]:
    """What fails where for the labs without a flag."""
    lines = []
    if "mmap" in labs:
        lines.append("`mmaptests` fails in every configuration until mmap is written (`mmap()` "
                     "returns -1); no other check of the grade uses mmap.")
    if "swap" in labs:
        lines.append("`swaptest` fails in every configuration until swap is written: the grade "
                     f"boots it with {SMALL_CHECK_MEMSIZE} MiB of RAM and a swap disk of "
                     f"{SWAP_PER_RAM}x that, and no slot is ever "
                     "free, so no test can use more than RAM; the other checks boot without "
                     "swap, where reclaim does nothing.")
    return lines


def lab_md(lab: str, regions: list[Region]) -> str:
    """The text of LAB.md for a starter tree of `lab` whose removed regions are `regions`."""
    labs = labs_of(lab)
    lines = [f"# NexOS lab: {' and '.join(TITLES[x] for x in labs)}", "",
             "This tree is a working NexOS kernel with the mechanism below left out: the "
             "functions named here have their marked parts replaced by a stub. Built with "
             "the flags off (`LAZY_ALLOC=0 COW_ALLOC=0`) it is the eager kernel and passes "
             "`usertests`; with a flag on, the tests of that flag fail until you write it.",
             *_intro(labs), ""]
    for one in labs:
        lines += _section(regions, one)
    lines += ["## Grading", "",
              "Set up once (`bash scripts/setup.sh`: cross compiler, QEMU, `.venv`, and the "
              "model file the smolprobe checks run, fetched into `build/assets/`; where your "
              "course hands you that file, set `NEXOS_GGUF=/path/to/it` first), then",
              "", "```", f"make grade LAB={lab}        # writes grade.xml (JUnit)",
              f".venv/bin/nexos grade --lab {lab}   # the same, with a points table", "```",
              "", "The grade builds all four configurations and runs every check in each. "
              "These checks score the lab (they fail in this tree as given):", ""]
    for cfg, names in mechanism_plan(lab):
        lines.append(f"- `{cfg.name}`: {', '.join(f'`{n}`' for n in names)}")
    lines += ["", "All the other checks pass already and must still pass when you are done. "
              "The checks are described in docs/harness.md (\"Grading\") and the test "
              "programs in docs/testing.md.", ""]
    return "\n".join(lines)
