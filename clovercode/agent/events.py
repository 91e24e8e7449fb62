"""The event vocabulary lives on the ground floor (:mod:`clovercode.ground.events`); these names stay for callers."""

from clovercode.ground.events import EventSink, MultiSink, RecordingSink

__all__ = ["EventSink", "MultiSink", "RecordingSink"]
