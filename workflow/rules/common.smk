import hashlib
import importlib.util
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate


def check_config(cfg):
    """Validate the config; a bad key or value is reported in one line per problem
    (snakemake's own message appends the whole schema)."""
    import jsonschema
    import yaml

    schema_path = (
        Path(workflow.current_basedir).parent / "schemas" / "config.schema.yaml"
    )
    schema = yaml.safe_load(schema_path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: [str(p) for p in e.path])
    if errors:
        lines = [
            f"  {'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
            for e in errors[:20]
        ]
        raise WorkflowError(
            f"invalid config ({len(errors)} problem(s); the schema is {schema_path}):\n"
            + "\n".join(lines)
        )
    validate(cfg, schema="../schemas/config.schema.yaml")


check_config(config)

SRC = Path(workflow.basedir) / "src" / "clumpscout"
# loaded from the project's own source (the workflow needs no installed package for this)
_spec = importlib.util.spec_from_file_location("_codedeps", SRC / "codedeps.py")
_codedeps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_codedeps)
_code_digest = _codedeps.code_digest
RESULTS = "results"


def code_digest(script):
    """Digest of scripts/<script>.py and every package file it runs (found from its imports,
    lazy ones included, by clumpscout.codedeps). Passed as a param so that editing any of
    that code re-runs the rule, and nothing else does."""
    root = Path(workflow.basedir)
    return _code_digest(root / "scripts" / f"{script}.py", SRC.parent, root)


def section(name):
    """A config section as a plain dict (empty if absent)."""
    return dict(config.get(name) or {})


def seed_for(stage):
    """Derive a stage seed from the master seed, deterministically."""
    h = hashlib.sha256(f"{config['seed']}:{stage}".encode()).hexdigest()
    return int(h[:8], 16)


SIMULATED = config["source"] == "simulate"
# simulate.kind counting: a point-marking project without galaxies
# (clumpscout.simulation.counting). Its galaxies.csv is no catalogue (no R90, no PSF FWHM):
# every subject gets the box side export.box_side, and there are no galaxies to render.
COUNTING = SIMULATED and section("simulate").get("kind", "galaxy") == "counting"
HAS_EXPERTS = SIMULATED or bool(section("export").get("expert_classifications"))
NS = list(section("subsample").get("n", [20]))
IMAGES = SIMULATED and not COUNTING and bool(section("images").get("enabled", False))
if COUNTING and section("images").get("enabled", False):
    logger.warning(
        "simulate.kind: counting has no galaxy images: images.enabled ignored"
    )

# Both consensus models run for every n (aggregate.model only sets the CLI / API default):
# generative (the well-posed model) and paper (the paper's likelihood, the reproduction).
MODELS = ["generative", "paper"]
MODEL_RE = "|".join(MODELS)
# the model behind the paper's figures, the photometry and the count comparison (appendix)
PAPER_MODEL = "paper"


def aggregate_params(wildcards):
    """The validated `aggregate:` section with `model` set from the wildcard."""
    return {**section("aggregate"), "model": wildcards.model}


def agg_path(model, n, name):
    """An aggregation output: results/aggregate/{model}/n{n}/{name}."""
    return f"{RESULTS}/aggregate/{model}/n{n}/{name}"


def check_export_paths():
    """With source: export, every configured export file must exist now: a misspelled path
    would otherwise let outputs of an earlier run flow on unnoticed."""
    if SIMULATED:
        return
    exp = section("export")
    for key in ("classifications", "subjects"):
        if not exp.get(key):
            raise WorkflowError(f"config export.{key} must be set when source: export")
    for key in ("classifications", "subjects", "catalogue", "expert_classifications"):
        path = exp.get(key)
        if (
            path
            and not str(path).startswith(f"{RESULTS}/")
            and not Path(path).is_file()
        ):
            raise WorkflowError(
                f"config export.{key}: {path} is not a file "
                f"(a relative path is read from {Path.cwd()})"
            )


check_export_paths()


def universe(name):
    return f"{RESULTS}/universe/{name}"


def input_classifications():
    if SIMULATED:
        return universe("classifications.csv")
    return section("export")["classifications"]


def input_subjects_export():
    if SIMULATED:
        return universe("subjects_export.csv")
    return section("export")["subjects"]


def input_catalogue():
    """The galaxy catalogue; none (box side = export.box_side) for a counting universe."""
    if COUNTING:
        return []
    if SIMULATED:
        return universe("galaxies.csv")
    return section("export").get("catalogue") or []


def input_expert_classifications():
    if SIMULATED:
        return universe("expert_classifications.csv")
    return section("export").get("expert_classifications") or []


def all_targets():
    targets = [
        f"{RESULTS}/boxes/boxes.parquet",
        f"{RESULTS}/clicks/expert_clicks.parquet" if HAS_EXPERTS else [],
    ]
    targets += extra_targets
    return [t for t in targets if t]


# later rule files append their final outputs here
extra_targets = []
