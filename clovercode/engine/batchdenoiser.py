"""``SlotBatchDenoiser``: the real ``BatchDenoiser`` (engine/batchseam.py), ONE model forward for every row.

Each sequence is prefilled alone (the batch-1 ``CachedDenoiser`` path, so its state is exactly what batch 1
gives) and copied into a slot of the ``SlotCache``. A forward then runs the rows together: each row's block
is written at its own offset, a per-row 4D additive mask (built on the device) lets a denoising row see its
prefix and its whole block and a committing row its prefix and its block causally, and masks the padding
past each row's block. Denoising rows leave their slot as it was (their keys are scratch past their
length; their linear-attention states are a copy that is dropped); committing rows advance.

Works for transformers causal LMs whose cache is full attention and/or Gated DeltaNet (Llama, Qwen3,
SmolLM2, clover-tiny, Qwen3.5-MoE, Qwen3-Next). Other cache layers (sliding window, attention and linear
state in one layer, a remote-code cache without transformers layers) raise ``UnsupportedCache`` when the
denoiser is built: the caller can fall back to batch 1.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from clovercode.engine.batchseam import Row, admit_each
from clovercode.engine.denoiser import CachedDenoiser


# A shared prompt opening is computed once when that saves at least this many token positions: the
# extra forward it takes costs about as much as this many tokens of a prefill on CPU. For the same
# reason prompts whose remainders differ in length by more than this are prefilled in separate
# forwards rather than padded to one width.
SHARED_MIN_SAVED = 48
# A prompt that opens like one already in a live slot (same scope) copies that opening instead of
# computing it, when it is at least this long: the copy costs no forward, so even one block pays.
LIVE_MIN_SHARED = 16


class SlotBatchDenoiser:
    def __init__(self, model: Any, capacity: int, keep_tokens: int | None = None, slot_tokens: int | None = None):
        """``keep_tokens``: prompt tokens whose batch-1 prefilled caches are kept after admission, so a
        conversation's next turn (a prompt that extends a kept one) prefills only its new tokens, as
        the batch-1 path does (CachedDenoiser); None keeps no prompt. ``slot_tokens``: the most
        positions a slot may hold (the memory plan's; None: unbounded)."""
        from clovercode.engine.batchcache import SlotCache

        self.model = model
        self.capacity = capacity
        # admits run the batch-1 prefill, kernels and all (and its prompt reuse)
        self.solo = CachedDenoiser(model, reuse_prompt=keep_tokens is not None, keep_tokens=keep_tokens or 0,
                                   limit=slot_tokens)
        self.slots = SlotCache(capacity, slot_tokens)
        self.cached: dict[int, int] = {}  # slot → prompt tokens its admission did not compute (copied)
        # slot → (scope, prompt) of every live sequence: a later prompt of the same scope that opens the
        # same way copies that opening (keys and values at positions < its length never change)
        self.openings: dict[int, tuple[str, list[int]]] = {}
        self.device, self.dtype = self.solo.device, self.solo.dtype
        # a one-token prefill reveals the cache layout: buffers exist, and an unbatchable model fails, now
        probe = self.solo.prefill([0])
        self.slots.prepare(probe.cache, probe.length)
        self.bias_route = self._grouped_heads_pay() and self._probe_bias_route()
        self.solo.forget_prompts()  # the probes' prompts are no conversation's
        # the output head, to run on the kept positions only (library models: remote code may reuse it)
        self.head = model.get_output_embeddings() if self.solo.own_cache else None

    @property
    def scope(self) -> str:
        """The prompt-cache namespace of the next admissions (``CachedDenoiser.scope``)."""
        return self.solo.scope

    @scope.setter
    def scope(self, value: str) -> None:
        self.solo.scope = value

    def admit(self, ids: Sequence[int]) -> tuple[int, Any]:
        free = next((s for s in range(self.capacity) if s not in self.slots.lengths), None)
        if free is None:
            raise ValueError(f"all {self.capacity} slots are taken: release one before admitting another sequence")
        state = self.solo.prefill(ids)
        self.slots.admit(free, state.cache, state.length)
        self.cached[free] = self.solo.reused_tokens
        self.openings[free] = (self.solo.scope, [int(t) for t in ids])
        return free, state.last_logits

    def admit_many(self, prompts: Sequence[Sequence[int]]) -> list[tuple[int, Any]]:
        """Several prompts prefilled together: each is a committing row, its block the rest of its
        prompt padded on the right to the longest (the padding lies past the row's length: scratch,
        never read). The causal row mask keeps each prompt's positions to its own earlier tokens, so its
        keys, values and last logits are its batch-1 prefill's (to float rounding). What a prompt need
        not compute is copied: the opening it shares with a prompt in a live slot of the same scope
        (``_live_opening``: a request that arrives while others decode starts where their common
        system prompt ends), else the opening the new prompts share among themselves, computed once in
        a first forward over one row. A lone prompt with nothing to copy takes the batch-1 prefill. A
        model with linear-attention state prefills one prompt at a time: padding would run into its
        recurrent state, and its state at an opening's end is kept nowhere."""
        prompts = [[int(t) for t in ids] for ids in prompts]
        if self.slots.has_linear:
            return admit_each(self, prompts)
        continuing = [i for i, ids in enumerate(prompts) if self.solo.reusable(ids)]
        if continuing:  # next turns of kept conversations prefill their new tokens alone; the rest together
            return self._admit_split(prompts, continuing)
        live = [self._live_opening(ids) for ids in prompts]
        if len(prompts) < 2 and live[0] is None:
            return admit_each(self, prompts)
        if not all(prompts):
            raise ValueError("a prompt is empty: there is nothing to predict the first token from")
        free = [s for s in range(self.capacity) if s not in self.slots.lengths][:len(prompts)]
        if len(free) < len(prompts):
            raise ValueError(f"{len(prompts)} prompts do not fit the {self.capacity - len(self.slots.lengths)} "
                             "free slots: release some before admitting them")
        for slot in free:
            self.slots.open(slot, max(len(ids) for ids in prompts))
        starts = [0] * len(prompts)
        try:
            for i, found in enumerate(live):
                if found is not None:
                    self.slots.share(found[0], [free[i]], found[1])
                    starts[i] = found[1]
            fresh = [i for i, found in enumerate(live) if found is None]
            # the opening the others share, leaving every prompt at least its last token to run (its logits are needed)
            shared = len(os.path.commonprefix([prompts[i] for i in fresh])) if len(fresh) > 1 else 0
            shared = min([shared] + [len(prompts[i]) - 1 for i in fresh])
            if shared * (len(fresh) - 1) >= SHARED_MIN_SAVED:
                self._prefill([free[fresh[0]]], [prompts[fresh[0]][:shared]], [0])
                self.slots.share(free[fresh[0]], [free[i] for i in fresh[1:]], shared)
                starts = [shared if i in fresh else start for i, start in enumerate(starts)]
            last: list[Any] = [None] * len(prompts)
            for group in self._widths([len(ids) - start for ids, start in zip(prompts, starts)], starts):
                done = self._prefill([free[i] for i in group], [prompts[i][starts[i]:] for i in group],
                                     [starts[i] for i in group])
                for i, logits in zip(group, done):
                    last[i] = logits
        except BaseException:
            for slot in free:
                self.release(slot)
            raise
        for i, slot in enumerate(free):
            # copied rather than computed: the group opening's first row computed it, the others did not
            self.cached[slot] = starts[i] if live[i] is not None or (fresh and i != fresh[0]) else 0
            self.openings[slot] = (self.solo.scope, prompts[i])
        if self.solo.reuse_prompt and self.solo.own_cache:  # kept, so each conversation's next turn reuses it
            for slot, ids, logits in zip(free, prompts, last):
                self.solo.keep(ids, self.slots.export(slot, len(ids), self.solo.new_cache()), logits.float())
        return list(zip(free, last))

    def _live_opening(self, ids: list[int]) -> tuple[int, int] | None:
        """(slot, positions) of the live sequence of the current scope whose prompt shares the longest
        opening with ``ids`` (leaving ``ids`` its last token to run), if at least ``LIVE_MIN_SHARED``
        long. Only the same scope: a prompt cache is one tenant's (trust/serve.py), and a copied
        opening would tell a client, by its speed and its reported cached tokens, what another sent."""
        best: tuple[int, int] | None = None
        for slot, (scope, opening) in self.openings.items():
            if scope != self.solo.scope:
                continue
            count = min(len(os.path.commonprefix([opening, ids])), len(ids) - 1)
            if count >= LIVE_MIN_SHARED and (best is None or count > best[1]):
                best = (slot, count)
        return best

    def _widths(self, parts: list[int], starts: list[int]) -> list[list[int]]:
        """Rows (indices) grouped for the prefill forwards: one forward pads every row to its longest, so
        a row far shorter than the longest (by more than ``SHARED_MIN_SAVED``) goes in a forward of its
        own, as does a row whose padding would run past the slot's limit."""
        groups: list[list[int]] = []
        for i in sorted(range(len(parts)), key=lambda i: -parts[i]):
            if groups and parts[groups[-1][0]] - parts[i] <= SHARED_MIN_SAVED and (
                    self.slots.limit is None or starts[i] + parts[groups[-1][0]] <= self.slots.limit):
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups

    def _admit_split(self, prompts: list[list[int]], continuing: list[int]) -> list[tuple[int, Any]]:
        rest = [i for i in range(len(prompts)) if i not in continuing]
        admitted: dict[int, tuple[int, Any]] = {}
        try:
            for i in continuing:
                admitted[i] = self.admit(prompts[i])
            if rest:
                admitted.update(zip(rest, self.admit_many([prompts[i] for i in rest])))
        except BaseException:
            for slot, _ in admitted.values():
                self.release(slot)
            raise
        return [admitted[i] for i in range(len(prompts))]

    def _prefill(self, slots: list[int], parts: list[list[int]], starts: list[int]) -> list[Any]:
        """One forward of committing rows: ``parts[i]`` goes into ``slots[i]`` from position ``starts[i]``
        (padded on the right to the longest) → the logits after each part."""
        import torch

        width = max(len(part) for part in parts)
        for slot, start in zip(slots, starts):
            self.slots.lengths[slot] = start
        step, order = self._plan([Row(slot, part + [0] * (width - len(part)), True) for slot, part in zip(slots, parts)])
        blocks = torch.tensor([parts[i] + [0] * (width - len(parts[i])) for i in order], device=self.device)
        ends = sorted({len(part) - 1 for part in parts})  # the positions whose logits are needed
        keep = torch.tensor(ends, device=self.device) if self.solo.slices_logits else None
        logits = self._run(step, blocks, _block_masks(step, self.dtype), self.bias_route, keep)
        last = []
        for i, (slot, part, start) in enumerate(zip(slots, parts, starts)):
            self.slots.lengths[slot] = start + len(part)
            last.append(logits[order.index(i), ends.index(len(part) - 1) if keep is not None else len(part) - 1])
        return last

    def forget_prompts(self, scope: str | None = None) -> None:
        """Drop the prompts kept for reuse (sequences in the slots are not touched)."""
        self.solo.forget_prompts(scope)

    def length(self, slot: int) -> int:
        return self.slots.lengths[slot]

    def release(self, slot: int) -> None:
        self.slots.release(slot)
        self.cached.pop(slot, None)
        self.openings.pop(slot, None)

    def forward(self, rows: Sequence[Row]) -> Any:
        """One forward over ``rows`` → float32 logits (len(rows), L, V), row i for ``rows[i]``."""
        import torch

        step, order = self._plan(rows)
        blocks = torch.stack([torch.as_tensor(rows[i].block).view(-1) for i in order]).to(self.device, torch.long)
        kept = None
        if any(row.keep is not None for row in rows) and self.head is not None:
            keep = torch.stack([torch.ones(step.block, dtype=torch.bool) if rows[i].keep is None
                                else torch.as_tensor(rows[i].keep, dtype=torch.bool).view(-1) for i in order])
            kept = keep.view(-1).nonzero().view(-1).to(self.device)
        logits = self._run(step, blocks, _block_masks(step, self.dtype), self.bias_route, kept=kept)
        for i in order:
            if rows[i].commit:
                self.slots.lengths[rows[i].slot] += step.block
        if order != sorted(order):  # back from buffer-row order to the caller's order
            logits = logits.index_select(0, torch.tensor(_inverse(order), device=logits.device))
        return logits

    def _run(self, step: Any, blocks: Any, mask: Any, bias: bool, keep: Any = None, kept: Any = None) -> Any:
        """The model over ``blocks`` against the slot cache; committing rows' linear states are kept.

        ``bias``: the rows' mask goes to the attention as an additive ``position_bias`` with no
        attention mask, the model told not to be causal (so it builds no mask of its own). sdpa then
        runs grouped-query attention on the cached keys as they are (``enable_gqa``) instead of
        repeating every row's keys and values for each query head, a copy per layer and step that cost
        about half of the attention on CPU (docs/engine.md, "Batched decoding: the slot cache").
        ``keep``: the block positions whose logits are computed, the same for every row (all when None).
        ``kept``: flat indices into (rows × L) of the only positions whose logits are computed (the output
        head runs on those hidden states alone: a third of them in a decoding step, where the head is
        the model's largest matrix); the others come back as zeros."""
        import torch

        masks: dict[str, Any] = ({"attention_mask": None, "is_causal": False, "position_bias": mask} if bias
                                 else {"attention_mask": mask})
        if keep is not None:
            masks["logits_to_keep"] = keep
        hook = None if kept is None else self.head.register_forward_pre_hook(
            lambda module, args: (args[0].reshape(-1, args[0].shape[-1]).index_select(0, kept)[None], *args[1:]))
        cache = self.slots.step_cache(step)
        try:
            with torch.no_grad():
                out = self.model(input_ids=blocks, position_ids=step.positions, **masks,
                                 **{self.solo.cache_arg: cache, "use_cache": True})
        except BaseException:
            self.slots.settle(cache, step, keep=False)
            raise
        finally:
            if hook is not None:
                hook.remove()
        self.slots.settle(cache, step)
        logits = out.logits.float()
        if kept is None or logits.shape[:2] != (1, kept.numel()):  # a head the hook did not reach: all positions
            return logits
        full = logits.new_zeros((blocks.shape[0] * blocks.shape[1], logits.shape[-1]))
        return full.index_copy_(0, kept, logits[0]).view(blocks.shape[0], blocks.shape[1], -1)

    def _grouped_heads_pay(self) -> bool:
        """Would the bias route save anything? Only where sdpa would otherwise repeat the keys (grouped
        query heads, a library model on sdpa) and where masked grouped-query sdpa has a fast kernel:
        on CUDA it falls back to the math kernel, so there the mask stays an attention mask."""
        config = _text_config(self.model)
        heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
        return (self.device.type == "cpu" and self.solo.own_cache and heads is not None and kv_heads is not None
                and kv_heads < heads and getattr(config, "_attn_implementation", None) == "sdpa")

    def _probe_bias_route(self) -> bool:
        """Is the bias honoured? Two denoising rows of different lengths (the shorter row's mask hides
        the longer one's keys) run with the mask, with the bias, and with an all-open mask; the bias
        must give what the mask gives, within a hundredth of what ignoring it would change. Denoising
        rows leave the slots as they were; the probe's two slots are released after."""
        import torch

        vocab = int(_text_config(self.model).vocab_size)
        slots = []
        try:
            slots = [self.admit([i % vocab for i in range(1, n)])[0] for n in (3, 8)]
            step, order = self._plan([Row(s, torch.tensor([4 % vocab, 5 % vocab, 6 % vocab])) for s in slots])
            blocks = torch.tensor([[4 % vocab, 5 % vocab, 6 % vocab]] * 2, device=self.device)
            mask = _block_masks(step, self.dtype)
            masked, biased = self._run(step, blocks, mask, False), self._run(step, blocks, mask, True)
            opened = self._run(step, blocks, torch.zeros_like(mask), False)
        except Exception:  # a forward that takes no position_bias or is_causal
            return False
        finally:
            for slot in slots:
                self.release(slot)
        ignored = (opened - masked).abs().max()
        return bool(ignored > 0 and (biased - masked).abs().max() <= 0.01 * ignored)

    def _plan(self, rows: Sequence[Row]) -> tuple[Any, list[int]]:
        """The step for ``rows`` run in buffer-row order (so live rows read as views), and that order."""
        import torch

        from clovercode.engine.batchcache import Step

        if not rows:
            raise ValueError("a forward needs at least one row")
        phys = []
        for row in rows:
            if row.slot not in self.slots.phys:
                raise ValueError(f"slot {row.slot} holds no sequence: admit one first")
            phys.append(self.slots.phys[row.slot])
        if len(set(phys)) != len(phys):
            raise ValueError("each slot may appear only once in a forward")
        sizes = {int(torch.as_tensor(row.block).numel()) for row in rows}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"every row's block must have the same, non-zero length (got {sorted(sizes)})")
        size = sizes.pop()
        order = sorted(range(len(rows)), key=phys.__getitem__)
        ordered = [phys[i] for i in order]
        lengths = [self.slots.lengths[rows[i].slot] for i in order]
        commits = [int(rows[i].commit) for i in order]
        count = len(rows)
        committing = [k for k in range(count) if commits[k]]
        # one host → device copy for everything the step needs
        packed = torch.tensor(ordered + lengths + commits + committing, dtype=torch.long, device=self.device)
        on_device = packed[count:2 * count]
        contiguous = ordered == list(range(ordered[0], ordered[0] + count))
        return Step(phys=packed[:count], lengths=on_device,
                    positions=on_device[:, None] + torch.arange(size, device=self.device)[None],
                    commit=packed[2 * count:3 * count].bool(), window=(ordered[0], count) if contiguous else None,
                    kv_len=max(lengths) + size, block=size, commit_rows=packed[3 * count:]), order


def _block_masks(step: Any, dtype: Any) -> Any:
    """(R, 1, L, K) additive: row r's query j sees keys before its length, then its block (all of it when
    denoising, positions ≤ j when committing); keys past its block (other rows' longer prefixes) are masked."""
    import torch

    device = step.lengths.device
    keys = torch.arange(step.kv_len, device=device)[None, None, :]  # (1, 1, K)
    queries = torch.arange(step.block, device=device)[None, :, None]  # (1, L, 1)
    relative = keys - step.lengths[:, None, None]  # (R, 1, K): key position inside the row's block
    in_block = (relative >= 0) & (relative < step.block) & (~step.commit[:, None, None] | (relative <= queries))
    allowed = (relative < 0) | in_block  # (R, L, K)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def _text_config(model: Any) -> Any:
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def _inverse(order: list[int]) -> list[int]:
    inverse = [0] * len(order)
    for position, index in enumerate(order):
        inverse[index] = position
    return inverse
