"""The validators of the tokenizer (:mod:`transformer_np.tokenizer`): text, ids, vocabularies.

Each ``check_<entry point>`` receives the arguments by name (a method's ``self`` or ``cls``
too) and returns them checked, as a dict (see :func:`.boundary.checked`).
"""

from __future__ import annotations

import importlib.util
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .general import check_bool, shape_str, type_name

EXTRA_HINT = 'install them with `pip install "transformer_np[pretrained]"`'


# -- text ---------------------------------------------------------------------------------------


def check_text(text, name: str) -> str:
    """``text`` if it is a str that UTF-8 can encode, else an error naming the bad character.

    A lone surrogate (U+D800..U+DFFF) is not a character: it comes from bytes decoded with
    ``errors="surrogateescape"`` or from broken UTF-16, and no tokenizer can read it.
    """
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type_name(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} holds a lone surrogate {text[exc.start]!r} at position {exc.start}, which is "
            "not a character (bytes decoded with errors='surrogateescape', or broken UTF-16); "
            "expected text that UTF-8 can encode"
        ) from None
    return text


def check_known_bytes(tok, text: str, name: str) -> str:
    """``text`` if the vocabulary of ``tok`` has a token for each of its bytes, else a
    ValueError naming the first character with a byte it lacks."""
    if len(tok.byte_ids) == 256:  # every byte has its token (every trained vocabulary)
        return text
    missing = set(text.encode("utf-8")) - tok.byte_ids.keys()
    if missing:
        for position, char in enumerate(text):
            lacking = [b for b in char.encode("utf-8") if b in missing]
            if lacking:
                raise ValueError(
                    f"{name} holds {char!r} (U+{ord(char):04X}) at position {position}, whose "
                    f"UTF-8 byte 0x{lacking[0]:02X} has no token in this vocabulary (the model "
                    "never saw it); remove or replace that character"
                )
    return text


def check_messages(messages) -> list[dict]:
    """A list of ``{"role": str, "content": str}``, the strings encodable."""
    if isinstance(messages, str | dict) or not isinstance(messages, Sequence):
        raise TypeError(
            "messages must be a list of dicts like {'role': 'user', 'content': 'Hi'}, "
            f"got {type_name(messages)}"
        )
    if not messages:  # the template would render a prompt with no turn for the model to answer
        raise ValueError(
            "messages must hold at least one message, such as [{'role': 'user', 'content': "
            "'Hi'}], got an empty list"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise TypeError(f"messages[{i}] must be a dict with a str 'role', got {m!r}")
        if not isinstance(m.get("content"), str):
            raise TypeError(f"messages[{i}]['content'] must be a str, got {m.get('content')!r}")
        check_text(m["role"], f"messages[{i}]['role']")
        check_text(m["content"], f"messages[{i}]['content']")
    return list(messages)


# -- building a tokenizer -----------------------------------------------------------------------


def check_token_id(value, name: str, size: int, *, optional: bool = False):
    """``value`` as an int in [0, size) (or None if ``optional``), else an error naming it."""
    if value is None and optional:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int token id, got {value!r} ({type_name(value)})")
    if not 0 <= value < size:
        raise ValueError(f"{name} must be a token id in [0, {size}), got {value}")
    return int(value)


def check_token_map(tokens, name: str, size: int) -> dict[str, int]:
    """A dict of non-empty str to token ids, as a plain dict (None: empty)."""
    if tokens is None:
        return {}
    if not isinstance(tokens, Mapping):
        raise TypeError(f"{name} must be a dict of str to token id, got {type_name(tokens)}")
    for token, i in tokens.items():
        if not isinstance(token, str) or not token:
            raise TypeError(f"{name} keys must be non-empty str, got {token!r}")
        check_token_id(i, f"{name}[{token!r}]", size)
    return {token: int(i) for token, i in tokens.items()}


def check_pre(pre, known) -> str:
    """``pre``, a name of ``known`` (the class's ``PRE_TOKENIZERS``)."""
    if not isinstance(pre, str) or pre not in known:
        raise ValueError(f"pre must name a pre-tokenizer, one of {sorted(known)}, got {pre!r}")
    return pre


def check_init(
    self, vocab, merges, special_tokens, added_tokens, pre, bos_id, eos_id, chat_template,
    cache_size,
):  # fmt: skip
    if isinstance(vocab, bytes | str) or not isinstance(vocab, Sequence):
        raise TypeError(f"vocab must be a list of bytes (one per token), got {type_name(vocab)}")
    for i, token in enumerate([] if all(type(t) is bytes and t for t in vocab) else vocab):
        if not isinstance(token, bytes) or not token:
            raise TypeError(f"vocab[{i}] must be non-empty bytes, got {token!r}")
    size = len(vocab)
    known = set(vocab)
    if not isinstance(merges, Sequence):
        raise TypeError(f"merges must be a list of (int, int) pairs, got {type_name(merges)}")
    fine = all(  # the common case, quickly: pairs of ints in range whose bytes join to a token
        type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
        and 0 <= p[0] < size and 0 <= p[1] < size and vocab[p[0]] + vocab[p[1]] in known
        for p in merges
    )  # fmt: skip
    for rank, pair in enumerate([] if fine else merges):  # else: find the first bad one
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"merges[{rank}] must be a pair of token ids, got {pair!r}")
        a, b = (check_token_id(i, f"merges[{rank}]", size) for i in pair)
        if vocab[a] + vocab[b] not in known:
            raise ValueError(
                f"merges[{rank}] joins {vocab[a]!r} and {vocab[b]!r} into "
                f"{vocab[a] + vocab[b]!r}, which is not in vocab"
            )
    if chat_template is not None and not isinstance(chat_template, str):
        raise TypeError(f"chat_template must be a str or None, got {type_name(chat_template)}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, numbers.Integral):
        raise TypeError(f"cache_size must be an int, got {type_name(cache_size)}")
    if cache_size < 0:
        raise ValueError(f"cache_size must be 0 or more, got {cache_size}")
    return dict(
        self=self, vocab=list(vocab),
        merges=list(merges) if fine else [tuple(map(int, p)) for p in merges],
        special_tokens=check_token_map(special_tokens, "special_tokens", size),
        added_tokens=check_token_map(added_tokens, "added_tokens", size),
        pre=check_pre(pre, type(self).PRE_TOKENIZERS),
        bos_id=check_token_id(bos_id, "bos_id", size, optional=True),
        eos_id=check_token_id(eos_id, "eos_id", size, optional=True),
        chat_template=chat_template, cache_size=int(cache_size),
    )  # fmt: skip


def check_train(cls, text, vocab_size, special_tokens, pre):
    text = check_text(text, "text")
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Sequence):
        hint = (
            f"; wrap it in a list: [{special_tokens!r}]" if isinstance(special_tokens, str) else ""
        )
        raise TypeError(
            f"special_tokens must be a list of str, got {type_name(special_tokens)}{hint}"
        )
    for i, token in enumerate(special_tokens):
        if not isinstance(token, str) or not token:
            raise TypeError(f"special_tokens[{i}] must be a non-empty str, got {token!r}")
        check_text(token, f"special_tokens[{i}]")
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError(f"special_tokens must be distinct, got {list(special_tokens)}")
    least = 256 + len(special_tokens)
    if isinstance(vocab_size, bool | np.bool_) or not isinstance(vocab_size, numbers.Integral):
        raise TypeError(f"vocab_size must be an int, got {vocab_size!r} ({type_name(vocab_size)})")
    if vocab_size < least:
        raise ValueError(
            f"vocab_size must be at least {least} (the 256 bytes and {len(special_tokens)} "
            f"special tokens), got {vocab_size}"
        )
    return dict(cls=cls, text=text, vocab_size=int(vocab_size),
                special_tokens=list(special_tokens),
                pre=check_pre(pre, cls.PRE_TOKENIZERS))  # fmt: skip


