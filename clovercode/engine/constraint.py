"""A grammar as a token constraint: masks for the next token, and validation of accepted runs.

Built on llguidance (docs/engine.md says why it was chosen over xgrammar): its matcher walks the
grammar one token at a time, computes the mask of allowed next tokens in microseconds, and
``validate_tokens`` checks a whole run left to right without consuming it, which is what a
diffusion block needs. The constraint only ever consumes *final* tokens (the committed output and
the block's accepted leading run), which never change, so it never rolls back.

End-of-sequence tokens are the engine's, not the grammar's: any of them is allowed exactly when the
grammar accepts what came before (a turn under ``required`` cannot end before its call is complete).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from clovercode.engine.grammar import GrammarError
from clovercode.engine.linerepeats import LoopBrake, TokenPrefixes

COMPILED_GRAMMARS = 64  # grammars kept compiled (the least recently used goes first)
LEXER_FUEL = (50_000_000, 20_000_000)  # llguidance's initial and per-step lexer fuel (defaults 1M, 200k)


class GrammarCompiler:
    """Grammars → constraints for one tokenizer (its llguidance view is built once)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: Sequence[int]):
        try:
            import llguidance.hf
        except ImportError:  # pragma: no cover - llguidance is part of the engine extra
            raise GrammarError("constrained decoding needs llguidance: pip install 'clovercode[engine]'") from None
        self.vocab_size = vocab_size
        self.eos_ids = tuple(sorted({int(e) for e in eos_ids if 0 <= int(e) < vocab_size}))
        self.lltokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.special = special_tags(tokenizer, self.lltokenizer)
        self._prefixes: TokenPrefixes | None = None
        # Grammars compiled, in their start state (the newest last): an agent sends the same tools with
        # every request, and a copy (microseconds) replaces a compile (1.5-2.5 ms with clover-tiny,
        # while a batch waits for the joining request).
        self._compiled: OrderedDict[tuple[str, str], Any] = OrderedDict()  # (scope, grammar) → matcher
        self._lock = threading.Lock()

    def prefixes(self) -> TokenPrefixes:
        """Every token's bytes, indexed by prefix (for the line-repeat brake), built on first use."""
        if self._prefixes is None:
            self._prefixes = TokenPrefixes([self.lltokenizer.decode_bytes([i]) for i in range(self.vocab_size)])
        return self._prefixes

    def constraint(self, grammar: str, steering: "Steering | None" = None, scope: str = "") -> "Constraint":
        """``grammar`` compiled; ``steering`` says when a turn that must call is steered (see Steering).
        ``scope``: whose request it is (serve's cache scope): a compiled grammar is copied only within
        its scope, since a copy is faster than a compile and would tell one tenant what another sent."""
        import llguidance
        from llguidance import LLParserLimits

        # A bounded string (maxLength) is a counted repeat intersected with the no-closing-tag rule:
        # llguidance's lexer builds one state per (count, tag prefix) pair, which runs out of its
        # default fuel from about 64 characters on (it then ends the turn early). Twenty times the
        # fuel covers a 1,024-character bound (about 1 ms a mask over SmolLM2's 49,152 tokens).
        key = (scope, grammar)
        with self._lock:
            pristine = self._compiled.get(key)
            if pristine is not None:
                self._compiled.move_to_end(key)
        if pristine is None:
            limits = LLParserLimits(initial_lexer_fuel=LEXER_FUEL[0], step_lexer_fuel=LEXER_FUEL[1])
            pristine = llguidance.LLMatcher(self.lltokenizer, grammar, log_level=0, limits=limits)
            if pristine.is_error():
                raise GrammarError(f"the grammar does not compile: {pristine.get_error()}")
            with self._lock:
                self._compiled[key] = pristine
                while len(self._compiled) > COMPILED_GRAMMARS:
                    self._compiled.popitem(last=False)
        return Constraint(pristine.deep_copy(), self.vocab_size, self.eos_ids, steering, self.lltokenizer, self.prefixes)


@dataclass(frozen=True)
class Steering:
    """When a turn that must end in a call is steered rather than left to the model: after
    ``prose_budget`` final tokens without an opened call, the next tokens are ``opening`` (the ids of
    the call opener), one by one. Steered tokens still pass the grammar: a token it forbids is never
    forced. A call is never closed for the model: one still open at the token limit is cut, and the
    harness refuses to run it (docs/tool-calls.md), unless ``close_at`` is set: from that many final
    tokens on, an open call is closed with the first of ``closings`` the grammar takes whole (none
    fits, as while a required parameter is still missing: the call is left to the model)."""

    prose_budget: int = 0
    opening: Sequence[int] = ()
    # Tried in turn when ``opening`` cannot come next (inside reasoning, which must close first).
    alternatives: Sequence[Sequence[int]] = ()
    # At most this many copies in a row of a unit of lines, in the prose and in the call (0: no
    # brake); see clovercode/engine/linerepeats.py. The model writes another line of its own instead.
    max_repeats: int = 0
    # No this many bytes that repeat one unit of at most a quarter of them (0: no brake): the loop
    # guard's rule (agent/repetition.py), kept token by token instead of cutting the reply.
    loop_window: int = 0
    close_at: int = 0  # 0: never closed for the model
    closings: Sequence[Sequence[int]] = ()
    # From this many final tokens on, a turn whose calls are complete ends there (0: never): a new
    # call opened so near the limit would be cut.
    end_at: int = 0


