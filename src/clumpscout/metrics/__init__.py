"""Measures of labels against reference objects, below the models that use them.

===============  ============================================================
``matching``     one-to-one matching of labels with expert objects (the gold standard)
``containment``  which boxes contain which points; purity and completeness over p_fp
``reliability``  p_fp in bins against the fraction false, and the calibration error
===============  ============================================================
"""
