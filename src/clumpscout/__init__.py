"""clumpscout: aggregate citizen-science clicks into a catalogue of objects with calibrated
false-positive probabilities (Galaxy Zoo: Clump Scout, Dickinson et al.).

Decisions where the paper is silent or ambiguous: ``docs/decisions.md``; where each equation
of the two consensus models lives: ``docs/model.md``.

========================  ==================================================
module                    what (paper section)
========================  ==================================================
``simulate``              a simulated Clump Scout universe (§2–3 statistics)
``simulate_counting``     a simulated point-marking project without galaxies
``simulate_export``       the simulated universe written as a Zooniverse export
``zooniverse``            Zooniverse classification export reader (§3.2)
``subjects``              cutout side and PSF FWHM per subject (§2.2, §3.3)
``boxes``                 clicks and drawn shapes to boxes (§3.3)
``distance``              Jaccard distance (§3.4)
``aggregate``             both consensus models: the EM driver and ``aggregate`` (§4–5)
``generative``            the generative (default) model's likelihood and M step
``facility_location``     greedy facility location with dummy facility (§5.3)
``skills``                the paper's volunteer skills and subject difficulty (§5.4–5.5)
``risk``                  the paper's per-clump p_fp, p_sigma, subject risk (§5.7)
``retirement``            working batch and retirement (§5.1, §5.8)
``health``                run-health diagnostics (collapse warnings)
``subsample``             the Z̃_n subsamples (§6.1)
``compare``               expert / truth comparison (§6.3)
``evaluation``            scoring helpers of the regime benchmark
``baseline``              MeanShift (appendix), single-linkage and DBSCAN baselines
``ledger``                every input click accounted for
``headline``              the paper's numbers beside ours, and §6's trends
``cutouts``, ``render``   SDSS frames to colour subject images (§2.2)
``photometry``            clump photometry (§6.3)
``figures``               the paper's figures (``figures_flux``: the flux figures)
========================  ==================================================
"""

__version__ = "0.1.0"
