"""The one route from raw captures to the run directory.

``assembly.assemble`` builds a run directory from its ``raw/`` in every case: the collect's
folding process (``streaming``) once the capture is final, the collect itself when that
process failed or was not started, and ``wallflame finish`` (a run finished again, or one whose
collect was killed).  Perf's chunks are folded by ``folding.Folding`` whichever drives it, the
run's profile is built by ``profile`` and its figures about the capture by ``meta``.
"""
