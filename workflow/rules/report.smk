# The report inside the DAG (decisions.md#report-in-dag): every output a rule marks with
# report(...) (figures, montages, the headline table), with its caption and category, in one
# self-contained HTML file. Included last: it reads the rules defined before it.


REPORT_ITEMS = report_items()


rule report:
    input:
        outputs=[it["path"] for it in REPORT_ITEMS],
        captions=sorted({it["caption"] for it in REPORT_ITEMS if it["caption"]}),
        intro=ROOT / "workflow" / "report" / "workflow.rst",
    output:
        REPORT,
    log:
        f"{RESULTS}/logs/report.log",
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
