# The project report (docs/decisions.md#project-report): for data that are not Clump Scout's
# (figures.project, auto: a Zooniverse export, a flattened clicks table, a counting universe),
# one rule per section of clumpscout.report.project, each a figure, a table and a caption
# written from the config and the data, all from the default model's output at the largest
# n (the comparison section alone adds the paper's model and the baselines); and, for every
# project, the catalogue a user takes away (catalogue.csv / .ecsv, images.csv).
# Included after every other rule file: the optional replay section looks for a replay.csv
# made by a rule defined before it.


include: "project_common.smk"


PROJECT_NAMES = [
    s.name
    for s in PROJECT_SECTIONS.SECTIONS
    if PROJECT
    and (s.name != "retirement" or replay_table())
    and (s.name != "gold_agreement" or GOLD_FILE is not None)
]

for _sec in PROJECT_NAMES:

    rule:
        name:
            f"project_{_sec}"
        input:
            **project_inputs(_sec),
        output:
            png=f"{PROJ}/{_sec}.png",
            pdf=f"{PROJ}/{_sec}.pdf",
            csv=f"{PROJ}/{_sec}.csv",
            json=f"{PROJ}/{_sec}.json",
        log:
            f"{RESULTS}/logs/project/{_sec}.log",
        benchmark:
            f"{RESULTS}/benchmarks/project_{_sec}.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=3000,
            runtime=10,
        params:
            section=_sec,
            settings=project_params(_sec),
            code=code_digest("project"),
        script:
            "../../scripts/project.py"


rule catalogue:
    input:
        labels=agg_path(DEFAULT_MODEL, PROJ_N, "labels.parquet"),
        subjects=agg_path(DEFAULT_MODEL, PROJ_N, "subjects.parquet"),
    output:
        csv=f"{RESULTS}/catalogue.csv",
        ecsv=f"{RESULTS}/catalogue.ecsv",
        images=f"{RESULTS}/images.csv",
    log:
        f"{RESULTS}/logs/catalogue.log",
    benchmark:
        f"{RESULTS}/benchmarks/catalogue.tsv"
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    params:
        model=DEFAULT_MODEL,
        n=PROJ_N,
        code=code_digest("catalogue"),
    script:
        "../../scripts/catalogue.py"
