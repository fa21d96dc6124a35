"""What counts as real: the label probability calibrated on the project's gold standard.

The generative model's posterior (:mod:`clumpscout.model.generative`) answers "is anything
there?" (``p_empty``: the label is a coincidence of false boxes) and "is it a weakly marked
object?" (``p_weak``). Whether a weakly marked thing (a faint feature, a foreground star, a
half-hidden animal) is what the project counts, clicks alone cannot tell; the project's
experts can (docs/decisions.md#gold-standard). This module maps a label's features to

    p_fp = P(the label is not an object the project counts | features)

and the model's expected misses to the expected number of counted objects no label holds
(``n_fn``). Both maps are fitted on the gold subjects (:mod:`clumpscout.data.gold`):

* **expert marks**: a label is real when it is matched one-to-one to an expert object
  (:mod:`clumpscout.metrics.matching`); ``P(real | x)`` is a logistic regression
  (scikit-learn) on the features :data:`FEATURES`, and the misses (expert objects no label
  is matched to) a Poisson regression on :data:`MISS_FEATURES`;
* **expert counts**: the same two maps, fitted together by the likelihood of the experts'
  counts: a subject's count is the sum of its labels' Bernoulli(P(real)) plus a Poisson
  number of missed objects (scipy's L-BFGS on the exact Poisson-binomial likelihood).

**Cross-fitting.** The gold subjects are split into ``folds`` folds; a gold subject's
labels and misses come from the maps fitted on the other folds, so comparing them with the
experts stays honest. Every other subject gets the maps fitted on all gold subjects.

**Without a gold standard** (:func:`default_calibration`): a weakly marked label counts as
real with probability ``weak_real`` (docs/decisions.md#no-gold-default), so
``p_fp = 1 − (1 − p_empty)(1 − (1 − weak_real) p_weak)`` and the weak objects nobody
recognised count ``weak_real`` each in ``n_fn``.

Either way the subjects table gets ``n_fp = Σ p_fp``, ``n_fn``, ``expected_count =
Σ (1 − p_fp) + n_fn`` and the count range ``count_low`` (labels with p_empty < 0.5 and
p_weak < 0.5: the strongly marked objects) to ``count_high`` (every label with
p_empty < 0.5).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize, special

from clumpscout.data.gold import Gold
from clumpscout.metrics.matching import match_one_to_one, matched_pairs
from clumpscout.metrics.reliability import calibration

log = logging.getLogger(__name__)

#: label features of the map to "real" (see :func:`label_features`)
FEATURES = (
    "logit_p_empty",
    "logit_p_weak",
    "mark_fraction",
    "log_marks",
    "markers_weak_share",
    "frac_unusual",
)
#: subject features of the map to the expected misses (see :func:`miss_features`)
MISS_FEATURES = ("log_n_fn", "log_n_fn_weak")
#: logits are clipped to ± this: p_empty = 1e-3 and 1e-30 say the same (the label is real), and
#: a map linear in an unclipped logit would set two such labels far apart; the batch EM and
#: the live assessment of one label differ by orders of magnitude out there
_LOGIT_CLIP = 5.0
#: fewest gold subjects with which a map is fitted; fewer: the default map, with a warning
MIN_GOLD_SUBJECTS = 10


@dataclass(frozen=True)
class CalibrationSettings:
    """The ``calibration:`` section of the config (see config.yaml)."""

    folds: int = 5
    weak_real: float = 0.75
    C: float = 1.0
    match_iou: float = 0.5
    expert_majority: float = 0.0  # gold from expert clicks (clumpscout.data.gold)
    box_correction: bool = True  # expert boxes: correct the label boxes' systematic offset
    seed: int = 0
    #: (α_fp, α_fn, α_σ) of the subject risk, recomputed with the calibrated N_fp, N_fn
    risk_weights: tuple = (1.0, 1.0, 2.0)


# ------------------------------------------------------------------ features
def _logit(p) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore"):
        z = np.log(p) - np.log1p(-p)
    return np.clip(np.nan_to_num(z, nan=-_LOGIT_CLIP), -_LOGIT_CLIP, _LOGIT_CLIP)


#: pseudo-marks at the population's share that shrink a volunteer's weak share
_SHRINK_MARKS = 5.0


def markers_weak_share(labels: pd.DataFrame, assignments: pd.DataFrame | None) -> np.ndarray:
    """Per label, the mean over its markers of their share of marks on weakly marked labels.

    A volunteer's share is Σ p_weak over the labels their boxes joined / their boxes, shrunk
    to the population's share with :data:`_SHRINK_MARKS` pseudo-marks: volunteers who mark
    what few others see (a taste for faint features, stars, rocks) mark weak labels more
    often, whatever the label. Without assignments, every label gets 0.
    """
    if assignments is None or not len(labels) or "p_weak" not in labels.columns:
        return np.zeros(len(labels))
    a = assignments.loc[
        assignments["assignment"] == "clump", ["subject_id", "volunteer", "cluster"]
    ]
    key = pd.MultiIndex.from_arrays([labels["subject_id"], labels["clump"]])
    p_weak = pd.Series(np.nan_to_num(labels["p_weak"].to_numpy(dtype=float)), index=key)
    w = p_weak.reindex(pd.MultiIndex.from_arrays([a["subject_id"], a["cluster"].astype(np.int64)]))
    a = a.assign(p_weak=w.to_numpy())
    a = a.loc[a["p_weak"].notna()]
    if not len(a):
        return np.zeros(len(labels))
    m0 = float(a["p_weak"].mean())
    per = a.groupby("volunteer")["p_weak"].agg(["sum", "size"])
    share = (per["sum"] + _SHRINK_MARKS * m0) / (per["size"] + _SHRINK_MARKS)
    a = a.assign(share=share.reindex(a["volunteer"]).to_numpy())
    mean = a.groupby([a["subject_id"], a["cluster"].astype(np.int64)])["share"].mean()
    return mean.reindex(key).fillna(m0).to_numpy()


def label_features(
    labels: pd.DataFrame, n_viewers: pd.Series, assignments: pd.DataFrame | None = None
) -> np.ndarray:
    """(labels × :data:`FEATURES`): logit p_empty, logit p_weak (NaN: the lower clip), the share of
    the subject's classifications that marked the label, ln(marks), the markers' share of
    weak marks (:func:`markers_weak_share`) and the share of marks made with the project's
    "unusual" tool (0 where there is none)."""
    views = n_viewers.reindex(labels["subject_id"].to_numpy()).to_numpy(dtype=float)
    marks = labels["n_marks"].to_numpy(dtype=float)
    p_weak = labels["p_weak"] if "p_weak" in labels.columns else np.zeros(len(labels))
    unusual = labels["frac_unusual"] if "frac_unusual" in labels.columns else np.zeros(len(labels))
    return np.column_stack(
        [
            _logit(labels["p_empty"]),
            _logit(p_weak),
            marks / np.maximum(np.nan_to_num(views, nan=1.0), 1.0),
            np.log(np.maximum(marks, 1.0)),
            markers_weak_share(labels, assignments),
            np.nan_to_num(np.asarray(unusual, dtype=float)),
        ]
    )


def miss_features(subjects: pd.DataFrame) -> np.ndarray:
    """(subjects × :data:`MISS_FEATURES`): ln(1 + the model's n_fn), ln(1 + n_fn_weak)."""
    n_fn = np.nan_to_num(subjects["n_fn_model"].to_numpy(dtype=float))
    weak = subjects["n_fn_weak"] if "n_fn_weak" in subjects.columns else 0.0
    n_fn_weak = np.nan_to_num(np.asarray(weak, dtype=float) * np.ones(len(subjects)))
    return np.column_stack([np.log1p(np.maximum(n_fn, 0)), np.log1p(np.maximum(n_fn_weak, 0))])


# ------------------------------------------------------------------ the maps
@dataclass
class CalibrationMap:
    """P(real | label features) and E[missed | subject features], fitted or fixed."""

    kind: str  # marks | counts | constant
    real: object = None  # a fitted sklearn pipeline, or None
    miss: object = None  # a fitted sklearn pipeline, or None
    theta: np.ndarray | None = None  # counts: (scaler-free) logistic coefficients
    gamma: np.ndarray | None = None  # counts: log-linear miss coefficients
    scale_x: tuple | None = None  # counts: (mean, sd) of the label features
    scale_z: tuple | None = None  # counts: (mean, sd) of the miss features
    constant_real: float = float("nan")
    constant_miss: float = 0.0
    z_range: tuple | None = None  # (min, max) of the miss features seen in the fit
    info: dict = field(default_factory=dict)

    def p_real(self, X: np.ndarray) -> np.ndarray:
        if len(X) == 0:
            return np.zeros(0)
        if self.real is not None:
            return self.real.predict_proba(X)[:, 1]
        if self.theta is not None:
            return special.expit(_design(X, self.scale_x) @ self.theta)
        return np.full(len(X), self.constant_real)

    def expected_missed(self, Z: np.ndarray) -> np.ndarray:
        """Expected misses; features beyond the range seen in the fit are clipped to it (a
        log-linear map must not extrapolate: it explodes)."""
        if len(Z) == 0:
            return np.zeros(0)
        if self.z_range is not None:
            Z = np.clip(Z, *self.z_range)
        if self.miss is not None:
            return self.miss.predict(Z)
        if self.gamma is not None:
            return np.exp(_design(Z, self.scale_z) @ self.gamma)
        return np.full(len(Z), self.constant_miss)


def _design(X: np.ndarray, scale: tuple) -> np.ndarray:
    mean, sd = scale
    return np.column_stack([np.ones(len(X)), (X - mean) / sd])


def _scale(X: np.ndarray) -> tuple:
    sd = X.std(axis=0)
    return X.mean(axis=0), np.where(sd > 0, sd, 1.0)


def _scaled(estimator):
    """``estimator`` on standardised features (scikit-learn is imported only when a map is
    fitted: runs without gold never need it)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), estimator)


def fit_real_map(X: np.ndarray, real: np.ndarray, C: float = 1.0) -> CalibrationMap:
    """P(real | x) from labels' features ``X`` and their verdict ``real`` (matched to an
    expert object): an L2-penalised logistic regression on standardised features; with one
    class only, its rate with half a pseudo-label of the other (Jeffreys)."""
    real = np.asarray(real, dtype=bool)
    if len(real) and real.all() != real.any():
        from sklearn.linear_model import LogisticRegression

        lr = _scaled(LogisticRegression(C=C, max_iter=1000))
        lr.fit(X, real)
        return CalibrationMap("marks", real=lr)
    return CalibrationMap("constant", constant_real=(real.sum() + 0.5) / (len(real) + 1.0))


def fit_marks_map(
    X: np.ndarray, real: np.ndarray, Z: np.ndarray, missed: np.ndarray, C: float = 1.0
) -> CalibrationMap:
    """The maps from expert marks: labels' features ``X`` with ``real`` (matched), subjects'
    miss features ``Z`` with ``missed`` (expert objects no label is matched to)."""
    real = np.asarray(real, dtype=bool)
    m = fit_real_map(X, real, C)
    missed = np.asarray(missed, dtype=float)
    if missed.sum() > 0 and len(missed) > 1:
        from sklearn.linear_model import PoissonRegressor

        pr = _scaled(PoissonRegressor(alpha=1.0 / (C * len(missed))))
        pr.fit(Z, missed)
        m.miss = pr
        m.z_range = (Z.min(axis=0), Z.max(axis=0))
    else:
        m.constant_miss = float(missed.mean()) if len(missed) else 0.0
    m.info = {"labels": int(len(real)), "real": int(real.sum()), "missed": float(missed.sum())}
    return m


def _poisson_binomial_logpmf(p_pad: np.ndarray, k_max: int) -> np.ndarray:
    """ln P(Σ Bernoulli(p) = k), k = 0..k_max, per row of ``p_pad`` (rows × labels, 0-padded)."""
    pmf = np.zeros((len(p_pad), k_max + 1))
    pmf[:, 0] = 1.0
    for j in range(p_pad.shape[1]):
        pj = p_pad[:, j : j + 1]
        shifted = np.zeros_like(pmf)
        shifted[:, 1:] = pmf[:, :-1]
        pmf = pmf * (1.0 - pj) + shifted * pj
    return pmf


def _count_nll(params, Xd, rows, Zd, counts, n_x, ridge, resid, log_fact):
    """Negative log-likelihood of the experts' counts (module docstring), plus a ridge.

    ``resid`` (subjects × k): count − k; ``log_fact``: ln(resid!) (−inf-free where resid < 0).
    """
    theta, gamma = params[:n_x], params[n_x:]
    p = special.expit(Xd @ theta)
    p_pad = np.zeros(rows.shape)
    ok = rows >= 0
    p_pad[ok] = p[rows[ok]]
    pmf = _poisson_binomial_logpmf(p_pad, resid.shape[1] - 1)
    log_mu = np.clip(Zd @ gamma, -30, 10)
    log_pois = resid * log_mu[:, None] - np.exp(log_mu)[:, None] - log_fact
    pois = np.where(resid >= 0, np.exp(log_pois), 0.0)
    like = np.maximum((pmf * pois).sum(axis=1), 1e-300)
    return -np.log(like).sum() + ridge * (theta[1:] @ theta[1:] + gamma[1:] @ gamma[1:])


def fit_counts_map(
    X: np.ndarray, label_subject: np.ndarray, Z: np.ndarray, counts: np.ndarray, C: float = 1.0
) -> CalibrationMap:
    """The maps from expert counts alone: ``X`` labels' features, ``label_subject`` each
    label's row in ``Z`` / ``counts`` (the gold subjects), fitted by maximum likelihood."""
    counts = np.asarray(counts, dtype=float)
    n_s = len(counts)
    order = np.argsort(label_subject, kind="stable")
    per = np.bincount(label_subject, minlength=n_s)
    rows = np.full((n_s, max(int(per.max()) if n_s else 0, 1)), -1, np.int64)
    start = np.concatenate([[0], np.cumsum(per)[:-1]])
    pos = np.arange(len(order)) - np.repeat(start, per)
    rows[label_subject[order], pos] = order
    sx, sz = _scale(X), _scale(Z)
    Xd, Zd = _design(X, sx), _design(Z, sz)
    x0 = np.zeros(Xd.shape[1] + Zd.shape[1])
    # start: every label as real as its share of the counts, misses at the rest
    share = np.clip(counts.sum() / max(len(X), 1), 0.05, 0.95)
    x0[0] = special.logit(share)
    x0[Xd.shape[1]] = np.log(max(counts.sum() - share * len(X), 0.05 * n_s) / n_s)
    resid = counts[:, None] - np.arange(int(counts.max()) + 1)[None, :]
    log_fact = special.gammaln(np.maximum(resid, 0) + 1.0)
    res = optimize.minimize(
        _count_nll,
        x0,
        args=(Xd, rows, Zd, counts, Xd.shape[1], 0.5 / C, resid, log_fact),
        method="L-BFGS-B",
    )
    theta, gamma = res.x[: Xd.shape[1]], res.x[Xd.shape[1] :]
    return CalibrationMap(
        "counts",
        theta=theta,
        gamma=gamma,
        scale_x=sx,
        scale_z=sz,
        z_range=(Z.min(axis=0), Z.max(axis=0)),
        info={"subjects": n_s, "nll": float(res.fun), "converged": bool(res.success)},
    )


