"""The one way SQL text is assembled: parts filled by warehouse.queries.fill."""

import pytest

from warehouse import queries


def test_parts_are_filled_once_and_pieces_are_not_searched() -> None:
    text = "SELECT 1 FROM {db:Identifier}.t{{on_cluster}} WHERE x = {x:UInt8} {{tail}}"
    filled = queries.fill(text, {"on_cluster": " ON CLUSTER c", "tail": "-- {{tail}}"}, "q")
    assert filled == "SELECT 1 FROM {db:Identifier}.t ON CLUSTER c WHERE x = {x:UInt8} -- {{tail}}"


def test_a_part_with_an_argument_is_filled_by_a_function() -> None:
    filled = queries.fill("ENGINE = {{engine:ReplacingMergeTree(ts)}}", {"engine": str.upper}, "q")
    assert filled == "ENGINE = REPLACINGMERGETREE(TS)"


@pytest.mark.parametrize(
    ("text", "parts", "says"),
    [
        ("SELECT {{what}}", {}, "nobody filled: {{what}}"),
        ("SELECT {{what:x}}", {"what": "1"}, "do not match"),
        ("SELECT {{what}}", {"what": str.upper}, "do not match"),
        ("SELECT {{ what }}", {"what": "1"}, "malformed part"),
    ],
)
def test_a_part_left_unfilled_or_malformed_is_an_error(
    text: str, parts: dict[str, queries.Part], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        queries.fill(text, parts, "sql/q.sql")


def test_the_usage_query_renders_from_either_source() -> None:
    for source in ("rollup", "raw"):
        text = queries.render(
            "ledger_usage", minutes=queries.sql(f"ledger_minutes_{source}"), materialized=""
        )
        assert "{{" not in text and "FROM {db:Identifier}.allocations FINAL" in text
