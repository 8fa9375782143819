"""The benchmarks' own tests: property tests judge results, not speed."""

from hypothesis import settings

settings.register_profile("wallflame", deadline=None)
settings.load_profile("wallflame")
