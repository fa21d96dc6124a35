# clumpscout: Galaxy Zoo: Clump Scout aggregation, one reproducible DAG.
# Run:  snakemake --cores 2   (the last rule writes {results_dir}/report.html)
# Config: config.yaml documents every setting; defaults and bounds live in
# src/clumpscout/config.schema.yaml (docs/decisions.md#one-config-source).
from snakemake.utils import min_version

min_version("9.0")


configfile: f"{workflow.basedir}/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/ledger.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/project.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),
