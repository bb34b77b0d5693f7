r"""The whole model: decoder block, encoder and decoder stacks, the encoder-decoder
``Transformer`` and the decoder-only ``LanguageModel``, each with a backward pass.

Shape glossary: B batch, S source positions, T target positions, D = d_model, H heads,
V vocabulary size.

Every layer keeps ``params`` (str -> ndarray) and, after ``backward``, ``grads`` with the same
keys. The models expose both as live flat views with dotted names
(``"encoder.0.attn.W_q"``), ready for :class:`~transformer_np.optim.Adam`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

import numpy as np

from ._validation import (
    as_float_array,
    as_typed_array,
    check_bool,
    check_finite,
    check_last_dim,
    check_ndim,
    check_rng,
    shape_str,
)
from .attention import MultiHeadAttention
from .blocks import EncoderBlock
from .functional import causal_mask
from .layers import (
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    NestedParams,
    _backward_cache,
    _check_grad,
)
from .positional import positional_encoding

__all__ = [
    "Decoder",
    "DecoderBlock",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "LanguageModel",
    "LanguageModelConfig",
    "Transformer",
    "TransformerConfig",
]


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


def _check_field(cls_name, name, value, kind, lo=None, hi=None, hi_open=False):
    if kind is int:
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        what = "an integer"
    elif kind is bool:
        ok = isinstance(value, bool | np.bool_)
        what = "True or False"
    else:
        ok = isinstance(value, int | float | np.floating | np.integer) and not isinstance(
            value, bool
        )
        what = "a number"
    if not ok:
        raise TypeError(f"{cls_name}.{name} must be {what}, got {value!r}")
    if kind is float and not np.isfinite(value):
        raise ValueError(f"{cls_name}.{name} must be a finite number, got {value}")
    if lo is not None and value < lo:
        raise ValueError(f"{cls_name}.{name} must be >= {lo}, got {value}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        bound = f"< {hi}" if hi_open else f"<= {hi}"
        raise ValueError(f"{cls_name}.{name} must be {bound}, got {value}")


def _check_common(cfg):
    name = type(cfg).__name__
    _check_field(name, "d_model", cfg.d_model, int, 2)
    if cfg.d_ff == 0:  # the default: 4 d_model
        object.__setattr__(cfg, "d_ff", 4 * cfg.d_model)
    _check_field(name, "n_heads", cfg.n_heads, int, 1)
    if cfg.d_model % cfg.n_heads:
        raise ValueError(
            f"{name}.d_model must be divisible by n_heads, got d_model = {cfg.d_model} and "
            f"n_heads = {cfg.n_heads}"
        )
    if cfg.d_model % 2:
        raise ValueError(
            f"{name}.d_model must be even (sinusoidal positions come in sin/cos pairs), "
            f"got {cfg.d_model}"
        )
    _check_field(name, "d_ff", cfg.d_ff, int, 1)
    _check_field(name, "max_len", cfg.max_len, int, 1)
    _check_field(name, "norm_first", cfg.norm_first, bool)
    if cfg.activation not in ("relu", "gelu"):
        raise ValueError(f'{name}.activation must be "relu" or "gelu", got {cfg.activation!r}')
    _check_field(name, "dropout", cfg.dropout, float, 0.0, 1.0, hi_open=True)
    _check_field(name, "tie_embeddings", cfg.tie_embeddings, bool)
    _check_field(name, "eps", cfg.eps, float)
    if not cfg.eps > 0:
        raise ValueError(f"{name}.eps must be > 0, got {cfg.eps}")
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f'{name}.dtype must be "float32" or "float64", got {cfg.dtype!r}')


class _ConfigMixin:
    def to_json(self) -> str:
        """The configuration as a JSON string (what checkpoints store)."""
        return json.dumps({"type": type(self).__name__, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        """Rebuild a configuration from :meth:`to_json`'s output."""
        if not isinstance(text, str | bytes):
            raise TypeError(f"text must be a JSON string, got {type(text).__name__}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"text is not valid JSON for a {cls.__name__}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"text must describe a JSON object (the fields of a {cls.__name__}), "
                f"got a JSON {type(data).__name__}"
            )
        kind = data.pop("type", cls.__name__)
        if kind != cls.__name__:
            raise ValueError(f"this JSON describes a {kind}, not a {cls.__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields in JSON: {unknown}")
        return cls(**data)


