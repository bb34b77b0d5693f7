"""Fine-tuning SmolLM2 on the tutor set with LoRA: the pairs, the batches, the schedule, the loop
(:func:`finetune`); the command line is :mod:`transformer_np.examples.finetune`. Page:
finetuning.md.
"""

from __future__ import annotations

import json
import math
import sys
import time
from importlib import resources

import numpy as np
from tqdm import tqdm

from ..clipping import clip_grad_norm
from ..losses import CrossEntropyLoss
from ..optim import Adam
from ..train import diverged, progress_bar

__all__ = [
    "DATA_FILE",
    "IGNORE",
    "TARGETS",
    "WarmupCosine",
    "accumulated_gradients",
    "encode_pair",
    "finetune",
    "heldout_loss",
    "load_pairs",
    "make_batch",
    "tutor_answer",
]


DATA_FILE = "tutor_it.jsonl"
IGNORE = -100  # the target of a position the loss skips (the question, the template, padding)
BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # recorded in adapter_config.json
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")  # every Linear map of every block
SAVE_FOLDER = "tutor"  # where a full run saves its adapter, unless told otherwise


def load_pairs(split=None):
    """The question/answer pairs shipped with the package.

    Parameters
    ----------
    split : {"train", "heldout"}, optional
        Only the pairs of this split (default: all).

    Returns
    -------
    list of dict
        ``id``, ``split``, ``topic``, ``question``, ``answer``, and for the other wordings of a
        question ``source``, the ``id`` of the training pair it rewords (same answer).
    """
    if split not in (None, "train", "heldout"):
        raise ValueError(f'split must be "train", "heldout" or None, got {split!r}')
    text = (resources.files(__package__) / "data" / DATA_FILE).read_text(encoding="utf-8")
    pairs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [p for p in pairs if split is None or p["split"] == split]


def encode_pair(tokenizer, question, answer):
    """The token ids of one exchange and the number of them that are the prompt.

    Parameters
    ----------
    tokenizer : transformer_np.pretrained.Tokenizer
        SmolLM2's, with its chat template.
    question, answer : str

    Returns
    -------
    ids : list of int
        The prompt (the template's system message, the user's turn, the assistant's turn
        opened), then the answer and ``<|im_end|>``: the ids of the rendered conversation.
    n_prompt : int
        How many of ``ids`` are the prompt; the loss is on the ``len(ids) - n_prompt`` others.
    """
    prompt = tokenizer.chat_ids([{"role": "user", "content": question}])  # ends "assistant\n"
    reply = tokenizer.encode(answer) + [tokenizer.eos_id]  # the answer, then <|im_end|>
    return prompt + reply, len(prompt)


def make_batch(examples, pad_id):
    """Inputs and targets of a batch of encoded pairs, padded on the right.

    Parameters
    ----------
    examples : list of (list of int, int)
        What :func:`encode_pair` returns, for B pairs.
    pad_id : int
        The id put after the shorter sequences (never a target: the causal mask keeps the
        positions before it from seeing it).

    Returns
    -------
    ids : ndarray of int64, shape (B, T)
        Every sequence but its last token (the model reads it).
    targets : ndarray of int64, shape (B, T)
        The next token where it is a token of the answer (or its ``<|im_end|>``), else
        :data:`IGNORE`: the loss is on the answer's tokens only.
    """
    T = max(len(seq) for seq, _ in examples) - 1
    ids = np.full((len(examples), T), pad_id, dtype=np.int64)
    targets = np.full((len(examples), T), IGNORE, dtype=np.int64)
    for i, (seq, n_prompt) in enumerate(examples):
        ids[i, : len(seq) - 1] = seq[:-1]
        # position t predicts token t + 1: the answer's tokens are n_prompt, ..., len(seq) - 1
        targets[i, n_prompt - 1 : len(seq) - 1] = seq[n_prompt:]
    return ids, targets


