"""Why a holder was not caught, as the locks panel says it."""

from __future__ import annotations

from wallflame.report.locks import REASONS, _reasons, reason


def test_known_reasons_are_words() -> None:
    for key, words in REASONS.items():
        assert reason(key) == words


def test_a_tool_error_is_named_as_a_failed_stop() -> None:
    assert reason("Operation not permitted") == \
        "owner could not be stopped (Operation not permitted)"
    assert reason("check failed: OSError").startswith("owner stopped but the lock could not")


def test_reasons_that_read_alike_are_added() -> None:
    got = _reasons({"free": 3, "Operation not permitted": 2, "not stopped": 1})
    assert got == {REASONS["free"]: 3,
                   "owner could not be stopped (Operation not permitted)": 2,
                   REASONS["not stopped"]: 1}
    assert sum(got.values()) == 6
