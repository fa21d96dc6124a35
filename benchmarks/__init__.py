"""The benchmarks: scripts that measure the package and write their tables into
docs/benchmarks.md, and the helpers only they use. Not part of the installed package.

Each script runs as ``.venv/bin/python benchmarks/<script>.py ...`` (it puts this checkout's
``src/`` and the repository root on ``sys.path``); tests import them as a package
(``from benchmarks import regimes``; pytest puts the repository root on the path).
Helpers of the scripts: ``_measure`` (CPU time, peak memory, the critical path),
``_replicate`` (independent copies of a project), ``docs_table`` (sections of
docs/benchmarks.md), ``truth_scores`` (labels against a simulated truth: the regime grid's
scores), ``expert_scores`` (labels against held-out gold subjects), ``crowd_boxes`` (the
Lean Crowdsourcing box format of the pedestrian data).
"""
