"""smolserve_weights: the pages that hold the weights while 8 workers decode, per
configuration.

Boots the LLM image in each configuration (two harts, 512 MiB) and runs `smolserve
--requests 8 --max-len 64` over the image's /model.bin, mapped from the file (docs/smolprobe.md
"The weights: mapped or read"). At each admission smolserve prints the page cache's pages
(`pagecache_pages`, the whole system's: the mapped model's pages, each once). The figure is
that count with all 8 workers running against the model file's pages. Target of the mapped
model, printed, never asserted: <= 1.05 x the file's pages in every configuration,
COW_ALLOC=0 included (a copying fork copies anonymous pages only; the weights are the
file's).
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, build, main, repo, serve_run

from nexos.machine.config import BuildConfig
from nexos.machine.limits import PAGE_SIZE as PAGE

NAME = "smolserve_weights"
CPUS = 2


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=8, help="workers running at once")
    p.add_argument("--configs", default="lazy0-cow0,lazy0-cow1,lazy1-cow0,lazy1-cow1",
                   help="configurations")


def file_pages(cfg: BuildConfig) -> int:
    """Pages of the model file the image carries as /model.bin (the prepared form of the
    checkpoint its model.list names)."""
    listed = cfg.build_dir(repo()) / "model.list"
    source = listed.read_text().strip()
    prepared = repo() / "build" / "models" / "prepared" / source.rsplit("/", 1)[-1]
    if not prepared.is_file():
        raise BenchError(f"{prepared}: the image's prepared model is missing (build first)")
    return -(-prepared.stat().st_size // PAGE)


def measure(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    cmd = f"smolserve --requests {args.requests} --max-len 64"
    for name in args.configs.split(","):
        cfg = BuildConfig.parse(name, cpus=CPUS)
        if not args.no_build:
            build(cfg, llm=True)
        res = serve_run(cfg, cmd)
        full = [e.pagecache_pages for e in res.events
                if e.kind == "admit" and e.running == args.requests and e.pagecache_pages]
        if not full:
            raise BenchError(f"`{cmd}` on {cfg.name}: the {args.requests} workers never ran "
                             "at once")
        pages = file_pages(cfg)
        note = f"{cfg.name}, {args.requests} workers running, {CPUS} harts"
        figures += [
            Figure(NAME, "page-cache pages with every worker running", full[0],
                   f"pages (the file: {pages})", note=note),
            Figure(NAME, "weight pages / the model file's pages", full[0] / pages, "×", 1.05,
                   "le", note),
        ]
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
