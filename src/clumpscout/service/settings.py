"""The service's settings, read once from the workflow's config (docs/service.md#config).

The same sections as the workflow: ``extract:`` (the marking task, its tools, the unusual
tools, ``max_marks``, ``max_json_depth``), ``export:`` (``workflow_id``, ``box_side``,
``image_size``, ``shape_extent``), ``aggregate:`` (the model), ``calibration:``
(``weak_real``: the default label map), ``replay:`` (the refit points and the policy's
``min_classifications``, ``caesar_cap`` and ``horizon``) and ``serve:`` (the policy, its
setting, how refits run, the body limit). The policy is built as the replay builds the same
setting (:func:`policy_of`), so both retire alike.

:meth:`Settings.fingerprint` is what a database remembers of the settings that shape its
decisions: a restart with other ones stops with the keys that differ (never a silent mix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout import config as _config
from clumpscout.data.gold import Gold, read_gold
from clumpscout.errors import InputError
from clumpscout.model.calibration import CalibrationSettings
from clumpscout.model.live import Policy
from clumpscout.model.params import Params


def policy_of(kind: str, setting: float, replay: dict) -> Policy:
    """The policy ``kind`` at ``setting`` with the ``replay:`` section's
    min_classifications, caesar_cap and horizon, as ``clumpscout replay`` builds it. A live
    service cannot know how often a subject will be classified, so a ``horizon`` of null
    (the replay: each subject's own count) is the ``caesar_cap`` (the classifications a
    subject gets without early retirement)."""
    m = int(replay["min_classifications"])
    horizon = replay["horizon"] if replay["horizon"] is not None else replay["caesar_cap"]
    if kind == "fixed":
        return Policy("fixed", float(setting))
    if kind == "risk":
        return Policy("risk", float(setting), m)
    if kind == "generative":
        return Policy("generative", float(setting), m, horizon=int(horizon))
    return Policy("caesar", float(setting), m, int(replay["caesar_cap"]))


@dataclass(frozen=True)
class Geometry:
    """Box side and image size per subject: the subjects table's (``clumpscout subjects``),
    else the config's ``export.box_side`` and ``export.image_size``."""

    box_side: float | None
    image_size: tuple[float, float] | None
    table: pd.DataFrame | None = field(default=None, compare=False)
    _rows: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.table is not None:  # a dict: one look-up per extract
            t = self.table
            rows = zip(
                t.index,
                t["box_side"],
                t["image_width"],
                t["image_height"],
                t["from_table"],
                strict=True,
            )
            object.__setattr__(self, "_rows", {int(i): r for i, *r in rows})

    def of(self, subject_id: int) -> tuple[float, float, float]:
        """(box side, image width, image height) of a subject; :class:`InputError` when
        neither the subjects table nor the config gives them."""
        side, size = self.box_side, self.image_size
        row = self._rows.get(subject_id)
        if row is not None:
            b, w, h, own = row
            if np.isfinite(b) and b > 0:
                side = float(b)
            if own:
                size = (float(w), float(h))
        if side is None:
            raise InputError(f"subject {subject_id} is not in the subjects table (no box side)")
        if size is None:
            raise InputError(f"subject {subject_id} is not in the subjects table (no image size)")
        return side, size[0], size[1]


