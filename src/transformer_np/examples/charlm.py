"""A character-level language model trained on the opening of Collodi's *Pinocchio*.

Run it::

    python -m transformer_np.examples.charlm            # 1000 steps, one to two minutes
    python -m transformer_np.examples.charlm --quick    # 300 steps, under a minute

The text (chapters I-II and part of III, public domain; see ``data/README.md``) is split into
characters; the last 10% is held out to measure the validation loss. The model is the
decoder-only :class:`~transformer_np.model.LanguageModel` (pre-LN, GELU, tied embeddings,
dropout 0.2: the text is small, about 10 000 characters, and without dropout the model learns
it by heart, its validation loss rising after a few hundred steps).
At regular steps it continues the same prompt, so you can watch the samples go from random
characters to Italian-looking words and then to phrases of the book.
"""

from __future__ import annotations

import sys
from importlib import resources

import numpy as np

from .._kernels.threads import blas_single_threaded
from ..checkpoints import save_model
from ..decoding import generate
from ..losses import cross_entropy
from ..model import LanguageModel, LanguageModelConfig
from ..optim import Adam
from ..schedule import NoamSchedule
from ..train import fit
from . import (
    announce,
    load_shipped,
    parse_training_arguments,
    save_or_rescue,
    training_parser,
)

__all__ = ["CharVocab", "load_text", "load_trained", "train_charlm"]

TEXT_FILE = "pinocchio_cap1-3.txt"


def load_text() -> str:
    """The Italian text shipped with the package (see ``examples/data/README.md``).

    Returns
    -------
    str
        Chapters I-II and part of III of *Pinocchio*, about 10 000 characters.
    """
    return (resources.files(__package__) / "data" / TEXT_FILE).read_text(encoding="utf-8")


class CharVocab:
    """Characters <-> integer ids (sorted, so the mapping is reproducible).

    Parameters
    ----------
    text : str
        The text whose distinct characters make the vocabulary.

    Attributes
    ----------
    chars : list of str
        The characters, sorted: ``chars[i]`` has id ``i``.
    index : dict of str to int
        The id of each character.

    Examples
    --------
    >>> v = CharVocab("ciao")
    >>> v.decode(v.encode("ciao"))
    'ciao'
    """

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars)

    def encode(self, text):
        """The ids of the characters of ``text``, an int64 array; ValueError for unknown ones."""
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown}")
        return np.array([self.index[c] for c in text], dtype=np.int64)

    def decode(self, ids):
        """The text of a sequence of ids."""
        return "".join(self.chars[int(i)] for i in ids)


def random_windows(ids, rng, batch_size, context):
    """A random batch of windows of the text, for next-character prediction.

    Parameters
    ----------
    ids : ndarray of shape (N,)
        The text as character ids.
    rng : numpy.random.Generator
        Picks the window starts ``s``.
    batch_size : int
        Number of windows B.
    context : int
        Length T of each window.

    Returns
    -------
    inputs : ndarray of shape (B, T)
        ``ids[s : s + T]`` for each start ``s``.
    targets : ndarray of shape (B, T)
        The same windows shifted by one, ``ids[s + 1 : s + T + 1]``.
    """
    starts = rng.integers(0, len(ids) - context - 1, size=batch_size)
    idx = starts[:, None] + np.arange(context + 1)[None, :]  # (B, context + 1)
    win = ids[idx]
    return win[:, :-1], win[:, 1:]


