"""Tests for the problem modules (graftbench.problems.types, .problem_sources, .problem_loading,
.builtin_problems): loading real AIME files, field mapping, malformed inputs, the offline hub
error, the built-in generated set (answers recomputed here by brute force) and the hashes."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import unicodedata
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graftbench.problems.builtin import builtin_problems
from graftbench.util.hashing import canonical_json, problem_set_json
from graftbench.problems.loading import BUILTIN, MAX_PROBLEM_CHARS, load_problems
from graftbench.problems.types import (
    Problem,
    ProblemSetError,
    normalize_problem_text,
    problem_key,
    problem_set_sha256,
    problem_text_sha256,
)
from tests.conftest import REFERENCE_MANIFESTS

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
AIME2024 = DATA / "aime2024.jsonl"
AIME2025 = DATA / "aime2025.jsonl"
MODULES = ["problems.types", "problems.sources", "problems.loading", "problems.builtin", "problems.methods",
           "problems.generator_checks",
           "util.hub_access"]
BASELINE_MANIFEST = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"

CANONICAL_INT = re.compile(r"^(0|-?[1-9][0-9]*)$")
AIME_ANSWER = re.compile(r"^(0|[1-9][0-9]{0,2})$")


def err(path: Path | str, row: int, field: str) -> str:
    """A regex requiring the file name, 'row N' and the quoted field name, in any order."""
    name = Path(path).name
    return rf"(?s)(?=.*{re.escape(name)})(?=.*\brow {row}\b)(?=.*'{re.escape(field)}')"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


GOOD_ROWS = [
    {"id": "a", "problem": "Find $1+1$.", "answer": "2"},
    {"id": "b", "problem": "Find $2+2$.", "answer": "4"},
    {"id": "c", "problem": "Find $3+3$.", "answer": "6"},
]


# ----------------------------------------------------------------------------- real data


def test_load_aime2024():
    problems = load_problems(str(AIME2024))
    assert len(problems) == 30
    assert problems[0].id == "2024-I-1"
    assert problems[0].answer == "204"
    assert "Aya" in problems[0].problem
    assert len({p.id for p in problems}) == 30
    assert all(p.solution and p.solution.strip() for p in problems)
    assert all(AIME_ANSWER.match(p.answer) for p in problems)
    assert all(p.family is None for p in problems)
    by_id = {p.id: p for p in problems}
    assert by_id["2024-I-1"].answer == "204"
    # The loaded keys are the file's own keys.
    raw = [json.loads(line) for line in AIME2024.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [p.id for p in problems] == [r["id"] for r in raw]
    assert [p.answer for p in problems] == [str(int(r["answer"])) for r in raw]
    assert [p.problem for p in problems] == [r["problem"] for r in raw]


def test_load_aime2025_has_no_solutions():
    problems = load_problems(AIME2025)  # a Path is accepted too
    assert len(problems) == 30
    assert problems[0].id == "2025-I-1"
    assert problems[0].answer == "70"
    assert all(p.solution is None for p in problems)
    assert all(AIME_ANSWER.match(p.answer) for p in problems)
    assert len({p.id for p in problems}) == 30


def test_limit_keeps_first_n():
    full = load_problems(str(AIME2024))
    assert load_problems(str(AIME2024), limit=5) == full[:5]
    assert load_problems(str(AIME2024), limit=0) == []
    assert load_problems(str(AIME2024), limit=100) == full
    with pytest.raises(ValueError, match="limit"):
        load_problems(str(AIME2024), limit=-1)


def test_builtin_source():
    assert BUILTIN == "builtin"
    assert load_problems(BUILTIN) == builtin_problems()
    assert load_problems(BUILTIN, limit=3) == builtin_problems()[:3]


def test_id_field_none_uses_file_stem_and_row():
    problems = load_problems(str(AIME2025), id_field=None, limit=3)
    assert [p.id for p in problems] == ["aime2025-1", "aime2025-2", "aime2025-3"]


def test_solution_field_none_drops_solutions():
    assert all(p.solution is None for p in load_problems(str(AIME2024), solution_field=None))


# ----------------------------------------------------------------------------- field mapping


def test_field_mapping_csv(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text(
        "qid,question,key,worked\n"
        '007,"Find $x$.\nIt is on two lines.",033,"x is 33"\n'
        "008,Find $y$., 12 ,\n",
        encoding="utf-8",
    )
    problems = load_problems(
        str(path), id_field="qid", problem_field="question", answer_field="key", solution_field="worked"
    )
    assert problems == [
        Problem(id="007", problem="Find $x$.\nIt is on two lines.", answer="33", solution="x is 33"),
        Problem(id="008", problem="Find $y$.", answer="12", solution=None),
    ]
    # CSV columns are read as strings, so non-integer keys keep their spelling.
    raw = load_problems(str(path), id_field="qid", problem_field="question", answer_field="key",
                        integer_answers=False)
    assert [p.answer for p in raw] == ["033", " 12 "]


def test_field_mapping_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "set.parquet"
    table = pa.Table.from_pylist(
        [
            {"name": "p1", "text": "Find the answer.", "gold": 5, "explanation": "It is 5."},
            {"name": "p2", "text": "Find another.", "gold": 999, "explanation": None},
        ]
    )
    pq.write_table(table, path)
    problems = load_problems(
        str(path), id_field="name", problem_field="text", answer_field="gold", solution_field="explanation"
    )
    assert [(p.id, p.answer, p.solution) for p in problems] == [("p1", "5", "It is 5."), ("p2", "999", None)]


def test_field_mapping_json_array(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(
        json.dumps([{"uid": 1, "q": "Find one.", "a": "001"}, {"uid": 2, "q": "Find two.", "a": 2}], indent=2),
        encoding="utf-8",
    )
    problems = load_problems(str(path), id_field="uid", problem_field="q", answer_field="a")
    assert [(p.id, p.problem, p.answer, p.solution) for p in problems] == [
        ("1", "Find one.", "1", None),
        ("2", "Find two.", "2", None),
    ]


def test_json_file_holding_json_lines(tmp_path):
    path = write_jsonl(tmp_path / "lines.json", GOOD_ROWS)
    assert [p.id for p in load_problems(str(path))] == ["a", "b", "c"]


def test_answer_normalisation_and_mixed_types(tmp_path):
    rows = [
        {"id": "a", "problem": "p", "answer": "033"},
        {"id": "b", "problem": "q", "answer": " 33 "},
        {"id": "c", "problem": "r", "answer": 33},
        {"id": "d", "problem": "s", "answer": "000"},
        {"id": "e", "problem": "t", "answer": 7.0},
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    assert [p.answer for p in load_problems(str(path))] == ["33", "33", "33", "0", "7"]
    # Without integer normalisation, string keys are kept exactly (datasets alone would turn
    # the mixed-type column's "033" into 33).
    raw = load_problems(str(path), integer_answers=False)
    assert [p.answer for p in raw] == ["033", " 33 ", "33", "000", "7.0"]


def test_json_keys_beyond_64_bits_are_exact(tmp_path):
    big = 2**70 + 1  # not representable as a float or an int64
    path = write_jsonl(tmp_path / "big.jsonl", [GOOD_ROWS[0], {"id": "b", "problem": "q", "answer": big}])
    assert [p.answer for p in load_problems(str(path))] == ["2", str(big)]


def test_integral_floats_load_as_integers_in_every_format(tmp_path):
    # CSV cells are strings: a float export ("42.0") was refused before, with advice the CLI cannot follow.
    csv_path = tmp_path / "floats.csv"
    csv_path.write_text("id,problem,answer\na,p,42.0\nb,q,4.2e1\nc,r, -7.0 \nd,s,033\ne,t,0.0\n", encoding="utf-8")
    assert [p.answer for p in load_problems(str(csv_path))] == ["42", "42", "-7", "33", "0"]
    # JSON float literals and strings of the same spelling.
    rows = [{"id": "a", "problem": "p", "answer": 42.0}, {"id": "b", "problem": "q", "answer": "42.0"},
            {"id": "c", "problem": "r", "answer": "4.2e1"}]
    json_path = write_jsonl(tmp_path / "floats.jsonl", rows)
    json_path.write_text(json_path.read_text(encoding="utf-8").replace("42.0}", "4.20e1}", 1), encoding="utf-8")
    assert [p.answer for p in load_problems(str(json_path))] == ["42", "42", "42"]
    array_path = tmp_path / "floats.json"
    array_path.write_text('[{"id": "a", "problem": "p", "answer": 1E3}, {"id": "b", "problem": "q", "answer": -0.0}]',
                          encoding="utf-8")
    assert [p.answer for p in load_problems(str(array_path))] == ["1000", "0"]
    # Parquet: a float column and a decimal column.
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"float": ([42.0, 2.0**53], pa.float64(), ["42", str(2**53)]),
               "decimal": ([Decimal("42.00"), Decimal(7)], pa.decimal128(6, 2), ["42", "7"])}
    for name, (answers, kind, expected) in columns.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"id": ["a", "b"], "problem": ["p", "q"], "answer": pa.array(answers, kind)}), path)
        assert [p.answer for p in load_problems(str(path))] == expected, name


@pytest.mark.parametrize("cell", ["42.5", "4.25e1", "0.5", "1e-3"])
def test_non_integral_csv_answer_is_refused(tmp_path, cell):
    path = tmp_path / "frac.csv"
    path.write_text(f"id,problem,answer\na,p,1\nb,q,{cell}\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=err(path, 2, "answer")) as info:
        load_problems(str(path))
    assert f"answer '{cell}' is not an integer" in str(info.value)
    assert [p.answer for p in load_problems(str(path), integer_answers=False)] == ["1", cell]


@pytest.mark.parametrize("literal", ["9007199254740993.0", "9007199254740994.0", "1e16", "1e400",
                                     "-9.007199254740993e15"])
def test_integral_floats_beyond_2_53_are_refused(tmp_path, literal):
    # 9007199254740993.0 used to load silently as 9007199254740992: the JSON float was rounded before the check.
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(GOOD_ROWS[0]) + '\n{"id": "b", "problem": "q", "answer": ' + literal + "}\n",
                    encoding="utf-8")
    with pytest.raises(ProblemSetError, match=err(path, 2, "answer")) as info:
        load_problems(str(path))
    assert "written as a float beyond 2**53" in str(info.value)
    csv_path = tmp_path / "big.csv"
    csv_path.write_text(f"id,problem,answer\na,p,{literal}\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=err(csv_path, 1, "answer")):
        load_problems(str(csv_path))


def test_exponents_beyond_decimal_are_refused_not_a_traceback(tmp_path):
    huge = "1e99999999999999999999"  # Decimal raises InvalidOperation (an ArithmeticError) for this literal
    path = tmp_path / "huge.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": ' + huge + "}\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=re.escape(f"line 1: invalid JSON (the number {huge} is out of range)")):
        load_problems(str(path))
    csv_path = tmp_path / "huge.csv"
    csv_path.write_text(f"id,problem,answer\na,p,{huge}\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=re.escape(f"answer '{huge}' is out of range")):
        load_problems(str(csv_path))


def test_the_edge_of_exact_floats(tmp_path):
    path = tmp_path / "edge.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": 9007199254740992.0}\n'
                    '{"id": "b", "problem": "q", "answer": -9007199254740992.0}\n'
                    '{"id": "c", "problem": "r", "answer": 9007199254740993}\n', encoding="utf-8")
    assert [p.answer for p in load_problems(str(path))] == [str(2**53), str(-(2**53)), str(2**53 + 1)]
    message = ("answer 9007199254740993.0 is written as a float beyond 2**53 = 9007199254740992, where a float "
               "does not hold every integer (readers that parse floats load 9007199254740992)")
    path.write_text('{"id": "a", "problem": "p", "answer": 9007199254740993.0}\n', encoding="utf-8")
    with pytest.raises(ProblemSetError, match=re.escape(message)):
        load_problems(str(path))


def test_non_integer_mode_refuses_float_literals_a_float_cannot_hold(tmp_path):
    path = tmp_path / "exact.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": 0.1}\n{"id": "b", "problem": "q", "answer": 2.50}\n',
                    encoding="utf-8")
    assert [p.answer for p in load_problems(str(path), integer_answers=False)] == ["0.1", "2.5"]
    for literal, loaded in (("0.10000000000000001", "0.1"), ("9007199254740993.0", "9007199254740992.0"),
                            ("1e400", "inf")):
        path.write_text('{"id": "a", "problem": "p", "answer": ' + literal + "}\n", encoding="utf-8")
        with pytest.raises(ProblemSetError, match=err(path, 1, "answer")) as info:
            load_problems(str(path), integer_answers=False)
        assert f"has more digits than a float holds (readers would load {loaded})" in str(info.value)
    path.write_text('{"id": "a", "problem": "p", "answer": Infinity}\n', encoding="utf-8")
    with pytest.raises(ProblemSetError, match=r"answer inf is not a number"):
        load_problems(str(path), integer_answers=False)


def test_float_ids_are_still_refused_and_named_as_floats(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"id": 1.0, "problem": "p", "answer": 1}\n', encoding="utf-8")
    with pytest.raises(ProblemSetError, match="id must be a string or an integer, got float"):
        load_problems(str(path))


def test_json_columns_are_all_keys_in_order_of_first_appearance(tmp_path):
    rows = [{"problem": "p", "id": "a", "answer": "1"}, {"id": "b", "answer": "2", "problem": "q", "solution": "s"}]
    path = write_jsonl(tmp_path / "later.jsonl", rows)
    assert [p.solution for p in load_problems(str(path))] == [None, "s"]
    with pytest.raises(ProblemSetError, match="available fields: problem, id, answer, solution"):
        load_problems(str(path), answer_field="key")


def test_non_integer_keys_allowed_when_not_integer_answers(tmp_path):
    path = write_jsonl(tmp_path / "frac.jsonl", [{"id": "a", "problem": "p", "answer": "1.5"},
                                                 {"id": "b", "problem": "q", "answer": "\\frac{1}{2}"}])
    assert [p.answer for p in load_problems(str(path), integer_answers=False)] == ["1.5", "\\frac{1}{2}"]


def test_blank_lines_skipped_and_reported_by_line(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text(
        json.dumps(GOOD_ROWS[0]) + "\n\n   \n" + json.dumps({"id": "b", "problem": "q", "answer": "x"}) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(ProblemSetError, match=err(path, 2, "answer")) as info:
        load_problems(str(path))
    assert "line 4" in str(info.value)
    path.write_text(json.dumps(GOOD_ROWS[0]) + "\n\n" + json.dumps(GOOD_ROWS[1]) + "\n", encoding="utf-8")
    assert [p.id for p in load_problems(str(path))] == ["a", "b"]


# ----------------------------------------------------------------------------- malformed rows

MALFORMED = {
    "empty_problem": ([GOOD_ROWS[0], {"id": "b", "problem": "", "answer": "1"}], 2, "problem"),
    "whitespace_problem": ([*GOOD_ROWS[:2], {"id": "c", "problem": " \n\t ", "answer": "1"}], 3, "problem"),
    "null_problem": ([GOOD_ROWS[0], {"id": "b", "answer": "1"}], 2, "problem"),
    "non_string_problem": ([{"id": "a", "problem": 12, "answer": "1"}], 1, "problem"),
    "answer_abc": ([GOOD_ROWS[0], {"id": "b", "problem": "q", "answer": "abc"}], 2, "answer"),
    "answer_1.5": ([{"id": "a", "problem": "p", "answer": "1.5"}, GOOD_ROWS[1]], 1, "answer"),
    "answer_float_1.5": ([GOOD_ROWS[0], {"id": "b", "problem": "q", "answer": 1.5}], 2, "answer"),
    "answer_underscore": ([GOOD_ROWS[0], {"id": "b", "problem": "q", "answer": "1_000"}], 2, "answer"),
    "answer_bool": ([{"id": "a", "problem": "p", "answer": True}], 1, "answer"),
    "answer_empty": ([*GOOD_ROWS[:2], {"id": "c", "problem": "r", "answer": "  "}], 3, "answer"),
    "answer_null": ([GOOD_ROWS[0], {"id": "b", "problem": "q", "answer": None}], 2, "answer"),
    "duplicate_id": ([*GOOD_ROWS, {"id": "b", "problem": "again", "answer": "1"}], 4, "id"),
    "empty_id": ([GOOD_ROWS[0], {"id": " ", "problem": "q", "answer": "1"}], 2, "id"),
    "null_id": ([GOOD_ROWS[0], {"problem": "q", "answer": "1"}], 2, "id"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_row_names_file_row_field(tmp_path, case):
    rows, row, field = MALFORMED[case]
    path = write_jsonl(tmp_path / f"bad-{case}.jsonl", rows)
    with pytest.raises(ProblemSetError, match=err(path, row, field)):
        load_problems(str(path))


def test_duplicate_id_names_first_row(tmp_path):
    path = write_jsonl(tmp_path / "dupes.jsonl", [*GOOD_ROWS, {"id": "a", "problem": "again", "answer": "1"}])
    with pytest.raises(ProblemSetError, match=r"duplicate id 'a' \(first used at row 1\)"):
        load_problems(str(path))


def test_malformed_csv_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,problem,answer\na,Find x.,5\nb,Find y.,five\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=err(path, 2, "answer")):
        load_problems(str(path))


@pytest.mark.parametrize(
    ("kwargs", "field", "flag"),
    [
        ({"answer_field": "key"}, "key", "--answer-field"),
        ({"problem_field": "question"}, "question", "--problem-field"),
        ({"id_field": "qid"}, "qid", "--id-field"),
    ],
)
def test_missing_column_lists_available_fields(tmp_path, kwargs, field, flag):
    path = write_jsonl(tmp_path / "cols.jsonl", GOOD_ROWS)
    with pytest.raises(ProblemSetError, match=err(path, 1, field)) as info:
        load_problems(str(path), **kwargs)
    message = str(info.value)
    assert "available fields: id, problem, answer" in message
    assert flag in message


def test_missing_solution_column_is_fine(tmp_path):
    path = write_jsonl(tmp_path / "nosol.jsonl", GOOD_ROWS)
    assert all(p.solution is None for p in load_problems(str(path), solution_field="worked"))


# ----------------------------------------------------------------------------- malformed files


def test_invalid_utf8_jsonl(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(
        json.dumps(GOOD_ROWS[0]).encode() + b"\n" + b'{"id": "b", "problem": "caf\xe9", "answer": "1"}\n'
    )
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 2: invalid UTF-8"):
        load_problems(str(path))


def test_invalid_json_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD_ROWS[0]) + "\n" + json.dumps(GOOD_ROWS[1]) + "\n{\"id\": \"c\", \n",
                    encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 3: invalid JSON"):
        load_problems(str(path))


def test_non_object_json_line(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text(json.dumps(GOOD_ROWS[0]) + "\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 2: expected a JSON object"):
        load_problems(str(path))


def test_invalid_json_array(tmp_path):
    path = tmp_path / "array.json"
    path.write_text('[\n{"id": "a", "problem": "p", "answer": "1"},\n{"id": \n', encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line \d+: invalid JSON"):
        load_problems(str(path))


def test_invalid_utf8_csv(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"id,problem,answer\na,caf\xe9,1\n")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 2: invalid UTF-8"):
        load_problems(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: no rows"):
        load_problems(str(path))


def test_header_only_csv(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("id,problem,answer\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: no rows"):
        load_problems(str(path))


def test_lone_surrogate_escape(tmp_path):
    path = tmp_path / "surrogate.jsonl"
    path.write_text(json.dumps(GOOD_ROWS[0]) + '\n{"id": "b", "problem": "x\\ud800", "answer": "1"}\n',
                    encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 2: .*lone surrogate"):
        load_problems(str(path))


def test_repeated_key_in_a_json_lines_row_is_refused(tmp_path):
    path = tmp_path / "twice.jsonl"
    path.write_text(json.dumps(GOOD_ROWS[0]) + '\n\n{"id": "b", "problem": "q", "answer": "1", "answer": "2"}\n',
                    encoding="utf-8")
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: line 3: .*repeats the key 'answer'"):
        load_problems(str(path))
    # In a JSON array, or inside a value, a repeated key keeps its last value, as it always did.
    path = tmp_path / "twice.json"
    path.write_text('[{"id": "a", "problem": "p", "answer": "1"}, {"id": "b", "id": "c", "problem": "q", "answer": "1"}]',
                    encoding="utf-8")
    assert [p.id for p in load_problems(str(path))] == ["a", "c"]
    path = tmp_path / "nested.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": "1", "meta": {"k": 1, "k": 2}}\n', encoding="utf-8")
    assert [p.id for p in load_problems(str(path))] == ["a"]


def test_unknown_suffix_lists_supported(tmp_path):
    path = tmp_path / "problems.txt"
    path.write_text("Find 1+1.\n", encoding="utf-8")
    with pytest.raises(ProblemSetError, match=re.escape(path.name)) as info:
        load_problems(str(path))
    message = str(info.value)
    assert "'.txt'" in message
    for suffix in (".jsonl", ".json", ".parquet", ".csv"):
        assert suffix in message


def test_file_not_found(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(ProblemSetError, match=rf"{re.escape(path.name)}: file not found"):
        load_problems(str(path))


def test_directory_refused(tmp_path):
    with pytest.raises(ProblemSetError, match="is a directory"):
        load_problems(str(tmp_path))


def test_a_fifo_is_refused_not_read(tmp_path):
    """Reading a FIFO would block until a writer comes (or forever)."""
    fifo = tmp_path / "problems.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ProblemSetError, match="not a regular file"):
        load_problems(str(fifo))


def test_not_a_file_nor_hub_id():
    with pytest.raises(ProblemSetError, match="not a hub dataset id"):
        load_problems("no such thing")


def test_ten_megabyte_problem_is_refused_quickly(tmp_path):
    path = tmp_path / "huge.jsonl"
    write_jsonl(path, [GOOD_ROWS[0], {"id": "big", "problem": "x" * 10_000_000, "answer": "1"}])
    with pytest.raises(ProblemSetError, match=err(path, 2, "problem")) as info:
        load_problems(str(path))
    assert "MAX_PROBLEM_CHARS" in str(info.value)


def test_ten_megabyte_solution_loads(tmp_path):
    path = write_jsonl(tmp_path / "longsol.jsonl",
                       [{"id": "a", "problem": "p" * (MAX_PROBLEM_CHARS // 2), "answer": "1",
                         "solution": "s" * 10_000_000}])
    (p,) = load_problems(str(path))
    assert len(p.solution) == 10_000_000
    assert len(p.problem) == MAX_PROBLEM_CHARS // 2


# ----------------------------------------------------------------------------- hub ids


def test_fake_hub_id_offline_gives_clear_error():
    code = (
        "from graftbench.problems.loading import load_problems\n"
        "from graftbench.problems.types import ProblemSetError\n"
        "try:\n"
        "    load_problems('graftbench-no-such-owner/no-such-problem-set')\n"
        "except ProblemSetError as e:\n"
        "    print('ERROR:', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("ERROR: graftbench-no-such-owner/no-such-problem-set:")
    assert "offline" in out
    assert "local file" in out and ".jsonl" in out and ".csv" in out


def test_missing_local_path_that_looks_like_hub_id_is_a_file_error():
    with pytest.raises(ProblemSetError, match="file not found"):
        load_problems("owner/problems.jsonl")


# ----------------------------------------------------------------------------- builtin set


def _final_answer(solution: str) -> str:
    last = solution.strip().splitlines()[-1]
    m = re.fullmatch(r"Final answer: (\S+)", last)
    assert m, last
    return m.group(1)


def test_builtin_shape():
    problems = builtin_problems()
    families = {p.family for p in problems}
    assert len(families) >= 5
    assert families >= {"mod", "paths", "digits", "divisors", "base"}
    for fam in families:
        members = [p for p in problems if p.family == fam]
        assert [p.id for p in members] == [f"{fam}-0", f"{fam}-1"]
    for p in problems:
        assert AIME_ANSWER.match(p.answer) and 0 <= int(p.answer) <= 999, p
        assert p.solution is not None
        assert _final_answer(p.solution) == p.answer, p
        assert 3 <= len(p.solution.splitlines()) <= 8, p.solution
        assert p.problem.strip() and p.problem.rstrip().endswith(("?", "."))


def test_builtin_deterministic_and_seeded():
    a = builtin_problems(3, seed=0)
    assert a == builtin_problems(3, seed=0)
    assert problem_set_sha256(a) == problem_set_sha256(builtin_problems(3, seed=0))
    b = builtin_problems(3, seed=1)
    assert problem_set_sha256(a) != problem_set_sha256(b)
    assert [p.problem for p in a] != [p.problem for p in b]
    # Asking for more per family only extends each family.
    more = builtin_problems(5, seed=0)
    for fam in {p.family for p in a}:
        assert [p for p in a if p.family == fam] == [p for p in more if p.family == fam][:3]


def test_builtin_default_is_stable_across_processes():
    code = ("from graftbench.problems.builtin import builtin_problems; "
            "from graftbench.problems.types import problem_set_sha256; print(problem_set_sha256(builtin_problems()))")
    digests = set()
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=120, check=True, cwd=REPO).stdout.strip()
        digests.add(out)
    assert digests == {problem_set_sha256(builtin_problems())}


def test_builtin_distinct_within_family_and_sizes():
    problems = builtin_problems(40, seed=3)
    families = sorted({p.family for p in problems})
    assert len(problems) == 40 * len(families)
    for fam in families:
        texts = [p.problem for p in problems if p.family == fam]
        assert len(texts) == len(set(texts)) == 40
    assert len({p.id for p in problems}) == len(problems)
    assert builtin_problems(0) == []
    with pytest.raises(ValueError, match="non-negative int, got -1"):
        builtin_problems(-1)


# Independent brute-force answers, parsed from the problem text.


def _brute_mod(text: str) -> int:
    a, b, m = map(int, re.search(r"\$(\d+)\^\{(\d+)\}\$ is divided by \$(\d+)\$", text).groups())
    r = 1
    for _ in range(b):
        r = r * a % m
    return r


def _brute_paths(text: str) -> int:
    m, n = map(int, re.search(r"to \$\((\d+),(\d+)\)\$ consists", text).groups())
    p, q = map(int, re.search(r"the point \$\((\d+),(\d+)\)\$", text).groups())
    count = 0
    for rights in itertools.combinations(range(m + n), m):
        x = y = 0
        visited = {(0, 0)}
        for step in range(m + n):
            if step in rights:
                x += 1
            else:
                y += 1
            visited.add((x, y))
        count += (p, q) in visited
    return count if "do not pass" not in text else math_comb_total(m, n) - count


def math_comb_total(m: int, n: int) -> int:
    return sum(1 for _ in itertools.combinations(range(m + n), m))


def _brute_digits(text: str) -> int:
    if m := re.search(r"digits of \$(\d+)!\$", text):
        f = 1
        for k in range(2, int(m.group(1)) + 1):
            f *= k
        return sum(map(int, str(f)))
    n = int(re.search(r"from \$1\$ to \$(\d+)\$", text).group(1))
    return sum(int(c) for k in range(1, n + 1) for c in str(k))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _brute_divisors(text: str) -> int:
    n = int(re.search(r"\$(\d+)\$", text).group(1))
    divs = _divisors(n)
    if "perfect squares" in text:
        return sum(1 for d in divs if int(d**0.5 + 0.5) ** 2 == d)
    if "sum of the positive divisors" in text:
        return sum(divs) % 1000
    assert "How many positive divisors does" in text
    return len(divs)


def _brute_base(text: str) -> int:
    numeral, base = re.search(r"\\underline\{(\d+)\}_\{(\d+)\}", text).groups()
    value = 0
    for c in numeral:
        assert int(c) < int(base)
        value = value * int(base) + int(c)
    return value


def _brute_gcd(text: str) -> int:
    a, b = map(int, re.findall(r"\$(\d+)\$", text)[:2])
    x, y = a, b
    while y:
        x, y = y, x % y
    if "greatest common divisor" in text:
        return x
    assert "least common multiple" in text
    return (a * b // x) % 1000


BRUTE = {
    "mod": _brute_mod,
    "paths": _brute_paths,
    "digits": _brute_digits,
    "divisors": _brute_divisors,
    "base": _brute_base,
    "gcd": _brute_gcd,
}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_builtin_answers_recomputed_by_brute_force(seed):
    problems = builtin_problems(8, seed=seed)
    assert {p.family for p in problems} <= set(BRUTE)
    for p in problems:
        assert str(BRUTE[p.family](p.problem)) == p.answer, p


def test_builtin_variants_all_appear():
    texts = [p.problem for p in builtin_problems(40, seed=0)]
    for phrase in ("do not pass", "pass through", "!$", "from $1$ to", "perfect squares",
                   "sum of the positive divisors", "How many positive divisors does",
                   "greatest common divisor", "least common multiple"):
        assert any(phrase in t for t in texts), phrase


# ----------------------------------------------------------------------------- hashes


def test_problem_set_sha256_changes_with_any_key():
    problems = load_problems(str(AIME2024))
    digest = problem_set_sha256(problems)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert digest == problem_set_sha256(load_problems(str(AIME2024)))
    changed = list(problems)
    changed[3] = dataclasses.replace(changed[3], answer=str(int(changed[3].answer) + 1))
    assert problem_set_sha256(changed) != digest
    assert problem_set_sha256([dataclasses.replace(problems[0], solution=None), *problems[1:]]) != digest
    assert problem_set_sha256(problems[::-1]) != digest
    # family is not part of the identity
    assert problem_set_sha256([dataclasses.replace(p, family="x") for p in problems]) == digest
    # the canonical form is the documented one
    payload = json.dumps([[p.id, p.problem, p.answer, p.solution] for p in problems],
                         ensure_ascii=True, separators=(",", ":"))
    assert digest == hashlib.sha256(payload.encode()).hexdigest()


def test_problem_set_sha256_of_aime2024_is_the_committed_manifests():
    """The problem-set digest convention is frozen: the committed manifests record this digest."""
    recorded = json.loads(BASELINE_MANIFEST.read_text(encoding="utf-8"))["problem_set"]
    assert recorded["source"] == "../shared/data/aime2024.jsonl" and recorded["n"] == 30
    assert recorded["sha256"] == "e2ffcf162467ca411e474f2516a8f0a6f7090c5228de25099dfea45fa80a4557"
    assert problem_set_sha256(load_problems(str(AIME2024))) == recorded["sha256"]


def test_problem_set_json_escapes_non_ascii_unlike_canonical_json():
    payload = [["id-é", "x", "1", None]]
    assert problem_set_json(payload) == '[["id-\\u00e9","x","1",null]]'
    assert canonical_json(payload) == '[["id-é","x","1",null]]'
    assert problem_set_sha256([Problem("id-é", "x", "1")]) == hashlib.sha256(problem_set_json(payload).encode()).hexdigest()


def test_problem_text_sha256_and_normalisation():
    text = "  Find   the\tRemainder\n when $7^{222}$ is divided by $1000$.  "
    assert normalize_problem_text(text) == "find the remainder when $7^{222}$ is divided by $1000$."
    assert problem_text_sha256(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert problem_text_sha256("Find x") != problem_text_sha256("find x")
    assert problem_text_sha256("é") == hashlib.sha256("é".encode("utf-8")).hexdigest()


@given(st.text())
def test_normalize_is_idempotent_and_collapsed(text):
    norm = normalize_problem_text(text)
    assert normalize_problem_text(norm) == norm
    assert norm == norm.strip()
    assert "  " not in norm
    assert not any(c.isspace() and c != " " for c in norm)
    assert norm == norm.lower()


def test_nfc_and_nfd_texts_share_the_exact_key_and_the_similarity_text():
    nfc = "Soit $f(x) = x^2$ : trouvez la différence entre $f(3)$ et $f(2)$, dit l'élève."
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc and problem_text_sha256(nfd) != problem_text_sha256(nfc)  # the raw text hash stays raw
    assert normalize_problem_text(nfd) == normalize_problem_text(nfc)
    assert problem_key(Problem("a", nfd, "1")) == problem_key(Problem("a", nfc, "1"))
    # NFC, not NFKC: superscripts and fractions keep their meaning.
    assert normalize_problem_text("x² + ½") == "x² + ½"
    assert problem_key(Problem("a", "Find x²", "1")) != problem_key(Problem("a", "Find x2", "1"))
    assert normalize_problem_text("Ǆ\u0301 İ") == unicodedata.normalize("NFC", normalize_problem_text("Ǆ\u0301 İ"))


def test_an_nfd_copy_routes_exactly(tmp_path):
    from graftbench.store.folder import Store

    deposited = Problem("a", "Combien de résultats différents ? Écrivez la réponse.", "12")
    query = Problem("b", unicodedata.normalize("NFD", deposited.problem), "12")
    store = Store(tmp_path / "store")
    header = {"config_fingerprint": "f" * 64, "positions": [0, 1], "problem_key": problem_key(deposited),
              "problem_text": normalize_problem_text(deposited.problem), "answer": "12"}
    artifact_id = store.plant(b"not an artifact: only the index row is used here", header)
    assert store.find_exact("f" * 64, problem_key(query)) == artifact_id


def test_nfc_leaves_the_committed_problem_keys_unchanged():
    """The AIME files are NFC already, and the built-in set is ASCII: no key of a committed or generated problem
    changes with the NFC step (the old normalization was lower-case and collapse only)."""
    problems = load_problems(AIME2024) + load_problems(AIME2025) + builtin_problems(8)
    for p in problems:
        assert normalize_problem_text(p.problem) == " ".join(p.problem.lower().split()), p.id
        assert unicodedata.is_normalized("NFC", p.problem), p.id


# ----------------------------------------------------------------------------- no torch


LAYERS = {  # each problem module and the graftbench modules it may import: types at the bottom, no cycles
    "problems.types": {"util.hashing"},
    "problems.builtin": {"problems.generator_checks", "problems.types"},
    "problems.methods": {"problems.generator_checks", "problems.types"},
    "problems.generator_checks": set(),
    "problems.sources": {"util.hub_access", "util.checkout", "problems.types"},
    "problems.loading": {"problems.builtin", "problems.methods", "util.hub_access", "problems.sources",
                         "problems.types"},
    "util.hub_access": set(),  # the hub's reachability: no graftbench module below it
}


@pytest.mark.parametrize("name", MODULES)
def test_modules_import_no_torch_and_stay_layered(name):
    package = name.split(".")[:-1]
    tree = ast.parse((REPO / "graftbench" / f"{name.replace('.', '/')}.py").read_text(encoding="utf-8"))
    imported, internal = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level:
            internal.add(".".join([*package[:len(package) - node.level + 1], node.module]))
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "torch" not in imported and "graftbench" not in imported
    assert internal == LAYERS[name]


def test_using_the_problem_modules_pulls_no_torch_and_json_needs_no_datasets():
    code = (
        "import sys\n"
        "from graftbench.problems.builtin import builtin_problems\n"
        "from graftbench.problems.loading import load_problems\n"
        "builtin_problems(1)\n"
        f"load_problems({str(AIME2024)!r})\n"
        "print('torch' in sys.modules, 'datasets' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRAFTBENCH_ISA"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env=env, cwd=REPO)
    # A JSON Lines file is parsed once, by graftbench itself: datasets is not even imported.
    assert out.stdout.strip() == "False False"


def test_builtin_slices_name_problems_per_family():
    from graftbench.problems.loading import load_problems

    held_out = load_problems("builtin:2-12")
    assert len(held_out) == 60 and {p.id.rsplit("-", 1)[1] for p in held_out} == {str(k) for k in range(2, 12)}
    library = load_problems("builtin:2")
    assert [p.id for p in library] == [p.id for p in load_problems("builtin")]
    assert not {p.problem for p in library} & {p.problem for p in held_out}
    by_id = {p.id: p for p in load_problems("builtin:12")}
    assert all(by_id[p.id] == p for p in held_out)  # a problem is the same whatever the slice's end


@pytest.mark.parametrize("source, message", [("builtin:5-2", "holds no problem"), ("builtin:x", "write builtin"),
                                             ("builtin:0-0", "holds no problem"),
                                             ("builtin:118", "hold 117 distinct problems each, not 118"),
                                             ("builtin:0-99999999999999999999", "each, not 99999999999999999999")])
def test_bad_builtin_slices_are_refused(source, message):
    from graftbench.problems.loading import load_problems

    with pytest.raises(ProblemSetError, match=message):
        load_problems(source)


def test_max_per_family_is_the_most_every_family_yields():
    from graftbench.problems.builtin import MAX_PER_FAMILY, builtin_problems

    assert len(builtin_problems(n_per_family=MAX_PER_FAMILY)) == 6 * MAX_PER_FAMILY
    with pytest.raises(ValueError, match=f"could not produce {MAX_PER_FAMILY + 1} distinct problems"):
        builtin_problems(n_per_family=MAX_PER_FAMILY + 1)


@pytest.mark.parametrize("args", [["solve", "--problems", "builtin:150"], ["run", "--per-family", "200"]])
def test_too_many_builtin_problems_is_a_one_line_error_before_any_model_loads(args, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *a, **k: pytest.fail("the model was loaded"))
    result = CliRunner().invoke(app, [*args, "--runs-dir", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "117 distinct problems each" in result.output and "Traceback" not in result.output


def test_a_recorded_source_never_carries_an_absolute_path_of_this_machine(tmp_path):
    from graftbench.problems.sources import recorded_source

    work = tmp_path / "work" / "main"
    assert recorded_source(str(tmp_path / "work" / "shared" / "data" / "a.jsonl"), work) == \
        "../shared/data/a.jsonl"
    assert recorded_source("/elsewhere/private/b.jsonl", work) == "b.jsonl"  # outside: the file name alone
    for source in ("builtin", "builtin:2-4", "methods", "data/c.jsonl", "../shared/data/a.jsonl", "org/dataset"):
        assert recorded_source(source, work) == source
