"""The aggregation engine: consensus labels from volunteers' boxes (paper §4-5, Appendix A).

Two models share the working batches, the EM loop, risk and retirement:

* ``model: generative`` (default): a well-posed generative likelihood
  (:mod:`clumpscout.model.generative`; docs/decisions.md#generative-model): false boxes are a
  Poisson count per classification thrown over the whole image, true boxes scatter around
  their object with a 2-D density, so that boxes of independent volunteers coinciding are
  strong evidence; population parameters are learned from the data (empirical Bayes).
* ``model: paper``: the paper's equations as published (eq. anno_model, eq. joint_model),
  kept for the reproduction, with the authors' effective EM stopping rule by default
  (``em_stop: paper_code``; docs/decisions.md#paper-model explains why this likelihood runs
  away to "every box is false" with a converged EM on noisy data).

``docs/model.md`` indexes where each equation of both models is implemented.

Python API (estimator style)::

    from clumpscout.model.aggregate import Aggregator, Params
    result = Aggregator(Params(), seed=1).fit(boxes_df)
    result.labels, result.subjects, result.volunteers, result.assignments
    result.write("out/")

Command line::

    clumpscout aggregate --boxes boxes.parquet --out DIR [--config FILE] [--seed N]

Input: the boxes table of ``clumpscout boxes``: one row per click
(x1, y1, x2, y2 in subject pixels), or one coordinate-less row (NaN) for a
classification that marked nothing. Coordinates are normalised by the image
size for every distance (docs/decisions.md#box-geometry, #jaccard-distance).

What happens (§5, Fig. agg_algo):

1. Subjects are sorted into pre-retired empty / eligible / waiting
   (:mod:`clumpscout.model.retirement`, docs/decisions.md#retirement) and eligible ones fill
   working batches (docs/decisions.md#batch-size).
2. Per batch, EM (docs/decisions.md#em-stopping): an initial clustering → parameters →
   clustering with the model's costs → … The paper's model starts from the initialisation
   costs (eq. init_open_cost, init_conn_cost, init_city_dummy_cost) and uses the nominal
   costs (eq. fac_cost, city_fac_cost, city_dummy_cost) afterwards; the generative model
   uses its own costs throughout (:func:`clumpscout.model.generative.facility_costs`). Each
   iteration is logged.
3. Label boxes: mean of the member boxes' vertices (footnote to §5.3;
   docs/decisions.md#label-box) or their inverse-variance (1/σ²_j) weighted mean.
4. Risks and retirement (:mod:`clumpscout.model.risk`, :mod:`clumpscout.model.retirement`).
5. Run health (:mod:`clumpscout.model.health`): a loud warning when the result looks collapsed.

Outputs (:meth:`AggregationResult.write`):

* ``labels.parquet``: one row per label clump of every subject that finished
  (retired or stale): subject_id, clump (0..k−1), x1, y1, x2, y2, x, y (subject
  px), p_fp, p_sigma, n_marks, frac_unusual, plus sigma2 (the location variance σ²_l),
  difficulty (σ²_il; NaN for the generative model) and p_weak (generative model: the
  probability that a real label is a weakly marked object, docs/decisions.md#weak-objects).
* ``subjects.parquet``: subject_id, n_volunteers (|V_i|, empty classifications
  included), n_clumps, n_fp, n_fn, n_sigma, risk, status, cycles, plus n_boxes,
  n_fn_init, n_fn_coincidence, batch (0-based index of its last cycle), expected_count
  (Σ (1 − p_fp) + N_fn (+ n_fn_weak): the expected number of real objects) and n_fn_weak.
  For the generative model n_fn_init holds the strong objects nobody marked,
  n_fn_coincidence the lone boxes' share of N_fn, n_fn_weak the weak objects nobody
  recognised (not in the risk). Status: ``retired``; ``retired_empty`` (pre-retired, never
  in a batch; n_fp = n_sigma = 0); ``stale`` (processed in max_cycles cycles without
  retiring, for experts; its last labels are reported); ``unretired`` (never entered a
  batch: fewer than min_volunteers_batch volunteers, or, with final_classifications
  false, fewer than min_volunteers_empty volunteers and no click; no labels, N's NaN).
  With all classifications available at once, a subject that does not retire stays in the
  working batch (re-initialised, with skills updated from the retired subjects) until it
  retires or goes stale; a cycle identical to the previous one (same subjects, no skill
  update) is not recomputed.
* ``volunteers.parquet``: volunteer, p_fp, p_fn, sigma2 (from the evidence of
  the retired subjects, plus stale ones if ``stale_updates_skills``), n_subjects
  (subjects classified in the input), n_boxes, n_tp, n_fp, n_fn (the trials that
  updated the skills; expected counts for the generative model), plus n_subjects_counted,
  n_classifications and, for the generative model, fp_rate (false boxes per
  classification).
* ``assignments.parquet``: every input row, in input order, plus ``cluster``
  (Int64: the clump index in its subject's label, −1 the dummy facility, <NA> for
  a row without a box or a subject that was never aggregated) and ``assignment``
  (clump | dummy | empty | not_aggregated).
* ``clumps.ecsv`` (the labels with units, hyper-parameters in ``meta``) and
  ``report.json`` (counts, per-cycle EM log-likelihoods, the model's population
  parameters, run-health diagnostics and ``warnings``, timings).

The annotation unit ``z_ij`` is one volunteer on one subject: two
classifications of one subject by one volunteer (a duplicate the export
reader normally removes) are merged and counted in the report. Clusters never
hold two boxes of one ``z_ij`` (docs/decisions.md#one-box-per-classification).

Determinism (docs/decisions.md#determinism): rows are put into a canonical order
(subject, volunteer, classification, coordinates) before anything else, volunteers are
coded by sorted name, and every random step takes a seed derived from ``seed``; the same
input in any row order with the same seed gives the same outputs.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numba
import numpy as np
import pandas as pd

from clumpscout import __version__
from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.io import atomic_path, write_json, write_parquet
from clumpscout.logs import timed
from clumpscout.model import facility_location as fl
from clumpscout.model import generative as gen
from clumpscout.model import health
from clumpscout.model.distance import jaccard_distance
from clumpscout.model.retirement import (
    RETIRED,
    RETIRED_EMPTY,
    STALE,
    STATUS_NAMES,
    UNRETIRED,
    SkillCache,
    fill_batch,
    pre_batch_status,
    retire_mask,
)
from clumpscout.model.risk import (
    clump_false_positive_prob,
    clump_location_variance,
    clump_sigma_prob,
    coincidence_scan,
    coincidence_term,
    constrained_masks,
    expected_missed_init,
    subject_risk,
)
from clumpscout.model.skills import (
    SkillCounts,
    Skills,
    batch_counts,
    combined_variance,
    log_likelihood,
    subject_difficulty,
    volunteer_skills,
)

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = (
    "classification_id",
    "subject_id",
    "volunteer",
    "x1",
    "y1",
    "x2",
    "y2",
    "image_width",
    "image_height",
)


#: defaults, bounds (name: (low, high, low open, high open)) and choices of the settings of
#: the ``aggregate:`` section, all read from the config schema (clumpscout.config), so
#: ``clumpscout aggregate --config`` accepts and rejects what the workflow does.
_DEFAULTS = _config.defaults("aggregate")
_BOUNDS = _config.bounds("aggregate")
_CHOICES = _config.choices("aggregate")


@dataclass(frozen=True)
class Params:
    """Hyper-parameters; field names are the keys of config.yaml's ``aggregate:`` section.

    Defaults: Table prior_param_values and Table subject_retirement_params
    (docs/decisions.md#hyper-parameters); the model choices are explained in
    docs/decisions.md (#generative-model, #em-stopping, #distance-likelihood, #label-box,
    #batch-size, #final-classifications, #weak-objects).
    """

    # Table prior_param_values
    p0_fp: float = _DEFAULTS["p0_fp"]
    p0_fn: float = _DEFAULTS["p0_fn"]
    n_beta_fp: float = _DEFAULTS["n_beta_fp"]
    n_beta_fn: float = _DEFAULTS["n_beta_fn"]
    sigma2_0_S: float = _DEFAULTS["sigma2_0_S"]
    n_chi_S: float = _DEFAULTS["n_chi_S"]
    sigma2_0_V: float = _DEFAULTS["sigma2_0_V"]
    n_chi_V: float = _DEFAULTS["n_chi_V"]
    f_V: float = _DEFAULTS["f_V"]
    d_max: float = _DEFAULTS["d_max"]
    # Table subject_retirement_params
    alpha_fp: float = _DEFAULTS["alpha_fp"]
    alpha_fn: float = _DEFAULTS["alpha_fn"]
    alpha_sigma: float = _DEFAULTS["alpha_sigma"]
    delta: float = _DEFAULTS["delta"]
    n_fp_max: float = _DEFAULTS["n_fp_max"]
    n_fn_max: float = _DEFAULTS["n_fn_max"]
    n_sigma_max: float = _DEFAULTS["n_sigma_max"]
    tau: float = _DEFAULTS["tau"]
    max_cycles: int = _DEFAULTS["max_cycles"]
    # which likelihood: ``generative`` (the well-posed default, clumpscout.model.generative) or
    # ``paper`` (eq. anno_model as published, kept for the reproduction)
    model: str = _DEFAULTS["model"]
    # EM stopping rule: converge (keep the best state) | paper_code (the authors' rule:
    # stop at the first iteration whose log-likelihood does not fall, keep the last state) |
    # auto (converge for generative, paper_code for paper)
    em_stop: str = _DEFAULTS["em_stop"]
    # model choices (decisions.md#distance-likelihood, #label-box, #em-stopping, #batch-size)
    distance_likelihood: str = _DEFAULTS["distance_likelihood"]
    merge: str = _DEFAULTS["merge"]
    min_cluster_size: int = _DEFAULTS["min_cluster_size"]
    em_max_iter: int = _DEFAULTS["em_max_iter"]
    em_rtol: float = _DEFAULTS["em_rtol"]
    min_batch_classifications: int = _DEFAULTS["min_batch_classifications"]
    stale_updates_skills: bool = _DEFAULTS["stale_updates_skills"]
    min_volunteers_batch: int = _DEFAULTS["min_volunteers_batch"]
    min_volunteers_empty: int = _DEFAULTS["min_volunteers_empty"]
    # see clumpscout.model.retirement (our decision)
    final_classifications: bool = _DEFAULTS["final_classifications"]
    # generative model: weight (pseudo-trials) of the table values above as hyper-priors of the
    # population means (p0_fn, p0_fp read as false boxes per classification, sigma2_0_V)
    eb_weight: float = _DEFAULTS["eb_weight"]
    # generative model: a second class of real objects that volunteers mark less often
    # (faint features, partly hidden animals), with its own rate and detection probability
    weak_objects: bool = _DEFAULTS["weak_objects"]

    def __post_init__(self):
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                options = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
                raise ValueError(f"{name} must be {options}, not {getattr(self, name)!r}")
        for name, (lo, hi, lo_open, hi_open) in _BOUNDS.items():
            v = getattr(self, name)
            bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo)
            if hi is not None:
                bad = bad or (v >= hi if hi_open else v > hi)
            if bad:
                interval = (
                    ("(" if lo_open else "[")
                    + f"{lo}, "
                    + (f"{hi}" + (")" if hi_open else "]") if hi is not None else "inf)")
                )
                raise ValueError(f"{name} = {v} is out of range: it must be in {interval}")

    @classmethod
    def from_dict(cls, d: dict | None, path=None) -> Params:
        """Params from a config ``aggregate:`` section; unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        # keys of the aggregate section that are run options, not hyper-parameters (per_tool)
        d = {k: v for k, v in dict(d or {}).items() if k in known or k not in _DEFAULTS}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise InputError(f"unknown aggregate setting(s): {', '.join(unknown)}", path=path)
        kw = {}
        for k, v in d.items():
            t = known[k].type
            if t in ("float", float):
                kw[k] = float(v)
            elif t in ("int", int):
                kw[k] = int(v)
            elif t in ("bool", bool):
                kw[k] = bool(v)
            else:
                kw[k] = v
        try:
            return cls(**kw)
        except ValueError as exc:
            raise InputError(str(exc), path=path) from None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def em_stop_rule(self) -> str:
        """The effective EM stopping rule (``auto`` resolved by the model)."""
        if self.em_stop != "auto":
            return self.em_stop
        return "paper_code" if self.model == "paper" else "converge"


# ------------------------------------------------------------------- the input


@dataclass
class Prepared:
    """The input in canonical order, as integer codes and normalised coordinates."""

    n_rows: int
    # subjects (sorted by subject_id)
    subject_ids: np.ndarray
    subj_n_vol: np.ndarray  # |V_i|: annotations (volunteers), empty ones included
    subj_n_boxes: np.ndarray
    subj_cls_off: np.ndarray  # (S+1) into the annotation arrays
    subj_box_off: np.ndarray  # (S+1) into the box arrays
    subj_order_key: np.ndarray  # arrival order for batching
    subj_width: np.ndarray
    subj_height: np.ndarray
    # annotations z_ij (sorted by subject, volunteer)
    cls_subject: np.ndarray
    cls_vol: np.ndarray
    # boxes (rows with coordinates, canonical order)
    box_row: np.ndarray  # original input row
    box_cls: np.ndarray
    box_subject: np.ndarray
    box_vol: np.ndarray
    box_xyxy: np.ndarray  # normalised (N, 4)
    box_unusual: np.ndarray
    # volunteers (sorted by name)
    volunteer_names: np.ndarray
    vol_n_subjects: np.ndarray
    vol_n_classifications: np.ndarray
    report: dict = field(default_factory=dict)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, e)`` for every (s, e), vectorised."""
    starts = np.asarray(starts, np.int64)
    lens = np.asarray(ends, np.int64) - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return offs + np.arange(total, dtype=np.int64)


def _change_points(*keys: np.ndarray) -> np.ndarray:
    """Boolean mask: row starts a new group of equal ``keys`` (rows sorted)."""
    n = len(keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


@numba.njit(cache=True)
def _sort_within_groups(order, group, keys):
    """Insertion-sort ``order`` in place inside runs of equal ``group[order]`` by the
    rows of ``keys`` (lexicographic). Runs are tiny (the clicks of one classification)."""
    n = order.shape[0]
    start = 0
    while start < n:
        end = start + 1
        while end < n and group[order[end]] == group[order[start]]:
            end += 1
        for i in range(start + 1, end):
            cur = order[i]
            j = i - 1
            while j >= start:
                prev = order[j]
                less = False
                for k in range(keys.shape[1]):
                    if keys[cur, k] < keys[prev, k]:
                        less = True
                        break
                    if keys[cur, k] > keys[prev, k]:
                        break
                if not less:
                    break
                order[j + 1] = prev
                j -= 1
            order[j + 1] = cur
        start = end


def prepare(df: pd.DataFrame, path=None) -> Prepared:
    """Validate the boxes table and put it in canonical order (see the module docstring).

    Data errors raise :class:`InputError` naming the row (0-based position in
    the table). A row with NaN coordinates is an empty classification (never a
    box, decisions.md#skill-probabilities); a row with some but not all coordinates is an error.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", path=path)
    n = len(df)
    report: dict = {"rows": n}

    def num(col):
        try:
            return pd.to_numeric(df[col], errors="raise").to_numpy(
                dtype=np.float64, na_value=np.nan
            )
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not numeric ({exc})", path=path) from None

    def ints(col):
        s = df[col]
        if s.isna().any():
            raise InputError(f"{col} is missing", path=path, row=int(np.flatnonzero(s.isna())[0]))
        try:
            return s.to_numpy(dtype=np.int64)
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not integer ({exc})", path=path) from None

    cid = ints("classification_id")
    sid = ints("subject_id")
    x1, y1, x2, y2 = (num(c) for c in ("x1", "y1", "x2", "y2"))
    width, height = num("image_width"), num("image_height")
    finite = np.isfinite(np.column_stack([x1, y1, x2, y2]))
    valid = finite.all(axis=1)
    partial = finite.any(axis=1) & ~valid
    if partial.any():
        raise InputError(
            "box has some but not all of x1, y1, x2, y2",
            path=path,
            row=int(np.flatnonzero(partial)[0]),
        )
    bad_size = ~(np.isfinite(width) & np.isfinite(height) & (width > 0) & (height > 0))
    if bad_size.any():
        raise InputError(
            "image_width/image_height must be positive",
            path=path,
            row=int(np.flatnonzero(bad_size)[0]),
        )
    bad_box = valid & ~((x2 > x1) & (y2 > y1))
    if bad_box.any():
        raise InputError(
            "box with x2 <= x1 or y2 <= y1", path=path, row=int(np.flatnonzero(bad_box)[0])
        )

    vol_series = df["volunteer"]
    no_name = vol_series.isna().to_numpy()
    if no_name.any():
        vol_series = vol_series.astype(object).copy()
        vol_series[no_name] = [f"anonymous-{c}" for c in cid[no_name]]
    report["rows_without_volunteer"] = int(no_name.sum())
    vol, uniq = pd.factorize(vol_series.astype(str), sort=True)
    vol = vol.astype(np.int64)
    volunteer_names = np.asarray(uniq, dtype=object)

    unusual = (
        df["unusual"].fillna(False).to_numpy(dtype=bool)
        if "unusual" in df.columns
        else np.zeros(n, bool)
    )

    # one subject and one volunteer per classification
    o = np.argsort(cid, kind="stable")
    cs, ss, vs = cid[o], sid[o], vol[o]
    same = cs[1:] == cs[:-1]
    bad = same & ((ss[1:] != ss[:-1]) | (vs[1:] != vs[:-1]))
    if bad.any():
        row = int(o[1:][bad][0])
        raise InputError(
            "classification appears with two subjects or volunteers", path=path, row=row
        )

    # canonical order: (subject, volunteer, classification) by integer sorts, then the
    # rows of each classification by (x1, y1, x2, y2, unusual), NaN last
    sid_code = np.unique(sid, return_inverse=True)[1].astype(np.int64)
    key = sid_code * np.int64(len(volunteer_names)) + vol
    order = o[np.argsort(key[o], kind="stable")]
    coords = np.column_stack([x1, y1, x2, y2, unusual.astype(np.float64)])
    _sort_within_groups(order, cid, np.nan_to_num(coords, nan=np.inf))
    s_sid, s_vol, s_cid = sid[order], vol[order], cid[order]
    s_valid = valid[order]

    # annotations z_ij = (subject, volunteer)
    new_ann = _change_points(s_sid, s_vol)
    ann_of_row = np.cumsum(new_ann) - 1
    n_ann = int(new_ann.sum())
    new_cls = _change_points(s_sid, s_vol, s_cid)
    report["duplicate_classifications_merged"] = int(new_cls.sum() - n_ann)
    ann_first = np.flatnonzero(new_ann)
    cls_vol = s_vol[ann_first]
    ann_sid = s_sid[ann_first]

    # subjects
    new_subj = _change_points(ann_sid)
    subject_ids = ann_sid[new_subj]
    cls_subject = np.cumsum(new_subj) - 1
    n_subj = len(subject_ids)
    subj_n_vol = np.bincount(cls_subject, minlength=n_subj)
    subj_cls_off = np.concatenate([[0], np.cumsum(subj_n_vol)]).astype(np.int64)

    # boxes
    box_pos = np.flatnonzero(s_valid)
    box_row = order[box_pos]
    box_cls = ann_of_row[box_pos]
    box_subject = cls_subject[box_cls]
    subj_n_boxes = np.bincount(box_subject, minlength=n_subj)
    subj_box_off = np.concatenate([[0], np.cumsum(subj_n_boxes)]).astype(np.int64)
    w = width[box_row]
    h = height[box_row]
    box_xyxy = np.column_stack([x1[box_row] / w, y1[box_row] / h, x2[box_row] / w, y2[box_row] / h])
    box_xyxy = np.ascontiguousarray(box_xyxy)

    # image size per subject (first row of the subject)
    first_row_of_subj = order[np.flatnonzero(_change_points(s_sid))]
    subj_width = width[first_row_of_subj]
    subj_height = height[first_row_of_subj]
    row_subj = np.cumsum(_change_points(s_sid)) - 1
    if len(box_row):
        diff = (np.abs(w - subj_width[box_subject]) > 0) | (
            np.abs(h - subj_height[box_subject]) > 0
        )
        if diff.any():
            raise InputError(
                "image size differs within a subject",
                path=path,
                row=int(box_row[np.flatnonzero(diff)[0]]),
            )

    # arrival order: when the subject's last classification came in, if known
    if "created_at" in df.columns:
        t = pd.to_datetime(df["created_at"], utc=True, errors="coerce")
        tv = t.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        tv = np.where(t.isna().to_numpy(), np.iinfo(np.int64).min, tv)
        key = np.full(n_subj, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(key, row_subj, tv[order])
    else:
        key = np.zeros(n_subj, dtype=np.int64)

    n_vol_total = len(volunteer_names)
    vol_n_subjects = np.bincount(cls_vol, minlength=n_vol_total)
    vol_n_classifications = np.bincount(s_vol[new_cls], minlength=n_vol_total)

    report.update(
        {
            "boxes": int(len(box_row)),
            "empty_rows": int((~valid).sum()),
            "annotations": n_ann,
            "subjects": n_subj,
            "volunteers": n_vol_total,
        }
    )
    return Prepared(
        n_rows=n,
        subject_ids=subject_ids,
        subj_n_vol=subj_n_vol,
        subj_n_boxes=subj_n_boxes,
        subj_cls_off=subj_cls_off,
        subj_box_off=subj_box_off,
        subj_order_key=key,
        subj_width=subj_width,
        subj_height=subj_height,
        cls_subject=cls_subject.astype(np.int64),
        cls_vol=cls_vol.astype(np.int64),
        box_row=box_row.astype(np.int64),
        box_cls=box_cls.astype(np.int64),
        box_subject=box_subject.astype(np.int64),
        box_vol=vol[box_row].astype(np.int64),
        box_xyxy=box_xyxy,
        box_unusual=unusual[box_row],
        volunteer_names=volunteer_names,
        vol_n_subjects=vol_n_subjects,
        vol_n_classifications=vol_n_classifications,
        report=report,
    )


# --------------------------------------------------------------- one batch


@dataclass
class Batch:
    """The arrays of one working batch (local subject / annotation indices)."""

    subjects: np.ndarray  # global subject indices, sorted
    box_idx: np.ndarray  # global box indices
    box_off: np.ndarray  # (S_b+1)
    box_subject: np.ndarray  # local
    box_cls: np.ndarray  # local annotation index
    box_vol: np.ndarray  # global volunteer
    xyxy: np.ndarray
    cls_idx: np.ndarray  # global annotation indices
    cls_subject: np.ndarray  # local
    cls_vol: np.ndarray  # global volunteer
    n_vol: np.ndarray  # |V_i| per local subject
    volunteers: np.ndarray  # global volunteers present

    @classmethod
    def build(cls, prep: Prepared, subjects: np.ndarray) -> Batch:
        subjects = np.asarray(subjects, np.int64)
        bs, be = prep.subj_box_off[subjects], prep.subj_box_off[subjects + 1]
        cs, ce = prep.subj_cls_off[subjects], prep.subj_cls_off[subjects + 1]
        box_idx = _ranges(bs, be)
        cls_idx = _ranges(cs, ce)
        nb = be - bs
        nc = ce - cs
        box_off = np.concatenate([[0], np.cumsum(nb)]).astype(np.int64)
        cls_off = np.concatenate([[0], np.cumsum(nc)]).astype(np.int64)
        box_subject = np.repeat(np.arange(len(subjects), dtype=np.int64), nb)
        cls_subject = np.repeat(np.arange(len(subjects), dtype=np.int64), nc)
        # local annotation index = global − first global of subject + first local of subject
        box_cls = prep.box_cls[box_idx] - cs[box_subject] + cls_off[box_subject]
        cls_vol = prep.cls_vol[cls_idx]
        return cls(
            subjects=subjects,
            box_idx=box_idx,
            box_off=box_off,
            box_subject=box_subject,
            box_cls=box_cls.astype(np.int64),
            box_vol=prep.box_vol[box_idx],
            xyxy=np.ascontiguousarray(prep.box_xyxy[box_idx]),
            cls_idx=cls_idx,
            cls_subject=cls_subject,
            cls_vol=cls_vol,
            n_vol=nc.astype(np.float64),
            volunteers=np.unique(cls_vol),
        )


@dataclass
class Clustering:
    """A batch's clustering and the model parameters estimated from it."""

    facility_of: np.ndarray
    box_cluster: np.ndarray  # compact cluster index, −1 dummy
    cluster_subject: np.ndarray
    cluster_facility: np.ndarray
    labels: np.ndarray  # normalised (L, 4)
    box_d: np.ndarray  # distance to label box (NaN on the dummy)
    n_clusters_subject: np.ndarray
    counts: SkillCounts
    cls_n_fn: np.ndarray
    skills: Skills
    difficulty: np.ndarray
    ll: dict
    n_unassigned: int = 0
    extra: dict = field(default_factory=dict)


def _clusters_from_facilities(facility_of: np.ndarray):
    """Compact cluster indices from the kernel's facility_of (−1 dummy, −2 unassigned)."""
    n = len(facility_of)
    is_fac = facility_of == np.arange(n)
    fac_rows = np.flatnonzero(is_fac)
    assigned = facility_of >= 0
    cl = np.full(n, -1, np.int64)
    cl[assigned] = np.searchsorted(fac_rows, facility_of[assigned])
    return cl, fac_rows, is_fac


def merge_labels(xyxy, box_cluster, n_clusters, weights=None) -> np.ndarray:
    """Label boxes: (weighted) mean of the member boxes' vertex coordinates (decisions.md#label-box)."""
    tp = box_cluster >= 0
    cl = box_cluster[tp]
    w = np.ones(int(tp.sum())) if weights is None else np.asarray(weights, float)[tp]
    wsum = np.bincount(cl, weights=w, minlength=n_clusters)
    out = np.empty((n_clusters, 4))
    for k in range(4):
        out[:, k] = np.bincount(cl, weights=w * xyxy[tp, k], minlength=n_clusters) / wsum
    return out


class _Engine:
    """EM, risk and retirement over working batches (the §5 algorithm)."""

    def __init__(self, prep: Prepared, params: Params, seed: int):
        self.prep = prep
        self.p = params
        self.seed = int(seed)
        self.n_vol = len(prep.volunteer_names)

    # -------------------------------------------------------- costs (§5.3)
    def _solve(self, b: Batch, skills: Skills, *, init: bool, **kw) -> np.ndarray:
        p = self.p
        n = len(b.box_idx)
        if init:
            # eq. init_open_cost, init_conn_cost, init_city_dummy_cost (decisions.md#init-costs)
            open_cost = p.f_V * b.n_vol[b.box_subject]
            conn_const = np.zeros(n)
            dummy_cost = np.ones(n)
        else:
            open_cost, conn_const, dummy_cost = self._nominal_costs(b, skills)
        costs = (open_cost, conn_const, skills.sigma2[b.box_vol], dummy_cost)
        return self._solve_costs(b, costs, init=init, **kw)

    def _solve_costs(self, b: Batch, costs: tuple, *, init: bool, **kw) -> np.ndarray:
        """:func:`clumpscout.model.facility_location.solve_batch` on the batch with the cost arrays
        ``costs = (open_cost, conn_const, sigma2, dummy_cost)``."""
        fac = fl.solve_batch(
            b.box_off, b.xyxy, b.box_cls, *costs, init_phase=init, **self._distance_kw, **kw
        )
        return np.asarray(fac, dtype=np.int64)

    @property
    def _distance_kw(self) -> dict:
        """The distance settings every facility-location call shares (decisions.md#distance-likelihood)."""
        return {"d_max": self.p.d_max, "likelihood": self.p.distance_likelihood}

    def _nominal_costs(self, b: Batch, skills: Skills):
        """eq. fac_cost, city_fac_cost (city's own skills, decisions.md#nominal-costs), city_dummy_cost (decisions.md#nominal-costs)."""
        fac_subject = np.bincount(
            b.cls_subject, weights=-np.log(skills.p_fn[b.cls_vol]), minlength=len(b.subjects)
        )
        pfn = skills.p_fn[b.box_vol]
        pfp = skills.p_fp[b.box_vol]
        open_cost = fac_subject[b.box_subject]
        conn_const = np.log(pfn) - np.log1p(-pfn) - np.log1p(-pfp)
        dummy_cost = -np.log(pfp)
        return open_cost, conn_const, dummy_cost

    # ----------------------------------------------------- M step (§5.4-5.6)
    def _partition(self, b: Batch, facility_of: np.ndarray, sigma2_in: np.ndarray):
        """Clusters, label boxes (docs/decisions.md#label-box) and each box's distance to its
        label, from the kernel's ``facility_of``."""
        box_cluster, fac_rows, _ = _clusters_from_facilities(facility_of)
        cluster_subject = b.box_subject[fac_rows]
        n_clusters_subject = np.bincount(cluster_subject, minlength=len(b.subjects))
        weights = 1.0 / sigma2_in[b.box_vol] if self.p.merge == "inverse_variance" else None
        labels = merge_labels(b.xyxy, box_cluster, len(fac_rows), weights)
        tp = box_cluster >= 0
        box_d = np.full(len(box_cluster), np.nan)
        box_d[tp] = jaccard_distance(b.xyxy[tp], labels[box_cluster[tp]])
        return box_cluster, fac_rows, cluster_subject, n_clusters_subject, labels, box_d

    def _estimate(self, b: Batch, facility_of: np.ndarray, prev: SkillCounts, skills_in: Skills):
        p = self.p
        part = self._partition(b, facility_of, skills_in.sigma2)
        box_cluster, fac_rows, cluster_subject, n_clusters_subject, labels, box_d = part
        n_unassigned = int((facility_of == -2).sum())
        tp = box_cluster >= 0
        counts, cls_stats = batch_counts(
            b.box_vol,
            b.box_cls,
            box_cluster,
            box_d,
            b.cls_vol,
            b.cls_subject,
            n_clusters_subject,
            self.n_vol,
        )
        skills = volunteer_skills(prev + counts, p)
        difficulty = subject_difficulty(
            box_cluster, box_d, cluster_subject, n_clusters_subject, p.sigma2_0_S, p.n_chi_S
        )
        box_s2_subject = np.full(len(box_cluster), np.nan)
        box_s2_subject[tp] = difficulty[box_cluster[tp]]
        ll = log_likelihood(
            box_vol=b.box_vol,
            box_cluster=box_cluster,
            box_d=box_d,
            box_sigma2_subject=box_s2_subject,
            cls_vol=b.cls_vol,
            cls_n_fn=cls_stats["n_fn"],
            skills=skills,
            difficulty=difficulty,
            prev=prev,
            batch_volunteers=b.volunteers,
            p=p,
        )
        return Clustering(
            facility_of=facility_of,
            box_cluster=box_cluster,
            cluster_subject=cluster_subject,
            cluster_facility=fac_rows,
            labels=labels,
            box_d=box_d,
            n_clusters_subject=n_clusters_subject,
            counts=counts,
            cls_n_fn=cls_stats["n_fn"],
            skills=skills,
            difficulty=difficulty,
            ll=ll,
            n_unassigned=n_unassigned,
        )

    # -------------------------------------------------------------- EM (decisions.md#em-stopping)
    def initial_skills(self, prev):
        """Skills before the first clustering of a cycle (from the cached evidence)."""
        return volunteer_skills(prev, self.p)

    def em(self, b: Batch, prev, tag: str) -> tuple[Clustering, list[dict]]:
        """EM over clusterings (docs/decisions.md#em-stopping).

        ``converge``: iterate until the log-likelihood changes by less than ``em_rtol``
        (relative) or ``em_max_iter`` nominal clusterings, keep the best state.
        ``paper_code`` (what the authors' code does): stop at the first nominal iteration
        whose log-likelihood does not fall below the previous one, keep the last state.
        """
        p = self.p
        rule = p.em_stop_rule
        skills0 = self.initial_skills(prev)
        history = []
        t0 = time.perf_counter()
        fac = self._solve(b, skills0, init=True, min_cluster_size=p.min_cluster_size)
        state = self._estimate(b, fac, prev, skills0)
        history.append(self._log_iter(tag, 0, state, t0))
        best = state
        for it in range(1, p.em_max_iter + 1):
            t0 = time.perf_counter()
            fac = self._solve(b, state.skills, init=False, min_cluster_size=p.min_cluster_size)
            if rule == "converge" and it > 1 and np.array_equal(fac, state.facility_of):
                log.info("%s EM iteration %d: same clustering as the last one, converged", tag, it)
                break
            new = self._estimate(b, fac, prev, state.skills)
            history.append(self._log_iter(tag, it, new, t0))
            if new.ll["total"] > best.ll["total"]:
                best = new
            old_ll = state.ll["total"]
            state = new
            if rule == "paper_code":
                if new.ll["total"] >= old_ll:
                    break
            elif abs(new.ll["total"] - old_ll) <= p.em_rtol * abs(old_ll):
                break
        if rule == "paper_code":
            best = state
        log.info("%s: kept log-likelihood %.6g (%s)", tag, best.ll["total"], rule)
        return best, history

    # ------------------------------------------- evidence carried between cycles
    def empty_counts(self):
        return SkillCounts.zeros(self.n_vol)

    def counts_for(self, b: Batch, s: Clustering, cls_weight: np.ndarray):
        """The skill evidence of the classifications with ``cls_weight`` 1 (retired subjects)."""
        counts, _ = batch_counts(
            b.box_vol,
            b.box_cls,
            s.box_cluster,
            s.box_d,
            b.cls_vol,
            b.cls_subject,
            s.n_clusters_subject,
            self.n_vol,
            cls_weight=cls_weight,
        )
        return counts

    def volunteer_table(self, counts) -> dict[str, np.ndarray]:
        """Columns of volunteers.parquet that come from the model."""
        sk = volunteer_skills(counts, self.p)
        return {
            "p_fp": sk.p_fp,
            "p_fn": sk.p_fn,
            "sigma2": sk.sigma2,
            "n_boxes": counts.n_boxes.astype(np.int64),
            "n_tp": counts.n_tp.astype(np.int64),
            "n_fp": counts.n_fp.astype(np.int64),
            "n_fn": counts.n_fn.astype(np.int64),
        }

    def summary(self) -> dict:
        """Model-specific numbers for report.json."""
        return {}

    def _log_iter(self, tag, it, s: Clustering, t0) -> dict:
        rec = {
            "iteration": it,
            "log_likelihood": s.ll["total"],
            "ll_data": s.ll["data"],
            "ll_prior": s.ll["prior"],
            "clusters": int(len(s.cluster_subject)),
            "dummy_boxes": int((s.box_cluster < 0).sum()),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        log.info(
            "%s EM iteration %d (%s): log L = %.8g (data %.6g, prior %.6g), %d clusters, "
            "%d boxes on the dummy, %.2f s",
            tag,
            it,
            "init costs" if it == 0 else "nominal costs",
            rec["log_likelihood"],
            rec["ll_data"],
            rec["ll_prior"],
            rec["clusters"],
            rec["dummy_boxes"],
            rec["seconds"],
        )
        return rec

    # ------------------------------------------------------------ risk (§5.7)
    def risk(self, b: Batch, s: Clustering, cycle: int) -> dict[str, np.ndarray]:
        p = self.p
        n_s = len(b.subjects)
        n_cl = len(s.cluster_subject)
        skills = s.skills
        p_fp_l = clump_false_positive_prob(
            box_cluster=s.box_cluster,
            box_vol=b.box_vol,
            cluster_subject=s.cluster_subject,
            cls_subject=b.cls_subject,
            cls_vol=b.cls_vol,
            p_fp=skills.p_fp,
            p_fn=skills.p_fn,
        )
        tp = s.box_cluster >= 0
        box_s2 = np.full(len(s.box_cluster), np.nan)
        box_s2[tp] = combined_variance(
            s.box_d[tp],
            skills.sigma2[b.box_vol[tp]],
            s.difficulty[s.box_cluster[tp]],
            p.distance_likelihood,
        )
        sigma2_l = clump_location_variance(s.box_cluster, box_s2, n_cl)
        p_sigma_l = clump_sigma_prob(sigma2_l, p.delta)
        n_fp = np.bincount(s.cluster_subject, weights=p_fp_l, minlength=n_s)
        n_sigma = np.bincount(s.cluster_subject, weights=p_sigma_l, minlength=n_s)

        # N_fn: constrained re-clustering (decisions.md#expected-misses)
        _, _, is_fac = _clusters_from_facilities(s.facility_of)
        can_fac, can_city = constrained_masks(s.box_cluster, is_fac)
        open_cost, conn_const, dummy_cost = self._nominal_costs(b, skills)
        n_fn_init = np.zeros(n_s)
        if can_city.any():
            costs = (open_cost, conn_const, skills.sigma2[b.box_vol], dummy_cost)
            fac2 = self._solve_costs(
                b,
                costs,
                init=False,
                can_be_facility=can_fac,
                can_be_city=can_city,
                allow_dummy=False,
                min_cluster_size=1,
            )
            c_cluster, c_dummy, c_subject = self._cluster_costs(b, fac2, costs)
            n_fn_init = expected_missed_init(c_cluster, c_dummy, c_subject, n_s)
        # batch-wide coincidence term
        retained, n_cap = coincidence_scan(b.xyxy, p.d_max, [self.seed, cycle])
        label_off = np.concatenate([[0], np.cumsum(s.n_clusters_subject)]).astype(np.int64)
        fac_cost = open_cost_per_subject(b, skills)
        n_fn_coinc = coincidence_term(
            b.xyxy[retained], n_cap, len(b.cls_idx), label_off, s.labels, fac_cost, p.d_max
        )
        n_fn = n_fn_init + n_fn_coinc
        risk = subject_risk(n_fp, n_fn, n_sigma, p.alpha_fp, p.alpha_fn, p.alpha_sigma)
        return {
            "p_fp": p_fp_l,
            "p_sigma": p_sigma_l,
            "sigma2_l": sigma2_l,
            "n_fp": n_fp,
            "n_fn": n_fn,
            "n_fn_init": n_fn_init,
            "n_fn_coincidence": n_fn_coinc,
            "n_sigma": n_sigma,
            "risk": risk,
            "n_retained": len(retained),
        }

    def _cluster_costs(self, b, facility_of, costs):
        """Assembly cost C(Z'_l) (eq. cluster_cost) and all-to-dummy cost C^∅ of each cluster.

        From :func:`clumpscout.model.facility_location.cluster_costs` (the facility's own
        box pays its connection at d = 0, decisions.md#nominal-costs); ``costs`` as for :meth:`_solve_costs`.
        """
        cc = fl.cluster_costs(
            b.box_off, b.xyxy, facility_of, *costs, init_phase=False, **self._distance_kw
        )
        return cc.cluster_cost, cc.cluster_dummy_cost, cc.cluster_subject


def _merge_candidates(b: Batch, fac: np.ndarray, max_distance: float) -> np.ndarray | None:
    """``facility_of`` with, in every subject, its closest pair of overlapping clusters merged.

    The smaller cluster's boxes join the larger one's facility, except a box whose
    classification is already in the larger one, which goes to the dummy (−1). None when
    no subject has a pair of clusters with label Jaccard distance below ``max_distance``.
    """
    cl, fac_rows, _ = _clusters_from_facilities(fac)
    n_cl = len(fac_rows)
    if n_cl < 2:
        return None
    cs = b.box_subject[fac_rows]
    labels = merge_labels(b.xyxy, cl, n_cl)
    size = np.bincount(cl[cl >= 0], minlength=n_cl)
    end = np.searchsorted(cs, cs, side="right")  # clusters are sorted by subject
    first = np.arange(n_cl)
    second = _ranges(first + 1, end)
    first = np.repeat(first, end - first - 1)
    if len(first) == 0:
        return None
    d = jaccard_distance(labels[first], labels[second])
    keep = d < max_distance
    if not keep.any():
        return None
    first, second, d = first[keep], second[keep], d[keep]
    order = np.lexsort((second, first, d, cs[first]))
    first, second, sub = first[order], second[order], cs[first[order]]
    one = np.r_[True, sub[1:] != sub[:-1]]  # the closest pair of each subject
    first, second = first[one], second[one]
    big = np.where(size[second] > size[first], second, first)
    small = np.where(big == first, second, first)
    target = np.full(n_cl, -1, np.int64)
    target[small] = big
    moving = (cl >= 0) & (target[np.maximum(cl, 0)] >= 0)
    out = fac.copy()
    dest = target[cl[moving]]
    n_cls = int(b.box_cls.max()) + 1
    held = np.unique(cl[cl >= 0] * n_cls + b.box_cls[cl >= 0])
    clash = np.isin(dest * n_cls + b.box_cls[moving], held)
    out[moving] = np.where(clash, -1, fac_rows[dest])
    return out


def open_cost_per_subject(b: Batch, skills: Skills) -> np.ndarray:
    """``C_f,i = −Σ_{j∈V_i} ln p_fn_j`` (eq. fac_cost) per batch subject."""
    return np.bincount(
        b.cls_subject, weights=-np.log(skills.p_fn[b.cls_vol]), minlength=len(b.subjects)
    )


# ------------------------------------------------------------- the result


@dataclass
class GenSkills:
    """The generative model's parameters as the EM carries them (see clumpscout.model.generative)."""

    vp: gen.VolunteerParams
    pop: gen.Population

    @property
    def sigma2(self) -> np.ndarray:
        return self.vp.sigma2


class _GenerativeEngine(_Engine):
    """The same working batches, EM loop and retirement, with the generative likelihood.

    The partition step is the facility-location kernel with the costs of
    :func:`clumpscout.model.generative.facility_costs`; the M step is the soft
    (posterior-weighted) empirical-Bayes update of :mod:`clumpscout.model.generative`, iterated
    ``_INNER`` times for a fixed partition; the risk uses the posterior p_fp, N_fp and N_fn.
    """

    _INNER = 4

    def __init__(self, prep: Prepared, params: Params, seed: int):
        super().__init__(prep, params, seed)
        self.area = gen.box_area(prep.box_xyxy)
        self.last_pop: gen.Population | None = None

    @property
    def _distance_kw(self) -> dict:
        """Jaccard distance with the location density truncated at d_max."""
        return {"d_max": self.p.d_max, "likelihood": "d_truncated"}

    def _log_u(self, b: Batch) -> np.ndarray:
        """ln of the background density of false boxes (uniform over the image: 0)."""
        return np.zeros(len(b.box_idx))

    def _population0(self) -> gen.Population:
        p = self.p
        return gen.initial_population(
            p.p0_fn, p.p0_fp, p.sigma2_0_V, p.n_chi_V, weak=p.weak_objects
        )

    def empty_counts(self):
        return gen.SoftCounts.zeros(self.n_vol)

    def initial_skills(self, prev: gen.SoftCounts) -> GenSkills:
        pop = self._population0() if self.last_pop is None else self.last_pop
        return GenSkills(gen.volunteer_params(prev, pop), pop)

    def _solve(self, b: Batch, skills, *, init: bool, **kw) -> np.ndarray:
        # the first clustering uses the same costs with the parameters before any evidence
        # (the weak hyper-prior values, or the cached skills of a later cycle)
        costs = self._gen_costs(b, skills)
        fac = self._solve_costs(b, costs, init=False, **kw)
        fac = self._merge_overlapping(b, fac, costs)
        if skills.pop.rho_w <= 0:
            return fac
        # weak objects among the boxes left alone: the same step with the weak class's costs
        lone = fac < 0
        if not lone.any():
            return fac
        weak = self._gen_costs(b, skills, weak=True)
        fac2 = self._solve_costs(b, weak, init=False, can_be_facility=lone, can_be_city=lone, **kw)
        return np.where(lone, fac2, fac)

    _MERGE_DISTANCE = 0.5
    _MERGE_PASSES = 10

    def _merge_overlapping(self, b: Batch, fac: np.ndarray, costs: tuple) -> np.ndarray:
        """Local search on the same costs: merge clusters whose labels overlap.

        Two objects at one spot are improbable, but the greedy can split one object into
        two clusters (for example around a volunteer's double click, whose second box
        cannot join the first cluster). Per subject and pass, the pair of clusters with the
        closest labels (Jaccard distance < 0.5) is merged into the larger one (a box whose
        classification the larger one already holds goes to the dummy); the merge is kept
        when it lowers the subject's cost.
        """
        for _ in range(self._MERGE_PASSES):
            cand = _merge_candidates(b, fac, self._MERGE_DISTANCE)
            if cand is None:
                break
            before = self._subject_costs(b, fac, costs)
            after = self._subject_costs(b, cand, costs)
            better = after < before - 1e-9
            if not better.any():
                break
            take = better[b.box_subject]
            fac = np.where(take, cand, fac)
        return fac

    def _subject_costs(self, b: Batch, fac: np.ndarray, costs: tuple) -> np.ndarray:
        cc = fl.cluster_costs(b.box_off, b.xyxy, fac, *costs, init_phase=False, **self._distance_kw)
        return cc.subject_cost

    def _gen_costs(self, b: Batch, sk: GenSkills, weak: bool = False) -> tuple:
        return gen.facility_costs(
            box_vol=b.box_vol,
            box_subject=b.box_subject,
            box_area_=self.area[b.box_idx],
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            n_subjects=len(b.subjects),
            vp=sk.vp,
            rho=sk.pop.rho_w if weak else sk.pop.rho,
            log_u=self._log_u(b),
            d_max=self.p.d_max,
            q=sk.pop.q_w if weak else 1.0,
        )

    def _posterior(self, b, box_cluster, box_d, cluster_subject, labels, sk: GenSkills):
        return gen.posterior(
            box_cluster=box_cluster,
            box_vol=b.box_vol,
            box_subject=b.box_subject,
            box_d=box_d,
            box_area_=self.area[b.box_idx],
            log_u=self._log_u(b),
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            cluster_subject=cluster_subject,
            label_area=gen.box_area(labels) if len(labels) else np.zeros(0),
            n_subjects=len(b.subjects),
            vp=sk.vp,
            pop=sk.pop,
            d_max=self.p.d_max,
        )

    def _soft(self, b, post, box_cluster, box_d, n_cl, cls_weight=None) -> gen.SoftCounts:
        tp = box_cluster >= 0
        size = np.bincount(box_cluster[tp], minlength=n_cl)
        return gen.soft_counts(
            post=post,
            box_cluster=box_cluster,
            box_cls=b.box_cls,
            box_subject=b.box_subject,
            box_d=box_d,
            cluster_size=size,
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            n_volunteers=self.n_vol,
            cls_weight=cls_weight,
        )

    def _estimate(self, b: Batch, facility_of: np.ndarray, prev, skills_in: GenSkills):
        part = self._partition(b, facility_of, skills_in.sigma2)
        box_cluster, fac_rows, cluster_subject, n_clusters_subject, labels, box_d = part
        n_cl = len(fac_rows)
        sk = skills_in
        for i in range(self._INNER):
            post = self._posterior(b, box_cluster, box_d, cluster_subject, labels, sk)
            counts = self._soft(b, post, box_cluster, box_d, n_cl)
            sk = self._m_step(b, post, box_cluster, prev + counts, sk, fit_hyper=i == 0)
        post = self._posterior(b, box_cluster, box_d, cluster_subject, labels, sk)
        ll = gen.log_likelihood(
            post=post,
            box_vol=b.box_vol,
            box_cluster=box_cluster,
            log_u=self._log_u(b),
            cls_vol=b.cls_vol,
            vp=sk.vp,
            pop=sk.pop,
            batch_volunteers=b.volunteers,
        )
        self.last_pop = sk.pop
        return Clustering(
            facility_of=facility_of,
            box_cluster=box_cluster,
            cluster_subject=cluster_subject,
            cluster_facility=fac_rows,
            labels=labels,
            box_d=box_d,
            n_clusters_subject=n_clusters_subject,
            counts=counts,
            cls_n_fn=np.zeros(len(b.cls_idx)),
            skills=sk,
            difficulty=np.full(n_cl, np.nan),
            ll=ll,
            n_unassigned=int((facility_of == -2).sum()),
            extra={"post": post},
        )

    def _m_step(
        self, b, post, box_cluster, total: gen.SoftCounts, sk: GenSkills, fit_hyper: bool
    ) -> GenSkills:
        """Population and volunteer parameters from the expected counts (empirical Bayes).

        The prior strengths and q_w (1-D maximisations) are refitted when ``fit_hyper``
        (once per partition), the means and the volunteers' parameters every time."""
        p = self.p
        det_s, det_w = gen.detected_by_class(post, box_cluster)
        cls = (b.cls_vol, b.cls_subject, len(b.subjects), sk.vp.p_fn)
        q_w = sk.pop.q_w
        if sk.pop.rho_w > 0 and fit_hyper:
            q_w = gen.fit_weak_detection(
                post=post,
                box_cluster=box_cluster,
                box_vol=b.box_vol,
                box_subject=b.box_subject,
                cls_vol=b.cls_vol,
                cls_subject=b.cls_subject,
                n_subjects=len(b.subjects),
                vp=sk.vp,
                rho_w=sk.pop.rho_w,
            )
        weak = (det_w, gen.detection_exposure(*cls, q_w)) if sk.pop.rho_w > 0 else None
        pop = gen.estimate_population(
            total,
            strong=(det_s, gen.detection_exposure(*cls, 1.0)),
            weak=weak,
            q_w=q_w,
            p0_fn=p.p0_fn,
            lam0=p.p0_fp,
            sigma2_0=p.sigma2_0_V,
            nu_s2=p.n_chi_V,
            eb_weight=p.eb_weight,
            strengths=None if fit_hyper else (sk.pop.k_fn, sk.pop.k_lam),
        )
        return GenSkills(gen.volunteer_params(total, pop), pop)

    def risk(self, b: Batch, s: Clustering, cycle: int) -> dict[str, np.ndarray]:
        p = self.p
        post: gen.Posterior = s.extra["post"]
        n_cl = len(s.cluster_subject)
        tp = s.box_cluster >= 0
        box_s2 = np.where(tp, s.skills.sigma2[b.box_vol], np.nan)
        sigma2_l = clump_location_variance(s.box_cluster, box_s2, n_cl)
        p_sigma_l = clump_sigma_prob(sigma2_l, p.delta)
        n_sigma = np.bincount(s.cluster_subject, weights=p_sigma_l, minlength=len(b.subjects))
        lone = np.bincount(b.box_subject, weights=post.r_box, minlength=len(b.subjects))
        n_fn = post.n_fn - post.undetected_weak
        return {
            "p_fp": post.p_fp,
            "p_weak": post.p_weak,
            "p_sigma": p_sigma_l,
            "sigma2_l": sigma2_l,
            "n_fp": post.n_fp,
            # misses of strong objects (and lone boxes) drive the risk; the weak objects
            # nobody recognised are reported apart (docs/decisions.md#weak-objects)
            "n_fn": n_fn,
            "n_fn_weak": post.undetected_weak,
            "n_fn_init": post.undetected,
            "n_fn_coincidence": lone,
            "n_sigma": n_sigma,
            "risk": subject_risk(post.n_fp, n_fn, n_sigma, p.alpha_fp, p.alpha_fn, p.alpha_sigma),
            "n_retained": 0,
        }

    def counts_for(self, b: Batch, s: Clustering, cls_weight: np.ndarray):
        return self._soft(
            b, s.extra["post"], s.box_cluster, s.box_d, len(s.cluster_subject), cls_weight
        )

    def _committed_population(self, counts: gen.SoftCounts) -> gen.Population:
        """The population estimated from the committed (finalised) evidence only."""
        p = self.p
        last = self.last_pop or self._population0()
        pop = gen.estimate_population(
            counts,
            strong=(0.0, 0.0),
            weak=None,
            q_w=last.q_w,
            p0_fn=p.p0_fn,
            lam0=p.p0_fp,
            sigma2_0=p.sigma2_0_V,
            nu_s2=p.n_chi_V,
            eb_weight=p.eb_weight,
        )
        pop.rho, pop.rho_w = last.rho, last.rho_w
        return pop

    def volunteer_table(self, counts: gen.SoftCounts) -> dict[str, np.ndarray]:
        pop = self._committed_population(counts)
        vp = gen.volunteer_params(counts, pop)
        w = self.p.eb_weight
        share = (w * self.p.p0_fp + counts.n_fp.sum()) / (w + counts.n_boxes.sum())
        return {
            # the share of the volunteer's boxes expected to be false (shrunk to the pool's)
            "p_fp": (10.0 * share + counts.n_fp) / (10.0 + counts.n_boxes),
            "p_fn": vp.p_fn,
            "sigma2": vp.sigma2,
            "n_boxes": counts.n_boxes.astype(np.int64),
            "n_tp": counts.n_tp,
            "n_fp": counts.n_fp,
            "n_fn": counts.n_fn,
            "fp_rate": vp.lam,
        }

    def empty_subject_misses(self, subjects: np.ndarray, counts: gen.SoftCounts):
        """Expected strong objects nobody marked (``rho e^{G_i(1)}``) and weak objects nobody
        recognised (``rho_w P_i(≤ 1 mark)``) for subjects that never entered a batch."""
        pop = self._committed_population(counts)
        vp = gen.volunteer_params(counts, pop)
        prep = self.prep
        cs, ce = prep.subj_cls_off[subjects], prep.subj_cls_off[subjects + 1]
        idx = _ranges(cs, ce)
        which = np.repeat(np.arange(len(subjects)), ce - cs)
        args = (prep.cls_vol[idx], which, len(subjects), vp.p_fn)
        strong = pop.rho * np.exp(gen.subject_all_miss(*args))
        return strong, pop.rho_w * gen.subject_unrecognised(*args, pop.q_w)

    def summary(self) -> dict:
        return {"population": (self.last_pop or self._population0()).to_dict()}


@dataclass
class AggregationResult:
    """The outputs of contract 5 plus a run report."""

    labels: pd.DataFrame
    subjects: pd.DataFrame
    volunteers: pd.DataFrame
    assignments: pd.DataFrame
    report: dict
    params: Params
    seed: int

    def clumps_table(self):
        """The labels as an astropy Table with units and the hyper-parameters in ``meta``."""
        import astropy.units as u
        from astropy.table import Table

        t = Table.from_pandas(self.labels.reset_index(drop=True))
        for c in ("x1", "y1", "x2", "y2", "x", "y"):
            t[c].unit = u.pix
        for c in ("p_fp", "p_sigma", "frac_unusual", "sigma2", "difficulty"):
            if c in t.colnames:
                t[c].unit = u.dimensionless_unscaled
        t.meta["description"] = (
            "Galaxy Zoo: Clump Scout label clumps (Dickinson et al. §5); coordinates in subject "
            "pixels (x right, y down, origin top-left); p_fp per decisions.md#clump-false-positive-probability, p_sigma per decisions.md#location-variance; "
            "sigma2 and difficulty are Jaccard-distance variances"
        )
        t.meta["clumpscout_version"] = __version__
        t.meta["seed"] = int(self.seed)
        t.meta["hyper_parameters"] = self.params.to_dict()
        t.meta["n_subjects"] = int(len(self.subjects))
        t.meta["n_labels"] = int(len(self.labels))
        return t

    def write(self, out_dir) -> None:
        """Write labels, subjects, volunteers, assignments (Parquet), clumps.ecsv and report.json."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_parquet(self.labels, out / "labels.parquet")
        write_parquet(self.subjects, out / "subjects.parquet")
        write_parquet(self.volunteers, out / "volunteers.parquet")
        write_parquet(self.assignments, out / "assignments.parquet")
        with atomic_path(out / "clumps.ecsv") as tmp:
            self.clumps_table().write(tmp, format="ascii.ecsv", overwrite=True)
        write_json(self.report, out / "report.json")


class Aggregator:
    """Estimator-style front end: ``Aggregator(params, seed).fit(boxes_df) -> AggregationResult``."""

    def __init__(self, params: Params | dict | None = None, seed: int = 0):
        if isinstance(params, dict) or params is None:
            params = Params.from_dict(params)
        self.params = params
        self.seed = int(seed)

    def fit(self, boxes: pd.DataFrame, path=None) -> AggregationResult:
        t_start = time.perf_counter()
        p = self.params
        with timed(f"preparing {len(boxes):,} rows"):
            prep = prepare(boxes, path=path)
        engine = (_GenerativeEngine if p.model == "generative" else _Engine)(prep, p, self.seed)
        n_s = len(prep.subject_ids)
        n_b = len(prep.box_row)

        empty, eligible = pre_batch_status(
            prep.subj_n_vol,
            prep.subj_n_boxes,
            p.min_volunteers_empty,
            p.min_volunteers_batch,
            final=p.final_classifications,
        )
        status = np.full(n_s, UNRETIRED, np.int64)
        status[empty] = RETIRED_EMPTY
        cycles = np.zeros(n_s, np.int64)
        batch_no = np.full(n_s, -1, np.int64)
        subj_out = {
            k: np.full(n_s, np.nan)
            for k in (
                "n_fp",
                "n_fn",
                "n_sigma",
                "risk",
                "n_fn_init",
                "n_fn_coincidence",
                "n_fn_weak",
            )
        }
        subj_out["n_fp"][empty] = 0.0
        subj_out["n_sigma"][empty] = 0.0
        n_clumps = np.zeros(n_s, np.int64)
        box_assign = np.full(n_b, -3, np.int64)  # −3 not aggregated, −1 dummy, ≥0 clump
        label_parts: list[pd.DataFrame] = []
        cache = SkillCache(len(prep.volunteer_names), engine.empty_counts())

        queue_idx = np.flatnonzero(eligible)
        queue = queue_idx[np.lexsort((prep.subject_ids[queue_idx], prep.subj_order_key[queue_idx]))]
        log.info(
            "%d subjects: %d pre-retired empty, %d eligible for the working batch, %d waiting "
            "(fewer than %d volunteers)",
            n_s,
            int(empty.sum()),
            len(queue),
            int(n_s - empty.sum() - len(queue)),
            p.min_volunteers_batch,
        )
        pos = 0
        leftovers = np.zeros(0, np.int64)
        cycle = 0
        memo = None  # (batch subjects, cache version) -> (clustering, risk) of the last cycle
        batch_reports = []
        while pos < len(queue) or len(leftovers):
            batch_subj, pos = fill_batch(
                leftovers, queue, pos, prep.subj_n_vol, p.min_batch_classifications
            )
            tag = f"cycle {cycle + 1}"
            b = Batch.build(prep, batch_subj)
            t0 = time.perf_counter()
            key = (batch_subj.tobytes(), cache.version)
            if memo is not None and memo[0] == key:
                state, rk, history = memo[1], memo[2], []
                log.info("%s: same batch and skills as the last cycle, result reused", tag)
            else:
                log.info(
                    "%s: working batch of %d subjects (%d new), %d annotations, %d boxes",
                    tag,
                    len(batch_subj),
                    len(batch_subj) - len(leftovers),
                    len(b.cls_idx),
                    len(b.box_idx),
                )
                state, history = engine.em(b, cache.counts, tag)
                rk = engine.risk(b, state, cycle)
                memo = (key, state, rk)
            cycles[batch_subj] += 1
            batch_no[batch_subj] = cycle
            retire = retire_mask(rk["n_fp"], rk["n_fn"], rk["n_sigma"], rk["risk"], p)
            stale = ~retire & (cycles[batch_subj] >= p.max_cycles)
            final = retire | stale
            status[batch_subj[retire]] = RETIRED
            status[batch_subj[stale]] = STALE
            # record final subjects
            for k in subj_out:
                if k in rk:
                    subj_out[k][batch_subj[final]] = rk[k][final]
            n_clumps[batch_subj] = state.n_clusters_subject
            fin_box = final[b.box_subject]
            clump_in_subj = _clump_index_in_subject(state)
            ba = np.full(len(state.box_cluster), -1, np.int64)
            tp = state.box_cluster >= 0
            ba[tp] = clump_in_subj[state.box_cluster[tp]]
            box_assign[b.box_idx[fin_box]] = ba[fin_box]
            # unretired boxes keep their latest clustering too (overwritten later)
            box_assign[b.box_idx[~fin_box]] = ba[~fin_box]
            label_parts.append(self._labels_frame(prep, b, state, rk, final, clump_in_subj))
            # skills: restore the cache and update it with the finalised subjects only
            upd = retire | (stale & p.stale_updates_skills)
            if upd.any():
                w = upd[b.cls_subject].astype(np.float64)
                counts = engine.counts_for(b, state, w)
                n_subj_vol = np.bincount(b.cls_vol, weights=w, minlength=len(prep.volunteer_names))
                cache.commit(counts, n_subj_vol)
            batch_reports.append(
                {
                    "cycle": cycle + 1,
                    "subjects": int(len(batch_subj)),
                    "annotations": int(len(b.cls_idx)),
                    "boxes": int(len(b.box_idx)),
                    "retired": int(retire.sum()),
                    "stale": int(stale.sum()),
                    "left_over": int((~final).sum()),
                    "em": history,
                    "coincidence_retained": int(rk["n_retained"]),
                    "seconds": round(time.perf_counter() - t0, 3),
                }
            )
            log.info(
                "%s: %d retired, %d stale, %d left for the next cycle (%.1f s)",
                tag,
                int(retire.sum()),
                int(stale.sum()),
                int((~final).sum()),
                time.perf_counter() - t0,
            )
            leftovers = batch_subj[~final]
            cycle += 1

        labels = pd.concat(label_parts, ignore_index=True) if label_parts else _empty_labels()
        # keep each subject's labels from its final cycle only
        labels = labels[labels["final"]].drop(columns="final")
        labels = labels.sort_values(["subject_id", "clump"], kind="stable").reset_index(drop=True)

        if isinstance(engine, _GenerativeEngine) and empty.any():
            # nobody marked anything: the objects everyone missed are all that can be there
            idx = np.flatnonzero(empty)
            strong, weak = engine.empty_subject_misses(idx, cache.counts)
            subj_out["n_fn"][idx] = strong
            subj_out["n_fn_weak"][idx] = weak
            subj_out["risk"][idx] = p.alpha_fn * strong
        vt = engine.volunteer_table(cache.counts)
        volunteers = pd.DataFrame(
            {
                "volunteer": prep.volunteer_names.astype(object),
                "p_fp": vt.pop("p_fp"),
                "p_fn": vt.pop("p_fn"),
                "sigma2": vt.pop("sigma2"),
                "n_subjects": prep.vol_n_subjects.astype(np.int64),
                **{k: vt.pop(k) for k in ("n_boxes", "n_tp", "n_fp", "n_fn")},
                "n_subjects_counted": cache.n_subjects,
                "n_classifications": prep.vol_n_classifications.astype(np.int64),
                **vt,
            }
        )
        subjects = pd.DataFrame(
            {
                "subject_id": prep.subject_ids,
                "n_volunteers": prep.subj_n_vol.astype(np.int64),
                "n_clumps": n_clumps,
                "n_fp": subj_out["n_fp"],
                "n_fn": subj_out["n_fn"],
                "n_sigma": subj_out["n_sigma"],
                "risk": subj_out["risk"],
                "status": pd.Categorical.from_codes(status, categories=list(STATUS_NAMES)).astype(
                    str
                ),
                "cycles": cycles,
                "n_boxes": prep.subj_n_boxes.astype(np.int64),
                "n_fn_init": subj_out["n_fn_init"],
                "n_fn_coincidence": subj_out["n_fn_coincidence"],
                "batch": batch_no,
                # Σ (1 − p_fp) over the labels + N_fn: the expected number of real objects
                "expected_count": n_clumps
                - subj_out["n_fp"]
                + subj_out["n_fn"]
                + np.nan_to_num(subj_out["n_fn_weak"]),
                # generative model: expected weak objects (faint features) no label holds
                "n_fn_weak": subj_out["n_fn_weak"],
            }
        )
        assignments = self._assignments(boxes, prep, box_assign)
        status_counts = {
            str(k): int(v)
            for k, v in zip(*np.unique(STATUS_NAMES[status], return_counts=True), strict=True)
        }
        report = dict(prep.report)
        report.update(
            {
                "seed": self.seed,
                "params": p.to_dict(),
                "status_counts": status_counts,
                "labels": int(len(labels)),
                "boxes_on_dummy": int((box_assign == -1).sum()),
                "boxes_not_aggregated": int((box_assign == -3).sum()),
                "cycles": batch_reports,
                "model": {"name": p.model, "em_stop": p.em_stop_rule, **engine.summary()},
            }
        )
        with timed("checking the run's health"):
            diag = health.diagnose(assignments, labels)
        health.log_warnings(diag, log)
        report["health"] = diag
        report["warnings"] = list(diag["warnings"])
        report["seconds"] = round(time.perf_counter() - t_start, 3)
        log.info(
            "aggregated %d subjects (%s) into %d label clumps in %.1f s",
            n_s,
            ", ".join(f"{k} {v}" for k, v in status_counts.items()),
            len(labels),
            report["seconds"],
        )
        return AggregationResult(labels, subjects, volunteers, assignments, report, p, self.seed)

    @staticmethod
    def _labels_frame(prep, b, state, rk, final, clump_in_subj) -> pd.DataFrame:
        gs = b.subjects[state.cluster_subject]
        w = prep.subj_width[gs]
        h = prep.subj_height[gs]
        lab = state.labels
        n_cl = len(state.cluster_subject)
        tp = state.box_cluster >= 0
        n_marks = np.bincount(state.box_cluster[tp], minlength=n_cl)
        unus = np.bincount(
            state.box_cluster[tp],
            weights=prep.box_unusual[b.box_idx[tp]].astype(float),
            minlength=n_cl,
        )
        x1, y1, x2, y2 = lab[:, 0] * w, lab[:, 1] * h, lab[:, 2] * w, lab[:, 3] * h
        return pd.DataFrame(
            {
                "subject_id": prep.subject_ids[gs],
                "clump": clump_in_subj,
                "x1": x1,
                "y1": y1,
                "x2": x2,
                "y2": y2,
                "x": 0.5 * (x1 + x2),
                "y": 0.5 * (y1 + y2),
                "p_fp": rk["p_fp"],
                "p_sigma": rk["p_sigma"],
                "n_marks": n_marks.astype(np.int64),
                "frac_unusual": unus / np.maximum(n_marks, 1),
                "sigma2": rk["sigma2_l"],
                "difficulty": state.difficulty,
                # generative model: P(a weakly marked object | real); NaN for the paper's
                "p_weak": rk.get("p_weak", np.full(n_cl, np.nan)),
                "final": final[state.cluster_subject],
            }
        )

    @staticmethod
    def _assignments(boxes: pd.DataFrame, prep: Prepared, box_assign: np.ndarray) -> pd.DataFrame:
        out = boxes.reset_index(drop=True).copy()
        cluster = np.full(prep.n_rows, -3, np.int64)
        cluster[prep.box_row] = box_assign
        kind = np.full(prep.n_rows, "empty", dtype=object)
        kind[prep.box_row] = np.where(
            box_assign >= 0, "clump", np.where(box_assign == -1, "dummy", "not_aggregated")
        )
        out["cluster"] = pd.array(np.where(cluster >= -1, cluster, 0), dtype="Int64")
        out.loc[cluster < -1, "cluster"] = pd.NA
        out["assignment"] = kind
        return out


def _clump_index_in_subject(s: Clustering) -> np.ndarray:
    """0..K_i−1 within each subject (clusters are sorted by subject)."""
    n_cl = len(s.cluster_subject)
    if n_cl == 0:
        return np.zeros(0, np.int64)
    first = np.concatenate([[0], np.cumsum(s.n_clusters_subject)[:-1]])
    return np.arange(n_cl, dtype=np.int64) - first[s.cluster_subject]


def _empty_labels() -> pd.DataFrame:
    cols = [
        "subject_id", "clump", "x1", "y1", "x2", "y2", "x", "y", "p_fp", "p_sigma",
        "n_marks", "frac_unusual", "sigma2", "difficulty", "p_weak", "final",
    ]  # fmt: skip
    return pd.DataFrame({c: pd.Series(dtype=bool if c == "final" else float) for c in cols})


def aggregate(boxes: pd.DataFrame, params: Params | dict | None = None, seed: int = 0):
    """Functional form of :class:`Aggregator`: ``aggregate(boxes_df) -> AggregationResult``."""
    return Aggregator(params, seed).fit(boxes)


# ----------------------------------------------------------------------- CLI


def load_config(path) -> tuple[Params, int | None]:
    """Params (and the master seed, if present) from a YAML file.

    The file is either a whole config.yaml (its ``aggregate:`` section is used)
    or just the ``aggregate`` settings.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read config ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("config must be a mapping", path=path)
    seed = data.get("seed") if isinstance(data.get("seed"), int) else None
    if "aggregate" in data:
        section = data["aggregate"] or {}
    elif any(isinstance(v, dict) for v in data.values()):
        section = {}  # a workflow config without an aggregate section: the defaults
    else:  # a flat file of aggregate settings (and perhaps the seed): every key is checked
        section = {k: v for k, v in data.items() if k != "seed"}
    return Params.from_dict(section, path=path), seed


def read_boxes(path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read boxes table ({exc})", path=path) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--boxes", required=True, help="boxes.parquet from `clumpscout boxes`")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--config", default=None, help="YAML with an `aggregate:` section")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: config seed or 0)")


def run(args: argparse.Namespace) -> int:
    params, cfg_seed = (Params(), None) if args.config is None else load_config(args.config)
    seed = args.seed if args.seed is not None else (cfg_seed or 0)
    boxes = read_boxes(args.boxes)
    result = Aggregator(params, seed).fit(boxes, path=args.boxes)
    with timed(f"writing {args.out}"):
        result.write(args.out)
    return 0