class Constraint:
    """The grammar's state after the final tokens so far."""

    def __init__(self, matcher: Any, vocab_size: int, eos_ids: Sequence[int], steering: Steering | None = None,
                 lltokenizer: Any = None, prefixes: Any = None):
        import llguidance.torch
        import torch

        self.matcher = matcher
        self.steering = steering if steering is not None and lltokenizer is not None else None
        self.lltokenizer = lltokenizer
        self.consumed = 0  # final tokens so far
        self.opened = False  # a call has opened (the prose budget no longer applies)
        self.closed = False  # an open call was closed for the model (close_at)
        self._forced: list[int] = []  # tokens being steered in, and how many of them are taken
        self._taken = 0
        # The end of the final text: to see the opener, and the lines the brake compares. It starts with a
        # line break because the turn starts on a fresh line (the brake never counts a tail's first line,
        # which may be cut).
        self._text = b"\n"
        self._prefixes = prefixes  # () -> TokenPrefixes, for the loop brake
        rule = self.steering
        self._brake = LoopBrake(rule.max_repeats, rule.loop_window) if rule is not None else LoopBrake(0, 0)
        self.vocab_size = vocab_size
        self.eos_ids = torch.tensor(list(eos_ids), dtype=torch.long)
        self._eos = frozenset(int(e) for e in eos_ids)
        self._eos_array = self.eos_ids.numpy()
        self._bits = llguidance.torch.allocate_token_bitmask(1, vocab_size)
        self.masks = 0  # masks computed (for the cost figures)

    def allowed(self) -> Any:
        """A bool tensor (vocab,): which tokens may come next."""
        import llguidance.torch
        import torch

        self.masks += 1
        steer = self._steer()
        if steer is not None:
            allowed = torch.zeros(self.vocab_size, dtype=torch.bool)
            allowed[steer] = True
            return allowed
        llguidance.torch.fill_next_token_bitmask(self.matcher, self._bits, 0)
        # Built in numpy, one thread: torch's parallel ops on a vocabulary-sized tensor wait for a free
        # core (12 ms for one any() on a loaded 2-core machine, against microseconds).
        allowed = unpack_mask(self._bits, self.vocab_size)
        eos = self._eos_array
        if len(eos):
            allowed[eos] = bool(self.matcher.is_accepting())
        if self._braking():
            refused = [t for t in self._brake.refused(self._text, self._prefixes()) if t < self.vocab_size]
            if refused:
                braked = allowed.copy()
                braked[refused] = False
                if braked.any():  # the brake yields where the grammar leaves nothing else
                    allowed = braked
        if not allowed.any():  # a dead end (cannot happen with a sound grammar): let the turn end
            allowed[eos] = True
        return torch.from_numpy(allowed)

    def permits(self, token: int) -> bool:
        """May ``token`` come next? (One token checked: far cheaper than :meth:`allowed`.)"""
        steer = self._steer()
        if steer is not None:
            return token == steer
        if token in self._eos:
            return bool(self.matcher.is_accepting())
        if self._braking() and self._brake.first_refused(self._text, [self.lltokenizer.decode_bytes([token])]) == 0:
            return False  # refused by the loop brake
        return token < self.vocab_size and self.matcher.validate_tokens([token]) == 1

    def accept(self, tokens: Sequence[int]) -> int:
        """Consume the longest valid prefix of ``tokens`` and return its length. An end-of-sequence
        token is valid when the grammar accepts what precedes it; generation ends there, so what
        follows it counts as valid too."""
        tokens = [int(t) for t in tokens]
        if self._near_steering(len(tokens)):
            return self._accept_steered(tokens)
        return self._accept_plain(tokens)

    def _near_steering(self, count: int) -> bool:
        """Could steering start within the next ``count`` final tokens (then go token by token)?"""
        rule = self.steering
        if rule is None:
            return False
        if self._taken < len(self._forced):
            return True
        if self.opened:
            if rule.end_at and self.consumed + count > rule.end_at:
                return True
            return bool(rule.close_at) and not self.closed and self.consumed + count > rule.close_at
        return bool(rule.prose_budget) and self.consumed + count > rule.prose_budget

    def _accept_plain(self, tokens: list[int]) -> int:
        end = next((i for i, t in enumerate(tokens) if t in self._eos), len(tokens))
        if self._braking():
            pieces = [self.lltokenizer.decode_bytes([t]) for t in tokens[:end]]
            braked = self._brake.first_refused(self._text, pieces)
            if braked < end and not self._brake_yields(tokens[:braked], pieces):
                tokens, end = tokens[:braked], braked
        valid = self.matcher.try_consume_tokens(tokens[:end]) if end else 0  # stops before a forbidden one
        if self.matcher.is_error():
            raise GrammarError(f"the grammar failed while consuming tokens: {self.matcher.get_error()}")
        self._consumed(tokens[:valid])
        if valid == end < len(tokens) and self.matcher.is_accepting():
            return len(tokens)
        return valid

    def _brake_yields(self, head: list[int], pieces: Sequence[bytes]) -> bool:
        """After ``head``, does the grammar allow only tokens the brake refuses? Then the brake yields,
        as in :meth:`allowed`: else the token :meth:`allowed` offered would be refused here, and the
        decoder's output and the grammar's state would part (a fourth identical call's line break)."""
        import llguidance.torch

        matcher = self.matcher.deep_copy()
        if head and matcher.try_consume_tokens(head) != len(head):
            return False
        llguidance.torch.fill_next_token_bitmask(matcher, self._bits, 0)
        allowed = unpack_mask(self._bits, self.vocab_size)
        tail = (self._text + b"".join(pieces[:len(head)]))[-self._brake.tail_bytes:]
        refused = [t for t in self._brake.refused(tail, self._prefixes()) if t < self.vocab_size]
        allowed[refused] = False
        return not allowed.any()

    def _accept_steered(self, tokens: list[int]) -> int:
        """Token by token near steering: while steering, only the steered token may follow."""
        for index, token in enumerate(tokens):
            steer = self._steer()
            if (steer is not None and token != steer) or self._accept_plain([token]) != 1:
                return index
            if steer is not None:
                self._taken += 1
        return len(tokens)

    def _steer(self) -> int | None:
        """The token steering forces next, if it does (starting the steered opening when it is due)."""
        rule = self.steering
        if rule is None:
            return None
        if self._taken >= len(self._forced):
            if (self.opened and rule.end_at and self.consumed >= rule.end_at and self._eos
                    and self.matcher.is_accepting()):
                return min(self._eos)
            if self.opened and rule.close_at and not self.closed and self.consumed >= rule.close_at:
                closing = next(([int(t) for t in c] for c in rule.closings
                                if c and self.matcher.validate_tokens([int(t) for t in c]) == len(c)), None)
                if closing is None:
                    return None
                self._forced, self._taken, self.closed = closing, 0, True
                return self._forced[0]
            if self.opened or not rule.prose_budget or self.consumed < rule.prose_budget:
                return None
            openings = [[int(t) for t in tokens] for tokens in (rule.opening, *rule.alternatives)]
            self._forced = next((o for o in openings if self.matcher.validate_tokens(o) == len(o)), openings[0])
            self._taken = 0
            if not self._forced:
                return None
        token = self._forced[self._taken]
        return token if self.matcher.validate_tokens([token]) == 1 else None

    def _consumed(self, tokens: list[int]) -> None:
        self.consumed += len(tokens)
        if self.steering is None or not tokens or (self.opened and not self._braking()):
            return
        text = self._text + self.lltokenizer.decode_bytes(tokens)
        if not self.opened:
            self.opened = b"<tool_call>" in text or b"<function=" in text
        # The brake compares lines of the tail; without it, enough to see an opener that straddles two runs.
        self._text = text[-self._brake.tail_bytes:] if self._braking() else text[-64:]

    def _braking(self) -> bool:
        """Is the loop brake on (in prose and call alike, when the steering asks for it)?"""
        return self._brake.on and self._prefixes is not None

    def check(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` :meth:`accept` would take, without consuming any."""
        copy = Constraint.__new__(Constraint)
        copy.__dict__.update(self.__dict__)
        copy.matcher = self.matcher.deep_copy()
        return copy.accept(tokens)

    @property
    def accepting(self) -> bool:
        return bool(self.matcher.is_accepting())


def unpack_mask(bits: Any, vocab_size: int) -> Any:
    """llguidance's bitmask (int32 words, token i = bit i % 32 of word i // 32) as a bool array.
    Unpacked by numpy, single-threaded: the same shifts as torch ops took 20 µs on one thread and
    37 ms on two while other processes loaded the two cores (the thread pool waits for a core)."""
    import numpy as np

    words = bits[0].numpy().astype("<i4", copy=False).view(np.uint8)
    return np.unpackbits(words, bitorder="little")[:vocab_size].astype(bool)


def special_tags(tokenizer: Any, lltokenizer: Any) -> dict[str, int]:
    """The grammar tags this tokenizer holds as single tokens that llguidance treats as special."""
    from clovercode.engine.grammar import TAGS

    found = {}
    vocab = tokenizer.get_vocab()
    for tag in TAGS:
        token = vocab.get(tag)
        if token is not None and lltokenizer.is_special_token(token):
            found[tag] = int(token)
    return found
