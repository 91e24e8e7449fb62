"""What the libraries say while a model loads goes to clovercode's log, not the user's screen.

torch, torchao and transformers report through Python's logging and warnings: torchao's compiled
extensions that do not apply to this machine ("Failed to load …/_C_cutlass_90a.so" on a CPU), torch's
`_pytree` deprecations, transformers' advisories. Sixteen such rows came before the REPL's banner and
into exec's stderr (issue 49). During a load they are collected here and written to
``<state>/logs/model-load.log``; a summary line reaches the user only where a message changes what they
get (quantized layers without torchao's compiled kernels on a GPU run slower).

Errors (level ERROR and up) are not noise: they are passed on to where they would have gone.
"""

from __future__ import annotations

import logging
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

# The libraries a load runs. A logger not listed here prints as it always did: the list only says
# whose advisories are known to be noise during a load.
LIBRARY_LOGGERS = ("torch", "torchao", "transformers", "accelerate", "huggingface_hub", "safetensors", "tokenizers")


@dataclass
class Noise:
    """What was held back during one load."""

    lines: list[str] = field(default_factory=list)

    def summary(self, device: str) -> list[str]:
        """The lines the user must see: only those that change what they get."""
        missing = [line for line in self.lines if "Failed to load" in line and "torchao" in line]
        if missing and device.startswith("cuda"):
            return [f"note: {len(missing)} of torchao's compiled kernels did not load on this GPU: quantized "
                    "layers run on slower fallbacks (the messages are in the model-load log)"]
        return []


class _Collect(logging.Handler):
    def __init__(self, noise: Noise, passed_on: list[tuple[logging.Logger, list[logging.Handler]]]):
        super().__init__(logging.DEBUG)
        self.noise, self.passed_on = noise, passed_on

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname} {record.name}: {record.getMessage()}"
        except Exception:  # noqa: BLE001 - a record whose arguments do not format is still worth a line
            text = f"{record.levelname} {record.name}: {record.msg!r}"
        self.noise.lines.append(text)
        if record.levelno >= logging.ERROR:
            for logger, handlers in self.passed_on:
                if record.name == logger.name or record.name.startswith(logger.name + "."):
                    for handler in handlers:
                        handler.handle(record)
                    if not handlers and logger.propagate:
                        logging.getLogger().handle(record)


@contextmanager
def library_noise(log_path: Path | None) -> Iterator[Noise]:
    """Hold back the libraries' log records and warnings while the block runs; write them to ``log_path``."""
    noise = Noise()
    saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    passed_on: list[tuple[logging.Logger, list[logging.Handler]]] = []
    collect = _Collect(noise, passed_on)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        passed_on.append((logger, logger.handlers[:]))
        logger.handlers = [collect]
        logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            yield noise
        noise.lines.extend(f"warning {w.category.__name__} ({Path(w.filename).name}:{w.lineno}): {w.message}"
                           for w in caught)
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate
        if log_path is not None and noise.lines:
            _write(log_path, noise.lines)


def _write(path: Path, lines: list[str]) -> None:
    from clovercode.ground.privatefiles import open_private, private_dir

    try:
        private_dir(path.parent)
        with open_private(path, "a") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n" + "".join(line + "\n" for line in lines))
    except OSError:
        pass  # a log that cannot be written loses nothing the user needs
