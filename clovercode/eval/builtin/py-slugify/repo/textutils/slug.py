"""URL slugs for blog posts."""

import re
import unicodedata


def slugify(text: str, separator: str = "-", max_length: int | None = None) -> str:
    """A lowercase ASCII slug: runs of anything but letters and digits become one separator,
    with no separator at either end, also after cutting the slug to ``max_length``."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = text.lower()
    text = re.sub(r"[^a-z0-9]", separator, text)
    if max_length is not None:
        text = text[:max_length]
    return text
