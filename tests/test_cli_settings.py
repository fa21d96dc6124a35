"""One source per setting on the command line (docs/decisions.md#cli-settings).

Every option of a sub-command that is a setting (a key of config.schema.yaml) is built from
the schema by ``clumpscout.config.add_setting``: its help holds the key's description, its
default is the schema's (or the ``--config`` file's, else the schema's), its choices the
key's ``enum``, and a value out of the key's bounds is a one-line error naming the option.
No option writes a setting's default by hand. The schema is read here from the YAML file
itself, not through the code under test.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
import yaml

from clumpscout import cli, config

SCHEMA = yaml.safe_load(
    (Path(config.__file__).with_name("config.schema.yaml")).read_text(encoding="utf-8")
)

#: hand-written options whose name is also a config key's, and why they are not that setting
NOT_SETTINGS = {
    ("compare", "--kind"): "the reference scored against (experts or truth), not simulate.kind",
    ("compare", "--n"): "a tag of the output rows, not a subsample size to draw",
    ("headline", "--model"): "whose results the paper's sections read, not aggregate.model",
}
#: hand-written options with a default, none of them a setting
HAND_DEFAULTS = {
    ("extract", "--workers"): 1,
    ("cutouts", "--workers"): 1,
    ("replay", "--workers"): 1,
    ("compare", "--kind"): "experts",
    ("headline", "--model"): "paper",
    ("serve", "--host"): "127.0.0.1",
    ("aggregate", "--skip"): [],
    ("serve", "--port"): 8080,
}


def node(key: str) -> dict:
    n = SCHEMA
    for part in key.split("."):
        n = n["properties"][part]
    return n


def leaf_keys(n: dict = SCHEMA, prefix: str = "") -> dict[str, list[tuple[str, dict]]]:
    """name -> [(dotted key, schema)] of every setting (sections walked through)."""
    out: dict[str, list] = {}
    for name, sub in n.get("properties", {}).items():
        key = prefix + name
        if "properties" in sub and sub.get("default") == {}:
            for k, v in leaf_keys(sub, key + ".").items():
                out.setdefault(k, []).extend(v)
        else:
            out.setdefault(name, []).append((key, sub))
    return out


def parser_of(name: str) -> argparse.ArgumentParser:
    return cli.command_parser(name)[1]


def settings_of(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if hasattr(a, "setting")]


def words(text: str) -> str:
    return " ".join(text.replace("%%", "%").split())


def value_node(action, n: dict) -> dict | None:
    """The schema one command-line word is checked against (None: a list of letters
    written as one word, checked as a whole)."""
    if "items" not in n:
        return n
    if action.nargs is None and isinstance(action.default, str):
        return None
    return n["items"]


COMMANDS = list(cli.COMMANDS)


def test_every_command_with_settings_uses_the_schema():
    with_settings = {c for c in COMMANDS if settings_of(parser_of(c))}
    # every command that has an option mirroring a config key (catalogue has none; serve
    # reads its settings from --config only: a live service's settings are one file)
    assert with_settings == set(COMMANDS) - {"catalogue", "serve"}


@pytest.mark.parametrize("command", COMMANDS)
def test_setting_options_follow_the_schema(command):
    parser = parser_of(command)
    flags = {s for a in parser._actions for s in a.option_strings}
    for action in settings_of(parser):
        n, flag = node(action.setting), action.option_strings[0]
        help_text = words(action.help)
        assert words(n["description"]) in help_text, (command, flag)
        assert f"[config {action.setting}]" in help_text, (command, flag)
        # choices: the key's enum (of its items for an option of several values)
        enum = n.get("enum")
        if enum is None and action.nargs is not None and "items" in n:
            enum = n["items"].get("enum")
        assert (list(action.choices) if action.choices else None) == enum, (command, flag)
        # default: the --config file's else the schema's, or the schema's, or none at all
        d = action.default
        if isinstance(d, config.FromConfig):
            assert "--config" in flags, (command, flag)
            assert d.key == action.setting
            assert str(d).endswith(_shown(n["default"])), (command, flag, str(d))
        elif action.required:
            pass
        elif action.unset is not None:
            assert d is None and f"(default: {action.unset})" in help_text, (command, flag)
        else:
            if isinstance(d, str) and action.type is not None:
                d = action.type(d)  # argparse reads a default that is a word, too
            assert d == n["default"], (command, flag, d)
            assert f"(default: {_shown(n['default'])})" in help_text or isinstance(d, bool)


def _shown(v) -> str:
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, list) and all(isinstance(x, str) and len(x) == 1 for x in v):
        return "".join(v)  # a list of letters is written as one word
    return str(v)


@pytest.mark.parametrize("command", COMMANDS)
def test_no_setting_is_written_by_hand(command):
    leaves = leaf_keys()
    for action in parser_of(command)._actions:
        if hasattr(action, "setting") or not action.option_strings:
            continue
        flag = action.option_strings[-1]
        for key, sub in leaves.get(action.dest, []):
            if "x-input" in sub:  # a file or folder: paths stay hand-written
                continue
            assert (command, flag) in NOT_SETTINGS, f"{command} {flag} mirrors {key} by hand"
        d = action.default
        if d is not None and not isinstance(d, bool) and d != argparse.SUPPRESS:
            assert HAND_DEFAULTS.get((command, flag), object()) == d, (command, flag, d)


def _outside(n: dict) -> list[tuple[str, str]]:
    """(word out of bounds, word on the bound that is allowed) per bound of a number key,
    from the schema's numbers (``oneOf`` alternatives included)."""
    out = []
    for alt in n.get("oneOf", [n]):
        kinds = alt.get("type", [])
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not ({"integer", "number"} & set(kinds)):
            continue
        step = 1 if "integer" in kinds else 0.001
        if "minimum" in alt:
            out.append((str(alt["minimum"] - step), str(alt["minimum"])))
        if "exclusiveMinimum" in alt:
            out.append((str(alt["exclusiveMinimum"]), str(alt["exclusiveMinimum"] + step)))
        if "maximum" in alt:
            out.append((str(alt["maximum"] + step), str(alt["maximum"])))
        if "exclusiveMaximum" in alt:
            out.append((str(alt["exclusiveMaximum"]), str(alt["exclusiveMaximum"] - step)))
    return out


