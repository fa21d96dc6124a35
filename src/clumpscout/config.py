"""The configuration: one schema holds every setting's default, bounds and choices.

``config.schema.yaml`` (next to this module, shipped with the package) is the only place a
default is written (docs/decisions.md#one-config-source). The workflow validates its config
with :func:`check` (which fills the defaults), :class:`clumpscout.model.params.Params`
takes its field defaults and bounds from :func:`defaults` and :func:`bounds`, and
``config.yaml`` documents the same values for users (a test keeps it equal to the defaults),
and every sub-command's option that is a setting is built from the schema by
:func:`add_setting` / :func:`add_settings` (help, default, choices, type, bounds;
docs/decisions.md#cli-settings); :func:`resolve` fills the options a command left to its
``--config`` file.

A problem is reported in one line naming the key (``aggregate.tau: -1 is less than the
minimum of 0``), never as a dump of the schema. ``python -m clumpscout.config [FILE]``
checks a config file; ``python -m clumpscout.config --defaults`` prints every default.

This module needs only PyYAML and jsonschema: the workflow loads it before any job runs.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
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

    # libyaml's loader where PyYAML has it: the same data, ~8x faster (every job loads this)
    return yaml.load(SCHEMA.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


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
    """--help shows every default that is a value: not for required options, flags (their
    help says what they do), options whose absence (None) the help text explains, or the
    options of settings (:func:`add_setting` writes their defaults into their help)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        plain = action.required or action.default is None or isinstance(action.default, bool)
        if plain or hasattr(action, "setting"):
            return action.help or ""
        return super()._get_help_string(action)


# ------------------------------------------------ the command-line options of the settings
def spec(key: str) -> dict:
    """The schema of one setting (a dotted key such as ``export.shape_extent``), a copy."""
    return copy.deepcopy(_node(key))


def default(key: str):
    """The schema's default of a setting (a dotted key)."""
    node = _node(key)
    return defaults(key) if _is_section(node) else _typed(node.get("default"), node)


def _shown(value) -> str:
    """A default as a config file writes it: null, true, [1, 2]."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


class FromConfig:
    """The default of a setting's option in a command that reads ``--config``: the file's
    value of the key, else the schema's default. :func:`resolve` puts the value in place."""

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key

    def __eq__(self, other) -> bool:
        return isinstance(other, FromConfig) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:  # what --help shows as the default
        return f"the --config file's {self.key}, else {_shown(default(self.key))}"

    __repr__ = __str__


def _lookup(cfg, key: str) -> tuple[bool, object]:
    """(found, value) of a dotted key in a config mapping; a shorthand section such as
    ``gold: FILE`` holds none of its keys."""
    node = cfg
    for name in key.split("."):
        if not isinstance(node, dict) or name not in node:
            return False, None
        node = node[name]
    return True, node


def resolve(args: argparse.Namespace, cfg: dict | None = None) -> argparse.Namespace:
    """Put the value of every setting option the command line left unset (a
    :class:`FromConfig` default) in place: ``cfg``'s value (the ``--config`` file's), else
    the schema's default. Returns ``args``."""
    for name, value in vars(args).items():
        if isinstance(value, FromConfig):
            found, got = _lookup(cfg or {}, value.key)
            setattr(args, name, copy.deepcopy(got) if found else default(value.key))
    return args


def _types(node: dict) -> list[str]:
    """The JSON types a setting takes (its ``oneOf`` alternatives' included)."""
    kinds = node.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    for alt in node.get("oneOf", []) + node.get("anyOf", []):
        kinds += [k for k in _types(alt) if k not in kinds]
    return kinds


def _fits(value, node: dict) -> bool:
    """Whether a value read from the command line satisfies a setting's schema (the
    keywords a single value can break: type, enum, const, bounds, length, pattern)."""
    alts = node.get("oneOf") or node.get("anyOf")
    if alts:
        return any(_fits(value, alt) for alt in alts)
    kinds = _types(node)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok_type = {
        "integer": is_int,
        "number": is_int or isinstance(value, float),
        "string": isinstance(value, str),
    }
    if kinds and not any(ok_type.get(k, False) for k in kinds):
        return False
    if "enum" in node and value not in node["enum"]:
        return False
    if "const" in node and value != node["const"]:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != value:  # NaN is never in range
            return not any(k in node for k in _BOUNDS)
        for word, (_, holds) in _BOUNDS.items():
            if word in node and not holds(value, node[word]):
                return False
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0):
            return False
        if "pattern" in node and not re.search(node["pattern"], value):
            return False
    return True


#: a bound keyword: (how --help and errors say it, whether a value satisfies it)
_BOUNDS = {
    "minimum": (">=", lambda v, b: v >= b),
    "exclusiveMinimum": (">", lambda v, b: v > b),
    "maximum": ("<=", lambda v, b: v <= b),
    "exclusiveMaximum": ("<", lambda v, b: v < b),
}


def _describe(node: dict) -> str:
    """What a setting's value must be, in words: ``an integer >= 2 and <= 100001``,
    ``a number > 0 or 'auto'``."""
    alts = node.get("oneOf") or node.get("anyOf")
    if alts:
        return " or ".join(_describe(alt) for alt in alts)
    if "const" in node:
        return repr(node["const"])
    if "enum" in node:
        return "one of " + ", ".join(str(v) for v in node["enum"])
    kinds = [k for k in _types(node) if k in ("integer", "number", "string")]
    noun = {"integer": "an integer", "number": "a number", "string": "a text"}
    what = " or ".join(noun[k] for k in kinds) or "a value"
    bounds = [f"{op} {node[w]}" for w, (op, _) in _BOUNDS.items() if w in node]
    if node.get("minLength"):
        bounds.append(f"of at least {node['minLength']} character(s)")
    return what + (" " + " and ".join(bounds) if bounds else "")


