"""The packed claims index answers as the dict of lists it replaced and holds a few dozen
bytes a claim (issue 11: memory flat in the number of reports)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.claimindex import ClaimIndex
from prvstream.daemon.stream.claims import Claim
from tests.traced import held_by

#: pids and tids small, and beyond a thread code's 24 bits (kept apart, by thread)
_ids = st.integers(1, 4) | st.sampled_from([2**24, 2**40, -1])
_threads = st.tuples(st.sampled_from(["a", "b", "nodé"]), _ids, st.integers(1, 3) | _ids)
_report = st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "nodé"]),
                    st.sampled_from(["r1", "r2", "ré", "r\udcff"]),
                    st.lists(st.tuples(_threads, st.integers(0, 100), st.integers(0, 100)),
                             max_size=4))

#: a packed claim: 28 bytes in four columns and a share of its report's key (the dict of lists of
#: (sort key, claim) tuples it replaced held ~290 B a claim)
PACKED_PER_CLAIM = 64


def _claims(spec: list[tuple[tuple[str, int, int], int, int]]) -> list[Claim]:
    return [(h, p, t, lo, hi) for (h, p, t), lo, hi in spec]


@settings(max_examples=80, deadline=None)
@given(st.lists(_report, max_size=300), st.lists(_report, min_size=1, max_size=5))
def test_it_answers_as_the_dict(reports: list[tuple[int, str, str, list[tuple[
        tuple[str, int, int], int, int]]]], asks: list[tuple[int, str, str, list[tuple[
        tuple[str, int, int], int, int]]]]) -> None:
    index = ClaimIndex()
    plain: dict[tuple[str, int, int], list[tuple[tuple[int, str, str], Claim]]] = {}
    for wall, host, name, spec in reports:
        key, claims = (wall, host, name), _claims(spec)
        index.add(key, claims)
        for c in claims:
            plain.setdefault(c[:3], []).append((key, c))
    for wall, host, name, spec in asks:
        key, claims = (wall, host, name), _claims(spec)
        want = [c for t in dict.fromkeys(c[:3] for c in claims)
                for k, c in plain.get(t, []) if k < key]
        assert index.earlier(key, claims) == want


def test_a_claim_costs_a_few_dozen_bytes() -> None:
    reports = 6000

    def build() -> ClaimIndex:
        index = ClaimIndex()
        for r in range(reports):
            host = f"node{r // 8:04}"
            index.add((1_700_000_000_000_000_000 + r, host, f"rank{r:05}.sqlite"),
                      [(host, 1000 + r, 1000 + r + t, r, r + 10) for t in range(2)])
        return index

    index, held = held_by(build)
    per_claim = held / (2 * reports)
    assert 0 < per_claim < PACKED_PER_CLAIM, per_claim
    assert index.earlier((2**62, "z", "z"), [("node0001", 1009, 1010, 0, 1)]) == [
        ("node0001", 1009, 1010, 9, 19)]
