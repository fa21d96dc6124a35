# The report inside the DAG (decisions.md#report-in-dag), one self-contained HTML file.
# Clump Scout data: the paper's reproduction, every output a rule marks with report(...)
# (figures, montages, the headline table) with its caption and category. Any other project
# (figures.project; decisions.md#project-report): the project report, the sections of
# project.smk with their figures, tables and captions, and an introduction written from the
# config and the data. Included last: it reads the rules defined before it.


REPORT_ITEMS = report_items()

if not PROJECT:

    rule report:
        input:
            unpack(
                lambda wc: (
                    {"gold_agreement": rules.gold_agreement.output.json}
                    if GOLD_FILE is not None
                    else {}
                )
            ),
            outputs=[it["path"] for it in REPORT_ITEMS],
            captions=sorted({it["caption"] for it in REPORT_ITEMS if it["caption"]}),
            intro=ROOT / "workflow" / "report" / "workflow.rst",
        output:
            REPORT,
        log:
            f"{RESULTS}/logs/report.log",
        benchmark:
            f"{RESULTS}/benchmarks/report.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            entries=REPORT_ITEMS,
            title="clumpscout: Galaxy Zoo: Clump Scout aggregation",
            code=code_digest("report"),
        script:
            "../../scripts/report.py"

else:

    rule report:
        input:
            sections=[
                f"{PROJ}/{s}.{ext}"
                for s in PROJECT_NAMES
                for ext in ("png", "csv", "json")
            ],
            clicks=f"{RESULTS}/clicks/clicks.parquet",
            clicks_report=f"{RESULTS}/clicks/clicks_report.json",
            catalogue=rules.catalogue.output,
        output:
            REPORT,
        log:
            f"{RESULTS}/logs/report.log",
        benchmark:
            f"{RESULTS}/benchmarks/report.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            project=True,
            stems=[f"{PROJ}/{s}" for s in PROJECT_NAMES],
            about=project_about(),
            code=code_digest("report"),
        script:
            "../../scripts/report.py"
