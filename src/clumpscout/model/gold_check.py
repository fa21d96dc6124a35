"""Is the gold standard plausible? The experts' marks checked against the volunteers before
the calibration trusts them (docs/decisions.md#gold-checks).

A gold standard decides what every p_fp means (:mod:`clumpscout.model.calibration`), and it
is the input most likely to be wrong: marks in another pixel frame (y measured upwards, a
scaled image, x and y swapped), the wrong subject ids, experts who marked only some of the
objects. The calibration learns a broken gold faithfully ("nothing is real"), scores itself
against the same gold as well calibrated, and the catalogue empties without a word. So,
once per run and before the map is fitted, :func:`gold_agreement` measures on the gold
subjects that have classifications:

* **strong labels matched**: the labels nearly every viewer marked (``n_marks`` ≥ a share
  of the subject's viewers, and at least :data:`MIN_STRONG_MARKS` marks: a thing is
  there), and the share of them matched one-to-one to an expert object of their subject
  (the object's centre inside the label's box, as the point gold matches,
  docs/decisions.md#gold-match). The share is the first of :data:`STRONG_SHARES` (90 %,
  then 80 %, 70 %) that gives :data:`MIN_STRONG` labels: the strongest evidence the
  project has (in a counting project objects are marked by about half their viewers);
* **expert objects unmarked**: the share of expert objects whose centre lies inside no
  label box of their subject: where no volunteers' marks were clustered at all.

For expert counts (no positions) the two figures are their bounds from the counts: at most
``min(strong labels, count)`` strong labels of a subject can be matched, at least
``count − labels`` of its expert objects are unmarked.

**Verdict** (the bounds and the evidence they rest on: docs/decisions.md#gold-checks):

* ``implausible``: expert objects unmarked ≥ :data:`MAX_UNMARKED`, unless the strong
  labels still match (≥ :data:`MIN_MATCHED`: experts who see more than the volunteers);
  the run stops (:func:`apply_policy` raises :class:`~clumpscout.errors.InputError`), or
  warns with ``on_implausible: warn``;
* ``incomplete``: strong labels matched < :data:`MIN_MATCHED`: the experts left many
  objects nearly every volunteer marked unmarked. A project may count only some of what
  volunteers mark, and only its gold can say so, so this warns and the run goes on;
* ``not judged``: too few expert objects (< :data:`MIN_EXPERTS`) and strong labels
  (< :data:`MIN_STRONG`) to say; ``ok`` otherwise.

A warning is also given when most gold subject ids (> :data:`MAX_ABSENT`) have no
classifications at all.

**Frames tried** (expert marks only): x and y swapped, y flipped about the best-fitting
height (y → H − y), scaled by ×2, ×0.5 and the best-fitting factor about the origin,
shifted by the best-fitting offset (each best fit is the mode of the label-expert pairs'
votes). A frame is named as the likely cause when the gold fails as given and passes in that
frame, with at least :data:`NAMED_GAIN` more strong labels matched or fewer expert objects
unmarked. It is never applied: the user declares a frame (config ``gold.frame``,
:class:`~clumpscout.data.gold.GoldFrame`) or fixes the table.

Public API (a live service calls it when it loads a gold standard)::

    agreement = gold_agreement(labels, gold, n_viewers)   # labels: subject_id, x1..y2, n_marks
    warnings = apply_policy(agreement, gold.on_implausible)  # raises InputError on "stop"
    use, warnings = live_policy(agreement, gold.on_implausible)  # a live service: never raises
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from clumpscout.data.gold import IMPLAUSIBLE_DEFAULT, Gold, GoldFrame
from clumpscout.errors import InputError
from clumpscout.logs import WARNING_PREFIX
from clumpscout.metrics.matching import match_one_to_one

log = logging.getLogger(__name__)

#: a label is strong when at least this share of its subject's viewers marked it (the first
#: share that gives MIN_STRONG labels on the gold subjects, else the last) ...
STRONG_SHARES = (0.9, 0.8, 0.7)
#: ... and at least this many (3 of 3 viewers is not yet "nearly everyone")
MIN_STRONG_MARKS = 5
#: implausible when at least this share of expert objects lies where no volunteer marked
MAX_UNMARKED = 0.5
#: incomplete when fewer than this share of the strong labels match an expert object
MIN_MATCHED = 0.65
#: fewest expert objects, and fewest strong labels, on which the figures are judged
MIN_EXPERTS = 10
MIN_STRONG = 30
#: a warning when more than this share of the gold subjects has no classifications
MAX_ABSENT = 0.5
#: a frame is named when it gains at least this much on either figure
NAMED_GAIN = 0.25
#: labels with at least this share of viewers' marks vote for the best-fitting frames
FIT_SHARE = 0.5
#: subject ids quoted in a warning (report.json keeps up to 10)
_N_EXAMPLES = 10


@dataclass(frozen=True)
class Agreement:
    """The two figures of the gold, as given or in one frame (module docstring)."""

    name: str  # "as given", "x and y swapped", "y flipped", ...
    frame: GoldFrame
    strong: int  # strong labels on the gold subjects checked
    strong_matched: int
    experts: int  # expert objects on the gold subjects checked
    experts_unmarked: int

    @property
    def matched_share(self) -> float:
        return self.strong_matched / self.strong if self.strong else float("nan")

    @property
    def unmarked_share(self) -> float:
        return self.experts_unmarked / self.experts if self.experts else float("nan")

    @property
    def judged_matched(self) -> bool:
        return self.strong >= MIN_STRONG

    @property
    def judged_unmarked(self) -> bool:
        return self.experts >= MIN_EXPERTS

    @property
    def implausible(self) -> bool:
        """Expert objects mostly where nobody marked, and the strong labels do not match."""
        if not self.judged_unmarked or self.unmarked_share < MAX_UNMARKED:
            return False
        return not (self.judged_matched and self.matched_share >= MIN_MATCHED)

    @property
    def incomplete(self) -> bool:
        return self.judged_matched and self.matched_share < MIN_MATCHED

    def to_dict(self) -> dict:
        return {
            "frame": self.name,
            "transform": self.frame.describe(),
            "strong_labels": self.strong,
            "strong_matched": self.strong_matched,
            "strong_matched_share": _num(self.matched_share),
            "expert_objects": self.experts,
            "expert_unmarked": self.experts_unmarked,
            "expert_unmarked_share": _num(self.unmarked_share),
        }


@dataclass(frozen=True)
class GoldAgreement:
    """What :func:`gold_agreement` found: the figures as given and in every frame tried,
    the verdict (``ok``, ``implausible``, ``incomplete``, ``not judged``), the frame named
    as the likely cause (or None), example subject ids and the warnings' text."""

    path: str | None
    kind: str
    strong_share: float  # the share of viewers' marks that makes a label strong here
    gold_subjects: int
    subjects_checked: int
    subjects_absent: int
    given: Agreement
    frames: tuple[Agreement, ...]
    verdict: str
    likely: Agreement | None
    examples: tuple
    messages: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.messages

    def summary(self) -> str:
        """One line: the figures as given and the verdict (the log's)."""
        g = self.given
        return (
            f"gold check ({self.kind}): {_pct(g.matched_share)} of {g.strong} strong labels "
            f"match an expert object, {_pct(g.unmarked_share)} of {g.experts} expert objects "
            f"unmarked, on {self.subjects_checked} of {self.gold_subjects} gold subjects: "
            f"{self.verdict}"
        )

    def table(self) -> pd.DataFrame:
        """One row per frame (as given first): the figures, and which one is named."""
        rows = [a.to_dict() | {"likely": a is self.likely} for a in (self.given, *self.frames)]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "kind": self.kind,
            "strong_share": self.strong_share,
            "gold_subjects": self.gold_subjects,
            "subjects_checked": self.subjects_checked,
            "subjects_absent": self.subjects_absent,
            "verdict": self.verdict,
            "likely_frame": None if self.likely is None else self.likely.to_dict(),
            "given": self.given.to_dict(),
            "frames": [a.to_dict() for a in self.frames],
            "examples": [_num(s) for s in self.examples],
            "bounds": {
                "strong_shares": list(STRONG_SHARES),
                "min_strong_marks": MIN_STRONG_MARKS,
                "max_unmarked": MAX_UNMARKED,
                "min_matched": MIN_MATCHED,
                "min_experts": MIN_EXPERTS,
                "min_strong": MIN_STRONG,
                "max_absent": MAX_ABSENT,
            },
            "messages": list(self.messages),
        }


