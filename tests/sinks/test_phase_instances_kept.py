"""Which phase instances a process has (``PhaseInstances._with_instance``): short sets are one
shared ``bytes`` for every process with the same instances, long ones a ``bytearray`` each; both
answer as a set of instance ids would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from prvstream.sinks.efficiency import EfficiencyModel


@given(st.lists(st.lists(st.integers(0, 200), max_size=40), min_size=1, max_size=6))
def test_instances_of_processes_answer_as_sets(sets: list[list[int]]) -> None:
    model = EfficiencyModel("job")
    held: list[bytes | bytearray] = [b"" for _ in sets]
    for p, ids in enumerate(sets):
        for i in ids:
            if len(held[p]) <= i or not held[p][i]:
                held[p] = model._with_instance(held[p], i)
    for p, ids in enumerate(sets):
        assert {i for i, b in enumerate(held[p]) if b} == set(ids)
        assert all(b in (0, 1) for b in held[p])
    for p, q in ((p, q) for p in range(len(sets)) for q in range(len(sets))):
        if held[p] == held[q] and sets[p] and len(held[p]) <= 64:
            assert held[p] is held[q]  # the same short set is one object
