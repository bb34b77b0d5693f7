"""Layers with parameters: Linear, LayerNorm, FeedForward, Embedding.

Every layer keeps its parameters in a ``params`` dict (str -> ndarray) and computes its forward
pass when called. A layer made of sub-layers (FeedForward, and the blocks of
:mod:`transformer_np.blocks`) exposes the sub-layers as attributes and a live ``params`` view
with dotted names (``"linear1.W"``) that reads and writes the sub-layers' own dicts.

The computation runs in the input's dtype: float32 in gives float32 out, float64 in gives
float64 out (parameters are cast if needed, which is free when they already match).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, MutableMapping

import numpy as np

from ._validation import (
    as_float_array,
    as_typed_array,
    check_bool,
    check_dtype,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_rng,
    compute_dtype,
    shape_str,
)
from .functional import _erf64, _gelu_exact, check_normalised, layer_norm_forward

__all__ = ["Embedding", "FeedForward", "LayerNorm", "Linear", "NestedParams"]


class NestedParams(MutableMapping):
    """A live, flat view of the parameter dicts of sub-layers, with dotted keys.

    ``NestedParams({"linear1": lin1, "linear2": lin2})`` has the keys ``"linear1.W"``,
    ``"linear1.b"``, ... Reading ``view["linear1.W"]`` returns ``lin1.params["W"]`` itself (no
    copy); assigning ``view["linear1.W"] = w`` stores ``w`` in ``lin1.params``. Keys cannot be
    added or deleted. Sub-layers may themselves expose a NestedParams (keys nest:
    ``"ff.linear1.W"``). ``attr`` selects the dict to view (``"params"``; a backward pass may
    view ``"grads"`` the same way).
    """

    def __init__(self, children: dict, attr: str = "params"):
        self._children = dict(children)
        self._attr = attr

    def _split(self, key: str):
        name, _, rest = key.partition(".")
        if name not in self._children or not rest:
            raise KeyError(key)
        return getattr(self._children[name], self._attr), rest

    def __getitem__(self, key):
        d, rest = self._split(key)
        return d[rest]

    def __setitem__(self, key, value):
        d, rest = self._split(key)
        if rest not in d:
            raise KeyError(f"{key!r} is not a parameter; the keys are {list(self)}")
        d[rest] = value

    def __delitem__(self, key):
        raise TypeError("parameters cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        for name, child in self._children.items():
            for k in getattr(child, self._attr):
                yield f"{name}.{k}"

    def __len__(self) -> int:
        return sum(len(getattr(c, self._attr)) for c in self._children.values())

    def __repr__(self):
        items = ", ".join(f"{k}: {shape_str(v.shape)}" for k, v in self.items())
        return f"NestedParams({items})"


def _check_features(x, name: str, d: int, what: str) -> np.ndarray:
    """Float array of shape (..., d) without NaN/inf."""
    x = as_float_array(x, name)
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(
            f"{name} must have shape (..., {what}) with {what} = {d}, got {shape_str(x.shape)}"
        )
    check_finite(x, name)
    return x


def _check_param_shapes(params, expected: dict, layer: str) -> None:
    for name, shape in expected.items():
        p = params.get(name)
        if not isinstance(p, np.ndarray) or p.shape != shape:
            got = shape_str(p.shape) if isinstance(p, np.ndarray) else repr(p)
            raise ValueError(f"{layer}.params[{name!r}] must have shape {shape}, got {got}")


# --------------------------------------------------------------------------------------------
# backward-pass helpers


def _backward_cache(layer, name: str) -> dict:
    """The forward cache of ``layer``, or a clear error if there was no forward pass."""
    cache = getattr(layer, "_cache", None)
    if cache is None:
        raise RuntimeError(f"{name}.backward was called before a forward pass (no cache)")
    return cache


def _check_grad(grad_output, shape, dtype, name: str = "grad_output") -> np.ndarray:
    """``grad_output`` as an array of the last output's ``shape``, in the compute ``dtype``."""
    g = np.asarray(grad_output)
    if g.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {g.dtype}")
    if tuple(g.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have the shape of the last output {shape_str(shape)}, "
            f"got {shape_str(g.shape)}"
        )
    return g.astype(dtype, copy=False)


