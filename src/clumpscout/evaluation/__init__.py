"""Judging labels: against experts and simulated truth, baselines, the retirement replay.

=============  ==============================================================
``compare``    purity, completeness and calibration against points (§6.3)
``baseline``   MeanShift (appendix), single-linkage and DBSCAN baselines
``replay``     early retirement replayed on the classifications in arrival order
=============  ==============================================================
"""
