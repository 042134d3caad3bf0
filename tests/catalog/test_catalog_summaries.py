"""What one listing says in the log, summed up per server (``catalog.summaries``): one
line for many tools, once per change."""

from __future__ import annotations

from trunkline.catalog.model import CatalogWarning
from trunkline.catalog.pins import Quarantine
from trunkline.catalog.summaries import Said, quarantines_line, warnings_line


def renamed(n: int, server: str = "x") -> list[Quarantine]:
    return [Quarantine(server, f"t{i}", "renamed", renamed_from=f"old{i}") for i in range(n)]


def test_one_quarantine_is_said_whole():
    (held,) = renamed(1)
    assert quarantines_line("x", [held]) == str(held)
    assert quarantines_line("x", []) is None


def test_many_quarantines_are_one_line_counted_by_reason_naming_the_first():
    held = [*renamed(498), Quarantine("x", "big", "bound", bound="too big"),
            Quarantine("x", "edited", "changed", ("description",))]
    line = quarantines_line("x", held)
    assert line is not None and "\n" not in line
    assert line.startswith("server 'x': 500 tools quarantined (498 renamed, 1 bound, 1 changed;")
    assert "first: 't0', 't1', 't2', and 497 more" in line
    assert "host.quarantined()" in line and "trunkline pins list" in line


def test_many_warnings_are_one_line_with_the_first_said():
    warnings = [CatalogWarning("x", "duplicate", "repeats the name of an earlier tool; "
                               "dropped", f"t{i}") for i in range(40)]
    warnings.append(CatalogWarning("x", "ttl", "ttlMs missing on 1 of 1 page(s); read as 0"))
    line = warnings_line("x", warnings)
    assert line == ("server 'x': 41 warnings about its tool list (40 duplicate, 1 ttl); "
                    "first: tool 't0': repeats the name of an earlier tool; dropped; "
                    "host.warnings lists them all")
    assert warnings_line("x", warnings[:1]) == str(warnings[0])
    assert warnings_line("x", []) is None


def test_a_line_is_news_once_per_change_and_per_server():
    said = Said()
    assert said.news("x", "quarantined", "500 renamed")
    assert not said.news("x", "quarantined", "500 renamed")
    assert said.news("y", "quarantined", "500 renamed")  # another server's own
    assert said.news("x", "warnings", "500 renamed")  # another topic
    assert said.news("x", "quarantined", "501 renamed")
    assert not said.news("x", "failure", None)  # nothing said yet is nothing new
    said.forget("x")
    assert said.news("x", "quarantined", "501 renamed")
