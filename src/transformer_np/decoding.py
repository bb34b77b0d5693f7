r"""Generating tokens with a key/value cache: generate, stream and translate.

Without a cache, producing token ``t`` runs the whole model again on the ``t`` tokens so far:
``T`` new tokens cost about ``T^2 / 2`` token-passes. Self-attention at position ``t`` only
needs the keys and values of positions ``<= t``, and those never change once computed (the
mask is causal). The key/value cache keeps them, layer by layer, so each step runs the model on
one new token and attends to the stored keys: ``T`` token-passes in all. The encoder output of
a :class:`~transformer_np.model.Transformer` is computed once, and so are its cross-attention
keys and values.

Both paths give the same tokens (up to floating-point rounding of the logits); the tests check
it, and ``benchmarks/bench_decoding.py`` measures the speed-up. Each new token is chosen by
:mod:`transformer_np.sampling` (greedy, temperature or top-k).
"""

from __future__ import annotations

import numbers

import numpy as np

from ._validation import (
    check_bool,
    check_ids,
    check_positive_int,
    check_rng,
)
from .llama import CONTEXT_LIMIT, LlamaModel
from .model import LanguageModel, Transformer
from .module import running
from .multi_head import KVCache
from .sampling import check_sampling, choose_next

__all__ = ["generate", "stream", "translate"]


# --------------------------------------------------------------------------------------------
# public generation functions
# --------------------------------------------------------------------------------------------


def generate(
    model: LanguageModel | LlamaModel,
    prompt,
    max_new_tokens,
    *,
    temperature=0.0,
    top_k=None,
    rng=None,
    use_cache=True,
    keep=None,
):
    """Continue ``prompt`` with a :class:`~transformer_np.model.LanguageModel` (or a
    :class:`~transformer_np.llama.LlamaModel`: the same loop, the same cache).

    The model runs in evaluation mode (dropout off) and is left in the mode it was in.

    Parameters
    ----------
    model : LanguageModel
    prompt : ndarray of int, shape (B, T0)
        Token ids to continue (at least one per row, ``T0 <= config.max_len``).
    max_new_tokens : int
        How many tokens to add (any number: see ``keep``).
    temperature : float, default 0.0
        0 = greedy; otherwise sampling at this temperature (see
        :func:`~transformer_np.sampling.sample_next`).
    top_k : int, optional
    rng : np.random.Generator or int, optional
    use_cache : bool, default True
        False recomputes the whole context at every step (the slow reference).
    keep : int, optional
        The model never reads more than ``config.max_len`` tokens (the positions it was trained
        on). When the context is full, it restarts from its last ``keep`` tokens (default
        ``max_len // 2``), at positions 0 .. keep - 1: with the cache, that is one new prefill.
        Both paths apply the same rule, so they give the same tokens. A model with
        ``max_len = 1`` has no room for a window that slides (``keep`` must be in
        ``[1, max_len)``): it can only add one token to a one-token prompt.

    Returns
    -------
    ndarray of int64, shape (B, T0 + max_new_tokens)
        The prompt followed by the new tokens.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import LanguageModel, LanguageModelConfig
    >>> cfg = LanguageModelConfig(vocab_size=10, d_model=16, n_heads=2, max_len=8)
    >>> lm = LanguageModel(cfg, rng=0)
    >>> out = generate(lm, np.array([[1, 2, 3]]), 12)  # longer than max_len: the window slides
    >>> out.shape
    (1, 15)
    >>> bool((out == generate(lm, np.array([[1, 2, 3]]), 12, use_cache=False)).all())
    True
    """
    args = check_generation(model, prompt, max_new_tokens, temperature, top_k, rng, use_cache, keep)
    was_training = model.training
    model.eval()
    try:
        with running():  # the arguments are checked: the layers run without checks
            steps = list(generate_tokens(model, *args))
    finally:
        model.train(was_training)
    return np.concatenate([args[0], np.stack(steps, axis=1)], axis=1)  # (B, T0 + new)


def stream(
    model: LanguageModel | LlamaModel,
    prompt,
    max_new_tokens,
    *,
    temperature=0.0,
    top_k=None,
    rng=None,
    use_cache=True,
    keep=None,
):
    """Like :func:`generate`, but yield the new tokens one step at a time, as they come.

    Yields
    ------
    ndarray of int64, shape (B,)
        The token chosen for each sequence at this step. Stop iterating (``break``) to end
        generation early, e.g. at an end-of-turn token; the model is then put back in the mode
        it was in.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import LanguageModel, LanguageModelConfig
    >>> lm = LanguageModel(LanguageModelConfig(vocab_size=10, d_model=16, n_heads=2), rng=0)
    >>> steps = [int(t[0]) for t in stream(lm, np.array([[1, 2, 3]]), 5)]
    >>> steps == generate(lm, np.array([[1, 2, 3]]), 5)[0, 3:].tolist()
    True
    """
    args = check_generation(model, prompt, max_new_tokens, temperature, top_k, rng, use_cache, keep)
    return stream_tokens(model, args)  # the arguments are checked now, not at the first step


