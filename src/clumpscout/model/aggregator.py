"""The estimator: consensus labels from volunteers' boxes (paper §5, Fig. agg_algo).

The estimators follow the scikit-learn / crowd-kit convention, one class per model:
:class:`GenerativeAggregator` (the default model) and :class:`PaperAggregator` (the
paper's); :class:`Aggregator`, their base, runs the model that ``params.model`` (config
``aggregate.model``) names. Hyper-parameters go to the constructor, :meth:`Aggregator.fit`
takes the boxes table and returns the estimator with the fitted attributes ``labels_``,
``probas_`` (p_fp per label), ``subjects_``, ``volunteers_``, ``assignments_``, ``report_``
and ``loglik_history_``; :meth:`Aggregator.fit_predict` returns ``labels_``. A model is an
engine of :mod:`clumpscout.model.em` (:data:`clumpscout.model.em.ENGINES`).

What ``fit`` does:

1. :func:`clumpscout.model.prepare.prepare` validates the table and indexes it in
   canonical order (docs/decisions.md#determinism).
2. Subjects are sorted into pre-retired empty / eligible / waiting
   (:mod:`clumpscout.model.retirement`, docs/decisions.md#retirement) and eligible ones fill
   working batches (docs/decisions.md#batch-size).
3. Per batch, the EM of :mod:`clumpscout.model.em` clusters the boxes and estimates the
   model's parameters (docs/decisions.md#em-stopping); each iteration is logged.
4. Risks and retirement (:mod:`clumpscout.model.risk`, :mod:`clumpscout.model.retirement`).
   With all classifications available at once, a subject that does not retire stays in the
   working batch (re-initialised, with skills updated from the retired subjects) until it
   retires or goes stale; a cycle identical to the previous one (same subjects, no skill
   update) is not recomputed. The generative model holds the partition of a leftover whose
   partition came back unchanged (docs/decisions.md#hold-unchanged).
5. Run health (:mod:`clumpscout.model.health`): a loud warning when the result looks collapsed.

With ``per_tool=True`` (config ``aggregate.per_tool``) every (subject, tool) pair is
aggregated as a subject of its own, so boxes of different tools never merge, and labels
and subjects carry the ``tool`` column (docs/decisions.md#per-tool).

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

Memory (docs/decisions.md#aggregation-memory): given a Parquet path, ``fit`` reads the table
block by block into compact arrays and :meth:`AggregationResult.write` writes assignments
block by block from it again (:class:`Assignments`), so the table is never held whole.

Every random step takes a seed derived from ``seed``; the same input in any row order with
the same seed gives the same outputs (docs/decisions.md#determinism).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from clumpscout import __version__
from clumpscout.arrays import ranges
from clumpscout.data.gold import Gold
from clumpscout.errors import InputError
from clumpscout.io import (
    atomic_path,
    write_json,
    write_parquet,
    write_parquet_blocks,
    write_table_blocks,
)
from clumpscout.logs import timed
from clumpscout.model import gold_check, health
from clumpscout.model.calibration import CalibrationSettings, calibrate
from clumpscout.model.em import (
    ENGINES,
    Batch,
    Clustering,
    Engine,
    GenerativeEngine,
    Held,
    PaperEngine,
    make_engine,
)
from clumpscout.model.params import Params
from clumpscout.model.prepare import Prepared, prepare, split_by_tool
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
from clumpscout.model.source import BoxSource, ParquetSource, box_source, to_pandas

log = logging.getLogger(__name__)

#: the per-subject numbers of the risk that subjects.parquet reports
_SUBJECT_NUMBERS = ("n_fp", "n_fn", "n_sigma", "risk", "n_fn_init", "n_fn_coincidence", "n_fn_weak")


@dataclass
class AggregationResult:
    """The output tables (see the module docstring) plus a run report.

    The assignments table (one row per input row) is kept as :class:`Assignments`, one small
    code per row: ``assignments`` builds the DataFrame when it is asked for, :meth:`write`
    writes it block by block from the input without building it."""

    labels: pd.DataFrame
    subjects: pd.DataFrame
    volunteers: pd.DataFrame
    assignment_codes: Assignments
    report: dict
    params: Params
    seed: int

    @property
    def assignments(self) -> pd.DataFrame:
        """The assignments table (built on first use, then kept)."""
        return self.assignment_codes.frame()

    def clumps_table(self):
        """The labels as an astropy Table with units and the hyper-parameters in ``meta``."""
        import astropy.units as u
        from astropy.table import Table

        t = Table.from_pandas(self.labels.reset_index(drop=True))
        for c in ("x1", "y1", "x2", "y2", "x", "y"):
            t[c].unit = u.pix
        for c in ("p_fp", "p_empty", "p_weak", "p_sigma", "frac_unusual", "sigma2", "difficulty"):
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

    def write(
        self,
        out_dir,
        outputs: Iterable[str] | None = None,
        assignment_columns: Iterable[str] | None = None,
    ) -> None:
        """Write labels, subjects, volunteers, assignments (Parquet), clumps.ecsv and
        report.json into ``out_dir``; ``outputs``: only these of :data:`OUTPUTS` (a workflow
        rule asks for the files something reads; None: all); ``assignment_columns``: the
        input columns the assignments table keeps (None: all;
        docs/decisions.md#outputs-someone-reads)."""
        wanted = set(OUTPUTS if outputs is None else outputs)
        unknown = wanted - set(OUTPUTS)
        if unknown:
            raise ValueError(f"unknown output(s) {sorted(unknown)}; known: {', '.join(OUTPUTS)}")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tables = {"labels": self.labels, "subjects": self.subjects, "volunteers": self.volunteers}
        for name, df in tables.items():
            if f"{name}.parquet" in wanted:
                with timed(f"writing {name}.parquet"):
                    write_parquet(df, out / f"{name}.parquet")
        if "assignments.parquet" in wanted:
            with timed("writing assignments.parquet"):
                self.assignment_codes.write(out / "assignments.parquet", assignment_columns)
        if "clumps.ecsv" in wanted:
            from clumpscout.ecsv import write_ecsv

            with timed("writing clumps.ecsv"), atomic_path(out / "clumps.ecsv") as tmp:
                write_ecsv(self.clumps_table(), tmp)
        if "report.json" in wanted:
            write_json(self.report, out / "report.json")


#: the files :meth:`AggregationResult.write` writes (all of them by default)
OUTPUTS = (
    "labels.parquet",
    "subjects.parquet",
    "volunteers.parquet",
    "assignments.parquet",
    "clumps.ecsv",
    "report.json",
)


#: row codes of :class:`Assignments` below the clump indices
_DUMMY, _NO_BOX, _NOT_AGGREGATED = -1, -2, -3


@dataclass
class Assignments:
    """The assignments table as one code per input row: the clump index (≥ 0), −1 the dummy,
    −2 a row without a box, −3 a box that was not aggregated.

    :meth:`frame` is the table (every input row, in input order, plus ``cluster`` and
    ``assignment``, see the module docstring); :meth:`write` writes the same table one
    block of the input at a time (:mod:`clumpscout.model.source`), so a project's
    assignments never need to fit in memory."""

    source: BoxSource
    codes: np.ndarray
    _frame: pd.DataFrame | None = None

    def _block(self, start: int, df: pd.DataFrame) -> pd.DataFrame:
        code = self.codes[start : start + len(df)]
        out = df.reset_index(drop=True)  # a new frame (copy on write): the input is unchanged
        kind = np.full(len(df), "empty", dtype=object)
        kind[code >= 0] = "clump"
        kind[code == _DUMMY] = "dummy"
        kind[code == _NOT_AGGREGATED] = "not_aggregated"
        out["cluster"] = pd.array(np.where(code >= _DUMMY, code, 0).astype(np.int64), dtype="Int64")
        out.loc[code < _DUMMY, "cluster"] = pd.NA
        out["assignment"] = kind
        return out

    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = self._block(0, self.source.frame())
        return self._frame

    def write(self, path, columns: Iterable[str] | None = None) -> None:
        """Write the table to Parquet atomically, one input block at a time (the bytes of
        :func:`clumpscout.io.write_parquet` on :meth:`frame`, or on its ``columns`` of the
        input, in the input's order, then ``cluster`` and ``assignment``; None: every input
        column). A Parquet input is copied block by block as Arrow tables, the two columns
        appended (:meth:`_arrow_schema`): no conversion to pandas and back."""
        cols = self._input_columns(columns)
        if self._frame is not None:
            frame = self._frame if cols is None else self._frame[[*cols, "cluster", "assignment"]]
            write_parquet(frame, path)
            return
        schema = self._arrow_schema(cols)
        if schema is None:
            blocks = self.source.blocks(cols)
            write_parquet_blocks((self._block(i, df) for i, df in blocks), path)
            return
        tables = self.source.tables(cols)
        write_table_blocks((self._arrow_block(i, t, schema) for i, t in tables), path)

    def _input_columns(self, columns: Iterable[str] | None) -> list[str] | None:
        """``columns`` in the input's order (None: all); a name the input lacks is an error."""
        if columns is None:
            return None
        wanted = set(columns)
        missing = sorted(wanted - set(self.source.columns))
        if missing:
            raise ValueError(f"assignments: the boxes table has no column(s) {missing}")
        return [c for c in self.source.columns if c in wanted]

    def _arrow_schema(self, columns: list[str] | None = None):
        """The output's Arrow schema (types and pandas metadata) exactly as
        :meth:`write`'s pandas path makes it, from the first input row; None where the
        Arrow path cannot promise the same bytes (a DataFrame input, no rows, an object
        column whose type pandas infers from its values, or an input column named
        ``cluster`` or ``assignment``)."""
        import pyarrow as pa

        if not isinstance(self.source, ParquetSource) or self.source.n_rows == 0:
            return None
        if {"cluster", "assignment"} & set(self.source.columns):
            return None
        first = next(iter(self.source.tables(columns, rows=1)))[1]
        df = self._block(0, to_pandas(first))
        if any(pd.api.types.is_object_dtype(t) for t in df.drop(columns="assignment").dtypes):
            return None
        return pa.Table.from_pandas(df, preserve_index=False).schema

    def _arrow_block(self, start: int, table, schema):
        """One input block as an Arrow table with ``cluster`` and ``assignment`` appended,
        cast to the output ``schema``."""
        import pyarrow as pa

        code = self.codes[start : start + table.num_rows]
        cluster = pa.array(np.where(code >= _DUMMY, code, 0).astype(np.int64), mask=code < _DUMMY)
        kind = np.select([code >= 0, code == _DUMMY, code == _NOT_AGGREGATED], [0, 1, 3], 2)
        names = pa.array(["clump", "dummy", "empty", "not_aggregated"], pa.large_string())
        table = table.append_column("cluster", cluster)
        table = table.append_column("assignment", names.take(pa.array(kind.astype(np.int8))))
        return table.cast(schema)


class Aggregator:
    """Consensus labels from volunteers' boxes, as an estimator (scikit-learn / crowd-kit style).

    The model is the one ``params.model`` names; :class:`GenerativeAggregator` and
    :class:`PaperAggregator` fix it.

    Parameters
    ----------
    params : Params, dict or None
        The hyper-parameters (config.yaml's ``aggregate:`` section); a dict goes through
        :meth:`Params.from_dict`, None means the defaults.
    seed : int
        Master seed of every random step.
    per_tool : bool or None
        Aggregate every (subject, tool) pair separately, so that boxes of different tools
        never merge; labels and subjects then carry the ``tool`` column
        (docs/decisions.md#per-tool). None: ``params.per_tool`` (config
        ``aggregate.per_tool``) if Params has that field, else False.

    Attributes (after :meth:`fit`)
    ------------------------------
    labels_, subjects_, volunteers_, assignments_ : pandas.DataFrame
        The output tables (:mod:`clumpscout.model.aggregator` describes their columns).
    probas_ : pandas.Series
        p_fp, the probability that a label is false, indexed by the label's subject_id (and
        tool, per tool) and clump.
    report_ : dict
        The run report (report.json).
    loglik_history_ : list of float
        The EM log-likelihood of every iteration, cycle after cycle (each cycle's
        iterations are in ``report_["cycles"][k]["em"]``).
    result_ : AggregationResult
        The tables and report together; :meth:`write` writes them.

    Examples
    --------
    Three volunteers draw nearly the same box on one subject, and a fourth views it
    without marking anything; the boxes become one label whose corners are the mean of
    theirs (x1 = (10 + 11 + 12) / 3 = 11, x2 = (30 + 31 + 32) / 3 = 31):

    >>> import numpy as np, pandas as pd
    >>> from clumpscout.model.aggregator import Aggregator
    >>> boxes = pd.DataFrame({
    ...     "classification_id": [1, 2, 3, 4],
    ...     "subject_id": 100,
    ...     "volunteer": ["ann", "bob", "cat", "dan"],
    ...     "x1": [10.0, 11.0, 12.0, np.nan], "y1": [20.0, 20.0, 20.0, np.nan],
    ...     "x2": [30.0, 31.0, 32.0, np.nan], "y2": [40.0, 40.0, 40.0, np.nan],
    ...     "image_width": 100.0, "image_height": 100.0,
    ... })
    >>> agg = Aggregator(seed=0).fit(boxes)
    >>> agg.labels_[["subject_id", "clump", "x1", "y1", "x2", "y2", "n_marks"]]
       subject_id  clump    x1    y1    x2    y2  n_marks
    0         100      0  11.0  20.0  31.0  40.0        3
    >>> agg.assignments_["assignment"].tolist()
    ['clump', 'clump', 'clump', 'empty']
    >>> len(agg.loglik_history_) >= 1
    True
    >>> agg.fit_predict(boxes).equals(agg.labels_)
    True
    >>> agg.probas_.index.names
    FrozenList(['subject_id', 'clump'])
    """

    #: the engine of the estimator's model (None: the one ``params.model`` names)
    engine: ClassVar[type[Engine] | None] = None

    def __init__(
        self,
        params: Params | dict | None = None,
        seed: int = 0,
        *,
        per_tool: bool | None = None,
        calibration: CalibrationSettings | dict | None = None,
    ):
        if isinstance(params, dict) or params is None:
            params = Params.from_dict(params)
        if self.engine is not None and params.model != self.engine.name:
            params = replace(params, model=self.engine.name)
        self.params = params
        self.seed = int(seed)
        if per_tool is None:  # the setting, once Params carries aggregate.per_tool
            per_tool = getattr(params, "per_tool", False)
        self.per_tool = bool(per_tool)
        if isinstance(calibration, dict) or calibration is None:
            calibration = CalibrationSettings(**{"seed": self.seed, **(calibration or {})})
        self.calibration = calibration

    def fit(self, boxes, gold: Gold | None = None, *, path=None) -> Aggregator:
        """Aggregate the boxes table; ``path`` (the table's file) only names it in errors.

        ``boxes``: a DataFrame, or the path of a Parquet file, which is then read and written
        back (assignments) one block at a time, never whole (:mod:`clumpscout.model.source`);
        both give the same outputs. ``gold`` (:func:`clumpscout.data.gold.read_gold`): the
        project's gold standard, on which p_fp is calibrated
        (:mod:`clumpscout.model.calibration`); without it the generative model's labels get
        the default map (docs/decisions.md#no-gold-default) and the paper's model keeps its
        own p_fp (the reproduction).
        """
        src = box_source(boxes, path)
        path = path if path is not None else src.path
        markers = None
        if self.per_tool:
            if gold is not None:
                raise InputError(
                    "a gold standard with per-tool aggregation is not supported: aggregate "
                    "the tool the experts marked on its own (extract.tools)",
                    gold.path,
                )
            result = _fit_per_tool(src.frame(), self.params, self.seed, path)
        else:
            result, markers = _fit(src, self.params, self.seed, path, markers=gold is not None)
        if gold is not None or ENGINES[self.params.model].default_calibration:
            p = self.params
            settings = replace(
                self.calibration, risk_weights=(p.alpha_fp, p.alpha_fn, p.alpha_sigma)
            )
            result = _calibrated(result, gold, settings, markers)
        self.result_ = result
        self.labels_ = result.labels
        keys = [c for c in ("subject_id", "tool", "clump") if c in result.labels.columns]
        self.probas_ = result.labels.set_index(keys)["p_fp"]
        self.subjects_ = result.subjects
        self.volunteers_ = result.volunteers
        self.report_ = result.report
        self.loglik_history_ = [
            float(it["log_likelihood"]) for c in result.report["cycles"] for it in c["em"]
        ]
        return self

    @property
    def assignments_(self) -> pd.DataFrame:
        """The assignments table (built from the input on first use)."""
        return self.result_.assignments

    def fit_predict(self, boxes, gold: Gold | None = None, *, path=None) -> pd.DataFrame:
        """:meth:`fit`, then the labels table ``labels_``."""
        return self.fit(boxes, gold, path=path).labels_

    def write(
        self,
        out_dir,
        outputs: Iterable[str] | None = None,
        assignment_columns: Iterable[str] | None = None,
    ) -> None:
        """Write the fitted tables and report (:meth:`AggregationResult.write`; ``outputs``:
        only these files; ``assignment_columns``: the input columns the assignments keep)."""
        self.result_.write(out_dir, outputs, assignment_columns)


class GenerativeAggregator(Aggregator):
    """The generative model (``model: generative``, the default;
    docs/decisions.md#generative-model): false boxes are a Poisson count per classification
    thrown over the whole image and true boxes scatter around their object, so boxes of
    independent volunteers that coincide are strong evidence; the population's parameters
    are learned from the data (empirical Bayes). Its p_fp is mapped to what the project
    counts: with the gold standard given to :meth:`fit`, else the default map
    (docs/decisions.md#no-gold-default).

    Parameters and attributes: :class:`Aggregator` (``params.model`` is ignored)."""

    engine = GenerativeEngine


class PaperAggregator(Aggregator):
    """The paper's model as published (``model: paper``; eq. anno_model, joint_model), kept
    for the reproduction, with the authors' EM stopping rule by default
    (docs/decisions.md#paper-model). Its p_fp is the model's own unless a gold standard is
    given to :meth:`fit`.

    Parameters and attributes: :class:`Aggregator` (``params.model`` is ignored)."""

    engine = PaperEngine


def aggregate(
    boxes,
    params: Params | dict | None = None,
    seed: int = 0,
    *,
    per_tool: bool | None = None,
    gold: Gold | None = None,
    calibration: CalibrationSettings | dict | None = None,
) -> AggregationResult:
    """Functional form of :class:`Aggregator`: the tables of ``Aggregator(...).fit(boxes)``."""
    agg = Aggregator(params, seed, per_tool=per_tool, calibration=calibration)
    return agg.fit(boxes, gold=gold).result_


def _calibrated(
    result: AggregationResult,
    gold: Gold | None,
    settings: CalibrationSettings,
    markers: pd.DataFrame | None = None,
) -> AggregationResult:
    """The result with p_fp calibrated (:func:`clumpscout.model.calibration.calibrate`);
    ``markers``: the assignments' clump rows (:func:`_markers`) the gold-standard fit reads.
    A gold standard is checked against the volunteers first (:mod:`clumpscout.model.gold_check`:
    an implausible one stops the run, or warns)."""
    t0, c0 = time.perf_counter(), time.process_time()
    checked = None if gold is None else gold_check.check_gold(result.labels, result.subjects, gold)
    labels, subjects, report = calibrate(result.labels, result.subjects, gold, settings, markers)
    if checked is not None:
        report["gold_check"] = checked
    report["seconds"] = round(time.perf_counter() - t0, 3)
    log.info(
        "calibration (%s): %d labels, p_fp < 0.5 on %d, done in %.2f s (CPU %.2f s)",
        report["method"],
        len(labels),
        int((labels["p_fp"] < 0.5).sum()),
        report["seconds"],
        time.process_time() - c0,
    )
    out = dict(result.report, calibration=report)
    if checked is not None and checked["warnings"]:
        out["warnings"] = [*result.report.get("warnings", []), *checked["warnings"]]
    return replace(result, labels=labels, subjects=subjects, report=out)


# ------------------------------------------------------------- one aggregation


@dataclass
class _Progress:
    """What the cycles have decided so far, per subject and per box."""

    status: np.ndarray
    cycles: np.ndarray
    batch_no: np.ndarray
    numbers: dict[str, np.ndarray]  # _SUBJECT_NUMBERS of the subject's final cycle
    n_clumps: np.ndarray
    box_assign: np.ndarray  # −3 not aggregated, −1 dummy, ≥0 clump (int32)
    label_parts: list[pd.DataFrame]  # the labels of the subjects each cycle finalised
    batch_reports: list[dict]
    # the partitions of the last cycle, when subjects may be held (decisions.md#hold-unchanged):
    # each box's facility as a global box index (−1 dummy, −2 none yet), and per subject
    # whether its last cycle's partition equalled the one before
    facility: np.ndarray | None = None
    unchanged: np.ndarray | None = None

    @classmethod
    def start(cls, prep: Prepared, empty: np.ndarray) -> _Progress:
        n_s = len(prep.subject_ids)
        status = np.full(n_s, UNRETIRED, np.int64)
        status[empty] = RETIRED_EMPTY
        numbers = {k: np.full(n_s, np.nan) for k in _SUBJECT_NUMBERS}
        numbers["n_fp"][empty] = 0.0
        numbers["n_sigma"][empty] = 0.0
        return cls(
            status=status,
            cycles=np.zeros(n_s, np.int64),
            batch_no=np.full(n_s, -1, np.int64),
            numbers=numbers,
            n_clumps=np.zeros(n_s, np.int64),
            box_assign=np.full(len(prep.box_row), _NOT_AGGREGATED, np.int32),
            label_parts=[],
            batch_reports=[],
        )


def _fit(
    boxes, p: Params, seed: int, path=None, *, markers: bool = False
) -> tuple[AggregationResult, pd.DataFrame | None]:
    """One aggregation of the boxes table (the module docstring's steps 1-5); with
    ``markers``, also the assignments' clump rows the gold-standard calibration reads."""
    t_start = time.perf_counter()
    src = box_source(boxes, path)
    with timed(f"preparing {src.n_rows:,} rows"):
        prep = prepare(src, path=path)
    engine = make_engine(prep, p, seed)
    empty, eligible = pre_batch_status(
        prep.subj_n_vol,
        prep.subj_n_boxes,
        p.min_volunteers_empty,
        p.min_volunteers_batch,
        final=p.final_classifications,
    )
    prog = _Progress.start(prep, empty)
    if engine.holds_unchanged:
        prog.facility = np.full(len(prep.box_row), -2, np.int64)
        prog.unchanged = np.zeros(len(prep.subject_ids), bool)
    cache = SkillCache(len(prep.volunteer_names), engine.empty_counts())
    with timed("cycles"):
        _run_cycles(engine, prep, p, _queue(prep, p, empty, eligible), prog, cache)

    labels = _final_labels(prog.label_parts)
    prog.label_parts = []
    idx = np.flatnonzero(empty)
    misses = engine.empty_subject_misses(idx, cache.counts) if len(idx) else None
    if misses is not None:
        # nobody marked anything: the objects everyone missed are all that can be there
        strong, weak = misses
        prog.numbers["n_fn"][idx] = strong
        prog.numbers["n_fn_weak"][idx] = weak
        prog.numbers["risk"][idx] = p.alpha_fn * strong
    volunteers = _volunteers_frame(engine, prep, cache)
    subjects = _subjects_frame(prep, prog)
    report = _report(prep, p, seed, engine, prog, labels)
    with timed("checking the run's health"):
        diag = _health(prep, prog.box_assign, prog.batch_no, labels)
    health.log_warnings(diag, log)
    report["health"] = diag
    report["warnings"] = list(diag["warnings"])
    clump_rows = _markers(prep, prog.box_assign) if markers else None
    codes = _row_codes(prep.n_rows, prep.box_row, prog.box_assign)
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    log.info(
        "aggregated %d subjects (%s) into %d label clumps in %.1f s",
        len(prep.subject_ids),
        ", ".join(f"{k} {v}" for k, v in report["status_counts"].items()),
        len(labels),
        report["seconds"],
    )
    result = AggregationResult(
        labels, subjects, volunteers, Assignments(src, codes), report, p, seed
    )
    return result, clump_rows


def _row_codes(n_rows: int, box_row: np.ndarray, box_assign: np.ndarray) -> np.ndarray:
    """:class:`Assignments` codes per input row from the boxes' assignments."""
    codes = np.full(n_rows, _NO_BOX, np.int32)
    codes[box_row] = box_assign
    return codes


def _markers(prep: Prepared, box_assign: np.ndarray) -> pd.DataFrame:
    """The assignments table's clump rows, in input order, with the columns the calibration
    reads (subject_id, volunteer, cluster, assignment); a volunteer is a code (NaN: a row
    without a name, which the calibration does not group, as in the full table)."""
    clump = np.flatnonzero(box_assign >= 0)
    clump = clump[np.argsort(prep.box_row[clump], kind="stable")]
    vol = prep.box_vol[clump].astype(np.float64)
    vol[prep.vol_nameless[prep.box_vol[clump]]] = np.nan
    return pd.DataFrame(
        {
            "subject_id": prep.subject_ids[prep.box_subject_of(clump)],
            "volunteer": vol,
            "cluster": pd.array(box_assign[clump].astype(np.int64), dtype="Int64"),
            "assignment": pd.Categorical.from_codes(np.zeros(len(clump), np.int8), ["clump"]),
        }
    )


#: boxes per block of the health check
_HEALTH_BLOCK = 1 << 20


def _health(prep: Prepared, box_assign, batch_no, labels: pd.DataFrame) -> dict:
    """:func:`clumpscout.model.health.diagnose` of the assignments table, read from the
    prepared arrays block by block (boxes are sorted by subject, then volunteer)."""
    n_box = len(box_assign)
    agg_subj = np.flatnonzero(batch_no >= 0)  # every box of a subject that entered a batch

    def blocks():
        off = prep.subj_box_off
        start = 0
        while start < len(agg_subj):
            stop = int(np.searchsorted(off[agg_subj + 1], off[agg_subj[start]] + _HEALTH_BLOCK))
            stop = max(stop, start + 1)
            subj = agg_subj[start:stop]
            idx = ranges(off[subj], off[subj + 1])
            local = np.repeat(np.arange(start, stop, dtype=np.int64), prep.subj_n_boxes[subj])
            yield prep.box_px[idx], prep.box_vol[idx].astype(np.int64), local
            start = stop

    counts = {
        "boxes": int((box_assign >= _DUMMY).sum()),
        "boxes_on_dummy": int((box_assign == _DUMMY).sum()),
        "boxes_not_aggregated": int((box_assign == _NOT_AGGREGATED).sum()),
        "empty_rows": int(prep.n_rows - n_box),
    }
    return health.diagnose_blocks(blocks(), prep.subject_ids[agg_subj], counts, labels)


def _queue(prep: Prepared, p: Params, empty: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """The eligible subjects in arrival order (subject_id breaks ties)."""
    n_s = len(prep.subject_ids)
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
    return queue


def _run_cycles(
    engine: Engine,
    prep: Prepared,
    p: Params,
    queue: np.ndarray,
    prog: _Progress,
    cache: SkillCache,
) -> None:
    """Working batches until every eligible subject has retired or gone stale (§5.1, §5.8)."""
    pos = 0
    leftovers = np.zeros(0, np.int64)
    cycle = 0
    memo = None  # (batch subjects, cache version) -> (clustering, risk) of the last cycle
    while pos < len(queue) or len(leftovers):
        batch_subj, pos = fill_batch(
            leftovers, queue, pos, prep.subj_n_vol, p.min_batch_classifications
        )
        tag = f"cycle {cycle + 1}"
        b = Batch.build(prep, batch_subj)
        held = _held(prep, b, prog)
        t0 = time.perf_counter()
        key = (batch_subj.tobytes(), cache.version)
        if memo is not None and memo[0] == key:
            state, rk, history = memo[1], memo[2], []
            log.info("%s: same batch and skills as the last cycle, result reused", tag)
        else:
            log.info(
                "%s: working batch of %d subjects (%d new, %d held), %d annotations, %d boxes",
                tag,
                len(batch_subj),
                len(batch_subj) - len(leftovers),
                0 if held is None else int(held.subjects.sum()),
                len(b.cls_idx),
                len(b.box_idx),
            )
            state, history = engine.em(b, cache.counts, tag, held)
            rk = engine.risk(b, state, cycle)
            memo = (key, state, rk)
        final = _record_cycle(engine, prep, p, b, state, rk, cycle, prog, cache)
        _remember_partitions(b, state, prog)
        prog.batch_reports[-1].update(
            {
                "held": 0 if held is None else int(held.subjects.sum()),
                "em": history,
                "coincidence_retained": int(rk["n_retained"]),
            }
        )
        prog.batch_reports[-1]["seconds"] = round(time.perf_counter() - t0, 3)
        log.info(
            "%s: %d retired, %d stale, %d left for the next cycle (%.1f s)",
            tag,
            prog.batch_reports[-1]["retired"],
            prog.batch_reports[-1]["stale"],
            int((~final).sum()),
            time.perf_counter() - t0,
        )
        leftovers = batch_subj[~final]
        cycle += 1


def _held(prep: Prepared, b: Batch, prog: _Progress) -> Held | None:
    """The batch's subjects whose partition is held in this cycle: the leftovers whose last
    cycle gave the partition of the cycle before (decisions.md#hold-unchanged); None when
    subjects are not held."""
    if prog.unchanged is None:
        return None
    subjects = prog.unchanged[b.subjects]
    if not subjects.any():
        return None
    g = prog.facility[b.box_idx]  # a box's facility is a box of its own subject: same offset
    rows = np.arange(len(b.box_idx), dtype=np.int64)
    return Held.build(prep, b, subjects, np.where(g >= 0, rows + (g - b.box_idx), g))


def _remember_partitions(b: Batch, state: Clustering, prog: _Progress) -> None:
    """Store the cycle's partitions (facilities as global box indices) and whether each
    subject's equals its partition of the last cycle."""
    if prog.unchanged is None:
        return
    fac = state.facility_of
    g = np.where(fac >= 0, b.box_idx[np.maximum(fac, 0)], fac)
    moved = prog.facility[b.box_idx] != g
    n_moved = np.bincount(b.box_subject, weights=moved, minlength=len(b.subjects))
    prog.unchanged[b.subjects] = (n_moved == 0) & (prog.cycles[b.subjects] >= 2)
    prog.facility[b.box_idx] = g


def _record_cycle(
    engine: Engine,
    prep: Prepared,
    p: Params,
    b: Batch,
    state: Clustering,
    rk: dict,
    cycle: int,
    prog: _Progress,
    cache: SkillCache,
) -> np.ndarray:
    """Retire what the cycle's risks allow, record its labels and assignments, commit the
    finalised subjects' skill evidence; the batch's finalised-subject mask."""
    batch_subj = b.subjects
    prog.cycles[batch_subj] += 1
    prog.batch_no[batch_subj] = cycle
    retire = retire_mask(rk["n_fp"], rk["n_fn"], rk["n_sigma"], rk["risk"], p)
    stale = ~retire & (prog.cycles[batch_subj] >= p.max_cycles)
    final = retire | stale
    prog.status[batch_subj[retire]] = RETIRED
    prog.status[batch_subj[stale]] = STALE
    for k, v in prog.numbers.items():
        if k in rk:
            v[batch_subj[final]] = rk[k][final]
    prog.n_clumps[batch_subj] = state.n_clusters_subject
    clump_in_subj = _clump_index_in_subject(state)
    ba = np.full(len(state.box_cluster), -1, np.int64)
    tp = state.box_cluster >= 0
    ba[tp] = clump_in_subj[state.box_cluster[tp]]
    # every box takes its latest clustering (an unfinished subject's is overwritten later)
    prog.box_assign[b.box_idx] = ba
    part = _labels_frame(prep, b, state, rk, final, clump_in_subj)
    prog.label_parts.append(part[part["final"].to_numpy()])
    # skills: restore the cache and update it with the finalised subjects only
    upd = retire | (stale & p.stale_updates_skills)
    if upd.any():
        w = upd[b.cls_subject].astype(np.float64)
        counts = engine.counts_for(b, state, w)
        n_subj_vol = np.bincount(b.cls_vol, weights=w, minlength=len(prep.volunteer_names))
        cache.commit(counts, n_subj_vol)
    prog.batch_reports.append(
        {
            "cycle": cycle + 1,
            "subjects": int(len(batch_subj)),
            "annotations": int(len(b.cls_idx)),
            "boxes": int(len(b.box_idx)),
            "retired": int(retire.sum()),
            "stale": int(stale.sum()),
            "left_over": int((~final).sum()),
        }
    )
    return final


# ------------------------------------------------------------- the output tables


def _clump_index_in_subject(s: Clustering) -> np.ndarray:
    """0..K_i−1 within each subject (clusters are sorted by subject)."""
    n_cl = len(s.cluster_subject)
    if n_cl == 0:
        return np.zeros(0, np.int64)
    first = np.concatenate([[0], np.cumsum(s.n_clusters_subject)[:-1]])
    return np.arange(n_cl, dtype=np.int64) - first[s.cluster_subject]


def _labels_frame(prep, b, state, rk, final, clump_in_subj) -> pd.DataFrame:
    """One cycle's labels (subject px), with ``final``: the subject finished in this cycle."""
    gs = b.subjects[state.cluster_subject]
    n_cl = len(state.cluster_subject)
    tp = state.box_cluster >= 0
    n_marks = np.bincount(state.box_cluster[tp], minlength=n_cl)
    unus = np.bincount(
        state.box_cluster[tp],
        weights=prep.box_unusual[b.box_idx[tp]].astype(float),
        minlength=n_cl,
    )
    return pd.DataFrame(
        {
            "subject_id": prep.subject_ids[gs],
            "clump": clump_in_subj,
            **prep.boxes_px(gs, state.labels),
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


def _empty_labels() -> pd.DataFrame:
    cols = [
        "subject_id", "clump", "x1", "y1", "x2", "y2", "x", "y", "p_fp", "p_sigma",
        "n_marks", "frac_unusual", "sigma2", "difficulty", "p_weak", "final",
    ]  # fmt: skip
    return pd.DataFrame({c: pd.Series(dtype=bool if c == "final" else float) for c in cols})


def _final_labels(label_parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Each subject's labels from its final cycle only, sorted by (subject_id, clump)."""
    labels = pd.concat(label_parts, ignore_index=True) if label_parts else _empty_labels()
    labels = labels[labels["final"]].drop(columns="final")
    return labels.sort_values(["subject_id", "clump"], kind="stable").reset_index(drop=True)


def _volunteers_frame(engine: Engine, prep: Prepared, cache: SkillCache) -> pd.DataFrame:
    vt = engine.volunteer_table(cache.counts)
    return pd.DataFrame(
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


def _subjects_frame(prep: Prepared, prog: _Progress) -> pd.DataFrame:
    num = prog.numbers
    return pd.DataFrame(
        {
            "subject_id": prep.subject_ids,
            "n_volunteers": prep.subj_n_vol.astype(np.int64),
            "n_clumps": prog.n_clumps,
            "n_fp": num["n_fp"],
            "n_fn": num["n_fn"],
            "n_sigma": num["n_sigma"],
            "risk": num["risk"],
            "status": pd.Categorical.from_codes(prog.status, categories=list(STATUS_NAMES)).astype(
                str
            ),
            "cycles": prog.cycles,
            "n_boxes": prep.subj_n_boxes.astype(np.int64),
            "n_fn_init": num["n_fn_init"],
            "n_fn_coincidence": num["n_fn_coincidence"],
            "batch": prog.batch_no,
            # Σ (1 − p_fp) over the labels + N_fn: the expected number of real objects
            "expected_count": prog.n_clumps
            - num["n_fp"]
            + num["n_fn"]
            + np.nan_to_num(num["n_fn_weak"]),
            # generative model: expected weak objects (faint features) no label holds
            "n_fn_weak": num["n_fn_weak"],
        }
    )


def _report(prep, p: Params, seed: int, engine: Engine, prog: _Progress, labels) -> dict:
    """report.json without the health check and the total time."""
    status_counts = {
        str(k): int(v)
        for k, v in zip(*np.unique(STATUS_NAMES[prog.status], return_counts=True), strict=True)
    }
    report = dict(prep.report)
    report.update(
        {
            "seed": seed,
            "params": p.to_dict(),
            "status_counts": status_counts,
            "labels": int(len(labels)),
            "boxes_on_dummy": int((prog.box_assign == -1).sum()),
            "boxes_not_aggregated": int((prog.box_assign == -3).sum()),
            "cycles": prog.batch_reports,
            "model": {"name": engine.name, "em_stop": engine.em_stop_rule, **engine.summary()},
        }
    )
    return report


# ------------------------------------------------------------- per-tool aggregation


def _fit_per_tool(boxes: pd.DataFrame, p: Params, seed: int, path=None) -> AggregationResult:
    """One aggregation over the (subject, tool) units of :func:`split_by_tool`, mapped back
    to subjects and input rows (docs/decisions.md#per-tool).

    The units share the volunteers' skills (one EM); labels and subjects gain the ``tool``
    column after subject_id; the volunteers' n_subjects and n_classifications count real
    subjects and classifications (n_subjects_counted counts units); assignments keep the
    input's rows, each box with the clump index within its (subject, tool) unit.
    """
    orig = prepare(boxes, path=path)  # input errors name the input's rows
    frame, units = split_by_tool(boxes, path=path)
    log.info(
        "per-tool aggregation: %d subjects x %d tools = %d units",
        len(orig.subject_ids),
        units["tool"].nunique(dropna=False),
        len(units),
    )
    r, _ = _fit(frame, p, seed, path)

    def with_tool(t: pd.DataFrame) -> pd.DataFrame:
        u = units.iloc[t["subject_id"].to_numpy()]
        t = t.copy()
        t["subject_id"] = u["subject_id"].to_numpy()
        t.insert(1, "tool", u["tool"].to_numpy())
        return t

    volunteers = r.volunteers.copy()
    if not np.array_equal(volunteers["volunteer"].to_numpy(), orig.volunteer_names):
        raise AssertionError("per-tool units changed the volunteers")  # split_by_tool keeps all
    volunteers["n_subjects"] = orig.vol_n_subjects.astype(np.int64)
    volunteers["n_classifications"] = orig.vol_n_classifications.astype(np.int64)

    # each input box is in exactly one unit: its assignment there
    a = r.assignments
    mine = a["_row"].to_numpy() >= 0
    row_assign = np.full(orig.n_rows, -3, np.int64)
    kind = a["assignment"].to_numpy()[mine]
    cl = a["cluster"].to_numpy(dtype=np.float64, na_value=np.nan)[mine]
    row_assign[a["_row"].to_numpy()[mine]] = np.where(
        kind == "not_aggregated", -3, np.nan_to_num(cl, nan=-3).astype(np.int64)
    )
    codes = _row_codes(orig.n_rows, orig.box_row, row_assign[orig.box_row])
    assignments = Assignments(box_source(boxes, path), codes)

    report = dict(r.report)
    report["per_tool"] = {
        "input_rows": orig.n_rows,
        "subjects": int(len(orig.subject_ids)),
        "tools": [None if pd.isna(t) else str(t) for t in units["tool"].unique()],
        "units": int(len(units)),
    }
    return AggregationResult(
        with_tool(r.labels), with_tool(r.subjects), volunteers, assignments, report, p, seed
    )
