"""The validators of generation: generate, stream, translate and sample_next.

Each takes its entry point's arguments by name (defaults filled in) and returns them checked, as
a dict (see :func:`.boundary.checked`). The model is recognised by its configuration, so that
generation needs nothing from the model classes but ``config``, ``new_cache`` and ``forward``.
The token ids (``prompt``, ``src``) arrive as integer arrays of two axes: their annotations in
the signature checked the dtype and the shape (:mod:`.shapes`); the validators check the values.
"""

from __future__ import annotations

import math
import numbers
import os

import numpy as np

from .general import (
    check_bool,
    check_finite,
    check_positive_int,
    check_rng,
    is_a,
    shape_str,
)
from .models import check_id_values

# -- generate and stream ------------------------------------------------------------------------


def check_decoder_only(model):
    """The configuration of a LanguageModel or a LlamaModel, else a TypeError."""
    cfg = getattr(model, "config", None)
    if not is_a(cfg, "LanguageModelConfig", "LlamaConfig"):
        raise TypeError(
            f"model must be a LanguageModel or a LlamaModel (a decoder-only model), "
            f"got {type(model).__name__}"
        )
    return cfg


def check_stream(model, prompt, max_new_tokens, temperature, top_k, top_p, rng, use_cache, keep):
    cfg = check_decoder_only(model)
    prompt = check_id_values(prompt, "prompt", cfg.vocab_size, cfg.max_len, 0, model.context_limit)
    n_new = check_positive_int(max_new_tokens, "max_new_tokens")
    return {
        "model": model,
        "prompt": prompt.astype(np.int64, copy=False),
        "max_new_tokens": n_new,
        **check_sampling(temperature, top_k, top_p, cfg.vocab_size),
        "rng": check_rng(rng),
        "use_cache": check_bool(use_cache, "use_cache"),
        "keep": check_keep(keep, cfg.max_len, prompt.shape[1], n_new),
    }


