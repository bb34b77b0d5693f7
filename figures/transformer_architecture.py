"""The encoder-decoder Transformer, drawn from the package's own structure (the paper's Figure 1).

No box is typed by hand. ``figure`` builds a ``Transformer`` with the paper's 6 + 6 layers (small
widths: the drawing does not depend on them) and walks it: the model's children (the two
embeddings, the encoder, the decoder, the output layer), the children of one encoder block and
of one decoder block (their sublayers in order, each with the LayerNorm that follows it among
the children), ``norm_first`` for where each norm sits (post-LN: "Add & Norm" after the
sublayer; pre-LN: a LayerNorm before it, a sum after it, and a final LayerNorm closing each
stack), the number of layers of each stack, and whether the output layer is tied to the target
embedding. The labels are in the figure's language; the package's attribute names are written
under them, in monospace.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from transformer_np import (
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
    TiedOutput,
    Transformer,
    TransformerConfig,
)

TEXT = {
    "it": {
        "src": "token sorgente  (B, S)",
        "tgt": "token bersaglio, spostati a destra  (B, T)",
        "probs": "probabilità del token successivo  (B, T, V)",
        "src_embed": "Embedding di input",
        "tgt_embed": "Embedding di output",
        "pe": "positional\nencoding",
        "attn": "Multi-head self-attention",
        "self_attn": "Self-attention mascherata",
        "cross_attn": "Cross-attention",
        "ff": "Feed-forward",
        "add_norm": "Somma e LayerNorm",
        "norm": "LayerNorm",
        "final_norm": "LayerNorm finale",
        "linear": "Lineare",
        "tied": "Lineare (pesi di tgt_embed)",
        "softmax": "Softmax",
        "softmax_where": "nella loss o nella decodifica",
        "encoder": "Encoder",
        "decoder": "Decoder",
        "memory": "uscita dell'encoder (memoria):\nkey e value di ogni cross-attention",
    },
    "en": {
        "src": "source tokens  (B, S)",
        "tgt": "target tokens, shifted right  (B, T)",
        "probs": "next-token probabilities  (B, T, V)",
        "src_embed": "Input embedding",
        "tgt_embed": "Output embedding",
        "pe": "positional\nencoding",
        "attn": "Multi-head self-attention",
        "self_attn": "Masked self-attention",
        "cross_attn": "Cross-attention",
        "ff": "Feed-forward",
        "add_norm": "Add & Norm",
        "norm": "LayerNorm",
        "final_norm": "Final LayerNorm",
        "linear": "Linear",
        "tied": "Linear (tgt_embed's weights)",
        "softmax": "Softmax",
        "softmax_where": "in the loss or in decoding",
        "encoder": "Encoder",
        "decoder": "Decoder",
        "memory": "encoder output (memory):\nkeys and values of every cross-attention",
    },
}

COLORS = {
    "embed": "#f6c9c9",
    "attn": "#fbd7a4",
    "ff": "#bfe1f2",
    "norm": "#f2efb0",
    "linear": "#d9cdee",
    "softmax": "#cbe8c2",
}

W, H = 3.0, 0.6  # box width and height
GAP = 0.36  # vertical space between two boxes (an arrow)
R = 0.17  # radius of a sum circle
PAD = 0.45  # block frame around its boxes
XE, XD = 2.7, 8.6  # centres of the encoder and decoder columns
INCH = 0.66  # inches per unit of the drawing
CODE = {"family": "monospace", "fontsize": 7.5, "color": "0.3"}  # the package's names
NOTE = {"fontsize": 7.5, "color": "0.3", "style": "italic"}
ARROW_LABEL = {"fontsize": 8, "style": "italic"}


def paper_model(norm_first=False) -> Transformer:
    """The paper's layout (6 + 6 layers), with small widths: only the structure is drawn."""
    cfg = TransformerConfig(
        src_vocab_size=11,
        tgt_vocab_size=11,
        d_model=8,
        n_heads=2,
        n_encoder_layers=6,
        n_decoder_layers=6,
        norm_first=norm_first,
    )
    return Transformer(cfg, rng=0)


