"""clumpscout: aggregate citizen-science clicks into a catalogue of objects with calibrated
false-positive probabilities (Galaxy Zoo: Clump Scout, Dickinson et al.).

Decisions where the paper is silent or ambiguous: ``docs/decisions.md``; where each equation
of the two consensus models lives: ``docs/model.md``.

Subpackages, in pipeline order (each lists its modules; the layers they form, lowest first,
and the rules between them: ``docs/architecture.md``):

==============  ====================================================================
``simulation``  simulated universes written as Zooniverse exports (the ground truth)
``data``        export -> clicks -> subjects -> boxes -> subsamples; the click ledger
``images``      SDSS frames -> colour subject images, photometry (§2.2)
``metrics``     matching, containment and reliability of labels (below the model)
``model``       the two consensus models (§4-5), calibration, run health, retirement
``evaluation``  expert / truth comparison (§6.3), baselines, the retirement replay
``figures``     the paper's figures
``report``      headline numbers, the HTML report, the project report
==============  ====================================================================

Top level: ``cli`` (the ``clumpscout`` command), ``config`` (the settings' schema), ``io``
(atomic, umask-respecting writes), ``errors`` (the input-error type), ``logs`` (logging and
progress bars), ``catalogue`` and ``counts`` (the catalogue a project takes away),
``numba_cache`` and ``codedeps`` (for the workflow), ``arrays`` and ``ecsv`` (helpers).
"""

__version__ = "0.1.0"
