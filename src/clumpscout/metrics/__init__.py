"""Measures of labels against reference objects, below the models that use them.

=============  ==============================================================
``matching``   one-to-one matching of labels with expert objects (the gold standard)
=============  ==============================================================
"""