# --8<-- [start:warmup_cosine]
class WarmupCosine:
    """A learning rate that grows linearly for ``warmup`` steps, then comes down as a cosine.

    At step t (from 1), with w = ``warmup`` and n = ``total``: ``peak * t / w`` up to w, then
    ``peak * (1 + cos(pi * p)) / 2`` with ``p = (t - w) / (n - w + 1)``, which comes down
    towards 0 (the last step still has a small positive rate).
    """

    def __init__(self, peak, warmup, total):
        self.peak, self.warmup, self.total = float(peak), int(warmup), int(total)

    def __call__(self, step):
        if step <= self.warmup:
            return self.peak * step / self.warmup
        progress = (step - self.warmup) / (self.total - self.warmup + 1)  # below 1 at total
        return self.peak * 0.5 * (1 + math.cos(math.pi * progress))

    def __repr__(self):
        return f"WarmupCosine(peak={self.peak:g}, warmup={self.warmup}, total={self.total})"
        # --8<-- [end:warmup_cosine]


def batches_of(examples, size):
    """``examples`` cut into lists of at most ``size``."""
    return [examples[i : i + size] for i in range(0, len(examples), size)]


def heldout_loss(model, examples, pad_id, *, batch_size=8, bar=None):
    """The mean cross-entropy per answer token of ``examples`` (the encoded held-out pairs).

    ``bar``, a tqdm bar over the pairs, is moved on after each batch.

    Returns
    -------
    float
        Over all their answer tokens together (a long answer counts for its tokens).
    """
    loss_fn = CrossEntropyLoss(ignore_index=IGNORE)
    total, count = 0.0, 0
    ordered = sorted(examples, key=lambda e: len(e[0]))  # similar lengths: little padding
    with model.evaluation_mode():
        for batch in batches_of(ordered, batch_size):
            ids, targets = make_batch(batch, pad_id)
            n = int((targets != IGNORE).sum())
            total += loss_fn.forward(model(ids), targets) * n
            count += n
            if bar is not None:
                bar.update(len(batch))
    return total / count


# --8<-- [start:accumulated_gradients]
def accumulated_gradients(model, batches, params):
    """The loss and the gradients of ``params`` over several batches, as if they were one.

    Each batch's loss is the mean over its answer tokens; weighted by its share of all the
    answer tokens, the sum is the mean over all of them, and so is the sum of the gradients
    (gradient accumulation: the memory of one batch, the gradient of all). ``model``: a
    LlamaModel with adapters; ``batches``: the ``(ids, targets)`` of :func:`make_batch`;
    ``params``: the trainable ones (:func:`~transformer_np.lora.lora_params`). Returns the mean
    cross-entropy over the answer tokens of all the batches and its gradient, per parameter.
    """
    loss_fn = CrossEntropyLoss(ignore_index=IGNORE)
    n_total = sum(int((targets != IGNORE).sum()) for _, targets in batches)
    grads = {name: np.zeros_like(p) for name, p in params.items()}
    loss = 0.0
    for ids, targets in batches:
        share = int((targets != IGNORE).sum()) / n_total
        loss += share * loss_fn.forward(model(ids), targets)
        model.backward(loss_fn.backward(share))  # d(share * loss) / d logits
        for name in grads:
            grads[name] += model.grads[name]
    return loss, grads
    # --8<-- [end:accumulated_gradients]


def tutor_answer(model, tokenizer, question, *, max_new_tokens=60):
    """The model's greedy answer to ``question`` (the chat demo's :func:`~.chat.answer`)."""
    from .chat import answer

    messages = [{"role": "user", "content": question}]
    return "".join(answer(model, tokenizer, messages, max_new_tokens=max_new_tokens)).strip()


def phase(desc, total, stream, enabled, unit):
    """A tqdm bar over one phase's ``total`` items: live on a terminal; elsewhere (a log file, a
    pipe) one line when the phase starts, and the bar draws nothing."""
    isatty = getattr(stream, "isatty", None)
    if enabled and callable(isatty) and isatty():
        return tqdm(total=total, desc=desc, file=stream, unit=unit)
    if enabled:
        print(f"{desc}: {total} {unit}{'s' if total != 1 else ''}", file=stream, flush=True)
    return tqdm(total=total, disable=True)


def divergence(loss, grad_norm, ceiling):
    """Why a step diverged, or None: a loss or a gradient norm that is not finite, or a loss
    above ``ceiling``."""
    if not math.isfinite(loss):
        return f"the loss is {loss}"
    if not math.isfinite(grad_norm):
        return f"the gradient norm is {grad_norm} (loss {loss:.4g})"
    if loss > ceiling:
        return (
            f"the loss {loss:.4g} is above ln V = {ceiling:.4g}, the loss of a uniform guess "
            "over the vocabulary, which the model started below"
        )
    return None


