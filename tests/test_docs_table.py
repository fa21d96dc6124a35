"""benchmarks/docs_table.py: each benchmark rewrites only its own section of docs/benchmarks.md."""

import pandas as pd
from conftest import REPO

from benchmarks import docs_table as dt


def test_markdown_table_by_hand():
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, float("nan")], "c": ["x|y", "z"]})
    assert dt.markdown_table(df, "{:.2f}") == (
        "| a | b | c |\n|---|---|---|\n| 1 | 0.50 | x\\|y |\n| 2 |  | z |"
    )


def test_sections_are_replaced_in_place_and_others_kept(tmp_path):
    path = tmp_path / "benchmarks.md"
    dt.write_section(
        "one", "First", "| x |\n|---|\n| 1 |", command="run one", path=path, date="2026-01-01"
    )
    dt.write_section("two", "Second", "body two", command="run two", path=path, date="2026-01-02")
    dt.write_section(
        "one",
        "First",
        "| x |\n|---|\n| 9 |",
        command="run one --again",
        path=path,
        date="2026-01-03",
    )
    text = path.read_text()
    assert text.startswith("# Measured results")
    assert text.count("<!-- begin one -->") == 1 and text.count("<!-- end one -->") == 1
    assert "| 9 |" in text and "| 1 |" not in text
    assert "Written by `run one --again` on 2026-01-03" in text
    assert "body two" in text and "Written by `run two` on 2026-01-02" in text
    # section one stays where it was: before section two
    assert text.index("<!-- begin one -->") < text.index("<!-- begin two -->")


def test_command_line_is_relative_to_the_repository():
    argv = [str(REPO / "benchmarks" / "regimes.py"), "--subjects", "1000"]
    assert dt.command_line(argv) == ".venv/bin/python benchmarks/regimes.py --subjects 1000"
