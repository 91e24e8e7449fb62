"""The event vocabulary lives on the ground floor (:mod:`clovercode.events`); these names stay for callers."""

from clovercode.events import EventSink, MultiSink, RecordingSink

__all__ = ["EventSink", "MultiSink", "RecordingSink"]
