"""benchmarks/docs_table.py: each benchmark rewrites only its own section of docs/benchmarks.md."""

import pandas as pd
from conftest import REPO

from benchmarks import bench_simulate, suite_times
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
    # each section carries an anchor of its name, for links to it from the other docs
    assert text.count('<a id="one"></a>') == 1 and text.count('<a id="two"></a>') == 1
    assert text.index('<a id="one"></a>') < text.index("## First")


def test_tests_never_write_the_repository_docs(_benchmarks_md):
    """The suite points write_section at a file of its own (tests/conftest.py)."""
    path = dt.write_section("probe", "Probe", "body", command="probe", date="2026-01-01")
    assert path == _benchmarks_md and path != dt.DOCS
    assert "<!-- begin probe -->" in path.read_text()


def test_publish_names_the_script_and_its_arguments(tmp_path, monkeypatch):
    """A benchmark's main(argv) called from Python: its own arguments, not the caller's."""
    path = tmp_path / "b.md"
    monkeypatch.setenv("CLUMPSCOUT_BENCHMARKS_MD", str(path))
    script = str(REPO / "benchmarks" / "gold_size.py")
    assert dt.publish("gold-size", "Gold", "body", script, ["--subjects", "60"]) == path
    assert "Written by `.venv/bin/python benchmarks/gold_size.py --subjects 60` on " in (
        path.read_text()
    )


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


def test_suite_times_reads_pytests_summary_line(monkeypatch):
    st = suite_times
    out = "tests/test_a.py ....\n=========== 1 failed, 3 passed, 2 skipped in 61.20s (0:01:01) ===========\n"
    assert st.summary_line(out) == "1 failed, 3 passed, 2 skipped in 61.20s (0:01:01)"
    assert st.summary_line("collected 0 items\n") == "no summary (see the log)"
    assert st.minutes(125.3) == "2:05.3" and st.minutes(59.96) == "1:00.0"
    assert st.LANES["fast"] == ["-m", "not slow"] and st.COMMAND[-2:] == ["-n", "2"]


def test_bench_simulate_scales_the_paper_scale_config(monkeypatch):
    import yaml

    bs = bench_simulate
    paper = yaml.safe_load((REPO / "resources/paper_scale.yaml").read_text())["simulate"]
    base = yaml.safe_load((REPO / "config.yaml").read_text())["simulate"]
    cfg = bs.config(3, plain=False)["simulate"]
    assert cfg["n_subjects"] == 3 * paper["n_subjects"]
    assert cfg["n_expert_subjects"] == paper["n_expert_subjects"]  # the override kept
    assert cfg["compress_classifications"] is True and cfg["write_click_truth"] is False
    plain = bs.config(1, plain=True)["simulate"]
    assert plain["compress_classifications"] == base["compress_classifications"]
    assert plain["n_subjects"] == paper["n_subjects"]
