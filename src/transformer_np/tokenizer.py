"""Text to token ids: a byte-level BPE tokenizer, trained from scratch or read from a GGUF file.
Page: tokenizer.md.

Special tokens are cut out whole; the pre-tokenizer, a regular expression, cuts the rest into
pieces; each piece becomes its UTF-8 bytes, one token per byte, which the learned merges join,
the merge learned first before the others. Vocabularies are spelled in GPT-2's byte alphabet
(:func:`bytes_to_unicode`: ``"Ġcasa"`` is ``b" casa"``). Plain Python: no NumPy.
"""

from __future__ import annotations

import functools
from collections import Counter
from itertools import pairwise

import regex

from ._checks.boundary import checked
from ._checks.tokenizer import (
    check_chat,
    check_decode,
    check_encode,
    check_from_gguf,
    check_init,
    check_train,
)

__all__ = [
    "ByteLevelBPE",
    "bytes_to_unicode",
    "count_pairs",
    "merge_pair",
    "pre_tokenize",
    "spell",
    "unspell",
]


# --8<-- [start:bytes_to_unicode]
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: each of the 256 bytes spelled as one printable character, the
    printable ones as themselves and the others (the space, control characters) moved in order to
    256 and up: a space is ``"Ġ"`` (256 + 32), a newline ``"Ċ"`` (256 + 10)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    spelling, moved = {}, 0
    for byte in range(256):
        if byte in printable:
            spelling[byte] = chr(byte)
        else:
            spelling[byte] = chr(256 + moved)
            moved += 1
    return spelling


# --8<-- [end:bytes_to_unicode]


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {char: byte for byte, char in BYTE_TO_CHAR.items()}


# --8<-- [start:spell]
def spell(data: bytes) -> str:
    """Bytes in the byte alphabet: ``b" perch\\xc3\\xa9"`` -> ``"ĠperchÃ©"``."""
    return "".join(BYTE_TO_CHAR[byte] for byte in data)


def unspell(spelling: str) -> bytes:
    """The bytes a byte-alphabet spelling stands for: ``"ĠperchÃ©"`` -> ``b" perch\\xc3\\xa9"``."""
    return bytes(CHAR_TO_BYTE[char] for char in spelling)


# --8<-- [end:spell]


# --8<-- [start:pre_tokenize]
# GPT-2's pre-tokenizer, one alternative after the other: the English endings 's 't 're 've 'm
# 'll 'd; letters with at most one space before them; digits, likewise; other symbols, likewise;
# a run of whitespace not followed by a visible character (so that a run of spaces leaves its
# last space to the next word); any other whitespace. \p{L} is any letter of any script, \p{N}
# any digit or number.
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# The pre-tokenizer of each name a GGUF file can give in ``tokenizer.ggml.pre``. SmolLM2's
# ``"smollm"`` is GPT-2's regular expression, as transformers builds it from the file.
PRE_TOKENIZERS = {"gpt2": GPT2_SPLIT, "smollm": GPT2_SPLIT}


def pre_tokenize(text: str, pattern: str = GPT2_SPLIT) -> list[str]:
    """Cut ``text`` into the pieces BPE merges inside (never across): ``"Ciao, l'Italia!"`` ->
    ``["Ciao", ",", " l", "'", "Italia", "!"]``. Joined, the pieces give ``text`` back."""
    return regex.findall(pattern, text)


# --8<-- [end:pre_tokenize]


# --8<-- [start:count_pairs]
def count_pairs(words: dict[tuple[int, ...], int]) -> Counter:
    """How often each pair of adjacent tokens occurs, ``{(left, right): count}``, in ``words``
    (each piece as a tuple of ids -> its occurrences); a pair never spans two pieces."""
    counts = Counter()
    for word, n in words.items():
        for pair in pairwise(word):
            counts[pair] += n
    return counts


# --8<-- [end:count_pairs]


