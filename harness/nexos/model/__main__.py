"""`python -m nexos.model ARGS` runs `nexos model ARGS`, with nexos's one-line errors (the
Makefile converts the real model this way)."""

import sys

from nexos.clikit import NexosGroup
from nexos.model.cli import model


def main() -> None:
    NexosGroup("nexos", commands={"model": model}).main(["model", *sys.argv[1:]],
                                                        prog_name="nexos")


if __name__ == "__main__":
    main()
