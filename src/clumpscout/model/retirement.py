"""The working batch and subject retirement (paper §5.1 and §5.8; decisions.md#retirement, #batch-size).

* Before batching: a subject that ≥ ``min_volunteers_empty`` (5) volunteers saw
  and none marked a clump retires as empty without entering the batch; a
  subject enters the batch once ≥ ``min_volunteers_batch`` (3) volunteers saw it
  and ≥ 1 clump was marked (§5.1, decisions.md#retirement). Others wait (status ``unretired``).
  With ``final_classifications`` (default; our decision where the paper is silent,
  decisions.md#final-classifications) the classifications given are all there will be, as in every
  subsample Z̃_n: waiting for a fifth volunteer is then waiting forever, so a
  subject that ≥ ``min_volunteers_batch`` volunteers saw and none marked retires
  as empty too. The paper counts < 1% unretired subjects even at n = 3 (§6.4,
  fig. retirement_reason_fraction), which the literal rule cannot give (at n = 3
  every subject whose 3 volunteers marked nothing would stay unretired: ~27% of
  the default universe). ``final_classifications: false`` is decisions.md#retirement's live rule.
* The working batch (decisions.md#batch-size): the subjects left over from the last cycle plus
  new subjects, added in blocks (one subject's classifications at a time, in
  arrival order) until the batch holds at least ``min_batch_classifications``
  classifications; 0 puts every eligible subject in one batch.
* After a cycle (:func:`retire_mask`): retire when ``R_i < τ`` and
  ``N_fp < N_fp,max`` and ``N_fn < N_fn,max`` and ``N_σ < N_σ,max`` (decisions.md#retirement).
  Subjects processed in ``max_cycles`` cycles without retiring are stale:
  flagged for experts; their annotations update volunteer skills only if
  ``stale_updates_skills``. The rest stay for the next cycle, their
  difficulties and clusters re-initialised.
* Volunteer skills are cached at the start of each cycle; afterwards the cache
  is updated with the counts of the subjects that retired in it only
  (:class:`SkillCache`), so no annotation updates a skill twice.
"""

from __future__ import annotations

import numpy as np

from clumpscout.model.skills import SkillCounts

#: subject status codes (the status column of subjects.parquet)
RETIRED, RETIRED_EMPTY, STALE, UNRETIRED = 0, 1, 2, 3
STATUS_NAMES = np.array(["retired", "retired_empty", "stale", "unretired"], dtype=object)


def pre_batch_status(
    n_volunteers: np.ndarray,
    n_boxes: np.ndarray,
    min_volunteers_empty: int,
    min_volunteers_batch: int,
    final: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(retired_empty, eligible) masks per subject (§5.1, decisions.md#retirement).

    ``retired_empty``: ≥ min_volunteers_empty volunteers and no clump click (with
    ``final``: ≥ min(min_volunteers_empty, min_volunteers_batch) volunteers, see the
    module docstring); ``eligible``: ≥ min_volunteers_batch volunteers and ≥ 1 clump click.
    """
    n_volunteers = np.asarray(n_volunteers)
    n_boxes = np.asarray(n_boxes)
    need = min(min_volunteers_empty, min_volunteers_batch) if final else min_volunteers_empty
    empty = (n_boxes == 0) & (n_volunteers >= need)
    eligible = (n_boxes > 0) & (n_volunteers >= min_volunteers_batch)
    return empty, eligible


def retire_mask(n_fp, n_fn, n_sigma, risk, p) -> np.ndarray:
    """``R_i < τ`` and every N below its maximum (§5.8, decisions.md#retirement)."""
    return (
        (np.asarray(risk) < p.tau)
        & (np.asarray(n_fp) < p.n_fp_max)
        & (np.asarray(n_fn) < p.n_fn_max)
        & (np.asarray(n_sigma) < p.n_sigma_max)
    )


def fill_batch(
    leftovers: np.ndarray,
    queue: np.ndarray,
    start: int,
    n_classifications: np.ndarray,
    min_batch_classifications: int,
) -> tuple[np.ndarray, int]:
    """The next working batch: leftovers plus new subjects from ``queue[start:]`` (decisions.md#batch-size).

    New subjects are added one block (subject) at a time until the batch holds
    at least ``min_batch_classifications`` classifications; 0 adds the whole
    queue. At least one new subject is added when there are no leftovers.
    Returns (batch subjects, sorted; new queue position).
    """
    if min_batch_classifications <= 0:
        stop = len(queue)
    else:
        have = int(np.sum(n_classifications[leftovers]))
        need = min_batch_classifications - have
        stop = start if need <= 0 else _prefix_end(queue, start, n_classifications, need)
        if stop == start and len(leftovers) == 0 and start < len(queue):
            stop = start + 1
    batch = np.sort(np.concatenate([leftovers, queue[start:stop]]).astype(np.int64))
    return batch, stop


def _prefix_end(queue: np.ndarray, start: int, n_classifications: np.ndarray, need: int) -> int:
    """End of the shortest ``queue[start:end]`` whose classifications reach ``need`` (the
    queue's end if none does), looking at no more of the queue than about twice that prefix,
    so that a cycle's work does not grow with the queue left."""
    total, pos, step = 0, start, 1024
    while pos < len(queue):
        cum = total + np.cumsum(n_classifications[queue[pos : pos + step]])
        k = int(np.searchsorted(cum, need, side="left"))  # first prefix reaching `need`
        if k < len(cum):
            return pos + k + 1
        total, pos, step = int(cum[-1]), pos + len(cum), 2 * step
    return len(queue)


class SkillCache:
    """Volunteer evidence carried between cycles (§5.8, decisions.md#retirement).

    ``counts`` holds the sufficient statistics of every subject that has
    retired (plus stale ones if configured); a cycle estimates skills from
    ``counts + batch counts`` and, when it ends, only the counts of the
    subjects finalised in it are added (:meth:`commit`), i.e. the cached skills
    are restored and re-updated from the retired subjects only.
    """

    def __init__(self, n_volunteers: int, counts=None):
        self.counts = SkillCounts.zeros(n_volunteers) if counts is None else counts
        self.n_subjects = np.zeros(n_volunteers, dtype=np.int64)
        self.version = 0

    def commit(self, counts: SkillCounts, n_subjects: np.ndarray | None = None) -> None:
        self.counts = self.counts + counts
        if n_subjects is not None:
            self.n_subjects += n_subjects.astype(np.int64)
        self.version += 1
