"""The engine beside the plain core: in-place, chunked and threaded versions of the maths.

Nothing here checks its inputs (the public entry points did) and nothing here is taught on a
concept page. Every kernel has a test that it equals the plain code it replaces.
"""