@dataclass(frozen=True)
class TransformerConfig(_ConfigMixin):
    """Hyper-parameters of the encoder-decoder :class:`Transformer`.

    Examples
    --------
    >>> cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=13, d_model=32, n_heads=4)
    >>> cfg.d_ff, cfg.norm_first
    (128, False)
    """

    src_vocab_size: int  # tokens the encoder reads, pad_id included
    tgt_vocab_size: int  # tokens the decoder reads and predicts
    d_model: int = 64  # model width D; the paper's base model has 512
    n_heads: int = 4  # must divide d_model; head size d_model / n_heads
    d_ff: int = 0  # hidden width of the feed-forward network; 0 means 4 * d_model (the paper)
    n_encoder_layers: int = 2  # the paper stacks 6
    n_decoder_layers: int = 2  # the paper stacks 6
    max_len: int = 128  # rows of the positional table: the longest sequence accepted
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN (trains more easily)
    activation: str = "relu"  # feed-forward activation: "relu" (the paper) or "gelu"
    dropout: float = 0.0  # residual and embedding dropout (the paper: 0.1); 0 = off
    tie_embeddings: bool = False  # output projection = transposed decoder embedding (sec. 3.4)
    pad_id: int | None = 0  # id of padding in src and tgt, masked as a key; None: no padding
    eps: float = 1e-5  # layer-norm epsilon
    dtype: str = "float32"  # "float32" (fast) or "float64" (gradient checks)

    def __post_init__(self):
        name = type(self).__name__
        _check_field(name, "src_vocab_size", self.src_vocab_size, int, 1)
        _check_field(name, "tgt_vocab_size", self.tgt_vocab_size, int, 1)
        _check_field(name, "n_encoder_layers", self.n_encoder_layers, int, 1)
        _check_field(name, "n_decoder_layers", self.n_decoder_layers, int, 1)
        _check_common(self)
        if self.pad_id is not None:
            _check_field(name, "pad_id", self.pad_id, int, 0)
            if self.pad_id >= min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(
                    f"{name}.pad_id must be a valid id of both vocabularies "
                    f"(< {min(self.src_vocab_size, self.tgt_vocab_size)}), got {self.pad_id}"
                )


@dataclass(frozen=True)
class LanguageModelConfig(_ConfigMixin):
    """Hyper-parameters of the decoder-only :class:`LanguageModel`.

    Examples
    --------
    >>> cfg = LanguageModelConfig(vocab_size=50, n_layers=3)
    >>> cfg.d_ff, cfg.norm_first
    (256, True)
    """

    vocab_size: int  # number of token ids V
    d_model: int = 64  # model width D
    n_heads: int = 4  # must divide d_model
    d_ff: int = 0  # feed-forward hidden width; 0 means 4 * d_model
    n_layers: int = 2  # number of (causal self-attention + feed-forward) blocks
    max_len: int = 128  # longest context: rows of the positional table
    norm_first: bool = True  # pre-LN (GPT-2) by default: it trains without warm-up tricks
    activation: str = "gelu"  # "gelu" (GPT-2) or "relu"
    dropout: float = 0.0  # residual and embedding dropout; 0 = off
    tie_embeddings: bool = True  # output projection = transposed embedding (GPT-2 and the paper)
    eps: float = 1e-5  # layer-norm epsilon
    dtype: str = "float32"  # "float32" or "float64"

    def __post_init__(self):
        name = type(self).__name__
        _check_field(name, "vocab_size", self.vocab_size, int, 1)
        _check_field(name, "n_layers", self.n_layers, int, 1)
        _check_common(self)


# --------------------------------------------------------------------------------------------
# small layers
# --------------------------------------------------------------------------------------------


class Dropout:
    """Inverted dropout: in training, zero each value with probability ``p`` and scale the rest.

    Parameters
    ----------
    p : float in [0, 1)
        Drop probability.
    rng : np.random.Generator or int, optional
        Source of the random masks.

    Notes
    -----
    .. math:: y = \\frac{m \\odot x}{1 - p}, \\qquad m_i \\sim \\mathrm{Bernoulli}(1 - p)

    so that the expected value of ``y`` is ``x``; at evaluation time (``training = False``) the
    layer is the identity. The backward pass multiplies by the same mask.

    Examples
    --------
    >>> import numpy as np
    >>> drop = Dropout(0.5, rng=np.random.default_rng(0))
    >>> drop.training = True
    >>> y = drop(np.ones(8))
    >>> sorted(set(y.tolist()))
    [0.0, 2.0]
    """

    def __init__(self, p=0.0, rng=None):
        _check_field("Dropout", "p", p, float, 0.0, 1.0, hi_open=True)
        self.p = float(p)
        self.rng = check_rng(rng)
        self.training = False
        self.params = {}
        self.grads = {}
        self._mask = None

    def __repr__(self):
        return f"Dropout(p={self.p})"

    def __call__(self, x):
        if not self.training or self.p == 0.0:
            self._mask = None
            return x
        keep = self.rng.random(x.shape) >= self.p
        self._mask = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - self.p))
        return x * self._mask

    def backward(self, grad_output):
        return grad_output if self._mask is None else grad_output * self._mask

    def zero_grad(self):
        pass