def sublayers(block):
    """[(name, kind, norm name)] of a block: its attentions and feed-forward, in the order of its
    children, each with the LayerNorm that comes after it among the children."""
    found, norms = [], []
    for name, child in block.children().items():
        if isinstance(child, MultiHeadAttention):
            found.append((name, "attn"))
        elif isinstance(child, FeedForward):
            found.append((name, "ff"))
        elif isinstance(child, LayerNorm):
            norms.append(name)
    return [(name, kind, norm) for (name, kind), norm in zip(found, norms, strict=True)]


class Column:
    """One column of the drawing, built from the bottom up; ``y`` is the top of the last item."""

    def __init__(self, ax, x, y, side):
        self.ax, self.x, self.y = ax, x, y
        self.side = side  # -1: residual paths on the left, +1: on the right
        self.cross_bottom = None  # bottom of the cross-attention box (decoder only)

    def arrow(self, start, end, **kw):
        self.ax.add_patch(
            FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, lw=1.0, **kw)
        )

    def line(self, xs, ys):
        self.ax.plot(xs, ys, color="black", lw=1.0, solid_capstyle="butt")

    def box(self, label, code, color, *, dashed=False, arrow=True, note=False):
        """A box above the current top, with an arrow into it; returns its (bottom, top).

        ``code`` (the package's name of the layer) is written under the label in monospace;
        with ``note=True`` it is a remark, in italics.
        """
        bottom = self.y + (GAP if arrow else 0.0)
        if arrow:
            self.arrow((self.x, self.y), (self.x, bottom))
        patch = FancyBboxPatch(
            (self.x - W / 2, bottom),
            W,
            H,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor=color,
            edgecolor="black",
            lw=1.0,
            ls="--" if dashed else "-",
        )
        self.ax.add_patch(patch)
        self.ax.text(self.x, bottom + 0.39 * H + 0.1, label, ha="center", va="center", fontsize=9)
        style = NOTE if note else CODE
        self.ax.text(self.x, bottom + 0.2 * H, code, ha="center", va="center", **style)
        self.y = bottom + H
        return bottom, self.y

    def plus(self, label=None, code=None):
        """A sum circle above the current top; ``label`` beside it (outside the column)."""
        centre = self.y + GAP + R
        self.arrow((self.x, self.y), (self.x, centre - R))
        self.ax.add_patch(Circle((self.x, centre), R, facecolor="white", edgecolor="black"))
        self.ax.text(self.x, centre, "+", ha="center", va="center", fontsize=11)
        if label:
            x = self.x + self.side * (R + 0.25)
            ha = "left" if self.side > 0 else "right"
            self.ax.text(x, centre - 0.05, label, ha=ha, va="center", fontsize=8.5)
            self.ax.text(x, centre - 0.42, code, ha=ha, va="center", **CODE)
        self.y = centre + R
        return centre

    def residual(self, y_from, y_to, x_to):
        """The residual path: from the trunk at ``y_from``, around the side, into ``x_to``."""
        x_side = self.x + self.side * (W / 2 + 0.25)
        self.line([self.x, x_side, x_side], [y_from, y_from, y_to])
        self.arrow((x_side, y_to), (x_to, y_to))

    def block(self, block, t, decoder):
        """The sublayers of one block, each with its residual path and its layer norm."""
        for name, kind, norm in sublayers(block):
            label = t[name] if name in t else name
            color = COLORS[kind]
            y_in = self.y + GAP / 2  # where the residual path leaves the trunk
            if block.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x))
                self.box(t["norm"], norm, COLORS["norm"])
                bottom, _ = self.box(label, name, color)
                centre = self.plus()
                self.residual(y_in, centre, self.x + self.side * R)
            else:  # post-LN: LayerNorm(x + Sublayer(x))
                bottom, _ = self.box(label, name, color)
                n_bottom, _ = self.box(t["add_norm"], norm, COLORS["norm"])
                self.residual(y_in, n_bottom + H / 2, self.x + self.side * W / 2)
            if decoder and name == "cross_attn":
                self.cross_bottom = bottom

    def frame(self, y0, y1, n_layers, title, code):
        """The frame around one block, with "N x" and the stack's name beside it."""
        x0 = self.x - W / 2 - PAD
        self.ax.add_patch(
            Rectangle((x0, y0), W + 2 * PAD, y1 - y0, facecolor="0.95", edgecolor="0.45", zorder=-1)
        )
        outside = self.x + self.side * (W / 2 + PAD + 0.15)
        ha = "left" if self.side > 0 else "right"
        self.ax.text(outside, (y0 + y1) / 2 + 0.25, f"{n_layers}×", ha=ha, fontsize=14)
        self.ax.text(outside, (y0 + y1) / 2 - 0.2, title, ha=ha, fontsize=10, weight="bold")
        self.ax.text(outside, (y0 + y1) / 2 - 0.35, code, ha=ha, va="top", **CODE)


