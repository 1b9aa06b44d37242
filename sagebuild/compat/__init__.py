"""``sagebuild compat``: a real ``sageattention`` distribution that runs sagebuild's kernels.

Projects that "enable SageAttention" import ``sageattention`` and gate on its distribution's version
(diffusers: ``>= 2.1.1``), so ``install`` writes the package (upstream 2.2.0's names re-exported from
``sagebuild.attention.functions``) and a ``.dist-info`` whose RECORD pip uninstalls cleanly. No torch.
"""