def check_generate(
    model,
    prompt,
    max_new_tokens,
    temperature,
    top_k,
    top_p,
    rng,
    use_cache,
    keep,
    num_beams,
    length_penalty,
    early_stopping,
    eos_id,
    penalty,
):
    """As :func:`check_stream`, and the tokens generate returns must fit in memory; with
    ``num_beams > 1``, as :func:`check_beam_search` (and no sampling argument)."""
    beams = check_num_beams(num_beams)
    if beams > 1:
        no_sampling_with_beams(beams, temperature, top_k, top_p, rng, keep)
        return {
            **check_beam_search(
                model,
                prompt,
                max_new_tokens,
                beams,
                length_penalty,
                early_stopping,
                eos_id,
                penalty,
                use_cache,
            ),
            "temperature": 0.0,
            "top_k": None,
            "top_p": None,
            "rng": None,
            "keep": None,
        }
    if eos_id is not None:
        raise ValueError(
            f"eos_id = {eos_id!r} is read by beam search only (num_beams > 1): greedy decoding "
            "and sampling (num_beams=1) do not stop at an end token; iterate over stream(...) "
            "and break at it instead"
        )
    checked = check_stream(
        model, prompt, max_new_tokens, temperature, top_k, top_p, rng, use_cache, keep
    )
    # the beam options are unused with one beam, but must be well formed
    checked.update(
        num_beams=1,
        eos_id=None,
        **check_beam_options(length_penalty, early_stopping, penalty, checked["max_new_tokens"]),
    )
    B, T0 = checked["prompt"].shape
    memory = physical_memory()
    if memory is not None and B * (T0 + checked["max_new_tokens"]) * 8 > memory:
        most = max(memory // (8 * B) - T0, 0)
        raise ValueError(
            f"max_new_tokens must be at most {most}: generate returns its {B} sequence(s) "
            f"whole, in int64, and more would not fit in this machine's memory "
            f"({memory / 2**30:.1f} GiB); stream yields the tokens one step at a time without "
            f"keeping them. Got max_new_tokens = {max_new_tokens}"
        )
    return checked


# -- beam_search --------------------------------------------------------------------------------

PENALTIES = ("gnmt", "transformers")


def check_beam_search(
    model, prompt, max_new_tokens, num_beams, length_penalty, early_stopping, eos_id, penalty,
    use_cache,
):  # fmt: skip
    cfg = check_decoder_only(model)
    prompt = check_id_values(prompt, "prompt", cfg.vocab_size, cfg.max_len, 0, model.context_limit)
    if prompt.shape[0] != 1:  # beam_search's annotation says it; generate's (B, T0) does not
        raise ValueError(
            f"beam search takes one prompt (shape (1, T0)), got {prompt.shape[0]} "
            f"(shape {shape_str(prompt.shape)}): call it once per prompt"
        )
    n_new = check_positive_int(max_new_tokens, "max_new_tokens")
    T0 = prompt.shape[1]
    if T0 + n_new - 1 > cfg.max_len:
        raise ValueError(
            f"max_new_tokens must be at most {cfg.max_len - T0 + 1}: beam search does not slide "
            f"the window, so the prompt ({T0} tokens) and the tokens fed back "
            f"(max_new_tokens - 1) must fit in max_len = {cfg.max_len}. "
            f"Got max_new_tokens = {n_new}"
        )
    beams = check_num_beams(num_beams)
    if 2 * beams > cfg.vocab_size:
        raise ValueError(
            f"num_beams must be at most vocab_size / 2 = {cfg.vocab_size // 2}: each step keeps "
            f"2 * num_beams candidates, and the first has only the vocab_size = {cfg.vocab_size} "
            f"continuations of the prompt. Got num_beams = {beams}"
        )
    return {
        "model": model,
        "prompt": prompt.astype(np.int64, copy=False),
        "max_new_tokens": n_new,
        "num_beams": beams,
        **check_beam_options(length_penalty, early_stopping, penalty, n_new),
        # None: the model's own end token (config.eos_id), as transformers takes it from the model
        "eos_id": getattr(cfg, "eos_id", None)
        if eos_id is None
        else check_token_id(eos_id, "eos_id", cfg.vocab_size, optional=True),  # fmt: skip
        "use_cache": check_bool(use_cache, "use_cache"),
    }


def check_num_beams(num_beams) -> int:
    return check_positive_int(num_beams, "num_beams")


def no_sampling_with_beams(beams, temperature, top_k, top_p, rng, keep=None) -> None:
    """A ValueError naming the sampling arguments given with ``num_beams > 1``."""
    given = {
        "temperature": temperature != 0,
        "top_k": top_k is not None,
        "top_p": top_p is not None,
        "rng": rng is not None,
        "keep": keep is not None,
    }
    wrong = [name for name, set_ in given.items() if set_]
    if wrong:
        raise ValueError(
            f"beam search (num_beams = {beams}) is deterministic and does not slide the "
            f"window: leave {', '.join(wrong)} at the default (temperature=0, top_k, top_p, "
            "rng and keep None), or use num_beams=1 to sample"
        )


def check_beam_options(length_penalty, early_stopping, penalty, max_new_tokens) -> dict:
    """``{"length_penalty": finite float, "early_stopping": True, False or "never",
    "penalty": "gnmt" or "transformers"}``, checked: lp(n) = base(n) ** alpha must stay within
    [e^-354, e^354] for every length up to ``max_new_tokens`` (see :func:`check_length_divisor`)."""
    if isinstance(length_penalty, bool | np.bool_) or not isinstance(length_penalty, numbers.Real):
        raise TypeError(
            f"length_penalty must be a number (the exponent alpha), got {length_penalty!r} "
            f"({type(length_penalty).__name__})"
        )
    alpha = float(length_penalty)
    if not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number, got {alpha}")
    if not (isinstance(early_stopping, bool | np.bool_) or early_stopping == "never"):
        raise ValueError(
            f'early_stopping must be True, False or "never" (as in transformers), '
            f"got {early_stopping!r}"
        )
    if not isinstance(penalty, str) or penalty not in PENALTIES:
        raise ValueError(
            f'penalty must be "gnmt" (((5 + n) / 6) ** alpha, the paper\'s) or "transformers" '
            f"(n ** alpha), got {penalty!r}"
        )
    stopping = early_stopping if isinstance(early_stopping, str) else bool(early_stopping)
    check_length_divisor(alpha, penalty, max_new_tokens)
    return {"length_penalty": alpha, "early_stopping": stopping, "penalty": penalty}


# Half the exponent range of float64 (ln of its largest value is 709.78): with lp(n) in
# [e^-354.9, e^354.9], a score, summed log-probability / lp(n), stays finite for any sum below
# e^354.9 (about 1e154) in magnitude, and lp(n) itself neither overflows nor underflows to 0.
LOG_LP_LIMIT = math.log(np.finfo(np.float64).max) / 2


def check_length_divisor(alpha, penalty, max_new_tokens) -> None:
    """A ValueError if ``base(n) ** alpha`` leaves [e^-354.9, e^354.9] for some n <= max_new_tokens.

    The base grows with n from 1 (``(5 + n) / 6`` or ``n``), so ``|alpha| ln base(max_new_tokens)``
    is the largest |ln lp(n)|."""
    n = max_new_tokens
    base, formula = ((5 + n) / 6, "((5 + n) / 6)") if penalty == "gnmt" else (n, "n")
    reach = alpha * math.log(base)  # ln lp(n) at n = max_new_tokens (0 for a base of 1)
    if abs(reach) > LOG_LP_LIMIT:
        most = LOG_LP_LIMIT / math.log(base)
        raise ValueError(
            f"length_penalty must be in [-{most:.4g}, {most:.4g}] for {n} new tokens: the length "
            f"divisor lp(n) = {formula} ** alpha would reach e^{reach:.4g} at n = {n}, and the "
            "scores (summed log-probabilities / lp(n)) would overflow to -inf or collapse to 0 "
            f"(values near 1, as 0.6 or 1.0, are the usual ones). Got length_penalty = {alpha:g}"
        )


def physical_memory() -> int | None:
    """The machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_keep(keep, max_len, T0, n_new):
    """How many tokens the window keeps when it slides: ``keep``, or ``max_len // 2``."""
    if keep is None:
        # The model reads at most T0 + n_new - 1 tokens (the last one is never fed back): with
        # max_len = 1 there is no token to keep when the window slides, which only matters if
        # it has to slide.
        if max_len == 1 and T0 + n_new - 1 > max_len:
            raise ValueError(
                f"the model's max_len = {max_len} leaves no room for the sliding window: "
                f"a prompt of {T0} token(s) plus max_new_tokens = {n_new} makes the context "
                "longer than max_len, and the window then keeps keep in [1, max_len) tokens, "
                "which needs max_len >= 2 (build the model with a larger max_len)"
            )
        return max(max_len // 2, 1)
    expected = f"keep must be an integer in [1, max_len = {max_len})"
    if isinstance(keep, bool | np.bool_) or not isinstance(keep, numbers.Integral):
        raise TypeError(f"{expected} or None, got {keep!r} ({type(keep).__name__})")
    if not 1 <= keep < max_len:
        raise ValueError(f"{expected}, got {keep}")
    return int(keep)


# -- translate ----------------------------------------------------------------------------------


def check_translate(
    model, src, max_len, bos_id, eos_id, temperature, top_k, top_p, rng, use_cache, num_beams,
    length_penalty, early_stopping, penalty,
):  # fmt: skip
    cfg = getattr(model, "config", None)
    if not is_a(cfg, "TransformerConfig"):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    n_new = check_positive_int(max_len, "max_len")
    if n_new > cfg.max_len:  # the decoder reads BOS + the first max_len - 1 tokens
        raise ValueError(
            f"max_len = {n_new} is longer than the positional table "
            f"(config.max_len = {cfg.max_len})"
        )
    V, pad = cfg.tgt_vocab_size, cfg.pad_id
    if pad is not None and V == 1:
        raise ValueError(
            f"the model's target vocabulary holds only the padding token (tgt_vocab_size = 1, "
            f"pad_id = {pad}): translate never generates padding, so it has no token to choose"
        )
    bos_id = check_token_id(bos_id, "bos_id", V)
    if bos_id == pad:
        raise ValueError(
            f"bos_id must differ from pad_id = {pad}: the decoder masks padding as a key, so a "
            f"BOS that is padding would not be read. Got bos_id = {bos_id}"
        )
    if eos_id is not None:
        eos_id = check_token_id(eos_id, "eos_id", V, optional=True)
        if eos_id == pad:
            raise ValueError(
                f"eos_id must differ from pad_id = {pad}: the padding token is never generated, "
                f"so it could not end a sequence. Got eos_id = {eos_id}"
            )
    src = check_id_values(src, "src", cfg.src_vocab_size, cfg.max_len)
    beams = check_num_beams(num_beams)
    if beams > 1:
        no_sampling_with_beams(beams, temperature, top_k, top_p, rng)
        choices = V - (pad is not None)  # the padding token is never generated
        if 2 * beams > choices:
            raise ValueError(
                f"num_beams must be at most {choices // 2}: each step keeps 2 * num_beams "
                f"candidates, and the first has only the {choices} tokens translate can generate "
                f"(tgt_vocab_size = {V}{', less the padding token' if pad is not None else ''}). "
                f"Got num_beams = {beams}"
            )
    return {
        "model": model,
        "src": src,
        "max_len": n_new,
        "bos_id": bos_id,
        "eos_id": eos_id,
        **check_sampling(temperature, top_k, top_p, V),
        "rng": check_rng(rng),
        "use_cache": check_bool(use_cache, "use_cache"),
        "num_beams": beams,
        **check_beam_options(length_penalty, early_stopping, penalty, n_new),
    }


def check_token_id(token, name, vocab_size, *, optional=False) -> int:
    """``token`` as an int in [0, vocab_size), else a TypeError or ValueError naming ``name``."""
    if isinstance(token, bool | np.bool_) or not isinstance(token, numbers.Integral):
        expected = f"a token id (an integer in [0, {vocab_size}))" + " or None" * optional
        raise TypeError(f"{name} must be {expected}, got {token!r} ({type(token).__name__})")
    if not 0 <= token < vocab_size:
        raise ValueError(f"{name} must be a token id in [0, {vocab_size}), got {token}")
    return int(token)


# -- sample_next --------------------------------------------------------------------------------


def check_sample_next(logits, temperature, top_k, top_p, rng):
    logits = check_logits(logits)
    return {
        "logits": logits,
        **check_sampling(temperature, top_k, top_p, logits.shape[-1]),
        "rng": check_rng(rng),
    }


def check_sampling(temperature, top_k, top_p, vocab_size) -> dict:
    """``{"temperature": float >= 0, "top_k": int in [1, vocab_size] or None,
    "top_p": float in (0, 1] or None}``, checked."""
    if isinstance(temperature, bool | np.bool_) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"temperature must be a number >= 0 (0 = greedy), got {temperature!r} "
            f"({type(temperature).__name__})"
        )
    t = float(temperature)
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t}")
    if top_k is not None:
        if isinstance(top_k, bool | np.bool_) or not isinstance(top_k, numbers.Integral):
            raise TypeError(
                f"top_k must be a positive integer or None, got {top_k!r} ({type(top_k).__name__})"
            )
        if not 1 <= top_k <= vocab_size:
            raise ValueError(f"top_k must be in [1, vocab_size = {vocab_size}], got {top_k}")
        top_k = int(top_k)
    if top_p is not None:
        if isinstance(top_p, bool | np.bool_) or not isinstance(top_p, numbers.Real):
            raise TypeError(
                f"top_p must be a number in (0, 1] or None, got {top_p!r} ({type(top_p).__name__})"
            )
        top_p = float(top_p)
        if not 0 < top_p <= 1:  # NaN fails too
            raise ValueError(f"top_p must be a number in (0, 1], got {top_p}")
    if t == 0:  # greedy: the cuts choose among the tokens sampled, and nothing is sampled
        cuts = {"top_k": top_k, "top_p": top_p}
        given = ", ".join(f"{name} = {value}" for name, value in cuts.items() if value is not None)
        if given:
            raise ValueError(
                f"{given} does nothing at temperature = 0: greedy decoding takes the most "
                "probable token, and top_k and top_p only choose among the tokens sampled. "
                "Give a temperature > 0 to sample (1.0: the model's own distribution), or leave "
                "them None"
            )
    return {"temperature": t, "top_k": top_k, "top_p": top_p}


