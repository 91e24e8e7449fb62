"""Counting words."""

import re
from collections import Counter

WORD = re.compile(r"[A-Za-z']+")


def count_words(text: str) -> Counter:
    """Occurrences of each word, lower-cased."""
    return Counter(word.lower() for word in WORD.findall(text))


def ranked(counts: Counter) -> list[tuple[str, int]]:
    """(word, count) pairs, most frequent first, ties in alphabetical order."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
