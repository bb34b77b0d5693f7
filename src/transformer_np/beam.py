"""Beam search with the key/value cache, for the decoder-only models and the encoder-decoder.

The ``num_beams`` most probable sequences are kept, each a row of the batch; the cache follows
them (:meth:`~transformer_np.multi_head.KVCache.reorder`), and a finished hypothesis is scored
by its summed log-probability over a length penalty. Page: decoding.md.

Shape glossary: T0 prompt length, V vocabulary, R running beams (1, then ``num_beams``),
K = 2 ``num_beams`` candidates per step, n tokens generated so far.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Integer

from ._checks.boundary import checked, run_or_blame
from ._checks.generation import check_beam_search
from .functional import log_softmax
from .sampling import next_logits

__all__ = ["beam_search"]


@checked(check_beam_search)
# --8<-- [start:beam_search]
def beam_search(
    model,
    prompt: Integer[np.ndarray, "1 T0"],
    max_new_tokens,
    *,
    num_beams,
    length_penalty=0.6,
    early_stopping=False,
    eos_id=None,
    penalty="gnmt",
    use_cache=True,
):
    """Continue ``prompt`` with the most probable sequence that beam search finds.

    The model runs in evaluation mode and is left in the mode it was in. The search is
    transformers' (``generate(num_beams=...)``, version 5), without GNMT's coverage penalty.
    Page: decoding.md.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    prompt : ndarray of int, shape (1, T0)
        One prompt (B = 1), with ``T0 + max_new_tokens - 1 <= config.max_len``: the window does
        not slide.
    max_new_tokens : int
        The most tokens a hypothesis may have; one that reaches it is finished.
    num_beams : int
        How many sequences are kept at each step, ``2 * num_beams <= vocab_size``; 1 is greedy.
    length_penalty : float, default 0.6
        The exponent alpha of the length penalty lp (0.6 is the paper's, after Wu et al. 2016).
    early_stopping : bool or "never", default False
        As transformers': True stops once ``num_beams`` hypotheses are finished; False also when
        the best running beam, scored at its current length, cannot beat the worst of them;
        "never" scores it at its most favourable length (``max_new_tokens`` when alpha > 0).
    eos_id : int, optional
        The end token: a beam that produces it is finished (the token included). Default: the
        model's own, ``config.eos_id`` (``<|im_end|>`` for SmolLM2 from :func:`load_smollm2`, as
        transformers takes it from the model; none for a model built without one).
    penalty : {"gnmt", "transformers"}, default "gnmt"
        lp(n) for n generated tokens: ``((5 + n) / 6) ** alpha`` (Wu et al. 2016, eq. 14) or
        ``n ** alpha`` (Hugging Face's).
    use_cache : bool, default True
        False recomputes every beam's context at every step (the slow reference).

    Returns
    -------
    sequences : ndarray of int64, shape (1, T0 + L), 1 <= L <= max_new_tokens
        The prompt followed by the best hypothesis (ending with ``eos_id`` if it produced it).
    scores : ndarray of float64, shape (1,)
        Its summed log-probability / lp(L) (transformers' ``sequences_scores``).
    """
    T0 = prompt.shape[1]
    with model.evaluation_mode():
        # the last token is never fed back: the cache holds at most T0 + max_new_tokens - 1
        cache = model.new_cache(T0 + max_new_tokens - 1) if use_cache else None
        forward = model.one_token_forward()  # the forward, by its layers' steps for one token
        logits = next_logits(model, forward, prompt, kv_cache=cache)  # (1, V): the prefill

        def advance(rows, tokens):
            """The next logits (R, V) of the beams: rows of the old ones, then ``tokens``."""
            if use_cache:  # the cache follows the beams (a beam is a batch row)
                for layer_cache in cache:
                    layer_cache.reorder(rows)  # (R', Hkv, T, Dh) -> (R, Hkv, T, Dh)
                return next_logits(model, forward, tokens[:, -1:], kv_cache=cache)
            context = np.column_stack([np.repeat(prompt, len(rows), axis=0), tokens])
            return next_logits(model, forward, context)  # the slow reference

        sequence, score = search(
            logits, advance, max_new_tokens, num_beams, length_penalty, early_stopping, eos_id,
            penalty,
        )  # fmt: skip
    return np.concatenate([prompt[0], sequence])[None], np.array([score])


# --8<-- [end:beam_search]


# --8<-- [start:search]
def search(logits, advance, max_new_tokens, num_beams, length_penalty, early_stopping, eos_id,
           penalty, suppress=None):  # fmt: skip
    """The search, for any model: the best hypothesis (n,) and its score. ``logits`` (1, V) are the
    first token's; ``advance(rows, tokens)`` moves the model's cache to the new beams (row i
    continues old beam ``rows[i]`` with ``tokens[i]``, (R, n)) and gives their next logits (R, V);
    a ``suppress`` token gets log-probability -inf after the log-softmax. Page: decoding.md.
    """
    V = logits.shape[-1]
    K = 2 * num_beams  # candidates per step: enough for num_beams beams that do not end
    tokens = np.zeros((1, 0), dtype=np.int64)  # (R, n): the generated tokens of each beam
    scores = np.zeros(1)  # (R,): their summed log-probabilities
    finished = []  # [(score, tokens (n,))], best first, at most num_beams
    for step in range(max_new_tokens):
        n = step + 1  # the length of the candidates
        # 1. Every continuation of every beam, scored by its summed log-probability.
        logp = log_softmax(logits.astype(np.float64))  # (R, V)
        if suppress is not None:
            logp[:, suppress] = -np.inf
        total = scores[:, None] + logp  # (R, V)
        flat = total.ravel()  # (R V,)
        # 2. The K best, best first: the beam each continues and its new token.
        best = np.argsort(-flat, kind="stable")[:K]  # (K,)
        source, token = np.divmod(best, V)  # (K,) each
        candidate = flat[best]  # (K,)
        ends = np.full(best.size, n == max_new_tokens)  # (K,): at the last step all end
        if eos_id is not None:
            ends |= token == eos_id
        # 3. Those among the first num_beams that end are finished hypotheses: keep the
        #    best num_beams of them (the earlier first among equal scores).
        lp = length_divisor(n, length_penalty, penalty)
        for i in np.flatnonzero(ends[:num_beams]):
            sequence = np.append(tokens[source[i]], token[i])  # (n,)
            finished.append((float(candidate[i] / lp), sequence))
        finished = sorted(finished, key=lambda f: -f[0])[:num_beams]
        if n == max_new_tokens:
            break
        # 4. The first num_beams that do not end are the new beams (at most one end token
        #    per beam among the K, so there are enough).
        keep = np.flatnonzero(~ends)[:num_beams]  # (num_beams,)
        rows = source[keep]  # (num_beams,): the beam each new beam continues
        tokens = np.column_stack([tokens[rows], token[keep]])  # (num_beams, n)
        scores = candidate[keep]  # (num_beams,), best first
        # 5. Stop when num_beams hypotheses are finished and (early_stopping=True) that is
        #    enough, or the best beam, at its most favourable length, cannot beat them.
        if len(finished) == num_beams:
            if early_stopping is True:
                break
            length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else n
            if scores[0] / length_divisor(length, length_penalty, penalty) <= finished[-1][0]:
                break
        # 6. The model follows the beams (the cache is reordered, not recomputed).
        logits = advance(rows, tokens)  # (num_beams, V)
    score, sequence = finished[0]
    return sequence, score


# --8<-- [end:search]


# --8<-- [start:length_divisor]
def length_divisor(n, alpha, penalty):
    """lp(n), which divides the summed log-probability of a hypothesis of ``n`` tokens:
    ``((5 + n) / 6) ** alpha`` ("gnmt", Wu et al. 2016) or ``n ** alpha`` ("transformers")."""
    if penalty == "gnmt":
        return ((5 + n) / 6) ** alpha
    return n**alpha


# --8<-- [end:length_divisor]


def translate_beams(
    model, src, max_len, *, bos_id, eos_id, num_beams, length_penalty, early_stopping, penalty,
    use_cache,
):  # fmt: skip
    """Beam search with an encoder-decoder :class:`~transformer_np.model.Transformer`, for
    checked arguments (see :func:`~transformer_np.decoding.translate`): [(tokens (n,), score)], the
    best hypothesis of each source row. The encoder runs once; each row's beams are the rows of its
    decoder's self- and cross-attention caches; the padding token is never generated."""
    pad = model.config.pad_id
    bos = np.full((1, 1), bos_id, dtype=np.int64)  # (1, 1): every target starts with BOS
    best = []
    with model.evaluation_mode():
        forward = model.one_token_forward()  # forward_decoder, by its layers' steps
        memories = run_or_blame(model, model.source_forward(), src)  # (B, S, D), once
        masks = model.source_mask(src)  # (B, 1, 1, S) or None
        for b in range(src.shape[0]):  # one search per source
            memory = memories[b : b + 1]  # (1, S, D)
            src_mask = None if masks is None else masks[b : b + 1]  # (1, 1, 1, S)
            # BOS and the tokens fed back (the last one never is): at most max_len positions
            cache = model.new_cache(max_len, memory.shape[1]) if use_cache else None

            def decode(new, rows, cache=cache, memory=memory, src_mask=src_mask):
                """The next logits (R, V) of R = len(rows) beams."""
                memory = np.broadcast_to(memory, (len(rows),) + memory.shape[1:])  # (R, S, D)
                return next_logits(model, forward, new, memory, src_mask, kv_cache=cache)

            def advance(rows, tokens, cache=cache, decode=decode):
                if use_cache:  # both caches follow the beams (a beam is a batch row)
                    for self_cache, cross_cache in cache:
                        self_cache.reorder(rows)  # (R', H, t, Dh) -> (R, H, t, Dh)
                        cross_cache.reorder(rows)  # (R', H, S, Dh) -> (R, H, S, Dh)
                    return decode(tokens[:, -1:], rows)
                context = np.column_stack([np.repeat(bos, len(rows), axis=0), tokens])
                return decode(context, rows)  # the slow reference: BOS and every token again

            logits = decode(bos, [0])  # (1, V); with the cache, the memory is projected once
            options = dict(length_penalty=length_penalty, early_stopping=early_stopping)
            options.update(eos_id=eos_id, penalty=penalty, suppress=pad)
            best.append(search(logits, advance, max_len, num_beams, **options))
    return best