def read_subjects(path) -> pd.DataFrame:
    """The subjects table of ``clumpscout subjects`` indexed by subject_id: box_side, the
    image size (rounded as ``clumpscout boxes`` rounds it) and whether that size is the
    table's own (not its config default)."""
    try:
        t = pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the subjects table ({exc})", path=path) from None
    need = ("subject_id", "box_side", "image_width", "image_height")
    missing = [c for c in need if c not in t.columns]
    if missing:
        raise InputError(f"the subjects table lacks {', '.join(missing)}", path=path)
    if t["subject_id"].duplicated().any():
        raise InputError("the subjects table repeats subject ids", path=path)
    w = pd.to_numeric(t["image_width"], errors="coerce").to_numpy(float)
    h = pd.to_numeric(t["image_height"], errors="coerce").to_numpy(float)
    own = (w > 0) & (h > 0)
    if "image_size_source" in t.columns:
        own &= (t["image_size_source"] != "config").to_numpy(dtype=bool)
    return pd.DataFrame(
        {
            "box_side": pd.to_numeric(t["box_side"], errors="coerce").to_numpy(float),
            "image_width": np.round(w),
            "image_height": np.round(h),
            "from_table": own,
        },
        index=pd.Index(t["subject_id"].to_numpy(dtype=np.int64), name="subject_id"),
    )


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from the config (see the module docstring)."""

    params: Params
    policy: Policy
    refit: str
    refit_every: int
    refit_growth: float
    weak_real: float
    clump_task: str | None
    tools: tuple | None
    unusual_tools: tuple
    max_marks: int
    max_json_depth: int
    workflow_id: int | None
    shape_extent: str
    geometry: Geometry
    max_body_bytes: int
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    gold: Gold | None = field(default=None, compare=False)
    config: dict = field(default_factory=dict, compare=False)

    def fingerprint(self) -> dict:
        """The settings that shape the stored decisions (not how refits run)."""
        g = self.geometry
        return {
            "aggregate": {k: v for k, v in sorted(vars(self.params).items())},
            "policy": self.policy.name,
            "min_classifications": self.policy.min_classifications,
            "cap": self.policy.cap,
            "horizon": self.policy.horizon,
            "refit_every": self.refit_every,
            "refit_growth": self.refit_growth,
            "weak_real": self.weak_real,
            "clump_task": self.clump_task,
            "tools": None if self.tools is None else list(self.tools),
            "unusual_tools": list(self.unusual_tools),
            "max_marks": self.max_marks,
            "workflow_id": self.workflow_id,
            "shape_extent": self.shape_extent,
            "box_side": g.box_side,
            "image_size": None if g.image_size is None else list(g.image_size),
            "subjects_table": None if g.table is None else _table_digest(g.table),
            "gold": None
            if self.gold is None
            else _table_digest(
                self.gold.marks if len(self.gold.marks) else self.gold.counts.to_frame()
            ),
            "calibration": {
                k: getattr(self.calibration, k) for k in ("weak_real", "C", "match_iou")
            },
        }


def _table_digest(t: pd.DataFrame) -> str:
    import hashlib

    return hashlib.sha256(pd.util.hash_pandas_object(t).to_numpy().tobytes()).hexdigest()[:16]


def from_config(cfg: dict | None, subjects=None, path=None) -> Settings:
    """:class:`Settings` from a config dict (checked and completed with the defaults, as
    :func:`clumpscout.config.load` returns it) and an optional subjects table path."""
    if cfg is None:
        cfg = check({})
    params = Params.from_dict(dict(cfg["aggregate"]), path=path)
    if params.model != "generative":
        raise InputError("clumpscout serve needs aggregate.model: generative", path=path)
    serve, replay, ext, exp = cfg["serve"], cfg["replay"], cfg["extract"], cfg["export"]
    side = exp["box_side"]
    table = None if subjects is None else read_subjects(subjects)
    if side == "auto":
        if table is None or not np.isfinite(table["box_side"]).all():
            raise InputError(
                "export.box_side: auto is measured on a project's clicks, which a live service "
                "does not have yet: give the side in pixels (the boxes report of an earlier run "
                "says what auto measured) or a subjects table with a box side per subject",
                path=path,
            )
        side = None
    size = exp["image_size"]
    if size is None and (table is None or not table["from_table"].all()):
        # subjects outside the table, or with only its config default: the config's size
        raise InputError(
            "the service needs every subject's image size: export.image_size [W, H] or a "
            "subjects table (--subjects) with the images' sizes",
            path=path,
        )
    tools = ext["tools"]
    return Settings(
        params=params,
        policy=policy_of(serve["policy"], serve["setting"], replay),
        refit=serve["refit"],
        refit_every=int(replay["refit_every"]),
        refit_growth=float(replay["refit_growth"]),
        weak_real=float(cfg["calibration"]["weak_real"]),
        clump_task=ext["clump_task"],
        tools=None if tools is None else tuple(int(t) for t in tools),
        unusual_tools=tuple(int(t) for t in ext["unusual_tools"] or ()),
        max_marks=int(ext["max_marks"]),
        max_json_depth=int(ext["max_json_depth"]),
        workflow_id=exp["workflow_id"],
        shape_extent=exp["shape_extent"],
        geometry=Geometry(
            None if side is None else float(side),
            None if size is None else (float(size[0]), float(size[1])),
            table,
        ),
        max_body_bytes=int(serve["max_body_bytes"]),
        calibration=CalibrationSettings(**dict(cfg["calibration"])),
        gold=load_gold(cfg),
        config=cfg,
    )


def load_gold(cfg: dict) -> Gold | None:
    """The config's ``gold:`` section as the service reads it: a CSV / Parquet table of
    expert marks or counts (as for ``clumpscout aggregate --gold``), moved by the declared
    ``gold.frame``; ``experts`` (the expert-classification export of a workflow run),
    ``none`` or null: no gold standard (the default map). ``cfg`` is checked and completed
    with the schema's defaults (:func:`check`): its ``gold:`` section is written out in full."""
    section = cfg["gold"]
    table = section["table"]
    if table is None or str(table).lower() in ("none", "experts"):
        return None
    return read_gold(table, frame=dict(section["frame"]), on_implausible=section["on_implausible"])


def load(path=None, subjects=None, overrides: dict | None = None) -> Settings:
    """:class:`Settings` from a config file (None: the defaults) with ``overrides``
    (section -> keys) applied before the check."""
    import yaml

    cfg: dict = {}
    if path is not None:
        try:
            cfg = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read config ({exc})", path=path) from None
    for section, keys in (overrides or {}).items():
        cfg.setdefault(section, {}).update(keys)
    return from_config(check(cfg, path), subjects, path)


def check(cfg: dict, path=None) -> dict:
    """The config checked against the schema and completed with its defaults (in place);
    its input paths are not looked at: the service reads none of the workflow's inputs."""
    found = _config.problems(cfg)
    if found:
        raise _config.ConfigError(found, path=path)
    return cfg


def refit_point_after(last: int, every: int, growth: float) -> int:
    """The refit point that follows ``last`` (0: the first), as
    :func:`clumpscout.model.live.refit_points` steps: ``every`` more, or the factor
    ``1 + growth`` once that is more."""
    return max(last + int(every), int(math.ceil(last * (1.0 + growth))))