def check_logits(logits) -> np.ndarray:
    """``logits``, a float (B, V) array (its annotation checked the dtype and shape): V >= 1, no
    NaN or +inf, no row all -inf."""
    if logits.shape[1] == 0:
        raise ValueError(
            f"logits has an empty vocabulary axis: shape {shape_str(logits.shape)}; "
            "expected at least one token score per row (V >= 1)"
        )
    # A -inf score is a masked token (probability exactly 0); NaN and +inf are bugs upstream.
    check_finite(logits, "logits", allow_neg_inf=True)
    dead = np.isneginf(logits.max(axis=-1)) if logits.size else np.zeros(0, bool)  # (B,)
    if dead.any():
        raise ValueError(
            f"logits has rows where every token is -inf, so no token can be chosen "
            f"({int(dead.sum())} of {dead.size} rows, first at row {int(np.argmax(dead))}); "
            "expected at least one finite score per row"
        )
    return logits


# -- KVCache.reorder ----------------------------------------------------------------------------


def check_kv_reorder(indices, batch_size) -> np.ndarray:
    """``indices`` as a non-empty 1-D intp array of batch rows in [0, batch_size)."""
    expected = f"a non-empty 1-D array of integer batch rows in [0, {batch_size})"
    idx = np.asarray(indices)
    if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be {expected}, got dtype {idx.dtype}")
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be {expected}, got shape {shape_str(idx.shape)}")
    if idx.min() < 0 or idx.max() >= batch_size:
        bad = idx[(idx < 0) | (idx >= batch_size)]
        raise ValueError(f"indices must be {expected}, got {int(bad[0])}")
    return idx.astype(np.intp, copy=False)
