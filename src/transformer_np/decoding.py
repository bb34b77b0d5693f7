r"""Generating tokens with a key/value cache: generate, stream and translate.

Each step runs the model on the new token only: the keys and values of the earlier positions
are kept in the model's cache (``model.new_cache``), and the encoder output of a
:class:`~transformer_np.model.Transformer` is computed once. With ``use_cache=False`` every step
recomputes the whole context: the slow reference, which gives the same tokens. Each token is
chosen by :func:`~transformer_np.sampling.sample_next`. For one new token with the cache, the
model runs its layers' ``decode_step`` on (B, D) rows (``model.one_token_forward()``: the same
logits up to rounding, with fewer NumPy calls). Page: decoding.md.

Shape glossary: B batch, T0 prompt length, S source length, V vocabulary.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked, run_or_blame
from ._checks.generation import check_generate, check_stream, check_translate
from .beam import beam_search, translate_beams
from .sampling import next_logits, sample_next

__all__ = ["generate", "stream", "translate"]


@checked(check_generate)
# --8<-- [start:generate]
def generate(
    model,
    prompt,
    max_new_tokens,
    *,
    temperature=0.0,
    top_k=None,
    top_p=None,
    rng=None,
    use_cache=True,
    keep=None,
    num_beams=1,
    length_penalty=0.6,
    early_stopping=False,
    eos_id=None,
    penalty="gnmt",
):
    """Continue ``prompt`` with a :class:`~transformer_np.model.LanguageModel` (or a
    :class:`~transformer_np.llama.LlamaModel`): the tokens of :func:`stream`, collected.

    The model runs in evaluation mode (dropout off) and is left in the mode it was in.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    prompt : ndarray of int, shape (B, T0)
        Token ids to continue (at least one per row, ``T0 <= config.max_len``).
    max_new_tokens : int
        How many tokens to add (beyond ``config.max_len`` too: see ``keep``), as many as fit in
        memory: the result is returned whole (:func:`stream` keeps none).
    temperature : float, default 0.0
        0 = greedy; otherwise sampling at this temperature (see
        :func:`~transformer_np.sampling.sample_next`).
    top_k : int, optional
    top_p : float, optional
        Nucleus sampling: ``0 < top_p <= 1``, None or 1.0 for no cut (see
        :func:`~transformer_np.sampling.sample_next`).
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
    num_beams : int, default 1
        1 decodes greedily or samples, as above. More runs
        :func:`~transformer_np.beam.beam_search` with ``length_penalty``, ``early_stopping``,
        ``eos_id`` and ``penalty`` (one prompt, B = 1; no sampling argument, no ``keep``).
    length_penalty : float, default 0.6
    early_stopping : bool or "never", default False
    eos_id : int, optional
        Beam search only: the end token (greedy decoding and sampling do not stop: break out
        of :func:`stream` instead).
    penalty : {"gnmt", "transformers"}, default "gnmt"

    Returns
    -------
    ndarray of int64, shape (B, T0 + max_new_tokens)
        The prompt followed by the new tokens. With ``num_beams > 1``: shape (1, T0 + L),
        the best hypothesis, ``L <= max_new_tokens`` (shorter when it ends with ``eos_id``).

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
    if num_beams > 1:  # the most probable sequence, not one token at a time
        sequences, _ = beam_search(
            model,
            prompt,
            max_new_tokens,
            num_beams=num_beams,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            eos_id=eos_id,
            penalty=penalty,
            use_cache=use_cache,
        )
        return sequences  # (1, T0 + L)
    steps = stream(
        model,
        prompt,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        rng=rng,
        use_cache=use_cache,
        keep=keep,
    )
    return np.column_stack([prompt, *steps])  # (B, T0) and max_new_tokens x (B,)


# --8<-- [end:generate]


