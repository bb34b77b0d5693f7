"""The package's boundary: every check of a public entry point, beside the others.

The concept modules hold the maths (``__init__``, ``forward``, ``backward``); this private
package holds the guard rails, so that bad input gives an error that names the argument, says
what was expected and shows what was received, instead of a NumPy traceback or a silent NaN.

* :mod:`.general`: the general checkers (integers, reals, arrays, dtypes) that the others use;
* :mod:`.boundary`: how a check is applied: :func:`.boundary.call_layer` (what
  ``Module.__call__`` runs) and the :func:`.boundary.checked` decorator of public functions,
  with the dtype policy (float16 is computed in float32) and the blame of a bad parameter;
* one module per family of entry points (:mod:`.layers`, :mod:`.functions`, :mod:`.models`,
  :mod:`.optim`, :mod:`.losses`, :mod:`.training`, ...), one validator per entry point.
"""