def check_from_gguf(cls, gguf):
    """A GGUF file as read by ``read_gguf``, whose metadata describe a byte-level BPE."""
    if isinstance(gguf, str | Path):
        raise TypeError(
            f"gguf must be a GGUF file as read by read_gguf(path), got the path {str(gguf)!r}: "
            "pass read_gguf(path) (transformer_np.pretrained.gguf), or load SmolLM2's "
            "tokenizer with transformer_np.pretrained.load_smollm2_tokenizer(path)"
        )
    if not isinstance(getattr(gguf, "metadata", None), Mapping):
        raise TypeError(
            f"gguf must be a GGUF file as read by read_gguf(path), got {type_name(gguf)}"
        )
    md = gguf.metadata
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        if key not in md:
            raise ValueError(f"{gguf.path} has no {key}: it describes no BPE tokenizer")
    model = md.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            f"{gguf.path} describes a {model!r} tokenizer; ByteLevelBPE reads byte-level BPE "
            "vocabularies (tokenizer.ggml.model = 'gpt2')"
        )
    pre = md.get("tokenizer.ggml.pre")
    if pre not in cls.PRE_TOKENIZERS:
        raise ValueError(
            f"{gguf.path} asks for the pre-tokenizer {pre!r} (tokenizer.ggml.pre); the ones "
            f"known are {sorted(cls.PRE_TOKENIZERS)}"
        )
    return {"cls": cls, "gguf": gguf}


# -- using it -----------------------------------------------------------------------------------


def check_encode(self, text):
    return {"self": self, "text": check_known_bytes(self, check_text(text, "text"), "text")}


def check_decode(self, ids, skip_special_tokens):
    try:
        arr = np.asarray(ids)
    except (TypeError, ValueError):
        raise TypeError(f"ids must be a 1-D sequence of ints, got {type_name(ids)}") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(
            f"ids must be a 1-D sequence of ints, got shape {shape_str(arr.shape)} {arr.dtype}"
        )
    if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
        raise ValueError(
            f"ids must be in [0, {self.vocab_size}), got values from {arr.min()} to {arr.max()}"
        )
    skip = check_bool(skip_special_tokens, "skip_special_tokens")
    return {"self": self, "ids": arr.tolist(), "skip_special_tokens": skip}


def check_chat(self, messages, add_generation_prompt):
    if self.chat_template is None:
        raise ValueError("this tokenizer has no chat template (tokenizer.chat_template)")
    if importlib.util.find_spec("jinja2") is None:
        raise ImportError(f"the chat template needs jinja2; {EXTRA_HINT}")
    messages = check_messages(messages)
    for i, m in enumerate(messages):
        check_known_bytes(self, m["role"], f"messages[{i}]['role']")
        check_known_bytes(self, m["content"], f"messages[{i}]['content']")
    return {
        "self": self,
        "messages": messages,
        "add_generation_prompt": check_bool(add_generation_prompt, "add_generation_prompt"),
    }