@checked(check_stream)
# --8<-- [start:stream]
def stream(
    model,
    prompt,
    max_new_tokens,
    *,
    temperature=0.0,
    top_k=None,
    top_p=None,
    rng=None,
    use_cache=True,
    keep=None,
):
    """Like :func:`generate`, but yield the new tokens one step at a time, as they come.

    The arguments are checked when ``stream`` is called, before the first step. Only the
    window the model reads is kept, so ``max_new_tokens`` has no limit but time.

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
    max_len = model.config.max_len
    size = min(max_len, prompt.shape[1] + max_new_tokens)  # the cache never holds more
    context = prompt  # (B, T): the tokens the model reads, at positions 0 .. T - 1
    with model.evaluation_mode():
        forward = model.one_token_forward()  # the forward, by its layers' steps for one token
        cache = model.new_cache(size) if use_cache else None
        logits = next_logits(model, forward, context, kv_cache=cache)  # the prefill
        for step in range(max_new_tokens):
            token = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng)
            context = np.concatenate([context, token[:, None]], axis=1)  # (B, T + 1)
            yield token  # (B,)
            if step + 1 == max_new_tokens:
                break
            if context.shape[1] > max_len:  # the window is full: keep the last `keep` tokens
                context = context[:, -keep:]
                cache = model.new_cache(size) if use_cache else None  # a new prefill
                logits = next_logits(model, forward, context, kv_cache=cache)
            elif use_cache:  # one new token: its keys and values join the cache
                logits = next_logits(model, forward, context[:, -1:], kv_cache=cache)
            else:  # the slow reference: the whole window again
                logits = next_logits(model, forward, context)


# --8<-- [end:stream]


@checked(check_translate)
def translate(
    model,
    src,
    max_len,
    *,
    bos_id,
    eos_id=None,
    temperature=0.0,
    top_k=None,
    top_p=None,
    rng=None,
    use_cache=True,
    num_beams=1,
    length_penalty=0.6,
    early_stopping=False,
    penalty="gnmt",
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
        The token that starts every target; not ``pad_id`` (the decoder masks padding).
    eos_id : int, optional
        A sequence that produces it is finished: the positions after it are filled with
        ``pad_id`` (or ``eos_id`` without padding), and generation stops when every sequence
        has finished. Not ``pad_id``, which is never generated.
    temperature, top_k, top_p, rng
        As in :func:`~transformer_np.sampling.sample_next`; ``temperature=0`` is greedy decoding.
    use_cache : bool, default True
    num_beams : int, default 1
        1 decodes greedily or samples, as above. More runs a beam search for each source
        (the search of :func:`~transformer_np.beam.beam_search`, no sampling argument): the
        encoder runs once, and each source's ``num_beams`` beams are rows of the decoder's
        caches, reordered as the beams are chosen. ``2 * num_beams`` must not exceed the
        tokens that can be generated (``tgt_vocab_size``, less the padding token).
    length_penalty : float, default 0.6
        The exponent alpha of the length penalty (the paper decodes with 4 beams and 0.6).
    early_stopping : bool or "never", default False
    penalty : {"gnmt", "transformers"}, default "gnmt"
        As in :func:`~transformer_np.beam.beam_search`.

    Returns
    -------
    ndarray of int64, shape (B, L), L <= max_len
        The generated tokens without BOS (EOS included where produced). With
        ``num_beams > 1``: each source's best hypothesis, the shorter ones filled as after EOS.

    Notes
    -----
    The padding token is never generated (its logit is set to -inf): it is not a word, and
    the decoder masks it as a key. Beam search sets its log-probability to -inf after the
    log-softmax, so the other tokens keep the model's log-probabilities in the scores (as
    transformers' ``suppress_tokens``).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import Transformer, TransformerConfig
    >>> cfg = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, d_model=16, n_heads=2)
    >>> model = Transformer(cfg, rng=0)
    >>> out = translate(model, np.array([[3, 4, 5, 0]]), 6, bos_id=1, eos_id=2)
    >>> out.shape[0], out.shape[1] <= 6
    (1, True)
    >>> beams = translate(model, np.array([[3, 4, 5, 0]]), 6, bos_id=1, eos_id=2, num_beams=3)
    >>> beams.shape[0], beams.shape[1] <= 6
    (1, True)
    """
    pad = model.config.pad_id
    fill = pad if pad is not None else eos_id  # after EOS
    if num_beams > 1:  # the most probable sequence of each source, not one token at a time
        best = translate_beams(
            model, src, max_len, bos_id=bos_id, eos_id=eos_id, num_beams=num_beams,
            length_penalty=length_penalty, early_stopping=early_stopping, penalty=penalty,
            use_cache=use_cache,
        )  # fmt: skip
        L = max(len(tokens) for tokens, _ in best)  # without an end token, all are max_len
        out = np.full((len(best), L), 0 if fill is None else fill, np.int64)
        for row, (tokens, _) in zip(out, best, strict=True):
            row[: len(tokens)] = tokens  # (n,), then the fill: a shorter one ended with EOS
        return out  # (B, L)
    tokens = np.full((src.shape[0], 1), bos_id, dtype=np.int64)  # (B, 1): BOS, then the output
    done = np.zeros(src.shape[0], dtype=bool)  # (B,): the sequences that produced EOS
    with model.evaluation_mode():
        encode = model.source_forward()  # forward_encoder, by the blocks' source steps
        memory = run_or_blame(model, encode, src)  # (B, S, D), computed once
        src_mask = model.source_mask(src)
        # per decoder layer: the self-attention's cache and the cross-attention's (the memory's)
        cache = model.new_cache(max_len, memory.shape[1]) if use_cache else None
        decode = model.one_token_forward()  # forward_decoder, by its layers' steps
        for _ in range(max_len):
            new = tokens[:, -1:] if use_cache else tokens  # with the cache, the newest only
            logits = next_logits(model, decode, new, memory, src_mask, kv_cache=cache)
            if pad is not None:  # padding is not a word: never generated
                logits[:, pad] = -np.inf
            token = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng)
            if eos_id is not None:
                token = np.where(done, fill, token)
                done |= token == eos_id
            tokens = np.concatenate([tokens, token[:, None]], axis=1)  # (B, t + 1)
            if done.all():
                break
    return tokens[:, 1:]
