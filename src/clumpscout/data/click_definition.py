"""What a click is: one definition for the export reader and the click ledger.

The export reader (:mod:`clumpscout.data.zooniverse`) and the click ledger
(:mod:`clumpscout.data.ledger`) each read the ``annotations`` field of every classification
on their own (the ledger counts independently, so that it can check the reader); both use
the definitions here, so they cannot disagree on what they count (docs/decisions.md#shapes,
#click-definition):

* **Parsing**: :func:`parse_annotations` reads the text exactly as :func:`json.loads` does.
  ``orjson`` is a speed-up only: it is skipped wherever its result could differ (text it
  rejects, text nested deeply enough for the two parsers to disagree, and a ``task`` that
  came out as a float, which is what orjson makes of an integer beyond 64 bits).
* **Combo tasks** are unpacked (:func:`flatten`): an annotation whose value is itself a list
  of annotations stands for those annotations.
* **Drawing tasks**: an annotation is a drawing one when its ``taskType`` says so (front-end
  monorepo) or, in classic exports, when its value is a list that holds a mark (a dict) and
  no survey choice, or is empty (:func:`drawing_marks`). Every element of its value list is
  one click, whatever its shape. Answers of question tasks are not clicks.
* **Task names** are compared as text (:func:`task_name`): a numeric task id is its decimal
  spelling, so the task ``18446744073709551617`` (beyond 64 bits) is the clump task
  ``"18446744073709551617"``.
"""

from __future__ import annotations

import json
from typing import Any

try:  # optional speed-up: identical results (see parse_annotations)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

#: ``taskType`` values of drawing tasks (front-end monorepo annotations)
DRAWING_TASK_TYPES = frozenset({"drawing", "dataVisAnnotation"})


def flatten(annotations: list) -> list[dict]:
    """Annotations with combo tasks unpacked (a value that is itself a list of annotations);
    elements that are not dicts are skipped. Order is kept."""
    out: list[dict] = []
    stack = list(reversed(annotations))
    while stack:
        a = stack.pop()
        if not isinstance(a, dict):
            continue
        v = a.get("value")
        if (
            isinstance(v, list)
            and v
            and isinstance(v[0], dict)
            and {"task", "value"} <= v[0].keys()
        ):
            stack.extend(reversed(v))
        else:
            out.append(a)
    return out


def drawing_marks(value: Any, task_type: Any = None) -> int | None:
    """Number of clicks (marks) of an annotation value; None if it is not a drawing task."""
    if not isinstance(value, list):
        return None
    if task_type is not None:
        return (
            len(value) if isinstance(task_type, str) and task_type in DRAWING_TASK_TYPES else None
        )
    has_dict = False
    for m in value:
        if isinstance(m, dict):
            if "choice" in m:
                return None  # a survey task
            has_dict = True
    if value and not has_dict:
        return None  # a multiple-choice answer
    return len(value)


def task_name(task: Any) -> str | None:
    """A task id as text (None stays None): ``"T0"``, or ``"12"`` for the number 12."""
    if task is None or type(task) is str:
        return task
    return str(task)


def orjson_safe(text: str) -> bool:
    """True when ``text`` is nested too little for :func:`json.loads` to raise RecursionError.

    orjson accepts up to 1024 nested containers, json.loads (C scanner, Python recursion limit)
    about 1000 minus the caller's stack depth: text with fewer than 500 opening brackets (or
    shorter than 1000 characters) nests less than 500 deep and both parsers agree on it.
    """
    return len(text) < 1000 or text.count("[") + text.count("{") < 500


def loads(text: str) -> Any:
    """Parse JSON text like :func:`json.loads` (orjson first when it is installed and cannot
    differ in nesting; json.loads decides whatever orjson rejects: NaN, Infinity, lone
    surrogates). Integers beyond 64 bits are the one remaining difference (orjson makes them
    floats): :func:`parse_annotations` takes care of them where they matter."""
    if _orjson is not None and orjson_safe(text):
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(text)


def parse_annotations(text: str) -> Any:
    """The ``annotations`` field parsed exactly as :func:`json.loads` parses it where it
    decides what a click is: orjson's parse is used unless a ``task`` (combo tasks unpacked)
    came out as a float, which orjson makes of an integer beyond 64 bits; then the text is
    parsed again with json.loads. Raises ValueError for text that is not JSON (and
    RecursionError for text nested too deeply for json.loads)."""
    if _orjson is not None and orjson_safe(text):
        try:
            ann = _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
        else:
            if not isinstance(ann, list) or not any(
                type(a.get("task")) is float for a in flatten(ann)
            ):
                return ann
    return json.loads(text)