# ------------------------------------------------------------------ applying it
def _with_inputs(labels: pd.DataFrame, subjects: pd.DataFrame):
    """Copies with p_empty (the model's p_fp) and n_fn_model (the model's n_fn) kept."""
    labels = labels.copy()
    subjects = subjects.copy()
    if "p_empty" not in labels.columns:  # appended: the first columns are a contract
        labels["p_empty"] = labels["p_fp"].astype(float)
    if "n_fn_model" not in subjects.columns:
        subjects["n_fn_model"] = subjects["n_fn"].astype(float)
    return labels, subjects


def _keys(labels: pd.DataFrame, subjects: pd.DataFrame) -> list[str]:
    """The unit of a subjects row: subject_id, or (subject_id, tool) for per-tool runs."""
    both = "tool" in labels.columns and "tool" in subjects.columns
    return ["subject_id", "tool"] if both else ["subject_id"]


def _per_unit(values: pd.Series, labels: pd.DataFrame, subjects: pd.DataFrame) -> np.ndarray:
    """Σ ``values`` (aligned with ``labels``) per row of ``subjects`` (0 where no label)."""
    keys = _keys(labels, subjects)
    if len(keys) == 1:
        sums = values.groupby(labels["subject_id"].to_numpy()).sum()
        return sums.reindex(subjects["subject_id"].to_numpy(), fill_value=0).to_numpy()
    sums = values.groupby([labels[k].to_numpy() for k in keys]).sum()
    target = pd.MultiIndex.from_frame(subjects[keys])
    return sums.reindex(target, fill_value=0).to_numpy()


