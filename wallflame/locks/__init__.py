"""The lock model every stage shares: what the lock attribution leaves in a profile
(``lockshare``) and where each observed lock was released (``releasesites``).

Here, beneath the stages, so that the folder that makes the attribution and the reports that
draw it meet only in the model.
"""
