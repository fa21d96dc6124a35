# Helpers of workflow/rules/project.smk (the project report's sections and the catalogue).

from clumpscout.report import project as PROJECT_SECTIONS

# the default model and the largest n: what the project report and the catalogue show
DEFAULT_MODEL = PROJECT_SECTIONS.DEFAULT_MODEL
PROJ_N = max(NS)
PROJ = f"{RESULTS}/project_report"


def replay_table():
    """A replay.csv made by a rule of this workflow (clumpscout replay), or None."""
    for r in workflow.rules:
        if r.has_wildcards():
            continue
        for f in r.output:
            if str(f).startswith(f"{RESULTS}/") and str(f).endswith("replay.csv"):
                return str(f)
    return None


def project_inputs(name):
    """The input files of report section `name` (clumpscout.report.project.SECTIONS)."""
    gen = lambda f, n=PROJ_N: agg_path(DEFAULT_MODEL, n, f)
    if name == "other_methods":
        return {
            "subjects": gen("subjects.parquet", BASELINE_N),
            "labels": gen("labels.parquet", BASELINE_N),
            "paper_labels": agg_path("paper", BASELINE_N, "labels.parquet"),
            **{
                m: f"{RESULTS}/baseline/{m}_labels.parquet"
                for m in ("single_linkage", "dbscan", "meanshift")
            },
        }
    files = {
        "subjects": gen("subjects.parquet"),
        "labels": gen("labels.parquet"),
        "assignments": gen("assignments.parquet"),
        "volunteers": gen("volunteers.parquet"),
        "clicks_report": f"{RESULTS}/clicks/clicks_report.json",
        "replay": replay_table(),
        "report": gen("report.json"),
    }
    wanted = PROJECT_SECTIONS.BY_NAME[name].inputs
    out = {k: files[k] for k in wanted}
    if name == "example_images" and input_subjects_export():
        out["subjects_export"] = input_subjects_export()
    return out


def project_params(name):
    """The settings a section uses (config sections figures and export, and `gold`)."""
    fig = section("figures")
    return {
        "dpi": fig["dpi"],
        "object_name": fig["object_name"],
        "gold": GOLD_FILE is not None,
        "n": PROJ_N,
        "n_base": BASELINE_N,
        **(
            {
                "n_examples": fig["n_examples"],
                "subject_images": config["export"]["subject_images"],
            }
            if name == "example_images"
            else {}
        ),
    }


def project_about():
    """What the project report's title and introduction say about the run (config only;
    the data's numbers are read by the report script)."""
    exp, ext, fig = section("export"), section("extract"), section("figures")
    name = fig["project_name"] or Path(RESULTS).name.replace("_", " ").title()
    return {
        "project_name": name,
        "object_name": fig["object_name"],
        "source": config["source"],
        "workflow_id": exp["workflow_id"],
        "workflow_version": exp["workflow_version"],
        "task": ext["clump_task"],
        "tools": ext["tools"],
        "model": DEFAULT_MODEL,
        "n": PROJ_N,
        "gold": GOLD_FILE is not None,
        "subject_images": exp["subject_images"],
    }
