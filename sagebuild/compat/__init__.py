"""``sagebuild compat``: a real ``sageattention`` distribution that runs sagebuild's kernels.

Projects that "enable SageAttention" do ``from sageattention import ...`` and gate on the installed
distribution's version (diffusers: ``sageattention >= 2.1.1``). ``install`` writes a small
distribution into an interpreter's site-packages: the package ``sageattention`` re-exporting
``sagebuild.attention.functions`` (upstream 2.2.0's six names), and a ``.dist-info`` with a
RECORD of sha256 hashes, so ``pip uninstall sageattention`` removes it as cleanly as ``remove``.

Modules: ``contents`` (the files and RECORD), ``target`` (what an interpreter would import, read by
running it), ``installer`` (install / remove / restore, atomic, upstream backed up first).
Nothing here imports torch.
"""