def finetune(
    model,
    tokenizer,
    train_pairs,
    heldout_pairs,
    *,
    steps=60,
    batch_size=4,
    accumulation=2,
    lr=4e-3,
    warmup=6,
    weight_decay=0.01,
    clip_norm=1.0,
    rank=8,
    alpha=16,
    targets=TARGETS,
    eval_every=0,
    shown=3,
    max_new_tokens=60,
    time_limit=None,
    seed=0,
    stop_on_divergence=True,
    progress=True,
    stream=None,
):
    """Put LoRA adapters on ``model`` and train them on the question/answer pairs.

    Parameters
    ----------
    model : LlamaModel
        SmolLM2 (or any LlamaModel that ``tokenizer`` fits), changed in place: frozen, with
        adapters (:func:`~transformer_np.lora.add_lora`), trained.
    tokenizer : transformer_np.pretrained.Tokenizer
    train_pairs, heldout_pairs : list of dict
        With ``question`` and ``answer`` (:func:`load_pairs`).
    steps : int
        Optimiser steps; each sees ``batch_size * accumulation`` pairs.
    batch_size : int
        Pairs in one forward and backward pass.
    accumulation : int
        Passes whose gradients are added up before one step (a batch of
        ``batch_size * accumulation`` pairs in the memory of ``batch_size``).
    lr, warmup : float, int
        Peak learning rate, reached after ``warmup`` steps, then a cosine down to 0
        (:class:`WarmupCosine`).
    weight_decay : float
        AdamW's decoupled weight decay, on the adapters.
    clip_norm : float
        The gradient's global norm is clipped to this.
    rank, alpha, targets
        Of the adapters (:func:`~transformer_np.lora.add_lora`).
    eval_every : int
        Measure the held-out loss every this many steps too (0: only before and after).
    shown : int
        Held-out questions answered before and after, taken at even intervals of
        ``heldout_pairs`` (so from different topics).
    max_new_tokens : int
        Longest answer shown.
    time_limit : float, optional
        Stop after this many seconds of training.
    seed : int
        Seeds the adapters' initial A and the order of the pairs.
    stop_on_divergence : bool
        Stop when a step's loss is above ln V (V the model's vocabulary), the loss of a uniform
        guess, for a model whose held-out loss started below it: the adapters have made it worse
        than knowing nothing. A loss or a gradient that is NaN or infinite stops the run in any
        case.
    progress : bool
        Show what each phase is doing: on a terminal a live progress bar (tqdm) for the
        held-out loss, the answers and the training (with the loss and the learning rate);
        elsewhere a line when a phase starts, and the training's bar about every 10% of the
        steps.
    stream : file-like, optional
        Where the bars and lines are written (default ``sys.stderr``).

    Returns
    -------
    dict
        The log of the run, plain JSON: ``train`` (``step``, ``loss``, ``lr``, ``grad_norm``,
        ``seconds`` per step), ``heldout`` (``step`` and ``loss`` of each measure, step 0 before
        training), ``answers`` (``question``, ``before``, ``after``), ``trainable_parameters``,
        ``stopped`` ("steps" or "time_limit"), ``seconds`` and the options.

    Raises
    ------
    TrainingDiverged
        When a step diverges (see ``stop_on_divergence``), before its update; the message says
        at which step and why.
    """
    from ..lora import add_lora, lora_params

    stream = sys.stderr if stream is None else stream
    rng = np.random.default_rng(seed)
    pad = tokenizer.eos_id
    train = [encode_pair(tokenizer, p["question"], p["answer"]) for p in train_pairs]
    held = [encode_pair(tokenizer, p["question"], p["answer"]) for p in heldout_pairs]
    every = max(1, len(heldout_pairs) // max(1, shown))  # spread over the list (the topics)
    questions = [p["question"] for p in heldout_pairs[::every][:shown]]
    log = {
        "options": dict(
            steps=steps,
            batch_size=batch_size,
            accumulation=accumulation,
            lr=lr,
            warmup=warmup,
            weight_decay=weight_decay,
            clip_norm=clip_norm,
            rank=rank,
            alpha=alpha,
            targets=list(targets),
            seed=seed,
        ),
        "n_train": len(train),
        "n_heldout": len(held),
        "train": {"step": [], "loss": [], "lr": [], "grad_norm": [], "seconds": []},
        "heldout": [],
    }

    def measure(when):
        with phase(f"held-out loss {when}", len(held), stream, progress, "pair") as bar:
            return heldout_loss(model, held, pad, bar=bar)

    def ask(when):
        with phase(f"answers {when}", len(questions), stream, progress, "question") as bar:
            answers = []
            for q in questions:
                answers.append(tutor_answer(model, tokenizer, q, max_new_tokens=max_new_tokens))
                bar.update()
            return answers

    start = time.perf_counter()
    # 1. before: the held-out loss, and the answers of the model as it is
    log["heldout"].append({"step": 0, "loss": measure("before training")})
    before = ask("before training")
    # 2. the adapters, the optimiser (AdamW on the adapters only), the schedule
    add_lora(model, rank, alpha, targets=targets, rng=rng)
    params = lora_params(model)
    log["trainable_parameters"] = int(sum(p.size for p in params.values()))
    optimizer = Adam(
        params,
        lr=WarmupCosine(lr, warmup, steps),
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=weight_decay,
    )
    # A model that started better than a uniform guess over the vocabulary (a held-out loss
    # below ln V) and is now worse than one: the adapters have broken it. (A random model starts
    # near ln V: then only a NaN or infinite loss stops the run.)
    uniform = math.log(model.config.vocab_size)
    started_below = log["heldout"][0]["loss"] < uniform
    ceiling = uniform if stop_on_divergence and started_below else math.inf
    order, used = [], 0  # the training pairs, in a new random order at each pass
    log["stopped"] = "steps"
    train_start = time.perf_counter()
    model.train()
    if progress and not (callable(getattr(stream, "isatty", None)) and stream.isatty()):
        pairs = batch_size * accumulation
        print(f"finetune: {steps} steps of {pairs} pairs", file=stream, flush=True)
    with progress_bar(steps, "finetune", stream, progress) as bar:
        for step in range(1, steps + 1):
            # 3. the step's pairs, cut into `accumulation` batches
            chunk = []
            while len(chunk) < batch_size * accumulation:
                if used == len(order):
                    order, used = rng.permutation(len(train)).tolist(), 0
                chunk.append(train[order[used]])
                used += 1
            batches = [make_batch(b, pad) for b in batches_of(chunk, batch_size)]
            # 4. forward and backward of each batch, the gradients added up
            with np.errstate(over="ignore", invalid="ignore"):  # a divergence is reported below
                loss, grads = accumulated_gradients(model, batches, params)
                # 5. clip, stop if the step diverged, then one AdamW step
                rate = optimizer.current_lr()
                norm = clip_grad_norm(grads, clip_norm)
            problem = divergence(loss, norm, ceiling)
            if problem is not None:
                model.eval()
                raise diverged(step, log["train"], problem)
            optimizer.step(grads)
            for key, value in zip(
                ("step", "loss", "lr", "grad_norm"), (step, loss, rate, norm), strict=True
            ):
                log["train"][key].append(value)
            log["train"]["seconds"].append(time.perf_counter() - train_start)
            bar.set_postfix(loss=loss, lr=rate, refresh=False)
            bar.update()
            out_of_time = time_limit is not None and time.perf_counter() - train_start > time_limit
            if eval_every and step % eval_every == 0 and step < steps and not out_of_time:
                log["heldout"].append({"step": step, "loss": heldout_loss(model, held, pad)})
                if not bar.disable:
                    text = f"step {step}: held-out loss {log['heldout'][-1]['loss']:.4f}"
                    bar.write(text, file=bar.fp)
            if out_of_time:
                log["stopped"] = "time_limit"
                break
    model.eval()
    # 6. after: the held-out loss and the same questions again
    log["heldout"].append({"step": step, "loss": measure("after training")})
    after = ask("after training")
    log["answers"] = [
        {"question": q, "before": b, "after": a}
        for q, b, a in zip(questions, before, after, strict=True)
    ]
    log["seconds"] = time.perf_counter() - start
    log["train_seconds"] = log["train"]["seconds"][-1]
    return log


# --------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------

# --quick: a few steps of small batches, the held-out loss on a few questions