class TiedOutput:
    """Output projection that reuses an embedding matrix: ``logits = h @ E^T + b``.

    Parameters
    ----------
    embedding : Embedding
        The layer whose ``W`` (V, D) is shared; its gradient gets this layer's share in
        :meth:`backward` (added to ``embedding.grads["W"]`` by the model).

    Attributes
    ----------
    params : dict
        Only ``b`` (V,): the matrix belongs to the embedding.
    dW : ndarray of shape (V, D)
        This layer's contribution to the shared matrix's gradient, after ``backward``.
    """

    def __init__(self, embedding: Embedding):
        self.embedding = embedding
        W = embedding.params["W"]
        self.params = {"b": np.zeros(W.shape[0], W.dtype)}
        self.grads = {}
        self.dW = None
        self._cache = None

    def __call__(self, h):
        W = self.embedding.params["W"]
        h2 = h.reshape(-1, W.shape[1])  # (B, T, D) -> (B*T, D)
        logits = h2 @ W.T  # (B*T, D) @ (D, V) -> (B*T, V)
        logits += self.params["b"]
        self._cache = {"h": h2, "shape": h.shape}
        return logits.reshape(*h.shape[:-1], W.shape[0])  # -> (B, T, V)

    def backward(self, grad_output):
        W = self.embedding.params["W"]
        cache = _backward_cache(self, "TiedOutput")
        h2, shape = cache["h"], cache["shape"]
        g = _check_grad(grad_output, shape[:-1] + (W.shape[0],), W.dtype)
        g2 = g.reshape(-1, W.shape[0])  # (B*T, V)
        self.grads = {"b": g2.sum(axis=0)}
        self.dW = g2.T @ h2  # (V, B*T) @ (B*T, D) -> (V, D)
        return (g2 @ W).reshape(shape)  # (B*T, V) @ (V, D) -> (B, T, D)

    def zero_grad(self):
        self.grads = {"b": np.zeros_like(self.params["b"])}


# --------------------------------------------------------------------------------------------
# blocks
# --------------------------------------------------------------------------------------------


class EncoderLayer(EncoderBlock):
    r"""An :class:`~transformer_np.EncoderBlock` with residual dropout.

    Same parameters and attributes as ``EncoderBlock``, plus ``dropout`` (probability) and the
    two :class:`Dropout` layers ``drop1`` (attention branch) and ``drop2`` (feed-forward
    branch). With ``dropout = 0`` (or in evaluation mode) it computes exactly what
    ``EncoderBlock`` computes.

    Notes
    -----
    Post-LN: :math:`h = \mathrm{LN}_1(x + \mathrm{Drop}(\mathrm{MHA}(x)))`,
    :math:`y = \mathrm{LN}_2(h + \mathrm{Drop}(\mathrm{FFN}(h)))`. Pre-LN:
    :math:`h = x + \mathrm{Drop}(\mathrm{MHA}(\mathrm{LN}_1(x)))`,
    :math:`y = h + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}_2(h)))`.
    """

    def __init__(self, d_model, n_heads, d_ff, *, dropout=0.0, rng=None, **kwargs):
        _check_field(type(self).__name__, "dropout", dropout, float, 0.0, 1.0, hi_open=True)
        rng = check_rng(rng)
        super().__init__(d_model, n_heads, d_ff, rng=rng, **kwargs)
        self.dropout = float(dropout)
        self.drop1 = Dropout(dropout, rng)
        self.drop2 = Dropout(dropout, rng)

    def __call__(self, x, mask=None):
        if self.norm_first:
            a, w = self.attn(self.norm1(x), mask=mask)
            h = x + self.drop1(a)  # residual around attention
            y = h + self.drop2(self.ff(self.norm2(h)))  # residual around the feed-forward
        else:
            a, w = self.attn(x, mask=mask)
            h = self.norm1(x + self.drop1(a))
            y = self.norm2(h + self.drop2(self.ff(h)))
        self.attention_weights = w
        return y

    def backward(self, grad_output):
        """Gradient w.r.t. the block input, shape (B, T, D); fills the sub-layers' ``grads``."""
        g = grad_output
        if self.norm_first:
            dh = g + self.norm2.backward(self.ff.backward(self.drop2.backward(g)))
            return dh + self.norm1.backward(self.attn.backward(self.drop1.backward(dh)))
        dz2 = self.norm2.backward(g)
        dh = dz2 + self.ff.backward(self.drop2.backward(dz2))
        dz1 = self.norm1.backward(dh)
        return dz1 + self.attn.backward(self.drop1.backward(dz1))


