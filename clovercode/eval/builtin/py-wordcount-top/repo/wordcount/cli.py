"""wordcount FILE: print how often each word occurs in FILE."""

import argparse
import sys

from wordcount.core import count_words, ranked


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wordcount", description=__doc__)
    parser.add_argument("file", help="text file to read")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with open(args.file, encoding="utf-8") as handle:
        counts = count_words(handle.read())
    for word, count in ranked(counts):
        print(f"{count:>6} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
