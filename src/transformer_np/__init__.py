"""transformer_np: the Transformer from scratch in NumPy."""

__version__ = "0.1.0"