class DecoderBlock:
    r"""One decoder layer: masked self-attention, cross-attention to the encoder output, and a
    feed-forward network; each with a residual connection, layer norm and optional dropout.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads (dividing ``d_model``) and feed-forward hidden width.
    norm_first : bool, default False
        False: post-LN (the paper); True: pre-LN.
    activation : {"relu", "gelu"}, default "relu"
    eps : float, default 1e-5
    dropout : float, default 0.0
        Residual dropout on each of the three branches.
    rng : np.random.Generator or int, optional
    dtype : {np.float32, np.float64}, default np.float64

    Attributes
    ----------
    self_attn, cross_attn : MultiHeadAttention
    norm1, norm2, norm3 : LayerNorm
    ff : FeedForward
    params, grads : NestedParams
        Live views with keys such as ``self_attn.W_q``, ``cross_attn.b_o``, ``norm3.gamma``.
    self_attention_weights : ndarray of shape (B, H, T, T)
    cross_attention_weights : ndarray of shape (B, H, T, S)

    Notes
    -----
    Post-LN:

    .. math::
        a &= \mathrm{LN}_1(x + \mathrm{MHA}(x, x; M_{\text{causal}})) \\
        c &= \mathrm{LN}_2(a + \mathrm{MHA}(a, m; M_{\text{src}})) \\
        y &= \mathrm{LN}_3(c + \mathrm{FFN}(c))

    where :math:`m` is the encoder output (the "memory"). Pre-LN moves each layer norm to the
    input of its branch: :math:`a = x + \mathrm{MHA}(\mathrm{LN}_1(x), \ldots)`, and so on; the
    memory is not normalised again (the encoder's final norm did it).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import causal_mask
    >>> rng = np.random.default_rng(0)
    >>> block = DecoderBlock(16, 4, 64, rng=rng)
    >>> x, memory = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 7, 16))
    >>> y = block(x, memory, self_mask=causal_mask(5))
    >>> y.shape, block.cross_attention_weights.shape
    ((2, 5, 16), (2, 4, 5, 7))
    >>> dx, dmemory = block.backward(np.ones_like(y))
    >>> dx.shape, dmemory.shape
    ((2, 5, 16), (2, 7, 16))
    """

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff,
        *,
        norm_first=False,
        activation="relu",
        eps=1e-5,
        dropout=0.0,
        rng=None,
        dtype=np.float64,
    ):
        check_bool(norm_first, "norm_first")
        _check_field(type(self).__name__, "dropout", dropout, float, 0.0, 1.0, hi_open=True)
        rng = check_rng(rng)
        self.self_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps, dtype=dtype)
        self.drop1, self.drop2, self.drop3 = (Dropout(dropout, rng) for _ in range(3))
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff
        self.norm_first = bool(norm_first)
        children = {
            "self_attn": self.self_attn,
            "norm1": self.norm1,
            "cross_attn": self.cross_attn,
            "norm2": self.norm2,
            "ff": self.ff,
            "norm3": self.norm3,
        }
        self.params = NestedParams(children)
        self.grads = NestedParams(children, "grads")
        self.self_attention_weights = None
        self.cross_attention_weights = None

    def __repr__(self):
        return (
            f"DecoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first})"
        )

    def __call__(self, x, memory, self_mask=None, memory_mask=None):
        """Run the block.

        Parameters
        ----------
        x : ndarray of shape (B, T, D)
            Target-side input.
        memory : ndarray of shape (B, S, D)
            Encoder output.
        self_mask : array_like of bool, broadcastable to (B, H, T, T), optional
            Usually ``causal_mask(T)`` combined with the target padding.
        memory_mask : array_like of bool, broadcastable to (B, H, T, S), optional
            Usually the source padding mask of shape (B, 1, 1, S).

        Returns
        -------
        ndarray of shape (B, T, D)
        """
        memory = _check_memory(memory, np.shape(x)[0], self.d_model)
        if self.norm_first:
            a, w_self = self.self_attn(self.norm1(x), mask=self_mask)
            h = x + self.drop1(a)
            c, w_cross = self.cross_attn(self.norm2(h), memory, mask=memory_mask)
            h2 = h + self.drop2(c)
            y = h2 + self.drop3(self.ff(self.norm3(h2)))
        else:
            a, w_self = self.self_attn(x, mask=self_mask)
            h = self.norm1(x + self.drop1(a))
            c, w_cross = self.cross_attn(h, memory, mask=memory_mask)
            h2 = self.norm2(h + self.drop2(c))
            y = self.norm3(h2 + self.drop3(self.ff(h2)))
        self.self_attention_weights = w_self
        self.cross_attention_weights = w_cross
        return y

    def backward(self, grad_output):
        """Backward pass of the last call.

        Returns
        -------
        dx : ndarray of shape (B, T, D)
        dmemory : ndarray of shape (B, S, D)
        """
        _backward_cache(self.self_attn, type(self).__name__)  # a clear error before any forward
        g = grad_output
        if self.norm_first:
            dh2 = g + self.norm3.backward(self.ff.backward(self.drop3.backward(g)))
            dq, dmem = self.cross_attn.backward(self.drop2.backward(dh2))
            dh = dh2 + self.norm2.backward(dq)
            dx = dh + self.norm1.backward(self.self_attn.backward(self.drop1.backward(dh)))
            return dx, dmem
        dz3 = self.norm3.backward(g)
        dh2 = dz3 + self.ff.backward(self.drop3.backward(dz3))
        dz2 = self.norm2.backward(dh2)
        dq, dmem = self.cross_attn.backward(self.drop2.backward(dz2))
        dh = dz2 + dq
        dz1 = self.norm1.backward(dh)
        dx = dz1 + self.self_attn.backward(self.drop1.backward(dz1))
        return dx, dmem

    def zero_grad(self):
        for layer in (self.self_attn, self.norm1, self.cross_attn, self.norm2, self.ff):
            layer.zero_grad()
        self.norm3.zero_grad()


