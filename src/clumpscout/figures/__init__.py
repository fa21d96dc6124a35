"""The paper's figures (§6 and the appendix).

==========  ================================================================
``paper``   one plotting function per figure of §6 and the appendix
``flux``    the clump-flux figures (§6.3, §6.5) and subject-image montages
==========  ================================================================
"""
