"""The client's tables (raiclient.table, the standard library's): columns by place."""

from __future__ import annotations

from raiclient import table


def test_two_columns_of_one_name_each_show_their_own_cells():
    """A similarity pair's "team", "team": both showed the first team (sim-a, sim-a)."""
    text = table.render(("#", "team", "team", "similarity"), [("1", "sim-a", "sim-b", "91%")], box=True)
    row = next(line for line in text.splitlines() if line.startswith("│ 1"))
    assert [c.strip() for c in row.split("│")[1:-1]] == ["1", "sim-a", "sim-b", "91%"], text