# --------------------------------------------------------------------------------------------
# stacks
# --------------------------------------------------------------------------------------------


def _layer_kwargs(cfg, rng, dtype):
    return {
        "norm_first": cfg.norm_first,
        "activation": cfg.activation,
        "eps": cfg.eps,
        "dropout": cfg.dropout,
        "rng": rng,
        "dtype": dtype,
    }


class Encoder:
    """A stack of :class:`EncoderLayer` (plus a final LayerNorm when pre-LN).

    Parameters
    ----------
    n_layers, d_model, n_heads, d_ff : int
    final_norm : bool
        Add a LayerNorm after the last layer (needed with pre-LN, whose layers leave their
        output un-normalised).
    **kwargs
        ``norm_first``, ``activation``, ``eps``, ``dropout``, ``rng``, ``dtype`` for every layer.

    Attributes
    ----------
    layers : list of EncoderLayer
    norm : LayerNorm or None
    params, grads : NestedParams
        Keys ``"0.attn.W_q"``, ..., ``"norm.gamma"``.
    """

    def __init__(self, n_layers, d_model, n_heads, d_ff, *, final_norm, **kwargs):
        self.layers = [EncoderLayer(d_model, n_heads, d_ff, **kwargs) for _ in range(n_layers)]
        children = {str(i): layer for i, layer in enumerate(self.layers)}
        self.norm = LayerNorm(d_model, kwargs["eps"], dtype=kwargs["dtype"]) if final_norm else None
        if self.norm is not None:
            children["norm"] = self.norm
        self.params = NestedParams(children)
        self.grads = NestedParams(children, "grads")

    def __call__(self, x, mask=None):
        """(B, S, D) -> (B, S, D); ``mask`` broadcastable to (B, H, S, S)."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)

    def backward(self, grad_output):
        g = grad_output if self.norm is None else self.norm.backward(grad_output)
        for layer in reversed(self.layers):
            g = layer.backward(g)
        return g

    def zero_grad(self):
        for layer in self.layers:
            layer.zero_grad()
        if self.norm is not None:
            self.norm.zero_grad()


class Decoder:
    """A stack of :class:`DecoderBlock` (plus a final LayerNorm when pre-LN).

    Same parameters as :class:`Encoder`. ``backward`` returns ``(dx, dmemory)``, the memory
    gradient summed over the layers (every layer reads the same encoder output).
    """

    def __init__(self, n_layers, d_model, n_heads, d_ff, *, final_norm, **kwargs):
        self.layers = [DecoderBlock(d_model, n_heads, d_ff, **kwargs) for _ in range(n_layers)]
        children = {str(i): layer for i, layer in enumerate(self.layers)}
        self.norm = LayerNorm(d_model, kwargs["eps"], dtype=kwargs["dtype"]) if final_norm else None
        if self.norm is not None:
            children["norm"] = self.norm
        self.params = NestedParams(children)
        self.grads = NestedParams(children, "grads")

    def __call__(self, x, memory, self_mask=None, memory_mask=None):
        """(B, T, D), memory (B, S, D) -> (B, T, D)."""
        for layer in self.layers:
            x = layer(x, memory, self_mask, memory_mask)
        return x if self.norm is None else self.norm(x)

    def backward(self, grad_output):
        g = grad_output if self.norm is None else self.norm.backward(grad_output)
        dmemory = None
        for layer in reversed(self.layers):
            g, dm = layer.backward(g)
            dmemory = dm if dmemory is None else dmemory + dm
        return g, dmemory

    def zero_grad(self):
        for layer in self.layers:
            layer.zero_grad()
        if self.norm is not None:
            self.norm.zero_grad()


# --------------------------------------------------------------------------------------------
# shared model machinery
# --------------------------------------------------------------------------------------------


def _check_memory(memory, batch, d_model):
    """The encoder output given to a decoder: a finite float array (batch, S, d_model)."""
    if memory is None:
        raise TypeError(
            "memory must be the encoder output, a float array of shape (B, S, d_model), got None"
        )
    memory = as_float_array(memory, "memory")
    check_ndim(memory, "memory", (3,), "the encoder output, of shape (B, S, d_model)")
    check_last_dim(memory, "memory", d_model, "d_model")
    if memory.shape[0] != batch:
        raise ValueError(
            f"memory must have the batch size of the target input ({batch}), "
            f"got shape {shape_str(memory.shape)}"
        )
    check_finite(memory, "memory")
    return memory


def _check_ids(ids, name, vocab_size, max_len):
    """Token ids as a 2-D integer array (B, T) with values in [0, vocab) and T <= max_len."""
    arr = as_typed_array(ids, name, "iu", "an array of integer token ids")
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (B, T) (a batch of sequences), got {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one sequence of one token, got {arr.shape}")
    if arr.shape[1] > max_len:
        raise ValueError(
            f"{name} has sequences of length {arr.shape[1]}, longer than the positional table "
            f"(max_len = {max_len}); build the model with a larger max_len"
        )
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name} must hold token ids in [0, {vocab_size}), got values from {lo} to {hi}"
        )
    return arr


class _Model:
    """Parameters, gradients, train/eval mode, embedding + positions; shared by both models."""

    def _finish(self, children):
        self.params = NestedParams(children)
        self.grads = NestedParams(children, "grads")
        self._dropouts = [obj for obj in self._walk() if isinstance(obj, Dropout)]
        # (full name, leaf layer, key) of every parameter, resolved once: reading the
        # gradients then costs one dict lookup per array instead of a walk down the views
        self._leaves = []
        stack = [("", children)]
        while stack:
            prefix, kids = stack.pop()
            for name, layer in kids.items():
                if isinstance(layer.params, NestedParams):
                    stack.append((f"{prefix}{name}.", layer.params._children))
                else:
                    self._leaves.extend((f"{prefix}{name}.{k}", layer, k) for k in layer.params)
        order = {name: i for i, name in enumerate(self.params)}
        self._leaves.sort(key=lambda leaf: order[leaf[0]])

    def _walk(self):
        stack = [self]
        seen = set()
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield obj
            for value in vars(obj).values():
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if hasattr(item, "__dict__") and type(item).__module__.startswith(
                        "transformer_np"
                    ):
                        stack.append(item)

    def parameters(self):
        """Live dict-like view ``name -> ndarray`` of every parameter (updated in place)."""
        return self.params

    def gradients(self):
        """Dict ``name -> ndarray`` of the gradients of the last backward pass.

        Same keys, in the same order, as :meth:`parameters`. A snapshot of the arrays (the
        next backward pass makes new ones); ``self.grads`` is the live view.
        """
        missing = [name for name, layer, k in self._leaves if k not in layer.grads]
        if missing:
            raise RuntimeError(f"no gradient for {missing[:3]}...: call backward() first")
        return {name: layer.grads[k] for name, layer, k in self._leaves}

    def num_parameters(self) -> int:
        """Total number of scalar parameters."""
        return int(sum(p.size for p in self.params.values()))

    def train(self, mode=True):
        """Switch dropout on (``mode=True``) or off; returns the model."""
        self.training = bool(mode)
        for d in self._dropouts:
            d.training = self.training
        return self

    def eval(self):
        """Evaluation mode: dropout off."""
        return self.train(False)

    def zero_grad(self):
        for layer in self._grad_layers():
            layer.zero_grad()

    def _embed(self, embedding, drop, ids):
        T = ids.shape[1]
        x = embedding(ids)  # (B, T) -> (B, T, D), scaled by sqrt(D)
        x = x + self.pe[:T]  # add the positions, (T, D) broadcast over B
        return drop(x)

    def load_parameters(self, params):
        """Copy arrays (same names and shapes as :meth:`parameters`) into the model.

        Every array is checked (names, shapes, real numbers, all finite) before any is copied:
        on an error the model is left as it was.
        """
        mine = self.params
        if not hasattr(params, "keys"):
            raise TypeError(
                f"params must be a mapping of names to arrays, got {type(params).__name__}"
            )
        missing = sorted(set(mine) - set(params))
        extra = sorted(set(params) - set(mine))
        if missing or extra:
            raise ValueError(f"parameter names do not match: missing {missing}, unexpected {extra}")
        checked = {}
        for k in mine:
            value = as_typed_array(params[k], f"parameter {k!r}", "fiu", "an array of real numbers")
            if mine[k].shape != value.shape:
                raise ValueError(
                    f"parameter {k!r} must have shape {mine[k].shape}, got {value.shape}"
                )
            if not np.isfinite(value).all():
                raise ValueError(f"parameter {k!r} contains NaN or inf")
            checked[k] = value
        for k, value in checked.items():
            mine[k][...] = value


def _check_grad_logits(model, grad_logits) -> None:
    """A model's ``backward`` input: after a forward pass, a finite float array.

    The output layer checks the shape; this adds what a layer does not check (every layer
    passes its gradient on, so a NaN here would silently become NaN in every gradient).
    """
    out = model.out
    if getattr(out, "_cache", None) is None:
        raise RuntimeError(
            f"{type(model).__name__}.backward was called before a forward pass (no cache)"
        )
    vocab = out.embedding.params["W"].shape[0] if isinstance(out, TiedOutput) else out.d_out
    g = np.asarray(grad_logits)
    g = _check_grad(g, out._cache["shape"][:-1] + (vocab,), g.dtype, "grad_logits")
    check_finite(g, "grad_logits")


def _output_layer(cfg, embedding, vocab_size, rng, dtype):
    if cfg.tie_embeddings:
        return TiedOutput(embedding)
    return Linear(cfg.d_model, vocab_size, rng=rng, dtype=dtype)


# --------------------------------------------------------------------------------------------
# the models
# --------------------------------------------------------------------------------------------


class Transformer(_Model):
    r"""The encoder-decoder Transformer of "Attention Is All You Need", with backpropagation.

    Parameters
    ----------
    config : TransformerConfig
    rng : np.random.Generator or int, optional
        Initial weights and dropout masks.

    Attributes
    ----------
    src_embed, tgt_embed : Embedding
    encoder : Encoder
    decoder : Decoder
    out : Linear or TiedOutput
        Projection to the target vocabulary.
    pe : ndarray of shape (max_len, D)
        The sinusoidal positional table (fixed, not a parameter).
    params, grads : NestedParams
        Keys such as ``"encoder.0.attn.W_q"``, ``"decoder.1.cross_attn.W_k"``, ``"out.W"``.

    Notes
    -----
    .. math::
        m &= \mathrm{Encoder}(\sqrt{D}\, E_{src}[x] + PE) \\
        \mathrm{logits} &= \mathrm{Decoder}(\sqrt{D}\, E_{tgt}[y_{<t}] + PE,\ m)\, W_{out} + b

    Masks: the source padding is a blocked key for the encoder and for the cross-attention;
    the decoder's self-attention is causal and also blocks target padding.

    Examples
    --------
    >>> import numpy as np
    >>> cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=12, d_model=16, n_heads=2)
    >>> model = Transformer(cfg, rng=0)
    >>> src = np.array([[3, 4, 5, 0], [6, 7, 8, 9]])  # 0 is padding
    >>> tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 7]])
    >>> logits = model(src, tgt_in)
    >>> logits.shape
    (2, 4, 12)
    >>> model.backward(np.ones_like(logits))
    >>> model.gradients()["encoder.0.attn.W_q"].shape
    (16, 16)
    """

    def __init__(self, config: TransformerConfig, rng=None):
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = cfg = config
        rng = check_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.src_embed = Embedding(cfg.src_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        kw = _layer_kwargs(cfg, rng, dtype)
        self.encoder = Encoder(
            cfg.n_encoder_layers,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            final_norm=cfg.norm_first,
            **kw,
        )
        self.decoder = Decoder(
            cfg.n_decoder_layers,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            final_norm=cfg.norm_first,
            **kw,
        )
        self.out = _output_layer(cfg, self.tgt_embed, cfg.tgt_vocab_size, rng, dtype)
        self.src_drop = Dropout(cfg.dropout, rng)
        self.tgt_drop = Dropout(cfg.dropout, rng)
        self.pe = positional_encoding(cfg.max_len, cfg.d_model, dtype=dtype)
        self._finish(
            {
                "src_embed": self.src_embed,
                "tgt_embed": self.tgt_embed,
                "encoder": self.encoder,
                "decoder": self.decoder,
                "out": self.out,
            }
        )
        self.training = False

    def __repr__(self):
        return f"Transformer({self.config})"

    def _grad_layers(self):
        return (self.src_embed, self.tgt_embed, self.encoder, self.decoder, self.out)

    # -- masks --------------------------------------------------------------------------------

    def source_mask(self, src):
        """Key mask of the source, shape (B, 1, 1, S): False at padding; None without pad_id."""
        if self.config.pad_id is None:
            return None
        return (src != self.config.pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)

    def target_mask(self, tgt):
        """Causal mask combined with the target padding, shape (B, 1, T, T)."""
        T = tgt.shape[1]
        mask = causal_mask(T)  # (T, T)
        if self.config.pad_id is None:
            return mask
        return mask & (tgt != self.config.pad_id)[:, None, None, :]  # -> (B, 1, T, T)

    # -- forward -------------------------------------------------------------------------------

    def encode(self, src):
        """Encoder output ("memory") of ``src`` (B, S) -> (B, S, D)."""
        cfg = self.config
        src = _check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)
        self._src_mask = self.source_mask(src)
        x = self._embed(self.src_embed, self.src_drop, src)  # (B, S) -> (B, S, D)
        return self.encoder(x, self._src_mask)

    def decode(self, tgt, memory, src_mask=None):
        """Logits (B, T, V) of the next token at each target position, given the memory."""
        cfg = self.config
        tgt = _check_ids(tgt, "tgt", cfg.tgt_vocab_size, cfg.max_len)
        memory = _check_memory(memory, tgt.shape[0], cfg.d_model)
        y = self._embed(self.tgt_embed, self.tgt_drop, tgt)  # (B, T) -> (B, T, D)
        h = self.decoder(y, memory, self.target_mask(tgt), src_mask)  # (B, T, D)
        return self.out(h)  # (B, T, D) -> (B, T, V)

    def __call__(self, src, tgt):
        """Teacher-forced forward pass.

        Parameters
        ----------
        src : ndarray of int, shape (B, S)
            Source token ids (padding = ``config.pad_id``).
        tgt : ndarray of int, shape (B, T)
            Decoder input: the target shifted right (it starts with a BOS token).

        Returns
        -------
        ndarray of shape (B, T, V)
            Logits of the next target token at each position.
        """
        src = _check_ids(src, "src", self.config.src_vocab_size, self.config.max_len)
        tgt = _check_ids(tgt, "tgt", self.config.tgt_vocab_size, self.config.max_len)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src and tgt must have the same batch size, got src {shape_str(src.shape)} "
                f"and tgt {shape_str(tgt.shape)}"
            )
        memory = self.encode(src)
        return self.decode(tgt, memory, self._src_mask)

    forward = __call__

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        _check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)  # (B, T, V) -> (B, T, D)
        dy, dmemory = self.decoder.backward(dh)
        self.tgt_embed.backward(self.tgt_drop.backward(dy))
        if isinstance(self.out, TiedOutput):
            self.tgt_embed.grads["W"] += self.out.dW
        dx = self.encoder.backward(dmemory)
        self.src_embed.backward(self.src_drop.backward(dx))

    @property
    def attention_weights(self):
        """Cross-attention weights of each decoder layer in the last call, (B, H, T, S) each."""
        return [layer.cross_attention_weights for layer in self.decoder.layers]


class LanguageModel(_Model):
    r"""A decoder-only (GPT-style) language model: causal self-attention blocks.

    Parameters
    ----------
    config : LanguageModelConfig
    rng : np.random.Generator or int, optional

    Attributes
    ----------
    embed : Embedding
    blocks : Encoder
        The stack of causal blocks (an encoder stack used with a causal mask), with a final
        LayerNorm when pre-LN.
    out : TiedOutput or Linear
    pe : ndarray of shape (max_len, D)
    params, grads : NestedParams
        Keys such as ``"blocks.0.attn.W_q"``, ``"embed.W"``, ``"out.b"``.

    Notes
    -----
    .. math:: \mathrm{logits} = \mathrm{Blocks}(\sqrt{D}\,E[x] + PE;\ M_{\text{causal}})\,E^\top + b

    (with tied embeddings). The logits at position ``t`` depend only on ``x[:t+1]``.

    Examples
    --------
    >>> import numpy as np
    >>> model = LanguageModel(LanguageModelConfig(vocab_size=20, d_model=16, n_heads=2), rng=0)
    >>> logits = model(np.array([[1, 2, 3, 4, 5]]))
    >>> logits.shape
    (1, 5, 20)
    """

    def __init__(self, config: LanguageModelConfig, rng=None):
        if not isinstance(config, LanguageModelConfig):
            raise TypeError(f"config must be a LanguageModelConfig, got {type(config).__name__}")
        self.config = cfg = config
        rng = check_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.blocks = Encoder(
            cfg.n_layers,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            final_norm=cfg.norm_first,
            **_layer_kwargs(cfg, rng, dtype),
        )
        self.out = _output_layer(cfg, self.embed, cfg.vocab_size, rng, dtype)
        self.drop = Dropout(cfg.dropout, rng)
        self.pe = positional_encoding(cfg.max_len, cfg.d_model, dtype=dtype)
        self._finish({"embed": self.embed, "blocks": self.blocks, "out": self.out})
        self.training = False

    def __repr__(self):
        return f"LanguageModel({self.config})"

    def _grad_layers(self):
        return (self.embed, self.blocks, self.out)

    def __call__(self, ids):
        """Logits (B, T, V) of the next token at every position of ``ids`` (B, T)."""
        cfg = self.config
        ids = _check_ids(ids, "ids", cfg.vocab_size, cfg.max_len)
        x = self._embed(self.embed, self.drop, ids)  # (B, T) -> (B, T, D)
        h = self.blocks(x, causal_mask(ids.shape[1]))  # (B, T, D)
        return self.out(h)  # (B, T, D) -> (B, T, V)

    forward = __call__

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        _check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)
        dx = self.blocks.backward(dh)
        self.embed.backward(self.drop.backward(dx))
        if isinstance(self.out, TiedOutput):
            self.embed.grads["W"] += self.out.dW

    @property
    def attention_weights(self):
        """Self-attention weights of each block in the last call, (B, H, T, T) each."""
        return [layer.attention_weights for layer in self.blocks.layers]