@pytest.mark.parametrize("command", COMMANDS)
def test_bounds_and_choices_are_enforced(command):
    checked = 0
    for action in settings_of(parser_of(command)):
        if action.type is None:  # a flag
            continue
        n = value_node(action, node(action.setting))
        if n is None:
            continue
        for bad, good in _outside(n):
            with pytest.raises(argparse.ArgumentTypeError):
                action.type(bad)
            assert math.isclose(float(action.type(good)), float(good))
            checked += 1
        for word in n.get("enum", []):
            assert action.type(str(word)) == word
        if n.get("enum"):
            with pytest.raises(argparse.ArgumentTypeError):
                action.type("not-" + str(n["enum"][0]))
    if command in ("compare", "baseline", "extract", "subjects"):
        assert checked >= 2


@pytest.mark.parametrize(
    ("argv", "flag", "what"),
    [
        (["compare", "--thresholds", "1"], "--thresholds", "an integer >= 2 and <= 100001"),
        (["aggregate", "--seed", "-1"], "--seed", "an integer >= 0"),
        (["baseline", "--bandwidth", "0"], "--bandwidth", "a number > 0"),
        (["gold", "--majority", "1"], "--majority", "a number >= 0 and < 1"),
        (["cutouts", "--channels", "irr"], "--channels", "3 different letters"),
        (["boxes", "--shape-extent", "round"], "--shape-extent", "one of drawn, fixed"),
    ],
)
def test_a_value_out_of_bounds_is_one_line_naming_the_option(argv, flag, what, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: argument {flag}: "), err
    assert what in err[0], err


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_shows_the_defaults(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"] if command else ["--help"])
    assert e.value.code == 0
    text = words(capsys.readouterr().out)
    assert "(default: None)" not in text
    if command is None:
        return
    for action in settings_of(parser_of(command)):
        if not action.required:
            assert "(default: " in words(action.help), (command, action.option_strings)
            if isinstance(action.default, config.FromConfig):
                assert f"(default: the --config file's {action.setting}, else" in text


def test_an_unset_option_takes_the_config_then_the_schema():
    p = parser_of("aggregate")
    base = ["--boxes", "b.parquet", "--out", "o"]
    seed = SCHEMA["properties"]["seed"]["default"]
    gold = SCHEMA["properties"]["gold"]["properties"]
    args = config.resolve(p.parse_args(base), {})
    assert args.seed == seed and args.per_tool is False
    assert args.gold_on_implausible == gold["on_implausible"]["default"]
    assert args.gold_scale == gold["frame"]["properties"]["scale"]["default"]
    cfg = {"seed": 7, "aggregate": {"per_tool": True}, "gold": {"frame": {"scale": 2.5}}}
    args = config.resolve(p.parse_args(base), cfg)
    assert (args.seed, args.per_tool, args.gold_scale) == (7, True, 2.5)
    assert args.gold_flip_y is None  # null in the schema, absent from the file
    args = config.resolve(p.parse_args([*base, "--seed", "3", "--gold-scale", "4"]), cfg)
    assert (args.seed, args.gold_scale) == (3, 4.0)  # the command line wins
    # a shorthand gold section (a file name) holds none of the frame's keys
    args = config.resolve(p.parse_args(base), {"gold": "gold.csv"})
    assert args.gold_scale == gold["frame"]["properties"]["scale"]["default"]


def test_a_flag_that_turns_a_setting_off():
    p = parser_of("subsample")
    base = ["--boxes", "b", "--out", "o", "--n", "3", "--seed", "1"]
    assert SCHEMA["properties"]["subsample"]["properties"]["nested"]["default"] is True
    assert p.parse_args(base).nested is True
    assert p.parse_args([*base, "--independent"]).nested is False


def test_the_helper_builds_an_option_from_any_key():
    p = argparse.ArgumentParser()
    folds = SCHEMA["properties"]["calibration"]["properties"]["folds"]  # no command's option
    a = config.add_setting(p, "calibration.folds", note="for this test")
    assert a.default == folds["default"] and a.type("2") == 2 and a.type("1000") == 1000
    for bad in ("1", "1001", "2.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            a.type(bad)
    assert p.parse_args([]).folds == folds["default"]
    with pytest.raises(KeyError, match="no description"):
        config.add_setting(p, "images.asinh_m")  # a key without a description
    b = config.add_setting(p, "subsample.n", flag="--sizes")
    assert b.nargs == "+" and p.parse_args(["--sizes", "4", "5"]).sizes == [4, 5]


#: keyword defaults of the model's functions that still repeat a schema default (the model
#: reads its settings through Params, whose defaults are the schema's; these are the
#: functions' own fallbacks, left to the model's owners): (module, function, parameter)
MODEL_FALLBACKS = {
    ("model/calibration.py", "fit_real_map", "C"),
    ("model/calibration.py", "fit_marks_map", "C"),
    ("model/calibration.py", "fit_counts_map", "C"),
    ("model/calibration.py", "default_calibration", "weak_real"),
    ("model/calibration.py", "default", "weak_real"),
    ("model/calibration.py", "fit", "C"),
    ("model/calibration.py", "fit", "weak_real"),
    ("model/facility_location.py", "solve_batch", "min_cluster_size"),
    ("model/generative.py", "log_location_density", "d_max"),
    ("model/generative.py", "facility_costs", "d_max"),
    ("model/generative.py", "cluster_evidence", "d_max"),
    ("model/generative.py", "posterior", "d_max"),
}


def test_no_function_writes_a_settings_default_by_hand():
    """A keyword default named like a setting and equal to its schema default is the
    schema's default written a second time: it must be read from the schema instead."""
    import ast

    defaults = {}
    for name, found in leaf_keys().items():
        for key, sub in found:
            if "default" in sub:
                defaults.setdefault(name, []).append((key, sub["default"]))
    src = Path(config.__file__).parent
    hits = set()
    for path in sorted(src.rglob("*.py")):
        for f in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = f.args
            pos = [*a.posonlyargs, *a.args]
            pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True))
            pairs += [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d]
            for arg, d in pairs:
                if not isinstance(d, ast.Constant) or d.value is None or d.value is True:
                    continue
                if any(v == d.value for _, v in defaults.get(arg.arg, [])):
                    hits.add((path.relative_to(src).as_posix(), f.name, arg.arg))
    assert hits <= MODEL_FALLBACKS, sorted(hits - MODEL_FALLBACKS)
