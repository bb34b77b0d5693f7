"""Runnable demos: ``python -m transformer_np.examples.reverse`` and ``... .charlm``."""
