"""Git config files shown to sandboxed commands as copies rebuilt from an allowlist of keys that carry
no secret and run no program (trust/gitconfigcopy.py): the user's ~/.gitconfig in the hidden home,
and the repository's own config files, where a checkout leaves a token header or a URL with one."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from clovercode.sandboxing.argv import Layout
from clovercode.trust.gitconfigcopy import rebuilt_copy


@contextmanager
def covered(layout: Layout) -> Iterator[Layout]:
    """``layout`` with ``covers`` for its ``scrub`` files; the copies live until the block ends."""
    if not layout.scrub:
        yield layout
        return
    with tempfile.TemporaryDirectory(prefix="clovercode-scrub-") as scratch:
        covers = []
        for index, path in enumerate(layout.scrub):
            # always the rebuilt copy, even when nothing was dropped: what is shown is what the
            # allowlist let through, never the original file
            copy = Path(scratch) / f"{index}.config"
            copy.write_text(rebuilt_copy(Path(path)), encoding="utf-8", errors="surrogateescape")
            # yours alone outside; inside, the read-only bind answers a write with "Read-only file system"
            os.chmod(copy, 0o600)
            covers.append((str(copy), path))
        yield dataclasses.replace(layout, covers=tuple(covers))
