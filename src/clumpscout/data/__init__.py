"""Reading volunteers' work: Zooniverse exports to clicks, subjects, boxes and subsamples.

==============  =========================================================
``zooniverse``  classification export -> tidy clicks table (§3.2)
``subjects``    cutout side and PSF FWHM per subject (§2.2, §3.3)
``boxes``       clicks and drawn shapes -> boxes of side 2 FWHM (§3.3)
``subsample``   the Z~_n subsamples of n classifications per subject (§6.1)
``ledger``      every input click accounted for, counted independently
==============  =========================================================
"""
