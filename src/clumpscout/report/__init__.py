"""What a run hands to its readers, above the figures and the evaluation it puts together.

=================  ==========================================================
``headline``       the headline numbers table: ours beside the paper's, §6's trends
``html``           the run's report as one self-contained HTML file
``figure_labels``  each figure's key numbers next to the paper's (report columns)
``project``        the project report's sections (a project that is not Clump Scout)
=================  ==========================================================
"""
