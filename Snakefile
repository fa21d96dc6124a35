# clumpscout: Galaxy Zoo: Clump Scout aggregation, one reproducible DAG.
# Run:  snakemake --cores 2         Report:  snakemake --report results/report.html


configfile: f"{workflow.basedir}/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/ledger.smk"


rule all:
    default_target: True
    input:
        all_targets(),
