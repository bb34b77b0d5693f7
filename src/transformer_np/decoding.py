"""Generating tokens with a key/value cache: :func:`generate`, :func:`stream` and :func:`translate`.

Each step runs the model on the new token only (its layers' ``decode_step``, through
``model.one_token_forward()``), and each token is chosen by
:func:`~transformer_np.sampling.sample_next`. ``use_cache=False`` recomputes the whole context
at every step: the slow reference, which gives the same tokens. Page: decoding.md.

Shape glossary: B batch, T0 prompt length, S source length, V vocabulary.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Integer

from ._checks.boundary import checked, run_or_blame
from ._checks.generation import check_generate, check_stream, check_translate
from .beam import beam_search, translate_beams
from .sampling import next_logits, sample_next

__all__ = ["generate", "stream", "translate"]


@checked(check_generate)
# --8<-- [start:generate]
def generate(
    model,
    prompt: Integer[np.ndarray, "B T0"],
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

    The model runs in evaluation mode and is left in the mode it was in. Page: decoding.md.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    prompt : ndarray of int, shape (B, T0)
        Token ids to continue, ``1 <= T0 <= config.max_len``.
    max_new_tokens : int
        How many tokens to add, beyond ``config.max_len`` too (see ``keep``).
    temperature, top_k, top_p, rng
        As in :func:`~transformer_np.sampling.sample_next`; ``temperature=0`` (the default) is
        greedy.
    use_cache : bool, default True
        False recomputes the whole context at every step (the slow reference).
    keep : int, optional
        When the context is full (``config.max_len`` tokens), the model restarts from its last
        ``keep`` tokens (default ``max_len // 2``, in ``[1, max_len)``), at positions 0 .. keep - 1.
    num_beams : int, default 1
        More runs :func:`~transformer_np.beam.beam_search` (B = 1, no sampling, no ``keep``).
    length_penalty, early_stopping, eos_id, penalty
        Beam search only, as in :func:`~transformer_np.beam.beam_search` (greedy decoding and
        sampling do not stop at an end token: break out of :func:`stream`).

    Returns
    -------
    ndarray of int64, shape (B, T0 + max_new_tokens)
        The prompt and the new tokens. With ``num_beams > 1``, (1, T0 + L): the best hypothesis,
        ``L <= max_new_tokens`` (shorter when it ends with ``eos_id``).
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
    prompt: Integer[np.ndarray, "B T0"],
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

    The arguments are checked when ``stream`` is called. Only the window the model reads is kept,
    so ``max_new_tokens`` has no limit but time. Stop iterating (``break``) to end early, at an
    end-of-turn token say: the model is put back in the mode it was in.

    Yields
    ------
    ndarray of int64, shape (B,)
        The token chosen for each sequence at this step.
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
    src: Integer[np.ndarray, "B S"],
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

    The model runs in evaluation mode and is left in the mode it was in. The padding token is
    never generated (its logit is -inf). Page: decoding.md.

    Parameters
    ----------
    model : Transformer
    src : ndarray of int, shape (B, S)
        Source ids (padding = ``model.config.pad_id``).
    max_len : int
        The most tokens generated (BOS excluded), at most ``config.max_len``.
    bos_id : int
        The token that starts every target; not ``pad_id``.
    eos_id : int, optional
        Ends a sequence: the positions after it get ``pad_id`` (or ``eos_id`` without padding), and
        generation stops when every sequence has ended. Not ``pad_id``.
    temperature, top_k, top_p, rng
        As in :func:`~transformer_np.sampling.sample_next`; ``temperature=0`` is greedy decoding.
    use_cache : bool, default True
    num_beams : int, default 1
        More runs a beam search per source (:func:`~transformer_np.beam.beam_search`'s, no sampling
        argument); ``2 * num_beams`` must not exceed ``tgt_vocab_size`` less the padding token.
    length_penalty, early_stopping, penalty
        As in :func:`~transformer_np.beam.beam_search` (the paper decodes with 4 beams and 0.6).

    Returns
    -------
    ndarray of int64, shape (B, L), L <= max_len
        The generated tokens without BOS (EOS included where produced). With ``num_beams > 1``,
        each source's best hypothesis, the shorter ones filled as after EOS.
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