# --8<-- [start:merge_pair]
def merge_pair(word: tuple[int, ...], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """``word`` with each occurrence of ``pair`` replaced by ``new_id``, from left to right:
    ``merge_pair((5, 6, 6, 6), (6, 6), 9)`` is ``(5, 9, 6)``."""
    merged, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(new_id)
            i += 2
        else:
            merged.append(word[i])
            i += 1
    return tuple(merged)


# --8<-- [end:merge_pair]


class ByteLevelBPE:
    """A byte-level BPE tokenizer: ``encode(text) -> ids`` and ``decode(ids) -> text``, built with
    :meth:`train` (from a text) or :meth:`from_gguf` (from a model's file). Page: tokenizer.md.

    Parameters
    ----------
    vocab : list of bytes
        Token id -> the bytes it stands for; every one of the 256 single bytes should be there.
    merges : list of (int, int)
        The merges, best first: ``(left, right)`` ids whose joined bytes are a token of ``vocab``.
    special_tokens : dict of str to int, optional
        Tokens matched whole in the text and never cut (``"<|im_end|>": 2``), left out by
        ``decode(..., skip_special_tokens=True)``.
    added_tokens : dict of str to int, optional
        Tokens matched whole too, but not special (kept by ``skip_special_tokens``).
    pre : str, default "gpt2"
        The pre-tokenizer, a name of ``PRE_TOKENIZERS``.
    bos_id, eos_id : int, optional
        The beginning- and end-of-sequence tokens (``encode`` never adds them).
    chat_template : str, optional
        The Jinja2 template of :meth:`apply_chat_template`.
    cache_size : int, default 16384
        How many pieces keep their ids in memory (least recently used first out).
    """

    PRE_TOKENIZERS = PRE_TOKENIZERS  # the names ``pre`` can take

    @checked(check_init)
    def __init__(
        self,
        vocab,
        merges,
        *,
        special_tokens=None,
        added_tokens=None,
        pre="gpt2",
        bos_id=None,
        eos_id=None,
        chat_template=None,
        cache_size=16384,
    ):
        self.vocab = list(vocab)  # id -> bytes
        self.vocab_size = len(self.vocab)
        token_id = {token: i for i, token in enumerate(self.vocab)}  # bytes -> id
        self.byte_ids = {b: token_id[bytes([b])] for b in range(256) if bytes([b]) in token_id}
        self.merges = list(merges)
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}  # 0 = learned first
        self.merged = {(a, b): token_id[self.vocab[a] + self.vocab[b]] for a, b in self.merges}
        self.special_ids = dict(special_tokens or {})
        self.special_tokens = sorted(self.special_ids, key=self.special_ids.get)
        self.whole = {**(added_tokens or {}), **self.special_ids}  # matched whole in the text
        # One alternative per token, longest first: the longest token that starts earliest wins.
        alternatives = sorted(self.whole, key=len, reverse=True)
        self.whole_split = regex.compile(f"({'|'.join(map(regex.escape, alternatives))})")
        self.pre = pre
        self.split = regex.compile(PRE_TOKENIZERS[pre])
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template
        self.cached_bpe = functools.lru_cache(maxsize=cache_size)(self.bpe)

    def __repr__(self):
        ends = [(name, i) for name, i in (("bos_id", self.bos_id), ("eos_id", self.eos_id))]
        shown = "".join(f", {name}={i}" for name, i in ends if i is not None)
        return f"ByteLevelBPE(vocab_size={self.vocab_size}{shown})"

    # ------------------------------------------------------------------------------------------
    # training
    # ------------------------------------------------------------------------------------------
    @classmethod
    @checked(check_train)
    # --8<-- [start:train]
    def train(cls, text, vocab_size, *, special_tokens=(), pre="gpt2") -> ByteLevelBPE:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from ``text``, in order:
        ties go to the smallest ids, the bytes numbered in the order of their spelling, so the
        merges are those of the ``tokenizers`` library's ``BpeTrainer``.

        Parameters
        ----------
        text : str
        vocab_size : int
            The size to reach: the special tokens, the 256 bytes, then one token per merge (fewer if
            no pair is left to merge).
        special_tokens : sequence of str, optional
            Tokens given the first ids (``"<|endoftext|>"``), matched whole by ``encode``.
        pre : str, default "gpt2"
            The pre-tokenizer.

        Returns
        -------
        ByteLevelBPE
        """
        # 1. The starting vocabulary: the special tokens, then the 256 bytes.
        vocab = [token.encode("utf-8") for token in special_tokens]
        vocab += sorted((bytes([b]) for b in range(256)), key=spell)
        token_id = {token: i for i, token in enumerate(vocab)}
        # 2. The pieces of the text, each a tuple of byte ids, with how often each occurs.
        pieces = Counter(pre_tokenize(text, PRE_TOKENIZERS[pre]))
        words = {
            tuple(token_id[bytes([b])] for b in p.encode("utf-8")): n for p, n in pieces.items()
        }
        merges = []
        while len(vocab) < vocab_size:
            # 3. The most frequent pair (ties: the smallest ids) ...
            counts = count_pairs(words)
            if not counts:
                break  # every piece is one token: nothing left to merge
            pair = min(counts, key=lambda p: (-counts[p], p))
            # 4. ... becomes a new token (or the one with the same bytes, if there is one) ...
            new = vocab[pair[0]] + vocab[pair[1]]
            if new not in token_id:
                token_id[new] = len(vocab)
                vocab.append(new)
            merges.append(pair)
            # 5. ... merged wherever it occurs.
            words = {merge_pair(w, pair, token_id[new]): n for w, n in words.items()}
        special = {token: i for i, token in enumerate(special_tokens)}
        return cls(vocab, merges, special_tokens=special, pre=pre)

    # --8<-- [end:train]

    # ------------------------------------------------------------------------------------------
    # encoding and decoding
    # ------------------------------------------------------------------------------------------
    # --8<-- [start:bpe]
    def bpe(self, piece: str) -> tuple[int, ...]:
        """The token ids of one piece of text: its bytes, merged in the order learned."""
        ids = tuple(self.byte_ids[b] for b in piece.encode("utf-8"))  # 1. one token per byte
        while len(ids) > 1:
            # 2. the adjacent pair whose merge was learned first ...
            pair = min(pairwise(ids), key=lambda p: self.ranks.get(p, len(self.ranks)))
            if pair not in self.ranks:
                break  # 3. no learned merge applies: done
            ids = merge_pair(ids, pair, self.merged[pair])  # ... merged wherever it occurs
        return ids

    # --8<-- [end:bpe]

    @checked(check_encode)
    # --8<-- [start:encode]
    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``; special tokens written in it stay whole.

        Parameters
        ----------
        text : str
            Without a lone surrogate or a character with a byte the vocabulary lacks (SmolLM2's
            lacks 21 of the 256): ``encode`` names such a character, which ``tokenizers`` drops
            without a word. Then ``decode(encode(text)) == text``.

        Returns
        -------
        list of int
        """
        ids = []
        # 1. special tokens: split them out (the split keeps them, at the odd positions)
        chunks = self.whole_split.split(text) if self.whole else [text]
        for i, chunk in enumerate(chunks):
            if i % 2 == 1:
                ids.append(self.whole[chunk])
                continue
            # 2. pre-tokenize; 3. BPE on each piece (a piece met before: from the cache)
            for piece in self.split.findall(chunk):
                ids.extend(self.cached_bpe(piece))
        return ids

    # --8<-- [end:encode]

    @checked(check_decode)
    # --8<-- [start:decode]
    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        r"""The text of ``ids``: their bytes joined, read as UTF-8 (half a character
        becomes ``"\ufffd"``); special tokens are kept unless ``skip_special_tokens``, as in
        transformers."""
        skip = set(self.special_ids.values()) if skip_special_tokens else set()
        data = b"".join(self.vocab[i] for i in ids if i not in skip)
        return data.decode("utf-8", errors="replace")

    # --8<-- [end:decode]

    # ------------------------------------------------------------------------------------------
    # a model's tokenizer: from its GGUF file, with its chat template
    # ------------------------------------------------------------------------------------------
    @classmethod
    @checked(check_from_gguf)
    # --8<-- [start:from_gguf]
    def from_gguf(cls, gguf) -> ByteLevelBPE:
        """The tokenizer of a GGUF file's metadata (SmolLM2's, for one), read as transformers
        reads it: the same ids as the ``tokenizers`` library.

        Parameters
        ----------
        gguf : GGUFFile
            The file as read by :func:`transformer_np.pretrained.gguf.read_gguf`.

        Returns
        -------
        ByteLevelBPE
            With the file's vocabulary, merges, pre-tokenizer, special tokens (``token_type`` 3,
            control; 4, user-defined, become added tokens), ``bos_id``, ``eos_id`` and chat
            template. ``encode`` adds no BOS token (SmolLM2's file: ``add_bos_token = False``).
        """
        md = gguf.metadata
        tokens, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
        in_alphabet = [set(t) <= CHAR_TO_BYTE.keys() for t in tokens]
        vocab = [
            unspell(t) if ok else t.encode("utf-8")
            for t, ok in zip(tokens, in_alphabet, strict=True)
        ]
        spellings = [
            t if ok else spell(v) for t, ok, v in zip(tokens, in_alphabet, vocab, strict=True)
        ]
        spelled_id = {spelling: i for i, spelling in enumerate(spellings)}
        merges = [tuple(spelled_id[s] for s in m.split(" ")) for m in md["tokenizer.ggml.merges"]]
        kinds = list(zip(tokens, types, in_alphabet, strict=True))
        return cls(
            vocab,
            merges,
            special_tokens={t: i for i, (t, k, ok) in enumerate(kinds) if k == CONTROL and ok},
            added_tokens={t: i for i, (t, k, _) in enumerate(kinds) if k == USER_DEFINED},
            pre=md["tokenizer.ggml.pre"],
            bos_id=md.get("tokenizer.ggml.bos_token_id"),
            eos_id=md.get("tokenizer.ggml.eos_token_id"),
            chat_template=md.get("tokenizer.chat_template"),
        )

    # --8<-- [end:from_gguf]

    @checked(check_chat)
    # --8<-- [start:apply_chat_template]
    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """Render ``messages`` (``[{"role": "user", "content": "..."}, ...]``) as one prompt.

        The template is run in Jinja2's sandbox with the options transformers uses
        (``trim_blocks``, ``lstrip_blocks``), so the string is the same as theirs. Needs
        ``jinja2`` (the ``pretrained`` extra).
        """

        def text(i):  # a token's text, for the template's bos_token and eos_token
            return None if i is None else self.vocab[i].decode("utf-8", errors="replace")

        return compiled_template(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=text(self.bos_id),
            eos_token=text(self.eos_id),
        )

    # --8<-- [end:apply_chat_template]

    @checked(check_chat)
    # --8<-- [start:chat_ids]
    def chat_ids(self, messages, add_generation_prompt: bool = True) -> list[int]:
        """The token ids of the rendered chat prompt, ready for the model."""
        prompt = self.apply_chat_template(messages, add_generation_prompt)
        return self.encode(prompt)

    # --8<-- [end:chat_ids]


CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types in a GGUF file (1 is a normal token)


@functools.lru_cache(maxsize=8)
# --8<-- [start:compiled_template]
def compiled_template(source: str):
    """A chat template compiled once, in Jinja2's sandbox with the options transformers uses
    (``trim_blocks``, ``lstrip_blocks``, loop controls). Needs ``jinja2``."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )

    def raise_exception(message):  # templates call it to reject bad conversations
        raise ValueError(f"chat template: {message}")

    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


# --8<-- [end:compiled_template]
