# Data side: simulate (or the user's export) -> subjects -> clicks -> boxes.


rule simulate:
    output:
        classifications=universe(SIM_CLASSIFICATIONS),
        subjects_export=universe("subjects_export.csv"),
        galaxies=universe("galaxies.csv"),
        truth=universe("truth_clumps.csv"),
        experts=universe("expert_classifications.csv"),
        volunteers=universe("volunteers_truth.csv"),
        distractors=universe("truth_distractors.csv"),
        truth_clicks=(
            universe("truth_clicks.parquet")
            if config["simulate"]["write_click_truth"]
            else []
        ),
        report=universe("simulate_report.json"),
    log:
        f"{RESULTS}/logs/simulate.log",
    benchmark:
        f"{RESULTS}/benchmarks/simulate.tsv"
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        simulate=config["simulate"],
        seed=seed_for("simulate"),
        code=code_digest("simulate"),
    script:
        "../../scripts/simulate.py"


rule subjects:
    input:
        catalogue=input_catalogue(),
        subjects_export=input_subjects_export(),
        psfield=config["subjects"]["psfield"] or [],
        clicks=config["export"]["clicks"] if FLAT else [],
    output:
        f"{RESULTS}/subjects/subjects.parquet",
        report=f"{RESULTS}/subjects/subjects_report.json",
    log:
        f"{RESULTS}/logs/subjects.log",
    benchmark:
        f"{RESULTS}/benchmarks/subjects.tsv"
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        subjects=config["subjects"],
        box_side=config["export"]["box_side"],
        code=code_digest("subjects"),
    script:
        "../../scripts/subjects.py"


rule extract:
    input:
        classifications=input_classifications(),
        subjects_export=input_subjects_export(),
    output:
        clicks=f"{RESULTS}/clicks/clicks.parquet",
        report=f"{RESULTS}/clicks/clicks_report.json",
    log:
        f"{RESULTS}/logs/extract.log",
    benchmark:
        f"{RESULTS}/benchmarks/extract.tsv"
    conda:
        "../../envs/data.yaml"
    # the annotations are parsed by up to this many processes (capped at --cores): extract
    # is on the path every aggregation waits for (docs/decisions.md#numba-warm-up)
    threads: 8
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        extract=config["extract"],
        workflow_id=config["export"]["workflow_id"],
        workflow_version=config["export"]["workflow_version"],
        flat_clicks=FLAT,
        code=code_digest("extract"),
    script:
        "../../scripts/extract.py"


rule extract_experts:
    input:
        classifications=input_expert_classifications(),
        subjects_export=input_subjects_export(),
    output:
        clicks=f"{RESULTS}/clicks/expert_clicks.parquet",
        report=f"{RESULTS}/clicks/expert_clicks_report.json",
    log:
        f"{RESULTS}/logs/extract_experts.log",
    benchmark:
        f"{RESULTS}/benchmarks/extract_experts.tsv"
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        extract=config["extract"],
        workflow_id=config["export"]["workflow_id"],
        workflow_version=config["export"]["workflow_version"],
        code=code_digest("extract"),
    script:
        "../../scripts/extract.py"


rule boxes:
    input:
        clicks=f"{RESULTS}/clicks/clicks.parquet",
        subjects=f"{RESULTS}/subjects/subjects.parquet",
    output:
        f"{RESULTS}/boxes/boxes.parquet",
        report=f"{RESULTS}/boxes/boxes_report.json",
    log:
        f"{RESULTS}/logs/boxes.log",
    benchmark:
        f"{RESULTS}/benchmarks/boxes.tsv"
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        shape_extent=config["export"]["shape_extent"],
        image_size=config["export"]["image_size"],
        code=code_digest("boxes"),
    script:
        "../../scripts/boxes.py"
