"""LAB.md: the students' page of a starter tree, made from its regions and the lab plan."""

from __future__ import annotations

from nexos.lab.markers import Region
from nexos.lab.plan import labs_of, mechanism_plan

TITLES = {"lazy": "Lazy allocation (`LAZY_ALLOC=1`)", "cow": "Copy-on-write fork (`COW_ALLOC=1`)"}

TASKS = {
    "lazy": """\
`sbrk(n > 0)` must only raise `p->sz` when `LAZY_ALLOC=1`; the first load or store on a
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
}

TESTS = {"lazy": "lazytests", "cow": "cowtests"}
FLAGS = {"lazy": "LAZY_ALLOC=1 COW_ALLOC=0", "cow": "LAZY_ALLOC=0 COW_ALLOC=1"}


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
            f"$ {TESTS[one]} {'sparse' if one == 'lazy' else 'counts'}   # one test by name",
            "```", ""]


def lab_md(lab: str, regions: list[Region]) -> str:
    """The text of LAB.md for a starter tree of `lab` whose removed regions are `regions`."""
    labs = labs_of(lab)
    lines = [f"# NexOS lab: {' and '.join(TITLES[x] for x in labs)}", "",
             "This tree is a working NexOS kernel with the mechanism below left out: the "
             "functions named here have their marked parts replaced by a stub. Built with "
             "the flags off (`LAZY_ALLOC=0 COW_ALLOC=0`) it is the eager kernel and passes "
             "`usertests`; with a flag on, the tests of that flag fail until you write it.",
             ""]
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
