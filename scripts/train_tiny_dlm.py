#!/usr/bin/env python
"""Train the tiny block-diffusion model that `clovercode bench engine` measures.

Regenerates models/clover-tiny-dlm/ (weights in float16, tokenizer, chat template, training log).
The committed model came from three time-boxed runs on a 2-core machine shared with other jobs
(each continues the previous one; the log of all three is models/clover-tiny-dlm/training_log.jsonl):

    python scripts/train_tiny_dlm.py --minutes 70 --drill 0 --out out/p1     # stopped by hand at 35 min
    python scripts/train_tiny_dlm.py --minutes 60 --lr 2e-3 --seed 1 --init-from out/p1 --out out/p2
    python scripts/train_tiny_dlm.py --minutes 60 --threads 2 --lr 1.5e-3 --seed 2 --induction 0.2 \
        --init-from out/p2 --out models/clover-tiny-dlm

Schedules follow wall-clock time, so a faster or quieter machine trains more steps in the same
minutes; a GPU does all of it in minutes (--minutes 3).

The corpus (clovercode/bench/toolcorpus.py) is agent turns whose request determines one tool call in
the Qwen3-Coder XML format, with values from real code. The objective matches what the engine does
at inference (docs/engine.md):

* clean stream: the prompt and the answer, causal attention, next-token loss (the logit shift: the
  output at position i predicts token i+1). This is also what makes block size 1 a plain AR model.
* noisy stream: a copy of the answer, split into blocks of B aligned at the answer's start. In each
  block the first position stays clean (the engine always fills it from the previous block's commit
  logits) and the others are masked with a per-block rate t ~ U(0, 1). A noisy block attends to the
  prompt, to the clean blocks before it, and bidirectionally to itself; its output at position i
  predicts token i+1 of the block wherever that token is masked.

Both streams go through one forward with a 4D additive mask, so every block of every example is
trained at once. Training is time-boxed (cosine schedule over --minutes of wall clock) because the
machines it runs on are shared.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
TAGS = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def prompt_text(request: str) -> str:
    """What the chat template renders for one user turn plus the generation prompt."""
    return f"<|im_start|>user\n{request}<|im_end|>\n<|im_start|>assistant\n"


def build_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE whose pre-tokens are word runs or single other characters, so a value
    tokenizes the same in the request and in the call (copying is then token-exact)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\w+|[^\w]"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    return tok


def hf_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 mask_token="<|mask|>", unk_token=None)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_model(vocab: int, ids: dict[str, int], block_size: int, size: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hidden, layers = {"small": (256, 4), "tiny": (128, 2)}[size]
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=4096,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], attn_implementation="sdpa")
    # Diffusion metadata the engine reads (docs/engine.md, "Model metadata").
    config.mask_token_id = ids["<|mask|>"]
    config.block_size = block_size
    config.logit_shift = True
    return Qwen3ForCausalLM(config)


class Batcher:
    """Turns → (input_ids, position_ids, 4D mask, AR targets, diffusion targets)."""

    def __init__(self, maker, tok, block: int, ids: dict[str, int], induction: float = 0.0):
        self.maker, self.tok, self.block, self.induction = maker, tok, block, induction
        self.pad, self.mask, self.eos = ids["<|endoftext|>"], ids["<|mask|>"], ids["<|im_end|>"]
        # Ordinary tokens: after the special tokens, before the tags (added last).
        self.plain = range(len(SPECIALS), tok.get_vocab_size() - len(TAGS))

    def example(self, rng: random.Random):
        if self.induction and rng.random() < self.induction:
            return self.induction_example(rng)
        turn = self.maker.turn(rng)
        prompt = self.tok.encode(prompt_text(turn.request)).ids
        answer = self.tok.encode(self.maker.call_text(turn)).ids + [self.eos]
        answer += [self.pad] * (-len(answer) % self.block)
        return prompt, answer

    def induction_example(self, rng: random.Random):
        """Random tokens, then the answer repeats a segment of them twice: the densest copy signal
        there is, which is what makes the model's induction (copy) heads form at all on this budget."""
        def tokens(low: int, high: int) -> list[int]:
            return [rng.choice(self.plain) for _ in range(rng.randint(low, high))]

        segment = tokens(4, 16)
        prompt = tokens(0, 12) + segment + tokens(0, 12)
        answer = segment * 2 + [self.eos]
        return prompt, answer + [self.pad] * (-len(answer) % self.block)

    def batch(self, rng: random.Random, size: int):
        import torch

        examples = [self.example(rng) for _ in range(size)]
        length = max(len(p) + 2 * len(a) for p, a in examples)
        ids = torch.full((size, length), self.pad, dtype=torch.long)
        pos = torch.zeros((size, length), dtype=torch.long)
        allowed = torch.zeros((size, length, length), dtype=torch.bool)
        ar_tgt = torch.full((size, length), -100, dtype=torch.long)
        df_tgt = torch.full((size, length), -100, dtype=torch.long)
        B = self.block
        for row, (prompt, answer) in enumerate(examples):
            P, A = len(prompt), len(answer)
            clean = prompt + answer
            noisy = list(answer)
            for start in range(0, A, B):
                rate = rng.random()
                for i in range(start + 1, start + B):
                    if rng.random() < rate:
                        noisy[i] = self.mask
            ids[row, :P + A] = torch.tensor(clean)
            ids[row, P + A:P + 2 * A] = torch.tensor(noisy)
            pos[row, :P + A] = torch.arange(P + A)
            pos[row, P + A:P + 2 * A] = torch.arange(P, P + A)
            allowed[row, :P + A, :P + A] = torch.ones(P + A, P + A, dtype=torch.bool).tril()
            for start in range(0, A, B):
                rows = slice(P + A + start, P + A + start + B)
                allowed[row, rows, :P + start] = True
                allowed[row, rows, rows] = True
                for i in range(B - 1):  # shifted: block position i predicts position i + 1
                    if noisy[start + i + 1] == self.mask:
                        df_tgt[row, P + A + start + i] = answer[start + i + 1]
            ar_tgt[row, P - 1:P + A - 1] = torch.tensor(answer)
            for r in range(P + 2 * A, length):
                allowed[row, r, r] = True  # padding rows see themselves only
        additive = torch.zeros((size, 1, length, length))
        additive.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
        return ids, pos, additive, ar_tgt, df_tgt


