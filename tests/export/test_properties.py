"""Properties over generated call graphs: the sampled tokens of a sequence are exactly its calls' completions."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbake.export import export_rollout
from tests.export.traces import record, write

# A call: ("root", prompt size) or ("extend", index of an earlier call, new prompt ids) or ("retry", index),
# then its completion size.
step = st.one_of(
    st.tuples(st.just("root"), st.integers(1, 6)),
    st.tuples(st.just("extend"), st.integers(0, 50), st.integers(0, 4)),
    st.tuples(st.just("retry"), st.integers(0, 50)),
)
graphs = st.lists(st.tuples(step, st.integers(1, 5)), min_size=1, max_size=25)


def build(steps: list) -> tuple[list[dict], list[int | None]]:
    """Records with ids fresh per call (no accidental prefixes), and each call's intended parent."""
    fresh = itertools.count(1)
    records: list[dict] = []
    parents: list[int | None] = []
    for n, ((kind, *args), size) in enumerate(steps):
        parent, retry_of = None, None
        if kind == "extend" and records:
            parent = args[0] % len(records)
            base = records[parent]
            prompt = base["prompt_token_ids"] + base["completion_token_ids"] + [next(fresh) for _ in range(args[1])]
        elif kind == "retry" and records:
            original = records[args[0] % len(records)]
            prompt, retry_of = list(original["prompt_token_ids"]), original["turn"]
            parent = parents[original["turn"]]
        else:
            prompt = [next(fresh) for _ in range(args[0] if kind == "root" else 1)]
        completion = [next(fresh) for _ in range(size)]
        records.append(record(n, prompt, completion, retry_of=retry_of))
        parents.append(parent)
    return records, parents


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graphs)
def test_sampled_tokens_are_the_completions_of_the_path(tmp_path: Path, steps: list) -> None:
    records, parents = build(steps)
    document = export_rollout(write(tmp_path / "t.jsonl", records), "r")
    assert [c["parent"] for c in document["calls"]] == parents
    leaves = {n for n in range(len(records)) if n not in parents}
    assert sorted(s["calls"][-1] for s in document["sequences"]) == sorted(leaves)
    for sequence in document["sequences"]:
        path = sequence["calls"]
        assert all(parents[child] == parent for parent, child in itertools.pairwise(path))
        assert parents[path[0]] is None
        sampled = [i for i, m in zip(sequence["input_ids"], sequence["loss_mask"], strict=True) if m]
        assert sampled == [i for n in path for i in records[n]["completion_token_ids"]]
        assert sum(sequence["loss_mask"]) == sum(len(records[n]["completion_token_ids"]) for n in path)
        logprobs = [lp for lp in sequence["logprobs"] if lp is not None]
        assert logprobs == [lp for n in path for lp in records[n]["per_token_logps"]]
        leaf = records[path[-1]]
        assert sequence["input_ids"] == leaf["prompt_token_ids"] + leaf["completion_token_ids"]
        assert sequence["prompt_len"] + sum(sequence["turn_lengths"]) == len(sequence["input_ids"])
