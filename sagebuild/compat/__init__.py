"""``sagebuild compat``: a real ``sageattention`` distribution that runs sagebuild's kernels.

Projects that "enable SageAttention" import ``sageattention`` and gate on its distribution's version
(diffusers: ``>= 2.1.1``). ``install`` writes the package (re-exporting upstream 2.2.0's six names
from ``sagebuild.attention.functions``) and a ``.dist-info`` whose RECORD pip uninstalls cleanly.
Modules: ``contents`` (the files and RECORD), ``target`` (what an interpreter would import, read by
running it), ``installer`` (install / remove / restore, atomic, upstream backed up first). No torch.
"""