def _word_reader(node: dict):
    """The argparse ``type`` of a setting: a command-line word read as the setting's type
    (text first where text is allowed, then an integer, then a number) and checked against
    its schema; else an error naming what the value must be."""
    kinds = [k for k in ("string", "integer", "number") if k in _types(node)]
    read = {"string": str, "integer": int, "number": float}

    def setting_value(word: str):
        for kind in kinds:
            try:
                value = read[kind](word)
            except ValueError:
                continue
            if _fits(value, node):
                return value
        raise argparse.ArgumentTypeError(f"{word!r} is not {_describe(node)}")

    return setting_value


def _letters_reader(node: dict):
    """The argparse ``type`` of a list of one-letter choices written as one word
    (``irg`` for ``[i, r, g]``)."""
    items = node.get("items", {})
    lo, hi = node.get("minItems", 0), node.get("maxItems")

    def letters(word: str) -> list:
        value = list(word)
        ok = all(_fits(v, items) for v in value) and lo <= len(value) <= (hi or len(value))
        if not ok or (node.get("uniqueItems") and len(set(value)) != len(value)):
            count = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise argparse.ArgumentTypeError(
                f"{word!r} is not {count} different letters, each {_describe(items)}"
            )
        return value

    return letters


def add_setting(
    parser,
    key: str,
    flag: str | None = None,
    *,
    from_config: bool = False,
    unset: str | None = None,
    note: str | None = None,
    item: bool = False,
    letters: bool = False,
    **kwargs,
) -> argparse.Action:
    """Add the command-line option of the setting ``key`` (a dotted config key) to an
    argparse ``parser``, built from the schema: its help is the key's description (``note``
    adds what the command does with it), its default the schema's, its ``choices`` the
    key's ``enum``, its type and bounds the key's (a value out of bounds is an error naming
    the option and what the value must be). A boolean becomes a flag (one that turns the
    setting off when its default is true). An array takes several values (``nargs``).

    ``flag``: the option (default ``--`` and the key's last part with ``-`` for ``_``).
    ``from_config``: the command reads ``--config``; unset, the option takes the file's
    value, else the schema's default (:func:`resolve` puts it in place).
    ``unset``: the option's absence means something other than the schema's default (it
    then defaults to None); these words say what, in ``--help``.
    ``item``: the option takes one element of an array setting (``--n 5`` of
    ``subsample.n``). ``letters``: a list of one-letter choices written as one word.
    ``kwargs`` go to ``add_argument`` as they are (``required``, ``metavar``, ``dest``, a
    ``type`` of the command's own where the value is checked against an input file).
    Returns the argparse action; its ``setting`` attribute is ``key``."""
    node = _node(key)
    description = " ".join(str(node.get("description", "")).split())
    if not description:
        raise KeyError(f"config key {key} has no description in {SCHEMA.name}")
    name = key.rsplit(".", 1)[-1]
    flag = flag or "--" + name.replace("_", "-")
    kw: dict = {}
    value_node = node["items"] if item else node
    kinds = _types(value_node)
    if "boolean" in kinds and not item:
        if from_config or not node.get("default"):
            kw["action"] = "store_true"
            kw["default"] = FromConfig(key) if from_config else False
        else:  # a flag that turns a setting that is on by default off
            kw.update(action="store_false", dest=name, default=True)
    elif letters:
        kw["type"] = _letters_reader(node)
        kw["default"] = "".join(default(key))  # a word, read by the type as the others
    elif "array" in kinds and not item:
        items = node.get("items", {})
        lo, hi = node.get("minItems", 0), node.get("maxItems")
        kw.update(type=_word_reader(items), nargs=lo if lo == hi else ("+" if lo else "*"))
        if "enum" in items:
            kw["choices"] = list(items["enum"])
    else:
        kw["type"] = _word_reader(value_node)
        if "enum" in value_node:
            kw["choices"] = list(value_node["enum"])
    if not item and "default" not in kw and not kwargs.get("required"):
        kw["default"] = FromConfig(key) if from_config else default(key)
    if unset is not None:
        kw["default"] = None
    kw.update(kwargs)
    # the help: the key's description, the command's note, the key, what the default is
    text = description + (f"; {note}" if note else "")
    if kw.get("required"):
        shown = None
    elif unset is not None:
        shown = unset
    elif kw.get("action") == "store_false":
        shown = f"{_shown(True)}; {flag} sets it to {_shown(False)}"
    else:
        shown = _shown(kw.get("default"))
    text += (f" (default: {shown})" if shown is not None else "") + f" [config {key}]"
    kw["help"] = text.replace("%", "%%")
    action = parser.add_argument(flag, **kw)
    action.setting = key
    action.unset = unset
    return action


def add_settings(parser, section: str, keys, **common) -> list[argparse.Action]:
    """:func:`add_setting` for several keys of one section: ``keys`` a list of key names, or
    a mapping of key name to its flag (None: the default flag); ``common`` goes to each."""
    pairs = keys.items() if isinstance(keys, dict) else ((k, None) for k in keys)
    return [add_setting(parser, f"{section}.{k}", flag, **common) for k, flag in pairs]


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
