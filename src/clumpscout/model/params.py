"""The aggregation's hyper-parameters (:class:`Params`, config.yaml's ``aggregate:`` section)
and :func:`load_config`.

They live apart from the command line (:mod:`clumpscout.model.command`) so that the engine
(:mod:`clumpscout.model.em`, :mod:`clumpscout.model.aggregator`) imports them without importing
its own front end.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from clumpscout import config as _config
from clumpscout.errors import InputError

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
    # generative model: a leftover subject whose partition came back unchanged from a cycle
    # is not clustered again (it stays in the parameter steps; decisions.md#hold-unchanged)
    hold_unchanged: bool = _DEFAULTS["hold_unchanged"]
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
    if "aggregate" in data or any(isinstance(v, dict) for v in data.values()):
        # a workflow config: checked whole against the schema (a misspelled section or key
        # anywhere is an error, as in the workflow), then its aggregate section is used
        found = _config.problems(data)
        if found:
            raise _config.ConfigError(found, path=path)
        section = data["aggregate"]
    else:  # a flat file of aggregate settings (and perhaps the seed): every key is checked
        section = {k: v for k, v in data.items() if k != "seed"}
    return Params.from_dict(section, path=path), seed


def load_sections(path) -> dict:
    """A workflow config with its defaults filled in, or {} for a flat file of aggregate
    settings (the defaults then apply); :func:`load_config` reports its problems."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict) or not any(isinstance(v, dict) for v in data.values()):
        return {}
    _config.problems(data)  # fills the defaults; load_config has reported any problem
    return data
