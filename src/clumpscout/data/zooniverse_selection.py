"""Which rows of a classification export are read: the workflow and its versions, and the
first row of each group (de-duplication) (for :mod:`clumpscout.data.zooniverse`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.errors import InputError

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- selection


def _version_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, float):
        log.warning(
            "workflow_version given as a number (%r); quote it in YAML ('52.70' != 52.7)", v
        )
        return repr(v)
    return str(v).strip()


def available_versions(wid: np.ndarray, ver: np.ndarray) -> dict[str, dict[str, int]]:
    """{workflow id: {version: number of rows}} of the export (``ver``: version strings)."""
    out: dict[str, dict[str, int]] = {}
    codes, uniq = pd.factorize(pd.Series(ver, dtype=object), sort=True)
    # a hash count (np.unique(axis=1) sorts the pairs as records: minutes at 17M rows)
    counts = pd.DataFrame({"w": wid, "v": codes}).value_counts().sort_index()
    for (w, c), n in counts.items():
        out.setdefault(str(int(w)), {})[str(uniq[c])] = int(n)
    return out


def first_few(items: list[str], n: int = 8) -> list[str]:
    """The first ``n`` of ``items`` and how many more there are (for a one-line message)."""
    return items[:n] + ([f"... {len(items) - n} more"] if len(items) > n else [])


def _describe(avail: dict[str, dict[str, int]], only: str | None = None) -> str:
    parts = []
    for w, versions in avail.items():
        if only is not None and w != only:
            continue
        vs = ", ".join(first_few([f"{v[:30]} ({n})" for v, n in versions.items()]))
        parts.append(f"workflow {w[:30]}: versions {vs}")
    return "; ".join(first_few(parts))


def select_workflow(
    wid: np.ndarray,
    ver: np.ndarray,
    workflow_id: Any,
    workflow_version: Any,
    path: object,
    avail: dict[str, dict[str, int]] | None = None,
) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """Masks (workflow, version) of the rows to keep, the workflow id and kept versions.
    ``avail``: :func:`available_versions` of ``wid, ver`` when the caller has it already."""
    avail = available_versions(wid, ver) if avail is None else avail
    ids = sorted({int(w) for w in avail})
    if workflow_id is None:
        if len(ids) > 1:
            raise InputError(
                "the export holds several workflows; choose one with --workflow-id "
                f"(config export.workflow_id): {_describe(avail)}",
                path=path,
            )
        chosen = ids[0]
    else:
        try:
            chosen = int(workflow_id)
        except (TypeError, ValueError):
            raise InputError(f"workflow id {workflow_id!r} is not an integer", path=path) from None
        if chosen not in ids:
            raise InputError(
                f"workflow {chosen} is not in the export; available: {_describe(avail)}",
                path=path,
            )
    wmask = wid == chosen
    codes, uniq = pd.factorize(pd.Series(ver[wmask], dtype=object))
    uniq = pd.Series(np.asarray(uniq, dtype=object), dtype=object)
    majors = uniq.str.split(".").str[0]
    want = _version_text(workflow_version)
    vmask = np.zeros(len(wid), dtype=bool)
    if want is None:
        numeric = pd.to_numeric(majors, errors="coerce")
        if numeric.isna().all():
            keep_u = (majors == majors.max()).to_numpy()
        else:
            keep_u = (numeric == numeric.max()).to_numpy()
    elif "." in want:
        keep_u = (uniq == want).to_numpy()
    else:
        keep_u = (majors == want).to_numpy()
    keep = keep_u[codes]
    if not keep.any():
        raise InputError(
            f"workflow {chosen} has no version {want!r}; available: "
            f"{_describe(avail, only=str(chosen))}",
            path=path,
        )
    vmask[np.flatnonzero(wmask)[keep]] = True
    kept_versions = sorted(str(v) for v in uniq[keep_u])
    return wmask, vmask, chosen, kept_versions


def first_per_group(keys: list[np.ndarray], order_keys: list[np.ndarray]) -> np.ndarray:
    """Boolean mask of the first element of each group of equal ``keys``.

    "First" is by ``order_keys`` (lexicographic, earlier keys more significant).
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort(tuple(reversed(keys + order_keys)))
    new = np.ones(n, dtype=bool)
    for k in keys:
        ks = k[order]
        new[1:] &= ks[1:] == ks[:-1]
    first_sorted = ~new
    first_sorted[0] = True
    out = np.zeros(n, dtype=bool)
    out[order] = first_sorted
    return out