def _num(v):
    """numpy scalar -> Python scalar, NaN -> None (JSON)."""
    v = v.item() if isinstance(v, np.generic) else v
    return None if isinstance(v, float) and not np.isfinite(v) else v


def _pct(v: float) -> str:
    return f"{v:.0%}" if np.isfinite(v) else "–"


# ------------------------------------------------------------------ the figures
def mark_share(labels: pd.DataFrame, n_viewers: pd.Series) -> np.ndarray:
    """Per label: its marks / its subject's viewers (``n_viewers``: classifications per
    subject_id)."""
    views = n_viewers.reindex(labels["subject_id"].to_numpy()).to_numpy(dtype=float)
    return labels["n_marks"].to_numpy(dtype=float) / np.maximum(views, 1.0)


def strong_mask(labels: pd.DataFrame, n_viewers: pd.Series) -> tuple[np.ndarray, float]:
    """(per label: strong, the share used): marked by at least :data:`MIN_STRONG_MARKS`
    volunteers and the first share of the viewers in :data:`STRONG_SHARES` that makes
    :data:`MIN_STRONG` labels of ``labels`` strong (else the last)."""
    share = mark_share(labels, n_viewers)
    enough = labels["n_marks"].to_numpy(dtype=float) >= MIN_STRONG_MARKS
    for cut in STRONG_SHARES:
        strong = enough & (share >= cut - 1e-9)
        if strong.sum() >= MIN_STRONG:
            break
    return strong, cut