def stream_tokens(model, args):
    """The generator behind :func:`stream`: the model in eval mode while it runs."""
    was_training = model.training
    model.eval()
    steps = generate_tokens(model, *args)
    try:
        while True:
            with running():  # only while the model runs: the caller's code keeps its checks
                token = next(steps, None)
            if token is None:
                return
            yield token
    finally:
        model.train(was_training)


def check_generation(model, prompt, max_new_tokens, temperature, top_k, rng, use_cache, keep):
    """The arguments of :func:`generate` checked: (prompt, total, temperature, top_k, rng,
    use_cache, keep) ready for :func:`generate_tokens`."""
    if not isinstance(model, LanguageModel | LlamaModel):
        raise TypeError(
            f"model must be a LanguageModel or a LlamaModel, got {type(model).__name__}"
        )
    cfg = model.config
    limit = CONTEXT_LIMIT if isinstance(model, LlamaModel) else {}
    prompt = check_ids(prompt, "prompt", cfg.vocab_size, cfg.max_len, **limit)
    n_new = check_positive_int(max_new_tokens, "max_new_tokens")
    temperature = check_sampling(temperature, top_k, cfg.vocab_size)
    use_cache = check_bool(use_cache, "use_cache")
    T0 = prompt.shape[1]
    total = T0 + n_new
    if keep is None:
        keep = cfg.max_len // 2
        # The model reads at most total - 1 tokens (the last one is never fed back): with
        # max_len = 1 there is no token to keep when the window slides, which only matters
        # if it has to slide.
        if keep == 0 and total - 1 > cfg.max_len:
            raise ValueError(
                f"the model's max_len = {cfg.max_len} leaves no room for the sliding window: "
                f"a prompt of {T0} token(s) plus max_new_tokens = {n_new} makes the context "
                "longer than max_len, and the window then keeps keep in [1, max_len) tokens, "
                "which needs max_len >= 2 (build the model with a larger max_len)"
            )
        keep = max(keep, 1)
    elif isinstance(keep, bool | np.bool_) or not isinstance(keep, numbers.Integral):
        raise TypeError(
            f"keep must be an integer in [1, max_len = {cfg.max_len}) or None, "
            f"got {keep!r} ({type(keep).__name__})"
        )
    elif not 1 <= keep < cfg.max_len:
        raise ValueError(f"keep must be an integer in [1, max_len = {cfg.max_len}), got {keep}")
    keep = int(keep)
    rng = check_rng(rng)
    return prompt, total, temperature, top_k, rng, use_cache, keep


# --8<-- [start:generate_loop]
def generate_tokens(model, prompt, total, temperature, top_k, rng, use_cache, keep):
    """The loop of :func:`generate`, on checked arguments, with the model in eval mode: yield
    each step's new tokens (B,)."""
    cfg = model.config
    B, T0 = prompt.shape
    out = np.zeros((B, total), dtype=np.int64)
    out[:, :T0] = prompt
    start = 0  # the model reads out[:, start:t]
    size = min(cfg.max_len, total)  # the cache never holds more than the window
    cache = [KVCache(size) for _ in model.blocks.layers] if use_cache else None
    logits = model(prompt, kv_cache=cache)[:, -1]  # the whole prompt at once (the prefill)
    for t in range(T0, total):
        out[:, t] = choose_next(logits, temperature, top_k, rng)
        yield out[:, t].copy()
        if t + 1 == total:
            break
        full = t + 1 - start > cfg.max_len
        if full:  # the window is full: restart from the last `keep` tokens
            start = t + 1 - keep
        if not use_cache:  # the slow reference: the whole window again
            logits = model(out[:, start : t + 1])[:, -1]
        elif full:  # a new prefill of the kept tokens, at positions 0 .. keep - 1
            for c in cache:
                c.length = 0
            logits = model(out[:, start : t + 1], kv_cache=cache)[:, -1]
        else:  # one new token: its keys and values join the cache
            logits = model(out[:, t : t + 1], kv_cache=cache)[:, -1]


# --8<-- [end:generate_loop]


