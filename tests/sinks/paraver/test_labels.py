"""Labels for one .pcf/.row line: no control characters, bounded, the same when remembered."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.paraver import format as pv


def _expected(text: str) -> str:
    """The rule: runs of control characters become one space, then strip, then at most 400
    characters (397 and "..."), and never empty."""
    clean = re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()
    if len(clean) > 400:
        clean = clean[:397] + "..."
    return clean or "(unnamed)"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=450), min_size=1, max_size=20))
def test_a_remembered_label_is_the_label_made_afresh(texts: list[str]) -> None:
    for text in texts * 2:  # the second time from the memo
        assert pv.sanitize_label(text) == _expected(text)


def test_the_memo_is_bounded_and_keeps_no_long_text() -> None:
    pv.sanitize_label("x" * 5000)
    assert "x" * 5000 not in pv._SANITIZED
    for i in range(pv._SANITIZED_KEPT + 10):
        assert pv.sanitize_label(f"kernel_{i}\x01") == f"kernel_{i}"
    assert 0 < len(pv._SANITIZED) <= pv._SANITIZED_KEPT


_LABEL_TEXTS = st.lists(st.text(max_size=8) | st.sampled_from(["", "  ", "a\tb", "\x7f", "x" * 401,
                                                                " " + "y" * 400 + " "]),
                        max_size=12)


@given(texts=_LABEL_TEXTS)
def test_sanitize_many_is_sanitize_label_of_each(texts: list[str]) -> None:
    assert pv.sanitize_many(texts) == [pv.sanitize_label(t) for t in texts]
