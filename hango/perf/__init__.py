"""The speed layer: a drop-in for the plain stack, chosen by its caller, deletable.

``Agent(..., stack=cached_stack)`` runs the same hooks with a ``before_run`` of one gated round
trip and replayed builds (:mod:`hango.perf.stack`); ``CachedAgent(...)`` also reads its config
in that round trip (:mod:`hango.perf.agent`), and :func:`hango.perf.trip.one_trip` is every one
of them. Without this package every run reads and builds everything, and gives the same requests
byte for byte, only slower.
"""

from hango.perf.agent import CachedAgent
from hango.perf.cache import CACHE, BuildCache
from hango.perf.stack import CachedStack, Trace, cached_stack, trace_of

__all__ = ["CACHE", "BuildCache", "CachedAgent", "CachedStack", "Trace", "cached_stack",
           "trace_of"]
