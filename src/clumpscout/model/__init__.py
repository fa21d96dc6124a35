"""The consensus models (paper §3.4-5 and Appendix A; equation index: docs/model.md).

=====================  ===========================================================
``command``            ``clumpscout aggregate``: the command line
``params``             the hyper-parameters ``Params`` and ``load_config``
``aggregator``         the estimators ``GenerativeAggregator``, ``PaperAggregator``: cycles,
                       retirement, output tables (§5)
``source``             the boxes table as blocks of rows (a DataFrame or a Parquet file)
``prepare``            the boxes table validated and indexed in canonical order
``em``                 the EM over working batches; the engine interface ``Engine`` and the
                       models' engines ``PaperEngine``, ``GenerativeEngine`` (§5.1-5.7)
``generative``         the generative (default) model: likelihood, E and M steps
``distance``           Jaccard distance and the paper's distance likelihood (§3.4, §4.4)
``facility_location``  greedy facility location with a dummy facility (§5.3, §5.7)
``facility_kernels``   its numba kernels (the greedy search)
``skills``             the paper's volunteer skills and subject difficulty (§5.4-5.5)
``risk``               the paper's per-clump p_fp, p_sigma and subject risk (§5.7)
``retirement``         working batch and retirement (§5.1, §5.8)
``health``             run-health diagnostics (collapse warnings)
``calibration``        p_fp calibrated on the project's gold standard (cross-fitted)
``live``               retire one subject now or not, with the skills of the moment
``gold_check``         the gold standard checked against the volunteers before it is used
=====================  ===========================================================
"""
