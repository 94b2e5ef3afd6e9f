"""Shards (``--shard i/N``): a partition of the problems by id, independent of the file's order."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graftbench.problems.builtin import builtin_problems
from graftbench.settings import EvalSettings
from graftbench.problems.shards import Shard, parse_shard, select, shard_of


@pytest.mark.parametrize("spec, expected", [("0/1", Shard(0, 1)), ("1/2", Shard(1, 2)), (" 3 / 8 ", Shard(3, 8)),
                                            (None, None)])
def test_parse_shard(spec, expected):
    assert parse_shard(spec) == expected


@pytest.mark.parametrize("spec, message", [("2/2", "the index must be 0 to 1"), ("0/0", "at least 1"),
                                           ("1", "not of the form i/N"), ("a/2", "not of the form i/N"),
                                           ("-1/2", "not of the form i/N"), ("1/2/3", "not of the form i/N")])
def test_a_malformed_shard_is_refused_naming_it(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_shard(spec)
    assert spec.split("/")[0].strip() in str(info.value)


def test_shard_of_is_the_sha256_of_the_id_mod_n():
    import hashlib

    value = int.from_bytes(hashlib.sha256(b"mod-0").digest()[:8], "big")
    assert [shard_of("mod-0", n) for n in (1, 2, 3, 7)] == [0, value % 2, value % 3, value % 7]


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40, unique=True), st.integers(1, 6),
       st.randoms(use_true_random=False))
def test_shards_partition_the_set_whatever_its_order(ids, count, rng):
    items = [type("P", (), {"id": i})() for i in ids]
    parts = [select(items, Shard(k, count)) for k in range(count)]
    assert sorted(i.id for part in parts for _, i in part) == sorted(ids)
    assert all(items[pos] is item for part in parts for pos, item in part)
    shuffled = list(items)
    rng.shuffle(shuffled)
    for k in range(count):
        assert {i.id for _, i in select(shuffled, Shard(k, count))} == {i.id for _, i in parts[k]}


def test_the_built_in_set_splits_into_two_non_empty_shards():
    problems = builtin_problems(n_per_family=2)
    halves = [select(problems, Shard(k, 2)) for k in range(2)]
    assert all(halves) and sum(map(len, halves)) == len(problems)
    assert select(problems, None) == list(enumerate(problems))


def test_a_shard_cannot_split_a_run_wide_token_budget():
    assert EvalSettings(shard="0/2").shard == "0/2"
    with pytest.raises(ValueError, match="cannot be split over shards"):
        EvalSettings(shard="0/2", token_budget=100)
    with pytest.raises(ValueError, match="not of the form"):
        EvalSettings(shard="half")
