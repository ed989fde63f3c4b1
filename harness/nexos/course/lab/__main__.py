"""`python -m nexos.course.lab ARGS` runs `nexos lab ARGS`, with nexos's one-line errors."""

import sys

from nexos.clikit import NexosGroup
from nexos.course.lab.cli import lab


def main() -> None:
    NexosGroup("nexos", commands={"lab": lab}).main(["lab", *sys.argv[1:]], prog_name="nexos")


if __name__ == "__main__":
    main()
