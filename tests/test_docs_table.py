"""benchmarks/docs_table.py: each benchmark rewrites only its own section of docs/benchmarks.md."""

import importlib.util

import pandas as pd
from conftest import REPO

spec = importlib.util.spec_from_file_location("docs_table", REPO / "benchmarks" / "docs_table.py")
dt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dt)


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
    # each section carries an anchor of its name, for links to it from the other docs
    assert text.count('<a id="one"></a>') == 1 and text.count('<a id="two"></a>') == 1
    assert text.index('<a id="one"></a>') < text.index("## First")


def test_tests_never_write_the_repository_docs(_benchmarks_md):
    """The suite points write_section at a file of its own (tests/conftest.py)."""
    path = dt.write_section("probe", "Probe", "body", command="probe", date="2026-01-01")
    assert path == _benchmarks_md and path != dt.DOCS
    assert "<!-- begin probe -->" in path.read_text()


def test_pending_section_names_the_command_and_holds_no_number(tmp_path, monkeypatch):
    path = tmp_path / "b.md"
    monkeypatch.setenv("CLUMPSCOUT_BENCHMARKS_MD", str(path))
    cmd = ".venv/bin/python benchmarks/bench_scale.py --out /tmp/s"
    assert dt.main(["pending", "scale", "Paper scale", cmd]) == 0
    text = path.read_text()
    body = text.split("## Paper scale", 1)[1].split("<!-- end scale -->")[0]
    assert f"Not measured yet by this script: run `{cmd}`." in body
    assert "load average" in body


def test_command_line_is_relative_to_the_repository():
    argv = [str(REPO / "benchmarks" / "regimes.py"), "--subjects", "1000"]
    assert dt.command_line(argv) == ".venv/bin/python benchmarks/regimes.py --subjects 1000"