def _count_range(labels: pd.DataFrame, subjects: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(count_low, count_high) per subject: strongly marked labels, every marked label."""
    found = pd.Series(labels["p_empty"].to_numpy(dtype=float) < 0.5, index=labels.index)
    weak = np.zeros(len(labels), bool)
    if "p_weak" in labels.columns:
        weak = np.nan_to_num(labels["p_weak"].to_numpy(dtype=float)) >= 0.5
    low = _per_unit((found & ~weak).astype(np.int64), labels, subjects)
    high = _per_unit(found.astype(np.int64), labels, subjects)
    return low.astype(np.int64), high.astype(np.int64)


def _finish(
    labels, subjects, p_real, missed, risk_weights=(1.0, 1.0, 2.0)
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write p_fp, n_fp, n_fn, risk, expected_count and the count range into the tables."""
    labels["p_fp"] = np.clip(1.0 - p_real, 0.0, 1.0)
    aggregated = np.isfinite(subjects["n_fn_model"].to_numpy(dtype=float))
    n_fp = _per_unit(labels["p_fp"], labels, subjects)
    n_real = _per_unit(1.0 - labels["p_fp"], labels, subjects)
    missed = np.where(aggregated, missed, np.nan)
    subjects["n_fp"] = np.where(np.isfinite(subjects["n_fp"].to_numpy(dtype=float)), n_fp, np.nan)
    subjects["n_fn"] = missed
    subjects["expected_count"] = n_real + missed
    if "n_sigma" in subjects.columns and "risk" in subjects.columns:
        a_fp, a_fn, a_sigma = risk_weights
        risk = a_fp * subjects["n_fp"] + a_fn * subjects["n_fn"] + a_sigma * subjects["n_sigma"]
        subjects["risk"] = np.where(np.isfinite(subjects["risk"]), risk, subjects["risk"])
    low, high = _count_range(labels, subjects)
    subjects["count_low"] = np.where(aggregated, low, -1).astype(np.int64)
    subjects["count_high"] = np.where(aggregated, high, -1).astype(np.int64)
    return labels, subjects


def default_calibration(
    labels: pd.DataFrame,
    subjects: pd.DataFrame,
    weak_real: float = 0.75,
    risk_weights: tuple = (1.0, 1.0, 2.0),
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The tables without a gold standard (module docstring; docs/decisions.md#no-gold-default)."""
    labels, subjects = _with_inputs(labels, subjects)
    p_weak = np.nan_to_num(labels["p_weak"].to_numpy(dtype=float)) if "p_weak" in labels else 0.0
    p_real = (1.0 - labels["p_empty"].to_numpy(dtype=float)) * (1.0 - (1.0 - weak_real) * p_weak)
    weak_missed = np.nan_to_num(subjects.get("n_fn_weak", pd.Series(0.0, index=subjects.index)))
    missed = np.nan_to_num(subjects["n_fn_model"].to_numpy(dtype=float)) + weak_real * np.asarray(
        weak_missed, dtype=float
    )
    labels, subjects = _finish(labels, subjects, p_real, missed, risk_weights)
    report = {
        "gold": None,
        "method": "default",
        "weak_real": float(weak_real),
        "note": "no gold standard: a weakly marked label counts as real with probability "
        f"{weak_real} (docs/decisions.md#no-gold-default); what the project's experts would "
        "count is not known",
    }
    return labels, subjects, report


def _folds(gold_subjects: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """Gold subjects split into ``k`` folds at random (seeded), each sorted."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(np.sort(gold_subjects))
    return [np.sort(f) for f in np.array_split(perm, k) if len(f)]


@dataclass
class _GoldData:
    """The gold subjects' fitting material: per label X and real, per subject Z and target."""

    X: np.ndarray
    label_subject: np.ndarray  # index into subjects below
    real: np.ndarray | None
    Z: np.ndarray
    subjects: np.ndarray
    missed: np.ndarray | None
    counts: np.ndarray


def _gold_data(gold: Gold, labels, X, subjects, Z, s: CalibrationSettings) -> _GoldData:
    """The material of the gold subjects that were aggregated (a finite model n_fn)."""
    sid = subjects["subject_id"].to_numpy()
    aggregated = np.isfinite(subjects["n_fn_model"].to_numpy(dtype=float))
    gs = np.intersect1d(gold.subjects, sid[aggregated])
    srow = pd.Series(np.arange(len(sid)), index=sid)
    lab_in = labels["subject_id"].isin(gs).to_numpy()
    lab_sid = labels["subject_id"].to_numpy()[lab_in]
    gpos = pd.Series(np.arange(len(gs)), index=gs)
    real = missed = None
    if gold.kind == "marks":
        matched, miss = match_one_to_one(
            labels.loc[lab_in], gold.restrict(gs).marks, gold.geometry, s.match_iou
        )
        real = matched
        missed = miss.reindex(gs, fill_value=0).to_numpy(dtype=float)
    return _GoldData(
        X=X[lab_in],
        label_subject=gpos.reindex(lab_sid).to_numpy(np.int64),
        real=real,
        Z=Z[srow.reindex(gs).to_numpy()],
        subjects=gs,
        missed=missed,
        counts=gold.counts.reindex(gs).to_numpy(dtype=float),
    )


#: fewest label-expert box pairs from which the box correction is measured
MIN_BOX_PAIRS = 20
#: a label and an expert box are a pair for the box correction at IoU ≥ this
BOX_PAIR_IOU = 0.3


def box_correction(labels: pd.DataFrame, gold: Gold, subjects=None) -> dict | None:
    """How the experts' boxes sit relative to the labels they match (docs/decisions.md#gold-boxes):
    the medians, over the one-to-one pairs at IoU ≥ :data:`BOX_PAIR_IOU` of the labels with
    p_empty < 0.5 on the gold ``subjects`` (default: all), of ln(expert width / label width),
    ln(expert height / label height) and the centre offsets in label widths and heights.
    None without a box gold standard or with fewer than :data:`MIN_BOX_PAIRS` pairs."""
    if gold is None or gold.kind != "marks" or gold.geometry != "box":
        return None
    subjects = gold.subjects if subjects is None else np.asarray(subjects)
    lab = labels.loc[
        labels["subject_id"].isin(subjects).to_numpy() & (labels["p_empty"] < 0.5).to_numpy()
    ].reset_index(drop=True)
    marks = gold.restrict(subjects).marks
    li, oi, _ = matched_pairs(lab, marks, "box", BOX_PAIR_IOU)
    if len(li) < MIN_BOX_PAIRS:
        return None
    a = lab[["x1", "y1", "x2", "y2"]].to_numpy(dtype=float)[li]
    e = marks[["x1", "y1", "x2", "y2"]].to_numpy(dtype=float)[oi]
    w, h = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    return {
        "log_width": float(np.median(np.log((e[:, 2] - e[:, 0]) / w))),
        "log_height": float(np.median(np.log((e[:, 3] - e[:, 1]) / h))),
        "dx": float(np.median(((e[:, 0] + e[:, 2]) - (a[:, 0] + a[:, 2])) / 2 / w)),
        "dy": float(np.median(((e[:, 1] + e[:, 3]) - (a[:, 1] + a[:, 3])) / 2 / h)),
        "pairs": int(len(li)),
    }


def correct_boxes(labels: pd.DataFrame, corr: dict | None) -> pd.DataFrame:
    """``labels`` with every box moved and resized by ``corr`` (:func:`box_correction`);
    x, y follow the box centre."""
    if corr is None or not len(labels):
        return labels
    out = labels.copy()
    b = out[["x1", "y1", "x2", "y2"]].to_numpy(dtype=float)
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    cx = 0.5 * (b[:, 0] + b[:, 2]) + corr["dx"] * w
    cy = 0.5 * (b[:, 1] + b[:, 3]) + corr["dy"] * h
    w2, h2 = w * np.exp(corr["log_width"]), h * np.exp(corr["log_height"])
    new = np.column_stack([cx - w2 / 2, cy - h2 / 2, cx + w2 / 2, cy + h2 / 2, cx, cy])
    cols = ["x1", "y1", "x2", "y2", "x", "y"] if "x" in out.columns else ["x1", "y1", "x2", "y2"]
    out[cols] = new[:, : len(cols)]
    return out


def _with_fold_boxes(labels, raw, corr, lab_gold, rows) -> pd.DataFrame:
    """``labels`` with the boxes of the gold labels ``lab_gold[rows]`` taken from ``raw``
    corrected by ``corr`` (a cross-fitting fold's own correction)."""
    idx = lab_gold[rows]
    fixed = correct_boxes(raw.iloc[idx], corr)
    out = labels.copy()
    cols = [c for c in ("x1", "y1", "x2", "y2", "x", "y") if c in out.columns]
    out.iloc[idx, [out.columns.get_loc(c) for c in cols]] = fixed[cols].to_numpy()
    return out


def _fit_on(d: _GoldData, keep: np.ndarray, kind: str, C: float) -> CalibrationMap:
    """The maps fitted on the gold subjects ``keep`` (a boolean mask over d.subjects)."""
    lab = keep[d.label_subject]
    if kind == "marks":
        return fit_marks_map(d.X[lab], d.real[lab], d.Z[keep], d.missed[keep], C)
    remap = np.cumsum(keep) - 1
    return fit_counts_map(d.X[lab], remap[d.label_subject[lab]], d.Z[keep], d.counts[keep], C)


def calibrate(
    labels: pd.DataFrame,
    subjects: pd.DataFrame,
    gold: Gold | None,
    settings: CalibrationSettings | None = None,
    assignments: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Calibrated labels and subjects tables, and the calibration report.

    Gold subjects also carry the experts' verdict: ``gold_real`` (1 / 0: the label matches
    an expert object; NaN elsewhere and with counts only) and ``gold_count``.

    ``labels`` and ``subjects``: the generative model's tables (p_fp there is the model's
    p_empty; p_weak, n_marks; n_volunteers, n_fn, n_fn_weak). Returns copies with ``p_fp``
    calibrated, ``p_empty`` (the model's p_fp) and ``p_gold_fold`` (the cross-fitting fold
    of a gold subject's label, −1 elsewhere) in the labels, and ``n_fp``, ``n_fn``,
    ``expected_count``, ``count_low``, ``count_high``, ``n_fn_model`` (the model's n_fn)
    and ``gold`` (a gold subject) in the subjects (module docstring).
    """
    s = settings or CalibrationSettings()
    t0 = time.perf_counter()
    if gold is None:
        return default_calibration(labels, subjects, s.weak_real, s.risk_weights)
    labels, subjects = _with_inputs(labels, subjects)
    X = label_features(labels, subjects.set_index("subject_id")["n_volunteers"], assignments)
    Z = miss_features(subjects)
    raw = labels
    corr = box_correction(raw, gold) if s.box_correction else None
    labels = correct_boxes(raw, corr)
    d = _gold_data(gold, labels, X, subjects, Z, s)
    absent = np.setdiff1d(gold.subjects, subjects["subject_id"].to_numpy())
    not_aggregated = np.setdiff1d(np.setdiff1d(gold.subjects, absent), d.subjects)
    report = {
        "gold": gold.summary(),
        "method": gold.kind,
        "gold_subjects_used": int(len(d.subjects)),
        "gold_subjects_absent": int(len(absent)),
        "gold_subjects_not_aggregated": int(len(not_aggregated)),
        "match": None
        if gold.kind == "counts"
        else (
            "expert point inside the label box, one-to-one"
            if gold.geometry == "point"
            else f"IoU >= {s.match_iou}, one-to-one"
        ),
    }
    if len(absent):
        log.warning(
            "%d of %d gold subjects have no classifications in the boxes table; they are not used",
            len(absent),
            len(gold.subjects),
        )
    if len(d.subjects) < MIN_GOLD_SUBJECTS:
        log.warning(
            "only %d gold subjects were aggregated (at least %d are needed): the default "
            "map is used instead (docs/decisions.md#no-gold-default)",
            len(d.subjects),
            MIN_GOLD_SUBJECTS,
        )
        labels, subjects, rep = default_calibration(labels, subjects, s.weak_real, s.risk_weights)
        report.update(rep, gold=gold.summary(), method="default (too few gold subjects)")
        return labels, subjects, report
    full = _fit_on(d, np.ones(len(d.subjects), bool), gold.kind, s.C)
    p_real = full.p_real(X)
    missed = full.expected_missed(Z)
    fold_of = np.full(len(labels), -1, np.int64)
    folds = _folds(d.subjects, min(s.folds, len(d.subjects)), s.seed)
    lab_gold = np.flatnonzero(labels["subject_id"].isin(d.subjects).to_numpy())
    srow = pd.Series(np.arange(len(subjects)), index=subjects["subject_id"].to_numpy())
    held_out_p = np.full(len(d.label_subject), np.nan)
    held_out_miss = np.full(len(d.subjects), np.nan)
    held_out_real = None if d.real is None else np.zeros(len(d.label_subject), bool)
    fold_corr = []
    for k, fold in enumerate(folds):
        in_fold = np.isin(d.subjects, fold)
        dk = d
        if corr is not None:  # the fold's boxes corrected as measured on the other folds
            ck = box_correction(raw, gold, d.subjects[~in_fold]) or corr
            fold_corr.append(ck)
            labels = _with_fold_boxes(labels, raw, ck, lab_gold, in_fold[d.label_subject])
            dk = _gold_data(gold, correct_boxes(raw, ck), X, subjects, Z, s)
        m = _fit_on(dk, ~in_fold, gold.kind, s.C)
        lab = in_fold[d.label_subject]
        held_out_p[lab] = m.p_real(d.X[lab])
        held_out_miss[in_fold] = m.expected_missed(d.Z[in_fold])
        if held_out_real is not None:
            held_out_real[lab] = dk.real[lab]
        fold_of[lab_gold[lab]] = k
    p_real[lab_gold] = held_out_p
    missed[srow.reindex(d.subjects).to_numpy()] = held_out_miss
    labels, subjects = _finish(labels, subjects, p_real, missed, s.risk_weights)
    labels["p_gold_fold"] = fold_of
    # the experts' verdict beside the cross-fitted numbers (reliability and count figures)
    gold_real = np.full(len(labels), np.nan)
    if held_out_real is not None:
        gold_real[lab_gold] = held_out_real.astype(float)
        d.real = held_out_real
    labels["gold_real"] = gold_real
    subjects["gold"] = subjects["subject_id"].isin(d.subjects).to_numpy()
    subjects["gold_count"] = (
        gold.counts.reindex(subjects["subject_id"].to_numpy())
        .where(subjects["gold"].to_numpy())
        .to_numpy(dtype=float)
    )
    report.update(
        {
            "folds": len(folds),
            "features": list(FEATURES),
            "miss_features": list(MISS_FEATURES),
            "fit": full.info | {"kind": full.kind},
            "box_correction": corr,
            "box_correction_folds": fold_corr or None,
            "held_out": _held_out_summary(d, held_out_p, held_out_miss),
            "seconds": round(time.perf_counter() - t0, 3),
        }
    )
    return labels, subjects, report


def _held_out_summary(d: _GoldData, p_real: np.ndarray, missed: np.ndarray) -> dict:
    """Cross-fitted agreement with the experts on the gold subjects."""
    n_real = np.bincount(d.label_subject, weights=p_real, minlength=len(d.subjects))
    expected = n_real + missed
    out = {
        "count_mae": float(np.mean(np.abs(np.round(expected) - d.counts))),
        "count_bias": float(np.mean(expected - d.counts)),
    }
    if d.real is not None:
        out["ece"] = float(calibration(1.0 - p_real, ~d.real, 10)[1]) if len(p_real) else None
        out["labels"] = int(len(p_real))
        out["real"] = int(d.real.sum())
        kept = p_real > 0.5
        tp = int((kept & d.real).sum())
        out["purity_05"] = tp / max(int(kept.sum()), 1)
        out["completeness_05"] = tp / max(int(d.real.sum() + d.missed.sum()), 1)
    return out


# ------------------------------------------------------------------ the live map
#: features of the live map: a label of a subject after any number of its classifications
#: (the retirement decision and its replay; docs/decisions.md#live-retirement)
LIVE_FEATURES = (
    "logit_p_empty",
    "logit_p_weak",
    "mark_fraction",
    "log_marks",
    "log_viewers",
    "frac_unusual",
)


def live_features(p_empty, p_weak, n_marks, n_viewers, frac_unusual=None) -> np.ndarray:
    """(labels × :data:`LIVE_FEATURES`) of labels assessed after ``n_viewers``
    classifications of their subject: logit p_empty, logit p_weak (NaN: the lower clip), marks /
    viewers, ln marks, ln viewers and the share of marks made with the "unusual" tool."""
    marks = np.asarray(n_marks, dtype=float)
    views = np.maximum(np.nan_to_num(np.asarray(n_viewers, dtype=float), nan=1.0), 1.0)
    views = np.broadcast_to(views, marks.shape)
    unusual = (
        np.zeros(len(marks))
        if frac_unusual is None
        else np.nan_to_num(np.asarray(frac_unusual, dtype=float))
    )
    return np.column_stack(
        [
            _logit(p_empty),
            _logit(p_weak),
            marks / views,
            np.log(np.maximum(marks, 1.0)),
            np.log(views),
            unusual,
        ]
    )


def _logit_raw(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-15, 1 - 1e-15)
    return np.log(p) - np.log1p(-p)


def _clustered_covariance(pipe, X: np.ndarray, y: np.ndarray, groups, C: float) -> np.ndarray:
    """Sandwich covariance H⁻¹ (Σ_g s_g s_gᵀ) H⁻¹ of a fitted scikit-learn ``StandardScaler``
    + ``LogisticRegression`` pipeline (intercept first), H the Hessian of its penalised
    objective (C · log loss + ½ |w|², the intercept unpenalised) and s_g the score summed
    over the rows of group g: rows of one group (the prefixes of one gold subject) are not
    independent, so the plain inverse Hessian would be far too sure of the map."""
    scaler = pipe[0]
    xt = np.column_stack([np.ones(len(X)), scaler.transform(X)])
    p = pipe.predict_proba(X)[:, 1]
    w = p * (1.0 - p)
    hess = C * (xt.T * w) @ xt + np.diag([0.0] + [1.0] * (xt.shape[1] - 1))
    scores = C * (y.astype(float) - p)[:, None] * xt
    codes = pd.factorize(np.asarray(groups))[0]
    per_group = np.zeros((codes.max() + 1, xt.shape[1]))
    np.add.at(per_group, codes, scores)
    meat = per_group.T @ per_group
    inv = np.linalg.pinv(hess)
    return inv @ meat @ inv


def _rate(hits: np.ndarray, prior: float) -> float:
    """A share with one pseudo-observation at ``prior`` (stable on a handful of labels)."""
    return float((np.sum(hits) + prior) / (len(hits) + 1.0))


@dataclass
class LiveMap:
    """P(a label is what the project counts | its live features), for a subject after any
    number of its classifications (docs/decisions.md#live-retirement).

    Without a gold standard (``fitted`` None) it is the default map
    (docs/decisions.md#no-gold-default): ``(1 − p_empty)(1 − (1 − weak_real) p_weak)``.
    :meth:`fit` learns it from gold subjects' labels at every number of classifications
    (their prefixes), so that a label seen by 5 volunteers is judged as a label seen by 5,
    not by 20: a logistic regression on :data:`LIVE_FEATURES`.

    ``counted`` (strong, weak): the share of real strongly / weakly marked labels the
    project counts (reported; default map: 1 and ``weak_real``).
    """

    weak_real: float = 0.75
    fitted: CalibrationMap | None = None
    counted: tuple = (1.0, 0.75)
    info: dict = field(default_factory=dict)
    #: covariance of the fitted logistic coefficients (intercept first, standardised
    #: features), clustered by gold subject; None: no uncertainty (the default map)
    cov: np.ndarray | None = None

    @classmethod
    def default(cls, weak_real: float = 0.75) -> LiveMap:
        return cls(weak_real=float(weak_real), counted=(1.0, float(weak_real)))

    @property
    def kind(self) -> str:
        return "default" if self.fitted is None else "gold"

    @classmethod
    def fit(
        cls,
        X: np.ndarray,
        real: np.ndarray,
        C: float = 1.0,
        weak_real: float = 0.75,
        groups: np.ndarray | None = None,
    ) -> LiveMap:
        """The map fitted on labels' live features ``X`` (:func:`live_features`) and their
        verdict ``real``; ``groups`` (e.g. the gold subject of each row) only counts them
        in ``info``. The counted shares are those of the real labels (p_empty < 0.5) by
        class (p_weak < 0.5 or not), each with one pseudo-label at the default's value."""
        real = np.asarray(real, dtype=bool)
        fitted = fit_real_map(X, real, C)
        found = X[:, 0] < 0.0  # logit p_empty < 0
        weak = X[:, 1] >= 0.0
        counted = (_rate(real[found & ~weak], 1.0), _rate(real[found & weak], weak_real))
        info = {"labels": int(len(real)), "real": int(real.sum())}
        if groups is not None:
            info["subjects"] = int(len(np.unique(groups)))
        cov = None
        if fitted.real is not None:
            groups = np.arange(len(real)) if groups is None else np.asarray(groups)
            cov = _clustered_covariance(fitted.real, X, real, groups, C)
        return cls(weak_real=float(weak_real), fitted=fitted, counted=counted, info=info, cov=cov)

    def _design(self, p_empty, p_weak, n_marks, n_viewers, frac_unusual) -> np.ndarray:
        """(labels × 1 + features): 1 and the standardised live features (the fitted
        scaler's, applied with numpy: this runs on millions of look-ahead rows)."""
        x = live_features(p_empty, p_weak, n_marks, n_viewers, frac_unusual)
        scaler = self.fitted.real[0]
        return np.column_stack([np.ones(len(x)), (x - scaler.mean_) / scaler.scale_])

    def _logit_real(self, xt: np.ndarray) -> np.ndarray:
        lr = self.fitted.real[-1]
        return xt @ np.concatenate([lr.intercept_, lr.coef_[0]])

    def p_real(self, p_empty, p_weak, n_marks, n_viewers, frac_unusual=None) -> np.ndarray:
        """P(counted) per label (the arguments as in :func:`live_features`)."""
        p_empty = np.asarray(p_empty, dtype=float)
        if self.fitted is None:
            w = np.nan_to_num(np.asarray(p_weak, dtype=float))
            return (1.0 - p_empty) * (1.0 - (1.0 - self.weak_real) * w)
        if not len(p_empty):
            return np.zeros(0)
        if self.fitted.real is None:  # one class only in the gold: a constant
            return np.full(len(p_empty), self.fitted.constant_real)
        xt = self._design(p_empty, p_weak, n_marks, n_viewers, frac_unusual)
        return special.expit(self._logit_real(xt))

    def kept_probability(
        self, p_empty, p_weak, n_marks, n_viewers, frac_unusual=None
    ) -> np.ndarray:
        """P(a map fitted on more gold would keep the label, p_fp < 0.5): Φ(logit P(real) /
        its standard error) under the coefficients' uncertainty (:attr:`cov`); without
        one (the default map), 1 where P(real) > 0.5 and 0 elsewhere."""
        if self.cov is None or not len(np.atleast_1d(p_empty)):
            p = self.p_real(p_empty, p_weak, n_marks, n_viewers, frac_unusual)
            return (p > 0.5).astype(float)
        xt = self._design(p_empty, p_weak, n_marks, n_viewers, frac_unusual)
        var = np.einsum("ij,ij->i", xt @ self.cov, xt)
        return special.ndtr(self._logit_real(xt) / np.sqrt(np.maximum(var, 1e-12)))
