"""wordcount FILE: print how often each word occurs in FILE."""

import argparse
import sys

from wordcount.core import count_words, most_common, ranked


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wordcount", description=__doc__)
    parser.add_argument("file", help="text file to read")
    parser.add_argument("--top", type=positive, metavar="N", help="only the N most frequent words")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with open(args.file, encoding="utf-8") as handle:
        counts = count_words(handle.read())
    pairs = most_common(counts, args.top) if args.top else ranked(counts)
    for word, count in pairs:
        print(f"{count:>6} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
