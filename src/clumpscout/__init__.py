"""clumpscout: aggregate Galaxy Zoo: Clump Scout volunteer clicks into a clump catalogue.

Implements Dickinson et al., *Galaxy Zoo: Clump Scout* (the paper is in
``../shared/paper``; its ambiguities are settled in ``../shared/SPEC.md``).

One module per paper section:

========================  ==================================================
module                    paper
========================  ==================================================
``simulate``              a simulated Clump Scout universe (§2–3 statistics)
``zooniverse``            Zooniverse classification export reader (§3.2)
``subjects``              cutout side and PSF FWHM per subject (§2.2, §3.3)
``boxes``                 clicks to square boxes of side 2·FWHM (§3.3)
``distance``              Jaccard distance (§3.4)
``facility_location``     greedy facility location with dummy facility (§5.3)
``skills``                volunteer skills and subject difficulty (§5.4–5.5, App. A)
``risk``                  per-clump p_fp, p_sigma, subject risk (§5.7)
``retirement``            working batch and retirement (§5.1, §5.8)
``aggregate``             the EM driver and the ``aggregate`` command (§5)
``subsample``             the Z̃_n subsamples (§6.1)
``compare``               expert / truth comparison (§6.3)
``baseline``              scikit-learn MeanShift baseline (appendix)
``cutouts``               SDSS frames to colour subject images (§2.2)
``figures``               the paper's figures
========================  ==================================================
"""

__version__ = "0.1.0"
