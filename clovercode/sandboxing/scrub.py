"""Git config files shown to sandboxed commands as copies without credentials: the user's
~/.gitconfig in the hidden home, and a .git/config where a checkout left a token header."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from clovercode.sandboxing.argv import Layout
from clovercode.trust.gitsafe import scrub_config_text


@contextmanager
def covered(layout: Layout) -> Iterator[Layout]:
    """``layout`` with ``covers`` for its ``scrub`` files; the copies live until the block ends."""
    if not layout.scrub:
        yield layout
        return
    with tempfile.TemporaryDirectory(prefix="clovercode-scrub-") as scratch:
        covers = []
        for index, path in enumerate(layout.scrub):
            try:
                text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
            except OSError:
                continue
            clean = scrub_config_text(text)
            in_home = any(path.startswith(home.rstrip("/") + "/") for home in layout.homes)
            if clean == text:
                if in_home:  # nothing to remove: the file itself comes back into the hidden home
                    covers.append((path, path))
                continue
            copy = Path(scratch) / f"{index}.config"
            copy.write_text(clean, encoding="utf-8", errors="surrogateescape")
            os.chmod(copy, 0o444)
            covers.append((str(copy), path))
        yield dataclasses.replace(layout, covers=tuple(covers))