def _inside_any(points: pd.DataFrame, labels: pd.DataFrame) -> np.ndarray:
    """Per point (subject_id, x, y): whether it lies inside some label box of its subject."""
    if not len(points):
        return np.zeros(0, bool)
    pts = points[["subject_id", "x", "y"]].reset_index(drop=True)
    pts["_row"] = np.arange(len(pts))
    pairs = pts.merge(labels[["subject_id", "x1", "y1", "x2", "y2"]], on="subject_id")
    inside = (
        (pairs["x1"] <= pairs["x"])
        & (pairs["x"] <= pairs["x2"])
        & (pairs["y1"] <= pairs["y"])
        & (pairs["y"] <= pairs["y2"])
    )
    hit = np.zeros(len(pts), bool)
    hit[pairs.loc[inside, "_row"].to_numpy()] = True
    return hit


def _marks_agreement(
    name, frame, strong, labels, points
) -> tuple[Agreement, np.ndarray, np.ndarray]:
    """The figures for expert ``points`` (subject_id, x, y); also which strong labels
    matched and which points are unmarked."""
    matched, _ = match_one_to_one(strong, points, "point")
    unmarked = ~_inside_any(points, labels)
    a = Agreement(name, frame, len(strong), int(matched.sum()), len(points), int(unmarked.sum()))
    return a, matched, unmarked


def _counts_agreement(strong, labels, counts: pd.Series) -> Agreement:
    """The figures' bounds for expert counts (module docstring)."""
    sid = counts.index.to_numpy()
    n_strong = strong["subject_id"].value_counts().reindex(sid, fill_value=0).to_numpy()
    n_lab = labels["subject_id"].value_counts().reindex(sid, fill_value=0).to_numpy()
    c = counts.to_numpy(dtype=np.int64)
    matched = int(np.minimum(n_strong, c).sum())
    unmarked = int(np.maximum(c - n_lab, 0).sum())
    return Agreement("as given", GoldFrame(), int(n_strong.sum()), matched, int(c.sum()), unmarked)


# ------------------------------------------------------------------ frames
def _mode(values: np.ndarray, width: float) -> float | None:
    """The centre of the densest interval of ``width`` (histogram mode, refined by the
    median of the values within one bin of it); None without values."""
    values = values[np.isfinite(values)]
    if not len(values) or not width > 0:
        return None
    lo, hi = values.min(), values.max()
    width = max(width, (hi - lo) / 5000.0)
    edges = np.arange(lo, hi + width, width)
    if len(edges) < 2:
        return float(np.median(values))
    counts, edges = np.histogram(values, edges)
    k = int(np.argmax(counts))
    near = values[(values >= edges[k] - width) & (values <= edges[k + 1] + width)]
    return float(np.median(near))


