"""The project's gold standard: expert marks or expert counts on some subjects.

A gold standard tells the calibration (:mod:`clumpscout.model.calibration`) what the project
counts as real (docs/decisions.md#gold-standard). One table, CSV or Parquet, in one of two
forms:

* **expert marks**: ``subject_id`` plus either ``x, y`` (points) or ``x1, y1, x2, y2``
  (boxes), one row per object the experts count (subject pixels, as the volunteers'
  clicks). A subject the experts examined and found empty has one row with empty
  coordinates. Only the subjects in the table are gold subjects.
* **expert counts**: ``subject_id, count`` (a whole number ≥ 0 per subject, one row each).

:func:`read_gold` validates the table (an :class:`~clumpscout.errors.InputError` names the
file, the row and the problem) and returns a :class:`Gold`. :func:`gold_from_expert_clicks`
builds the marks form from the clicks of several experts (the expert-classification export
that the expert comparison reads): per subject, the experts' clicks are grouped by single
linkage at half the box side and a group is an object when enough of the subject's
experts marked it; by default any expert (docs/decisions.md#gold-from-experts).

**Frame.** Experts' marks are often made in another pixel frame than the volunteers' (y
measured upwards, another image size, x and y swapped). A frame the user declares
(:class:`GoldFrame`, config ``gold.frame``) is applied when the table is read; none is ever
guessed and applied silently: :mod:`clumpscout.model.gold_check` tries the common mistakes
and names the likely one (docs/decisions.md#gold-checks). The gold also carries what to do
when those checks find it implausible (``on_implausible``: ``stop`` or ``warn``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout import config
from clumpscout.config import add_setting
from clumpscout.errors import InputError
from clumpscout.io import write_csv
from clumpscout.logs import timed

#: the defaults of the config's ``gold.frame`` and ``gold.on_implausible`` (config.schema.yaml)
_FRAME = config.defaults("gold")["frame"]
IMPLAUSIBLE_DEFAULT = config.default("gold.on_implausible")

log = logging.getLogger(__name__)

POINT_COLUMNS = ("x", "y")
BOX_COLUMNS = ("x1", "y1", "x2", "y2")
#: what a run does with a gold standard its checks find implausible (config gold.on_implausible)
ON_IMPLAUSIBLE = tuple(config.choices("gold")["on_implausible"])  # ("stop", "warn")


@dataclass(frozen=True)
class GoldFrame:
    """A coordinate transform of expert marks into the volunteers' subject pixels, in this
    order: x and y swapped (``swap_xy``), y flipped about ``flip_y`` (y → flip_y − y, e.g.
    the image height for marks measured upwards), scaled by ``scale`` about the origin, then
    shifted by (``offset_x``, ``offset_y``) (config ``gold.frame``, whose defaults these are)."""

    swap_xy: bool = _FRAME["swap_xy"]
    flip_y: float | None = _FRAME["flip_y"]
    scale: float = _FRAME["scale"]
    offset_x: float = _FRAME["offset_x"]
    offset_y: float = _FRAME["offset_y"]

    @classmethod
    def from_dict(cls, d: dict | None) -> GoldFrame:
        d = {**_FRAME, **dict(d or {})}
        flip = d["flip_y"]
        return cls(
            swap_xy=bool(d["swap_xy"]),
            flip_y=None if flip is None else float(flip),
            scale=float(d["scale"]),
            offset_x=float(d["offset_x"]),
            offset_y=float(d["offset_y"]),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def identity(self) -> bool:
        return self == GoldFrame()

    def describe(self) -> str:
        """The transform in words, e.g. ``y → 400 − y`` or ``x, y → 2x, 2y`` (``as given``)."""
        parts = []
        if self.swap_xy:
            parts.append("x ↔ y")
        if self.flip_y is not None:
            parts.append(f"y → {self.flip_y:g} − y")
        if self.scale != 1.0:
            parts.append(f"x, y → {self.scale:.3g}x, {self.scale:.3g}y")
        if self.offset_x or self.offset_y:
            parts.append(f"x, y → x {self.offset_x:+.3g}, y {self.offset_y:+.3g}")
        return ", then ".join(parts) if parts else "as given"

    def as_setting(self) -> str:
        """The config setting that declares this frame, e.g. ``gold.frame: {flip_y: 400}``."""
        d = GoldFrame().to_dict()
        keys = [f"{k}: {str(v).lower() if isinstance(v, bool) else f'{v:g}'}"
                for k, v in self.to_dict().items() if v != d[k]]  # fmt: skip
        return "gold.frame: {" + ", ".join(keys) + "}"

    def apply(self, marks: pd.DataFrame, geometry: str = "point") -> pd.DataFrame:
        """``marks`` (subject_id and x, y, or x1, y1, x2, y2 with their centre x, y) in the
        new frame, a copy; boxes stay boxes (x1 ≤ x2, y1 ≤ y2)."""
        out = marks.copy()
        if geometry == "box":
            x1, y1, x2, y2 = (out[c].to_numpy(dtype=float) for c in BOX_COLUMNS)
            if self.swap_xy:
                x1, y1, x2, y2 = y1, x1, y2, x2
            if self.flip_y is not None:
                y1, y2 = self.flip_y - y2, self.flip_y - y1
            x1, y1, x2, y2 = (self.scale * v for v in (x1, y1, x2, y2))
            x1, x2 = x1 + self.offset_x, x2 + self.offset_x
            y1, y2 = y1 + self.offset_y, y2 + self.offset_y
            for c, v in zip(BOX_COLUMNS, (x1, y1, x2, y2), strict=True):
                out[c] = v
            if "x" in out.columns:
                out["x"], out["y"] = 0.5 * (x1 + x2), 0.5 * (y1 + y2)
            return out
        x, y = out["x"].to_numpy(dtype=float), out["y"].to_numpy(dtype=float)
        if self.swap_xy:
            x, y = y, x
        if self.flip_y is not None:
            y = self.flip_y - y
        out["x"] = self.scale * x + self.offset_x
        out["y"] = self.scale * y + self.offset_y
        return out


@dataclass(frozen=True)
class Gold:
    """A validated gold standard.

    ``kind``: ``marks`` or ``counts``; ``geometry``: ``point`` or ``box`` (marks only);
    ``subjects``: the gold subject ids (sorted, unique); ``counts``: the experts' count per
    gold subject (a Series indexed by subject_id, in ``subjects`` order); ``marks``: one row
    per expert object (subject_id and x, y or x1, y1, x2, y2; empty for counts); ``frame``:
    the declared frame the marks were moved by when read (None: as in the table);
    ``on_implausible``: what a run does when the gold checks find it implausible
    (:data:`ON_IMPLAUSIBLE`, docs/decisions.md#gold-checks).
    """

    kind: str
    geometry: str | None
    subjects: np.ndarray
    counts: pd.Series
    marks: pd.DataFrame
    path: str | None = None
    frame: GoldFrame | None = None
    on_implausible: str = IMPLAUSIBLE_DEFAULT

    def restrict(self, subjects) -> Gold:
        """The gold standard on the given subjects only (cross-fitting folds)."""
        keep = np.intersect1d(self.subjects, np.asarray(subjects))
        marks = self.marks.loc[self.marks["subject_id"].isin(keep)].reset_index(drop=True)
        return replace(self, subjects=keep, counts=self.counts.loc[keep], marks=marks)

    def with_marks(self, marks: pd.DataFrame) -> Gold:
        """The same gold standard with other marks (same subjects; the counts follow)."""
        counts = marks["subject_id"].value_counts().reindex(self.subjects, fill_value=0)
        marks = marks.sort_values(["subject_id", "x", "y"], kind="stable").reset_index(drop=True)
        return replace(self, marks=marks, counts=counts.astype(np.int64))

    def summary(self) -> dict:
        return {
            "path": self.path,
            "kind": self.kind,
            "geometry": self.geometry,
            "subjects": int(len(self.subjects)),
            "objects": int(self.counts.sum()),
            "empty_subjects": int((self.counts == 0).sum()),
        }


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV or Parquet table (by suffix); a missing or unreadable file is an InputError."""
    p = Path(path)
    if not p.is_file():
        raise InputError("gold standard file not found", path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except (OSError, ValueError) as e:  # pandas' parser errors are ValueErrors
        raise InputError(f"cannot read the gold standard table: {e}", path) from e


def read_gold(
    path: str | Path,
    frame: GoldFrame | dict | None = None,
    on_implausible: str = IMPLAUSIBLE_DEFAULT,
) -> Gold:
    """Read and validate a gold-standard table (module docstring); expert marks are moved by
    the declared ``frame`` (:class:`GoldFrame` or its config mapping)."""
    return gold_from_table(read_table(path), path, frame, on_implausible)


def _row_of(df: pd.DataFrame, pos: int, path) -> int:
    """The row number a user sees: CSV data rows from 1, Parquet positions from 0."""
    csv = path is not None and Path(str(path)).suffix.lower() not in (".parquet", ".pq")
    return int(pos) + (1 if csv else 0)


def _numeric(df: pd.DataFrame, col: str, path) -> np.ndarray:
    """The column as float; a value that is not a number (empty is allowed) names its row."""
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(np.isnan(v) & df[col].notna().to_numpy())
    bad = [b for b in bad if str(df[col].iloc[b]).strip() != ""]
    if bad:
        b = bad[0]
        raise InputError(
            f"column {col!r}: {df[col].iloc[b]!r} is not a number", path, _row_of(df, b, path)
        )
    inf = np.flatnonzero(np.isinf(v))
    if len(inf):
        raise InputError(f"column {col!r} is infinite", path, _row_of(df, inf[0], path))
    return v


def gold_from_table(
    df: pd.DataFrame,
    path=None,
    frame: GoldFrame | dict | None = None,
    on_implausible: str = IMPLAUSIBLE_DEFAULT,
) -> Gold:
    """Validate a gold-standard table in memory (``path`` names it in errors), move expert
    marks by the declared ``frame`` and keep ``on_implausible`` (:class:`Gold`)."""
    if on_implausible not in ON_IMPLAUSIBLE:
        raise InputError(
            f"gold.on_implausible must be one of {', '.join(ON_IMPLAUSIBLE)}, not {on_implausible!r}",
            path,
        )
    gold = _validated(df, path)
    frame = frame if isinstance(frame, GoldFrame) or frame is None else GoldFrame.from_dict(frame)
    if frame is not None and not frame.identity:
        if gold.kind != "marks":
            raise InputError(
                f"gold.frame ({frame.describe()}) is declared but the gold standard holds "
                "counts, not positions",
                path,
            )
        log.info(
            "gold standard: the experts' marks moved by the declared frame %s", frame.describe()
        )
        gold = replace(gold.with_marks(frame.apply(gold.marks, gold.geometry)), frame=frame)
    return replace(gold, on_implausible=on_implausible)


def _validated(df: pd.DataFrame, path) -> Gold:
    """The table as a :class:`Gold` (module docstring), or an InputError naming the row."""
    if "subject_id" not in df.columns:
        raise InputError(
            "the gold standard needs a subject_id column, with x, y (points), "
            "x1, y1, x2, y2 (boxes) or count",
            path,
        )
    if df["subject_id"].isna().any():
        pos = int(np.flatnonzero(df["subject_id"].isna().to_numpy())[0])
        raise InputError("subject_id is empty", path, _row_of(df, pos, path))
    has_box = all(c in df.columns for c in BOX_COLUMNS)
    has_point = all(c in df.columns for c in POINT_COLUMNS)
    if "count" in df.columns and not (has_box or has_point):
        return _counts_gold(df, path)
    if not (has_box or has_point):
        raise InputError(
            "the gold standard has neither x, y (points), x1, y1, x2, y2 (boxes) nor count "
            f"columns (it has {', '.join(map(str, df.columns))})",
            path,
        )
    return _marks_gold(df, "box" if has_box else "point", path)


def _counts_gold(df: pd.DataFrame, path) -> Gold:
    c = _numeric(df, "count", path)
    bad = np.flatnonzero(~np.isfinite(c) | (c < 0) | (c != np.round(c)))
    if len(bad):
        raise InputError(
            f"count must be a whole number >= 0, not {df['count'].iloc[bad[0]]!r}",
            path,
            _row_of(df, bad[0], path),
        )
    dup = df["subject_id"].duplicated().to_numpy()
    if dup.any():
        pos = int(np.flatnonzero(dup)[0])
        raise InputError(
            f"subject {df['subject_id'].iloc[pos]!r} has a second count row",
            path,
            _row_of(df, pos, path),
        )
    counts = pd.Series(c.astype(np.int64), index=df["subject_id"].to_numpy()).sort_index()
    empty_marks = pd.DataFrame({"subject_id": pd.Series(dtype=counts.index.dtype)})
    return Gold(
        "counts",
        None,
        counts.index.to_numpy(),
        counts,
        empty_marks,
        None if path is None else str(path),
    )


def _marks_gold(df: pd.DataFrame, geometry: str, path) -> Gold:
    cols = BOX_COLUMNS if geometry == "box" else POINT_COLUMNS
    vals = np.column_stack([_numeric(df, c, path) for c in cols])
    nan = np.isnan(vals)
    partial = np.flatnonzero(nan.any(axis=1) & ~nan.all(axis=1))
    if len(partial):
        raise InputError(
            f"some of {', '.join(cols)} are empty (all empty: a subject the experts found empty)",
            path,
            _row_of(df, partial[0], path),
        )
    if geometry == "box":
        inverted = np.flatnonzero(
            ~nan[:, 0] & ((vals[:, 2] < vals[:, 0]) | (vals[:, 3] < vals[:, 1]))
        )
        if len(inverted):
            raise InputError("box with x2 < x1 or y2 < y1", path, _row_of(df, inverted[0], path))
    empty_row = nan.all(axis=1)
    sid = df["subject_id"].to_numpy()
    has_obj = pd.Series(~empty_row).groupby(sid).any()
    conflict = np.flatnonzero(empty_row & has_obj.reindex(sid).to_numpy())
    if len(conflict):
        raise InputError(
            f"subject {sid[conflict[0]]!r} has an empty row (no objects) and marked objects",
            path,
            _row_of(df, conflict[0], path),
        )
    marks = pd.DataFrame({"subject_id": sid[~empty_row]})
    for j, c in enumerate(cols):
        marks[c] = vals[~empty_row, j]
    if geometry == "box":
        marks["x"] = 0.5 * (marks["x1"] + marks["x2"])
        marks["y"] = 0.5 * (marks["y1"] + marks["y2"])
    subjects = np.unique(sid)
    counts = marks["subject_id"].value_counts().reindex(subjects, fill_value=0).astype(np.int64)
    marks = marks.sort_values(["subject_id", "x", "y"], kind="stable").reset_index(drop=True)
    return Gold("marks", geometry, subjects, counts, marks, None if path is None else str(path))


# --------------------------------------------------------------- gold from expert clicks
def _single_linkage(xy: np.ndarray, cut: float) -> np.ndarray:
    """Connected components of the points closer than ``cut`` (scipy's single linkage)."""
    if len(xy) == 1:
        return np.zeros(1, np.int64)
    from scipy.cluster.hierarchy import fcluster, linkage

    return fcluster(linkage(xy, method="single"), t=cut, criterion="distance").astype(np.int64)


def _split_by_expert(xy: np.ndarray, cls: np.ndarray, seed: int = 0) -> np.ndarray:
    """Sub-groups of one group of clicks so that no expert has two clicks in one: an expert
    marks an object once, so k clicks of one expert in a group are k objects (k-means with
    k the most clicks of one expert, scikit-learn, seeded)."""
    k = int(pd.Series(cls).value_counts().max())
    if k <= 1:
        return np.zeros(len(xy), np.int64)
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(xy).astype(np.int64)


def gold_from_expert_clicks(
    clicks: pd.DataFrame,
    box_side: pd.Series | float,
    min_fraction: float = config.default("calibration.expert_majority"),
) -> pd.DataFrame:
    """The marks table (subject_id, x, y) of the objects the experts marked.

    ``clicks``: the experts' clicks table (subject_id, classification_id, x, y; a row with
    NaN coordinates is an expert's empty classification). Per subject, clicks closer than
    half the subject's box side (``box_side``: a Series indexed by subject_id, or one
    number) are grouped by single linkage, and a group holding several clicks of one expert
    is split so that each expert has at most one click per object (:func:`_split_by_expert`).
    A group is an object when more than ``min_fraction`` of the subject's expert
    classifications put a click in it (0, the default: any expert, as the paper's expert
    comparison counts a label true when it holds a click of any expert), placed at the mean
    of its clicks. A subject whose experts marked no such group gets one row with empty
    coordinates (docs/decisions.md#gold-from-experts).
    """
    rows = []
    for sid, g in clicks.groupby("subject_id", sort=True):
        n_experts = g["classification_id"].nunique()
        pts = g.loc[g["x"].notna() & g["y"].notna()]
        side = float(box_side.get(sid, np.nan)) if isinstance(box_side, pd.Series) else box_side
        found = False
        if len(pts) and np.isfinite(side):
            xy = pts[["x", "y"]].to_numpy(dtype=float)
            cls = pts["classification_id"].to_numpy()
            lab = _single_linkage(xy, 0.5 * side)
            for c in np.unique(lab):
                m = np.flatnonzero(lab == c)
                sub = _split_by_expert(xy[m], cls[m])
                for k in np.unique(sub):
                    mk = m[sub == k]
                    if len(np.unique(cls[mk])) > min_fraction * n_experts:
                        rows.append((sid, xy[mk, 0].mean(), xy[mk, 1].mean()))
                        found = True
        if not found:
            rows.append((sid, np.nan, np.nan))
    return pd.DataFrame(rows, columns=["subject_id", "x", "y"])


def box_sides(boxes: pd.DataFrame) -> pd.Series:
    """Per subject, the median side of its volunteers' boxes (subject px), indexed by
    subject_id; a subject without boxes gets the median over all subjects."""
    has = boxes["x1"].notna()
    side = np.sqrt(
        (boxes.loc[has, "x2"] - boxes.loc[has, "x1"])
        * (boxes.loc[has, "y2"] - boxes.loc[has, "y1"])
    )
    per = side.groupby(boxes.loc[has, "subject_id"]).median()
    subjects = np.unique(boxes["subject_id"].to_numpy())
    fill = float(per.median()) if len(per) else np.nan
    return per.reindex(subjects, fill_value=fill)


def build_gold(
    expert_clicks: pd.DataFrame, boxes: pd.DataFrame, min_fraction: float
) -> pd.DataFrame:
    """The marks table of the experts' clicks, grouped at half the volunteers' box side."""
    return gold_from_expert_clicks(expert_clicks, box_sides(boxes), min_fraction)


# ------------------------------------------- the gold options of commands that take --gold
def add_gold_options(parser, what: str) -> None:
    """``--gold FILE`` (``what``: what the command does with it) and how the table is read
    and checked (docs/decisions.md#gold-checks): ``--gold-on-implausible`` and one option
    per key of the config's ``gold.frame`` (``--gold-swap-xy``, ``--gold-flip-y H``,
    ``--gold-scale S``, ...), built from the config schema. Unset, the ``--config`` file's
    ``gold:`` section applies, else the schema's defaults (:func:`read_gold_option`)."""
    parser.add_argument(
        "--gold",
        default=None,
        metavar="FILE",
        help="the project's gold standard (CSV or Parquet): expert marks (subject_id with x, y "
        "or x1, y1, x2, y2; a row with empty coordinates for a subject found empty) or expert "
        f"counts (subject_id, count); {what}; checked against the volunteers first "
        "(docs/decisions.md#gold-checks)",
    )
    add_setting(parser, "gold.on_implausible", "--gold-on-implausible", from_config=True)
    for key in _FRAME:
        add_setting(
            parser, f"gold.frame.{key}", f"--gold-{key.replace('_', '-')}", from_config=True
        )


def read_gold_option(args, cfg: dict | None = None) -> Gold | None:
    """The ``--gold`` table (None without one) in its frame, with what to do when it is
    implausible: the command-line options (:func:`add_gold_options`) over the config's
    ``gold:`` section (``cfg``, a config mapping), else the schema's defaults."""
    if not getattr(args, "gold", None):
        return None
    config.resolve(args, cfg)
    frame = {key: getattr(args, f"gold_{key}") for key in _FRAME}
    return read_gold(args.gold, frame=frame, on_implausible=args.gold_on_implausible)


# ----------------------------------------------------------------------- CLI
def add_arguments(parser) -> None:
    parser.add_argument(
        "--expert-clicks", required=True, help="clicks table of the experts (clumpscout extract)"
    )
    parser.add_argument(
        "--boxes", required=True, help="the volunteers' boxes (their sides set the grouping scale)"
    )
    parser.add_argument("--out", required=True, help="gold marks table (CSV)")
    add_setting(parser, "calibration.expert_majority", "--majority")


def run(args) -> int:
    with timed("building the gold standard from the experts' clicks"):
        clicks = pd.read_parquet(args.expert_clicks)
        boxes = pd.read_parquet(args.boxes, columns=["subject_id", "x1", "y1", "x2", "y2"])
        gold = build_gold(clicks, boxes, args.majority)
    n_sub = gold["subject_id"].nunique()
    log.info("gold standard: %d objects on %d subjects", int(gold["x"].notna().sum()), n_sub)
    write_csv(gold, args.out)
    return 0