def translate(
    model: Transformer,
    src,
    max_len,
    *,
    bos_id,
    eos_id=None,
    temperature=0.0,
    top_k=None,
    rng=None,
    use_cache=True,
):
    """Generate target sequences for ``src`` with an encoder-decoder :class:`Transformer`.

    The model runs in evaluation mode (dropout off) and is left in the mode it was in.

    Parameters
    ----------
    model : Transformer
    src : ndarray of int, shape (B, S)
        Source ids (padding = ``model.config.pad_id``).
    max_len : int
        Maximum number of generated tokens (BOS excluded), at most ``config.max_len`` (the
        decoder reads BOS and the first ``max_len - 1`` of them).
    bos_id : int
        The token that starts every target.
    eos_id : int, optional
        A sequence that produces it is finished: the positions after it are filled with
        ``pad_id`` (or ``eos_id`` without padding), and generation stops when every sequence
        has finished.
    temperature, top_k, rng
        As in :func:`~transformer_np.sampling.sample_next`; ``temperature=0`` is greedy decoding.
    use_cache : bool, default True

    Returns
    -------
    ndarray of int64, shape (B, L), L <= max_len
        The generated tokens without BOS (EOS included where produced).

    Notes
    -----
    The padding token is never generated (its logit is set to -inf): it is not a word, and
    the decoder masks it as a key.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import Transformer, TransformerConfig
    >>> cfg = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, d_model=16, n_heads=2)
    >>> model = Transformer(cfg, rng=0)
    >>> out = translate(model, np.array([[3, 4, 5, 0]]), 6, bos_id=1, eos_id=2)
    >>> out.shape[0], out.shape[1] <= 6
    (1, True)
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    cfg = model.config
    n_new = check_positive_int(max_len, "max_len")
    if n_new > cfg.max_len:  # the decoder reads BOS + the first max_len - 1 tokens
        raise ValueError(
            f"max_len = {n_new} is longer than the positional table "
            f"(config.max_len = {cfg.max_len})"
        )
    V = cfg.tgt_vocab_size
    for name, tok, eos in (("bos_id", bos_id, False), ("eos_id", eos_id, True)):
        if tok is None and eos:
            continue
        if isinstance(tok, bool | np.bool_) or not isinstance(tok, numbers.Integral):
            expected = f"a token id (an integer in [0, {V}))" + (" or None" if eos else "")
            raise TypeError(f"{name} must be {expected}, got {tok!r} ({type(tok).__name__})")
        if not 0 <= tok < V:
            raise ValueError(f"{name} must be a token id in [0, {V}), got {tok}")
    src = check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)
    bos_id = int(bos_id)
    eos_id = None if eos_id is None else int(eos_id)
    check_sampling(temperature, top_k, V)
    use_cache = check_bool(use_cache, "use_cache")
    rng = check_rng(rng)
    was_training = model.training
    model.eval()
    try:
        with running():
            args = (temperature, top_k, rng, use_cache)
            return translate_tokens(model, src, n_new, bos_id, eos_id, *args)
    finally:
        model.train(was_training)


def translate_tokens(model, src, n_new, bos_id, eos_id, temperature, top_k, rng, use_cache):
    """The loop of :func:`translate`, on checked arguments, with the model in eval mode."""
    cfg = model.config
    memory = model.forward_encoder(src)  # (B, S, D), computed once
    src_mask = model.source_mask(src)
    B = memory.shape[0]
    pad = cfg.pad_id
    fill = pad if pad is not None else (eos_id if eos_id is not None else 0)
    tokens = np.full((B, n_new + 1), fill, dtype=np.int64)
    tokens[:, 0] = bos_id
    done = np.zeros(B, dtype=bool)
    S = memory.shape[1]
    # per decoder layer: the self-attention's cache and the cross-attention's (the memory's)
    cache = [(KVCache(n_new), KVCache(S)) for _ in model.decoder.layers] if use_cache else None
    t = 1
    for t in range(1, n_new + 1):
        if use_cache:  # only the newest token
            logits = model.forward_decoder(tokens[:, t - 1 : t], memory, src_mask, kv_cache=cache)
        else:
            logits = model.forward_decoder(tokens[:, :t], memory, src_mask)
        logits = logits[:, -1]
        if pad is not None:
            logits = logits.copy()
            logits[:, pad] = -np.inf
        nxt = choose_next(logits, temperature, top_k, rng)
        tokens[:, t] = np.where(done, fill, nxt)
        if eos_id is not None:
            done |= nxt == eos_id
            if done.all():
                break
    return tokens[:, 1 : t + 1]