def draw_stack(col, stack, embed, t, input_label, decoder):
    """Input, embedding, positions, the N x block and (pre-LN) the final norm of one stack."""
    col.ax.text(col.x, col.y - 0.15, input_label, ha="center", va="top", fontsize=9)
    col.box(t[embed], embed, COLORS["embed"], arrow=False)
    col.plus(t["pe"], "pe")
    y0 = col.y + GAP / 4  # just below where the first residual path leaves the trunk
    col.block(stack.layers[0], t, decoder)
    y1 = col.y + GAP / 2
    name = "decoder" if decoder else "encoder"
    kind = type(stack.layers[0]).__name__
    col.frame(y0, y1, len(stack.layers), t[name], f"{name}.layers[i]\n{kind}")
    if stack.norm is not None:  # pre-LN: the stack ends with one more norm
        col.box(t["final_norm"], f"{name}.norm", COLORS["norm"])


def draw(model: Transformer, lang: str) -> Figure:
    """The drawing of ``model``'s structure, labelled in ``lang``."""
    t = TEXT[lang]
    children = model.children()
    assert {"src_embed", "tgt_embed", "encoder", "decoder", "out"} <= set(children)
    fig = Figure()
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()

    enc = Column(ax, XE, 0.6, side=-1)
    draw_stack(enc, children["encoder"], "src_embed", t, t["src"], decoder=False)
    dec = Column(ax, XD, 0.6, side=+1)
    draw_stack(dec, children["decoder"], "tgt_embed", t, t["tgt"], decoder=True)

    # The memory: from the top of the encoder into the cross-attention of every decoder block.
    y_top = enc.y + 0.55
    x_mid = (XE + XD) / 2 + 0.35
    y_cross = dec.cross_bottom + H / 2
    enc.line([XE, XE, x_mid, x_mid], [enc.y, y_top, y_top, y_cross])
    enc.arrow((x_mid, y_cross), (XD - W / 2, y_cross))
    ax.text((XE + x_mid) / 2, y_top + 0.1, t["memory"], ha="center", va="bottom", fontsize=8.5)
    ax.text(XD - W / 2 - 0.08, y_cross + 0.14, "K, V", ha="right", **ARROW_LABEL)
    ax.text(XD - 0.08, dec.cross_bottom - GAP / 2, "Q", ha="right", va="center", **ARROW_LABEL)

    out = children["out"]
    tied = isinstance(out, TiedOutput)
    dec.box(t["tied"] if tied else t["linear"], "out", COLORS["linear"])
    dec.box(t["softmax"], t["softmax_where"], COLORS["softmax"], dashed=True, note=True)
    dec.arrow((dec.x, dec.y), (dec.x, dec.y + GAP))
    ax.text(dec.x, dec.y + GAP + 0.08, t["probs"], ha="center", va="bottom", fontsize=9)

    x0, x1, y0, y1 = -1.1, 12.6, -0.1, dec.y + GAP + 0.45
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    fig.set_size_inches(INCH * (x1 - x0), INCH * (y1 - y0))  # one unit = INCH, both ways
    return fig


def figure(lang: str, norm_first: bool = False) -> Figure:
    """The paper's model (post-LN); ``norm_first=True`` draws the pre-LN variant."""
    return draw(paper_model(norm_first), lang)
