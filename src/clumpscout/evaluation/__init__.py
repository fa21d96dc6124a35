"""Judging labels: against experts and simulated truth, baselines, headline numbers.

=============  ==============================================================
``compare``    purity, completeness and calibration against points (§6.3)
``baseline``   MeanShift (appendix), single-linkage and DBSCAN baselines
``regimes``    scoring helpers of the regime-grid benchmark
``headline``   the paper's numbers beside ours, and §6's trends
=============  ==============================================================
"""
