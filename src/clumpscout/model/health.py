"""Run-health diagnostics: make a collapsed aggregation loud instead of silent.

The aggregation model has a known failure mode (docs/decisions.md#paper-model): the EM
can run away until nearly every box is sent to the dummy facility (judged a false
positive), leaving subjects without labels even where many volunteers clearly agree.
Nothing crashes when that happens, so :func:`diagnose` reads the engine's outputs
(``assignments.parquet`` and ``labels.parquet``) and checks three things:

1. **Dummy share** — of the boxes that were aggregated (rows with coordinates whose
   ``assignment`` is ``clump`` or ``dummy``), the share sent to the dummy facility.
   Warn above ``max_dummy_share`` (default 0.8: a noisy project legitimately has about
   half of its boxes there; a collapse puts nearly all of them there).
2. **Agreement thrown away** — a subject *has agreement* when some box ``b`` of it has
   coinciding boxes (Jaccard distance < ``agree_distance``, default 0.5) from at least
   ``min_agreeing − 1`` (default 3 − 1) OTHER distinct volunteers, so that at least
   ``min_agreeing`` volunteers drew the same thing. Such a subject is *agree-unlabelled*
   when none of its labels lies within ``agree_distance`` of any such agreeing box ``b``.
   Warn when agree-unlabelled subjects are more than ``max_agree_unlabelled_share``
   (default 0.05) of the subjects with agreement.
3. **No labels at all** while boxes were aggregated.

Only aggregated rows are looked at: empty classifications (NaN coordinates) are not
boxes, and ``not_aggregated`` rows belong to subjects the engine never labelled, so
their missing labels say nothing about the model. Several boxes of the same volunteer
count as one volunteer; a missing volunteer name counts as its own volunteer per
classification (as the engine does). The Jaccard distance is scale-free, so subject
pixels give the same answer as the engine's normalised coordinates.

Speed: rows are sorted by (subject, volunteer) once and a numba kernel walks each
subject's block (all pairs of its boxes, at most a few thousand per subject), so
millions of boxes take seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numba
import numpy as np
import pandas as pd

from clumpscout.logs import WARNING_PREFIX
from clumpscout.model.distance import jaccard_nb

log = logging.getLogger(__name__)

#: Prefix of every logged warning, easy to grep for in a run log.

#: ``assignment`` values of rows that went through the model.
AGGREGATED = ("clump", "dummy")

_COORDS = ["x1", "y1", "x2", "y2"]
_MAX_EXAMPLES = 10


@numba.njit(cache=True)
def _agreement_kernel(boxes, vol, starts, ends, labels, lab_starts, lab_ends, thr, need_others):
    """Per subject block: (has agreement, agreement covered by a label).

    ``boxes`` rows are sorted by volunteer inside each block ``starts[s]:ends[s]``, so the
    boxes of one volunteer are contiguous and distinct volunteers are counted by skipping
    the volunteer just counted. ``labels[lab_starts[s]:lab_ends[s]]`` are the subject's labels.
    """
    n_s = starts.shape[0]
    has_agree = np.zeros(n_s, np.bool_)
    covered = np.zeros(n_s, np.bool_)
    for s in range(n_s):
        a = starts[s]
        e = ends[s]
        for i in range(a, e):
            count = 0
            last = -1  # volunteer codes are >= 0
            if need_others > 0:
                for j in range(a, e):
                    v = vol[j]
                    if v == vol[i] or v == last:
                        continue
                    d = jaccard_nb(
                        boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3],
                        boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3],
                    )  # fmt: skip
                    if d < thr:
                        count += 1
                        last = v
                        if count >= need_others:
                            break
            if count < need_others:
                continue
            has_agree[s] = True
            for k in range(lab_starts[s], lab_ends[s]):
                d = jaccard_nb(
                    boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3],
                    labels[k, 0], labels[k, 1], labels[k, 2], labels[k, 3],
                )  # fmt: skip
                if d < thr:
                    covered[s] = True
                    break
            if covered[s]:
                break  # nothing more to learn about this subject
    return has_agree, covered


def _volunteer_codes(df: pd.DataFrame) -> np.ndarray:
    """Integer code per row; a missing name is its own volunteer per classification."""
    codes, uniq = pd.factorize(df["volunteer"])
    codes = codes.astype(np.int64)
    missing = codes < 0
    if missing.any():
        if "classification_id" in df.columns:
            extra, _ = pd.factorize(df["classification_id"].to_numpy()[missing])
        else:
            extra = np.arange(int(missing.sum()))
        codes[missing] = len(uniq) + extra.astype(np.int64)
    return codes


def _coords(df: pd.DataFrame) -> np.ndarray:
    return np.column_stack(
        [pd.to_numeric(df[c]).to_numpy(dtype=np.float64, na_value=np.nan) for c in _COORDS]
    ).reshape(len(df), 4)


def _plain(x):
    """numpy scalar -> Python scalar (for JSON)."""
    return x.item() if isinstance(x, np.generic) else x


def _require(df: pd.DataFrame, cols: list[str], name: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s): {', '.join(missing)}")


def diagnose(
    assignments: pd.DataFrame,
    labels: pd.DataFrame,
    *,
    agree_distance: float = 0.5,
    min_agreeing: int = 3,
    max_dummy_share: float = 0.8,
    max_agree_unlabelled_share: float = 0.05,
) -> dict:
    """Health of one aggregation run from its assignments and labels tables.

    Returns a JSON-serialisable dict: ``boxes``, ``boxes_on_dummy``, ``dummy_share``,
    ``boxes_not_aggregated``, ``empty_rows``, ``labels``, ``subjects_aggregated``,
    ``subjects_with_agreement``, ``agree_unlabelled``, ``agree_unlabelled_share``,
    ``agree_unlabelled_examples`` (≤ 10 subject ids), ``thresholds``, ``warnings`` (list
    of human-readable strings, empty when all is well) and ``ok``. See the module
    docstring for what is checked. Pure: the inputs are not modified.
    """
    _require(assignments, ["subject_id", "volunteer", *_COORDS, "assignment"], "assignments")
    xyxy = _coords(assignments)
    has_box = np.isfinite(xyxy).all(axis=1)
    kind = assignments["assignment"].astype(object).to_numpy()
    aggregated = has_box & np.isin(kind, AGGREGATED)
    counts = {
        "boxes": int(aggregated.sum()),
        "boxes_on_dummy": int((aggregated & (kind == "dummy")).sum()),
        "boxes_not_aggregated": int((has_box & (kind == "not_aggregated")).sum()),
        "empty_rows": int((~has_box).sum()),
    }
    # rows sorted by (subject, volunteer)
    sid = assignments["subject_id"].to_numpy()[aggregated]
    vol = _volunteer_codes(assignments)[aggregated]
    subjects, subj = np.unique(sid, return_inverse=True)
    subj = subj.astype(np.int64)
    order = np.lexsort((vol, subj))
    block = (xyxy[aggregated][order], vol[order], subj[order])
    return diagnose_blocks(
        [block],
        subjects,
        counts,
        labels,
        agree_distance=agree_distance,
        min_agreeing=min_agreeing,
        max_dummy_share=max_dummy_share,
        max_agree_unlabelled_share=max_agree_unlabelled_share,
    )


def diagnose_blocks(
    blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
    subjects: np.ndarray,
    counts: dict,
    labels: pd.DataFrame,
    *,
    agree_distance: float = 0.5,
    min_agreeing: int = 3,
    max_dummy_share: float = 0.8,
    max_agree_unlabelled_share: float = 0.05,
) -> dict:
    """:func:`diagnose` from the aggregated boxes given block by block, so that no table of
    every box is needed at once.

    ``blocks``: (xyxy, volunteer code, subject index into ``subjects``) of the aggregated
    boxes, sorted by (subject, volunteer), each subject inside one block; ``subjects``: the
    aggregated subjects' ids, sorted; ``counts``: the table's ``boxes`` (aggregated),
    ``boxes_on_dummy``, ``boxes_not_aggregated`` and ``empty_rows``.
    """
    if min_agreeing < 1:
        raise ValueError(f"min_agreeing must be >= 1, got {min_agreeing}")
    _require(labels, ["subject_id", *_COORDS], "labels")
    n_boxes, n_dummy = counts["boxes"], counts["boxes_on_dummy"]
    dummy_share = n_dummy / n_boxes if n_boxes else 0.0

    has_agree, covered = _agreement(blocks, subjects, labels, agree_distance, min_agreeing)
    unlabelled = has_agree & ~covered
    n_agree = int(has_agree.sum())
    n_unlab = int(unlabelled.sum())
    unlab_share = n_unlab / n_agree if n_agree else 0.0
    examples = [_plain(s) for s in subjects[unlabelled][:_MAX_EXAMPLES]]

    warnings: list[str] = []
    if dummy_share > max_dummy_share:
        warnings.append(
            f"{dummy_share:.0%} of boxes ({n_dummy:,} of {n_boxes:,}) were judged false "
            f"positives (threshold {max_dummy_share:.0%}): the model may have collapsed onto "
            "the dummy facility; compare with a baseline before using these labels."
        )
    if unlab_share > max_agree_unlabelled_share:
        warnings.append(
            f"{n_unlab:,} of {n_agree:,} subjects ({unlab_share:.1%}, threshold "
            f"{max_agree_unlabelled_share:.1%}) where at least {min_agreeing} volunteers drew "
            f"coinciding boxes (Jaccard distance < {agree_distance:g}) got no label there, "
            f"e.g. subjects {examples[:5]}: clear agreement was thrown away; the model may "
            "have collapsed."
        )
    if n_boxes > 0 and len(labels) == 0:
        warnings.append(
            f"no labels at all although {n_boxes:,} boxes were aggregated: the model has "
            "collapsed or judged every subject empty."
        )

    return {
        "boxes": n_boxes,
        "boxes_on_dummy": n_dummy,
        "dummy_share": float(dummy_share),
        "boxes_not_aggregated": counts["boxes_not_aggregated"],
        "empty_rows": counts["empty_rows"],
        "labels": int(len(labels)),
        "subjects_aggregated": int(len(subjects)),
        "subjects_with_agreement": n_agree,
        "agree_unlabelled": n_unlab,
        "agree_unlabelled_share": float(unlab_share),
        "agree_unlabelled_examples": examples,
        "thresholds": {
            "agree_distance": float(agree_distance),
            "min_agreeing": int(min_agreeing),
            "max_dummy_share": float(max_dummy_share),
            "max_agree_unlabelled_share": float(max_agree_unlabelled_share),
        },
        "warnings": warnings,
        "ok": not warnings,
    }


def _agreement(
    blocks, subjects: np.ndarray, labels: pd.DataFrame, agree_distance: float, min_agreeing: int
) -> tuple[np.ndarray, np.ndarray]:
    """Which aggregated subjects hold at least ``min_agreeing`` volunteers' coinciding boxes,
    and which of those have a label there, via :func:`_agreement_kernel` block by block."""
    n_s = len(subjects)
    lab_xyxy = _coords(labels)
    lab_subj = pd.Index(subjects).get_indexer(labels["subject_id"].to_numpy())
    keep = lab_subj >= 0
    lab_order = np.flatnonzero(keep)[np.argsort(lab_subj[keep], kind="stable")]
    lab_bounds = np.searchsorted(lab_subj[lab_order], np.arange(n_s + 1)).astype(np.int64)
    lab_sorted = np.ascontiguousarray(lab_xyxy[lab_order])
    has_agree = np.zeros(n_s, bool)
    covered = np.zeros(n_s, bool)
    for xyxy, vol, subj in blocks:
        if not len(subj):
            continue
        first, last = int(subj[0]), int(subj[-1]) + 1
        bounds = np.searchsorted(subj, np.arange(first, last + 1)).astype(np.int64)
        h, c = _agreement_kernel(
            np.ascontiguousarray(xyxy, dtype=np.float64),
            np.ascontiguousarray(vol, dtype=np.int64),
            bounds[:-1],
            bounds[1:],
            lab_sorted,
            lab_bounds[first:last],
            lab_bounds[first + 1 : last + 1],
            float(agree_distance),
            int(min_agreeing) - 1,
        )
        has_agree[first:last] = h
        covered[first:last] = c
    return has_agree, covered


def log_warnings(diag: dict, logger: logging.Logger | None = None) -> int:
    """Log every warning of a :func:`diagnose` result at WARNING level, loudly prefixed.

    Returns the number of warnings logged.
    """
    logger = logger or log
    warnings = diag.get("warnings", [])
    for w in warnings:
        logger.warning("%s %s", WARNING_PREFIX, w)
    return len(warnings)