def _pairs(fit_labels: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Every (label, expert object) pair of a subject: label centre xl, yl, object x, y."""
    lab = fit_labels[["subject_id", "x1", "y1", "x2", "y2"]].assign(
        xl=lambda d: 0.5 * (d["x1"] + d["x2"]), yl=lambda d: 0.5 * (d["y1"] + d["y2"])
    )
    return points[["subject_id", "x", "y"]].merge(lab[["subject_id", "xl", "yl"]], on="subject_id")


def candidate_frames(fit_labels: pd.DataFrame, points: pd.DataFrame) -> list[tuple[str, GoldFrame]]:
    """The frames tried (module docstring), named; the best-fitting ones from the votes of
    every (label of ``fit_labels``, expert object) pair of a subject, at the resolution of
    half the labels' median box side."""
    frames = [
        ("x and y swapped", GoldFrame(swap_xy=True)),
        ("scaled ×2", GoldFrame(scale=2.0)),
        ("scaled ×0.5", GoldFrame(scale=0.5)),
    ]
    pairs = _pairs(fit_labels, points)
    if not len(pairs):
        return frames
    side = np.median(
        0.5 * (fit_labels["x2"] - fit_labels["x1"] + fit_labels["y2"] - fit_labels["y1"])
    )
    half = 0.5 * float(side)
    dx = (pairs["xl"] - pairs["x"]).to_numpy()
    dy = (pairs["yl"] - pairs["y"]).to_numpy()
    # y flipped about H: yl = H − y for pairs in the same column
    same_x = np.abs(dx) <= half
    h = _mode((pairs["yl"] + pairs["y"]).to_numpy()[same_x], half)
    if h is not None:
        frames.insert(1, ("y flipped", GoldFrame(flip_y=float(np.round(h)))))
    # a uniform scale about the origin: xl / x = yl / y = s
    with np.errstate(divide="ignore", invalid="ignore"):
        lx = np.log(pairs["xl"].to_numpy() / pairs["x"].to_numpy())
        ly = np.log(pairs["yl"].to_numpy() / pairs["y"].to_numpy())
    agree = np.isfinite(lx) & np.isfinite(ly) & (np.abs(lx - ly) < 0.05)
    ls = _mode(0.5 * (lx + ly)[agree], 0.02)
    if ls is not None and min(abs(ls), abs(ls - np.log(2)), abs(ls + np.log(2))) > 0.05:
        frames.append(("scaled (best fit)", GoldFrame(scale=float(f"{np.exp(ls):.3g}"))))
    # an offset: the densest cell of the pairs' (dx, dy), one coordinate at a time
    ox = _mode(dx, half)
    if ox is not None:
        oy = _mode(dy[np.abs(dx - ox) <= half], half)
        if oy is not None and np.hypot(ox, oy) > half:
            off = GoldFrame(offset_x=float(np.round(ox, 1)), offset_y=float(np.round(oy, 1)))
            frames.append(("shifted (best fit)", off))
    return frames


def _likely(given: Agreement, tried: list[Agreement]) -> Agreement | None:
    """The frame that makes an implausible gold pass, far better than as given."""

    def gain(a: Agreement) -> float:
        g = given.unmarked_share - a.unmarked_share
        if a.judged_matched and given.judged_matched:
            g = max(g, a.matched_share - given.matched_share)
        return g

    ok = [a for a in tried if not a.implausible and not a.incomplete and gain(a) >= NAMED_GAIN]
    if not ok:
        return None
    return min(ok, key=lambda a: (a.unmarked_share, -np.nan_to_num(a.matched_share)))


# ------------------------------------------------------------------ the check
def viewers_of(subjects: pd.DataFrame) -> pd.Series:
    """Classifications per subject (``n_volunteers``) of the subjects a run aggregated
    (a finite ``n_fn``), indexed by subject_id: the subjects the check looks at."""
    s = subjects
    if "n_fn" in s.columns:
        s = s.loc[np.isfinite(s["n_fn"].to_numpy(dtype=float))]
    return pd.Series(s["n_volunteers"].to_numpy(), index=s["subject_id"].to_numpy())


def gold_agreement(
    labels: pd.DataFrame, gold: Gold, n_viewers: pd.Series | None = None
) -> GoldAgreement:
    """How well ``gold`` agrees with the volunteers (module docstring).

    ``labels``: a labels table (subject_id, x1, y1, x2, y2, n_marks), e.g. an aggregation's;
    ``n_viewers``: classifications per subject (a Series indexed by subject_id, empty
    classifications included) of the subjects that were aggregated; without it, the labels'
    own ``n_viewers`` column. Gold subjects outside it are counted as absent. Pure."""
    if n_viewers is None:
        if "n_viewers" not in labels.columns:
            raise ValueError("gold_agreement needs n_viewers or a labels column n_viewers")
        n_viewers = labels.groupby("subject_id")["n_viewers"].max()
    checked = np.intersect1d(gold.subjects, n_viewers.index.to_numpy())
    lab = labels.loc[labels["subject_id"].isin(checked)].reset_index(drop=True)
    is_strong, cut = strong_mask(lab, n_viewers)
    strong = lab.loc[is_strong].reset_index(drop=True)
    g = gold.restrict(checked)
    frames: list[Agreement] = []
    examples: tuple = ()
    if g.kind == "counts":
        given = _counts_agreement(strong, lab, g.counts)
    else:
        points = g.marks[["subject_id", "x", "y"]]
        given, matched, unmarked = _marks_agreement("as given", GoldFrame(), strong, lab, points)
        fit = lab.loc[is_strong | (mark_share(lab, n_viewers) >= FIT_SHARE)]
        for name, frame in candidate_frames(fit, points):
            frames.append(_marks_agreement(name, frame, strong, lab, frame.apply(points))[0])
        examples = _examples(given, strong, matched, points, unmarked)
    verdict = (
        "implausible"
        if given.implausible
        else "incomplete"
        if given.incomplete
        else "ok"
        if given.judged_unmarked or given.judged_matched
        else "not judged"
    )
    likely = _likely(given, frames) if verdict == "implausible" else None
    out = GoldAgreement(
        path=gold.path,
        kind=gold.kind,
        strong_share=float(cut),
        gold_subjects=int(len(gold.subjects)),
        subjects_checked=int(len(checked)),
        subjects_absent=int(len(gold.subjects) - len(checked)),
        given=given,
        frames=tuple(frames),
        verdict=verdict,
        likely=likely,
        examples=examples,
    )
    return _with_messages(out)


def _examples(given: Agreement, strong, matched, points, unmarked) -> tuple:
    """Gold subjects that show the problem: most unmarked expert objects (implausible), or
    most unmatched strong labels (incomplete)."""
    if given.implausible:
        sid = points["subject_id"].to_numpy()[unmarked]
    elif given.incomplete:
        sid = strong["subject_id"].to_numpy()[~matched]
    else:
        return ()
    counts = pd.Series(sid).value_counts()
    order = sorted(counts.index, key=lambda s: (-counts[s], s))
    return tuple(order[:_N_EXAMPLES])


def _name(path) -> str:
    return f"the gold standard ({path})" if path else "the gold standard"


def _cause(a: Agreement) -> str:
    f = a.frame
    if f.swap_xy:
        return "the gold's x and y look swapped"
    if f.flip_y is not None:
        return "the gold's y axis looks flipped (y measured upwards?)"
    if f.scale != 1.0:
        return f"the gold's positions look scaled by {1.0 / f.scale:.3g} (another image size?)"
    return f"the gold's positions look shifted by ({-f.offset_x:+.3g}, {-f.offset_y:+.3g}) px"


def _strong_text(a: GoldAgreement) -> str:
    g = a.given
    return (
        f"{_pct(g.matched_share)} of the {g.strong:,} labels nearly every viewer marked "
        f"(≥ {a.strong_share:.0%} of them) match an expert object"
    )


def _examples_text(a: GoldAgreement) -> str:
    return f" (e.g. subjects {', '.join(map(str, a.examples[:5]))})" if a.examples else ""


def _implausible_text(a: GoldAgreement) -> str:
    """What an implausible gold showed, after "the gold standard (path)"."""
    g = a.given
    text = (
        f"does not agree with the volunteers: {_pct(g.unmarked_share)} of its {g.experts:,} "
        f"expert objects on {a.subjects_checked:,} gold subjects fall where no volunteer "
        f"marked anything and {_strong_text(a)}{_examples_text(a)}"
    )
    if a.likely is not None:
        c = a.likely
        return text + (
            f"; {_cause(c)}: after {c.frame.describe()}, {_pct(c.matched_share)} of those "
            f"labels match and {_pct(c.unmarked_share)} of the expert objects are unmarked; "
            f"declare it ({c.frame.as_setting()}) or fix the table"
        )
    if a.kind == "marks":
        return text + (
            "; no frame tried (x/y swapped, y flipped, scaled, shifted) makes it agree: "
            "wrong subject ids or positions?"
        )
    return text


def _with_messages(a: GoldAgreement) -> GoldAgreement:
    msgs = []
    if a.verdict == "implausible":
        msgs.append(f"{_name(a.path)} {_implausible_text(a)}")
    elif a.verdict == "incomplete":
        msgs.append(
            f"{_name(a.path)}: the experts left many strongly marked objects unmarked: only "
            f"{_strong_text(a)} (at least {MIN_MATCHED:.0%} expected){_examples_text(a)}; "
            "p_fp will call the others false. If the project counts them, the gold standard "
            "is incomplete."
        )
    if a.gold_subjects and a.subjects_absent > MAX_ABSENT * a.gold_subjects:
        msgs.append(
            f"{_name(a.path)}: {a.subjects_absent:,} of its {a.gold_subjects:,} subjects have "
            "no classifications: wrong subject ids?"
        )
    return replace(a, messages=tuple(msgs))


def stop_message(agreement: GoldAgreement) -> str:
    """What an implausible gold showed, as the run that stops on it says it (after the
    file's name: :class:`~clumpscout.errors.InputError` puts it first)."""
    return (
        f"the gold standard {_implausible_text(agreement)}; set gold.on_implausible: warn to "
        "use it anyway"
    )


def apply_policy(agreement: GoldAgreement, on_implausible: str = IMPLAUSIBLE_DEFAULT) -> list[str]:
    """The warnings of ``agreement``; an implausible gold with ``on_implausible`` ``stop``
    raises :class:`~clumpscout.errors.InputError` (one line naming the file and what was
    found) instead."""
    if agreement.verdict == "implausible" and on_implausible == "stop":
        raise InputError(stop_message(agreement), agreement.path)
    return list(agreement.messages)


def live_policy(
    agreement: GoldAgreement, on_implausible: str = IMPLAUSIBLE_DEFAULT
) -> tuple[bool, list[str]]:
    """A live service's answer to ``agreement`` (docs/decisions.md#live-service), which
    cannot stop a project half-way: (use the label map learned from the gold, the
    warnings). An implausible gold with ``on_implausible`` ``stop`` is not used, and its
    warning (the batch check's words) says so; with ``warn`` it is used, with the warning;
    any other verdict as :func:`apply_policy`."""
    if agreement.verdict == "implausible" and on_implausible == "stop":
        first = (
            f"{_name(agreement.path)} {_implausible_text(agreement)}; not used: the service "
            "keeps the default label map (set gold.on_implausible: warn to use it anyway)"
        )
        return False, [first, *agreement.messages[1:]]
    return True, list(agreement.messages)


def check_gold(labels: pd.DataFrame, subjects: pd.DataFrame, gold: Gold) -> dict:
    """The check of one run (module docstring) on an aggregation's labels and subjects
    tables: logged, then :func:`apply_policy` with the gold's ``on_implausible``. Returns
    the report.json entry (:meth:`GoldAgreement.to_dict` with ``warnings``)."""
    a = gold_agreement(labels, gold, viewers_of(subjects))
    log.info("%s", a.summary())
    warnings = apply_policy(a, gold.on_implausible)
    for w in warnings:
        log.warning("%s %s", WARNING_PREFIX, w)
    return a.to_dict() | {"on_implausible": gold.on_implausible, "warnings": warnings}