def validation_loss(model, ids, context, max_windows=64):
    """Mean cross-entropy of next-character prediction over consecutive windows of ``ids``.

    Parameters
    ----------
    model : LanguageModel
    ids : ndarray of shape (N,)
        Held-out text as character ids.
    context : int
        Length of each window.
    max_windows : int
        At most this many windows, from the start of ``ids``.

    Returns
    -------
    float
    """
    n = min((len(ids) - 1) // context, max_windows)
    x = ids[: n * context].reshape(n, context)
    y = ids[1 : n * context + 1].reshape(n, context)
    return cross_entropy(model(x), y)[0]


def train_charlm(
    *,
    steps=1000,
    context=64,
    batch_size=32,
    d_model=64,
    n_layers=2,
    n_heads=4,
    dropout=0.2,
    warmup=100,
    lr_factor=2.0,
    sample_every=200,
    prompt="C'era una volta",
    sample_len=120,
    temperature=0.8,
    time_limit=None,
    seed=0,
    progress=True,
    stream=None,
):
    """Train the character model on the first 90% of the text.

    Parameters
    ----------
    steps : int
        Optimiser steps.
    context : int
        Window length, also the model's ``max_len``.
    batch_size : int
        Windows per step.
    d_model, n_layers, n_heads, dropout
        The model's configuration (see :class:`~transformer_np.config.LanguageModelConfig`).
    warmup, lr_factor : int, float
        The learning-rate schedule, ``NoamSchedule(d_model, warmup, lr_factor)``.
    sample_every : int
        Continue the prompt and measure the validation loss every this many steps.
    prompt : str
        The beginning of every sample.
    sample_len, temperature : int, float
        Characters added to the prompt, and the sampling temperature.
    time_limit : float, optional
        Stop after this many seconds.
    seed : int
        Seeds the model, the batches and the samples.
    progress : bool
        Show the progress bar of :func:`~transformer_np.train.fit`.
    stream : file-like, optional
        Where the progress bar is written (default ``sys.stderr``).

    Returns
    -------
    model : LanguageModel
        Trained, in evaluation mode.
    vocab : CharVocab
    history : dict
        From :func:`~transformer_np.train.fit`; ``history["eval"]`` holds the validation loss
        at the steps of the samples.
    samples : list of (int, str)
        The prompt continued by the model before training (step 0) and every ``sample_every``
        steps, always with the same random seed.
    """
    text = load_text()
    vocab = CharVocab(text)
    ids = vocab.encode(text)
    split = int(0.9 * len(ids))
    train_ids, val_ids = ids[:split], ids[split:]
    cfg = LanguageModelConfig(
        vocab_size=len(vocab),
        d_model=d_model,
        n_heads=n_heads,
        n_layers=n_layers,
        max_len=context,  # longer samples slide a window (see decoding.generate)
        dropout=dropout,
    )
    model = LanguageModel(cfg, rng=np.random.default_rng(seed))
    opt = Adam(model.params, lr=NoamSchedule(d_model, warmup, lr_factor))
    rng = np.random.default_rng(seed + 1)
    prompt_ids = vocab.encode(prompt)[None, :]
    samples = []

    def sample(step):
        out = generate(
            model, prompt_ids, sample_len, temperature=temperature, rng=np.random.default_rng(0)
        )
        model.train()
        samples.append((step, vocab.decode(out[0])))

    def evaluate(m):
        return {"val_loss": validation_loss(m, val_ids, context)}

    with blas_single_threaded():
        sample(0)
    history = fit(
        model,
        lambda step: random_windows(train_ids, rng, batch_size, context),
        steps=steps,
        optimizer=opt,
        eval_fn=evaluate,
        eval_every=sample_every,
        callback=lambda step, h: (step % sample_every == 0 and sample(step)) or False,
        time_limit=time_limit,
        progress=progress,
        stream=stream,
        desc="charlm",
    )
    last = history["step"][-1]
    if not samples or samples[-1][0] != last:
        with blas_single_threaded():
            sample(last)
    model.eval()
    return model, vocab, history, samples


CHECKPOINT = "charlm.npz"


def load_trained():
    """The trained character model shipped with the package, and its training history.

    Returns
    -------
    model : LanguageModel
        In evaluation mode.
    extra : dict of str to ndarray
        The arrays saved next to the model: the vocabulary, the loss per step, the evaluations
        and the samples (see ``examples/data/README.md`` for the command that made the file).
    """
    return load_shipped(CHECKPOINT)


def parse_arguments(argv=None):
    """The command line's options, checked: a bad one is a usage error (exit status 2)."""
    parser = training_parser(
        "python -m transformer_np.examples.charlm",
        __doc__.split("\n")[0],
        quick="300 steps, under a minute",
        steps="training steps (default 1000, or 300 with --quick)",
    )
    args = parse_training_arguments(parser, argv)
    if args.steps is None:  # not given (0 is a usage error, never "the default")
        args.steps = 300 if args.quick else 1000
    return args


def main(argv=None):
    """The command line: train, print the samples, and save the model with ``--save``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 1 if ``--save`` could not be written at the end (the model is
        then saved in a temporary folder, named on stderr).
    """
    args = parse_arguments(argv)
    announce(f"training the character model on Pinocchio: {args.steps} steps", not args.no_progress)
    model, vocab, history, samples = train_charlm(
        steps=args.steps,
        sample_every=max(1, args.steps // 5),
        seed=args.seed,
        time_limit=args.time_limit,
        progress=not args.no_progress,
    )
    evals = dict(history["eval"])
    print(f"characters: {len(vocab)}, parameters: {model.num_parameters()}")
    for step, text in samples:
        loss = f"  (validation loss {evals[step]['val_loss']:.3f})" if step in evals else ""
        print(f"--- step {step}{loss}")
        print(text.replace("\n", " / "))
    rescued = False  # saved elsewhere than --save: the exit status says so
    if args.save:
        extra = {
            "chars": np.array(vocab.chars),
            "loss": np.array(history["loss"], dtype=np.float32),
            "eval_step": np.array([step for step, _ in history["eval"]], dtype=np.int64),
            "val_loss": np.array([m["val_loss"] for _, m in history["eval"]], dtype=np.float32),
            "sample_step": np.array([step for step, _ in samples], dtype=np.int64),
            "sample_text": np.array([text for _, text in samples]),
        }
        where, rescued = save_or_rescue(
            lambda path: save_model(path, model, extra=extra, overwrite=args.overwrite),
            args.save,
            "--save",
        )
        print(f"saved to {where}")
    return 1 if rescued else 0


if __name__ == "__main__":
    sys.exit(main())
