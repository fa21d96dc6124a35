"""The configuration: one schema holds every setting's default, bounds and choices.

``config.schema.yaml`` (next to this module, shipped with the package) is the only place a
default is written (docs/decisions.md#one-config-source). The workflow validates its config
with :func:`check` (which fills the defaults), :class:`clumpscout.model.params.Params`
takes its field defaults and bounds from :func:`defaults` and :func:`bounds`, and
``config.yaml`` documents the same values for users (a test keeps it equal to the defaults).

A problem is reported in one line naming the key (``aggregate.tau: -1 is less than the
minimum of 0``), never as a dump of the schema. ``python -m clumpscout.config [FILE]``
checks a config file; ``python -m clumpscout.config --defaults`` prints every default.

This module needs only PyYAML and jsonschema: the workflow loads it before any job runs.
"""

from __future__ import annotations

import argparse
import copy
import os
from functools import lru_cache
from pathlib import Path

from clumpscout.errors import InputError

SCHEMA = Path(__file__).with_name("config.schema.yaml")

#: an `x-input` key is checked only while the section that holds it is in use
_IN_USE = {
    "export": lambda cfg: cfg.get("source") in ("export", "clicks"),
    "images.demo": lambda cfg: bool((cfg.get("images") or {}).get("real_demo")),
}
#: input keys that must be set, per ``source`` (a flattened clicks table replaces the exports)
_REQUIRED_INPUTS = {
    "export": ("export.classifications", "export.subjects"),
    "clicks": ("export.clicks",),
}


class ConfigError(InputError):
    """An invalid configuration: one line per problem, each naming the key."""

    def __init__(self, problems: list[str], path: object = None):
        self.problems = list(problems)
        n = len(self.problems)
        shown = self.problems[:20] + ([f"... and {n - 20} more"] if n > 20 else [])
        if n == 1:  # one line, as every input error of the command line
            super().__init__(f"invalid config: {self.problems[0]}", path=path)
            return
        head = f"invalid config ({n} problems):"
        super().__init__("\n".join([head, *(f"  {p}" for p in shown)]), path=path)


@lru_cache(maxsize=1)
def _schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA.read_text())


def schema() -> dict:
    """The parsed schema (a copy)."""
    return copy.deepcopy(_schema())


def _node(section: str | None) -> dict:
    """The schema of a (dotted) section, e.g. ``aggregate`` or ``images.render``."""
    node = _schema()
    for name in section.split(".") if section else []:
        try:
            node = node["properties"][name]
        except KeyError:
            raise KeyError(f"no config section {section!r}") from None
    return node


def _typed(value, spec: dict):
    """A default as its key's type: an integer written for a ``number`` key is a float."""
    if spec.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return copy.deepcopy(value)


def _is_section(spec: dict) -> bool:
    """A section: a mapping whose keys have their own defaults (its default is ``{}``), not
    a mapping-valued setting such as ``images.beta``."""
    return "properties" in spec and spec.get("default") == {}


def defaults(section: str | None = None) -> dict:
    """Every default of a section (nested sections included), or of the whole config."""
    out = {}
    for name, spec in _node(section).get("properties", {}).items():
        if _is_section(spec):
            out[name] = defaults(f"{section}.{name}" if section else name)
        elif "default" in spec:
            out[name] = copy.deepcopy(_typed(spec["default"], spec))  # callers may edit it
    return out


def bounds(section: str) -> dict[str, tuple[float, float | None, bool, bool]]:
    """``{key: (low, high or None, low open, high open)}`` of a section's bounded numbers."""
    out = {}
    for name, spec in _node(section).get("properties", {}).items():
        lo = spec.get("exclusiveMinimum", spec.get("minimum"))
        if lo is None:
            continue
        hi = spec.get("exclusiveMaximum", spec.get("maximum"))
        out[name] = (lo, hi, "exclusiveMinimum" in spec, "exclusiveMaximum" in spec)
    return out