def losses(model, batch):
    import torch.nn.functional as F

    device = next(model.parameters()).device
    ids, pos, mask, ar_tgt, df_tgt = (t.to(device) for t in batch)
    logits = model(input_ids=ids, position_ids=pos, attention_mask=mask).logits.float()
    flat = logits.view(-1, logits.shape[-1])
    ar = F.cross_entropy(flat, ar_tgt.view(-1), ignore_index=-100)
    df = F.cross_entropy(flat, df_tgt.view(-1), ignore_index=-100)
    return ar, df


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "models" / "clover-tiny-dlm")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--size", choices=("small", "tiny"), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    parser.add_argument("--save-every", type=float, default=5.0, help="minutes between checkpoints")
    parser.add_argument("--drill", type=float, default=2.0,
                        help="weight of copy-drill turns (random identifiers written to a random path)")
    parser.add_argument("--induction", type=float, default=0.0,
                        help="share of examples that are random tokens whose answer repeats a segment of them")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="continue from this checkpoint (weights and tokenizer); the log is appended to")
    args = parser.parse_args()

    import torch

    from clovercode.bench.toolcorpus import TurnMaker, harvest

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    train_maker, eval_maker = TurnMaker(harvest("train"), drill=args.drill), TurnMaker(harvest("eval"))
    if args.init_from:
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM

        tok = Tokenizer.from_file(str(args.init_from / "tokenizer.json"))
        model = AutoModelForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
        ids = {t: tok.token_to_id(t) for t in SPECIALS + TAGS}
        vocab = model.config.vocab_size
    else:
        texts = []
        for _ in range(20000):
            turn = train_maker.turn(rng)
            texts.append(prompt_text(turn.request) + train_maker.call_text(turn) + "<|im_end|>")
        tok = build_tokenizer(texts, args.vocab)
        ids = {t: tok.token_to_id(t) for t in SPECIALS + TAGS}
        vocab = (tok.get_vocab_size() + 63) // 64 * 64
        model = make_model(vocab, ids, args.block_size, args.size)
    params = sum(p.numel() for p in model.parameters())
    train = Batcher(train_maker, tok, args.block_size, ids, args.induction)
    evaluate = Batcher(eval_maker, tok, args.block_size, ids)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    model.to(device)
    eval_batches = [evaluate.batch(random.Random(1000 + i), 32) for i in range(2)]

    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "training_log.jsonl"
    log = log_path.open("a" if args.init_from else "w", encoding="utf-8")

    def record(entry: dict) -> None:
        log.write(json.dumps(entry) + "\n")
        log.flush()
        print(json.dumps(entry), flush=True)

    record({"event": "start", "params": params, "vocab": vocab, "block_size": args.block_size, "batch": args.batch,
            "lr": args.lr, "minutes": args.minutes, "threads": args.threads, "size": args.size, "seed": args.seed, "drill": args.drill, "induction": args.induction,
            "init_from": str(args.init_from) if args.init_from else None})
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    budget, warmup = args.minutes * 60.0, 100
    started = last_log = last_save = time.monotonic()
    step, tokens = 0, 0
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= budget:
            break
        progress = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        model.train()
        batch = train.batch(rng, args.batch)
        ar, df = losses(model, batch)
        (ar + df).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        tokens += int(batch[0].numel())
        now = time.monotonic()
        if now - last_log >= 30 or step == 1:
            record({"step": step, "minutes": round((now - started) / 60, 2), "lr": round(lr, 6),
                    "ar_loss": round(ar.item(), 4), "diff_loss": round(df.item(), 4),
                    "tokens_per_s": round(tokens / (now - started))})
            last_log = now
        if now - last_save >= args.save_every * 60:
            record(eval_entry(model, eval_batches, step, started))
            save(model, tok, args.out)
            last_save = now
    record(eval_entry(model, eval_batches, step, started))
    save(model, tok, args.out)
    record({"event": "done", "steps": step, "minutes": round((time.monotonic() - started) / 60, 2)})
    log.close()
    return 0


def eval_entry(model, batches, step: int, started: float) -> dict:
    import torch

    model.eval()
    with torch.no_grad():
        pairs = [losses(model, b) for b in batches]
    return {"event": "eval", "step": step, "minutes": round((time.monotonic() - started) / 60, 2),
            "eval_ar_loss": round(sum(a.item() for a, _ in pairs) / len(pairs), 4),
            "eval_diff_loss": round(sum(d.item() for _, d in pairs) / len(pairs), 4)}


def save(model, tok, out: Path) -> None:
    """Write weights (float16) and tokenizer into a temporary directory, then swap it in."""
    import copy

    import torch
    from transformers import GenerationConfig

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    half = copy.deepcopy(model).to("cpu", torch.float16)
    half.generation_config = GenerationConfig(eos_token_id=[model.config.eos_token_id], pad_token_id=model.config.pad_token_id,
                                              bos_token_id=model.config.bos_token_id)
    half.save_pretrained(tmp)
    hf_tokenizer(tok).save_pretrained(tmp)
    for name in tmp.iterdir():
        shutil.move(str(name), str(out / name.name))
    tmp.rmdir()


if __name__ == "__main__":
    raise SystemExit(main())