def _zero_grads(layer) -> None:
    """``layer.grads[k] = zeros_like(layer.params[k])`` for every key."""
    layer.grads = {k: np.zeros_like(p) for k, p in layer.params.items()}


# --------------------------------------------------------------------------------------------


class Linear:
    """Affine map ``y = x @ W + b`` on the last axis.

    Parameters
    ----------
    d_in : int
        Input features (> 0).
    d_out : int
        Output features (> 0).
    bias : bool, default True
        Whether there is a bias ``b``.
    rng : np.random.Generator or int, optional
        Source of randomness for the initial weights.
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters.

    Attributes
    ----------
    params : dict
        ``W`` of shape (d_in, d_out) (note: the transpose of PyTorch's ``Linear.weight``) and,
        with ``bias=True``, ``b`` of shape (d_out,). Both start as U(-1/sqrt(d_in),
        1/sqrt(d_in)), the default of ``torch.nn.Linear``.

    Notes
    -----
    .. math:: y = x W + b

    The leading axes are flattened so the product is one 2-D matrix product. After a call
    ``self._cache`` holds ``x`` (the 2-D input, shape (N, d_in)) and ``shape`` (the input
    shape) for a backward pass.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Linear
    >>> lin = Linear(4, 3, rng=np.random.default_rng(0))
    >>> lin(np.ones((2, 5, 4))).shape
    (2, 5, 3)
    """

    def __init__(self, d_in, d_out, *, bias=True, rng=None, dtype=np.float64):
        self.d_in = check_positive_int(d_in, "d_in")
        self.d_out = check_positive_int(d_out, "d_out")
        check_bool(bias, "bias")
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        self.has_bias = bool(bias)
        limit = 1.0 / math.sqrt(self.d_in)
        self.params = {"W": rng.uniform(-limit, limit, (self.d_in, self.d_out)).astype(dtype)}
        if bias:
            self.params["b"] = rng.uniform(-limit, limit, self.d_out).astype(dtype)
        self.grads = {}  # filled by backward(), same keys as params
        self._cache = None

    def __repr__(self):
        return f"Linear(d_in={self.d_in}, d_out={self.d_out}, bias={self.has_bias})"

    def _expected(self):
        e = {"W": (self.d_in, self.d_out)}
        if self.has_bias:
            e["b"] = (self.d_out,)
        return e

    def __call__(self, x):
        """Apply the map to ``x`` of shape (..., d_in); returns (..., d_out) in ``x``'s dtype."""
        _check_param_shapes(self.params, self._expected(), "Linear")
        x = _check_features(x, "x", self.d_in, "d_in")
        return self._forward(x)

    def _forward(self, x):
        """Forward pass on a checked input (shared with the layers built on Linear)."""
        dt = compute_dtype(x.dtype)
        x2 = x.astype(dt, copy=False).reshape(-1, self.d_in)  # (..., d_in) -> (N, d_in)
        y = x2 @ self.params["W"].astype(dt, copy=False)  # (N, d_in) -> (N, d_out)
        if self.has_bias:
            y += self.params["b"].astype(dt, copy=False)
        self._cache = {"x": x2, "shape": x.shape}
        return y.reshape(*x.shape[:-1], self.d_out).astype(x.dtype, copy=False)

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., d_out)
            dL/dy, the gradient of the loss with respect to the last output.

        Returns
        -------
        ndarray of shape (..., d_in)
            dL/dx. ``self.grads`` gets ``W`` (d_in, d_out) and ``b`` (d_out,), overwritten
            (not accumulated) at every call.

        Notes
        -----
        With the leading axes flattened (N rows):

        .. math:: \frac{\partial L}{\partial W} = x^\top g, \qquad
                  \frac{\partial L}{\partial b} = \sum_n g_n, \qquad
                  \frac{\partial L}{\partial x} = g\, W^\top
        """
        cache = _backward_cache(self, "Linear")
        x2 = cache["x"]  # (N, d_in)
        out_shape = tuple(cache["shape"][:-1]) + (self.d_out,)
        g2 = _check_grad(grad_output, out_shape, x2.dtype).reshape(-1, self.d_out)  # (N, d_out)
        W = self.params["W"]
        grads = {"W": (x2.T @ g2).astype(W.dtype, copy=False)}  # (d_in, N) @ (N, d_out)
        if self.has_bias:
            grads["b"] = g2.sum(axis=0).astype(self.params["b"].dtype, copy=False)
        self.grads = grads
        dx = g2 @ W.astype(x2.dtype, copy=False).T  # (N, d_out) @ (d_out, d_in) -> (N, d_in)
        return dx.reshape(cache["shape"])  # (N, d_in) -> (..., d_in)

    def zero_grad(self):
        """Set ``grads`` to zeros shaped like ``params``."""
        _zero_grads(self)


# --------------------------------------------------------------------------------------------


class LayerNorm:
    r"""Layer normalisation over the last axis, with a learned scale and shift.

    Parameters
    ----------
    d_model : int
        Number of features D (> 0).
    eps : float, default 1e-5
        Added to the variance (PyTorch's default; BERT uses 1e-12).
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters (keyword only).

    Attributes
    ----------
    params : dict
        ``gamma`` (D,) initialised to ones, ``beta`` (D,) initialised to zeros.

    Notes
    -----
    .. math:: \mathrm{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}
              + \beta

    with the mean and (biased) variance over the D features of each position. After a call
    ``self._cache`` holds ``x_hat`` (the normalised input, shape (..., D)) and ``rstd``
    (1 / sqrt(var + eps), shape (..., 1)).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import LayerNorm
    >>> ln = LayerNorm(4)
    >>> y = ln(np.array([[1.0, 2.0, 3.0, 4.0]]))
    >>> np.round(y.mean(), 6), np.round(y.var(), 4)
    (np.float64(0.0), np.float64(1.0))
    """

    def __init__(self, d_model, eps=1e-5, *, dtype=np.float64):
        self.d_model = check_positive_int(d_model, "d_model")
        self.eps = check_positive_float(eps, "eps")
        dtype = check_dtype(dtype)
        self.params = {"gamma": np.ones(self.d_model, dtype), "beta": np.zeros(self.d_model, dtype)}
        self.grads = {}  # filled by backward(), same keys as params
        self._cache = None

    def __repr__(self):
        return f"LayerNorm(d_model={self.d_model}, eps={self.eps:g})"

    def __call__(self, x):
        """Normalise ``x`` of shape (..., D); returns the same shape in ``x``'s dtype."""
        d = self.d_model
        _check_param_shapes(self.params, {"gamma": (d,), "beta": (d,)}, "LayerNorm")
        x = _check_features(x, "x", d, "d_model")
        dt = compute_dtype(x.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            y, x_hat, rstd = layer_norm_forward(
                x.astype(dt, copy=False),
                self.params["gamma"].astype(dt, copy=False),
                self.params["beta"].astype(dt, copy=False),
                self.eps,
            )
        check_normalised(rstd, x, "x")
        self._cache = {"x_hat": x_hat, "rstd": rstd}
        return y.astype(x.dtype, copy=False)

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., D)
            dL/dy.

        Returns
        -------
        ndarray of shape (..., D)
            dL/dx. ``self.grads`` gets ``gamma`` and ``beta`` (D,).

        Notes
        -----
        With :math:`\hat x = (x - \mu)\, r`, :math:`r = 1/\sqrt{\sigma^2 + \epsilon}` and
        :math:`\hat g = g \odot \gamma` (the gradient reaching :math:`\hat x`):

        .. math:: \frac{\partial L}{\partial x} = r \left( \hat g - \overline{\hat g}
                  - \hat x \; \overline{\hat g \odot \hat x} \right), \qquad
                  \frac{\partial L}{\partial \gamma} = \sum_n g_n \odot \hat x_n, \qquad
                  \frac{\partial L}{\partial \beta} = \sum_n g_n

        where the bar is the mean over the D features: the two subtracted terms remove the
        components along which the normalisation itself is invariant (a shift of all
        features, and a rescaling).
        """
        cache = _backward_cache(self, "LayerNorm")
        x_hat, rstd = cache["x_hat"], cache["rstd"]  # (..., D), (..., 1)
        g = _check_grad(grad_output, x_hat.shape, x_hat.dtype)
        D = self.d_model
        g2, xh2 = g.reshape(-1, D), x_hat.reshape(-1, D)  # (N, D)
        gamma = self.params["gamma"]
        self.grads = {
            "gamma": np.einsum("nd,nd->d", g2, xh2).astype(gamma.dtype, copy=False),
            "beta": g2.sum(axis=0).astype(self.params["beta"].dtype, copy=False),
        }
        g_hat = g * gamma.astype(g.dtype, copy=False)  # dL/dx_hat, (..., D)
        mean_g = g_hat.mean(axis=-1, keepdims=True)  # (..., D) -> (..., 1)
        mean_gx = np.einsum("...d,...d->...", g_hat, x_hat)[..., None]  # (..., D) -> (..., 1)
        mean_gx /= D
        dx = g_hat - mean_g
        dx -= x_hat * mean_gx
        dx *= rstd
        return dx

    def zero_grad(self):
        """Set ``grads`` to zeros shaped like ``params``."""
        _zero_grads(self)


# --------------------------------------------------------------------------------------------

_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)


def _gelu_backward(h: np.ndarray, a: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """``grad * GELU'(h)``, with ``GELU'(h) = Phi(h) + h phi(h)``, in ``h``'s dtype.

    ``a = GELU(h) = h Phi(h)`` is the forward output. float64 computes ``Phi`` from the Cephes
    erf (about 1e-16). float32 reads it off the forward pass, ``Phi(h) = a / h`` (1/2 at
    ``h = 0``): a quotient of two float32 numbers is correctly rounded, so this is as accurate
    as ``a`` itself and costs one division instead of a second evaluation of the tail.
    """
    if h.dtype != np.float32:
        h64 = h.astype(np.float64, copy=False)
        cdf = _erf64(h64 * 0.7071067811865476)  # erf(h / sqrt(2))
        cdf += 1.0
        cdf *= 0.5
        pdf = np.exp(-0.5 * h64 * h64)
        pdf *= _INV_SQRT_2PI
        pdf *= h64
        cdf += pdf
        return (grad * cdf).astype(h.dtype, copy=False)
    half = np.float32(0.5)
    phi_cdf = np.full(h.shape, half, dtype=np.float32)
    np.divide(a, h, out=phi_cdf, where=h != 0)  # Phi(h)
    e = h * h
    e *= -half
    np.exp(e, out=e)  # exp(-h^2 / 2)
    e *= h
    e *= np.float32(_INV_SQRT_2PI)  # h phi(h)
    phi_cdf += e
    phi_cdf *= grad
    return phi_cdf


_ACTIVATIONS = ("relu", "gelu")


class FeedForward:
    r"""Position-wise feed-forward network: two Linear layers with an activation between.

    Parameters
    ----------
    d_model : int
        Input and output features D (> 0).
    d_ff : int
        Hidden features (> 0), 4 * d_model in the paper.
    activation : {"relu", "gelu"}, default "relu"
        ``"relu"`` as in the paper; ``"gelu"`` is the exact (erf) GELU of BERT.
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64

    Attributes
    ----------
    linear1 : Linear
        D -> d_ff.
    linear2 : Linear
        d_ff -> D.
    params : NestedParams
        Live view with keys ``linear1.W``, ``linear1.b``, ``linear2.W``, ``linear2.b``.

    Notes
    -----
    .. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\, W_2 + b_2

    After a call ``self._cache`` holds ``h``, the hidden pre-activation (N, d_ff); each
    Linear keeps its own cache.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import FeedForward
    >>> ff = FeedForward(8, 32, rng=np.random.default_rng(0))
    >>> ff(np.ones((2, 3, 8))).shape
    (2, 3, 8)
    """

    def __init__(self, d_model, d_ff, *, activation="relu", rng=None, dtype=np.float64):
        d_model = check_positive_int(d_model, "d_model")
        d_ff = check_positive_int(d_ff, "d_ff")
        if activation not in _ACTIVATIONS:
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        rng = check_rng(rng)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.linear1 = Linear(d_model, d_ff, rng=rng, dtype=dtype)
        self.linear2 = Linear(d_ff, d_model, rng=rng, dtype=dtype)
        self.params = NestedParams({"linear1": self.linear1, "linear2": self.linear2})
        self.grads = NestedParams({"linear1": self.linear1, "linear2": self.linear2}, "grads")
        self._cache = None

    def __repr__(self):
        return (
            f"FeedForward(d_model={self.d_model}, d_ff={self.d_ff}, activation={self.activation!r})"
        )

    def __call__(self, x):
        """Apply the network to ``x`` of shape (..., D); returns the same shape."""
        _check_param_shapes(self.linear1.params, self.linear1._expected(), "FeedForward.linear1")
        _check_param_shapes(self.linear2.params, self.linear2._expected(), "FeedForward.linear2")
        x = _check_features(x, "x", self.d_model, "d_model")
        out_dtype = x.dtype
        x = x.astype(compute_dtype(out_dtype), copy=False)
        h = self.linear1._forward(x)  # (..., D) -> (..., d_ff)
        if self.activation == "relu":
            a = np.maximum(h, h.dtype.type(0))
        else:
            a = _gelu_exact(h)
        y = self.linear2._forward(a)  # (..., d_ff) -> (..., D)
        self._cache = {"h": h.reshape(-1, self.d_ff)}  # (..., d_ff) -> (N, d_ff), a view
        check_finite(y, "the FeedForward output (the activations overflowed)")
        return y.astype(out_dtype, copy=False)

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., D)
            dL/dy.

        Returns
        -------
        ndarray of shape (..., D)
            dL/dx. ``self.grads`` (a live view like ``params``) holds the gradients of both
            Linear layers.

        Notes
        -----
        With :math:`h = x W_1 + b_1` the hidden pre-activation and :math:`\delta = g W_2^\top`:

        .. math:: \frac{\partial L}{\partial h} = \delta \odot \mathrm{act}'(h), \qquad
                  \mathrm{ReLU}'(h) = [h > 0], \qquad
                  \mathrm{GELU}'(h) = \Phi(h) + h\, \varphi(h)

        with :math:`\Phi` and :math:`\varphi` the standard normal CDF and density.
        """
        cache = _backward_cache(self, "FeedForward")
        h = cache["h"]
        a = self.linear2._cache["x"]  # the activation act(h), input of linear2, (N, d_ff)
        da = self.linear2.backward(grad_output)  # (..., D) -> (..., d_ff)
        shape = da.shape
        da = da.reshape(h.shape)
        if self.activation == "relu":
            dh = da * (h > 0)
        else:
            dh = _gelu_backward(h, a.reshape(h.shape), da)
        return self.linear1.backward(dh.reshape(shape))  # (..., d_ff) -> (..., D)

    def zero_grad(self):
        """Set the gradients of both Linear layers to zero."""
        self.linear1.zero_grad()
        self.linear2.zero_grad()


# --------------------------------------------------------------------------------------------


class Embedding:
    r"""Token embedding: a lookup table of one vector per token id.

    Parameters
    ----------
    vocab_size : int
        Number of distinct token ids V (> 0).
    d_model : int
        Embedding width D (> 0).
    scale : bool, default True
        Multiply the looked-up vectors by sqrt(d_model), as in the paper (section 3.4).
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64

    Attributes
    ----------
    params : dict
        ``W`` of shape (V, D), initialised N(0, 1/D), so that the scaled embedding
        sqrt(D) * W[id] has unit variance, the same scale as the positional encoding
        (Fairseq's choice).

    Notes
    -----
    .. math:: \mathrm{Embedding}(t) = \sqrt{d_{\text{model}}}\; W_{t,:}

    After a call ``self._cache`` holds the ``ids``.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Embedding
    >>> emb = Embedding(100, 16, rng=np.random.default_rng(0))
    >>> emb(np.array([[1, 2, 3], [4, 5, 6]])).shape
    (2, 3, 16)
    """

    def __init__(self, vocab_size, d_model, *, scale=True, rng=None, dtype=np.float64):
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.d_model = check_positive_int(d_model, "d_model")
        check_bool(scale, "scale")
        self.scale = bool(scale)
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        std = 1.0 / math.sqrt(self.d_model)
        W = std * rng.standard_normal((self.vocab_size, self.d_model))
        self.params = {"W": W.astype(dtype)}
        self.grads = {}  # filled by backward(), same keys as params
        self._cache = None

    def __repr__(self):
        return (
            f"Embedding(vocab_size={self.vocab_size}, d_model={self.d_model}, scale={self.scale})"
        )

    def __call__(self, ids):
        """Look up ``ids`` (integer array of any shape); returns shape ids.shape + (D,)."""
        _check_param_shapes(self.params, {"W": (self.vocab_size, self.d_model)}, "Embedding")
        ids = as_typed_array(ids, "ids", "iu", "an array of integer token ids")
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.vocab_size:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"ids must be in [0, vocab_size) = [0, {self.vocab_size}), got {bad} "
                    f"(ids range from {lo} to {hi})"
                )
        W = self.params["W"]
        out = W[ids]  # ids.shape -> ids.shape + (D,)
        if self.scale:
            out *= W.dtype.type(math.sqrt(self.d_model))
        self._cache = {"ids": ids}
        return out

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape ids.shape + (D,)
            dL/d(output).

        Returns
        -------
        None
            Token ids are integers: there is no gradient with respect to them.
            ``self.grads["W"]`` (V, D) gets the gradient of the table.

        Notes
        -----
        Row :math:`t` of the table receives the sum of the gradients at every position where
        token :math:`t` occurs (times :math:`\sqrt{d_{\text{model}}}` when scaled); rows of
        tokens absent from the batch get 0.

        .. math:: \frac{\partial L}{\partial W_{t,:}} = \sqrt{d_{\text{model}}}
                  \sum_{n:\ \mathrm{ids}_n = t} g_n
        """
        cache = _backward_cache(self, "Embedding")
        ids = cache["ids"]
        W = self.params["W"]
        g = _check_grad(grad_output, ids.shape + (self.d_model,), W.dtype)
        g2 = g.reshape(-1, self.d_model)  # (N, D)
        if self.scale:
            g2 = g2 * W.dtype.type(math.sqrt(self.d_model))
        # Scatter-add (repeated ids accumulate): sort the positions by id, sum each run of
        # equal ids with one reduceat, write one row per distinct id.
        flat = ids.reshape(-1)
        order = np.argsort(flat, kind="stable")
        sorted_ids = flat[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        dW = np.zeros_like(W)
        dW[sorted_ids[starts]] = np.add.reduceat(g2[order], starts, axis=0)  # (n_distinct, D)
        self.grads = {"W": dW}
        return None

    def zero_grad(self):
        """Set ``grads`` to zeros shaped like ``params``."""
        _zero_grads(self)
