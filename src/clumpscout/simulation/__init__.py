"""Simulated universes: the ground truth the models are judged on (docs/calibration.md).

=============  ==============================================================
``universe``   a simulated Clump Scout universe (§2-3 statistics)
``counting``   a simulated point-marking project without galaxies
``export``     a simulated universe written as a Zooniverse export
=============  ==============================================================
"""
