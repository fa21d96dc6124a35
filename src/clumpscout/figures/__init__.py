"""The paper's figures (§6 and the appendix).

==============  ==============================================================
``registry``    the one list of figures: inputs, settings, report category,
                caption, the paper's numbers (pure data, read by the workflow)
``paper``       workflow files -> one figure (:func:`~.paper.build`), the CLI
``common``      drawing helpers, settings, reading the workflow's tables
``clumps``      §6.2 aggregated clump properties
``experts``     §6.3 comparison with the experts
``volunteers``  §6.4 volunteer skills
``risk``        §6.5 subject risk and retirement
``examples``    §6 example subjects (fig. agg_examples)
``meanshift``   appendix: the MeanShift comparison
``truth``       not in the paper: calibration, both models and the baselines
``gold``        not in the paper: the default model against the gold standard
``flux``        the clump-flux figures (§6.3, §6.5) and subject-image montages
==============  ==============================================================
"""
