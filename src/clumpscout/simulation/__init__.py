"""Simulated universes: the ground truth the models are judged on (docs/calibration.md).

==============  ==============================================================
``universe``    a simulated Clump Scout universe (§2-3 statistics): the model's
                documentation, :func:`simulate_universe` (either kind) and the CLI
``config``      the ``simulate:`` knobs, their defaults and validation, random streams
``sky``         galaxies, true clumps and distractors (faint features, stars, bulges)
``volunteers``  the cohort, skills, spammers, experts and the subject queue
``clicks``      every click: marks of real objects, spurious and double clicks, T0
``counting``    a simulated point-marking project without galaxies
``export``      a simulated universe written as a Zooniverse export (either kind)
``truth``       the truth files: real objects, volunteers' skills, every click
==============  ==============================================================
"""