def choices(section: str) -> dict[str, list]:
    """``{key: allowed values}`` of a section's keys with an ``enum``."""
    return {
        name: list(spec["enum"])
        for name, spec in _node(section).get("properties", {}).items()
        if "enum" in spec
    }


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows every default that is a value: not for required options, flags that are
    off, or options whose absence (None) the help text explains."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.required or action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def _validator():
    """A jsonschema validator that also fills in defaults (an absent or empty section
    becomes a section of defaults)."""
    import jsonschema

    base = jsonschema.validators.validator_for(_schema())
    validate_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, spec):
        if isinstance(instance, dict):
            for name, sub in props.items():
                absent = name not in instance or (instance[name] is None and "properties" in sub)
                if absent and "default" in sub:
                    instance[name] = _typed(sub["default"], sub)
        yield from validate_properties(validator, props, instance, spec)

    return jsonschema.validators.extend(base, {"properties": properties})(_schema())


def _one_line(error) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"{key}: {message}"


#: keys whose plain value (a string or null) is short for ``{key: {<field>: value}}``
_SHORTHANDS = {"gold": "table"}


def _expand_shorthands(cfg: dict) -> None:
    """``gold: experts`` -> ``gold: {table: experts}`` (in place): the form of configs
    written before the section had other keys."""
    for key, fld in _SHORTHANDS.items():
        if key in cfg and (cfg[key] is None or isinstance(cfg[key], str)):
            cfg[key] = {fld: cfg[key]}


def problems(cfg: dict) -> list[str]:
    """One line per schema problem of ``cfg``; fills in the defaults of ``cfg`` in place
    (and writes a shorthand such as ``gold: FILE`` out in full)."""
    if not isinstance(cfg, dict):
        return [f"(top level): a config is a mapping, not {type(cfg).__name__}"]
    _expand_shorthands(cfg)
    errors = sorted(_validator().iter_errors(cfg), key=lambda e: [str(p) for p in e.path])
    return [_one_line(e) for e in errors]


def _walk_inputs(node: dict, prefix: str = ""):
    for name, spec in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        if "x-input" in spec:
            yield key, spec["x-input"], tuple(spec.get("x-keywords", ()))
        yield from _walk_inputs(spec, key + ".")


def _get(cfg: dict, key: str):
    node = cfg
    for name in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(name)
    return node


def input_problems(cfg: dict, base: str | Path | None = None) -> list[str]:
    """One line per input path (a key marked ``x-input`` in the schema) that is missing or
    unreadable, for the sections in use; relative paths are read from ``base`` (default:
    the working directory)."""
    base = Path.cwd() if base is None else Path(base)
    out = []
    keys = _REQUIRED_INPUTS.get(cfg.get("source"), ())
    out += [f"{k}: must be set" for k in keys if not _get(cfg, k)]
    for key, kind, keywords in _walk_inputs(_schema()):
        section = key.rsplit(".", 1)[0]
        if section in _IN_USE and not _IN_USE[section](cfg):
            continue
        value = _get(cfg, key)
        if not value or value in keywords:  # x-keywords: words that are not paths
            continue
        path = base / str(value)
        where = "" if Path(str(value)).is_absolute() else f" (a relative path is read from {base})"
        if kind == "directory" and not path.is_dir():
            out.append(f"{key}: {value} is not a directory{where}")
        elif kind == "file" and not path.is_file():
            out.append(f"{key}: {value} is not a file{where}")
        elif not os.access(path, os.R_OK):
            out.append(f"{key}: {value} is not readable")
    return out


def check(cfg: dict, base: str | Path | None = None, path: object = None) -> dict:
    """Validate ``cfg`` (filling in its defaults, in place) and its input paths; raise
    :class:`ConfigError` listing every problem. Returns ``cfg``."""
    found = problems(cfg)
    if not found:  # paths are only looked at in a config of the right shape
        found = input_problems(cfg, base)
    if found:
        raise ConfigError(found, path=path)
    return cfg


def load(path: str | Path, base: str | Path | None = None) -> dict:
    """A config file, checked and completed with the defaults."""
    import yaml

    try:
        cfg = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read config ({exc})", path=path) from None
    return check(cfg, base=base, path=path)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    import yaml

    parser = argparse.ArgumentParser(prog="python -m clumpscout.config", description=__doc__)
    parser.add_argument("config", nargs="?", help="a config file to check")
    parser.add_argument("--defaults", action="store_true", help="print every default (YAML)")
    args = parser.parse_args(argv)
    if args.defaults:
        print(yaml.safe_dump(defaults(), sort_keys=False), end="")
    if args.config:
        try:
            load(args.config)
        except InputError as exc:
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 2
        print(f"{args.config}: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
